"""servetune/core/ops.py: the hot loop's array primitives against their plain numpy meaning, at the
sizes where their fast paths switch (the 32-lane blocks of the integer prefix sum, the window
of count_at_most), the gathers ops.take saves, and the scenario-grid vmap."""

import math
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from servetune.core import ops

RNG = np.random.default_rng(7)


@pytest.mark.parametrize("n", [1, 5, 63, 64, 65, 96, 130])
def test_integer_prefix_sums_are_exact_on_both_sides_of_the_block_form(n):
    x = RNG.integers(-5_000, 5_000, size=(3, n)).astype(np.int32)
    got = ops.cumsum(jnp.asarray(x))
    assert got.dtype == jnp.int64 and np.array_equal(got, np.cumsum(x, axis=-1))
    assert np.array_equal(ops.exclusive_cumsum(jnp.asarray(x)), np.cumsum(x, axis=-1) - x)


def test_large_token_counts_stay_exact_below_2_to_the_53():
    x = np.full(200, 2**31 // 256, np.int64)  # partial sums far beyond float32's 24 bits
    assert np.array_equal(ops.cumsum(jnp.asarray(x)), np.cumsum(x))


@pytest.mark.parametrize("n", [10, 300])  # the associative scan and the block form
def test_int32_token_counts_sum_past_int32_without_wrapping(n):
    # prompts of 10^7 tokens (the trace loader's largest): 215 of them pass 2**31
    x = np.full(n, 10**7, np.int32)
    x[-1] = 2**31 - 1
    got = ops.cumsum(jnp.asarray(x))
    assert got.dtype == jnp.int64 and np.array_equal(got, np.cumsum(x.astype(np.int64)))
    assert got[-1] > 2**31 and (ops.exclusive_cumsum(jnp.asarray(x)) >= 0).all()


@pytest.mark.parametrize("n", [32 * ops.MAX_TRIANGLE, 32 * ops.MAX_TRIANGLE + 1, 1 << 20])
def test_integer_prefix_sums_past_the_largest_triangle_recurse_exactly(n):
    # 2**20 entries (engine.queue_window's maximum): the blocks' offsets once needed a
    # [32768, 32768] float64 triangle, 8 GiB captured as a constant
    x = RNG.integers(0, 2**31 - 1, size=n).astype(np.int32)
    got = jax.jit(ops.cumsum)(jnp.asarray(x))
    assert np.array_equal(got, np.cumsum(x.astype(np.int64)))
    assert _largest_array(jax.jit(ops.cumsum), x) <= max(n + 32, ops.MAX_TRIANGLE**2)


@pytest.mark.parametrize("n", [ops.MAX_TRIANGLE, ops.MAX_TRIANGLE + 1, 1 << 16])
def test_float_prefix_sums_match_numpy_on_both_sides_of_the_triangle(n):
    x = RNG.random((3, n))
    got = jax.jit(ops.float_cumsum)(jnp.asarray(x))
    np.testing.assert_allclose(got, np.cumsum(x, axis=-1), rtol=1e-12)
    largest = _largest_array(jax.jit(ops.float_cumsum), x)
    assert largest == (n * n if n <= ops.MAX_TRIANGLE else 3 * n)


def _largest_array(fn, x) -> int:
    """Elements of the largest array in fn's lowered program at x (constants included)."""
    text = fn.lower(jnp.asarray(x)).as_text()
    shapes = re.findall(r"tensor<((?:\d+x)+)[a-z]", text)
    return max(math.prod(int(d) for d in shape.rstrip("x").split("x")) for shape in shapes)


def test_booleans_count_as_int32_and_floats_keep_their_dtype():
    mask = RNG.random(100) < 0.3
    got = ops.cumsum(jnp.asarray(mask))
    assert got.dtype == jnp.int32 and np.array_equal(got, np.cumsum(mask))
    x = RNG.random(100)
    np.testing.assert_allclose(ops.cumsum(jnp.asarray(x)), np.cumsum(x), rtol=1e-13)
    assert ops.cumsum(jnp.asarray(mask), dtype=jnp.float64).dtype == jnp.float64


@pytest.mark.parametrize("window", [None, 8])
def test_count_at_most_is_searchsorted_right_for_any_lower_bound(window):
    sorted_x = jnp.asarray(np.sort(RNG.integers(0, 40, size=100)).astype(np.float64))
    count = jax.jit(lambda t, lo: ops.count_at_most(sorted_x, t, lo, window))
    for t in [-1.0, 0.0, 3.5, 17.0, 39.0, 40.0]:
        expect = int(np.searchsorted(np.asarray(sorted_x), t, side="right"))
        for lo in sorted({0, expect // 2, expect}):  # any lower bound the caller knows
            assert int(count(t, lo)) == expect, (t, lo)


def test_take_indexes_every_leaf_with_one_gather_per_dtype_and_shape():
    tree = {
        "a": jnp.arange(5, dtype=jnp.int32),
        "b": jnp.arange(5, dtype=jnp.int32) * 10,
        "c": jnp.linspace(0.0, 1.0, 5),
        "d": jnp.arange(10, dtype=jnp.int32).reshape(5, 2),
        "e": jnp.asarray([True, False, True, False, True]),
    }
    order = jnp.asarray([4, 0, 3, 1, 2])
    got = ops.take(tree, order)
    for name, leaf in tree.items():
        assert got[name].dtype == leaf.dtype
        assert np.array_equal(got[name], np.asarray(leaf)[np.asarray(order)]), name
    jaxpr = str(jax.make_jaxpr(ops.take)(tree, order))
    assert jaxpr.count("gather[") == 4  # a and b stacked; c, d and e alone


def test_over_grid_maps_workloads_and_policy_points():
    f = ops.over_grid(lambda g, s, p: g + 10 * s + 100 * p, "gsp")
    out = f(jnp.ones((2, 3)), jnp.arange(2.0), jnp.arange(3.0))  # [S=2, P=3]
    assert np.array_equal(out, 1 + 10 * np.arange(2)[:, None] + 100 * np.arange(3)[None, :])
    only = ops.over_grid(lambda s, p: s * p, "sp")(jnp.asarray([1.0, 2.0]), jnp.asarray([3.0]))
    assert only.shape == (2, 1) and only[:, 0].tolist() == [3.0, 6.0]
