"""The autoscaled fleet of one run: its replicas and cost over simulated time and its SLO
attainment per hour, from the run folder's fleet.parquet and fleet_hourly.parquet (written by
`servetune simulate ... fleet.autoscale=true`; columns: run/fleet_metrics.py).

fleet.parquet has one row per entry of the autoscaler's log, a step function (each row holds
until the next row of its scenario, the last until the run ends): `t_s` (s), `provisioned`,
`cold`, `serving`, `draining`, `desired` (replicas) and `cost_usd` (the provisioned replicas'
cost from time 0 to t_s). fleet_hourly.parquet has one row per hour of simulated time: `hour`
(its start, s), `arrivals`, `slo_attainment` (NaN without arrivals), `mean_replicas` and
`cost_usd` (that hour's). Both have a `scenario` column as timeline.parquet does. The log is
written at the autoscaler's evaluations, when a replica's cold start ends and when a replica
finishes draining, so its counts are exact between rows.

A run without either file had no autoscaler and gets nothing (no figure, no note); a damaged
file gets a note naming it and what is wrong instead of its part of the figure.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pandas as pd

from servetune.core.inputs import check_regular
from servetune.reporting.collect import Collection, ReportError
from servetune.reporting.numbers import fmt
from servetune.run.fleet_metrics import FLEET_TABLE_COLUMNS, HOURLY_COLUMNS

FILE = "fleet.parquet"
HOURLY_FILE = "fleet_hourly.parquet"
COLUMNS = FLEET_TABLE_COLUMNS
HOUR_COLUMNS = HOURLY_COLUMNS
OPTION = "fleet.autoscale=true"
HOUR_S = 3600.0


@dataclasses.dataclass
class Fleet:
    """One run's autoscaled fleet: run (folder relative to the report's root), scenario (the
    one drawn), why (how the run was chosen: timeline.choose), table (fleet.parquet's rows
    of the scenario sorted by t_s; None when missing or damaged), hourly (fleet_hourly.parquet's
    rows sorted by hour; None when missing or damaged), end_s (when the last row stops
    holding: the run's simulated duration, s), note (what is wrong with the files; "" when
    both were read) and name (the run as titles name it: Collection.run_name; `run` where not
    set)."""

    run: str
    scenario: int
    why: str
    table: pd.DataFrame | None = None
    hourly: pd.DataFrame | None = None
    end_s: float = math.nan
    note: str = ""
    name: str = ""

    def __post_init__(self):
        self.name = self.name or self.run


def read(col: Collection, run: str, scenario: int, why: str) -> Fleet | None:
    """The Fleet of `run` (see the module docstring); None when the run has neither file (no
    autoscaler). Never raises for a damaged file: the note names it and what is wrong."""
    run_dir = Path(col.run_dirs[run])
    paths = (run_dir / FILE, run_dir / HOURLY_FILE)
    if not any(p.exists() for p in paths):
        return None
    out = Fleet(run=run, scenario=scenario, why=why, name=col.run_name(run))
    notes = []
    for path, columns, key, attr in (
        (paths[0], COLUMNS, "t_s", "table"),
        (paths[1], HOUR_COLUMNS, "hour", "hourly"),
    ):
        try:
            setattr(out, attr, _load(path, columns, key, scenario))
        except Exception as err:  # noqa: BLE001 -- pyarrow raises several kinds on a damaged file
            why_not = (str(err).strip().splitlines() or [type(err).__name__])[0]
            notes.append(f"{path}: cannot read ({why_not})")
    if notes:
        out.note = (
            "; ".join(notes) + f". Simulate the run again with {OPTION} to write it anew "
            f"(its fleet is drawn from what could be read)"
        )
    out.end_s = _end_s(col, run, scenario, out.table)
    return out


def _load(path: Path, columns: tuple, key: str, scenario: int) -> pd.DataFrame:
    """The rows of `scenario` in the parquet file at `path`, its `columns` as float64, sorted
    by `key`; ValueError or ReportError saying what is wrong (no file, a missing or
    non-numeric column, no rows)."""
    if not path.exists():
        raise ValueError("no such file")
    check_regular(path, "parquet file", ReportError)
    return _checked(pd.read_parquet(path), columns, key, scenario)


def _checked(table: pd.DataFrame, columns: tuple, key: str, scenario: int) -> pd.DataFrame:
    """The rows of `scenario` with `columns` as float64 (`key` finite), sorted by `key`;
    ValueError saying what is wrong (a missing or non-numeric column, no rows)."""
    missing = [c for c in columns if c not in table.columns]
    if missing:
        raise ValueError(f"no column {', '.join(missing)}; expected {', '.join(columns)}")
    text = [
        c
        for c in columns
        if not pd.api.types.is_numeric_dtype(table[c]) or pd.api.types.is_bool_dtype(table[c])
    ]
    if text:
        raise ValueError(f"column {', '.join(text)} is not numeric")
    if "scenario" in table.columns:
        table = table[table["scenario"].to_numpy() == scenario]
    table = table[list(columns)].astype(np.float64)
    table = table[np.isfinite(table[key].to_numpy())]
    if table.empty:
        raise ValueError(f"no rows (scenario {scenario})")
    return table.sort_values(key, kind="stable").reset_index(drop=True)


def _end_s(col: Collection, run: str, scenario: int, table: pd.DataFrame | None) -> float:
    """When the fleet's last row stops holding (s): the scenario's simulated duration
    (sim_duration_s of the run's metrics), or the last row's time where that is unknown or
    earlier (NaN with neither)."""
    last = float(table["t_s"].iloc[-1]) if table is not None else math.nan
    runs = col.runs
    if "sim_duration_s" not in runs:
        return last
    mine = runs.loc[(runs["run"] == run) & (runs["scenario"] == scenario), "sim_duration_s"]
    sim = pd.to_numeric(mine, errors="coerce").to_numpy(np.float64)
    if not len(sim) or not np.isfinite(sim[0]):
        return last
    return float(sim[0]) if math.isnan(last) else max(last, float(sim[0]))


def held_s(fleet: Fleet) -> np.ndarray:
    """How long each row of the fleet's table holds (s): until the next row, the last until
    end_s."""
    assert fleet.table is not None
    t = fleet.table["t_s"].to_numpy(np.float64)
    end = max(fleet.end_s, t[-1]) if math.isfinite(fleet.end_s) else t[-1]
    return np.diff(np.append(t, end))


def replica_s(fleet: Fleet, column: str) -> float:
    """The integral of a replica count of the table (`provisioned`, `cold`, ...) over the run,
    from the first row to end_s (replica-seconds)."""
    assert fleet.table is not None
    return float(np.sum(held_s(fleet) * fleet.table[column].to_numpy(np.float64)))


def usd_per_replica_s(fleet: Fleet) -> float:
    """The price of a provisioned replica (USD per replica-second) the table's cost implies:
    its cost_usd growth over the provisioned replica-seconds between its first and last rows;
    NaN when no replica-time passed between them."""
    assert fleet.table is not None
    t = fleet.table["t_s"].to_numpy(np.float64)
    prov = fleet.table["provisioned"].to_numpy(np.float64)
    cost = fleet.table["cost_usd"].to_numpy(np.float64)
    used = float(np.sum(np.diff(t) * prov[:-1]))
    return (cost[-1] - cost[0]) / used if used > 0 else math.nan


def cost_curve(fleet: Fleet) -> tuple[np.ndarray, np.ndarray]:
    """(t_s, cost_usd): the cumulative cost at each row (piecewise linear between rows) and,
    where the run ends after the last row and the price is known, at end_s (the last row's
    replicas held until then)."""
    assert fleet.table is not None
    t = fleet.table["t_s"].to_numpy(np.float64)
    cost = fleet.table["cost_usd"].to_numpy(np.float64)
    tail = held_s(fleet)[-1]
    price = usd_per_replica_s(fleet)
    if tail > 0 and math.isfinite(price):
        extra = tail * float(fleet.table["provisioned"].iloc[-1]) * price
        return np.append(t, t[-1] + tail), np.append(cost, cost[-1] + extra)
    return t, cost


def step_series(fleet: Fleet, column: str) -> tuple[np.ndarray, np.ndarray]:
    """(t_s, values) of a replica count of the table as a step line to end_s: its rows and,
    where the run ends after the last row, the last value again at end_s."""
    assert fleet.table is not None
    t = fleet.table["t_s"].to_numpy(np.float64)
    v = fleet.table[column].to_numpy(np.float64)
    tail = held_s(fleet)[-1]
    return (np.append(t, t[-1] + tail), np.append(v, v[-1])) if tail > 0 else (t, v)


def totals(fleet: Fleet) -> dict:
    """The fleet's totals over the run (from the table, to end_s): replica_hours
    (provisioned), cold_replica_hours (the cold column's integral), cost_usd (the cumulative
    cost at the end) and span_s (first row to end_s, s)."""
    t, cost = cost_curve(fleet)
    return {
        "replica_hours": replica_s(fleet, "provisioned") / HOUR_S,
        "cold_replica_hours": replica_s(fleet, "cold") / HOUR_S,
        "cost_usd": float(cost[-1]),
        "span_s": float(t[-1] - t[0]),
    }


def hour_spans(fleet: Fleet) -> tuple[np.ndarray, np.ndarray]:
    """(start, width) in s of each row of the hourly table: the hour, cut at end_s where the
    run ends within it (a whole hour where end_s is unknown)."""
    assert fleet.hourly is not None
    start = fleet.hourly["hour"].to_numpy(np.float64)
    end = start + HOUR_S
    if np.isfinite(fleet.end_s):
        end = np.maximum(np.minimum(end, fleet.end_s), start)
    return start, end - start


def title(fleet: Fleet) -> str:
    """The fleet figure's title: the run by name (Fleet.name: "3" of a sweep, the root
    folder's name for the root itself, never "."), scenario and why, and its totals
    (replica-hours, cost in USD, cold-start replica-hours) over the span drawn."""
    head = f"Fleet of run {fleet.name}, scenario {fleet.scenario} ({fleet.why})"
    if fleet.table is None:
        return head
    tot = totals(fleet)
    return (
        f"{head}: {fmt(tot['replica_hours'])} replica-hours, {fmt(tot['cost_usd'])} USD, "
        f"{fmt(tot['cold_replica_hours'])} cold-start replica-hours over "
        f"{fmt(tot['span_s'] / HOUR_S)} h"
    )
