"""What a tuning run recommends, and why: the tuned point, the policy exported, and the tuned
knobs that sit on a bound of their range.

1. The tuned point (`choose_tuned`). The search records every point it scored on the training
   scenarios (`visits`: its coordinates, its summary and its per-scenario objective and SLO
   shortfall; the MAX_VISITS best by the tuner's order are kept, in the checkpoint too). Of
   the points the training scenarios cannot tell from the best found, the tuned point is the
   one nearest the start in the search space's coordinates (space.point): the best found
   often lies on the flat part of a sigmoid, at a bound of a range, for a difference no
   scenario can see, and a deployment should move from its settings only as far as the gain
   needs. "Cannot tell" is close_to_best: meeting the SLO target where the best meets it,
   not worse by the paired per-scenario difference's 95% interval (or, where the scenarios
   give none, by more than tune.eval.regression_tolerance), and not worse on average by more
   than that tolerance (with few scenarios an interval is wide). The choice
   simulates nothing: the tuned point is then evaluated held out in place of the best found.
2. The export (`recommend`). The tuned point is exported when it is better than the start
   beyond chance (evaluation.compare's improvement) on a held-out split and worse beyond
   chance on none (on the training splits where there is no held-out split); otherwise "no
   significant improvement: keep your settings", and the start is exported, unless
   tune.export_policy=tuned asks for the tuned point anyway.
3. Bounds (`bound_flags`): a tuned knob within BOUND_MARGIN of its range's low or high end,
   as a fraction of the range on the knob's scale (log or linear), is flagged, unless the
   start has it at that end too (the user's setting, kept).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence

import numpy as np

from servetune.config.policy import FIELDS
from servetune.reporting.numbers import fmt
from servetune.tuning.evaluation import Verdict, compare, paired_losses
from servetune.tuning.objective import Objective
from servetune.tuning.space import SearchSpace

MAX_VISITS = 256  # scored points kept for the choice (the best by the tuner's order)
BOUND_MARGIN = 0.05  # a knob this close to an end of its range (a fraction of it) is flagged
EXPORT_POLICIES = ("recommended", "tuned")  # tune.export_policy
NO_GAIN = "no significant improvement: keep your settings"
ASK_TUNED = "tune.export_policy=tuned exports the tuned point"


def visits(points: np.ndarray, columns: Sequence[list[dict]], objective: Objective, it: int):
    """One visit record per scored point of iteration `it`: points [M, d] (the search space's
    coordinates) and their metrics columns [M][S] on the training scenarios, as the tuner's
    summary (objective, violation: Objective.summarize) and per scenario (f: log useful tokens
    per USD, v: the shortfall below the SLO target)."""
    out = []
    for z, column in zip(np.asarray(points, np.float64), columns, strict=True):
        s = objective.summarize(column, 0.0)
        out.append(
            {
                "iteration": int(it),
                "z": [float(x) for x in z],
                "objective": float(s["objective"]),
                "violation": float(s["violation"]),
                "slo_attainment": float(s["slo_attainment"]),
                "f": [float(objective.value(m)) for m in column],
                "v": [float(objective.violation(m)) for m in column],
            }
        )
    return out


def _rank(visit: Mapping) -> tuple[int, float]:
    """The tuner's order as a sort key, best first (runner._better): meeting the SLO target,
    then the higher objective; missing it, the smaller shortfall."""
    if visit["violation"] <= 0:
        return (0, -visit["objective"])
    return (1, visit["violation"])


def keep(visited: list[dict], new: list[dict], limit: int = MAX_VISITS) -> list[dict]:
    """The `limit` best of `visited` (kept best first) and `new` by the tuner's order; among
    equals the earlier first, so the first is the best point the tuner found."""
    return sorted([*visited, *new], key=_rank)[:limit]


def _row(visit: Mapping, target: float) -> dict:
    """A visit as an evaluation row for evaluation.compare."""
    return {
        "meets_target": visit["violation"] <= 0,
        "objective": visit["objective"],
        "violation": visit["violation"],
        "slo_target": target,
    }


def close_to_best(best: Mapping, other: Mapping, objective: Objective, tolerance: float) -> bool:
    """Is visit `other` as good as visit `best` (the best found) on the training scenarios:
    it meets the SLO target where the best does, is not worse beyond chance (evaluation.compare
    on their paired per-scenario differences, the objective aggregated as the tuner does) and
    is not worse on average by more than `tolerance` (a wide interval of few scenarios does not
    make a clearly worse point an equal)."""
    if best["violation"] <= 0 < other["violation"]:
        return False
    target = objective.slo_target
    combine = objective.combine if objective.aggregate == "cvar" else None
    losses = paired_losses(best["f"], best["v"], other["f"], other["v"], target, combine)
    kind = "objective" if best["violation"] <= 0 else "shortfall"
    if not losses[f"{kind}_loss"] <= tolerance:
        return False
    return not compare(_row(best, target), {**_row(other, target), **losses}, tolerance).regression


@dataclasses.dataclass(frozen=True)
class Choice:
    """The tuned point: its policy values, the visit it is (None where the visits do not hold
    the best found: a run resumed from a checkpoint that did not record them), how many
    visited points were as good as the best (`candidates`, itself included) of how many
    kept, and why it was chosen, in words."""

    values: dict
    visit: dict | None
    candidates: int
    visited: int
    why: str


def _matches(visit: Mapping, best: Mapping) -> bool:
    return visit["objective"] == best["objective"] and visit["violation"] == best["violation"]


def choose_tuned(
    visited: list[dict],
    best: Mapping | None,
    best_values: dict,
    space: SearchSpace,
    start_values: Mapping,
    objective: Objective,
    tolerance: float,
) -> Choice:
    """The tuned point (module doc, 1): of the `visited` points (keep's order) that
    close_to_best says the training scenarios cannot tell from the first, the best found
    (summary `best`, values `best_values`), the one nearest `start_values` in `space`'s
    coordinates (the earliest among equals). Its values are the best's with the visit's
    tuned keys (space.values) over them."""
    if not visited or best is None or not _matches(visited[0], best):
        return Choice(
            dict(best_values),
            None,
            1,
            len(visited),
            "the best point found (the points visited before this run resumed were not "
            "recorded, so no nearer one could be chosen)",
        )
    top = visited[0]
    near = [v for v in visited if close_to_best(top, v, objective, tolerance)]
    origin = space.point(dict(start_values))
    distance = lambda v: float(np.linalg.norm(np.asarray(v["z"]) - origin))
    chosen = min(near, key=distance)  # min keeps the first of equals: the best-ranked
    values = dict(best_values)
    for key, value in space.values(np.asarray(chosen["z"])).items():
        values[key] = np.asarray(value, np.float64).tolist()
    alike = (
        f"{len(near)} of the {len(visited)} points kept that the training scenarios cannot "
        f"tell from the best found (within the paired 95% interval, or the "
        f"{100 * tolerance:.3g}% tolerance where the scenarios give none)"
    )
    if len(near) == 1:
        why = (
            f"the best point found (iteration {top['iteration']}): no other of the "
            f"{len(visited)} points kept is as good on the training scenarios (within the "
            f"paired 95% interval, or the {100 * tolerance:.3g}% tolerance where the "
            f"scenarios give none)"
        )
    elif chosen is top:
        why = (
            f"the best point found (iteration {top['iteration']}), also the nearest the "
            f"start in the tuner's coordinates of the {alike}"
        )
    else:
        why = (
            f"the nearest the start in the tuner's coordinates (iteration "
            f"{chosen['iteration']}, distance {distance(chosen):.3g}; the best found, "
            f"iteration {top['iteration']}: {distance(top):.3g}) of the {alike}"
        )
    return Choice(values, chosen, len(near), len(visited), why)


def _position(value: float, low: float, high: float, scale: str) -> float:
    """Where `value` lies in [low, high] on the knob's scale: 0 at low, 1 at high."""
    if scale == "log" and low > 0 and value > 0:
        return (math.log(value) - math.log(low)) / (math.log(high) - math.log(low))
    return (value - low) / (high - low)


def _end(dim, value: float) -> int:
    """-1 where `value` lies within BOUND_MARGIN of the low end of `dim`'s range (or below
    it), +1 near the high end (or above it), else 0, on the knob's scale."""
    u = _position(value, dim.low, dim.high, dim.scale)
    return -1 if u <= BOUND_MARGIN else 1 if u >= 1 - BOUND_MARGIN else 0


def _start_end(dim, start) -> int:
    """The end of `dim`'s range the start's own setting lies at (_end), where the start is
    inside the range or the knob is off (unlimited, or its off value: the search starts an
    off knob at the top); 0 for a start elsewhere (inside, or outside the range: there the
    range, not the user, holds the knob at its end)."""
    field = FIELDS.get(dim.key)
    if start is None or math.isnan(float(start)):
        return 0
    if field is not None and (start == field.off or (field.unlimited and math.isinf(start))):
        return 1
    if not dim.low <= float(start) <= dim.high:
        return 0
    return _end(dim, float(start))


def bound_flags(space: SearchSpace, values: Mapping, start: Mapping | None = None) -> dict:
    """{tuned key: words} for each tuned knob of `values` within BOUND_MARGIN of an end of
    its range (tune.space.<key>) on its scale, e.g. "max_num_batched_tokens = 256 at the low
    bound of tune.space.max_num_batched_tokens [256, 32768]"; a value vLLM's startup checks
    moved outside the range is said to lie below or above it. Not flagged: a knob at the end
    where the `start` has it (_start_end: a watermark of 0 kept near 0, an unlimited cap near
    the top) is the user's setting, not the tuner's extreme."""
    out = {}
    for dim in space.dims:
        value = values.get(dim.key)
        if value is None or not math.isfinite(float(value)):
            continue
        end = _end(dim, float(value))
        if end == 0 or end == _start_end(dim, (start or {}).get(dim.key)):
            continue
        u = _position(float(value), dim.low, dim.high, dim.scale)
        where = (
            "below the range"
            if u < 0
            else "at the low bound"
            if end < 0
            else "above the range"
            if u > 1
            else "at the high bound"
        )
        out[dim.key] = (
            f"{dim.key} = {fmt(float(value))} {where} of tune.space.{dim.key} "
            f"[{dim.low:g}, {dim.high:g}]"
        )
    return out


@dataclasses.dataclass(frozen=True)
class Recommendation:
    """What the tuning exports: "start" or "tuned"; whether the tuned point is better than
    the start beyond chance (`improvement`, on the splits `improved`); the held-out splits it
    regressed on; whether export/ may be written (False: a regressed tuned point exported
    without tune.export_on_regression); and why, in words."""

    exported: str
    improvement: bool
    improved: tuple[str, ...]
    regressed: tuple[str, ...]
    written: bool
    why: str


def recommend(
    held: Mapping[str, Verdict],
    training: Mapping[str, Verdict],
    export_policy: str = "recommended",
    export_on_regression: bool = False,
) -> Recommendation:
    """The export (module doc, 2) from the verdicts on the held-out splits (`held`) or, where
    there is none, on the training splits (`training`), under tune.export_policy and
    tune.export_on_regression."""
    basis = held or training
    on = "held-out" if held else "training"
    note = (
        ""
        if held
        else " (no held-out split, tune.eval.seeds=0 and no tune.eval.holdout: judged on the "
        "scenarios it was tuned on)"
    )
    improved = tuple(s for s, v in basis.items() if v.improvement)
    worse = tuple(s for s, v in basis.items() if v.regression)
    regressed = tuple(s for s, v in held.items() if v.regression)
    improvement = bool(improved) and not worse
    exported = "tuned" if improvement or export_policy == "tuned" else "start"
    written = not (exported == "tuned" and regressed and not export_on_regression)
    splits = lambda names: f"{on} {', '.join(names)}{note}"
    if improvement:
        why = (
            f"improvement: the tuned point is better than the start beyond chance on "
            f"{splits(improved)}, and worse beyond chance on none: exported the tuned point"
        )
    else:
        judged = (
            f"worse beyond chance on {splits(worse)}"
            if worse
            else f"a tie on {splits(basis)}"
            if basis
            else "nothing to judge it on"
        )
        if exported == "start":
            why = f"{NO_GAIN} (exported the start; {ASK_TUNED}): {judged}"
        else:
            why = f"no significant improvement ({judged}); exported the tuned point as asked " + (
                "(tune.export_policy=tuned)"
                if written
                else "(tune.export_policy=tuned), but export/ is not written: it regressed "
                "(tune.export_on_regression=true writes it)"
            )
    return Recommendation(exported, improvement, improved, regressed, written, why)
