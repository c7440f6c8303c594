"""A day of traffic: the Azure conversation hour against a day of it under the bundled weekday
rate curve (workload.rate_curve), one scenario each, Llama-3-8B on one H100, vLLM's defaults.

    python benchmarks/bench_day.py [--reps 3]        # about 2 minutes on 2 cores

Each row is built once and simulated `reps` times after a first (compiling) run, the two rows
alternated; the fastest compiled run is reported, with the day's cost per request and per
iteration as ratios to the hour's (measured side by side in this run: the machines are shared).
Wall times are of `servetune.simulate_batch` (the compiled rollout and the host's per-request
results and metrics; building the scenario excluded).
"""

from __future__ import annotations

import argparse
import time

from servetune.config.scenario import build
from servetune.run.api import compose, simulate_batch

HOUR = ["workload.duration_s=null", "output.progress=false", "output.request_table=false"]
DAY = HOUR + [
    "workload.rate_curve.curve=azure_llm_2024_weekday",
    "workload.rate_curve.span_s=86400",
]


def timed(sc) -> tuple[float, dict]:
    """(seconds, metrics) of one simulate_batch call."""
    start = time.perf_counter()
    metrics = simulate_batch(sc).metrics[0]
    return time.perf_counter() - start, metrics


def main() -> None:
    """Print the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3, help="compiled runs per row")
    args = ap.parse_args()
    rows = {"hour": build(compose(HOUR)), "day": build(compose(DAY))}
    first = {name: timed(sc)[0] for name, sc in rows.items()}  # compiles
    best = {name: float("inf") for name in rows}
    metrics = {}
    for _ in range(args.reps):
        for name, sc in rows.items():
            seconds, metrics[name] = timed(sc)
            best[name] = min(best[name], seconds)
    print(
        "| row | requests | iterations | simulated (h) | first run (s) | compiled (s) | "
        "us per request | us per iteration |"
    )
    print("|---|---|---|---|---|---|---|---|")
    per = {}
    for name in rows:
        m = metrics[name]
        per[name] = (best[name] / m["n_requests"], best[name] / m["iterations"])
        print(
            f"| {name} | {m['n_requests']:,} | {m['iterations']:,} | "
            f"{m['sim_duration_s'] / 3600:.1f} | {first[name]:.2f} | {best[name]:.2f} | "
            f"{per[name][0] * 1e6:.1f} | {per[name][1] * 1e6:.2f} |"
        )
    print(
        f"\nday / hour: {best['day'] / best['hour']:.1f}x the time for "
        f"{metrics['day']['n_requests'] / metrics['hour']['n_requests']:.1f}x the requests; "
        f"per request {per['day'][0] / per['hour'][0]:.2f}, per iteration "
        f"{per['day'][1] / per['hour'][1]:.2f}"
    )


if __name__ == "__main__":
    main()
