"""One iteration of one instance: arrivals -> order -> schedule -> cost -> advance -> retire."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from servetune.core import histogram, ops
from servetune.core.cost import step_time
from servetune.core.types import (
    DONE,
    EMPTY,
    HANDOFF,
    INFLIGHT,
    REJECT_KV_RESERVE,
    RETRY,
    RUNNING,
    WAITING,
    EngineConfig,
    Entries,
    Params,
    PrefixCache,
    SimState,
    Workload,
)
from servetune.engine import cascade, disagg, routing, speculation, timeline
from servetune.engine import outbox as outbox_lib
from servetune.engine import prefix as prefix_lib
from servetune.engine.abandon import abandon, next_give_up
from servetune.engine.advance import advance
from servetune.engine.arrivals import take_arrivals
from servetune.engine.leap import NextArrival, leap, next_arrival_of, takes_arrivals
from servetune.engine.order import priority, scheduling_order
from servetune.engine.relaxed import pace, swap
from servetune.engine.relaxed.shift import admission_shift
from servetune.engine.scheduler import Batch, new_blocks, schedule, token_budget, wanted_tokens


def batch_cost(es, batch, params: Params, cfg: EngineConfig, totals=None):
    """Seconds the iteration lasts, from the roofline or linear cost model. A decode computes
    one token; the positions a speculative decode verifies beyond it count as prefill tokens.
    With speculation the draft model's passes are added (engine/speculation.py). `totals`:
    `batch_totals(es, batch)` when the caller has them."""
    prefill, decode, ctx_read, attn_work = batch_totals(es, batch) if totals is None else totals
    dur = step_time(params.cost, cfg.cost_form, prefill, decode, ctx_read, attn_work)
    if cfg.speculation:
        toks = batch.tokens if batch.weight is None else batch.weight
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
    toks = batch.tokens if batch.weight is None else batch.weight
    attn = toks * (es.computed + (toks + 1) / 2.0)
    if batch.weight is not None:
        # A prompt's relaxed tokens beyond the exact ones are the queue's, not the request's
        # own: a bigger budget's, handed along the queue as debts are repaid (grad/
        # relaxed_batch.py), often from a long prompt's last chunk to a short one's first.
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


def _in_scheduling_order(cfg: EngineConfig):
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


def _occupancy(wl: Workload, t, t_next, n_arrived, ended_by_t, search_window=ops.SEARCH_WINDOW):
    """Integral over [t, t_next) of the requests in the system (arrived, not ended), in
    request-seconds: those present at t for the whole interval, plus each arrival inside it
    from its arrival time on. Requests end only at iteration boundaries."""
    k2 = jnp.minimum(ops.count_at_most(wl.arrival, t_next, n_arrived, search_window), wl.n)
    csum = lambda k: jnp.where(k > 0, wl.arrival_cumsum[jnp.maximum(k - 1, 0)], 0.0)
    inside = (k2 - n_arrived) * t_next - (csum(k2) - csum(n_arrived))
    return (n_arrived - ended_by_t) * (t_next - t) + inside


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
        "t": it.a.t,
        "dur": jnp.where(state.done, 0.0, it.dur),
        "tokens": jnp.where(state.done, 0, it.batch.tokens),
    }
    assert it.adv.batch_req is not None  # the full iteration's
    info["req"] = jnp.where(info["tokens"] > 0, it.adv.batch_req, -1)
    info["preempted"] = jnp.where(it.batch.preempted & ~state.done, it.adv.batch_req, -1)
    return new, info


class Iteration(NamedTuple):
    """What the first iteration of a step did: its arrivals phase `a`, the `batch` it computed
    with the batch's `totals` (batch_totals) and its `dur` (seconds), and the entries after it
    (`adv`). The full step and the simple one (servetune/engine/simple_step.py) both produce it;
    `conclude` finishes the step from it."""

    a: Arrived
    batch: Batch
    totals: tuple
    dur: jnp.ndarray
    adv: Advanced


def iteration(state: SimState, wl: Workload, params: Params, cfg: EngineConfig) -> Iteration:
    """The first iteration of a step of one scenario (unbatched), in full: arrivals, the
    scheduling order (sorted only where it can matter), the schedule, its cost, the advance."""
    a = _arrive(state, wl, params, cfg, ops.SEARCH_WINDOW)
    # the permutation (16 gathers) runs only with the sort; under vmap both branches run
    e = jax.lax.cond(
        a.sort, _in_scheduling_order(cfg), lambda e, t, pol: e, a.e, a.t, params.policy
    )
    return _scheduled_iteration(state, wl, params, cfg, a, e)


class Arrived(NamedTuple):
    """The first phase of an iteration: its start time `t` (seconds), the instance's entries
    after arrivals, and whether the priority order can matter (`sort`)."""

    t: jnp.ndarray
    e: Entries | None  # [A] after arrivals; None once scheduled (conclude does not read it)
    next_req: jnp.ndarray
    outside: jnp.ndarray
    n_arrived: jnp.ndarray
    n_rejected: jnp.ndarray
    sort: jnp.ndarray
    n_abandoned: jnp.ndarray
    entries_all: Entries | None = None  # [I, A] every instance's entries after routing (I > 1)


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


def _arrive(
    state: SimState, wl: Workload, params: Params, cfg: EngineConfig, search_window
) -> Arrived:
    i = next_instance(state, cfg)
    t = state.clock[i]
    entries_all = None
    if cfg.n_instances == 1:
        e = jax.tree.map(lambda x: x[i], state.entries)
        e, next_req, outside, n_arrived, n_rejected = take_arrivals(
            e, t, state.next_req, wl, params, cfg, search_window
        )
    else:  # every arrival by t goes to an instance first, then instance i iterates
        entries_all, next_req, outside, n_arrived, n_rejected = routing.route(
            state, t, wl, params, cfg, search_window
        )
        if cfg.prefill_instances > 0:  # prefilled requests move to decode instances
            entries_all = disagg.hand_off(entries_all, i, t, params.cost, cfg)
        if cfg.cascade_small_instances > 0:  # failed small answers move to the large pool
            entries_all = cascade.fall_back(entries_all, i, t, params.cost, cfg)
        e = jax.tree.map(lambda x: x[i], entries_all)
        if cfg.prefill_instances > 0:
            e = disagg.land(e, t)
        if cfg.cascade_small_instances > 0:
            e = cascade.land(e, t)
    params = _at_instance(params, i, cfg)
    n_abandoned = jnp.zeros_like(n_rejected)
    if cfg.abandonment:  # cancelled and expired requests leave before scheduling
        e, n_abandoned = abandon(e, t)
    sort = order_matters(e, params, cfg) if cfg.lazy_order else jnp.ones_like(t, jnp.bool_)
    return Arrived(t, e, next_req, outside, n_arrived, n_rejected, sort, n_abandoned, entries_all)


def iteration_grid(
    state: SimState, wl: Workload, params: Params, cfg: EngineConfig, active
) -> Iteration:
    """`iteration` over state [S, P], workloads [S], params [P] (scenarios where `active`
    [S, P] is False step too; the caller discards their result).

    Vmapping `step` would sort every scenario in every iteration (its lax.cond becomes a
    select that runs both sides). Here only the scenarios whose order can matter are sorted:
    they are gathered into a block of at most ceil(S x P / 8) rows (all rows when more need
    it; none when none does), sorted and written back.
    """
    a = ops.over_grid(lambda s, w, p: _arrive(s, w, p, cfg, None), "gsp")(state, wl, params)
    n_s, n_p = a.sort.shape
    n = n_s * n_p
    flat = lambda x: x.reshape((n,) + x.shape[2:])
    e, t = jax.tree.map(flat, a.e), flat(a.t)
    pol = jax.tree.map(lambda x: flat(jnp.broadcast_to(x, (n_s,) + x.shape)), params.policy)
    need = flat(a.sort & active)
    permute = jax.vmap(_in_scheduling_order(cfg))
    block = -(-n // 8)

    def some():
        rows = jnp.nonzero(need, size=block, fill_value=n)[0]
        take = lambda x: x[jnp.minimum(rows, n - 1)]
        out = permute(jax.tree.map(take, e), take(t), jax.tree.map(take, pol))
        return jax.tree.map(lambda x, y: x.at[rows].set(y, mode="drop"), e, out)

    def every():
        out = permute(e, t, pol)
        return jax.tree.map(
            lambda x, y: jnp.where(need.reshape((n,) + (1,) * (x.ndim - 1)), y, x), e, out
        )

    count = jnp.sum(need, dtype=jnp.int32)
    which = jnp.where(count == 0, 0, jnp.where(count <= block, 1, 2))
    e = jax.lax.switch(which, (lambda: e, some, every))
    e = jax.tree.map(lambda x: x.reshape((n_s, n_p) + x.shape[1:]), e)
    proceed = lambda s, w, p, a, e: _scheduled_iteration(s, w, p, cfg, a, e)
    return ops.over_grid(proceed, "gspgg")(state, wl, params, a, e)


def conclude_grid(
    state: SimState, wl: Workload, params: Params, cfg: EngineConfig, it: Iteration
) -> SimState:
    """`conclude` over state [S, P], workloads [S], params [P] and iterations [S, P]."""
    finish = lambda s, w, p, it: conclude(s, w, p, cfg, it, None)
    return ops.over_grid(finish, "gspg")(state, wl, params, it)


class _Scheduled(NamedTuple):
    """The schedule phase's result: entries after it, the batch, the instance's prefix cache
    (None without prefix caching) and the KV blocks in use the scheduler saw."""

    e: Entries
    batch: Batch
    pc: PrefixCache | None
    kv_used: jnp.ndarray


class Advanced(NamedTuple):
    """The advance phase's result: entries after the iteration, the inter-token gaps it made
    (values [A], weights), which requests completed [A], how many small answers failed their
    check (cascade), whether prefix-cache insertions are still due, and what the accounting
    needs from before the iteration: the batch's request ids [A], tokens generated [A] and
    running requests."""

    e: Entries
    gaps: jnp.ndarray  # [A] f64 the inter-token gaps the iteration made (seconds)
    completed: jnp.ndarray
    n_retry: jnp.ndarray
    pc: PrefixCache | None
    kv_used: jnp.ndarray
    insertions_due: jnp.ndarray
    batch_req: jnp.ndarray | None  # None from the simple step, whose conclude does not read it
    generated0: jnp.ndarray | None
    n_running: jnp.ndarray


class _Boundary(NamedTuple):
    """When the iteration ran: start `t` and duration `dur` (seconds), the next boundary
    `t_next` (its end, or when an idle instance wakes), whether it did work (`busy`) and
    whether the instance is stuck idle with waiting work (`stalled`)."""

    t: jnp.ndarray
    dur: jnp.ndarray
    t_next: jnp.ndarray
    busy: jnp.ndarray
    stalled: jnp.ndarray


class _Skipped(NamedTuple):
    """The skip phase's result: entries and cache after the run of uniform decode iterations,
    its end time (the iteration's boundary when there is none), iterations K, their summed
    seconds, decode tokens, completions and the gap increments of the whole step."""

    e: Entries
    pc: PrefixCache | None
    t_end: jnp.ndarray
    n_leap: jnp.ndarray
    busy_s: jnp.ndarray | float
    tokens: jnp.ndarray
    n_completed: jnp.ndarray
    kv_used: jnp.ndarray
    gaps: tuple  # (values, weights) of the inter-token gaps
    ctx_read: jnp.ndarray | float  # context tokens the run's iterations read, summed
    early_s: jnp.ndarray | float  # request-seconds the run's completions left before t_end
    taken: jnp.ndarray  # arrivals the run took in (0 or 1)
    prefill_tokens: jnp.ndarray  # prompt tokens the run computed (a taken arrival's)
    attn_work: jnp.ndarray | float  # attention work of the run's iterations
    max_running: jnp.ndarray  # most requests running in one of the run's iterations


def _scheduled_iteration(
    state: SimState, wl: Workload, params: Params, cfg: EngineConfig, a: Arrived, e: Entries
) -> Iteration:
    """The iteration after its arrivals, on entries `e` in scheduling order: schedule, cost,
    advance."""
    i = next_instance(state, cfg)
    params_i = _at_instance(params, i, cfg)
    sched = _schedule_phase(e, state, wl, params_i, cfg, a.t, i)
    dur, totals = _iteration_seconds(sched.e, sched.batch, params_i, cfg)
    adv = _advance_phase(sched, totals, dur, a.t, params_i, cfg, i)
    return Iteration(a, sched.batch, totals, dur, adv)


def conclude(
    state: SimState, wl: Workload, params: Params, cfg: EngineConfig, it: Iteration, search_window
) -> SimState:
    """The end of a step after its first iteration `it`: the next boundary, the run of uniform
    decode iterations that follows, the outbox drain, the statistics and the new state. The
    full step and the simple one (servetune/engine/simple_step.py) share it."""
    a, batch, totals, dur, adv = it
    i = next_instance(state, cfg)
    remote = _remote_horizon(a, state, params, cfg)  # (reads every instance's cost params)
    params = _at_instance(params, i, cfg)
    t = a.t
    busy = jnp.any(batch.tokens > 0) | jnp.any(batch.preempted)  # (a preemption is progress)
    next_arrival = _next_arrival(wl, a.next_req)
    t_next = jnp.where(busy, t + dur, _wake_time(adv.e, state, t, next_arrival, cfg, i))
    when = _Boundary(t, dur, t_next, busy, _stalled(adv.e, busy, cfg))
    limit = _skip_limit(adv, t_next, next_arrival, wl, remote, cfg, i)
    arrival = (
        next_arrival_of(
            wl,
            a.next_req,
            next_arrival,
            jnp.minimum(_next_arrival(wl, a.next_req + 1), wl.t_stop),
            cfg,
        )
        if takes_arrivals(cfg)
        else None
    )
    run = _skip_phase(adv, t_next, limit, params, cfg, i, arrival)
    e, box = outbox_lib.drain(run.e, state.outbox, cfg.drain_per_step)
    stats = _account(
        state, wl, a, batch, adv, run, when, params.cost.kv_blocks, search_window, i, cfg, totals
    )
    new = _commit(state, wl, a, e, box, stats, run, when, i, cfg)
    if cfg.prefix_cache:
        assert state.prefix is not None and run.pc is not None  # on: prefix_cache
        new = new.replace(prefix=prefix_lib.store(state.prefix, run.pc, cfg, i))
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
                run.kv_used,
                stats.preemptions,
            )
        )
    return new


def _remote_horizon(a: Arrived, state: SimState, params: Params, cfg: EngineConfig):
    """[] the earliest time another instance can send this one work (seconds; inf when none):
    a prefill instance's hand-off (disaggregation), a retry from the small pool (cascade).
    Event skipping on a receiving instance stops before it."""
    horizon: jnp.ndarray | float = jnp.inf
    every = a.entries_all  # several instances: routing keeps every instance's entries
    if cfg.prefill_instances > 0:
        assert every is not None
        horizon = jnp.minimum(horizon, disagg.handoff_horizon(every, state.clock, cfg))
    if cfg.cascade_small_instances > 0:  # (needs every instance's cost params)
        assert every is not None
        horizon = jnp.minimum(horizon, cascade.retry_horizon(every, state.clock, params.cost, cfg))
    return horizon


def _schedule_phase(
    e: Entries, state: SimState, wl: Workload, params: Params, cfg: EngineConfig, t, i
) -> _Scheduled:
    """Prefix-cache lookups, the scheduler (engine/scheduler.py), the cache's references and
    evictions, the finish time of requests the scheduler ended, speculative verification."""
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
        scheduled_at=jnp.where((e.status == RUNNING) & jnp.isnan(e.scheduled_at), t, e.scheduled_at)
    )
    if cfg.speculation:
        batch = _verify(e, batch, wl)
    return _Scheduled(e, batch, pc, kv_used)


def _iteration_seconds(e: Entries, batch, params: Params, cfg: EngineConfig):
    """(seconds the iteration lasts, batch_totals). An iteration that only preempted
    (scheduled no token) runs no model step: 0 s, as in vLLM."""
    totals = batch_totals(e, batch)
    only_preempted = jnp.any(batch.preempted) & ~jnp.any(batch.tokens > 0)
    return jnp.where(only_preempted, 0.0, batch_cost(e, batch, params, cfg, totals)), totals


def _advance_phase(
    sched: _Scheduled, totals, dur, t, params: Params, cfg: EngineConfig, i
) -> Advanced:
    """Tokens computed and emitted (engine/advance.py); under a relaxed engine the progress
    and admission shifts that carry the derivative (grad/); then what leaves the instance: a
    prefill instance's prefilled requests, a small model's failed answers; then prefix-cache
    insertions and releases."""
    e, batch, pc = sched.e, sched.batch, sched.pc
    generated0 = e.generated
    n_running = jnp.sum(e.status == RUNNING, dtype=jnp.int32)
    if cfg.relax != "hard":  # what the relaxed progress shifts need from before the iteration
        phase = pace.prefilling(e)
        share_s = pace.share_seconds(batch.tokens, batch.decode, dur)
        spec_s = pace.speculation_gain_s(e, batch.decode, batch.tokens, params, cfg, dur)
    e, gaps, completed = advance(e, batch, t + dur)
    if cfg.relax != "hard":  # progress and admission time shifts, and the events they move
        e = pace.progress_shift(
            e, batch.gain, batch.tokens, phase, batch.preempted, generated0, share_s, spec_s
        )
        e = admission_shift(e, batch, generated0, completed, t, dur)
        if cfg.relax_order:  # the pairs this iteration's admissions and preemption passed over
            e = swap.record(e, batch.admitted, batch.swap_req, batch.swap_p, t)
            e = swap.record_victims(e, batch.victim_of, batch.victim_p, t)
    if cfg.prefill_instances > 0:  # a prefill instance hands prefilled requests on
        e = disagg.to_handoff(e, i, cfg)
    n_retry = jnp.zeros((), jnp.int32)
    if cfg.cascade_small_instances > 0:  # a small answer that fails its check is retried
        e, n_retry = cascade.to_retry(e, i, cfg)
    insertions_due = jnp.asarray(False)
    if cfg.prefix_cache:  # blocks computed enter the cache; completed requests release theirs
        assert pc is not None
        e, pc, insertions_due = prefix_lib.after_advance(e, completed, pc, t + dur, cfg)
    return Advanced(
        e,
        gaps,
        completed,
        n_retry,
        pc,
        sched.kv_used,
        insertions_due,
        sched.e.req,
        generated0,
        n_running,
    )


def _next_arrival(wl: Workload, next_req):
    """[] arrival time (seconds) of the next request not yet taken (inf when none is left)."""
    t = wl.arrival[jnp.minimum(next_req, wl.arrival.shape[0] - 1)]
    return jnp.where(next_req < wl.n, t, jnp.inf)


def _wake_time(e: Entries, state: SimState, t, next_arrival, cfg: EngineConfig, i):
    """When an idle instance iterates next (seconds): the next event that can give it work,
    or t when there is none (the scenario then ends or stalls). One instance: the next
    arrival. Several: also another instance's next boundary (it may route or hand on work),
    and the landing of a request in transit to this one (a hand-off or a retry)."""
    wake = jnp.where(next_arrival > t, next_arrival, jnp.inf)
    if cfg.n_instances > 1:
        others = jnp.where(jnp.arange(cfg.n_instances) != i, state.clock, jnp.inf)
        wake = jnp.minimum(wake, jnp.min(jnp.where(others > t, others, jnp.inf)))
        if cfg.prefill_instances > 0 or cfg.cascade_small_instances > 0:
            landing = disagg.next_landing(e)  # (INFLIGHT: a hand-off or a retry)
            wake = jnp.minimum(wake, jnp.where(landing > t, landing, jnp.inf))
    return jnp.where(jnp.isfinite(wake), wake, t)


def _stalled(e: Entries, busy, cfg: EngineConfig):
    """Idle with waiting work. An empty engine admits any request that passed the arrival
    checks, so this cannot happen; if it ever does, the scenario stops and is flagged rather
    than looping forever. Under disaggregation KV held for a decode instance frees later."""
    stalled = ~busy & jnp.any(e.status == WAITING)
    if cfg.prefill_instances > 0:
        stalled = stalled & ~jnp.any((e.status == HANDOFF) | (e.status == INFLIGHT))
    return stalled


def _skip_limit(adv: Advanced, t_next, next_arrival, wl: Workload, remote, cfg: EngineConfig, i):
    """[] seconds before which a run of uniform decode iterations starting at t_next must
    start each of its iterations: the next arrival and the stop time, and each mechanism's
    next event (a give-up, a landing, a hand-off or retry from another instance, a retry
    produced now, a prefix-cache insertion still due)."""
    e = adv.e
    limit = jnp.minimum(next_arrival, wl.t_stop)
    if cfg.abandonment:  # the iteration that notices a give-up is stepped
        limit = jnp.minimum(limit, next_give_up(e))
    if cfg.prefill_instances > 0 or cfg.cascade_small_instances > 0:  # one that sees a landing
        limit = jnp.minimum(limit, disagg.next_landing(e))
    if cfg.prefill_instances > 0:  # a decode instance: not past a prefill instance's hand-off
        limit = jnp.where(disagg.is_prefill(i, cfg), limit, jnp.minimum(limit, remote))
    if cfg.cascade_small_instances > 0:  # a retry produced now leaves at t_next; a large
        # instance: not past a retry from the small pool
        limit = jnp.where(jnp.any(e.status == RETRY), t_next, limit)
        limit = jnp.where(cascade.is_small(i, cfg), limit, jnp.minimum(limit, remote))
    if cfg.prefix_cache:  # no skipping while cache insertions are still due
        limit = jnp.where(adv.insertions_due, t_next, limit)
    return limit


def _skip_phase(
    adv: Advanced,
    t_next,
    t_limit,
    params: Params,
    cfg: EngineConfig,
    i,
    arrival: NextArrival | None,
) -> _Skipped:
    """The run of uniform decode iterations that follows the iteration, in closed form
    (engine/leap.py; taking in `arrival` on its way where it can), then what the cascade
    retries from it."""
    e, pc, kv_used = adv.e, adv.pc, adv.kv_used
    n_completed = jnp.sum(adv.completed, dtype=jnp.int32)
    zero = jnp.zeros((), jnp.int32)
    if cfg.leap_max > 0 and not cfg.speculation:
        kv_offset = None
        if cfg.prefix_cache:
            assert pc is not None
            kv_offset = prefix_lib.kv_offset(e, pc, cfg)
        run = leap(e, t_next, t_limit, params, cfg, kv_offset, arrival)
        e, t_end, n_leap, leap_blocks = run.e, run.t_end, run.k, run.kv_peak
        if cfg.prefix_cache:
            assert pc is not None
            e, pc, leap_blocks = prefix_lib.after_leap(
                e, run.completed, leap_blocks, pc, t_end, params.cost.kv_blocks, cfg
            )
        kv_used = jnp.where(n_leap > 0, jnp.maximum(kv_used, leap_blocks), kv_used)
        gaps = (
            jnp.concatenate([adv.gaps, run.gaps[0]]),
            jnp.concatenate([jnp.ones_like(adv.gaps), run.gaps[1]]),
        )
        n_completed = n_completed + jnp.sum(run.completed, dtype=jnp.int32)
        skipped = _Skipped(
            e,
            pc,
            t_end,
            n_leap,
            jnp.sum(run.dur),
            run.tokens,
            n_completed,
            kv_used,
            gaps,
            run.ctx_read,
            run.early_s,
            run.taken,
            run.prefill_tokens,
            run.attn_work,
            run.max_running,
        )
    else:
        skipped = _Skipped(
            e,
            pc,
            t_next,
            zero,
            0.0,
            zero,
            n_completed,
            kv_used,
            (adv.gaps, 1.0),
            0.0,
            0.0,
            zero,
            zero,
            0.0,
            zero,
        )
    if cfg.cascade_small_instances > 0:  # retries have not ended: the large pool serves them
        e, n_leap_retry = cascade.to_retry(skipped.e, i, cfg)
        skipped = skipped._replace(
            e=e, n_completed=skipped.n_completed - adv.n_retry - n_leap_retry
        )
    return skipped


def _work(totals, when: _Boundary, run: _Skipped):
    """[4] the step's model work (types.WORK_COLUMNS): the iteration's (none if it computed
    no token) and the skipped run's."""
    prefill, decode, ctx_read, attn_work = totals
    computed = prefill + decode > 0
    f = lambda x: jnp.asarray(x, jnp.float64)
    return jnp.stack(
        [
            f(computed) + run.n_leap,
            f(prefill + decode) + run.tokens + run.prefill_tokens,
            f(ctx_read) + run.ctx_read,
            f(attn_work) + run.attn_work,
        ]
    )


def _account(
    state: SimState,
    wl: Workload,
    a: Arrived,
    batch,
    adv: Advanced,
    run: _Skipped,
    when: _Boundary,
    kv_blocks,
    search_window,
    i,
    cfg: EngineConfig,
    totals,
):
    """The scenario's statistics after the step (types.Stats); `kv_blocks`: the instance's
    KV capacity (blocks); `totals`: the iteration's batch_totals."""
    st, t, t_next = state.stats, when.t, when.t_next
    ended_by_t = st.ended + a.n_rejected + a.n_abandoned + jnp.sum(batch.ended, dtype=jnp.int32)
    if cfg.n_instances == 1:  # requests completed by the first iteration leave at t_next
        occupancy = (
            _occupancy(wl, t, run.t_end, a.n_arrived, ended_by_t, search_window)
            - jnp.sum(adv.completed) * (run.t_end - t_next)
            - run.early_s
        )
    else:  # instances' iterations overlap in time: the host integrates it (metrics.py)
        occupancy = 0.0
    stats = st.replace(
        steps=st.steps + when.busy.astype(jnp.int32) + run.n_leap,
        leaped=st.leaped + run.n_leap,
        busy_s=st.busy_s.at[i].add(when.dur + run.busy_s),
        kv_peak_blocks=st.kv_peak_blocks.at[i].max(run.kv_used),
        kv_overflow=st.kv_overflow.at[i].max(run.kv_used > kv_blocks),
        clock_regress=st.clock_regress.at[i].max((t_next < t) | (run.t_end < t_next)),
        preemptions=st.preemptions + jnp.sum(batch.preempted, dtype=jnp.int32),
        prefill_tokens=(
            st.prefill_tokens
            + jnp.sum(jnp.where(batch.decode, 0, batch.tokens))
            + run.prefill_tokens
        ),
        decode_tokens=(
            st.decode_tokens + jnp.sum(jnp.where(batch.decode, batch.tokens, 0)) + run.tokens
        ),
        window_overflow=jnp.maximum(st.window_overflow, a.outside),
        max_running=st.max_running.at[i].max(jnp.maximum(adv.n_running, run.max_running)),
        occupancy_s=st.occupancy_s + occupancy,
        ended=ended_by_t + run.n_completed,
        slot_bound=st.slot_bound + batch.slot_bound.astype(jnp.int32),
        stalled=st.stalled | when.stalled,
        itl_hist=histogram.add(st.itl_hist, *run.gaps),
        work=(
            st.work + _work(totals, when, run)
            if cfg.n_instances == 1
            else st.work.at[i].add(_work(totals, when, run))
        ),
    )
    if cfg.speculation:
        drafted = batch.decode & (batch.tokens > 1)
        assert adv.generated0 is not None  # the full iteration's (no simple step here)
        emitted = jnp.where(drafted, adv.e.generated - adv.generated0, 0)
        stats = stats.replace(
            spec_passes=st.spec_passes + jnp.sum(drafted),
            spec_proposed=st.spec_proposed + jnp.sum(jnp.where(drafted, batch.tokens - 1, 0)),
            spec_accepted=st.spec_accepted + jnp.sum(jnp.where(drafted, batch.accepted, 0)),
            spec_emitted=st.spec_emitted + jnp.sum(emitted),
        )
    return stats


def _commit(
    state: SimState,
    wl: Workload,
    a: Arrived,
    e: Entries,
    box,
    stats,
    run: _Skipped,
    when: _Boundary,
    i,
    cfg: EngineConfig,
) -> SimState:
    """The new state: instance i's entries and clock written back, done when every request
    has ended, the scenario stalled or the clock passed the stop time."""
    clock = state.clock.at[i].set(run.t_end)
    t_end, stalled = run.t_end, when.stalled
    if cfg.n_instances == 1:
        entries = jax.tree.map(lambda one: one[None], e)
    else:  # done when every instance is empty, or every clock passed the stop time
        entries = jax.tree.map(lambda all_, one: all_.at[i].set(one), a.entries_all, e)
        t_end = jnp.min(clock)
    all_done = (a.next_req + run.taken >= wl.n) & jnp.all(entries.status == EMPTY)
    stuck = state.stuck.at[i].set(~when.busy & (clock[i] <= a.t))
    if cfg.n_instances > 1:  # every instance idle with nothing to wait for: nothing can move
        stalled = stalled | jnp.all(stuck)
        stats = stats.replace(stalled=stats.stalled | stalled)
    return SimState(
        clock=clock,
        entries=entries,
        next_req=a.next_req + run.taken,
        outbox=box,
        stats=stats,
        done=all_done | stalled | (t_end >= wl.t_stop),
        mid_ended=state.mid_ended.at[i].set(run.n_completed),
        mid_blocks=state.mid_blocks.at[i].set(run.kv_used),
        stuck=stuck,
        need=state.need,
    )
