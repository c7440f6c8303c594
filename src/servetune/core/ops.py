"""Small array primitives tuned for the per-iteration hot loop.

On XLA:CPU an iteration's cost is mostly the number of kernels (thunks) it launches, each a
fraction of a microsecond whatever its width: these primitives trade arithmetic for fewer of them.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

_BLOCK = 32  # integer prefix sums: lanes per block of the two-level matrix form
# the largest [n, n] triangle a prefix sum multiplies by (8 MiB of float64); longer axes sum
# their blocks' totals recursively (cumsum) or by an associative scan (float_cumsum)
MAX_TRIANGLE = 1024

# XLA options of every compiled simulator program (jax.jit(..., compiler_options=...)).
# XLA:CPU's tree-reduction rewriter splits each reduction over more than 32 elements into a
# reduce-window and a second reduce: two kernels (sometimes a dot) for every jnp.sum over an
# instance's entries. In a loop body of a few hundred kernels over arrays of at most a few
# thousand elements that costs more than it gives: without it the default engine's body has
# 255 kernels instead of 349, and runs about 7% faster, one scenario and a batch of 1,024
# alike (benchmarks/README.md). Sums then add in another order (float64 rounding in the last
# place). A pass XLA does not know (on another backend) is ignored; these options take
# precedence over XLA_FLAGS'. (Disabling "cpu-parallel-task-assigner" too speeds one scenario
# up by a further ~8% but slows a batch of 1,024 by ~13%: it would need a program per shape.)
COMPILER_OPTIONS = {"xla_disable_hlo_passes": "tree_reduction_rewriter"}


@functools.lru_cache(maxsize=8)
def _upper(n: int, strict: bool) -> np.ndarray:
    """[n, n] float64 0/1 matrix m with m[i, j] = 1 where i <= j (i < j if strict)."""
    return np.triu(np.ones((n, n)), 1 if strict else 0)


def upper_triangle(n: int) -> np.ndarray:
    """[n, n] float64 0/1 matrix with ones where row <= column: x @ it is x's inclusive prefix
    sum, in one dot kernel (float rounding of a dot's summation order)."""
    return _upper(n, False)


def float_cumsum(x):
    """Inclusive prefix sum of float64 `x` along its last axis: one dot with upper_triangle
    while that matrix is small (n <= MAX_TRIANGLE; the dot's rounding), else an associative
    scan, so that a long axis never allocates an [n, n] matrix (n = 65,536 would be 32 GiB)."""
    n = x.shape[-1]
    if n <= MAX_TRIANGLE:
        return x @ upper_triangle(n)
    return jax.lax.associative_scan(jnp.add, x, axis=x.ndim - 1)


def cumsum(x, dtype=None):
    """Inclusive prefix sum along the last axis.

    dtype: `dtype` when given; int32 for booleans (counts of at most the array's length);
    int64 for other integers, so that a running total of token or block counts (each up to
    int32's range, over up to 2**20 entries) cannot wrap around; floats keep theirs.

    Integers: a two-level product with 0/1 triangular matrices in float64 (a prefix sum within
    blocks of 32, then the blocks' running offsets): three kernels instead of the ~20 of a
    log-depth scan, and exact while the partial sums stay below 2**53 in magnitude (2**20
    entries of 2**31 each stay below 2**51). Past MAX_TRIANGLE blocks the offsets are this
    prefix sum of the blocks' totals, so no triangle exceeds MAX_TRIANGLE rows. Floats (and
    short arrays): an associative scan, the same rounding as before.
    """
    x = jnp.asarray(x)
    if dtype is not None:
        x = x.astype(dtype)
    elif x.dtype == jnp.bool_:
        x = x.astype(jnp.int32)
    elif jnp.issubdtype(x.dtype, jnp.integer):
        x = x.astype(jnp.int64)
    n = x.shape[-1]
    if not jnp.issubdtype(x.dtype, jnp.integer) or n < 2 * _BLOCK:
        return jax.lax.associative_scan(jnp.add, x, axis=x.ndim - 1)
    nb = -(-n // _BLOCK)
    pad = nb * _BLOCK - n
    xf = x.astype(jnp.float64)
    if pad:
        xf = jnp.concatenate([xf, jnp.zeros(x.shape[:-1] + (pad,), jnp.float64)], axis=-1)
    within = xf.reshape(x.shape[:-1] + (nb, _BLOCK)) @ _upper(_BLOCK, False)
    if nb <= MAX_TRIANGLE:
        offsets = within[..., -1] @ _upper(nb, True)  # sum of the blocks before each block
    else:  # over 32,768 entries: the blocks' totals (exact integers) summed the same way
        totals = within[..., -1].astype(jnp.int64)
        offsets = (cumsum(totals) - totals).astype(jnp.float64)
    out = (within + offsets[..., None]).reshape(x.shape[:-1] + (nb * _BLOCK,))
    return out[..., :n].astype(x.dtype)


def over_grid(fn, kinds: str):
    """fn vmapped over the scenario grid [S workloads, P policy points]: kinds[k] says how its
    argument k varies: "g" over both (leaves [S, P, ...]), "s" over the workloads only
    ([S, ...]), "p" over the policy points only ([P, ...]). The outputs are [S, P, ...]."""
    assert set(kinds) <= set("gsp"), kinds
    inner = tuple(0 if k in "gp" else None for k in kinds)
    outer = tuple(0 if k in "gs" else None for k in kinds)
    return jax.vmap(jax.vmap(fn, in_axes=inner), in_axes=outer)


def take(tree, idx):
    """Every leaf of `tree` indexed by idx along its first axis (leaf[idx]), as one gather per
    group of leaves of the same dtype and shape (stacked, gathered, split) rather than one
    per leaf: on XLA:CPU a gather is a kernel whatever its width."""
    leaves, treedef = jax.tree.flatten(tree)
    groups: dict = {}
    for k, x in enumerate(leaves):
        groups.setdefault((x.dtype, x.shape), []).append(k)
    out = list(leaves)
    for members in groups.values():
        if len(members) == 1:
            out[members[0]] = leaves[members[0]][idx]
            continue
        stacked = jnp.stack([leaves[k] for k in members], axis=1)[idx]
        for j, k in enumerate(members):
            out[k] = stacked[:, j]
    return jax.tree.unflatten(treedef, out)


def exclusive_cumsum(x):
    """Exclusive prefix sum along the last axis: the sum of the elements before each."""
    return cumsum(x) - x


# the arrivals counted directly before count_at_most searches (one scenario; None under vmap)
SEARCH_WINDOW = 64


def count_at_most(sorted_x, t, lo, window: int | None = SEARCH_WINDOW):
    """How many entries of the ascending array `sorted_x` [N] are <= t, given that the first
    `lo` of them are (a lower bound the caller knows). Exact.

    With `window`, the `window` entries from `lo` on are counted directly (one contiguous read)
    and a binary search of the whole array runs only when they are all <= t: per-call cost
    then does not grow with N. Under vmap both run (lax.cond becomes a select), so batched
    callers pass window=None: an unrolled binary search (log2(N) fused steps).
    """
    n = sorted_x.shape[-1]

    def search():
        return jnp.searchsorted(sorted_x, t, side="right", method="scan_unrolled").astype(jnp.int32)

    if window is None or n < window:
        return search()
    start = jnp.clip(lo, 0, n - window).astype(jnp.int32)
    # entries before `start` are <= t: they come before `lo` or are <= sorted_x[lo - 1]
    near = start + jnp.sum(
        jax.lax.dynamic_slice(sorted_x, (start,), (window,)) <= t, dtype=jnp.int32
    )
    inside = (near < start + window) | (start + window >= n)
    return jax.lax.cond(inside, lambda: near, search)
