"""Prediction accuracy against a real vLLM engine: after calibrating
on one observed run, are the mean and P90 of TTFT and E2E that servetune predicts for a
held-out trace slice within max(10%, 2x the noise floor) of the observed ones, at up to 70%
load?

    OMP_NUM_THREADS=1 python benchmarks/bench_validate.py --out /tmp/bench_validate \
        --vllm-python /path/to/a/venv/with/servetune[vllm]/bin/python      # ~8 min

The engine is `servetune observe`'s (vLLM 0.32's `LLMEngine` on the CPU, random-weight tiny
Llama, virtual clock: each step advances it by its CPU time), run through real_engine.py.
For each --rate-scales value:

1. observe the calibration slice (--trace from --calibrate-start-s for --duration-s trace
   seconds) and, --repeats times, the held-out slice (from --predict-start-s), all with the
   same engine settings (vLLM's CPU API-server defaults: 128 sequences, 2,048 tokens);
2. `servetune validate --calibrate-on CAL --predict HELDOUT_1 --noise-floor HELDOUT_2 --fit
   FIT`: the linear cost fitted to CAL's steps, the held-out slice simulated with it;
3. the target per statistic: |predicted / observed - 1| <= max(10%, 2 x the noise floor),
   the noise floor being the largest |HELDOUT_k / HELDOUT_1 - 1| of the same statistic.

The load is the held-out run's busy fraction: engine time over the virtual clock's span. Each
run's step time over the calibrated model's (`speed`) says how fast the machine ran it: the
virtual clock takes out time the process was descheduled, but not contention for caches and
memory bandwidth, which moved whole runs by 10-20% on the shared 2-core VM.
Outputs under --out: the observe folders and logs, validate_<rate>/ (validation.json and the
CDF figure), bench_validate.json and bench_validate.txt (the printed table). --reuse keeps
observe folders that hold the same run.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from real_engine import check_vllm, observe, step_time_ratio

from servetune.validate import predict
from servetune.validate.calibrate import load_measurements
from servetune.validate.observe import EngineSettings

TARGET_METRICS = ("ttft_s", "e2e_s")
TARGET_STATS = ("mean", "p90")
FLOOR = 0.10  # the target's smallest allowed relative error


def busy_fraction(folder: Path) -> float:
    """Engine time over the observed run's clock span (from 0 to the last step's end)."""
    steps = pd.read_csv(folder / "steps.csv", usecols=["t_s", "seconds"])
    return float(steps["seconds"].sum() / (steps["t_s"].iloc[-1] + steps["seconds"].iloc[-1]))


def speed(folder: Path, cost: dict) -> float:
    """An observed run's step time over the calibrated model's (real_engine.step_time_ratio):
    above 1, the machine ran that run slower than the calibration run."""
    return step_time_ratio(load_measurements(folder / "steps.csv"), cost)


def noise_floor(runs: list[dict]) -> dict:
    """{metric: {stat: the largest |run k / run 1 - 1|}} over the repeated observations'
    request tables (a list of predict._observed results' tables, run 1 first)."""
    out = {}
    for m in predict.METRICS:
        out[m] = {}
        for s, fn in predict.STATS.items():
            first = float(fn(runs[0][m].to_numpy(float)))
            out[m][s] = max(abs(float(fn(r[m].to_numpy(float))) / first - 1) for r in runs[1:])
    return out


def check_rate(args, rate: float, engine: EngineSettings) -> dict:
    """Observe, validate and judge one rate scale; returns its rows and wall times."""
    t0 = time.perf_counter()
    tag = f"{rate:g}"
    cal, _ = observe(args, f"calibrate_{tag}", args.calibrate_start_s, engine, rate)
    held = [
        observe(args, f"heldout_{tag}_{k + 1}", args.predict_start_s, engine, rate)[0]
        for k in range(args.repeats)
    ]
    out = args.out / f"validate_{tag}"
    argv = [
        "--calibrate-on",
        str(cal),
        "--predict",
        str(held[0]),
        "--noise-floor",
        str(held[1]),
        "--fit",
        args.fit,
        "--out",
        str(out),
    ]
    if predict.main(argv) != 0:
        raise SystemExit(f"error: servetune validate {' '.join(argv)} failed")
    report = json.loads((out / "validation.json").read_text())
    noise = noise_floor([predict.read_observation(h)[2] for h in held])
    rows = []
    for m in predict.METRICS:
        for s in predict.STATS:
            cell = report["prediction"][m][s]
            allowed = max(FLOOR, 2 * noise[m][s])
            judged = m in TARGET_METRICS and s in TARGET_STATS
            rows.append(
                {
                    "rate_scale": rate,
                    "load": busy_fraction(held[0]),
                    "metric": m,
                    "stat": s,
                    "predicted": cell["predicted"],
                    "observed": cell["observed"],
                    "error": cell["rel_error"],
                    "noise_floor": noise[m][s],
                    "allowed": allowed if judged else np.nan,
                    "within": (abs(cell["rel_error"]) <= allowed) if judged else None,
                }
            )
    cost = report["calibration"]["coefficients"]
    speeds = {"calibration": speed(cal, cost), **{h.name: speed(h, cost) for h in held}}
    print(
        "  step time over the calibrated model's: "
        + ", ".join(f"{k} {v:.3f}" for k, v in speeds.items()),
        flush=True,
    )
    return {
        "rows": rows,
        "calibration": report["calibration"],
        "speed": speeds,
        "loads": {h.name: busy_fraction(h) for h in held},
        "wall_s": time.perf_counter() - t0,
    }


def render(table: pd.DataFrame) -> str:
    """The results as a markdown table (times in ms)."""
    header = (
        "| rate | load | metric | stat | predicted (ms) | observed (ms) | error | "
        "noise floor | allowed | within |"
    )
    lines = [header, "|---|---:|---|---|---:|---:|---:|---:|---:|---|"]
    for r in table.itertuples():
        allowed = "" if np.isnan(r.allowed) else f"{r.allowed:.1%}"
        within = {None: "", True: "yes", False: "NO"}[r.within]
        lines.append(
            f"| {r.rate_scale:g} | {r.load:.2f} | {r.metric.removesuffix('_s')} | "
            f"{r.stat} | {r.predicted * 1e3:.1f} | {r.observed * 1e3:.1f} | "
            f"{r.error:+.1%} | {r.noise_floor:.1%} | {allowed} | {within} |"
        )
    return "\n".join(lines)


def parse_args(argv=None) -> argparse.Namespace:
    """The command line (see --help)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--vllm-python",
        default=sys.executable,
        help="an interpreter with the servetune[vllm] extra (default: this one)",
    )
    ap.add_argument("--out", type=Path, default=Path("/tmp/bench_validate"))
    ap.add_argument("--trace", default="azure_llm_2023_conv.csv")
    ap.add_argument("--calibrate-start-s", type=float, default=0.0)
    ap.add_argument("--predict-start-s", type=float, default=60.0)
    ap.add_argument("--duration-s", type=float, default=60.0, help="trace seconds per slice")
    ap.add_argument("--rate-scales", type=float, nargs="+", default=[0.3, 0.45])
    ap.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="observations of the held-out slice (>= 2: the noise floor)",
    )
    ap.add_argument("--fit", choices=predict.FITS, default="rel+total")
    ap.add_argument("--num-gpu-blocks", type=int, default=512)
    ap.add_argument("--max-model-len", type=int, default=8192)
    ap.add_argument("--reuse", action="store_true", help="keep observe folders of the same run")
    args = ap.parse_args(argv)
    if args.repeats < 2:
        ap.error("--repeats: expected at least 2 (the noise floor compares two observations)")
    args.rate_scale = args.rate_scales[0]  # real_engine.observe's default; each call names one
    return args


def main(argv=None) -> dict:
    """Run the benchmark; returns bench_validate.json's content."""
    args = parse_args(argv)
    check_vllm(args.vllm_python)
    args.out.mkdir(parents=True, exist_ok=True)
    engine = EngineSettings(
        max_num_seqs=128,
        max_num_batched_tokens=2048,
        watermark=0.0,
        num_gpu_blocks=args.num_gpu_blocks,
        block_size=32,
        max_model_len=args.max_model_len,
        enable_prefix_caching=False,
        seed=0,
    )
    results = {f"{r:g}": check_rate(args, r, engine) for r in args.rate_scales}
    table = pd.DataFrame([row for res in results.values() for row in res["rows"]])
    text = render(table)
    judged = table[table["within"].notna()]
    verdict = (
        f"target (mean and P90 of TTFT and E2E within max(10%, 2x noise floor)): "
        f"{int(judged['within'].sum())}/{len(judged)} within"
    )
    print(f"\n{text}\n\n{verdict}")
    (args.out / "bench_validate.txt").write_text(f"{text}\n\n{verdict}\n")
    out = {
        "args": {k: str(v) for k, v in vars(args).items()},
        "rows": table.to_dict("records"),
        "calibration": {k: v["calibration"] for k, v in results.items()},
        "speed": {k: v["speed"] for k, v in results.items()},
        "loads": {k: v["loads"] for k, v in results.items()},
        "wall_s": {k: v["wall_s"] for k, v in results.items()},
    }
    (args.out / "bench_validate.json").write_text(json.dumps(out, indent=2, default=str))
    return out


if __name__ == "__main__":
    main()
