"""Event skipping: run of uniform decode iterations advanced in closed form.

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

import jax.numpy as jnp

from servetune import histogram, ops, relax
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
from servetune.hardware import step_time
from servetune.types import COMPLETED, RUNNING, WAITING, EngineConfig, Entries, Params


def _admission_blocked(e: Entries, n_running, budget, free, params: Params, cfg: EngineConfig,
                       prefix: bool = False):
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
    need_w = jnp.minimum(e.prompt + e.generated,
                         prefill_cap(pol, budget, n_running + jnp.sum(waiting), cfg))
    if prefix:  # a cache hit can leave as little as 1 token to compute: assume it does
        need_w = jnp.minimum(need_w, 1)
    chunk = (jnp.minimum(need_w, budget_left) if cfg.chunked_prefill
             else jnp.where(need_w <= budget_left, need_w, 0))
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


def crosses_completions(cfg: EngineConfig) -> bool:
    """Whether a run may go on past a completion when nobody waits (static): one instance and
    no mechanism that reacts to a completion inside the run (a prefix cache's release, a
    cascade's retry, a router's or a hand-off's view of the instance)."""
    return (cfg.n_instances == 1 and not cfg.prefix_cache and cfg.cascade_small_instances == 0
            and cfg.prefill_instances == 0)


def leap(e: Entries, t, t_limit, params: Params, cfg: EngineConfig, kv_offset=None) -> Run:
    """Apply the longest run of uniform decode iterations starting at t (seconds) whose
    iterations all start before t_limit (the next arrival or the stop time).

    Each running request decodes one token per iteration until its output is complete. While
    a request waits the run stops at the first completion (an admission may follow it); with
    nobody waiting (and `crosses_completions`) it goes on, each request leaving at its own
    completion, the later iterations shorter by the requests that left.
    `kv_offset`: with prefix caching, blocks in use beyond sum(e.blocks) (engine/prefix.py).
    """
    L = cfg.leap_max
    running = e.status == RUNNING
    n = jnp.sum(running, dtype=jnp.int32)
    budget = token_budget(params.policy, cfg)
    free = params.cost.kv_blocks - jnp.sum(e.blocks)
    if kv_offset is not None:
        free = free - kv_offset
    uniform = (jnp.all(~running | ((pending_tokens(e) == 1) & (e.generated > 0)))
               & (n > 0) & (n <= budget)
               & _admission_blocked(e, n, budget, free, params, cfg, kv_offset is not None))
    left = jnp.where(running, e.output - e.generated, 0)  # [A] tokens to each completion
    first_done = jnp.min(jnp.where(running, left, L))
    if crosses_completions(cfg):
        nobody_waits = ~jnp.any(e.status == WAITING)
        k_done = jnp.where(nobody_waits, jnp.max(left), first_done)
    else:
        k_done = first_done
    # paged KV: a request crosses at most ceil(K / block_size) block boundaries in K tokens
    # (completions only free blocks)
    k_kv = (L if cfg.kv_layout == "contiguous"
            else cfg.block_size * (free // jnp.maximum(n, 1)))

    j = jnp.arange(L)
    part = running[:, None] & (j[None, :] < left[:, None])  # [A, L] decodes in iteration j
    n_j = jnp.sum(part, axis=0, dtype=jnp.int32)  # [L]
    ctx = jnp.sum(jnp.where(part, (e.computed[:, None] + j[None, :]).astype(jnp.float64), 0.0),
                  axis=0)  # [L] context tokens read
    dur = step_time(params.cost, cfg.cost_form, 0, n_j, ctx, ctx + n_j)  # [L]
    ends = dur @ ops.upper_triangle(L)  # [L] end of iteration j, relative to t (one kernel)
    starts = ends - dur
    k_time = jnp.sum(t + starts < t_limit, dtype=jnp.int32)  # starts increase with j
    k = jnp.where(uniform, jnp.minimum(jnp.minimum(k_time, k_done), jnp.minimum(k_kv, L)), 0)
    k = jnp.maximum(k, 0).astype(jnp.int32)
    t_end = t + jnp.where(k > 0, ends[jnp.maximum(k - 1, 0)], 0.0)

    ratio = pressure.ratio(e, cfg)
    grow = running & (k > 0)
    steps = jnp.where(grow, jnp.minimum(k, left), 0)  # [A] iterations each request decodes
    complete = grow & (steps >= left)
    finish = t + ends[jnp.clip(steps - 1, 0, L - 1)]  # [A] its last iteration's end
    last = jnp.where(complete, finish, t_end)
    computed = e.computed + steps
    blocks = jnp.where(grow, blocks_for(computed, cfg, ratio), e.blocks)
    # blocks held in iteration j: each request still decoding, with its token of j
    held = jnp.where(part, blocks_for(e.computed[:, None] + j[None, :] + 1, cfg,
                                      None if ratio is None else ratio[:, None]), 0)
    kv_peak = jnp.max(jnp.where(j < k, jnp.sum(held, axis=0, dtype=jnp.int32)
                                + jnp.sum(jnp.where(running, 0, e.blocks), dtype=jnp.int32),
                                0))
    # gaps: each request's first token of the run from its own last emission, then one gap
    # of each later iteration's duration per request decoding in it
    first_gap = jnp.where(grow, t + dur[0] - e.last_emit, jnp.nan)
    later = (j >= 1) & (j < k)
    gaps = jnp.concatenate([first_gap, jnp.where(later, dur, jnp.nan)])
    weights = jnp.concatenate([jnp.ones_like(first_gap), n_j.astype(jnp.float64)])
    e = e.replace(
        computed=computed,
        generated=e.generated + steps,
        tokens_computed=e.tokens_computed + steps,
        last_emit=jnp.where(grow, last, e.last_emit),
        blocks=blocks,
    )
    e = retire(e, complete, COMPLETED, finish)
    in_run = j < k
    return Run(e, t_end, k, jnp.where(in_run, dur, 0.0), (gaps, weights), kv_peak, complete,
               jnp.sum(jnp.where(in_run, ctx, 0.0)), jnp.sum(steps, dtype=jnp.int32),
               jnp.sum(jnp.where(complete, t_end - finish, 0.0)))


def add_gaps(hist, gap_increments):
    """The histogram plus the run's gap increments from `leap`."""
    gaps, weights = gap_increments
    return histogram.add(hist, gaps, weights)
