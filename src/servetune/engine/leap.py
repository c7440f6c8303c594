"""Event skipping: run of uniform decode iterations advanced in closed form.

Between events (an arrival, a completion, a prefill chunk, an admission, KV pressure) every
iteration of an instance is the same: each running request decodes one token, nobody is
admitted or preempted, and only the context lengths grow, by one token per request per
iteration. `leap` applies K such iterations at once, with what single stepping would produce:
the same token counts, KV blocks, completion and emission times (up to float rounding of the
summed durations) and statistics. K stops before the first iteration that would start at or
after the next arrival or the stop time, at the first completion, before KV blocks could run
short, and at `engine.leap_max` (the length of the vector the durations are computed on).
"""

from __future__ import annotations

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


def leap(e: Entries, t, t_limit, params: Params, cfg: EngineConfig, kv_offset=None):
    """Apply the longest run of uniform decode iterations starting at t (seconds) whose
    iterations all start before t_limit (the next arrival or the stop time).

    Returns (entries, end time, iterations K, duration of each iteration [L] (0 past K),
    gap histogram increments as (values [A + L], weights [A + L]), KV blocks in use in the
    run's last iteration (its peak: before the completions free theirs), completed mask [A],
    context tokens the K iterations read, summed).
    K = 0 leaves everything unchanged.
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
    remaining = jnp.min(jnp.where(running, e.output - e.generated, L))
    # paged KV: a request crosses at most ceil(K / block_size) block boundaries in K tokens
    k_kv = (L if cfg.kv_layout == "contiguous"
            else cfg.block_size * (free // jnp.maximum(n, 1)))

    j = jnp.arange(L)
    ctx = jnp.sum(jnp.where(running, e.computed, 0)).astype(jnp.float64) + n * j
    dur = step_time(params.cost, cfg.cost_form, 0, n, ctx, ctx + n)  # [L]
    ends = ops.cumsum(dur)  # [L] end of iteration j, relative to t
    starts = ends - dur
    k_time = jnp.sum(t + starts < t_limit, dtype=jnp.int32)  # starts increase with j
    k = jnp.where(uniform, jnp.minimum(jnp.minimum(k_time, remaining), jnp.minimum(k_kv, L)), 0)
    k = jnp.maximum(k, 0).astype(jnp.int32)
    t_end = t + jnp.where(k > 0, ends[jnp.maximum(k - 1, 0)], 0.0)

    grow = running & (k > 0)
    generated = e.generated + jnp.where(grow, k, 0)
    computed = e.computed + jnp.where(grow, k, 0)
    blocks = jnp.where(grow, blocks_for(computed, cfg, pressure.ratio(e, cfg)), e.blocks)
    blocks_in_use = jnp.sum(blocks, dtype=jnp.int32)
    complete = grow & (generated >= e.output)
    # gaps: each request's first token of the run from its own last emission, then one gap
    # of each later iteration's duration per running request
    first_gap = jnp.where(grow, t + dur[0] - e.last_emit, jnp.nan)
    later = (j >= 1) & (j < k)
    gaps = jnp.concatenate([first_gap, jnp.where(later, dur, jnp.nan)])
    weights = jnp.concatenate([jnp.ones_like(first_gap), jnp.full((L,), 1.0) * n])
    e = e.replace(
        computed=computed,
        generated=generated,
        tokens_computed=e.tokens_computed + jnp.where(grow, k, 0),
        last_emit=jnp.where(grow, t_end, e.last_emit),
        blocks=blocks,
    )
    e = retire(e, complete, COMPLETED, t_end)
    return (e, t_end, k, jnp.where(j < k, dur, 0.0), (gaps, weights), blocks_in_use, complete,
            jnp.sum(jnp.where(j < k, ctx, 0.0)))


def add_gaps(hist, gap_increments):
    """The histogram plus the run's gap increments from `leap`."""
    gaps, weights = gap_increments
    return histogram.add(hist, gaps, weights)
