"""The queue cap's derivative: a central difference of paired relaxed runs.

An arrival the queue cap rejects leaves the run for good: no relaxed gate carries the part of it
that would have been accepted, so a tangent through the relaxed run (servetune/pathwise.py) is 0
for the cap almost everywhere. Flipping single arrival decisions (the smoothed perturbation
analysis way) was tried and dropped: on an overloaded engine each flip's effect is chaotic in
sign and flips are not additive (accepting one request gets a later one rejected), so the
estimates were 8 to 1600 times the slope, some of the wrong sign (benchmarks/README.md).

What is used instead is the difference that a serving engineer would measure: the smoothed
objective at the integer caps either side of the point, on the same workloads (common random
numbers), lo = max(floor(c) - s, min(floor(c), 1)) and hi = floor(c) + s, with the step
s = max(1, floor(step x c)) relative to the cap c; the slope (L(hi) - L(lo)) / (hi - lo) per
unit of cap, times dc/dz, is the coordinate's entry of the Jacobian. It costs two relaxed runs
per workload, and it is the derivative of the objective the other keys' gradients follow.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from servetune import pathwise
from servetune.types import EngineConfig, Params, Workload

KEY = "queue_cap"


def bracket(cap: float, step: float) -> tuple[int, int]:
    """The integer caps (lo, hi), lo < hi, whose difference estimates the slope at the cap
    `cap` (requests): `step` (relative, > 0) of the cap either side, at least 1 request, lo
    not below 1 unless the cap is below 1."""
    c = math.floor(cap)
    s = max(1, math.floor(step * cap))
    return max(c - s, min(c, 1)), c + s


@functools.partial(jax.jit, static_argnames=("cfg", "tg", "point_map"))
def _paired(caps, z, wl, weights, counted, lam, base, cfg, tg, point_map):
    """(f, attainment, Lagrangian) [S, 2, 3] on each scenario (wl leaves [S, N]) at the point
    z [d] with the queue cap set to each of caps [2] (integers, as floats)."""
    def one(cap, wl, weights, counted):
        params = point_map(z, base)
        params = params.replace(policy=params.policy.replace(queue_cap=cap + 0.5))
        return pathwise.objective_parts(pathwise.request_times(wl, params, cfg), wl, weights,
                                        counted, tg, lam)

    at_caps = jax.vmap(one, in_axes=(0, None, None, None))
    return jax.vmap(at_caps, in_axes=(None, 0, 0, 0))(caps, wl, weights, counted)


def jacobian(z, wl: Workload, weights, counted, lam, base: Params, cfg: EngineConfig,
             tg: pathwise.SoftTargets, point_map: pathwise.PointMap, step: float):
    """(Jacobian [S, 3, d] of (f, attainment, Lagrangian) on each scenario (wl leaves [S, N])
    along the queue cap's coordinate of z [d] (0 in the others), the number of relaxed runs
    made (0 where the cap is not tuned)): the
    paired central difference of the module doc, times d(queue cap)/dz. Arguments as
    pathwise.per_scenario's; `step`: the relative half-width of the difference."""
    z = jnp.asarray(z, jnp.float64)
    n_scen, d = wl.arrival.shape[0], z.shape[0]
    out = np.zeros((n_scen, 3, d))
    if not any(dim.key == KEY for dim in point_map.dims):
        return out, 0
    cap_of = lambda z: point_map.values(z)[KEY]
    cap, dcap_dz = float(cap_of(z)), np.asarray(jax.grad(cap_of)(z))
    lo, hi = bracket(cap, step)
    values = np.asarray(_paired(jnp.array([lo, hi], jnp.float64), z, wl, jnp.asarray(weights),
                                jnp.asarray(counted), jnp.asarray(lam, jnp.float64), base,
                                cfg, tg, point_map))
    slope = (values[:, 1] - values[:, 0]) / (hi - lo)  # [S, 3] per request of cap
    return slope[:, :, None] * dcap_dz[None, None, :], 2 * n_scen
