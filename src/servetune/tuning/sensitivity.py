"""How sensitive the tuned policy is to each tuned knob: central finite differences of the
exact simulator at the tuned point.

Each tuned knob is moved down and up by a step in the tuning space's own coordinate (a
log-scale knob by e^(-/+LOG_STEP), so its derivative is per e-fold of the value, an
elasticity; a linear knob by LINEAR_STEP of its range, so its derivative is per unit of the
value), the other knobs held at their tuned values. The 2 x knobs probes run in one batched
call of the tuner's evaluator on the training scenarios, every probe on the same workloads
(common random numbers), so each scenario gives a paired difference; the derivative is their
mean with a 95% Student-t interval over the scenarios.

The pathwise relaxation is deliberately not used: its derivative of max_num_batched_tokens is
wrong below about 2,048 tokens, and the watermark's relaxed gate adds a spurious positive
budget derivative. The finite differences are of the engine the export runs on.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

import numpy as np
import pandas as pd

from servetune.config.policy import FLOORED
from servetune.tuning.evaluation import LEVEL, half_width
from servetune.tuning.objective import Objective
from servetune.tuning.space import Dimension, SearchSpace

LOG_STEP = 0.1  # e-folds each side of a log-scale knob (x e^-0.1 and x e^0.1: about -/+10%)
LINEAR_STEP = 0.05  # fraction of a linear knob's range each side
METRICS = ("d_log_tokens_per_usd", "d_attainment")  # the derivatives, in CSV column order
NO_INFO = "no information"  # the scenarios give no interval
COLUMNS = [
    "knob",
    "scale",
    "value",
    "minus",
    "plus",
    "step",
    "per",
    *(f"{m}{end}" for m in METRICS for end in ("", "_low", "_high")),
    "scenarios",
    "note",
]
CAPTION = (
    f"Central finite differences of the exact simulator at the tuned point: each tuned knob "
    f"moved down and up, the others held; a log-scale knob by a factor e^&plusmn;{LOG_STEP:g} "
    f"(its derivative is per e-fold of the value, an elasticity), a linear one by "
    f"{LINEAR_STEP:.0%} of its range (per unit of the value); max_num_seqs and "
    f"max_num_batched_tokens, which the engine floors, to whole numbers at least one apart. "
    f"Every probe runs on the same training scenarios (common random numbers), so each "
    f"scenario gives a paired difference; the point is their mean, the bar its {LEVEL:.0%} "
    f"Student-t interval over the scenarios. A hollow point has no interval ({NO_INFO}: one "
    f"scenario, or every scenario gave the same difference, e.g. a knob that changed "
    f"nothing). The pathwise relaxation is not used here: its derivative of the token budget "
    f"is wrong below about 2,048 tokens, and the watermark's relaxed gate adds a spurious "
    f"positive budget derivative."
)


@dataclasses.dataclass(frozen=True)
class Probe:
    """One knob's pair of probes: its value at the tuned point, the values simulated below
    and above it (what the engine reads: whole numbers for FLOORED knobs), its scale (log or
    linear) and what the step had to give way to (`note`, "" when nothing)."""

    key: str
    scale: str
    value: float
    minus: float
    plus: float
    note: str = ""

    @property
    def width(self) -> float:
        """plus - minus in the knob's coordinate: e-folds of the value (log) or its units."""
        if self.scale == "log":
            return math.log(self.plus) - math.log(self.minus)
        return self.plus - self.minus

    @property
    def step(self) -> float:
        """Half the width: the step each side (e-folds or units)."""
        return 0.5 * self.width

    @property
    def unit(self) -> str:
        """What a derivative of this knob is per: "e-fold" (log scale) or "unit" (linear)."""
        return "e-fold" if self.scale == "log" else "unit"


def _floored_pair(dim: Dimension, value: float) -> tuple[float, float, str]:
    """(minus, plus) whole numbers for a knob the engine floors: about e^-/+LOG_STEP (or
    LINEAR_STEP of the range) around floor(value), at least one apart from it each side,
    inside [ceil(low), floor(high)]."""
    n = math.floor(value)
    if dim.scale == "log":
        lo, hi = round(n * math.exp(-LOG_STEP)), round(n * math.exp(LOG_STEP))
    else:
        d = LINEAR_STEP * (dim.high - dim.low)
        lo, hi = round(n - d), round(n + d)
    lo, hi = min(lo, n - 1), max(hi, n + 1)
    lo, hi = max(lo, math.ceil(dim.low), 1), min(hi, math.floor(dim.high))
    return float(lo), float(hi), f"floored by the engine: whole {int(lo)} and {int(hi)}"


def _pair(dim: Dimension, value: float) -> tuple[float, float, str]:
    """(minus, plus, note) of a knob's probes, clipped to its tuning range."""
    if dim.key in FLOORED:
        lo, hi, note = _floored_pair(dim, value)
    elif dim.scale == "log":
        lo, hi, note = value * math.exp(-LOG_STEP), value * math.exp(LOG_STEP), ""
        lo, hi = max(lo, dim.low), min(hi, dim.high)
    else:
        d = LINEAR_STEP * (dim.high - dim.low)
        lo, hi, note = max(value - d, dim.low), min(value + d, dim.high), ""
    at = math.floor(value) if dim.key in FLOORED else value
    edge = "bottom" if lo >= at else "top" if hi <= at else ""
    if edge:
        note = "; ".join(filter(None, [note, f"one-sided (at the range's {edge})"]))
    return lo, hi, note


def probes(space: SearchSpace, values: Mapping[str, float]) -> list[Probe]:
    """The probes of every tuned scalar knob of `space` around the policy `values` (key ->
    value; a network's weights are not probed), before the space's constraints."""
    out = []
    for dim in space.dims:
        value = float(values[dim.key])
        lo, hi, note = _pair(dim, value)
        out.append(Probe(dim.key, dim.scale, value, lo, hi, note))
    return out


def probe_values(
    space: SearchSpace, values: Mapping[str, object], found: list[Probe]
) -> tuple[dict[str, np.ndarray], list[Probe]]:
    """(policy values of the 2 x knobs probes, knob k's minus at row 2k and plus at 2k + 1,
    projected onto vLLM's checks as the tuner's points are (space.constraints); the probes as
    simulated after that projection, noting where it moved the knob or another one). The
    evaluator takes the first as is (arrays [2K]; score_net [2K, W])."""
    keys = space.keys
    rows = []
    for p in found:
        for v in (p.minus, p.plus):
            rows.append({**{k: float(values[k]) for k in keys}, p.key: v})
    cols = {k: np.array([r[k] for r in rows], np.float64) for k in keys}
    projected = space.constraints.apply(cols)
    out = []
    for i, p in enumerate(found):
        lo, hi = (float(projected[p.key][2 * i + j]) for j in (0, 1))
        if p.key in FLOORED:  # what the engine reads of a value the projection raised
            lo, hi = float(math.floor(lo)), float(math.floor(hi))
        moved = [
            k
            for k in keys
            if k != p.key and np.any(projected[k][2 * i : 2 * i + 2] != cols[k][2 * i : 2 * i + 2])
        ]
        notes = [p.note] + (
            [f"vLLM's checks moved it to {lo:g} / {hi:g}"] if (lo, hi) != (p.minus, p.plus) else []
        )
        notes += [f"vLLM's checks moved {', '.join(moved)} too"] if moved else []
        out.append(dataclasses.replace(p, minus=lo, plus=hi, note="; ".join(filter(None, notes))))
    if "score_net" in values:
        net = np.asarray(values["score_net"], np.float64).reshape(1, -1)
        projected["score_net"] = np.repeat(net, 2 * len(found), axis=0)
    return projected, out


def paired(minus, plus, width: float) -> tuple[float, float, float, int, str]:
    """(mean, low, high, scenarios, note) of the per-scenario derivatives (plus - minus) /
    width (units of the metric per unit of `width`) over the scenarios where both are finite:
    the mean with its 95% Student-t interval. Where the scenarios give no interval the note
    says so: all of them the same difference (a zero-width interval, [mean, mean]), or one
    scenario (NaN bounds); none finite (or width 0: the probes could not move) gives NaN."""
    d = np.asarray(plus, np.float64) - np.asarray(minus, np.float64)
    d = d[np.isfinite(d)]
    if not d.size or not width > 0:
        why = "the knob could not move" if not width > 0 else "no finite scenario"
        return math.nan, math.nan, math.nan, int(d.size), f"{NO_INFO}: {why}"
    d = d / width
    mean = float(d.mean())
    if d.size == 1:
        return mean, math.nan, math.nan, 1, f"{NO_INFO}: one scenario"
    if np.all(d == d[0]):
        what = "changed nothing on" if mean == 0 else "gave the same difference on"
        return mean, mean, mean, int(d.size), f"{NO_INFO}: the knob {what} all {d.size} scenarios"
    half = half_width(d)
    return mean, mean - half, mean + half, int(d.size), ""


def _per_scenario(column: list[dict], objective: Objective) -> tuple[np.ndarray, np.ndarray]:
    """(log useful tokens per USD, SLO attainment) [S] of one policy's metrics per scenario."""
    f = np.array([objective.value(m) for m in column], np.float64)
    att = np.array([float(m["slo_attainment"]) for m in column], np.float64)
    return f, att


def derivatives(
    columns: list[list[dict]], found: list[Probe], objective: Objective
) -> pd.DataFrame:
    """One row per probed knob from the evaluator's metrics `columns` [2K][S] (knob k's
    minus at 2k, plus at 2k + 1): the knob, its scale, value, the values simulated, the step
    each side and its unit, d log(useful tokens / USD) and d SLO attainment (a fraction) per
    e-fold (log scale) or per unit (linear) with their 95% intervals over the scenarios, the
    scenarios used and the notes (how the step was taken; where the scenarios give no
    interval)."""
    rows = []
    for k, p in enumerate(found):
        (f_lo, a_lo), (f_hi, a_hi) = (_per_scenario(columns[2 * k + j], objective) for j in (0, 1))
        row = {
            "knob": p.key,
            "scale": p.scale,
            "value": p.value,
            "minus": p.minus,
            "plus": p.plus,
            "step": p.step,
            "per": p.unit,
        }
        notes = [p.note] if p.note else []
        for name, lo, hi in (("d_log_tokens_per_usd", f_lo, f_hi), ("d_attainment", a_lo, a_hi)):
            mean, low, high, n, note = paired(lo, hi, p.width)
            row.update({name: mean, f"{name}_low": low, f"{name}_high": high})
            row["scenarios"] = max(row.get("scenarios", 0), n)
            notes += [f"{name}: {note}"] if note else []
        row["note"] = "; ".join(notes)
        rows.append(row)
    return pd.DataFrame(rows, columns=COLUMNS)


def measure(
    evaluator, space: SearchSpace, values: Mapping[str, object], objective: Objective
) -> pd.DataFrame:
    """The sensitivity table (`derivatives`) of the tuned policy `values` (policy key ->
    value): the 2 x knobs probes simulated in one call of `evaluator` (the tuner's Evaluator
    or MultiEvaluator, on its training scenarios)."""
    found = probes(space, values)
    if not found:  # a network's weights only: no scalar knob to probe
        return pd.DataFrame(columns=COLUMNS)
    policy, found = probe_values(space, values, found)
    return derivatives(evaluator(policy), found, objective)


def unmeasured(space: SearchSpace, values: Mapping[str, object]) -> pd.DataFrame:
    """The sensitivity table's knob, scale and value columns of the tuned policy `values`
    without its derivatives (tune.eval.sensitivity=false: nothing simulated), for the views
    that show the knobs (tuning_page.write_views with measured=False)."""
    rows = [
        {"knob": d.key, "scale": d.scale, "value": float(np.asarray(values[d.key]))}
        for d in space.dims
    ]
    return pd.DataFrame(rows, columns=COLUMNS)


def simulations(space: SearchSpace, scenarios: int) -> int:
    """Scenarios `measure` simulates: 2 x tuned knobs x `scenarios` (per policy)."""
    return 2 * len(space.dims) * scenarios


__all__ = [
    "CAPTION",
    "COLUMNS",
    "LEVEL",
    "LINEAR_STEP",
    "LOG_STEP",
    "METRICS",
    "NO_INFO",
    "Probe",
    "derivatives",
    "measure",
    "paired",
    "probe_values",
    "probes",
    "simulations",
]
