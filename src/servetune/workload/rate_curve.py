"""Traffic over a day (`workload.rate_curve.*`): a trace's arrival rate modulated over time by a
piecewise-linear curve of multipliers, keeping the trace's own arrival structure.

`tile`: the slice is repeated back to back until it spans `span_s` seconds (a day of traffic
from one recorded hour). Seeds that resample (workload/replicas.py) read each repeat from a
seeded circular offset of the slice, so the hours differ; the recorded seed repeats it as is.

`modulate`: with m(t) the curve's multiplier at time t and C = ceil(max m), the trace is
superposed C times (the first copy as is, the others circularly shifted by seeded offsets, as
`workload.replicas.rate` does) and each request of each copy is kept with probability
m(t) / C at its arrival time t. In expectation over the offsets, the rate at t is
m(t) (lambda(t) + (C - 1) lambda_bar) / C, with lambda(t) the trace's own rate at t and
lambda_bar its mean: m(t) lambda(t) exactly where the curve stays at or below 1 (C = 1), and
where the trace's rate is steady over its span (a recorded hour tiled over a day, a Poisson
draw); a trace with its own trend has it flattened in the shifted copies. Bursts and lengths
stay the trace's. Thinning is random, so every seed, the recorded one too, draws its own
requests (stream `streams.RATE_CURVE`).

A curve is a CSV of `time_s,multiplier` rows (lines starting with # are comments), times
increasing from 0, multipliers finite and >= 0, linear between knots. It must reach the end of
the trace it modulates. The bundled `azure_llm_2024_weekday` is the weekday shape of Azure's
LLM conversation traffic (its file names the source and how it was read).
"""

from __future__ import annotations

import dataclasses
import math
from importlib import resources
from pathlib import Path

import numpy as np

from servetune.core.errors import ConfigError, TraceError
from servetune.workload import trace_text
from servetune.workload.replicas import check_drawn, circular, room_for, superpose, take
from servetune.workload.traces import RequestTrace

BUNDLED = {"azure_llm_2024_weekday": "azure_llm_2024_weekday_curve.csv"}
# what workload.rate_curve.curve takes, as its errors say it
EXPECTED = f"a bundled curve ({', '.join(BUNDLED)}) or a CSV file of time_s,multiplier rows"
MAX_MULTIPLIER = 1000.0  # copies superposed at most (C = ceil(max m))


@dataclasses.dataclass(frozen=True)
class RateCurve:
    """Knots of a piecewise-linear rate multiplier: times [K] (s, increasing from 0) and
    multipliers [K] (>= 0)."""

    name: str
    times_s: np.ndarray  # [K] seconds
    multipliers: np.ndarray  # [K] rate factor at each knot

    @property
    def span_s(self) -> float:
        """The last knot's time: how far the curve reaches (s)."""
        return float(self.times_s[-1])

    def at(self, t: np.ndarray) -> np.ndarray:
        """m(t) [M] at times t [M] (s), linear between knots."""
        return np.interp(t, self.times_s, self.multipliers)


def _rows(text: str, where: str) -> list[tuple[int, float, float]]:
    """(line number, time, multiplier) of the data rows after the `time_s,multiplier` header."""
    rows, header = [], False
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        cells = [c.strip() for c in line.split(",")]
        if not header:
            if cells != ["time_s", "multiplier"]:
                raise TraceError(
                    f"{where}:{number}: got {line!r}; expected the header 'time_s,multiplier'"
                )
            header = True
            continue
        try:
            t, m = (float(c) for c in cells)
        except ValueError:
            raise TraceError(
                f"{where}:{number}: got {line!r}; expected two numbers, time_s,multiplier"
            ) from None
        rows.append((number, t, m))
    return rows


def parse(text: str, where: str) -> RateCurve:
    """The curve of a CSV's text; TraceError naming `where`, the line and what was expected."""
    rows = _rows(text, where)
    if len(rows) < 2:
        raise TraceError(f"{where}: got {len(rows)} knot(s); expected at least two rows")
    previous = None
    for number, t, m in rows:
        if not (math.isfinite(m) and 0 <= m <= MAX_MULTIPLIER):
            raise TraceError(
                f"{where}:{number}: multiplier {m!r}; expected a finite number in "
                f"[0, {MAX_MULTIPLIER:g}]"
            )
        if (
            not math.isfinite(t)
            or (previous is None and t != 0)
            or (previous is not None and t <= previous)
        ):
            raise TraceError(f"{where}:{number}: time_s {t!r}; expected times increasing from 0")
        previous = t
    times = np.array([t for _, t, _ in rows])
    mult = np.array([m for _, _, m in rows])
    if not np.any(mult > 0):
        raise TraceError(f"{where}: every multiplier is 0; the curve would keep no request")
    return RateCurve(Path(where).stem, times, mult)


def load(value: str) -> RateCurve:
    """A bundled curve by name, or a CSV file's; ConfigError / TraceError naming what is
    wrong."""
    if value in BUNDLED:
        data = resources.files("servetune.workload.data") / BUNDLED[value]
        curve = parse(data.read_text(), f"workload.rate_curve.curve={value}")
        return dataclasses.replace(curve, name=value)
    path = Path(value).expanduser()
    if not path.is_file():
        raise ConfigError(f"workload.rate_curve.curve: got {value!r}; expected {EXPECTED}")
    return parse(
        trace_text.read_text(path, "rate curve (a CSV of time_s,multiplier rows)"), str(path)
    )


def tile(trace: RequestTrace, span: float, total_s: float, rng) -> RequestTrace:
    """The slice `trace` (arrivals in [0, span) s) repeated back to back over [0, total_s):
    repeat k starts at k x span, read from a circular offset drawn by `rng` (None: offset 0,
    the slice as recorded). ConfigError naming workload.rate_curve.span_s, before anything is
    drawn, where the repeats would not fit in memory (replicas.check_drawn)."""
    tiles = math.ceil(total_s / span)
    check_drawn(
        tiles * len(trace),
        "workload.rate_curve.span_s",
        f"got {total_s:g}; repeating {trace.name}'s {len(trace):,} requests over {span:,.6g} s "
        f"{tiles:,} times",
        f"a span of at most {max(span, math.floor(room_for(len(trace))) * span):,.0f} s for "
        f"this slice",
    )
    idx, times = [], []
    for k in range(tiles):
        offset = 0.0 if rng is None else rng.uniform(0.0, span)
        arrival = k * span + circular(trace, offset, span)
        kept = np.flatnonzero(arrival < total_s)
        idx.append(kept)
        times.append(arrival[kept])
    return take(trace, np.concatenate(idx), np.concatenate(times))


def modulate(trace: RequestTrace, span: float, curve: RateCurve, rng) -> RequestTrace:
    """The trace (arrivals in [0, span) s) with its rate multiplied by the curve: ceil(max m)
    circularly shifted copies (the first unshifted), each request kept with probability
    m(t) / ceil(max m) (the rate this gives: the module docstring)."""
    knots = curve.times_s[curve.times_s < span]
    peak = float(max(curve.at(np.append(knots, span)).max(), 1e-12))
    copies = max(1, math.ceil(peak))
    check_drawn(
        copies * len(trace),
        "workload.rate_curve.curve",
        f"{curve.name}'s peak {peak:g} superposes {copies:,} copies of {len(trace):,} requests: it",
        "a lower peak or a shorter trace (workload.rate_curve.span_s, workload.duration_s)",
    )
    return superpose(trace, span, copies, lambda arrival: curve.at(arrival) / copies, rng)
