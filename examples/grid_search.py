"""Simulate a policy grid in one compiled, vmapped call and print the best point.

A 4 x 2 grid of vLLM's two batch limits (max_num_seqs x max_num_batched_tokens) on a Poisson
workload at 20 requests/s, 2 seeds each: 16 scenarios in one call (policy values are traced, so
the grid compiles once). The best point is the one with the most useful tokens per dollar among
those that meet the SLOs (TTFT <= 2 s, TPOT <= 0.1 s) for at least 95% of requests, averaged
over seeds. About a minute on 2 CPU cores.

    python examples/grid_search.py
"""

from servetune.config.scenario import build
from servetune.run.api import compose, simulate_batch

OVERRIDES = [
    "workload=poisson",
    "workload.rate=20",
    "workload.duration_s=30",
    "window.drain_s=120",
    "seeds=2",
    "grid.max_num_seqs=[32,64,128,256]",
    "grid.max_num_batched_tokens=[2048,8192]",
]
KEYS = ["policy.max_num_seqs", "policy.max_num_batched_tokens"]
METRICS = ["goodput_rps", "slo_attainment", "ttft_p99_s", "useful_tokens_per_dollar"]
MIN_ATTAINMENT = 0.95


def main():
    scenario = build(compose(OVERRIDES))
    n = len(scenario.seeds) * len(scenario.grid_points)
    print(
        f"simulating {n} scenarios ({len(scenario.grid_points)} grid points x "
        f"{len(scenario.seeds)} seeds) in one compiled call ..."
    )
    result = simulate_batch(scenario)
    table = result.table  # one row per scenario: seed, policy.* grid values, metrics
    points = table.groupby(KEYS)[METRICS].agg(["mean", "std"])
    print(points.round(3).to_string())
    ok = points[points[("slo_attainment", "mean")] >= MIN_ATTAINMENT]
    if ok.empty:
        print(f"no point reaches {MIN_ATTAINMENT:.0%} SLO attainment")
        return
    best = ok[("useful_tokens_per_dollar", "mean")].idxmax()
    row = points.loc[best]
    print(
        f"\nbest: max_num_seqs={best[0]:g}, max_num_batched_tokens={best[1]:g}: "
        f"{row[('useful_tokens_per_dollar', 'mean')]:,.0f} "
        f"+- {row[('useful_tokens_per_dollar', 'std')]:,.0f} useful tokens per dollar, "
        f"SLO attainment {row[('slo_attainment', 'mean')]:.1%}, goodput "
        f"{row[('goodput_rps', 'mean')]:.2f} req/s, P99 TTFT {row[('ttft_p99_s', 'mean')]:.2f} s "
        f"({result.wall_s:.0f} s for the batch, compilation included)"
    )


if __name__ == "__main__":
    main()
