"""Run estimates against measured runs: for each case, the first line's estimate (run/estimate.py,
made before the run, from a fresh record: the model alone, no correction from this machine's
runs) and the measured wall time of the same work, with their ratio; cases too long to run are
shown with their estimate and the guard's refusal (run/guard.py).

    python benchmarks/bench_estimate.py                  # every case (~20 min on 2 cores)
    python benchmarks/bench_estimate.py --cases default,hour --json out.json
    python benchmarks/bench_estimate.py --calibrate      # the runs behind the coefficients

Each case runs in a fresh process (its compilation counted, JAX's persistent cache off, as the
estimate of a first run assumes); measured is simulate_batch's wall time (the compiled rollout,
the host's per-request results and metrics: what the estimate covers; building the scenario
excluded), or tune()'s for a tuning case. The README fleet day takes 5-10 minutes alone.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

QUIET = ["output.progress=false", "output.request_table=false"]
DAY = [
    "workload.duration_s=null",
    "workload.rate_curve.curve=azure_llm_2024_weekday",
    "workload.rate_curve.span_s=86400",
]
FLEET = [
    "model=llama3_70b",
    "hardware.tp=2",
    "engine.routing=jsq",
    "fleet.autoscale=true",
    "fleet.min_replicas=2",
    "fleet.max_replicas=8",
    "fleet.metric=num_requests_running",
    "fleet.target=12",
]
TUNE = [
    "workload=poisson",
    "workload.rate=4",
    "workload.duration_s=60",
    "tune.iterations=3",
    "tune.pairs=2",
    "tune.eval.seeds=2",
    "tune.eval.sensitivity=false",
]
# name -> (overrides, "simulate" | "tune", whether it is run or only estimated)
CASES = {
    "default": ([], "simulate", True),
    "hour": (["workload.duration_s=null"], "simulate", True),
    "grid 4 seeds x 3": (["seeds=4", "grid.max_num_seqs=[64,128,256]"], "simulate", True),
    "day on one instance": (DAY, "simulate", True),
    "README fleet day": (DAY + FLEET, "simulate", True),
    "256 instances for 191 requests": (
        ["workload.max_requests=191", "engine.n_instances=256"],
        "simulate",
        True,
    ),
    "small tuning run": (TUNE, "tune", True),
    "512 replicas for a day": (
        DAY + ["engine.n_instances=512", "engine.routing=jsq"],
        "simulate",
        False,
    ),
    "a day at 50x (24 M requests)": (DAY + ["workload.rate_scale=50"], "simulate", False),
    "README fleet day tuned 8 x 9": (
        DAY + FLEET + ["tune.iterations=8", "tune.pairs=4", "tune.eval.seeds=2"],
        "tune",
        False,
    ),
}

CHILD = r"""
import json, sys, time, tempfile
overrides, command, run = json.loads(sys.argv[1])
from servetune.core.errors import ResourceLimitError
out = {}
try:
    if command == "tune":
        from servetune.tuning.runner import estimate_tuning, tune
        folder = tempfile.mkdtemp()
        est = estimate_tuning(overrides + ["guard.confirmed=true"], out_dir=folder)
        out["estimate_s"] = est.wall_s
        try:
            estimate_tuning(overrides, out_dir=folder)
        except ResourceLimitError as err:
            out["refused"] = str(err)
        if run:
            start = time.perf_counter()
            tune(overrides + ["guard.confirmed=true"], out_dir=folder, log=lambda line: None)
            out["measured_s"] = time.perf_counter() - start
    else:
        from servetune.run import api
        cfg = api.compose(overrides + ["guard.confirmed=true"])
        scenario, est = api.planned(cfg)
        out.update(estimate_s=est.wall_s, compile_s=est.compile_s, memory=est.peak_bytes,
                   bodies=est.load.bodies, iterations=est.load.iterations,
                   replicas=est.load.replicas, requests=scenario.outline.requests)
        try:
            api.estimate(overrides)
        except ResourceLimitError as err:
            out["refused"] = str(err)
        if run:
            start = time.perf_counter()
            result = api.simulate_batch(scenario)
            out["measured_s"] = time.perf_counter() - start
            m = result.metrics[0]
            out.update(measured_iterations=m["iterations"],
                       measured_bodies=m["iterations"] - m["leaped_iterations"],
                       measured_replicas=m.get("mean_replicas"))
except ResourceLimitError as err:
    out["refused"] = str(err)
print("RESULT " + json.dumps(out))
"""


def run_case(name: str, overrides: list, command: str, run: bool) -> dict:
    """One case in a fresh process: its estimate (a fresh record) and, if run, the measured
    wall time."""
    env = dict(os.environ)
    env["SERVETUNE_PACE_FILE"] = os.path.join(tempfile.mkdtemp(), "pace.json")  # no correction
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    spec = json.dumps([QUIET + overrides, command, run])
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, spec], capture_output=True, text=True, env=env, check=False
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if not lines:
        raise SystemExit(f"{name}: failed\n{proc.stderr[-3000:]}")
    out = json.loads(lines[-1][len("RESULT ") :])
    out.update(name=name, process_s=time.perf_counter() - start)
    return out


# the runs the coefficients of run/estimate.py were read from (--calibrate): name -> overrides
CALIBRATION = {
    "default": [],
    "hour": ["workload.duration_s=null"],
    "4 instances, hour": ["workload.duration_s=null", "engine.n_instances=4", "engine.routing=jsq"],
    "4 instances, 191 requests": ["workload.max_requests=191", "engine.n_instances=4"],
    "4 x 191, width 256": [
        "workload.max_requests=191",
        "engine.n_instances=4",
        "engine.start_width=256",
    ],
    "4 x 191, width 1024": [
        "workload.max_requests=191",
        "engine.n_instances=4",
        "engine.start_width=1024",
    ],
    "8 instances, 191 requests": ["workload.max_requests=191", "engine.n_instances=8"],
    "16 instances, 191 requests": ["workload.max_requests=191", "engine.n_instances=16"],
    "64 instances, 191 requests": ["workload.max_requests=191", "engine.n_instances=64"],
    "fleet hour": ["workload.duration_s=null"] + FLEET,
    "overloaded 4x": ["workload.rate_scale=4"],
    "grid 4 seeds x 3": ["seeds=4", "grid.max_num_seqs=[64,128,256]"],
}


def calibrate(reps: int = 2) -> None:
    """Per run: the first call (compilation in), the best compiled one, the iterations and
    loop bodies (iterations not leaped) from its metrics, the width, and the seconds per body
    that the coefficients were fitted to."""
    from servetune.config.scenario import build
    from servetune.run.api import compose, simulate_batch

    print(
        "| run | first (s) | compiled (s) | compilation (s) | iterations | bodies | width | "
        "us per body |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, overrides in CALIBRATION.items():
        sc = build(compose(QUIET + overrides))
        times = []
        for _ in range(reps + 1):
            start = time.perf_counter()
            m = simulate_batch(sc).metrics[0]
            times.append(time.perf_counter() - start)
        bodies = m["iterations"] - m["leaped_iterations"]
        best = min(times[1:])
        print(
            f"| {name} | {times[0]:.2f} | {best:.2f} | {times[0] - best:.1f} | "
            f"{m['iterations']:,} | {bodies:,} | {m['entry_width']} | {1e6 * best / bodies:.0f} |",
            flush=True,
        )


def _time(s: float | None) -> str:
    if s is None:
        return ""
    if s >= 86400:
        return f"{s / 86400:.1f} d"
    if s >= 3600:
        return f"{s / 3600:.1f} h"
    if s >= 120:
        return f"{s / 60:.1f} min"
    return f"{s:.1f} s"


def main() -> None:
    """Print the table (and write the raw figures with --json)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", help="comma-separated case names (default: all)")
    ap.add_argument("--json", help="write the raw figures here")
    ap.add_argument(
        "--calibrate",
        action="store_true",
        help="time the runs the model's coefficients were read from instead (in this process)",
    )
    args = ap.parse_args()
    if args.calibrate:
        calibrate()
        return
    names = args.cases.split(",") if args.cases else list(CASES)
    rows = []
    for name in names:
        overrides, command, run = CASES[name]
        rows.append(run_case(name, overrides, command, run))
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    print("| case | estimate | measured | measured / estimate | guard (limit 1 h) |")
    print("|---|---:|---:|---:|---|")
    for r in rows:
        measured = r.get("measured_s")
        ratio = f"{measured / r['estimate_s']:.2f}" if measured else ""
        guard = "refused: " + r["refused"][:160] + "..." if "refused" in r else "runs"
        print(
            f"| {r['name']} | {_time(r.get('estimate_s'))} | {_time(measured)} | {ratio} | "
            f"{guard} |"
        )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
