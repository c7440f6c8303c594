"""Progress shifts: how a relaxed decision that speeds a request's progress moves its events.

Under engine.relax st or soft (servetune/core/relax.py) two tunable numbers change how fast a
running request progresses rather than when it is admitted:

- The token budget. A request prefilling under a bigger budget computes `gain` more prompt
  tokens per iteration (RelaxedBatch.gain), and when it finishes, the tokens it is ahead
  go to the requests after it (engine/relaxed/batch.py): the queue's prefill is that far
  ahead. Its prefill then takes fewer iterations, and its first token (and everything after
  it) comes sooner. In the fluid reading, a prompt prefilled over its share T of the
  iterations' seconds in P tokens, ahead by G tokens, ends G x T / P sooner; its share of an
  iteration is the iteration's seconds x its prompt tokens / all prompt tokens in it. The
  extra work is not subtracted here: the iteration durations carry it (the relaxed weights
  add the budget's tokens to every iteration where it binds and give them back where it
  stops binding), which is what makes the decodes in those iterations slower.
- The speculation length k. A decoding pass with k draft tokens emits E(k) = (1 - alpha^(k+1))
  / (1 - alpha) tokens on average (speculation.expected_emitted). With k relaxed, a pass of
  duration d emits E(k_relaxed) - E(k) tokens more. At d / E(k) seconds per token, the
  request's later events move by that much. The cost side, the longer draft and the verified
  positions, is in the iteration durations.

Both add to the request's `shift` (engine/relaxed/shift.py), which moves its first token and
completion. Under st each gain is 0 in value, so the forward pass is the exact simulator's.
Knock-on effects on other requests reach them only through the iteration durations, as for
admission shifts.
"""

from __future__ import annotations

import jax.numpy as jnp

from servetune.core.types import RUNNING, EngineConfig, Entries, Params
from servetune.engine import speculation

# The tape's fields here (types.RelaxTape: 0 at arrival and after each prefill): ahead, prompt
# tokens ahead; pre_s, the request's share of the seconds of the iterations of its prefill so
# far (share_seconds); pre_tok, prompt tokens computed in it


def prefilling(e: Entries):
    """[A] bool running entries that are prefilling (a prompt, or a recompute after
    preemption), not decoding: the phase whose progress the token budget sets. Call on the
    entries as scheduled, before the iteration advances them."""
    pending = e.prompt + e.generated - e.computed
    return (e.status == RUNNING) & ~((e.generated > 0) & (pending <= 1))


def share_seconds(tokens, decode, dur):
    """[A] each entry's share of an iteration of `dur` seconds as a prefill: dur x its prompt
    tokens / all prompt tokens of the iteration (`tokens` [A] computed, `decode` [A] bool
    entries that decoded, whose tokens are not prompt tokens); 0 where it computed none.
    Divided by the tokens, the seconds a prompt token of this iteration took: what a token
    ahead saves (progress_shift)."""
    prompt = jnp.where(decode, 0, tokens).astype(jnp.float64)
    return dur * prompt / jnp.maximum(jnp.sum(prompt), 1.0)


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


def progress_shift(e: Entries, gain, tokens, phase, preempted, generated0, share_s, spec_s):
    """Entries after one relaxed iteration: prefilling entries (`phase` [A], from
    `prefilling` before the iteration) add the iteration's prompt-token `gain` [A], computed
    `tokens` [A] and their `share_s` [A] of its seconds (share_seconds); one whose prefill completed
    (it emitted a token) turns its tokens ahead into seconds at its prefill's pace and adds them to
    its shift. Decoding entries add `spec_s` [A] (`speculation_gain_s`). Progress of a
    `preempted` [A] entry is dropped with its KV. `generated0` [A]: output tokens before."""
    r = e.relaxed
    assert r is not None  # the mechanism is on (a static switch)
    ahead = r.ahead + jnp.where(phase, gain, 0.0)
    pre_s = r.pre_s + jnp.where(phase, share_s, 0.0)
    pre_tok = r.pre_tok + jnp.where(phase, tokens, 0).astype(jnp.float64)
    done = phase & (e.generated > generated0)
    sooner = jnp.where(done, ahead * pre_s / jnp.maximum(pre_tok, 1.0), 0.0)
    reset = done | preempted
    zero = lambda x: jnp.where(reset, 0.0, x)
    return e.replace(
        relaxed=r.replace(
            shift=r.shift - sooner - spec_s,
            ahead=zero(ahead),
            pre_s=zero(pre_s),
            pre_tok=zero(pre_tok),
        )
    )
