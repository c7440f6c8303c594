"""Kernels per iteration and compiled speed of the core loop, for two source trees side by side.

On XLA:CPU an iteration costs about 0.2-0.3 us per kernel (thunk) of the compiled while-loop
body, whatever the arrays' widths, so the kernel count of the body is the figure that bounds
the simulator's speed. This benchmark compiles `run_chunk` (one scenario) for a few engine
configurations and counts the kernels of its loop body: every instruction of the body's
computation except parameters, tuples and their elements, constants and bitcasts, with a
conditional counted as 1 + its largest branch and a nested loop as 1 + its body. It then times
the Azure conversation hour (one scenario, compiled) and 10,000 Poisson requests, each the
fastest of three runs (load on a shared machine only adds time).

    python benchmarks/bench_kernels.py                       # this tree
    python benchmarks/bench_kernels.py --baseline a934457    # and a git revision, alternated
    python benchmarks/bench_kernels.py --by-source           # where the default's kernels come from
    python benchmarks/bench_kernels.py --profile             # where the default's time goes

With --baseline the revision is checked out into a temporary worktree and each measurement
runs in a fresh process per tree, the trees alternating `--repeats` times, so both see the
same machine load; the figures are reported as medians and as new/baseline ratios.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import baseline_tree

CONFIGS = {  # name -> overrides (every one also gets the short-trace base below)
    "default": [],
    "prefix_cache": ["workload=mooncake_conv", "engine.prefix_cache=true"],
    "two_instances": ["engine.n_instances=2"],
}
SKIP = {"parameter", "get-tuple-element", "tuple", "constant", "bitcast"}


def _computations(hlo: str) -> dict[str, list[str]]:
    """HLO module text -> {computation name: its instruction lines}."""
    comps, name = {}, None
    for line in hlo.splitlines():
        head = re.match(r"^(?:ENTRY )?%?([\w.\-]+) .*\{$", line)
        if head and not line.startswith(" "):
            name = head.group(1)
            comps[name] = []
        elif name and line.startswith("  ") and "=" in line:
            comps[name].append(line.strip())
    return comps


def _opcode(line: str) -> str:
    """The opcode of an HLO instruction line `%name = TYPE opcode(operands), attributes`."""
    rhs = line.split("=", 1)[1].strip()
    if rhs.startswith("("):  # a tuple type: skip to its closing parenthesis
        depth = 0
        for k, ch in enumerate(rhs):
            depth += {"(": 1, ")": -1}.get(ch, 0)
            if depth == 0:
                rhs = rhs[k + 1 :].strip()
                break
    else:
        rhs = rhs.split(" ", 1)[1].strip()
    return rhs.split("(", 1)[0].strip()


def kernels(comps: dict, name: str) -> int:
    """Kernels one execution of computation `name` launches (conditionals: the largest branch;
    nested loops: one trip)."""
    total = 0
    for line in comps.get(name, []):
        op = _opcode(line)
        if op in SKIP:
            continue
        total += 1
        if op == "conditional":
            branches = re.findall(
                r"(?:branch_computations=\{([^}]*)\}|"
                r"(?:true|false)_computation=%?([\w.\-]+))",
                line,
            )
            names = [
                n.strip().lstrip("%") for a, b in branches for n in (a.split(",") if a else [b])
            ]
            total += max((kernels(comps, n) for n in names if n), default=0)
        elif op == "while":
            body = re.search(r"body=%?([\w.\-]+)", line)
            total += kernels(comps, body.group(1)) if body else 0
        elif op == "call":
            callee = re.search(r"to_apply=%?([\w.\-]+)", line)
            total += kernels(comps, callee.group(1)) if callee else 0
    return total


def _loop_body(hlo: str, comps: dict) -> str:
    """The name of the outermost while loop's body in the entry computation."""
    entry = next(n for n in comps if re.search(rf"^ENTRY %?{re.escape(n)}\b", hlo, re.MULTILINE))
    for line in comps[entry]:
        if _opcode(line) == "while":
            return re.search(r"body=%?([\w.\-]+)", line).group(1)
    raise RuntimeError("no while loop in the entry computation")


def loop_body_kernels(hlo: str) -> int:
    """Kernels of the outermost while loop's body in the entry computation."""
    comps = _computations(hlo)
    return kernels(comps, _loop_body(hlo, comps))


def _table(lines: list[str], title: str) -> dict[int, str]:
    """One of the module's debug-info tables (FileNames, FunctionNames, FileLocations,
    StackFrames): {1-based id: its text}."""
    start = lines.index(title) + 1
    out = {}
    for line in lines[start:]:
        if not line.strip():
            break
        key, value = line.split(" ", 1)
        out[int(key)] = value
    return out


def _source_of(hlo: str):
    """instruction line -> the servetune function that emitted it: the innermost frame of its
    stack outside ops.py ("?" where XLA kept no frame: copies, most of them)."""
    lines = hlo.splitlines()
    files = {k: v.strip('"').split("servetune/")[-1] for k, v in _table(lines, "FileNames").items()}
    funcs = {k: v.strip('"') for k, v in _table(lines, "FunctionNames").items()}
    locs, frames = {}, {}
    for k, v in _table(lines, "FileLocations").items():
        d = dict(re.findall(r"(\w+)=(\d+)", v))
        locs[k] = (files[int(d["file_name_id"])], funcs[int(d["function_name_id"])])
    for k, v in _table(lines, "StackFrames").items():
        d = dict(re.findall(r"(\w+)=(\d+)", v))
        frames[k] = (int(d["file_location_id"]), int(d["parent_frame_id"]) - 1)  # 0: none

    def source(line: str) -> str:
        m = re.search(r"stack_frame_id=(\d+)", line)
        frame, seen = (int(m.group(1)) if m else -1), set()
        while frame in frames and frame not in seen:
            seen.add(frame)
            (file, func), frame = locs[frames[frame][0]], frames[frame][1]
            if file != "ops.py":
                return f"{file}:{func}"
        return "?"

    return source


def kernels_by_source(hlo: str) -> dict[str, int]:
    """Kernels of the loop body (as `kernels` counts them, the largest branch of each
    conditional) by the servetune function that emitted them (`_source_of`)."""
    comps, source = _computations(hlo), _source_of(hlo)
    out: dict[str, int] = {}

    def walk(name):
        for line in comps.get(name, []):
            op = _opcode(line)
            if op in SKIP:
                continue
            key = source(line)
            out[key] = out.get(key, 0) + 1
            if op == "conditional":
                branches = re.findall(
                    r"(?:branch_computations=\{([^}]*)\}|"
                    r"(?:true|false)_computation=%?([\w.\-]+))",
                    line,
                )
                names = [
                    n.strip().lstrip("%")
                    for a, b in branches
                    for n in (a.split(",") if a else [b])
                    if n
                ]
                walk(max(names, key=lambda n: kernels(comps, n)))
            elif op in ("while", "call"):
                callee = re.search(r"(?:body|to_apply)=%?([\w.\-]+)", line)
                if callee:
                    walk(callee.group(1))

    walk(_loop_body(hlo, comps))
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def time_by_source(hlo: str, events: dict[str, tuple[int, float]]) -> tuple[int, dict]:
    """(loop trips, {source: microseconds per trip}) of the loop body's top-level kernels (a
    conditional or nested loop as a whole), from profiler `events` {kernel name: (times run,
    total us)}: XLA:CPU records one event per kernel it runs."""
    comps, source = _computations(hlo), _source_of(hlo)
    body = [
        (line.split("=", 1)[0].strip().lstrip("%"), line)
        for line in comps[_loop_body(hlo, comps)]
        if _opcode(line) not in SKIP
    ]
    trips = max((events.get(name, (0, 0.0))[0] for name, _ in body), default=0)
    out: dict[str, float] = {}
    for name, line in body:
        if name in events:
            key = source(line)
            out[key] = out.get(key, 0.0) + events[name][1] / max(trips, 1)
    return trips, dict(sorted(out.items(), key=lambda kv: -kv[1]))


def _compiler_options() -> dict:
    """The XLA options the tree compiles its simulator with (none in trees before
    ops.COMPILER_OPTIONS)."""
    from servetune.core import ops

    return dict(getattr(ops, "COMPILER_OPTIONS", {}))


BASE = ["output.progress=false", "model=llama3_8b", "hardware=h100", "policy=vllm_default"]


def _one_scenario_loop(overrides: list[str]):
    """(compiled run_chunk, a function giving a fresh initial state, workload, params) of one
    scenario of BASE + overrides, compiled as the tree compiles its simulator."""
    import jax

    from servetune.config.scenario import build
    from servetune.run.api import compose

    try:
        from servetune.engine.loop import init_state, run_chunk
    except ImportError:  # a tree from before the loop/driver split (a baseline)
        from servetune.simulate import init_state, run_chunk

    sc = build(compose(BASE + overrides))
    one = lambda t: jax.tree.map(lambda x: x[0], t)
    wl, params = one(sc.workloads), one(sc.params)
    fresh = lambda: init_state(wl, params, sc.engine)
    compiled = (
        jax.jit(run_chunk, static_argnames=("cfg",))
        .lower(fresh(), wl, params, cfg=sc.engine)
        .compile(_compiler_options())
    )
    return compiled, fresh, wl, params


def measure(what: str) -> dict:
    """One measurement in this process (this tree): `kernels` or `speed`."""
    from servetune.config.scenario import build
    from servetune.run.api import compose, simulate_batch

    if what in ("kernels", "by_source"):
        out = {}
        for name, overrides in CONFIGS.items():
            if what == "by_source" and name != "default":
                continue
            hlo = _one_scenario_loop(["workload.duration_s=30", *overrides])[0].as_text()
            out[name] = loop_body_kernels(hlo) if what == "kernels" else kernels_by_source(hlo)
        return out
    runs = {
        "azure_conv_hour": ["workload=azure_conv", "workload.duration_s=null"],
        "poisson_10k": ["workload=poisson", "workload.rate=10", "workload.duration_s=1000"],
    }
    out = {}
    for name, overrides in runs.items():
        sc = build(compose(BASE + overrides))
        simulate_batch(sc)  # compile
        times = []
        for _ in range(3):  # the fastest of three: load on a shared machine only adds time
            start = time.perf_counter()
            res = simulate_batch(sc)
            times.append(time.perf_counter() - start)
        out[name] = min(times)
        out[name + "_iterations"] = int(res.metrics[0]["iterations"])
    return out


def profile(duration_s: float = 120.0) -> tuple[int, dict, int]:
    """Profile the default engine's compiled loop (one scenario, the first `duration_s` of
    the Azure conversation trace): (loop trips, {source: us per trip}, the body's kernels).
    Profiling adds its own cost to every kernel, so compare the sources with each other, not
    the total with an unprofiled run."""
    import glob
    import gzip

    import jax

    compiled, fresh, wl, params = _one_scenario_loop([f"workload.duration_s={duration_s}"])
    jax.block_until_ready(compiled(fresh(), wl, params))  # warm
    state = fresh()
    with tempfile.TemporaryDirectory() as tmp:
        jax.profiler.start_trace(tmp, create_perfetto_trace=True)
        jax.block_until_ready(compiled(state, wl, params))
        jax.profiler.stop_trace()
        with gzip.open(glob.glob(f"{tmp}/**/*.trace.json.gz", recursive=True)[0]) as f:
            trace = json.load(f)
    events: dict[str, tuple[int, float]] = {}
    for e in trace["traceEvents"] if isinstance(trace, dict) else trace:
        if e.get("ph") == "X":
            n, us = events.get(e["name"], (0, 0.0))
            events[e["name"]] = (n + 1, us + float(e.get("dur", 0.0)))
    hlo = compiled.as_text()
    trips, per_source = time_by_source(hlo, events)
    return trips, per_source, loop_body_kernels(hlo)


def _run_in(src: Path, what: str) -> dict:
    done = subprocess.run(
        [sys.executable, __file__, "--measure", what],
        env=baseline_tree.environment(src),
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"measuring {what} in {src} failed:\n{done.stderr[-3000:]}")
    out = json.loads(done.stdout.strip().splitlines()[-1])
    baseline_tree.check_conf(src, out.pop("conf"))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--baseline", help="a git revision to compare with, side by side")
    ap.add_argument("--repeats", type=int, default=3, help="alternations of the speed runs")
    ap.add_argument(
        "--by-source",
        action="store_true",
        help="only list the default engine's loop-body kernels by source function",
    )
    ap.add_argument(
        "--profile",
        action="store_true",
        help="only time the default engine's loop-body kernels by source function "
        "(jax.profiler; one scenario, 120 s of the Azure trace)",
    )
    ap.add_argument("--measure", choices=("kernels", "speed", "by_source"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.profile:
        trips, per_source, n_kernels = profile()
        total = sum(per_source.values())
        print(
            f"profiled loop body ({n_kernels} kernels, {trips:,} trips): {total:.1f} us per "
            f"trip under the profiler, by source:"
        )
        for where, us in per_source.items():
            print(f"  {us:7.2f} us  {100 * us / total:5.1f}%  {where}")
        return
    if args.measure:
        print(json.dumps({**measure(args.measure), "conf": baseline_tree.conf_dir()}))
        return
    if args.by_source:
        counts = measure("by_source")["default"]
        print(f"loop-body kernels of the default engine by source ({sum(counts.values())}):")
        for where, n in counts.items():
            print(f"  {n:4d}  {where}")
        return
    repo = Path(__file__).resolve().parents[1]
    trees = {"this tree": repo / "src"}
    with contextlib.ExitStack() as stack:
        if args.baseline:
            src = stack.enter_context(baseline_tree.checkout(repo, args.baseline))
            trees = {f"baseline {args.baseline}": src, **trees}
        kern = {name: _run_in(src, "kernels") for name, src in trees.items()}
        speed = {name: [] for name in trees}
        for _ in range(args.repeats):
            for name, src in trees.items():
                speed[name].append(_run_in(src, "speed"))
    print("kernels in the compiled loop body (one scenario):")
    for name, k in kern.items():
        print(f"  {name:>24}: " + "  ".join(f"{c} {n}" for c, n in k.items()))
    print(f"compiled seconds (the fastest of 3 runs, median over {args.repeats} alternations):")
    medians = {}
    for name, runs in speed.items():
        medians[name] = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        m = medians[name]
        print(
            f"  {name:>24}: azure_conv hour {m['azure_conv_hour']:.3f} s "
            f"({m['azure_conv_hour_iterations']:,} iterations) | 10k Poisson "
            f"{m['poisson_10k']:.3f} s ({m['poisson_10k_iterations']:,} iterations)"
        )
    if args.baseline:
        old, new = medians.values()
        print(
            "ratios this tree / baseline: "
            + ", ".join(f"{k} {new[k] / old[k]:.3f}" for k in ("azure_conv_hour", "poisson_10k"))
        )


if __name__ == "__main__":
    main()
