"""Seeded replicas of a real trace's slice (`workload.replicas.*`): scenarios that differ from
seed to seed while keeping the trace's arrival rate, burstiness and length distributions.

Replaying a trace gives one scenario however many seeds run; a tuned setting then is checked
against that one sample path. A replica resamples the slice, host-side, before the simulator
sees it:

- `shift_s`: the window starts U(0, shift_s) seconds later in the full trace (a different
  stretch of the same day);
- `block_s`: circular block bootstrap of the arrivals: the slice's span D is cut into blocks of
  block_s seconds, and each block is filled with the requests of a window of the same length
  starting at a uniform offset of the slice, read circularly (Politis & Romano's circular
  bootstrap), so bursts shorter than a block are kept whole and the rate holds in expectation;
- `rate`: rate scaling that keeps the arrival structure (unlike `workload.rate_scale`, which
  compresses time): ceil(rate) copies of the slice, each circularly shifted by a uniform offset
  (the first not shifted), superposed, each request kept with probability rate / ceil(rate);
- `lengths`: each request's content (prompt and output lengths with what goes with the prompt:
  prefix block ids, priority, difficulty) is drawn with replacement from the requests of its
  class (`classes.prompt_split_tokens`; one class without it), arrival times kept.

All off (block_s null, shift_s 0, rate 1, lengths false) replays the slice as is, and so does
the seed `recorded_seed` (0 by default) whatever the settings: a single run at seed 0 is the
trace as recorded, and `seeds=N` is the recorded slice and N - 1 replicas. Every draw
comes from numpy's generator seeded with (seed, a stream id per technique), so a seed gives the
same replica on every machine.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from servetune.core import streams
from servetune.core.errors import ConfigError
from servetune.core.host import GIB, USABLE, host_available_bytes
from servetune.workload.traces import RequestTrace, flush_subnormal

MAX_BLOCKS = 100_000  # blocks per replica: span / block_s
MAX_DRAWN = 1 << 26  # requests drawn at once by tiling or superposing copies (before thinning)
# host bytes per request drawn, at the peak of a tiling or a superposition: its index and time
# in each copy (16), their concatenation (16), take()'s sort order and gathers (24), the
# request's fields gathered (arrival, cancel_after, deadline f64; prompt, output, class i32:
# 36) and the trace it is drawn from (36), rounded up
DRAWN_BYTES = 144


def check_drawn(requests: int, key: str, what: str, most: str) -> None:
    """ConfigError starting with `key` when drawing `requests` requests (`what` draws them;
    `most`: what the key may be at most, given the figures) would pass MAX_DRAWN or USABLE of
    the host's available memory at DRAWN_BYTES each: checked before anything is allocated."""
    available = host_available_bytes()
    room = MAX_DRAWN if available is None else min(MAX_DRAWN, USABLE * available / DRAWN_BYTES)
    if requests <= room:
        return
    memory = (
        "" if available is None else f" ({USABLE:.0%} of the {available / GIB:.1f} GiB available)"
    )
    raise ConfigError(
        f"{key}: {what} draws {requests:,.0f} requests (~{requests * DRAWN_BYTES / GIB:,.1f} GiB "
        f"of host memory), more than the {int(room):,} that fit{memory}; expected {most}"
    )


def room_for(requests_each: float) -> float:
    """How many copies (or tiles) of `requests_each` requests check_drawn lets through."""
    available = host_available_bytes()
    room = MAX_DRAWN if available is None else min(MAX_DRAWN, USABLE * available / DRAWN_BYTES)
    return room / max(requests_each, 1.0)


@dataclasses.dataclass(frozen=True)
class ReplicaSpec:
    """The `workload.replicas.*` settings (see the module docstring)."""

    block_s: float | None = None  # block length of the circular bootstrap, seconds; None = off
    shift_s: float = 0.0  # the window's start moves by up to this many seconds
    rate: float = 1.0  # arrival-rate factor by thinning (< 1) or superposition (> 1)
    lengths: bool = False  # resample request contents within classes
    recorded_seed: int | None = 0  # the seed that replays the slice as recorded; None = none

    @property
    def active(self) -> bool:
        """Whether replicas differ from the slice."""
        return self.block_s is not None or self.shift_s > 0 or self.rate != 1.0 or self.lengths

    def resamples(self, seed: int) -> bool:
        """Whether seed `seed`'s scenario is a replica (else the slice as recorded)."""
        return self.active and seed != self.recorded_seed


def start_shift(spec: ReplicaSpec, seed: int) -> float:
    """Seconds by which seed `seed`'s window starts later: U(0, shift_s)."""
    if spec.shift_s <= 0 or not spec.resamples(seed):
        return 0.0
    return float(streams.rng(seed, streams.REPLICA_SHIFT).uniform(0.0, spec.shift_s))


def take(trace: RequestTrace, idx: np.ndarray, arrival: np.ndarray) -> RequestTrace:
    """Requests `idx` [M] of `trace` with new arrival times [M] (s), sorted by arrival."""
    order = np.argsort(arrival, kind="stable")
    idx, arrival = idx[order], arrival[order]
    fields = {name: getattr(trace, name)[idx] for name in trace.per_request_fields()}
    fields["arrival"] = flush_subnormal(arrival.astype(np.float64))
    return dataclasses.replace(trace, **fields)


def circular(trace: RequestTrace, offset: float, span: float):
    """Arrival times of the slice read circularly from `offset`: ((t - offset) mod span)."""
    return np.mod(trace.arrival - offset, span)


def block_bootstrap(
    trace: RequestTrace, span: float, block_s: float, rng: np.random.Generator
) -> RequestTrace:
    """The circular block bootstrap of the slice's arrivals over [0, span) s."""
    n_blocks = math.ceil(span / block_s)
    offsets = rng.uniform(0.0, span, size=n_blocks)
    lengths = np.minimum(block_s, span - np.arange(n_blocks) * block_s)
    # the slice twice over, so that a window read circularly is one contiguous range
    times = np.concatenate([trace.arrival, trace.arrival + span])
    lo = np.searchsorted(times, offsets, side="left")
    hi = np.searchsorted(times, offsets + lengths, side="left")
    counts = hi - lo
    block = np.repeat(np.arange(n_blocks), counts)
    pos = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts) + lo[block]
    arrival = block * block_s + (times[pos] - offsets[block])
    return take(trace, pos % len(trace), arrival)


def superpose(
    trace: RequestTrace, span: float, copies: int, keep, rng: np.random.Generator
) -> RequestTrace:
    """`copies` circularly shifted copies of the trace over [0, span) s (the first unshifted,
    the others by offsets drawn from `rng`), each request kept with probability keep(t) at its
    arrival t in its copy (`keep`: arrivals [N] -> probabilities [N])."""
    idx, times = [], []
    for c in range(copies):
        offset = 0.0 if c == 0 else rng.uniform(0.0, span)
        arrival = circular(trace, offset, span)
        kept = np.flatnonzero(rng.random(len(trace)) < keep(arrival))
        idx.append(kept)
        times.append(arrival[kept])
    return take(trace, np.concatenate(idx), np.concatenate(times))


def scale_rate(
    trace: RequestTrace, span: float, rate: float, rng: np.random.Generator
) -> RequestTrace:
    """ceil(rate) circularly shifted copies (the first unshifted), each request kept with
    probability rate / ceil(rate)."""
    copies = max(1, math.ceil(rate))
    check_drawn(
        copies * len(trace),
        "workload.replicas.rate",
        f"{rate:g} superposes {copies:,} copies of {trace.name}'s {len(trace):,} requests: it",
        f"a rate of at most {max(1, math.floor(room_for(len(trace)))):,} for this slice",
    )
    return superpose(trace, span, copies, lambda arrival: rate / copies, rng)


def resample_lengths(trace: RequestTrace, rng: np.random.Generator) -> RequestTrace:
    """Each request's content drawn with replacement from its class, arrival times kept."""
    idx = np.arange(len(trace))
    for klass in np.unique(trace.klass):
        members = np.flatnonzero(trace.klass == klass)
        idx[members] = rng.choice(members, size=len(members))
    return take(trace, idx, trace.arrival.copy())


def replica(trace: RequestTrace, span: float, spec: ReplicaSpec, seed: int) -> RequestTrace:
    """Seed `seed`'s replica of the slice `trace` (arrivals in [0, span) s); the window shift
    is applied by the caller when slicing (`start_shift`)."""
    if spec.block_s is not None:
        blocks_rng = streams.rng(seed, streams.REPLICA_BLOCKS)
        trace = block_bootstrap(trace, span, spec.block_s, blocks_rng)
    if spec.rate != 1.0:
        trace = scale_rate(trace, span, spec.rate, streams.rng(seed, streams.REPLICA_RATE))
    if spec.lengths:
        trace = resample_lengths(trace, streams.rng(seed, streams.REPLICA_LENGTHS))
    return trace
