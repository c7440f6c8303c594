"""One check of an imported record's requests against each other, shared by
every importer (validate/bench_import.py, validate/otel_import.py): each value alone was
already checked (record_columns.check_value); here the values of a request, and the requests
of a record, must agree before they become a trace. Every refusal is a TraceError naming the
record and the source's own field names and values, and saying what was expected.

Checked, all in seconds on one clock (the record's):

1. queue times >= 0 (a time waited is never negative);
2. units (section "Units" below): TTFTs and latencies in seconds, not milliseconds;
3. per completed request: TTFT <= E2E latency within SAME_CLOCK_S (so its first token comes
   no later than its finish: both are its start plus these, and adding a float is monotone);
   the sum of its inter-token latencies (ITLs, where recorded) <= E2E - TTFT; a queue time
   inside the span (the scheduler's, OTLP) <= TTFT; its finish within the run's length (where
   the source records one, bench's `duration`);
4. per request: a queue time before the start (bench's client queue: arrival = start - queue)
   at most the time from the record's first start to this start, within JITTER_S -- the
   record begins with its first send, so no request arrives before it;
5. arrival order: whether the records are listed by arrival (start - queue before it). Not an
   error (vLLM's bench lists requests as sent, an OTLP exporter as they finish; the importers
   sort by arrival): the answer is returned for the import's summary.

Failed requests (ok False) have no times a source vouches for (vLLM writes TTFT and latency 0,
or a TTFT and no latency when the stream broke): only their starts and queue times are checked.

Units. A record in milliseconds read as seconds is 1000 times slower than any server. Its
TTFTs are refused as milliseconds when no completed request got its first token within
MS_TTFT_S (10 s) and none prefilled its prompt at PREFILL_FLOOR (1,000 tokens/s) or faster:
an idle server answers its first request within a second or so, and a long prompt that takes
longer goes faster than that. Its latencies are refused as milliseconds when no completed
request of two or more output tokens decoded them at DECODE_FLOOR (1 token/s) or faster (a
GPU server decodes tens of tokens a second per request, even when full).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from servetune.core.errors import TraceError

SAME_CLOCK_S = 1e-6  # two durations from the same clock readings: rounding only
JITTER_S = 1e-3  # a client's or a server's two clocks (send vs queue, engine vs frontend)
MS_TTFT_S = 10.0  # no completed request's first token within this: TTFTs in milliseconds?
PREFILL_FLOOR = 1000.0  # tokens/s: ...and none prefilled this fast
DECODE_FLOOR = 1.0  # tokens/s: no completed request decoded this fast: latencies in ms?
MS = "expected seconds; these look like milliseconds"


@dataclass(frozen=True)
class RecordTimes:
    """A record's requests as an importer read them: arrays [N] in the record's own order.

    Attributes:
        start: seconds on the record's clock: when the TTFT and the latency start counting
            (bench: the send; OTLP: the span's start, the arrival at the engine).
        ttft: seconds from `start` to the first token.
        e2e: seconds from `start` to the last token (bench's `latencies`).
        ok: bool, the request succeeded (failed ones' times are not checked).
        prompt, output: prompt and output tokens.
        before: seconds waited before `start` (bench's client queue: arrival = start -
            before); None when the source has no such queue.
        within: seconds of the span spent queued before being scheduled (OTLP), nan where
            not recorded; None when the source has no such queue.
        itl_sum: seconds, the sum of each request's inter-token latencies, nan where none are
            recorded; None when the source records none.
        window: seconds from the first start within which every request finished (bench's
            `duration`); None when the source does not say.
    """

    start: np.ndarray
    ttft: np.ndarray
    e2e: np.ndarray
    ok: np.ndarray
    prompt: np.ndarray
    output: np.ndarray
    before: np.ndarray | None = None
    within: np.ndarray | None = None
    itl_sum: np.ndarray | None = None
    window: float | None = None


@dataclass(frozen=True)
class RecordNames:
    """How a source names its records and fields in messages.

    Attributes:
        record: i -> the place of the i-th record, file first ("bench.json: record 3",
            "spans.json:2: resourceSpans[0].scopeSpans[0].spans[1]").
        fields: role (a RecordTimes attribute, or "window") -> the source's name for it
            ("ttft": "ttfts" for bench, "gen_ai.latency.time_to_first_token" for OTLP).
        indexed: whether a field is named with the record's index ("ttfts[3]").
    """

    record: Callable[[int], str]
    fields: dict
    indexed: bool = True

    def field(self, role: str, i: int) -> str:
        """The source's name of record i's value of `role` ("ttfts[3]")."""
        name = self.fields[role]
        return f"{name}[{i}]" if self.indexed and role != "window" else name


def _s(x) -> str:
    """A number of seconds or tokens as a message shows it."""
    return f"{float(x):.6g}"


def _first(bad: np.ndarray) -> int | None:
    """Index of the first True in `bad`, None if none."""
    hit = np.flatnonzero(bad)
    return int(hit[0]) if len(hit) else None


def check_records(t: RecordTimes, names: RecordNames) -> str:
    """Check a record's requests against each other (the module's docstring lists what);
    TraceError naming the first record that contradicts itself, its fields and their values.
    Returns "arrival" when the records are listed in arrival order, else a sentence naming
    the first one listed after a later arrival."""
    _check_nonnegative(t, names)
    _check_ttft_units(t, names)
    _check_decode_units(t, names)
    _check_first_token(t, names)
    _check_itls(t, names)
    _check_queue_within(t, names)
    _check_window(t, names)
    _check_queue_before(t, names)
    return arrival_order(t, names)


def _check_nonnegative(t: RecordTimes, names: RecordNames) -> None:
    """Queue times are >= 0 (nan: not recorded)."""
    for role in ("before", "within"):
        q = getattr(t, role)
        k = None if q is None else _first(q < 0)
        if k is not None:
            raise TraceError(
                f"{names.record(k)}: {names.field(role, k)} = {_s(q[k])} s; "
                f"expected a queue time >= 0"
            )


def _check_ttft_units(t: RecordTimes, names: RecordNames) -> None:
    """TTFTs in milliseconds: no completed request's within MS_TTFT_S, none prefilling at
    PREFILL_FLOOR tokens/s (see the module's docstring)."""
    done = np.flatnonzero(t.ok)
    if not len(done):
        return
    k = int(done[np.argmin(t.ttft[done])])
    with np.errstate(divide="ignore", invalid="ignore"):  # a TTFT of 0: no rate to doubt
        rate = float(np.nanmax(t.prompt[done] / t.ttft[done], initial=0.0))
    if t.ttft[k] >= MS_TTFT_S and rate < PREFILL_FLOOR:
        raise TraceError(
            f"{names.record(k)}: {names.field('ttft', k)} = {_s(t.ttft[k])} s is "
            f"the quickest first token of the completed requests, and none "
            f"prefilled at {PREFILL_FLOOR:,.0f} tokens/s or faster (at most "
            f"{rate:.3g}); {MS}"
        )


def _check_decode_units(t: RecordTimes, names: RecordNames) -> None:
    """Latencies in milliseconds: no completed request of >= 2 output tokens decoded at
    DECODE_FLOOR tokens/s (see the module's docstring)."""
    many = np.flatnonzero(t.ok & (t.output >= 2))
    if not len(many):
        return
    with np.errstate(divide="ignore"):
        rate = (t.output[many] - 1) / np.maximum(t.e2e[many] - t.ttft[many], 0.0)
    k = int(many[np.argmax(rate)])
    if rate.max() < DECODE_FLOOR:
        raise TraceError(
            f"{names.record(k)}: {names.field('e2e', k)} = {_s(t.e2e[k])} s after "
            f"{names.field('ttft', k)} = {_s(t.ttft[k])} s for {t.output[k]} "
            f"output tokens is the fastest decode of the completed requests "
            f"({rate.max():.3g} tokens/s; none at {DECODE_FLOOR:g} or faster); {MS}"
        )


def _check_first_token(t: RecordTimes, names: RecordNames) -> None:
    """Each completed request's TTFT <= its E2E latency (first token <= finish)."""
    k = _first(t.ok & (t.ttft > t.e2e + SAME_CLOCK_S))
    if k is not None:
        raise TraceError(
            f"{names.record(k)}: {names.field('ttft', k)} = {_s(t.ttft[k])} s is "
            f"after {names.field('e2e', k)} = {_s(t.e2e[k])} s (first token after "
            f"the finish); expected TTFT <= latency"
        )


def _check_itls(t: RecordTimes, names: RecordNames) -> None:
    """Each completed request's ITLs sum to at most its latency less its TTFT."""
    if t.itl_sum is None:
        return
    gap = t.e2e - t.ttft
    k = _first(t.ok & (t.itl_sum > gap + SAME_CLOCK_S))  # nan (none recorded) compares False
    if k is not None:
        raise TraceError(
            f"{names.record(k)}: sum({names.field('itl_sum', k)}) = "
            f"{_s(t.itl_sum[k])} s is longer than {names.field('e2e', k)} - "
            f"{names.field('ttft', k)} = {_s(gap[k])} s (tokens after the "
            f"finish); expected the ITLs within the time from first token to finish"
        )


def _check_queue_within(t: RecordTimes, names: RecordNames) -> None:
    """Each completed request's queue time inside its span is at most its TTFT (it is
    scheduled before its first token)."""
    if t.within is None:
        return
    k = _first(t.ok & (t.within > t.ttft + JITTER_S))
    if k is not None:
        raise TraceError(
            f"{names.record(k)}: {names.field('within', k)} = {_s(t.within[k])} s "
            f"is longer than {names.field('ttft', k)} = {_s(t.ttft[k])} s "
            f"(scheduled after its first token); expected the queue time within "
            f"the span, before the first token"
        )


def _check_window(t: RecordTimes, names: RecordNames) -> None:
    """Each completed request finishes within the run's length from the first start."""
    if t.window is None:
        return
    end = t.start - t.start.min() + t.e2e
    k = _first(t.ok & (end > t.window + JITTER_S))
    if k is not None:
        raise TraceError(
            f"{names.record(k)}: {names.field('start', k)} + "
            f"{names.field('e2e', k)} ends {_s(end[k])} s after the first start, "
            f"past {names.field('window', k)} = {_s(t.window)} s (the run's "
            f"length); expected every request to finish within the run, its "
            f"latency in seconds (milliseconds?)"
        )


def _check_queue_before(t: RecordTimes, names: RecordNames) -> None:
    """Each request's queue time before its start is at most the time since the record's
    first start: no request arrives before the record begins."""
    if t.before is None:
        return
    j = int(np.argmin(t.start))
    since = t.start - t.start[j]
    k = _first(t.before > since + JITTER_S)
    if k is not None:
        raise TraceError(
            f"{names.record(k)}: {names.field('before', k)} = {_s(t.before[k])} s "
            f"is longer than the {_s(since[k])} s from the first start "
            f"({names.field('start', j)} = {_s(t.start[j])}) to "
            f"{names.field('start', k)} = {_s(t.start[k])} (an arrival "
            f"{_s(t.before[k] - since[k])} s before the record begins); expected "
            f"a queue time within the time since the first start"
        )


def arrivals(t: RecordTimes) -> np.ndarray:
    """Each request's arrival [N], seconds on the record's clock: its start less the time it
    queued before it (if the source has such a queue)."""
    return t.start if t.before is None else t.start - t.before


def arrival_order(t: RecordTimes, names: RecordNames) -> str:
    """ "arrival" when the records are listed by arrival (ties in any order), else a sentence
    naming the first record listed after one that arrived later, and by how many seconds."""
    a = arrivals(t)
    k = _first(np.diff(a) < 0)
    if k is None:
        return "arrival"
    return (
        f"not arrival order: {names.record(k + 1)} arrived {_s(a[k] - a[k + 1])} s before "
        f"the record listed above it (the import sorts by arrival)"
    )
