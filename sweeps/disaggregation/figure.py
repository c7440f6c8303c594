"""Study (e) figure and tables: goodput of 2 prefill + 2 decode instances against the KV link
bandwidth, beside colocated serving on the same 4 GPUs, per prompt length (mean +- std over
seeds). Usage: python sweeps/disaggregation/figure.py outputs/study_disagg (after
`servetune report` on it)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from servetune.reporting.stats import format_ci, format_mean_std

PROMPT, P, BW = "workload.prompt.mean", "engine.prefill_instances", "hardware.kv_link_bytes_per_s"
COLS = (("goodput_rps", "goodput (req/s)", 1.0, "{:.2f}"),
        ("slo_attainment", "SLO attainment", 1.0, "{:.3f}"),
        ("ttft_p99_s", "P99 TTFT (s)", 1.0, "{:.2f}"),
        ("tpot_mean_s", "mean TPOT (ms)", 1e3, "{:.1f}"),
        ("tpot_p99_s", "P99 TPOT (ms)", 1e3, "{:.1f}"))


def table(points: pd.DataFrame) -> str:
    """Markdown: colocated once per prompt length, disaggregated per link bandwidth."""
    rows = ["| prompt mean | deployment | link (GB/s) | " + " | ".join(t for _, t, _, _ in COLS)
            + " |", "|---" * (len(COLS) + 3) + "|"]
    for prompt in sorted(points[PROMPT].unique()):
        sub = points[points[PROMPT] == prompt]
        col = sub[sub[P] == 0].iloc[:1]
        dis = sub[sub[P] > 0].sort_values(BW)
        for label, frame in (("colocated 4", col), ("2 prefill + 2 decode", dis)):
            for _, p in frame.iterrows():
                link = "-" if label.startswith("colocated") else f"{p[BW] / 1e9:g}"
                cells = [format_mean_std(p[f"{m}_mean"], p[f"{m}_std"], s, f)
                         + format_ci(p, m, s, f) for m, _, s, f in COLS]
                rows.append(f"| {prompt:g} | {label} | {link} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def figure(points: pd.DataFrame, out: Path) -> None:
    fig = Figure(figsize=(6.4, 4.0))
    ax = fig.subplots()
    for k, prompt in enumerate(sorted(points[PROMPT].unique())):
        sub = points[points[PROMPT] == prompt]
        dis = sub[sub[P] > 0].sort_values(BW)
        col = sub[sub[P] == 0].iloc[0]
        color = f"C{k}"
        ax.errorbar(dis[BW] / 1e9, dis["goodput_rps_mean"], yerr=dis["goodput_rps_std"],
                    marker="o", color=color, capsize=3,
                    label=f"2P + 2D, prompts ~{prompt:g} tokens")
        ax.axhline(col["goodput_rps_mean"], color=color, linestyle="--",
                   label=f"colocated, prompts ~{prompt:g} tokens")
        ax.axhspan(col["goodput_rps_mean"] - col["goodput_rps_std"],
                   col["goodput_rps_mean"] + col["goodput_rps_std"], color=color, alpha=0.12)
    ax.set_xscale("log")
    ax.set_xlabel("KV link bandwidth (GB/s)")
    ax.set_ylabel("goodput (req/s, TTFT <= 3 s, TPOT <= 12 ms)")
    ax.set_title("4 x H100, Llama-3-8B, 14 req/s: mean +- std over 3 seeds", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=130)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("sweep_dir", type=Path)
    args = ap.parse_args()
    points = pd.read_csv(args.sweep_dir / "report" / "points.csv")
    print(table(points))
    out = Path(__file__).with_name("figure.png")
    figure(points, out)
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
