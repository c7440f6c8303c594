"""Figure and tables of study (k): vLLM's async scheduling on vs off across load.

    python sweeps/async_scheduling/figure.py outputs/study_async [--out FIGURE.png]

Reads <root>/report/points.csv and runs.csv (written by `servetune report <root>`), draws P50 and
P99 TTFT, mean and P99 TPOT, output throughput and useful tokens per dollar against the rate
scale, one line per `engine.async_scheduling`, bars +- std over seeds; prints the README's table
and, per rate, async's ratio to sync seed by seed (each seed replays the same arrivals under both
settings, so the ratios are paired).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from servetune.reporting.stats import format_mean_std

X, MODE = "workload.rate_scale", "engine.async_scheduling"
METRICS = (
    ("ttft_p50_s", "P50 TTFT (ms)", 1e3, "{:.0f}"),
    ("ttft_p99_s", "P99 TTFT (ms)", 1e3, "{:.0f}"),
    ("tpot_mean_s", "mean TPOT (ms)", 1e3, "{:.1f}"),
    ("tpot_p99_s", "P99 TPOT (ms)", 1e3, "{:.1f}"),
    ("output_tokens_per_s", "output tokens/s", 1.0, "{:.0f}"),
    ("useful_tokens_per_dollar", "useful tokens per dollar (M)", 1e-6, "{:.2f}"),
)


def _mode(value) -> bool:
    """engine.async_scheduling as written in the report's tables (a bool or its text)."""
    return str(value).strip().lower() == "true"


def table(points: pd.DataFrame) -> str:
    """The README's table: mean +- std over seeds per rate scale and mode."""
    head = "| rate scale | async | " + " | ".join(t for _, t, _, _ in METRICS) + " |"
    rows = [head, "|---" * (len(METRICS) + 2) + "|"]
    modes = points[MODE].map(_mode)
    for x in sorted(points[X].unique()):
        for on in (False, True):
            p = points[(points[X] == x) & (modes == on)].iloc[0]
            cells = [format_mean_std(p[f"{m}_mean"], p[f"{m}_std"], s, f) for m, _, s, f in METRICS]
            rows.append(f"| {x:g} | {'on' if on else 'off'} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def paired(runs: pd.DataFrame) -> str:
    """Per rate scale, async / sync of each metric seed by seed: mean +- std over seeds."""
    modes = runs[MODE].map(_mode)
    head = "| rate scale | " + " | ".join(f"{t}: on / off" for _, t, _, _ in METRICS) + " |"
    rows = [head, "|---" * (len(METRICS) + 1) + "|"]
    for x in sorted(runs[X].unique()):
        at = runs[X] == x
        on, off = (runs[at & (modes == a)].set_index("seed") for a in (True, False))
        cells = []
        for metric, *_ in METRICS:
            r = (on[metric] / off[metric]).dropna().to_numpy(np.float64)
            spread = r.std(ddof=1) if len(r) > 1 else np.nan
            cells.append(format_mean_std(r.mean(), spread, 1.0, "{:.3f}"))
        rows.append(f"| {x:g} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def draw(points: pd.DataFrame, out: Path, title: str) -> None:
    """Six panels against the rate scale, one line per mode."""
    fig = Figure(figsize=(13, 7.2), layout="constrained")
    axes = fig.subplots(2, 3).ravel()
    modes = points[MODE].map(_mode)
    for k, on in enumerate((False, True)):
        g = points[modes == on].sort_values(X)
        x = g[X].to_numpy(np.float64)
        for ax, (metric, _, scale, _) in zip(axes, METRICS, strict=True):
            y = g[f"{metric}_mean"].to_numpy(np.float64) * scale
            err = np.nan_to_num(g[f"{metric}_std"].to_numpy(np.float64)) * scale
            label = "async scheduling" if on else "synchronous"
            ax.errorbar(x, y, yerr=err, color=f"C{k}", marker="o", ms=4, capsize=3, label=label)
    for ax, (metric, panel, _, _) in zip(axes, METRICS, strict=True):
        ax.set_title(panel, fontsize=10)
        if metric.startswith("ttft"):  # milliseconds below saturation, tens of seconds above
            ax.set_yscale("log")
        ax.set_xlabel("rate scale (x the trace's recorded rate)")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    n = sorted(set(points["n"]))
    fig.suptitle(
        f"{title}: mean over {'/'.join(str(v) for v in n)} seeds, bars +- std", fontsize=11
    )
    fig.savefig(out, dpi=100)


def main() -> None:
    """Draw the figure and print the tables."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", type=Path, help="the multirun folder (with report/points.csv)")
    ap.add_argument("--out", type=Path, default=Path(__file__).with_name("figure.png"))
    ap.add_argument(
        "--title", default="Async scheduling, Llama-3-8B on 1 x H100, Azure conversation"
    )
    args = ap.parse_args()
    points = pd.read_csv(args.root / "report" / "points.csv")
    draw(points, args.out, args.title)
    print(table(points))
    print()
    print(paired(pd.read_csv(args.root / "report" / "runs.csv")))
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
