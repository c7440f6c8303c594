"""Study (m): a day of Azure conversation traffic on H100s, static peak sizing against a tuned
autoscaler and against an autoscaler tuned with the engine's settings.

    python sweeps/fleet_day/study.py [--out outputs/study_fleet_day] [--iterations 2]

Steps (each kept in --out; a step whose file is there is not run again):
  1. sizing.json: the smallest fixed replica count meeting 99% SLO attainment with the day's
     peak (the curve's 1.34 x the hour's rate, 20 minutes of it, 2 seeds: tuning/sizing.py);
  2. tune_autoscaler/: `servetune tune` of the autoscaler's target, scale-down window and
     minimum replicas on the day (seed 0), the engine at vLLM's defaults; held out: the day's
     replica at seed 1000;
  3. tune_joint/: the same with vLLM's max_num_seqs and max_num_batched_tokens tuned too;
  4. compare.json and fleet_<arm>.parquet: the four arms (static, the autoscaler at its
     starting values, tuned, tuned jointly) simulated on the held-out day;
then figure.png (figure.py). About 40 minutes on 2 cores (the two tunings run side by side).
Every step's config is checked before any runs; a step that fails stops the study (and the
steps still running) with exit status 2 and the step named.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import traceback
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from pathlib import Path

from servetune.core.errors import ServetuneError
from servetune.engine.autoscale import COUNTS
from servetune.run.api import compose, simulate
from servetune.run.entry import script_status
from servetune.tuning import sizing
from servetune.tuning.runner import checked_config

DAY = [
    "workload.duration_s=null",
    "workload.rate_curve.curve=azure_llm_2024_weekday",
    "workload.rate_curve.span_s=86400",
    "model=llama3_70b",
    "hardware.tp=2",
    "engine.routing=jsq",
    "output.progress=false",
    "output.request_table=false",
]
FLEET = [
    "fleet.autoscale=true",
    "fleet.min_replicas=2",
    "fleet.max_replicas=8",
    "fleet.metric=num_requests_running",
    "fleet.target=12",
]
NO_ENGINE = [f"tune.space.{k}=null" for k in ("max_num_seqs", "max_num_batched_tokens")]
NO_ENGINE += ["tune.space.watermark=null", "tune.space.queue_cap=null"]
AUTOSCALER = (
    "tune.space.fleet={target: {low: 4, high: 24}, scale_down_window_s: {low: 0, high: 900},"
    " min_replicas: {low: 1, high: 4}}"
)
JOINT = [
    "tune.space.max_num_seqs={low: 16, high: 1024, scale: log}",
    "tune.space.max_num_batched_tokens={low: 1024, high: 16384, scale: log}",
    "tune.space.watermark=null",
    "tune.space.queue_cap=null",
]
HELD_OUT = 1000  # the tuner's first held-out seed (tune.eval.seed_offset)
CHILDREN: list[subprocess.Popen] = []  # the tunings started, stopped when a step fails
_STARTING = threading.Lock()  # a tuning starts, or the study stops: not both at once
_STOPPING = threading.Event()


def _size(out: Path) -> int:
    """Step 1: the static fleet (sizing.json)."""
    path = out / "sizing.json"
    if not path.exists():
        size = sizing.smallest_fleet([*DAY, "workload.duration_s=1200", "seeds=2"], limit=16)
        doc = {
            "replicas": size.replicas,
            "peak_multiplier": size.peak_multiplier,
            "tried": {str(n): v for n, v in size.tried.items()},
            "cost_per_hour_usd": size.cost_per_hour_usd,
        }
        path.write_text(json.dumps(doc, indent=1))
    return int(json.loads(path.read_text())["replicas"])


def _tune_overrides(space: list[str], iterations: int) -> list[str]:
    """The overrides of one tuning arm (steps 2 and 3)."""
    return [
        *DAY,
        *FLEET,
        *space,
        f"tune.iterations={iterations}",
        "tune.pairs=1",
        "tune.eval.seeds=1",
        "tune.eval.sensitivity=false",
    ]


def _tune(out: Path, name: str, space: list[str], iterations: int) -> dict:
    """Steps 2 and 3: one `servetune tune` run (a subprocess, so two run side by side);
    its summary (tune_summary.json). A tuning that fails is a ServetuneError
    naming the step, its exit status and its log."""
    run_dir = out / name
    if not (run_dir / "tune_summary.json").exists():
        cmd = [
            sys.executable,
            "-m",
            "servetune.cli.main",
            "tune",
            *_tune_overrides(space, iterations),
            f"hydra.run.dir={run_dir}",
        ]
        with _STARTING:
            if _STOPPING.is_set():  # another step failed: this one does not start
                raise ServetuneError(f"step {name}: not started (another step failed)")
            proc = subprocess.Popen(cmd)
            CHILDREN.append(proc)
        if proc.wait() != 0:
            raise ServetuneError(
                f"step {name}: servetune tune exited with {proc.returncode} (its log: "
                f"{run_dir / 'cli.log'}); the study stops"
            )
    return json.loads((run_dir / "tune_summary.json").read_text())


def _check(iterations: int) -> None:
    """Every step's config, before any step runs: a refused tuning stops the study in a
    second, not after the sizing's simulations."""
    if iterations < 1:
        raise ServetuneError(f"--iterations: got {iterations}; expected at least 1")
    for space in ([*NO_ENGINE, AUTOSCALER], [*JOINT, AUTOSCALER]):
        checked_config(compose(_tune_overrides(space, iterations)))


def _tuned(summary: dict) -> dict:
    """A tuning's tuned point (tune_summary.json's "tuned": the point nearest the start of those
    as good as the best found, tuning/recommend.py; "best" in a summary written before it)."""
    return summary.get("tuned") or summary["best"]


def _overrides(values: dict) -> list[str]:
    """The config overrides of tuned values (policy keys and fleet.<key>; replica and Pods
    counts rounded as the simulator rounds them, engine/autoscale.whole)."""
    out = []
    for key, value in values.items():
        if key.startswith("fleet.") and key[6:] in COUNTS:
            out.append(f"{key}={int(value + 0.5)}")
        elif key.startswith("fleet.") or key in ("max_num_seqs", "max_num_batched_tokens"):
            out.append(f"{key if key.startswith('fleet.') else 'policy.' + key}={value!r}")
    return out


def _compare(out: Path, replicas: int, auto: dict, joint: dict) -> dict:
    """Step 4: the four arms on the held-out day: metrics (compare.json) and each fleet."""
    path = out / "compare.json"
    if path.exists():
        return json.loads(path.read_text())
    arms = {
        "static peak sizing": [f"engine.n_instances={replicas}"],
        "autoscaler, HPA defaults": FLEET,
        "tuned autoscaler": FLEET + _overrides(_tuned(auto)),
        "tuned autoscaler + engine": FLEET + _overrides(_tuned(joint)),
    }
    doc = {}
    for k, (arm, extra) in enumerate(arms.items()):
        res = simulate([*DAY, *extra, f"seed={HELD_OUT}"])
        m = res.metrics[0]
        doc[arm] = {"overrides": extra, **{key: m.get(key) for key in KEEP}}
        if res.fleets:
            res.fleets[0]["replicas"].to_parquet(out / f"fleet_{k}.parquet")
            res.fleets[0]["hourly"].to_parquet(out / f"hourly_{k}.parquet")
    path.write_text(json.dumps(doc, indent=1))
    return doc


KEEP = (
    "useful_tokens_per_dollar",
    "slo_attainment",
    "cost_usd",
    "goodput_rps",
    "ttft_p99_s",
    "tpot_p99_s",
    "mean_replicas",
    "peak_replicas",
    "replica_hours",
    "scale_ups",
    "cold_start_replica_s",
    "cold_start_cost_usd",
    "n_requests",
)


def main(argv: list[str] | None = None) -> None:
    """Run the study's steps and print the comparison."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="outputs/study_fleet_day")
    ap.add_argument("--iterations", type=int, default=2)
    args = ap.parse_args(argv)
    _check(args.iterations)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    pool = ThreadPoolExecutor(3)  # the two tunings and the sizing side by side
    size = pool.submit(_size, out)
    auto = pool.submit(_tune, out, "tune_autoscaler", [*NO_ENGINE, AUTOSCALER], args.iterations)
    joint = pool.submit(_tune, out, "tune_joint", [*JOINT, AUTOSCALER], args.iterations)
    steps = (size, auto, joint)
    wait(steps, return_when=FIRST_EXCEPTION)
    failed = [f.exception() for f in steps if f.done() and f.exception() is not None]
    if failed:  # the first failure (in step order) ends the study, and the steps still running
        with _STARTING:
            _STOPPING.set()
            for child in CHILDREN:
                child.terminate()
        if isinstance(failed[0], ServetuneError):
            print(f"error: {failed[0]}", file=sys.stderr, flush=True)
        else:
            traceback.print_exception(failed[0])
        sys.stderr.flush()
        os._exit(2)  # the sizing's thread cannot be interrupted; the process ends here
    pool.shutdown()
    replicas, auto_doc, joint_doc = size.result(), auto.result(), joint.result()
    doc = _compare(out, replicas, auto_doc, joint_doc)
    for arm, m in doc.items():
        print(
            f"{arm}: {m['useful_tokens_per_dollar'] / 1e3:.1f}k useful tok/$, "
            f"attainment {m['slo_attainment']:.4f}, ${m['cost_usd']:.0f}/day, "
            f"mean replicas {m['mean_replicas'] or replicas}"
        )


if __name__ == "__main__":
    sys.exit(script_status(main))
