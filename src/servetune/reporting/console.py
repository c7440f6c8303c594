"""Rich console tables of a report's points and verdicts (one screen)."""

from __future__ import annotations

import math
import sys

import pandas as pd
from rich.console import Console
from rich.table import Table

from servetune.reporting.collect import short_names
from servetune.reporting.numbers import fmt

COLUMNS = (("goodput_rps", "goodput rps"), ("slo_attainment", "SLO att."),
           ("ttft_p99_s", "P99 TTFT s"), ("tpot_p99_s", "P99 TPOT s"),
           ("useful_tokens_per_dollar", "useful tok/$"))


def wide_console() -> Console:
    """A console for tables: the terminal's width, or 160 columns when writing to a file or a
    pipe (logs are not 80 columns wide)."""
    return Console() if sys.stdout.isatty() else Console(width=160)


def _cell(row: pd.Series, metric: str, ci: bool) -> str:
    text = fmt(row.get(f"{metric}_mean"), 3)
    std = row.get(f"{metric}_std", math.nan)
    if isinstance(std, float) and math.isfinite(std):
        text += f" ±{fmt(std, 2)}"
    lo, hi = row.get(f"{metric}_ci_lo", math.nan), row.get(f"{metric}_ci_hi", math.nan)
    if ci and isinstance(lo, float) and math.isfinite(lo):
        text += f" [{fmt(lo, 3)}, {fmt(hi, 3)}]"
    return text


def points_table(points: pd.DataFrame, keys: list, title: str, max_rows: int = 20,
                 columns=COLUMNS, ci: bool = True) -> Table:
    """One row per point: its key values, seeds, and mean ±std of each column, with the
    bootstrap interval [lo, hi] of P99 TTFT when `ci`."""
    t = Table(title=title, show_header=True, header_style="bold")
    shown = keys or ["point"]
    names = short_names(shown)
    for k in shown:
        t.add_column(names[k], justify="right", no_wrap=True)
    t.add_column("n", justify="right")
    for _, label in columns:
        t.add_column(label, justify="right", overflow="fold")
    for _, row in points.head(max_rows).iterrows():
        t.add_row(*[fmt(row[k]) for k in shown], str(int(row["n"])),
                  *[_cell(row, m, ci and m == "ttft_p99_s") for m, _ in columns])
    if len(points) > max_rows:
        t.caption = f"... and {len(points) - max_rows} more points"
    return t


def print_report(rep, console: Console | None = None) -> None:
    """The points table, the verdicts and the files written."""
    console = console or Console()
    console.print(points_table(rep.points, rep.keys,
                               f"{len(rep.runs)} scenarios in {rep.runs['run'].nunique()} run(s), "
                               f"{len(rep.points)} point(s): mean ±std [95% CI]"))
    for line in rep.verdicts:
        console.print(f"- {line}", highlight=False, soft_wrap=True)
    console.print(f"wrote {rep.out_dir}/: " + ", ".join(p.name for p in rep.files),
                  highlight=False, soft_wrap=True)
