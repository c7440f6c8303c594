"""KV-cache pressure: what gives when running requests need more KV blocks than are free.

`engine.kv_pressure` picks the policy (the seed study's three, and vLLM's):
  preempt   vLLM's: the lowest-priority running requests are preempted (blocks freed, back to
            the head of the queue, their progress recomputed later).
  evict     the lowest-value running requests (value = the policy's priority order) are
            dropped: they end EVICTED, and the compute spent on them is wasted.
  compress  the KV cache of the lowest-priority running requests is compressed, each to
            1 / policy.kv_compress_ratio of its bytes per token (fewer blocks, now and as it
            grows), just enough of them for the iteration's growth to fit; a compressed request
            pays a quality cost (its check fails with `engine.kv_compress_fail_prob`, host
            side). If compressing every running request is not enough, the rest is preempted.
  reject    admission control: a waiting request is admitted only if its predicted footprint
            (prompt + predicted output tokens) fits next to the predicted footprints of the
            running requests, and new work whose footprint does not fit is rejected at once
            instead of queued. Requests that outgrow their prediction fall back to preemption.
"""

from __future__ import annotations

import jax.numpy as jnp

from servetune.core import ops
from servetune.core.types import EngineConfig, Entries
from servetune.engine.kv import blocks_for

POLICIES = ("preempt", "evict", "compress", "reject")


def ratio(e: Entries, cfg: EngineConfig):
    """The entries' KV compression factors [A] where compression is on, else None (exact
    integer block arithmetic for every other policy)."""
    return e.kv_ratio if cfg.kv_pressure == "compress" else None


def keep_prefix(running, grow, held, free):
    """[A] running requests kept: the longest prefix (in priority order) whose new blocks fit
    in the free blocks plus the blocks held by the requests after it (which give theirs up)."""
    fits = running & (ops.cumsum(grow) - (jnp.sum(held) - ops.cumsum(held)) <= free)
    broken = ops.cumsum((running & ~fits).astype(jnp.int32))
    return fits & (broken == 0)


def compress_tail(e: Entries, running, alloc, grow, held, free, compress_ratio, cfg):
    """Compress the fewest lowest-priority running requests whose savings cover the
    iteration's block deficit (all of them if the deficit is larger).

    Returns (compressed mask [A], new grow [A]: the blocks each adds, negative where
    compression shrinks it)."""
    c = jnp.maximum(compress_ratio, 1.0)
    after = blocks_for(e.computed + alloc, cfg, c)
    fresh = running & (e.kv_ratio <= 1.0) & (c > 1.0)
    saved = jnp.where(fresh, jnp.maximum(held + grow - after, 0), 0)
    deficit = jnp.sum(grow) - free
    saved_after = jnp.sum(saved) - ops.cumsum(saved)  # savings of the requests after each
    compress = fresh & (saved > 0) & (deficit > 0) & (saved_after < deficit)
    return compress, jnp.where(compress, after - held, grow)


def footprint(e: Entries, cfg: EngineConfig):
    """[A] KV blocks a request is predicted to hold at its end: prompt + predicted output
    (at least what it holds already, plus its next token), at most max_model_len tokens (the
    length cap stops it there). The prediction is clipped to the room the prompt leaves below
    the cap before it becomes an integer, so that neither a huge prediction nor the sum with
    the prompt can overflow int32, whatever max_model_len (up to int32's range) is."""
    cap = cfg.max_model_len
    predicted = jnp.ceil(jnp.clip(e.predicted, 0, cap - e.prompt)).astype(jnp.int32)
    total = jnp.minimum(e.prompt + jnp.maximum(predicted, e.generated + 1), cap)
    return blocks_for(total, cfg, ratio(e, cfg))
