"""Figure of the Optuna study: every trial's log(useful tokens per USD), whether it met the SLO
target, the best so far (penalized objective), vLLM's defaults and the 576-point grid's best.

    python sweeps/optuna_policy/figure.py outputs/study_optuna [--defaults 15.7349]
        [--grid-best 15.7786] [--out sweeps/optuna_policy/figure.png]

Reads each trial folder's metrics.json (useful_tokens_per_dollar, slo_attainment) and
objective.json (the penalized objective Optuna maximized); writes the PNG whole or not at all.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

SLO_TARGET = 0.99


def trials(sweep: Path) -> list[dict]:
    """[{trial, log_useful, met, objective}] of the numbered trial folders under `sweep`."""
    rows = []
    for folder in sorted((p for p in sweep.iterdir() if p.name.isdigit()), key=lambda p: int(p.name)):
        try:
            m = json.loads((folder / "metrics.json").read_text())
            obj = json.loads((folder / "objective.json").read_text())["objective"]
        except (OSError, ValueError, KeyError) as err:
            print(f"warning: {folder}: skipped ({err})", file=sys.stderr)
            continue
        useful = float(m["useful_tokens_per_dollar"])
        rows.append({"trial": int(folder.name), "objective": float(obj),
                     "log_useful": math.log(useful) if useful > 0 else float("nan"),
                     "met": float(m["slo_attainment"]) >= SLO_TARGET})
    return rows


def _panel(ax, rows, defaults: float, grid_best: float, zoom: bool) -> None:
    met = [r for r in rows if r["met"]]
    missed = [r for r in rows if not r["met"]]
    ax.scatter([r["trial"] for r in met], [r["log_useful"] for r in met], s=20, c="tab:green",
               label="trial, SLO met")
    ax.scatter([r["trial"] for r in missed], [r["log_useful"] for r in missed], s=20, c="tab:red",
               marker="x", label="trial, SLO missed")
    best, path, feasible = -math.inf, [], False
    for r in rows:  # the penalized best, from the first trial that met the SLO target on
        best = max(best, r["objective"])
        feasible |= r["met"]
        path.append(best if feasible else float("nan"))
    ax.step([r["trial"] for r in rows], path, where="post", c="black", lw=1,
            label="best so far (penalized)")
    ax.axhline(defaults, c="gray", ls="--", lw=1, label="vLLM 0.32 defaults (SLO missed)")
    ax.axhline(grid_best, c="tab:blue", ls=":", lw=1, label="576-point grid best")
    ax.set_xlabel("trial")
    ax.set_ylabel("log(useful tokens per USD)")
    finite = [v for v in path if math.isfinite(v)]
    top = max([grid_best, *finite])
    if zoom:
        ax.set_ylim(min(defaults, top) - 0.04, top + 0.006)
        ax.set_title("zoom: top of the range")
    else:
        low = min(r["log_useful"] for r in rows if math.isfinite(r["log_useful"]))
        ax.set_ylim(math.floor(low), math.ceil(top))
        ax.set_title(f"{len(rows)} TPE trials (10 random first)")
        ax.legend(fontsize=8, loc="lower right")
    ax.grid(alpha=0.3)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sweep", type=Path, help="the study's hydra.sweep.dir")
    ap.add_argument("--defaults", type=float, default=15.7349,
                    help="log(useful tokens per USD) of vLLM 0.32's defaults (bench_tune)")
    ap.add_argument("--grid-best", type=float, default=15.7786,
                    help="log(useful tokens per USD) of the grid's best (bench_tune)")
    ap.add_argument("--out", type=Path, default=Path(__file__).with_name("figure.png"))
    args = ap.parse_args(argv)
    if not args.sweep.is_dir():
        print(f"error: {args.sweep}: not a folder", file=sys.stderr)
        return 2
    rows = trials(args.sweep)
    if not rows:
        print(f"error: {args.sweep}: no trial folders with metrics.json", file=sys.stderr)
        return 2
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    for ax, zoom in zip(axes, (False, True)):
        _panel(ax, rows, args.defaults, args.grid_best, zoom)
    fig.tight_layout()
    fd, tmp = tempfile.mkstemp(dir=args.out.parent, prefix=f".{args.out.name}.", suffix=".png")
    os.close(fd)
    try:
        fig.savefig(tmp, dpi=100)
        os.replace(tmp, args.out)
    finally:
        Path(tmp).unlink(missing_ok=True)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
