"""Figure and table of study (c): a utilization maximizer vs a value-aware scheduler.

    python sweeps/utilization_vs_value/figure.py outputs/study_uv [--out ...figure.png]

Reads <root>/report/runs.csv (written by `servetune report <root>`), derives per scenario the
useful tokens per iteration (useful_tokens / iterations) and the split of SLO violations into
requests served late and requests refused (rejected), aggregates mean and std over seeds, draws
utilization, useful tokens per iteration, wasted-token ratio, SLO violations, goodput and useful
tokens per dollar against the rate scale, one line per policy x KV-pressure arm, and prints the
README's table with the pairs of arms that cannot be told apart at each rate (mean +- std,
widened to the bootstrap interval where the report has one).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from servetune.reporting.stats import format_ci, format_mean_std, interval

X, POL, KV = "workload.rate_scale", "policy", "engine.kv_pressure"
ARMS = (("utilization_max", "preempt"), ("utilization_max", "reject"),
        ("value_aware", "preempt"), ("value_aware", "reject"))
STYLE = {("utilization_max", "preempt"): ("C3", "-"), ("utilization_max", "reject"): ("C3", "--"),
         ("value_aware", "preempt"): ("C0", "--"), ("value_aware", "reject"): ("C0", "-")}
PANELS = (
    ("utilization", "utilization (busy / provisioned)", 1.0),
    ("useful_per_iteration", "useful tokens per iteration", 1.0),
    ("wasted_token_ratio", "wasted-token ratio", 1.0),
    ("violations", "SLO violations (fraction of requests)", 1.0),
    ("goodput_rps", "goodput (qualifying req/s)", 1.0),
    ("useful_tokens_per_dollar", "useful tokens per $ (millions)", 1e-6),
)
COLS = (("utilization", "utilization", 1.0, "{:.3f}"),
        ("useful_per_iteration", "useful tok / iteration", 1.0, "{:.1f}"),
        ("wasted_token_ratio", "wasted-token ratio", 1.0, "{:.3f}"),
        ("violations", "SLO violations", 1.0, "{:.3f}"),
        ("late", "served late", 1.0, "{:.3f}"),
        ("refused", "rejected", 1.0, "{:.3f}"),
        ("tpot_p99_s", "P99 TPOT (ms)", 1e3, "{:.0f}"),
        ("ttft_p99_s", "P99 TTFT (s)", 1.0, "{:.2f}"),
        ("goodput_rps", "goodput (req/s)", 1.0, "{:.2f}"),
        ("useful_tokens_per_dollar", "useful tok/$ (M)", 1e-6, "{:.2f}"),
        ("preemptions", "preemptions", 1.0, "{:.0f}"))


def derive(runs: pd.DataFrame) -> pd.DataFrame:
    runs = runs.copy()
    runs["useful_per_iteration"] = runs["useful_tokens"] / runs["iterations"]
    runs["violations"] = 1.0 - runs["slo_attainment"]
    runs["refused"] = runs["n_rejected"] / runs["n_requests"]
    runs["late"] = runs["violations"] - runs["refused"]
    return runs


def aggregate(runs: pd.DataFrame, points: pd.DataFrame) -> pd.DataFrame:
    cols = sorted({m for m, *_ in COLS} | {m for m, *_ in PANELS})
    agg = runs.groupby([X, POL, KV])[cols].agg(["mean", "std"])
    agg.columns = [f"{m}_{s}" for m, s in agg.columns]
    agg = agg.reset_index()
    ci = [c for c in points.columns if c.endswith(("_ci_lo", "_ci_hi"))]
    return agg.merge(points[[X, POL, KV, "n"] + ci], on=[X, POL, KV], how="left")


def table(agg: pd.DataFrame) -> str:
    rows = ["| rate scale | policy | kv_pressure | " + " | ".join(t for _, t, _, _ in COLS) + " |",
            "|---" * (len(COLS) + 3) + "|"]
    for x in sorted(agg[X].unique()):
        for pol, kv in ARMS:
            p = agg[(agg[X] == x) & (agg[POL] == pol) & (agg[KV] == kv)]
            if p.empty:
                continue
            p = p.iloc[0]
            cells = [format_mean_std(p[f"{m}_mean"], p[f"{m}_std"], s, f) + format_ci(p, m, s, f)
                     for m, _, s, f in COLS]
            rows.append(f"| {x:g} | {pol} | {kv} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def ties(agg: pd.DataFrame, metrics=("utilization", "goodput_rps", "useful_tokens_per_dollar",
                                    "useful_per_iteration")) -> list[str]:
    lines = []
    for x in sorted(agg[X].unique()):
        g = agg[agg[X] == x].reset_index(drop=True)
        for m in metrics:
            lo, hi = interval(g, m)
            same = [f"{g[POL][i]}/{g[KV][i]} ~ {g[POL][j]}/{g[KV][j]}"
                    for i in range(len(g)) for j in range(i + 1, len(g))
                    if np.isfinite([lo[i], hi[i], lo[j], hi[j]]).all()
                    and not (hi[i] < lo[j] or hi[j] < lo[i])]
            if same:
                lines.append(f"rate {x:g}, {m}: not distinguishable: " + ", ".join(same))
    return lines


def draw(agg: pd.DataFrame, out: Path, title: str) -> None:
    fig = Figure(figsize=(13, 7.2), layout="constrained")
    axes = fig.subplots(2, 3).ravel()
    for k, (pol, kv) in enumerate(ARMS):
        g = agg[(agg[POL] == pol) & (agg[KV] == kv)].sort_values(X)
        x = g[X].to_numpy(np.float64) + (k - 1.5) * 0.05
        color, ls = STYLE[pol, kv]
        for ax, (metric, _, scale) in zip(axes, PANELS):
            y = g[f"{metric}_mean"].to_numpy(np.float64) * scale
            err = np.nan_to_num(g[f"{metric}_std"].to_numpy(np.float64)) * scale
            ax.errorbar(x, y, yerr=err, color=color, ls=ls, marker="o" if kv == "reject" else "s",
                        ms=4, capsize=3, label=f"{pol} + {kv}")
    for ax, (metric, panel, _) in zip(axes, PANELS):
        ax.set_title(panel, fontsize=10)
        ax.set_xlabel("arrival-rate scale (x trace rate)")
        ax.grid(alpha=0.3)
    axes[0].set_ylim(0, 1.05)
    axes[3].legend(fontsize=8)
    n = sorted(set(agg["n"].dropna().astype(int)))
    fig.suptitle(f"{title}: mean over {'/'.join(str(v) for v in n)} seeds, bars +- std",
                 fontsize=11)
    fig.savefig(out, dpi=100)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", type=Path, help="the multirun folder (with report/runs.csv)")
    ap.add_argument("--out", type=Path, default=Path(__file__).with_name("figure.png"))
    ap.add_argument("--title", default="Utilization maximizer vs value-aware, Llama-3-8B on "
                    "1 x H100, Azure conv 0-10 min")
    args = ap.parse_args()
    runs = derive(pd.read_csv(args.root / "report" / "runs.csv"))
    agg = aggregate(runs, pd.read_csv(args.root / "report" / "points.csv"))
    draw(agg, args.out, args.title)
    print(table(agg))
    print()
    print("\n".join(ties(agg)) or "every pair distinguishable")
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
