"""The number `servetune simulate` returns to a Hydra sweeper (the `sweep.*` config keys).

Hydra's Optuna sweeper (`hydra/sweeper=optuna`, sweeps/optuna_policy) reads the float that the
task function returns. By default that is the tuner's objective in a fixed-penalty form:

    log(useful tokens) - log(USD) - penalty x max(0, slo_target - SLO attainment)

per scenario (tuning/objective.py: useful tokens are output tokens of requests that met every
`slo.*` target, USD the GPUs provisioned over the run), combined over the scenarios of the job
(seeds, grid points) as `tune.objective.aggregate` says (mean or CVaR). The first term is
log(useful tokens per dollar), so maximizing it maximizes useful tokens per dollar; Optuna has
no dual variable, hence a fixed penalty, large enough (default 100 per unit of attainment,
i.e. 1.0 in log units per point missed) that a policy missing the SLO target loses to any
policy meeting it at a comparable cost. `sweep.objective` may instead name any numeric key of
metrics.json (goodput_rps, useful_tokens_per_dollar, ...): its mean over the job's scenarios.
"""

from __future__ import annotations

import math

import numpy as np
from omegaconf import DictConfig, OmegaConf

from servetune.core.errors import ConfigError
from servetune.tuning.objective import Objective, include_energy

DEFAULT = "penalized"


def check_config(cfg: DictConfig) -> tuple[str, float]:
    """(sweep.objective, sweep.penalty), checked before anything is simulated."""
    name = OmegaConf.select(cfg, "sweep.objective", default=DEFAULT)
    if name is None:
        name = DEFAULT
    if not isinstance(name, str) or not name:
        raise ConfigError(
            f"sweep.objective: got {name!r}; expected {DEFAULT!r} or the name of a numeric metric"
        )
    penalty = OmegaConf.select(cfg, "sweep.penalty", default=100.0)
    if (
        isinstance(penalty, bool)
        or not isinstance(penalty, (int, float))
        or not math.isfinite(penalty)
        or penalty < 0
    ):
        raise ConfigError(f"sweep.penalty: got {penalty!r}; expected a finite number >= 0")
    return name, float(penalty)


def sweep_objective(cfg: DictConfig, metrics: list[dict]) -> float:
    """The float a sweeper maximizes for one job whose scenarios produced `metrics`."""

    name, penalty = check_config(cfg)
    if not metrics:
        return float("nan")
    if name == DEFAULT:
        obj = Objective(
            slo_target=float(OmegaConf.select(cfg, "tune.objective.slo_target", default=0.99)),
            aggregate=str(OmegaConf.select(cfg, "tune.objective.aggregate", default="mean")),
            cvar_alpha=float(OmegaConf.select(cfg, "tune.objective.cvar_alpha", default=0.25)),
            include_energy=include_energy(cfg),
        )
        per = np.array([obj.value(m) - penalty * obj.violation(m) for m in metrics])
        return obj.combine(per)
    values = [m.get(name) for m in metrics]
    if any(isinstance(v, (dict, list, str, type(None))) for v in values):
        keys = sorted(k for k, v in metrics[0].items() if isinstance(v, (int, float)))
        raise ConfigError(
            f"sweep.objective: got {name!r}; expected {DEFAULT!r} or a numeric "
            f"metric: {', '.join(keys)}"
        )
    return float(np.mean(np.asarray(values, np.float64)))
