"""How long a simulation will take on this machine, said before it starts: each finished run
records the requests it simulated (summed over its scenarios) per second of wall time, and the
next run's first line divides its own request count by the average of the recent rates.

The record is a small JSON file, `$SERVETUNE_PACE_FILE`, else
`$XDG_CACHE_HOME/servetune/pace.json` (XDG_CACHE_HOME defaulting to ~/.cache). The estimate is
rough: a rate includes compilation (most of a small run's time) and an overloaded engine
simulates each request more slowly than a light one. A file that cannot be read or written is
ignored: the estimate is advice, never a reason for a run to fail.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

from servetune.core.errors import ServetuneError
from servetune.core.files import write_text
from servetune.workload.request_trace import duration_text

RECENT = 8  # runs whose rates are averaged


def pace_file() -> Path:
    """Where this machine's record of past runs lives."""
    own = os.environ.get("SERVETUNE_PACE_FILE")
    if own:
        return Path(own)
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "servetune" / "pace.json"


def _document(path: Path) -> dict:
    """The record: {kind: [requests per wall second, oldest first]}; {} when there is none or
    it is unreadable or foreign."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def _rates(path: Path, kind: str = "simulate") -> list[float]:
    """The recorded rates of `kind` runs (simulate, tune: a tuner simulates populations in
    batches, at its own pace), oldest first; [] when there are none."""
    try:
        rates = [float(r) for r in _document(path).get(kind) or []]
    except (TypeError, ValueError):
        return []
    return [r for r in rates if math.isfinite(r) and r > 0]


def record(requests: int, wall_s: float, path: Path | None = None, kind: str = "simulate") -> None:
    """Add one finished `kind` run (`requests` simulated over all its scenarios in `wall_s`
    seconds) to the record, keeping the RECENT latest."""
    if requests <= 0 or not wall_s > 0:
        return
    path = path or pace_file()
    doc = _document(path)
    doc[kind] = (_rates(path, kind) + [requests / wall_s])[-RECENT:]
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text(path, json.dumps(doc))
    except (OSError, ServetuneError):
        pass


def wall_estimate(
    requests: int, path: Path | None = None, kind: str = "simulate"
) -> tuple[float, int] | None:
    """(estimated wall seconds for `requests` simulated requests, runs it is based on), from
    the geometric mean of the recorded `kind` rates; None before the first recorded run."""
    rates = _rates(path or pace_file(), kind)
    if not rates or requests <= 0:
        return None
    mean_rate = math.exp(sum(math.log(r) for r in rates) / len(rates))
    return requests / mean_rate, len(rates)


def simulate_kind(instances: int) -> str:
    """The record a simulate run of `instances` engine instances keeps its pace in: its own
    per instance count, since a run's time per request grows with the instances (each loop
    body steps one instance and an idle one wakes at the others' iterations: with few requests
    per instance about as the instances squared; 19 requests took 0.6 s on 64 instances and
    10 s on 256)."""
    return "simulate" if instances == 1 else f"simulate, {instances} instances"


def plan_line(
    scenarios: int, requests: int, simulated_s: float, path: Path | None = None, instances: int = 1
) -> str:
    """The first line of a run: scenarios, requests, simulated seconds and the wall-time
    estimate, e.g. "simulating 12 scenario(s) of 2,867 requests, 600 s of traffic each; about
    40 s on this machine (from 8 earlier runs)"."""
    head = (
        f"simulating {scenarios} scenario(s) of {requests:,} requests, "
        f"{simulated_s:,.0f} s of traffic each"
    )
    return head + "; " + guess_text(scenarios * requests, path, simulate_kind(instances))


def guess_text(requests: int, path: Path | None = None, kind: str = "simulate") -> str:
    """ "about 40 s on this machine (from 8 earlier runs, compilation included)", or that there
    is no estimate yet, for `requests` simulated requests of a `kind` run."""
    guess = wall_estimate(requests, path, kind)
    if guess is None and kind.startswith("simulate, "):
        return (
            f"no estimate yet (the first run on {kind.split(', ')[1]} on this machine; "
            f"time per request grows with the instances, about as their square when most "
            f"are idle)"
        )
    if guess is None:
        return f"no estimate yet (the first {kind} run on this machine; compiling first)"
    seconds, runs = guess
    return (
        f"about {_duration(seconds)} on this machine (from {runs} earlier "
        f"run{'s' if runs > 1 else ''}, compilation included)"
    )


def _duration(seconds: float) -> str:
    """Seconds for a reader, at least "1 s" (request_trace.duration_text)."""
    return duration_text(max(seconds, 1.0))
