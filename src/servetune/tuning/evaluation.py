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


def paired_losses(f_ref, v_ref, f_other, v_other, slo_target: float, combine=None) -> dict:
    """How much worse policy "other" did than the reference on the same scenarios, from their
    per-scenario objectives f [S] (log useful tokens per USD) and SLO shortfalls v [S]
    (Objective.violation), as means with 95% intervals over the paired differences
    (`interval`; NaN bounds where the differences give none): `objective_loss` in log useful
    tokens per USD (a relative loss: 0.01 is about 1% fewer tokens per dollar) and
    `shortfall_loss`, the growth of the shortfall below the SLO target as a fraction of the
    target. Positive is worse. `combine` (Objective.combine under tune.objective.aggregate=
    cvar) aggregates the objective instead of the mean: its loss is combine(f_ref) -
    combine(f_other), with a paired bootstrap interval (`paired_bootstrap`), so a point that
    keeps the mean and loses the tail is worse as the tuner judged it."""
    target = max(slo_target, 1e-12)
    f_ref, f_other = np.asarray(f_ref, np.float64), np.asarray(f_other, np.float64)
    out = {}
    for name, loss in (
        ("objective_loss", f_ref - f_other),
        ("shortfall_loss", (np.asarray(v_other, np.float64) - np.asarray(v_ref)) / target),
    ):
        mean, low, high, _ = interval(loss)
        if combine is not None and name == "objective_loss":
            mean = combine(f_ref) - combine(f_other)
            low, high = paired_bootstrap(f_ref, f_other, combine)
        out.update({name: mean, f"{name}_low": low, f"{name}_high": high})
    return out


BOOTSTRAP = 2000  # resamples of the scenarios for a CVaR difference's interval


def paired_bootstrap(f_ref: np.ndarray, f_other: np.ndarray, combine) -> tuple[float, float]:
    """The 95% percentile interval of combine(f_ref) - combine(f_other) over BOOTSTRAP
    resamples of the scenarios, each taking both policies' values of the same scenarios
    (seeded: the same data give the same interval); NaN where fewer than 3 scenarios or no
    spread give none."""
    n = len(f_ref)
    diff = f_ref - f_other
    if n < 3 or not np.any(np.abs(diff - diff[0]) > 0):
        return math.nan, math.nan
    rng = np.random.default_rng(n)
    idx = rng.integers(0, n, (BOOTSTRAP, n))
    draws = np.array([combine(f_ref[k]) - combine(f_other[k]) for k in idx])
    return float(np.quantile(draws, 0.025)), float(np.quantile(draws, 0.975))


def _paired_losses(start: list[dict], tuned: list[dict], objective) -> dict:
    """paired_losses of the tuned policy's metrics against the start's (one dict per scenario,
    the same scenarios in the same order)."""
    return paired_losses(
        [objective.value(m) for m in start],
        [objective.violation(m) for m in start],
        [objective.value(m) for m in tuned],
        [objective.violation(m) for m in tuned],
        objective.slo_target,
        combine=objective.combine if objective.aggregate == "cvar" else None,
    )


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
    """How the tuned policy compares with the start on one split, by the tuner's order and
    beyond chance: worse (`regression`), better (`improvement`), or neither (`tie`: the
    difference is within its interval or the tolerance, or there is none), and why, in
    words."""

    regression: bool
    why: str
    tie: bool = False
    improvement: bool = False


# what a difference of each kind is measured in, in a verdict's words
_WHAT = {"objective": "useful tokens per USD", "shortfall": "shortfall below the SLO target"}


def _direction(ref, other) -> tuple[int, str]:
    """(+1 better, -1 worse, 0 alike; the kind of difference that decides) of row `other`
    against row `ref` by the tuner's order (runner._better): meeting the SLO target beats
    missing it; where both meet it the objective decides, where both miss it the
    shortfall."""
    if bool(ref["meets_target"]) != bool(other["meets_target"]):
        return (1 if other["meets_target"] else -1), "shortfall"
    if ref["meets_target"]:
        diff, kind = float(other["objective"]) - float(ref["objective"]), "objective"
    else:
        diff, kind = float(ref["violation"]) - float(other["violation"]), "shortfall"
    return (0 if abs(diff) <= 1e-9 else 1 if diff > 0 else -1), kind


def compare(ref, other, tolerance: float) -> Verdict:
    """The verdict on row `other` against row `ref` (evaluation rows, or any mapping with
    meets_target, objective, violation, slo_target; `other` with its paired losses against
    `ref`, paired_losses): better or worse by the tuner's order (`_direction`), and beyond
    chance when the paired difference's 95% interval excludes 0, or, where the scenarios
    give no interval, when the difference exceeds `tolerance` (relative). Symmetric: a
    regression and an improvement need the same evidence; a difference within either is a
    tie, and so is no difference."""
    sign, kind = _direction(ref, other)
    if sign == 0:
        return Verdict(False, "alike by the tuner's order (no difference): a tie", tie=True)
    mean = float(other.get(f"{kind}_loss", math.nan))
    low = float(other.get(f"{kind}_loss_low", math.nan))
    high = float(other.get(f"{kind}_loss_high", math.nan))
    if math.isnan(mean):  # no paired losses: the summaries' difference
        target = max(float(ref.get("slo_target", 1.0)), 1e-12)
        mean = float(
            ref["objective"] - other["objective"]
            if kind == "objective"
            else (other["violation"] - ref["violation"]) / target
        )
    # as a difference in the direction found: a loss when worse, a gain when better
    size, lo, hi = (mean, low, high) if sign < 0 else (-mean, -high, -low)
    word, found = ("worse", "a regression") if sign < 0 else ("better", "an improvement")
    if math.isfinite(lo) and math.isfinite(hi):
        beyond = lo > 0
        why = (
            f"{_WHAT[kind]} {word} by {_pct(size)}, 95% interval of the paired "
            f"difference [{_pct(lo)}, {_pct(hi)}] "
            + (f"above 0: {found}" if beyond else "includes 0: a tie")
        )
    else:
        beyond = size > tolerance
        why = (
            f"{_WHAT[kind]} {word} by {_pct(size)}, no interval (the scenarios "
            f"give none), {'beyond' if beyond else 'within'} the tolerance "
            f"{_pct(tolerance)} (tune.eval.regression_tolerance): " + (found if beyond else "a tie")
        )
    return Verdict(beyond and sign < 0, why, tie=not beyond, improvement=beyond and sign > 0)


def _pct(x: float) -> str:
    return f"{100 * x:.3g}%"


def verdicts(
    evaluation: pd.DataFrame, tolerance: float = REGRESSION_TOLERANCE, held_out_only: bool = True
) -> dict[str, Verdict]:
    """{split: Verdict} of `evaluation` (evaluate_policies' table): the tuned policy against
    the start (`compare`) on each held-out split (every split with `held_out_only` false)
    that has both rows."""
    out = {}
    for split in dict.fromkeys(evaluation["split"]):
        rows = evaluation[evaluation["split"] == split].set_index("policy")
        if (held_out(split) or not held_out_only) and {"start", "tuned"} <= set(rows.index):
            out[split] = compare(rows.loc["start"], rows.loc["tuned"], tolerance)
    return out


def regressions(evaluation: pd.DataFrame, tolerance: float = REGRESSION_TOLERANCE) -> list[str]:
    """The held-out splits where the tuned policy regressed (`verdicts`)."""
    return [s for s, v in verdicts(evaluation, tolerance).items() if v.regression]


VERDICT_COLUMNS = (  # evaluation.csv's column, the Verdict's field, its value off held-out splits
    ("regression", "regression", False),
    ("regression_tie", "tie", False),
    ("improvement", "improvement", False),
    ("regression_verdict", "why", ""),
)


def mark_verdicts(evaluation: pd.DataFrame, judged: dict[str, Verdict]) -> None:
    """Write `judged` into the evaluation table, in place: per row its split's `regression`,
    `regression_tie` (a tie: within chance either way), `improvement` and
    `regression_verdict` (the verdict in words; empty for the splits tuning saw)."""
    for column, field, empty in VERDICT_COLUMNS:
        values = {split: getattr(v, field) for split, v in judged.items()}
        evaluation[column] = [values.get(split, empty) for split in evaluation["split"]]


def _written_verdicts(evaluation: pd.DataFrame) -> dict[str, Verdict]:
    """The verdicts mark_verdicts wrote into an evaluation table (one without an
    `improvement` column, written before it existed, as no improvement)."""
    first = lambda rows, column: rows[column].iloc[0] if column in rows else False
    return {
        split: Verdict(
            bool(rows["regression"].iloc[0]),
            str(rows["regression_verdict"].iloc[0]),
            bool(rows["regression_tie"].iloc[0]),
            bool(first(rows, "improvement")),
        )
        for split, rows in evaluation.groupby("split", sort=False)
        if held_out(split) and rows["regression_verdict"].iloc[0]
    }


def _gain(start, tuned) -> dict:
    """The tuned policy's objective against the start's: both values, the paired gain in log
    useful tokens per USD (about the relative gain: 0.01 is 1% more tokens per dollar) and its
    95% interval over the scenarios (None where they give none)."""
    loss = float(tuned.get("objective_loss", math.nan))
    low = float(tuned.get("objective_loss_low", math.nan))
    high = float(tuned.get("objective_loss_high", math.nan))
    gain = float(tuned["objective"] - start["objective"]) if math.isnan(loss) else -loss
    return {
        "start": float(start["objective"]),
        "tuned": float(tuned["objective"]),
        "gain": gain,
        "gain_interval": [-high, -low] if math.isfinite(low) and math.isfinite(high) else None,
    }


def side_by_side(evaluation: pd.DataFrame) -> list[dict]:
    """One record per split: its scenarios, whether tuning saw it, the start's and the tuned
    policy's objective (log useful tokens per USD, with the paired gain and its 95% interval:
    `_gain`), SLO attainment, useful tokens per USD and goodput (req/s) with the tuned one's
    95% interval ([low, high], None where the scenarios give none), `regression`, `tie`,
    `improvement` and, on held-out splits, `verdict` (why: the table's regression_verdict
    column where the tuner wrote one, under its tune.eval.regression_tolerance, else
    `verdicts` at the default tolerance)."""
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
            "objective": _gain(start, tuned),
        }
        for key in INTERVAL_METRICS:
            low, high = float(tuned[f"{key}_low"]), float(tuned[f"{key}_high"])
            record[key] = {
                "start": float(start[key]),
                "tuned": float(tuned[key]),
                "tuned_interval": None if math.isnan(low) else [low, high],
            }
        verdict = judged.get(split)
        record["regression"] = verdict is not None and verdict.regression
        record["tie"] = verdict is not None and verdict.tie
        record["improvement"] = verdict is not None and verdict.improvement
        if verdict is not None:
            record["verdict"] = verdict.why
        out.append(record)
    return out
