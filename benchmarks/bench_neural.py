"""Neural vs linear priority score: does a small network beat the best linear score?

Scenario (as bench_tune): Llama-3-8B on one H100 at vLLM's default limits (max_num_seqs 1024,
max_num_batched_tokens 8192), the Azure LLM 2023 conversation trace replayed at 4x its arrival
rate, SLOs TTFT <= 2 s and TPOT <= 100 ms, objective log(useful tokens / USD) subject to 99%
SLO attainment. The scheduler sees a noisy output-length prediction (lognormal, sigma 0.5),
never the true length. Only the priority order is tuned, so the two families compete on the
same thing:

  linear  ES over w_age, w_prompt, w_pred, w_slack, starting from FCFS (tune.space);
  neural  ES over the weights of an MLP (11 features -> H tanh units -> 1) added to the best
          linear score, starting there with zero output weights (tune.policy_family=neural),
          so the family contains the linear policy it starts from.

Both train on one 20-minute slice (seed 0) only: minutes 0-20 by default, or 20-40 (an
overload no order meets the SLOs in) with --train-start 1200. Every policy, with FCFS and SJF
as references, is then re-simulated on held-out predictor seeds of the same minutes and on the
two other slices (minutes 40-60 are moderate load).

    python benchmarks/bench_neural.py                       # both tunings (cached in --out), table
    python benchmarks/bench_neural.py --train-start 1200 --out outputs/bench_neural_overload
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import pandas as pd

from servetune.config.scenario import build
from servetune.run.api import compose
from servetune.tuning import tune
from servetune.tuning.evaluator import Evaluator
from servetune.tuning.objective import Objective

BASE = [
    "workload=azure_conv",
    "workload.duration_s=1200",
    "workload.rate_scale=4",
    "workload.predictor.sigma=0.5",
    "window.drain_s=300",
    "hardware=h100",
    "model=llama3_8b",
    "policy=parametric",
    "engine.max_slots=512",
    "output.progress=false",
]
WEIGHTS = ("w_age", "w_prompt", "w_pred", "w_slack")
# only the order is tuned: drop the admission limits from the default space
ORDER_ONLY = [
    "~tune.space.max_num_seqs",
    "~tune.space.max_num_batched_tokens",
    "~tune.space.watermark",
    "~tune.space.queue_cap",
]
LINEAR_SPACE = [
    "+tune.space.w_age={low: 0.0, high: 2.0, scale: linear}",
    "+tune.space.w_prompt={low: 0.0, high: 4.0, scale: linear}",
    "+tune.space.w_pred={low: 0.0, high: 4.0, scale: linear}",
    "+tune.space.w_slack={low: -2.0, high: 2.0, scale: linear}",
]
SLICES = {0: "min 0-20", 1200: "min 20-40 (overload)", 2400: "min 40-60"}


def splits(train_start: int) -> dict[str, list[str]]:
    """Training slice (seed 0), its held-out predictor seeds, and the other two slices."""
    name = SLICES[train_start]
    here = f"workload.start_s={train_start}"
    out = {
        f"train: {name}, seed 0": [here, "seed=0"],
        f"held-out seeds: {name}, seeds 1000-1002": [here, "seed=1000", "seeds=3"],
    }
    for start, other in SLICES.items():
        if start != train_start:
            out[f"other slice: {other}, seeds 0-1"] = [f"workload.start_s={start}", "seeds=2"]
    return out


OBJECTIVE = Objective(slo_target=0.99)


TRAIN: list[str] = []  # the training slice's overrides (set by main)


def run(out: Path, overrides: list[str]) -> dict:
    """Tune (or load a finished run's tune_summary.json from `out`)."""
    path = out / "tune_summary.json"
    if not path.exists():
        tune(
            compose(BASE + TRAIN + overrides + ["tune.eval.seeds=0", "tune.export=true"]),
            out_dir=out,
        )
    return json.loads(path.read_text())


def evaluate(policies: dict[str, dict], split: list[str]) -> dict[str, dict]:
    """Each policy (values, with score_net for a neural one) on one split: summary + goodput."""
    out = {}
    sc = build(compose(BASE + split))
    for name, vals in policies.items():  # one Evaluator call per policy (structures differ)
        ev = Evaluator(sc, "neural" if "score_net" in vals else "parametric")
        values = {k: np.asarray(v, np.float64)[None] for k, v in vals.items()}
        (col,) = ev(values)
        s = OBJECTIVE.summarize(col, 0.0)
        s["goodput_rps"] = float(np.mean([m["goodput_rps"] for m in col]))
        s["ttft_p99_s"] = float(np.mean([m["ttft_p99_s"] for m in col]))
        out[name] = s
    return out


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--out", default="outputs/bench_neural")
    ap.add_argument("--iterations-linear", type=int, default=10)
    ap.add_argument("--pairs-linear", type=int, default=4)
    ap.add_argument("--iterations-neural", type=int, default=10)
    ap.add_argument("--pairs-neural", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=6)
    ap.add_argument(
        "--from-fcfs",
        action="store_true",
        help="also tune a network added to FCFS (not to the best linear score): can "
        "ES find the linear policy's gains through the network alone?",
    )
    ap.add_argument(
        "--train-start",
        type=int,
        default=0,
        choices=sorted(SLICES),
        help="training slice: minute 0, 20 or 40 (seconds 0, 1200, 2400)",
    )
    args = ap.parse_args()
    out = Path(args.out)
    TRAIN[:] = [f"workload.start_s={args.train_start}"]
    t0 = time.perf_counter()
    lin = run(
        out / "linear",
        ORDER_ONLY
        + LINEAR_SPACE
        + [
            f"tune.iterations={args.iterations_linear}",
            f"tune.pairs={args.pairs_linear}",
            "policy.w_age=1",
            "policy.w_prompt=0",
            "policy.w_pred=0",
            "policy.w_slack=0",
        ],
    )
    best_lin = {k: lin["best"][k] for k in WEIGHTS}
    print(
        f"best linear: {best_lin} ({lin['scenarios_simulated']} scenarios, {lin['wall_s']:.0f} s)"
    )
    # the network is added to the best linear score, which stays fixed: an empty tune.space
    net = run(
        out / "neural",
        ORDER_ONLY
        + [
            f"tune.iterations={args.iterations_neural}",
            f"tune.pairs={args.pairs_neural}",
            "tune.policy_family=neural",
            f"tune.net.hidden={args.hidden}",
        ]
        + [f"policy.{k}={v!r}" for k, v in best_lin.items()],
    )
    print(
        f"neural: {net['scenarios_simulated']} scenarios, {net['wall_s']:.0f} s; best on "
        f"train {net['best_summary']}"
    )
    fcfs = {"w_age": 1.0, "w_prompt": 0.0, "w_pred": 0.0, "w_slack": 0.0}
    scratch = None
    if args.from_fcfs:
        scratch = run(
            out / "neural_from_fcfs",
            ORDER_ONLY
            + [
                f"tune.iterations={args.iterations_neural}",
                f"tune.pairs={args.pairs_neural}",
                "tune.policy_family=neural",
                f"tune.net.hidden={args.hidden}",
            ]
            + [f"policy.{k}={v!r}" for k, v in fcfs.items()],
        )
    policies = {
        "FCFS (vLLM default)": {"w_age": 1.0, "w_prompt": 0.0, "w_pred": 0.0, "w_slack": 0.0},
        "SJF (prompt + predicted)": {"w_age": 0.0, "w_prompt": 1.0, "w_pred": 1.0, "w_slack": 0.0},
        "best linear (ES)": best_lin,
        f"neural, H={args.hidden} (ES)": {
            **{k: net["best"][k] for k in WEIGHTS},
            "score_net": net["best"]["score_net"],
        },
    }
    if scratch is not None:
        policies[f"neural from FCFS, H={args.hidden} (ES)"] = {
            **fcfs,
            "score_net": scratch["best"]["score_net"],
        }
    rows = []
    for split, overrides in splits(args.train_start).items():
        for name, s in evaluate(policies, overrides).items():
            rows.append(
                {
                    "split": split,
                    "policy": name,
                    "objective": s["objective"],
                    "slo_attainment": s["slo_attainment"],
                    "meets_99": s["violation"] <= 0,
                    "useful_tok_per_usd": s["useful_tokens_per_dollar"],
                    "goodput_rps": s["goodput_rps"],
                    "ttft_p99_s": s["ttft_p99_s"],
                }
            )
    table = pd.DataFrame(rows)
    table.to_csv(out / "table.csv", index=False)
    pd.set_option("display.width", 250)
    pd.set_option("display.max_colwidth", 60)
    print(table.to_string(index=False, float_format=lambda x: f"{x:.4g}"))
    print(f"total wall {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
