"""Policy parameters: the table of tunable knobs (defaults, bounds, vLLM flags) and the
PolicyParams a scenario is built with. The order the scheduler serves requests in is
engine/order.py."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

import jax.numpy as jnp
import numpy as np

from servetune.config import neural_weights, settings
from servetune.core.errors import ConfigError
from servetune.core.types import PolicyParams


@dataclasses.dataclass(frozen=True)
class Field:
    """One policy parameter: its default, its valid range [lo, hi], whether inf (null in the
    config files) means no limit, and how the rest of servetune treats it."""

    default: float
    lo: float = -math.inf
    hi: float = math.inf
    unlimited: bool = False
    floored: bool = False  # the engine reads it as a whole number (relax.integer_limit)
    cap: bool = False  # a whole-number cap whose inf is no cap (floored where finite)
    scale: str = "linear"  # the tuner's scale where tune.space names none ("log" for limits
    #                        that span orders of magnitude)
    off: float | None = None  # a value other than inf that turns it off (the tuner starts an
    #                           off knob at the top of its range, where it binds least)
    vllm: str | None = None  # the vLLM EngineArgs field the exporter writes (None: no such
    #                          knob in vLLM 0.32; the export lists it as unmapped)


# The one table of PolicyParams' fields (types.py declares them in the same order, with their
# units). Defaults are vLLM V1's for an OpenAI server on an 80 GB H100: max_num_seqs 1024,
# max_num_batched_tokens 8192 -- vllm/engine/arg_utils.py, EngineArgs.get_batch_defaults; the
# watermark, the queue caps and the long-prefill threshold are off by default in vLLM 0.32,
# vllm/config/scheduler.py.
FIELDS: dict[str, Field] = {
    "max_num_seqs": Field(1024.0, lo=1.0, floored=True, scale="log", vllm="max_num_seqs"),
    "max_num_batched_tokens": Field(
        8192.0, lo=1.0, unlimited=True, floored=True, scale="log", vllm="max_num_batched_tokens"
    ),
    "watermark": Field(0.0, lo=0.0, hi=0.999, vllm="watermark"),
    "queue_cap": Field(math.inf, lo=0.0, unlimited=True, cap=True, scale="log"),
    "max_num_queued_reqs": Field(
        math.inf, lo=0.0, unlimited=True, cap=True, scale="log", vllm="max_num_queued_reqs"
    ),
    "max_num_queued_tokens": Field(
        math.inf, lo=0.0, unlimited=True, cap=True, scale="log", vllm="max_num_queued_tokens"
    ),
    "max_num_active_seqs": Field(
        math.inf, lo=1.0, unlimited=True, cap=True, scale="log", vllm="max_num_active_seqs"
    ),
    "long_prefill_token_threshold": Field(
        0.0, lo=0.0, scale="log", off=0.0, vllm="long_prefill_token_threshold"
    ),
    "w_age": Field(1.0),
    "w_prompt": Field(0.0),
    "w_pred": Field(0.0),
    "w_slack": Field(0.0),
    "ttft_target_s": Field(2.0, lo=0.0),
    "spec_k": Field(0.0, lo=0.0, hi=64.0, vllm="num_speculative_tokens"),
    "kv_compress_ratio": Field(2.0, lo=1.0, hi=16.0),
    "route_w_queue": Field(1.0),
    "route_w_kv": Field(0.0),
    "route_w_work": Field(0.0),
    # model cascade (engine.cascade_small_instances > 0): predicted difficulty at or below
    # which a request goes to the small model (0 = all to the large pool, 1 = all to small)
    "cascade_threshold": Field(0.5, lo=0.0, hi=1.0),
}
DEFAULTS: dict[str, float] = {key: f.default for key, f in FIELDS.items()}
BOUNDS: dict[str, tuple[float, float]] = {key: (f.lo, f.hi) for key, f in FIELDS.items()}
UNLIMITED: tuple[str, ...] = tuple(key for key, f in FIELDS.items() if f.unlimited)
FLOORED: tuple[str, ...] = tuple(key for key, f in FIELDS.items() if f.floored)
CAPS: tuple[str, ...] = tuple(key for key, f in FIELDS.items() if f.cap)

# Named orders: each is a setting of the score weights.
ORDERS: dict[str, dict[str, float]] = {
    "fcfs": {"w_age": 1.0, "w_prompt": 0.0, "w_pred": 0.0, "w_slack": 0.0},
    # shortest predicted job first: fewest (prompt + predicted output) tokens first
    "sjf": {"w_age": 0.0, "w_prompt": 1.0, "w_pred": 1.0, "w_slack": 0.0},
    "parametric": {},
    # the w_* weights as given plus a neural score (servetune.engine.neural), needs policy.score_net
    "neural": {},
    # vLLM's --scheduling-policy priority over each request's fixed priority from the trace: a
    # structural order (engine.scheduling_policy, engine/priority.py); the score stays FCFS's
    "priority": {"w_age": 1.0, "w_prompt": 0.0, "w_pred": 0.0, "w_slack": 0.0},
}


def make_policy(
    values: Mapping[str, object] | None = None, order: str = "fcfs", key_prefix: str = "policy"
) -> PolicyParams:
    """Build PolicyParams from a mapping of field -> number or list of numbers (a grid axis).

    Values are broadcast against each other; lists give a leading batch axis. `order` picks the
    priority-score weights (fcfs, sjf, or parametric = take the w_* values as given).
    order "neural" also takes `score_net`: flat network weights [W] (or [P, W], one row per
    policy point), a list or the path of an exported score_net.json (servetune.engine.neural).
    Raises ConfigError naming `policy.<key>` for unknown keys and out-of-range values.
    """
    if order not in ORDERS:
        raise ConfigError(f"{key_prefix}.order: got {order!r}; expected one of {sorted(ORDERS)}")
    values = dict(values or {})
    net = values.pop("score_net", None)
    if (net is None) != (order != "neural"):
        raise ConfigError(
            f"{key_prefix}.score_net: "
            + (
                "required with order neural (a list of weights or a score_net.json path)"
                if net is None
                else f"given with order {order!r}; set {key_prefix}.order=neural"
            )
        )
    merged = dict(DEFAULTS)
    merged.update(ORDERS[order])
    for key, value in values.items():
        if key not in DEFAULTS:
            raise ConfigError(
                f"{key_prefix}.{key}: unknown policy parameter; expected one of {sorted(DEFAULTS)}"
            )
        merged[key] = value
    arrays = {}
    for key, value in merged.items():
        try:
            arr = np.asarray(value, dtype=np.float64)
        except (TypeError, ValueError):
            raise ConfigError(
                f"{key_prefix}.{key}: got {settings.shown(value)}; expected a number or a list of "
                f"numbers"
            ) from None
        if np.isnan(arr).any():
            raise ConfigError(f"{key_prefix}.{key}: got NaN; expected a number")
        lo, hi = BOUNDS.get(key, (-math.inf, math.inf))
        if (arr < lo).any() or (arr > hi).any() or (np.isinf(arr).any() and key not in UNLIMITED):
            raise ConfigError(
                f"{key_prefix}.{key}: got {settings.shown(value)}; expected within [{lo}, {hi}]"
            )
        arrays[key] = arr
    shape = np.broadcast_shapes(*(a.shape for a in arrays.values()))
    fields = {k: jnp.asarray(np.broadcast_to(a, shape)) for k, a in arrays.items()}
    if net is not None:
        w = neural_weights.load(net)
        if w.ndim > 1:  # one row per policy point
            shape = np.broadcast_shapes(shape, w.shape[:-1])
            fields = {k: jnp.asarray(np.broadcast_to(a, shape)) for k, a in arrays.items()}
        fields["score_net"] = jnp.asarray(np.broadcast_to(w, shape + w.shape[-1:]))
    return PolicyParams(**fields)
