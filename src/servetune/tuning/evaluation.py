"""The tuner's final evaluation: the start and the tuned policy re-simulated on the training
workload(s), on held-out seeds (held-out replicas when `workload.replicas.*` is on) and on
held-out workloads (`tune.eval.holdout`: other windows, rates or traces), each metric with a 95%
confidence interval over the split's scenarios, and the held-out splits where the tuned policy
regressed."""

from __future__ import annotations

import copy
import math

import numpy as np
import pandas as pd
from omegaconf import DictConfig
from scipy import stats

from servetune.errors import ConfigError, ServetuneError
from servetune.scenario import build
from servetune.tuning.evaluator import Evaluator
from servetune.tuning.split_overrides import TRAINING_GROUPS, with_overrides

HELD_OUT = ("heldout_seeds", "holdout_workload")  # the splits tuning never saw (name prefixes)
# per-scenario metrics given with an interval: (column, metrics key)
INTERVAL_METRICS = {"slo_attainment": (0.0, 1.0), "useful_tokens_per_dollar": (0.0, math.inf),
                    "goodput_rps": (0.0, math.inf)}  # metric: the range its values can take
LEVEL = 0.95


def held_out(split: str) -> bool:
    """Is `split` (an evaluation split name) one the tuner never trained on."""
    return split.partition("[")[0] in HELD_OUT


def evaluation_splits(cfg: DictConfig, st) -> dict[str, DictConfig]:
    """{split name: config} of the final evaluation: the training workload(s) ("train", or
    "train[i]" per tune.workloads entry), held-out seeds ("heldout_seeds": tune.eval.seeds
    from seed + tune.eval.seed_offset) and the held-out workloads ("holdout_workload", or
    "holdout_workload[i]" when tune.eval.holdout lists several). `st`: runner.Settings."""
    splits = {"train": cfg}
    if st.workloads:
        splits = {f"train[{i}]": with_overrides(cfg, w, "tune.workloads", TRAINING_GROUPS)
                  for i, w in enumerate(st.workloads)}
    if st.eval_seeds > 0:
        held = copy.deepcopy(cfg)
        held.seed = int(cfg.seed) + st.eval_seed_offset
        held.seeds = st.eval_seeds
        splits["heldout_seeds"] = held
    for i, overrides in enumerate(st.holdout):
        name = "holdout_workload" if len(st.holdout) == 1 else f"holdout_workload[{i}]"
        splits[name] = with_overrides(cfg, overrides, "tune.eval.holdout")
    return splits


def check_evaluation(cfg: DictConfig, st) -> None:
    """The training workloads' overrides, and the held-out workloads built, before any
    simulation: a bad override (an unknown key or group, a value out of range, a missing
    trace) is a ConfigError naming tune.workloads or tune.eval.holdout now, not after the
    tuning loop. (The evaluators build the training splits; held-out seeds change only seed
    counts, validated with the settings.)"""
    for overrides in st.workloads:
        with_overrides(cfg, overrides, "tune.workloads", TRAINING_GROUPS)
    for overrides in st.holdout:
        split = with_overrides(cfg, overrides, "tune.eval.holdout")
        try:
            build(split)
        except ServetuneError as err:
            raise ConfigError(f"tune.eval.holdout {list(overrides)}: {err}") from None


def half_width(values) -> float:
    """Half-width of the 95% Student-t interval of the mean of `values` [S] (same units; NaN
    for fewer than two values)."""
    x = np.asarray(values, np.float64)
    if x.size < 2:
        return math.nan
    return float(stats.t.ppf(0.5 + LEVEL / 2, x.size - 1) * x.std(ddof=1) / math.sqrt(x.size))


def interval(values, bounds=(-math.inf, math.inf)) -> tuple[float, float, float, int]:
    """(mean, low, high, distinct) of per-scenario values [S]: the mean and its 95% Student-t
    interval over the scenarios, clipped to the values' range `bounds`; low and high are NaN
    when the scenarios cannot give one (a single scenario, or scenarios that all came out the
    same: no information on the spread). `distinct`: how many different values there were."""
    x = np.asarray(values, np.float64)
    x = x[np.isfinite(x)]
    if not x.size:
        return math.nan, math.nan, math.nan, 0
    distinct = len(np.unique(x))
    mean = float(x.mean())
    if distinct < 2:
        return mean, math.nan, math.nan, distinct
    half = half_width(x)
    return mean, max(mean - half, bounds[0]), min(mean + half, bounds[1]), distinct


def _row(name: str, split: str, column: list[dict], objective) -> dict:
    """One evaluation row: a policy's metrics over a split's scenarios (`column`)."""
    s = objective.summarize(column, 0.0)
    row = {"policy": name, "split": split, "scenarios": len(column),
           "objective": s["objective"], "violation": s["violation"],
           "meets_target": s["violation"] <= 0}
    for key, bounds in INTERVAL_METRICS.items():
        mean, low, high, distinct = interval([m[key] for m in column], bounds)
        row.update({key: mean, f"{key}_low": low, f"{key}_high": high})
        if key == "slo_attainment":
            row["distinct_scenarios"] = distinct
    # the headline values are the tuner's own summary (interval() leaves out non-finite
    # values, such as infinite tokens per dollar on a free GPU; the summary keeps them)
    row["slo_attainment"] = s["slo_attainment"]
    row["useful_tokens_per_dollar"] = s["useful_tokens_per_dollar"]
    row["ttft_p99_s"] = float(np.mean([m["ttft_p99_s"] for m in column]))
    row["tpot_p99_s"] = float(np.mean([m["tpot_p99_s"] for m in column]))
    return row


def evaluate_policies(cfg: DictConfig, policies: dict[str, dict], st, order: str
                      ) -> pd.DataFrame:
    """Each named policy (values dict) on each split of evaluation_splits: one row per
    (policy, split), with the split's scenario count and 95% intervals (`interval`)."""
    splits = evaluation_splits(cfg, st)
    names = list(policies)
    values = {k: np.stack([np.asarray(policies[n][k], np.float64) for n in names])
              for k in policies[names[0]]}
    rows = []
    for split, split_cfg in splits.items():
        ev = Evaluator(build(split_cfg), order, st.batch_mode)
        for name, column in zip(names, ev(values)):
            rows.append(_row(name, split, column, st.objective))
    return pd.DataFrame(rows)


def regressions(evaluation: pd.DataFrame) -> list[str]:
    """The held-out splits of `evaluation` (evaluate_policies' table) where the tuned policy is
    worse than the start by the tuner's own order (runner._better): meeting the SLO target
    beats missing it; then, where both meet it, the objective (log useful tokens per USD)
    decides, and where both miss it, the mean shortfall below the target per scenario (to
    1e-9)."""
    out = []
    for split in dict.fromkeys(evaluation["split"]):
        rows = evaluation[evaluation["split"] == split].set_index("policy")
        if not held_out(split) or not {"start", "tuned"} <= set(rows.index):
            continue
        start, tuned = rows.loc["start"], rows.loc["tuned"]
        if bool(start["meets_target"]) != bool(tuned["meets_target"]):
            worse = bool(start["meets_target"])
        else:
            worse = (tuned["objective"] < start["objective"] - 1e-9 if start["meets_target"]
                     else tuned["violation"] > start["violation"] + 1e-9)
        if worse:
            out.append(split)
    return out


def side_by_side(evaluation: pd.DataFrame) -> list[dict]:
    """One record per split: its scenarios, whether tuning saw it, the start's and the tuned
    policy's SLO attainment, useful tokens per USD and goodput (req/s) with the tuned one's 95%
    interval ([low, high], None where the scenarios give none), and `regression` (held-out
    splits where the tuned policy is worse by the tuner's order)."""
    regressed = set(regressions(evaluation))
    out = []
    for split in dict.fromkeys(evaluation["split"]):
        rows = evaluation[evaluation["split"] == split].set_index("policy")
        if not {"start", "tuned"} <= set(rows.index):
            continue
        start, tuned = rows.loc["start"], rows.loc["tuned"]
        record = {"split": split, "held_out": held_out(split),
                  "scenarios": int(tuned["scenarios"]),
                  "distinct_scenarios": int(tuned["distinct_scenarios"])}
        for key in INTERVAL_METRICS:
            low, high = float(tuned[f"{key}_low"]), float(tuned[f"{key}_high"])
            record[key] = {"start": float(start[key]), "tuned": float(tuned[key]),
                           "tuned_interval": None if math.isnan(low) else [low, high]}
        record["regression"] = split in regressed
        out.append(record)
    return out
