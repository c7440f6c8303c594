"""How a report shows a metric: its name for a human, its unit and the factor from the unit
it is stored in (latencies are stored in seconds, `*_s`, and shown in milliseconds), whether
an axis over some values reads better logarithmic, and the colours of its series."""

from __future__ import annotations

import math

import numpy as np

from servetune.reporting.numbers import fmt

LATENCY_PREFIXES = ("ttft", "tpot", "e2e", "itl")
STAT_TITLES = {"mean": "mean", "p50": "P50", "p90": "P90", "p99": "P99"}
TITLES = {
    "goodput_rps": "goodput",
    "slo_attainment": "SLO attainment",
    "useful_tokens_per_dollar": "useful tokens per $",
    "throughput_rps": "throughput",
}
UNITS = {"goodput_rps": "req/s", "throughput_rps": "req/s"}
LOG_DECADES = 1.5  # a positive quantity spanning more than this many decades is drawn on log axes
NEAR = 2.0  # an SLO target within this factor of a latency axis' data is drawn on the axis
# series colours of the page's figures (matplotlib's tab10, which the PNGs use)
PALETTE = [
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
]


def is_latency(metric: str) -> bool:
    """Whether `metric` is a latency stored in seconds (ttft_p99_s, tpot_mean_s, e2e_p50_s)."""
    return metric.endswith("_s") and metric.split("_")[0] in LATENCY_PREFIXES


def scale(metric: str) -> float:
    """The factor from the stored value of `metric` to the shown one: 1000 for a latency
    (seconds -> ms), else 1."""
    return 1000.0 if is_latency(metric) else 1.0


def unit(metric: str) -> str:
    """The unit `metric` is shown in: "ms" for a latency, "req/s" for a rate, else ""."""
    return "ms" if is_latency(metric) else UNITS.get(metric, "")


def title(metric: str, with_unit: bool = True) -> str:
    """A human name of `metric` ("P99 TTFT (ms)", "goodput (req/s)", "SLO attainment"); an
    unknown metric keeps its own name."""
    if is_latency(metric):
        parts = metric[:-2].split("_")
        stat = STAT_TITLES.get(parts[1], parts[1]) if len(parts) > 1 else ""
        name = f"{stat} {parts[0].upper()}".strip()
    else:
        name = TITLES.get(metric, metric)
    u = unit(metric)
    return f"{name} ({u})" if with_unit and u else name


def log_scale(values, decades: float = LOG_DECADES) -> bool:
    """Whether an axis over `values` reads better logarithmic: every finite value positive and
    the largest more than 10**decades times the smallest (by default 1.5 decades, ~32x)."""
    v = np.asarray(values, np.float64).ravel()
    v = v[np.isfinite(v)]
    return len(v) > 1 and bool(np.all(v > 0)) and v.max() / v.min() > 10.0**decades


def near(target: float, values, factor: float = NEAR) -> bool:
    """Whether an SLO `target` is drawn inside a latency axis over `values` (its data, in the
    same unit): within `factor` of their positive finite range (lo / factor <= target <= hi x
    factor). A target further off is named at the axis' edge instead, so that the axis fits
    the data rather than stretching to the target. True where there are no values."""
    v = np.asarray(values, np.float64).ravel()
    v = v[np.isfinite(v) & (v > 0)]
    if not len(v):
        return True
    return bool(v.min() / factor <= target <= v.max() * factor)


def shown(value, metric: str, digits: int = 3) -> str:
    """`value` of `metric` (in its stored unit) as shown: a latency in ms, whole from 100 ms
    up ("6656", not "6.66e+03"), else `digits` significant digits (numbers.fmt)."""
    try:
        v = float(value) * scale(metric)
    except (TypeError, ValueError):
        return fmt(value)
    if is_latency(metric) and math.isfinite(v) and abs(v) >= 100:
        return f"{v:.0f}"
    return fmt(v, digits)
