"""What every import of a deployment's own record shares (validate/bench_import.py,
validate/otel_import.py): reading its JSON strictly, the checks of its numbers, and the
per-request table and trace it yields, in the shape of `servetune observe`'s."""

from __future__ import annotations

import json
import json.decoder
import json.scanner
import math
import reprlib
import sys
from pathlib import Path

import numpy as np

from servetune.core.errors import TraceError
from servetune.workload.traces import MAX_SPAN_S, MAX_TOKENS, DuplicateKeyError, unique_keys

_SHOW = reprlib.Repr()
_SHOW.maxstring, _SHOW.maxlong, _SHOW.maxother = 40, 40, 40


def show(v) -> str:
    """repr of a value read from a record, shortened for a message (a corrupt record can hold
    a 400-digit number or a long list)."""
    return _SHOW.repr(v)


def in_range(v, most: float, whole: bool = False) -> bool:
    """Whether a value read from a record is a number in [0, `most`] (a whole one with
    `whole`) that a float64 holds; booleans are not numbers here, and an integer of any size
    is compared exactly (never converted to a float, which overflows)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    if isinstance(v, int):
        return 0 <= v <= min(most, sys.float_info.max)
    return math.isfinite(v) and 0 <= v <= most and (not whole or v.is_integer())


# kind of value -> (largest, whole, what is expected): a duration longer than the longest
# trace servetune reads (MAX_SPAN_S) is a corrupt record, not a request; a point in time (a
# clock reading) has no bound of its own, only the span of the record's times (check_span)
KINDS = {
    "tokens": (MAX_TOKENS, True, f"a whole number of tokens in [0, {MAX_TOKENS}]"),
    "seconds": (MAX_SPAN_S, False, f"seconds in [0, {MAX_SPAN_S:.0e}]"),
    "time": (math.inf, False, "a finite time in seconds >= 0"),
}


def check_value(v, where: str, key: str, kind: str) -> None:
    """TraceError naming `where` and `key` unless `v` is a value of `kind` (see KINDS)."""
    most, whole, expected = KINDS[kind]
    if not in_range(v, most, whole):
        raise TraceError(f"{where}: {key}: got {show(v)}; expected {expected}")


def check_span(times: np.ndarray, label) -> None:
    """TraceError naming the first of `times` (finite seconds on one clock, in the record's
    order) that lies more than MAX_SPAN_S after the earliest: a stray 1e308 or a wrong unit,
    which would leave the other arrivals without sub-microsecond resolution. `label(i)` names
    the i-th value ("file:line: span: key")."""
    far = np.nonzero(times - times.min() > MAX_SPAN_S)[0]
    if len(far):
        k = int(far[0])
        raise TraceError(
            f"{label(k)}: {times[k]:.6g} is {times[k] - times.min():.3g} s after "
            f"the earliest; expected a record spanning at most {MAX_SPAN_S:.0e} s "
            f"(a corrupt value or a wrong unit?)"
        )


class _RepeatedKeyError(DuplicateKeyError):
    """A key given twice in one JSON object, with the line and column (from 1, in the text
    parsed) where its second value starts."""

    def __init__(self, key: str, line: int, column: int):
        super().__init__(key)
        self.line, self.column = line, column


def _locate_repeat(text: str) -> None:
    """Parse `text` again with the pure-Python scanner, recording where each value of each
    object starts, and raise _RepeatedKeyError at the first key an object gives twice. Slow: only
    run once the fast parse has found a repeat."""
    decoder = json.JSONDecoder()

    def parse_object(s_and_end, strict, scan_once, object_hook, object_pairs_hook, memo=None):
        starts = []

        def scan(s, idx):
            starts.append(idx)
            return scan_once(s, idx)

        def pairs(items):
            seen = set()
            for (key, _), at in zip(items, starts, strict=True):
                if key in seen:
                    raise _RepeatedKeyError(
                        key, text.count("\n", 0, at) + 1, at - text.rfind("\n", 0, at)
                    )
                seen.add(key)
            return dict(items)

        return json.decoder.JSONObject(s_and_end, strict, scan, None, pairs, memo)

    decoder.parse_object = parse_object
    decoder.scan_once = json.scanner.py_make_scanner(decoder)
    decoder.decode(text)


def read_json(text: str, path: Path, line: int, expected: str):
    """The value of the JSON `text`, which starts on line `line` of `path`. TraceError naming
    path:line (and column) for a key given twice in one object (json.loads would keep the
    last one silently), an integer beyond Python's 4300 digits or nesting too deep; `expected`
    ends those messages. json.JSONDecodeError (lines counted within `text`) is left to the
    caller, whose words for "not JSON" differ."""
    try:
        return json.loads(text, object_pairs_hook=unique_keys)
    except DuplicateKeyError as err:
        key = err.key
    except json.JSONDecodeError:
        raise
    except (ValueError, RecursionError) as err:
        raise TraceError(
            f"{path}:{line}: unreadable JSON ({str(err)[:80]}); expected {expected}"
        ) from None
    try:
        _locate_repeat(text)
    except RecursionError:  # deeper than the pure-Python scanner goes: say it without a place
        pass
    except _RepeatedKeyError as err:
        raise TraceError(
            f"{path}:{line + err.line - 1}: key {err.key!r} appears twice in one "
            f"object (again at column {err.column}); expected each key once "
            f"(which one did the run mean?)"
        ) from None
    raise TraceError(
        f"{path}:{line}: key {key!r} appears twice in one object; expected each "
        f"key once (which one did the run mean?)"
    )


def trace_rows(arrival, output, ok) -> np.ndarray:
    """Indices of a record's requests (arrays [N] in the record's order: arrival seconds,
    output tokens, succeeded) that its trace holds, in the trace's order: the succeeded ones
    with at least one output token, by arrival (ties in record order)."""
    order = np.argsort(arrival, kind="stable")
    return order[ok[order] & (output[order] > 0)]


def request_columns(arrival, prompt, output, first, finish, ok) -> tuple[dict, dict]:
    """(requests.parquet's columns, the trace's) from per-request arrays [N] in the record's
    order: arrival, first token and finish (seconds, one clock), prompt and output tokens, and
    whether the request succeeded (`ok`; the others get end state `failed` and no times),
    already checked against each other (record_checks.check_records). The trace holds the
    succeeded requests with at least one output token, in arrival order."""
    # a first token after the finish by clock rounding only (record_checks.SAME_CLOCK_S;
    # record_checks refuses more) is read as at the finish
    first, finish = np.where(ok, np.minimum(first, finish), np.nan), np.where(ok, finish, np.nan)
    tpot = np.where(ok & (output > 1), (finish - first) / np.maximum(output - 1, 1), np.nan)
    requests = {
        "request": np.arange(len(arrival)),
        "arrival_s": arrival,
        "prompt_tokens": prompt,
        "output_tokens": output,
        "first_token_s": first,
        "finish_s": finish,
        "output_tokens_delivered": np.where(ok, output, 0),
        "end_state": np.where(ok, "completed", "failed"),
        "ttft_s": first - arrival,
        "tpot_s": tpot,
        "e2e_s": finish - arrival,
    }
    keep = trace_rows(arrival, output, ok)
    trace = {
        "arrival_s": arrival[keep],
        "prompt_tokens": prompt[keep],
        "output_tokens": output[keep],
    }
    return requests, trace
