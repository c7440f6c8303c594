"""One iteration of one instance: arrivals -> order -> schedule -> cost -> advance -> retire."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from servetune.core import ops
from servetune.core.cost import step_time
from servetune.core.errors import STALLED
from servetune.core.types import (
    DONE,
    EMPTY,
    REJECT_KV_RESERVE,
    RUNNING,
    WAITING,
    EngineConfig,
    Entries,
    Params,
    SimState,
    Workload,
)
from servetune.engine import (
    async_scheduling,
    autoscale,
    pools,
    routing,
    speculation,
    statistics,
    timeline,
)
from servetune.engine import outbox as outbox_lib
from servetune.engine import prefix as prefix_lib
from servetune.engine.abandon import abandon, next_give_up
from servetune.engine.advance import advance
from servetune.engine.arrivals import take_arrivals
from servetune.engine.leap import (
    NextArrival,
    leap,
    next_arrival_of,
    steps_every_iteration,
    takes_arrivals,
)
from servetune.engine.order import priority, scheduling_order
from servetune.engine.phases import (
    Advanced,
    Arrived,
    Boundary,
    Iteration,
    Leapt,
    Scheduled,
    StepRecord,
)
from servetune.engine.relaxed import pace, swap
from servetune.engine.relaxed.shift import admission_shift
from servetune.engine.scheduler import new_blocks, schedule, token_budget, wanted_tokens


def batch_cost(es, batch, params: Params, cfg: EngineConfig, totals=None):
    """Seconds the iteration lasts, from the roofline or linear cost model (under async
    scheduling the roofline's host overhead overlaps the device's step: core/cost.step_time). A
    decode computes one token; the positions a speculative decode verifies beyond it count as
    prefill tokens.
    With speculation the draft model's passes are added (engine/speculation.py). `totals`:
    `batch_totals(es, batch)` when the caller has them."""
    prefill, decode, ctx_read, attn_work = batch_totals(es, batch) if totals is None else totals
    dur = step_time(
        params.cost, cfg.cost_form, prefill, decode, ctx_read, attn_work, cfg.async_scheduling
    )
    if cfg.speculation:
        toks = batch.tokens if batch.relaxed is None else batch.relaxed.weight
        new_prompt = jnp.sum(jnp.where(batch.decode, 0, toks))
        decode_ctx = jnp.sum(jnp.where(batch.decode, es.computed, 0))
        k = speculation.relaxed_draft_tokens(params.policy, cfg.relax)  # the integer k if hard
        assert params.draft is not None  # on: speculation
        dur = dur + speculation.draft_time(params.draft, cfg, k, new_prompt, decode, decode_ctx)
    return dur


def batch_totals(es, batch):
    """What an iteration's target-model step time is computed from: (prefill tokens (a
    speculative decode's verified positions beyond its token included), decoding sequences,
    context tokens read, attention work (new tokens x context)); relaxed token weights where
    the engine is relaxed."""
    toks = batch.tokens if batch.relaxed is None else batch.relaxed.weight
    attn = toks * (es.computed + (toks + 1) / 2.0)
    if batch.relaxed is not None:
        # A prompt's relaxed tokens beyond the exact ones are the queue's, not the request's
        # own: a bigger budget's, handed along the queue as debts are repaid
        # (engine/relaxed/batch.py), often from a long prompt's last chunk to a short one's first.
        # Their attention is taken at the iteration's mean prefill context, so that handing
        # them on moves no work (at each request's own context it moved the run's length by
        # tens of seconds per unit of log budget on a busy replica).
        exact = batch.tokens.astype(jnp.float64)
        exact_attn = jnp.where(batch.decode, 0.0, exact * (es.computed + (exact + 1) / 2.0))
        context = jnp.sum(exact_attn) / jnp.maximum(
            jnp.sum(jnp.where(batch.decode, 0.0, exact)), 1.0
        )
        attn = jnp.where(batch.decode, attn, exact_attn + (toks - exact) * context)
    per_request = jnp.stack(
        [
            jnp.where(batch.decode, toks - 1, toks),
            batch.decode,
            jnp.where(batch.tokens > 0, es.computed, 0),
            attn,
        ],
        axis=-1,
    )
    prefill, decode, ctx_read, attn_work = jnp.sum(per_request.astype(jnp.float64), axis=0)
    return prefill, decode, ctx_read, attn_work


def _verify(e, batch, wl: Workload):
    """The batch with the draft tokens each decoding request gets accepted (speculation)."""
    drafts = jnp.where(batch.decode, batch.tokens - 1, 0)
    u = speculation.uniform(e.req, e.generated, wl.salt)
    return batch.replace(accepted=speculation.accepted(u, e.spec_alpha, drafts))


def in_scheduling_order(cfg: EngineConfig):
    """(entries, t, policy) -> the entries permuted into `scheduling_order` under `cfg`."""
    by_priority = cfg.scheduling_policy == "priority"

    def permute(e, t, pol):
        return ops.take(e, scheduling_order(e, t, pol, by_priority))

    return permute


def order_matters(e, params: Params, cfg: EngineConfig):
    """Whether priority order can change this iteration's schedule: more than one request
    waiting, or running requests that want more tokens than the budget or more KV blocks than
    are free. Otherwise every running request gets all it needs and the lone waiting request (if
    any) comes after them in any order, so the (costly) sort is skipped: same schedule."""
    need, _ = wanted_tokens(e, params, cfg)
    free = params.cost.kv_blocks - jnp.sum(e.blocks)
    over_budget = jnp.sum(need) > token_budget(params.policy, cfg)
    return (
        (jnp.sum(e.status == WAITING) > 1)
        | over_budget
        | (jnp.sum(new_blocks(e, need, cfg)) > free)
    )


def step(state: SimState, wl: Workload, params: Params, cfg: EngineConfig) -> SimState:
    """Advance the scenario by one iteration of its earliest instance.

    Only for scenarios that are not done: the rollout's while_loop guarantees it (under vmap,
    JAX keeps finished members' carries), so no per-iteration select over the whole state.
    """
    it = iteration(state, wl, params, cfg)
    return conclude(state, wl, params, cfg, it, ops.SEARCH_WINDOW)


def step_or_stay(state: SimState, wl: Workload, params: Params, cfg: EngineConfig):
    """`step_with_info`, but a no-op (zero-duration info) once the scenario is done."""
    new, info = step_with_info(state, wl, params, cfg)
    return jax.tree.map(lambda old, upd: jnp.where(state.done, old, upd), state, new), info


def step_with_info(state: SimState, wl: Workload, params: Params, cfg: EngineConfig):
    """`step`, also returning what the iteration did: a dict with the start time `t` and
    duration `dur` (seconds), and per entry [A] the request id `req` and `tokens` computed
    (-1 and 0 elsewhere) and the ids of the requests it `preempted` (-1 elsewhere).

    With engine.leap_max > 0 the step also applies the run of uniform decode iterations that
    follows the first one (engine/leap.py); `info` then describes the first iteration only."""
    it = iteration(state, wl, params, cfg)
    new = conclude(state, wl, params, cfg, it, ops.SEARCH_WINDOW)
    info = {
        "t": it.arrived.t,
        "dur": jnp.where(state.done, 0.0, it.dur),
        "tokens": jnp.where(state.done, 0, it.batch.tokens),
    }
    assert it.advanced.batch_req is not None  # the full iteration's
    info["req"] = jnp.where(info["tokens"] > 0, it.advanced.batch_req, -1)
    info["preempted"] = jnp.where(it.batch.preempted & ~state.done, it.advanced.batch_req, -1)
    return new, info


def between_steps(state: SimState, wl: Workload, params: Params, cfg: EngineConfig) -> SimState:
    """What happens between steps, at the earliest clock: the autoscaler's evaluation when one
    is due (engine/autoscale.py; nothing without engine.autoscale). At the end of every step,
    so that the loop's condition (engine/width.py) sees the state the next step starts from."""
    if not cfg.autoscale:
        return state
    t = state.clock[next_instance(state, cfg)]
    return autoscale.before_step(state, params, cfg, t, wl.salt)


def iteration(state: SimState, wl: Workload, params: Params, cfg: EngineConfig) -> Iteration:
    """The first iteration of a step of one scenario (unbatched), in full: arrivals, the
    scheduling order (sorted only where it can matter), the schedule, its cost, the advance."""
    arrived = arrive(state, wl, params, cfg, ops.SEARCH_WINDOW)
    # the permutation (16 gathers) runs only with the sort; under vmap both branches run
    e = jax.lax.cond(
        arrived.sort,
        in_scheduling_order(cfg),
        lambda e, t, pol: e,
        arrived.e,
        arrived.t,
        params.policy,
    )
    return scheduled_iteration(state, wl, params, cfg, arrived, e)


def next_instance(state: SimState, cfg: EngineConfig):
    """The instance that iterates next: the earliest clock; among equal clocks, one that holds
    work first (so an idle instance never holds back the others), then the first listed."""
    if cfg.n_instances == 1:  # static index: no batched scatter into [I, A] arrays under vmap
        return 0
    # work includes requests in transit (INFLIGHT: it must wake for their landing) and those
    # waiting to be sent on (HANDOFF, RETRY): an instance holding only those is not idle, or
    # an idle instance that cannot move could be picked forever at an equal clock
    idle = ~jnp.any(state.entries.status != EMPTY, axis=1) | state.stuck
    return jnp.lexsort((jnp.arange(cfg.n_instances), idle, state.clock))[0]


def _at_instance(params: Params, i, cfg: EngineConfig) -> Params:
    """Params as instance i sees them (its own cost params where they have an instance axis)."""
    if cfg.n_instances == 1:
        return params
    return params.replace(cost=routing.instance_cost(params.cost, i))


def arrive(
    state: SimState, wl: Workload, params: Params, cfg: EngineConfig, search_window
) -> Arrived:
    """The first phase of the next instance's iteration, at its clock t (seconds): arrivals by
    t taken in (routed first, with several instances), requests moved between pools
    (engine/pools.py) and landed, give-ups retired, and whether the order can matter."""
    i = next_instance(state, cfg)
    t = state.clock[i]
    t_plan = async_scheduling.offer_time(state.offered, i, t, cfg)  # t unless async
    entries_all = None
    if cfg.n_instances == 1:
        e = jax.tree.map(lambda x: x[i], state.entries)
        e, next_req, outside, n_arrived, n_rejected = take_arrivals(
            e, t_plan, state.next_req, wl, params, cfg, search_window
        )
    else:  # every arrival by t goes to an instance first, then instance i iterates
        entries_all, next_req, outside, n_arrived, n_rejected = routing.route(
            state, t, wl, params, cfg, search_window
        )
        # requests waiting on instance i move to the other pool (engine/pools.py)
        entries_all = pools.hand_on(entries_all, i, t, params.cost, cfg)
        e = pools.land(jax.tree.map(lambda x: x[i], entries_all), t, cfg)
    params = _at_instance(params, i, cfg)
    n_abandoned = jnp.zeros_like(n_rejected)
    if cfg.abandonment:  # cancelled and expired requests leave before scheduling
        e, n_abandoned = abandon(e, t)
    sort = order_matters(e, params, cfg) if cfg.lazy_order else jnp.ones_like(t, jnp.bool_)
    return Arrived(
        t, e, next_req, outside, n_arrived, n_rejected, sort, n_abandoned, entries_all, t_plan
    )


def scheduled_iteration(
    state: SimState, wl: Workload, params: Params, cfg: EngineConfig, arrived: Arrived, e: Entries
) -> Iteration:
    """The iteration after its arrivals, on entries `e` in scheduling order: schedule, cost,
    advance."""
    i = next_instance(state, cfg)
    params_i = _at_instance(params, i, cfg)
    sched = _schedule_phase(e, state, wl, params_i, cfg, arrived.t, i, arrived.t_plan)
    dur, totals = _iteration_seconds(sched.e, sched.batch, params_i, cfg)
    advanced = _advance_phase(sched, totals, dur, arrived.t, params_i, cfg, i)
    return Iteration(arrived, sched.batch, totals, dur, advanced)


def conclude(
    state: SimState, wl: Workload, params: Params, cfg: EngineConfig, it: Iteration, search_window
) -> SimState:
    """The end of a step after its first iteration `it`: the next boundary, the run of uniform
    decode iterations that follows, the outbox drain, the statistics and the new state. The
    full step and the simple one (servetune/engine/simple_step.py) share it."""
    arrived, batch, totals, dur, advanced = it
    i = next_instance(state, cfg)
    remote = _remote_horizon(arrived, state, params, cfg)  # (reads every instance's cost params)
    every = params
    params = _at_instance(params, i, cfg)
    t = arrived.t
    busy = jnp.any(batch.tokens > 0) | jnp.any(batch.preempted)  # (a preemption is progress)
    next_arrival = _next_arrival(wl, arrived.next_req)
    # an idle iteration that let held requests go (async scheduling) plans again at once
    wake = jnp.where(advanced.released, t, _wake_time(advanced.e, state, t, next_arrival, cfg, i))
    t_next = jnp.where(busy, t + dur, wake)
    stalled = _stalled(advanced.e, busy, cfg) & ~advanced.released
    boundary = Boundary(t, dur, t_next, busy, stalled)
    limit = jnp.minimum(
        _leap_limit(advanced, t_next, next_arrival, wl, remote, cfg, i),
        autoscale.next_event(state, cfg),  # an evaluation sees the fleet at its time
    )
    arrival = (
        next_arrival_of(
            wl,
            arrived.next_req,
            next_arrival,
            jnp.minimum(_next_arrival(wl, arrived.next_req + 1), wl.t_stop),
            cfg,
        )
        if takes_arrivals(cfg)
        else None
    )
    leapt = _leap_phase(advanced, t_next, limit, params, cfg, i, arrival)
    e, box = outbox_lib.drain(leapt.e, state.outbox, cfg.drain_per_step)
    record = StepRecord(it, boundary, leapt)
    stats = statistics.account(state, wl, record, params.cost.kv_blocks, search_window, i, cfg)
    new = _commit(state, wl, record, e, box, stats, i, cfg)
    if cfg.prefix_cache:
        assert state.prefix is not None and leapt.pc is not None  # on: prefix_cache
        new = new.replace(prefix=prefix_lib.store(state.prefix, leapt.pc, cfg, i))
    if cfg.timeline_samples > 0:  # engine/timeline.py: off, it costs nothing
        assert state.timeline is not None  # on: timeline_samples
        new = new.replace(
            timeline=timeline.record(
                state.timeline,
                wl.timeline_dt,
                t,
                i,
                e,
                batch.tokens,
                leapt.kv_used,
                stats.preemptions,
            )
        )
    return between_steps(new, wl, every, cfg)


def _remote_horizon(arrived: Arrived, state: SimState, params: Params, cfg: EngineConfig):
    """[] the earliest time another instance can send this one work (seconds; inf when none):
    a prefill instance's hand-off (disaggregation), a retry from the small pool (cascade).
    A leap on a receiving instance stops before it. Reads every instance's cost params."""
    if pools.split_of(cfg) is None:
        return jnp.inf
    assert arrived.entries_all is not None  # several instances: routing keeps every one's
    return pools.horizon(arrived.entries_all, state.clock, params.cost, cfg)


def _schedule_phase(
    e: Entries, state: SimState, wl: Workload, params: Params, cfg: EngineConfig, t, i, t_plan
) -> Scheduled:
    """Prefix-cache lookups, the scheduler (engine/scheduler.py), the cache's references and
    evictions, the finish time of requests the scheduler ended, speculative verification.
    `t_plan`: when the step is planned (seconds; before t under async scheduling)."""
    pc = None
    if cfg.prefix_cache:  # engine/prefix.py: lookups before, references and eviction after
        assert e.prefix is not None and state.prefix is not None  # on: prefix_cache
        pc = prefix_lib.instance(state.prefix, i)
        if cfg.abandonment:  # requests that gave up at t release their cached blocks
            e, pc = prefix_lib.release(e, pc, (e.status == DONE) & (e.prefix.n > 0), t)
        hits = prefix_lib.hits(e, pc, params.cost.kv_blocks, cfg)
        computed_before = e.computed
        e, batch, hits = schedule(e, params, cfg, hits)
        e, pc, kv_used = prefix_lib.after_schedule(
            e, batch, hits, pc, t, params.cost.kv_blocks, cfg, computed_before
        )
    else:
        scores = priority(e, t, params.policy) if cfg.relax_order else None
        e, batch, _ = schedule(e, params, cfg, scores=scores)
        kv_used = jnp.sum(e.blocks, dtype=jnp.int32)
    if cfg.kv_pressure in ("evict", "reject"):  # requests the scheduler ended, at t
        e = e.replace(finish=jnp.where(batch.ended, t, e.finish))
    if cfg.kv_pressure == "reject":
        e = e.replace(reject_reason=jnp.where(batch.ended, REJECT_KV_RESERVE, e.reject_reason))
    # first admission: running now and never scheduled before (vLLM's scheduled timestamp)
    e = e.replace(
        scheduled_at=jnp.where(
            (e.status == RUNNING) & jnp.isnan(e.scheduled_at), t_plan, e.scheduled_at
        )
    )
    if cfg.speculation:
        batch = _verify(e, batch, wl)
    return Scheduled(e, batch, pc, kv_used)


def _iteration_seconds(e: Entries, batch, params: Params, cfg: EngineConfig):
    """(seconds the iteration lasts, batch_totals). An iteration that only preempted
    (scheduled no token) runs no model step: 0 s, as in vLLM."""
    totals = batch_totals(e, batch)
    only_preempted = jnp.any(batch.preempted) & ~jnp.any(batch.tokens > 0)
    return jnp.where(only_preempted, 0.0, batch_cost(e, batch, params, cfg, totals)), totals


def _advance_phase(
    sched: Scheduled, totals, dur, t, params: Params, cfg: EngineConfig, i
) -> Advanced:
    """Tokens computed and emitted (engine/advance.py); under a relaxed engine the progress
    and admission shifts that carry the derivative (engine/relaxed/); then what leaves the instance:
    a prefill instance's prefilled requests, a small model's failed answers; then prefix-cache
    insertions and releases."""
    e, batch, pc = sched.e, sched.batch, sched.pc
    n_running = jnp.sum(e.status == RUNNING, dtype=jnp.int32)
    released = jnp.asarray(False)
    if cfg.async_scheduling:  # the step before's completions leave now that this one is planned
        e, pc, released = async_scheduling.release_held(e, pc, t, cfg)
    generated0 = e.generated
    if cfg.relax != "hard":  # what the relaxed progress shifts need from before the iteration
        phase = pace.prefilling(e)
        share_s = pace.share_seconds(batch.tokens, batch.decode, dur)
        spec_s = pace.speculation_gain_s(e, batch.decode, batch.tokens, params, cfg, dur)
    e, gaps, completed = advance(
        e, batch, t + dur, hold=cfg.async_scheduling, stream_interval=cfg.stream_interval
    )
    if cfg.relax != "hard":  # progress and admission time shifts, and the events they move
        rb = batch.relaxed
        assert rb is not None  # on: a relaxed engine
        e = pace.progress_shift(
            e, rb.gain, batch.tokens, phase, batch.preempted, generated0, share_s, spec_s
        )
        e = admission_shift(e, rb, generated0, completed, t, dur)
        if cfg.relax_order:  # the pairs this iteration's admissions and preemption passed over
            e = swap.record(e, rb.admitted, rb.swap_req, rb.swap_p, t)
            e = swap.record_victims(e, rb.victim_of, rb.victim_p, t)
    # what stops being served here: a prefilled request, a failed small answer (engine/pools.py)
    e, n_withdrawn = pools.leave(e, i, cfg)
    insertions_due = jnp.asarray(False)
    if cfg.prefix_cache:  # blocks computed enter the cache; completed requests release theirs
        assert pc is not None  # (held ones under async scheduling: at the next schedule)
        leaving = completed & ~cfg.async_scheduling
        e, pc, insertions_due = prefix_lib.after_advance(e, leaving, pc, t + dur, cfg)
    return Advanced(
        e,
        gaps,
        completed,
        n_withdrawn,
        pc,
        sched.kv_used,
        insertions_due,
        sched.e.req,
        generated0,
        n_running,
        released,
    )


def _next_arrival(wl: Workload, next_req):
    """[] arrival time (seconds) of the next request not yet taken (inf when none is left)."""
    t = wl.arrival[jnp.minimum(next_req, wl.arrival.shape[0] - 1)]
    return jnp.where(next_req < wl.n, t, jnp.inf)


def _wake_time(e: Entries, state: SimState, t, next_arrival, cfg: EngineConfig, i):
    """When an idle instance iterates next (seconds): the next event that can give it work,
    or t when there is none (the scenario then ends or stalls). One instance: the next
    arrival. Several: also another instance's next boundary (it may route or hand on work),
    and the landing of a request in transit to this one (a hand-off or a retry). With an
    autoscaler, its next evaluation."""
    later = lambda x: jnp.where(x > t, x, jnp.inf)
    wake = jnp.minimum(later(next_arrival), later(autoscale.next_event(state, cfg)))
    if cfg.n_instances > 1:
        others = jnp.where(jnp.arange(cfg.n_instances) != i, state.clock, jnp.inf)
        wake = jnp.minimum(wake, jnp.min(jnp.where(others > t, others, jnp.inf)))
        if pools.moves_requests(cfg):  # a request in transit here lands
            landing = pools.next_landing(e, cfg)
            wake = jnp.minimum(wake, jnp.where(landing > t, landing, jnp.inf))
    return jnp.where(jnp.isfinite(wake), wake, t)


def _stalled(e: Entries, busy, cfg: EngineConfig):
    """Idle with waiting work. An empty engine admits any request that passed the arrival
    checks, so this cannot happen; if it ever does, the scenario stops and is flagged rather
    than looping forever. Under disaggregation KV held for a decode instance frees later."""
    stalled = ~busy & jnp.any(e.status == WAITING)
    if pools.split_of(cfg) is not None:
        stalled = stalled & ~pools.excuses_stall(e, cfg)
    return stalled


def _leap_limit(
    advanced: Advanced, t_next, next_arrival, wl: Workload, remote, cfg: EngineConfig, i
):
    """[] seconds before which a run of uniform decode iterations starting at t_next must
    start each of its iterations: the next arrival and the stop time, and each mechanism's
    next event (a give-up, a landing, a hand-off or retry from another instance, a retry
    produced now, a prefix-cache insertion still due)."""
    e = advanced.e
    limit = jnp.minimum(next_arrival, wl.t_stop)
    if cfg.abandonment:  # the iteration that notices a give-up is stepped
        limit = jnp.minimum(limit, next_give_up(e))
    limit = pools.leap_limit(limit, e, i, t_next, remote, cfg)  # landings, hand-ons
    if cfg.prefix_cache:  # no leap while cache insertions are still due
        limit = jnp.where(advanced.insertions_due, t_next, limit)
    return limit


def _leap_phase(
    advanced: Advanced,
    t_next,
    t_limit,
    params: Params,
    cfg: EngineConfig,
    i,
    arrival: NextArrival | None,
) -> Leapt:
    """The run of uniform decode iterations that follows the iteration, in closed form
    (engine/leap.py; taking in `arrival` on its way where it can), then what the cascade
    retries from it."""
    e, pc, kv_used = advanced.e, advanced.pc, advanced.kv_used
    n_completed = jnp.sum(advanced.completed, dtype=jnp.int32)
    zero = jnp.zeros((), jnp.int32)
    if cfg.leap_max > 0 and not cfg.speculation and not steps_every_iteration(cfg):
        kv_offset = None
        if cfg.prefix_cache:
            assert pc is not None
            kv_offset = prefix_lib.kv_offset(e, pc, cfg)
        found = leap(e, t_next, t_limit, params, cfg, kv_offset, arrival)
        e, t_end, n_leap, leap_blocks = found.e, found.t_end, found.k, found.kv_peak
        if cfg.prefix_cache:
            assert pc is not None
            e, pc, leap_blocks = prefix_lib.after_leap(
                e, found.completed, leap_blocks, pc, t_end, params.cost.kv_blocks, cfg
            )
        kv_used = jnp.where(n_leap > 0, jnp.maximum(kv_used, leap_blocks), kv_used)
        gaps = (
            jnp.concatenate([advanced.gaps, found.gaps[0]]),
            jnp.concatenate([jnp.ones_like(advanced.gaps), found.gaps[1]]),
        )
        n_completed = n_completed + jnp.sum(found.completed, dtype=jnp.int32)
        leapt = Leapt(
            e,
            pc,
            t_end,
            n_leap,
            jnp.sum(found.dur),
            found.tokens,
            n_completed,
            kv_used,
            gaps,
            found.ctx_read,
            found.early_s,
            found.taken,
            found.prefill_tokens,
            found.attn_work,
            found.max_running,
        )
    else:
        leapt = Leapt(
            e,
            pc,
            t_next,
            zero,
            0.0,
            zero,
            n_completed,
            kv_used,
            (advanced.gaps, 1.0),
            0.0,
            0.0,
            zero,
            zero,
            0.0,
            zero,
        )
    if pools.split_of(cfg) is not None:  # what the leap made that leaves: not completed here
        e, n_leap_withdrawn = pools.leave(leapt.e, i, cfg)
        withdrawn = advanced.n_withdrawn + n_leap_withdrawn
        leapt = leapt._replace(e=e, n_completed=leapt.n_completed - withdrawn)
    return leapt


def _commit(
    state: SimState, wl: Workload, record: StepRecord, e: Entries, box, stats, i, cfg: EngineConfig
) -> SimState:
    """The new state after instance i's step `record`: its entries `e` and clock written back,
    the outbox `box` and `stats`; done when every request has ended, the scenario stalled or
    the clock passed the stop time."""
    arrived, boundary, leapt = record.iteration.arrived, record.boundary, record.leapt
    clock = state.clock.at[i].set(leapt.t_end)
    t_end, stalled = leapt.t_end, boundary.stalled
    if cfg.n_instances == 1:
        entries = jax.tree.map(lambda one: one[None], e)
    else:  # done when every instance is empty, or every clock passed the stop time
        entries = jax.tree.map(lambda all_, one: all_.at[i].set(one), arrived.entries_all, e)
        t_end = jnp.min(clock)
    all_done = (arrived.next_req + leapt.taken >= wl.n) & jnp.all(entries.status == EMPTY)
    stuck = state.stuck.at[i].set(~boundary.busy & (clock[i] <= arrived.t))
    fleet = state.fleet
    if cfg.autoscale:  # a draining replica whose last request ended goes off; logs
        assert fleet is not None
        fleet, clock = autoscale.retire(fleet, clock, i, e, arrived.t, leapt.t_end)
        t_end = jnp.min(clock)
    if cfg.n_instances > 1:  # every instance idle with nothing to wait for: nothing can move
        stalled = stalled | jnp.all(stuck)
        stats = stats.replace(invariants=statistics.breach(stats.invariants, (STALLED, stalled)))
    return SimState(
        clock=clock,
        entries=entries,
        next_req=arrived.next_req + leapt.taken,
        outbox=box,
        stats=stats,
        done=all_done | stalled | (t_end >= wl.t_stop),
        mid_ended=state.mid_ended.at[i].set(leapt.n_completed),
        mid_blocks=state.mid_blocks.at[i].set(leapt.kv_used),
        stuck=stuck,
        need=state.need,
        offered=async_scheduling.next_offered(
            state.offered, i, boundary.busy, arrived.t, leapt.t_end, cfg
        ),
        fleet=fleet,
    )
