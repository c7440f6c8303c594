"""Evaluate many policies on a base scenario with the exact (hard) simulator."""

from __future__ import annotations

import functools
from collections.abc import Mapping

import jax
import jax.numpy as jnp
import numpy as np

from servetune.config import fleet as fleet_lib
from servetune.config.policy import make_policy
from servetune.config.scenario import Scenario
from servetune.core.types import FleetParams, Params
from servetune.run import metrics as metrics_lib
from servetune.run.api import check_invariants
from servetune.run.driver import rollout


def _policy_values(scenario: Scenario) -> dict:
    """The scenario's (first) policy point as plain floats (score_net, if any, as an array)."""
    pol = scenario.params.policy
    out = {
        k: float(np.asarray(getattr(pol, k)).reshape(-1)[0])
        for k in pol.__dataclass_fields__
        if k != "score_net"
    }
    if pol.score_net is not None:
        w = np.asarray(pol.score_net)
        out["score_net"] = w.reshape(-1, w.shape[-1])[0]
    if scenario.params.fleet is not None:  # the autoscaler's numbers: "fleet.<key>"
        fleet = scenario.params.fleet
        for k in fleet.__dataclass_fields__:
            out[fleet_lib.PREFIX + k] = float(np.asarray(getattr(fleet, k)).reshape(-1)[0])
    return out


def fleet_params(values: Mapping[str, np.ndarray], capacity: int) -> FleetParams:
    """FleetParams [P] from the "fleet.<key>" entries of `values` (arrays [P]): max_replicas
    held to the engine's `capacity` (its instances) and min_replicas to max_replicas."""
    get = lambda k: np.asarray(values[fleet_lib.PREFIX + k], np.float64)
    most = np.minimum(get("max_replicas"), capacity)
    fields = {k: get(k) for k in FleetParams.__dataclass_fields__}
    fields.update(max_replicas=most, min_replicas=np.minimum(get("min_replicas"), most))
    return FleetParams(**{k: jnp.asarray(v) for k, v in fields.items()})


class Evaluator:
    """Simulates policies [P] x the scenario's workloads [S]; counts scenarios simulated.

    batch_mode "vmap" runs the whole population in one compiled, vmapped call; "loop" runs the
    scenarios one at a time through the same compiled single-scenario function (faster on a
    CPU, where vmap turns the loop's branches into selects); "auto" loops on CPU.
    """

    def __init__(self, scenario: Scenario, order: str, batch_mode: str = "auto"):
        self.scenario = scenario
        self.order = order
        self.base = _policy_values(scenario)
        if batch_mode == "auto":
            batch_mode = "loop" if jax.default_backend() == "cpu" else "vmap"
        self.batch_mode = batch_mode
        self.scenarios_simulated = 0

    def params(self, values: Mapping[str, np.ndarray]) -> Params:
        """Params [P] of the base policy with `values` (arrays [P], score_net [P, W])
        substituted."""
        n = len(next(iter(values.values())))
        merged = {
            k: (np.broadcast_to(v, (n,) + np.shape(v)) if k == "score_net" else np.full(n, v))
            for k, v in self.base.items()
        }
        merged.update({k: np.asarray(v, np.float64) for k, v in values.items()})
        fleet = {k: merged.pop(k) for k in list(merged) if k.startswith(fleet_lib.PREFIX)}
        # the base values carry the order's score weights already: take them as given
        pol = make_policy(merged, order="neural" if "score_net" in merged else "parametric")
        widen = lambda tree: jax.tree.map(
            lambda x: jnp.broadcast_to(x[0], (n,) + x.shape[1:]), tree
        )
        base = self.scenario.params
        return Params(
            policy=pol,
            cost=widen(base.cost),
            draft=None if base.draft is None else widen(base.draft),
            fleet=fleet_params(fleet, self.scenario.engine.n_instances) if fleet else None,
        )

    def __call__(self, values: Mapping[str, np.ndarray]) -> list[list[dict]]:
        """Metrics [P][S] of each policy (a column per policy) on every workload."""
        params = self.params(values)
        sc = self.scenario
        n_real = [len(t) for t in sc.traces]
        n_pol = int(params.policy.max_num_seqs.shape[0])
        if self.batch_mode == "vmap":
            results = rollout(sc.workloads, params, sc.engine, n_real)
        else:
            results = [[None] * n_pol for _ in sc.traces]
            for s in range(len(sc.traces)):
                wl = jax.tree.map(lambda x, s=s: x[s : s + 1], sc.workloads)
                for p in range(n_pol):
                    one = jax.tree.map(lambda x, p=p: x[p : p + 1], params)
                    results[s][p] = rollout(wl, one, sc.engine, n_real[s : s + 1])[0][0]
        check_invariants(results)
        self.scenarios_simulated += n_pol * len(sc.traces)
        metric = functools.partial(metrics_lib.compute_metrics, spec=sc.metrics)
        return [
            [metric(sc.traces[s], results[s][p]) for s in range(len(sc.traces))]
            for p in range(n_pol)
        ]


class MultiEvaluator:
    """Several Evaluators (one per workload) as one: a policy's column is the concatenation
    of its metrics on every workload, so the objective aggregates over all of them."""

    def __init__(self, evaluators: list[Evaluator]):
        self.evaluators = evaluators
        self.base = evaluators[0].base

    @property
    def scenarios_simulated(self) -> int:
        """Scenarios simulated by all the evaluators together."""
        return sum(ev.scenarios_simulated for ev in self.evaluators)

    @scenarios_simulated.setter
    def scenarios_simulated(self, value: int) -> None:
        for ev in self.evaluators:
            ev.scenarios_simulated = 0
        self.evaluators[0].scenarios_simulated = value

    def __call__(self, values: Mapping[str, np.ndarray]) -> list[list[dict]]:
        """Metrics [P][W x S] of each policy over every workload's scenarios."""
        per = [ev(values) for ev in self.evaluators]
        return [[m for cols in per for m in cols[p]] for p in range(len(per[0]))]
