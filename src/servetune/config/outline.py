"""What a batch will simulate, known before its requests are drawn in full: an `Outline`.

It holds the first seed's arrivals as expected counts per time bin, the requests' mean lengths,
the batch's size (seeds x grid points), the engine, the first policy point's cost model and
limits, and the autoscaler's numbers: what servetune/run/estimate.py needs to estimate a run's
time and memory. `scenario.build(cfg, plan=...)` hands one to `plan` before it tiles a slice over
a day, superposes a rate curve's copies or draws the other seeds, so a run the machine cannot
finish is refused before it allocates them (run/guard.py); `of_scenario` makes the same
outline from a built Scenario (a tuner's evaluation, a fleet-sizing search).

A slice tiled over `workload.rate_curve.span_s` and modulated by its curve is outlined without
tiling it: the slice's counts per bin repeated, times the curve's multiplier at each bin (the
expected count the thinning keeps: workload/rate_curve.py).
"""

from __future__ import annotations

import dataclasses
import math

import jax
import numpy as np

from servetune.core.types import CostParams, EngineConfig

BINS = 2048  # time bins of the arrivals (fewer where that makes a bin shorter than MIN_BIN_S)
MAX_BINS = 8192  # an autoscaler's bins (its evaluation interval) at most: longer bins beyond
MIN_BIN_S = 1.0


@dataclasses.dataclass(frozen=True)
class FleetOutline:
    """The autoscaler's numbers of the first policy point (config/fleet.py, HPA's names)."""

    metric: str  # num_requests_waiting | num_requests_running | kv_cache_usage_perc
    min_replicas: float
    max_replicas: float
    target: float  # per-replica average of the metric
    interval_s: float  # evaluation period (s)
    scale_down_window_s: float  # stabilization window of a scale-down (s)
    cold_start_s: float  # scale-up to serving (s)


@dataclasses.dataclass(frozen=True)
class Outline:
    """A batch of `seeds` x `points` scenarios as an estimate sees it (module docstring)."""

    seeds: int
    points: int
    requests: int  # expected requests of one scenario (the first seed's)
    span_s: float  # the arrivals' span (s)
    bin_s: float  # width of one bin of `counts` (s)
    counts: np.ndarray  # [B] f64 expected arrivals per bin (the first seed's)
    prompt_tokens: float  # mean prompt tokens of a request
    output_tokens: float  # mean output tokens of a request
    engine: EngineConfig  # as configured (n_instances: an autoscaler's capacity)
    cost: CostParams  # the first policy point's cost model (scalar numpy leaves)
    max_num_seqs: float  # the first policy point's (inf: unlimited)
    max_num_batched_tokens: float  # the first policy point's token budget (inf: unlimited)
    kv_tokens: float  # KV-cache tokens of one instance
    drain_s: float  # window.drain_s: how long the run may go on after the last arrival (s)
    fleet: FleetOutline | None  # the autoscaler, None without one
    sized_by: tuple  # keys that set the requests and the span, for a refusal to name

    @property
    def scenarios(self) -> int:
        """Scenarios in the batch: seeds x grid points."""
        return self.seeds * self.points

    def with_instances(self, n: int) -> Outline:
        """The same load on `n` static instances (a fleet-sizing search's counts)."""
        engine = dataclasses.replace(self.engine, n_instances=int(n), autoscale=False)
        return dataclasses.replace(self, engine=engine, fleet=None)


def first(tree):
    """The first policy point of a batched pytree (numpy scalars, leaves reshaped flat)."""
    return jax.tree.map(lambda x: np.asarray(x).reshape(-1)[0], tree)


def bins_for(span_s: float, interval_s: float | None = None) -> tuple[int, float]:
    """(bins, bin width s) over `span_s`: BINS at least MIN_BIN_S long, or bins of an
    autoscaler's evaluation `interval_s` (at most MAX_BINS of them)."""
    span_s = max(float(span_s), MIN_BIN_S)
    if interval_s:
        width = max(interval_s, span_s / MAX_BINS)
    else:
        width = max(span_s / BINS, MIN_BIN_S)
    n = max(1, math.ceil(span_s / width))
    return n, span_s / n


def counts(arrival: np.ndarray, span_s: float, n_bins: int) -> np.ndarray:
    """[n_bins] arrivals per bin of [0, span_s)."""
    hist, _ = np.histogram(arrival, bins=n_bins, range=(0.0, max(span_s, 1e-9)))
    return hist.astype(np.float64)


def tiled_counts(
    arrival: np.ndarray, span_s: float, total_s: float | None, curve, interval_s: float | None
) -> tuple[np.ndarray, float, float]:
    """(expected counts per bin, bin width s, span s) of a slice (arrivals in [0, span_s))
    tiled to `total_s` (None: not tiled) and thinned by `curve` (a RateCurve, or None), without
    drawing the tiles: the slice's counts in bins that divide its span, repeated."""
    total = span_s if total_s is None else total_s
    n_total, width = bins_for(total, interval_s)
    per_slice = max(1, round(span_s / width))
    width = span_s / per_slice  # bins that divide the slice
    base = counts(arrival, span_s, per_slice)
    n_total = max(1, math.ceil(total / width))
    out = np.tile(base, math.ceil(n_total / per_slice))[:n_total]
    if curve is not None:
        out = out * curve.at((np.arange(n_total) + 0.5) * width)
    return out, width, total
