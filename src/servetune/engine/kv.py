"""Paged and contiguous KV-cache block accounting."""

from __future__ import annotations

import jax.numpy as jnp

from servetune.core.types import EngineConfig


def blocks_for(tokens, cfg: EngineConfig, ratio=None):
    """KV blocks a sequence holding `tokens` computed tokens needs ([A] int32).

    paged: ceil(tokens / block_size), allocated on demand; contiguous: the whole
    max_model_len reserved as soon as the sequence holds any token (the pre-paging baseline).
    `ratio` [A] (paged only): KV compressed by this factor takes ceil(tokens / ratio) tokens'
    worth of blocks. Integer token counts keep their width (an int64 total is not cut to
    int32), and the ceiling is taken as -(-tokens // block_size), which cannot overflow where
    tokens + block_size - 1 would (tokens near int32's largest).
    """
    tokens = jnp.asarray(tokens)
    if not jnp.issubdtype(tokens.dtype, jnp.integer):
        tokens = tokens.astype(jnp.int32)
    if cfg.kv_layout == "contiguous":
        return jnp.where(tokens > 0, cfg.max_blocks_per_request, 0).astype(jnp.int32)
    if ratio is not None:
        tokens = jnp.ceil(tokens / ratio).astype(jnp.int32)
    return (-(-tokens // cfg.block_size)).astype(jnp.int32)
