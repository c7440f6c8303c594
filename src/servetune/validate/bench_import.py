"""Import a `vllm bench serve` result: the requests it sent as a servetune trace, and what the
server did as a per-request table in the shape of `servetune observe`'s.

A production deployment often has these files already: `vllm bench serve --save-result
--save-detailed` writes one JSON object whose per-request lists (vLLM 0.32,
vllm/benchmarks/serve.py, the dict `benchmark()` returns) are read here:

- `start_times`: `time.perf_counter()` when the request was sent (seconds);
- `queue_times`: seconds it waited in the client before being sent (`--max-concurrency`);
  absent in older results (taken as 0);
- `input_lens`, `output_lens`: prompt tokens and output tokens delivered;
- `ttfts`, `latencies`: seconds from sending to the first token and to the last;
- `errors`: "" for a request that succeeded, else the client's error text;
- `itls` (optional): each request's inter-token latencies (seconds);
- `duration` (optional): seconds from the benchmark's start to its last request's end.

Without `--save-detailed` vLLM drops these lists and keeps only aggregates: such a file is
refused, naming the missing keys. A request's arrival is its send time minus its client queue
time (when the benchmark meant it to arrive), counted from the first arrival; its first token
and finish are on the same clock. TTFT here counts from that arrival, so with
`--max-concurrency` it includes the client's queueing, which vLLM's own `ttfts` leave out.
Failed requests are in the table (end_state `failed`, no times) but not in the trace: their
output length is unknown. The server reports no preemptions; the column is absent.

Every value is checked (validate/record_columns.py): token counts whole and at most
workload.MAX_TOKENS, durations at most workload.MAX_SPAN_S seconds, send times finite and
spanning at most MAX_SPAN_S; a key given twice is refused with its line and column. Then the
requests are checked against each other (validate/record_checks.py, named `record 3` and
`ttfts[3]`): TTFT <= latency, ITLs within latency - TTFT, every end within `duration`, queue
times within the time since the first send, seconds rather than milliseconds. The records
need not be listed by arrival: they are sorted, and the summary says so.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from servetune.core import inputs
from servetune.core.errors import TraceError
from servetune.validate import record_checks
from servetune.validate import record_columns as rc

LISTS = ("start_times", "input_lens", "output_lens", "ttfts", "latencies", "errors")
ABOUT = (
    "date",
    "backend",
    "model_id",
    "tokenizer_id",
    "num_prompts",
    "request_rate",
    "burstiness",
    "max_concurrency",
    "duration",
    "completed",
    "failed",
)
# RecordTimes role -> the key of the file holding it (record_checks.RecordNames)
NAMES = {
    "start": "start_times",
    "ttft": "ttfts",
    "e2e": "latencies",
    "before": "queue_times",
    "itl_sum": "itls",
    "window": "duration",
}


def _load(path: Path) -> dict:
    """The file's JSON object, read strictly (rc.read_json), with every key of LISTS."""
    raw = inputs.read_bytes(path, "`vllm bench serve --save-result` JSON", TraceError)
    try:
        data = rc.read_json(
            raw.decode("utf-8"), path, 1, "the JSON `vllm bench serve --save-result` writes"
        )
    except UnicodeDecodeError as err:
        raise TraceError(
            f"{path}: not UTF-8 text (byte {err.start}); expected the JSON "
            f"`vllm bench serve --save-result` writes"
        ) from None
    except json.JSONDecodeError as err:
        raise TraceError(
            f"{path}:{err.lineno}: not JSON ({err.msg}); expected the file "
            f"`vllm bench serve --save-result` writes"
        ) from None
    if not isinstance(data, dict):
        raise TraceError(
            f"{path}: a JSON {type(data).__name__}; expected one object, as "
            f"`vllm bench serve --save-result` writes"
        )
    missing = [k for k in LISTS if k not in data]
    if missing:
        raise TraceError(
            f"{path}: no {', '.join(missing)}; expected a `vllm bench serve "
            f"--save-result --save-detailed` result (without --save-detailed "
            f"vLLM keeps only aggregates)"
        )
    return data


def _column(data: dict, key: str, n: int, path: Path, kind: str) -> np.ndarray:
    """A per-request list, checked: length n, each value of `kind` (record_columns.KINDS:
    "tokens" as int64, "seconds" or "time" as float64)."""
    values = data[key]
    if not isinstance(values, list) or len(values) != n:
        got = f"{len(values)} values" if isinstance(values, list) else type(values).__name__
        raise TraceError(
            f"{path}: {key}: {got}; expected a list of {n} (one per request, as start_times)"
        )
    for i, v in enumerate(values):
        rc.check_value(v, str(path), f"{key}[{i}]", kind)
    return np.asarray(values, np.int64 if kind == "tokens" else np.float64)


def _itl_row(row, path: Path, i: int) -> float:
    """The sum (seconds) of itls[i], a list of seconds, each checked (rc.KINDS "seconds")."""
    if not isinstance(row, list):
        raise TraceError(
            f"{path}: itls[{i}]: a JSON {type(row).__name__}; expected a list of "
            f"seconds (one per token after the first)"
        )
    most = rc.KINDS["seconds"][0]
    try:  # fast path: plain numbers in range; any other value is named below
        plain = all(type(v) is float or type(v) is int for v in row)
        values = np.asarray(row, np.float64) if plain else None
    except OverflowError:
        values = None
    if values is None or not np.all((values >= 0) & (values <= most)):  # nan fails too
        for j, v in enumerate(row):
            rc.check_value(v, str(path), f"itls[{i}][{j}]", "seconds")
    return float(np.sum(row, dtype=np.float64))


def _itl_sums(data: dict, n: int, path: Path) -> np.ndarray | None:
    """Each request's ITLs summed [n] (seconds), or None when the file has no `itls`."""
    itls = data.get("itls")
    if itls is None:
        return None
    if not isinstance(itls, list) or len(itls) != n:
        got = f"{len(itls)} values" if isinstance(itls, list) else type(itls).__name__
        raise TraceError(
            f"{path}: itls: {got}; expected a list of {n} lists (one per request, as start_times)"
        )
    return np.array([_itl_row(row, path, i) for i, row in enumerate(itls)], np.float64)


def _window(data: dict, path: Path) -> float | None:
    """The file's `duration` (seconds the run took), checked; None when absent."""
    if data.get("duration") is None:
        return None
    rc.check_value(data["duration"], str(path), "duration", "seconds")
    return float(data["duration"])


def _times(data: dict, n: int, path: Path) -> record_checks.RecordTimes:
    """The file's per-request lists, each value checked alone (record_columns)."""
    sent = _column(data, "start_times", n, path, "time")
    rc.check_span(sent, lambda k: f"{path}: start_times[{k}]")
    queued = (
        _column(data, "queue_times", n, path, "seconds")
        if data.get("queue_times") is not None
        else np.zeros(n)
    )
    prompt = _column(data, "input_lens", n, path, "tokens")
    output = _column(data, "output_lens", n, path, "tokens")
    ttft = _column(data, "ttfts", n, path, "seconds")
    latency = _column(data, "latencies", n, path, "seconds")
    errors = data["errors"]
    if not isinstance(errors, list) or len(errors) != n:
        raise TraceError(f'{path}: errors: expected a list of {n} strings ("" = succeeded)')
    ok = np.array([not e for e in errors])
    return record_checks.RecordTimes(
        start=sent,
        ttft=ttft,
        e2e=latency,
        ok=ok,
        prompt=prompt,
        output=output,
        before=queued,
        itl_sum=_itl_sums(data, n, path),
        window=_window(data, path),
    )


def load_bench_result(path: str | Path) -> dict:
    """Read a `vllm bench serve --save-result --save-detailed` JSON file.

    Returns {"requests": requests.parquet's columns (request, arrival_s, prompt_tokens,
    output_tokens, first_token_s, finish_s, output_tokens_delivered, end_state, ttft_s,
    tpot_s, e2e_s; seconds and tokens), "trace": (arrival_s, prompt_tokens, output_tokens)
    of the requests that completed with at least one output token, in arrival order,
    "about": the run's settings the file records, "order": "arrival" or a sentence saying
    the records are listed otherwise (record_checks.arrival_order)}. A file of another shape,
    or whose requests contradict each other (record_checks.check_records), raises TraceError
    naming it, the record and the key."""
    path = inputs.expand(path, "--import-bench", TraceError)
    data = _load(path)
    if not isinstance(data["start_times"], list) or not data["start_times"]:
        raise TraceError(f"{path}: start_times: no requests; expected one send time per request")
    t = _times(data, len(data["start_times"]), path)
    names = record_checks.RecordNames(record=lambda i: f"{path}: record {i}", fields=NAMES)
    order = record_checks.check_records(t, names)
    arrival_abs = record_checks.arrivals(t)
    t0 = float(arrival_abs.min())
    arrival, send = arrival_abs - t0, t.start - t0
    requests, trace = rc.request_columns(
        arrival, t.prompt, t.output, send + t.ttft, send + t.e2e, t.ok
    )
    about = {k: data[k] for k in ABOUT if k in data}
    return {"requests": requests, "trace": trace, "about": about, "order": order}
