"""Pathwise gradients of the tuning objective through the relaxed simulator.

The engine runs with engine.relax = st or soft (servetune/core/relax.py): its discrete state follows
the exact decisions, while the iteration durations (through relaxed token weights), each request's
admission time (engine/relaxed/shift.py), its pace of progress (engine/relaxed/pace.py: prompt
tokens a bigger budget adds, tokens a longer speculation emits) and, with a relaxed order, its
admission slot (engine/relaxed/swap.py) carry the derivative of the relaxed gates. Forward-mode
differentiation (jax.jacfwd: one tangent per tuned coordinate, through the while_loop that reverse
mode cannot enter) then gives the derivative of every request's first-token and finish time, and of
the run's length, with respect to the policy.

The objective is the tuner's (tuning/objective.py), with each request's SLO check smoothed:

    q_i = prod over targets of sigmoid((target - x_i) / (slo_tau x target))    (0 if unfinished)
    f   = log(sum_i q_i x output_i x quality_ok_i) - log(USD)
    L   = f - lambda x max(0, slo_target - mean_i q_i)

over the requests the metrics count (arrived after the warm-up); USD = price x GPUs x (end of
the run - warm-up) / 3600, as in servetune.run.metrics. Under st the times are the exact
simulator's, so f differs from the reported objective only by the smoothed SLO checks.

Supported: the preempt KV policy, no prefix cache and no prefill/decode disaggregation (other
mechanisms keep exact decisions whose relaxations are not written yet); one instance or several
(replica routing, a model cascade), each instance's iterations relaxed as one instance's are, the
routing decisions exact. The leap is off (each iteration's perturbations are accumulated).
Keys with a pathwise gradient: PATHWISE_KEYS; the priority weights through order swaps at the
admission and preemption boundaries (engine/relaxed/swap.py, O(W^2) per iteration, on only when one
is tuned). DIFFERENCE_KEYS (the queue cap, the routing score's weights and the cascade threshold:
decisions that move a request out of the run or onto another instance) get no tangent here: their
derivatives are central differences of paired runs
(servetune/tuning/estimators/paired_difference.py). The neural score gets none: use tune=es for it.

With a model cascade, the useful tokens of a request depend on the model whose answer is
final (servetune.config.cascade), so each request carries two weights (`request_weights`) and
the run tells which applies (RequestTimes.final_small).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from servetune.config import cascade as cascade_lib
from servetune.config.metrics_spec import MetricsSpec
from servetune.core import ops
from servetune.core.errors import ConfigError
from servetune.core.types import (
    COMPLETED,
    DONE,
    OUTSTANDING,
    TIER_LARGE,
    TIER_SMALL,
    EngineConfig,
    Params,
    Workload,
)
from servetune.engine.loop import init_state, run_chunk
from servetune.engine.outbox import entry_value, record_fields, unset_records
from servetune.engine.relaxed import swap
from servetune.run import metrics as metrics_lib

ORDER_KEYS = ("w_age", "w_prompt", "w_pred", "w_slack")  # through the relaxed order
PATHWISE_KEYS = ("max_num_seqs", "max_num_batched_tokens", "watermark", "spec_k") + ORDER_KEYS
ROUTING_KEYS = ("route_w_queue", "route_w_kv", "route_w_work", "cascade_threshold")
# by paired differences (servetune/tuning/estimators/paired_difference.py)
DIFFERENCE_KEYS = ("queue_cap",) + ROUTING_KEYS
_FLOOR = 1e-9
_RECORDS_PER_DRAIN = 16  # outbox capacity of a relaxed engine, in iterations' worth of records


def relaxed_engine(
    cfg: EngineConfig, mode: str, temperature: float, order: bool = False
) -> EngineConfig:
    """The engine config for a relaxed (st or soft) rollout, the priority order relaxed too
    when `order` (for gradients in the priority weights); ConfigError names the key of a
    mechanism the relaxation does not support."""
    if mode not in ("st", "soft"):
        raise ConfigError(f"tune.relax: got {mode!r}; expected st or soft")
    if not temperature > 0:
        raise ConfigError(f"tune.temperature: got {temperature!r}; expected a number > 0")
    for key, ok in (
        ("engine.prefill_instances", cfg.prefill_instances == 0),
        ("engine.kv_pressure", cfg.kv_pressure == "preempt"),
        ("engine.prefix_cache", not cfg.prefix_cache),
        ("policy.order", cfg.scheduling_policy == "fcfs"),
        ("engine.async_scheduling", not cfg.async_scheduling),
    ):
        if not ok:
            raise ConfigError(
                f"{key}: the pathwise estimator supports kv_pressure=preempt, "
                f"no prefix cache, no prefill/decode disaggregation, synchronous "
                f"scheduling and score orders (not vLLM's priority policy); use "
                f"tune=es for this scenario"
            )
    if order and cfg.queue_window < swap.SWAP_PARTNERS:
        raise ConfigError(
            f"engine.queue_window: got {cfg.queue_window}; a relaxed priority "
            f"order needs at least {swap.SWAP_PARTNERS}"
        )
    # request_times writes the outbox into per-request arrays once per chunk: a chunk ends
    # when the outbox is nearly full (a vmapped loop selects over the whole outbox every
    # iteration, so it stays small)
    return dataclasses.replace(
        cfg,
        relax=mode,
        relax_temperature=float(temperature),
        relax_order=order,
        leap_max=0,
        width=0,
        outbox=_RECORDS_PER_DRAIN * cfg.drain_per_step,
    )


class RequestTimes(NamedTuple):
    """What a relaxed run gives the objective, per request of the trace."""

    first: jnp.ndarray  # [N] f64 first-token time (seconds; nan where none)
    finish: jnp.ndarray  # [N] f64 end time (seconds; nan where none)
    completed: jnp.ndarray  # [N] bool it completed
    end_s: jnp.ndarray  # [] f64 end of the run (seconds)
    final_small: jnp.ndarray  # [N] bool model cascade: its final answer is the small model's
    #                           (False without a cascade)


def request_times(wl: Workload, params: Params, cfg: EngineConfig) -> RequestTimes:
    """Run one scenario (unbatched) to its end on a relaxed engine: every request's times and
    the run's end (RequestTimes).

    The run is the host driver's loop on device: chunks of iterations (servetune/engine/loop.py's
    `run_chunk`) whose finished-request records (first token, finish, end state, shift, and with a
    cascade the tier, with a relaxed order the swap tape of engine/relaxed/swap.py) are written into
    the per-request arrays once per chunk, not per iteration; what is still in the active sets at
    the end is read from the entries. The run ends when its last request does: where that is a
    completion, the end moves with the request's shift (engine/relaxed/shift.py), so a policy that
    finishes the last requests sooner also pays for fewer GPU-seconds. With a relaxed
    order the order swaps are settled after the run, from every request's latest admission."""
    n = wl.arrival.shape[0]
    state = init_state(wl, params, cfg)
    names = ("first_token", "finish", "end_state", "shift", "tier") + tuple(swap.SWAP_FIELDS)
    names = tuple(f for f in names if f in record_fields(state.outbox))
    out = unset_records(n, (*names, "tier"), wl.n)  # tier -1 without a cascade

    def put(out, req, valid, value):  # value(name) -> [R or A, ...]
        idx = jnp.where(valid, req, n)  # out of range: dropped
        return {**out, **{f: out[f].at[idx].set(value(f), mode="drop") for f in names}}

    def body(carry):
        s, out = carry
        s = run_chunk(s, wl, params, cfg)  # each request leaves the active sets once
        box = s.outbox
        return s, put(
            out, box.req, jnp.arange(box.req.shape[0]) < box.count, lambda f: getattr(box, f)
        )

    state, out = jax.lax.while_loop(lambda c: ~c[0].done, body, (state, out))
    ent = jax.tree.map(lambda x: x.reshape(-1, *x.shape[2:]), state.entries)  # instances flat
    ended = ent.replace(end_state=jnp.where(ent.status == DONE, ent.end_state, OUTSTANDING))
    out = put(out, ent.req, ent.req >= 0, lambda f: entry_value(ended, f))
    first, finish, shift = out["first_token"], out["finish"], out["shift"]
    completed = out["end_state"] == COMPLETED
    if cfg.relax_order:  # order swaps move first tokens and completions (engine/relaxed/swap.py)
        moved = swap.settle(out["admitted_at"], out["swap_req"], out["swap_p"])
        d_first, d_finish = swap.settle_victims(
            first, out["admitted_at"], out["preempted_at"], out["victim_of"], out["victim_p"]
        )
        first, finish, shift = (
            first + moved + d_first,
            finish + moved + d_finish,
            (shift + moved + d_finish),
        )
    clock = jnp.max(state.clock)
    # the completion the exact path ends with (its unshifted finish is the clock)
    unshifted = jnp.where(completed, finish - shift, -jnp.inf)
    last = jnp.argmax(unshifted)
    ends_run = jnp.abs(unshifted[last] - clock) <= 1e-9 * jnp.maximum(clock, 1.0)
    end_s = clock + jnp.where(ends_run, shift[last], 0.0)
    return RequestTimes(first, finish, completed, end_s, out["tier"] == TIER_SMALL)


@dataclasses.dataclass(frozen=True)
class SoftTargets:
    """What the smoothed objective needs beyond the times (host constants of a scenario)."""

    slo_ttft_s: float | None
    slo_tpot_s: float | None
    slo_e2e_s: float | None
    warmup_s: float
    usd_per_s: float  # price x GPUs / 3600
    slo_target: float
    slo_tau: float  # relative width of the smoothed SLO checks


def targets(spec: MetricsSpec, slo_target: float, slo_tau: float) -> SoftTargets:
    """SoftTargets of a scenario's metrics spec."""
    return SoftTargets(
        spec.slo_ttft_s,
        spec.slo_tpot_s,
        spec.slo_e2e_s,
        spec.warmup_s,
        spec.price_per_gpu_hour * spec.n_gpus / 3600.0,
        slo_target,
        slo_tau,
    )


def request_weights(trace, spec: MetricsSpec) -> np.ndarray:
    """[2, N] output tokens of each request the metrics count (arrived after the warm-up) that
    passes its task check (0 otherwise): what it adds to useful tokens if it meets the SLOs.
    Row 0 where its final answer is the large (or only) model's, row 1 where it is a cascade's
    small model's (servetune.config.cascade.request_columns); equal rows without a cascade."""
    counted = np.asarray(trace.arrival) >= spec.warmup_s
    if spec.cascade is not None and trace.cascade_fail is not None:
        n = len(trace)
        ok = [
            cascade_lib.request_columns(trace, np.full(n, tier), spec.quality)["quality_ok"]
            for tier in (TIER_LARGE, TIER_SMALL)
        ]
    else:
        ok = [metrics_lib.quality_outcome(trace, spec)[1]] * 2
    return np.stack([np.where(counted & q, np.asarray(trace.output, np.float64), 0.0) for q in ok])


def soft_objective(rt: RequestTimes, wl: Workload, weights, counted, tg: SoftTargets, lam):
    """(f, attainment, Lagrangian) of one run's request times; see the module doc.
    weights [2, N]: `request_weights`; counted [N] bool: requests the metrics count."""

    def check(x, target):
        if target is None:
            return 1.0
        return jax.nn.sigmoid((target - x) / (tg.slo_tau * target))

    arrival, completed = wl.arrival, rt.completed
    n_out = wl.output.astype(jnp.float64)
    first_s = jnp.where(completed, rt.first, arrival)
    finish_s = jnp.where(completed, rt.finish, arrival)
    tpot = jnp.where(n_out > 1, (finish_s - first_s) / jnp.maximum(n_out - 1, 1), 0.0)
    q = (
        check(first_s - arrival, tg.slo_ttft_s)
        * check(tpot, tg.slo_tpot_s)
        * check(finish_s - arrival, tg.slo_e2e_s)
    )
    q = jnp.where(completed & counted, q, 0.0)
    useful = jnp.sum(q * jnp.where(rt.final_small, weights[1], weights[0]))
    usd = tg.usd_per_s * jnp.maximum(rt.end_s - tg.warmup_s, 0.0)
    f = jnp.log(jnp.maximum(useful, _FLOOR)) - jnp.log(jnp.maximum(usd, _FLOOR))
    attainment = jnp.sum(q) / jnp.maximum(jnp.sum(counted), 1)
    return f, attainment, f - lam * jnp.maximum(tg.slo_target - attainment, 0.0)


@dataclasses.dataclass(frozen=True)
class PointMap:
    """The tuner's point z [d] -> policy values, as tuning/space.py maps it, in JAX (traced,
    differentiable): value = low..high through a sigmoid, on a log or linear scale, projected
    by the space's constraints (vLLM's own checks)."""

    dims: tuple  # [d] tuning.space.Dimension
    constraints: object = None  # tuning.space.Constraints (None: none)

    def values(self, z) -> dict:
        """Policy key -> traced value of each coordinate of z [d]."""
        out = {}
        for k, dim in enumerate(self.dims):
            u = jax.nn.sigmoid(z[k])
            if dim.scale == "log":
                lo, hi = np.log(dim.low), np.log(dim.high)
                out[dim.key] = jnp.exp(lo + (hi - lo) * u)
            else:
                out[dim.key] = dim.low + (dim.high - dim.low) * u
        return out if self.constraints is None else self.constraints.apply(out, jnp)

    def __call__(self, z, base: Params) -> Params:
        """`base` (unbatched Params) with the tuned keys set from z."""
        return base.replace(policy=base.policy.replace(**self.values(z)))


def objective_parts(rt: RequestTimes, wl: Workload, weights, counted, tg: SoftTargets, lam):
    """(f, attainment, Lagrangian) [3] of one relaxed run (soft_objective of its times)."""
    return jnp.stack(soft_objective(rt, wl, weights, counted, tg, lam))


@functools.partial(
    jax.jit, static_argnames=("cfg", "tg", "point_map"), compiler_options=ops.COMPILER_OPTIONS
)
def _per_scenario(z, wl, weights, counted, lam, base, cfg, tg, point_map):
    """Per scenario (wl leaves [S, N]): (f, attainment, Lagrangian) [S, 3] at z [d] and their
    forward-mode Jacobian [S, 3, d], 0 in the columns of DIFFERENCE_KEYS (no relaxed run
    moves their decisions)."""
    tangent = np.array(
        [k for k, dim in enumerate(point_map.dims) if dim.key not in DIFFERENCE_KEYS], np.int32
    )

    def one(z, wl, weights, counted):
        value = objective_parts(
            request_times(wl, point_map(z, base), cfg), wl, weights, counted, tg, lam
        )
        return value, value

    def value_and_jacobian(wl, weights, counted):
        if tangent.size == 0:
            return one(z, wl, weights, counted)[0], jnp.zeros((3, z.shape[0]))
        # the value is the tangent run's primal: the loop runs once
        jac, value = jax.jacfwd(
            lambda zt: one(z.at[tangent].set(zt), wl, weights, counted), has_aux=True
        )(z[tangent])
        return value, jnp.zeros((3, z.shape[0]), jac.dtype).at[:, tangent].set(jac)

    return jax.vmap(value_and_jacobian)(wl, weights, counted)


def aggregate_scenarios(values, jac, aggregate: str = "mean", cvar_alpha: float = 0.25):
    """(f, attainment, Lagrangian) [3] and their Jacobian [3, d] over the scenarios (values
    [S, 3], jac [S, 3, d]) as tuning/objective.py aggregates them: their mean, or (aggregate
    cvar) the mean of the worst `cvar_alpha` fraction by Lagrangian (whose gradient is theirs)."""
    values, jac = np.asarray(values), np.asarray(jac)
    if aggregate == "cvar":
        k = max(1, math.ceil(cvar_alpha * len(values)))
        worst = np.argsort(values[:, 2], kind="stable")[:k]
        values, jac = values[worst], jac[worst]
    return values.mean(axis=0), jac.mean(axis=0)


def per_scenario(
    z,
    wl: Workload,
    weights,
    counted,
    lam,
    base: Params,
    cfg: EngineConfig,
    tg: SoftTargets,
    point_map: PointMap,
):
    """(values [S, 3], Jacobian [S, 3, d]) of the smoothed (f, attainment, Lagrangian) at the
    point z [d] on each scenario (wl leaves [S, N]), by forward mode through the relaxed run; the
    columns of DIFFERENCE_KEYS are 0 (servetune/tuning/estimators/paired_difference.py estimates
    them). `base`: unbatched Params the point modifies; `cfg`: a `relaxed_engine`. Compiled once per
    (cfg, tg, point_map) and shapes: z, lam and every number in `base` are traced. Returns
    numpy arrays."""
    values, jac = _per_scenario(
        jnp.asarray(z, jnp.float64),
        wl,
        jnp.asarray(weights),
        jnp.asarray(counted),
        jnp.asarray(lam, jnp.float64),
        base,
        cfg,
        tg,
        point_map,
    )
    return np.asarray(values), np.asarray(jac)
