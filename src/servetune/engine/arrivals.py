"""Arrivals: move requests whose arrival time has passed into the instance's queue window."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from servetune.core import ops, relax
from servetune.core.types import (
    DONE,
    EMPTY,
    REJECTED,
    WAITING,
    EngineConfig,
    Entries,
    Params,
    Workload,
)
from servetune.engine import prefix as prefix_lib
from servetune.engine.kv import blocks_for
from servetune.engine.relaxed import shift, swap


def pending_arrivals(next_req, t, wl: Workload, cfg: EngineConfig, search_window=None):
    """[] i32 requests that arrived by t (seconds) and are not yet in an instance, as many as
    one iteration takes in (engine.route_window with several instances)."""
    n_arrived = jnp.minimum(ops.count_at_most(wl.arrival, t, next_req, search_window), wl.n)
    pending = n_arrived.astype(jnp.int32) - next_req
    return pending if cfg.n_instances == 1 else jnp.minimum(pending, cfg.route_window)


def take_arrivals(
    e: Entries,
    t,
    next_req,
    wl: Workload,
    params: Params,
    cfg: EngineConfig,
    search_window: int | None = ops.SEARCH_WINDOW,
):
    """Requests with arrival <= t join the queue in trace order, into free entries.

    Rejected on arrival (vLLM 0.32): a prompt of max_model_len tokens or more (the input
    processor's check); one that finds the API server's caps reached (policy.max_num_queued_reqs
    unfinished requests, or policy.max_num_queued_tokens prompt tokens without a first token:
    HTTP 503); one that finds `queue_cap` requests already waiting (a gateway's cap); one
    that could never fit the KV cache. A sequence reaching max_model_len stops there (vLLM's
    length cap): its output is cut to max_model_len - prompt tokens.
    Arrivals that find no free entry stay outside the window, in order, and enter at a later
    iteration (never dropped).
    Returns (entries, next_req, arrived requests left outside the window, requests arrived by t,
    requests rejected). `search_window`: see ops.count_at_most (None under vmap).
    """
    n_arrived = jnp.minimum(ops.count_at_most(wl.arrival, t, next_req, search_window), wl.n).astype(
        jnp.int32
    )
    pending = n_arrived - next_req
    empty = e.status == EMPTY
    slot_rank = ops.cumsum(empty, dtype=jnp.int32) - 1
    take = empty & (slot_rank < pending)
    n_take = jnp.sum(take, dtype=jnp.int32)
    idx = jnp.clip(next_req + slot_rank, 0, wl.arrival.shape[0] - 1)
    # requests taken are next_req, next_req + 1, ... (fewer than A): read them from one
    # contiguous window of the trace, not by gathering A indices from the whole [N] array
    # (XLA:CPU costs a gather by its operand size and splits big ones across threads)
    n, a = wl.arrival.shape[0], e.req.shape[0]
    if n > a:
        start = jnp.minimum(next_req, n - a)
        local = jnp.clip(idx - start, 0, a - 1)
        read = lambda x: jax.lax.dynamic_slice(x, (start,), (a,))[local]
    else:
        read = lambda x: x[idx]

    pfx = {"prefix": prefix_lib.arrive(e, take, idx, next_req, wl)} if cfg.prefix_cache else {}
    e, n_rejected = fill(e, t, take, idx, read, wl, params, cfg, pfx)
    return e, next_req + n_take, pending - n_take, n_arrived, n_rejected


def _within_caps(e: Entries, ok, ok_rank, prompt, pol, t_known):
    """([A] bool each, in REJECT_* order) arrivals (`ok`, ranked `ok_rank` in trace order)
    within each queue cap, each seeing the ones before it: the gateway's queue_cap on waiting
    requests, and vLLM's API server checks, max_num_queued_reqs on unfinished requests
    (current + 1 > cap is refused) and max_num_queued_tokens on the prompt tokens of requests
    without a first token (refused once they reach the cap). `t_known`: under async scheduling
    the offer time (seconds), after which a first token is not known to the API server yet;
    None otherwise."""
    n_waiting = jnp.sum(e.status == WAITING, dtype=jnp.int32)
    unfinished = jnp.sum((e.status != EMPTY) & (e.status != DONE), dtype=jnp.int32)
    no_output = e.generated == 0
    if t_known is not None:
        no_output = no_output | (e.first_token > t_known)
    prefilling = (e.status != EMPTY) & (e.status != DONE) & no_output
    queued_tokens = jnp.sum(jnp.where(prefilling, e.prompt, 0))
    tokens_before = queued_tokens + ops.cumsum(jnp.where(ok, prompt, 0)) - prompt
    return (
        relax.below(n_waiting + ok_rank, relax.integer_limit(pol.queue_cap)),
        unfinished + ok_rank + 1 <= relax.integer_limit(pol.max_num_queued_reqs),
        tokens_before < relax.integer_limit(pol.max_num_queued_tokens),
    )


def _reject_reason(checks):
    """[A] i32 the REJECT_* code of the first failed check of `checks` (bool [A] each, in
    REJECT_* order; -1 where all pass)."""
    reason = jnp.full(checks[0].shape, -1, jnp.int32)
    for code in reversed(range(len(checks))):  # the first failed check wins
        reason = jnp.where(checks[code], reason, code)
    return reason


def fill(
    e: Entries,
    t,
    take,
    idx,
    read,
    wl: Workload,
    params: Params,
    cfg: EngineConfig,
    extra: dict | None = None,
):
    """Put arriving requests into the entries where `take` [A] holds: entry k gets request
    idx[k], whose fields `read(wl.field)` gives ([A]). Applies the arrival checks (too long,
    never fits, queue caps: rejected). `extra`: the sub-states of mechanisms set up by the
    caller ({"prefix": ...} with prefix caching, {"cascade": ...} with a cascade; otherwise
    they are kept). Returns (entries, rejected count)."""
    prompt = read(wl.prompt)
    output = jnp.minimum(read(wl.output), jnp.maximum(cfg.max_model_len - prompt, 1))
    pol, kv_total = params.policy, params.cost.kv_blocks
    short = prompt < cfg.max_model_len
    fits = blocks_for(jnp.maximum(prompt + output - 1, 1), cfg) <= kv_total
    ok = take & short & fits
    ok_rank = ops.cumsum(ok, dtype=jnp.int32) - 1
    caps = _within_caps(e, ok, ok_rank, prompt, pol, t if cfg.async_scheduling else None)
    accept = ok & caps[0] & caps[1] & caps[2]
    reject = take & ~accept

    nan = jnp.full_like(e.finish, jnp.nan)
    zero = jnp.zeros_like(e.computed)
    sel = lambda new, old: jnp.where(take, new, old)
    e = Entries(
        req=sel(idx, e.req),
        status=jnp.where(accept, WAITING, jnp.where(reject, DONE, e.status)),
        arrival=sel(read(wl.arrival), e.arrival),
        prompt=sel(prompt, e.prompt),
        output=sel(output, e.output),
        predicted=sel(read(wl.predicted), e.predicted),
        computed=sel(zero, e.computed),
        generated=sel(zero, e.generated),
        blocks=sel(zero, e.blocks),
        preempted=sel(jnp.zeros_like(e.preempted), e.preempted),
        n_preempt=sel(zero, e.n_preempt),
        tokens_computed=sel(zero, e.tokens_computed),
        first_token=sel(nan, e.first_token),
        last_emit=sel(nan, e.last_emit),
        finish=sel(jnp.where(reject, t, nan), e.finish),
        end_state=sel(jnp.where(reject, REJECTED, -1), e.end_state),
        # mechanism fields are read only where their mechanism is on (each read is a slice
        # of the trace per iteration); otherwise they keep their initial values
        give_up_at=sel(read(wl.give_up_at), e.give_up_at) if cfg.abandonment else e.give_up_at,
        give_up_state=(
            sel(read(wl.give_up_state), e.give_up_state) if cfg.abandonment else e.give_up_state
        ),
        spec_alpha=sel(read(wl.spec_alpha), e.spec_alpha) if cfg.speculation else e.spec_alpha,
        kv_ratio=(
            sel(jnp.ones_like(e.kv_ratio), e.kv_ratio)
            if cfg.kv_pressure == "compress"
            else e.kv_ratio
        ),
        ready_at=e.ready_at,
        qkey=sel(zero, e.qkey),
        scheduled_at=sel(nan, e.scheduled_at),
        reject_reason=sel(
            jnp.where(reject, _reject_reason((short, fits, *caps)), -1), e.reject_reason
        ),
        priority=(
            sel(read(wl.priority), e.priority)
            if cfg.scheduling_policy == "priority"
            else e.priority
        ),
        relaxed=shift.reset_tape(e.relaxed, take) if cfg.relax != "hard" else None,
        swap=swap.reset_tape(e.swap, take) if cfg.relax_order else None,
        # the prefix and cascade sub-states: what the caller sets up (`extra`)
        **{"prefix": e.prefix, "cascade": e.cascade, **(extra or {})},
    )
    return e, jnp.sum(reject, dtype=jnp.int32)
