"""Figure and table of study (b): what gives under KV-cache pressure.

    python sweeps/kv_pressure/figure.py outputs/study_kvp [--out sweeps/kv_pressure/figure.png]

Reads <root>/report/points.csv (written by `servetune report <root>`), draws useful tokens,
useful tokens per computed token, wasted-token ratio, SLO attainment, P99 TTFT and the requests
each policy gave up (evicted / rejected / compressed) against the rate scale, one line per
`engine.kv_pressure`, error bars +- std over seeds, and prints the README's table with, per rate,
which policies cannot be told apart (intervals: mean +- std widened to the bootstrap CI).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from servetune.reporting.stats import format_ci, format_mean_std, interval

X, P = "workload.rate_scale", "engine.kv_pressure"
ORDER = ("preempt", "evict", "compress", "reject")
PANELS = (
    ("useful_tokens", "useful tokens (thousands)", 1e-3),
    ("useful_tokens_per_computed_token", "useful tokens per computed token", 1.0),
    ("wasted_token_ratio", "wasted-token ratio", 1.0),
    ("slo_attainment", "SLO attainment", 1.0),
    ("ttft_p99_s", "P99 TTFT (s)", 1.0),
    ("given_up", "evicted / rejected / compressed requests", 1.0),
)
GIVEN_UP = {"preempt": "preemptions", "evict": "n_evicted", "compress": "n_kv_compressed",
            "reject": "n_rejected"}
TABLE = (("useful_tokens", "useful tokens (k)", 1e-3, "{:.0f}"),
         ("useful_tokens_per_computed_token", "useful / computed token", 1.0, "{:.4f}"),
         ("wasted_token_ratio", "wasted-token ratio", 1.0, "{:.3f}"),
         ("slo_attainment", "SLO attainment", 1.0, "{:.3f}"),
         ("goodput_rps", "goodput (req/s)", 1.0, "{:.3f}"),
         ("ttft_p99_s", "P99 TTFT (s)", 1.0, "{:.1f}"),
         ("preemptions", "preemptions", 1.0, "{:.0f}"),
         ("n_evicted", "evicted", 1.0, "{:.0f}"),
         ("n_rejected", "rejected", 1.0, "{:.0f}"),
         ("n_kv_compressed", "compressed", 1.0, "{:.0f}"),
         ("n_quality_failed", "failed check", 1.0, "{:.0f}"))


def table(points: pd.DataFrame) -> str:
    rows = ["| rate scale | kv_pressure | " + " | ".join(t for _, t, _, _ in TABLE) + " |",
            "|---" * (len(TABLE) + 2) + "|"]
    for x in sorted(points[X].unique()):
        for mode in ORDER:
            p = points[(points[X] == x) & (points[P] == mode)]
            if p.empty:
                continue
            p = p.iloc[0]
            cells = [format_mean_std(p[f"{m}_mean"], p[f"{m}_std"], s, f) + format_ci(p, m, s, f)
                     for m, _, s, f in TABLE]
            rows.append(f"| {x:g} | {mode} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def ties(points: pd.DataFrame, metrics=("useful_tokens", "useful_tokens_per_computed_token",
                                       "slo_attainment", "ttft_p99_s")) -> list[str]:
    """Per rate and metric: pairs of policies whose intervals overlap (not distinguishable)."""
    lines = []
    for x in sorted(points[X].unique()):
        g = points[points[X] == x].reset_index(drop=True)
        for m in metrics:
            lo, hi = interval(g, m)
            same = [f"{g[P][i]} ~ {g[P][j]}" for i in range(len(g)) for j in range(i + 1, len(g))
                    if np.isfinite([lo[i], hi[i], lo[j], hi[j]]).all()
                    and not (hi[i] < lo[j] or hi[j] < lo[i])]
            if same:
                lines.append(f"rate {x:g}, {m}: not distinguishable: " + ", ".join(same))
    return lines


def kv_only(root: Path, tpot_s: float = 0.1) -> pd.DataFrame:
    """The KV mechanisms without the queue: per run, useful tokens and useful tokens per computed
    token counting a completed request as useful when it met the TPOT target and passed its
    check, whatever its TTFT (from each run's requests.parquet); mean and std over seeds."""
    rows = []
    for run in sorted(p for p in root.iterdir() if (p / "requests.parquet").exists()):
        ov = dict(line[2:].strip().split("=", 1) for line in
                  (run / ".hydra" / "overrides.yaml").read_text().splitlines()
                  if line.startswith("- ") and "=" in line and not line[2:].startswith("+"))
        req = pd.read_parquet(run / "requests.parquet")
        req = req[req["counted"]]
        for _, r in req.groupby("scenario"):
            ok = (r["end_state"] == "completed") & r["quality_ok"] \
                & ~(r["tpot_s"] > tpot_s)  # NaN TPOT (one output token) passes
            useful = float(r.loc[ok, "output_tokens_delivered"].sum())
            rows.append({X: float(ov[X]), P: ov[P], "useful": useful,
                         "per_computed": useful / float(r["tokens_computed"].sum())})
    df = pd.DataFrame(rows)
    return df.groupby([X, P], sort=False).agg(["mean", "std"]).reset_index()


def kv_table(kv: pd.DataFrame) -> str:
    head = ("| rate scale | kv_pressure | useful tokens, TPOT only (k) "
            "| useful / computed token, TPOT only |")
    rows = [head, "|---|---|---|---|"]
    for x in sorted(kv[X].unique()):
        for mode in ORDER:
            p = kv[(kv[X] == x) & (kv[P] == mode)]
            if p.empty:
                continue
            p = p.iloc[0]
            useful = format_mean_std(p[("useful", "mean")], p[("useful", "std")], 1e-3, "{:.0f}")
            per = format_mean_std(p[("per_computed", "mean")], p[("per_computed", "std")], 1.0,
                                  "{:.4f}")
            rows.append(f"| {x:g} | {mode} | {useful} | {per} |")
    return "\n".join(rows)


def draw(points: pd.DataFrame, out: Path, title: str, kv: pd.DataFrame | None = None) -> None:
    fig = Figure(figsize=(13, 7.2), layout="constrained")
    axes = fig.subplots(2, 3).ravel()
    for k, mode in enumerate(ORDER):
        g = points[points[P] == mode].sort_values(X)
        if g.empty:
            continue
        x = g[X].to_numpy(np.float64) + (k - 1.5) * 0.004
        for ax, (metric, _, scale) in zip(axes, PANELS):
            col = GIVEN_UP[mode] if metric == "given_up" else metric
            y = g[f"{col}_mean"].to_numpy(np.float64) * scale
            err = np.nan_to_num(g[f"{col}_std"].to_numpy(np.float64)) * scale
            ax.errorbar(x, y, yerr=err, color=f"C{k}", marker="o", ms=4, capsize=3,
                        label=mode if metric != "given_up" else f"{mode}: {col}")
        if kv is not None:  # dotted: the TTFT target dropped (the KV mechanism alone)
            h = kv[kv[P] == mode].sort_values(X)
            hx = h[X].to_numpy(np.float64) + (k - 1.5) * 0.004
            for ax, col, scale in ((axes[0], "useful", 1e-3), (axes[1], "per_computed", 1.0)):
                ax.plot(hx, h[(col, "mean")].to_numpy(np.float64) * scale, color=f"C{k}",
                        ls=":", lw=1.3, label="dotted: TPOT target only" if k == 0 else None)
    for ax, (metric, panel, _) in zip(axes, PANELS):
        ax.set_title(panel, fontsize=10)
        ax.set_xlabel("arrival-rate scale (x trace rate)")
        ax.grid(alpha=0.3)
        if metric == "ttft_p99_s":
            ax.set_yscale("log")
    axes[0].legend(fontsize=8)
    axes[5].legend(fontsize=7)
    n = sorted(set(points["n"]))
    fig.suptitle(f"{title}: mean over {'/'.join(str(v) for v in n)} seeds, bars +- std",
                 fontsize=11)
    fig.savefig(out, dpi=100)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", type=Path, help="the multirun folder (with report/points.csv)")
    ap.add_argument("--out", type=Path, default=Path(__file__).with_name("figure.png"))
    ap.add_argument("--title", default="KV pressure, Llama-3-70B on 2 x H100, Azure conv 0-10 min")
    args = ap.parse_args()
    points = pd.read_csv(args.root / "report" / "points.csv")
    kv = kv_only(args.root)
    draw(points, args.out, args.title, kv)
    print(table(points))
    print()
    print("\n".join(ties(points)) or "every pair distinguishable")
    print()
    print(kv_table(kv))
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
