"""Sim-to-real tuning check: does a policy servetune tunes
in simulation change a real vLLM engine's goodput the way the simulator says it will?

    OMP_NUM_THREADS=1 nice -n 5 python benchmarks/bench_sim2real.py --out /tmp/sim2real \
        --vllm-python /path/to/a/venv/with/servetune[vllm]/bin/python     # ~12 min

The real engine is `servetune observe`'s (servetune/validate/observe.py): vLLM 0.32's own
`LLMEngine` stepped in-process on the CPU with a random-weight tiny Llama, on a virtual clock
(each engine step advances it by that step's CPU time: a busy machine does not stretch it, but
contention for caches and memory still moves a step's CPU time, so the step-time column says
how fast each run went). Each observation runs in a subprocess of `--vllm-python` (an
interpreter with the servetune[vllm] extra; this script itself needs only servetune, and
without vLLM there it stops with a message saying what to install). Steps:

1. vLLM's defaults: the engine arguments vLLM 0.32 picks for an API server on this platform
   (`EngineArgs.get_batch_defaults`, CPU: max_num_seqs 128, max_num_batched_tokens 2048; the
   `watermark` field's default, 0), asked of vLLM itself, on a fixed deployment
   (--num-gpu-blocks KV blocks of --block-size tokens, --max-model-len, prefix caching off:
   the trace carries no prefixes).
2. Observe the training slice (--trace from --train-start-s for --duration-s trace seconds, at
   --rate-scale) with vLLM's defaults; fit servetune's linear step-time model to its engine
   steps (`servetune calibrate`'s fit; --calibration rel+total, the default, then scales it so
   its total matches the measured busy time: a relative-error fit runs low on noisy steps).
3. Tune in servetune (ES, --iterations x (2 --pairs + 1) policies, steps pinned by --sigma and
   --learning-rate) on the training slice with the calibrated cost and the same deployment,
   starting at vLLM's defaults: max_num_seqs, max_num_batched_tokens (at most --tokens-range's
   HIGH, by default the largest chunk the calibration saw) and the KV watermark, the knobs the
   real engine takes (queue_cap, a gateway's, is left out), for useful tokens per dollar
   subject to --slo-target attainment of TTFT <= --slo-ttft-s and TPOT <= --slo-tpot-s; export
   the vLLM arguments (export/vllm_args.json) and map them onto the observed engine (refusing
   any it cannot run as exported).
4. On the held-out slice (--holdout-start-s), observe the engine --repeats times with vLLM's
   defaults and --repeats times with the exported arguments, alternating, and simulate both
   settings twice: with the training run's cost (the prediction) and with a cost refitted on
   the held-out default run 1 (no policy information; it separates the policy effect from the
   machine's speed drifting between the runs).
5. Report, per setting, predicted and observed goodput (requests meeting every SLO per second
   of the arrival window), useful tokens per dollar (their output tokens over the configured
   GPU price x the run's length: `hardware=h100`'s catalog price unless --price-per-gpu-hour),
   SLO attainment, P99 TTFT / TPOT, preemptions, busy fraction and each run's step time over
   the training cost's; the predicted and the observed change (tuned over defaults, observed
   runs averaged, and run k over run k); and the noise floor: the largest relative difference
   between two observations of one setting. The target: the observed change has the predicted
   sign and lies within the noise floor of the prediction.

Outputs under --out: the observe folders and their logs, calibration.json, tune/ (the tuner's
run and export), sim2real.csv (one row per setting and source), sim2real.json (everything,
with wall times) and sim2real.txt (the printed tables). --reuse keeps observe folders that
hold the same run (to redo the analysis without the engine).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from real_engine import ENGINE_ENV, check_vllm, observe, step_time_ratio

from servetune.run.api import simulate
from servetune.tuning.runner import tune
from servetune.validate.observe import EngineSettings
from servetune.validate.predict import FITS, calibrated_cost, overrides_for

# the engine knobs the tuner may move: each one `servetune observe` can pass to vLLM
TUNED_KEYS = ("max_num_seqs", "max_num_batched_tokens", "watermark")
# exported vLLM arguments and the value the observed engine runs them at (anything else in
# vllm_args.json is refused: the observed run would not be the exported one)
FIXED_ARGS = {
    "enable_chunked_prefill": True,
    "scheduling_policy": "fcfs",
    "scheduler_reserve_full_isl": True,
    "tensor_parallel_size": 1,
}
DEPLOY_ARGS = {
    "num_gpu_blocks_override": "num_gpu_blocks",
    "block_size": "block_size",
    "max_model_len": "max_model_len",
    "enable_prefix_caching": "enable_prefix_caching",
}
METRICS = (
    "goodput_rps",
    "useful_tokens_per_dollar",
    "slo_attainment",
    "ttft_p99_s",
    "tpot_p99_s",
    "preemptions",
    "busy_fraction",
    "clock_end_s",
    "step_time_ratio",
)
CHANGE_METRICS = ("goodput_rps", "useful_tokens_per_dollar")
PRIMARY, HELDOUT_COST = "training cost", "held-out cost"  # the two predictions' labels

_DEFAULTS_SNIPPET = """
import dataclasses, json
from vllm import EngineArgs
from vllm.usage.usage_lib import UsageContext
tokens, seqs = EngineArgs.get_batch_defaults(1)
ctx = UsageContext.OPENAI_API_SERVER
watermark = {f.name: f.default for f in dataclasses.fields(EngineArgs)}["watermark"]
print(json.dumps({"max_num_seqs": seqs[ctx], "max_num_batched_tokens": tokens[ctx],
                  "watermark": watermark}))
"""


# --------------------------------------------------------------------------- the real engine


def vllm_server_defaults(python: str) -> dict:
    """The scheduler arguments vLLM picks for an API server on this platform when none are
    given (asked of vLLM in `python`): max_num_seqs, max_num_batched_tokens, watermark."""
    proc = subprocess.run(
        [python, "-c", _DEFAULTS_SNIPPET],
        capture_output=True,
        text=True,
        env={**os.environ, **ENGINE_ENV},
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(f"error: asking vLLM for its defaults failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def engine_from_vllm_args(vllm_args: dict, base: EngineSettings) -> EngineSettings:
    """The observed engine that runs exported vLLM arguments: the tuned knobs and the
    deployment from them, the rest of `base`. ValueError naming any argument the observed
    engine would not run as exported (the model is the observed engine's own tiny Llama: the
    cost the tuner used was calibrated on it)."""
    values = dataclasses.asdict(base)
    unknown = []
    for key, value in vllm_args.items():
        if key in TUNED_KEYS:
            values[key] = type(values[key])(value)
        elif key in DEPLOY_ARGS:
            field = DEPLOY_ARGS[key]
            if type(values[field])(value) != values[field]:
                unknown.append(f"{key}={value!r} (the observed deployment has {values[field]!r})")
        elif key in FIXED_ARGS:
            if value != FIXED_ARGS[key]:
                unknown.append(f"{key}={value!r} (observe runs {FIXED_ARGS[key]!r})")
        elif key != "model":
            unknown.append(f"{key}={value!r}")
    if unknown:
        raise ValueError(
            "exported vLLM arguments the observed engine cannot run as exported: "
            + "; ".join(unknown)
        )
    return EngineSettings(**values)


# --------------------------------------------------------------------------- simulation side


def sim_overrides(meta: dict, cost: dict, args) -> list[str]:
    """servetune overrides that simulate an observed run's slice and engine (validate's
    mapping) with `cost`, the SLOs and price of this benchmark, every request counted as
    passing its task check (the observed engine has no quality model) and the slice replayed
    as recorded."""
    out = overrides_for(meta, cost) + [
        f"slo.ttft_s={args.slo_ttft_s}",
        f"slo.tpot_s={args.slo_tpot_s}",
        "quality.enabled=false",
        "workload.replicas.block_s=null",
    ]
    if args.price_per_gpu_hour is not None:
        out.append(f"hardware.price_per_gpu_hour={args.price_per_gpu_hour}")
    return out


def predict(meta: dict, cost: dict, args) -> tuple[dict, pd.DataFrame]:
    """(metrics, request table) servetune predicts for an observed run's slice and engine."""
    res = simulate(sim_overrides(meta, cost, args))
    m, table = res.metrics[0], res.requests[0]
    m = {
        **{
            k: m[k]
            for k in (
                "goodput_rps",
                "useful_tokens_per_dollar",
                "slo_attainment",
                "ttft_p99_s",
                "tpot_p99_s",
                "preemptions",
                "busy_fraction",
                "useful_tokens",
                "cost_usd",
                "window_s",
            )
        },
        "clock_end_s": float(m["provisioned_s"]),
        "price_per_gpu_hour": float(m["cost_usd"] / (m["provisioned_s"] / 3600.0)),
    }
    return m, table


def tune_policy(train_meta: dict, cost: dict, start: dict, args) -> dict:
    """ES-tune TUNED_KEYS on the training slice from `start` (vLLM's defaults); returns the
    tuner's summary with the exported vLLM arguments (OUT/tune/export/vllm_args.json)."""
    space = {
        "max_num_seqs": f"{{low: {args.seqs_range[0]}, high: {args.seqs_range[1]}, scale: log}}",
        "max_num_batched_tokens": f"{{low: {args.tokens_range[0]}, "
        f"high: {args.tokens_range[1]}, scale: log}}",
        "watermark": f"{{low: 0.0, high: {args.watermark_max}, scale: linear}}",
    }
    overrides = (
        sim_overrides(train_meta, cost, args)
        + [f"policy.{k}={v}" for k, v in start.items()]
        + [f"tune.space.{k}={v}" for k, v in space.items()]
        + [
            "tune.space.queue_cap=null",
            f"tune.iterations={args.iterations}",
            f"tune.pairs={args.pairs}",
            f"tune.sigma={args.sigma}",
            f"tune.learning_rate={args.learning_rate}",
            f"tune.seed={args.tune_seed}",
            f"tune.objective.slo_target={args.slo_target}",
            "tune.eval.seeds=0",
            "tune.resume=false",
            "tune.export_policy=tuned",  # the tuned point is what the observed run deploys
            "tune.export_on_regression=true",
        ]
    )
    out_dir = args.out / "tune"
    result = tune(overrides, out_dir=out_dir, log=lambda line: print(f"    {line}", flush=True))
    exported = json.loads((out_dir / "export" / "vllm_args.json").read_text())
    return {
        "start": result.start,
        "best": result.best,
        "best_summary": result.best_summary,
        "scenarios_simulated": result.scenarios_simulated,
        "wall_s": result.wall_s,
        "vllm_args": exported["args"],
        "vllm_flags": exported["flags"],
        "vllm_warnings": exported.get("warnings", []),
    }


# --------------------------------------------------------------------------- observed metrics


def observed_metrics(
    requests: pd.DataFrame, clock_end_s: float, busy_s: float, args, price_per_gpu_hour: float
) -> dict:
    """servetune's metrics (metrics.compute_metrics, one GPU, no warm-up, no quality model)
    of an observed request table: goodput = requests completed within every SLO per second of
    the arrival window (first arrival at 0 to the last), useful tokens per dollar = their
    delivered output tokens over price x the run's length (to its clock's end)."""
    done = (requests["end_state"] == "completed").to_numpy()
    ttft, tpot = requests["ttft_s"].to_numpy(float), requests["tpot_s"].to_numpy(float)
    ok = done & ~(ttft > args.slo_ttft_s) & ~(tpot > args.slo_tpot_s)  # NaN TPOT passes
    window_s = float(requests["arrival_s"].max())
    useful = float(requests["output_tokens_delivered"].to_numpy()[ok].sum())
    cost_usd = price_per_gpu_hour * clock_end_s / 3600.0
    return {
        "goodput_rps": float(ok.sum()) / window_s,
        "useful_tokens_per_dollar": useful / cost_usd,
        "slo_attainment": float(ok.mean()),
        "ttft_p99_s": float(np.nanpercentile(ttft[done], 99)),
        "tpot_p99_s": float(np.nanpercentile(tpot[done], 99)),
        "preemptions": requests["preemptions"].sum().item(),
        "busy_fraction": busy_s / clock_end_s,
        "useful_tokens": useful,
        "cost_usd": cost_usd,
        "window_s": window_s,
        "clock_end_s": clock_end_s,
    }


def read_observation(folder: Path, args, price: float, cost: dict) -> dict:
    """observed_metrics of an observe folder (its clock ends with its last engine step), with
    its step_time_ratio under the training run's `cost`."""
    requests = pd.read_parquet(folder / "requests.parquet")
    steps = pd.read_csv(folder / "steps.csv")
    end = float((steps["t_s"] + steps["seconds"]).max())
    return {
        **observed_metrics(requests, end, float(steps["seconds"].sum()), args, price),
        "step_time_ratio": step_time_ratio(steps, cost),
    }


def check_metric_formulas(table: pd.DataFrame, predicted: dict, args) -> None:
    """observed_metrics on the simulator's own request table must give the simulator's
    goodput, useful tokens per dollar and attainment: the two sides are measured alike."""
    got = observed_metrics(
        table, predicted["clock_end_s"], 0.0, args, predicted["price_per_gpu_hour"]
    )
    for key in ("goodput_rps", "useful_tokens_per_dollar", "slo_attainment"):
        if not math.isclose(got[key], predicted[key], rel_tol=1e-6):
            raise AssertionError(
                f"{key}: observed_metrics gives {got[key]} on the simulated "
                f"requests, the simulator {predicted[key]}"
            )


# --------------------------------------------------------------------------- the report


def relative_change(new: float, old: float) -> float:
    """new / old - 1 (NaN when old is 0)."""
    return new / old - 1.0 if old else math.nan


def changes(preds: dict, obs: dict) -> list[dict]:
    """Per prediction (`preds`: {label: {setting: metrics}}) and CHANGE_METRICS: the
    predicted change (tuned over defaults, simulated), the observed one (run means), the noise floor
    (largest relative difference between two observations of one setting), the changes of tuned run
    k over default run k, and whether the target holds (same sign, unless no change is predicted;
    |observed - predicted| <=
    noise floor)."""
    rows = []
    for label, pred in preds.items():
        for key in CHANGE_METRICS:
            d = [r[key] for r in obs["default"]]
            t = [r[key] for r in obs["tuned"]]
            predicted = relative_change(pred["tuned"][key], pred["default"][key])
            observed = relative_change(float(np.mean(t)), float(np.mean(d)))
            floors = [abs(relative_change(max(v), min(v))) for v in (d, t) if len(v) > 1]
            floor = max(floors) if floors else math.nan
            # a prediction of no change (the two settings simulate alike) has no sign to match
            sign_ok = None if predicted == 0 else bool(np.sign(observed) == np.sign(predicted))
            within = bool(abs(observed - predicted) <= floor)
            rows.append(
                {
                    "prediction": label,
                    "metric": key,
                    "predicted_change": predicted,
                    "observed_change": observed,
                    "observed_change_per_run": [relative_change(x, float(np.mean(d))) for x in t],
                    # tuned run k over default run k: the two ran one after the other,
                    # so a drift of the machine's speed moves both
                    "observed_change_paired": [
                        relative_change(x, y) for x, y in zip(t, d, strict=True)
                    ],
                    "noise_floor": floor,
                    "sign_matches": sign_ok,
                    "within_noise_floor": within,
                    "target_met": bool(sign_ok is not False and within),
                }
            )
    return rows


def table_rows(preds: dict, obs: dict) -> list[dict]:
    """One row per setting and source: each prediction, each observed run, the observed
    mean."""
    rows = []
    for setting in ("default", "tuned"):
        for label, pred in preds.items():
            rows.append({"setting": setting, "source": f"predicted ({label})", **pred[setting]})
        for k, r in enumerate(obs[setting]):
            rows.append({"setting": setting, "source": f"observed run {k + 1}", **r})
        if len(obs[setting]) > 1:
            rows.append(
                {
                    "setting": setting,
                    "source": "observed mean",
                    **{m: float(np.mean([r[m] for r in obs[setting]])) for m in METRICS},
                }
            )
    return rows


_SIGN = {True: "yes", False: "no", None: "n/a (no change predicted)"}


def _ratio(x) -> str:
    """A step-time ratio for the table (blank for a prediction, which has none)."""
    return "" if x is None or not math.isfinite(x) else f"{x:.3f}"


def render_metrics(rows: list[dict], header: str) -> str:
    """The metrics table (markdown) under `header`."""
    lines = [
        header,
        "",
        (
            "| setting | source | goodput (req/s) | useful tokens / USD | SLO "
            "attainment | P99 TTFT (s) | P99 TPOT (ms) | preemptions | busy | "
            "step time / model |"
        ),
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['setting']} | {r['source']} | {r['goodput_rps']:.3f} | "
            f"{r['useful_tokens_per_dollar']:,.0f} | {r['slo_attainment']:.3f} | "
            f"{r['ttft_p99_s']:.3f} | {1e3 * r['tpot_p99_s']:.2f} | "
            f"{r['preemptions']:.0f} | {r['busy_fraction']:.3f} | "
            f"{_ratio(r.get('step_time_ratio'))} |"
        )
    return "\n".join(lines)


def render_changes(change_rows: list[dict]) -> str:
    """The change table (markdown): predicted against observed, with the noise floor."""
    lines = [
        (
            "| prediction | metric | predicted change | observed change (per run) | "
            "paired (tuned k / default k) | noise floor | same sign | within noise floor |"
        ),
        "|---|---|---:|---:|---:|---:|---|---|",
    ]
    for c in change_rows:
        per = ", ".join(f"{x:+.1%}" for x in c["observed_change_per_run"])
        paired = ", ".join(f"{x:+.1%}" for x in c["observed_change_paired"])
        lines.append(
            f"| {c['prediction']} | {c['metric']} | {c['predicted_change']:+.1%} | "
            f"{c['observed_change']:+.1%} ({per}) | {paired} | "
            f"{c['noise_floor']:.1%} | "
            f"{_SIGN[c['sign_matches']]} | "
            f"{'yes' if c['within_noise_floor'] else 'no'} |"
        )
    return "\n".join(lines)


def _jsonable(x):
    """numpy scalars and arrays as plain Python numbers and lists."""
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    return x


# --------------------------------------------------------------------------- main


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--out", type=Path, default=Path("outputs/bench_sim2real"))
    ap.add_argument(
        "--vllm-python",
        default=sys.executable,
        help="a Python with the servetune[vllm] extra (default: this one)",
    )
    ap.add_argument(
        "--trace",
        default="azure_llm_2023_conv.csv",
        help="a trace file or a bundled trace's name (observe's --trace)",
    )
    ap.add_argument("--train-start-s", type=float, default=240.0)
    ap.add_argument("--holdout-start-s", type=float, default=300.0)
    ap.add_argument(
        "--duration-s",
        type=float,
        default=60.0,
        help="trace seconds per slice (before --rate-scale)",
    )
    ap.add_argument(
        "--rate-scale",
        type=float,
        default=0.9,
        help="time compression of the trace (the engine saturates near 1.0)",
    )
    ap.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="held-out observations per setting (2 or more give the noise floor)",
    )
    ap.add_argument("--num-gpu-blocks", type=int, default=512, help="KV blocks (vLLM's count)")
    ap.add_argument("--block-size", type=int, default=32)
    ap.add_argument("--max-model-len", type=int, default=8192)
    ap.add_argument("--slo-ttft-s", type=float, default=0.5)
    ap.add_argument("--slo-tpot-s", type=float, default=0.006)
    ap.add_argument(
        "--slo-target",
        type=float,
        default=0.95,
        help="required SLO attainment (tune.objective.slo_target)",
    )
    ap.add_argument(
        "--price-per-gpu-hour",
        type=float,
        default=None,
        help="USD (default: the configured hardware's catalog price)",
    )
    ap.add_argument("--calibration", choices=FITS, default="rel+total")
    ap.add_argument("--iterations", type=int, default=20)
    ap.add_argument("--pairs", type=int, default=4)
    ap.add_argument(
        "--sigma",
        type=float,
        default=1.5,
        help="ES perturbation scale (pinned here, so a change of conf/tune/es.yaml "
        "does not move this benchmark)",
    )
    ap.add_argument("--learning-rate", type=float, default=2.0, help="Adam's step size")
    ap.add_argument("--tune-seed", type=int, default=0)
    ap.add_argument("--seqs-range", type=int, nargs=2, default=(4, 256), metavar=("LOW", "HIGH"))
    ap.add_argument(
        "--tokens-range",
        type=int,
        nargs=2,
        default=(256, 2048),
        metavar=("LOW", "HIGH"),
        help="max_num_batched_tokens range; the default stops at vLLM's CPU default, "
        "the largest prefill chunk the calibration run sees (the linear cost "
        "has no attention term and underestimates larger chunks)",
    )
    ap.add_argument("--watermark-max", type=float, default=0.2)
    ap.add_argument(
        "--reuse",
        action="store_true",
        help="reuse observe folders under --out that hold the same run",
    )
    args = ap.parse_args(argv)
    if args.repeats < 1:
        ap.error("--repeats: expected at least 1")
    return args


def main(argv=None) -> dict:
    args = parse_args(argv)
    t_start = time.perf_counter()
    check_vllm(args.vllm_python)
    args.out.mkdir(parents=True, exist_ok=True)
    walls: dict[str, float] = {}

    print("1. vLLM's defaults", flush=True)
    defaults = vllm_server_defaults(args.vllm_python)
    base = EngineSettings(
        **defaults,
        num_gpu_blocks=args.num_gpu_blocks,
        block_size=args.block_size,
        max_model_len=args.max_model_len,
    )
    print(f"  {defaults}", flush=True)

    print("2. observe the training slice with vLLM's defaults; calibrate", flush=True)
    train, walls["observe train_default"] = observe(args, "train_default", args.train_start_s, base)
    cal = calibrated_cost(train / "steps.csv", args.calibration)
    (args.out / "calibration.json").write_text(json.dumps(cal, indent=2))
    print(
        f"  {cal['method']}: {cal['coefficients']} (fit RMS relative error "
        f"{cal['rms_rel_error']:.1%}, fit total / measured busy time "
        f"{cal['fit_total_over_measured']:.3f})",
        flush=True,
    )
    train_meta = json.loads((train / "observe.json").read_text())
    train_pred, _ = predict(train_meta, cal["coefficients"], args)
    price = train_pred["price_per_gpu_hour"]
    train_obs = read_observation(train, args, price, cal["coefficients"])

    print("3. tune in servetune; export vLLM arguments", flush=True)
    t0 = time.perf_counter()
    tuned_run = tune_policy(train_meta, cal["coefficients"], defaults, args)
    walls["tune"] = time.perf_counter() - t0
    tuned = engine_from_vllm_args(tuned_run["vllm_args"], base)
    print(f"  exported: {tuned_run['vllm_flags']}", flush=True)

    print("4. the held-out slice: observe defaults and tuned; simulate both", flush=True)
    settings = {"default": base, "tuned": tuned}
    folders = {s: [] for s in settings}
    for k in range(args.repeats):  # alternate, so slow drifts of the machine hit both
        for s, eng in settings.items():
            folder, walls[f"observe holdout_{s}_{k + 1}"] = observe(
                args, f"holdout_{s}_{k + 1}", args.holdout_start_s, eng
            )
            folders[s].append(folder)
    # the prediction proper uses the training run's cost; the second refits the cost on the
    # held-out default run 1 (same slice, no policy information), which separates the policy
    # effect from the machine's speed drifting between the training and held-out runs
    recal = calibrated_cost(folders["default"][0] / "steps.csv", args.calibration)
    costs = {PRIMARY: cal["coefficients"], HELDOUT_COST: recal["coefficients"]}
    preds = {label: {} for label in costs}
    obs = {
        s: [read_observation(f, args, price, cal["coefficients"]) for f in folders[s]]
        for s in settings
    }
    for s in settings:
        meta = json.loads((folders[s][0] / "observe.json").read_text())
        for label, cost in costs.items():
            preds[label][s], sim_table = predict(meta, cost, args)
            check_metric_formulas(sim_table, preds[label][s], args)

    rows, change_rows = table_rows(preds, obs), changes(preds, obs)
    header = (
        f"Held-out slice: {args.trace} [{args.holdout_start_s:g}, "
        f"{args.holdout_start_s + args.duration_s:g}) s at rate x{args.rate_scale:g}; "
        f"SLOs TTFT <= {args.slo_ttft_s:g} s, TPOT <= {1e3 * args.slo_tpot_s:g} ms; "
        f"price ${price:.2f}/GPU-hour; default = {defaults}; tuned = "
        f"{ {k: getattr(tuned, k) for k in TUNED_KEYS} }"
    )
    train_rows = [
        {"setting": "default", "source": f"training slice, {src}", **m}
        for src, m in (("predicted", train_pred), ("observed", train_obs))
    ]
    text = "\n\n".join(
        [
            render_metrics(rows, header),
            render_changes(change_rows),
            render_metrics(train_rows, "Training slice (the cost was fitted on this run):"),
        ]
    )
    walls["total"] = time.perf_counter() - t_start
    met = all(c["target_met"] for c in change_rows if c["prediction"] == PRIMARY)
    text += (
        f"\n\nTarget (observed change of the same sign, within the noise floor of the "
        f"prediction) {'met' if met else 'NOT met'}; wall {walls['total']:.0f} s."
    )
    print(text, flush=True)
    report = {
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "vllm_defaults": defaults,
        "engine_default": dataclasses.asdict(base),
        "engine_tuned": dataclasses.asdict(tuned),
        "calibration": cal,
        "calibration_heldout_default": recal,
        "price_per_gpu_hour": price,
        "train": {"predicted": train_pred, "observed": train_obs},
        "tune": tuned_run,
        "predicted": preds,
        "observed": obs,
        "changes": change_rows,
        "target_met": met,
        "wall_s": walls,
    }
    (args.out / "sim2real.json").write_text(json.dumps(_jsonable(report), indent=2))
    pd.DataFrame(rows).to_csv(args.out / "sim2real.csv", index=False)
    (args.out / "sim2real.txt").write_text(text + "\n")
    return report


if __name__ == "__main__":
    main()
