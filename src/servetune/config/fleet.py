"""The `fleet.*` section: an autoscaler over the engine's replicas (engine/autoscale.py), its
numbers as traced FleetParams and its static sizes, checked key by key.

Defaults are Kubernetes' HPA defaults (autoscaling/v2 `behavior`: scale-up window 0 s, policies
4 pods or 100% per 15 s; scale-down window 300 s, 100% per 15 s; tolerance 0.1; the
controller's 15 s sync period). The cold start, unless set, is `acquire_s` (GPU acquisition,
container start and engine initialization: an assumption) plus the bytes of weights one GPU
loads (its tensor-parallel share) over `load_gb_per_s`.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
from omegaconf import DictConfig

from servetune.config import settings
from servetune.core.errors import ConfigError
from servetune.core.types import AUTOSCALE_METRICS, FleetParams

MAX_REPLICAS = 1024  # as engine.n_instances
MAX_SECONDS = 1e9
# Kubernetes' own limits (autoscaling/v2 validation): a stabilization window of at most an hour,
# a policy period of at most 30 minutes (the simulated interval is the policies' period)
MAX_WINDOW_S = 3600.0
MAX_PERIOD_S = 1800.0
MAX_HISTORY = 4096  # recommendations kept for the stabilization windows
FLEET_KEYS = frozenset(
    {
        "autoscale",
        "min_replicas",
        "max_replicas",
        "metric",
        "target",
        "tolerance",
        "interval_s",
        "scale_up_window_s",
        "scale_down_window_s",
        "scale_up_pods",
        "scale_up_percent",
        "scale_down_pods",
        "scale_down_percent",
        "cold_start_s",
        "acquire_s",
        "load_gb_per_s",
        "history",
        "log_rows",
        "scale_down",
        "spot_share",
        "spot_preemptions_per_hour",
        "spot_price_ratio",
    }
)
SCALE_DOWN = ("graceful", "requeue")  # fleet.scale_down: drain, or re-queue (engine/requeue.py)


@dataclasses.dataclass(frozen=True)
class FleetSetup:
    """What `fleet.*` decides: the traced numbers and the engine's static sizes."""

    params: FleetParams  # scalar float leaves
    metric: str  # one of AUTOSCALE_METRICS
    max_replicas: int  # engine.n_instances unless that is set larger
    history: int  # engine.autoscale_history
    log_rows: int  # engine.autoscale_log
    requeue: bool  # engine.autoscale_requeue: fleet.scale_down is requeue
    spot: bool  # engine.autoscale_spot: some replicas can be spot (fleet.spot_share, or tuned)
    spot_price_ratio: float  # a spot replica's price over an on-demand one's (host: the cost)

    def export_values(self) -> dict:
        """{fleet key: value} of the autoscaler as deploy/autoscaler_export.py reads it."""
        values = {
            f.name: float(getattr(self.params, f.name)) for f in dataclasses.fields(FleetParams)
        }
        return {**values, "metric": self.metric}


def enabled(cfg: DictConfig) -> bool:
    """Whether `cfg` turns the autoscaler on (fleet.autoscale)."""
    return settings.get(cfg, "fleet") is not None and settings.flag(cfg, "fleet.autoscale", False)


def capacity(cfg: DictConfig, n_instances: int, pools: int) -> int:
    """engine.n_instances under the autoscaler: fleet.max_replicas when engine.n_instances is
    left at 1, else engine.n_instances, which must be at least it. `pools`: instances of a
    pool split (disaggregation, a cascade), which the autoscaler does not scale (0: none)."""
    if pools:
        raise ConfigError(
            "fleet.autoscale: true scales colocated replicas of one model; expected "
            "engine.prefill_instances=0 and engine.cascade_small_instances=0"
        )
    most = settings.number(
        cfg, "fleet.max_replicas", lo=2, hi=MAX_REPLICAS, integer=True, default=4
    )
    if n_instances == 1:
        return most
    if n_instances < most:
        raise ConfigError(
            f"engine.n_instances: got {n_instances}, below fleet.max_replicas = {most}; expected "
            f"at least it (or 1: the autoscaler's capacity is then fleet.max_replicas)"
        )
    return n_instances


def read(cfg: DictConfig, weight_bytes_per_gpu: float, span_s: float) -> FleetSetup | None:
    """The fleet of `cfg` (None when fleet.autoscale is false or absent): every key checked,
    the cold start derived from `weight_bytes_per_gpu` (bytes) when not set; `span_s` is the
    longest simulated span (seconds: last arrival plus window.drain_s)."""
    section = settings.get(cfg, "fleet")
    if section is not None:  # a typo is refused whether the autoscaler is on or not
        unknown = sorted(set(section.keys()) - FLEET_KEYS)
        if unknown:
            raise ConfigError(
                f"fleet.{unknown[0]}: unknown key; expected one of {sorted(FLEET_KEYS)}"
            )
    if not enabled(cfg):
        return None
    num = lambda key, **kw: settings.number(cfg, f"fleet.{key}", **kw)
    lo = num("min_replicas", lo=1, hi=MAX_REPLICAS, integer=True, default=1)
    hi = num("max_replicas", lo=2, hi=MAX_REPLICAS, integer=True, default=4)
    if lo > hi:
        raise ConfigError(
            f"fleet.min_replicas: got {lo}, above fleet.max_replicas = {hi}; expected at most it"
        )
    interval = num("interval_s", lo=1, hi=MAX_PERIOD_S, default=15.0)
    target = num("target", lo=0, hi=1e12, default=4.0)
    if target <= 0:
        raise ConfigError(f"fleet.target: got {target:g}; expected a positive number")
    metric = settings.choice(cfg, "fleet.metric", AUTOSCALE_METRICS, "num_requests_waiting")
    if metric == "kv_cache_usage_perc" and target > 1:
        raise ConfigError(
            f"fleet.target: got {target:g} for kv_cache_usage_perc, which vLLM exports as a "
            f"fraction; expected at most 1"
        )
    cold = _cold_start_s(cfg, weight_bytes_per_gpu, span_s)
    windows = {k: num(k, lo=0, hi=MAX_WINDOW_S, default=d) for k, d in _WINDOWS.items()}
    history = num("history", lo=1, hi=MAX_HISTORY, integer=True, default=64)
    shortest = max(_tuned_span(cfg, "interval_s", interval, low=True), 1.0)  # sizes the log
    for key, window in windows.items():
        longest, where = _tuned_span(cfg, key, window), _tuned_key(cfg, key)
        if longest > history * shortest:
            raise ConfigError(
                f"{where}: {longest:g} s; expected at most fleet.history x the shortest "
                f"interval ({history} x {shortest:g} s; raise fleet.history)"
            )
    if metric == "kv_cache_usage_perc" and _tuned_span(cfg, "target", target) > 1:
        raise ConfigError(
            f"{_tuned_key(cfg, 'target')}: reaches above 1 for kv_cache_usage_perc, which vLLM "
            f"exports as a fraction; expected at most 1"
        )
    rates = {
        k: num(k, lo=0, hi=most, default=d, integer=k.endswith("_pods"))
        for k, (most, d) in _RATES.items()
    }
    spot_share, spot_rate, spot_ratio = _spot(cfg)
    evaluations = math.ceil(span_s / shortest) + 2
    rows = num("log_rows", lo=1, hi=2**26, integer=True, allow_none=True)
    params = FleetParams(
        min_replicas=np.float64(lo),
        max_replicas=np.float64(hi),
        target=np.float64(target),
        tolerance=np.float64(num("tolerance", lo=0, hi=1e6, default=0.1)),
        interval_s=np.float64(interval),
        cold_start_s=np.float64(cold),
        spot_share=np.float64(spot_share),
        spot_preemptions_per_hour=np.float64(spot_rate),
        **{k: np.float64(v) for k, v in {**windows, **rates}.items()},
    )
    return FleetSetup(
        params=params,
        metric=metric,
        max_replicas=hi,
        history=history,
        log_rows=rows or 3 * evaluations + 4 * hi + 16,
        requeue=settings.choice(cfg, "fleet.scale_down", SCALE_DOWN, "graceful") == "requeue",
        spot=spot_share > 0 or _tuned_range(cfg, "spot_share") is not None,
        spot_price_ratio=spot_ratio,
    )


# fleet keys a tuner may move (tune.space.fleet.<key>): key -> (valid low, valid high, scale)
TUNABLE = {
    "min_replicas": (1.0, MAX_REPLICAS, "linear"),
    "max_replicas": (1.0, MAX_REPLICAS, "linear"),
    "target": (1e-6, 1e12, "log"),
    "tolerance": (0.0, 1e6, "linear"),
    "interval_s": (1.0, MAX_PERIOD_S, "log"),
    "scale_up_window_s": (0.0, MAX_WINDOW_S, "linear"),
    "scale_down_window_s": (0.0, MAX_WINDOW_S, "linear"),
    "scale_up_pods": (0.0, MAX_REPLICAS, "linear"),
    "scale_up_percent": (0.0, 1e6, "linear"),
    "scale_down_pods": (0.0, MAX_REPLICAS, "linear"),
    "scale_down_percent": (0.0, 100.0, "linear"),
    "spot_share": (0.0, 1.0, "linear"),
}
PREFIX = "fleet."  # tuned values name fleet keys "fleet.<key>"

_WINDOWS = {"scale_up_window_s": 0.0, "scale_down_window_s": 300.0}


def _tuned_range(cfg: DictConfig, key: str):
    """tune.space.fleet.<key>'s {low, high} when the key is tuned, else None."""
    node = settings.get(cfg, f"tune.space.fleet.{key}")
    return node if isinstance(node, DictConfig) and "low" in node and "high" in node else None


def _tuned_key(cfg: DictConfig, key: str) -> str:
    """The key a range check names: tune.space.fleet.<key> when tuned, else fleet.<key>."""
    return f"tune.space.fleet.{key}" if _tuned_range(cfg, key) is not None else f"fleet.{key}"


def _tuned_span(cfg: DictConfig, key: str, value: float, low: bool = False) -> float:
    """`value`, or the tuned range's end (the low end with `low`, else the high one) where
    tune.space.fleet.<key> tunes it and reaches further (a bad range is the space's error)."""
    rng = _tuned_range(cfg, key)
    try:
        end = None if rng is None else float(rng["low"] if low else rng["high"])
    except (TypeError, ValueError):
        end = None
    if end is None:
        return value
    return min(value, end) if low else max(value, end)


_RATES = {  # key: (most, HPA's default)
    "scale_up_pods": (MAX_REPLICAS, 4),
    "scale_up_percent": (1e6, 100.0),
    "scale_down_pods": (MAX_REPLICAS, 0),
    "scale_down_percent": (100.0, 100.0),
}


def _cold_start_s(cfg: DictConfig, weight_bytes_per_gpu: float, span_s: float) -> float:
    """fleet.cold_start_s, or acquire_s + weight bytes per GPU / load_gb_per_s (seconds),
    refused when it is not shorter than the simulated span."""
    cold = settings.number(cfg, "fleet.cold_start_s", lo=0, hi=MAX_SECONDS, allow_none=True)
    key = "fleet.cold_start_s"
    if cold is None:
        acquire = settings.number(cfg, "fleet.acquire_s", lo=0, hi=MAX_SECONDS, default=60.0)
        rate = settings.number(cfg, "fleet.load_gb_per_s", lo=0, hi=1e6, default=2.0)
        if rate <= 0:
            raise ConfigError(f"fleet.load_gb_per_s: got {rate:g}; expected a positive number")
        cold = acquire + weight_bytes_per_gpu / (rate * 1e9)
        key = "fleet.acquire_s + model load (fleet.load_gb_per_s)"
    if cold >= span_s:
        raise ConfigError(
            f"{key}: a cold start of {cold:g} s is not shorter than the simulated span "
            f"({span_s:g} s); expected less, or no replica started would ever serve"
        )
    return cold


def _spot(cfg: DictConfig) -> tuple[float, float, float]:
    """(fleet.spot_share, fleet.spot_preemptions_per_hour, fleet.spot_price_ratio): the
    share 0 (no spot) by default; with spot replicas (a share above 0, or a tuned one) the rate
    and the price ratio are market figures the user must give (no default is honest for
    them)."""
    share = settings.number(cfg, "fleet.spot_share", lo=0, hi=1, default=0.0)
    if share == 0 and _tuned_range(cfg, "spot_share") is None:
        return 0.0, 0.0, 1.0
    given = {}
    for key, hi in (("spot_preemptions_per_hour", 1e4), ("spot_price_ratio", 1.0)):
        value = settings.number(cfg, f"fleet.{key}", lo=0, hi=hi, allow_none=True)
        if value is None:
            raise ConfigError(
                f"fleet.{key}: not set, with spot replicas (fleet.spot_share = {share:g}); "
                f"expected your provider's figure (preemptions per spot replica-hour; the spot "
                f"price over the on-demand price, in (0, 1])"
            )
        given[key] = value
    if given["spot_price_ratio"] <= 0:
        raise ConfigError(
            f"fleet.spot_price_ratio: got {given['spot_price_ratio']:g}; expected a price ratio "
            f"in (0, 1]"
        )
    return share, given["spot_preemptions_per_hour"], given["spot_price_ratio"]
