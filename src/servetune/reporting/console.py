"""Rich console tables of a report: the best setting per condition, the points (latencies in
ms) and the verdicts (one screen)."""

from __future__ import annotations

import math
import sys

import pandas as pd
from rich.console import Console
from rich.table import Table
from rich.text import Text

from servetune.reporting.collect import short_names
from servetune.reporting.numbers import fmt
from servetune.reporting.stats import NO_INFO_SEEDS, NO_INFO_WIDTH, intervals
from servetune.reporting.units import scale

# (metric, header, factor from the stored unit to the shown one)
COLUMNS = (
    ("goodput_rps", "goodput rps", 1.0),
    ("slo_attainment", "SLO att.", 1.0),
    ("ttft_p99_s", "P99 TTFT ms", scale("ttft_p99_s")),
    ("tpot_p99_s", "P99 TPOT ms", scale("tpot_p99_s")),
    ("useful_tokens_per_dollar", "useful tok/$", 1.0),
)
SHORT_NOTES = {NO_INFO_SEEDS: "no info: all seeds equal", NO_INFO_WIDTH: "no info: zero width"}


def wide_console() -> Console:
    """A console for tables: the terminal's width, or 160 columns when writing to a file or a
    pipe (logs are not 80 columns wide)."""
    return Console() if sys.stdout.isatty() else Console(width=160)


def _num(v: float, factor: float, digits: int) -> str:
    """v x factor with `digits` significant digits; whole from 100 up when scaled (ms)."""
    v = v * factor
    return f"{v:.0f}" if factor != 1.0 and math.isfinite(v) and abs(v) >= 100 else fmt(v, digits)


def cell(row: pd.Series, metric: str, ci: bool, factor: float = 1.0, note: str = "") -> str:
    """`mean ±std [lo, hi]` of one point's metric, times `factor` (1000: seconds shown in ms,
    whole from 100 ms up): the std where it is a spread (not where every seed gave the same
    value), the bootstrap interval when `ci` and it has a width; `note` (from
    stats.intervals) shortened where the point has no information about its uncertainty."""
    text = _num(row.get(f"{metric}_mean", math.nan), factor, 3)
    std = row.get(f"{metric}_std", math.nan)
    short = SHORT_NOTES.get(note)
    if isinstance(std, float) and math.isfinite(std) and note != NO_INFO_SEEDS:
        text += f" ±{_num(std, factor, 2)}"
    lo, hi = row.get(f"{metric}_ci_lo", math.nan), row.get(f"{metric}_ci_hi", math.nan)
    if ci and isinstance(lo, float) and math.isfinite(lo) and lo != hi:
        text += f" [{_num(lo, factor, 3)}, {_num(hi, factor, 3)}]"
    return text + (f" ({short})" if short else "")


def points_table(
    points: pd.DataFrame,
    keys: list,
    title: str,
    max_rows: int = 20,
    columns=COLUMNS,
    ci: bool = True,
) -> Table:
    """One row per point: its key values, seeds, and mean ±std of each column (entries
    (metric, header) or (metric, header, factor): factor 1000 shows seconds as ms), with the
    bootstrap interval [lo, hi] of P99 TTFT when `ci`; a point whose seeds all gave the same
    value, or whose interval has zero width, says it has no information instead."""
    t = Table(title=title, show_header=True, header_style="bold")
    shown = keys or ["point"]
    names = short_names(shown)
    for k in shown:
        t.add_column(names[k], justify="right", no_wrap=True)
    t.add_column("n", justify="right")
    columns = [(c[0], c[1], c[2] if len(c) > 2 else 1.0) for c in columns]
    for _, label, _ in columns:
        t.add_column(label, justify="right", overflow="fold")
    notes = {
        m: intervals(points, m)[2] if f"{m}_mean" in points else [""] * len(points)
        for m, _, _ in columns
    }
    for i, (_, row) in enumerate(points.head(max_rows).iterrows()):
        t.add_row(
            *[fmt(row[k]) for k in shown],
            str(int(row["n"])),
            *[cell(row, m, ci and m == "ttft_p99_s", f, notes[m][i]) for m, _, f in columns],
        )
    if len(points) > max_rows:
        t.caption = f"... and {len(points) - max_rows} more points"
    return t


def best_table(best: pd.DataFrame) -> Table:
    """One row per condition: the best setting by the tuner's order and why."""
    t = Table(
        title="best setting per condition (meets the SLO target, then most useful tokens per $)",
        show_header=True,
        header_style="bold",
    )
    for name, opts in (
        ("condition", {"no_wrap": True}),
        ("best setting", {"no_wrap": True}),
        ("meets", {}),
        ("why", {"overflow": "fold"}),
    ):
        t.add_column(name, **opts)
    for row in best.itertuples(index=False):
        t.add_row(
            *(
                Text(str(v))
                for v in (row.condition, row.setting, "yes" if row.meets_target else "no", row.why)
            )
        )
    return t


def print_report(rep, console: Console | None = None) -> None:
    """The points table, the best setting per condition, the verdicts, the timeline, the
    fleet (an autoscaled run) and the files written."""
    console = console or Console()
    console.print(
        points_table(
            rep.points,
            rep.keys,
            f"{len(rep.runs)} scenarios in {rep.runs['run'].nunique()} run(s), "
            f"{len(rep.points)} point(s): mean ±std [95% CI]",
        )
    )
    if len(rep.best):
        console.print(best_table(rep.best))
    for line in rep.verdicts:
        console.print(f"- {line}", highlight=False, soft_wrap=True, markup=False)
    tl = rep.timeline
    if tl is not None:
        text = (
            f"timeline: run {tl.name} ({tl.why}) in fig_timeline.png and report.html"
            if tl.table is not None
            else f"timeline: {tl.note}"
        )
        console.print(text, highlight=False, soft_wrap=True, markup=False)
    fl = getattr(rep, "fleet", None)
    if fl is not None:  # an autoscaled run (reporting/fleet.py)
        if fl.table is not None:
            line = f"fleet: run {fl.name} in fig_fleet.png and report.html"
            console.print(line, highlight=False, soft_wrap=True, markup=False)
        if fl.note:
            console.print(f"fleet: {fl.note}", highlight=False, soft_wrap=True, markup=False)
    console.print(
        f"wrote {rep.out_dir}/: " + ", ".join(p.name for p in rep.files),
        highlight=False,
        soft_wrap=True,
    )
