"""GPU and model catalogs, memory -> KV capacity, and the per-iteration cost model's parameters.

Every catalog figure carries its public source. Memory is the capacity the driver reports, in
GiB: the "80 GB" of an A100/H100 is 80 GiB of HBM, the H200's "141 GB" about 140 GiB (143,771 MiB
in nvidia-smi), the L40S's "48 GB" about 45 GiB (46,068 MiB). Prices are assumptions (list prices
move); override them with `hardware.price_per_gpu_hour`.
"""

from __future__ import annotations

import dataclasses
import math

import jax.numpy as jnp

from servetune.core.errors import ConfigError
from servetune.core.suggest import closest_first
from servetune.core.types import CostParams

GIB = 1024**3
MIB = 1024**2


@dataclasses.dataclass(frozen=True)
class GPUSpec:
    """One GPU: dense bf16 peak (FLOP/s), HBM bandwidth (bytes/s), memory (bytes), TP link,
    price, board power."""

    name: str
    peak_flops: float  # dense bf16 FLOP/s
    hbm_bytes_per_s: float
    memory_bytes: float
    link_bytes_per_s: float  # per-GPU interconnect bandwidth used by tensor-parallel all-reduce
    price_per_gpu_hour: float  # USD, assumption (see module docstring)
    tdp_w: float  # board power (TDP) in watts, from the datasheet (run/energy.py)


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """A decoder-only transformer's shape, from its published config.json."""

    name: str
    params: float
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    max_context: int
    hf_id: str = ""  # the Hugging Face repository vLLM and SGLang load (--model)


GPUS: dict[str, GPUSpec] = {
    # NVIDIA A100 datasheet (SXM 80GB): BF16 tensor 312 TFLOPS dense, HBM2e 2,039 GB/s, 80 GB,
    # NVLink 600 GB/s, max TDP 400 W. Price: assumed on-demand cloud rate.
    "a100_80gb": GPUSpec("A100-80GB", 312e12, 2039e9, 80 * GIB, 600e9, 1.80, 400.0),
    # NVIDIA H100 datasheet (SXM): BF16 tensor 1,979 TFLOPS with sparsity = 989 dense,
    # HBM3 3.35 TB/s, 80 GB, NVLink 900 GB/s, max TDP 700 W. Price: assumed on-demand cloud rate.
    "h100": GPUSpec("H100-SXM", 989e12, 3.35e12, 80 * GIB, 900e9, 2.50, 700.0),
    # NVIDIA H200 datasheet (SXM): BF16 1,979 TFLOPS sparse = 989 dense, HBM3e 4.8 TB/s, 141 GB,
    # NVLink 900 GB/s, max TDP 700 W. Price: assumed on-demand cloud rate.
    "h200": GPUSpec("H200", 989e12, 4.8e12, 140 * GIB, 900e9, 3.50, 700.0),
    # NVIDIA L40S datasheet: BF16 tensor 362.05 TFLOPS dense (733 sparse), GDDR6 864 GB/s, 48 GB,
    # PCIe Gen4 x16 64 GB/s, max power 350 W. Price: assumed on-demand cloud rate.
    "l40s": GPUSpec("L40S", 362.05e12, 864e9, 45 * GIB, 64e9, 0.90, 350.0),
    # NVIDIA Blackwell datasheet (HGX B200), as aiconfigurator-core 0.12.0's b200_sxm.yaml cites
    # it: BF16 tensor 2,250 TFLOPS dense, HBM3e 7.7 TB/s, 180 GiB; NVLink 5 1.8 TB/s; 1,000 W.
    # Price: assumed on-demand cloud rate.
    "b200": GPUSpec("B200", 2250e12, 7.7e12, 180 * GIB, 1.8e12, 6.00, 1000.0),
    # The next four as aiconfigurator-core 0.12.0's systems/*.yaml give them, from NVIDIA's
    # Blackwell and Blackwell Ultra datasheets and nvidia-smi: memory in MiB as nvidia-smi
    # reports it; NVLink 5 1.8 TB/s (bidirectional, as the H100's 900 GB/s above). Prices:
    # assumed on-demand cloud rates.
    # B300 (HGX): BF16 2,250 TFLOPS dense, 7.75 TB/s, 275,040 MiB, 1,100 W.
    "b300": GPUSpec("B300", 2250e12, 7.75e12, 275040 * MIB, 1.8e12, 7.50, 1100.0),
    # GB200 (per Blackwell GPU of the superchip): BF16 2,500 TFLOPS dense, 8 TB/s, 189,471 MiB,
    # 1,200 W.
    "gb200": GPUSpec("GB200", 2500e12, 8.0e12, 189471 * MIB, 1.8e12, 7.00, 1200.0),
    # GB300: BF16 2,500 TFLOPS dense, 8 TB/s, 284,208 MiB, 1,400 W.
    "gb300": GPUSpec("GB300", 2500e12, 8.0e12, 284208 * MIB, 1.8e12, 9.00, 1400.0),
    # RTX PRO 6000 Blackwell Server Edition: BF16 467.8 TFLOPS dense at 2,430 MHz, GDDR7
    # 1.792 TB/s, 97,887 MiB, PCIe Gen5 x16 (128 GB/s bidirectional), 600 W.
    "rtx_pro_6000": GPUSpec("RTX-PRO-6000", 467.8e12, 1.792e12, 97887 * MIB, 128e9, 1.80, 600.0),
}
# aiconfigurator-core's system names for the same GPUs: hardware.gpu takes either
GPU_ALIASES = {
    "a100_sxm": "a100_80gb",
    "h100_sxm": "h100",
    "h200_sxm": "h200",
    "b200_sxm": "b200",
    "b300_sxm": "b300",
    "rtx_pro_6000_server": "rtx_pro_6000",
}

MODELS: dict[str, ModelSpec] = {
    # meta-llama/Meta-Llama-3-8B config.json: 32 layers, hidden 4096, 32 heads, 8 KV heads,
    # max_position_embeddings 8192; 8.03e9 parameters (model card).
    "llama3_8b": ModelSpec(
        "Llama-3-8B", 8.03e9, 32, 4096, 32, 8, 128, 8192, "meta-llama/Meta-Llama-3-8B"
    ),
    # meta-llama/Meta-Llama-3-70B config.json: 80 layers, hidden 8192, 64 heads, 8 KV heads,
    # max_position_embeddings 8192; 70.6e9 parameters (model card).
    "llama3_70b": ModelSpec(
        "Llama-3-70B", 70.6e9, 80, 8192, 64, 8, 128, 8192, "meta-llama/Meta-Llama-3-70B"
    ),
    # Qwen/Qwen2.5-7B-Instruct config.json: 28 layers, hidden 3584, 28 heads, 4 KV heads,
    # max_position_embeddings 32768; 7.61e9 parameters (model card).
    "qwen2_5_7b": ModelSpec(
        "Qwen2.5-7B", 7.61e9, 28, 3584, 28, 4, 128, 32768, "Qwen/Qwen2.5-7B-Instruct"
    ),
    # Qwen/Qwen3-8B config.json: 36 layers, hidden 4096, 32 heads, 8 KV heads, head_dim 128,
    # max_position_embeddings 40960; 8.2e9 parameters (model card: 8.2B).
    "qwen3_8b": ModelSpec("Qwen3-8B", 8.19e9, 36, 4096, 32, 8, 128, 40960, "Qwen/Qwen3-8B"),
    # Qwen/Qwen3-32B config.json: 64 layers, hidden 5120, 64 heads, 8 KV heads, head_dim 128,
    # max_position_embeddings 40960; 32.8e9 parameters (model card: 32.8B).
    "qwen3_32b": ModelSpec("Qwen3-32B", 32.8e9, 64, 5120, 64, 8, 128, 40960, "Qwen/Qwen3-32B"),
    # meta-llama/Llama-3.2-1B config.json: 16 layers, hidden 2048, 32 heads, 8 KV heads,
    # head_dim 64, max_position_embeddings 131072; 1.24e9 parameters (model card: 1.23B).
    # Shares Llama 3's tokenizer, so it can draft for Llama-3-8B/70B.
    "llama3_2_1b": ModelSpec(
        "Llama-3.2-1B", 1.24e9, 16, 2048, 32, 8, 64, 131072, "meta-llama/Llama-3.2-1B"
    ),
}

_BITS = (4, 8, 16)


MIN_PRICE = 1e-6  # USD per GPU-hour (or exactly 0): useful tokens / cost then stays finite


def check_price(price: float, key: str) -> None:
    """ConfigError naming `key` for a price (USD per GPU-hour) above 0 but below MIN_PRICE,
    at which tokens per dollar would overflow to inf; 0 means free (tokens per dollar
    undefined, NaN)."""
    if 0 < price < MIN_PRICE:
        raise ConfigError(
            f"{key}: got {price!r}; expected 0 (free: tokens per dollar "
            f"undefined) or at least {MIN_PRICE:g} USD per GPU-hour"
        )


def _aliases(catalog: dict) -> dict:
    """Other names of the catalog's entries: aiconfigurator-core's system names of the GPUs,
    the Hugging Face ids of the models."""
    if catalog is GPUS:
        return GPU_ALIASES
    if catalog is MODELS:
        return {spec.hf_id: name for name, spec in MODELS.items() if spec.hf_id}
    return {}


def canonical(catalog: dict, name: str, key: str) -> str:
    """The catalog's key for `name` (a key or an alias), or ConfigError naming `key` and the
    known names, closest first."""
    if name in catalog:
        return name
    aliases = _aliases(catalog)
    if name in aliases:
        return aliases[name]
    raise ConfigError(
        f"{key}: unknown name {name!r}; expected one of {', '.join(closest_first(name, catalog))}"
        + (f" (or {', '.join(sorted(aliases))})" if aliases else "")
    )


def lookup(catalog: dict, name: str, key: str):
    """Return the catalog's entry for `name` (a key or an alias, `canonical`), or raise
    ConfigError naming `key` and the known names."""
    return catalog[canonical(catalog, name, key)]


def kv_bytes_per_token(model: ModelSpec, kv_bits: int) -> float:
    """Bytes of K and V for one token across all layers at `kv_bits` precision."""
    return 2.0 * model.layers * model.kv_heads * model.head_dim * kv_bits / 8.0


def weight_bytes(model: ModelSpec, weight_bits: int) -> float:
    """Bytes of model weights at `weight_bits` precision."""
    return model.params * weight_bits / 8.0


@dataclasses.dataclass(frozen=True)
class ModelWork:
    """What the model computes and moves on one instance, and the instance's peaks: turns the
    loop's work counters (types.Stats.work) into model FLOPs and bandwidth utilization. The
    same accounting as the roofline step time (`cost.step_time`), at the GPUs' peak rates."""

    flops_per_token: float  # dense FLOPs per token (2 x parameters)
    attn_flops_per_work: float  # attention FLOPs per (new token x context token)
    weight_bytes: float  # bytes of weights read per iteration
    kv_bytes_per_token: float  # KV bytes per token read or written
    peak_flops: float  # FLOP/s of the instance (tp x the GPU's dense bf16 peak)
    peak_bytes_per_s: float  # HBM bytes/s of the instance (tp x the GPU's)
    tdp_w: float = 0.0  # board power of the instance in watts (tp x the GPU's TDP)


def model_work(
    gpu: GPUSpec, model: ModelSpec, *, tp: int, weight_bits: int, kv_bits: int
) -> ModelWork:
    """ModelWork of `model` at these precisions on an instance of `tp` x `gpu`."""
    return ModelWork(
        flops_per_token=2.0 * model.params,
        attn_flops_per_work=4.0 * model.layers * model.heads * model.head_dim,
        weight_bytes=weight_bytes(model, weight_bits),
        kv_bytes_per_token=kv_bytes_per_token(model, kv_bits),
        peak_flops=tp * gpu.peak_flops,
        peak_bytes_per_s=tp * gpu.hbm_bytes_per_s,
        tdp_w=tp * gpu.tdp_w,
    )


# KV blocks of one instance: block counts are int32 on device, and sums of a few of them (the
# watermark's kv + 1, free + held) must not wrap around.
MAX_KV_BLOCKS = 1 << 30


def kv_capacity_blocks(
    gpu: GPUSpec,
    model: ModelSpec,
    *,
    tp: int,
    weight_bits: int,
    kv_bits: int,
    block_size: int,
    gpu_memory_utilization: float,
    activation_reserve_gib: float,
    max_model_len: int,
    extra_weight_bytes: float = 0.0,
    extra_kv_bytes_per_token: float = 0.0,
) -> int:
    """KV-cache blocks that fit in the instance's memory after weights and activation reserve.

    memory = tp x gpu memory x utilization; KV = memory - weights - tp x reserve.
    extra_*: what a second model on the same GPUs (a speculative draft) adds: its weights, and
    its KV bytes per token (each block then holds both models' KV of its tokens).
    Raises ConfigError when the weights do not fit, when one max_model_len sequence does not
    (as vLLM refuses to start in that case), or when there would be more than MAX_KV_BLOCKS.
    """
    for key, bits in (("model.weight_bits", weight_bits), ("model.kv_bits", kv_bits)):
        if bits not in _BITS:
            raise ConfigError(f"{key}: got {bits}; expected one of {_BITS}")
    if tp < 1 or model.heads % tp:
        raise ConfigError(
            f"hardware.tp: got {tp}; expected a positive divisor of {model.name}'s "
            f"{model.heads} attention heads"
        )
    if not 0.0 < gpu_memory_utilization <= 1.0:
        raise ConfigError(
            f"engine.gpu_memory_utilization: got {gpu_memory_utilization}; expected in (0, 1]"
        )
    usable = tp * gpu.memory_bytes * gpu_memory_utilization
    weights = weight_bytes(model, weight_bits) + extra_weight_bytes
    kv_memory = usable - weights - tp * activation_reserve_gib * GIB
    if kv_memory <= 0:
        raise ConfigError(
            f"model: {model.name} does not fit: it needs {weights / 1e9:.1f} GB of "
            f"{weight_bits}-bit weights, "
            f"but {tp} x {gpu.name} at gpu_memory_utilization={gpu_memory_utilization} leaves "
            f"{usable / 1e9:.1f} GB minus {tp * activation_reserve_gib:.1f} GiB activation "
            f"reserve; "
            f"raise hardware.tp or lower model.weight_bits"
        )
    per_token = kv_bytes_per_token(model, kv_bits) + extra_kv_bytes_per_token
    blocks = int(kv_memory // (block_size * per_token))
    if blocks > MAX_KV_BLOCKS:
        raise ConfigError(
            f"engine.block_size: {tp} x {gpu.name} ({gpu.memory_bytes / GIB:.4g} GiB each) would "
            f"hold {blocks} KV blocks of {block_size} tokens; the simulator counts blocks in "
            f"int32 and allows at most {MAX_KV_BLOCKS}; raise engine.block_size or lower "
            f"engine.gpu_memory_utilization or the hardware's memory"
        )
    needed = -(-max_model_len // block_size)
    if blocks < needed:
        raise ConfigError(
            f"engine.max_model_len: {max_model_len} tokens need {needed} KV blocks but "
            f"{model.name} on {tp} x {gpu.name} has room for {blocks}; lower engine.max_model_len "
            f"or add memory (hardware.tp, model.kv_bits)"
        )
    return blocks


def roofline_cost_params(
    gpu: GPUSpec,
    model: ModelSpec,
    *,
    tp: int,
    weight_bits: int,
    kv_bits: int,
    kv_blocks: int,
    flops_efficiency: float,
    bandwidth_efficiency: float,
    overhead_s: float,
    allreduce_latency_s: float,
    activation_bits: int = 16,
) -> CostParams:
    """CostParams of the roofline step-time model for `model` on `tp` x `gpu`.

    Precision: an iteration reads every weight once (params x weight_bits / 8 bytes) and the
    KV of its context plus writes its new tokens' KV (kv_bits), so a memory-bound decode step
    shrinks with both. Quantization is weight-only (W8A16 / W4A16, as GPTQ/AWQ kernels in vLLM
    run it): matmuls still run in 16-bit, so FLOPs and the FLOP rate do not change with bits,
    and dequantization overhead and the scales' few extra bits per group are not modeled.

    The tensor-parallel all-reduce (two per layer, ring algorithm) costs
    2 x layers x (2 (tp-1)/tp x tokens x hidden x activation bytes / link bandwidth + latency).
    """
    comm_per_token = 0.0
    comm_fixed = 0.0
    if tp > 1:
        ring = 2.0 * (tp - 1) / tp
        comm_per_token = (
            2 * model.layers * ring * model.hidden * activation_bits / 8 / gpu.link_bytes_per_s
        )
        comm_fixed = 2 * model.layers * allreduce_latency_s
    f = lambda x: jnp.asarray(x, jnp.float64)
    return CostParams(
        flops_per_token=f(2.0 * model.params),
        attn_flops_per_token_ctx=f(4.0 * model.layers * model.heads * model.head_dim),
        weight_bytes=f(weight_bytes(model, weight_bits)),
        kv_bytes_per_token=f(kv_bytes_per_token(model, kv_bits)),
        flops_rate=f(tp * gpu.peak_flops * flops_efficiency),
        byte_rate=f(tp * gpu.hbm_bytes_per_s * bandwidth_efficiency),
        overhead_s=f(overhead_s),
        comm_s_per_token=f(comm_per_token),
        comm_fixed_s=f(comm_fixed),
        base_s=f(0.0),
        per_prefill_token_s=f(0.0),
        per_decode_seq_s=f(0.0),
        per_ctx_token_s=f(0.0),
        per_attn_work_s=f(0.0),
        kv_blocks=jnp.asarray(kv_blocks, jnp.int32),
    )


def linear_cost_params(
    *,
    base_s: float,
    per_prefill_token_s: float,
    per_decode_seq_s: float,
    per_ctx_token_s: float,
    kv_blocks: int,
    per_attn_work_s: float = 0.0,
) -> CostParams:
    """CostParams of the linear step-time model (roofline fields zero); seconds per
    iteration, per prefill token, per decoding sequence, per context token read and per unit
    of attention work (a new token x a context token)."""
    for key, v in (
        ("cost.base_s", base_s),
        ("cost.per_prefill_token_s", per_prefill_token_s),
        ("cost.per_decode_seq_s", per_decode_seq_s),
        ("cost.per_ctx_token_s", per_ctx_token_s),
        ("cost.per_attn_work_s", per_attn_work_s),
    ):
        if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
            raise ConfigError(f"{key}: got {v!r}; expected a finite number >= 0 (seconds)")
    f = lambda x: jnp.asarray(x, jnp.float64)
    z = f(0.0)
    return CostParams(
        flops_per_token=z,
        attn_flops_per_token_ctx=z,
        weight_bytes=z,
        kv_bytes_per_token=z,
        flops_rate=f(1.0),
        byte_rate=f(1.0),
        overhead_s=z,
        comm_s_per_token=z,
        comm_fixed_s=z,
        base_s=f(base_s),
        per_prefill_token_s=f(per_prefill_token_s),
        per_decode_seq_s=f(per_decode_seq_s),
        per_ctx_token_s=f(per_ctx_token_s),
        per_attn_work_s=f(per_attn_work_s),
        kv_blocks=jnp.asarray(kv_blocks, jnp.int32),
    )
