"""Tuned vs grid vs vLLM defaults: does the ES tuner find what an exhaustive grid finds, cheaper?

Scenario: Llama-3-8B on one H100, the Azure LLM 2023 conversation trace, minutes 0-20 replayed
at 4x the arrival rate (at 1x one H100 meets every SLO whatever the policy, so nothing is to be
tuned); SLOs TTFT <= 2 s, TPOT <= 100 ms; objective log(useful tokens) - log(USD) subject to
SLO attainment >= 99%. Tuned keys: max_num_seqs, max_num_batched_tokens, the KV watermark and
the admission threshold (queue_cap). The grid is the product below (576 points); the tuner gets
at most 10% of the grid's scenarios. Every policy is then re-simulated on minutes 20-40 (held
out). Prints the table and writes it (and the grid) under --out.

    python benchmarks/bench_tune.py                  # grid (cached in --out) + tuning
    python benchmarks/bench_tune.py --grid-only      # or --tune-only: one half, cached
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import time
from pathlib import Path

import numpy as np
import pandas as pd

from servetune.api import compose
from servetune.policy import DEFAULTS
from servetune.scenario import build
from servetune.tuning.evaluator import Evaluator
from servetune.tuning.objective import Objective
from servetune.tuning.runner import _better, tune

BASE = ["workload=azure_conv", "workload.start_s=0", "workload.duration_s=1200",
        "workload.rate_scale=4", "window.drain_s=300", "hardware=h100", "model=llama3_8b",
        "policy=vllm_default", "engine.max_slots=512", "output.progress=false"]
HOLDOUT = ["workload.start_s=1200"]
GRID = {
    "max_num_seqs": [16, 32, 64, 128, 192, 256, 384, 512],
    "max_num_batched_tokens": [512, 768, 1024, 1536, 2048, 4096, 8192, 16384],
    "watermark": [0.0, 0.01, 0.05],
    "queue_cap": [64, 512, 4096],
}
OBJECTIVE = Objective(slo_target=0.99)


def run_grid(out: Path) -> pd.DataFrame:
    path = out / "grid.csv"
    if path.exists():
        return pd.read_csv(path)
    points = list(itertools.product(*GRID.values()))
    values = {k: np.array([p[i] for p in points], float) for i, k in enumerate(GRID)}
    ev = Evaluator(build(compose(BASE)), "fcfs")
    start = time.perf_counter()
    cols = ev(values)
    wall = time.perf_counter() - start
    rows = [{**{k: values[k][i] for k in GRID}, **OBJECTIVE.summarize(c, 0.0)}
            for i, c in enumerate(cols)]
    df = pd.DataFrame(rows).assign(wall_s=wall)
    out.mkdir(parents=True, exist_ok=True)
    df.to_csv(path, index=False)
    return df


def run_tuner(out: Path, iterations: int, pairs: int) -> dict:
    """Tune (or load a finished run's tune_summary.json from `out`)."""
    path = out / "tune_summary.json"
    if not path.exists():
        tune(compose(BASE + [f"tune.iterations={iterations}", f"tune.pairs={pairs}",
                             "tune.eval.seeds=0", "tune.eval.holdout=['workload.start_s=1200']"]),
             out_dir=out)
    return json.loads(path.read_text())


def run_robust_tuner(out: Path, iterations: int, pairs: int) -> dict:
    """Tune over two slices at once (worst-case aggregate), or load a finished run."""
    path = out / "tune_summary.json"
    if not path.exists():
        tune(compose(BASE + [f"tune.iterations={iterations}", f"tune.pairs={pairs}",
                             "tune.eval.seeds=0", "tune.workloads=[[],['workload.start_s=1200']]",
                             "tune.objective.aggregate=cvar", "tune.objective.cvar_alpha=0.5"]),
             out_dir=out)
    return json.loads(path.read_text())


def grid_best(df: pd.DataFrame) -> dict:
    best = None
    for row in df.to_dict("records"):
        if _better(best, row):
            best = row
    return best


def evaluate(named: dict[str, dict], overrides: list[str]) -> list[dict]:
    sc = build(compose(BASE + overrides))
    ev = Evaluator(sc, "fcfs")
    base = ev.base
    values = {k: np.array([float(v.get(k, base[k])) for v in named.values()]) for k in GRID}
    return [OBJECTIVE.summarize(c, 0.0) for c in ev(values)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="outputs/bench_tune")
    ap.add_argument("--grid-only", action="store_true")
    ap.add_argument("--tune-only", action="store_true")
    ap.add_argument("--robust", action="store_true",
                    help="also tune over minutes 0-20 and 20-40 at once (CVaR) and compare "
                         "every policy on minutes 40-60")
    ap.add_argument("--iterations", type=int, default=7)
    ap.add_argument("--pairs", type=int, default=3)
    args = ap.parse_args()
    out = Path(args.out)
    if args.tune_only:
        run_tuner(out / "tuned", args.iterations, args.pairs)
        return
    t0 = time.perf_counter()
    grid = run_grid(out)
    grid_wall = float(grid["wall_s"].iloc[0]) if "wall_s" in grid else time.perf_counter() - t0
    gbest = grid_best(grid)
    print(f"grid: {len(grid)} points, {grid_wall:.0f} s; best {gbest}")
    if args.grid_only:
        return
    tuned = run_tuner(out / "tuned", args.iterations, args.pairs)
    named = {"vLLM defaults": {k: DEFAULTS[k] for k in GRID}, "grid best": {k: gbest[k] for k in GRID},
             "tuned (ES)": {k: tuned["best"][k] for k in GRID}}
    cost = {"vLLM defaults": (1, 0.0), "grid best": (len(grid), grid_wall),
            "tuned (ES)": (tuned["scenarios_simulated"], tuned["wall_s"])}
    if args.robust:
        robust = run_robust_tuner(out / "tuned_robust", args.iterations, args.pairs)
        named["tuned (ES, 2 slices, CVaR)"] = {k: robust["best"][k] for k in GRID}
        cost["tuned (ES, 2 slices, CVaR)"] = (robust["scenarios_simulated"], robust["wall_s"])
        third = evaluate(named, ["workload.start_s=2400"])
    train, held = evaluate(named, []), evaluate(named, HOLDOUT)
    rows = []
    for (name, vals), tr, ho in zip(named.items(), train, held):
        rows.append({"policy": name,
                     **{k: round(float(vals.get(k, math.nan)), 3) for k in GRID},
                     "objective": tr["objective"], "slo_attainment": tr["slo_attainment"],
                     "useful_tok_per_usd": tr["useful_tokens_per_dollar"],
                     "holdout_objective": ho["objective"], "holdout_attainment": ho["slo_attainment"],
                     "holdout_useful_tok_per_usd": ho["useful_tokens_per_dollar"],
                     **({"min40_60_attainment": third[len(rows)]["slo_attainment"],
                         "min40_60_useful_tok_per_usd": third[len(rows)]["useful_tokens_per_dollar"]}
                        if args.robust else {}),
                     "scenarios": cost[name][0], "wall_s": round(cost[name][1], 1)})
    table = pd.DataFrame(rows)
    table.to_csv(out / "table.csv", index=False)
    pd.set_option("display.width", 250)
    print(table.to_string(index=False))
    gap = (table.objective[2] - table.objective[1]) / abs(table.objective[1])
    print(f"tuned vs grid best objective: {100 * gap:+.2f}% with "
          f"{100 * tuned['scenarios_simulated'] / len(grid):.1f}% of the grid's scenarios")


if __name__ == "__main__":
    main()
