"""Build a report: collect the runs, bootstrap, aggregate, choose the best setting per
condition, compare, write tables, PNGs and HTML."""

from __future__ import annotations

import dataclasses
import math
import os
from pathlib import Path

import pandas as pd

from servetune.core import inputs
from servetune.core.errors import OutputError
from servetune.core.files import ensure_dir, write_text, write_whole
from servetune.reporting import choose, stats
from servetune.reporting import fleet as fleets
from servetune.reporting import timeline as timelines
from servetune.reporting.collect import CONTEXT_KEYS, ReportError, collect
from servetune.reporting.numbers import fmt
from servetune.run import run_folder


@dataclasses.dataclass
class Report:
    """What `report` wrote to out_dir.

    runs: one row per scenario (runs.parquet / runs.csv), with M_ci_lo / M_ci_hi bootstrap
      intervals of each scenario's CI metrics; points: one row per point (points.csv), see
      stats.aggregate; comparisons: best point vs each other per headline metric
      (comparisons.csv), within each condition; verdicts: the same in sentences; keys: the
      point keys; files: paths; skipped: a message per damaged file left out
      (Collection.skipped); conditions / settings: the point keys split as choose.split_keys
      does; best: the best setting per condition with why (best.csv, choose.best_settings);
      timeline: the run whose timeline was drawn, or the note saying how to get one; fleet:
      the same run's autoscaled fleet (fleet.parquet, fleet_hourly.parquet; None when it had
      no autoscaler), with a note naming a file that could not be read.
    """

    out_dir: Path
    runs: pd.DataFrame
    points: pd.DataFrame
    comparisons: pd.DataFrame
    verdicts: list
    keys: list
    files: list
    skipped: list = dataclasses.field(default_factory=list)
    conditions: list = dataclasses.field(default_factory=list)
    settings: list = dataclasses.field(default_factory=list)
    best: pd.DataFrame = dataclasses.field(default_factory=pd.DataFrame)
    timeline: timelines.Timeline | None = None
    fleet: fleets.Fleet | None = None


# what every report writes
TABLES = ("runs.parquet", "runs.csv", "points.csv", "comparisons.csv", "best.csv")


def _nearest_existing(path: Path) -> Path:
    """`path` or its nearest ancestor that exists (where creating `path` starts); os.path's
    tests, which say False rather than raise where a folder cannot be searched."""
    for at in (path, *path.parents):
        if os.path.lexists(at):
            return at
    return Path(".")


def _check_out(out_dir: Path, html: bool) -> None:
    """OutputError naming --out when the report could not be written there: a file where the
    folder (or a folder above it) should be, a folder where one of the report's files should
    be (runs.csv, report.html, fig_*.png), or a read-only folder to create it in. Checked
    before the work, as far as it can be seen; writing still refuses the rest (write_whole:
    the superuser passes os.access on a read-only folder, not on a read-only file system)."""
    base = _nearest_existing(out_dir)
    if not os.path.isdir(base):
        where = out_dir if base == out_dir else f"{out_dir}: {base}"
        raise OutputError(f"--out {where}: is a file; expected a folder (new or existing)")
    names = TABLES + (("report.html",) if html else ())
    taken = [out_dir / n for n in names] + sorted(out_dir.glob("fig_*.png"))
    for path in taken:
        if os.path.isdir(path):
            raise OutputError(
                f"--out {out_dir}: {path.name} is a folder; expected a file the "
                f"report replaces (move the folder away); nothing was written"
            )
    if not os.access(base, os.W_OK | os.X_OK):
        raise OutputError(
            f"--out {out_dir}: cannot be an output folder ({base} is read-only "
            f"for this user); nothing was written"
        )


def report(
    root: Path | str,
    out: Path | str | None = None,
    n_boot: int = 1000,
    seed: int = 0,
    figures: bool = True,
    html: bool = True,
    timeline: str | None = None,
    settings: list | tuple = (),
) -> Report:
    """Report on every run under `root` into `out` (default root/report).

    Writes runs.parquet, runs.csv, points.csv, comparisons.csv, best.csv (the best setting per
    condition), with figures=True fig_<key>.png per point key, fig_pareto.png,
    fig_latency_cdf.png, fig_timeline.png (when the chosen run has timeline.parquet) and
    fig_fleet.png (when that run had an autoscaler: its replicas, cumulative cost in USD and
    hourly SLO attainment over simulated hours, from fleet.parquet and fleet_hourly.parquet),
    and report.html (html=True). n_boot bootstrap resamples per scenario (0: no bootstrap
    intervals); `seed` makes them reproducible. `timeline` names the run whose timeline and
    fleet are drawn (default: the best setting's first run); `settings` adds keys to the
    settings (choose.is_setting). `root` and `out` may start with ~ or ~user; an unknown user,
    or an `out` the report cannot be written into (see _check_out), is an error before any
    work, and nothing is written.
    """
    root = inputs.expand(root, "DIR", ReportError)
    out_dir = inputs.expand(out, "--out", OutputError) if out is not None else root / "report"
    _check_out(out_dir, html)  # before the work, not after it
    col = collect(root, exclude=out_dir)
    unknown = [k for k in settings if k not in col.keys]
    if unknown:  # a typo would silently leave the key a condition
        raise ReportError(
            f"--setting {unknown[0]}: no run under {root} sets it; expected one "
            f"of the keys the runs differ in: {', '.join(col.keys) or '(none)'}"
        )
    conditions, setting_keys = choose.split_keys(col.keys, tuple(settings))
    reps = stats.bootstrap(col, n_boot, seed)
    runs = stats.runs_ci(col, reps)
    points = stats.aggregate(col, reps)
    best = choose.best_settings(points, conditions, setting_keys)
    comparisons = stats.compare(points, conditions=conditions, keys=col.keys)
    verdicts = stats.verdicts(comparisons)
    chosen = timelines.choose(col, best, timeline)
    tl = timelines.read(col, *chosen)
    fl = fleets.read(col, *chosen)
    cdfs = None
    if figures or html:
        from servetune.reporting.latency import point_cdfs

        cdfs = point_cdfs(col)
    ensure_dir(out_dir)
    # one report at a time; the tables, figures and page appear as one set, or none
    with run_folder.claimed_set(out_dir, "servetune report") as stage:
        files = [stage / name for name in TABLES]
        write_whole(files[0], lambda tmp: runs.to_parquet(tmp, index=False))
        for path, table in zip(files[1:], (runs, points, comparisons, best), strict=True):
            write_whole(path, lambda tmp, table=table: table.to_csv(tmp, index=False))
        if figures:
            from servetune.reporting import figures as figs

            files += figs.draw(points, col.keys, stage)
            files += [
                path
                for path in (
                    figs.draw_pareto(points, conditions, setting_keys, best, stage),
                    figs.draw_cdfs(points, cdfs, best, stage, keys=col.keys),
                    figs.draw_timeline(tl, stage),
                    figs.draw_fleet(fl, stage),
                )
                if path is not None
            ]
        if html:
            from servetune.reporting.html import page

            path = stage / "report.html"
            write_text(
                path,
                page(
                    points,
                    runs,
                    col.keys,
                    verdicts,
                    _meta(col, runs, points, n_boot),
                    best=best,
                    conditions=conditions,
                    settings=setting_keys,
                    cdfs=cdfs,
                    timeline=tl,
                    fleet=fl,
                ),
            )
            files.append(path)
    files = [out_dir / path.name for path in files]
    return Report(
        out_dir=out_dir,
        runs=runs,
        points=points,
        comparisons=comparisons,
        verdicts=verdicts,
        keys=col.keys,
        files=files,
        skipped=col.skipped,
        conditions=conditions,
        settings=setting_keys,
        best=best,
        timeline=tl,
        fleet=fl,
    )


def _meta(col, runs: pd.DataFrame, points: pd.DataFrame, n_boot: int) -> dict:
    """The facts at the top of the page: where, how many, which keys and targets."""
    meta = {
        "root": str(col.root),
        "runs": runs["run"].nunique(),
        "scenarios": len(runs),
        "points": len(points),
        "point keys": ", ".join(col.keys) or "none (one point)",
        "seeds per point": " / ".join(str(n) for n in sorted(set(points["n"]))),
        "bootstrap resamples": n_boot,
    }
    if col.skipped:
        meta["left out (damaged)"] = "; ".join(col.skipped)
    for k in CONTEXT_KEYS:
        if k in runs and runs[k].notna().any():
            meta[k] = ", ".join(str(v) for v in dict.fromkeys(runs[k].dropna()))
    for k, name in (
        ("slo.ttft_s", "SLO TTFT target"),
        ("slo.tpot_s", "SLO TPOT target"),
        ("slo.e2e_s", "SLO E2E target"),
    ):
        targets = choose.targets_s(runs, k)
        if targets:
            meta[name] = ", ".join(f"{fmt(t * 1000.0)} ms" for t in targets)
    given = [
        float(v)
        for v in runs.get("tune.objective.slo_target", pd.Series(dtype=float))
        if isinstance(v, (int, float)) and math.isfinite(v)
    ]
    meta["SLO attainment target"] = (
        ", ".join(fmt(v) for v in dict.fromkeys(given))
        or f"{fmt(choose.DEFAULT_SLO_TARGET)} (the default; the runs do not say)"
    )
    return meta
