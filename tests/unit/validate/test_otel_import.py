"""`servetune observe --import-otel`: vLLM's llm_request spans in OTLP JSON (as a Collector's
file exporter writes them) into a trace and a per-request table, worked by hand; bad files
refused by line, span and key, with nothing written."""

import json
import re

import numpy as np
import pandas as pd
import pytest

from servetune.core.errors import TraceError
from servetune.validate.observe import main as observe_main
from servetune.validate.otel_import import E2E, PROMPT, TTFT, load_otel_spans
from servetune.workload.traces import load_csv

T0 = 1_764_806_400  # an arrival epoch, seconds


def _attr(key, value):
    kind = (
        "stringValue"
        if isinstance(value, str)
        else "intValue"
        if isinstance(value, int)
        else "doubleValue"
    )
    return {"key": key, "value": {kind: str(value) if kind == "intValue" else value}}


def _span(arrival_s, prompt, output, ttft, e2e, queue=None, name="llm_request", rid=None):
    attrs = [
        _attr("gen_ai.usage.prompt_tokens", prompt),
        _attr("gen_ai.usage.completion_tokens", output),
        _attr("gen_ai.latency.time_to_first_token", ttft),
        _attr("gen_ai.latency.e2e", e2e),
    ]
    if queue is not None:
        attrs.append(_attr("gen_ai.latency.time_in_queue", queue))
    if rid is not None:
        attrs.append(_attr("gen_ai.request.id", rid))
    nanos = str(round((T0 + arrival_s) * 1e9))
    return {
        "traceId": "ab" * 16,
        "spanId": "cd" * 8,
        "name": name,
        "kind": 2,
        "startTimeUnixNano": nanos,
        "endTimeUnixNano": nanos,
        "attributes": attrs,
    }


def _with(span, key, value):
    """`span` with attribute `key`'s OTLP AnyValue replaced by `value`."""
    attrs = [dict(a, value=value) if a["key"] == key else a for a in span["attributes"]]
    return {**span, "attributes": attrs}


def _doc(spans):
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": []},
                "scopeSpans": [{"scope": {"name": "vllm.llm_engine"}, "spans": spans}],
            }
        ]
    }


# three requests, exported in two batches (two lines) out of arrival order, plus an API
# server span that is not vLLM's request span; the third arrival delivered one token
LINES = [
    _doc(
        [
            _span(2.0, 40, 8, 0.3, 1.0, queue=0.05, rid="c"),
            _span(0.0, 10, 5, 0.1, 0.5, queue=0.0, rid="a"),
            _span(0.0, 10, 5, 0.1, 0.5, name="POST /v1/completions"),
        ]
    ),
    _doc([_span(0.5, 20, 1, 0.2, 0.2, rid="b")]),
]


def _file(tmp_path, lines, name="spans.json"):
    path = tmp_path / name
    path.write_text("\n".join(json.dumps(x) if not isinstance(x, str) else x for x in lines))
    return path


def test_the_requests_in_arrival_order_from_the_first_arrival(tmp_path):
    r = load_otel_spans(_file(tmp_path, LINES))["requests"]
    np.testing.assert_allclose(r["arrival_s"], [0.0, 0.5, 2.0], atol=1e-6)
    np.testing.assert_array_equal(r["prompt_tokens"], [10, 20, 40])
    np.testing.assert_array_equal(r["output_tokens"], [5, 1, 8])
    np.testing.assert_allclose(r["first_token_s"], [0.1, 0.7, 2.3], atol=1e-6)
    np.testing.assert_allclose(r["finish_s"], [0.5, 0.7, 3.0], atol=1e-6)
    # TPOT = (e2e - ttft) / (output - 1): 0.4 / 4, none for one token, 0.7 / 7
    np.testing.assert_allclose(r["tpot_s"], [0.1, np.nan, 0.1])
    np.testing.assert_allclose(r["queue_s"], [0.0, np.nan, 0.05])
    assert list(r["end_state"]) == ["completed"] * 3


def test_one_object_for_the_whole_file_reads_the_same(tmp_path):
    whole = _doc(
        LINES[0]["resourceSpans"][0]["scopeSpans"][0]["spans"]
        + LINES[1]["resourceSpans"][0]["scopeSpans"][0]["spans"]
    )
    a = load_otel_spans(_file(tmp_path, LINES))["requests"]
    b = load_otel_spans(_file(tmp_path, [json.dumps(whole, indent=2)], "one.json"))["requests"]
    np.testing.assert_allclose(a["finish_s"], b["finish_s"])


def test_the_import_writes_a_trace_servetune_replays(tmp_path):
    out = tmp_path / "imported"
    assert observe_main(["--import-otel", str(_file(tmp_path, LINES)), "--out", str(out)]) == 0
    trace = load_csv(out / "trace.csv")
    np.testing.assert_allclose(trace.arrival, [0.0, 0.5, 2.0], atol=1e-6)
    np.testing.assert_array_equal(trace.prompt, [10, 20, 40])
    np.testing.assert_array_equal(trace.output, [5, 1, 8])
    table = pd.read_parquet(out / "requests.parquet")
    assert len(table) == 3 and json.loads((out / "otel.json").read_text())["requests"] == 3


@pytest.mark.parametrize(
    "lines, says",
    [
        (["{not json"], ":1: not JSON"),
        ([{"spans": []}], "no resourceSpans"),
        ([_doc([_span(0.0, 10, 5, 0.1, 0.5, name="other")])], "no 'llm_request' spans"),
        (
            [_doc([{**_span(0.0, 10, 5, 0.1, 0.5), "attributes": []}])],
            "spans[0]: no gen_ai.usage.prompt_tokens",
        ),
        ([_doc([_span(0.0, 10, 5, 0.1, -0.5)])], "gen_ai.latency.e2e: got -0.5"),
        (
            [_doc([_span(0.0, 10, 5, 0.3, 0.2)])],
            (
                "spans[0]: gen_ai.latency.time_to_first_token = 0.3 s is after gen_ai.latency.e2e "
                "= 0.2 s "
                "(first token after the finish); expected TTFT <= latency"
            ),
        ),
        (
            [_doc([{**_span(0.0, 10, 5, 0.1, 0.5), "startTimeUnixNano": "soon"}])],
            "startTimeUnixNano",
        ),
        # what Python's int() and float() read but no exporter writes, and what overflowed
        (
            [_doc([_with(_span(0.0, 10, 5, 0.1, 0.5), PROMPT, {"intValue": "1_000"})])],
            "spans[0]: gen_ai.usage.prompt_tokens: got '1_000'; expected a whole number of tokens",
        ),
        (
            [_doc([_with(_span(0.0, 10, 5, 0.1, 0.5), PROMPT, {"intValue": "\u0661\u0662"})])],
            "spans[0]: gen_ai.usage.prompt_tokens: got '\u0661\u0662'; expected a whole number",
        ),
        (
            [_doc([_with(_span(0.0, 10, 5, 0.1, 0.5), PROMPT, {"intValue": "9" * 30})])],
            "gen_ai.usage.prompt_tokens: got '" + "9" * 30 + "'; expected a whole number of "
            "tokens in [0, 10000000]",
        ),
        (
            [_doc([_with(_span(0.0, 10, 5, 0.1, 0.5), PROMPT, {"intValue": 12.5})])],
            "gen_ai.usage.prompt_tokens: got 12.5; expected a whole number",
        ),
        (
            [_doc([_with(_span(0.0, 10, 5, 0.1, 0.5), TTFT, {"doubleValue": [1]})])],
            "spans[0]: gen_ai.latency.time_to_first_token: got [1]; expected seconds in [0, 1e+09]",
        ),
        (
            [_doc([_with(_span(0.0, 10, 5, 0.1, 0.5), TTFT, {"doubleValue": "0_1"})])],
            "gen_ai.latency.time_to_first_token: got '0_1'; expected seconds",
        ),
        (
            [_doc([_with(_span(0.0, 10, 5, 0.1, 0.5), E2E, {"doubleValue": "Infinity"})])],
            "gen_ai.latency.e2e: got inf; expected seconds",
        ),
        (
            [
                _doc(
                    [
                        {
                            **_span(0.0, 10, 5, 0.1, 0.5),
                            "startTimeUnixNano": "1_700_000_000_000_000_000",
                        }
                    ]
                )
            ],
            (
                "spans[0]: startTimeUnixNano: got '1_700_000_000_000_000_000'; expected the "
                "arrival time "
                "in nanoseconds"
            ),
        ),
        (
            [_doc([{**_span(0.0, 10, 5, 0.1, 0.5), "startTimeUnixNano": "9" * 400}])],
            "spans[0]: startTimeUnixNano: got '999",
        ),
        (
            [
                _doc(
                    [
                        _span(0.0, 10, 5, 0.1, 0.5),
                        {**_span(0.0, 10, 5, 0.1, 0.5), "startTimeUnixNano": str(10**19)},
                    ]
                )
            ],
            (
                "spans[1]: startTimeUnixNano: 8.23519e+09 is 8.24e+09 s after the earliest; "
                "expected a "
                "record spanning at most 1e+09 s"
            ),
        ),
        (
            [
                _doc(
                    [
                        {
                            **_span(0.0, 10, 5, 0.1, 0.5),
                            "attributes": _span(0.0, 10, 5, 0.1, 0.5)["attributes"] * 2,
                        }
                    ]
                )
            ],
            "spans[0]: attribute gen_ai.usage.prompt_tokens appears twice",
        ),
        ([{"resourceSpans": "none"}], ":1: resourceSpans: a JSON str; expected a list"),
        (
            [{"resourceSpans": [{"scopeSpans": [7]}]}],
            ("resourceSpans[0].scopeSpans[0]: a JSON int; expected an object"),
        ),
        # a key given twice: json.loads would keep the second silently
        (
            [
                json.dumps(_doc([_span(0.0, 10, 5, 0.1, 0.5)])).replace(
                    '"startTimeUnixNano"', '"startTimeUnixNano": "1", "startTimeUnixNano"'
                )
            ],
            ":1: key 'startTimeUnixNano' appears twice in one object (again at column ",
        ),
        (
            [
                json.dumps(_doc([_span(0.0, 10, 5, 0.1, 0.5)]), indent=1).replace(
                    '"kind": 2', '"kind": 2, "kind": 3'
                )
            ],
            ":17: key 'kind' appears twice in one object (again at column 27)",
        ),
        (["[" * 100_000 + "]" * 100_000], ":1: unreadable JSON"),
    ],
)
def test_bad_files_are_refused_by_line_span_and_key(tmp_path, capsys, lines, says):
    with pytest.raises(TraceError, match=re.escape(says)):
        load_otel_spans(_file(tmp_path, lines))
    out = tmp_path / "out"
    assert observe_main(["--import-otel", str(_file(tmp_path, lines)), "--out", str(out)]) == 2
    assert not out.exists()
    err = capsys.readouterr().err
    assert says in " ".join(err.split()) and "Traceback" not in err


def test_the_spellings_protobuf_json_allows_read_the_same(tmp_path):
    """OTLP JSON's int64 as a JSON number, a double as a string, a start time as a number."""
    span = _with(
        _with(_span(0.0, 10, 5, 0.1, 0.5), PROMPT, {"intValue": 10}), TTFT, {"doubleValue": "0.1"}
    )
    later = {**_span(0.0, 10, 5, 0.1, 0.5), "startTimeUnixNano": (T0 + 2) * 10**9}
    r = load_otel_spans(_file(tmp_path, [_doc([span, later])]))["requests"]
    np.testing.assert_allclose(r["arrival_s"], [0.0, 2.0], atol=1e-6)
    assert list(r["prompt_tokens"]) == [10, 10]
    np.testing.assert_allclose(r["ttft_s"], [0.1, 0.1], atol=1e-6)


def test_one_record_at_a_time(tmp_path, capsys):
    spans = str(_file(tmp_path, LINES))
    with pytest.raises(SystemExit) as stop:  # argparse's usage error
        observe_main(["--import-otel", spans, "--import-bench", spans, "--out", str(tmp_path)])
    assert stop.value.code == 2 and "not allowed with argument" in capsys.readouterr().err
