"""Clean CSV traces read vectorized (pyarrow's streaming CSV reader), about ten times faster
than the line reader of servetune.workload.trace_file on large files, with the same result.

It reads only files it can read exactly as the line reader would, and returns None for every other
one, which the line reader then reads (and reports on, line by line). A file qualifies when its
header is its first line with distinct names, it holds no quote, NUL byte, lone carriage return or
line longer than the csv module's field limit, it is UTF-8, every row has the header's number of
fields, and every cell of the three columns read is plain: a token count of ASCII digits in [1,
MAX_TOKENS], and an arrival that is a non-negative decimal number or an ISO date-time of the forms
the line reader takes, all of one kind, sorted, spanning at most MAX_SPAN_S, and numeric arrivals
plausible in their unit (request_trace.time_unit_problem: the line reader then names the unit that
fits). Numbers are parsed correctly rounded on both paths and date-times to the microsecond, so the
arrays are equal bit for bit (tests/integration/test_trace_formats.py checks this on the fuzz corpus
and on generated files).
"""

from __future__ import annotations

import csv
import dataclasses
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv

from servetune.workload import trace_text
from servetune.workload.request_trace import MAX_SPAN_S, MAX_TOKENS, time_unit_problem

_TOKENS = r"^ *[0-9]{1,8} *$"
_SECONDS = r"^ *(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]{1,3})? *$"
_CLOCK = r"\d{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12]\d|3[01])[T ](?:[01]\d|2[0-3]):[0-5]\d:[0-5]\d"
_NAIVE = rf"^{_CLOCK}(?:\.\d+)?$"
_AWARE = rf"^{_CLOCK}(?:\.\d+)?(?:Z|[+-](?:[01]\d|2[0-3]):[0-5]\d)$"
_TIMESTAMPS = {"naive": pa.timestamp("us"), "aware": pa.timestamp("us", tz="UTC")}


@dataclasses.dataclass(frozen=True)
class FastRead:
    """What the vectorized reader found: the window's requests ([M] arrays; arrival in seconds
    after the file's first request), the count of requests in the file and its span (s)."""

    arrival: np.ndarray
    prompt: np.ndarray
    output: np.ndarray
    n_requests: int
    span_s: float


def _clean(path: Path) -> bool:
    """Whether the whole file is UTF-8 without a quote, NUL, lone CR or over-long line (read in
    pieces that end at a line break, so none splits a character or a CR LF)."""
    limit = csv.field_size_limit()
    tail = b""
    with path.open("rb") as handle:
        while True:
            chunk = handle.read(trace_text.CHUNK_BYTES)
            data = tail + chunk
            cut = data.rfind(b"\n") + 1 if chunk else len(data)
            body, tail = data[:cut], data[cut:]
            if len(tail) > limit:
                return False
            try:
                body.decode("utf-8")
            except UnicodeDecodeError:
                return False
            if b'"' in body or b"\x00" in body or body.count(b"\r") != body.count(b"\r\n"):
                return False
            if _longest_line(body) > limit:
                return False
            if not chunk:
                return True


def _longest_line(data: bytes) -> int:
    """Bytes of the longest line of `data` (line breaks included)."""
    breaks = np.flatnonzero(np.frombuffer(data, np.uint8) == 0x0A)
    ends = np.append(breaks, len(data) - 1)
    return int(np.diff(ends, prepend=-1).max()) if len(data) else 0


def _plain(column, pattern: str) -> bool:
    """Whether every cell of `column` matches `pattern` (RE2, anchored)."""
    return pc.all(pc.match_substring_regex(column, pattern)).as_py() is not False


def _tokens(column) -> np.ndarray | None:
    """[n] int32 token counts of a batch column, or None if a cell is not plain."""
    if not _plain(column, _TOKENS):
        return None
    values = pc.cast(pc.utf8_trim(column, " "), pa.int64()).to_numpy(zero_copy_only=False)
    if len(values) and not (values.min() >= 1 and values.max() <= MAX_TOKENS):
        return None
    return values.astype(np.int32)


def _arrivals(column, unit_s: float) -> tuple[np.ndarray, str] | None:
    """([n] seconds, kind) of a batch column of one kind of arrival, or None."""
    if _plain(column, _SECONDS):
        seconds = pc.cast(pc.utf8_trim(column, " "), pa.float64()).to_numpy(zero_copy_only=False)
        return seconds * unit_s, "number"
    for kind, pattern in (("naive", _NAIVE), ("aware", _AWARE)):
        if _plain(column, pattern):
            text = pc.replace_substring_regex(column, r"(\.\d{6})\d+", r"\1")
            stamps = pc.cast(text, _TIMESTAMPS[kind]).cast(pa.int64())
            return stamps.to_numpy(zero_copy_only=False) / 1e6, kind
    return None


def _batches(path: Path, header: list[str], columns: tuple[str, str, str]):
    read = pa_csv.ReadOptions(column_names=header, skip_rows=1, block_size=trace_text.CHUNK_BYTES)
    convert = pa_csv.ConvertOptions(
        column_types={c: pa.string() for c in columns},
        include_columns=list(columns),
        strings_can_be_null=False,
        quoted_strings_can_be_null=False,
    )
    return pa_csv.open_csv(path, read_options=read, convert_options=convert)


def read(
    path: Path,
    header: list[str],
    header_line: int,
    columns: tuple[str, str, str],
    unit_s: float,
    window: tuple[float, float],
) -> FastRead | None:
    """The requests of `window` ([lo, hi) s after the first request) of the CSV trace `path`
    whose header (stripped names) is `header` on line `header_line`, reading `columns`
    (arrival, prompt, output) with numeric arrivals in units of `unit_s` seconds; None when
    the file does not qualify (see the module docstring; two roles read from one column
    qualify neither)."""
    if (
        header_line != 1
        or len(set(header)) != len(header)
        or len(set(columns)) != 3
        or not _clean(path)
    ):
        return None
    try:
        return _read(path, header, columns, unit_s, window)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError, OverflowError):
        return None


def _read(path, header, columns, unit_s, window) -> FastRead | None:
    lo, hi = window
    kept, first, last, kind, count = [], None, None, None, 0
    for batch in _batches(path, header, columns):
        if batch.num_rows == 0:
            continue
        times = _arrivals(batch.column(columns[0]), unit_s)
        prompt, output = (_tokens(batch.column(c)) for c in columns[1:])
        if times is None or prompt is None or output is None:
            return None
        seconds, batch_kind = times
        kind = kind or batch_kind
        first = seconds[0] if first is None else first
        previous = seconds[0] if last is None else last
        if (
            batch_kind != kind
            or not np.all(np.isfinite(seconds))
            or seconds[0] < previous
            or np.any(np.diff(seconds) < 0)
            or seconds[-1] - first > MAX_SPAN_S
        ):
            return None
        last, count = seconds[-1], count + batch.num_rows
        at = seconds - first
        inside = (at >= lo) & (at < hi)
        kept.append((at[inside], prompt[inside], output[inside]))
    if count == 0 or (
        kind == "number" and time_unit_problem(first, last - first, count, unit_s) is not None
    ):
        return None
    arrival, prompt, output = (np.concatenate([k[i] for k in kept]) for i in range(3))
    return FastRead(arrival, prompt, output, count, float(last - first))
