"""How long a run will take and how much memory it will hold, said before it starts.

The estimate is a model of the simulator's own cost, from the workload and the engine, so it
means something before the first run on a machine (benchmarks/README.md, "Run estimates",
measures it against runs):

    wall = compilation + loop bodies x cost of a body + requests x host cost per request

- **Load** (a fluid model, per time bin of the Outline's arrivals, config/outline.py): on each of
  R serving replicas (the instances, or the autoscaler's replicas from its rule applied to the
  load: HPA's desired = ceil(metric sum / target), held for the scale-down window) requests
  arrive at lambda / R per second; each stays (output tokens + 1) iterations, so by Little's
  law n = lambda / R x (output + 1) x t(n) run at once, with t(n) the cost model's iteration
  time for n decoding sequences and the prompt tokens arriving meanwhile (core/cost.py); n is
  capped at max_num_seqs and the KV cache, where the replica is saturated. A replica is busy
  1 - exp(-n) of the time (idle when no request is there); its iterations are busy time / t.
- **Loop bodies**: the leap (engine/leap.py) runs up to engine.leap_max uniform iterations in
  one body, so bodies = iterations / leap_max plus the events that end a leap: per arrival
  about BODIES_PER_ARRIVAL on one instance (the simple step takes arrivals in), and, with
  several instances, one per busy replica (each stops at every routed arrival); an
  autoscaler's evaluations; and every iteration while a replica's queue overflows
  engine.queue_window (an arrival is always due: no leap runs).
- **A body's cost**: a constant for the path (one instance, several, an autoscaler over them),
  plus each entry of the stepped instance's active set (the run's width, which widens as the
  live requests need: engine/width.py), plus the pairs of (replica, idle replica): an idle one
  wakes at every other's iteration (engine/step.py, _wake_time), so few requests on many
  instances cost about as the instances^1.7 (IDLE_POWER). A vmapped batch costs VMAP x the
  scenarios' bodies.
- **Compilation**: one program per width, COMPILE_S; a program this machine compiled before
  (its signature in the record below) is read back from the persistent cache, CACHED_S.
- **This machine**: each finished run records its measured over estimated wall time per path;
  the estimate is multiplied by the geometric mean of the last RECENT ratios (at most 4x either
  way), so a slower machine, or a model that misses a path here, is corrected by its own runs.

Peak memory: the host's arrays (the traces, the workload arrays, the results and metrics of
every scenario) from the request count, XLA's while it compiles, plus the simulator's state
from engine/memory.py (exactly, an autoscaler's log included, once the scenario is built).

The record is a small JSON file, `$SERVETUNE_PACE_FILE`, else
`$XDG_CACHE_HOME/servetune/pace.json` (XDG_CACHE_HOME defaulting to ~/.cache): {"version": 2,
"ratios": {path: [...]}, "programs": [...]}; an older file's rates are ignored, and a file that
cannot be read or written is ignored: the record is advice, never a reason for a run to fail.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
from pathlib import Path

import jax
import numpy as np

from servetune.config.outline import Outline
from servetune.core.cost import step_time
from servetune.core.errors import ServetuneError
from servetune.core.files import write_text
from servetune.engine import memory, width
from servetune.engine.leap import steps_every_iteration, takes_arrivals
from servetune.workload.request_trace import duration_text

RECENT = 8  # runs whose ratios correct the estimate
MAX_CORRECTION = 4.0  # the most the record may move an estimate, either way
PROGRAMS = 256  # program signatures the record keeps
VERSION = 2

# Coefficients: benchmarks/README.md, "Run estimates" (the 2-core VM, JAX on CPU, measured with
# `python benchmarks/bench_estimate.py --fit`)
COMPILE_S = {"single": 5.5, "multi": 5.0, "fleet": 6.0}  # a program's compilation, by path
COMPILE_VMAP_S = 5.0  # added for a vmapped batch of scenarios
CACHED_S = 1.0  # a program read back from the persistent compilation cache
# one loop body's fixed cost, by path (an autoscaler's adds its evaluation, cold and
# serving masks to every body)
BODY_S = {"single": 15e-6, "multi": 15e-6, "fleet": 30e-6}
ENTRY_S = 0.36e-6  # per entry of the stepped instance's active set, per body
IDLE_S = 3.2e-6  # per (replica x idle replica) ** IDLE_POWER, per body
IDLE_POWER = 0.85  # measured: a body on I mostly idle replicas costs ~ I^1.7 (16 to 256)
BODIES_PER_ARRIVAL = 0.35  # one instance: bodies that end a leap, per arrival
VMAP = 0.7  # a vmapped batch's body per scenario, against one scenario's
REQUEST_S = 4e-6  # host: a request's records, per-request columns and metrics, per scenario
CALL_S = 0.02  # one rollout's fixed host cost (a tuner simulates scenarios one at a time)
# host bytes per request per scenario at the run's peak, besides the workload arrays: its trace,
# outbox records, result arrays and metric columns (measured: 2.59 GB peak for the 4.78 M
# requests of a day at 10x without the request table, ~375 bytes each with the workload arrays
# and the runtime) and the request table's frame (~240 where it is written)
HOST_BYTES = 640
COMPILE_BYTES = 512 << 20  # XLA compiling a program: the host memory it takes meanwhile


@dataclasses.dataclass(frozen=True)
class Load:
    """What the fluid model says one scenario does (module docstring)."""

    iterations: float  # over all replicas
    bodies: float  # loop bodies
    loop_s: float  # seconds of the compiled loop (before the machine's correction)
    width: int  # entries per instance the run ends at
    widenings: int
    replicas: float  # mean serving replicas (the instances without an autoscaler)
    saturated: float  # share of the simulated time some replica could not keep up


@dataclasses.dataclass(frozen=True)
class Estimate:
    """A run's estimated wall time (s) and host memory (bytes), and what they are made of."""

    wall_s: float  # all of it, corrected by this machine's record
    compile_s: float
    loop_s: float
    host_s: float
    memory_bytes: int  # host arrays (the simulator's state added once it is sized)
    correction: float  # this machine's measured / estimated (1 without a record)
    runs: int  # recorded runs behind the correction
    path: str  # the record the run's ratio goes to: path_of's, or "tune"
    load: Load | None = None
    state_bytes: int = 0  # the simulator's state and temporaries (engine/memory.py), once known

    @property
    def peak_bytes(self) -> int:
        """Host arrays and the simulator's state: what the run holds at its peak (on a CPU)."""
        return self.memory_bytes + self.state_bytes

    def text(self) -> str:
        """ "about 40 s on this machine (compilation 12 s), ~0.3 GiB" for a first line."""
        parts = [f"compiling {duration_shown(self.compile_s)}"] if self.compile_s >= 1 else []
        if self.runs:
            parts.append(f"x{self.correction:.2g} from {self.runs} earlier run(s) here")
        inner = f" ({', '.join(parts)})" if parts else ""
        return (
            f"about {duration_shown(self.wall_s)} on this machine{inner}, "
            f"~{size_shown(self.peak_bytes)} of memory"
        )

    def plus(self, other: Estimate, times: float = 1.0) -> Estimate:
        """This estimate and `times` runs of `other` one after another (memory: the larger)."""
        return dataclasses.replace(
            self,
            wall_s=self.wall_s + times * other.wall_s,
            compile_s=self.compile_s + other.compile_s,
            loop_s=self.loop_s + times * other.loop_s,
            host_s=self.host_s + times * other.host_s,
            memory_bytes=max(self.memory_bytes, other.memory_bytes),
            state_bytes=max(self.state_bytes, other.state_bytes),
        )


# ---- the load ---------------------------------------------------------------------------------


def _iteration_s(o: Outline, n, prefill):
    """[B] seconds of an iteration decoding n sequences (of mean context prompt + output / 2)
    with `prefill` prompt tokens (the cost model of core/cost.py, on numpy arrays)."""
    context = o.prompt_tokens + o.output_tokens / 2.0
    decode = np.maximum(n, 1.0)
    ctx = decode * context + prefill * o.prompt_tokens / 2.0
    attn = decode * (context + 1.0) + prefill * (o.prompt_tokens + 1.0) / 2.0
    t = step_time(o.cost, o.engine.cost_form, prefill, decode, ctx, attn, o.engine.async_scheduling)
    return np.maximum(np.asarray(t, np.float64), 1e-9)


def _cap(o: Outline) -> float:
    """The most requests one replica runs at once: max_num_seqs, engine.max_slots and the KV
    cache's room for requests of mean length."""
    per_request = max(o.prompt_tokens + o.output_tokens, 1.0)
    return max(1.0, min(o.max_num_seqs, o.engine.max_slots, o.kv_tokens / per_request))


def _per_replica(o: Outline, rate, replicas):
    """(n, busy share, iteration s, saturated) [B] of a replica given `rate` [B] arrivals per
    second over `replicas` [B] replicas (module docstring: Little's law, fixed point in n)."""
    lam = rate / np.maximum(replicas, 1.0)
    cap, budget = _cap(o), o.max_num_batched_tokens
    stay = o.output_tokens + 1.0
    t = _iteration_s(o, np.ones_like(lam), np.zeros_like(lam))
    n = np.zeros_like(lam)
    for _ in range(30):
        n = np.minimum(lam * stay * t, cap)
        busy = -np.expm1(-n)
        # each running request brings its prompt once in its stay: the prompt tokens an
        # iteration takes in (where the replica is full, only as many as complete: at most
        # the token budget)
        present = n / np.maximum(busy, 1e-9)
        prefill = np.minimum(present * o.prompt_tokens / stay, budget)
        t = _iteration_s(o, present, prefill)
    wanted = lam * stay * t
    saturated = (wanted > cap * 1.001) | (lam * o.prompt_tokens * t > budget * 1.001)
    busy = np.where(saturated, 1.0, -np.expm1(-n))
    return n, busy, t, saturated, wanted


def _fleet_replicas(o: Outline, rate):
    """[B] serving replicas under the autoscaler (bins of its interval): HPA's desired count
    for the metric the load gives, held to the largest of the scale-down window, within
    min .. max replicas."""
    f = o.fleet
    assert f is not None
    lo, hi = f.min_replicas, f.max_replicas
    replicas = np.full_like(rate, lo)
    window = max(1, int(round(f.scale_down_window_s / max(o.bin_s, 1e-9))) + 1)
    for _ in range(4):
        n, _, t, saturated, wanted = _per_replica(o, rate, replicas)
        if f.metric == "num_requests_running":
            metric = replicas * n
        elif f.metric == "kv_cache_usage_perc":
            used = n * (o.prompt_tokens + o.output_tokens / 2.0) / max(o.kv_tokens, 1.0)
            metric = replicas * used
        else:  # num_requests_waiting: a queue only where a replica cannot keep up
            metric = np.where(saturated, replicas * (wanted - _cap(o)), 0.0)
        desired = np.clip(np.ceil(metric / f.target - 1e-9), lo, hi)
        held = np.lib.stride_tricks.sliding_window_view(
            np.concatenate([np.full(window - 1, desired[0]), desired]), window
        ).max(axis=1)
        replicas = np.clip(held, lo, hi)
    return replicas


def _width(o: Outline, n_peak: float, saturated: bool) -> tuple[int, int]:
    """(entries per instance the run ends at, widenings): a run widens where its live requests
    (a peak of `n_peak` running plus two standard deviations, Poisson, and the arrivals an
    iteration takes in) need more entries than it holds, to twice the need in doublings
    (engine/width.py); a saturated replica's queue fills its window, the full width. A run
    that grows widens about every two doublings (each widening leaves room for twice the
    need)."""
    cfg = o.engine
    full, start = cfg.full_width, cfg.n_entries
    need = full if saturated else n_peak + 2.0 * math.sqrt(max(n_peak, 0.0)) + 2.0
    if need <= start:
        return start, 0
    w, doublings = start, 0
    while w < full and w < width.HEADROOM * need:
        w, doublings = min(w * width.WIDTH_STEP, full), doublings + 1
    return w, max(1, math.ceil(doublings / 2))


def _peak(n, t, o: Outline) -> float:
    """The requests a replica holds at its busiest: the 99th percentile over bins of n [B]
    averaged over a request's stay ((output + 1) x t), where a bin is shorter (a short bin's
    arrivals are noisier than the requests present at once; measured: the Azure hour's
    busiest 1.7 s bin gives 66, its most running at once is 39, the percentile 38)."""
    if not n.size:
        return 0.0
    stay = float(np.median((o.output_tokens + 1.0) * t))
    k = int(min(max(1, round(stay / max(o.bin_s, 1e-9))), n.size))
    smooth = np.convolve(n, np.ones(k) / k, mode="valid")
    return float(np.percentile(smooth, 99))


def _backlog(arrivals, capacity, saturated):
    """[B] requests waiting at the end of each bin (Lindley's recursion): B_b = max(0, B_(b-1)
    + arrivals_b - capacity_b) where the replicas are `saturated` [B], else 0 (they keep up)."""
    out = np.zeros_like(arrivals)
    level = 0.0
    for b in range(arrivals.size):
        level = max(0.0, level + arrivals[b] - capacity[b]) if saturated[b] else 0.0
        out[b] = level
    return out


def load(o: Outline) -> Load:
    """One scenario of `o` under the fluid model (module docstring). Where replicas cannot
    keep up, requests queue (the backlog, drained after the last arrival for at most
    window.drain_s); where the queue overflows engine.queue_window, the waiting arrival is
    always due, so no leap runs and every iteration is a body."""
    cfg = o.engine
    rate = o.counts / o.bin_s
    if o.fleet is not None:  # (the engine's autoscale switch is decided after the outline)
        replicas = _fleet_replicas(o, rate)
    else:
        replicas = np.full_like(rate, float(cfg.n_instances))
    n, busy, t, saturated, _ = _per_replica(o, rate, replicas)
    iterations = replicas * busy * o.bin_s / t
    capacity = replicas * _cap(o) / ((o.output_tokens + 1.0) * t) * o.bin_s  # [B] requests
    waiting = _backlog(o.counts, capacity, saturated)
    admitted = o.counts - np.diff(waiting, prepend=0.0)
    overflow = waiting > cfg.queue_window * replicas
    drain = min(o.drain_s, waiting[-1] / max(capacity[-1] / o.bin_s, 1e-9)) if waiting.size else 0
    drain_iterations = float(replicas[-1]) * drain / float(t[-1]) if waiting.size else 0.0
    single = cfg.n_instances == 1
    leaps = cfg.leap_max > 0 and not cfg.speculation and not steps_every_iteration(cfg)
    per_body = np.where(overflow, 1.0, cfg.leap_max if leaps else 1.0)
    if single:
        events = admitted * (BODIES_PER_ARRIVAL if takes_arrivals(cfg) else 2.0)
    else:
        events = admitted * (1.0 + busy * replicas)
    if o.fleet is not None:  # the autoscaler's evaluations: each wakes the loop
        events = events + o.bin_s / max(o.fleet.interval_s, 1e-9)
    bodies = iterations / per_body + events
    drain_bodies = drain_iterations / (1.0 if overflow.size and overflow[-1] else per_body[-1])
    w, widenings = _width(o, _peak(n, t, o), bool(np.any(saturated)))
    path = path_of(o)
    idle = (replicas * replicas * (1.0 - busy)) ** IDLE_POWER if not single else 0.0
    cost = BODY_S[path] + ENTRY_S * w + IDLE_S * idle
    loop_s = float(np.sum(bodies * cost)) + drain_bodies * (BODY_S[path] + ENTRY_S * w)
    span = max(float(o.counts.size) * o.bin_s, 1e-9)
    return Load(
        iterations=float(np.sum(iterations)) + drain_iterations,
        bodies=float(np.sum(bodies)) + drain_bodies,
        loop_s=loop_s,
        width=int(w),
        widenings=int(widenings),
        replicas=float(np.sum(replicas) * o.bin_s / span),
        saturated=float(np.sum(saturated) * o.bin_s / span),
    )


# ---- one batch --------------------------------------------------------------------------------


def path_of(o: Outline) -> str:
    """The engine's path, and the record a run's ratio goes to: "single" (one instance),
    "multi" (several) or "fleet" (an autoscaler over them)."""
    if o.fleet is not None:
        return "fleet"
    return "single" if o.engine.n_instances == 1 else "multi"


def host_bytes(o: Outline) -> int:
    """Host memory of the batch's requests: each scenario's drawn trace, workload arrays,
    records, results and metric columns (HOST_BYTES each), and the workload arrays padded
    (engine/memory.workload_bytes)."""
    n = max(o.requests, 1)
    padded = max(64, 1 << (n - 1).bit_length())
    return int(o.scenarios * n * HOST_BYTES + memory.workload_bytes(o.seeds, padded, o.engine))


def simulation(
    o: Outline, batched: bool = True, path: Path | None = None, kind: str | None = None
) -> Estimate:
    """The estimate of simulating `o`'s batch: its scenarios in one vmapped call (`batched`),
    else one at a time (a tuner's loop), corrected by this machine's record of `kind` runs
    (default: the path, path_of)."""
    one = load(o)
    lanes = o.scenarios
    loop = one.loop_s * (lanes * VMAP if batched and lanes > 1 else lanes)
    calls = 1 if batched else lanes
    host = lanes * o.requests * REQUEST_S + calls * CALL_S
    kind = kind or path_of(o)
    each = COMPILE_S[path_of(o)] + (COMPILE_VMAP_S if batched and lanes > 1 else 0.0)
    first = _compile_s(signature(o, batched), each, path)
    compile_s = first + one.widenings * each
    compiles = first == each or one.widenings > 0  # (a program read back takes no XLA memory)
    correction, runs = correction_of(kind, path)
    raw = compile_s + loop + host
    return Estimate(
        wall_s=raw * correction,
        compile_s=compile_s * correction,
        loop_s=loop * correction,
        host_s=host * correction,
        memory_bytes=host_bytes(o) + (COMPILE_BYTES if compiles else 0),
        correction=correction,
        runs=runs,
        path=kind,
        load=one,
    )


def signature(o: Outline, batched: bool = True) -> str:
    """What names a batch's compiled program on this machine: its engine and array shapes."""
    n = max(o.requests, 1)
    padded = max(64, 1 << (n - 1).bit_length())
    lanes = (o.seeds, o.points) if batched else (1, 1)
    text = repr((o.engine, lanes, padded))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def plan_line(scenarios: int, requests: int, simulated_s: float, est: Estimate) -> str:
    """The first line of a run: scenarios, requests, simulated seconds and the estimate, e.g.
    "simulating 12 scenario(s) of 2,867 requests, 600 s of traffic each; about 40 s on this
    machine (compiling 8 s), ~0.1 GiB of memory"."""
    return (
        f"simulating {scenarios} scenario(s) of {requests:,} requests, "
        f"{simulated_s:,.0f} s of traffic each; {est.text()}"
    )


# ---- this machine's record ----------------------------------------------------------------------


def pace_file() -> Path:
    """Where this machine's record of past runs lives."""
    own = os.environ.get("SERVETUNE_PACE_FILE")
    if own:
        return Path(own)
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "servetune" / "pace.json"


def _document(path: Path | None) -> dict:
    """The record (VERSION 2), {} when there is none or it is unreadable, foreign or older
    (an older file's per-kind rates are not ratios: left out)."""
    try:
        doc = json.loads((path or pace_file()).read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(doc, dict) or doc.get("version") != VERSION:
        return {}
    return doc


def _ratios(doc: dict, kind: str) -> list[float]:
    try:
        values = [float(r) for r in (doc.get("ratios") or {}).get(kind) or []]
    except (TypeError, ValueError, AttributeError):
        return []
    return [r for r in values if math.isfinite(r) and r > 0]


def correction_of(kind: str, path: Path | None = None) -> tuple[float, int]:
    """(measured / estimated wall time of this machine's recent `kind` runs, their geometric
    mean held within MAX_CORRECTION either way; runs it is based on), (1.0, 0) without any."""
    ratios = _ratios(_document(path), kind)[-RECENT:]
    if not ratios:
        return 1.0, 0
    mean = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    return min(max(mean, 1.0 / MAX_CORRECTION), MAX_CORRECTION), len(ratios)


_COMPILED: set = set()  # program signatures this process has compiled (jit's own cache)


def _compile_s(sig: str, each: float, path: Path | None) -> float:
    """Seconds to get the program `sig`: none where this process compiled it, CACHED_S where
    this machine did and JAX's persistent cache is on, else `each`."""
    if sig in _COMPILED:
        return 0.0
    if jax.config.jax_compilation_cache_dir:
        programs = _document(path).get("programs")
        if isinstance(programs, list) and sig in programs:
            return CACHED_S
    return each


def record(estimate: Estimate, wall_s: float, signatures=(), path: Path | None = None) -> None:
    """Add a finished run (`estimate` made before it, `wall_s` measured) to the record: its
    ratio to the uncorrected estimate under its path, and the programs it compiled."""
    _COMPILED.update(signatures)
    raw = estimate.wall_s / estimate.correction
    if not (wall_s > 0 and raw > 0):
        return
    path = path or pace_file()
    doc = _document(path)
    ratios = doc.get("ratios") if isinstance(doc.get("ratios"), dict) else {}
    ratios[estimate.path] = (_ratios(doc, estimate.path) + [wall_s / raw])[-RECENT:]
    programs = [p for p in doc.get("programs") or [] if isinstance(p, str)]
    programs = [p for p in programs if p not in signatures] + list(signatures)
    doc = {"version": VERSION, "ratios": ratios, "programs": programs[-PROGRAMS:]}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text(path, json.dumps(doc))
    except (OSError, ServetuneError):
        pass


def duration_shown(seconds: float) -> str:
    """Seconds for a reader, at least "1 s" (request_trace.duration_text)."""
    return duration_text(max(seconds, 1.0))


def size_shown(n: float) -> str:
    """Bytes for a reader: "0.3 GiB", "12 MiB"."""
    return f"{n / memory.GIB:.1f} GiB" if n >= memory.GIB / 10 else f"{n / (1 << 20):.0f} MiB"
