"""Figure and table of study (f): capacity, speed and quality against weight and KV precision.

    python sweeps/quantization/figure.py outputs/study_quant [--out sweeps/quantization/figure.png]

Reads <root>/report/points.csv (written by `servetune report <root>`), draws KV capacity,
throughput, mean TPOT, quality failure rate, goodput and useful tokens per dollar against weight
bits, one line per KV precision, error bars +- std over seeds, and prints the README's table.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from servetune.reporting.stats import format_mean_std

W, KV = "model.weight_bits", "model.kv_bits"
PANELS = (
    ("kv_blocks", "KV capacity (blocks of 16 tokens)", 1.0),
    ("throughput_rps", "throughput (completed req/s)", 1.0),
    ("tpot_mean_s", "mean TPOT (ms)", 1e3),
    ("quality_failure_rate", "failed task check (% of completed)", 100.0),
    ("goodput_rps", "goodput (qualifying req/s)", 1.0),
    ("useful_tokens_per_dollar", "useful tokens per $ (millions)", 1e-6),
)
TABLE = (("kv_blocks", "KV blocks", 1.0, "{:.0f}"),
         ("throughput_rps", "throughput (req/s)", 1.0, "{:.2f}"),
         ("tpot_mean_s", "mean TPOT (ms)", 1e3, "{:.1f}"),
         ("tpot_p99_s", "P99 TPOT (ms)", 1e3, "{:.0f}"),
         ("ttft_p99_s", "P99 TTFT (s)", 1.0, "{:.2f}"),
         ("quality_failure_rate", "quality failures (%)", 100.0, "{:.2f}"),
         ("slo_attainment", "SLO attainment", 1.0, "{:.3f}"),
         ("goodput_rps", "goodput (req/s)", 1.0, "{:.2f}"),
         ("goodput_lost_to_quality_rps", "goodput lost to quality (req/s)", 1.0, "{:.3f}"),
         ("useful_tokens_per_dollar", "useful tok/$ (M)", 1e-6, "{:.3f}"))


def table(points: pd.DataFrame) -> str:
    rows = ["| weight bits | KV bits | " + " | ".join(t for _, t, _, _ in TABLE) + " |",
            "|---" * (len(TABLE) + 2) + "|"]
    for _, p in points.sort_values([W, KV], ascending=False).iterrows():
        cells = [format_mean_std(p[f"{m}_mean"], p[f"{m}_std"], s, f) for m, _, s, f in TABLE]
        rows.append(f"| {int(p[W])} | {int(p[KV])} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def draw(points: pd.DataFrame, out: Path, title: str) -> None:
    fig = Figure(figsize=(13, 7.2), layout="constrained")
    axes = fig.subplots(2, 3).ravel()
    wbits = sorted(points[W].unique(), reverse=True)  # 16 -> 4, left to right
    for k, kv in enumerate(sorted(points[KV].unique(), reverse=True)):
        g = points[points[KV] == kv].set_index(W).reindex(wbits)
        x = np.arange(len(wbits)) + (k - 1) * 0.06
        for ax, (metric, _, scale) in zip(axes, PANELS):
            y = g[f"{metric}_mean"].to_numpy(np.float64) * scale
            err = np.nan_to_num(g[f"{metric}_std"].to_numpy(np.float64)) * scale
            ax.errorbar(x, y, yerr=err, color=f"C{k}", marker="o", ms=4, capsize=3,
                        label=f"KV {int(kv)}-bit")
            if metric == "goodput_rps":  # what quality cost: goodput had every request passed
                ideal = y + g["goodput_lost_to_quality_rps_mean"].to_numpy(np.float64)
                ax.plot(x, ideal, color=f"C{k}", ls=":", lw=1.2,
                        label="dotted: if every check passed" if k == 0 else None)
    for ax, (metric, panel, _) in zip(axes, PANELS):
        ax.set_title(panel, fontsize=10)
        ax.set_xticks(range(len(wbits)), [f"{int(w)}-bit" for w in wbits])
        ax.set_xlabel("weights")
        ax.grid(alpha=0.3)
        if metric == "kv_blocks":
            ax.set_yscale("log")
    axes[0].legend(fontsize=8)
    axes[4].legend(fontsize=8, loc="lower right")
    n = sorted(set(points["n"]))
    fig.suptitle(f"{title}: mean over {'/'.join(str(v) for v in n)} seeds per point, "
                 f"bars +- std", fontsize=11)
    fig.savefig(out, dpi=100)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", type=Path, help="the multirun folder (with report/points.csv)")
    ap.add_argument("--out", type=Path, default=Path(__file__).with_name("figure.png"))
    ap.add_argument("--title", default="Llama-3-70B on 2 x H100, Azure conv trace 0-10 min")
    args = ap.parse_args()
    points = pd.read_csv(args.root / "report" / "points.csv")
    draw(points, args.out, args.title)
    print(table(points))
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
