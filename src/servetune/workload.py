"""Workloads: synthetic generators and trace loaders -> arrival-sorted request arrays.

Loaders check every row and raise TraceError naming the file, the line, the bad value and what
was expected; nothing malformed reaches numpy or JAX. Rows must be sorted by arrival (a row that
goes back in time is an error, never silently reordered).
"""

from __future__ import annotations

import csv
import dataclasses
import datetime as dt
import json
import math
import re
from importlib import resources
from pathlib import Path

import numpy as np

from servetune import inputs, streams
from servetune.errors import ConfigError, TraceError

MAX_TOKENS = 10_000_000  # a per-request token count above this is a corrupt row, not a request
# Longest span of arrival times a trace may cover: about 31.7 years. Beyond it float64 seconds
# lose the sub-microsecond resolution the simulated clock relies on; such spans are corrupt rows
# (a millisecond column read as seconds, a stray 1e308) rather than workloads.
MAX_SPAN_S = 1e9
# Highest synthetic arrival rate (requests/s): a 1 ns mean gap. Faster gaps approach the
# subnormal floats, and rates over such windows overflow.
MAX_RATE = 1e9
# Most requests a synthetic workload may draw (memory: a few arrays of this length per seed).
MAX_SYNTHETIC_REQUESTS = 1 << 26
_LINE_BREAK = re.compile(r"\r\n|\r|\n")  # only these end a line (str.splitlines also splits
# on U+2028, form feeds and other characters that may sit inside a field)
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?|[+-]?(?:nan|inf|infinity)",
                     re.IGNORECASE | re.ASCII)


def strict_float(raw) -> float:
    """float(raw) for a number as a trace writes one: ASCII digits, an optional sign, point and
    exponent. ValueError for what Python's float() also accepts but no trace means: digit
    groups with underscores (1_000), non-ASCII digits (e.g. Arabic-Indic or full-width);
    TypeError for a bool."""
    if isinstance(raw, bool):
        raise TypeError(raw)
    if isinstance(raw, (int, float)):
        return float(raw)
    text = str(raw).strip()
    if not _NUMBER.fullmatch(text):
        raise ValueError(raw)
    return float(text)


@dataclasses.dataclass(frozen=True)
class RaggedIds:
    """One list of int32 ids per request, stored flat: row r is ids[offsets[r]:offsets[r+1]].

    Indexing with an int gives that row (an array); with a bool mask or an index array, the
    RaggedIds of those rows in that order."""

    ids: np.ndarray  # [total] int32, every row's ids one after another
    offsets: np.ndarray  # [N + 1] int64, row r's start; offsets[N] = total

    @classmethod
    def from_rows(cls, rows) -> RaggedIds:
        """From N sequences of ids (None or empty: a row without ids)."""
        rows = [np.asarray(r if r is not None else (), np.int64) for r in rows]
        offsets = np.zeros(len(rows) + 1, np.int64)
        offsets[1:] = np.cumsum([len(r) for r in rows])
        ids = np.concatenate(rows) if rows else np.zeros(0, np.int32)
        return cls(ids.astype(np.int32), offsets)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __iter__(self):
        return (self.ids[a:b] for a, b in zip(self.offsets[:-1], self.offsets[1:]))

    def __getitem__(self, key):
        if isinstance(key, (int, np.integer)):
            return self.ids[self.offsets[key]:self.offsets[key + 1]]
        index = np.arange(len(self))[key]
        return RaggedIds.from_rows([self[int(r)] for r in index])

    def lengths(self) -> np.ndarray:
        """[N] int64 ids per row."""
        return np.diff(self.offsets)

    def dense(self, width: int) -> np.ndarray:
        """[N, width] int32: each row's first `width` ids, -1 after them."""
        out = np.full((len(self), width), -1, np.int32)
        lengths = np.minimum(self.lengths(), width)
        rows = np.repeat(np.arange(len(self)), lengths)
        cols = np.arange(len(rows)) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        out[rows, cols] = self.ids[np.repeat(self.offsets[:-1], lengths) + cols]
        return out


@dataclasses.dataclass
class RequestTrace:
    """Requests of one workload, sorted by arrival (host-side numpy arrays).

    arrival: [N] float64 seconds from the trace start; prompt, output: [N] int32 tokens;
    klass: [N] int32 class id (names in `class_names`);
    cancel_after: [N] float64 seconds after arrival at which the client cancels the request
      (gives up waiting, or aborts mid-stream) if it has not completed; inf = never;
    deadline: [N] float64 seconds after arrival by which the request must complete, or the
      server drops it (expired); inf = none;
    difficulty: [N] float64 in [0, 1] from the trace's optional `difficulty` column, or None;
    quality_u: [N] float64 uniform draw of each request's quality check (servetune.quality;
      set per seed by scenario.build), or None;
    priority: [N] int32 from the trace's optional `priority` column (vLLM's per-request
      priority, lower first; policy.order=priority), or None;
    hash_ids: RaggedIds, N rows of int32 ids of the prompt's prefix blocks (Mooncake
      `hash_ids`: one per 512-token block, equal ids = equal prefixes), stored flat so that
      one long row does not widen every other; None when the trace has none;
    compress_u: [N] float64 uniform draw of each request's KV-compression quality check (set
      per seed by scenario.build with engine.kv_pressure=compress), or None;
    cascade_pred: [N] float64 the cascade router's predicted difficulty in (0, 1), and
    cascade_fail: [N] bool whether the small model's answer fails its check
      (servetune.cascade_config; set per seed by scenario.build with a model cascade), or None.
    """

    name: str
    arrival: np.ndarray
    prompt: np.ndarray
    output: np.ndarray
    klass: np.ndarray = None
    class_names: tuple = ("all",)
    cancel_after: np.ndarray = None
    deadline: np.ndarray = None
    difficulty: np.ndarray | None = None
    quality_u: np.ndarray | None = None
    priority: np.ndarray | None = None
    hash_ids: RaggedIds | None = None
    compress_u: np.ndarray | None = None
    cascade_pred: np.ndarray | None = None
    cascade_fail: np.ndarray | None = None

    def __post_init__(self):
        n = len(self.arrival)
        if self.klass is None:
            self.klass = np.zeros(n, np.int32)
        if self.cancel_after is None:
            self.cancel_after = np.full(n, np.inf)
        if self.deadline is None:
            self.deadline = np.full(n, np.inf)
        self.arrival = flush_subnormal(self.arrival)
        if isinstance(self.hash_ids, np.ndarray):  # [N, H], -1 padded: each row up to its -1
            self.hash_ids = RaggedIds.from_rows(row[:np.argmax(np.append(row, -1) < 0)]
                                                for row in np.asarray(self.hash_ids, np.int64))

    def __len__(self) -> int:
        return len(self.arrival)

    def subset(self, mask: np.ndarray) -> RequestTrace:
        """The requests where `mask` holds (a bool mask, or indices in the order wanted)."""
        return dataclasses.replace(self, **{name: getattr(self, name)[mask]
                                            for name in self.per_request_fields()})

    def per_request_fields(self) -> list[str]:
        """Names of the fields holding one entry per request ([N] arrays, RaggedIds)."""
        n = len(self)
        return [f.name for f in dataclasses.fields(self)
                if isinstance(v := getattr(self, f.name), (np.ndarray, RaggedIds))
                and len(v) == n]

    @property
    def gives_up(self) -> bool:
        """Whether any request can end by cancellation or deadline (the engine then checks)."""
        return bool(np.any(np.isfinite(self.cancel_after)) or np.any(np.isfinite(self.deadline)))


def flush_subnormal(times):
    """Times below the smallest normal float64 (2.2e-308 s) as exactly 0.

    XLA on CPU flushes subnormal floats to zero, so the simulator already sees such an arrival
    at t = 0; the host-side metrics must agree (else a request seems rejected before it arrived
    and a 1e-313 s window makes every rate infinite)."""
    times = np.asarray(times)
    if times.dtype.kind != "f":
        return times
    tiny = np.abs(times) < np.finfo(times.dtype).tiny
    if np.any(tiny & (times != 0)):
        times = np.where(tiny, 0.0, times).astype(times.dtype)
    return times


# --------------------------------------------------------------------------- loaders

def _show(raw, limit: int = 40) -> str:
    """repr of a cell for a message, shortened: a corrupt row can hold megabytes."""
    text = repr(raw)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _int_field(raw: str, path, line: int, column: str, minimum: int) -> int:
    if not (raw or "").strip():
        raise TraceError(f"{path}:{line}: column {column!r} is empty; expected an integer token "
                         f"count >= {minimum}")
    try:
        value = strict_float(raw)
    except (TypeError, ValueError, OverflowError):
        raise TraceError(f"{path}:{line}: column {column!r} = {_show(raw)}; expected an integer "
                         f"token count >= {minimum}") from None
    if not math.isfinite(value) or value != int(value) or value < minimum or value > MAX_TOKENS:
        raise TraceError(f"{path}:{line}: column {column!r} = {_show(raw)}; expected an integer "
                         f"token count in [{minimum}, {MAX_TOKENS}]")
    return int(value)


def _difficulty_field(raw, path, line: int) -> float:
    """A request's difficulty cell: a number in [0, 1] (servetune.quality)."""
    try:
        value = strict_float(raw)
    except (TypeError, ValueError, OverflowError):
        value = math.nan
    if not 0.0 <= value <= 1.0:
        raise TraceError(f"{path}:{line}: 'difficulty' = {_show(raw)}; expected a number in "
                         f"[0, 1]")
    return value


def _priority_field(raw, path, line: int) -> int:
    """A request's priority cell: an integer in int32 range (vLLM's per-request priority under
    --scheduling-policy priority: lower runs first)."""
    try:
        value = strict_float(raw)
    except (TypeError, ValueError, OverflowError):
        value = math.nan
    if not (math.isfinite(value) and value == int(value) and -2**31 <= value < 2**31):
        raise TraceError(f"{path}:{line}: 'priority' = {_show(raw)}; expected an integer in "
                         f"[{-2**31}, {2**31 - 1}] (lower runs first)")
    return int(value)


def _optional_column(values: list, lines: list[int], path, name: str, dtype):
    """[N] values of optional column `name`, None when no row has one; every row or none must."""
    if all(v is None for v in values):
        return None
    for v, line in zip(values, lines):
        if v is None:
            raise TraceError(f"{path}:{line}: no {name!r} where other rows have one; "
                             f"expected it on every row or on none")
    return np.asarray(values, dtype)


def _parse_timestamp(raw: str, path, line: int) -> tuple[float, str]:
    """Seconds of an Azure TIMESTAMP cell and its kind: 'seconds' (a plain number), 'naive' or
    'aware' (an ISO date-time without / with a UTC offset; naive ones are read as UTC)."""
    text = (raw or "").strip()
    if not text:
        raise TraceError(f"{path}:{line}: column 'TIMESTAMP' is empty; expected a timestamp")
    if _NUMBER.fullmatch(text):
        value, kind = float(text), "seconds"
    else:
        # Azure writes 7 fractional digits; Python parses at most 6 (keep any UTC offset)
        iso = re.sub(r"(\.\d{6})\d+", r"\1", text)
        try:
            stamp = dt.datetime.fromisoformat(iso)
        except ValueError:
            raise TraceError(f"{path}:{line}: column 'TIMESTAMP' = {_show(raw)}; expected "
                             f"'YYYY-MM-DD HH:MM:SS.ffffff' or seconds") from None
        kind = "naive" if stamp.tzinfo is None else "aware"
        if stamp.tzinfo is None:
            stamp = stamp.replace(tzinfo=dt.timezone.utc)
        value = stamp.timestamp()
    if not math.isfinite(value):
        raise TraceError(f"{path}:{line}: column 'TIMESTAMP' = {_show(raw)} is not finite; "
                         f"expected a time")
    return value, kind


def _check_sorted(arrival: np.ndarray, lines: list[int], path, what: str) -> None:
    if len(arrival) == 0:
        raise TraceError(f"{path}: no requests; expected at least one data row")
    if not np.all(np.isfinite(arrival)):
        k = int(np.nonzero(~np.isfinite(arrival))[0][0])
        raise TraceError(f"{path}:{lines[k]}: {what} = {arrival[k]} is not finite; expected a "
                         f"time")
    back = np.nonzero(np.diff(arrival) < 0)[0]
    if len(back):
        k = back[0] + 1
        raise TraceError(f"{path}:{lines[k]}: {what} goes back in time "
                         f"({arrival[k]:.6f} after {arrival[k - 1]:.6f}); expected rows sorted "
                         f"by arrival")
    far = np.nonzero(arrival - arrival[0] > MAX_SPAN_S)[0]
    if len(far):
        k = int(far[0])
        raise TraceError(f"{path}:{lines[k]}: {what} = {arrival[k]:.6g} is "
                         f"{arrival[k] - arrival[0]:.3g} s after the first row; expected a trace "
                         f"spanning at most {MAX_SPAN_S:.0e} s (wrong unit or a corrupt row?)")


def read_text(path: Path, what: str = "trace file") -> str:
    """The UTF-8 text of `path` (a BOM is dropped); TraceError naming the file (and line, for a
    bad byte) when it is missing, unreadable, not a regular file, UTF-16 or binary. `what` names the expected file."""
    data = inputs.read_bytes(path, what, TraceError)
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise TraceError(f"{path}: UTF-16 text (byte-order mark); expected a UTF-8 CSV or JSONL "
                         f"trace (re-encode it, e.g. iconv -f UTF-16 -t UTF-8)")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise TraceError(f"{path}:{line}: not UTF-8 text (byte {err.start} = "
                         f"0x{data[err.start]:02x}); expected a UTF-8 CSV or JSONL trace") from None
    if "\x00" in text:
        at = text.index("\x00")
        line = text.count("\n", 0, at) + 1
        raise TraceError(f"{path}:{line}: NUL byte at offset {at} (binary data); expected a "
                         f"UTF-8 CSV or JSONL trace")
    return text


def _lines(text: str) -> list[str]:
    lines = _LINE_BREAK.split(text)
    if lines and lines[-1] == "":
        lines.pop()
    return lines


_CSV_FORMATS = {
    "azure": ("TIMESTAMP", "ContextTokens", "GeneratedTokens"),
    "plain": ("arrival_s", "prompt_tokens", "output_tokens"),
}


def csv_records(path: Path, text: str):
    """(line number, fields) of each CSV row of `text`; TraceError with the line where the CSV
    is unreadable or where a quoted cell runs over several lines (one request per line)."""
    reader = csv.reader(_lines(text))
    while True:
        start = reader.line_num + 1
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as err:
            raise TraceError(f"{path}:{reader.line_num}: unreadable CSV ({err}); expected "
                             f"comma-separated fields") from None
        if reader.line_num != start:
            raise TraceError(f"{path}:{start}: a quoted cell runs over lines {start}-"
                             f"{reader.line_num}; expected one request per line (an unclosed "
                             f"quote?)")
        yield reader.line_num, row


def _csv_header(records, path: Path):
    """The first non-blank row as the header: (format name, its three columns, the header's
    stripped names, its line)."""
    header, header_line = None, 1
    for header_line, row in records:
        if any(cell.strip() for cell in row):
            header = row
            break
    if header is None:
        raise TraceError(f"{path}: empty file; expected a header line and data rows")
    header = [h.strip() for h in header]
    for kind, cols in _CSV_FORMATS.items():
        if all(c in header for c in cols):
            break
    else:
        raise TraceError(f"{path}:{header_line}: header {_show(header, 120)}; expected columns "
                         f"{list(_CSV_FORMATS['azure'])} (Azure LLM 2023) or "
                         f"{list(_CSV_FORMATS['plain'])}")
    for c in cols + ("difficulty", "priority"):
        if header.count(c) > 1:
            raise TraceError(f"{path}:{header_line}: column {c!r} appears {header.count(c)} "
                             f"times in the header; expected each column once")
    return kind, cols, header, header_line


def _check_row(row, header, path: Path, line: int) -> None:
    """TraceError unless `row` has the header's fields (no repeated header, no extra ones)."""
    if [cell.strip() for cell in row] == header:
        raise TraceError(f"{path}:{line}: the header line again; expected data rows "
                         f"(concatenated files?)")
    if len(row) < len(header):
        raise TraceError(f"{path}:{line}: {len(row)} fields; expected {len(header)} "
                         f"({', '.join(header)})")
    if any(cell.strip() for cell in row[len(header):]):
        raise TraceError(f"{path}:{line}: {len(row)} fields; expected {len(header)} "
                         f"({', '.join(header)}) -- an unquoted comma?")


def _plain_arrival(cell: str, path: Path, line: int) -> float:
    """An arrival_s cell as finite seconds."""
    try:
        value = strict_float(cell)
    except ValueError:
        raise TraceError(f"{path}:{line}: column 'arrival_s' = {_show(cell)}; "
                         f"expected seconds") from None
    if not math.isfinite(value):
        raise TraceError(f"{path}:{line}: column 'arrival_s' = {_show(cell)} is not "
                         f"finite; expected seconds >= 0")
    return value


def load_csv(path: str | Path, name: str | None = None) -> RequestTrace:
    """Load a CSV trace: Azure LLM 2023 (TIMESTAMP, ContextTokens, GeneratedTokens) or plain
    (arrival_s, prompt_tokens, output_tokens). Arrival times become seconds from the first row.

    An optional `difficulty` column (in [0, 1]) feeds the quality model, an optional integer
    `priority` column vLLM's priority scheduling (policy.order=priority). Extra columns are
    ignored; a row may not carry non-empty fields beyond the header's."""
    path = Path(path)
    records = csv_records(path, read_text(path))
    kind, cols, header, _ = _csv_header(records, path)
    t_col, p_col, o_col = (header.index(c) for c in cols)
    d_col = header.index("difficulty") if "difficulty" in header else None
    q_col = header.index("priority") if "priority" in header else None
    arrival, prompt, output, lines, difficulty, priority = [], [], [], [], [], []
    first_kind = None
    for line, row in records:
        if not row or all(not cell.strip() for cell in row):
            continue
        _check_row(row, header, path, line)
        if kind == "azure":
            value, stamp_kind = _parse_timestamp(row[t_col], path, line)
            if first_kind is None:
                first_kind = (stamp_kind, line)
            elif stamp_kind != first_kind[0]:
                raise TraceError(f"{path}:{line}: column 'TIMESTAMP' = {_show(row[t_col])} is "
                                 f"{_KIND_NAMES[stamp_kind]} but line {first_kind[1]} is "
                                 f"{_KIND_NAMES[first_kind[0]]}; expected one kind of timestamp")
        else:
            value = _plain_arrival(row[t_col], path, line)
        arrival.append(value)
        prompt.append(_int_field(row[p_col], path, line, cols[1], 1))
        output.append(_int_field(row[o_col], path, line, cols[2], 1))
        if d_col is not None:
            difficulty.append(_difficulty_field(row[d_col].strip(), path, line))
        if q_col is not None:
            priority.append(_priority_field(row[q_col], path, line))
        lines.append(line)
    arr = np.asarray(arrival, np.float64)
    _check_sorted(arr, lines, path, f"column {cols[0]!r}")
    if kind == "plain" and arr[0] < 0:
        raise TraceError(f"{path}:{lines[0]}: arrival_s = {arr[0]}; expected >= 0")
    return RequestTrace(name or path.stem, arr - arr[0], np.asarray(prompt, np.int32),
                        np.asarray(output, np.int32),
                        difficulty=np.asarray(difficulty, np.float64) if difficulty else None,
                        priority=np.asarray(priority, np.int32) if priority else None)


_KIND_NAMES = {"seconds": "a number of seconds", "naive": "a date-time without UTC offset",
               "aware": "a date-time with a UTC offset"}


class DuplicateKeyError(ValueError):
    """A JSON object names one key twice (json.loads keeps the last one silently)."""

    def __init__(self, key: str):
        super().__init__(key)
        self.key = key


def unique_keys(pairs: list[tuple[str, object]]) -> dict:
    """json.loads' object_pairs_hook that refuses a repeated key (DuplicateKeyError)."""
    out = {}
    for key, value in pairs:
        if key in out:
            raise DuplicateKeyError(key)
        out[key] = value
    return out


def load_jsonl(path: str | Path, name: str | None = None) -> RequestTrace:
    """Load a Mooncake JSONL trace: one object per line with `timestamp` (ms), `input_length`,
    `output_length` (and optional `hash_ids`, `difficulty` in [0, 1] for the quality model, and
    an integer `priority` for vLLM's priority scheduling).
    Arrival times become seconds from the first row."""
    path = Path(path)
    text = read_text(path)
    arrival, prompt, output, lines, difficulty, hashes, priority = [], [], [], [], [], [], []
    for line, raw in enumerate(_lines(text), start=1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw, object_pairs_hook=unique_keys)
        except DuplicateKeyError as err:
            raise TraceError(f"{path}:{line}: key {err.key!r} appears more than once in the "
                             f"object; expected each key once") from None
        except json.JSONDecodeError as err:
            raise TraceError(f"{path}:{line}: not valid JSON ({err.msg}); expected one object "
                             f"per line") from None
        except (ValueError, RecursionError) as err:  # an integer of > 4300 digits, deep nesting
            raise TraceError(f"{path}:{line}: unreadable JSON ({str(err)[:80]}); expected one "
                             f"object per line") from None
        if not isinstance(obj, dict):
            raise TraceError(f"{path}:{line}: got {type(obj).__name__}; expected a JSON object")
        for key in ("timestamp", "input_length", "output_length"):
            if key not in obj:
                raise TraceError(f"{path}:{line}: missing key {key!r}; expected timestamp (ms), "
                                 f"input_length, output_length")
        stamp = obj["timestamp"]
        ok = not isinstance(stamp, bool) and isinstance(stamp, (int, float))
        if ok:
            try:
                stamp = float(stamp)
            except OverflowError:  # an integer beyond float range
                ok = False
        if not ok or not math.isfinite(stamp) or stamp < 0:
            raise TraceError(f"{path}:{line}: 'timestamp' = {_show(obj['timestamp'])}; expected "
                             f"milliseconds >= 0")
        arrival.append(stamp / 1000.0)
        for key, store in (("input_length", prompt), ("output_length", output)):
            value = obj[key]
            if isinstance(value, bool) or not isinstance(value, (int, float, str)):
                raise TraceError(f"{path}:{line}: {key!r} = {_show(value)}; expected an integer "
                                 f"token count >= 1")
            if isinstance(value, int) and abs(value) > MAX_TOKENS:
                raise TraceError(f"{path}:{line}: {key!r} = {str(value)[:40]}; expected an integer "
                                 f"token count in [1, {MAX_TOKENS}]")
            store.append(_int_field(str(value), path, line, key, 1))
        difficulty.append(_difficulty_field(obj["difficulty"], path, line)
                          if "difficulty" in obj else None)
        hashes.append(_hash_ids(obj.get("hash_ids"), path, line))
        priority.append(_priority_field(obj["priority"], path, line)
                        if "priority" in obj else None)
        lines.append(line)
    if not arrival:
        raise TraceError(f"{path}: empty file; expected JSON lines with timestamp, "
                         f"input_length, output_length")
    arr = np.asarray(arrival, np.float64)
    _check_sorted(arr, lines, path, "'timestamp' (in seconds)")
    hash_ids = None
    if any(h is not None for h in hashes):  # rows without hash_ids have no prefix blocks
        hash_ids = RaggedIds.from_rows(hashes)
    return RequestTrace(name or path.stem, arr - arr[0], np.asarray(prompt, np.int32),
                        np.asarray(output, np.int32),
                        difficulty=_optional_column(difficulty, lines, path, 'difficulty',
                                                    np.float64),
                        priority=_optional_column(priority, lines, path, 'priority', np.int32),
                        hash_ids=hash_ids)


MAX_HASH_ID = 2**31 - 2  # prefix block ids are int32 on device (-1 marks "none")


def _hash_ids(value, path, line: int) -> list[int] | None:
    """A Mooncake row's `hash_ids`: a list of integer block ids in [0, MAX_HASH_ID] (or absent)."""
    if value is None:
        return None
    if not isinstance(value, list):
        raise TraceError(f"{path}:{line}: 'hash_ids' = {_show(value)}; expected a list of "
                         f"integer prefix block ids")
    for v in value:
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= MAX_HASH_ID:
            raise TraceError(f"{path}:{line}: 'hash_ids' holds {_show(v)}; expected integer "
                             f"prefix block ids in [0, {MAX_HASH_ID}]")
    return value


def load_trace(path: str | Path, name: str | None = None) -> RequestTrace:
    """Load a trace file by extension: .csv (Azure or plain) or .jsonl (Mooncake)."""
    path = Path(path)
    inputs.check_regular(path, "trace file", TraceError)  # a folder, FIFO or device: say so
    if path.suffix.lower() == ".jsonl":
        return load_jsonl(path, name)
    if path.suffix.lower() == ".csv":
        return load_csv(path, name)
    raise TraceError(f"{path}: unknown trace format {path.suffix!r}; expected .csv or .jsonl")


def bundled_path(filename: str) -> Path:
    """Path of a trace shipped inside the package (see servetune/data/README.md)."""
    if not isinstance(filename, str) or not filename or Path(filename).name != filename:
        raise ConfigError(f"workload.bundled: got {filename!r}; expected the file name of a "
                          f"bundled trace (or set workload.path)")
    path = Path(str(resources.files("servetune") / "data" / filename))
    if not path.exists():
        raise ConfigError(f"workload.bundled: no bundled trace {filename!r}; expected one of "
                          f"{sorted(p.name for p in path.parent.glob('*.*') if p.suffix != '.md')}")
    return path


def slice_trace(trace: RequestTrace, *, start_s: float = 0.0, duration_s: float | None = None,
                rate_scale: float = 1.0, max_requests: int | None = None) -> RequestTrace:
    """Requests arriving in [start_s, start_s + duration_s) of the trace, re-based to time 0,
    with time compressed by `rate_scale` (2.0 doubles the rate), keeping at most `max_requests`."""
    if not 0 < rate_scale <= 1e9:
        raise ConfigError(f"workload.rate_scale: got {rate_scale}; expected > 0 and <= 1e9")
    if start_s < 0:
        raise ConfigError(f"workload.start_s: got {start_s}; expected >= 0")
    end = math.inf if duration_s is None else start_s + duration_s
    out = trace.subset((trace.arrival >= start_s) & (trace.arrival < end))
    if max_requests is not None:
        out = out.subset(np.arange(len(out)) < int(max_requests))
    if len(out) == 0:
        raise ConfigError(f"workload.start_s/duration_s: the slice [{start_s}, {end}) s of "
                          f"{trace.name} holds no requests (trace spans "
                          f"{trace.arrival[-1]:.1f} s)")
    out.arrival = flush_subnormal((out.arrival - start_s) / rate_scale)
    if not out.arrival[-1] <= MAX_SPAN_S:
        raise ConfigError(f"workload.rate_scale: got {rate_scale}; the slice would span "
                          f"{out.arrival[-1]:.3g} s, expected at most {MAX_SPAN_S:.0e} s")
    return out


# --------------------------------------------------------------------------- synthetic

def _as_float(value) -> float | None:
    """float(value) for a real number (not a bool); None for anything else or an int beyond
    float range."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return float(value)
    except OverflowError:
        return None


def _spec_number(spec: dict, name: str, key: str, lo: float, hi: float = math.inf) -> float:
    if name not in spec or spec[name] is None:
        raise ConfigError(f"{key}.{name}: missing; expected a number for dist={spec.get('dist')!r}")
    value = _as_float(spec[name])
    if value is None or not math.isfinite(value) or not lo <= value <= hi:
        expect = f">= {lo}" if hi == math.inf else f">= {lo} and <= {hi}"
        raise ConfigError(f"{key}.{name}: got {spec[name]!r}; expected a finite number {expect}")
    return value


def _lengths(spec: dict, n: int, rng: np.random.Generator, key: str) -> np.ndarray:
    if not isinstance(spec, dict):
        raise ConfigError(f"{key}: got {spec!r}; expected a mapping like {{dist: lognormal, "
                          f"mean: 1000, cv: 1.0, min: 1, max: 6000}}")
    dist = spec.get("dist", "fixed")
    lo = _spec_number({"min": 1, **spec}, "min", key, 1, MAX_TOKENS)
    hi = _spec_number({"max": 32768, **spec}, "max", key, lo, MAX_TOKENS)
    if dist == "fixed":
        x = np.full(n, _spec_number(spec, "value", key, 1))
    elif dist == "lognormal":
        mean = _spec_number(spec, "mean", key, 1e-9)
        cv = _spec_number({"cv": 1.0, **spec}, "cv", key, 0, 1e3)
        sigma2 = math.log1p(cv * cv)
        x = rng.lognormal(math.log(mean) - sigma2 / 2, math.sqrt(sigma2), n)
    elif dist == "empirical":
        src = spec.get("trace")
        if src is None:
            raise ConfigError(f"{key}.trace: empirical lengths need a bundled trace name")
        trace = load_trace(bundled_path(src))
        column = spec.get("column", "prompt")
        if column not in ("prompt", "output"):
            raise ConfigError(f"{key}.column: got {column!r}; expected prompt or output")
        pool = trace.prompt if column == "prompt" else trace.output
        x = rng.choice(pool, n).astype(float)
    else:
        raise ConfigError(f"{key}.dist: got {dist!r}; expected fixed, lognormal or empirical")
    return np.clip(np.round(x), lo, hi).astype(np.int32)


def synthetic(*, rate: float, n_requests: int | None = None, duration_s: float | None = None,
              arrival: str = "poisson", cv: float = 1.0, prompt: dict, output: dict,
              seed: int = 0, name: str = "synthetic") -> RequestTrace:
    """Synthetic requests: Poisson or Gamma inter-arrivals (rate in req/s, burstiness `cv` =
    coefficient of variation of the gaps) and fixed / lognormal / empirical lengths."""
    if not 0 < rate <= MAX_RATE:
        raise ConfigError(f"workload.rate: got {rate}; expected requests per second > 0 and "
                          f"<= {MAX_RATE:.0e}")
    if n_requests is None and duration_s is None:
        raise ConfigError("workload: set n_requests or duration_s")
    if arrival not in ("poisson", "gamma"):
        raise ConfigError(f"workload.arrival: got {arrival!r}; expected poisson or gamma")
    if arrival == "gamma" and not 1e-3 <= cv <= 1e3:
        raise ConfigError(f"workload.cv: got {cv}; expected within [0.001, 1000] (the "
                          f"coefficient of variation of the inter-arrival gaps)")
    if n_requests is not None and not 1 <= n_requests <= MAX_SYNTHETIC_REQUESTS:
        raise ConfigError(f"workload.n_requests: got {n_requests}; expected within "
                          f"[1, {MAX_SYNTHETIC_REQUESTS}]")
    if duration_s is not None and not 0 < duration_s <= MAX_SPAN_S:
        raise ConfigError(f"workload.duration_s: got {duration_s}; expected seconds within "
                          f"(0, {MAX_SPAN_S:.0e}]")
    if n_requests is None and rate * duration_s > MAX_SYNTHETIC_REQUESTS:
        raise ConfigError(f"workload.rate: {rate} requests/s over workload.duration_s = "
                          f"{duration_s} s is {rate * duration_s:.3g} requests; expected at most "
                          f"{MAX_SYNTHETIC_REQUESTS} (lower the rate or the duration)")
    rng = np.random.default_rng(seed)

    def draw(k):
        if arrival == "poisson":
            return rng.exponential(1.0 / rate, k)
        shape = 1.0 / (cv * cv)
        return rng.gamma(shape, 1.0 / (rate * shape), k)

    with np.errstate(over="ignore", invalid="ignore"):
        if n_requests is not None:
            gaps = draw(int(n_requests))
            times = np.cumsum(gaps) - gaps[0]
            if duration_s is not None:
                times = times[times < duration_s]
        else:  # draw until the duration is covered, however bursty the gaps
            chunks, total, drawn = [], 0.0, 0
            while total < duration_s:
                k = int(rate * duration_s) + 64
                drawn += k
                if drawn > 4 * MAX_SYNTHETIC_REQUESTS + 1024:
                    raise ConfigError(f"workload.cv: got {cv}; gaps this bursty do not cover "
                                      f"workload.duration_s = {duration_s} s within "
                                      f"{drawn} draws; lower cv")
                g = draw(k)
                chunks.append(g)
                total += g.sum()
            gaps = np.concatenate(chunks)
            times = np.cumsum(gaps) - gaps[0]
            times = times[times < duration_s]
    if len(times) == 0:
        raise ConfigError("workload: the synthetic workload is empty; raise rate or duration_s")
    if not (np.all(np.isfinite(times)) and times[-1] <= MAX_SPAN_S):
        raise ConfigError(f"workload.rate: got {rate}; {len(times)} arrivals would span "
                          f"{times[-1]:.3g} s, expected at most {MAX_SPAN_S:.0e} s (raise the "
                          f"rate or set workload.duration_s)")
    n = len(times)
    return RequestTrace(name, times.astype(np.float64), _lengths(prompt, n, rng, "workload.prompt"),
                        _lengths(output, n, rng, "workload.output"))


# --------------------------------------------------------------------------- classes, predictor

def classify_by_prompt(trace: RequestTrace, split_tokens: int) -> RequestTrace:
    """Class 0 'short' (prompt < split_tokens) and class 1 'long'."""
    klass = (trace.prompt >= split_tokens).astype(np.int32)
    return dataclasses.replace(trace, klass=klass,
                               class_names=(f"prompt<{split_tokens}", f"prompt>={split_tokens}"))


def predict_output(trace: RequestTrace, *, sigma: float = 0.0, bias: float = 1.0,
                   seed: int = 0) -> np.ndarray:
    """Output lengths as a predictor sees them: true x bias x lognormal(0, sigma) noise.

    sigma = 0 and bias = 1 is an oracle. Returns [N] float64 tokens (>= 1).
    """
    if not (0 <= sigma < math.inf and 0 < bias < math.inf):
        raise ConfigError(f"workload.predictor: got sigma={sigma}, bias={bias}; expected "
                          f"finite sigma >= 0 and bias > 0")
    rng = streams.rng(seed, streams.PREDICTOR)
    with np.errstate(over="ignore", invalid="ignore"):
        noise = np.exp(sigma * rng.standard_normal(len(trace))) if sigma > 0 else 1.0
        pred = np.maximum(trace.output * bias * noise, 1.0)
    if not np.all(np.isfinite(pred)):
        raise ConfigError(f"workload.predictor: sigma={sigma}, bias={bias} overflow the "
                          f"predicted output lengths to infinity; expected a noise scale that "
                          f"keeps them finite (sigma of a few units, bias near 1)")
    return pred


# --------------------------------------------------------------------------- client patience

def with_abandonment(trace: RequestTrace, *, patience: dict | None = None,
                     deadline_s: float | None = None, seed: int = 0,
                     key: str = "workload") -> RequestTrace:
    """The trace with client patience and server deadlines set (seconds after arrival).

    patience: {dist: exponential | lognormal | fixed, mean_s, cv (lognormal), fraction}: each
      request, with probability `fraction` (default 1), gets a patience drawn from the
      distribution; its client cancels it that long after arrival unless it has completed
      (while queued or mid-stream). An explicit `cancel_after` already in the trace is kept
      where it is earlier. None or dist: none = patient clients.
    deadline_s: every request must complete within this many seconds of arrival, or the server
      drops it (expired); None = no deadline.
    Draws are seeded by `seed`, independently of arrivals and lengths.
    """
    n = len(trace)
    cancel_after = trace.cancel_after.copy()
    if patience is not None and patience.get("dist", "none") not in (None, "none"):
        pk = f"{key}.patience"
        dist = patience["dist"]
        rng = streams.rng(seed, streams.PATIENCE)
        mean = _spec_number(patience, "mean_s", pk, 1e-9, MAX_SPAN_S)
        if dist == "exponential":
            draw = rng.exponential(mean, n)
        elif dist == "lognormal":
            cv = _spec_number({"cv": 1.0, **patience}, "cv", pk, 0, 1e3)
            sigma2 = math.log1p(cv * cv)
            draw = rng.lognormal(math.log(mean) - sigma2 / 2, math.sqrt(sigma2), n)
        elif dist == "fixed":
            draw = np.full(n, mean)
        else:
            raise ConfigError(f"{pk}.dist: got {dist!r}; expected none, exponential, lognormal "
                              f"or fixed")
        fraction = _spec_number({"fraction": 1.0, **patience}, "fraction", pk, 0.0, 1.0)
        impatient = rng.random(n) < fraction
        cancel_after = np.where(impatient, np.minimum(cancel_after, draw), cancel_after)
    deadline = trace.deadline.copy()
    if deadline_s is not None:
        value = _as_float(deadline_s)
        if value is None or not 0 < value <= MAX_SPAN_S:
            raise ConfigError(f"{key}.deadline_s: got {deadline_s!r}; expected seconds > 0 "
                              f"and <= {MAX_SPAN_S:.0e}, or null for none")
        deadline = np.minimum(deadline, value)
    return dataclasses.replace(trace, cancel_after=cancel_after, deadline=deadline)
