"""`servetune report DIR [--out OUT]`: a plain argparse command (not a Hydra app)."""

from __future__ import annotations

import argparse
import sys

from rich.console import Console
from rich.markup import escape

from servetune.core.errors import ServetuneError


def parser() -> argparse.ArgumentParser:
    """The command's arguments (DIR, --out, --bootstrap, --seed, --no-html, --no-figures,
    --timeline, --setting)."""
    p = argparse.ArgumentParser(
        prog="servetune report",
        description="Collect every run under DIR (a `servetune simulate` run or multirun "
        "directory, or a folder of them) into one table (runs.parquet, runs.csv, "
        "points.csv), name the best setting per condition (best.csv), draw PNG "
        "figures (the Pareto front, latency CDFs, a timeline) and write one "
        "self-contained interactive HTML page (report.html).",
    )
    p.add_argument("dir", help="run or multirun directory (e.g. outputs/multirun/DATE/TIME)")
    p.add_argument("--out", default=None, help="output folder (default: DIR/report)")
    p.add_argument(
        "--bootstrap",
        type=int,
        default=1000,
        metavar="B",
        help="bootstrap resamples per scenario for confidence intervals (0: none)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the bootstrap")
    p.add_argument("--no-html", action="store_true", help="skip report.html")
    p.add_argument("--no-figures", action="store_true", help="skip the PNG figures")
    p.add_argument(
        "--timeline",
        default=None,
        metavar="RUN",
        help="the run whose timeline (its timeline.parquet, written by simulate "
        "with output.timeline=true) is drawn: a run folder relative to DIR, "
        "or its path (default: the first run of the best setting)",
    )
    p.add_argument(
        "--setting",
        action="append",
        default=[],
        metavar="KEY",
        help="treat swept KEY as a setting to choose (compared within a "
        "condition) rather than a condition (repeatable); policy, policy.* "
        "and grid.* keys are settings, every other swept key a condition",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the command; returns the exit status (2 for a user error)."""
    args = parser().parse_args(sys.argv[1:] if argv is None else argv)
    from servetune.reporting.console import print_report, wide_console
    from servetune.reporting.report import report

    try:
        rep = report(
            args.dir,
            args.out,
            n_boot=max(args.bootstrap, 0),
            seed=args.seed,
            figures=not args.no_figures,
            html=not args.no_html,
            timeline=args.timeline,
            settings=args.setting,
        )
    except ServetuneError as err:
        Console(stderr=True).print(
            f"[red]error:[/red] {escape(str(err))}", highlight=False, soft_wrap=True
        )
        return 2
    for message in rep.skipped:
        Console(stderr=True).print(
            f"[yellow]warning:[/yellow] left out {message}", highlight=False, soft_wrap=True
        )
    print_report(rep, wide_console())
    return 0
