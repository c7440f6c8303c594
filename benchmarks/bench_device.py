"""The simulator's speed on whatever device JAX sees, one scenario and batches, and side by side
with a git revision.

    python benchmarks/bench_device.py                          # this tree, every row (~10 min)
    python benchmarks/bench_device.py --baseline bf604a6       # and a revision, alternated
    python benchmarks/bench_device.py --rows hour,poisson --repeats 3
    python benchmarks/bench_device.py --rows batch --batches 1024,4096,16384 --chunk-lengths 0,256
    python benchmarks/bench_device.py --rows batch --batches 16 --slice-s 10   # a smoke run

On a GPU machine install jax[cuda12] at the pinned version first; the device is printed with
every row. Rows, each measured in a fresh process (the trees alternated `--repeats` times with
--baseline, so both see the same machine load; each figure the fastest of its runs):
  hour      the Azure LLM 2023 conversation trace, whole hour (19,366 requests), Llama-3-8B on
            one H100, vLLM's default scheduler: wall time of simulate_batch, first call (compile
            included) and the fastest of three compiled calls
  poisson   10,000 Poisson requests at 8/s, 512 prompt / 128 output tokens, A100, vLLM's A100
            defaults
  overload  Azure conversation minutes 20-40 at 4x its rate with the KV cache cut to a third
            (engine.gpu_memory_utilization=0.3): queueing, chunking and preemption throughout;
            at the tree's default engine and at engine.max_slots=256 (the old default)
  batch     N x the first --slice-s seconds of the Azure trace (a 16-point grid over
            max_num_seqs x max_num_batched_tokens x seeds), scenarios per second, for each N of
            --batches and each engine.chunk_length of --chunk-lengths; and the same batch on
            the tuner's engine (engine.max_slots=1536, what `servetune tune` sizes it to)
Every row reports the width the run ended at (entries per instance), its widenings, its
iterations and loop bodies and how many took the simple step; with --baseline the results
of the two trees are compared (counts identical, times to 1e-9 relative) and the figures given
as ratios. Results go to outputs/bench_device/<timestamp>.json (--json PATH).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import math
import statistics
import subprocess
import sys
import time
from pathlib import Path

import baseline_tree

AZURE = ["workload=azure_conv", "hardware=h100", "model=llama3_8b", "policy=vllm_default"]
ONE = {
    "hour": AZURE + ["workload.duration_s=null"],
    "poisson": [
        "workload=poisson",
        "workload.rate=8",
        "workload.n_requests=10000",
        "workload.duration_s=null",
        "workload.prompt.dist=fixed",
        "+workload.prompt.value=512",
        "workload.output.dist=fixed",
        "+workload.output.value=128",
        "hardware=a100",
        "model=llama3_8b",
        "policy=vllm_a100",
    ],
    "overload": AZURE
    + [
        "workload.start_s=1200",
        "workload.duration_s=1200",
        "workload.rate_scale=4",
        "engine.gpu_memory_utilization=0.3",
        "window.drain_s=600",
    ],
    "overload_256": AZURE
    + [
        "workload.start_s=1200",
        "workload.duration_s=1200",
        "workload.rate_scale=4",
        "engine.gpu_memory_utilization=0.3",
        "window.drain_s=600",
        "engine.max_slots=256",
    ],
}
QUIET = ["output.progress=false"]
COUNTS = (
    "iterations",
    "n_completed",
    "n_rejected",
    "preemptions",
    "prefill_tokens",
    "decode_tokens",
    "max_running",
    "queue_window_overflow",
    "slot_bound_iterations",
)
TIMES = (
    "ttft_p50_s",
    "ttft_p99_s",
    "tpot_p50_s",
    "e2e_p90_s",
    "busy_fraction",
    "mean_in_system",
    "goodput_rps",
)


def _scenario(overrides, chunk_length=0):
    from servetune.config.scenario import build
    from servetune.run.api import compose

    extra = [f"engine.chunk_length={chunk_length}"] if chunk_length else []
    return build(compose(QUIET + overrides + extra))


def _device() -> str:
    import jax

    d = jax.devices()[0]
    return f"{d.platform}:{getattr(d, 'device_kind', '?')} x{len(jax.devices())}"


def _digest(m: dict) -> dict:
    """What two trees' runs must agree on: counts exactly, times to 1e-9."""
    return {k: m[k] for k in COUNTS + TIMES if k in m}


def _run_facts(m: dict) -> dict:
    return {
        "iterations": m["iterations"],
        "loop_bodies": m["iterations"] - m["leaped_iterations"],
        "simple_steps": m.get("simple_steps"),
        "entry_width": m.get("entry_width"),
        "widenings": m.get("widenings"),
    }


def worker_one(name: str) -> dict:
    """One scenario: wall time of simulate_batch with compile, then the fastest of three."""
    from servetune.run.api import simulate_batch

    sc = _scenario(ONE[name])
    start = time.perf_counter()
    simulate_batch(sc)
    first = time.perf_counter() - start
    times = []
    for _ in range(3):
        start = time.perf_counter()
        res = simulate_batch(sc)
        times.append(time.perf_counter() - start)
    m = res.metrics[0]
    return {
        "row": name,
        "device": _device(),
        "requests": len(sc.traces[0]),
        "with_compile_s": first,
        "compiled_s": min(times),
        **_run_facts(m),
        "digest": _digest(m),
    }


def _batch_overrides(n: int, slice_s: float, tuner: bool) -> list[str]:
    seqs, toks = [64, 128, 256, 1024], [2048, 4096, 8192, 16384]
    grid = [
        f"grid.max_num_seqs=[{','.join(map(str, seqs))}]",
        f"grid.max_num_batched_tokens=[{','.join(map(str, toks))}]",
    ]
    engine = ["engine.max_slots=1536"] if tuner else []
    return (
        AZURE
        + [
            f"workload.duration_s={slice_s}",
            f"seeds={max(n // 16, 1)}",
            "workload.predictor.sigma=0.5",
        ]
        + grid
        + engine
    )


def worker_batch(n: int, slice_s: float, tuner: bool, chunk_length: int) -> dict:
    """A batch of n scenarios: compile time, the first call, the second (compiled)."""
    from servetune.run.api import simulate_batch

    sc = _scenario(_batch_overrides(n, slice_s, tuner), chunk_length)
    start = time.perf_counter()
    simulate_batch(sc)
    first = time.perf_counter() - start
    start = time.perf_counter()
    res = simulate_batch(sc)
    compiled = time.perf_counter() - start
    n_done = len(res.metrics)
    table = res.table
    m = res.metrics[0]
    row = (
        f"batch{n}"
        + ("_tuner" if tuner else "")
        + (f"_chunk{chunk_length}" if chunk_length else "")
    )
    return {
        "row": row,
        "device": _device(),
        "scenarios": n_done,
        "with_compile_s": first,
        "compiled_s": compiled,
        "scenarios_per_s": n_done / compiled,
        "entry_width": m.get("entry_width"),
        "widenings": m.get("widenings"),
        "iterations_total": int(table["iterations"].sum()),
        "digest": {
            "iterations": int(table["iterations"].sum()),
            "goodput_rps": float(table["goodput_rps"].mean()),
        },
    }


def _job(args: list[str], src: Path | None, timeout: float) -> dict:
    done = subprocess.run(
        [sys.executable, __file__, "--worker", *args],
        env=baseline_tree.environment(src),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"worker {args} in {src or 'this tree'} failed:\n{done.stderr[-3000:]}")
    out = json.loads(done.stdout.strip().splitlines()[-1])
    baseline_tree.check_conf(src, out["conf"])
    return out


def _jobs(args) -> list[list[str]]:
    jobs = [["one", row] for row in args.rows if row in ONE]
    if "batch" in args.rows:
        for n in args.batches:
            for chunk in args.chunk_lengths:
                jobs.append(["batch", str(n), str(args.slice_s), "0", str(chunk)])
            jobs.append(["batch", str(n), str(args.slice_s), "1", "0"])
    return jobs


def _same(a: dict, b: dict) -> list[str]:
    """Where two digests differ (counts exactly, times beyond 1e-9 relative)."""
    out = []
    for k, x in a.items():
        y = b.get(k)
        if isinstance(x, float) and isinstance(y, float):
            if not (math.isclose(x, y, rel_tol=1e-9) or (math.isnan(x) and math.isnan(y))):
                out.append(f"{k}: {x!r} vs {y!r}")
        elif x != y:
            out.append(f"{k}: {x!r} vs {y!r}")
    return out


def _print_row(label: str, r: dict) -> None:
    if "scenarios_per_s" in r:
        print(
            f"  {label:10s} {r['row']:22s} {r['scenarios']:6d} scenarios  compiled "
            f"{r['compiled_s']:8.2f} s  {r['scenarios_per_s']:8.1f}/s  with compile "
            f"{r['with_compile_s']:7.2f} s  width {r['entry_width']}"
            f" (+{r['widenings']})  [{r['device']}]",
            flush=True,
        )
    else:
        print(
            f"  {label:10s} {r['row']:22s} compiled {r['compiled_s']:7.3f} s  with compile "
            f"{r['with_compile_s']:6.2f} s  {r['iterations']:,} iterations, "
            f"{r['loop_bodies']:,} bodies ({r['simple_steps']} simple)  width "
            f"{r['entry_width']} (+{r['widenings']})  [{r['device']}]",
            flush=True,
        )


def _measure(job: list[str], trees: dict, args) -> dict:
    """One row: the job run in each tree, alternated --repeats times with a baseline; the
    fastest run of each, and with a baseline the ratio and where the results differ."""
    runs: dict = {label: [] for label in trees}
    for _ in range(args.repeats if args.baseline else 1):
        for label, src in trees.items():
            r = _job(job, src, args.timeout)
            runs[label].append(r)
            _print_row(label.split()[0], r)
    best = {label: min(rs, key=lambda r: r["compiled_s"]) for label, rs in runs.items()}
    row = best["this tree"]["row"]
    out = {
        label: {"best": b, "compiled_s_all": [r["compiled_s"] for r in runs[label]]}
        for label, b in best.items()
    }
    if args.baseline:
        base_label = f"baseline {args.baseline}"
        ratio = best["this tree"]["compiled_s"] / best[base_label]["compiled_s"]
        median = statistics.median(r["compiled_s"] for r in runs["this tree"]) / statistics.median(
            r["compiled_s"] for r in runs[base_label]
        )
        diffs = _same(best[base_label]["digest"], best["this tree"]["digest"])
        out.update(ratio=ratio, median_ratio=median, differences=diffs)
        print(
            f"  -> {row}: this tree / baseline = {ratio:.3f} (compiled, fastest; median "
            f"{median:.3f}); results {'identical' if not diffs else 'DIFFER: ' + '; '.join(diffs)}",
            flush=True,
        )
    return {row: out}


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--rows",
        default="hour,poisson,overload,overload_256,batch",
        help="comma-separated rows (hour, poisson, overload, overload_256, batch)",
    )
    ap.add_argument("--batches", default="1024", help="comma-separated batch sizes")
    ap.add_argument("--slice-s", type=float, default=30.0, help="seconds of trace per batch")
    ap.add_argument(
        "--chunk-lengths",
        default="0",
        help="engine.chunk_length values for the batch rows (0: a while loop)",
    )
    ap.add_argument("--baseline", help="a git revision measured side by side, alternated")
    ap.add_argument("--repeats", type=int, default=2, help="alternations with --baseline")
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds per worker")
    ap.add_argument("--json", help="write the figures here (default outputs/bench_device/...)")
    ap.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        kind, *rest = args.worker
        out = (
            worker_one(rest[0])
            if kind == "one"
            else worker_batch(int(rest[0]), float(rest[1]), rest[2] == "1", int(rest[3]))
        )
        print(json.dumps({**out, "conf": baseline_tree.conf_dir()}))
        return
    args.rows = args.rows.split(",")
    args.batches = [int(b) for b in args.batches.split(",")]
    args.chunk_lengths = [int(c) for c in args.chunk_lengths.split(",")]
    repo = Path(__file__).resolve().parents[1]
    figures: dict = {
        "started": datetime.datetime.now().isoformat(timespec="seconds"),
        "argv": sys.argv[1:],
        "rows": {},
    }
    with contextlib.ExitStack() as stack:
        trees: dict = {"this tree": None}
        if args.baseline:
            src = stack.enter_context(baseline_tree.checkout(repo, args.baseline))
            trees = {f"baseline {args.baseline}": src, "this tree": None}
        for job in _jobs(args):
            figures["rows"].update(_measure(job, trees, args))
    path = Path(
        args.json
        or repo / "outputs" / "bench_device" / f"{datetime.datetime.now():%Y%m%d-%H%M%S}.json"
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(figures, indent=2))
    print(f"figures: {path}")


if __name__ == "__main__":
    main()
