"""What an autoscaler's static capacity costs per iteration: the same 20 minutes of the Azure
conversation trace (Llama-3-8B, one H100 per replica, join-shortest-queue) on one instance, on
autoscaled fleets of up to 2 and up to 8 replicas that the load keeps at one, on the fleet held
at 8, and on 8 fixed instances.

    python benchmarks/bench_fleet.py [--reps 3]        # about a minute on 2 cores

Each row is built once and simulated `reps` times after a first (compiling) run, the rows
alternated; the fastest compiled run is reported, with its cost per iteration as a ratio to the
one instance's (measured side by side in this run: the machines are shared). Replicas that are
off have no clock and are never stepped (engine/autoscale.py), so what the capacity costs is the
[I]-wide work of routing, picking the next instance and the autoscaler's evaluations.
"""

from __future__ import annotations

import argparse
import time

from servetune.config.scenario import build
from servetune.run.api import compose, simulate_batch

BASE = [
    "workload.duration_s=1200",
    "engine.routing=jsq",
    "output.progress=false",
    "output.request_table=false",
]
ROWS = {
    "1 instance": [],
    "fleet of up to 2 at 1": ["fleet.autoscale=true", "fleet.max_replicas=2"],
    "fleet of up to 8 at 1": ["fleet.autoscale=true", "fleet.max_replicas=8"],
    "fleet of 8 held at 8": [
        "fleet.autoscale=true",
        "fleet.min_replicas=8",
        "fleet.max_replicas=8",
    ],
    "8 fixed instances": ["engine.n_instances=8"],
}


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
    rows = {name: build(compose(BASE + extra)) for name, extra in ROWS.items()}
    for sc in rows.values():
        timed(sc)  # compiles
    best = {name: float("inf") for name in rows}
    metrics = {}
    for _ in range(args.reps):
        for name, sc in rows.items():
            seconds, metrics[name] = timed(sc)
            best[name] = min(best[name], seconds)
    print("| row | mean replicas | iterations | compiled (s) | us per iteration | vs 1 instance |")
    print("|---|---|---|---|---|---|")
    base = best["1 instance"] / metrics["1 instance"]["iterations"]
    for name, m in metrics.items():
        per = best[name] / m["iterations"]
        replicas = m.get("mean_replicas") or (8 if name.startswith("8") else 1)
        print(
            f"| {name} | {replicas:.2f} | {m['iterations']:,} | {best[name]:.2f} | "
            f"{per * 1e6:.2f} | {per / base:.1f}x |"
        )


if __name__ == "__main__":
    main()
