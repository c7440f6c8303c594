"""Which setting to choose, and why: the swept keys split into conditions and settings, the
best setting within each condition by the tuner's order, and the Pareto front of value
(useful tokens per dollar, goodput) against tail latency.

The rule: a *setting* is a knob the operator chooses, a policy knob: the `policy` config group
and any `policy.*` or `grid.*` key (`--setting KEY` adds others, e.g. engine.kv_pressure).
Every other swept key is a *condition*, what the deployment faces or is given: the workload
(`workload`, `workload.*`), hardware, model, engine (`engine.n_instances`), SLO and window
keys. Points are only compared within a condition: across conditions a higher load would win
on goodput and a cheaper GPU on tokens per dollar, which is no answer to "which setting".

The tuner's order (tuning/objective.py, the Optuna sweep's penalized objective): a setting
that meets the SLO target (mean SLO attainment over seeds >= tune.objective.slo_target, 0.99
unless the runs say otherwise) beats one that does not; among those that meet it, the most
useful tokens per dollar wins (or the metric `sweep.objective` names, when it names one);
when none meets it, the highest attainment wins (useful tokens per dollar breaking ties).

Ties are ties: points whose runs had the same request outcomes (stats.identical_groups) are
one result, named together ("max_num_seqs=16, 64, 256"), and a best setting whose interval
on the metric that ranks it against its runner-up (the objective where both meet the
target, else the attainment) overlaps the runner-up's is not told apart from it (nor from
the next ones, while theirs overlap too). The best is then "tied: ..." naming every setting
tied with it; the point drawn and exported for it is the first of them by the tuner's order
(then by sweep order), so a report and `servetune export` pick the same.
"""

from __future__ import annotations

import json
import math
from typing import NamedTuple

import numpy as np
import pandas as pd

from servetune.reporting.collect import condition_label, point_label
from servetune.reporting.labels import tied_label
from servetune.reporting.numbers import fmt
from servetune.reporting.stats import IDENTICAL, identical_groups, intervals

SETTING_GROUPS = ("policy", "grid")  # config groups / key prefixes whose keys are settings
DEFAULT_SLO_TARGET = 0.99
OBJECTIVE = "useful_tokens_per_dollar"


def is_setting(key: str, extra: tuple | list = ()) -> bool:
    """Whether swept `key` is a setting (a policy knob: the policy group, policy.*, grid.*, or
    one of `extra`) rather than a condition."""
    bare = key.lstrip("+~")
    return bare in extra or bare.split(".")[0].split("/")[0] in SETTING_GROUPS


def split_keys(keys: list, extra: tuple | list = ()) -> tuple[list, list]:
    """(conditions, settings): the point keys split by `is_setting`, each in key order."""
    settings = [k for k in keys if is_setting(k, extra)]
    return [k for k in keys if k not in settings], settings


def condition_groups(points: pd.DataFrame, conditions: list) -> list[tuple[str, pd.DataFrame]]:
    """[(condition label, its points)] in order of first appearance; one group labelled
    "all points" when there are no condition keys."""
    if not conditions:
        return [("all points", points)]
    groups = points.groupby([points[k].astype(str) for k in conditions], sort=False, dropna=False)
    return [(condition_label(g.iloc[0], conditions), g) for _, g in groups]


def setting_label(row: pd.Series, settings: list, keys: list) -> str:
    """What distinguishes a point within its condition ("max_num_seqs=32"); the whole point
    label when nothing is a setting."""
    return point_label(row, settings) if settings else point_label(row, keys)


def settings_label(rows: pd.DataFrame, settings: list, keys: list) -> str:
    """One label naming the settings of every point of `rows` (labels.tied_label: "max_num_seqs=
    16, 64, 256"); setting_label's for one row."""
    return tied_label(rows, list(settings) or list(keys))


def _number(value, default: float) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return default
    return v if math.isfinite(v) else default


def slo_target(points: pd.DataFrame) -> float:
    """The SLO attainment the tuner requires of these points (tune.objective.slo_target of
    their first run; DEFAULT_SLO_TARGET where the runs do not say)."""
    col = points.get("tune.objective.slo_target")
    return _number(col.iloc[0], DEFAULT_SLO_TARGET) if col is not None else DEFAULT_SLO_TARGET


def objective_metric(points: pd.DataFrame) -> str:
    """The metric ranked among the settings that meet the SLO target: useful tokens per dollar
    (sweep.objective=penalized, the default), or the numeric metric sweep.objective names."""
    col = points.get("sweep.objective")
    name = col.iloc[0] if col is not None and len(col) else None
    if isinstance(name, str) and name != "penalized" and f"{name}_mean" in points:
        return name
    return OBJECTIVE


def _col(points: pd.DataFrame, name: str) -> np.ndarray:
    """Column `name` as floats; NaN where the runs lack it (a metrics.csv of other metrics)."""
    if name not in points:
        return np.full(len(points), np.nan)
    return pd.to_numeric(points[name], errors="coerce").to_numpy(np.float64)


def rank(points: pd.DataFrame) -> list[int]:
    """Positions of `points` (one condition) in the tuner's order, best first (see the module
    docstring); points without an attainment or objective value come last."""
    target = slo_target(points)
    att = _col(points, "slo_attainment_mean")
    obj = _col(points, f"{objective_metric(points)}_mean")
    tie = _col(points, f"{OBJECTIVE}_mean")

    def big(v: float) -> float:
        return v if math.isfinite(v) else -math.inf

    def key(i: int):
        meets = math.isfinite(att[i]) and att[i] >= target
        return (0, -big(obj[i]), 0.0) if meets else (1, -big(att[i]), -big(tie[i]))

    return sorted(range(len(points)), key=key)


def _pct(v: float) -> str:
    return f"{100 * v:.3g}%" if math.isfinite(v) else "-"


def _versus(g: pd.DataFrame, a: int, b: int, metric: str) -> str:
    """Whether points a and b of `g` are told apart on `metric`, in words."""
    if f"{metric}_mean" not in g:
        return "not measured"
    lo, hi, notes = intervals(g, metric)
    if not np.isfinite([lo[a], hi[a], lo[b], hi[b]]).all():
        return notes[a] or notes[b]
    if hi[b] < lo[a] or hi[a] < lo[b]:
        return "distinguishable"
    return "not distinguishable (intervals overlap)"


def _judged(meets: np.ndarray, a: int, b: int, metric: str) -> str:
    """The metric that orders points a and b: the objective where both meet the SLO target,
    else the attainment (the tuner's order)."""
    return metric if meets[a] and meets[b] else "slo_attainment"


class Tie(NamedTuple):
    """The settings tied with the best point of one condition: members (positions in the
    points, the best first, then by the tuner's order), label (naming every member, as
    settings_label), reason (why they are tied, in words; "" for one member)."""

    members: list
    label: str
    reason: str


def tie(g: pd.DataFrame, settings: list, keys: list, order: list | None = None) -> Tie:
    """The Tie of the best of `g` (one condition's points, reset index; `order` as rank
    gives it): the points with its request outcomes (stats.identical_groups), then, in the
    tuner's order, each next setting (with its identical twins) while its interval
    (stats.intervals) on the metric that orders it against the best (_judged) overlaps the
    best's: the best is told apart from the first one whose interval does not, or that has
    no interval to judge by, and named alone where that is its runner-up."""
    order = rank(g) if order is None else order
    b = order[0]
    target, metric = slo_target(g), objective_metric(g)
    att = _col(g, "slo_attainment_mean")
    meets = np.isfinite(att) & (att >= target)
    groups = identical_groups(g)
    of = {i: k for k, members in enumerate(groups) for i in members}
    members, reasons, seen = list(groups[of[b]]), [], {of[b]}
    if len(members) > 1:
        reasons.append(IDENTICAL)
    for j in order:
        if of[j] in seen:
            continue
        judged = _judged(meets, b, j, metric)
        if f"{judged}_mean" not in g:
            break
        lo, hi, _ = intervals(g, judged)
        if not np.isfinite([lo[b], hi[b], lo[j], hi[j]]).all() or hi[j] < lo[b] or hi[b] < lo[j]:
            break  # told apart (or not to be judged): the rest rank after it
        seen.add(of[j])
        members += groups[of[j]]
        why = f"intervals overlap on {judged.replace('_', ' ')}"
        if why not in reasons:
            reasons.append(why)
    return Tie(members, settings_label(g.iloc[members], settings, keys), "; ".join(reasons))


def best_points(best: pd.DataFrame) -> set:
    """The point labels of the best settings of `best` (best_settings), those tied with a
    best included (its `tied_points`)."""
    out = set(best["point"]) if "point" in best else set()
    for text in best.get("tied_points", pd.Series(dtype=object)):
        if isinstance(text, str) and text:
            out.update(json.loads(text))
    return out


def _best_row(condition: str, g: pd.DataFrame, settings: list, keys: list) -> dict:
    """The best setting of one condition's points `g` (reset index), with why; "tied: ..."
    where others are tied with it (tie)."""
    order = rank(g)
    target, metric = slo_target(g), objective_metric(g)
    att = _col(g, "slo_attainment_mean")
    meets = np.isfinite(att) & (att >= target)
    b = order[0]
    best = g.iloc[b]
    value = _col(g, f"{metric}_mean")[b]
    name = metric.replace("_", " ")
    tied = tie(g, settings, keys, order)
    groups = identical_groups(g)
    of = {i: members for members in groups for i in members}
    n_meeting, n_settings = int(meets.sum()), len(g)
    if meets[b]:
        why = f"meets the SLO target ({_pct(att[b])} attainment >= {_pct(target)})"
        if n_meeting > 1:
            why += (
                f" with the most {name} ({fmt(value)}) of the {n_meeting} of "
                f"{n_settings} settings that do"
            )
        elif n_settings > 1:
            why += f", the only one of the {n_settings} settings that does ({name} {fmt(value)})"
        else:
            why += f" ({name} {fmt(value)}; the only setting)"
    else:
        why = (
            f"no setting meets the SLO target ({_pct(target)}); this one comes closest "
            f"({_pct(att[b])} attainment, {name} {fmt(value)})"
        )
    # the runner-up: the best point whose outcomes are not the best's, named with its twins
    runner = next((i for i in order if i not in of[b]), None)
    runner_label = None
    if runner is not None:
        what = _judged(meets, b, runner, metric)
        if what == "slo_attainment":
            shown = f"{_pct(att[runner])} attainment"
        else:
            shown = fmt(_col(g, f"{what}_mean")[runner])
        runner_label = settings_label(g.iloc[of[runner]], settings, keys)
        why += f"; runner-up {runner_label} ({shown}): {_versus(g, b, runner, what)}"
    label = setting_label(best, settings, keys)
    if len(tied.members) > 1:
        why = f"tied: {tied.label} ({tied.reason}): {why}; drawn and exported: {label}, the first"
        label = f"tied: {tied.label}"
    return {
        "condition": condition,
        "setting": label,
        "point": best["point"],
        "run": best.get("run"),
        "meets_target": bool(meets[b]),
        "slo_target": target,
        "slo_attainment": att[b],
        "objective": metric,
        "objective_value": float(value),
        "n_settings": n_settings,
        "n_meeting": n_meeting,
        "runner_up": runner_label,
        "why": why,
        "tied": tied.label if len(tied.members) > 1 else "",
        "chosen": setting_label(best, settings, keys),
        "tied_points": (
            json.dumps([str(g["point"].iloc[i]) for i in tied.members])
            if len(tied.members) > 1
            else ""
        ),
    }


BEST_COLUMNS = [
    "condition",
    "setting",
    "point",
    "run",
    "meets_target",
    "slo_target",
    "slo_attainment",
    "objective",
    "objective_value",
    "n_settings",
    "n_meeting",
    "runner_up",
    "why",
    "tied",
    "chosen",
    "tied_points",
]


def best_settings(points: pd.DataFrame, conditions: list, settings: list) -> pd.DataFrame:
    """One row per condition: its best setting by the tuner's order (module docstring) and why.

    Columns: condition (label), setting (label of the best point's settings), point, run (its
    first seed's run folder), meets_target, slo_target, slo_attainment (mean over seeds),
    objective (the metric ranked), objective_value, n_settings, n_meeting (settings meeting
    the target), runner_up (the best setting whose request outcomes differ from the best's),
    why (a sentence: the target, the value, the runner-up and whether the two can be told
    apart on the ranked metric), tied (the label naming the settings tied with the best, see
    `tie`; "" when none is), chosen (the setting of `point`, the one drawn and exported: the
    best's, the first of a tie) and tied_points (the tie's point labels as a JSON list; "").
    A tied best's setting reads "tied: <tied>"."""
    keys = list(conditions) + list(settings)
    rows = [
        _best_row(label, g.reset_index(drop=True), settings, keys)
        for label, g in condition_groups(points, conditions)
    ]
    return pd.DataFrame(rows, columns=BEST_COLUMNS)


def pareto(x, y) -> np.ndarray:
    """Mask of the points on the Pareto front of minimizing x and maximizing y: no other point
    has x <= and y >= with one of them strict. Points with a non-finite x or y are off the
    front; exact duplicates of a front point are on it. O(n log n)."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    front = np.zeros(len(x), bool)
    ok = np.flatnonzero(np.isfinite(x) & np.isfinite(y))
    order = ok[np.lexsort((-y[ok], x[ok]))]  # x ascending, then y descending
    top, last = -math.inf, None
    for i in order:
        if y[i] > top:
            front[i], top, last = True, y[i], (x[i], y[i])
        elif last is not None and (x[i], y[i]) == last:
            front[i] = True
    return front


FRONT_PANELS = (
    ("ttft_p99_s", "useful_tokens_per_dollar"),
    ("tpot_p99_s", "useful_tokens_per_dollar"),
    ("ttft_p99_s", "goodput_rps"),
    ("tpot_p99_s", "goodput_rps"),
)


def fronts(points: pd.DataFrame, conditions: list) -> dict:
    """{(latency, value): mask over `points`}: the Pareto front of each FRONT_PANELS pair
    (lower P99 latency, higher value), computed within each condition."""
    out = {}
    for lat, val in FRONT_PANELS:
        mask = np.zeros(len(points), bool)
        if f"{lat}_mean" in points and f"{val}_mean" in points:
            for _, g in condition_groups(points.reset_index(drop=True), conditions):
                idx = g.index.to_numpy()
                mask[idx] = pareto(g[f"{lat}_mean"], g[f"{val}_mean"])
        out[(lat, val)] = mask
    return out


def targets_s(points: pd.DataFrame, key: str) -> list[float]:
    """The distinct SLO targets `key` (slo.ttft_s, slo.tpot_s) of the points, in seconds, in
    order of first appearance; [] where the runs set none."""
    if key not in points:
        return []
    vals = [_number(v, math.nan) for v in points[key]]
    return list(dict.fromkeys(v for v in vals if math.isfinite(v) and v > 0))
