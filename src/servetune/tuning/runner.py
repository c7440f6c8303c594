"""The tuning loop: ES gradients into optax, dual ascent on the SLO constraint, checkpoints,
a held-out evaluation of the best policy against the starting one, and exports."""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import os
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pandas as pd
from omegaconf import DictConfig, OmegaConf

from servetune.config import fleet as fleet_lib
from servetune.config import settings
from servetune.config.policy import DEFAULTS, ORDERS
from servetune.config.scenario import MAX_SEEDS, build
from servetune.core.errors import CheckpointError, ConfigError
from servetune.core.files import ensure_dir, write_json, write_text, write_whole
from servetune.deploy import export
from servetune.deploy import tuned as tuned_export
from servetune.engine import memory, neural
from servetune.reporting.convergence import write_convergence
from servetune.reporting.tuning_page import Outcome, write_views
from servetune.run import estimate, guard
from servetune.run.api import compose
from servetune.tuning import checkpoint, recommend
from servetune.tuning.estimators.es import EvolutionStrategies
from servetune.tuning.estimators.pathwise import Pathwise, PathwiseEstimator
from servetune.tuning.evaluation import (
    REGRESSION_TOLERANCE,
    check_evaluation,
    evaluate_policies,
    mark_verdicts,
    side_by_side,
    verdicts,
)
from servetune.tuning.evaluator import Evaluator, MultiEvaluator
from servetune.tuning.objective import Objective, include_energy
from servetune.tuning.sensitivity import CAPTION, measure, unmeasured
from servetune.tuning.space import SearchSpace, constraints_for, space_from_config
from servetune.tuning.split_overrides import (
    TRAINING_GROUPS,
    holdout_lists,
    with_overrides,
    workload_lists,
)
from servetune.tuning.state import TunerState

OPTIMIZERS = {"adam": optax.adam, "sgd": optax.sgd}
SUMMARY = tuned_export.SUMMARY  # written last by a finished run (_finish)
RESOLVED = tuned_export.RESOLVED  # the run's config, written when it starts
# what _finish writes, each only when due: an earlier finish's copies are removed first, so
# the folder never pairs this run's summary with a file it did not write (a stale export/
# after a regression that withholds it, sensitivity views after tune.eval.sensitivity=false)
FINAL_OUTPUTS = (
    SUMMARY,
    "evaluation.csv",
    "convergence.png",
    "sensitivity.csv",
    "history.png",
    "sensitivity.png",
    "tuning.html",
    "export",
)
# the Lagrange multiplier's ceiling (per unit of attainment shortfall, in log tokens per USD):
# far above any useful weight, and finite, so history.csv and the checkpoint never hold inf
MAX_LAMBDA = 1e9
MAX_ITERATIONS = 100_000  # the checkpoint holds (and rewrites) one history row per iteration
MAX_PAIRS = 4096  # 8193 policies per iteration
MAX_SIMULATIONS = 10**8  # scenarios simulated over a run (iterations x policies x scenarios)
MAX_SEED = 2**63 - 1  # the largest `seed` (servetune.config.scenario)
RECORD_BYTES = 12 << 10  # host memory of one scenario's metrics (~60 numbers; measured 11 KiB)


@dataclasses.dataclass(frozen=True)
class Settings:
    """What `tune.*` configures (see conf/tune/es.yaml for the meaning of each key)."""

    estimator: str
    iterations: int
    pairs: int
    sigma: float
    optimizer: str
    learning_rate: float
    seed: int
    resume: bool
    checkpoint_every: int
    batch_mode: str
    objective: Objective
    lambda_init: float
    lambda_learning_rate: float
    space: SearchSpace
    eval_seeds: int
    eval_seed_offset: int
    holdout: list  # held-out workloads: a list of override lists
    workloads: list  # training workloads: a list of override lists
    export: bool
    export_on_regression: bool = False  # export_policy=tuned: export a regressed tuned point too
    export_policy: str = "recommended"  # recommended | tuned (tuning/recommend.py)
    regression_tolerance: float = REGRESSION_TOLERANCE  # relative loss, without an interval
    sensitivity: bool = True  # the tuned point's finite differences, history.png, tuning.html
    policy_family: str = "linear"
    net_hidden: int = 0
    net_scale: float = 1.0
    net_init_seed: int = 0
    net_init_out_scale: float = 0.0
    relax: str = "st"  # pathwise: engine relaxation (st | soft)
    temperature: float = 0.3  # pathwise: tau of the relaxed gates
    slo_tau: float = 0.2  # pathwise: relative width of the smoothed SLO checks
    difference_step: float = 0.1  # pathwise: queue cap's paired difference, relative


def _num(t, key, kind=float, lo=-math.inf, hi=math.inf):
    return settings.number(t, key, lo=lo, hi=hi, integer=kind is int, where=f"tune.{key}")


def _choice(t, key, options):
    return settings.choice(t, key, options, where=f"tune.{key}")


def _flag(t, key, default: bool) -> bool:
    return settings.flag(t, key, default, where=f"tune.{key}")


def _mapping(t, key) -> dict:
    value = OmegaConf.select(t, key)
    if not isinstance(value, DictConfig):
        raise ConfigError(
            f"tune.{key}: got {value!r}; expected a mapping of policy key -> {{low, high, scale}}"
        )
    return OmegaConf.to_container(value)


def settings_from_config(cfg: DictConfig) -> Settings:
    """Validated tuning settings from the `tune` section; errors name the `tune.<key>`."""
    t = cfg.get("tune")
    if t is None:
        raise ConfigError("tune: missing; add tune=es (the evolution-strategies tuner)")
    estimator = _choice(t, "estimator", ("es", "pathwise"))
    pathwise_only = estimator == "pathwise"
    if pathwise_only and "relax" not in t:  # tune.estimator=pathwise over the es group's keys
        raise ConfigError(
            "tune.estimator: got 'pathwise' over the es tuner's settings (no tune.relax, "
            "tune.temperature, tune.slo_tau); select the pathwise tuner with tune=pathwise"
        )
    family = OmegaConf.select(t, "policy_family", default="linear")
    if family not in ("linear", "neural"):
        raise ConfigError(f"tune.policy_family: got {family!r}; expected linear or neural")
    neural_family = family == "neural"
    hidden = _num(t, "net.hidden", int, 1, 4096) if neural_family else 0
    net_scale = _num(t, "net.scale", float, 1e-9, 1e6) if neural_family else 1.0
    return Settings(
        estimator=estimator,
        iterations=_num(t, "iterations", int, 1, MAX_ITERATIONS),
        pairs=0 if pathwise_only else _num(t, "pairs", int, 1, MAX_PAIRS),
        sigma=0.0 if pathwise_only else _num(t, "sigma", float, 1e-6),
        optimizer=_choice(t, "optimizer", OPTIMIZERS),
        learning_rate=_num(t, "learning_rate", float, 0),
        seed=_num(t, "seed", int, 0),
        resume=_flag(t, "resume", True),
        checkpoint_every=_num(t, "checkpoint_every", int, 1),
        batch_mode=_choice(t, "batch_mode", ("auto", "loop", "vmap")),
        objective=Objective(
            slo_target=_num(t, "objective.slo_target", float, 0, 1),
            aggregate=_choice(t, "objective.aggregate", ("mean", "cvar")),
            cvar_alpha=_num(t, "objective.cvar_alpha", float, 1e-6, 1),
            include_energy=include_energy(cfg, pathwise_only),
        ),
        lambda_init=_num(t, "dual.lambda_init", float, 0, MAX_LAMBDA),
        lambda_learning_rate=_num(t, "dual.learning_rate", float, 0, MAX_LAMBDA),
        space=space_from_config(
            _mapping(t, "space"),
            net_size=neural.n_weights(hidden) if neural_family else 0,
            net_scale=net_scale,
        ),
        eval_seeds=_num(t, "eval.seeds", int, 0, MAX_SEEDS),
        eval_seed_offset=_num(t, "eval.seed_offset", int, 0, MAX_SEED),
        holdout=holdout_lists(OmegaConf.select(t, "eval.holdout")),
        workloads=workload_lists(OmegaConf.select(t, "workloads")),
        export=_flag(t, "export", True),
        export_on_regression=_flag(t, "export_on_regression", False),
        export_policy=settings.choice(
            t,
            "export_policy",
            recommend.EXPORT_POLICIES,
            default="recommended",
            where="tune.export_policy",
        ),
        regression_tolerance=(
            _num(t, "eval.regression_tolerance", float, 0, 1)
            if OmegaConf.select(t, "eval.regression_tolerance") is not None
            else REGRESSION_TOLERANCE
        ),
        sensitivity=_flag(t, "eval.sensitivity", True),
        policy_family=family,
        net_hidden=hidden,
        net_scale=net_scale,
        net_init_seed=_num(t, "net.init_seed", int, 0) if neural_family else 0,
        net_init_out_scale=(_num(t, "net.init_out_scale", float, 0, 1e6) if neural_family else 0.0),
        **(
            {
                "relax": _choice(t, "relax", ("st", "soft")),
                "temperature": _num(t, "temperature", float, 1e-6),
                "slo_tau": _num(t, "slo_tau", float, 1e-6),
                "difference_step": _num(t, "difference_step", float, 1e-6, 1.0),
            }
            if pathwise_only
            else {}
        ),
    )


@dataclasses.dataclass
class TuneResult:
    """What a tuning run found: values (policy key -> float) of the start and of the best point
    found on the training scenarios (with its summary), the per-iteration history, the
    held-out evaluation table of the start and the tuned point, scenarios simulated, wall
    seconds, the output directory (checkpoint, history.csv, evaluation.csv, convergence.png,
    export/), whether the tuned point is worse than the start on held-out data
    (evaluation.verdicts), and the recommendation (tuning/recommend.py): the tuned point's
    values, which policy was exported and why, whether the tuned point is better beyond
    chance, its knobs at a bound of their range and the ranges."""

    start: dict
    best: dict
    best_summary: dict
    history: pd.DataFrame
    evaluation: pd.DataFrame
    scenarios_simulated: int
    wall_s: float
    out_dir: Path
    regression: bool = False
    tuned: dict = dataclasses.field(default_factory=dict)  # the tuned point (recommend.py)
    tuned_summary: dict = dataclasses.field(default_factory=dict)  # its training summary
    exported: str = "tuned"  # what export/ holds: "start" or "tuned" (recommend.recommend)
    recommendation: str = ""  # why, in words
    improvement: bool = False  # tuned better than the start beyond chance
    bounds: dict = dataclasses.field(default_factory=dict)  # tuned knobs at a bound: words
    ranges: dict = dataclasses.field(default_factory=dict)  # tuned key -> (low, high)


def _order(cfg: DictConfig) -> str:
    return OmegaConf.select(cfg, "policy.order", default="fcfs") or "fcfs"


def _check_keys_act(cfg: DictConfig, space: SearchSpace) -> None:
    """ConfigError naming a tuned key that the configured engine never reads (its every
    simulated scenario would be the same): the routing weights act only with
    engine.routing=score over several instances, the cascade threshold only with a cascade,
    the draft length only with a draft model, the compression ratio only under
    kv_pressure=compress."""
    engine = cfg.engine
    for dim in space.dims:
        if dim.key.startswith("route_w_") and not (
            engine.routing == "score" and engine.n_instances > 1
        ):
            raise ConfigError(
                f"tune.space.{dim.key}: the routing weights act only with "
                f"engine.routing=score and engine.n_instances > 1; got routing="
                f"{engine.routing}, n_instances={engine.n_instances}"
            )
        if dim.key == "cascade_threshold" and not engine.cascade_small_instances > 0:
            raise ConfigError(
                "tune.space.cascade_threshold: acts only with a model cascade "
                "(engine.cascade_small_instances > 0, e.g. +experiment=cascade)"
            )
        if dim.key == "spec_k" and OmegaConf.select(cfg, "speculation.draft") is None:
            raise ConfigError(
                "tune.space.spec_k: the draft length acts only with a draft "
                "model (speculation=draft); got speculation.draft=null"
            )
        if dim.key == "kv_compress_ratio" and engine.kv_pressure != "compress":
            raise ConfigError(
                f"tune.space.kv_compress_ratio: acts only with "
                f"engine.kv_pressure=compress; got {engine.kv_pressure}"
            )


SCORE_WEIGHTS = ("w_age", "w_prompt", "w_pred", "w_slack")  # the priority score's terms


def _weight(cfg: DictConfig, key: str):
    """The value the configured policy gives score weight `key` (make_policy's precedence:
    policy.<key> as configured, else the order's preset, else the default)."""
    value = OmegaConf.select(cfg, f"policy.{key}", default=None)
    return ORDERS.get(_order(cfg), {}).get(key, DEFAULTS[key]) if value is None else value


def _acts(cfg: DictConfig, space: SearchSpace, key: str) -> bool:
    """Does score weight `key` shape the score: tuned, or set to a value other than 0 (a value
    that is not a number is left to the scenario's checks)."""
    value = _weight(cfg, key)
    return key in space.keys or not isinstance(value, (int, float)) or value != 0


_UNREAD_UNDER_PRIORITY = (
    ": the priority score is not read under policy.order=priority "
    "(vLLM's priority scheduling orders the queue by each request's trace "
    "priority); use policy.order=parametric (or fcfs, sjf) to tune it"
)


def _check_score_keys_act(cfg: DictConfig, st: Settings) -> None:
    """ConfigError naming a tuned priority-score key that cannot change the scheduling order:
    any under vLLM's priority scheduling (policy.order=priority orders by the trace's
    priorities); ttft_target_s while the slack term is off (w_slack 0 and not tuned); a weight
    that is the score's only term, since every positive (or every negative) multiple of a
    score orders the queue the same way. A neural score (tune.policy_family=neural or
    policy.order=neural) reads them all, except under priority scheduling, which reads no
    score (tune.policy_family=neural is refused there too)."""
    neural = st.policy_family == "neural" or _order(cfg) == "neural"
    by_priority = _order(cfg) == "priority"
    if by_priority and st.policy_family == "neural":
        raise ConfigError(f"tune.policy_family: neural{_UNREAD_UNDER_PRIORITY}")
    for dim in st.space.dims:
        if dim.key not in SCORE_WEIGHTS + ("ttft_target_s",):
            continue
        where = f"tune.space.{dim.key}"
        if by_priority:
            raise ConfigError(f"{where}{_UNREAD_UNDER_PRIORITY}")
        if neural:
            continue
        if dim.key == "ttft_target_s" and not _acts(cfg, st.space, "w_slack"):
            raise ConfigError(
                f"{where}: acts only through the slack term w_slack x "
                f"(ttft_target_s - age_s), and w_slack is 0 and not tuned; set "
                f"policy.w_slack non-zero or tune it (+tune.space.w_slack=...), "
                f"or use tune.policy_family=neural"
            )
        others = [k for k in SCORE_WEIGHTS if k != dim.key]
        crosses_zero = dim.low < 0 < dim.high
        if (
            dim.key in SCORE_WEIGHTS
            and not crosses_zero
            and not any(_acts(cfg, st.space, k) for k in others)
        ):
            raise ConfigError(
                f"{where}: the score's only term ({', '.join(others)} are 0 "
                f"and not tuned), and any positive multiple of a score orders "
                f"the queue the same way, so every value in [{dim.low:g}, "
                f"{dim.high:g}] schedules alike; set or tune another weight "
                f"(e.g. policy.w_prompt=1), let the range cross 0, or use "
                f"tune.policy_family=neural"
            )


def _prepare(cfg: DictConfig, space: SearchSpace) -> DictConfig:
    """A copy of cfg whose engine has a running slot for every max_num_seqs the space allows
    (so no result depends on the static capacity) and no grid."""
    cfg = copy.deepcopy(cfg)
    OmegaConf.set_struct(cfg, False)
    for dim in space.dims:
        if dim.key == "max_num_seqs":
            cfg.engine.max_slots = math.ceil(dim.high)
    if "grid" in cfg:
        for k in cfg.grid:
            cfg.grid[k] = None
    return cfg


def export_notes(st: Settings) -> list[str]:
    """Notes on export settings that do not do what they may seem to: tune.export_on_regression
    without tune.export_policy=tuned (the recommended export is then the start)."""
    if st.export_on_regression and st.export_policy != "tuned":
        return [
            "note: tune.export_on_regression=true applies to tune.export_policy=tuned only: "
            "the recommended export is the start when the tuned point regresses (set "
            "tune.export_policy=tuned to export the tuned point whatever the verdict)"
        ]
    return []


def population(st: Settings) -> int:
    """Policies simulated per iteration: the center and 2 x tune.pairs perturbed (ES), or the
    center alone (pathwise)."""
    return 2 * st.pairs + 1 if st.estimator == "es" else 1


def _check_sizes(cfg: DictConfig, st: Settings) -> None:
    """ConfigError naming the keys when the run would simulate more than MAX_SIMULATIONS
    scenarios (iterations x policies x seeds x workloads) or its held-out seeds would start
    past the largest seed."""
    seed = settings.number(cfg, "seed", lo=0, hi=MAX_SEED, integer=True, default=0)
    if seed + st.eval_seed_offset > MAX_SEED:
        raise ConfigError(
            f"tune.eval.seed_offset: got {st.eval_seed_offset}; the held-out "
            f"seeds would start at seed {seed} + it = {seed + st.eval_seed_offset}"
            f", past the largest seed {MAX_SEED}"
        )
    seeds = settings.number(cfg, "seeds", lo=1, hi=MAX_SEEDS, integer=True, default=1)
    each = seeds * max(1, len(st.workloads))
    total = st.iterations * population(st) * each
    if total > MAX_SIMULATIONS:
        raise ConfigError(
            f"tune.iterations x tune.pairs: {st.iterations} iteration(s) x "
            f"{population(st)} policies x {each} scenario(s) each = {total:.3g} "
            f"simulations; expected at most {MAX_SIMULATIONS:.0e}; lower "
            f"tune.iterations, tune.pairs or seeds"
        )


def checked_config(cfg: DictConfig) -> tuple[Settings, DictConfig]:
    """(settings, the config the tuner simulates) after every check that needs no simulation:
    the tune.* settings and the run's size, tuned keys the engine and the policy's order read,
    and the evaluation's held-out overrides; the first problem is a ConfigError naming its
    key."""
    st = settings_from_config(cfg)
    _check_estimator_inputs(cfg, st)
    _check_sizes(cfg, st)
    _check_keys_act(cfg, st.space)
    _check_score_keys_act(cfg, st)
    cfg = _prepare(cfg, st.space)
    check_evaluation(cfg, st)
    return st, cfg


def _problem(cfg: DictConfig) -> dict[str, str]:
    """{dotted key: JSON of its value} of everything that shapes the search (not the
    iteration count, evaluation or output settings): a checkpoint records it, so a resume
    under a different problem is refused with the keys that differ."""
    c = OmegaConf.to_container(cfg, resolve=False)
    c.pop("hydra", None)
    c.pop("output", None)
    for key in (
        "iterations",
        "eval",
        "export",
        "export_on_regression",
        "export_policy",
        "resume",
        "checkpoint_every",
        "batch_mode",
    ):
        c.get("tune", {}).pop(key, None)
    flat: dict[str, str] = {}

    def walk(prefix: str, node) -> None:
        if isinstance(node, dict) and node:
            for k, v in node.items():
                walk(f"{prefix}.{k}" if prefix else str(k), v)
        else:
            flat[prefix] = json.dumps(node, sort_keys=True, default=str)

    walk("", c)
    return flat


DATA_KEY = "data.traces"  # _problem's entry for the requests trained on (not a config key)


def _data_digest(evaluator) -> str:
    """A short hash of the requests every training scenario replays (arrival times, prompt and
    output lengths, priorities, prefix blocks): a trace file edited between runs, with the same
    config, is a different problem."""
    import hashlib

    digest = hashlib.sha256()
    for ev in _evaluator_list(evaluator):
        for trace in ev.scenario.traces:
            for field in ("arrival", "prompt", "output", "priority"):
                values = getattr(trace, field, None)
                if values is not None:
                    digest.update(np.ascontiguousarray(values).tobytes())
            ids = getattr(trace, "hash_ids", None)
            if ids is not None:
                digest.update(repr(ids).encode())
    return digest.hexdigest()[:16]


def _fingerprint(problem: dict[str, str]) -> str:
    """A short hash of _problem's document."""
    import hashlib

    return hashlib.sha256(json.dumps(problem, sort_keys=True).encode()).hexdigest()[:16]


def _differences(then: dict, now: dict, limit: int = 6) -> str:
    """'key: old (checkpoint) -> new (this run)' for up to `limit` keys that differ."""
    keys = sorted(k for k in set(then) | set(now) if then.get(k) != now.get(k))
    shown = [f"{k}: {then.get(k, '(absent)')} -> {now.get(k, '(absent)')}" for k in keys[:limit]]
    more = f" and {len(keys) - limit} more" if len(keys) > limit else ""
    return "; ".join(shown) + more


def _better(a: dict | None, b: dict) -> bool:
    """Is summary b better than a: feasible beats infeasible; then objective, or violation."""
    if a is None:
        return True
    fa, fb = a["violation"] <= 0, b["violation"] <= 0
    if fa != fb:
        return fb
    return b["objective"] > a["objective"] if fb else b["violation"] < a["violation"]


def _plain(values: dict) -> dict:
    """Policy values as JSON-able floats (the network's weights as a list of floats)."""
    return {
        k: (np.asarray(v, np.float64).tolist() if k == "score_net" else float(np.asarray(v)))
        for k, v in values.items()
    }


def _evaluators(cfg: DictConfig, st: Settings, order: str, plan=None, on_scored=None):
    """(the settings with the space constrained to what the scenario's vLLM accepts, the exact
    simulator scoring policy points: one workload or several, the gradient estimator the
    settings name: estimators/es.py or estimators/pathwise.py). `plan`: scenario.build's, for
    each training workload (the guard's: _guarded). `on_scored(points, columns)`, if given,
    sees every batch of points [M, d] the estimator scores with their metrics columns [M][S]
    (the tuner records them: recommend.visits)."""
    if st.workloads:  # tune over several workloads at once
        evaluator = MultiEvaluator(
            [
                Evaluator(
                    build(with_overrides(cfg, w, "tune.workloads", TRAINING_GROUPS), plan),
                    order,
                    st.batch_mode,
                )
                for w in st.workloads
            ]
        )
    else:
        evaluator = Evaluator(build(cfg, plan), order, st.batch_mode)
    engine = _first_scenario(evaluator).engine
    st = dataclasses.replace(
        st,
        space=dataclasses.replace(
            st.space,
            constraints=constraints_for(
                evaluator.base, engine.max_model_len, engine.chunked_prefill
            ),
        ),
    )
    space, objective = st.space, st.objective

    def score(points, lam):
        columns = evaluator(space.values(points))
        if on_scored is not None:
            on_scored(points, columns)
        return [objective.summarize(col, lam) for col in columns]

    if st.estimator != "pathwise":
        return st, evaluator, EvolutionStrategies(score, st.seed, st.pairs, st.sigma)
    gradient = PathwiseEstimator(
        evaluator,
        space,
        st.relax,
        st.temperature,
        objective.slo_target,
        st.slo_tau,
        objective.aggregate,
        objective.cvar_alpha,
        st.difference_step,
    )
    return st, evaluator, Pathwise(score, gradient)


def _check_estimator_inputs(cfg: DictConfig, st: Settings) -> None:
    """ConfigError naming the key where the settings ask what the estimator cannot do: the
    pathwise estimator over several workloads, or the autoscaler's numbers tuned without an
    autoscaler or by the pathwise estimator (its relaxed cost counts the capacity, not the
    replicas provisioned)."""
    if st.estimator == "pathwise" and st.workloads:
        raise ConfigError(
            "tune.workloads: the pathwise estimator tunes on one workload; "
            "use tune=es to tune over several"
        )
    tuned = [k for k in st.space.keys if k.startswith(fleet_lib.PREFIX)]
    if not tuned:
        return
    if not fleet_lib.enabled(cfg):
        raise ConfigError(
            f"tune.space.fleet: tunes {', '.join(tuned)}, but the run has no autoscaler; "
            f"expected fleet.autoscale=true"
        )
    if st.estimator == "pathwise":
        raise ConfigError(
            "tune.space.fleet: the pathwise estimator prices the fleet's capacity, not the "
            "replicas it provisioned; use tune=es to tune the autoscaler"
        )


def _evaluator_list(evaluator) -> list[Evaluator]:
    """The Evaluators of a MultiEvaluator (one per workload), or [an Evaluator]."""
    return getattr(evaluator, "evaluators", [evaluator])


def _plan_line(st: Settings, evaluator, left: int, est: estimate.Estimate) -> str:
    """The run's first line: the knobs tuned, the simulations ahead (iterations left x
    policies x scenarios) and their requests, and about how long they and the evaluation
    take here, with the memory (run/estimate.py; a resumed run counts only what is left)."""
    space, per_policy = st.space, _scenario_count(evaluator)
    tuned = space.keys + (["score_net"] if space.net_size else [])
    per_scenario = _requests_per_scenario(evaluator)
    total = left * population(st) * per_policy
    iterations = f"{left} iteration(s)" + (
        f" left of {st.iterations}" if left < st.iterations else ""
    )
    return (
        f"tuning {', '.join(tuned)}: {iterations} x {population(st)} "
        f"policies x {per_policy} scenario(s) = {total} simulations of "
        f"{per_scenario:,.0f} requests on average, then the evaluation; {est.text()}"
    )


TUNE_KEYS = ("tune.iterations", "tune.pairs", "seeds", "tune.eval.seeds")


def _iterations_left(out_dir: Path, st: Settings) -> int:
    """Iterations this call will run: tune.iterations, less those a checkpoint in out_dir
    holds when resuming (checked as _restore reads it; that it fits this run is _restore's)."""
    doc = checkpoint.read(out_dir) if st.resume else None
    done = int(doc["iteration"]) if doc is not None else 0
    return max(0, st.iterations - done)


def _batched(st: Settings) -> bool:
    """Whether the tuner simulates a population in one vmapped call (Evaluator's modes)."""
    mode = st.batch_mode
    if mode == "auto":
        mode = "loop" if jax.default_backend() == "cpu" else "vmap"
    return mode == "vmap"


def _guarded(cfg: DictConfig, st: Settings, left: int) -> tuple[guard.Tally, object]:
    """(the tuning run's resource guard, the `plan` each training workload is built with):
    each workload counts left x population simulations of its scenarios (one vmapped call
    per iteration under tune.batch_mode=vmap), refused as soon as the total passes the
    guard's limit (run/guard.py)."""
    tally = guard.Tally(
        cfg, f"the tuning run ({left} iteration(s) x {population(st)} policies)", TUNE_KEYS
    )
    batched = _batched(st)

    def plan(outline):
        if batched:
            tally.add(dataclasses.replace(outline, points=population(st)), left, True, "tune")
        else:
            tally.add(outline, left * population(st) * outline.seeds, False, "tune")

    return tally, plan


def _count_evaluation(tally: guard.Tally, st: Settings, evaluator) -> None:
    """Add the final evaluation (start and tuned on every split: training, held-out seeds and
    workloads) and the sensitivity probes (2 x knobs on the training scenarios) to `tally`,
    each simulation at the first training workload's estimate."""
    outline = _first_scenario(evaluator).outline
    assert outline is not None
    training = _scenario_count(evaluator)
    per_split = len(_first_scenario(evaluator).traces)
    splits = training + st.eval_seeds + len(st.holdout) * per_split
    probes = 2 * len(st.space.dims) * training if st.sensitivity else 0
    tally.add(outline, 2 * splits + probes, False, "tune")


def _requests_per_scenario(evaluator) -> float:
    """Mean requests in a training scenario (its trace's length)."""
    lengths = [len(t) for ev in _evaluator_list(evaluator) for t in ev.scenario.traces]
    return sum(lengths) / max(len(lengths), 1)


def _scenario_count(evaluator) -> int:
    """Scenarios each policy is simulated on: seeds x workloads."""
    return sum(len(ev.scenario.traces) for ev in _evaluator_list(evaluator))


def _population_bytes(st: Settings, evaluator) -> tuple[int, int]:
    """(host bytes, simulator-state bytes) of one iteration's population of P policies: the
    perturbations, points and policy values [P, d] and P x scenarios metrics records; under
    tune.batch_mode vmap also the state of the whole population simulated at once (the largest
    workload's: workloads run one after another), else 0 (one scenario at a time, checked by
    the driver)."""
    n = population(st)
    evaluators = _evaluator_list(evaluator)
    host = 8 * st.space.size * (st.pairs + 3 * n) + RECORD_BYTES * n * _scenario_count(evaluator)
    if evaluators[0].batch_mode != "vmap":
        return host, 0
    points = st.space.values(np.zeros((n, st.space.size)))
    state = max(
        memory.rollout_bytes(ev.scenario.workloads, ev.params(points), ev.scenario.engine)
        for ev in evaluators
    )
    return host, state


def _check_population_fits(st: Settings, evaluator) -> None:
    """ConfigError naming tune.pairs, with the estimate and the memory available, when one
    iteration's population (_population_bytes) would take more than memory.USABLE of it: on a
    CPU both parts share the host's memory; on an accelerator the state is checked against
    the device's."""
    host, state = _population_bytes(st, evaluator)
    host_free = memory.available_bytes(jax.devices("cpu")[0])
    if jax.devices()[0].platform == "cpu":
        checks = [(host + state, host_free, "memory")]
    else:
        checks = [
            (host, host_free, "host memory"),
            (state, memory.available_bytes(), "accelerator memory"),
        ]
    gib = memory.GIB
    for need, free, where in checks:
        if free is None or need <= memory.USABLE * free:
            continue
        vmapped = f", {state / gib:.3g} GiB of simulator state (tune.batch_mode=vmap)"
        raise ConfigError(
            f"tune.pairs: {st.pairs} pair(s), {population(st)} policies per iteration on "
            f"{_scenario_count(evaluator)} scenario(s), would need ~{need / gib:.3g} GiB of "
            f"{where} ({host / gib:.3g} GiB of points and metrics{vmapped if state else ''}), more "
            f"than {memory.USABLE:.0%} of the {free / gib:.3g} GiB available; lower tune.pairs"
            + (", use tune.batch_mode=loop" if state else "")
            + " or run fewer seeds"
        )


def _restore(out_dir: Path, st: Settings, state: TunerState, opt_state, log, value_keys):
    """(state, optimizer state) from the checkpoint in out_dir when resuming and one is there
    (refused when another config wrote it, or when its fields do not fit this run: theta's
    shape, the policy keys `value_keys` of its best policy), else the ones given."""
    doc = checkpoint.read(out_dir) if st.resume else None
    if doc is None:
        return state, opt_state
    then = doc.get("problem") if isinstance(doc.get("problem"), dict) else None
    now = state.problem
    if then is not None and DATA_KEY not in then:  # written before the data was recorded
        now = {k: v for k, v in now.items() if k != DATA_KEY}
    if _fingerprint(now) != doc["fingerprint"]:  # before unpacking: the arrays may not fit
        what = f" ({_differences(then, now)})" if then is not None else ""
        if then is not None and then.get(DATA_KEY, now.get(DATA_KEY)) != now.get(DATA_KEY):
            what += "; the requests it trained on differ (the trace file changed since)"
        raise CheckpointError(
            f"{out_dir / checkpoint.NAME}: written by a run with a different scenario or "
            f"tune settings{what}; resume with the same config, or use another output "
            f"directory (or tune.resume=false to start over there)"
        )
    loaded, opt_state = checkpoint.unpack(
        doc, opt_state, out_dir, {"theta": np.shape(state.theta)}, value_keys
    )
    log(f"resuming from {out_dir / checkpoint.NAME} at iteration {loaded['iteration']}")
    return TunerState.from_checkpoint(loaded), opt_state


def _history_row(
    it: int, state: TunerState, evaluator, lam: float, grad, soft: dict, summaries, center: dict
) -> dict:
    """One row of history.csv: the iteration, the center's and the best point's summaries and
    the center's policy values (a network by its weights' norm)."""
    net = center.pop("score_net", None)
    if net is not None:
        center["score_net_norm"] = float(np.linalg.norm(net))
    return {
        "iteration": it,
        "scenarios_simulated": evaluator.scenarios_simulated,
        "lambda": lam,
        "grad_norm": float(np.linalg.norm(grad)),
        **soft,
        **{f"center_{k}": v for k, v in summaries[0].items()},
        **{f"best_{k}": v for k, v in state.best.items()},
        **{f"policy.{k}": v for k, v in center.items()},
    }


@dataclasses.dataclass(frozen=True)
class _Plan:
    """What a tuning run starts from (_planned): its folder, the config as given (`composed`,
    written as config_resolved.yaml) and as simulated (`cfg`, prepared), the settings and the
    order, the iterations left after a checkpoint, the guard's tally with the whole run's
    estimate, the evaluator and the gradient estimator."""

    out_dir: Path
    composed: DictConfig
    cfg: DictConfig
    st: Settings
    order: str
    left: int
    tally: object
    evaluator: object
    estimator: object


def _planned(cfg, out_dir, on_scored=None) -> _Plan:
    """What a tuning run starts from (_Plan), checked and guarded, before any simulation. A
    ResourceLimitError as soon as the estimate passes the guard's limit (run/guard.py),
    before the other workloads are built. `on_scored`: _evaluators'."""
    if not isinstance(out_dir, (str, os.PathLike)) or not str(out_dir).strip():
        raise ConfigError(
            f"out_dir: got {out_dir!r}; expected a folder path (a str or a pathlib.Path)"
        )
    if not isinstance(cfg, DictConfig):
        if isinstance(cfg, str) or not isinstance(cfg, Sequence):
            raise ConfigError(
                f"cfg: got {cfg!r}; expected a composed config or a list of "
                f"overrides such as ['workload=poisson']"
            )
        cfg = compose(list(cfg))
    out_dir, composed = Path(out_dir), cfg
    st, cfg = checked_config(cfg)
    order = "neural" if st.policy_family == "neural" else _order(cfg)
    left = _iterations_left(out_dir, st)
    tally, plan = _guarded(cfg, st, left)  # refused while building, before any simulation
    st, evaluator, estimator = _evaluators(cfg, st, order, plan, on_scored)
    _check_population_fits(st, evaluator)
    _count_evaluation(tally, st, evaluator)
    return _Plan(out_dir, composed, cfg, st, order, left, tally, evaluator, estimator)


def estimate_tuning(
    cfg: DictConfig | Sequence[str], out_dir: Path | str = "outputs/tune"
) -> estimate.Estimate:
    """How long `tune(cfg, out_dir)` would take on this machine and how much memory it would
    hold (the iterations left after a checkpoint in out_dir, the evaluation), without
    simulating: its training scenarios are built, and a ResourceLimitError raised where tune
    would refuse the run."""
    total = _planned(cfg, out_dir).tally.total
    assert total is not None
    return total


def tune(
    cfg: DictConfig | Sequence[str],
    out_dir: Path | str = "outputs/tune",
    log: Callable[[str], None] = print,
    stop_after: int | None = None,
) -> TuneResult:
    """Tune the policy keys of `tune.space` for the configured scenario; see the module doc.

    cfg: a composed config (or Hydra overrides for api.compose). Results, checkpoints and
    exports go to out_dir; a checkpoint there is resumed from when tune.resume is true.
    stop_after: stop (as if killed) after that many iterations of this call, for tests.
    """
    start_time = time.perf_counter()
    scored: list = []  # this iteration's (points, metrics columns): recommend.visits
    plan = _planned(
        cfg, out_dir, on_scored=lambda points, columns: scored.append((points, columns))
    )
    out_dir, cfg, st, order, evaluator, estimator = (
        plan.out_dir,
        plan.cfg,
        plan.st,
        plan.order,
        plan.evaluator,
        plan.estimator,
    )
    space = st.space
    assert plan.tally.total is not None
    log(_plan_line(st, evaluator, plan.left, plan.tally.total))
    for note in export_notes(st):
        log(note)
    start_values = dict(evaluator.base)
    if space.net_size and "score_net" not in start_values:
        # the configured (linear) policy plus a network that adds nothing yet (out scale 0)
        start_values["score_net"] = neural.init_weights(
            st.net_hidden, st.net_init_seed, st.net_init_out_scale
        )
    theta = space.point(start_values)
    opt = OPTIMIZERS[st.optimizer](st.learning_rate)
    dual = optax.sgd(st.lambda_learning_rate)
    problem = dict(_problem(cfg), **{DATA_KEY: json.dumps(_data_digest(evaluator))})
    state = TunerState(0, theta, st.lambda_init, problem=problem, fingerprint=_fingerprint(problem))
    state, opt_state = _restore(out_dir, st, state, opt.init(jnp.asarray(theta)), log, start_values)
    evaluator.scenarios_simulated = state.scenarios
    # the config as given: `servetune export <out_dir>` rebuilds the run's engine from it
    write_text(ensure_dir(out_dir) / RESOLVED, OmegaConf.to_yaml(plan.composed, resolve=True))

    done_here = 0
    while state.iteration < st.iterations:
        it = state.iteration
        theta, lam = np.asarray(state.theta), float(state.lam)
        scored.clear()
        points, summaries, grad, soft = estimator(theta, lam, it)
        state.visited = recommend.keep(
            state.visited,
            [v for pts, cols in scored for v in recommend.visits(pts, cols, st.objective, it)],
        )
        updates, opt_state = opt.update(jnp.asarray(-grad), opt_state, jnp.asarray(theta))
        new_theta = np.asarray(optax.apply_updates(jnp.asarray(theta), updates))
        # dual ascent: raise lambda while the center misses the target, lower it with slack
        gap = st.objective.slo_target - summaries[0]["slo_attainment"]
        lam_step, _ = dual.update(jnp.asarray(-gap), dual.init(jnp.asarray(lam)))
        new_lam = min(max(0.0, float(lam + lam_step)), MAX_LAMBDA)  # finite in history.csv
        for k, s in enumerate(summaries):
            if _better(state.best, s):
                state.best = s
                state.best_values = _plain({**start_values, **space.values(points[k])})
        center = _plain(space.values(theta))
        row = _history_row(it, state, evaluator, lam, grad, soft, summaries, center)
        state.history.append(row)
        log(
            f"iter {it:3d}  objective {row['center_objective']:.4f}  attainment "
            f"{row['center_slo_attainment']:.4f}  lambda {lam:.2f}  "
            f"best {row['best_objective']:.4f}"
            f" (att {row['best_slo_attainment']:.4f})  scenarios {row['scenarios_simulated']}  "
            + " ".join(f"{k}={center[k]:.4g}" for k in space.keys)
        )
        state.iteration, state.theta, state.lam = it + 1, new_theta, new_lam
        state.scenarios = evaluator.scenarios_simulated
        if (it + 1) % st.checkpoint_every == 0 or it + 1 == st.iterations:
            checkpoint.save(out_dir, state.to_checkpoint(), opt_state)
        done_here += 1
        left = state.iteration < st.iterations
        if stop_after is not None and done_here >= stop_after and left:
            raise KeyboardInterrupt(f"stopped after {done_here} iterations (stop_after)")
    result = _finish(
        cfg, st, state, _plain(start_values), order, evaluator, out_dir, log, start_time
    )
    estimate.record(plan.tally.total, time.perf_counter() - start_time)
    return result


def _finish(
    cfg: DictConfig,
    st: Settings,
    state: TunerState,
    start_values: dict,
    order: str,
    evaluator,
    out_dir: Path,
    log,
    start_time: float,
) -> TuneResult:
    """After the last iteration: history.csv; the tuned point (recommend.choose_tuned: of the
    points as good as the best found on the training scenarios, the one nearest the start);
    the held-out evaluation of the start and the tuned point (evaluation.csv, with the
    verdicts; side by side per split in tune_summary.json and the export's "extra"); the
    recommendation (recommend.recommend: the tuned point where it is better beyond chance,
    else the start); convergence.png, the sensitivity views, the export of the recommended
    policy (unless it is a regressed tuned point without tune.export_on_regression) and
    tune_summary.json; each file written whole, tune_summary.json last: it marks the folder's
    files as one finished run (an earlier finish's FINAL_OUTPUTS are removed first, so a run
    stopped while writing them leaves no summary, `servetune export` refuses the folder
    instead of mixing the two, and no file of the earlier finish stays beside the new
    summary). `start_time` (time.perf_counter()) began the run: its wall time includes the
    evaluation and the export."""
    for name in FINAL_OUTPUTS:  # the summary first: the folder is unfinished from here on
        path = out_dir / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
    history = pd.DataFrame(state.history)
    write_whole(out_dir / "history.csv", lambda tmp: history.to_csv(tmp, index=False))
    choice = recommend.choose_tuned(
        state.visited,
        state.best,
        state.best_values,
        st.space,
        start_values,
        st.objective,
        st.regression_tolerance,
    )
    tuned = _plain(choice.values)
    tuned_summary = _visit_summary(choice.visit) or dict(state.best or {})
    evaluation = evaluate_policies(cfg, {"start": start_values, "tuned": tuned}, st, order)
    judged = verdicts(evaluation, st.regression_tolerance)
    mark_verdicts(evaluation, judged)
    training = {} if judged else verdicts(evaluation, st.regression_tolerance, False)
    rec = recommend.recommend(judged, training, st.export_policy, st.export_on_regression)
    write_whole(out_dir / "evaluation.csv", lambda tmp: evaluation.to_csv(tmp, index=False))
    compared = side_by_side(evaluation)  # the verdicts just written
    bounds = recommend.bound_flags(st.space, tuned, start_values)
    _plot(history, out_dir / "convergence.png", st.objective.slo_target)
    # the views always (the start-vs-tuned table first); the sensitivity where asked: 2 x
    # knobs more policies on the training scenarios, one batch
    write_views(
        out_dir,
        history,
        measure(evaluator, st.space, tuned, st.objective)
        if st.sensitivity
        else unmeasured(st.space, tuned),
        st.objective.slo_target,
        CAPTION,
        _outcome(st, start_values, tuned, choice, rec, bounds, compared),
        measured=st.sensitivity,
    )
    log(f"tuned point: {choice.why}")
    for split, verdict in {**judged, **training}.items():
        log(f"{'held-out' if split in judged else 'training'} {split}: {verdict.why}")
    for flag in bounds.values():
        log(f"bound: the tuned point's {flag}")
    if rec.regressed:
        log(
            f"regression: the tuned policy is worse than the start on held-out "
            f"{', '.join(rec.regressed)} (evaluation.csv)"
        )
    log(("recommendation: " if st.export else "recommendation (tune.export=false): ") + rec.why)
    summary = {
        "start": start_values,
        "tuned": tuned,
        "best": state.best_values,
        "best_summary": state.best,
        "tuned_summary": tuned_summary,
        "tuned_choice": choice.why,
        "exported": rec.exported,
        "recommendation": rec.why,
        "improvement": rec.improvement,
        "improved_splits": list(rec.improved),
        "tuned_at_bound": bounds,
        "order": order,
        "ranges": {k: list(v) for k, v in st.space.ranges.items()},
        "regression": bool(rec.regressed),
        "regressed_splits": list(rec.regressed),
        "regression_verdicts": {split: v.why for split, v in judged.items()},
        "evaluation": compared,
        "scenarios_simulated": int(state.scenarios),
    }
    if st.export and rec.written:
        # the convention `servetune export <this folder>` reads it back by (deploy/tuned.py)
        tuned_export.write(
            out_dir / "export",
            tuned_export.as_read(summary, out_dir / SUMMARY),
            cfg,
            _first_scenario(evaluator),
            out_dir.resolve(),
        )
        # the file's own warnings: they know the deployment (max_model_len) and the ranges
        for warning in json.loads((out_dir / "export" / "vllm_args.json").read_text())["warnings"]:
            log(f"warning (export/vllm_args.json): {warning}")
        log(
            export.config_group_hint(
                out_dir / "export" / "tuned_policy.yaml", "policy", "tuned_policy"
            )
        )
    elapsed_s = time.perf_counter() - start_time
    summary["wall_s"] = elapsed_s
    write_json(out_dir / SUMMARY, summary)  # last: the finished run's mark
    return TuneResult(
        start_values,
        state.best_values,
        state.best,
        history,
        evaluation,
        int(state.scenarios),
        elapsed_s,
        out_dir,
        bool(rec.regressed),
        tuned=tuned,
        tuned_summary=tuned_summary,
        exported=rec.exported,
        recommendation=rec.why,
        improvement=rec.improvement,
        bounds=bounds,
        ranges=dict(st.space.ranges),
    )


def _visit_summary(visit: dict | None) -> dict | None:
    """The training summary of a visit (recommend.visits), as state.best holds the best's."""
    if visit is None:
        return None
    return {k: visit[k] for k in ("objective", "violation", "slo_attainment")}


def _outcome(st: Settings, start: dict, tuned: dict, choice, rec, bounds: dict, compared):
    """The recommendation as tuning.html and history.png show it (tuning_page.Outcome), with
    the words that say why the exported point is not the path's last point."""
    visit = choice.visit
    where = f" (iteration {visit['iteration']})" if visit is not None else ""
    path = (
        "the points an iteration scores around it (the tuned point is one of them)"
        if st.estimator == "es"
        else "the points the tuner scored"
    )
    if rec.exported == "start":
        note = (
            f"Exported: the start, kept ({recommend.NO_GAIN}); the star marks the tuned "
            f"point{where}, which the held-out data could not tell apart from the start."
        )
    else:
        note = f"Exported: the tuned point{where}, the star: {choice.why}."
    return Outcome(
        exported=rec.exported,
        recommendation=rec.why,
        path_note=f"The line is the current policy, the center of {path}. {note}",
        start={k: start.get(k) for k in st.space.keys},
        tuned={k: tuned.get(k) for k in st.space.keys},
        tuned_iteration=None if visit is None else int(visit["iteration"]),
        tuned_objective=math.nan if visit is None else float(visit["objective"]),
        tuned_attainment=math.nan if visit is None else float(visit["slo_attainment"]),
        ranges=dict(st.space.ranges),
        bounds=dict(bounds),
        evaluation=compared,
        deployed=export.as_deployed(
            {k: (start if rec.exported == "start" else tuned).get(k) for k in st.space.keys}
        ),
    )


def _first_scenario(evaluator):
    """The scenario of an Evaluator, or of a MultiEvaluator's first workload (the export pins
    its engine: the workloads share engine, model and hardware)."""
    return getattr(evaluator, "scenario", None) or evaluator.evaluators[0].scenario


def _plot(history: pd.DataFrame, path: Path, target: float) -> None:
    write_convergence(history, path, target)
