"""Speculative decoding, draft-model form (Leviathan et al., ICML 2023).

Each iteration, for every decoding request, a draft model proposes k tokens (k sequential
draft passes) and the target verifies the k + 1 positions in one pass; the verified positions
count against the token budget like prefill tokens. With exact (rejection) sampling the output
is the target's: each draft token is accepted with probability alpha (the request's acceptance
rate), independently, until the first rejection; the target then adds one token of its own.
A pass therefore emits 1 + A tokens, where P(A >= j) = alpha^j for j <= k, so the mean is
(1 - alpha^(k+1)) / (1 - alpha); the emission is capped by the request's output length, which
speculation never changes. Rejected positions are computed and discarded.

Randomness is counter-based: the uniform behind a request's pass is a hash of (request id,
tokens generated so far, scenario salt), so policies compared on one workload see the same
draws (common random numbers) and a run is reproducible without a key in the carry.
"""

from __future__ import annotations

import jax.numpy as jnp

from servetune.core import relax
from servetune.core.cost import step_time
from servetune.core.types import CostParams, EngineConfig


def _mix(x):
    """A 32-bit avalanche hash (the MurmurHash3 finalizer): uint32 -> uint32."""
    x = x ^ (x >> 16)
    x = x * jnp.uint32(0x85EBCA6B)
    x = x ^ (x >> 13)
    x = x * jnp.uint32(0xC2B2AE35)
    return x ^ (x >> 16)


def uniform(req, generated, salt):
    """[A] uniform in (0, 1), a fixed function of (request id, tokens generated, salt)."""
    r = jnp.asarray(req).astype(jnp.uint32)
    g = jnp.asarray(generated).astype(jnp.uint32)
    x = _mix(
        r * jnp.uint32(0x9E3779B1)
        ^ _mix(g + jnp.uint32(0x7F4A7C15) ^ jnp.asarray(salt).astype(jnp.uint32))
    )
    return ((x >> 8).astype(jnp.float64) + 0.5) / float(1 << 24)


def draft_tokens(pol) -> jnp.ndarray:
    """[] draft tokens proposed per decoding request per iteration (the integer k)."""
    return jnp.maximum(relax.integer_limit(pol.spec_k), 0.0).astype(jnp.int32)


def relaxed_draft_tokens(pol, mode: str) -> jnp.ndarray:
    """[] f64 draft tokens per decoding request with the derivative of `relax.relaxed_limit`
    (engine.relax): the integer k in value under hard and st, spec_k itself under soft."""
    return jnp.maximum(relax.relaxed_limit(pol.spec_k, mode), 0.0)


def expected_emitted(alpha, k):
    """[A] f64 mean tokens one pass emits with k draft tokens (k may be fractional: the
    relaxation's): (1 - alpha^(k+1)) / (1 - alpha), k + 1 where alpha = 1; output caps
    ignored."""
    a = jnp.clip(alpha, 1e-12, 1.0 - 1e-9)  # finite derivatives at alpha 0 and 1
    return jnp.where(alpha >= 1.0, k + 1.0, (1.0 - a ** (k + 1.0)) / (1.0 - a))


def accepted(u, alpha, k):
    """[A] draft tokens accepted before the first rejection, at most k ([A] int): the inverse
    CDF of the truncated geometric, P(A >= j) = alpha^j."""
    log_a = jnp.log(jnp.clip(alpha, 1e-300, 1.0))
    run = jnp.where(alpha >= 1.0, k, jnp.floor(jnp.log(u) / jnp.where(log_a < 0, log_a, -1.0)))
    run = jnp.where(alpha <= 0.0, 0, run)
    return jnp.clip(run, 0, k).astype(jnp.int32)


def draft_time(draft: CostParams, cfg: EngineConfig, k, prefill_tokens, decode_seqs, ctx_read):
    """Seconds the draft model adds to an iteration with k draft tokens per decoding request:
    one pass over the batch's new prompt tokens (its own KV cache must hold them), then k
    sequential passes of one token per decoding request. `ctx_read`: context tokens of the
    decoding requests (read by each draft pass). 0 when k = 0 (speculation off).
    Draft attention FLOPs are neglected (small next to its weight reads)."""
    prefill = step_time(draft, cfg.cost_form, prefill_tokens, 0, 0.0, 0.0)
    one = step_time(draft, cfg.cost_form, 0, decode_seqs, ctx_read, 0.0)
    return jnp.where(k > 0, prefill + k * one, 0.0)
