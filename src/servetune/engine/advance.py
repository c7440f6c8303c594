"""End of an iteration: tokens computed, outputs emitted, requests retired."""

from __future__ import annotations

import jax.numpy as jnp

from servetune.core.types import COMPLETED, Entries
from servetune.engine.outbox import retire
from servetune.engine.scheduler import Batch


def sends(generated, complete, stream_interval: int):
    """[A] bool whether a request that now holds `generated` output tokens [A] (one more than
    before) sends them to its client, under vLLM 0.32's `--stream-interval`
    (RequestState.make_request_output): the first token at once, then whenever stream_interval
    tokens are unsent, and at its end (`complete` [A])."""
    if stream_interval == 1:
        return jnp.ones_like(complete)
    return (generated == 1) | ((generated - 1) % stream_interval == 0) | complete


def advance(es: Entries, batch: Batch, t_end, hold: bool = False, stream_interval: int = 1):
    """Apply an iteration that ends at t_end (seconds).

    A request whose known tokens (prompt + output so far) are all computed emits its next output
    token; one that reaches its output length completes and frees its blocks. With speculation
    (`batch.accepted` set), a decoding request emits 1 + its accepted draft tokens in one event,
    at most up to its output length, and only the emitted positions stay computed.
    With `hold` (async scheduling, engine/async_scheduling.py) a completed request gets its
    finish time and end state but stays running, holding its blocks, until the next schedule.
    With `stream_interval` above 1 (one token per emission: no speculation) the inter-token
    gaps are those between the chunks the client receives (`sends`), and `last_emit` is the
    last chunk's time.
    Returns (entries, inter-token gaps [A] in seconds (nan where none), completed mask [A]).
    """
    if batch.accepted is None:
        computed = es.computed + batch.tokens
        emit = (batch.tokens > 0) & (computed >= es.prompt + es.generated)
        n_new = emit.astype(jnp.int32)
    else:
        spec_emit = jnp.minimum(1 + batch.accepted, es.output - es.generated)
        computed = es.computed + jnp.where(batch.decode, spec_emit, batch.tokens)
        emit = (batch.tokens > 0) & (computed >= es.prompt + es.generated)
        n_new = jnp.where(batch.decode, spec_emit, emit.astype(jnp.int32))
    generated = es.generated + n_new
    complete = emit & (generated >= es.output)
    sent = emit & sends(generated, complete, stream_interval)
    gap = jnp.where(sent & (es.generated > 0), t_end - es.last_emit, jnp.nan)
    es = es.replace(
        computed=computed,
        generated=generated,
        tokens_computed=es.tokens_computed + batch.tokens,
        first_token=jnp.where(emit & (es.generated == 0), t_end, es.first_token),
        last_emit=jnp.where(sent, t_end, es.last_emit),
    )
    if hold:
        es = es.replace(
            end_state=jnp.where(complete, COMPLETED, es.end_state),
            finish=jnp.where(complete, t_end, es.finish),
        )
        return es, gap, complete
    return retire(es, complete, COMPLETED, t_end), gap, complete
