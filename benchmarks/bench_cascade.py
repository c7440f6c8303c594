"""Study (h): goodput per dollar of a model cascade against its routing threshold, and whether
the ES tuner finds the grid's optimum.

Scenario: `+experiment=cascade` (conf/experiment/cascade.yaml): one Llama-3-8B
(1 x H100) and one Llama-3-70B (4 x H100) instance, Poisson 8 req/s for 120 s, TTFT <= 2 s,
TPOT <= 100 ms, 3 seeds. For each router noise (logit-scale sigma of the difficulty predictor)
the 11-point threshold grid runs as one compiled, vmapped call. Then `servetune tune` (ES, the
threshold alone, objective log(useful tokens / USD) averaged over the same 3 seeds) starts from
a threshold far below and far above the optimum; its best policy is compared with the grid's
best on the same seeds. Prints markdown tables and writes them, the raw numbers (JSON) and the
figure to --out (default sweeps/cascade).

    python benchmarks/bench_cascade.py              # grid (3 noises) + 2 tuner runs, ~10 min
    python benchmarks/bench_cascade.py --grid-only  # the grid alone
    python benchmarks/bench_cascade.py --figure-only  # redraw figure.png from results.json
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np

from servetune.config.scenario import build
from servetune.run.api import compose, simulate_batch
from servetune.tuning.objective import Objective
from servetune.tuning.runner import tune

EXPERIMENT = ["+experiment=cascade"]
NOISES = (0.0, 0.5, 1.0)
STARTS = (0.1, 0.95)
OBJECTIVE = Objective(slo_target=0.0)  # as the experiment's tune.objective
KEYS = (
    "useful_tokens_per_dollar",
    "goodput_rps",
    "slo_attainment",
    "ttft_p99_s",
    "cascade_retry_rate",
    "cascade_router_accuracy",
    "cascade_small_share",
    "cascade_quality_pass_rate",
    "cascade_utilization_small",
    "cascade_utilization_large",
    "cost_usd",
)


def run_grid(noise: float) -> dict:
    """Per threshold: mean and std over seeds of KEYS, the objective, per-class numbers."""
    sc = build(compose(EXPERIMENT + [f"cascade.difficulty_noise={noise}"]))
    t0 = time.perf_counter()
    res = simulate_batch(sc)
    wall = time.perf_counter() - t0
    n_p = len(sc.grid_points)
    rows = []
    for p, point in enumerate(sc.grid_points):
        ms = [res.metrics[s * n_p + p] for s in range(len(sc.seeds))]  # seed-major
        row = {
            "threshold": point["cascade_threshold"],
            "objective": OBJECTIVE.summarize(ms, 0.0)["objective"],
        }
        for k in KEYS:
            v = np.array([m[k] for m in ms], float)
            row[k], row[f"{k}_std"] = float(v.mean()), float(v.std())
        for c in ms[0]["by_difficulty"]:
            for k in (
                "goodput_rps",
                "quality_pass_rate",
                "retry_rate",
                "router_accuracy",
                "slo_attainment",
            ):
                row[f"{c}_{k}"] = float(np.nanmean([m["by_difficulty"][c][k] for m in ms]))
        rows.append(row)
    return {
        "noise": noise,
        "rows": rows,
        "wall_s": wall,
        "seeds": list(sc.seeds),
        "n_requests": [len(t) for t in sc.traces],
    }


def run_tuner(start: float, out: Path) -> dict:
    """`servetune tune +experiment=cascade policy.cascade_threshold=<start>` (noise 0.5)."""
    path = out / f"tune_from_{start:g}"
    t0 = time.perf_counter()
    result = tune(
        compose(EXPERIMENT + [f"policy.cascade_threshold={start}", "tune.resume=false"]),
        out_dir=path,
        log=lambda s: None,
    )
    hist = result.history
    return {
        "start": start,
        "best_threshold": float(result.best["cascade_threshold"]),
        "best_objective": float(result.best_summary["objective"]),
        "best_useful_tokens_per_dollar": float(result.best_summary["useful_tokens_per_dollar"]),
        "center_path": [float(v) for v in hist["policy.cascade_threshold"]],
        "scenarios_simulated": result.scenarios_simulated,
        "wall_s": time.perf_counter() - t0,
    }


def grid_table(g: dict) -> str:
    head = (
        "| threshold | useful tok/$ | goodput (req/s) | SLO+quality attainment | P99 TTFT (s) "
        "| small share | retry rate | router accuracy | util. 8B / 70B |"
    )
    lines = [head, "|---" * 9 + "|"]
    best = max(g["rows"], key=lambda r: r["objective"])
    for r in g["rows"]:
        mark = " **(best)**" if r is best else ""
        lines.append(
            f"| {r['threshold']:.1f}{mark} | {r['useful_tokens_per_dollar']:,.0f} +- "
            f"{r['useful_tokens_per_dollar_std']:,.0f} | {r['goodput_rps']:.2f} | "
            f"{r['slo_attainment']:.3f} | {r['ttft_p99_s']:.2f} | {r['cascade_small_share']:.2f} | "
            f"{r['cascade_retry_rate']:.3f} | {r['cascade_router_accuracy']:.3f} | "
            f"{r['cascade_utilization_small']:.2f} / {r['cascade_utilization_large']:.2f} |"
        )
    return "\n".join(lines)


def class_table(g: dict) -> str:
    lines = [
        "| threshold | "
        + " | ".join(
            f"{c} goodput / attain. / retry / router acc." for c in ("easy", "medium", "hard")
        )
        + " |",
        "|---" * 4 + "|",
    ]
    for r in g["rows"]:
        cells = [
            f"{r[f'{c}_goodput_rps']:.2f} / {r[f'{c}_slo_attainment']:.3f} / "
            f"{r[f'{c}_retry_rate']:.3f} / {r[f'{c}_router_accuracy']:.2f}"
            for c in ("easy", "medium", "hard")
        ]
        lines.append(f"| {r['threshold']:.1f} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def figure(grids: list[dict], tuned: list[dict], path: Path) -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.4, 4.0))
    ax = fig.subplots()
    for k, g in enumerate(grids):
        x = [r["threshold"] for r in g["rows"]]
        y = np.array([r["useful_tokens_per_dollar"] for r in g["rows"]]) / 1e3
        e = np.array([r["useful_tokens_per_dollar_std"] for r in g["rows"]]) / 1e3
        ax.errorbar(
            x, y, yerr=e, marker="o", capsize=3, color=f"C{k}", label=f"router noise {g['noise']:g}"
        )
    for k, t in enumerate(tuned):
        ax.axvline(
            t["best_threshold"],
            color="C3",
            linestyle=":",
            alpha=0.8,
            label="ES best, from " + " and ".join(f"{u['start']:g}" for u in tuned)
            if k == 0
            else None,
        )
    ax.set_xlabel("cascade threshold (predicted difficulty routed to Llama-3-8B)")
    ax.set_ylabel("useful tokens per dollar (thousands)")
    ax.set_title(
        "1 x 8B (1 H100) + 1 x 70B (4 H100), 8 req/s: mean +- std over 3 seeds", fontsize=9
    )
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--out", default="sweeps/cascade")
    ap.add_argument("--grid-only", action="store_true")
    ap.add_argument(
        "--figure-only",
        action="store_true",
        help="redraw figure.png from the results.json of an earlier run",
    )
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.figure_only:
        done = json.loads((out / "results.json").read_text())
        figure(done["grids"], done["tuned"], out / "figure.png")
        return
    grids = [run_grid(n) for n in NOISES]
    tuned = [] if args.grid_only else [run_tuner(s, Path("outputs/bench_cascade")) for s in STARTS]
    text = []
    for g in grids:
        title = (
            f"### router noise {g['noise']:g} (grid: {len(g['rows'])} thresholds x "
            f"{len(g['seeds'])} seeds, {g['wall_s']:.0f} s)"
        )
        text += [title, "", grid_table(g), "", class_table(g), ""]
    ref = next(g for g in grids if g["noise"] == 0.5)
    best = max(ref["rows"], key=lambda r: r["objective"])
    for t in tuned:
        text.append(
            f"ES from {t['start']:g}: best threshold {t['best_threshold']:.3f}, objective "
            f"{t['best_objective']:.4f} (useful tok/$ {t['best_useful_tokens_per_dollar']:,.0f})"
            f" vs grid best {best['threshold']:.1f}: {best['objective']:.4f} "
            f"({best['useful_tokens_per_dollar']:,.0f}); gap "
            f"{best['objective'] - t['best_objective']:+.4f}"
            f" in log units; {t['scenarios_simulated']} scenarios, {t['wall_s']:.0f} s; center "
            f"path {' '.join(f'{v:.2f}' for v in t['center_path'])}"
        )
    report = "\n".join(text)
    print(report)
    (out / "results.md").write_text(report + "\n")
    (out / "results.json").write_text(
        json.dumps({"grids": grids, "tuned": tuned}, indent=1, default=float)
    )
    figure(grids, tuned, out / "figure.png")
    if not math.isfinite(best["objective"]):
        raise SystemExit("grid objective not finite")


if __name__ == "__main__":
    main()
