"""Build a report: collect the runs, bootstrap, aggregate, compare, write tables, PNGs, HTML."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pandas as pd

from servetune.errors import OutputError
from servetune.files import ensure_dir, write_text, write_whole
from servetune.reporting import stats
from servetune.reporting.collect import CONTEXT_KEYS, collect


@dataclasses.dataclass
class Report:
    """What `report` wrote to out_dir.

    runs: one row per scenario (runs.parquet / runs.csv), with M_ci_lo / M_ci_hi bootstrap
      intervals of each scenario's CI metrics; points: one row per point (points.csv), see
      stats.aggregate; comparisons: best point vs each other per headline metric
      (comparisons.csv); verdicts: the same in sentences; keys: the point keys; files: paths;
      skipped: a message per damaged file left out (Collection.skipped).
    """

    out_dir: Path
    runs: pd.DataFrame
    points: pd.DataFrame
    comparisons: pd.DataFrame
    verdicts: list
    keys: list
    files: list
    skipped: list = dataclasses.field(default_factory=list)


def report(root: Path | str, out: Path | str | None = None, n_boot: int = 1000, seed: int = 0,
           figures: bool = True, html: bool = True) -> Report:
    """Report on every run under `root` into `out` (default root/report).

    Writes runs.parquet, runs.csv, points.csv, comparisons.csv, fig_<key>.png per point key
    (figures=True) and report.html (html=True). n_boot bootstrap resamples per scenario
    (0: no bootstrap intervals); `seed` makes them reproducible.
    """
    root = Path(root)
    out_dir = Path(out) if out is not None else root / "report"
    if out_dir.exists() and not out_dir.is_dir():  # before the work, not after it
        raise OutputError(f"--out {out_dir}: is a file; expected a folder (new or existing)")
    col = collect(root, exclude=out_dir)
    reps = stats.bootstrap(col, n_boot, seed)
    runs = stats.runs_ci(col, reps)
    points = stats.aggregate(col, reps)
    comparisons = stats.compare(points)
    verdicts = stats.verdicts(comparisons)
    ensure_dir(out_dir)
    files = [out_dir / "runs.parquet", out_dir / "runs.csv", out_dir / "points.csv",
             out_dir / "comparisons.csv"]
    write_whole(files[0], lambda tmp: runs.to_parquet(tmp, index=False))
    for path, table in zip(files[1:], (runs, points, comparisons)):
        write_whole(path, lambda tmp, table=table: table.to_csv(tmp, index=False))
    if figures:
        from servetune.reporting.figures import draw
        files += draw(points, col.keys, out_dir)
    if html:
        from servetune.reporting.html import page
        meta = {"root": str(col.root), "runs": runs["run"].nunique(), "scenarios": len(runs),
                "points": len(points),
                "point keys": ", ".join(col.keys) or "none (one point)",
                "seeds per point": " / ".join(str(n) for n in sorted(set(points["n"]))),
                "bootstrap resamples": n_boot}
        if col.skipped:
            meta["left out (damaged)"] = "; ".join(col.skipped)
        for k in CONTEXT_KEYS:
            if k in runs and runs[k].notna().any():
                meta[k] = ", ".join(str(v) for v in dict.fromkeys(runs[k].dropna()))
        path = out_dir / "report.html"
        write_text(path, page(points, runs, col.keys, verdicts, meta))
        files.append(path)
    return Report(out_dir=out_dir, runs=runs, points=points, comparisons=comparisons,
                  verdicts=verdicts, keys=col.keys, files=files, skipped=col.skipped)
