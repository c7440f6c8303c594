"""The pathwise gradient estimator of the tuner (tune.estimator=pathwise).

Each iteration the tuner evaluates its current point on the exact simulator (for the log, the
best-so-far and the dual ascent, as with ES) and takes its step along the forward-mode gradient of
the smoothed Lagrangian through the relaxed simulator
(servetune/tuning/estimators/pathwise_gradient.py), on the same workloads: one relaxed run per
workload instead of a population of 2 x pairs + 1. The queue cap, the routing weights and the
cascade threshold, whose decisions no relaxed run moves, add two paired runs per key and workload
whose difference is the key's derivative (servetune/tuning/estimators/paired_difference.py).
"""

from __future__ import annotations

import jax
import numpy as np

from servetune.core.errors import ConfigError
from servetune.tuning.estimators import paired_difference
from servetune.tuning.estimators import pathwise_gradient as pathwise
from servetune.tuning.estimators.base import Estimate, Score
from servetune.tuning.evaluator import Evaluator
from servetune.tuning.space import SearchSpace


class PathwiseEstimator:
    """Gradient [d] of the smoothed Lagrangian at a point z [d] of `space`, on the evaluator's
    scenario (its workloads [S] and base policy), through an engine relaxed with `mode`
    (st or soft) at `temperature`; SLO checks smoothed with relative width `slo_tau`;
    scenarios averaged, or (aggregate cvar) their worst `cvar_alpha` fraction; the
    derivatives of pathwise.DIFFERENCE_KEYS by paired differences `difference_step`
    (relative) either side (paired_difference.py)."""

    def __init__(
        self,
        evaluator: Evaluator,
        space: SearchSpace,
        mode: str,
        temperature: float,
        slo_target: float,
        slo_tau: float,
        aggregate: str = "mean",
        cvar_alpha: float = 0.25,
        difference_step: float = 0.1,
    ):
        keys = pathwise.PATHWISE_KEYS + pathwise.DIFFERENCE_KEYS
        for dim in space.dims:
            if dim.key not in keys:
                raise ConfigError(
                    f"tune.space.{dim.key}: the pathwise estimator has gradients "
                    f"for {list(keys)} only; use tune=es to tune {dim.key}"
                )
        if not (isinstance(difference_step, (int, float)) and 0 < difference_step <= 1):
            raise ConfigError(
                f"tune.difference_step: got {difference_step!r}; expected a number in (0, 1]"
            )
        if space.net_size:
            raise ConfigError(
                "tune.policy_family: the pathwise estimator tunes the linear "
                "family only; use tune=es for the neural policy"
            )
        if not slo_tau > 0:
            raise ConfigError(f"tune.slo_tau: got {slo_tau!r}; expected a number > 0")
        sc = evaluator.scenario
        self.evaluator = evaluator
        order = any(dim.key in pathwise.ORDER_KEYS for dim in space.dims)
        self.cfg = pathwise.relaxed_engine(sc.engine, mode, temperature, order)
        self.targets = pathwise.targets(sc.metrics, slo_target, slo_tau)
        self.aggregate, self.cvar_alpha = aggregate, cvar_alpha
        self.difference_step = float(difference_step)
        self.point_map = pathwise.PointMap(space.dims, space.constraints)
        n = sc.workloads.arrival.shape[1]
        self.weights = np.zeros((len(sc.traces), 2, n))
        self.counted = np.zeros((len(sc.traces), n), bool)
        for s, trace in enumerate(sc.traces):
            self.weights[s, :, : len(trace)] = pathwise.request_weights(trace, sc.metrics)
            self.counted[s, : len(trace)] = np.asarray(trace.arrival) >= sc.metrics.warmup_s
        self.space = space

    def run_args(self, z: np.ndarray, lam: float) -> tuple:
        """The arguments after z of pathwise.per_scenario (and paired_difference.jacobian)
        at the point z [d] with multiplier lam: the scenario's workloads, request weights,
        counted requests, lam, the base policy at z, the relaxed engine, targets, point map."""
        one = {k: np.array([v]) for k, v in self.space.values(np.asarray(z)).items()}
        base = jax.tree.map(lambda x: x[0], self.evaluator.params(one))
        return (
            self.evaluator.scenario.workloads,
            self.weights,
            self.counted,
            lam,
            base,
            self.cfg,
            self.targets,
            self.point_map,
        )

    def __call__(self, z: np.ndarray, lam: float) -> tuple[np.ndarray, dict]:
        """(ascent direction [d] of the smoothed Lagrangian, its value's parts: f, attainment,
        lagrangian, aggregated over the workloads). Counts the relaxed runs (paired ones
        included) as scenarios."""
        sc = self.evaluator.scenario
        args = self.run_args(z, lam)
        values, jac = pathwise.per_scenario(z, *args)
        paired_jac, n_paired = paired_difference.jacobian(z, *args, self.difference_step)
        jac = jac + paired_jac
        n_runs = len(sc.traces) + n_paired
        value, jac = pathwise.aggregate_scenarios(values, jac, self.aggregate, self.cvar_alpha)
        self.evaluator.scenarios_simulated += n_runs
        if not np.all(np.isfinite(jac)):
            raise FloatingPointError(
                f"pathwise gradient not finite at {self.space.values(np.asarray(z))}: {jac[2]}"
            )
        return jac[2], {
            "soft_objective": float(value[0]),
            "soft_attainment": float(value[1]),
            "soft_lagrangian": float(value[2]),
        }


class Pathwise:
    """The pathwise estimator in the runner's interface (base.Estimator): the exact simulator
    scores the center (`score`: for the log, the best point and the dual ascent, as with ES)
    and `gradient` (a PathwiseEstimator) gives the step through the relaxed one."""

    def __init__(self, score: Score, gradient: PathwiseEstimator):
        self.score, self.gradient = score, gradient

    def __call__(self, theta: np.ndarray, lam: float, iteration: int) -> Estimate:
        """The center scored, and the pathwise gradient [d] with its smoothed figures."""
        points = np.asarray(theta)[None]
        summaries = self.score(points, lam)
        grad, soft = self.gradient(np.asarray(theta), lam)
        return Estimate(points, summaries, grad, soft)
