"""The engine's cost model: the seconds one iteration takes for a batch, from the batch's work
and the scenario's CostParams (a roofline over the GPUs' rates, or a fitted linear form). The
hot loop calls it every iteration; config/hardware.py builds its parameters from the catalogs
and validate/calibrate.py fits them to measured iterations."""

from __future__ import annotations

import jax.numpy as jnp

from servetune.core.types import CostParams


def step_time(
    cost: CostParams,
    form: str,
    prefill_tokens,
    decode_seqs,
    ctx_read,
    attn_work,
    overlap_host: bool = False,
):
    """Seconds of one iteration for a batch.

    prefill_tokens: prompt (or recomputed) tokens in the batch; decode_seqs: decoding sequences
    (one token each); ctx_read: KV tokens read by attention; attn_work: sum over sequences of
    new tokens x context length. An empty batch costs 0.
    overlap_host (async scheduling): the roofline's per-iteration host overhead (overhead_s:
    scheduling, input preparation, output processing) runs while the device computes the step
    before, so an iteration lasts the longer of the two, not their sum. A linear form is a fit
    to measured iterations of whichever mode ran, so it is left as it is.
    """
    tokens = prefill_tokens + decode_seqs
    if form == "linear":
        t = (
            cost.base_s
            + cost.per_prefill_token_s * prefill_tokens
            + cost.per_decode_seq_s * decode_seqs
            + cost.per_ctx_token_s * ctx_read
            + cost.per_attn_work_s * attn_work
        )
    else:
        flops = cost.flops_per_token * tokens + cost.attn_flops_per_token_ctx * attn_work
        bytes_moved = cost.weight_bytes + cost.kv_bytes_per_token * (ctx_read + tokens)
        compute = jnp.maximum(flops / cost.flops_rate, bytes_moved / cost.byte_rate)
        if overlap_host:
            comm = cost.comm_fixed_s + cost.comm_s_per_token * tokens
            t = jnp.maximum(compute + comm, cost.overhead_s)
        else:  # (the sum in its historical order: float results unchanged)
            t = compute + cost.overhead_s + cost.comm_fixed_s + cost.comm_s_per_token * tokens
    return jnp.where(tokens > 0, t, 0.0)
