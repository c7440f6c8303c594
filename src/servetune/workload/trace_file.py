"""Trace files -> requests: the formats servetune reads, and one strict reader that streams.

A trace file holds one request per line: its arrival time, prompt tokens and output tokens.
The format is recognized from a CSV header or from the keys of the first JSON line:

| format | file | arrival | prompt | output |
|---|---|---|---|---|
| azure | CSV, Azure LLM inference 2023 | TIMESTAMP (date-time or s) | ContextTokens |
GeneratedTokens |
| plain | CSV | arrival_s (s) | prompt_tokens | output_tokens |
| burstgpt | CSV, BurstGPT | Timestamp (s) | Request tokens | Response tokens |
| mooncake | JSONL, Mooncake | timestamp (ms) | input_length | output_length |
| openai | JSONL, chat completions | created (s) | usage.prompt_tokens | usage.completion_tokens |
| openai_responses | JSONL, Responses API | created_at (s) | usage.input_tokens |
usage.output_tokens |
| openai_batch | JSONL, Batch API output | response.body.created | response.body.usage.prompt_tokens
| ...completion_tokens |

Any other file names its columns (`workload.columns.arrival/prompt/output`: CSV column names, or
JSON keys with dots between nested ones) and the unit of a numeric arrival (`workload.time_unit`: s,
ms, us or ns). An arrival may also be an ISO 8601 date-time (UTC unless it carries an offset), in
any format; epoch numbers are plain numbers. Optional `difficulty` ([0, 1],
servetune.config.quality), `priority` (integer, vLLM's priority scheduling) and, in JSON, `hash_ids`
(prefix block ids) ride along.

One rule recognizes formats (`_recognize`): a format matches a CSV header or first JSON record
holding at least two of its three columns. A file matching several (a record with both `created`
and `created_at` and both kinds of usage; a header with Azure's and the plain token columns) is
refused naming them, unless the columns named in `workload.columns` pick one (e.g.
`workload.columns.arrival=created_at`) or name all three.

Numeric arrivals must fit their unit (`workload.time_unit`, or the format's), which a wrong one
misses by factors of 1000; request_trace.time_unit_problem holds the three rules:
- epoch: a number over 1e9 s reads as an epoch time, so the first arrival must fall before
  2100-01-01 (4.1e9 s after 1970); ms, us or ns epochs read in a larger unit land far past it;
- span: the arrivals span at most MAX_SPAN_S (1e9 s);
- rate: relative times (the first before 1990) whose numbers span at least 1e6 units may not
  average fewer than one request a day (relative ms or us read as s).
The error names the column, the unit and where it came from, the value, what it reads as, and
the units that fit (for epochs, the one that reads the value as a date in 1990-2100). Date-time
arrivals are not checked; a unit too small (epoch seconds read as ms) reads as a plausible
relative trace and is not caught.

Every line is checked. A line whose own cells are bad (a token count of 0, as logs write for a
failed request; an empty or unparsable cell; a missing key; a broken JSON line; a wrong number
of fields) raises TraceError naming the file, the line, the cell and what was expected, or,
with `invalid_rows="skip"`, is left out and counted by reason. What makes the file unreadable
as a whole (its encoding, header, a quoted cell over several lines) and rows out of order are
always errors: nothing is reordered silently. The file is read line by line and only the
requests of the window asked for are kept, so memory follows the slice simulated, not the file.
"""

from __future__ import annotations

import array
import dataclasses
import datetime as dt
import json
import math
import re
from collections.abc import Callable, Mapping
from importlib import resources
from pathlib import Path

import numpy as np
from omegaconf import OmegaConf

from servetune.core import inputs
from servetune.core.errors import ConfigError, TraceError
from servetune.workload import trace_csv_fast
from servetune.workload.request_trace import (
    EPOCH_RANGE_S,
    MAX_SPAN_S,
    MAX_TOKENS,
    RaggedIds,
    RequestTrace,
    duration_text,
    time_unit_problem,
)
from servetune.workload.trace_text import (
    NUMBER,
    DuplicateKeyError,
    csv_records,
    lines,
    show_cell,
    strict_float,
    unique_keys,
)

UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}  # seconds per unit of a numeric arrival
UNIT_WORDS = {"s": "seconds", "ms": "milliseconds", "us": "microseconds", "ns": "nanoseconds"}
ROLES = ("arrival", "prompt", "output")
INVALID_ROWS = ("error", "skip")
MAX_HASH_ID = 2**31 - 2  # prefix block ids are int32 on device (-1 marks "none")
_SKIP_HINT = "workload.invalid_rows=skip leaves such rows out"


@dataclasses.dataclass(frozen=True)
class TraceFormat:
    """Where a kind of trace file keeps a request's arrival, prompt and output tokens (CSV
    columns, or JSON keys with dots between nested ones), the unit of a numeric arrival, and the
    top-level keys or columns that identify it."""

    name: str
    arrival: str
    prompt: str
    output: str
    unit: str = "s"
    source: str = ""
    signature: tuple = ()  # present in a file of this format; () = the three columns

    def identified_by(self) -> tuple:
        """The columns or top-level keys whose presence identifies the format."""
        return self.signature or (self.arrival, self.prompt, self.output)


CSV_FORMATS = (
    TraceFormat(
        "azure", "TIMESTAMP", "ContextTokens", "GeneratedTokens", "s", "Azure LLM inference 2023"
    ),
    TraceFormat("plain", "arrival_s", "prompt_tokens", "output_tokens", "s", "servetune"),
    TraceFormat("burstgpt", "Timestamp", "Request tokens", "Response tokens", "s", "BurstGPT"),
)
JSONL_FORMATS = (
    TraceFormat("mooncake", "timestamp", "input_length", "output_length", "ms", "Mooncake"),
    TraceFormat(
        "openai",
        "created",
        "usage.prompt_tokens",
        "usage.completion_tokens",
        "s",
        "OpenAI chat completions",
        ("created", "usage"),
    ),
    TraceFormat(
        "openai_responses",
        "created_at",
        "usage.input_tokens",
        "usage.output_tokens",
        "s",
        "OpenAI Responses API",
        ("created_at", "usage"),
    ),
    TraceFormat(
        "openai_batch",
        "response.body.created",
        "response.body.usage.prompt_tokens",
        "response.body.usage.completion_tokens",
        "s",
        "OpenAI Batch API output",
        ("custom_id", "response"),
    ),
)


@dataclasses.dataclass(frozen=True)
class ReadOptions:
    """How to read a trace file and what to keep of it.

    columns: role (arrival, prompt, output) -> the file's column (CSV) or key path (JSON) for
      it, overriding the detected format's; all three name the columns of any file;
    time_unit: s, ms, us or ns of a numeric arrival (None: the format's own);
    invalid_rows: "error" (a bad row is an error) or "skip" (left out and counted);
    window: [lo, hi) seconds after the file's first request: requests arriving then are kept.
    """

    columns: Mapping = dataclasses.field(default_factory=dict)
    time_unit: str | None = None
    invalid_rows: str = "error"
    window: tuple = (0.0, math.inf)

    def __post_init__(self):
        if not isinstance(self.columns, Mapping):
            raise ConfigError(
                f"workload.columns: got {self.columns!r}; expected a mapping like "
                f"{{arrival: timestamp, prompt: input_tokens, output: "
                f"output_tokens}}"
            )
        window = tuple(self.window) if isinstance(self.window, (tuple, list)) else ()
        if (
            len(window) != 2
            or not all(isinstance(v, (int, float)) for v in window)
            or not 0 <= window[0] <= window[1]
        ):
            raise ConfigError(
                f"workload.start_s/duration_s: the window {self.window!r}; "
                f"expected (start, end) seconds with 0 <= start <= end"
            )
        for role, column in self.columns.items():
            if role not in ROLES:
                raise ConfigError(
                    f"workload.columns.{role}: not a column role; expected {', '.join(ROLES)}"
                )
            if column is not None and (not isinstance(column, str) or not column.strip()):
                raise ConfigError(
                    f"workload.columns.{role}: got {column!r}; expected the name "
                    f"of a column (or a dotted JSON key), or null"
                )
        if self.time_unit is not None and (
            not isinstance(self.time_unit, str) or self.time_unit not in UNITS
        ):
            raise ConfigError(
                f"workload.time_unit: got {self.time_unit!r}; expected one of "
                f"{', '.join(UNITS)} (or null: the format's own)"
            )
        if not isinstance(self.invalid_rows, str) or self.invalid_rows not in INVALID_ROWS:
            raise ConfigError(
                f"workload.invalid_rows: got {self.invalid_rows!r}; expected error or skip"
            )


@dataclasses.dataclass
class TraceFile:
    """A trace file read: the requests of the window, and what the whole file held.

    trace: the requests arriving in the window, arrival in seconds after the file's first
      request; format: the format's name ("columns" when workload.columns named all three);
    n_requests: valid requests in the file; span_s: seconds from its first to its last;
    skipped: reason -> [rows left out, first line] (invalid_rows="skip")."""

    trace: RequestTrace
    format: str
    n_requests: int
    span_s: float
    skipped: dict

    @property
    def n_skipped(self) -> int:
        """Rows left out as invalid."""
        return sum(count for count, _ in self.skipped.values())


class RowError(TraceError):
    """A line's own cells are invalid; `reason` groups such lines when they are skipped."""

    def __init__(self, message: str, reason: str):
        super().__init__(message)
        self.reason = reason
        match = re.search(r":(\d+): ", message)
        self.line = int(match.group(1)) if match else 0

    def as_error(self) -> TraceError:
        """This error as a plain TraceError saying how to skip such rows instead."""
        return TraceError(f"{self} ({_SKIP_HINT})")


def _raiser(err: RowError) -> Callable:
    """A cell getter for a row that is invalid as a whole: reading any cell raises `err` (row
    sources yield these rather than raise, so that skipping a row does not end the source)."""

    def get(_key):
        raise err

    return get


# --------------------------------------------------------------------------- cells


def _tokens(raw, path, line: int, key: str, json_value: bool) -> int:
    """A token-count cell as an int in [1, MAX_TOKENS] (RowError otherwise)."""
    if json_value and (isinstance(raw, bool) or not isinstance(raw, (int, float, str))):
        raise RowError(
            f"{path}:{line}: {key!r} = {show_cell(raw)}; expected an integer token count >= 1",
            f"{key!r} not a number",
        )
    if json_value and isinstance(raw, int) and abs(raw) > MAX_TOKENS:
        raise RowError(
            f"{path}:{line}: {key!r} = {str(raw)[:40]}; expected an integer token "
            f"count in [1, {MAX_TOKENS}]",
            f"{key!r} out of range",
        )
    text = str(raw)
    if not text.strip():
        raise RowError(
            f"{path}:{line}: column {key!r} is empty; expected an integer token count >= 1",
            f"{key!r} empty",
        )
    try:
        value = strict_float(text)
    except (TypeError, ValueError, OverflowError):
        raise RowError(
            f"{path}:{line}: column {key!r} = {show_cell(text)}; expected an "
            f"integer token count >= 1",
            f"{key!r} not a number",
        ) from None
    if not math.isfinite(value) or value != int(value) or not 1 <= value <= MAX_TOKENS:
        zero = math.isfinite(value) and value < 1
        raise RowError(
            f"{path}:{line}: column {key!r} = {show_cell(text)}; expected an "
            f"integer token count in [1, {MAX_TOKENS}]",
            f"{key!r} < 1" if zero else f"{key!r} not a token count",
        )
    return int(value)


def _difficulty(raw, path, line: int) -> float:
    """A request's difficulty cell: a number in [0, 1] (servetune.config.quality)."""
    try:
        value = strict_float(raw)
    except (TypeError, ValueError, OverflowError):
        value = math.nan
    if not 0.0 <= value <= 1.0:
        raise RowError(
            f"{path}:{line}: 'difficulty' = {show_cell(raw)}; expected a number in [0, 1]",
            "'difficulty' invalid",
        )
    return value


def _priority(raw, path, line: int) -> int:
    """A request's priority cell: an integer in int32 range (vLLM's per-request priority under
    --scheduling-policy priority: lower runs first)."""
    try:
        value = strict_float(raw)
    except (TypeError, ValueError, OverflowError):
        value = math.nan
    if not (math.isfinite(value) and value == int(value) and -(2**31) <= value < 2**31):
        raise RowError(
            f"{path}:{line}: 'priority' = {show_cell(raw)}; expected an integer in "
            f"[{-(2**31)}, {2**31 - 1}] (lower runs first)",
            "'priority' invalid",
        )
    return int(value)


def _hash_ids(value, path, line: int) -> list | None:
    """A JSON row's `hash_ids`: a list of integer block ids in [0, MAX_HASH_ID] (or absent)."""
    if value is None:
        return None
    if not isinstance(value, list):
        raise RowError(
            f"{path}:{line}: 'hash_ids' = {show_cell(value)}; expected a list of "
            f"integer prefix block ids",
            "'hash_ids' invalid",
        )
    for v in value:
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= MAX_HASH_ID:
            raise RowError(
                f"{path}:{line}: 'hash_ids' holds {show_cell(v)}; expected integer "
                f"prefix block ids in [0, {MAX_HASH_ID}]",
                "'hash_ids' invalid",
            )
    return value


_KIND_NAMES = {
    "number": "a number of {unit}",
    "naive": "a date-time without UTC offset",
    "aware": "a date-time with a UTC offset",
}


def _date_time(text: str) -> tuple[float, str] | None:
    """(POSIX seconds, 'naive' or 'aware') of an ISO 8601 date-time (naive ones read as UTC;
    digits past microseconds dropped, as Azure writes 7), or None."""
    try:
        stamp = dt.datetime.fromisoformat(re.sub(r"(\.\d{6})\d+", r"\1", text))
    except ValueError:
        return None
    if stamp.tzinfo is None:
        return stamp.replace(tzinfo=dt.timezone.utc).timestamp(), "naive"
    return stamp.timestamp(), "aware"


def _arrival(raw, path, line: int, key: str, unit: str, json_value: bool) -> tuple[float, str]:
    """An arrival cell as (seconds, kind): a number in `unit` (kind 'number'), or an ISO 8601
    date-time ('naive' or 'aware'); RowError naming the cell otherwise."""
    word = UNIT_WORDS[unit]
    expected = f"{word} >= 0 or a date-time 'YYYY-MM-DD HH:MM:SS[.ffffff][+HH:MM]'"
    if json_value and not isinstance(raw, str):
        value = raw if not isinstance(raw, bool) and isinstance(raw, (int, float)) else None
        try:
            value = None if value is None else float(value)
        except OverflowError:  # an integer beyond float range
            value = None
        if value is None or not math.isfinite(value) or value < 0:
            raise RowError(
                f"{path}:{line}: {key!r} = {show_cell(raw)}; expected {word} >= 0",
                f"{key!r} not a time",
            )
        return value * UNITS[unit], "number"
    text = raw.strip()
    if not text:
        raise RowError(
            f"{path}:{line}: column {key!r} is empty; expected a timestamp", f"{key!r} empty"
        )
    if NUMBER.fullmatch(text) and not json_value:
        value = float(text)
        if not math.isfinite(value):
            raise RowError(
                f"{path}:{line}: column {key!r} = {show_cell(raw)} is not finite; expected a time",
                f"{key!r} not a time",
            )
        if value < 0:
            raise RowError(
                f"{path}:{line}: column {key!r} = {show_cell(raw)}; expected {expected}",
                f"{key!r} not a time",
            )
        return value * UNITS[unit], "number"
    stamp = _date_time(text)
    if stamp is None:
        what = f"{key!r}" if json_value else f"column {key!r}"
        raise RowError(
            f"{path}:{line}: {what} = {show_cell(raw)}; expected {expected}", f"{key!r} not a time"
        )
    return stamp


# --------------------------------------------------------------------------- rows


@dataclasses.dataclass(frozen=True)
class _Layout:
    """A file's resolved columns: the format's, with workload.columns' overrides."""

    format: str
    arrival: str
    prompt: str
    output: str
    unit: str
    json: bool
    sorted_what: str  # how ordering messages name the arrival column
    unit_source: str  # where `unit` comes from, for messages: "workload.time_unit=ms"

    def read_in(self) -> str:
        """How messages name the arrival column and its unit: "column 'ts' read in seconds
        (workload.time_unit=s)"."""
        column = self.sorted_what.removesuffix(" (in seconds)")
        return f"{column} read in {UNIT_WORDS[self.unit]} ({self.unit_source})"


def _layout(fmt: TraceFormat | None, options: ReadOptions, json_file: bool) -> _Layout:
    given = {role: options.columns.get(role) for role in ROLES}
    cols = {role: given[role] or getattr(fmt, role) for role in ROLES}
    unit = options.time_unit or (fmt.unit if fmt is not None else "s")
    name = fmt.name if fmt is not None else "columns"
    what = f"{cols['arrival']!r} (in seconds)" if json_file else f"column {cols['arrival']!r}"
    source = (
        f"workload.time_unit={unit}"
        if options.time_unit
        else f"the {name} format's unit, workload.time_unit unset"
        if fmt is not None
        else "the default unit, workload.time_unit unset"
    )
    return _Layout(
        name, cols["arrival"], cols["prompt"], cols["output"], unit, json_file, what, source
    )


def _format_list(formats) -> str:
    return "; ".join(f"{[f.arrival, f.prompt, f.output]} ({f.source})" for f in formats)


def _closest(formats, present) -> TraceFormat | None:
    """The format most of whose identifying columns or keys are `present`, if at most one of
    them is missing (then a row without it says so); None otherwise."""
    score = lambda f: sum(k in present for k in f.identified_by())
    best = max(formats, key=score)
    return best if score(best) >= max(1, len(best.identified_by()) - 1) else None


def _recognize(
    formats, present, has: Callable, options: ReadOptions, where: str
) -> TraceFormat | None:
    """The format of a file whose header or first record is `where` (for messages), holds the
    top-level names `present` and the columns or key paths for which `has` is true.

    Formats holding two or more of their three columns match; when several match, the columns
    named in workload.columns must pick one (or name all three); TraceError otherwise."""
    matching = [f for f in formats if sum(map(has, _columns(f))) >= 2]
    if len(matching) < 2:
        return _closest(formats, present)
    named = {role: c for role, c in options.columns.items() if c}
    picked = [f for f in matching if any(getattr(f, r) == c for r, c in named.items())]
    if len(picked) == 1:
        return picked[0]
    if len(named) == len(ROLES):
        return None  # the columns are all named: the format only named the trace
    raise TraceError(_ambiguous(where, matching, has))


def _columns(fmt: TraceFormat) -> tuple[str, str, str]:
    return fmt.arrival, fmt.prompt, fmt.output


def _ambiguous(where: str, matching, has: Callable) -> str:
    """The message refusing a file that matches several `matching` formats, with a column
    that picks the first."""
    shown = ", ".join(f"{f.name} ({', '.join(_columns(f))}; {f.source})" for f in matching)
    own = lambda role: getattr(matching[0], role)
    role = next(
        (r for r in ROLES if has(own(r)) and all(getattr(f, r) != own(r) for f in matching[1:])),
        ROLES[0],
    )
    return (
        f"{where} matches {len(matching)} formats: {shown}; expected one -- name the "
        f"columns to read with workload.columns.arrival/prompt/output "
        f"(workload.columns.{role}={own(role)} reads {matching[0].name}'s)"
    )


def _csv_layout(path: Path, header: list[str], line: int, options: ReadOptions) -> _Layout:
    """The layout of a CSV file from its header (stripped names); TraceError naming what the
    header lacks."""
    shown = show_cell(header, 120)
    fmt = _recognize(
        CSV_FORMATS, header, header.__contains__, options, f"{path}:{line}: the header {shown}"
    )
    if fmt is None and not all(options.columns.get(role) for role in ROLES):
        raise TraceError(
            f"{path}:{line}: header {shown}; expected columns "
            f"{_format_list(CSV_FORMATS)}, or name yours with "
            f"workload.columns.arrival/prompt/output"
        )
    layout = _layout(fmt, options, json_file=False)
    for role in ROLES:
        column = getattr(layout, role)
        if column in header:
            continue
        if options.columns.get(role):
            raise TraceError(
                f"{path}:{line}: header {shown}; expected a column {column!r} "
                f"(workload.columns.{role})"
            )
        raise TraceError(
            f"{path}:{line}: header {shown}; expected columns "
            f"{_format_list([fmt])}: no {column!r} (or name the {role} column with "
            f"workload.columns.{role})"
        )
    for c in (layout.arrival, layout.prompt, layout.output, "difficulty", "priority"):
        if header.count(c) > 1:
            raise TraceError(
                f"{path}:{line}: column {c!r} appears {header.count(c)} times in "
                f"the header; expected each column once"
            )
    return layout


def _csv_rows(path: Path, options: ReadOptions):
    """(layout, rows, (header, its line)) of a CSV file: each data row as (line, cell getter),
    a getter raising RowError for a row with the wrong number of fields or a repeated header."""
    records = csv_records(path, lines(path))
    header, header_line = None, 1
    for line, row in records:
        if any(cell.strip() for cell in row):
            header, header_line = [h.strip() for h in row], line
            break
    if header is None:
        raise TraceError(f"{path}: empty file; expected a header line and data rows")
    layout = _csv_layout(path, header, header_line, options)
    index = {name: k for k, name in reversed(list(enumerate(header)))}

    def rows():
        for line, row in records:
            if not row or all(not cell.strip() for cell in row):
                continue
            try:
                _check_fields(row, header, path, line)
            except RowError as err:
                yield line, _raiser(err)
                continue
            yield line, (lambda key, row=row: row[index[key]] if key in index else _MISSING)

    return layout, rows(), (header, header_line)


def _check_fields(row, header, path: Path, line: int) -> None:
    """RowError unless `row` has the header's fields (no repeated header, no extra ones)."""
    if [cell.strip() for cell in row] == header:
        raise RowError(
            f"{path}:{line}: the header line again; expected data rows (concatenated files?)",
            "the header again",
        )
    if len(row) < len(header) or any(cell.strip() for cell in row[len(header) :]):
        hint = " -- an unquoted comma?" if len(row) > len(header) else ""
        raise RowError(
            f"{path}:{line}: {len(row)} fields; expected {len(header)} ({', '.join(header)}){hint}",
            "wrong number of fields",
        )


_MISSING = object()


def _json_object(raw: str, path: Path, line: int) -> dict:
    """One JSON line as an object with each key once; RowError otherwise."""
    try:
        obj = json.loads(raw, object_pairs_hook=unique_keys)
    except DuplicateKeyError as err:
        raise RowError(
            f"{path}:{line}: key {err.key!r} appears more than once in the object; "
            f"expected each key once",
            "a key given twice",
        ) from None
    except json.JSONDecodeError as err:
        raise RowError(
            f"{path}:{line}: not valid JSON ({err.msg}); expected one object per line",
            "not valid JSON",
        ) from None
    except (ValueError, RecursionError) as err:  # an integer of > 4300 digits, deep nesting
        raise RowError(
            f"{path}:{line}: unreadable JSON ({str(err)[:80]}); expected one object per line",
            "not valid JSON",
        ) from None
    if not isinstance(obj, dict):
        raise RowError(
            f"{path}:{line}: got {type(obj).__name__}; expected a JSON object", "not a JSON object"
        )
    return obj


def _lookup(obj: dict, dotted: str):
    """obj's value at the key path `dotted` (a key with dots is tried whole first), or
    _MISSING."""
    if dotted in obj:
        return obj[dotted]
    node = obj
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return _MISSING
        node = node[part]
    return node


def _jsonl_rows(path: Path, options: ReadOptions):
    """(layout, rows, None) of a JSONL file: the format from the first object's top-level
    keys; each non-blank line as (line, value getter)."""
    numbered = ((k, raw) for k, raw in enumerate(lines(path), start=1) if raw.strip())
    before = []  # (line, RowError) of broken lines before the first object
    for line, raw in numbered:
        try:
            first = (line, _json_object(raw, path, line))
            break
        except RowError as err:
            if options.invalid_rows == "error":
                raise err.as_error() from None
            before.append((line, err))
    else:
        if before:
            raise TraceError(_no_requests(path, _reasons(err for _, err in before)))
        raise TraceError(
            f"{path}: empty file; expected JSON lines with timestamp, "
            f"input_length, output_length (Mooncake) or another format's keys"
        )
    obj = first[1]
    fmt = _recognize(
        JSONL_FORMATS,
        obj,
        lambda key: _lookup(obj, key) is not _MISSING,
        options,
        f"{path}:{first[0]}: the first record (keys {show_cell(sorted(obj), 120)})",
    )
    if fmt is None and not all(options.columns.get(role) for role in ROLES):
        raise TraceError(
            f"{path}:{first[0]}: keys {show_cell(sorted(obj), 120)}; expected "
            f"{_format_list(JSONL_FORMATS)}, or name yours with "
            f"workload.columns.arrival/prompt/output"
        )
    layout = _layout(fmt, options, json_file=True)

    def getter(line: int, obj):
        try:
            return _json_getter(obj, path, line, layout)
        except RowError as err:  # an invalid row: skipped or reported by the reader
            return _raiser(err)

    def rows():
        yield from ((line, _raiser(err)) for line, err in before)
        yield first[0], getter(*first)
        for line, raw in numbered:
            try:
                obj = _json_object(raw, path, line)
            except RowError as err:
                yield line, _raiser(err)
                continue
            yield line, getter(line, obj)

    return layout, rows(), None


def _json_getter(obj: dict, path: Path, line: int, layout: _Layout) -> Callable:
    """The value getter of one JSON object; RowError when it lacks a column."""
    for key in (layout.arrival, layout.prompt, layout.output):
        if _lookup(obj, key) is _MISSING:
            raise RowError(
                f"{path}:{line}: missing key {key!r}; expected {layout.arrival} "
                f"({layout.unit}), {layout.prompt}, {layout.output}",
                f"missing {key!r}",
            )
    return lambda key: _lookup(obj, key)


# --------------------------------------------------------------------------- the reader


class _Clock:
    """Arrival order across rows: times must not go back, must span at most MAX_SPAN_S, be of
    one kind (numbers or date-times, with or without offsets) and, numbers, fit their unit."""

    def __init__(self, path: Path, layout: _Layout):
        self.path, self.what, self.layout = path, layout.sorted_what, layout
        self.column = self.what.removesuffix(" (in seconds)")  # how kind messages name it
        self.kinds = {k: v.format(unit=UNIT_WORDS[layout.unit]) for k, v in _KIND_NAMES.items()}
        self.first = self.last = None
        self.kind = None  # (kind, line) of the first request
        self.count = 0  # requests committed

    def commit(self, value: float, kind: str, line: int) -> float:
        """Seconds after the first request of the arrival `value` at `line`."""
        if self.kind is None:
            self.kind, self.first, self.last = (kind, line), value, value
            if kind == "number" and value > EPOCH_RANGE_S[1]:
                raise TraceError(_epoch_error(self.path, line, self.layout, value))
        elif kind != self.kind[0]:
            raise TraceError(
                f"{self.path}:{line}: {self.column} is {self.kinds[kind]} but line "
                f"{self.kind[1]} is {self.kinds[self.kind[0]]}; expected one kind "
                f"of timestamp"
            )
        if value < self.last:
            raise TraceError(
                f"{self.path}:{line}: {self.what} goes back in time ({value:.6f} "
                f"after {self.last:.6f}); expected rows sorted by arrival"
            )
        if value - self.first > MAX_SPAN_S:
            hint = (
                f"; read in {UNIT_WORDS[self.layout.unit]} ({self.layout.unit_source}), "
                f"{_fits(self.layout.unit, self.first, value - self.first, self.count + 1)}"
                if kind == "number"
                else ""
            )
            raise TraceError(
                f"{self.path}:{line}: {self.what} = {value:.6g} is "
                f"{value - self.first:.3g} s after the first row; expected a trace "
                f"spanning at most {MAX_SPAN_S:.0e} s (wrong unit or a corrupt "
                f"row?){hint}"
            )
        self.last, self.count = value, self.count + 1
        return value - self.first

    def finish(self, n: int) -> None:
        """TraceError if the `n` requests read are numbers too sparse for their unit (the
        "rate" rule of request_trace.time_unit_problem)."""
        unit_s, span = UNITS[self.layout.unit], self.last - self.first
        if self.kind[0] == "number" and time_unit_problem(self.first, span, n, unit_s):
            raise TraceError(
                _rate_error(self.path, self.kind[1], self.layout, (self.first, self.last), n)
            )


def _fits(unit: str, first_s: float, span_s: float, n: int) -> str:
    """Which units smaller than `unit` make numeric arrivals read in `unit` as first `first_s`
    s, spanning `span_s` s, over `n` requests, plausible (the span each reads as)."""
    fits = []
    for other, other_s in UNITS.items():
        scale = other_s / UNITS[unit]
        if scale < 1 and time_unit_problem(first_s * scale, span_s * scale, n, other_s) is None:
            fits.append(f"{other} ({duration_text(span_s * scale)})")
    if not fits:
        return "no smaller unit makes it a plausible trace"
    return f"it fits workload.time_unit={' or '.join(fits)}"


def _epoch_error(path: Path, line: int, layout: _Layout, first_s: float) -> str:
    """The message refusing a first numeric arrival (`first_s` s in layout.unit) that reads as
    a date after 2100, with the unit that reads it as one in 1990-2100 if any."""
    raw = first_s / UNITS[layout.unit]
    fits = [u for u in UNITS if EPOCH_RANGE_S[0] <= raw * UNITS[u] <= EPOCH_RANGE_S[1]]
    fit = (
        f"workload.time_unit={fits[0]} reads it as "
        f"{dt.datetime.fromtimestamp(raw * UNITS[fits[0]], dt.timezone.utc):%Y-%m-%d %H:%M:%S} "
        f"UTC"
        if fits
        else "no unit reads it as a date in 1990-2100 (a corrupt row?)"
    )
    return (
        f"{path}:{line}: {layout.read_in()}: {raw:.12g} is {first_s:.3g} s after 1970, "
        f"past 2100; expected epoch times in 1990-2100 or times from the trace's start -- "
        f"{fit}"
    )


def _rate_error(path: Path, line: int, layout: _Layout, times: tuple, n: int) -> str:
    """The message refusing `n` relative numeric arrivals from times[0] to times[1] s (read in
    layout.unit) with fewer than one request a day, with the units that fit."""
    first, last = (t / UNITS[layout.unit] for t in times)
    span = times[1] - times[0]
    return (
        f"{path}:{line}: {layout.read_in()}: {first:.12g} to {last:.12g} is {n} requests "
        f"over {duration_text(span)}, fewer than one a day; expected a workload's rate -- "
        f"{_fits(layout.unit, times[0], span, n)}"
    )


@dataclasses.dataclass
class _Kept:
    """The requests kept so far (those in the window), column by column (typed arrays for the
    three that every row has: 16 bytes a request instead of Python objects)."""

    arrival: array.array = dataclasses.field(default_factory=lambda: array.array("d"))
    prompt: array.array = dataclasses.field(default_factory=lambda: array.array("i"))
    output: array.array = dataclasses.field(default_factory=lambda: array.array("i"))
    difficulty: list = dataclasses.field(default_factory=list)
    priority: list = dataclasses.field(default_factory=list)
    hash_ids: list = dataclasses.field(default_factory=list)


class _Optional:
    """An optional per-request value: on every row or on none."""

    def __init__(self, name: str):
        self.name, self.with_line, self.without_line = name, None, None

    def see(self, present: bool, line: int, path: Path) -> None:
        if present and self.with_line is None:
            self.with_line = line
        if not present and self.without_line is None:
            self.without_line = line
        if self.with_line is not None and self.without_line is not None:
            raise TraceError(
                f"{path}:{self.without_line}: no {self.name!r} where other rows "
                f"have one; expected it on every row or on none"
            )


def _row(get, path: Path, line: int, layout: _Layout):
    """(arrival seconds, kind, prompt, output, difficulty, priority, hash ids) of one row."""
    arrival, kind = _arrival(
        get(layout.arrival), path, line, layout.arrival, layout.unit, layout.json
    )
    prompt = _tokens(get(layout.prompt), path, line, layout.prompt, layout.json)
    output = _tokens(get(layout.output), path, line, layout.output, layout.json)
    raw = get("difficulty")
    difficulty = (
        None if raw is _MISSING else _difficulty(raw if layout.json else raw.strip(), path, line)
    )
    raw = get("priority")
    priority = None if raw is _MISSING else _priority(raw, path, line)
    raw = get("hash_ids") if layout.json else _MISSING
    hashes = None if raw is _MISSING else _hash_ids(raw, path, line)
    return arrival, kind, prompt, output, difficulty, priority, hashes


def _rows_of(path: Path, options: ReadOptions):
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        return _jsonl_rows(path, options)
    if suffix == ".csv":
        return _csv_rows(path, options)
    raise TraceError(f"{path}: unknown trace format {path.suffix!r}; expected .csv or .jsonl")


def read_trace(
    path: str | Path, name: str | None = None, options: ReadOptions | None = None
) -> TraceFile:
    """Read the trace file `path` (.csv or .jsonl, any format above), checking every line, and
    keep the requests of `options.window`. The trace is named `name` (default: the file's
    stem); its arrivals are seconds after the file's first request."""
    if not isinstance(path, (str, Path)) or not str(path):
        raise TraceError(f"trace file: got {path!r}; expected the path of a CSV or JSONL trace")
    if isinstance(options, Mapping):
        options = ReadOptions(**options)
    if options is not None and not isinstance(options, ReadOptions):
        raise ConfigError(
            f"read options: got {options!r}; expected a ReadOptions or a mapping of its fields"
        )
    path, options = Path(path), options or ReadOptions()
    inputs.check_regular(path, "trace file", TraceError)  # a folder, FIFO or device: say so
    layout, rows, head = _rows_of(path, options)
    name = name or path.stem
    if head is not None and not {"difficulty", "priority"} & set(head[0]):
        fast = trace_csv_fast.read(
            path,
            head[0],
            head[1],
            (layout.arrival, layout.prompt, layout.output),
            UNITS[layout.unit],
            options.window,
        )
        if fast is not None:
            return TraceFile(
                RequestTrace(name, fast.arrival, fast.prompt, fast.output),
                layout.format,
                fast.n_requests,
                fast.span_s,
                {},
            )
    clock, kept, skipped = _Clock(path, layout), _Kept(), {}
    optional = {k: _Optional(k) for k in ("difficulty", "priority")}
    lo, hi = options.window
    n_valid = 0
    for line, get in rows:
        try:
            arrival, kind, prompt, output, difficulty, priority, hashes = _row(
                get, path, line, layout
            )
        except RowError as err:
            if options.invalid_rows == "error":
                raise err.as_error() from None
            skipped.setdefault(err.reason, [0, err.line])[0] += 1
            continue
        at = clock.commit(arrival, kind, line)
        n_valid += 1
        for key, value in (("difficulty", difficulty), ("priority", priority)):
            optional[key].see(value is not None, line, path)
        if lo <= at < hi:
            for field, value in zip(
                dataclasses.fields(kept),
                (at, prompt, output, difficulty, priority, hashes),
                strict=True,
            ):
                getattr(kept, field.name).append(value)
    if n_valid == 0:
        raise TraceError(_no_requests(path, skipped))
    clock.finish(n_valid)
    return TraceFile(
        _as_trace(kept, name), layout.format, n_valid, clock.last - clock.first, skipped
    )


def _reasons(errors) -> dict:
    """reason -> [count, first line] of RowErrors."""
    out = {}
    for err in errors:
        out.setdefault(err.reason, [0, err.line])[0] += 1
    return out


def _no_requests(path: Path, skipped: dict) -> str:
    if not skipped:
        return f"{path}: no requests; expected at least one data row"
    reasons = ", ".join(
        f"{reason}: {count} (first at line {line})" for reason, (count, line) in skipped.items()
    )
    return (
        f"{path}: no valid requests; every row was invalid ({reasons}); expected at least "
        f"one valid row"
    )


def _as_trace(kept: _Kept, name: str) -> RequestTrace:
    """The kept requests as a RequestTrace (empty when the window holds none)."""
    optional = lambda values, dtype: (
        np.asarray(values, dtype) if values and values[0] is not None else None
    )
    hashes = None
    if any(h is not None for h in kept.hash_ids):  # rows without hash_ids have no prefix blocks
        hashes = RaggedIds.from_rows(kept.hash_ids)
    return RequestTrace(
        name,
        np.asarray(kept.arrival, np.float64),
        np.asarray(kept.prompt, np.int32),
        np.asarray(kept.output, np.int32),
        difficulty=optional(kept.difficulty, np.float64),
        priority=optional(kept.priority, np.int32),
        hash_ids=hashes,
    )


def load_trace(path: str | Path, name: str | None = None) -> RequestTrace:
    """Every request of the trace file `path` (see read_trace), arrivals in seconds after the
    first; TraceError at the first bad line."""
    return read_trace(path, name).trace


def trace_name(path, default: str) -> str:
    """A replayed trace's name: its file's stem, or `default` when no file is given (the config
    resolver `${servetune.trace_name:${.path},azure_conv}` of the workload groups)."""
    return default if path is None or str(path) == "" else Path(str(path)).stem


OmegaConf.register_new_resolver("servetune.trace_name", trace_name, replace=True)


def bundled_path(filename: str) -> Path:
    """Path of a trace shipped inside the package (see servetune/workload/data/README.md)."""
    if not isinstance(filename, str) or not filename or Path(filename).name != filename:
        raise ConfigError(
            f"workload.bundled: got {filename!r}; expected the file name of a "
            f"bundled trace (or set workload.path)"
        )
    path = Path(str(resources.files("servetune.workload") / "data" / filename))
    if not path.exists():
        raise ConfigError(
            f"workload.bundled: no bundled trace {filename!r}; expected one of "
            f"{sorted(p.name for p in path.parent.glob('*.*') if p.suffix != '.md')}"
        )
    return path
