"""Figure and table of study (d): speculative decoding on vs off across load.

    python sweeps/speculation/figure.py outputs/study_spec [--out sweeps/speculation/figure.png]

Reads <root>/report/points.csv (written by `servetune report <root>`), draws mean TPOT, mean and
P99 ITL (the delivery cadence), throughput, goodput and SLO attainment against the arrival rate,
one line per `policy.spec_k`, error bars +- std over seeds, prints the README's table and the
crossover: the lowest rate from which speculation no longer lowers mean TPOT / raises goodput,
with whether the two settings are distinguishable there (mean +- std widened to the bootstrap
CI where there is one).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from servetune.reporting.stats import format_ci, format_mean_std, interval

X, K = "workload.rate", "policy.spec_k"
PANELS = (
    ("tpot_mean_s", "mean TPOT (ms)", 1e3, "log"),
    ("itl_mean_s", "mean ITL, delivery cadence (ms)", 1e3, "log"),
    ("itl_p99_s", "P99 ITL (ms)", 1e3, "log"),
    ("throughput_rps", "throughput (completed req/s)", 1.0, "log"),
    ("goodput_rps", "goodput (qualifying req/s)", 1.0, "log"),
    ("slo_attainment", "SLO attainment", 1.0, "linear"),
)
COLS = (("tpot_mean_s", "mean TPOT (ms)", 1e3, "{:.1f}"),
        ("tpot_p99_s", "P99 TPOT (ms)", 1e3, "{:.1f}"),
        ("itl_mean_s", "mean ITL (ms)", 1e3, "{:.1f}"),
        ("itl_p99_s", "P99 ITL (ms)", 1e3, "{:.0f}"),
        ("ttft_p99_s", "P99 TTFT (s)", 1.0, "{:.2f}"),
        ("throughput_rps", "throughput (req/s)", 1.0, "{:.2f}"),
        ("goodput_rps", "goodput (req/s)", 1.0, "{:.2f}"),
        ("slo_attainment", "SLO attainment", 1.0, "{:.3f}"),
        ("spec_tokens_per_pass", "tokens per pass", 1.0, "{:.2f}"))


def table(points: pd.DataFrame) -> str:
    rows = ["| rate (req/s) | spec_k | " + " | ".join(t for _, t, _, _ in COLS) + " |",
            "|---" * (len(COLS) + 2) + "|"]
    for _, p in points.sort_values([X, K]).iterrows():
        cells = [format_mean_std(p.get(f"{m}_mean", np.nan), p.get(f"{m}_std", np.nan), s, f)
                 + format_ci(p, m, s, f) for m, _, s, f in COLS]
        rows.append(f"| {p[X]:g} | {int(p[K])} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def crossover(points: pd.DataFrame) -> list[str]:
    """Per metric, at each rate: speculation's ratio to no speculation and whether the two can
    be told apart; then the lowest rate from which speculation stops paying."""
    lines = []
    for metric, better in (("tpot_mean_s", -1), ("goodput_rps", 1), ("throughput_rps", 1),
                           ("tpot_p99_s", -1)):
        stop = None
        parts = []
        for x in sorted(points[X].unique()):
            g = points[points[X] == x].sort_values(K).reset_index(drop=True)
            if len(g) != 2:
                continue
            lo, hi = interval(g, metric)
            m = g[f"{metric}_mean"].to_numpy(np.float64)
            apart = bool(np.isfinite([lo, hi]).all() and (hi[0] < lo[1] or hi[1] < lo[0]))
            pays = apart and better * (m[1] - m[0]) > 0
            parts.append(f"{x:g}: {m[1] / m[0]:.3f}{'' if apart else ' (n.d.)'}")
            if not pays and stop is None:
                stop = x
            if pays:
                stop = None
        lines.append(f"{metric} spec/no-spec by rate: " + ", ".join(parts)
                     + f"; speculation stops paying from rate {stop}")
    return lines


def paired(runs: pd.DataFrame, metrics=("tpot_mean_s", "itl_mean_s", "throughput_rps",
                                          "goodput_rps")) -> str:
    """Per rate, speculation's ratio to no speculation seed by seed (the same seed draws the
    same arrivals and lengths for both, so the comparison is paired): mean +- std over seeds."""
    rows = ["| rate (req/s) | " + " | ".join(f"{m} ratio, spec_k 4 / 0" for m in metrics) + " |",
            "|---" * (len(metrics) + 1) + "|"]
    for x in sorted(runs[X].unique()):
        g = runs[runs[X] == x]
        on = g[g[K] > 0].set_index("seed")
        off = g[g[K] == 0].set_index("seed")
        cells = []
        for m in metrics:
            r = (on[m] / off[m]).dropna().to_numpy(np.float64)
            spread = r.std(ddof=1) if len(r) > 1 else np.nan
            cells.append(format_mean_std(r.mean(), spread, 1.0, "{:.3f}"))
        rows.append(f"| {x:g} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def draw(points: pd.DataFrame, out: Path, title: str) -> None:
    fig = Figure(figsize=(13, 7.2), layout="constrained")
    axes = fig.subplots(2, 3).ravel()
    for k, spec in enumerate(sorted(points[K].unique())):
        g = points[points[K] == spec].sort_values(X)
        x = g[X].to_numpy(np.float64)
        for ax, (metric, _, scale, _) in zip(axes, PANELS):
            y = g[f"{metric}_mean"].to_numpy(np.float64) * scale
            err = np.nan_to_num(g[f"{metric}_std"].to_numpy(np.float64)) * scale
            ax.errorbar(x, y, yerr=err, color=f"C{k}", marker="o", ms=4, capsize=3,
                        label="no speculation (spec_k 0)" if spec == 0
                        else f"draft, spec_k {int(spec)}")
    for ax, (_, panel, _, yscale) in zip(axes, PANELS):
        ax.set_title(panel, fontsize=10)
        ax.set_xscale("log")
        ax.set_yscale(yscale)
        ax.set_xlabel("arrival rate (req/s)")
        ax.grid(alpha=0.3, which="both")
    axes[0].legend(fontsize=8)
    n = sorted(set(points["n"]))
    fig.suptitle(f"{title}: mean over {'/'.join(str(v) for v in n)} seeds, bars +- std",
                 fontsize=11)
    fig.savefig(out, dpi=100)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", type=Path, help="the multirun folder (with report/points.csv)")
    ap.add_argument("--out", type=Path, default=Path(__file__).with_name("figure.png"))
    ap.add_argument("--title", default="Speculation, Llama-3-8B + 1B draft on 1 x H100, Poisson")
    args = ap.parse_args()
    points = pd.read_csv(args.root / "report" / "points.csv")
    draw(points, args.out, args.title)
    print(table(points))
    print()
    print("\n".join(crossover(points)))
    print()
    print(paired(pd.read_csv(args.root / "report" / "runs.csv")))
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
