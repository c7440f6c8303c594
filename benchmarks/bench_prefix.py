"""Prefix caching on the Mooncake traces: hit rate against the trace's own
prefix reuse, and TTFT with caching on vs off.

    python benchmarks/bench_prefix.py                      # synthetic 300 s, ~2-3 min on 2 cores
    python benchmarks/bench_prefix.py --workload mooncake_conv --duration-s 300

Qwen2.5-7B (32k context: Mooncake prompts average ~12k tokens), vLLM default scheduler, two
deployments: 4 x H200 (tp=4: a KV cache far larger than the trace's working set, so the cache
is effectively infinite) and 1 x H100 (the cache holds only a few tens of seconds of prompts,
so LRU eviction decides what is found). For each: caching off, caching on; the trace's reuse is
computed from its hash_ids in Python (engine/prefix.trace_reuse: an infinite cache holding each
block from its request's arrival on, over the requests the engine admits).
"""

from __future__ import annotations

import argparse
import time

from servetune.config.scenario import build
from servetune.engine import prefix as prefix_lib
from servetune.run.api import compose, simulate_batch

DEPLOYMENTS = {"4xH200": ["hardware=h200", "hardware.tp=4"], "1xH100": ["hardware=h100"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", default="mooncake_synthetic")
    ap.add_argument("--duration-s", type=float, default=None)
    args = ap.parse_args()
    base = [
        f"workload={args.workload}",
        "model=qwen2_5_7b",
        "policy=vllm_default",
        "window.drain_s=600",
    ]
    if args.duration_s is not None:
        base.append(f"workload.duration_s={args.duration_s}")
    rows = []
    for name, dep in DEPLOYMENTS.items():
        for on in (False, True):
            sc = build(compose(base + dep + [f"engine.prefix_cache={str(on).lower()}"]))
            t0 = time.perf_counter()
            m = simulate_batch(sc).metrics[0]
            wall = time.perf_counter() - t0
            tr = sc.traces[0]
            admitted = tr.prompt + tr.output <= sc.engine.max_model_len
            reuse = prefix_lib.trace_reuse(tr, 512, admitted)
            rows.append((name, on, reuse, m, wall, sc.labels["kv_blocks"]))
    print(
        f"{args.workload}, {base[1:]}; trace reuse = the trace's own prefix reuse (infinite cache)"
    )
    head = (
        "deploy",
        "KV blocks",
        "cache",
        "trace reuse",
        "hit rate",
        "evictions",
        "not cached",
        "prefill tok",
        "TTFT mean",
        "TTFT p50",
        "TTFT p99",
        "E2E mean",
        "wall s (+compile)",
    )
    print(" | ".join(head))
    for name, on, reuse, m, wall, kv in rows:
        hit = f"{m['prefix_hit_rate']:.4f}" if on else "-"
        ev = f"{m['prefix_evictions']}" if on else "-"
        failed = f"{m['prefix_insert_failed']}" if on else "-"
        print(
            " | ".join(
                [
                    name,
                    str(kv),
                    "on" if on else "off",
                    f"{reuse:.4f}",
                    hit,
                    ev,
                    failed,
                    f"{m['prefill_tokens']:,}",
                    f"{m['ttft_mean_s']:.4f}",
                    f"{m['ttft_p50_s']:.4f}",
                    f"{m['ttft_p99_s']:.4f}",
                    f"{m['e2e_mean_s']:.3f}",
                    f"{wall:.1f}",
                ]
            )
        )


if __name__ == "__main__":
    main()
