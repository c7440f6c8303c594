"""The tuning objective: useful tokens per dollar, subject to an SLO-attainment target.

Per scenario, f = log(useful tokens) - log(dollars), where useful tokens are the output tokens
of requests that completed within every SLO target and dollars are the GPUs provisioned over
the run (metrics.compute_metrics), plus their electricity with `include_energy`. The
constraint is attainment >= target (the fraction of requests meeting the SLOs); its violation
rate max(0, target - attainment) enters a Lagrangian f - lambda x violation whose multiplier
is raised by dual ascent while the constraint is violated. Scenarios (seeds, workloads) are
averaged, or, for robust tuning, the mean of the worst `cvar_alpha` fraction is taken (CVaR).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from servetune.config import settings
from servetune.core.errors import ConfigError

_FLOOR = 1e-9  # keeps log(useful tokens) finite when nothing qualifies


def include_energy(cfg, pathwise: bool = False) -> bool:
    """tune.objective.include_energy of `cfg` (false where absent), checked: electricity needs
    a positive hardware.energy_price_usd_per_kwh, and the pathwise tuner's smoothed objective
    has no energy term."""
    on = settings.flag(cfg, "tune.objective.include_energy", False)
    if not on:
        return False
    if pathwise:
        raise ConfigError(
            "tune.objective.include_energy: the pathwise tuner's smoothed objective has no "
            "energy term; expected false with tune=pathwise (tune=es weighs energy)"
        )
    price = settings.get(cfg, "hardware.energy_price_usd_per_kwh", 0.0)
    if isinstance(price, bool) or not isinstance(price, (int, float)) or not price > 0:
        raise ConfigError(
            f"tune.objective.include_energy: hardware.energy_price_usd_per_kwh is {price!r}; "
            f"expected a positive price (USD per kWh) for the energy to weigh anything"
        )
    return True


@dataclasses.dataclass(frozen=True)
class Objective:
    """How metrics become one number to maximize.

    slo_target: required SLO attainment (0..1). aggregate: "mean" or "cvar" over scenarios;
    cvar_alpha: the worst fraction averaged under "cvar". include_energy: the dollars are the
    GPUs' plus their electricity (energy_cost_usd, at hardware.energy_price_usd_per_kwh).
    """

    slo_target: float = 0.99
    aggregate: str = "mean"
    cvar_alpha: float = 0.25
    include_energy: bool = False

    def value(self, metrics: dict) -> float:
        """f = log(useful tokens) - log(USD) of one scenario's metrics."""
        useful = max(float(metrics["useful_tokens"]), _FLOOR)
        dollars = float(metrics["cost_usd"])
        if self.include_energy:
            dollars += float(metrics["energy_cost_usd"])
        return math.log(useful) - math.log(max(dollars, _FLOOR))

    def violation(self, metrics: dict) -> float:
        """max(0, target - attainment) of one scenario (0 when the target is met)."""
        att = float(metrics["slo_attainment"])
        return max(0.0, self.slo_target - (att if math.isfinite(att) else 0.0))

    def combine(self, per_scenario: np.ndarray) -> float:
        """Aggregate per-scenario numbers [S] (higher is better): mean, or CVaR of the worst."""
        x = np.sort(np.asarray(per_scenario, np.float64))
        if self.aggregate == "cvar":
            k = max(1, math.ceil(self.cvar_alpha * len(x)))
            return float(x[:k].mean())
        return float(x.mean())

    def summarize(self, column: list[dict], multiplier: float) -> dict:
        """Objective, violation and Lagrangian of one policy over its scenarios' metrics."""
        f = np.array([self.value(m) for m in column])
        v = np.array([self.violation(m) for m in column])
        lagr = f - multiplier * v
        return {
            "objective": self.combine(f),
            "violation": float(v.mean()),
            "lagrangian": self.combine(lagr),
            "slo_attainment": float(np.mean([m["slo_attainment"] for m in column])),
            "useful_tokens_per_dollar": float(
                np.mean([m["useful_tokens_per_dollar"] for m in column])
            ),
        }
