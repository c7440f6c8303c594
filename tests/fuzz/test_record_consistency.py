"""Imported records whose requests contradict each other: each importer
(`observe --import-bench`, `--import-otel`) refuses them through one shared check
(validate/record_checks.py) with the exact message naming the record, its fields and values,
and writes nothing; records that only look odd (a one-token answer, failed requests with
zeros, a queue time exactly at its bound) still import. Files are written by hand here."""

import json

import numpy as np
import pytest

from servetune.core.errors import TraceError
from servetune.validate.bench_import import load_bench_result
from servetune.validate.observe import main as observe_main
from servetune.validate.otel_import import load_otel_spans

# four requests sent at perf_counter 100, 100.5, 101 (after 0.25 s in the client's queue) and
# 102; the second delivered one token, the third failed (zeros, as vLLM writes); the run's
# duration ends exactly with the last request
BENCH = {
    "duration": 3.0,
    "start_times": [100.0, 100.5, 101.0, 102.0],
    "queue_times": [0.0, 0.0, 0.25, 0.0],
    "input_lens": [10, 20, 30, 40],
    "output_lens": [5, 1, 0, 8],
    "ttfts": [0.1, 0.2, 0.0, 0.3],
    "latencies": [0.5, 0.2, 0.0, 1.0],
    "itls": [[0.1] * 4, [], [], [0.1] * 7],
    "errors": ["", "", "ReadTimeout", ""],
}
MS = "expected seconds; these look like milliseconds"
FIRST = "(first token after the finish); expected TTFT <= latency"
ITLS = "(tokens after the finish); expected the ITLs within the time from first token to finish"
QUEUE = "expected a queue time within the time since the first start"
RUN = (
    "(the run's length); expected every request to finish within the run, its latency in "
    "seconds (milliseconds?)"
)


def _bench(tmp_path, name="bench.json", **change):
    path = tmp_path / name
    path.write_text(json.dumps({**BENCH, **change}))
    return path


def _refused(load, path, flag, expected, tmp_path, capsys):
    """`load(path)` raises exactly `expected`; `observe --flag` exits 2 and writes nothing."""
    with pytest.raises(TraceError) as err:
        load(path)
    assert str(err.value) == expected
    out = tmp_path / "imported"
    assert observe_main([flag, str(path), "--out", str(out)]) == 2
    assert expected in " ".join(capsys.readouterr().err.split()) and not out.exists()


@pytest.mark.parametrize(
    "change, says",
    [
        # TTFT after the latency: the first token after the finish
        (
            {"ttfts": [0.1, 0.2, 0.0, 2.5], "latencies": [0.5, 0.2, 0.0, 1.2]},
            f"record 3: ttfts[3] = 2.5 s is after latencies[3] = 1.2 s {FIRST}",
        ),
        (
            {"ttfts": [0.1, 0.20001, 0.0, 0.3]},  # a one-token answer, past the 1 us of rounding
            f"record 1: ttfts[1] = 0.20001 s is after latencies[1] = 0.2 s {FIRST}",
        ),
        (
            {"ttfts": [0.6, 0.2, 0.0, 0.3], "itls": [[], [], [], [0.1] * 7]},
            f"record 0: ttfts[0] = 0.6 s is after latencies[0] = 0.5 s {FIRST}",
        ),
        # ITLs longer than the time from the first token to the finish
        (
            {"itls": [[0.1] * 5, [], [], [0.1] * 7]},
            f"record 0: sum(itls[0]) = 0.5 s is longer than latencies[0] - ttfts[0] = 0.4 s {ITLS}",
        ),
        (
            {"itls": [[0.1] * 4, [0.05], [], [0.1] * 7]},
            f"record 1: sum(itls[1]) = 0.05 s is longer than latencies[1] - ttfts[1] = 0 s {ITLS}",
        ),
        (
            {"itls": [[0.1] * 4, [], [], [0.2] * 7]},
            f"record 3: sum(itls[3]) = 1.4 s is longer than latencies[3] - ttfts[3] = 0.7 s {ITLS}",
        ),
        # a queue time longer than the time since the first send: an arrival before the record
        (
            {"queue_times": [0.0, 0.0, 0.25, 5000.0]},
            (
                "record 3: queue_times[3] = 5000 s is longer than the 2 s from the first start "
                "(start_times[0] = 100) to start_times[3] = 102 (an arrival 4998 s before the "
                "record "
                f"begins); {QUEUE}"
            ),
        ),
        (
            {"queue_times": [0.5, 0.0, 0.25, 0.0]},
            (
                "record 0: queue_times[0] = 0.5 s is longer than the 0 s from the first start "
                "(start_times[0] = 100) to start_times[0] = 100 (an arrival 0.5 s before the "
                "record "
                f"begins); {QUEUE}"
            ),
        ),
        (
            {"queue_times": [0.0, 0.0, 1.1, 0.0]},  # a failed request's arrival is in the table too
            (
                "record 2: queue_times[2] = 1.1 s is longer than the 1 s from the first start "
                "(start_times[0] = 100) to start_times[2] = 101 (an arrival 0.1 s before the "
                "record "
                f"begins); {QUEUE}"
            ),
        ),
        (
            {"queue_times": [0.0, -0.1, 0.25, 0.0]},
            "queue_times[1]: got -0.1; expected seconds in [0, 1e+09]",
        ),
        # a request ending after the run did
        (
            {"duration": 2.5},
            (
                "record 3: start_times[3] + latencies[3] ends 3 s after the first start, past "
                "duration = "
                f"2.5 s {RUN}"
            ),
        ),
        (
            {"latencies": [500.0, 0.2, 0.0, 1.0]},  # one latency in milliseconds
            (
                f"record 0: start_times[0] + latencies[0] ends 500 s after the first start, past "
                f"duration = 3 s {RUN}"
            ),
        ),
        (
            {"duration": 0.0},
            (
                f"record 0: start_times[0] + latencies[0] ends 0.5 s after the first start, past "
                f"duration = 0 s {RUN}"
            ),
        ),
        # milliseconds
        (
            {
                "ttfts": [100, 200, 0, 300],
                "latencies": [500, 200, 0, 1000],
                "itls": [[100] * 4, [], [], [100] * 7],
                "duration": 3000,
            },
            (
                "record 0: ttfts[0] = 100 s is the quickest first token of the completed requests, "
                "and "
                f"none prefilled at 1,000 tokens/s or faster (at most 0.133); {MS}"
            ),
        ),
        (
            {"ttfts": [250, 200, 0, 300]},  # TTFTs in ms, latencies in seconds
            (
                "record 1: ttfts[1] = 200 s is the quickest first token of the completed requests, "
                "and "
                f"none prefilled at 1,000 tokens/s or faster (at most 0.133); {MS}"
            ),
        ),
        (
            {"latencies": [500, 200.2, 0, 1000], "itls": [[], [], [], []], "duration": None},
            (
                "record 0: latencies[0] = 500 s after ttfts[0] = 0.1 s for 5 output tokens is the "
                "fastest decode of the completed requests (0.008 tokens/s; none at 1 or faster); "
                f"{MS}"
            ),
        ),
        (
            {
                "start_times": [7.0],
                "queue_times": [0.0],
                "input_lens": [500],
                "output_lens": [3],
                "ttfts": [250],
                "latencies": [1200],
                "itls": [[475, 475]],
                "errors": [""],
                "duration": None,
            },  # one request, all in milliseconds
            (
                "record 0: ttfts[0] = 250 s is the quickest first token of the completed requests, "
                "and "
                f"none prefilled at 1,000 tokens/s or faster (at most 2); {MS}"
            ),
        ),
    ],
)
def test_a_bench_record_that_contradicts_itself_is_refused_by_record_and_key(
    tmp_path, capsys, change, says
):
    path = _bench(tmp_path, **change)
    _refused(load_bench_result, path, "--import-bench", f"{path}: {says}", tmp_path, capsys)


@pytest.mark.parametrize(
    "change",
    [
        {},  # a one-token answer (TTFT = latency, no ITLs), a failed request with zeros
        {
            "ttfts": [0.1, 0.2, 0.7, 0.3],
            "itls": [[0.1] * 4, [], [0.3], [0.1] * 7],
        },  # broke mid-stream
        {"queue_times": [0.0, 0.0, 0.25, 2.0]},  # arrives exactly when the record begins
        {
            "start_times": [1000.1, 1000.3, 1000.4, 1000.5],  # ... to the float rounding of 0.2
            "queue_times": [0.0, 1000.3 - 1000.1, 0.0, 0.0],
            "duration": 1.5,
        },
        {"duration": None, "itls": None},  # older files: neither is checked
        {"ttfts": [0.1, 0.2 + 5e-7, 0.0, 0.3]},  # above the latency by clock rounding only
        {
            "input_lens": [100_000, 20, 30, 40],
            "ttfts": [12.0, 12.5, 0.0, 13.0],  # a long prompt
            "latencies": [12.4, 12.5, 0.0, 13.7],
            "duration": 16.0,
        },
    ],
)
def test_a_bench_record_that_only_looks_odd_imports(tmp_path, change):
    r = load_bench_result(_bench(tmp_path, **change))["requests"]
    done = r["end_state"] == "completed"
    assert np.all(r["first_token_s"][done] <= r["finish_s"][done])
    assert np.all(r["arrival_s"] >= 0.0)


def test_the_import_says_when_the_records_are_not_in_arrival_order(tmp_path, capsys):
    shuffled = {k: [v[i] for i in (0, 3, 1, 2)] for k, v in BENCH.items() if isinstance(v, list)}
    path = _bench(tmp_path, "shuffled.json", **shuffled)
    result = load_bench_result(path)
    assert result["order"] == (
        f"not arrival order: {path}: record 2 arrived 1.5 s before the "
        f"record listed above it (the import sorts by arrival)"
    )
    np.testing.assert_allclose(result["trace"]["arrival_s"], [0.0, 0.5, 2.0])
    assert load_bench_result(_bench(tmp_path))["order"] == "arrival"
    out = tmp_path / "imported"
    assert observe_main(["--import-bench", str(path), "--out", str(out)]) == 0
    assert capsys.readouterr().out.endswith("; listed out of arrival order (sorted)\n")
    assert json.loads((out / "bench.json").read_text())["order"] == result["order"]


# --- OTLP spans ---

T0 = 1_764_806_400  # an arrival epoch, seconds
PROMPT, OUTPUT = "gen_ai.usage.prompt_tokens", "gen_ai.usage.completion_tokens"
TTFT, E2E = "gen_ai.latency.time_to_first_token", "gen_ai.latency.e2e"
IN_QUEUE = "gen_ai.latency.time_in_queue"
WITHIN = (
    "(scheduled after its first token); expected the queue time within the span, before "
    "the first token"
)
AT = "resourceSpans[0].scopeSpans[0].spans"


def _span(arrival_s, prompt, output, ttft, e2e, queue=None):
    def attr(key, value):
        kind = "intValue" if isinstance(value, int) else "doubleValue"
        return {"key": key, "value": {kind: str(value) if kind == "intValue" else value}}

    attrs = [attr(PROMPT, prompt), attr(OUTPUT, output), attr(TTFT, ttft), attr(E2E, e2e)]
    if queue is not None:
        attrs.append(attr(IN_QUEUE, queue))
    return {
        "name": "llm_request",
        "startTimeUnixNano": str(round((T0 + arrival_s) * 1e9)),
        "attributes": attrs,
    }


def _spans(tmp_path, *lines):
    """One OTLP JSON document per line, each a list of spans."""
    path = tmp_path / "spans.json"
    path.write_text(
        "\n".join(
            json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}) for spans in lines
        )
    )
    return path


GOOD = [_span(0.0, 10, 5, 0.1, 0.5, queue=0.0), _span(0.5, 20, 1, 0.2, 0.2)]


@pytest.mark.parametrize(
    "lines, says",
    [
        # TTFT after the E2E latency
        (
            [[_span(0.0, 10, 5, 0.3, 0.2)]],
            f":1: {AT}[0]: {TTFT} = 0.3 s is after {E2E} = 0.2 s {FIRST}",
        ),
        (
            [GOOD, [_span(2.0, 40, 8, 1.5, 1.0)]],
            f":2: {AT}[0]: {TTFT} = 1.5 s is after {E2E} = 1 s {FIRST}",
        ),
        (
            [[*GOOD, _span(1.0, 20, 1, 0.20001, 0.2)]],  # a one-token answer past 1 us of rounding
            f":1: {AT}[2]: {TTFT} = 0.20001 s is after {E2E} = 0.2 s {FIRST}",
        ),
        # the scheduler's queue time longer than the TTFT: scheduled after its first token
        (
            [[_span(0.0, 10, 5, 0.3, 0.5, queue=0.5)]],
            f":1: {AT}[0]: {IN_QUEUE} = 0.5 s is longer than {TTFT} = 0.3 s {WITHIN}",
        ),
        (
            [[_span(0.0, 10, 5, 0.1, 0.5, queue=0.102)]],  # past the 1 ms of two clocks
            f":1: {AT}[0]: {IN_QUEUE} = 0.102 s is longer than {TTFT} = 0.1 s {WITHIN}",
        ),
        (
            [GOOD, [_span(2.0, 40, 8, 0.3, 1.0, queue=5.0)]],
            f":2: {AT}[0]: {IN_QUEUE} = 5 s is longer than {TTFT} = 0.3 s {WITHIN}",
        ),
        (
            [[_span(0.0, 10, 5, 0.1, 0.5, queue=-0.1)]],
            f":1: {AT}[0]: {IN_QUEUE}: got -0.1; expected seconds in [0, 1e+09]",
        ),
        # milliseconds
        (
            [[_span(0.0, 10, 5, 100.0, 500.0), _span(0.5, 20, 1, 200.0, 200.0)]],
            (
                f":1: {AT}[0]: {TTFT} = 100 s is the quickest first token of the completed "
                "requests, "
                f"and none prefilled at 1,000 tokens/s or faster (at most 0.1); {MS}"
            ),
        ),
        (
            [[_span(0.0, 10, 5, 100.0, 0.5), _span(0.5, 20, 1, 200.0, 0.2)]],  # only the TTFTs
            (
                f":1: {AT}[0]: {TTFT} = 100 s is the quickest first token of the completed "
                "requests, "
                f"and none prefilled at 1,000 tokens/s or faster (at most 0.1); {MS}"
            ),
        ),
        (
            [[_span(0.0, 10, 5, 0.1, 500.0), _span(0.5, 20, 8, 0.2, 900.0)]],  # only the E2Es
            (
                f":1: {AT}[0]: {E2E} = 500 s after {TTFT} = 0.1 s for 5 output tokens is the "
                "fastest "
                f"decode of the completed requests (0.008 tokens/s; none at 1 or faster); {MS}"
            ),
        ),
    ],
)
def test_otlp_spans_that_contradict_themselves_are_refused_by_span_and_attribute(
    tmp_path, capsys, lines, says
):
    path = _spans(tmp_path, *lines)
    _refused(load_otel_spans, path, "--import-otel", f"{path}{says}", tmp_path, capsys)


@pytest.mark.parametrize(
    "lines",
    [
        [GOOD],  # a one-token answer: TTFT = E2E
        [[_span(0.0, 10, 5, 0.3, 0.5, queue=0.3)]],  # scheduled at the first token
        [[_span(0.0, 10, 5, 0.2 + 5e-7, 0.2)]],  # above the E2E by clock rounding only
        [[_span(0.0, 100_000, 5, 12.0, 12.4), _span(1.0, 100_000, 5, 13.0, 13.4)]],  # long prompts
    ],
)
def test_otlp_spans_that_only_look_odd_import(tmp_path, lines):
    r = load_otel_spans(_spans(tmp_path, *lines))["requests"]
    assert np.all(r["first_token_s"] <= r["finish_s"])


def test_otlp_spans_listed_as_they_finished_are_sorted_and_said_so(tmp_path):
    path = _spans(tmp_path, [_span(2.0, 40, 8, 0.3, 1.0)], GOOD)
    result = load_otel_spans(path)
    assert result["order"] == (
        f"not arrival order: {path}:2: {AT}[0] arrived 2 s before the "
        f"record listed above it (the import sorts by arrival)"
    )
    np.testing.assert_allclose(result["trace"]["arrival_s"], [0.0, 0.5, 2.0], atol=1e-6)
    assert load_otel_spans(_spans(tmp_path, GOOD))["order"] == "arrival"
