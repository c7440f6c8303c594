"""An autoscaler over the instances: Kubernetes' HorizontalPodAutoscaler (autoscaling/v2) on one
of vLLM's per-replica gauges, with cold starts and graceful drain.

engine.n_instances is the static capacity; params.fleet (FleetParams, traced, rounded by
`whole` to what Kubernetes holds) says how many of those replicas are provisioned. Every
`interval_s` seconds of simulated time, at the end of the step after which the earliest clock
is at or past the evaluation time T (`before_step`, from step.between_steps), the autoscaler:

1. reads the metric (engine.autoscale_metric) of every replica that serves at T: vLLM's
   `vllm:num_requests_waiting`, `vllm:num_requests_running` or `vllm:kv_cache_usage_perc`
   (KV blocks in use over the replica's blocks, a fraction);
2. recommends, as HPA does for a metric with an AverageValue target (the form KEDA's
   Prometheus trigger gives it): the current replicas (provisioned and not draining, cold ones
   included: the Deployment's replica count) while |sum / (target x current) - 1| <= tolerance,
   else ceil(sum / target);
3. stabilizes: the recommendation is at least the smallest one within the scale-up window and
   at most the largest one within the scale-down window (HPA's behavior.*.
   stabilizationWindowSeconds, recommendations kept in a ring of engine.autoscale_history);
4. limits the step (HPA's Pods and Percent policies with periodSeconds = interval_s and
   selectPolicy Max: up to max(current + pods, ceil(current x (1 + percent / 100))), down to
   min(current - pods, floor(current x (1 - percent / 100))), Kubernetes' rounding), then
   clamps to [min, max];
5. acts: a scale-up provisions the first replicas that are off; each serves after
   `cold_start_s` (GPU acquisition and model load). A scale-down first cancels cold starts
   (last listed first), then drains serving replicas (last listed first): a draining replica
   takes no new request and is off once its last one ends (vLLM's graceful shutdown).

The router (engine/routing.py) sends a request only to a replica serving at its arrival. A
replica that is off has no clock (inf): it is never stepped, so it costs the loop nothing but
the [I]-wide reads of routing and of the next instance. The fleet's counts are logged
(Fleet.log) at every evaluation that changes them, where a cold start ends and where a drained
replica goes off, so the host integrates provisioned replica-seconds, the run's cost, exactly
(a replica that goes off at the end of a step is logged at that step's end, which may come
after a later evaluation's row: up to one iteration of it counts as off early).

With fleet.scale_down: requeue (engine.autoscale_requeue) a scaled-down replica does not drain:
its waiting and running requests are re-queued to the serving replicas (engine/requeue.py) and
it goes off once what it finished has left. With spot replicas (engine.autoscale_spot), each
evaluation reads the metric, then preempts spot replicas at their rate (engine/spot.py), then
scales: the metric is the one scraped before the preemption, so a fleet that loses every
replica at each evaluation still sees its load and grows.

Not modelled: a stall under an autoscaler is still caught per instance (idle with waiting work),
but the fleet-wide "nothing can move" check never fires, as evaluations always wake an idle
replica (the run then ends at the stop time).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from servetune.core import ops
from servetune.core.types import (
    EMPTY,
    FLEET_LOG_COLUMNS,
    REPLICA_DRAINING,
    REPLICA_OFF,
    REPLICA_SERVING,
    RUNNING,
    WAITING,
    EngineConfig,
    Entries,
    Fleet,
    FleetParams,
    Params,
    SimState,
)
from servetune.engine import requeue, spot


def init(fp: FleetParams, cfg: EngineConfig, zf) -> Fleet:
    """The fleet at time 0: the first min_replicas replicas serving (warm), the rest off, the
    first evaluation due at interval_s. `zf` [] f64 zero that places the arrays."""
    n = cfg.n_instances
    idx = jnp.arange(n) + zf
    phase = jnp.where(idx < fp.min_replicas, REPLICA_SERVING, REPLICA_OFF).astype(jnp.int32)
    h = cfg.autoscale_history
    zi = zf.astype(jnp.int32)
    fleet = Fleet(
        phase=phase,
        ready_at=jnp.zeros((n,)) + zf,
        spot=spot.is_spot(n, fp.spot_share) & cfg.autoscale_spot,
        next_eval=fp.interval_s + zf,
        rec=jnp.full((h,), jnp.nan) + zf,
        rec_t=jnp.full((h,), -jnp.inf) + zf,
        n_evals=zi,
        desired=fp.min_replicas + zf,
        log=jnp.full((max(cfg.autoscale_log, 1), len(FLEET_LOG_COLUMNS)), jnp.nan) + zf,
        n_log=zi,
        cold_s=zf,
        scale_ups=zi,
        scale_downs=zi,
        refused=zi,
        requeued=zi,
        preemptions=zi,
        t_last=zf,
    )
    return _log(fleet, zf)


def initial_clock(fleet: Fleet, clock):
    """[I] clocks (seconds) with the replicas that are off at inf (never stepped)."""
    return jnp.where(fleet.phase == REPLICA_OFF, jnp.inf, clock)


def serving_at(fleet: Fleet, t):
    """[I] bool: the replicas a request arriving at t (seconds) may be routed to."""
    return (fleet.phase == REPLICA_SERVING) & (fleet.ready_at <= t)


def signal(e: Entries, kv_blocks, cfg: EngineConfig):
    """[I] each replica's value of engine.autoscale_metric: requests waiting, requests
    running, or KV blocks in use over `kv_blocks` ([] or [I])."""
    if cfg.autoscale_metric == "num_requests_waiting":
        return jnp.sum(e.status == WAITING, axis=1).astype(jnp.float64)
    if cfg.autoscale_metric == "num_requests_running":
        return jnp.sum(e.status == RUNNING, axis=1).astype(jnp.float64)
    return jnp.sum(e.blocks, axis=1) / jnp.asarray(kv_blocks, jnp.float64)


def recommend(total, current, fp: FleetParams):
    """[] replicas HPA recommends for a metric summing to `total` over the serving replicas,
    with `current` replicas: current within the tolerance, else ceil(total / target)."""
    ratio = total / (fp.target * jnp.maximum(current, 1.0))
    return jnp.where(
        jnp.abs(ratio - 1.0) <= fp.tolerance, current, jnp.ceil(total / fp.target - 1e-9)
    )


def stabilize(fleet: Fleet, raw, t, current, fp: FleetParams):
    """([] stabilized recommendation, fleet with `raw` kept at time t): current moved up to
    the smallest recommendation within the scale-up window and down to the largest within the
    scale-down window (`raw` included in both)."""
    h = fleet.rec.shape[0]
    at = jnp.mod(fleet.n_evals, h)
    rec, rec_t = fleet.rec.at[at].set(raw), fleet.rec_t.at[at].set(t)
    up = rec_t > t - fp.scale_up_window_s
    down = rec_t > t - fp.scale_down_window_s
    lowest = jnp.min(jnp.where(up | (rec_t == t), rec, jnp.inf))
    highest = jnp.max(jnp.where(down | (rec_t == t), rec, -jnp.inf))
    stable = jnp.clip(current, lowest, highest)
    return stable, fleet.replace(rec=rec, rec_t=rec_t, n_evals=fleet.n_evals + 1)


def limit_rate(desired, current, fp: FleetParams):
    """[] `desired` within one evaluation's step limits (HPA's Pods and Percent policies,
    selectPolicy Max) and [min_replicas, max_replicas]."""
    up_to = jnp.maximum(
        current + fp.scale_up_pods, jnp.ceil(current * (1.0 + fp.scale_up_percent / 100.0))
    )
    down_to = jnp.minimum(  # Kubernetes truncates the Percent limit down
        current - fp.scale_down_pods,
        jnp.floor(current * (1.0 - fp.scale_down_percent / 100.0) + 1e-9),
    )
    up = jnp.minimum(desired, jnp.minimum(up_to, fp.max_replicas))
    down = jnp.maximum(desired, jnp.maximum(down_to, fp.min_replicas))
    same = jnp.clip(desired, fp.min_replicas, fp.max_replicas)
    return jnp.where(desired > current, up, jnp.where(desired < current, down, same))


def _first(mask, k):
    """[I] bool: the first k (a [] count) instances where `mask` holds, in listing order."""
    return mask & (ops.cumsum(mask, dtype=jnp.int32) <= k)


def _last(mask, k):
    """[I] bool: the last k instances where `mask` holds."""
    return _first(mask[::-1], k)[::-1]


def scale(fleet: Fleet, clock, desired, t, fp: FleetParams, holds=None):
    """(fleet, clock [I]) after moving to `desired` replicas at time t (seconds): off replicas
    provisioned (serving from t + cold_start_s, their clock), or cold starts cancelled and
    serving replicas set draining, last listed first. A start that finds no replica off (the
    others still draining: engine.n_instances is the capacity) is counted as refused.
    `holds` [I] bool: replicas holding requests (a spot replacement holds those re-queued to
    it, engine/spot.py): a cancelled cold start among them drains them instead of going off."""
    on = fleet.phase == REPLICA_SERVING
    current = jnp.sum(on)
    grow = _first(fleet.phase == REPLICA_OFF, desired - current)
    cold = on & (fleet.ready_at > t)
    shed = jnp.maximum(current - desired, 0)
    cancel = _last(cold, shed)
    drain = _last(on & ~cold, shed - jnp.sum(cancel))
    ready = jnp.where(grow, t + fp.cold_start_s, fleet.ready_at)
    phase = jnp.where(grow, REPLICA_SERVING, fleet.phase)
    holds = jnp.zeros_like(on) if holds is None else holds
    drain = drain | (cancel & holds)
    cancel = cancel & ~holds
    phase = jnp.where(cancel, REPLICA_OFF, jnp.where(drain, REPLICA_DRAINING, phase))
    lost = jnp.sum(jnp.where(cancel, fleet.ready_at - t, 0.0))  # cold time not spent
    fleet = fleet.replace(
        phase=phase.astype(jnp.int32),
        ready_at=ready,
        cold_s=fleet.cold_s + jnp.sum(grow) * fp.cold_start_s - lost,
        scale_ups=fleet.scale_ups + jnp.sum(grow, dtype=jnp.int32),
        scale_downs=fleet.scale_downs + jnp.sum(cancel | drain, dtype=jnp.int32),
        refused=fleet.refused
        + (jnp.maximum(desired - current, 0) - jnp.sum(grow)).astype(jnp.int32),
        desired=desired.astype(jnp.float64),
    )
    return fleet, jnp.where(grow, ready, jnp.where(cancel, jnp.inf, clock))


def _retired(fleet: Fleet, clock, empty):
    """(fleet, clock [I], whether any went off): the draining replicas that hold no request
    (`empty` [I] bool) off."""
    done = (fleet.phase == REPLICA_DRAINING) & empty
    fleet = fleet.replace(phase=jnp.where(done, REPLICA_OFF, fleet.phase).astype(jnp.int32))
    return fleet, jnp.where(done, jnp.inf, clock), jnp.any(done)


def retire(fleet: Fleet, clock, i, e: Entries, t_start, t_end):
    """(fleet, clock [I]) after instance i's step from t_start to t_end (seconds) left it with
    entries `e` [A]: off at t_end if it was draining and holds no request any more. Logged
    then, and at t_start when this was its first step after a cold start (it became ready);
    t_end is the run's end so far (Fleet.t_last)."""
    mine = jnp.arange(clock.shape[0]) == i
    fleet, clock, went = _retired(fleet, clock, mine & ~jnp.any(e.status != EMPTY))
    ready = jnp.any(
        mine & (fleet.phase == REPLICA_SERVING) & (fleet.ready_at == t_start) & (t_start > 0)
    )
    logged = _log(fleet, jnp.where(went, t_end, t_start))
    n_log = jnp.where(went | ready, logged.n_log, fleet.n_log)
    t_last = jnp.maximum(fleet.t_last, t_end)
    return fleet.replace(log=logged.log, n_log=n_log, t_last=t_last), clock


def _row(fleet: Fleet, t):
    """[6] FLEET_LOG_COLUMNS of `fleet` at time t (seconds)."""
    cold = (fleet.phase == REPLICA_SERVING) & (fleet.ready_at > t)
    up = fleet.phase != REPLICA_OFF
    return jnp.stack(
        [
            jnp.asarray(t, jnp.float64),
            jnp.sum(up).astype(jnp.float64),
            jnp.sum(cold).astype(jnp.float64),
            jnp.sum(fleet.phase == REPLICA_DRAINING).astype(jnp.float64),
            fleet.desired,
            jnp.sum(up & fleet.spot).astype(jnp.float64),
        ]
    )


def _log(fleet: Fleet, t) -> Fleet:
    """`fleet` with its row at t appended (the count goes on past the log's rows, which then
    stay as they are: the host reports it)."""
    rows = fleet.log.shape[0]
    at = jnp.minimum(fleet.n_log, rows - 1)
    keep = fleet.n_log < rows
    log = fleet.log.at[at].set(jnp.where(keep, _row(fleet, t), fleet.log[at]))
    return fleet.replace(log=log, n_log=fleet.n_log + 1)


def evaluate(fleet: Fleet, clock, entries: Entries, kv_blocks, t, fp: FleetParams, cfg, salt):
    """(fleet, clock [I], entries [I, A]) after one evaluation at time t (seconds): the
    metric read from the serving replicas, spot preemptions (engine/spot.py), then
    recommend, stabilize, limit, scale (re-queuing the
    requests of the replicas scaled down with fleet.scale_down: requeue), retire the drained;
    logged where the counts or the desired replicas changed. `salt`: the scenario's seed."""
    before = _row(fleet, t)
    # the metric as scraped before any preemption of this instant: a fleet whose every spot
    # replica is preempted at each evaluation still sees its load, and scales
    total = jnp.sum(jnp.where(serving_at(fleet, t), signal(entries, kv_blocks, cfg), 0.0))
    if spot.enabled(cfg):
        warm = serving_at(fleet, t)
        hit = spot.preempted(fleet, warm, t, fp, salt)
        fleet, clock, entries = spot.preempt(fleet, clock, entries, hit, warm & ~hit, t, fp)
    current = jnp.sum(fleet.phase == REPLICA_SERVING).astype(jnp.float64)
    stable, fleet = stabilize(fleet, recommend(total, current, fp), t, current, fp)
    draining = fleet.phase == REPLICA_DRAINING
    # only a spot replacement can be cold and hold requests (engine/spot.py)
    holds = jnp.any(entries.status != EMPTY, axis=1) if spot.enabled(cfg) else None
    fleet, clock = scale(fleet, clock, limit_rate(stable, current, fp), t, fp, holds)
    if cfg.autoscale_requeue:  # the replicas just scaled down hand their requests on
        leaving = (fleet.phase == REPLICA_DRAINING) & ~draining
        entries, moved = requeue.move_live(entries, clock, leaving, serving_at(fleet, t))
        fleet = fleet.replace(requeued=fleet.requeued + moved)
    fleet, clock, _ = _retired(fleet, clock, ~jnp.any(entries.status != EMPTY, axis=1))
    changed = jnp.any(_row(fleet, t)[1:] != before[1:])
    logged = _log(fleet, t)
    n_log = jnp.where(changed, logged.n_log, fleet.n_log)
    return fleet.replace(log=logged.log, n_log=n_log), clock, entries


COUNTS = ("min_replicas", "max_replicas", "scale_up_pods", "scale_down_pods")
PERCENTS = ("scale_up_percent", "scale_down_percent")
SECONDS = ("interval_s", "scale_up_window_s", "scale_down_window_s")


def whole(fp: FleetParams, xp=jnp) -> FleetParams:
    """`fp` as Kubernetes can hold it, which a tuner's continuous values are not: counts
    (replicas, Pods policies) and percents rounded to the nearest integer (halves up; a
    positive percent at least 1), the interval and the windows up to whole seconds (at least
    1 s for the interval). The simulator runs these values and the export writes them
    (deploy/autoscaler_export.py); `xp`: numpy for host values."""
    nearest = lambda x: xp.floor(x + 0.5)
    out = {k: nearest(getattr(fp, k)) for k in COUNTS}
    out.update(
        {
            k: xp.where(getattr(fp, k) > 0, xp.maximum(nearest(getattr(fp, k)), 1.0), 0.0)
            for k in PERCENTS
        }
    )
    out.update({k: xp.ceil(getattr(fp, k) - 1e-9) for k in SECONDS})
    out["interval_s"] = xp.maximum(out["interval_s"], 1.0)
    return fp.replace(**out)


def before_step(state: SimState, params: Params, cfg: EngineConfig, t, salt) -> SimState:
    """`state` after the evaluation due by `t` (the earliest clock, seconds), if one is: it is
    taken at its own time, and the next is the first multiple of interval_s after t. Steps
    without one skip its reads (one scenario; under vmap both sides run). `salt`: the
    scenario's seed (Workload.salt), for spot preemptions."""
    if not cfg.autoscale:
        return state
    assert state.fleet is not None and params.fleet is not None  # on: autoscale
    fp = whole(params.fleet)

    def due(state: SimState) -> SimState:
        fleet = state.fleet
        assert fleet is not None
        kv = jnp.broadcast_to(params.cost.kv_blocks, (cfg.n_instances,))
        new, clock, entries = evaluate(
            fleet, state.clock, state.entries, kv, fleet.next_eval, fp, cfg, salt
        )
        missed = jnp.floor((t - fleet.next_eval) / fp.interval_s)
        new = new.replace(next_eval=fleet.next_eval + (missed + 1.0) * fp.interval_s)
        return state.replace(fleet=new, clock=clock, entries=entries)

    return jax.lax.cond(t >= state.fleet.next_eval, due, lambda state: state, state)


def next_event(state: SimState, cfg: EngineConfig):
    """[] the next evaluation's time (seconds; inf without an autoscaler): an idle instance
    wakes for it and a leap stops before it."""
    if not cfg.autoscale:
        return jnp.inf
    assert state.fleet is not None
    return state.fleet.next_eval
