"""Derivatives by central differences of paired relaxed runs: the queue cap, the routing score's
weights and the cascade threshold (pathwise.DIFFERENCE_KEYS).

These decisions move a request out of the run, or onto another instance, for good, and no relaxed
gate carries the counterfactual: an arrival the queue cap rejects has no events left to shift; a
request the router sends to instance A has no events on instance B (or on the other model of a
cascade) whose time a tangent could move. A tangent through the relaxed run
(servetune/tuning/estimators/pathwise_gradient.py) is therefore 0 for them almost everywhere. For
the queue cap, flipping single arrival decisions (the smoothed perturbation analysis way) was tried
and dropped: on an overloaded engine each flip's effect is chaotic in sign and flips are not
additive (accepting one request gets a later one rejected), so the estimates were 8 to 1600 times
the slope, some of the wrong sign (benchmarks/README.md).

What is used instead is the difference a serving engineer would measure: the smoothed
objective at two settings of the key either side of the point, on the same workloads (common
random numbers), every other key at the point; the slope (L(hi) - L(lo)) / (hi - lo) per unit
of the key, times d(key)/dz, is the key's column of the Jacobian. The settings (`bracket`):

- queue_cap, an integer limit: the integer caps lo = max(floor(c) - s, min(floor(c), 1)) and
  hi = floor(c) + s, with the step s = max(1, floor(step x c)) relative to the cap c;
- a key tuned on a log scale: v / (1 + step) and v x (1 + step);
- a key tuned on a linear scale (the routing weights, the cascade threshold): v -/+ step x
  (high - low), the tuned range;

clipped to the tuned range. It costs two relaxed runs per key and workload, and it is the
derivative of the objective the other keys' gradients follow.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from servetune.core import ops
from servetune.core.types import EngineConfig, Params, Workload
from servetune.tuning.estimators import pathwise_gradient as pathwise

QUEUE_CAP = "queue_cap"


def cap_bracket(cap: float, step: float) -> tuple[int, int]:
    """The integer caps (lo, hi), lo < hi, whose difference estimates the slope at the cap
    `cap` (requests): `step` (relative, > 0) of the cap either side, at least 1 request, lo
    not below 1 unless the cap is below 1."""
    c = math.floor(cap)
    s = max(1, math.floor(step * cap))
    return max(c - s, min(c, 1)), c + s


def bracket(dim, value: float, step: float) -> tuple[float, float]:
    """The settings (lo, hi), lo < hi, of the tuned key `dim` (a tuning.space.Dimension) whose
    difference estimates the slope at `value` (in the key's units); see the module doc."""
    if dim.key == QUEUE_CAP:
        return cap_bracket(value, step)
    if dim.scale == "log":
        lo, hi = value / (1.0 + step), value * (1.0 + step)
    else:
        lo, hi = value - step * (dim.high - dim.low), value + step * (dim.high - dim.low)
    return max(lo, dim.low), min(hi, dim.high)


def _setting(key: str, value: float) -> float:
    """The policy value a run at `value` of `key` sets: the queue cap, an integer limit the
    engine floors, mid-way between its integer and the next."""
    return math.floor(value) + 0.5 if key == QUEUE_CAP else value


@functools.partial(
    jax.jit,
    static_argnames=("keys", "cfg", "tg", "point_map"),
    compiler_options=ops.COMPILER_OPTIONS,
)
def _paired(settings, keys, z, wl, weights, counted, lam, base, cfg, tg, point_map):
    """(f, attainment, Lagrangian) [S, R, 3] on each scenario (wl leaves [S, N]) at the point
    z [d] with the policy keys `keys` [K] set to each row of settings [R, K] (`_setting`s)."""

    def one(row, wl, weights, counted):
        params = point_map(z, base)
        params = params.replace(
            policy=params.policy.replace(**{k: row[j] for j, k in enumerate(keys)})
        )
        return pathwise.objective_parts(
            pathwise.request_times(wl, params, cfg), wl, weights, counted, tg, lam
        )

    at_settings = jax.vmap(one, in_axes=(0, None, None, None))
    return jax.vmap(at_settings, in_axes=(None, 0, 0, 0))(settings, wl, weights, counted)


def jacobian(
    z,
    wl: Workload,
    weights,
    counted,
    lam,
    base: Params,
    cfg: EngineConfig,
    tg: pathwise.SoftTargets,
    point_map: pathwise.PointMap,
    step: float,
):
    """(Jacobian [S, 3, d] of (f, attainment, Lagrangian) on each scenario (wl leaves [S, N])
    along the coordinates of z [d] that tune a DIFFERENCE_KEY (0 in the others), the number
    of relaxed runs made (0 where none is tuned)): the paired central differences of the
    module doc, times d(key)/dz. Arguments as pathwise.per_scenario's; `step`: the relative
    half-width of the differences. All the paired runs are one compiled, vmapped call."""
    z = jnp.asarray(z, jnp.float64)
    n_scen, d = wl.arrival.shape[0], z.shape[0]
    out = np.zeros((n_scen, 3, d))
    dims = [dim for dim in point_map.dims if dim.key in pathwise.DIFFERENCE_KEYS]
    if not dims:
        return out, 0
    keys = tuple(dim.key for dim in dims)
    values_of = lambda z: jnp.stack([point_map.values(z)[k] for k in keys])
    values, dvalues_dz = np.asarray(values_of(z)), np.asarray(jax.jacfwd(values_of)(z))  # [K, d]
    brackets = [bracket(dim, float(v), step) for dim, v in zip(dims, values, strict=True)]
    # [2K, K] rows (lo, hi) per key, the others at the point
    point = np.array([_setting(k, v) for k, v in zip(keys, values, strict=True)])
    settings = np.repeat(point[None, :], 2 * len(keys), axis=0)
    for j, (key, (lo, hi)) in enumerate(zip(keys, brackets, strict=True)):
        settings[2 * j, j], settings[2 * j + 1, j] = _setting(key, lo), _setting(key, hi)
    runs = np.asarray(
        _paired(
            jnp.asarray(settings),
            keys,
            z,
            wl,
            jnp.asarray(weights),
            jnp.asarray(counted),
            jnp.asarray(lam, jnp.float64),
            base,
            cfg,
            tg,
            point_map,
        )
    )  # [S, 2K, 3]
    for j, (lo, hi) in enumerate(brackets):
        slope = (runs[:, 2 * j + 1] - runs[:, 2 * j]) / (hi - lo)  # [S, 3] per unit of key
        out += slope[:, :, None] * dvalues_dz[j][None, None, :]
    return out, 2 * len(keys) * n_scen
