"""One iteration's schedule, as vLLM 0.32's V1 scheduler computes it, on entries in scheduling
order (vllm/v1/core/sched/scheduler.py; the golden fixtures in tests/golden/ are its output).

1. Running requests, in order of admission, take their next tokens (a decode takes 1, a request
   mid-prefill the next chunk, cut at policy.long_prefill_token_threshold unless it is the only
   request) while the token budget lasts. KV blocks for the new tokens are allocated; where
   they do not fit, the most recently admitted running requests are preempted (blocks freed,
   progress dropped, pushed back to the front of the queue) until they do.
2. Only if nothing was preempted, waiting requests are admitted in queue order while the
   admission cap (max_num_active_seqs, else max_num_seqs), the token budget and the KV blocks
   allow; the first that does not fit stops admission (no skipping ahead). With
   engine.scheduler_reserve_full_isl (vLLM 0.32's default) a request is admitted only if
   blocks for its whole sequence so far fit, else only its first chunk's; while anything runs
   (admitted earlier in the iteration included) the watermark, policy.watermark x all blocks
   (vLLM counts its null block) floored, must stay free as well. The static slot capacity
   (engine.max_slots) caps the running set too; iterations where it, and not the policy,
   stopped an admission are counted, so results that depend on it are flagged.
Static batching admits a new batch only when nothing runs, with no token budget.

Under FCFS the order is vLLM's own (`Entries.qkey`); under a score order the running requests
are ordered by score, so the victim is the lowest-priority one. Under vLLM's priority policy
(engine.scheduling_policy priority) the victim is chosen by fixed priority wherever it stands
in the running list (engine/priority.py). (A relaxed order pairs the
victim with the last request kept: engine/relaxed/swap.py.)
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax.numpy as jnp
from flax import struct

from servetune.core import ops, relax
from servetune.core.types import (
    DONE,
    EVICTED,
    REJECTED,
    RUNNING,
    WAITING,
    EngineConfig,
    Entries,
    Params,
)
from servetune.engine import prefix as prefix_lib
from servetune.engine import pressure
from servetune.engine import priority as priority_policy
from servetune.engine.kv import blocks_for
from servetune.engine.relaxed.batch import RelaxedBatch, relaxed_batch
from servetune.engine.speculation import draft_tokens

_NO_BUDGET = 2**30


class Batch(struct.PyTreeNode):
    """What one iteration computes, per entry in scheduling order."""

    tokens: jnp.ndarray  # [A] i32 tokens computed for each entry this iteration
    decode: jnp.ndarray  # [A] bool entry takes a decode token (not a prefill chunk)
    preempted: jnp.ndarray  # [A] bool entry was preempted this iteration
    slot_bound: jnp.ndarray  # [] bool the static slot capacity, not the policy, stopped admission
    ended: jnp.ndarray  # [A] bool requests the scheduler ended: evicted, or rejected under
    #                     KV pressure (their finish time is the iteration's start)
    accepted: jnp.ndarray | None = None  # [A] i32 draft tokens accepted (speculation), else None
    relaxed: RelaxedBatch | None = None  # a relaxed engine's part (engine.relax st/soft), else None


def token_budget(pol, cfg: EngineConfig, relaxed: bool = False):
    """Tokens one iteration may compute: policy.max_num_batched_tokens as a whole number (as a
    relaxed limit, `relax.relaxed_limit`, with `relaxed`). Static batching has no budget.
    Without chunked prefill a whole prompt must fit in one iteration, so (as vLLM enforces at
    startup) the budget is at least max_model_len."""
    if cfg.batching == "static":
        return jnp.asarray(_NO_BUDGET, jnp.float64)
    budget = (
        relax.relaxed_limit(pol.max_num_batched_tokens, cfg.relax)
        if relaxed
        else relax.integer_limit(pol.max_num_batched_tokens)
    )
    if not cfg.chunked_prefill:
        budget = jnp.maximum(budget, cfg.max_model_len)
    return budget


def watermark_blocks(pol, kv_total):
    """Blocks vLLM 0.32 keeps free when admitting while requests run: the watermark fraction
    of all its blocks (the usable ones plus its null block), floored (KVCacheManager)."""
    return jnp.floor(pol.watermark * (kv_total + 1))


def admission_cap(pol):
    """Requests the scheduler admits into RUNNING: max_num_active_seqs where set, at most
    max_num_seqs (vLLM refuses more), floored."""
    return relax.integer_limit(jnp.minimum(pol.max_num_seqs, pol.max_num_active_seqs))


def prefill_cap(pol, budget, n_eligible, cfg: EngineConfig):
    """Most tokens one request computes this iteration from long_prefill_token_threshold
    (vLLM 0.32): the threshold, floored at budget // requests with
    engine.long_prefill_token_threshold_adaptive, and no cap (inf) when it is 0 or when there is
    only one request (running + waiting), which has nobody to starve."""
    threshold = relax.integer_limit(pol.long_prefill_token_threshold)
    if cfg.long_prefill_token_threshold_adaptive:
        threshold = jnp.maximum(threshold, jnp.floor(budget / jnp.maximum(n_eligible, 1)))
    on = (pol.long_prefill_token_threshold >= 1) & (n_eligible > 1)
    return jnp.where(on, threshold, jnp.inf)


def full_sequence_blocks(e: Entries, cfg: EngineConfig):
    """[A] blocks a waiting request's whole sequence so far (prompt + tokens generated before a
    preemption, at most max_model_len) takes: what engine.scheduler_reserve_full_isl checks."""
    return blocks_for(
        jnp.minimum(e.prompt + e.generated, cfg.max_model_len), cfg, pressure.ratio(e, cfg)
    )


def pending_tokens(e: Entries):
    """[A] tokens each running request wants this iteration: its whole remaining prompt (or
    recompute) when prefilling, 1 when decoding; 0 for entries not running."""
    return jnp.where(e.status == RUNNING, e.prompt + e.generated - e.computed, 0)


def wanted_tokens(e: Entries, params: Params, cfg: EngineConfig):
    """[A] tokens each running request asks for this iteration (`pending_tokens`); with
    speculation a decoding request asks for 1 + spec_k positions to verify, fewer where the
    sequence would pass max_model_len. Returns (tokens [A], decoding [A] bool)."""
    need = pending_tokens(e)
    if cfg.async_scheduling:  # a request whose last token is still being sampled: none
        need = jnp.where(e.generated >= e.output, 0, need)
    decoding = (e.status == RUNNING) & (e.generated > 0) & (need == 1)
    if cfg.speculation:
        k = draft_tokens(params.policy)
        room = jnp.maximum(cfg.max_model_len - e.computed, 1)
        need = jnp.where(decoding, jnp.minimum(1 + k, room), need)
    return need, decoding


def new_blocks(e: Entries, tokens, cfg: EngineConfig):
    """[A] KV blocks running requests must add to hold `tokens` more computed tokens."""
    ratio = pressure.ratio(e, cfg)
    grow = jnp.maximum(blocks_for(e.computed + tokens, cfg, ratio) - e.blocks, 0)
    return jnp.where(e.status == RUNNING, grow, 0)


class _Running(NamedTuple):
    """Phase 1 of an iteration's schedule, per entry [A]: the tokens running requests want
    (`need`, after the per-request prefill cap `per_request`) and get (`alloc`), whether each
    is decoding, which running requests keep running (`keep`) or are preempted, their KV blocks
    after it and their KV compression ratio."""

    need: jnp.ndarray
    decoding: jnp.ndarray
    per_request: jnp.ndarray
    alloc: jnp.ndarray
    keep: jnp.ndarray
    preempt: jnp.ndarray
    blocks: jnp.ndarray
    kv_ratio: jnp.ndarray


def _schedule_running(es: Entries, params: Params, cfg: EngineConfig, budget, hits) -> _Running:
    """Running requests, in scheduling order, take the token budget; keeping the first m costs
    their new blocks and frees the held blocks of the preempted tail; m is the largest prefix
    for which that fits (what vLLM's loop reaches)."""
    pol, kv_total = params.policy, params.cost.kv_blocks
    running = es.status == RUNNING
    waiting = es.status == WAITING
    need, decoding = wanted_tokens(es, params, cfg)
    per_request = prefill_cap(pol, budget, jnp.sum(running) + jnp.sum(waiting), cfg)
    need = jnp.minimum(need, per_request).astype(need.dtype)
    alloc = jnp.clip(budget - ops.exclusive_cumsum(need), 0, need).astype(jnp.int32)
    grow = new_blocks(es, alloc, cfg)
    held = jnp.where(running, es.blocks, 0)
    free = kv_total - jnp.sum(es.blocks)
    if hits is not None:  # a preemption frees private blocks and blocks only it references
        held = held - hits.shared + hits.exclusive
        free = free - hits.kv_offset
    kv_ratio = es.kv_ratio
    if cfg.kv_pressure == "compress":
        compress, grow = pressure.compress_tail(
            es, running, alloc, grow, held, free, pol.kv_compress_ratio, cfg
        )
    if cfg.scheduling_policy == "priority":  # the victim by fixed priority, sequentially
        keep, alloc, grow = priority_policy.schedule_running(
            es, running, need, alloc, grow, budget, free, cfg
        )
    else:
        keep = pressure.keep_prefix(running, grow, held, free)
    if cfg.kv_pressure == "compress":
        kv_ratio = jnp.where(compress & keep, jnp.maximum(pol.kv_compress_ratio, 1.0), kv_ratio)
    preempt = running & ~keep
    alloc = jnp.where(keep, alloc, 0)
    blocks = jnp.where(keep, es.blocks + grow, jnp.where(preempt, 0, es.blocks))
    return _Running(need, decoding, per_request, alloc, keep, preempt, blocks, kv_ratio)


def schedule(es: Entries, params: Params, cfg: EngineConfig, hits=None, scores=None):
    """Schedule one iteration over entries `es` sorted by `policy.scheduling_order`: running
    requests first (`_schedule_running`), then admissions, only when nothing was preempted.

    `hits`: prefix caching's view (engine/prefix.Hits) when engine.prefix_cache is on: cached
    blocks count once, hit tokens count as computed at admission. `scores` [A]: the priority
    scores the order came from, with engine.relax_order (the order swaps use them).
    Returns (entries with statuses, blocks and preemption counters updated, Batch, the hits
    as admission found them: `hits` with blocks scheduled in this iteration found too).
    """
    pol, kv_total = params.policy, params.cost.kv_blocks
    budget = token_budget(pol, cfg)
    run = _schedule_running(es, params, cfg, budget, hits)
    keep, alloc = run.keep, run.alloc

    n_running = jnp.sum(keep, dtype=jnp.int32)
    free_after = kv_total - jnp.sum(run.blocks)
    if hits is not None:
        free_after = free_after - hits.kv_offset
    rank = ops.cumsum(es.status == WAITING) - 1
    gate = ~jnp.any(run.preempt)
    if cfg.batching == "static":
        gate = gate & (n_running == 0)
    admission = functools.partial(
        _admission,
        es,
        pol,
        kv_total,
        cfg,
        free_after=free_after,
        budget_left=budget - jnp.sum(alloc),
        per_request=run.per_request,
        n_running=n_running,
        rank=rank,
        gate=gate,
        footprint_left=jnp.sum(
            jnp.where(keep, jnp.maximum(pressure.footprint(es, cfg) - run.blocks, 0), 0)
        ),
    )
    if hits is None:
        adm = admission()
    else:  # blocks scheduled earlier in this iteration are found as well (vLLM caches them)
        hits, adm = prefix_lib.settle(es, hits, keep, alloc, rank, admission, cfg)
    admit = adm.admit
    ended = run.preempt if cfg.kv_pressure == "evict" else adm.ended  # (evict: victims end)

    tokens = alloc + jnp.where(admit, adm.chunk, 0)
    # a resumed request whose cache hits leave only its last token computes it as a decode
    decode = ((alloc > 0) & run.decoding) | (admit & (adm.need_w == 1) & (es.generated > 0))
    relaxed = None
    if cfg.relax != "hard":
        relaxed = relaxed_batch(
            es,
            tokens,
            run,
            adm,
            token_budget(pol, cfg, relaxed=True),
            rank,
            n_running,
            pol,
            cfg,
            scores,
        )
    requeue = run.preempt & ~ended
    es = _scheduled_entries(es, run, adm, ended, requeue, hits, cfg)
    return (
        es,
        Batch(
            tokens=tokens,
            decode=decode,
            preempted=requeue,
            slot_bound=adm.slot_bound,
            ended=ended,
            relaxed=relaxed,
        ),
        hits,
    )


def _scheduled_entries(
    es: Entries, run: _Running, adm, ended, requeue, hits, cfg: EngineConfig
) -> Entries:
    """The entries after scheduling: admitted ones run with their first chunk's blocks (and
    their cache hits as computed), ended ones are done, preempted ones wait to recompute."""
    admit = adm.admit
    es = es.replace(
        qkey=queue_keys(es, run.keep, admit, requeue),
        status=jnp.where(
            admit, RUNNING, jnp.where(ended, DONE, jnp.where(requeue, WAITING, es.status))
        ),
        end_state=jnp.where(
            ended, EVICTED if cfg.kv_pressure == "evict" else REJECTED, es.end_state
        ),
        blocks=jnp.where(admit, adm.first_blocks, jnp.where(ended, 0, run.blocks)),
        computed=jnp.where(requeue, 0, es.computed),
        preempted=jnp.where(requeue, True, jnp.where(admit, False, es.preempted)),
        n_preempt=es.n_preempt + requeue.astype(jnp.int32),
        kv_ratio=run.kv_ratio,
    )
    if hits is not None:  # hit tokens count as computed; their blocks are the request's too
        es = es.replace(
            computed=jnp.where(admit, hits.cached, es.computed),
            blocks=jnp.where(admit, es.blocks + hits.cached // cfg.block_size, es.blocks),
        )
    return es


class _Admission(struct.PyTreeNode):
    """One admission pass, per entry in scheduling order."""

    admit: jnp.ndarray  # [A] bool waiting entries admitted
    chunk: jnp.ndarray  # [A] i32 tokens an admission computes this iteration
    need_w: jnp.ndarray  # [A] i32 tokens a waiting entry wants (after cache hits, capped)
    first_blocks: jnp.ndarray  # [A] i32 KV blocks of a waiting entry's chunk
    want: jnp.ndarray  # [A] i32 KV blocks its admission must find free
    kv_margin: jnp.ndarray  # [A] i32 free blocks left beyond `want` (>= 0 where they fit)
    candidate: jnp.ndarray  # [A] bool waiting entries no policy number keeps out
    ended: jnp.ndarray  # [A] bool turned away at once (kv_pressure reject)
    slot_bound: jnp.ndarray  # [] bool the static slot capacity, not the policy, stopped one


def _admission(
    es: Entries,
    pol,
    kv_total,
    cfg: EngineConfig,
    cached=None,
    claim=None,
    *,
    free_after,
    budget_left,
    per_request,
    n_running,
    rank,
    gate,
    footprint_left,
):
    """Admit waiting requests in queue order while the admission cap, the token budget and the
    KV blocks allow (step 2 of `schedule`). `cached` [A] / `claim` [A]: with prefix caching,
    each waiting request's hit tokens and the KV blocks its hits take from the evictable
    cache. `free_after`: KV blocks free after the running requests' allocations;
    `budget_left`: tokens left; `footprint_left`: blocks the running requests' predicted
    footprints still reserve (kv_pressure reject)."""
    waiting = es.status == WAITING
    need_w = jnp.where(waiting, es.prompt + es.generated, 0)
    if cached is not None:  # cached prompt tokens are not computed again
        need_w = jnp.where(waiting, need_w - cached, 0)
    need_w = jnp.minimum(need_w, per_request).astype(need_w.dtype)
    if cfg.chunked_prefill:
        chunk = jnp.clip(budget_left - ops.exclusive_cumsum(need_w), 0, need_w)
    else:
        chunk = jnp.where(ops.cumsum(need_w) <= budget_left, need_w, 0)
    chunk = chunk.astype(jnp.int32)
    first_blocks = jnp.where(waiting, blocks_for(chunk, cfg, pressure.ratio(es, cfg)), 0)
    # the watermark holds once anything runs: the running ones, or an earlier admission
    wm = jnp.where((n_running > 0) | (rank > 0), watermark_blocks(pol, kv_total), 0)
    resumed = es.preempted | (es.generated > 0)
    # cached blocks nobody references are free, but a hit on one takes it out of the free pool
    claimed = 0 if claim is None else claim
    if cfg.kv_pressure == "reject":  # predicted footprints, reserved in full
        room = free_after - footprint_left
        # a preempted request resumes on its first chunk's blocks, as without reservations
        # (its footprint, once overrun, could exceed the whole cache)
        want = jnp.where(
            waiting, jnp.where(resumed, first_blocks, pressure.footprint(es, cfg)) + claimed, 0
        )
        taken = ops.exclusive_cumsum(want)
    else:
        room = free_after
        want = first_blocks
        if cfg.scheduler_reserve_full_isl:
            full = full_sequence_blocks(es, cfg)
            if cached is not None:  # cached blocks are shared, not allocated
                full = full - cached // cfg.block_size
            want = jnp.maximum(full, first_blocks)
        want = jnp.where(waiting, want + claimed, 0)
        taken = ops.exclusive_cumsum(first_blocks + claimed)
    kv_margin = room - wm - taken - want  # >= 0 where the blocks fit
    candidate = waiting & gate & (chunk > 0)  # the exact conditions no policy number sets
    fits = (
        candidate
        & relax.below(rank, admission_cap(pol) - n_running)
        & relax.at_most(taken + want, room - wm)
    )
    # vLLM stops at the first waiting request it cannot admit
    admissible = fits & (ops.cumsum(waiting & ~fits) == 0)
    admit = admissible & (rank < cfg.max_slots - n_running)
    ended = jnp.zeros_like(admit)
    if cfg.kv_pressure == "reject":  # new work that does not fit is turned away at once
        room_left = room - watermark_blocks(pol, kv_total) - jnp.sum(jnp.where(admit, want, 0))
        ended = waiting & ~admit & ~resumed & (want > room_left)
    return _Admission(
        admit=admit,
        chunk=chunk,
        need_w=need_w,
        first_blocks=first_blocks,
        want=want,
        kv_margin=kv_margin,
        candidate=candidate,
        ended=ended,
        slot_bound=jnp.any(admissible & ~admit),
    )


def queue_keys(es: Entries, keep, admit, requeue):
    """[A] `Entries.qkey` after the iteration: admitted requests join the end of the running
    list in admission order; preempted ones go to the front of the queue, the earliest
    admitted of them first (vLLM pops the running list's tail and prepends each victim)."""
    last = jnp.maximum(jnp.max(jnp.where(keep, es.qkey, 0)), 0)
    front = jnp.minimum(jnp.min(jnp.where((es.status == WAITING) & es.preempted, es.qkey, 0)), 0)
    n_requeue = jnp.sum(requeue, dtype=jnp.int32)
    return jnp.where(
        admit,
        last + ops.cumsum(admit, dtype=jnp.int32),
        jnp.where(requeue, front - n_requeue - 1 + ops.cumsum(requeue, dtype=jnp.int32), es.qkey),
    )
