"""Export a tuned policy: a `policy=` config file, vLLM and SGLang launch arguments, and the
tuned knobs no engine flag expresses (with how to apply them).

Integer limits are continuous thresholds while tuning; here they become the integers the
simulator enforces for them, so the exported policy simulates exactly like the tuned one:
  max_num_seqs, max_num_batched_tokens, queue_cap: floor (relax.integer_limit), the first two
    kept at least 1; an infinite queue_cap stays unbounded (null in the YAML, as in the conf
    files) and a queue_cap of 0 rejects every arrival.

Flag names come from the engines' own documentation:
  vLLM engine arguments: https://docs.vllm.ai/en/latest/serving/engine_args.html and
    SchedulerConfig (policy "fcfs" | "priority"; lower priority value is served first, ties by
    arrival): https://docs.vllm.ai/en/stable/api/vllm/config/scheduler/
  SGLang server arguments: https://docs.sglang.io/advanced_features/server_arguments.html and
    the schedule-policy choices in sgl-project/sglang python/sglang/srt/managers/schedule_policy.py
    (fcfs, lof, random, routing-key; cache-aware lpm, dfs-weight, hrrn, shortest-prefill-first).
"""

from __future__ import annotations

import json
import math
import re
import shlex
from collections.abc import Mapping
from pathlib import Path

import numpy as np
from omegaconf import DictConfig, OmegaConf

from servetune.config import fleet as fleet_lib
from servetune.config import hardware
from servetune.config.policy import BOUNDS, CAPS, DEFAULTS, FIELDS, FLOORED, ORDERS
from servetune.core.errors import ConfigError
from servetune.core.files import ensure_dir, write_json, write_text
from servetune.core.types import FleetParams
from servetune.deploy import autoscaler_export, neural_export
from servetune.engine import autoscale

# Tuned keys that are not PolicyParams (none since spec_k became one; kept for engine settings).
EXTRA_KEYS: dict[str, tuple[float, float]] = {}
WEIGHTS = ("w_age", "w_prompt", "w_pred", "w_slack")
# gateway priority = round(PRIORITY_SCALE * sort key): integer, resolution 1e-3 of the key
PRIORITY_SCALE = 1000
NET_KEY = "score_net"  # the neural order's flat network weights (servetune.engine.neural)
POLICY_FILES = ("tuned_policy.yaml", "vllm_args.json", "sglang_args.json", "unmapped_knobs.json")
# every file an export may write (write_export): an export folder holds some of these
FILE_NAMES = (
    *POLICY_FILES,
    autoscaler_export.HPA_FILE,
    autoscaler_export.KEDA_FILE,
    *neural_export.FILES,
)


def _number(key: str, value) -> float:
    """One validated float for policy key `key` (inf allowed only for the unlimited keys)."""
    lo, hi = EXTRA_KEYS.get(key) or BOUNDS.get(key, (-math.inf, math.inf))
    allow_inf = key in CAPS
    expect = (
        f"expected a number within [{lo}, {hi}] (inf or null = unbounded)"
        if allow_inf
        else f"expected a finite number within [{lo}, {hi}]"
    )
    if value is None and allow_inf:
        return math.inf
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ConfigError(f"policy.{key}: got {value!r}; {expect}") from None
    if arr.size != 1 or isinstance(value, bool):
        raise ConfigError(f"policy.{key}: got {value!r}; {expect} (one number)")
    x = float(arr.reshape(()))
    if math.isnan(x) or (math.isinf(x) and not allow_inf) or not lo <= x <= hi:
        raise ConfigError(f"policy.{key}: got {value!r}; {expect}")
    return x


def _effective(values: Mapping[str, object], order: str) -> dict[str, float]:
    """Defaults, then the order's weights, then `values` (as make_policy merges them),
    validated and with integer limits rounded. Speculation (`spec_k`) is kept if given."""
    if order not in ORDERS:
        raise ConfigError(f"policy.order: got {order!r}; expected one of {sorted(ORDERS)}")
    values = {k: v for k, v in values.items() if k != NET_KEY}  # see write_export
    for key in values:
        if key not in DEFAULTS and key not in EXTRA_KEYS:
            raise ConfigError(
                f"policy.{key}: unknown policy parameter; expected one of "
                f"{sorted(DEFAULTS) + sorted(EXTRA_KEYS)}"
            )
    merged = {**DEFAULTS, **ORDERS[order], **values}
    out = {key: _number(key, value) for key, value in merged.items()}
    for key in FLOORED:
        out[key] = max(1, math.floor(out[key]))
    for key in CAPS:
        if math.isfinite(out[key]):
            out[key] = math.floor(out[key])
    out["long_prefill_token_threshold"] = math.floor(out["long_prefill_token_threshold"])
    if "spec_k" in out:
        out["spec_k"] = math.floor(out["spec_k"])
    return out


def _engine_dict(engine) -> dict:
    if isinstance(engine, DictConfig):
        engine = OmegaConf.to_container(engine, resolve=True)
    engine = dict(engine or {})
    if (
        engine.get("batching", "continuous") != "continuous"
        or engine.get("kv_layout", "paged") != "paged"
    ):
        raise ConfigError(
            f"engine: batching={engine.get('batching')!r}, kv_layout="
            f"{engine.get('kv_layout')!r}; vLLM and SGLang export needs continuous "
            f"batching with a paged KV cache"
        )
    return engine


def _infer_order(values: Mapping[str, object]) -> str:
    if values.get(NET_KEY) is not None:
        return "neural"
    eff = _effective(values, "parametric")  # parametric: the weights as given, else defaults
    return "fcfs" if {k: eff[k] for k in WEIGHTS} == ORDERS["fcfs"] else "parametric"


def as_deployed(values: Mapping[str, object], order: str | None = None) -> dict:
    """The tuned `values` as the exports write them: integer limits floored as the engine
    floors them (max_num_seqs 1199.7 is 1199 sequences), unlimited ones inf, the network's
    weights as given, the autoscaler's "fleet.<key>" values as simulated (as_simulated); the
    keys of `values` only."""
    policy, fleet = split_fleet(values)
    eff = _effective(policy, _infer_order(policy) if order is None else order)
    rounded = as_simulated(fleet)
    return {
        k: (v if k == NET_KEY else eff[k] if k in policy else rounded[k[len(fleet_lib.PREFIX) :]])
        for k, v in values.items()
    }


def split_fleet(values: Mapping[str, object]) -> tuple[dict, dict]:
    """(policy values, autoscaler values) of tuned `values`: the "fleet.<key>" entries
    (config/fleet.py's PREFIX, as the tuner names them) by their FleetParams key, the rest as
    given; ConfigError naming a "fleet." key that is no autoscaler setting."""
    fleet = {
        k[len(fleet_lib.PREFIX) :]: v for k, v in values.items() if k.startswith(fleet_lib.PREFIX)
    }
    for key in fleet:
        if key not in FleetParams.__dataclass_fields__:
            raise ConfigError(
                f"{fleet_lib.PREFIX}{key}: unknown autoscaler setting; expected one of "
                f"{sorted(FleetParams.__dataclass_fields__)}"
            )
    policy = {k: v for k, v in values.items() if not k.startswith(fleet_lib.PREFIX)}
    return policy, fleet


def snap_watermark(watermark: float, num_gpu_blocks: int | None) -> float:
    """The shortest decimal fraction that keeps the same KV blocks free as `watermark` does on
    `num_gpu_blocks` blocks (vLLM's null block included: floor(watermark x num_gpu_blocks)
    blocks, scheduler.watermark_blocks), so the flag says what vLLM will do: 0.0 where no block
    is kept (9.48e-08 of 28,183 blocks), 0.002 for 0.0020000000000000005. Without a block count
    the value is only cleared of float noise (12 significant digits)."""
    if not num_gpu_blocks or watermark <= 0:
        return float(f"{max(watermark, 0.0):.12g}")
    kept = math.floor(watermark * num_gpu_blocks)
    if kept == 0:
        return 0.0
    for digits in range(1, 18):
        scale = 10.0**digits
        snapped = math.ceil(kept / num_gpu_blocks * scale) / scale
        if math.floor(snapped * num_gpu_blocks) == kept:
            return snapped
    return watermark


def policy_to_config(
    values: Mapping[str, object], order: str, engine: Mapping | None = None
) -> dict:
    """The tuned policy as a `policy=` config-group dict (keys as conf/policy/vllm_default.yaml,
    plus the priority weights), standalone (no defaults list) so it loads with or without Hydra.

    Every PolicyParams field is written with its effective value (defaults and the order's
    weights filled in), so the file reproduces the policy even if defaults change. Units:
    max_num_seqs sequences, max_num_batched_tokens tokens per iteration, watermark a fraction of
    KV blocks, queue_cap waiting requests (None = unbounded), w_* per second / per 1000 tokens,
    ttft_target_s seconds, spec_k draft tokens per iteration (floored). `engine` is unused
    (accepted for symmetry with the engine exporters).
    """
    eff = _effective(values, order)
    cfg: dict = {"order": order}
    for key in DEFAULTS:
        value = eff[key]
        cfg[key] = None if value == math.inf else value
    if values.get(NET_KEY) is not None:  # order neural: the weights inline (standalone file)
        cfg[NET_KEY] = np.asarray(values[NET_KEY], np.float64).reshape(-1).tolist()
    return cfg


def model_id(cfg: DictConfig) -> str:
    """The model the run names for vLLM's --model: model.hf_id where set (the user's own
    checkpoint or fine-tune), else the catalog's Hugging Face id of model.name."""
    own = OmegaConf.select(cfg, "model.hf_id")
    if own is not None:
        if not isinstance(own, str) or not own.strip():
            raise ConfigError(
                f"model.hf_id: got {own!r}; expected the model's name as vLLM "
                f"loads it (a Hugging Face id or a path), or null"
            )
        return own
    return hardware.lookup(hardware.MODELS, OmegaConf.select(cfg, "model.name"), "model.name").hf_id


def fleet_values(scenario) -> dict | None:
    """{fleet key: value} of the scenario's autoscaler (the first policy point's numbers and
    the metric, rounded as simulated; "capacity": engine.n_instances), as
    deploy/autoscaler_export.py reads them; None without one."""
    fleet = scenario.params.fleet
    if fleet is None or not scenario.engine.autoscale:
        return None
    values = {
        name: float(np.asarray(getattr(fleet, name)).reshape(-1)[0])
        for name in fleet.__dataclass_fields__
    }
    values["capacity"] = float(scenario.engine.n_instances)  # the most the tuner simulated
    return as_simulated({**values, "metric": scenario.engine.autoscale_metric})


def _split_fleet(values: Mapping[str, object], fleet: Mapping | None):
    """(policy values, fleet values): the tuned "fleet.<key>" entries of `values` moved into
    `fleet` (the scenario's, fleet_values), max_replicas held to the scenario's (the
    simulated capacity) and min_replicas to max_replicas, as the tuner simulated them."""
    values, tuned = split_fleet(values)
    if not tuned:
        return values, fleet
    if fleet is None:
        raise ConfigError(
            f"{fleet_lib.PREFIX}{next(iter(tuned))}: a tuned autoscaler setting, but the run "
            f"has no autoscaler (fleet.autoscale=false)"
        )
    merged = {**fleet, **{k: float(np.asarray(v).reshape(())) for k, v in tuned.items()}}
    capacity = float(fleet.get("capacity", fleet["max_replicas"]))
    merged["max_replicas"] = min(merged["max_replicas"], capacity)
    merged["min_replicas"] = min(merged["min_replicas"], merged["max_replicas"])
    return values, as_simulated(merged)


def as_simulated(fleet: Mapping) -> dict:
    """`fleet` values rounded as the simulator runs them (engine/autoscale.whole: counts and
    percents to integers, seconds up to whole ones), so the manifests say what was simulated."""
    fields = {k: np.float64(fleet[k]) for k in FleetParams.__dataclass_fields__ if k in fleet}
    if len(fields) < len(FleetParams.__dataclass_fields__):
        return dict(fleet)
    rounded = autoscale.whole(FleetParams(**fields), xp=np)
    return {**fleet, **{k: float(getattr(rounded, k)) for k in fields}}


def deployment_name(model: str) -> str:
    """A Kubernetes Deployment name for the vLLM replicas of `model` (a Hugging Face id):
    "vllm-" and the id's last part, lower case, other characters as "-", at most 63."""
    slug = re.sub(r"[^a-z0-9-]+", "-", model.rsplit("/", 1)[-1].lower()).strip("-")
    return f"vllm-{slug}"[:63].rstrip("-")


def deployment(cfg: DictConfig, scenario) -> dict:
    """What the simulated engine ran, for the exports: model (Hugging Face id), GPUs per instance
    (tensor_parallel_size), usable KV blocks (num_gpu_blocks) of the model's instances,
    max_model_len (tokens, resolved), weight_bits and kv_bits, prefix caching on or off, and the
    draft model (Hugging Face id, None without speculation). `scenario`: scenario.build(cfg)."""
    draft = OmegaConf.select(cfg, "speculation.draft")
    kv = np.asarray(scenario.params.cost.kv_blocks)
    kv = kv.reshape(kv.shape[0], -1)[0, -1] if kv.ndim else kv  # last instance: the model's
    return {
        "model": model_id(cfg),
        "tensor_parallel_size": int(OmegaConf.select(cfg, "hardware.tp") or 1),
        "num_gpu_blocks": int(kv),
        "max_model_len": int(scenario.engine.max_model_len),
        "weight_bits": int(OmegaConf.select(cfg, "model.weight_bits") or 16),
        "kv_bits": int(OmegaConf.select(cfg, "model.kv_bits") or 16),
        "prefix_cache": bool(scenario.engine.prefix_cache),
        "draft_model": (
            hardware.lookup(hardware.MODELS, draft, "speculation.draft").hf_id if draft else None
        ),
    }


def vllm_args(
    values: Mapping[str, object],
    engine: Mapping,
    order: str | None = None,
    deploy: Mapping | None = None,
) -> dict:
    """vLLM 0.32 engine arguments (EngineArgs field names) for the tuned policy on `engine`.

    Scheduler: max_num_seqs (sequences) and max_num_batched_tokens (tokens per iteration)
    rounded as the simulator enforces them, watermark (fraction of KV blocks),
    scheduler_reserve_full_isl, async_scheduling (always named: vLLM 0.32's default turns it
    on), stream_interval (tokens per streamed chunk), prefill_schedule_interval and
    long_prefill_token_threshold_adaptive (from `engine`), and
    where set long_prefill_token_threshold (tokens), max_num_active_seqs (sequences) and the API
    server's max_num_queued_reqs (requests) and max_num_queued_tokens (tokens);
    enable_chunked_prefill, block_size (tokens) and max_model_len (tokens) from `engine` (or the
    resolved `deploy`). scheduling_policy is "fcfs" for the fcfs order, else "priority" (the
    per-request priority then comes from a gateway: see unmapped_knobs). `order` defaults to
    what the w_* weights in `values` imply; pass it for sjf.
    `deploy` (`deployment`) pins the engine that was simulated: model, tensor_parallel_size, the
    KV capacity (num_gpu_blocks_override: the usable blocks plus vLLM's null block),
    enable_prefix_caching (vLLM turns it on by default), quantization fp8 for 8-bit weights,
    kv_cache_dtype fp8 for an 8-bit KV cache, and speculative_config with its draft model
    (vLLM refuses num_speculative_tokens without one).
    """
    order = _infer_order(values) if order is None else order
    eff, eng = _effective(values, order), _engine_dict(engine)
    deploy = dict(deploy or {})
    args: dict = {}
    if deploy.get("model"):
        args["model"] = deploy["model"]
    args.update(
        {
            "max_num_seqs": eff["max_num_seqs"],
            "max_num_batched_tokens": eff["max_num_batched_tokens"],
            "enable_chunked_prefill": bool(eng.get("chunked_prefill", True)),
            "block_size": int(eng.get("block_size", 16)),
        }
    )
    max_len = deploy.get("max_model_len", eng.get("max_model_len"))
    if max_len is not None:
        args["max_model_len"] = int(max_len)
    args["scheduling_policy"] = "fcfs" if order == "fcfs" else "priority"
    blocks = deploy.get("num_gpu_blocks")
    args["watermark"] = snap_watermark(eff["watermark"], None if blocks is None else blocks + 1)
    args["scheduler_reserve_full_isl"] = bool(eng.get("scheduler_reserve_full_isl", True))
    # named either way: vLLM 0.32's default (None) turns it on wherever the executor can
    args["async_scheduling"] = bool(eng.get("async_scheduling", False))
    args["stream_interval"] = int(eng.get("stream_interval", 1))
    args["prefill_schedule_interval"] = int(eng.get("prefill_schedule_interval", 1))
    if eff["long_prefill_token_threshold"] > 0:
        args["long_prefill_token_threshold"] = eff["long_prefill_token_threshold"]
        args["long_prefill_token_threshold_adaptive"] = bool(
            eng.get("long_prefill_token_threshold_adaptive", False)
        )
    for key in CAPS:  # the caps vLLM has, under its names; set where finite
        if FIELDS[key].vllm is not None and math.isfinite(eff[key]):
            args[FIELDS[key].vllm] = eff[key]
    args.update(_vllm_deployment(deploy))
    if eng.get("gpu_memory_utilization") is not None and "num_gpu_blocks_override" not in args:
        args["gpu_memory_utilization"] = float(eng["gpu_memory_utilization"])
    if eff.get("spec_k", 0) > 0:
        spec = {"num_speculative_tokens": eff["spec_k"]}
        if deploy.get("draft_model"):
            spec = {"model": deploy["draft_model"], **spec}
        args["speculative_config"] = spec
    return args


def _vllm_deployment(deploy: Mapping) -> dict:
    """vLLM arguments of the deployment: parallelism, KV capacity, prefix caching, precision."""
    args: dict = {}
    if "tensor_parallel_size" in deploy:
        args["tensor_parallel_size"] = int(deploy["tensor_parallel_size"])
    if "num_gpu_blocks" in deploy:  # vLLM keeps one null block beside the usable ones
        args["num_gpu_blocks_override"] = int(deploy["num_gpu_blocks"]) + 1
    if "prefix_cache" in deploy:
        args["enable_prefix_caching"] = bool(deploy["prefix_cache"])
    if deploy.get("weight_bits") == 8:
        args["quantization"] = "fp8"
    if deploy.get("kv_bits") == 8:
        args["kv_cache_dtype"] = "fp8"
    return args


def sglang_args(
    values: Mapping[str, object],
    engine: Mapping,
    order: str | None = None,
    deploy: Mapping | None = None,
) -> dict:
    """SGLang server arguments (ServerArgs field names) for the tuned policy on `engine`.

    max_running_requests = max_num_seqs; chunked_prefill_size = the token budget (-1 when
    chunked prefill is off), with enable_mixed_chunk so prefill chunks share iterations with
    decodes as in vLLM (--max-prefill-tokens is left out: SGLang floors it at the context
    length, so it would do nothing); page_size = block_size (tokens); context_length =
    max_model_len (tokens, if set); max_queued_requests = queue_cap (if finite);
    stream_interval as vLLM's (tokens per streamed chunk).
    schedule_policy is "fcfs"; for other orders SGLang has no equivalent policy, so priority
    scheduling is enabled (lower value first, as vLLM; no priority preemption, as simulated)
    and a gateway sets the priority (see unmapped_knobs). `deploy` (`deployment`) adds
    model_path, tp_size, max_total_tokens (the simulated KV pool, tokens),
    disable_radix_cache when prefix caching was off, quantization fp8 and kv_cache_dtype
    fp8_e4m3 for 8-bit weights and KV.
    """
    order = _infer_order(values) if order is None else order
    eff, eng = _effective(values, order), _engine_dict(engine)
    deploy = dict(deploy or {})
    chunked = bool(eng.get("chunked_prefill", True))
    block = int(eng.get("block_size", 16))
    args: dict = {"model_path": deploy["model"]} if deploy.get("model") else {}
    args.update(
        {
            "max_running_requests": eff["max_num_seqs"],
            "chunked_prefill_size": eff["max_num_batched_tokens"] if chunked else -1,
            "enable_mixed_chunk": chunked,
            "page_size": block,
        }
    )
    max_len = deploy.get("max_model_len", eng.get("max_model_len"))
    if max_len is not None:
        args["context_length"] = int(max_len)
    args["schedule_policy"] = "fcfs"
    if order != "fcfs":
        args["enable_priority_scheduling"] = True
        args["schedule_low_priority_values_first"] = True
        args["disable_priority_preemption"] = True
    if math.isfinite(eff["queue_cap"]):
        args["max_queued_requests"] = eff["queue_cap"]
    args["stream_interval"] = int(eng.get("stream_interval", 1))
    if "tensor_parallel_size" in deploy:
        args["tp_size"] = int(deploy["tensor_parallel_size"])
    if "num_gpu_blocks" in deploy:
        args["max_total_tokens"] = int(deploy["num_gpu_blocks"]) * block
    if deploy.get("prefix_cache") is False:
        args["disable_radix_cache"] = True
    if deploy.get("weight_bits") == 8:
        args["quantization"] = "fp8"
    if deploy.get("kv_bits") == 8:
        args["kv_cache_dtype"] = "fp8_e4m3"
    return args


def _flags(args: Mapping[str, object], negatable: bool) -> list[str]:
    out: list[str] = []
    for key, value in args.items():
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            if value:
                out.append(flag)
            elif negatable:
                out.append("--no-" + flag[2:])
        elif isinstance(value, Mapping):
            out += [flag, json.dumps(value, separators=(",", ":"))]
        else:
            out += [flag, str(value)]
    return out


def vllm_flags(args: Mapping[str, object]) -> list[str]:
    """`vllm serve` command-line flags for vllm_args(): `--max-num-seqs 128 ...`; booleans as
    `--enable-x` / `--no-enable-x`, dicts as one JSON argument."""
    return _flags(args, negatable=True)


def sglang_flags(args: Mapping[str, object]) -> list[str]:
    """`python -m sglang.launch_server` flags for sglang_args(): `--max-running-requests 128 ...`;
    SGLang booleans are store-true switches, so a false one is left out."""
    return _flags(args, negatable=False)


def unmapped_knobs(
    values: Mapping[str, object],
    order: str,
    engine: Mapping | None = None,
    deploy: Mapping | None = None,
) -> list[dict]:
    """Tuned knobs with no (faithful) engine flag: dicts of name, value, engines (those lacking
    it) and a one-line note on how to apply it. Priority orders become a per-request integer
    `priority` a gateway computes (lower first in both engines, with the flags exported).
    `deploy` (`deployment`): 4-bit weights or KV, which no flag turns on, are listed too."""
    eff = _effective(values, order)
    return (
        _deploy_knobs(dict(deploy or {}))
        + _limit_knobs(eff)
        + _order_knobs(eff, order)
        + _serving_knobs(eff, _engine_dict(engine) if engine is not None else {})
    )


_BOTH = ("vllm", "sglang")  # each knob gets its own list (list(_BOTH)): callers may edit one


def _deploy_knobs(deploy: dict) -> list[dict]:
    """4-bit weights or KV, which no flag turns on."""
    both, out = _BOTH, []
    if deploy.get("weight_bits") == 4:
        out.append(
            {
                "name": "weight_bits",
                "value": 4,
                "engines": list(both),
                "note": "serve a 4-bit (AWQ or GPTQ) checkpoint of the model; its method "
                "is read from the checkpoint",
            }
        )
    if deploy.get("kv_bits") == 4:
        out.append(
            {
                "name": "kv_bits",
                "value": 4,
                "engines": list(both),
                "note": "no 4-bit KV-cache dtype in vLLM or SGLang; fp8 (8 bits) is the "
                "smallest, so re-simulate with model.kv_bits=8",
            }
        )
    return out


def _limit_knobs(eff: dict) -> list[dict]:
    """Admission limits one of the engines lacks: the watermark (SGLang), a gateway's queue
    cap, vLLM 0.32's caps and long-prefill threshold (SGLang)."""
    out = []
    if eff["watermark"] > 0:
        out.append(
            {
                "name": "watermark",
                "value": eff["watermark"],
                "engines": ["sglang"],
                "note": "vLLM: --watermark; SGLang has no admission watermark (the "
                "simulated scheduler kept this fraction of KV blocks free when "
                "admitting while requests run); re-simulate with watermark=0 to "
                "see what dropping it costs",
            }
        )
    if math.isfinite(eff["queue_cap"]):
        out.append(
            {
                "name": "queue_cap",
                "value": eff["queue_cap"],
                "engines": ["vllm"],
                "note": "vLLM's --max-num-queued-reqs counts running requests too: a "
                "gateway rejects (429/503) an arrival that finds this many requests "
                "waiting (vllm:num_requests_waiting); SGLang: --max-queued-requests",
            }
        )
    sglang_lacks = [
        k
        for k in (
            "long_prefill_token_threshold",
            "max_num_active_seqs",
            "max_num_queued_reqs",
            "max_num_queued_tokens",
        )
        if math.isfinite(eff[k]) and eff[k] > 0
    ]
    for key in sglang_lacks:
        out.append(
            {
                "name": key,
                "value": eff[key],
                "engines": ["sglang"],
                "note": f"vLLM: --{key.replace('_', '-')}; no SGLang equivalent",
            }
        )
    return out


def _order_knobs(eff: dict, order: str) -> list[dict]:
    """A priority order: what a gateway computes per request (lower first in both engines)."""
    both, out = _BOTH, []
    w = {k: eff[k] for k in WEIGHTS}
    if order == "neural":
        out.append(
            {
                "name": "order",
                "value": order,
                "engines": list(both),
                "note": "a gateway sets each request's priority with priority.py's "
                "priority(request, engine) (weights in score_net.json: the linear "
                "w_* terms plus a small network over request and engine features), "
                "lower first; it scores once at submission, the simulator every "
                "iteration",
            }
        )
    elif order == "priority":
        out.append(
            {
                "name": "order",
                "value": order,
                "engines": list(both),
                "note": "each request's own priority (the trace's priority column, lower "
                "first) goes in its request's `priority` field (vLLM's OpenAI "
                "server; SGLang's with --enable-priority-scheduling), set by the "
                "client or a gateway",
            }
        )
    elif order != "fcfs":
        key = (
            f"{w['w_age'] + w['w_slack']:g} * arrival_s + {w['w_prompt']:g} * prompt_tokens"
            f" / 1000 + {w['w_pred']:g} * predicted_output_tokens / 1000"
        )
        out.append(
            {
                "name": "order",
                "value": order,
                "engines": list(both),
                "note": f"gateway sets each request's priority = round({PRIORITY_SCALE} * "
                f"({key})), lower first; SGLang's schedule policies (lpm, dfs-weight, "
                f"lof, random, shortest-prefill-first) are not this order",
            }
        )
        terms = {
            "w_age": "per second since arrival (older first)",
            "w_prompt": "per 1000 prompt tokens (shorter first)",
            "w_pred": "per 1000 predicted output tokens (shorter first; the gateway needs "
            "an output-length predictor)",
            "w_slack": "per second of TTFT slack; for a request without a first token it "
            "adds to the arrival weight (exact while waiting; the simulator "
            "drops it once a token is out, a static priority cannot)",
        }
        for k in WEIGHTS:
            out.append(
                {
                    "name": k,
                    "value": w[k],
                    "engines": list(both),
                    "note": f"term of the gateway priority, {terms[k]}",
                }
            )
        if w["w_slack"] != 0:
            out.append(
                {
                    "name": "ttft_target_s",
                    "value": eff["ttft_target_s"],
                    "engines": list(both),
                    "note": "only shifts every waiting request's priority equally; nothing to set",
                }
            )
    return out


def _serving_knobs(eff: dict, eng: dict) -> list[dict]:
    """The token budget and speculation as SGLang reads them, and the engine's mechanisms no
    flag sets: KV pressure, routing, the cascade, SGLang's memory fraction."""
    both, out = _BOTH, []
    out.append(
        {
            "name": "max_num_batched_tokens",
            "value": eff["max_num_batched_tokens"],
            "engines": ["sglang"],
            "note": "approximate: SGLang budgets prefill tokens (--chunked-prefill-size, "
            "--max-prefill-tokens); vLLM's budget also counts decode tokens",
        }
    )
    if eff.get("spec_k", 0) > 0:
        k = eff["spec_k"]
        out.append(
            {
                "name": "spec_k",
                "value": k,
                "engines": ["sglang"],
                "note": f"SGLang needs --speculative-algorithm and a draft model; with EAGLE: "
                f"--speculative-num-steps {k} --speculative-eagle-topk 1 "
                f"--speculative-num-draft-tokens {k + 1} (vLLM: add method and "
                f"model to --speculative-config)",
            }
        )
    pressure = eng.get("kv_pressure", "preempt")
    if pressure != "preempt":
        out.append(
            {
                "name": "kv_pressure",
                "value": pressure,
                "engines": list(both),
                "note": {
                    "evict": "no engine flag: both preempt and recompute; a gateway "
                    "can abort the lowest-priority request instead",
                    "reject": "no engine flag: a gateway admits a request only if "
                    "its predicted KV footprint fits (else 429/503)",
                    "compress": f"no engine flag: KV compression of single requests "
                    f"(ratio {eff['kv_compress_ratio']:g}) needs a "
                    f"compressed-KV kernel; --kv-cache-dtype fp8 "
                    f"compresses every request 2x",
                }.get(pressure, ""),
            }
        )
    if int(eng.get("n_instances") or 1) > 1:
        out.append(
            {
                "name": "routing",
                "value": eng.get("routing", "round_robin"),
                "engines": list(both),
                "note": f"a router in front of the replicas (e.g. the vLLM production "
                f"stack's or SGLang's router); score weights: queue "
                f"{eff['route_w_queue']:g}, KV {eff['route_w_kv']:g}, work "
                f"{eff['route_w_work']:g}",
            }
        )
    if int(eng.get("cascade_small_instances") or 0) > 0:
        out.append(
            {
                "name": "cascade_threshold",
                "value": eff["cascade_threshold"],
                "engines": list(both),
                "note": "no engine flag: a gateway in front of the two pools sends a request "
                "to the small model when its predicted difficulty is at most this, "
                "and retries it on the large model when the answer fails its check",
            }
        )
    if eng.get("gpu_memory_utilization") is not None:
        out.append(
            {
                "name": "gpu_memory_utilization",
                "value": float(eng["gpu_memory_utilization"]),
                "engines": ["sglang"],
                "note": "SGLang's --mem-fraction-static covers weights + KV only (not "
                "activations); set it so the KV pool matches the simulated one",
            }
        )
    return out


def vllm_warnings(
    args: Mapping[str, object], ranges: Mapping[str, tuple[float, float]] | None = None
) -> list[str]:
    """Settings vLLM would refuse at startup, then (with `ranges`, the tuning run's
    tune.space: key -> (low, high)) tuned values exported outside their range, as messages
    (empty when there are none).

    vLLM's SchedulerConfig requires max_num_batched_tokens >= max_num_seqs (each running
    sequence must be able to take a token in one iteration); the simulator does not need it.
    """
    out = []
    if args["max_num_batched_tokens"] < args["max_num_seqs"]:
        out.append(
            f"max_num_batched_tokens ({args['max_num_batched_tokens']}) < max_num_seqs "
            f"({args['max_num_seqs']}): vLLM refuses this at startup; raise the token "
            f"budget to at least max_num_seqs, or lower max_num_seqs, and re-simulate"
        )
    return out + range_warnings(args, ranges or {})


# the keys vLLM's startup checks move (tuning.space.Constraints projects tuned points onto them)
MOVED = (
    "max_num_seqs",
    "max_num_batched_tokens",
    "max_num_active_seqs",
    "long_prefill_token_threshold",
)


def range_warnings(
    args: Mapping[str, object], ranges: Mapping[str, tuple[float, float]]
) -> list[str]:
    """vllm_args() values outside their tuned range (`ranges`: key -> (low, high) as in
    tune.space, in the key's units), as messages naming the knob, the value, the range and the
    vLLM startup check that moved it there (the tuner projects each point onto what vLLM
    accepts: tuning.space.Constraints; the value is exported as is, or vLLM would not start).
    Only the keys those checks move are looked at; they are integers, so the range is floored
    as the value is."""
    out = []
    for key in MOVED:
        if key not in ranges or key not in args:
            continue
        low, high = ranges[key]
        if math.floor(low) <= args[key] <= math.floor(high):
            continue
        rule = vllm_rule(key, args)
        why = (
            f"vLLM's startup check {rule} moved it there, and vLLM needs it to start, so it "
            f"is exported as is"
            if rule
            else "no vLLM startup check moved it there"
        )
        out.append(
            f"{key} = {args[key]} is outside its tuned range [{low:g}, {high:g}] "
            f"(tune.space.{key}): {why}; widen tune.space.{key} to tune it there"
        )
    return out


def vllm_rule(key: str, args: Mapping[str, object]) -> str | None:
    """The vLLM 0.32 startup check (SchedulerConfig's verification, as tuning.space.Constraints
    projects onto it) that holds `key` at its value in `args` (vllm_args(): a limit absent is
    unlimited), in words with the value it binds at, e.g. "max_num_batched_tokens >=
    max_num_seqs (1536)"; None when none binds there."""
    length = args.get("max_model_len")
    checks = {
        "max_num_batched_tokens": [
            ("max_num_batched_tokens >= max_num_seqs", args.get("max_num_seqs"))
        ],
        "max_num_seqs": [
            ("max_num_seqs >= max_num_active_seqs", args.get("max_num_active_seqs")),
            ("max_num_batched_tokens >= max_num_seqs", args.get("max_num_batched_tokens")),
        ],
        "max_num_active_seqs": [("max_num_active_seqs <= max_num_seqs", args.get("max_num_seqs"))],
        "long_prefill_token_threshold": [("long_prefill_token_threshold <= max_model_len", length)],
    }
    if not args.get("enable_chunked_prefill", True):
        checks["max_num_batched_tokens"].append(
            ("max_num_batched_tokens >= max_model_len with chunked prefill off", length)
        )
    for text, bound in checks.get(key, ()):
        if bound is not None and args.get(key) == bound:
            return f"{text} ({bound})"
    return None


def config_group_hint(path: Path, group: str, name: str) -> str:
    """How to select the config file `path` as `group=name` from any folder, an installed
    servetune included: a Hydra search path names a folder holding `group/name.yaml`."""
    return (
        f"to use {path.name}: copy it to <dir>/{group}/{name}.yaml and pass "
        f"hydra.searchpath=[file://<dir>] {group}={name} (<dir> an absolute path; in a "
        f"clone of servetune, conf/ works as <dir> without the search path)"
    )


def write_export(
    out_dir: Path,
    values: Mapping[str, object],
    order: str,
    engine: Mapping,
    extra: dict | None = None,
    deploy: Mapping | None = None,
    ranges: Mapping[str, tuple[float, float]] | None = None,
    fleet: Mapping | None = None,
) -> dict[str, Path]:
    """Write tuned_policy.yaml, vllm_args.json, sglang_args.json (args plus the "flags" command
    line) and unmapped_knobs.json into `out_dir` (created; files there are replaced); with an
    autoscaler (`fleet`: fleet_values) also hpa.yaml and keda_scaledobject.yaml
    (deploy/autoscaler_export.py, each validated against its published schema); with a
    neural score (values["score_net"]) also score_net.json (weights, feature names, units and
    scales) and priority.py (a dependency-free priority(request, engine) for a gateway). `extra`
    (e.g. the objective and scenario it was tuned on) goes into each JSON file under "extra" and
    into the YAML as comments; `deploy` (`deployment`) pins the simulated engine in the engine
    arguments; `ranges` (the tuning run's tune.space: key -> (low, high)) adds a warning to
    vllm_args.json for each value vLLM's startup checks moved outside its range (vllm_warnings).
    Returns {name: path}. Every value is checked before anything is written, so a
    bad one (ConfigError naming its key) leaves no folder or file behind."""
    out_dir = Path(out_dir)
    values, fleet = _split_fleet(values, fleet)
    paths = {name: out_dir / name for name in POLICY_FILES}
    header = [
        f"# servetune tuned policy (order {order}).",
        f"# {config_group_hint(paths['tuned_policy.yaml'], 'policy', 'tuned_policy')}",
    ]
    header += [f"# {k}: {json.dumps(v, default=str)}" for k, v in (extra or {}).items()]
    yaml = OmegaConf.to_yaml(OmegaConf.create(policy_to_config(values, order, engine)))
    v_args = vllm_args(values, engine, order, deploy)
    s_args = sglang_args(values, engine, order, deploy)
    payloads = {
        "vllm_args.json": {
            "args": v_args,
            "flags": shlex.join(vllm_flags(v_args)),
            "warnings": vllm_warnings(v_args, ranges),
        },
        "sglang_args.json": {"args": s_args, "flags": shlex.join(sglang_flags(s_args))},
        "unmapped_knobs.json": {"unmapped": unmapped_knobs(values, order, engine, deploy)},
    }
    ensure_dir(out_dir)
    if fleet is not None:  # validated before anything is written
        model = (deploy or {}).get("model") or "model"
        paths.update(
            autoscaler_export.write_autoscaler(
                out_dir, fleet, deployment_name(model), model_name=(deploy or {}).get("model")
            )
        )
    if values.get(NET_KEY) is not None:  # order neural: score_net.json and priority.py too
        eff = _effective(values, order)
        paths.update(
            neural_export.export_score_net(
                out_dir, values[NET_KEY], {k: eff[k] for k in WEIGHTS}, eff["ttft_target_s"]
            )
        )
    write_text(paths["tuned_policy.yaml"], "\n".join(header) + "\n" + yaml)
    for name, payload in payloads.items():
        write_json(paths[name], {**payload, "extra": extra} if extra else payload)
    return paths
