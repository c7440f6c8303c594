"""The tuner's final evaluation: the start and the tuned policy re-simulated on the training
workload(s), on held-out seeds (held-out replicas when `workload.replicas.*` is on) and on
held-out workloads (`tune.eval.holdout`: other windows, rates or traces), each metric with a 95%
confidence interval over the split's scenarios, and the held-out splits where the tuned policy
regressed."""

from __future__ import annotations

import copy
import dataclasses
import math

import numpy as np
import pandas as pd
from omegaconf import DictConfig
from scipy import stats

from servetune.config.scenario import build
from servetune.core.errors import ConfigError, ServetuneError
from servetune.tuning.evaluator import Evaluator
from servetune.tuning.split_overrides import TRAINING_GROUPS, with_overrides

HELD_OUT = ("heldout_seeds", "holdout_workload")  # the splits tuning never saw (name prefixes)
# per-scenario metrics given with an interval: (column, metrics key)
INTERVAL_METRICS = {
    "slo_attainment": (0.0, 1.0),
    "useful_tokens_per_dollar": (0.0, math.inf),
    "goodput_rps": (0.0, math.inf),
}  # metric: the range its values can take
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
        splits = {
            f"train[{i}]": with_overrides(cfg, w, "tune.workloads", TRAINING_GROUPS)
            for i, w in enumerate(st.workloads)
        }
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
    row = {
        "policy": name,
        "split": split,
        "scenarios": len(column),
        "objective": s["objective"],
        "violation": s["violation"],
        "meets_target": s["violation"] <= 0,
        "slo_target": objective.slo_target,
    }
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


def _paired_losses(start: list[dict], tuned: list[dict], objective) -> dict:
    """How much worse the tuned policy did than the start on the same scenarios, as means
    with 95% intervals over the paired per-scenario differences (`interval`; NaN bounds where
    the differences give none): `objective_loss` in log useful tokens per USD (a relative
    loss: 0.01 is about 1% fewer tokens per dollar) and `shortfall_loss`, the growth of the
    shortfall below the SLO target as a fraction of the target. Positive is worse."""
    f_start = np.array([objective.value(m) for m in start])
    f_tuned = np.array([objective.value(m) for m in tuned])
    v_start = np.array([objective.violation(m) for m in start])
    v_tuned = np.array([objective.violation(m) for m in tuned])
    target = max(objective.slo_target, 1e-12)
    out = {}
    for name, loss in (
        ("objective_loss", f_start - f_tuned),
        ("shortfall_loss", (v_tuned - v_start) / target),
    ):
        mean, low, high, _ = interval(loss)
        out.update({name: mean, f"{name}_low": low, f"{name}_high": high})
    return out


def evaluate_policies(cfg: DictConfig, policies: dict[str, dict], st, order: str) -> pd.DataFrame:
    """Each named policy (values dict) on each split of evaluation_splits: one row per
    (policy, split), with the split's scenario count and 95% intervals (`interval`); the
    "tuned" row also holds its paired losses against "start" (`_paired_losses`)."""
    splits = evaluation_splits(cfg, st)
    names = list(policies)
    values = {
        k: np.stack([np.asarray(policies[n][k], np.float64) for n in names])
        for k in policies[names[0]]
    }
    rows = []
    for split, split_cfg in splits.items():
        ev = Evaluator(build(split_cfg), order, st.batch_mode)
        columns = dict(zip(names, ev(values), strict=True))
        for name, column in columns.items():
            rows.append(_row(name, split, column, st.objective))
            if name == "tuned" and "start" in columns:
                rows[-1].update(_paired_losses(columns["start"], column, st.objective))
    return pd.DataFrame(rows)


REGRESSION_TOLERANCE = 1e-3  # tune.eval.regression_tolerance's default: 0.1%


@dataclasses.dataclass(frozen=True)
class Verdict:
    """Whether the tuned policy regressed on one held-out split, whether it was worse only
    within chance (a tie), and why, in words."""

    regression: bool
    why: str
    tie: bool = False


def _judge(start, tuned, tolerance: float) -> Verdict:
    """The verdict on one split's start and tuned rows: worse by the tuner's order (runner.
    _better: meeting the SLO target beats missing it; where both meet it the objective
    decides, where both miss it the shortfall), and by more than chance: the paired loss's
    95% interval lies above 0, or, where the scenarios give no interval, the loss exceeds
    `tolerance` (relative). A difference within either is a tie."""
    if bool(start["meets_target"]) != bool(tuned["meets_target"]):
        worse, kind = bool(start["meets_target"]), "shortfall"
    elif start["meets_target"]:
        worse, kind = tuned["objective"] < start["objective"] - 1e-9, "objective"
    else:
        worse, kind = tuned["violation"] > start["violation"] + 1e-9, "shortfall"
    if not worse:
        return Verdict(False, "not worse by the tuner's order")
    what = "useful tokens per USD" if kind == "objective" else "shortfall below the SLO target"
    mean = float(tuned.get(f"{kind}_loss", math.nan))
    low = float(tuned.get(f"{kind}_loss_low", math.nan))
    high = float(tuned.get(f"{kind}_loss_high", math.nan))
    if math.isnan(mean):  # no paired losses: the summaries' difference
        target = max(float(start.get("slo_target", 1.0)), 1e-12)
        mean = float(
            start["objective"] - tuned["objective"]
            if kind == "objective"
            else (tuned["violation"] - start["violation"]) / target
        )
    if math.isfinite(low) and math.isfinite(high):
        regression = low > 0
        return Verdict(
            regression,
            f"{what} worse by {_pct(mean)}, 95% interval of the paired "
            f"difference [{_pct(low)}, {_pct(high)}] "
            + ("above 0: a regression" if regression else "includes 0: a tie"),
            tie=not regression,
        )
    regression = mean > tolerance
    return Verdict(
        regression,
        f"{what} worse by {_pct(mean)}, no interval (the scenarios "
        f"give none), {'beyond' if regression else 'within'} the tolerance "
        f"{_pct(tolerance)} (tune.eval.regression_tolerance)"
        + (": a regression" if regression else ": a tie"),
        tie=not regression,
    )


def _pct(x: float) -> str:
    return f"{100 * x:.3g}%"


def verdicts(
    evaluation: pd.DataFrame, tolerance: float = REGRESSION_TOLERANCE
) -> dict[str, Verdict]:
    """{held-out split: Verdict} of `evaluation` (evaluate_policies' table), for the splits
    that have both a start and a tuned row (`_judge`)."""
    out = {}
    for split in dict.fromkeys(evaluation["split"]):
        rows = evaluation[evaluation["split"] == split].set_index("policy")
        if held_out(split) and {"start", "tuned"} <= set(rows.index):
            out[split] = _judge(rows.loc["start"], rows.loc["tuned"], tolerance)
    return out


def regressions(evaluation: pd.DataFrame, tolerance: float = REGRESSION_TOLERANCE) -> list[str]:
    """The held-out splits where the tuned policy regressed (`verdicts`)."""
    return [s for s, v in verdicts(evaluation, tolerance).items() if v.regression]


def mark_verdicts(evaluation: pd.DataFrame, judged: dict[str, Verdict]) -> None:
    """Write `judged` into the evaluation table, in place: per row its split's `regression`,
    `regression_tie` and `regression_verdict` (empty for the splits tuning saw)."""
    for column, field, empty in (
        ("regression", "regression", False),
        ("regression_tie", "tie", False),
        ("regression_verdict", "why", ""),
    ):
        values = {split: getattr(v, field) for split, v in judged.items()}
        evaluation[column] = [values.get(split, empty) for split in evaluation["split"]]


def _written_verdicts(evaluation: pd.DataFrame) -> dict[str, Verdict]:
    """The verdicts mark_verdicts wrote into an evaluation table."""
    return {
        split: Verdict(
            bool(rows["regression"].iloc[0]),
            str(rows["regression_verdict"].iloc[0]),
            bool(rows["regression_tie"].iloc[0]),
        )
        for split, rows in evaluation.groupby("split", sort=False)
        if held_out(split) and rows["regression_verdict"].iloc[0]
    }


def side_by_side(evaluation: pd.DataFrame) -> list[dict]:
    """One record per split: its scenarios, whether tuning saw it, the start's and the tuned
    policy's SLO attainment, useful tokens per USD and goodput (req/s) with the tuned one's 95%
    interval ([low, high], None where the scenarios give none), `regression` and, on held-out
    splits, `verdict` (why: the table's regression_verdict column where the tuner wrote one,
    under its tune.eval.regression_tolerance, else `verdicts` at the default tolerance)."""
    judged = (
        _written_verdicts(evaluation)
        if "regression_verdict" in evaluation.columns
        else verdicts(evaluation)
    )
    out = []
    for split in dict.fromkeys(evaluation["split"]):
        rows = evaluation[evaluation["split"] == split].set_index("policy")
        if not {"start", "tuned"} <= set(rows.index):
            continue
        start, tuned = rows.loc["start"], rows.loc["tuned"]
        record = {
            "split": split,
            "held_out": held_out(split),
            "scenarios": int(tuned["scenarios"]),
            "distinct_scenarios": int(tuned["distinct_scenarios"]),
        }
        for key in INTERVAL_METRICS:
            low, high = float(tuned[f"{key}_low"]), float(tuned[f"{key}_high"])
            record[key] = {
                "start": float(start[key]),
                "tuned": float(tuned[key]),
                "tuned_interval": None if math.isnan(low) else [low, high],
            }
        record["regression"] = split in judged and judged[split].regression
        record["tie"] = split in judged and judged[split].tie
        if split in judged:
            record["verdict"] = judged[split].why
        out.append(record)
    return out
