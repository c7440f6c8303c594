"""Import the per-request spans a vLLM server exports with OpenTelemetry tracing
(`vllm serve --otlp-traces-endpoint ...`): the requests as a servetune trace, and what the
server did as a per-request table in the shape of `servetune observe`'s.

vLLM ends each request with one span named `llm_request` whose start time is the request's
arrival at the engine and whose attributes (vllm/tracing.py, `SpanAttributes`) give, in
seconds and tokens: `gen_ai.usage.prompt_tokens`, `gen_ai.usage.completion_tokens`,
`gen_ai.latency.time_to_first_token`, `gen_ai.latency.e2e` and, where recorded,
`gen_ai.latency.time_in_queue` (waiting in the scheduler).

The file is OTLP JSON as an OpenTelemetry Collector's `file` exporter writes it: one
`{"resourceSpans": [{"scopeSpans": [{"spans": [...]}]}]}` object per line (or one object for
the whole file); span times are `startTimeUnixNano` strings and attribute values
`{"intValue": "12"}` / `{"doubleValue": 0.5}` / `{"stringValue": "..."}`. Spans of other names
(the API server's, a client's) are skipped. Arrivals count from the first arrival; a span's
first token and finish are its arrival plus its TTFT and E2E. A request the server aborted
carries no usage: it is refused, naming the span, rather than guessed.

Numbers are read as an exporter writes them and no looser: ASCII decimal digits (no `1_000`,
no other scripts' digits), token counts whole and at most workload.MAX_TOKENS, latencies in
seconds at most workload.MAX_SPAN_S, start times below 2**64 ns and spanning at most
MAX_SPAN_S; a JSON key or an attribute given twice is refused too (which one was meant?).
Then the spans are checked against each other (validate/record_checks.py, each named by its
place in the file): TTFT <= E2E, the time in queue within the TTFT, seconds rather than
milliseconds.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

from servetune.core import inputs
from servetune.core.errors import TraceError
from servetune.validate import record_checks
from servetune.validate import record_columns as rc
from servetune.workload.traces import strict_float

SPAN = "llm_request"
PROMPT, OUTPUT = "gen_ai.usage.prompt_tokens", "gen_ai.usage.completion_tokens"
TTFT, E2E = "gen_ai.latency.time_to_first_token", "gen_ai.latency.e2e"
QUEUE = "gen_ai.latency.time_in_queue"
REQUIRED = (PROMPT, OUTPUT, TTFT, E2E)
# attribute -> (row field, kind of value as record_columns.KINDS names it)
FIELDS = {
    PROMPT: ("prompt", "tokens"),
    OUTPUT: ("output", "tokens"),
    TTFT: ("ttft", "seconds"),
    E2E: ("e2e", "seconds"),
    QUEUE: ("queue", "seconds"),
}
EXPECTED = "OTLP JSON, one object per line as a Collector's file exporter writes"
# an OTLP JSON integer written as a string: ASCII decimal digits, at most a uint64's 20
_INTEGER = re.compile(r"[+-]?[0-9]{1,20}", re.ASCII)
NANOS_LIMIT = 2**64  # startTimeUnixNano is a fixed64
# record_checks.RecordTimes role -> the span's name for it (record_checks.RecordNames)
NAMES = {"start": "startTimeUnixNano", "ttft": TTFT, "e2e": E2E, "within": QUEUE}


def _documents(path: Path) -> list[tuple[int, dict]]:
    """(line, object) of each OTLP JSON document in the file: one per line, or the whole file."""
    data = inputs.read_bytes(path, "OTLP JSON file of spans", TraceError)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise TraceError(f"{path}: not UTF-8 text (byte {err.start}); expected OTLP JSON") from None
    try:
        docs = [(1, rc.read_json(text, path, 1, EXPECTED))]
    except json.JSONDecodeError:
        docs = []
        for k, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                docs.append((k, rc.read_json(line, path, k, EXPECTED)))
            except json.JSONDecodeError as err:
                raise TraceError(f"{path}:{k}: not JSON ({err.msg}); expected {EXPECTED}") from None
    for k, doc in docs:
        if not isinstance(doc, dict) or "resourceSpans" not in doc:
            raise TraceError(
                f"{path}:{k}: no resourceSpans; expected OTLP JSON trace data "
                f'({{"resourceSpans": [...]}})'
            )
    return docs


def _integer(raw):
    """The int of an OTLP JSON integer (a decimal string, as OTLP JSON writes int64s, or a
    JSON number that is whole); `raw` itself when it is anything else (1_000, non-ASCII
    digits, 1.5, a list), for the caller to refuse naming the key."""
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, int):
        return raw
    if isinstance(raw, float) and raw.is_integer():
        return int(raw)
    if isinstance(raw, str) and _INTEGER.fullmatch(raw.strip()):
        return int(raw)
    return raw


def _double(raw):
    """The number of an OTLP JSON double (a JSON number, or a string such as "NaN" or
    "0.5"); `raw` itself when it is anything else, for the caller to refuse."""
    if isinstance(raw, str):
        try:
            return strict_float(raw)
        except ValueError:
            return raw
    return raw


def _value(v):
    """The Python value of an OTLP JSON AnyValue holding a number (int64s are strings in OTLP
    JSON); anything else as it is, for the caller to refuse naming the key."""
    if not isinstance(v, dict):
        return v
    if "intValue" in v:
        return _integer(v["intValue"])
    if "doubleValue" in v:
        return _double(v["doubleValue"])
    return v.get("stringValue", v.get("boolValue", v))


def _list(doc: dict, key: str, where: str) -> list:
    """doc[key] as a list (absent or null: empty); TraceError naming `where` (the place of
    `doc`) and `key` otherwise."""
    if not isinstance(doc, dict):
        raise TraceError(f"{where}: a JSON {type(doc).__name__}; expected an object")
    items = doc.get(key)
    if items is not None and not isinstance(items, list):
        raise TraceError(f"{where}: {key}: a JSON {type(items).__name__}; expected a list")
    return items or []


def _spans(path: Path) -> list[tuple[str, dict]]:
    """(where, span) of every llm_request span, `where` naming its line and position."""
    out = []
    for k, doc in _documents(path):
        for r, res in enumerate(_list(doc, "resourceSpans", f"{path}:{k}")):
            at = f"{path}:{k}: resourceSpans[{r}]"
            for s, scope in enumerate(_list(res, "scopeSpans", at)):
                where = f"{at}.scopeSpans[{s}]"
                for j, span in enumerate(_list(scope, "spans", where)):
                    if isinstance(span, dict) and span.get("name") == SPAN:
                        out.append((f"{where}.spans[{j}]", span))
    if not out:
        raise TraceError(
            f"{path}: no '{SPAN}' spans; expected the spans vLLM exports with "
            f"--otlp-traces-endpoint"
        )
    return out


def _attributes(where: str, span: dict) -> dict:
    """{key: raw value} of the span's attributes that FIELDS reads, each given once."""
    attrs = {}
    for a in _list(span, "attributes", where):
        key = a.get("key") if isinstance(a, dict) else None
        if not isinstance(key, str) or key not in FIELDS:
            continue
        if key in attrs:
            raise TraceError(
                f"{where}: attribute {key} appears twice; expected each once "
                f"(which one did the server mean?)"
            )
        attrs[key] = _value(a.get("value"))
    return attrs


def _start_nanos(where: str, span: dict) -> int:
    """The span's startTimeUnixNano: nanoseconds since the epoch, a whole number < 2**64."""
    raw = span.get("startTimeUnixNano")
    nanos = _integer(raw)
    if isinstance(nanos, bool) or not isinstance(nanos, int) or not 0 <= nanos < NANOS_LIMIT:
        raise TraceError(
            f"{where}: startTimeUnixNano: got {rc.show(raw)}; expected the arrival "
            f"time in nanoseconds since the epoch (decimal digits, below 2**64)"
        )
    return nanos


def _request(where: str, span: dict) -> dict:
    """One span's arrival (ns since the epoch), tokens and latencies (seconds), checked."""
    attrs = _attributes(where, span)
    missing = [key for key in REQUIRED if attrs.get(key) is None]
    if missing:
        raise TraceError(
            f"{where}: no {', '.join(missing)}; expected vLLM's usage and latency "
            f"attributes (an aborted request has none)"
        )
    row = {"nanos": _start_nanos(where, span), "where": where, "queue": np.nan}
    for key, v in attrs.items():  # only the queue time is optional
        name, kind = FIELDS[key]
        rc.check_value(v, where, key, kind)
        row[name] = v
    return row


def _times(rows: list[dict]) -> record_checks.RecordTimes:
    """The spans' arrivals (seconds from the first), tokens and latencies, in file order."""
    first = min(r["nanos"] for r in rows)
    arrival = np.array([(r["nanos"] - first) / 1e9 for r in rows])  # exact before dividing
    rc.check_span(arrival, lambda k: f"{rows[k]['where']}: startTimeUnixNano")

    def column(name, dtype=np.float64):
        return np.array([r[name] for r in rows], dtype)

    return record_checks.RecordTimes(
        start=arrival,
        ttft=column("ttft"),
        e2e=column("e2e"),
        ok=np.ones(len(rows), bool),
        prompt=column("prompt", np.int64),
        output=column("output", np.int64),
        within=column("queue"),
    )


def load_otel_spans(path: str | Path) -> dict:
    """Read vLLM's llm_request spans from an OTLP JSON file.

    Returns the same dict as `bench_import.load_bench_result`: {"requests": requests.parquet's
    columns (request, arrival_s, prompt_tokens, output_tokens, first_token_s, finish_s,
    output_tokens_delivered, end_state, ttft_s, tpot_s, e2e_s, and queue_s: seconds waiting in
    the scheduler, nan where not recorded), in arrival order, "trace": (arrival_s,
    prompt_tokens, output_tokens) of those with at least one output token, "about": the span
    count, "order": "arrival" or a sentence saying the spans are listed otherwise}. A file of
    another shape, or whose spans contradict themselves (record_checks.check_records), raises
    TraceError naming the line, span and key."""
    path = inputs.expand(path, "--import-otel", TraceError)
    rows = [_request(where, span) for where, span in _spans(path)]
    t = _times(rows)
    names = record_checks.RecordNames(
        record=lambda i: rows[i]["where"], fields=NAMES, indexed=False
    )
    order = record_checks.check_records(t, names)
    k = np.argsort([r["nanos"] for r in rows], kind="stable")  # arrival order, exactly
    requests, trace = rc.request_columns(
        t.start[k], t.prompt[k], t.output[k], t.start[k] + t.ttft[k], t.start[k] + t.e2e[k], t.ok[k]
    )
    requests["queue_s"] = t.within[k]
    return {"requests": requests, "trace": trace, "about": {"spans": len(rows)}, "order": order}
