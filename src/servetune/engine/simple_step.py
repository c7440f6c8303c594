"""The simple step: one iteration where nothing but decodes and at most one arrival, admitted
at once with its whole prompt, can happen, computed without the scheduler's machinery.

Most loop bodies of a real trace are such iterations (benchmarks/README.md: about 98% of the Azure
conversation hour's): every running request is decoding, nobody waits, and the arrival (if any)
passes its checks and fits the sequence cap, the token budget, its prefill cap and the KV blocks
above the watermark. The full step (servetune/engine/step.py) then sorts nothing, preempts nothing,
and admits that arrival as its only waiting request; the simple step writes the same outcome
directly (no prefix sums, no sort, no admission pass) and hands it to the same `step.conclude` (the
run of decode iterations that follows, the drain, the statistics), compiled once for both. Where any
condition fails, the full iteration runs. `tests/properties/test_equivalence.py` holds the two to
identical records.

One scenario takes one branch of a `lax.cond`. A grid of scenarios (engine/grid.py) takes the
simple iteration for all its scenarios when every one that is active qualifies, else the full
one for all (under vmap a `cond` would run both).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from servetune.core import ops
from servetune.core.types import (
    EMPTY,
    RUNNING,
    WAITING,
    EngineConfig,
    Entries,
    Params,
    SimState,
    Workload,
)
from servetune.engine.advance import advance
from servetune.engine.arrivals import pending_arrivals
from servetune.engine.kv import blocks_for
from servetune.engine.leap import NextArrival, admit, admits_whole, next_arrival_of, takes_arrivals
from servetune.engine.phases import Advanced, Arrived, Iteration
from servetune.engine.scheduler import Batch, pending_tokens, token_budget
from servetune.engine.step import (
    batch_cost,
    batch_totals,
    conclude,
    iteration,
    step,
)


def applies(cfg: EngineConfig) -> bool:
    """Whether a simple step can exist under `cfg` (static): where a run of decodes may take
    an arrival in (engine/leap.takes_arrivals: one instance, continuous batching, preemption
    under KV pressure, no mechanism that acts inside an iteration), the same conditions, so
    the two cannot drift apart."""
    return cfg.fast_path and takes_arrivals(cfg)


class Plan(NamedTuple):
    """What the next iteration of a one-instance scenario would do, if it is simple."""

    ok: jnp.ndarray  # [] bool the iteration is simple
    take: jnp.ndarray  # [] bool it takes one arrival in (and admits it)
    slot: jnp.ndarray  # [] i32 the entry the arrival takes (the first empty one)
    grow: jnp.ndarray  # [A] i32 KV blocks each running request adds for its decode token
    arrival: NextArrival  # the next request of the trace (taken in where `take`)


def plan(
    state: SimState,
    wl: Workload,
    params: Params,
    cfg: EngineConfig,
    search_window: int | None = ops.SEARCH_WINDOW,
) -> Plan:
    """Whether the next iteration of one scenario (unbatched) is simple, and its arrival: the
    conditions under which the full step's arrival checks accept it and its scheduler keeps
    every running request and admits it whole (engine/arrivals.py, engine/scheduler.py).
    `search_window`: see ops.count_at_most (None under vmap)."""
    e = jax.tree.map(lambda x: x[0], state.entries)
    t, r = state.clock[0], state.next_req
    running = e.status == RUNNING
    n = jnp.sum(running, dtype=jnp.int32)
    pending = pending_arrivals(r, t, wl, cfg, search_window)
    take = pending == 1
    budget = token_budget(params.policy, cfg)
    grow = jnp.where(running, jnp.maximum(blocks_for(e.computed + 1, cfg) - e.blocks, 0), 0)
    free_after = params.cost.kv_blocks - jnp.sum(e.blocks) - jnp.sum(grow)
    decoding = jnp.all(~running | ((pending_tokens(e) == 1) & (e.generated > 0)))
    ok = (
        decoding
        & ~jnp.any(e.status == WAITING)
        & (pending <= 1)
        & (n <= budget)
        & (free_after >= 0)
    )
    arrival = next_arrival_of(
        wl, r, wl.arrival[jnp.clip(r, 0, wl.arrival.shape[0] - 1)], wl.t_stop, cfg
    )
    empty = e.status == EMPTY
    ok = ok & (
        ~take
        | (
            admits_whole(arrival.prompt, arrival.output, n, free_after, params, cfg)
            & jnp.any(empty)
        )
    )
    return Plan(ok, take, jnp.argmax(empty).astype(jnp.int32), grow, arrival)


def _arrival(e: Entries, pl: Plan, t, cfg: EngineConfig) -> Entries:
    """Entries with the arrival (if the plan takes one) in its slot, as engine/arrivals.fill
    puts an accepted request there, already admitted (RUNNING from t, seconds) at the end of
    vLLM's running list."""
    at = (jnp.arange(e.req.shape[0]) == pl.slot) & pl.take
    last = jnp.maximum(jnp.max(jnp.where(e.status == RUNNING, e.qkey, 0)), 0)
    return admit(
        e,
        at,
        pl.arrival,
        status=RUNNING,
        computed=0,
        generated=0,
        tokens_computed=0,
        first_token=jnp.nan,
        last_emit=jnp.nan,
        finish=jnp.nan,
        end_state=-1,
        qkey=last + 1,
        scheduled_at=t,
        blocks=blocks_for(pl.arrival.prompt, cfg),
    )


def simple_iteration(
    state: SimState, wl: Workload, params: Params, cfg: EngineConfig, pl: Plan
) -> Iteration:
    """The first iteration of a step of one scenario whose next iteration is simple
    (`pl.ok`), as the full step computes it (`step.iteration`), written directly."""
    e = jax.tree.map(lambda x: x[0], state.entries)
    t = state.clock[0]
    running = e.status == RUNNING
    e = e.replace(blocks=e.blocks + pl.grow)
    e = _arrival(e, pl, t, cfg)
    new = (e.status == RUNNING) & ~running  # the arrival, admitted
    tokens = jnp.where(running, 1, jnp.where(new, e.prompt, 0))
    batch = Batch(
        tokens=tokens,
        decode=running,
        preempted=jnp.zeros_like(running),
        slot_bound=jnp.asarray(False),
        ended=jnp.zeros_like(running),
    )
    totals = batch_totals(e, batch)
    dur = batch_cost(e, batch, params, cfg, totals)
    after, gaps, complete = advance(e, batch, dur + t)
    take = pl.take.astype(jnp.int32)
    zero = jnp.zeros_like(take)
    n = jnp.sum(running, dtype=jnp.int32)
    advanced = Advanced(
        after,
        gaps,
        complete,
        zero,
        None,
        jnp.sum(e.blocks, dtype=jnp.int32),
        jnp.asarray(False),
        None,
        None,
        n + take,
        jnp.asarray(False),
    )
    next_req = state.next_req + take
    arrived = Arrived(t, None, next_req, zero, next_req, zero, jnp.asarray(False), zero, t_plan=t)
    return Iteration(arrived, batch, totals, dur, advanced)


def lean(it: Iteration) -> Iteration:
    """`it` without what `step.conclude` does not read (so a branch does not pass it on): the
    entries after arrivals, the batch's request ids and the tokens generated before it."""
    return it._replace(
        arrived=it.arrived._replace(e=None),
        advanced=it.advanced._replace(batch_req=None, generated0=None),
    )


def iterate(state: SimState, wl: Workload, params: Params, cfg: EngineConfig) -> SimState:
    """One loop body of one scenario: the simple first iteration where it applies, else the
    full one, then `step.conclude`."""
    if not applies(cfg):
        return step(state, wl, params, cfg)
    pl = plan(state, wl, params, cfg)
    it = jax.lax.cond(
        pl.ok,
        lambda s: simple_iteration(s, wl, params, cfg, pl),
        lambda s: lean(iteration(s, wl, params, cfg)),
        state,
    )
    return counted(conclude(state, wl, params, cfg, it, ops.SEARCH_WINDOW), pl.ok)


def counted(state: SimState, simple) -> SimState:
    """`state` with a loop body counted in Stats.simple where `simple` [] holds."""
    return state.replace(
        stats=state.stats.replace(
            simple=state.stats.simple + simple.astype(state.stats.simple.dtype)
        )
    )
