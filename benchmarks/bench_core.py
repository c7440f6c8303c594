"""Core simulator benchmark: the whole Azure LLM 2023 conversation trace (19,366 requests, one
hour) for Llama-3-8B on one H100 with vLLM's default scheduler settings.

Prints wall time for one scenario (first call, compile included; second call, compiled) and
for a batch of scenarios (seeds x policy grid) in one compiled call, and the batched/looped
throughput ratio measured side by side in this run.

    python benchmarks/bench_core.py       # whole hour x 1, then 256 scenarios x first minute
    python benchmarks/bench_core.py --batch 16 --duration 600 --batch-duration 60  # quicker

The batch runs on a slice of the trace (--batch-duration, default 60 s; 0 = whole hour):
on a 2-core CPU a 256-scenario batch of the whole hour takes hours (see the printed
per-scenario-iteration cost to extrapolate).
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from servetune.config.scenario import build
from servetune.run.api import compose, simulate_batch


def timed(scenario):
    start = time.perf_counter()
    res = simulate_batch(scenario)
    return time.perf_counter() - start, res


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--batch", type=int, default=256, help="scenarios in the batched call")
    ap.add_argument("--duration", type=float, default=None, help="seconds of trace (default: all)")
    ap.add_argument(
        "--batch-duration",
        type=float,
        default=60.0,
        help="seconds of trace for the batch (0 = all)",
    )
    ap.add_argument("--json", default=None, help="also write the figures to this file")
    args = ap.parse_args()

    dur = "null" if args.duration is None else str(args.duration)
    base = [
        "workload=azure_conv",
        f"workload.duration_s={dur}",
        "model=llama3_8b",
        "hardware=h100",
        "policy=vllm_default",
        "output.progress=false",
    ]
    one = build(compose(base))
    t_first, res = timed(one)
    t_second, res = timed(one)
    m = res.metrics[0]
    it_one = m["iterations"]
    print(f"one scenario, {len(one.traces[0])} requests, {it_one:,} iterations:")
    print(
        f"  with compile {t_first:8.2f} s | compiled {t_second:8.2f} s | "
        f"{t_second / it_one * 1e6:6.1f} us/iteration | goodput {m['goodput_rps']:.3f} rps"
    )

    # batch: seeds (predictor noise) x a grid over max_num_seqs and max_num_batched_tokens
    n_seeds = max(1, args.batch // 16)
    grid = [
        "grid.max_num_seqs=[64,128,256,1024]",
        "grid.max_num_batched_tokens=[2048,4096,8192,16384]",
    ]
    n_grid = 16
    if args.batch < 16:
        grid, n_grid = (
            [f"grid.max_num_seqs=[{','.join(str(64 * (k + 1)) for k in range(args.batch))}]"],
            args.batch,
        )
        n_seeds = 1
    bdur = "null" if not args.batch_duration else str(args.batch_duration)
    base_b = [o for o in base if not o.startswith("workload.duration_s")]
    base_b.append(f"workload.duration_s={bdur}")
    batch = build(compose(base_b + grid + [f"seeds={n_seeds}", "workload.predictor.sigma=0.5"]))
    n = n_seeds * n_grid
    from servetune.engine.loop import init_batch, run_chunk_batch

    state = init_batch(batch.workloads, batch.params, batch.engine)
    start = time.perf_counter()
    run_chunk_batch.lower(state, batch.workloads, batch.params, batch.engine).compile()
    t_compile = time.perf_counter() - start
    t_b1, rb = timed(batch)
    iters = rb.table["iterations"]
    one_slice = build(compose(base_b))
    timed(one_slice)
    t_s, rs = timed(one_slice)
    it_s = rs.metrics[0]["iterations"]
    print(
        f"batch of {n} scenarios ({n_seeds} seeds x {n_grid} policies) on "
        f"{len(batch.traces[0])} requests, {int(iters.sum()):,} iterations "
        f"(longest scenario {int(iters.max()):,}):"
    )
    print(
        f"  compile {t_compile:6.2f} s | run with compile {t_b1:8.2f} s | "
        f"{n / t_b1:6.2f} scenarios/s | {t_b1 / iters.max() / n * 1e6:6.1f} us per "
        f"scenario-iteration"
    )
    print(
        f"  same slice, one scenario: {t_s:.2f} s ({t_s / it_s * 1e6:.1f} us/iteration); "
        f"batched vs one at a time: {(n / t_b1) / (1 / t_s):.2f}x scenarios/s"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "one_first_s": t_first,
                    "one_compiled_s": t_second,
                    "one_iterations": it_one,
                    "batch": n,
                    "batch_compile_s": t_compile,
                    "batch_run_s": t_b1,
                    "batch_iterations": int(iters.sum()),
                    "goodput": float(np.mean(rb.table["goodput_rps"])),
                },
                f,
                indent=2,
            )


if __name__ == "__main__":
    main()
