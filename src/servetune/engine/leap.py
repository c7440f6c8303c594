"""The leap: a run of uniform decode iterations advanced in closed form (what event-driven
simulators call event skipping).

Between events (an arrival, an admission, a prefill chunk, KV pressure) every iteration of an
instance is alike: each running request decodes one token, nobody is admitted or preempted,
and only the context lengths grow, by one token per request per iteration. `leap` applies K
such iterations at once, with what single stepping would produce: the same token counts, KV
blocks, completion and emission times (up to float rounding of the summed durations) and
statistics. K stops before the first iteration that would start at or after the next arrival
or the stop time, before KV blocks could run short, and at `engine.leap_max` (the length of
the vector the durations are computed on). A completion stops it only where an admission
could follow (a request waits) or a mechanism reacts to it (`crosses_completions`);
otherwise each request leaves at its own last iteration and the run goes on with the rest.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from servetune.core import histogram, ops, relax
from servetune.core.cost import step_time
from servetune.core.types import (
    COMPLETED,
    DONE,
    EMPTY,
    RUNNING,
    WAITING,
    EngineConfig,
    Entries,
    Params,
    Workload,
)
from servetune.engine import pressure
from servetune.engine.kv import blocks_for
from servetune.engine.outbox import retire
from servetune.engine.scheduler import (
    admission_cap,
    full_sequence_blocks,
    pending_tokens,
    prefill_cap,
    token_budget,
    watermark_blocks,
)


def _admission_blocked(
    e: Entries, n_running, budget, free, params: Params, cfg: EngineConfig, prefix: bool = False
):
    """True when no waiting request can be admitted in any iteration of the run: the sequence
    cap binds (it cannot loosen without a completion), or static batching holds the batch, or
    none fits as the first admission (no budget left, or too few KV blocks above the watermark
    for its first chunk, or its whole sequence with engine.scheduler_reserve_full_isl; free
    blocks only shrink as the run goes on). Requests held back only by engine.max_slots
    are not covered (those iterations are counted by the stepping path)."""
    waiting = e.status == WAITING
    if cfg.batching == "static":  # the batch is held while anything runs
        return jnp.asarray(True)
    if cfg.kv_pressure == "reject":  # a waiting request may be turned away at any boundary
        return ~jnp.any(waiting)
    pol = params.policy
    seq_cap = ~relax.below(0, admission_cap(pol) - n_running)
    budget_left = budget - n_running
    need_w = jnp.minimum(
        e.prompt + e.generated, prefill_cap(pol, budget, n_running + jnp.sum(waiting), cfg)
    )
    if prefix:  # a cache hit can leave as little as 1 token to compute: assume it does
        need_w = jnp.minimum(need_w, 1)
    chunk = (
        jnp.minimum(need_w, budget_left)
        if cfg.chunked_prefill
        else jnp.where(need_w <= budget_left, need_w, 0)
    )
    want = blocks_for(jnp.maximum(chunk, 0), cfg)
    if cfg.scheduler_reserve_full_isl and not prefix:
        want = jnp.maximum(want, full_sequence_blocks(e, cfg))
    room = free - watermark_blocks(pol, params.cost.kv_blocks)  # requests run: it holds
    fits = (chunk > 0) & relax.at_most(want, room)
    return ~jnp.any(waiting) | seq_cap | ~jnp.any(waiting & fits)


class Run(NamedTuple):
    """A run of uniform decode iterations applied in closed form (`leap`). K = 0: nothing
    changed (`e` as given, `t_end` the start)."""

    e: Entries  # entries after the run (its completions retired)
    t_end: jnp.ndarray  # [] f64 end of its last iteration (seconds)
    k: jnp.ndarray  # [] i32 iterations K
    dur: jnp.ndarray  # [L] f64 seconds of each iteration (0 past K)
    gaps: tuple  # inter-token gap increments: (values [A + L] s, weights [A + L])
    kv_peak: jnp.ndarray  # [] i32 most KV blocks in use in one of its iterations
    completed: jnp.ndarray  # [A] bool requests it completed
    ctx_read: jnp.ndarray  # [] f64 context tokens its iterations read, summed
    tokens: jnp.ndarray  # [] i32 decode tokens it computed
    early_s: jnp.ndarray  # [] f64 request-seconds its completions left before t_end (the
    #                       occupancy they no longer hold: sum of t_end - finish)
    taken: jnp.ndarray  # [] i32 arrivals it took in (0 or 1; `NextArrival`)
    prefill_tokens: jnp.ndarray  # [] i32 prompt tokens it computed (a taken arrival's)
    attn_work: jnp.ndarray  # [] f64 attention work of its iterations (new tokens x context)
    max_running: jnp.ndarray  # [] i32 most requests running in one of its iterations


class NextArrival(NamedTuple):
    """The next request of the trace, which a run may take in on its way (`leap`): admitted
    at once, its whole prompt in the first iteration that starts at or after its arrival."""

    req: jnp.ndarray  # [] i32 its index in the workload
    at: jnp.ndarray  # [] f64 its arrival time (seconds; inf when none is left)
    prompt: jnp.ndarray  # [] i32 prompt tokens
    output: jnp.ndarray  # [] i32 output tokens (cut at max_model_len)
    predicted: jnp.ndarray  # [] f64 predicted output tokens
    priority: jnp.ndarray | None  # [] i32 its fixed priority (scheduling_policy priority)
    t_limit: jnp.ndarray  # [] f64 what bounds the run's starts once it is taken in (the
    #                       arrival after it, the stop time; seconds)


def next_arrival_of(wl: Workload, next_req, at, t_limit, cfg: EngineConfig) -> NextArrival:
    """The trace's request `next_req` (arriving at `at`, seconds) as NextArrival: its output
    cut at max_model_len as the arrival step cuts it, `t_limit` the run's limit once taken."""
    idx = jnp.clip(next_req, 0, wl.arrival.shape[0] - 1)
    prompt = wl.prompt[idx]
    priority = None
    if cfg.scheduling_policy == "priority":
        assert wl.priority is not None  # the builder sets it under the priority policy
        priority = wl.priority[idx]
    return NextArrival(
        req=next_req,
        at=at,
        prompt=prompt,
        output=jnp.minimum(wl.output[idx], jnp.maximum(cfg.max_model_len - prompt, 1)),
        predicted=wl.predicted[idx],
        priority=priority,
        t_limit=t_limit,
    )


def admit(e: Entries, slot, arrival: NextArrival, **fields) -> Entries:
    """Entries with `arrival` written into the entry `slot` [A] bool marks, as an accepted and
    admitted request: its trace fields, never preempted or rejected, and `fields` (entry
    field -> value) for where it stands now (status, tokens, times, queue key, blocks)."""
    put = lambda new, old: jnp.where(slot, new, old)
    written = dict(
        req=arrival.req,
        arrival=arrival.at,
        prompt=arrival.prompt,
        output=arrival.output,
        predicted=arrival.predicted,
        preempted=False,
        n_preempt=0,
        reject_reason=-1,
        **fields,
    )
    if arrival.priority is not None:
        written["priority"] = arrival.priority
    return e.replace(**{k: put(v, getattr(e, k)) for k, v in written.items()})


def crosses_completions(cfg: EngineConfig) -> bool:
    """Whether a run may go on past a completion when nobody waits (static): one instance and
    no mechanism that reacts to a completion inside the run (a prefix cache's release, a
    cascade's retry, a router's or a hand-off's view of the instance)."""
    return (
        cfg.n_instances == 1
        and not cfg.prefix_cache
        and cfg.cascade_small_instances == 0
        and cfg.prefill_instances == 0
    )


def takes_arrivals(cfg: EngineConfig) -> bool:
    """Whether a run may take in the next arrival (static): where it crosses completions, with
    continuous batching, preemption as the KV policy and no mechanism acting on an arrival or
    inside an iteration (speculation, abandonment, a relaxed engine, a timeline)."""
    return (
        crosses_completions(cfg)
        and cfg.batching == "continuous"
        and cfg.kv_pressure == "preempt"
        and not cfg.speculation
        and not cfg.abandonment
        and cfg.relax == "hard"
        and cfg.timeline_samples == 0
        and not steps_every_iteration(cfg)
    )


def steps_every_iteration(cfg: EngineConfig) -> bool:
    """Whether every iteration is stepped, with no leap and no simple step (static): under
    async scheduling (an iteration's plan sees the one before it in flight,
    engine/async_scheduling.py) and with a stream interval above 1 (the client's chunks
    follow each request's own token count, engine/advance.sends)."""
    return cfg.async_scheduling or cfg.stream_interval > 1


class _Pass(NamedTuple):
    """The per-iteration figures of a run [L]: decodes, context read, prompt tokens, seconds,
    ends relative to its start, and how many iterations the limits allow."""

    n_j: jnp.ndarray
    ctx: jnp.ndarray
    prefill: jnp.ndarray
    dur: jnp.ndarray
    ends: jnp.ndarray
    k: jnp.ndarray


def _profile(e: Entries, running, left, ratio, cfg: EngineConfig):
    """Per iteration j of a run [L] in which each running request decodes until its output is
    complete (`left` [A] more tokens): the requests decoding (i32), the context tokens they
    read (f64), and the KV blocks held (i32: theirs, each with its token of j, plus every
    other entry's).

    From events rather than an [A, L] table (under vmap that table was a batch's whole cost):
    each request's last iteration and each block boundary its context crosses are scattered
    into per-iteration bins, whose prefix sums (one dot for all three) give the figures. A
    compressed KV (engine.kv_pressure=compress) crosses boundaries irregularly: the table."""
    L, bs = cfg.leap_max, cfg.block_size
    j = jnp.arange(L)
    other = jnp.sum(jnp.where(running, 0, e.blocks), dtype=jnp.int32)
    if ratio is not None:
        part = running[:, None] & (j[None, :] < left[:, None])  # [A, L] decodes in j
        n_j = jnp.sum(part, axis=0, dtype=jnp.int32)
        ctx = jnp.sum(jnp.where(part, (e.computed[:, None] + j).astype(jnp.float64), 0.0), axis=0)
        held = jnp.sum(
            jnp.where(part, blocks_for(e.computed[:, None] + j + 1, cfg, ratio[:, None]), 0),
            axis=0,
            dtype=jnp.int32,
        )
        return n_j, ctx, held + other
    computed = jnp.where(running, e.computed, 0)
    end = jnp.where(running, jnp.minimum(left, L), L)  # [A] the first iteration it is done by
    # at its end: a decode, its context and its blocks (as of its last iteration) leave
    leaving = jnp.stack(
        [jnp.ones_like(computed), computed, -blocks_for(computed + end, cfg)]
    ).astype(jnp.float64)
    bins = (
        jnp.zeros((3, L + 1), jnp.float64)
        .at[jnp.arange(3)[:, None], jnp.broadcast_to(end, leaving.shape)]
        .add(jnp.where(running, leaving, 0.0))
    )
    if cfg.kv_layout == "paged":  # a block more at each boundary its context reaches
        first = bs - computed % bs  # [A] first j > 0 with (computed + j) % bs == 0
        at = first[:, None] + bs * jnp.arange(L // bs + 1)  # [A, M]
        grows = running[:, None] & (at < end[:, None])
        bins = bins.at[2, jnp.where(grows, at, L)].add(grows.astype(jnp.float64))
    cum = ops.float_cumsum(bins[:, :L])  # [3, L] the events of iterations 0..j
    n_j = jnp.sum(running, dtype=jnp.int32) - cum[0].astype(jnp.int32)
    ctx = jnp.sum(computed).astype(jnp.float64) - cum[1] + j * n_j
    start_blocks = jnp.sum(jnp.where(running, blocks_for(computed + 1, cfg), 0), dtype=jnp.int32)
    return n_j, ctx, start_blocks + cum[2].astype(jnp.int32) + other


def _durations(n_j, ctx, prefill, attn_extra, params: Params, cfg: EngineConfig):
    """[L] seconds of iterations with `n_j` decodes reading `ctx` context tokens and `prefill`
    prompt tokens whose attention work is `attn_extra` (tokens^2), and their ends [L]."""
    dur = step_time(params.cost, cfg.cost_form, prefill, n_j, ctx, ctx + n_j + attn_extra)
    return dur, ops.float_cumsum(dur)  # one kernel for the prefix sum (L <= 1,024)


def _count_before(t, ends, dur, limit):
    """[] i32 iterations of a run starting at t (seconds) that start before `limit`."""
    return jnp.sum(t + (ends - dur) < limit, dtype=jnp.int32)


def admits_whole(prompt, output, n_running, free, params: Params, cfg: EngineConfig):
    """[] bool: a request of `prompt` and `output` tokens, arriving while nobody waits and
    `n_running` requests decode, passes the full step's arrival checks (engine/arrivals.py:
    under max_model_len, could ever fit the KV cache, the gateway's and API server's caps)
    and is admitted at once with its whole prompt in one chunk (engine/scheduler.py: the
    sequence cap, the token budget, its prefill cap, max_slots, and its blocks within the
    `free` ones left after the decodes took theirs, above the watermark while anyone runs).
    The one rule the simple step and a run that takes an arrival in share."""
    pol, kv_total = params.policy, params.cost.kv_blocks
    budget = token_budget(pol, cfg)
    watermark = jnp.where(n_running > 0, watermark_blocks(pol, kv_total), 0)
    accepted = (
        (prompt > 0)
        & (prompt < cfg.max_model_len)
        & (blocks_for(jnp.maximum(prompt + output - 1, 1), cfg) <= kv_total)
        & relax.below(0, relax.integer_limit(pol.queue_cap))
        & (n_running + 1 <= relax.integer_limit(pol.max_num_queued_reqs))
        & (0 < relax.integer_limit(pol.max_num_queued_tokens))
    )
    return (
        accepted
        & (prompt <= prefill_cap(pol, budget, n_running + 1, cfg))
        & (prompt <= budget - n_running)
        & relax.below(0, admission_cap(pol) - n_running)
        & (n_running < cfg.max_slots)
        & relax.at_most(blocks_for(prompt, cfg), free - watermark)
    )


def _take_arrival(
    e: Entries,
    run: _Pass,
    held,
    t,
    arrival: NextArrival,
    k_other,
    free,
    params: Params,
    cfg: EngineConfig,
):
    """Whether the run takes `arrival` in, in which iteration (j2), and the run with it.

    It is taken in where the full step would admit it whole at the start of iteration j2 (the
    first to start at or after it): it passes its arrival checks, someone still runs then,
    nobody waits, and the sequence cap, the token budget, its prefill cap and the KV blocks
    above the watermark (after that iteration's decodes took theirs) all let it in."""
    L, kv_total = cfg.leap_max, params.cost.kv_blocks
    j = jnp.arange(L)
    j2 = _count_before(t, run.ends, run.dur, arrival.at)
    at = jnp.minimum(j2, L - 1)
    n2 = run.n_j[at]  # requests decoding in iteration j2
    p, o = arrival.prompt, arrival.output
    admitted = (
        (j2 < k_other)
        & (n2 > 0)
        & jnp.any(e.status == EMPTY)
        & admits_whole(p, o, n2, kv_total - held[at], params, cfg)
    )
    decodes = (j > j2) & (j < j2 + o)  # its decodes after its prefill iteration
    n_j = run.n_j + decodes
    ctx = run.ctx + jnp.where(decodes, (p - j2 - 1 + j).astype(jnp.float64), 0.0)
    prefill = jnp.where(j == j2, p, 0)
    attn = jnp.where(j == j2, p * (p + 1) / 2.0, 0.0)
    dur, ends = _durations(n_j, ctx, prefill, attn, params, cfg)
    # its KV: the prompt's blocks, then one more token per decode (completions only free)
    k_kv = (
        L
        if cfg.kv_layout == "contiguous"
        else cfg.block_size * ((free - blocks_for(p, cfg)) // jnp.maximum(n2 + 1, 1))
    )
    k = jnp.minimum(
        jnp.minimum(_count_before(t, ends, dur, arrival.t_limit), k_other), jnp.minimum(k_kv, L)
    ).astype(jnp.int32)
    return admitted, j2, _Pass(n_j, ctx, prefill, dur, ends, k), attn


def _bounds(e: Entries, running, left, params: Params, cfg: EngineConfig, kv_offset):
    """What bounds a run but time: (free KV blocks, whether nobody waits, the iterations to
    the completion that ends it, the iterations KV blocks and engine.leap_max allow: 0 unless
    the iterations are uniform decodes nobody can join). `left` [A]: tokens
    to each running request's completion."""
    L = cfg.leap_max
    n = jnp.sum(running, dtype=jnp.int32)
    budget = token_budget(params.policy, cfg)
    free = params.cost.kv_blocks - jnp.sum(e.blocks)
    if kv_offset is not None:
        free = free - kv_offset
    uniform = (
        jnp.all(~running | ((pending_tokens(e) == 1) & (e.generated > 0)))
        & (n > 0)
        & (n <= budget)
        & _admission_blocked(e, n, budget, free, params, cfg, kv_offset is not None)
    )
    first_done = jnp.min(jnp.where(running, left, L))
    nobody_waits = ~jnp.any(e.status == WAITING)
    if crosses_completions(cfg):
        k_done = jnp.where(nobody_waits, jnp.max(left), first_done)
    else:
        k_done = first_done
    # paged KV: a request crosses at most ceil(K / block_size) block boundaries in K tokens
    # (completions only free blocks)
    k_kv = L if cfg.kv_layout == "contiguous" else cfg.block_size * (free // jnp.maximum(n, 1))
    return free, nobody_waits, k_done, jnp.where(uniform, jnp.minimum(k_kv, L), 0)


def _advance(e: Entries, run: _Pass, grow, left, ratio, t, t_end, cfg: EngineConfig):
    """The entries after the run's first run.k iterations, each request in it (`grow` [A])
    decoding until the run ends or its output is complete (then retired at its last
    iteration's end, seconds): (entries, completed [A] bool, tokens decoded)."""
    steps = jnp.where(grow, jnp.minimum(run.k, left), 0)  # [A] iterations each request decodes
    complete = grow & (steps >= left)
    finish = t + run.ends[jnp.clip(steps - 1, 0, cfg.leap_max - 1)]  # [A] last iteration's end
    computed = e.computed + steps
    e = e.replace(
        computed=computed,
        generated=e.generated + steps,
        tokens_computed=e.tokens_computed + steps,
        last_emit=jnp.where(grow, jnp.where(complete, finish, t_end), e.last_emit),
        blocks=jnp.where(grow, blocks_for(computed, cfg, ratio), e.blocks),
    )
    return retire(e, complete, COMPLETED, finish), complete, jnp.sum(steps, dtype=jnp.int32)


def leap(
    e: Entries,
    t,
    t_limit,
    params: Params,
    cfg: EngineConfig,
    kv_offset=None,
    arrival: NextArrival | None = None,
) -> Run:
    """Apply the longest run of uniform decode iterations starting at t (seconds) whose
    iterations all start before t_limit (the next arrival or the stop time).

    Each running request decodes one token per iteration until its output is complete. While
    a request waits the run stops at the first completion (an admission may follow it); with
    nobody waiting (and `crosses_completions`) it goes on, each request leaving at its own
    completion, the later iterations shorter by the requests that left.
    `kv_offset`: with prefix caching, blocks in use beyond sum(e.blocks) (engine/prefix.py).
    `arrival` (`takes_arrivals` only): the next request, which the run takes in where the full
    step would admit it whole (`_take_arrival`), then goes on to `arrival.t_limit`.
    """
    L = cfg.leap_max
    running = e.status == RUNNING
    left = jnp.where(running, e.output - e.generated, 0)  # [A] tokens to each completion
    free, nobody_waits, k_done, k_other = _bounds(e, running, left, params, cfg, kv_offset)
    ratio = pressure.ratio(e, cfg)
    j = jnp.arange(L)
    n_j, ctx, held = _profile(e, running, left, ratio, cfg)
    dur, ends = _durations(n_j, ctx, 0, 0.0, params, cfg)
    k = jnp.minimum(jnp.minimum(_count_before(t, ends, dur, t_limit), k_done), k_other)
    run = _Pass(n_j, ctx, jnp.zeros_like(n_j), dur, ends, jnp.maximum(k, 0).astype(jnp.int32))
    attn = jnp.zeros_like(ctx)  # [L] attention work beyond the decodes' (a taken prompt's)
    take, j2 = jnp.asarray(False), jnp.zeros((), jnp.int32)
    if arrival is not None:
        k_with = jnp.where(nobody_waits, k_other, 0)
        take, j2, with_it, attn_with = _take_arrival(
            e, run, held, t, arrival, k_with, free, params, cfg
        )
        with_it = with_it._replace(
            k=jnp.minimum(with_it.k, jnp.maximum(k_done, j2 + arrival.output))
        )
        take = take & (with_it.k > j2)  # its prefill iteration is in the run
        run = jax.tree.map(lambda a, b: jnp.where(take, a, b), with_it, run)
        attn = jnp.where(take, attn_with, attn)
        held = held + jnp.where(
            take & (j >= j2) & (j < j2 + arrival.output),
            blocks_for(arrival.prompt + j - j2, cfg),
            0,
        )
        # its place in vLLM's running list: after every request still running in iteration j2
        queue = jnp.max(jnp.where(running & (left > j2), e.qkey, 0))
    k = run.k
    t_end = t + jnp.where(k > 0, run.ends[jnp.maximum(k - 1, 0)], 0.0)
    grow = running & (k > 0)
    in_run = j < k
    kv_peak = jnp.max(jnp.where(in_run, held, 0))
    # gaps: each request's first token of the run from its own last emission, then one gap
    # of each later iteration's duration per request decoding in it
    first_gap = jnp.where(grow, t + run.dur[0] - e.last_emit, jnp.nan)
    later = (j >= 1) & in_run
    gaps = jnp.concatenate([first_gap, jnp.where(later, run.dur, jnp.nan)])
    weights = jnp.concatenate([jnp.ones_like(first_gap), run.n_j.astype(jnp.float64)])
    e, complete, tokens = _advance(e, run, grow, left, ratio, t, t_end, cfg)
    if arrival is not None:
        e, complete, decoded = _admit_taken(e, complete, take, j2, k, t, run, arrival, queue, cfg)
        tokens = tokens + decoded
    ctx_read = jnp.sum(jnp.where(in_run, run.ctx, 0.0))
    return Run(
        e=e,
        t_end=t_end,
        k=k,
        dur=jnp.where(in_run, run.dur, 0.0),
        gaps=(gaps, weights),
        kv_peak=kv_peak,
        completed=complete,
        ctx_read=ctx_read,
        tokens=tokens,
        early_s=jnp.sum(jnp.where(complete, t_end - e.finish, 0.0)),
        taken=take.astype(jnp.int32),
        prefill_tokens=jnp.sum(jnp.where(in_run, run.prefill, 0), dtype=jnp.int32),
        attn_work=ctx_read + tokens + jnp.sum(jnp.where(in_run, attn, 0.0)),
        max_running=jnp.max(jnp.where(in_run, run.n_j + (take & (j == j2)), 0)),
    )


def _admit_taken(
    e: Entries, complete, take, j2, k, t, run: _Pass, arrival: NextArrival, queue, cfg: EngineConfig
):
    """Entries with the arrival a run took in (`take`) written into the first empty entry: as
    the full step admits it at the start of iteration j2 (at the end of vLLM's running list,
    after `queue`), prefilled in j2 and decoding to the run's end or its completion.
    Returns (entries, completed [A], its decode tokens)."""
    L = cfg.leap_max
    slot = (jnp.arange(e.req.shape[0]) == jnp.argmax(e.status == EMPTY)) & take
    p, o = arrival.prompt, arrival.output
    steps = jnp.minimum(k - j2, o)  # its prefill iteration, then its decodes
    done = steps >= o
    first = t + run.ends[jnp.clip(j2, 0, L - 1)]
    last = t + run.ends[jnp.clip(j2 + steps - 1, 0, L - 1)]
    start = jnp.where(j2 > 0, t + run.ends[jnp.clip(j2 - 1, 0, L - 1)], t)
    computed = p + steps - 1
    e = admit(
        e,
        slot,
        arrival,
        status=jnp.where(done, DONE, RUNNING),
        computed=computed,
        generated=steps,
        blocks=jnp.where(done, 0, blocks_for(computed, cfg)),
        tokens_computed=computed,
        first_token=first,
        last_emit=last,
        finish=jnp.where(done, last, jnp.nan),
        end_state=jnp.where(done, COMPLETED, -1),
        qkey=jnp.maximum(queue, 0) + 1,
        scheduled_at=start,
    )
    return e, complete | (slot & done), jnp.where(take, steps - 1, 0)


def add_gaps(hist, gap_increments):
    """The histogram plus the run's gap increments from `leap`."""
    gaps, weights = gap_increments
    return histogram.add(hist, gaps, weights)
