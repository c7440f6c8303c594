"""Progress shifts: how a relaxed decision that speeds a request's progress moves its events.

Under engine.relax st or soft (servetune/relax.py) two tunable numbers change how fast a
running request progresses rather than when it is admitted:

- The token budget. A request prefilling under a bigger budget computes `gain` more prompt
  tokens per iteration (scheduler.Batch.gain). Its prefill then takes fewer iterations, and
  its first token (and everything after it) comes sooner. In the fluid reading, a prompt
  prefilled over elapsed time T in P tokens, ahead by G tokens, ends G x T' / P sooner. T'
  is T less the request's own compute: that work is the same however it is chunked, and the
  iteration durations already carry it (the relaxed weights and their debt). What a bigger
  chunk saves is the rest of each iteration: fixed overheads, other requests' decodes.
- The speculation length k. A decoding pass with k draft tokens emits E(k) = (1 - alpha^(k+1))
  / (1 - alpha) tokens on average (speculation.expected_emitted). With k relaxed, a pass of
  duration d emits E(k_relaxed) - E(k) tokens more. At d / E(k) seconds per token, the
  request's later events move by that much. The cost side, the longer draft and the verified
  positions, is in the iteration durations.

Both add to the request's `shift` (grad/shift.py), which moves its first token and
completion. Under st each gain is 0 in value, so the forward pass is the exact simulator's.
Knock-on effects on other requests reach them only through the iteration durations, as for
admission shifts.
"""

from __future__ import annotations

import jax.numpy as jnp

from servetune.engine import speculation
from servetune.hardware import step_time
from servetune.types import RUNNING, EngineConfig, Entries, Params

# The tape's fields here (types.RelaxTape: 0 at arrival and after each prefill): ahead, prompt
# tokens ahead; pre_s, seconds of the prefill so far less the request's own compute; pre_tok,
# prompt tokens computed in it


def prefilling(e: Entries):
    """[A] bool running entries that are prefilling (a prompt, or a recompute after
    preemption), not decoding: the phase whose progress the token budget sets. Call on the
    entries as scheduled, before the iteration advances them."""
    pending = e.prompt + e.generated - e.computed
    return (e.status == RUNNING) & ~((e.generated > 0) & (pending <= 1))


def own_seconds(e: Entries, tokens, totals, params: Params, cfg: EngineConfig):
    """[A] seconds of the iteration that each entry's own `tokens` [A] cost at the margin:
    tokens x (step time with one more prefill token at the middle of its chunk - step time).
    `totals`: the batch's (prefill tokens, decode sequences, context read, attention work), as
    the iteration's duration was computed from them (step.batch_totals)."""
    prefill, decode, ctx_read, attn_work = totals
    context = e.computed + tokens / 2.0
    base = step_time(params.cost, cfg.cost_form, prefill, decode, ctx_read, attn_work)
    more = step_time(params.cost, cfg.cost_form, prefill + 1.0, decode, ctx_read,
                     attn_work + context)
    return jnp.where(tokens > 0, tokens * (more - base), 0.0)


def speculation_gain_s(e: Entries, decode, tokens, params: Params, cfg: EngineConfig, dur):
    """[A] seconds by which a decoding pass with the speculation length relaxed moves each
    decoding entry's later events earlier: (E(k_relaxed) - E(k)) x dur / E(k). `decode` [A]:
    entries the pass decoded, `tokens` [A] the positions each verified; dur: its seconds. 0
    without speculation."""
    if not cfg.speculation:
        return jnp.zeros_like(e.arrival)
    k = speculation.draft_tokens(params.policy).astype(jnp.float64)
    k_rel = speculation.relaxed_draft_tokens(params.policy, cfg.relax)
    exact = speculation.expected_emitted(e.spec_alpha, k)
    more = speculation.expected_emitted(e.spec_alpha, k_rel) - exact
    drafted = decode & (tokens == 1 + k)  # granted the whole draft (not cut at max_model_len)
    return jnp.where(drafted, more * dur / exact, 0.0)


def progress_shift(e: Entries, gain, tokens, phase, preempted, generated0, dur, own_s,
                   spec_s):
    """Entries after one relaxed iteration of `dur` seconds: prefilling entries (`phase` [A],
    from `prefilling` before the iteration) add the iteration's prompt-token `gain` [A],
    computed `tokens` [A] and seconds less their `own_s` [A]; one whose prefill completed
    (it emitted a token) turns its tokens ahead into seconds at its prefill's pace and adds
    them to its shift. Decoding entries add `spec_s` [A] (`speculation_gain_s`). Progress of a
    `preempted` [A] entry is dropped with its KV. `generated0` [A]: output tokens before."""
    r = e.relaxed
    ahead = r.ahead + jnp.where(phase, gain, 0.0)
    pre_s = r.pre_s + jnp.where(phase, dur - own_s, 0.0)
    pre_tok = r.pre_tok + jnp.where(phase, tokens, 0).astype(jnp.float64)
    done = phase & (e.generated > generated0)
    sooner = jnp.where(done, ahead * pre_s / jnp.maximum(pre_tok, 1.0), 0.0)
    reset = done | preempted
    zero = lambda x: jnp.where(reset, 0.0, x)
    return e.replace(relaxed=r.replace(shift=r.shift - sooner - spec_s, ahead=zero(ahead),
                                       pre_s=zero(pre_s), pre_tok=zero(pre_tok)))
