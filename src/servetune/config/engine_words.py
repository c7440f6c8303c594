"""What the simulated engine is and where its step times come from, in the words a run's
summary prints under its header (a pasted summary then says what kind of engine it was)."""

from __future__ import annotations

from servetune.core.types import EngineConfig


def engine_line(engine: EngineConfig) -> str:
    """ "vLLM 0.32 scheduler: continuous batching, paged KV cache, chunked prefill", or what
    the engine does instead (static batching, contiguous KV, no chunking, async scheduling)."""
    if engine.batching == "static":
        kind = "static batching (a batch runs until all of it finishes; the pre-vLLM baseline)"
    else:
        kind = f"vLLM {engine.vllm_version} scheduler: continuous batching"
    kv = (
        "contiguous KV (max_model_len reserved at admission)"
        if engine.kv_layout == "contiguous"
        else "paged KV cache"
    )
    parts = [kind, kv, "chunked prefill" if engine.chunked_prefill else "no chunked prefill"]
    if engine.prefix_cache:
        parts.append("prefix caching")
    if engine.async_scheduling:
        parts.append("async scheduling")
    return ", ".join(parts)


def step_time_line(form: str, gpu_figures: dict | None, coefficients: dict | None) -> str | None:
    """Where the step times come from: the roofline and its efficiencies, or the linear
    model's coefficients (seconds); None for cost=aic, whose summary line says more."""
    if form == "roofline" and gpu_figures:
        return (
            f"roofline (flops efficiency {gpu_figures['flops_efficiency']:g}, bandwidth "
            f"efficiency {gpu_figures['bandwidth_efficiency']:g}, overhead "
            f"{gpu_figures['overhead_s'] * 1e3:g} ms per step)"
        )
    if form == "linear" and coefficients:
        c = coefficients
        attn = c.get("per_attn_work_s", 0.0)
        return (
            f"linear ({c['base_s'] * 1e3:g} ms + {c['per_prefill_token_s'] * 1e3:g} ms per "
            f"prefill token + {c['per_decode_seq_s'] * 1e3:g} ms per decode sequence + "
            f"{c['per_ctx_token_s'] * 1e3:g} ms per context token"
            + (f" + {attn * 1e6:g} us per unit of attention work" if attn else "")
            + "; cost.*)"
        )
    return None
