"""Own traces: the formats servetune recognizes, column mapping, time units and
date-times, invalid rows skipped and counted, the window read lazily, and what a run says it
simulates. Every expected value is worked by hand from the small files written here."""

from __future__ import annotations

import json
import tracemalloc

import numpy as np
import pytest

from servetune.config import scenario
from servetune.core.errors import ConfigError, TraceError
from servetune.run import api
from servetune.workload import trace_csv_fast, trace_file, trace_text
from servetune.workload.trace_file import ReadOptions, read_trace
from servetune.workload.traces import bundled_path, load_trace


def _write(tmp_path, name: str, text: str):
    path = tmp_path / name
    path.write_text(text)
    return path


def _jsonl(tmp_path, name: str, rows: list) -> object:
    return _write(tmp_path, name, "".join(json.dumps(r) + "\n" for r in rows))


# ---- formats recognized by header or keys

BURSTGPT = (
    "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
    "5,ChatGPT,472,18,490,Conversation log\n"
    "45,ChatGPT,1087,0,1087,Conversation log\n"  # a failed request: 0 response tokens
    "118,GPT-4,417,276,693,API log\n"
)


def test_burstgpt_is_recognized_and_its_failed_requests_are_an_error_or_skipped(tmp_path):
    path = _write(tmp_path, "burst.csv", BURSTGPT)
    with pytest.raises(
        TraceError,
        match=r"burst\.csv:3: column 'Response tokens' = '0'; "
        r"expected an integer token count in \[1, 10000000\] "
        r"\(workload\.invalid_rows=skip leaves such rows out\)",
    ):
        read_trace(path)
    got = read_trace(path, options=ReadOptions(invalid_rows="skip"))
    assert got.format == "burstgpt" and got.n_requests == 2 and got.span_s == 113
    assert got.skipped == {"'Response tokens' < 1": [1, 3]} and got.n_skipped == 1
    np.testing.assert_array_equal(got.trace.arrival, [0.0, 113.0])
    np.testing.assert_array_equal(got.trace.prompt, [472, 417])
    np.testing.assert_array_equal(got.trace.output, [18, 276])


def test_openai_chat_completions_log(tmp_path):
    rows = [
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1700000000,
            "model": "m",
            "usage": {"prompt_tokens": 12, "completion_tokens": 30, "total_tokens": 42},
        },
        {
            "id": "chatcmpl-2",
            "object": "chat.completion",
            "created": 1700000003,
            "model": "m",
            "usage": {"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9},
        },
    ]
    got = read_trace(_jsonl(tmp_path, "chat.jsonl", rows))
    assert got.format == "openai"
    np.testing.assert_array_equal(got.trace.arrival, [0.0, 3.0])
    np.testing.assert_array_equal(got.trace.prompt, [12, 7])
    np.testing.assert_array_equal(got.trace.output, [30, 2])


def test_openai_responses_and_batch_outputs(tmp_path):
    responses = [
        {
            "id": "resp_1",
            "object": "response",
            "created_at": 1741476542,
            "usage": {"input_tokens": 36, "output_tokens": 87, "total_tokens": 123},
        },
        {
            "id": "resp_2",
            "object": "response",
            "created_at": 1741476550,
            "usage": {"input_tokens": 5, "output_tokens": 1, "total_tokens": 6},
        },
    ]
    got = read_trace(_jsonl(tmp_path, "resp.jsonl", responses))
    assert got.format == "openai_responses" and list(got.trace.arrival) == [0.0, 8.0]
    body = lambda t, p, c: {"created": t, "usage": {"prompt_tokens": p, "completion_tokens": c}}
    batch = [
        {
            "id": "batch_req_1",
            "custom_id": "a",
            "error": None,
            "response": {"status_code": 200, "body": body(1711652795, 22, 2)},
        },
        {
            "id": "batch_req_2",
            "custom_id": "b",
            "error": {"code": "server_error"},
            "response": None,
        },  # a failed request of the batch: no usage
        {
            "id": "batch_req_3",
            "custom_id": "c",
            "error": None,
            "response": {"status_code": 200, "body": body(1711652801, 9, 40)},
        },
    ]
    path = _jsonl(tmp_path, "batch.jsonl", batch)
    with pytest.raises(
        TraceError,
        match=r"batch\.jsonl:2: missing key "
        r"'response\.body\.created'",
    ):
        read_trace(path)
    got = read_trace(path, options=ReadOptions(invalid_rows="skip"))
    assert got.format == "openai_batch" and got.skipped == {
        "missing 'response.body.created'": [1, 2]
    }
    np.testing.assert_array_equal(got.trace.arrival, [0.0, 6.0])
    np.testing.assert_array_equal(got.trace.output, [2, 40])


# ---- column mapping, time units, date-times


def test_columns_name_any_csv_and_the_time_unit_scales_numbers(tmp_path):
    path = _write(
        tmp_path,
        "mine.csv",
        "request,timestamp,input_tokens,output_tokens\n"
        "a,1700000000000,100,10\nb,1700000000250,80,5\n"
        "c,1700000001500,60,1\n",
    )
    columns = {"arrival": "timestamp", "prompt": "input_tokens", "output": "output_tokens"}
    with pytest.raises(
        TraceError,
        match=r"mine\.csv:1: header .*; expected columns .*or name "
        r"yours with workload\.columns",
    ):
        read_trace(path)
    with pytest.raises(
        TraceError,
        match=r"mine\.csv:2: column 'timestamp' read in seconds "
        r"\(the default unit, workload\.time_unit unset\): "
        r"1\.7e\+12 is 1\.7e\+12 s after 1970, past 2100; .* "
        r"workload\.time_unit=ms reads it as 2023-11-14 ",
    ):
        read_trace(path, options=ReadOptions(columns=columns))  # ms epochs read as s
    ms = read_trace(path, options=ReadOptions(columns=columns, time_unit="ms"))
    assert ms.format == "columns"
    np.testing.assert_allclose(ms.trace.arrival, [0.0, 0.25, 1.5], rtol=0, atol=1e-6)
    np.testing.assert_array_equal(ms.trace.prompt, [100, 80, 60])
    for unit, scale in (("us", 1e-6), ("ns", 1e-9)):
        got = read_trace(path, options=ReadOptions(columns=columns, time_unit=unit))
        np.testing.assert_allclose(got.trace.arrival, np.array([0, 250, 1500]) * scale, rtol=1e-6)


def test_one_mapped_column_overrides_the_detected_format(tmp_path):
    path = _write(
        tmp_path,
        "p.csv",
        "arrival_s,prompt_tokens,output_tokens,billed_output\n0,10,5,6\n2,20,7,8\n",
    )
    got = read_trace(path, options=ReadOptions(columns={"output": "billed_output"}))
    assert got.format == "plain" and list(got.trace.output) == [6, 8]


def test_iso_date_times_with_and_without_offsets_in_any_arrival_column(tmp_path):
    path = _write(
        tmp_path,
        "iso.csv",
        "arrival_s,prompt_tokens,output_tokens\n"
        "2024-03-01T12:00:00+01:00,10,5\n"
        "2024-03-01T11:00:02.5Z,10,5\n"
        "2024-03-01 12:00:04+01:00,10,5\n",
    )
    np.testing.assert_allclose(load_trace(path).arrival, [0.0, 2.5, 4.0])
    mixed = _write(
        tmp_path,
        "mixed.csv",
        "arrival_s,prompt_tokens,output_tokens\n2024-03-01T12:00:00,10,5\n1709294400,10,5\n",
    )
    with pytest.raises(
        TraceError,
        match=r"mixed\.csv:3: column 'arrival_s' is a number of "
        r"seconds but line 2 is a date-time without UTC "
        r"offset",
    ):
        load_trace(mixed)


def test_dotted_json_keys_and_iso_strings_in_json(tmp_path):
    rows = [
        {"ts": "2024-01-01T00:00:00Z", "req": {"in": 5, "out": 3}},
        {"ts": "2024-01-01T00:00:01.25Z", "req": {"in": 6, "out": 4}},
    ]
    path = _jsonl(tmp_path, "nested.jsonl", rows)
    got = read_trace(
        path,
        options=ReadOptions(columns={"arrival": "ts", "prompt": "req.in", "output": "req.out"}),
    )
    np.testing.assert_allclose(got.trace.arrival, [0.0, 1.25])
    np.testing.assert_array_equal(got.trace.prompt, [5, 6])


# ---- invalid rows


def test_every_kind_of_bad_row_is_counted_by_reason_when_skipped(tmp_path):
    path = _write(
        tmp_path,
        "bad.csv",
        "arrival_s,prompt_tokens,output_tokens\n"
        "0,10,5\n1,abc,5\n2,10\n3,10,0\n4,,5\n5,10,-1\n6,10,5\n",
    )
    got = read_trace(path, options=ReadOptions(invalid_rows="skip"))
    assert got.n_requests == 2 and list(got.trace.arrival) == [0.0, 6.0]
    assert got.skipped == {
        "'prompt_tokens' not a number": [1, 3],
        "wrong number of fields": [1, 4],
        "'output_tokens' < 1": [2, 5],
        "'prompt_tokens' empty": [1, 6],
    }


def test_a_file_of_only_invalid_rows_is_an_error_naming_the_reasons(tmp_path):
    path = _write(tmp_path, "none.csv", "arrival_s,prompt_tokens,output_tokens\n0,10,0\n1,5,0\n")
    with pytest.raises(
        TraceError,
        match=r"none\.csv: no valid requests; every row was invalid "
        r"\('output_tokens' < 1: 2 \(first at line 2\)\)",
    ):
        read_trace(path, options=ReadOptions(invalid_rows="skip"))
    broken = _write(tmp_path, "none.jsonl", "{not json\n[1, 2]\n")
    with pytest.raises(
        TraceError,
        match=r"none\.jsonl: no valid requests; every row was "
        r"invalid \(not valid JSON: 1 \(first at line 1\), not "
        r"a JSON object: 1 \(first at line 2\)\)",
    ):
        read_trace(broken, options=ReadOptions(invalid_rows="skip"))


def test_rows_out_of_order_are_an_error_even_when_skipping(tmp_path):
    path = _write(
        tmp_path, "order.csv", "arrival_s,prompt_tokens,output_tokens\n0,10,5\n5,10,5\n4,10,5\n"
    )
    with pytest.raises(TraceError, match=r"order\.csv:4: column 'arrival_s' goes back in time"):
        read_trace(path, options=ReadOptions(invalid_rows="skip"))


@pytest.mark.parametrize(
    "options,match",
    [
        ({"time_unit": "minutes"}, r"^workload\.time_unit: got 'minutes'; expected one of s, ms, "),
        ({"time_unit": ["s"]}, r"^workload\.time_unit: got \['s'\]"),
        ({"invalid_rows": "drop"}, r"^workload\.invalid_rows: got 'drop'; expected error or skip"),
        ({"columns": {"start": "t"}}, r"^workload\.columns\.start: not a column role"),
        ({"columns": {"arrival": 5}}, r"^workload\.columns\.arrival: got 5; expected the name"),
    ],
)
def test_bad_read_options_are_refused_by_key(options, match):
    with pytest.raises(ConfigError, match=match):
        ReadOptions(**options)


def test_a_mapped_column_the_header_lacks_names_the_key(tmp_path):
    path = _write(tmp_path, "p.csv", "arrival_s,prompt_tokens,output_tokens\n0,10,5\n")
    with pytest.raises(
        TraceError,
        match=r"p\.csv:1: header \['arrival_s', 'prompt_tokens', "
        r"'output_tokens'\]; expected a column 'ts' "
        r"\(workload\.columns\.arrival\)",
    ):
        read_trace(path, options=ReadOptions(columns={"arrival": "ts"}))


# ---- the window: read lazily, the same requests as slicing the whole file


def test_the_window_keeps_what_slicing_the_whole_trace_keeps():
    path = bundled_path("azure_llm_2023_conv.csv")
    whole = read_trace(path)
    part = read_trace(path, options=ReadOptions(window=(600.0, 900.0)))
    inside = (whole.trace.arrival >= 600) & (whole.trace.arrival < 900)
    assert part.n_requests == whole.n_requests == 19_366 and part.span_s == whole.span_s
    np.testing.assert_array_equal(part.trace.arrival, whole.trace.arrival[inside])
    np.testing.assert_array_equal(part.trace.output, whole.trace.output[inside])


@pytest.mark.parametrize("reader", ["vectorized", pytest.param("lines", marks=pytest.mark.slow)])
def test_reading_a_window_holds_memory_for_the_window_not_the_file(tmp_path, monkeypatch, reader):
    monkeypatch.setattr(trace_text, "CHUNK_BYTES", 1 << 16)  # a file of many chunks
    if reader == "lines":
        monkeypatch.setattr(trace_csv_fast, "read", lambda *args: None)
    n = 200_000
    rng = np.random.default_rng(0)
    times = np.cumsum(rng.exponential(0.01, n))
    path = tmp_path / "big.csv"
    with path.open("w") as f:
        f.write("arrival_s,prompt_tokens,output_tokens\n")
        f.writelines(
            f"{t:.4f},{p},{o}\n"
            for t, p, o in zip(
                times, rng.integers(1, 4000, n), rng.integers(1, 500, n), strict=True
            )
        )

    def peak(window):  # Python's and numpy's allocations (pyarrow's own pool holds a block)
        tracemalloc.start()
        got = read_trace(path, options=ReadOptions(window=window))
        used = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        return got, used

    small, small_peak = peak((0.0, 10.0))
    whole, whole_peak = peak((0.0, np.inf))
    assert small.n_requests == whole.n_requests == n and len(whole.trace) == n
    assert len(small.trace) == int((times - times[0] < 10).sum())
    assert small_peak < whole_peak / 5, (small_peak, whole_peak)


# ---- the workload groups and what a run says it simulates


def test_workload_file_simulates_the_whole_file_under_its_own_name(tmp_path):
    path = _write(
        tmp_path,
        "my_trace.csv",
        "arrival_s,prompt_tokens,output_tokens\n"
        + "".join(f"{t},{100 + t},{1 + t % 7}\n" for t in range(0, 972, 9)),
    )  # 108 rows over 963 s
    cfg = api.compose(["workload=file", f"workload.path={path}"])
    assert cfg.workload.name == "my_trace" and cfg.workload.duration_s is None
    labels = scenario.build(cfg).labels
    assert labels["workload"] == "my_trace"
    assert labels["simulated"] == "all 108 requests, 963 s; plain format"
    cut = scenario.build(api.compose([f"workload.path={path}"])).labels  # default group: 600 s
    assert cut["workload"] == "my_trace"
    assert cut["simulated"] == (
        "the first 600 s of 963 s, 67 of 108 requests (workload.duration_s); plain format"
    )


def test_the_simulated_line_names_every_key_that_shaped_the_slice():
    labels = scenario.build(
        api.compose(
            [
                "workload.start_s=1200",
                "workload.duration_s=60",
                "workload.rate_scale=2",
                "workload.max_requests=50",
            ]
        )
    ).labels
    assert labels["simulated"] == (
        "60 s from 1,200 s of 3,502 s, 50 of 19,366 requests, at 2x the rate "
        "(workload.start_s, workload.duration_s, workload.max_requests, workload.rate_scale); "
        "azure format"
    )


def test_workload_file_without_a_path_is_refused_by_key():
    with pytest.raises(ConfigError, match=r"^workload\.path: not set; expected the trace file"):
        scenario.build(api.compose(["workload=file"]))


def test_columns_must_be_a_mapping():
    with pytest.raises(ConfigError, match=r"^workload\.columns: got 'x'; expected a mapping"):
        scenario.build(api.compose(["workload=file", "workload.path=a.csv", "workload.columns=x"]))


def test_the_trace_name_resolver():
    assert trace_file.trace_name(None, "azure_conv") == "azure_conv"
    assert trace_file.trace_name("/data/logs/day1.jsonl", "x") == "day1"


# ---- the vectorized CSV reader gives what the line reader gives, or declines


def _read_both(path, monkeypatch, options=None):
    """(result or error text) of read_trace with the vectorized reader, then with the line
    reader alone."""

    def attempt():
        try:
            got = read_trace(path, options=options)
        except TraceError as err:
            return str(err)
        return (
            got.format,
            got.n_requests,
            got.span_s,
            got.skipped,
            got.trace.arrival.tolist(),
            got.trace.prompt.tolist(),
            got.trace.output.tolist(),
        )

    fast = attempt()
    with monkeypatch.context() as patch:
        patch.setattr(trace_csv_fast, "read", lambda *args: None)
        slow = attempt()
    return fast, slow


def test_the_vectorized_reader_agrees_on_the_fuzz_corpus_and_bundled_traces(monkeypatch):
    from pathlib import Path

    paths = sorted((Path(__file__).parents[1] / "fuzz" / "traces").glob("*.[cC][sS][vV]"))
    paths += [bundled_path("azure_llm_2023_conv.csv"), bundled_path("azure_llm_2023_code.csv")]
    for path in paths:
        fast, slow = _read_both(path, monkeypatch)
        assert fast == slow, path
    used = []
    real = trace_csv_fast.read
    monkeypatch.setattr(trace_csv_fast, "read", lambda *a: used.append(real(*a)) or used[-1])
    read_trace(bundled_path("azure_llm_2023_conv.csv"))
    assert used and used[0] is not None  # the bundled traces take the vectorized path


_CELLS = {
    "arrival": [
        "0",
        "1.5",
        "12",
        " 7.25 ",
        ".5",
        "3.",
        "1e2",
        "2.5E-1",
        "-1",
        "nan",
        "inf",
        "1e400",
        "1_0",
        "+3",
        "",
        "x",
        "2024-03-01 12:00:00",
        "2024-03-01T12:00:00.1234567",
        "2024-03-01T12:00:00Z",
        "2024-03-01T12:00:00+05:30",
        "2024-13-01 00:00:00",
        "2024-02-30T00:00:00",
        "2024-03-01 24:00:00",
    ],
    "tokens": [
        "1",
        "7",
        "007",
        " 12 ",
        "10000000",
        "10000001",
        "0",
        "-3",
        "1.0",
        "1e3",
        "",
        "a",
        "99999999",
        "\u0661",
    ],
}


def _random_times(rng, n: int) -> list[str]:
    """n sorted arrival cells of one kind (numbers in one style, or date-times)."""
    # mean gaps up to 3 h: sparser than a request a day is refused as a wrong time unit
    times = np.cumsum(rng.exponential(rng.choice([0.001, 1.0, 1e4]), n))
    style = int(rng.integers(0, 7))
    if style < 5:
        form = ["{:.3f}", "{:g}", "{:.4e}", " {:.1f} ", "{:.0f}"][style]
        cells = [form.format(t) for t in times]
        return cells if style != 4 else [str(int(t)) for t in times]
    base = np.datetime64("2024-03-01T11:59:58")
    digits = int(rng.integers(0, 9))
    cells = []
    for t in times:
        stamp = str(base + np.timedelta64(int(t * 1e9), "ns"))  # ISO, 9 fractional digits
        head, _, frac = stamp.partition(".")
        text = head + ("." + frac[:digits] if digits else "")
        cells.append(text.replace("T", " ") if style == 5 else text + "+02:00")
    return cells


@pytest.mark.parametrize("seed", range(40))
def test_the_vectorized_reader_agrees_on_random_files(tmp_path, monkeypatch, seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 40))
    clean = seed % 2 == 0  # half the files hold only cells both readers accept
    times = _random_times(rng, n) if clean else list(rng.choice(_CELLS["arrival"], n))
    tokens = _CELLS["tokens"][:5] if clean else _CELLS["tokens"]
    rows = [f"{t},{rng.choice(tokens)},{rng.choice(tokens)},{rng.integers(0, 9)}" for t in times]
    if not clean and rng.random() < 0.3:
        rows.insert(int(rng.integers(0, n)), rng.choice(["", "1,2", "1,2,3,4,5", '"1",2,3,4']))
    path = _write(
        tmp_path,
        "r.csv",
        "arrival_s,prompt_tokens,output_tokens,extra\n"
        + "\n".join(rows)
        + ("\n" if rng.random() < 0.5 else ""),
    )
    skip = ReadOptions(invalid_rows="skip", window=(0.0, float(rng.uniform(0, 200))))
    used = []
    real = trace_csv_fast.read
    monkeypatch.setattr(trace_csv_fast, "read", lambda *a: used.append(real(*a)) or used[-1])
    for options in (None, skip):
        fast, slow = _read_both(path, monkeypatch, options)
        assert fast == slow
    if clean:  # a clean file takes the vectorized path
        assert used[0] is not None, rows


# ---- found by an adversarial pass (2026-12-05)


def test_two_roles_read_from_one_column_give_what_the_line_reader_gives(tmp_path, monkeypatch):
    path = _write(tmp_path, "same.csv", "t,n\n0,10\n1,20\n")
    options = ReadOptions(columns={"arrival": "t", "prompt": "n", "output": "n"})
    fast, slow = _read_both(path, monkeypatch, options)
    assert fast == slow and fast[5] == [10, 20] and fast[6] == [10, 20]


def test_a_first_json_line_without_a_column_is_skipped_like_any_other(tmp_path):
    failed = {"custom_id": "b", "error": {"code": "server_error"}, "response": None}
    ok = {
        "custom_id": "a",
        "response": {
            "body": {"created": 1700000000, "usage": {"prompt_tokens": 10, "completion_tokens": 5}}
        },
    }
    path = _jsonl(tmp_path, "b.jsonl", [failed, ok])
    got = read_trace(path, options=ReadOptions(invalid_rows="skip"))
    assert got.n_requests == 1 and got.skipped == {"missing 'response.body.created'": [1, 1]}
    with pytest.raises(
        TraceError,
        match=r"b\.jsonl:1: missing key 'response\.body\.created'.*"
        r"\(workload\.invalid_rows=skip leaves such rows out\)",
    ) as err:
        read_trace(path)
    assert type(err.value) is TraceError


def test_a_jsonl_of_mixed_timestamp_kinds_names_the_key_plainly(tmp_path):
    path = _jsonl(
        tmp_path,
        "m.jsonl",
        [
            {"timestamp": "2024-01-01T00:00:00Z", "input_length": 5, "output_length": 2},
            {"timestamp": 5, "input_length": 5, "output_length": 2},
        ],
    )
    with pytest.raises(
        TraceError,
        match=r"m\.jsonl:2: 'timestamp' is a number of milliseconds "
        r"but line 1 is a date-time with a UTC offset",
    ):
        read_trace(path)


@pytest.mark.parametrize(
    "call,error,match",
    [
        (lambda: read_trace(None), TraceError, r"^trace file: got None; expected the path"),
        (lambda: read_trace("x.csv", options=5), ConfigError, r"^read options: got 5"),
        (
            lambda: ReadOptions(columns=[("arrival", "x")]),
            ConfigError,
            r"^workload\.columns: got \[\('arrival', 'x'\)\]; expected a mapping",
        ),
        (
            lambda: ReadOptions(window=(5.0, 1.0)),
            ConfigError,
            r"^workload\.start_s/duration_s: the window \(5\.0, 1\.0\); expected",
        ),
        (lambda: ReadOptions(window=(float("nan"), 1.0)), ConfigError, r"the window \(nan, 1\.0\)"),
    ],
)
def test_the_python_reader_refuses_bad_arguments_by_name(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_read_options_may_be_given_as_a_mapping(tmp_path):
    path = _write(tmp_path, "p.csv", "arrival_s,prompt_tokens,output_tokens\n0,10,5\n3,20,7\n")
    got = read_trace(path, options={"window": (1.0, 10.0)})
    assert list(got.trace.arrival) == [3.0] and got.n_requests == 2
