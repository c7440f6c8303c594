"""Step times from NVIDIA's aiconfigurator-core performance database (`cost=aic`).

aiconfigurator-core (Apache-2.0, the optional extra `servetune[aic]`) ships per-operation
performance tables measured on real GPUs (GEMM, context and generation attention,
communication, ...) per engine (vLLM, SGLang, TensorRT-LLM) and version, and composes them into
the latency of one engine iteration (`sdk.rust_engine_step`). servetune asks it, on the host
and once per scenario (an `AicTarget`: GPU, model, TP, engine and version, BF16 or FP8 weights
and KV), for the iterations the simulator can produce: prefills of 16 to 16,384
tokens, decodes of 1 to 1,024 sequences at contexts up to max_model_len, and mixes of the two.
Each answer comes with the batch's work in servetune's terms (prefill tokens P, decoding
sequences D, context tokens read C, attention work W; engine/step.batch_totals), and the
engine's linear cost form, base + a P + b D + c C + d W seconds, is fitted to them in relative
error with non-negative coefficients. The hot loop then evaluates that form: cheap and
differentiable. The fit's relative error over the grid is reported (`AicFit`); batches beyond
the grid extrapolate the form.

How the database's shapes map to servetune's work: a prefill of P tokens is P / isl prompts of
isl tokens each (one prompt where P < max_model_len, and also prompts of 256, 1,024 and 4,096
tokens, so that the prefill and attention terms are told apart; C = 0,
W = P (isl + 1) / 2); a decode of D
sequences at context s reads D s tokens (W = D (s + 1)); aiconfigurator's mixed step gives its
decodes the context isl + osl // 2 + 1 of its prompts (isl), so the mix is charged that
context.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from servetune.core.errors import ConfigError
from servetune.core.suggest import closest_first

AIC_EXTRA_HINT = "cost=aic needs the optional extra: pip install 'servetune[aic]'"
AIC_VERSION = "0.12.0"  # the aiconfigurator-core release these mappings were read from

# servetune's GPU names -> aiconfigurator-core's systems (sdk/systems/*.yaml)
SYSTEMS = {
    "a100_80gb": "a100_sxm",
    "h100": "h100_sxm",
    "h200": "h200_sxm",
    "l40s": "l40s",
    "b200": "b200_sxm",
    "b300": "b300_sxm",
    "gb200": "gb200",
    "gb300": "gb300",
    "rtx_pro_6000": "rtx_pro_6000_server",
}
# servetune's models -> the database's model ids. Llama 3.1 has Llama 3's layers, widths and
# heads (config.json: 32 / 80 layers, hidden 4096 / 8192, 8 KV heads); only its RoPE scaling
# and context length differ, which do not change the work per token.
MODELS = {
    "llama3_8b": "meta-llama/Meta-Llama-3.1-8B",
    "llama3_70b": "meta-llama/Meta-Llama-3.1-70B",
    "qwen3_8b": "Qwen/Qwen3-8B",
    "qwen3_32b": "Qwen/Qwen3-32B",
}
BACKENDS = ("vllm", "sglang", "trtllm")
# model.weight_bits / model.kv_bits -> the database's GEMM and KV-cache modes: 16-bit is BF16;
# 8-bit is FP8 (vLLM's --quantization fp8 and --kv-cache-dtype fp8; Ada, Hopper and Blackwell
# GPUs only). The database has no 4-bit GEMM tables for these engines' dense models.
GEMM_MODES = {16: "bfloat16", 8: "fp8"}
KV_MODES = {16: "bfloat16", 8: "fp8"}

PREFILL_TOKENS = (16, 64, 256, 512, 1024, 2048, 4096, 8192, 16384)
PROMPT_LENGTHS = (256, 1024, 4096)  # a prefill of more tokens is also queried as such prompts
DECODE_SEQS = (1, 4, 16, 64, 128, 256, 512, 1024)
CONTEXTS = (128, 512, 1024, 2048, 4096, 8192, 16384, 32768, 131072)
MIX_DECODE_OSL = 2  # the mixed step's decodes sit at context isl + 2 (osl // 2 + 1)


@dataclass(frozen=True)
class AicTarget:
    """What to ask the database about: servetune's GPU and model names, tensor parallelism,
    the engine and its database version (None = the latest), max_model_len (tokens) and the
    weight and KV-cache precisions (bits)."""

    gpu: str
    model: str
    tp: int = 1
    backend: str = "vllm"
    version: str | None = None
    max_model_len: int = 8192
    weight_bits: int = 16
    kv_bits: int = 16


@dataclass(frozen=True)
class AicFit:
    """The linear step-time form fitted to aiconfigurator-core's estimates (seconds per unit),
    what it was fitted on, and how well it fits (relative errors over the grid)."""

    coefficients: dict  # base_s, per_prefill_token_s, per_decode_seq_s, per_ctx_token_s, ...
    system: str  # the database's GPU (h100_sxm, ...)
    model: str  # the database's model id
    backend: str
    version: str  # the database's version for the backend
    precision: str  # the database's GEMM and KV-cache modes read ("bfloat16 / fp8")
    n_points: int
    rel_error_p50: float
    rel_error_p90: float
    rel_error_max: float
    max_prefill_tokens: int  # the grid's largest batch, beyond which the form extrapolates
    max_decode_seqs: int


def coverage() -> str:
    """What cost=aic covers (servetune's GPU and model names, with the database's in
    parentheses) and whether the extra is installed: a few lines for `simulate --help`."""
    from importlib import metadata

    try:
        installed = f"installed: aiconfigurator-core {metadata.version('aiconfigurator-core')}"
    except metadata.PackageNotFoundError:
        installed = f"not installed: {AIC_EXTRA_HINT.split(': ', 1)[1]}"
    gpus = ", ".join(f"{k} ({v})" if k != v else k for k, v in SYSTEMS.items())
    models = ", ".join(f"{k} ({v})" for k, v in MODELS.items())
    return (
        f"cost=aic (NVIDIA aiconfigurator-core's measured step times; {installed}):\n"
        f"  hardware.gpu: {gpus}\n  model.name: {models}\n"
        f"  cost.backend: {', '.join(BACKENDS)}; BF16 or FP8 weights and KV; hardware.tp as the "
        f"database covers it"
    )


def _import():
    """aiconfigurator-core's SDK modules (config, models, perf_database, rust_engine_step,
    common), quiet; ConfigError naming the extra without it."""
    try:
        from aiconfigurator_core.sdk import common, config, models, perf_database, rust_engine_step
    except ImportError:
        raise ConfigError(AIC_EXTRA_HINT) from None
    # it logs a "low-fidelity fallback" per operation a model does not use (MLA, sparse
    # attention): not servetune's concern
    logging.getLogger("aiconfigurator_core").setLevel(logging.ERROR)
    return config, models, perf_database, rust_engine_step, common


def _names(gpu_key: str, model_key: str, backend: str) -> tuple[str, str]:
    """(system, model id) of the database for servetune's GPU and model; ConfigError where the
    database has none."""
    if backend not in BACKENDS:
        raise ConfigError(f"cost.backend: got {backend!r}; expected one of {', '.join(BACKENDS)}")
    if gpu_key not in SYSTEMS:
        raise ConfigError(
            f"hardware.gpu: {gpu_key!r} has no aiconfigurator-core system; cost=aic covers "
            f"{', '.join(closest_first(gpu_key, SYSTEMS))}"
        )
    if model_key not in MODELS:
        raise ConfigError(
            f"model.name: {model_key!r} has no aiconfigurator-core model; cost=aic covers "
            f"{', '.join(closest_first(model_key, MODELS))}"
        )
    return SYSTEMS[gpu_key], MODELS[model_key]


def _grid(max_model_len: int) -> list[tuple[int, int, int, int]]:
    """(prefill tokens, their prompts' length, decoding sequences, decode context) of the
    batches queried: prefills alone, decodes alone at each context, and prefills mixed with
    decodes. A prefill longer than the longest prompt below max_model_len is several prompts."""
    contexts = [s for s in CONTEXTS if s <= max_model_len] or [max_model_len]
    longest = max([p for p in PREFILL_TOKENS if p < max_model_len] or [1])
    prompts = {(p, min(p, longest)) for p in PREFILL_TOKENS}
    prompts |= {(p, n) for p in PREFILL_TOKENS for n in PROMPT_LENGTHS if n < min(p, longest)}
    prompts = sorted(prompts)
    shapes = [(p, isl, 0, 0) for p, isl in prompts]
    shapes += [(0, 0, d, s) for d in DECODE_SEQS for s in contexts]
    shapes += [(p, isl, d, isl + MIX_DECODE_OSL) for p, isl in prompts for d in DECODE_SEQS]
    return shapes


def _work(prefill: int, isl: int, decode: int, context: int) -> tuple[float, float, float, float]:
    """(P, D, C, W) of a batch in servetune's terms (engine/step.batch_totals)."""
    attn = prefill * (isl + 1) / 2 + decode * (context + 1)
    return float(prefill), float(decode), float(decode * context), float(attn)


def _estimate(
    sdk, model, db, prefill: int, isl: int, decode: int, context: int
) -> tuple[float, float]:
    """(seconds, joules) of one batch from the database."""
    if prefill == 0:
        out = sdk.estimate_decode_step_breakdown_with_rust(
            model, db, gen_tokens=decode, isl=context - MIX_DECODE_OSL, osl=MIX_DECODE_OSL
        )
        latency_ms, energy_wms = out[0], out[1]
    else:
        out = sdk.estimate_mixed_step_breakdown_with_rust(
            model,
            db,
            ctx_tokens=prefill,
            gen_tokens=decode,
            isl=isl,
            osl=MIX_DECODE_OSL,
            prefix=0,
        )
        latency_ms, energy_wms = out["latency_ms"], out["energy_wms"]
    return latency_ms / 1e3, energy_wms / 1e3


def _model_config(config, common, tp: int, weight_bits: int, kv_bits: int):
    """aiconfigurator-core's ModelConfig for this tensor parallelism and these precisions;
    ConfigError naming the key whose precision the database has no tables for."""
    for key, bits, modes in (
        ("model.weight_bits", weight_bits, GEMM_MODES),
        ("model.kv_bits", kv_bits, KV_MODES),
    ):
        if bits not in modes:
            raise ConfigError(
                f"{key}: got {bits}; cost=aic reads the database's BF16 (16) and FP8 (8) "
                f"tables, expected one of {', '.join(map(str, modes))}"
            )
    return config.ModelConfig(
        tp_size=int(tp),
        gemm_quant_mode=common.GEMMQuantMode[GEMM_MODES[weight_bits]],
        kvcache_quant_mode=common.KVCacheQuantMode[KV_MODES[kv_bits]],
    )


def _precision_at_fault(target: AicTarget, db, shape, libs) -> tuple[str, ...]:
    """The precision keys (model.weight_bits, model.kv_bits) whose 8-bit tables the database
    lacks for a batch it could not estimate: the fewest whose return to 16 bits makes the same
    batch estimable; () where none does (the batch itself is what it cannot estimate)."""
    config, models, sdk, common = libs
    system, model_id = _names(target.gpu, target.model, target.backend)
    w, kv = target.weight_bits, target.kv_bits
    lowered = [key for key, bits in (("model.weight_bits", w), ("model.kv_bits", kv)) if bits < 16]
    candidates = [(key,) for key in lowered] + ([tuple(lowered)] if len(lowered) == 2 else [])
    for keys in candidates:
        bits = (16 if "model.weight_bits" in keys else w, 16 if "model.kv_bits" in keys else kv)
        try:
            model = models.get_model(
                model_id, _model_config(config, common, target.tp, *bits), target.backend
            )
            _estimate(sdk, model, db, *shape)
        except Exception:  # noqa: BLE001 -- the database's errors are of many kinds
            continue
        return keys
    return ()


def query(target: AicTarget):
    """The database's estimates over the grid for `target`: (work [n, 4] as P, D, C, W;
    seconds [n]; joules [n]; (system, model id, version)). A configuration or batch the
    database cannot estimate is a ConfigError naming it, never a silent fallback."""
    config, models, perf_database, sdk, common = _import()
    t = target
    system, model_id = _names(t.gpu, t.model, t.backend)
    backend, version = t.backend, t.version
    if version is None:
        version = perf_database.get_latest_database_version(system, backend)
    what = (
        f"{backend} {version} data for {model_id} on {system} with tp {t.tp}, "
        f"{GEMM_MODES.get(t.weight_bits)} weights and {KV_MODES.get(t.kv_bits)} KV cache"
    )
    try:
        db = perf_database.get_database(system, backend, str(version))
        model = models.get_model(
            model_id, _model_config(config, common, t.tp, t.weight_bits, t.kv_bits), backend
        )
    except ConfigError:
        raise
    except Exception as err:  # the database's own message names what it lacks
        raise ConfigError(f"cost=aic: aiconfigurator-core has no {what}: {err}") from None
    if db is None:
        raise ConfigError(f"cost.version: {backend} {version!r} is not in the {system} database")
    rows, seconds, joules = [], [], []
    for shape in _grid(target.max_model_len):
        try:
            s, j = _estimate(sdk, model, db, *shape)
        except Exception as err:
            blamed = _precision_at_fault(target, db, shape, (config, models, sdk, common))
            reason = str(err).splitlines()[0][:160]
            batch = (
                f"a batch of {shape[0]} prefill tokens (prompts of {shape[1]}) and {shape[2]} "
                f"decodes at context {shape[3]}"
            )
            if blamed:
                keys = " and ".join(f"{k}={getattr(target, k.split('.')[1])}" for k in blamed)
                raise ConfigError(
                    f"{keys}: aiconfigurator-core's {backend} {version} data for {system} has "
                    f"no tables for that precision ({batch}: {reason}); at 16 bits it "
                    f"estimates the same batch: set {' '.join(f'{k}=16' for k in blamed)}, or "
                    f"choose a GPU it measured at FP8 (hardware=h100, ...)"
                ) from None
            raise ConfigError(
                f"cost=aic: aiconfigurator-core could not estimate {batch} from its {what}: "
                f"{reason}"
            ) from None
        rows.append(_work(*shape))
        seconds.append(s)
        joules.append(j)
    return np.asarray(rows), np.asarray(seconds), np.asarray(joules), (system, model_id, version)


def fit_linear(work: np.ndarray, seconds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Non-negative (base, per P, per D, per C, per W) minimizing the relative error of
    base + work @ coefficients against `seconds`; returns (coefficients [5], relative errors
    [n])."""
    from scipy.optimize import nnls

    features = np.column_stack([np.ones(len(seconds)), work])
    scale = features.max(axis=0)  # columns of comparable size for the solver
    theta, _ = nnls(features / scale / seconds[:, None], np.ones(len(seconds)))
    theta = theta / scale
    return theta, features @ theta / seconds - 1.0


def linear_fit(target: AicTarget) -> AicFit:
    """The engine's linear cost form fitted to aiconfigurator-core's step estimates for
    `target` (see the module docstring)."""
    work, seconds, _, (system, model_id, version) = query(target)
    theta, rel = fit_linear(work, seconds)
    names = ("base_s", "per_prefill_token_s", "per_decode_seq_s", "per_ctx_token_s")
    coefficients = dict(zip(names, map(float, theta[:4]), strict=True))
    coefficients["per_attn_work_s"] = float(theta[4])
    err = np.abs(rel)
    return AicFit(
        coefficients=coefficients,
        system=system,
        model=model_id,
        backend=target.backend,
        version=str(version),
        precision=f"{GEMM_MODES[target.weight_bits]} / {KV_MODES[target.kv_bits]}",
        n_points=len(seconds),
        rel_error_p50=float(np.percentile(err, 50)),
        rel_error_p90=float(np.percentile(err, 90)),
        rel_error_max=float(err.max()),
        max_prefill_tokens=int(work[:, 0].max()),
        max_decode_seqs=int(work[:, 1].max()),
    )


def range_warnings(fit: AicFit, max_batched_tokens: float, max_num_seqs: float) -> list[str]:
    """What the scenario's policy lets a batch reach beyond the fitted grid, and how far."""
    out = []
    if max_batched_tokens > fit.max_prefill_tokens:
        out.append(
            f"cost=aic: policy.max_num_batched_tokens {max_batched_tokens:g} is "
            f"{max_batched_tokens / fit.max_prefill_tokens:.1f}x the largest prefill the fit "
            f"saw ({fit.max_prefill_tokens}); larger batches extrapolate the linear form"
        )
    if max_num_seqs > fit.max_decode_seqs:
        out.append(
            f"cost=aic: policy.max_num_seqs {max_num_seqs:g} is "
            f"{max_num_seqs / fit.max_decode_seqs:.1f}x the largest decode batch the fit saw "
            f"({fit.max_decode_seqs}); larger batches extrapolate the linear form"
        )
    return out
