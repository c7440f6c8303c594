"""Figure and tables of study (g): a tuned policy vs vLLM's defaults on held-out trace slices.

    python sweeps/tuned_vs_default/figure.py outputs/study_tvd [--out ...figure.png]

Reads <root>/report/runs.csv (written by `servetune report <root>`): one scenario per rate scale
x 10-minute slice x policy. Draws, per rate scale, useful tokens per dollar, SLO attainment and
P99 TTFT per slice for both policies (error bars: the report's 95% bootstrap interval over
requests, where it has one), marks the tuning slice, and prints the per-slice table (with whether
the two policies' intervals overlap) and the mean +- std over the held-out slices.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

X, S, POL = "workload.rate_scale", "workload.start_s", "policy"
POLICIES = ("vllm_default", "tuned_azure_conv")
TRAIN = (3.0, 1200.0)  # the tuning slice: rate scale, start_s
PANELS = (("useful_tokens_per_dollar", "useful tokens per $ (millions)", 1e-6),
          ("slo_attainment", "SLO attainment", 1.0),
          ("ttft_p99_s", "P99 TTFT (s)", 1.0))
COLS = (("offered_rps", "offered (req/s)", 1.0, "{:.1f}"),
        ("useful_tokens_per_dollar", "useful tok/$ (M)", 1e-6, "{:.2f}"),
        ("goodput_rps", "goodput (req/s)", 1.0, "{:.2f}"),
        ("slo_attainment", "SLO attainment", 1.0, "{:.3f}"),
        ("ttft_p99_s", "P99 TTFT (s)", 1.0, "{:.2f}"),
        ("tpot_p99_s", "P99 TPOT (ms)", 1e3, "{:.0f}"),
        ("n_rejected", "rejected", 1.0, "{:.0f}"))


def _ci(row: pd.Series, metric: str) -> tuple[float, float]:
    lo, hi = row.get(f"{metric}_ci_lo", np.nan), row.get(f"{metric}_ci_hi", np.nan)
    return float(lo), float(hi)


def _cell(row: pd.Series, metric: str, scale: float, fmt: str) -> str:
    text = fmt.format(row[metric] * scale)
    lo, hi = _ci(row, metric)
    if np.isfinite([lo, hi]).all():
        text += f" [{fmt.format(lo * scale)}, {fmt.format(hi * scale)}]"
    return text


def slice_table(runs: pd.DataFrame) -> str:
    rows = ["| rate scale | minutes | policy | " + " | ".join(t for _, t, _, _ in COLS)
            + " | tuned vs default |", "|---" * (len(COLS) + 4) + "|"]
    for (x, s), g in runs.groupby([X, S]):
        g = g.set_index(POL)
        verdict = []
        for m in ("goodput_rps", "slo_attainment", "ttft_p99_s"):
            (alo, ahi), (blo, bhi) = (_ci(g.loc[p], m) for p in POLICIES)
            if np.isfinite([alo, ahi, blo, bhi]).all() and (ahi < blo or bhi < alo):
                continue
            verdict.append(m.replace("_rps", "").replace("_s", ""))
        same = "n.d.: " + ", ".join(verdict) if verdict else "distinguishable"
        for p in POLICIES:
            r = g.loc[p]
            cells = [_cell(r, m, sc, f) for m, _, sc, f in COLS]
            tag = " (tuning slice)" if (x, s) == TRAIN else ""
            rows.append(f"| {x:g} | {int(s // 60)}-{int(s // 60) + 10}{tag} | {p} | "
                        + " | ".join(cells) + f" | {same if p == POLICIES[1] else ''} |")
    return "\n".join(rows)


def heldout_table(runs: pd.DataFrame) -> str:
    """Per rate scale, over the held-out slices: each policy's mean +- std, and the paired ratio
    tuned / default per slice as its geometric mean [min, max] (one overloaded slice can make
    the ratio 10x, so a mean +- std of ratios says little)."""
    metrics = (("useful_tokens_per_dollar", "useful tok/$ (M)", 1e-6, "{:.2f}"),
               ("goodput_rps", "goodput (req/s)", 1.0, "{:.2f}"),
               ("slo_attainment", "SLO attainment", 1.0, "{:.3f}"))
    rows = ["| rate scale | held-out slices | "
            + " | ".join(f"{t} default | {t} tuned | ratio, geo-mean [min, max]" for _, t, _, _ in metrics) + " |",
            "|---" * (2 + 3 * len(metrics)) + "|"]
    held = runs[[(x, s) != TRAIN for x, s in zip(runs[X], runs[S])]]
    for x, g in held.groupby(X):
        a = g[g[POL] == POLICIES[0]].set_index(S).sort_index()
        b = g[g[POL] == POLICIES[1]].set_index(S).sort_index()
        cells = []
        for m, _, sc, f in metrics:
            r = (b[m] / a[m]).to_numpy(np.float64)
            cells += [f"{f.format(a[m].mean() * sc)} +- {f.format(a[m].std() * sc)}",
                      f"{f.format(b[m].mean() * sc)} +- {f.format(b[m].std() * sc)}",
                      f"{np.exp(np.log(r).mean()):.3f} [{r.min():.3f}, {r.max():.3f}]"]
        rows.append(f"| {x:g} | {len(a)} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def draw(runs: pd.DataFrame, out: Path, title: str) -> None:
    rates = sorted(runs[X].unique())
    fig = Figure(figsize=(13, 3.6 * len(rates)), layout="constrained")
    axes = fig.subplots(len(rates), len(PANELS), squeeze=False)
    for i, x in enumerate(rates):
        g = runs[runs[X] == x]
        starts = sorted(g[S].unique())
        for ax, (metric, panel, scale) in zip(axes[i], PANELS):
            for k, p in enumerate(POLICIES):
                r = g[g[POL] == p].set_index(S).reindex(starts)
                y = r[metric].to_numpy(np.float64) * scale
                pos = np.arange(len(starts)) + (k - 0.5) * 0.38
                err = None
                if f"{metric}_ci_lo" in r:
                    lo = r[f"{metric}_ci_lo"].to_numpy(np.float64) * scale
                    hi = r[f"{metric}_ci_hi"].to_numpy(np.float64) * scale
                    err = np.nan_to_num(np.vstack([y - lo, hi - y]).clip(min=0))
                ax.bar(pos, y, width=0.38, color=f"C{k}", yerr=err, capsize=3,
                       label="vLLM defaults" if k == 0 else "tuned (minutes 20-30 at 3x)")
            ax.set_xticks(range(len(starts)),
                          [f"{int(s // 60)}-{int(s // 60) + 10}"
                           + ("\n(tuned)" if (x, s) == TRAIN else "") for s in starts])
            ax.set_xlabel("trace minutes")
            ax.set_title(f"{panel}, {x:g}x rate", fontsize=10)
            ax.grid(alpha=0.3, axis="y")
            if metric == "ttft_p99_s":
                ax.set_yscale("log")
        axes[i][1].legend(fontsize=8, loc="lower left")
    fig.suptitle(f"{title}: one replay per slice (deterministic); bars 95% bootstrap intervals "
                 "where the report has them", fontsize=11)
    fig.savefig(out, dpi=100)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", type=Path, help="the multirun folder (with report/runs.csv)")
    ap.add_argument("--out", type=Path, default=Path(__file__).with_name("figure.png"))
    ap.add_argument("--title", default="Tuned vs vLLM defaults, Llama-3-8B on 1 x H100, "
                    "Azure conv")
    args = ap.parse_args()
    runs = pd.read_csv(args.root / "report" / "runs.csv")
    draw(runs, args.out, args.title)
    print(slice_table(runs))
    print()
    print(heldout_table(runs))
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
