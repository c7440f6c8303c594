"""Core simulator benchmark: the whole Azure LLM 2023 conversation trace (19,366 requests, one
hour) for Llama-3-8B on one H100 with vLLM's default scheduler settings.

Prints wall time for one scenario (first call, compile included; second call, compiled) and
for a batch of scenarios (seeds x policy grid) in one compiled call, and the batched/looped
throughput ratio measured side by side in this run.

    python benchmarks/bench_core.py                 # 1 scenario + a 256-scenario batch
    python benchmarks/bench_core.py --batch 16 --duration 600   # a quicker look
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from servetune.api import compose, simulate_batch
from servetune.scenario import build


def timed(scenario):
    start = time.perf_counter()
    res = simulate_batch(scenario)
    return time.perf_counter() - start, res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=256, help="scenarios in the batched call")
    ap.add_argument("--duration", type=float, default=None, help="seconds of trace (default: all)")
    ap.add_argument("--json", default=None, help="also write the figures to this file")
    args = ap.parse_args()

    dur = "null" if args.duration is None else str(args.duration)
    base = ["workload=azure_conv", f"workload.duration_s={dur}", "model=llama3_8b",
            "hardware=h100", "policy=vllm_default", "output.progress=false"]
    one = build(compose(base))
    t_first, res = timed(one)
    t_second, res = timed(one)
    m = res.metrics[0]
    iters = m["iterations"]
    print(f"one scenario, {len(one.traces[0])} requests, {iters:,} iterations:")
    print(f"  with compile {t_first:8.2f} s | compiled {t_second:8.2f} s | "
          f"{t_second / iters * 1e6:6.1f} us/iteration | goodput {m['goodput_rps']:.3f} rps")

    # batch: seeds (predictor noise) x a grid over max_num_seqs and max_num_batched_tokens
    n_seeds = max(1, args.batch // 16)
    grid = ["grid.max_num_seqs=[64,128,256,1024]",
            "grid.max_num_batched_tokens=[2048,4096,8192,16384]"]
    n_grid = 16
    if args.batch < 16:
        grid, n_grid = [f"grid.max_num_seqs=[{','.join(str(64 * (k + 1)) for k in range(args.batch))}]"], args.batch
        n_seeds = 1
    batch = build(compose(base + grid + [f"seeds={n_seeds}", "workload.predictor.sigma=0.5",
                                         "engine.max_slots=1024"]))
    n = n_seeds * n_grid
    t_b1, rb = timed(batch)
    t_b2, rb = timed(batch)
    total_iters = int(rb.table["iterations"].sum())
    print(f"batch of {n} scenarios ({n_seeds} seeds x {n_grid} policies), {total_iters:,} iterations:")
    print(f"  with compile {t_b1:8.2f} s | compiled {t_b2:8.2f} s | "
          f"{n / t_b2:6.2f} scenarios/s | {total_iters / t_b2:,.0f} iterations/s")
    print(f"  batched vs one-at-a-time: {(n / t_b2) / (1 / t_second):.1f}x scenarios/s "
          f"(one scenario: {1 / t_second:.3f}/s)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"one_first_s": t_first, "one_compiled_s": t_second, "one_iterations": iters,
                       "batch": n, "batch_first_s": t_b1, "batch_compiled_s": t_b2,
                       "batch_iterations": total_iters,
                       "goodput": float(np.mean(rb.table["goodput_rps"]))}, f, indent=2)


if __name__ == "__main__":
    main()
