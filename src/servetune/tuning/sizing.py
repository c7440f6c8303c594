"""The static answer to "how many GPUs does this traffic need": the smallest fixed number of
replicas (`engine.n_instances`) that meets the SLO-attainment target at the traffic's peak.

The peak is the rate curve's highest multiplier (workload/rate_curve.py; 1 without a curve)
held for the configured slice: a trace is replayed at that rate by `workload.replicas.rate`
(thinning and shifted copies, so its bursts stay; every seed a replica, seed 0 too, with the
workload's other `workload.replicas.*` settings), a synthetic workload
by scaling its rate (`workload.rate`, or `workload.vllm_bench.request_rate`). Each replica
count is simulated over the configured seeds; it meets the target when the mean SLO
attainment over the seeds does (the interval over them is reported). The search doubles the
count from 1 until one meets the target, then bisects between the last that failed and the
first that met it, so it simulates about 2 log2 N counts. Attainment is assumed not to fall as
replicas are added (it does not, for a router that spreads load). The cost is hardware.tp
GPUs per replica at the hardware's price: a model cascade's pools are not sized here.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence

import numpy as np

from servetune.config import hardware, scenario, settings
from servetune.core.errors import ConfigError
from servetune.run import api, estimate, guard
from servetune.tuning.evaluation import interval

MAX_REPLICAS = 1024  # engine.n_instances' own bound (config/scenario.MAX_INSTANCES)


@dataclasses.dataclass(frozen=True)
class FleetSize:
    """The smallest replica count meeting the target at the peak (None if none up to the
    search's limit), what each count tried gave, and what the answer costs."""

    replicas: int | None
    target: float  # required SLO attainment (0..1)
    peak_multiplier: float  # the rate curve's peak (1.0 without one)
    tried: dict  # replicas -> (mean attainment, interval low, interval high) over the seeds
    gpus_per_replica: int  # hardware.tp
    price_per_gpu_hour: float  # USD
    notes: tuple[str, ...] = ()  # what the search changed in the config, in words

    @property
    def cost_per_hour_usd(self) -> float:
        """USD per hour of the static fleet (NaN when no count met the target)."""
        if self.replicas is None:
            return float("nan")
        return self.replicas * self.gpus_per_replica * self.price_per_gpu_hour


def search(meets: Callable[[int], bool], limit: int) -> int | None:
    """The smallest n in [1, limit] with meets(n), for meets monotone in n: doubling from 1,
    then bisection; None when meets(limit) is false."""
    low, n = 0, 1  # meets(low) is false (0 replicas serve nothing)
    while not meets(n):
        if n >= limit:
            return None
        low, n = n, min(2 * n, limit)
    high = n
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if meets(mid) else (mid, high)
    return high


def peak_overrides(cfg) -> tuple[list[str], float]:
    """(overrides that replay the configured workload at its rate curve's peak without the
    curve, the peak multiplier)."""
    curve = scenario.rate_curve_spec(cfg)
    if curve is None:
        return [], 1.0
    peak = float(np.max(curve[0].multipliers))
    out = ["workload.rate_curve.curve=null", "workload.rate_curve.span_s=null"]
    if settings.get(cfg, "workload.kind") == "trace":
        rate = settings.number(cfg, "workload.replicas.rate", lo=1e-6, hi=1e3, default=1.0)
        out += [f"workload.replicas.rate={rate * peak!r}", "workload.replicas.recorded_seed=null"]
    else:  # a synthetic workload's own rate: vllm bench serve's flag, or workload.rate
        key = (
            "workload.vllm_bench.request_rate"
            if settings.get(cfg, "workload.vllm_bench") is not None
            else "workload.rate"
        )
        rate = settings.number(cfg, key, lo=0, hi=math.inf)
        if not math.isfinite(rate):
            raise ConfigError(
                f"{key}: got {rate}; requests sent all at once have no rate for the rate "
                f"curve's peak to scale (expected a finite request rate)"
            )
        out.append(f"{key}={rate * peak!r}")
    return out, peak


def expected_counts(outline, limit: int) -> list[int]:
    """The counts `search` simulates where the smallest count that meets the target is the
    first power of two whose replicas keep up with the load (the fluid model of
    run/estimate.py: no replica saturated), or `limit`: the doubling up to it, then the
    bisection below it."""
    fits = limit
    n = 1
    while n < limit:
        if estimate.load(outline.with_instances(n)).saturated == 0:
            fits = n
            break
        n *= 2
    counts, n = [], 1
    while n < fits:
        counts.append(n)
        n *= 2
    counts.append(min(fits, limit))
    low, high = fits // 2, fits
    while high - low > 1:  # the bisection, taken to its upper half each time
        mid = (low + high) // 2
        counts.append(mid)
        low = mid
    return counts


def check_search(cfg, limit: int) -> None:
    """The resource guard over the search (run/guard.py): the counts it is expected to
    simulate (expected_counts), each at its estimate, refused by the guard's limit before
    the first; each count's simulation is guarded again by api.simulate."""
    found = scenario.outline(cfg)
    counts = expected_counts(found, limit)
    what = f"the fleet-sizing search (about {len(counts)} replica counts up to {max(counts)})"
    tally = guard.Tally(cfg, what, ("limit", "workload.duration_s", "seeds"))
    for n in counts:
        tally.add(found.with_instances(n), 1.0, True)


def smallest_fleet(
    overrides: Sequence[str] = (), target: float | None = None, limit: int = 64
) -> FleetSize:
    """The smallest `engine.n_instances` whose mean SLO attainment over the configured seeds
    reaches `target` (default tune.objective.slo_target, else 0.99) with the workload of
    `overrides` at its rate curve's peak (see the module docstring). An autoscaler
    (fleet.autoscale) is turned off for the search, which sizes a fixed fleet, and `notes`
    says so."""
    if isinstance(overrides, (str, bytes)) or not isinstance(overrides, Sequence):
        raise ConfigError(
            f"overrides: got {overrides!r}; expected a list of Hydra overrides such as "
            f"['workload=poisson', 'workload.rate=8']"
        )
    bad = [o for o in overrides if not isinstance(o, str)]
    if bad:
        raise ConfigError(
            f"overrides: item {bad[0]!r} is a {type(bad[0]).__name__}; expected each "
            f"override as text such as 'workload.rate=8'"
        )
    cfg = api.compose(list(overrides))
    if target is None:
        target = settings.number(cfg, "tune.objective.slo_target", lo=0, hi=1, default=0.99)
    if not 0 < target <= 1:
        raise ConfigError(f"target: got {target!r}; expected an SLO attainment in (0, 1]")
    if not 1 <= limit <= MAX_REPLICAS:
        raise ConfigError(f"limit: got {limit!r}; expected replicas in [1, {MAX_REPLICAS}]")
    at_peak, peak = peak_overrides(cfg)
    notes: tuple[str, ...] = ()
    if settings.flag(cfg, "fleet.autoscale", False):
        at_peak.append("fleet.autoscale=false")
        notes = (
            "fleet.autoscale turned off: the search sizes a fixed fleet (engine.n_instances) "
            "for the peak; the autoscaler's own numbers are tuned with tune.space.fleet",
        )
    check_search(api.compose([*overrides, *at_peak]), limit)
    tried: dict[int, tuple[float, float, float]] = {}

    def meets(n: int) -> bool:
        res = api.simulate([*overrides, *at_peak, f"engine.n_instances={n}"])
        mean, low, high, _ = interval([m["slo_attainment"] for m in res.metrics], (0.0, 1.0))
        tried[n] = (mean, low, high)
        return mean >= target

    replicas = search(meets, limit)
    gpu = hardware.lookup(hardware.GPUS, settings.get(cfg, "hardware.gpu"), "hardware.gpu")
    price = settings.number(cfg, "hardware.price_per_gpu_hour", lo=0, allow_none=True)
    return FleetSize(
        replicas=replicas,
        target=target,
        peak_multiplier=peak,
        tried=dict(sorted(tried.items())),
        gpus_per_replica=settings.number(cfg, "hardware.tp", lo=1, integer=True, default=1),
        price_per_gpu_hour=gpu.price_per_gpu_hour if price is None else price,
        notes=notes,
    )
