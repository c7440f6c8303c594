"""The timeline of one run: what its instances did over simulated time, from the run folder's
timeline.parquet (written by `servetune simulate ... output.timeline=true`).

timeline.parquet has one row per sample: `t_s` (float, the sample time in seconds),
`instance` (int), `queue_len` (waiting requests), `running` (running requests),
`batch_tokens` (tokens of the iteration), `kv_blocks` (KV blocks in use) and `preemptions`
(cumulative), all ints; an optional `scenario` column selects one scenario of a run that
simulated several (seeds, grid points). A run without the file, or with a damaged one, gets a
note saying how to get one instead of a figure.
"""

from __future__ import annotations

import dataclasses
import shlex
from pathlib import Path

import numpy as np
import pandas as pd

from servetune.core.inputs import check_regular
from servetune.reporting.collect import Collection, ReportError, point_label

FILE = "timeline.parquet"
COLUMNS = ("t_s", "instance", "queue_len", "running", "batch_tokens", "kv_blocks", "preemptions")
GAUGES = ("queue_len", "running", "batch_tokens", "kv_blocks", "preemptions")
OPTION = "output.timeline=true"
MAX_BINS = 2000  # samples per instance drawn; more are binned in time (max per bin)


@dataclasses.dataclass
class Timeline:
    """One run's timeline: run (folder relative to the report's root), scenario (the one
    drawn), why (how the run was chosen), table (samples sorted by instance and t_s; None
    when there is nothing to draw), note (what is missing and how to get it; "" when
    table is there) and name (the run as titles name it: Collection.run_name; `run` where
    not set)."""

    run: str
    scenario: int
    why: str
    table: pd.DataFrame | None = None
    note: str = ""
    name: str = ""

    def __post_init__(self):
        self.name = self.name or self.run


def choose(col: Collection, best: pd.DataFrame, requested: str | None) -> tuple[str, int, str]:
    """(run, scenario, why) of the timeline to draw: the run `requested` (--timeline: a run
    folder relative to the report's root, or its path; ReportError naming the runs when there
    is none such), else the first seed's run of the best setting of the first condition whose
    run has a timeline.parquet (of the first condition when none has)."""
    runs = col.runs
    if requested is not None:
        run = _find(col, requested)
        return run, int(runs.loc[runs["run"] == run, "scenario"].iloc[0]), f"--timeline {requested}"
    rows = list(best.itertuples(index=False))
    if not rows or (len(rows) == 1 and rows[0].setting == "all"):  # one point: no choice made
        run = str(runs["run"].iloc[0])
        return (
            run,
            int(runs["scenario"].iloc[0]),
            "the only run" if len(runs) == 1 else "the first run",
        )
    pick = next((r for r in rows if (col.run_dirs[r.run] / FILE).exists()), rows[0])
    mine = runs[runs["run"] == pick.run]
    labels = [point_label(r, col.keys) for _, r in mine.iterrows()]
    scenario = (
        int(mine["scenario"].iloc[labels.index(pick.point)])
        if pick.point in labels
        else int(mine["scenario"].iloc[0])
    )
    where = f" under {pick.condition}" if len(rows) > 1 else ""
    if getattr(pick, "tied", ""):  # the tie's first setting, the one drawn and exported
        why = f"the first run of {pick.chosen}, the first of the settings tied best{where}"
    else:
        why = f"the first run of the best setting{where}, {pick.setting}"
    return pick.run, scenario, why


def _find(col: Collection, requested: str) -> str:
    if requested in col.run_dirs:
        return requested
    path = Path(requested).expanduser()
    for base in (Path.cwd(), col.root):
        target = (base / path).resolve()
        for run, d in col.run_dirs.items():
            if Path(d).resolve() == target:
                return run
    known = list(col.run_dirs)
    shown = ", ".join(known[:12]) + (f" ... ({len(known)} runs)" if len(known) > 12 else "")
    raise ReportError(
        f"--timeline: got {requested!r}; no such run under {col.root} (runs: {shown})"
    )


def how_to_get(run_dir: Path) -> str:
    """The command that simulates the run in `run_dir` again, into the same folder, with a
    timeline: its own overrides (from .hydra/overrides.yaml) plus output.timeline=true and
    hydra.run.dir; a generic hint when the overrides cannot be read."""
    try:
        import yaml

        doc = yaml.safe_load((run_dir / ".hydra" / "overrides.yaml").read_text())
    except Exception:  # noqa: BLE001 -- any unreadable file gets the generic hint
        doc = None
    if isinstance(doc, list) and all(isinstance(o, str) for o in doc):
        args = [o for o in doc if not o.startswith(("output.timeline", "hydra."))]
        args += [OPTION, f"hydra.run.dir={run_dir}"]
        return "servetune simulate " + " ".join(shlex.quote(o) for o in args)
    return f"servetune simulate <its overrides> {OPTION} hydra.run.dir={shlex.quote(str(run_dir))}"


def read(col: Collection, run: str, scenario: int, why: str) -> Timeline:
    """The Timeline of `run` (see the module docstring); never raises for a missing or
    damaged file: the note says what is wrong and how to get one."""
    out = Timeline(run=run, scenario=scenario, why=why, name=col.run_name(run))
    run_dir = Path(col.run_dirs[run])
    path = run_dir / FILE
    if not path.exists():
        out.note = (
            f"run {out.name} has no {FILE}. To see its queue, batch and KV blocks over "
            f"time, simulate it again with {OPTION} (same results, plus the "
            f"timeline) and report again: {how_to_get(run_dir)}"
        )
        return out
    try:
        check_regular(path, "parquet file", ReportError)
        table = pd.read_parquet(path)
        out.table = _checked(table, scenario)
    except Exception as err:  # noqa: BLE001 -- pyarrow raises several kinds on a damaged file
        why_not = (str(err).strip().splitlines() or [type(err).__name__])[0]
        out.note = (
            f"{path}: cannot read ({why_not}); simulate the run again with {OPTION} "
            f"to write it anew: {how_to_get(run_dir)}"
        )
    return out


def _checked(table: pd.DataFrame, scenario: int) -> pd.DataFrame:
    """The samples of `scenario` with the schema's columns as numbers, sorted by instance
    and time; ValueError saying what is wrong (a missing or non-numeric column, no rows)."""
    missing = [c for c in COLUMNS if c not in table.columns]
    if missing:
        raise ValueError(f"no column {', '.join(missing)}; expected {', '.join(COLUMNS)}")
    text = [
        c
        for c in COLUMNS
        if not pd.api.types.is_numeric_dtype(table[c]) or pd.api.types.is_bool_dtype(table[c])
    ]
    if text:
        raise ValueError(f"column {', '.join(text)} is not numeric")
    if "scenario" in table.columns:
        table = table[table["scenario"].to_numpy() == scenario]
    table = table[np.isfinite(table["t_s"].to_numpy(np.float64))]
    if table.empty:
        raise ValueError(f"no samples (scenario {scenario})")
    return (
        table[list(COLUMNS)].sort_values(["instance", "t_s"], kind="stable").reset_index(drop=True)
    )


def binned(table: pd.DataFrame, max_bins: int = MAX_BINS) -> tuple[pd.DataFrame, float]:
    """(samples to draw, bin width in s): `table` itself (width 0) when no instance has more
    than max_bins samples, else per instance the maximum of each gauge over max_bins equal
    time bins of the run (the cumulative preemptions: the bin's last count), at each bin's
    start."""
    if table.groupby("instance").size().max() <= max_bins:
        return table, 0.0
    t0, t1 = float(table["t_s"].min()), float(table["t_s"].max())
    width = (t1 - t0) / max_bins or 1.0
    b = np.minimum(
        ((table["t_s"].to_numpy(np.float64) - t0) / width).astype(np.int64), max_bins - 1
    )
    out = table.assign(bin=b).groupby(["instance", "bin"], sort=True)[list(GAUGES)].max()
    out = out.reset_index()
    out["t_s"] = t0 + out.pop("bin") * width
    return out[list(COLUMNS)], width


def steps(t, v) -> tuple[np.ndarray, np.ndarray]:
    """(times, values) of a step line (each value held until the next sample) without the
    samples that repeat the value before them: the first, every change and the last sample
    are kept, so the line drawn is the same with fewer points."""
    t, v = np.asarray(t), np.asarray(v)
    keep = np.ones(len(v), bool)
    keep[1:-1] = v[1:-1] != v[:-2]
    return t[keep], v[keep]
