"""`servetune validate`: how far servetune's predictions are from a real engine (issue 20
item 2).

Given observed runs (`servetune observe` folders), it fits the linear step-time model to one
run's steps (`--calibrate-on`), simulates another run's trace slice (`--predict`) with the same
engine settings and the fitted cost, and compares per request: TTFT, TPOT and E2E, their mean,
P50, P90 and P99 (relative error of each statistic) and the per-request relative errors
(median and P90 of |predicted - observed| / observed). With `--noise-floor`, a second
observation of the predicted run's slice, the same comparison between the two observations
says how much of the error is the engine's own run-to-run noise.

Outputs (written whole): `validation.json`, and `validation_cdf.png`, the predicted and
observed CDFs of the three latencies.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from servetune import inputs
from servetune.api import simulate
from servetune.calibrate import fit_cost_model, load_measurements
from servetune.errors import ServetuneError, TraceError
from servetune.files import write_json, write_whole

METRICS = ("ttft_s", "tpot_s", "e2e_s")
STATS = {"mean": np.nanmean, "p50": lambda v: np.nanpercentile(v, 50),
         "p90": lambda v: np.nanpercentile(v, 90), "p99": lambda v: np.nanpercentile(v, 99)}


def _observed(folder: Path) -> tuple[dict, pd.DataFrame]:
    """(observe.json, requests table) of an observe folder; TraceError names what is missing."""
    meta_path, req_path = folder / "observe.json", folder / "requests.parquet"
    for path in (meta_path, req_path, folder / "steps.csv"):
        if not path.exists():
            raise TraceError(f"{path}: missing; expected a `servetune observe` output folder")
        inputs.check_regular(path, "file of a `servetune observe` output folder", TraceError)
    try:
        meta = json.loads(meta_path.read_text())
        return meta, pd.read_parquet(req_path)
    except (ValueError, OSError) as err:
        raise TraceError(f"{folder}: unreadable observe output ({err})") from None


def overrides_for(meta: dict, cost: dict) -> list[str]:
    """servetune overrides that simulate an observed run's slice and engine with `cost`."""
    eng = meta["engine"]
    # observe passes num_gpu_blocks to vLLM as --num-gpu-blocks-override, and vLLM keeps one of
    # them as its null block: the usable blocks, the simulator's kv_blocks, are one fewer
    out = [f"workload.path={meta['trace']}", f"workload.start_s={meta['start_s']}",
           f"workload.duration_s={meta['duration_s']}", f"workload.rate_scale={meta['rate_scale']}",
           "cost=linear", f"cost.kv_blocks={eng['num_gpu_blocks'] - 1}", "policy=vllm_default",
           f"policy.max_num_seqs={eng['max_num_seqs']}",
           f"policy.max_num_batched_tokens={eng['max_num_batched_tokens']}",
           f"policy.watermark={eng.get('watermark', 0.0)}",  # absent before observe had it
           f"engine.block_size={eng['block_size']}", f"engine.max_model_len={eng['max_model_len']}",
           f"engine.prefix_cache={str(eng['enable_prefix_caching']).lower()}",
           "output.progress=false"]
    if meta.get("max_requests") is not None:
        out.append(f"workload.max_requests={meta['max_requests']}")
    return out + [f"cost.{k}={float(v)!r}" for k, v in cost.items()]  # np.float64 -> plain


def compare(predicted: pd.DataFrame, observed: pd.DataFrame) -> dict:
    """Per metric: the statistics of both, their relative errors, and the per-request relative
    errors' median and P90 (requests matched by index)."""
    if len(predicted) != len(observed):
        raise TraceError(f"the runs hold {len(predicted)} and {len(observed)} requests; "
                         f"expected the same trace slice")
    out = {}
    for m in METRICS:
        p, o = predicted[m].to_numpy(float), observed[m].to_numpy(float)
        row = {}
        for name, fn in STATS.items():
            pv, ov = float(fn(p)), float(fn(o))
            row[name] = {"predicted": pv, "observed": ov,
                         "rel_error": (pv - ov) / ov if ov else math.nan}
        rel = np.abs(p - o) / o
        rel = rel[np.isfinite(rel)]
        row["per_request_rel_error"] = {"p50": float(np.median(rel)),
                                        "p90": float(np.percentile(rel, 90))}
        out[m] = row
    return out


def _plot(predicted: pd.DataFrame, observed: pd.DataFrame, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, axes = plt.subplots(1, 3, figsize=(12, 3.6))
    for ax, m in zip(axes, METRICS):
        for label, frame in (("observed (vLLM)", observed), ("predicted (servetune)", predicted)):
            v = np.sort(frame[m].dropna().to_numpy() * 1e3)
            ax.step(v, np.arange(1, len(v) + 1) / max(len(v), 1), where="post", label=label)
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())  # decades only
        ax.set_xlabel(f"{m.removesuffix('_s').upper()} (ms)")
        ax.set_ylabel("fraction of requests")
    axes[0].legend()
    fig.tight_layout()
    write_whole(path, lambda tmp: fig.savefig(tmp, dpi=120, format="png"))
    plt.close(fig)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="servetune validate", description=(
        "Calibrate on one observed run, predict another, report the errors."))
    p.add_argument("--calibrate-on", type=Path, required=True, help="an observe folder")
    p.add_argument("--predict", type=Path, required=True, help="an observe folder")
    p.add_argument("--noise-floor", type=Path, default=None,
                   help="a second observation of --predict's slice")
    p.add_argument("--out", type=Path, default=Path("outputs/validate"))
    return p


def main(argv: list[str]) -> int:
    """`servetune validate ...`: returns the exit status."""

    args = _parser().parse_args(argv)
    try:
        _observed(args.calibrate_on)  # a whole observe folder, not only its steps
        meta, observed = _observed(args.predict)
        fit = fit_cost_model(load_measurements(args.calibrate_on / "steps.csv"), "linear")
        res = simulate(overrides_for(meta, fit.coefficients))
        predicted = res.requests[0].sort_values("request").reset_index(drop=True)
        report = {"calibration": {"coefficients": fit.coefficients,
                                  "rms_rel_error": fit.rms_rel_error},
                  "prediction": compare(predicted, observed)}
        if args.noise_floor is not None:
            report["noise_floor"] = compare(_observed(args.noise_floor)[1], observed)
        write_json(args.out / "validation.json", report)
        _plot(predicted, observed, args.out / "validation_cdf.png")
    except ServetuneError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for part in ("prediction", "noise_floor"):
        if part in report:
            print(f"{part}: relative error of mean / P50 / P90 / P99; per request P50 / P90")
            for m, row in report[part].items():
                stats = " / ".join(f"{row[s]['rel_error']:+.1%}" for s in STATS)
                per = row["per_request_rel_error"]
                print(f"  {m:7s} {stats};  {per['p50']:.1%} / {per['p90']:.1%}")
    print(f"wrote {args.out}/validation.json, validation_cdf.png")
    return 0
