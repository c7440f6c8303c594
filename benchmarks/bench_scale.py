"""Scale benchmark: one command, one table, one JSON file.

    python benchmarks/bench_scale.py                        # default: under ~10 min on 2 cores
    python benchmarks/bench_scale.py --skip one,length,shard --batches 1024,4096 --slice-s 10
    python benchmarks/bench_scale.py --quick                # a smoke run (~2 min)

Rows (every comparison is measured side by side in this run, and given as a ratio):
  1. One scenario, wall time with and without compile, the leap on (engine.leap_max=64)
     vs off (0) with the metrics compared, for (a) the Azure LLM 2023 conversation trace, whole
     hour, Llama-3-8B on one H100, vLLM default scheduler, and (b) 10,000 Poisson requests at 8/s,
     512 prompt / 128 output tokens, Llama-3-8B on one A100, vLLM's A100 defaults. With the leap on
     and off, count metrics must be identical and time metrics equal up to float rounding (printed).
  2. Per-iteration cost against trace length: Poisson (b)'s load for 1 h and for 8 h; us per
     simulated iteration and per loop body (stepped iteration), and the 8 h / 1 h ratio.
  3. vmap batch scaling on a slice of the Azure trace (--slice-s seconds): scenarios per second,
     compile time, peak RSS and carry size for each batch size (each in a fresh process), and
     the batched vs looped (one scenario at a time) throughput ratio.
  4. Sharded vs unsharded: a batch on 2 forced host CPU devices
     (XLA_FLAGS=--xla_force_host_platform_device_count=2), sharded over both vs on one, the
     counts checked identical and the times to float rounding.
The figures Vidur's paper reports for the same workloads are printed alongside.

Wall times are of `servetune.simulate_batch` (the compiled rollout plus the host-side assembly
of per-request results; metrics computation included, config building excluded).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import resource
import subprocess
import sys
import time

AZURE = [
    "workload=azure_conv",
    "workload.duration_s=null",
    "hardware=h100",
    "model=llama3_8b",
    "policy=vllm_default",
]
POISSON = [
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
]
QUIET = ["output.progress=false"]

# Vidur (MLSys'24) on a 2-core machine, vLLM scheduler, Llama-3-8B on one A100, caches warm
# (the figures Vidur's paper reports).
VIDUR = {
    "poisson_10k_process_s": 19.1,
    "poisson_10k_event_loop_s": 11.5,
    "poisson_10k_iterations_per_s": 6300,
    "poisson_10k_requests_per_s": 870,
    "azure_conv_hour_process_s": 35.5,
}


def _scenario(overrides):
    from servetune.config.scenario import build
    from servetune.run.api import compose

    return build(compose(list(overrides) + QUIET))


def _timed(scenario):
    from servetune.run.api import simulate_batch

    start = time.perf_counter()
    res = simulate_batch(scenario)
    return time.perf_counter() - start, res


# Counters that describe the compiled program rather than the simulated engine: how many
# iterations the leap applied, how many loop bodies took the simple step, the entry width the
# run ended at and how often it widened. They differ between the leap on and off by design.
PROGRAM = ("leaped_iterations", "simple_steps", "entry_width", "widenings")


def _flat(metrics, prefix=""):
    """Scalar metrics as {dotted key: value} (PROGRAM counters and timings left out)."""
    out = {}
    for k, v in metrics.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flat(v, key + "."))
        elif k not in PROGRAM and "wall" not in k:
            out[key] = v
    return out


def _compare(a, b):
    """(integer-valued metrics all equal, largest relative difference of the float ones, its
    key) between two metric dicts."""
    import math

    fa, fb = _flat(a), _flat(b)
    ints_equal, worst, worst_key = fa.keys() == fb.keys(), 0.0, None
    for k in fa.keys() & fb.keys():
        x, y = fa[k], fb[k]
        if isinstance(x, float) or isinstance(y, float):
            if not (math.isnan(x) and math.isnan(y)) and x != y:
                rel = abs(x - y) / max(abs(x), abs(y))
                if rel > worst:
                    worst, worst_key = rel, k
        elif x != y:
            ints_equal = False
    return ints_equal, worst, worst_key


def one_scenario(name, overrides, leaps=(64, 0), reps=2):
    """Wall time with compile (first call) and without (best of `reps` further calls) per leap
    setting."""
    rows, seen = [], {}
    for leap in leaps:
        sc = _scenario(overrides + [f"engine.leap_max={leap}"])
        t_first, _ = _timed(sc)
        t_run, res = min((_timed(sc) for _ in range(reps)), key=lambda x: x[0])
        m = res.metrics[0]
        bodies = m["iterations"] - m["leaped_iterations"]
        rows.append(
            {
                "workload": name,
                "leap_max": leap,
                "requests": len(sc.traces[0]),
                "with_compile_s": t_first,
                "compiled_s": t_run,
                "compile_s_est": t_first - t_run,
                "iterations": m["iterations"],
                "loop_bodies": bodies,
                "us_per_iteration": t_run / m["iterations"] * 1e6,
                "us_per_loop_body": t_run / max(bodies, 1) * 1e6,
                "goodput_rps": m["goodput_rps"],
            }
        )
        seen[leap] = m
        print(
            f"  {name} leap_max={leap}: {t_first:.2f} s with compile, {t_run:.2f} s compiled, "
            f"{m['iterations']:,} iterations in {bodies:,} loop bodies",
            flush=True,
        )
    if len(seen) < 2:
        return rows, None
    ints_equal, worst, key = _compare(*seen.values())
    return rows, {"counts_identical": ints_equal, "max_rel_diff": worst, "max_rel_diff_key": key}


def _segment_fn(sc, n_bodies):
    """A compiled function running exactly `n_bodies` loop bodies (steps) of scenario 0 from a
    given state (the outbox emptied each step): the device loop alone, no host round trips."""
    import jax

    from servetune.engine.step import step

    cfg = sc.engine
    wl = jax.tree.map(lambda x: x[0], sc.workloads)
    params = jax.tree.map(lambda x: x[0], sc.params)

    def run(s, wl, params):
        def body(_, s):
            s = step(s, wl, params, cfg)
            return s.replace(outbox=s.outbox.replace(count=s.outbox.count * 0))

        return jax.lax.fori_loop(0, n_bodies, body, s)

    run = jax.jit(run)
    return lambda s: run(s, wl, params)


def trace_length(hours=(1, 8), seg_bodies=2000, seg_reps=5):
    """Poisson (b) load for 1 h and 8 h: us per iteration and per loop body over the whole run
    (interleaved, best of 2), and per loop body on a fixed segment (mid-trace, `seg_bodies`
    steps, the lengths interleaved, best of `seg_reps`)."""
    import jax

    from servetune.engine.loop import init_batch, run_chunk_batch

    rows, segs, scs = [], [], []
    for h in hours:
        ov = [
            o for o in POISSON if not o.startswith(("workload.n_requests", "workload.duration_s"))
        ]
        scs.append(_scenario(ov + [f"workload.duration_s={3600 * h}"]))
        _timed(scs[-1])  # compile
    runs = [[] for _ in hours]
    for _ in range(2):  # whole runs, the lengths interleaved, best of 2
        for k, sc in enumerate(scs):
            runs[k].append(_timed(sc))
    for h, sc, timed in zip(hours, scs, runs, strict=True):
        t_run, res = min(timed, key=lambda x: x[0])
        m = res.metrics[0]
        bodies = m["iterations"] - m["leaped_iterations"]
        rows.append(
            {
                "hours": h,
                "requests": len(sc.traces[0]),
                "compiled_s": t_run,
                "iterations": m["iterations"],
                "loop_bodies": bodies,
                "us_per_iteration": t_run / m["iterations"] * 1e6,
                "us_per_loop_body": t_run / max(bodies, 1) * 1e6,
            }
        )
        print(
            f"  {h} h: {len(sc.traces[0]):,} requests, {t_run:.2f} s, "
            f"{m['iterations']:,} iterations, {bodies:,} loop bodies",
            flush=True,
        )
        # a state 30 minutes into the trace, then the fixed segment from it
        state = init_batch(sc.workloads, sc.params, sc.engine)
        while not bool(state.done[0, 0]) and float(state.clock[0, 0, 0]) < 1800.0:
            state = run_chunk_batch(state, sc.workloads, sc.params, sc.engine)
        state = jax.tree.map(lambda x: x[0, 0], state)
        fn = _segment_fn(sc, seg_bodies)
        jax.block_until_ready(fn(state))
        segs.append((fn, state))
    best = [float("inf")] * len(segs)
    for _ in range(seg_reps):
        for k, (fn, state) in enumerate(segs):
            start = time.perf_counter()
            jax.block_until_ready(fn(state))
            best[k] = min(best[k], time.perf_counter() - start)
    for row, b in zip(rows, best, strict=True):
        row["segment_us_per_loop_body"] = b / seg_bodies * 1e6
    return rows


def _batch_overrides(n, slice_s):
    """n scenarios: a grid over max_num_seqs x max_num_batched_tokens (up to 16 points) x seeds
    (predictor noise) on the first `slice_s` seconds of the Azure conversation trace."""
    seqs, toks = [64, 128, 256, 1024], [2048, 4096, 8192, 16384]
    if n >= 16:
        grid, n_seeds = (
            [f"grid.max_num_seqs={seqs}", f"grid.max_num_batched_tokens={toks}"],
            n // 16,
        )
    elif n >= 4:
        grid, n_seeds = [f"grid.max_num_seqs={seqs}"], n // 4
    else:
        grid, n_seeds = [], n
    base = [o for o in AZURE if not o.startswith("workload.duration_s")]
    return (
        base
        + [f"workload.duration_s={slice_s}", f"seeds={n_seeds}", "workload.predictor.sigma=0.5"]
        + [g.replace(" ", "") for g in grid]
    )


def _carry_bytes(scenario):
    import jax

    from servetune.engine.loop import init_batch

    state = init_batch(scenario.workloads, scenario.params, scenario.engine)
    return int(sum(x.nbytes for x in jax.tree.leaves(state)))


def worker_batch(n, slice_s, n_looped):
    """Run in a fresh process: batch of n scenarios, and up to n_looped of them one at a time."""
    import jax

    from servetune.engine.loop import init_batch, run_chunk_batch

    sc = _scenario(_batch_overrides(n, slice_s))
    state = init_batch(sc.workloads, sc.params, sc.engine)
    start = time.perf_counter()  # trace + lower + compile (jit reuses the executable)
    run_chunk_batch.lower(state, sc.workloads, sc.params, sc.engine).compile()
    t_compile = time.perf_counter() - start
    del state
    t_first, _ = _timed(sc)
    t_run, res = _timed(sc)
    n_done = len(res.metrics)
    rss_batch = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    out = {
        "batch": n_done,
        "compile_s": t_compile,
        "with_compile_s": t_compile + t_first,
        "compiled_s": t_run,
        "scenarios_per_s": n_done / t_run,
        "peak_rss_bytes": rss_batch,
        "carry_bytes": _carry_bytes(sc),
        "iterations_longest": int(res.table["iterations"].max()),
        "iterations_total": int(res.table["iterations"].sum()),
    }
    if n_looped:
        # the same scenarios one at a time (each a 1 x 1 batch; one compile, reused)
        import dataclasses

        import numpy as np

        k = min(n_looped, n_done)
        s_count, p_count = len(sc.seeds), len(sc.grid_points)
        times = []
        for idx in range(k + 1):  # the first call compiles: not timed
            s, p = divmod(idx % k, p_count)
            one = dataclasses.replace(
                sc,
                traces=[sc.traces[s]],
                seeds=[sc.seeds[s]],
                workloads=jax.tree.map(lambda x, s=s: x[s : s + 1], sc.workloads),
                params=jax.tree.map(lambda x, p=p: x[p : p + 1], sc.params),
                grid_points=[sc.grid_points[p]],
            )
            t, _ = _timed(one)
            if idx:
                times.append(t)
        assert s_count * p_count == n_done
        out["looped_s_per_scenario"] = float(np.mean(times))
        out["looped_sample"] = k
    print(json.dumps(out))


def worker_shard(n, slice_s):
    """Run with 2 forced host devices: the batch sharded over both vs on one device."""
    import jax

    from servetune.run.driver import rollout

    sc = _scenario(_batch_overrides(n, slice_s))
    n_real = [len(t) for t in sc.traces]
    out = {"devices": len(jax.devices())}
    results = {}
    for label, devices in (("one_device", jax.devices()[:1]), ("sharded", None)):
        times = []
        for _ in range(2):  # first call compiles
            start = time.perf_counter()
            results[label] = rollout(sc.workloads, sc.params, sc.engine, n_real, devices=devices)
            times.append(time.perf_counter() - start)
        out[label] = {
            "with_compile_s": times[0],
            "compiled_s": times[1],
            "scenarios_per_s": n / times[1],
        }
    a, b = results["one_device"], results["sharded"]
    import numpy as np

    pairs = [(x, y) for ra, rb in zip(a, b, strict=True) for x, y in zip(ra, rb, strict=True)]
    # counts must match exactly; times (seconds) to float rounding: the two programs have
    # different shapes (8 scenarios on one device, 4 on each of two), so XLA may sum in a
    # different order (measured: at most a few 1e-15 s apart)
    same = all(
        np.array_equal(getattr(x, f), getattr(y, f))
        for x, y in pairs
        for f in ("end_state", "generated", "n_preempt", "tokens_computed")
    )
    drift = max(
        float(np.nanmax(np.abs(getattr(x, f) - getattr(y, f)), initial=0.0))
        for x, y in pairs
        for f in ("first_token", "finish")
    )
    out["identical"] = bool(same)  # the counts
    out["max_time_diff_s"] = drift
    out["batch"] = n
    print(json.dumps(out))


def _subprocess(args, env_extra=None, timeout=1800):
    env = dict(os.environ, JAX_PLATFORMS=os.environ.get("JAX_PLATFORMS", "cpu"))
    env.update(env_extra or {})
    proc = subprocess.run(
        [sys.executable, os.path.abspath(__file__), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if proc.returncode:
        raise RuntimeError(f"worker {args} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _fmt_table(rows, cols):
    widths = [max(len(c[0]), *(len(c[1](r)) for r in rows)) for c in cols]
    lines = ["  ".join(c[0].rjust(w) for c, w in zip(cols, widths, strict=True))]
    lines += ["  ".join(c[1](r).rjust(w) for c, w in zip(cols, widths, strict=True)) for r in rows]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--batches", default="1,4,16,64,256,1024", help="vmap batch sizes (comma-separated)"
    )
    ap.add_argument(
        "--slice-s", type=float, default=30.0, help="seconds of the Azure trace for batch scaling"
    )
    ap.add_argument(
        "--looped",
        type=int,
        default=8,
        help="scenarios run one at a time for the batched-vs-looped ratio",
    )
    ap.add_argument("--shard-batch", type=int, default=32, help="batch for the sharding row")
    ap.add_argument(
        "--shard-slice-s",
        type=float,
        default=120.0,
        help="seconds of the Azure trace for the sharding row",
    )
    ap.add_argument(
        "--hours", default="1,8", help="trace lengths (hours) for the per-iteration row"
    )
    ap.add_argument("--skip", default="", help="rows to skip: one,length,batch,shard")
    ap.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: Poisson only, leap on, batches 1,4, 10 s slice, 1 h vs 2 h",
    )
    ap.add_argument(
        "--json", default=None, help="output file (default outputs/bench_scale/<timestamp>.json)"
    )
    ap.add_argument("--worker", nargs="*", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.worker:
        kind, *rest = args.worker
        if kind == "batch":
            worker_batch(int(rest[0]), float(rest[1]), int(rest[2]))
        elif kind == "shard":
            worker_shard(int(rest[0]), float(rest[1]))
        return

    if args.quick:
        args.batches, args.slice_s, args.hours, args.looped = "1,4", 10.0, "1,2", 2
        args.shard_batch, args.shard_slice_s = 8, 30.0
    skip = set(filter(None, args.skip.split(",")))
    report = {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "machine": f"{platform.machine()} {os.cpu_count()} CPUs, {platform.platform()}",
        "python": platform.python_version(),
        "vidur_reference": VIDUR,
        "args": vars(args),
    }
    import jax

    report["jax"] = jax.__version__
    out_lines = []

    def show(text=""):
        print(text, flush=True)
        out_lines.append(text)

    start_all = time.perf_counter()
    if "one" not in skip:
        show("== 1. one scenario: wall time, the leap on (leap_max=64) vs off (0)")
        rows, checks = [], {}
        cases = (
            [("poisson_10k", POISSON)]
            if args.quick
            else [("azure_conv_hour", AZURE), ("poisson_10k", POISSON)]
        )
        for name, ov in cases:
            r, same = one_scenario(name, ov, leaps=(64,) if args.quick else (64, 0))
            rows += r
            checks[name] = same
        report["one_scenario"] = rows
        report["one_scenario_identical_metrics"] = checks
        show(
            _fmt_table(
                rows,
                [
                    ("workload", lambda r: r["workload"]),
                    ("leap", lambda r: str(r["leap_max"])),
                    ("requests", lambda r: f"{r['requests']:,}"),
                    ("with compile s", lambda r: f"{r['with_compile_s']:.2f}"),
                    ("compiled s (best of 2)", lambda r: f"{r['compiled_s']:.2f}"),
                    ("iterations", lambda r: f"{r['iterations']:,}"),
                    ("loop bodies", lambda r: f"{r['loop_bodies']:,}"),
                    ("us/iter", lambda r: f"{r['us_per_iteration']:.1f}"),
                    ("us/body", lambda r: f"{r['us_per_loop_body']:.1f}"),
                ],
            )
        )
        for name, same in checks.items():
            on = [r for r in rows if r["workload"] == name and r["leap_max"] > 0]
            off = [r for r in rows if r["workload"] == name and r["leap_max"] == 0]
            if on and off:
                show(
                    f"  {name}: leap on vs off "
                    f"{off[0]['compiled_s'] / on[0]['compiled_s']:.1f}x faster (compiled); "
                    f"count metrics identical: {same['counts_identical']}; time metrics within "
                    f"{same['max_rel_diff']:.1e} relative (largest: {same['max_rel_diff_key']}; "
                    f"durations summed in another order)"
                )
        show(
            f"  Vidur reference: Azure conv hour {VIDUR['azure_conv_hour_process_s']} s (process); "
            f"Poisson 10k {VIDUR['poisson_10k_process_s']} s (process), "
            f"{VIDUR['poisson_10k_event_loop_s']} s (event loop)"
        )
        for r in rows:
            if r["leap_max"] > 0:
                ref = (
                    VIDUR["azure_conv_hour_process_s"]
                    if r["workload"].startswith("azure")
                    else VIDUR["poisson_10k_event_loop_s"]
                )
                show(
                    f"  {r['workload']}: {ref / r['compiled_s']:.1f}x the reference "
                    f"({'process' if r['workload'].startswith('azure') else 'event loop'}), "
                    f"{ref / r['with_compile_s']:.1f}x with compile"
                )

    if "length" not in skip:
        show("\n== 2. per-iteration cost against trace length (Poisson 8/s, 512/128, A100)")
        rows = trace_length(tuple(int(h) for h in args.hours.split(",")))
        report["trace_length"] = rows
        show(
            _fmt_table(
                rows,
                [
                    ("hours", lambda r: str(r["hours"])),
                    ("requests", lambda r: f"{r['requests']:,}"),
                    ("compiled s (best of 2)", lambda r: f"{r['compiled_s']:.2f}"),
                    ("iterations", lambda r: f"{r['iterations']:,}"),
                    ("loop bodies", lambda r: f"{r['loop_bodies']:,}"),
                    ("us/iter", lambda r: f"{r['us_per_iteration']:.2f}"),
                    ("us/body", lambda r: f"{r['us_per_loop_body']:.1f}"),
                    ("segment us/body", lambda r: f"{r['segment_us_per_loop_body']:.1f}"),
                ],
            )
        )
        a, b = rows[0], rows[-1]
        show(
            f"  {b['hours']} h / {a['hours']} h: whole run (interleaved, best of 2) "
            f"{b['us_per_iteration'] / a['us_per_iteration']:.2f}x per iteration, "
            f"{b['us_per_loop_body'] / a['us_per_loop_body']:.2f}x per loop body; fixed "
            f"segment (device loop only, interleaved, best of 5) "
            f"{b['segment_us_per_loop_body'] / a['segment_us_per_loop_body']:.2f}x per loop body"
        )

    if "batch" not in skip:
        show(
            f"\n== 3. vmap batch scaling: first {args.slice_s:g} s of the Azure trace "
            f"(each batch in a fresh process)"
        )
        rows, sizes = [], [int(b) for b in args.batches.split(",")]
        for n in sizes:  # the largest batch also runs some of its scenarios one at a time
            r = _subprocess(
                [
                    "--worker",
                    "batch",
                    str(n),
                    str(args.slice_s),
                    str(args.looped if n == max(sizes) else 0),
                ]
            )
            rows.append(r)
            print(
                f"  batch {n}: {r['compiled_s']:.2f} s, {r['scenarios_per_s']:.2f} scenarios/s",
                flush=True,
            )
        report["batch_scaling"] = rows
        one = next((r for r in rows if "looped_s_per_scenario" in r), None)
        looped_rate = 1.0 / one["looped_s_per_scenario"] if one else None
        show(
            _fmt_table(
                rows,
                [
                    ("batch", lambda r: str(r["batch"])),
                    ("compile s", lambda r: f"{r['compile_s']:.1f}"),
                    ("with compile s", lambda r: f"{r['with_compile_s']:.2f}"),
                    ("compiled s", lambda r: f"{r['compiled_s']:.2f}"),
                    ("scenarios/s", lambda r: f"{r['scenarios_per_s']:.2f}"),
                    (
                        "vs looped",
                        lambda r: (
                            f"{r['scenarios_per_s'] / looped_rate:.2f}x" if looped_rate else "-"
                        ),
                    ),
                    ("peak RSS MiB", lambda r: f"{r['peak_rss_bytes'] / 2**20:.0f}"),
                    ("carry MiB", lambda r: f"{r['carry_bytes'] / 2**20:.1f}"),
                    ("longest iters", lambda r: f"{r['iterations_longest']:,}"),
                ],
            )
        )
        if looped_rate:
            show(
                f"  looped: {1 / looped_rate:.3f} s per scenario (mean of "
                f"{one['looped_sample']} scenarios run one at a time, compiled), "
                f"{looped_rate:.2f} scenarios/s"
            )

    if "shard" not in skip:
        show(
            f"\n== 4. sharding: batch of {args.shard_batch} on the first {args.shard_slice_s:g} s "
            f"of the Azure trace, 2 forced host CPU devices"
        )
        r = _subprocess(
            ["--worker", "shard", str(args.shard_batch), str(args.shard_slice_s)],
            {"XLA_FLAGS": "--xla_force_host_platform_device_count=2"},
        )
        report["sharding"] = r
        show(
            f"  one device: {r['one_device']['compiled_s']:.2f} s "
            f"({r['one_device']['with_compile_s']:.2f} s with compile); sharded over "
            f"{r['devices']}: {r['sharded']['compiled_s']:.2f} s "
            f"({r['sharded']['with_compile_s']:.2f} s with compile); sharded vs one: "
            f"{r['one_device']['compiled_s'] / r['sharded']['compiled_s']:.2f}x; "
            f"identical counts: {r['identical']}, times within {r['max_time_diff_s']:.1e} s"
        )

    report["total_s"] = time.perf_counter() - start_all
    report["table"] = "\n".join(out_lines)
    path = args.json or os.path.join(
        "outputs", "bench_scale", datetime.datetime.now().strftime("%Y-%m-%d_%H-%M-%S") + ".json"
    )
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        json.dump(report, f, indent=2, default=float)
    show(f"\ntotal {report['total_s']:.0f} s; wrote {path}")


if __name__ == "__main__":
    main()
