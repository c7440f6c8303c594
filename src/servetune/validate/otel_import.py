"""Import the per-request spans a vLLM server exports with OpenTelemetry tracing
(`vllm serve --otlp-traces-endpoint ...`): the requests as a servetune trace, and what the
server did as a per-request table in the shape of `servetune observe`'s (issue 20 item 1).

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
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from servetune import inputs
from servetune.errors import TraceError
from servetune.validate.record_columns import non_negative, request_columns

SPAN = "llm_request"
PROMPT, OUTPUT = "gen_ai.usage.prompt_tokens", "gen_ai.usage.completion_tokens"
TTFT, E2E = "gen_ai.latency.time_to_first_token", "gen_ai.latency.e2e"
QUEUE = "gen_ai.latency.time_in_queue"
REQUIRED = (PROMPT, OUTPUT, TTFT, E2E)


def _documents(path: Path) -> list[tuple[int, dict]]:
    """(line, object) of each OTLP JSON document in the file: one per line, or the whole file."""
    data = inputs.read_bytes(path, "OTLP JSON file of spans", TraceError)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise TraceError(f"{path}: not UTF-8 text (byte {err.start}); expected OTLP JSON") from None
    try:
        whole = json.loads(text)
        docs = [(1, whole)]
    except json.JSONDecodeError:
        docs = []
        for k, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                docs.append((k, json.loads(line)))
            except json.JSONDecodeError as err:
                raise TraceError(f"{path}:{k}: not JSON ({err.msg}); expected OTLP JSON, one "
                                 f"object per line as a Collector's file exporter writes") from None
    for k, doc in docs:
        if not isinstance(doc, dict) or "resourceSpans" not in doc:
            raise TraceError(f"{path}:{k}: no resourceSpans; expected OTLP JSON trace data "
                             f"({{\"resourceSpans\": [...]}})")
    return docs


def _value(v: dict):
    """The Python value of an OTLP JSON AnyValue (int64s are strings in OTLP JSON)."""
    if not isinstance(v, dict):
        return None
    if "intValue" in v:
        try:
            return int(v["intValue"])
        except (TypeError, ValueError):
            return v["intValue"]  # refused by the caller, naming the key
    if "doubleValue" in v:
        return float(v["doubleValue"])
    return v.get("stringValue", v.get("boolValue"))


def _spans(path: Path) -> list[tuple[str, dict]]:
    """(where, span) of every llm_request span, `where` naming its line and position."""
    out = []
    for k, doc in _documents(path):
        for r, res in enumerate(doc.get("resourceSpans") or []):
            for s, scope in enumerate(res.get("scopeSpans") or []):
                for j, span in enumerate(scope.get("spans") or []):
                    if isinstance(span, dict) and span.get("name") == SPAN:
                        where = (f"{path}:{k}: resourceSpans[{r}].scopeSpans[{s}]."
                                 f"spans[{j}]")
                        out.append((where, span))
    if not out:
        raise TraceError(f"{path}: no '{SPAN}' spans; expected the spans vLLM exports with "
                         f"--otlp-traces-endpoint")
    return out


def _request(where: str, span: dict) -> dict:
    """One span's arrival (s since the epoch), tokens and latencies, checked."""
    attrs = {a.get("key"): _value(a.get("value") or {}) for a in span.get("attributes") or []
             if isinstance(a, dict)}
    missing = [key for key in REQUIRED if attrs.get(key) is None]
    if missing:
        raise TraceError(f"{where}: no {', '.join(missing)}; expected vLLM's usage and latency "
                         f"attributes (an aborted request has none)")
    try:
        start = int(span["startTimeUnixNano"]) / 1e9
    except (KeyError, TypeError, ValueError):
        raise TraceError(f"{where}: startTimeUnixNano: expected the arrival time in "
                         f"nanoseconds since the epoch") from None
    row = {"arrival": start}
    for key, name, whole in ((PROMPT, "prompt", True), (OUTPUT, "output", True),
                             (TTFT, "ttft", False), (E2E, "e2e", False), (QUEUE, "queue", False)):
        v = attrs.get(key)
        if v is None:  # only the queue time is optional
            row[name] = np.nan
            continue
        if not non_negative(v, whole):
            kind = "a whole number" if whole else "seconds"
            raise TraceError(f"{where}: {key}: got {v!r}; expected {kind} >= 0")
        row[name] = v
    if row["e2e"] < row["ttft"]:
        raise TraceError(f"{where}: {E2E} {row['e2e']} is below {TTFT} {row['ttft']}")
    return row


def load_otel_spans(path: str | Path) -> dict:
    """Read vLLM's llm_request spans from an OTLP JSON file.

    Returns the same dict as `bench_import.load_bench_result`: {"requests": requests.parquet's
    columns (request, arrival_s, prompt_tokens, output_tokens, first_token_s, finish_s,
    output_tokens_delivered, end_state, ttft_s, tpot_s, e2e_s, and queue_s: seconds waiting in
    the scheduler, nan where not recorded), in arrival order, "trace": (arrival_s,
    prompt_tokens, output_tokens) of those with at least one output token, "about": the span
    count}. A file of another shape raises TraceError naming the line, span and key."""
    path = inputs.expand(path, "--import-otel", TraceError)
    rows = [_request(where, span) for where, span in _spans(path)]
    rows.sort(key=lambda r: r["arrival"])
    arrival = np.array([r["arrival"] for r in rows])
    arrival = arrival - arrival[0]
    prompt = np.array([r["prompt"] for r in rows], np.int64)
    output = np.array([r["output"] for r in rows], np.int64)
    ttft, e2e = np.array([r["ttft"] for r in rows]), np.array([r["e2e"] for r in rows])
    requests, trace = request_columns(arrival, prompt, output, arrival + ttft, arrival + e2e,
                                      np.ones(len(rows), bool))
    requests["queue_s"] = np.array([r["queue"] for r in rows])
    return {"requests": requests, "trace": trace, "about": {"spans": len(rows)}}
