"""Two kinds of trace the readers once accepted silently: a file matching more
than one known format (read as whichever came first), and numeric arrivals in the wrong unit
(microsecond epochs read as seconds: times 54 million years long). Each is refused with the
file, what it matches or the unit and value, and how to choose; each real format alone, epochs
in their own unit and relative seconds still read. No simulation runs here."""

from __future__ import annotations

import json

import numpy as np
import pytest

from servetune.core.errors import TraceError
from servetune.workload import trace_csv_fast
from servetune.workload.trace_file import ReadOptions, read_trace


def _write(tmp_path, name: str, text: str):
    path = tmp_path / name
    path.write_text(text)
    return path


def _jsonl(tmp_path, name: str, rows: list):
    return _write(tmp_path, name, "".join(json.dumps(r) + "\n" for r in rows))


def _refused(path, options=None) -> str:
    """The message of the TraceError reading `path` raises."""
    with pytest.raises(TraceError) as err:
        read_trace(path, options=options)
    return str(err.value)


# ---- a file matching several formats is refused, naming them

OPENAI = "openai (created, usage.prompt_tokens, usage.completion_tokens; OpenAI chat completions)"
RESPONSES = (
    "openai_responses (created_at, usage.input_tokens, usage.output_tokens; OpenAI Responses API)"
)
AZURE = "azure (TIMESTAMP, ContextTokens, GeneratedTokens; Azure LLM inference 2023)"
PLAIN = "plain (arrival_s, prompt_tokens, output_tokens; servetune)"
MOONCAKE = "mooncake (timestamp, input_length, output_length; Mooncake)"
CHOOSE = "expected one -- name the columns to read with workload.columns.arrival/prompt/output"


def _both_usages(t: int) -> dict:
    """A record carrying the chat completions' and the Responses API's keys."""
    return {
        "id": "x",
        "created": t,
        "created_at": t + 1,
        "usage": {
            "prompt_tokens": 10,
            "completion_tokens": 3,
            "input_tokens": 11,
            "output_tokens": 4,
        },
    }


def test_a_record_with_chat_and_responses_keys_is_refused(tmp_path):
    path = _jsonl(tmp_path, "both.jsonl", [_both_usages(1700000000), _both_usages(1700000005)])
    assert _refused(path) == (
        f"{path}:1: the first record (keys ['created', 'created_at', 'id', 'usage']) matches 2 "
        f"formats: {OPENAI}, {RESPONSES}; {CHOOSE} (workload.columns.arrival=created reads "
        f"openai's)"
    )


def test_a_csv_with_azure_and_plain_columns_is_refused(tmp_path):
    path = _write(
        tmp_path,
        "six.csv",
        "TIMESTAMP,ContextTokens,GeneratedTokens,arrival_s,"
        "prompt_tokens,output_tokens\n0,10,3,0,11,4\n",
    )
    header = (
        "['TIMESTAMP', 'ContextTokens', 'GeneratedTokens', 'arrival_s', 'prompt_tokens', "
        "'output_tokens']"
    )
    assert _refused(path) == (
        f"{path}:1: the header {header} matches 2 formats: {AZURE}, {PLAIN}; {CHOOSE} "
        f"(workload.columns.arrival=TIMESTAMP reads azure's)"
    )


def test_azure_and_plain_token_columns_alone_are_ambiguous_too(tmp_path):
    path = _write(
        tmp_path,
        "tokens.csv",
        "TIMESTAMP,ContextTokens,GeneratedTokens,prompt_tokens,output_tokens\n0,10,3,11,4\n",
    )
    header = "['TIMESTAMP', 'ContextTokens', 'GeneratedTokens', 'prompt_tokens', 'output_tokens']"
    assert _refused(path) == (
        f"{path}:1: the header {header} matches 2 formats: {AZURE}, {PLAIN}; {CHOOSE} "
        f"(workload.columns.arrival=TIMESTAMP reads azure's)"
    )


def test_a_mooncake_record_with_responses_keys_is_refused(tmp_path):
    row = {
        "timestamp": 0,
        "input_length": 5,
        "output_length": 2,
        "created_at": 1741476542,
        "usage": {"input_tokens": 5, "output_tokens": 2},
    }
    path = _jsonl(tmp_path, "mixed.jsonl", [row])
    keys = "['created_at', 'input_length', 'output_length', 'timestamp', 'usage']"
    assert _refused(path) == (
        f"{path}:1: the first record (keys {keys}) matches 2 formats: {MOONCAKE}, {RESPONSES}; "
        f"{CHOOSE} (workload.columns.arrival=timestamp reads mooncake's)"
    )


def test_a_named_column_that_picks_no_candidate_leaves_the_file_refused(tmp_path):
    path = _jsonl(tmp_path, "both.jsonl", [_both_usages(1700000000)])
    message = _refused(path, ReadOptions(columns={"output": "usage.total_tokens"}))
    assert message.endswith(
        f"matches 2 formats: {OPENAI}, {RESPONSES}; {CHOOSE} "
        f"(workload.columns.arrival=created reads openai's)"
    )


@pytest.mark.parametrize(
    "columns, fmt, arrival, prompt",
    [
        ({"arrival": "created_at"}, "openai_responses", [0.0, 5.0], [11, 11]),
        ({"arrival": "created"}, "openai", [0.0, 5.0], [10, 10]),
        ({"prompt": "usage.input_tokens"}, "openai_responses", [0.0, 5.0], [11, 11]),
        # all three named, across both formats: the columns decide, no format is taken
        (
            {
                "arrival": "created",
                "prompt": "usage.input_tokens",
                "output": "usage.completion_tokens",
            },
            "columns",
            [0.0, 5.0],
            [11, 11],
        ),
    ],
)
def test_naming_columns_resolves_the_ambiguity(tmp_path, columns, fmt, arrival, prompt):
    path = _jsonl(tmp_path, "both.jsonl", [_both_usages(1700000000), _both_usages(1700000005)])
    got = read_trace(path, options=ReadOptions(columns=columns))
    assert got.format == fmt and list(got.trace.arrival) == arrival
    assert list(got.trace.prompt) == prompt


def test_naming_the_columns_of_one_csv_format_reads_it(tmp_path):
    path = _write(
        tmp_path,
        "six.csv",
        "TIMESTAMP,ContextTokens,GeneratedTokens,arrival_s,"
        "prompt_tokens,output_tokens\n0,10,3,0,11,4\n2,12,5,2,13,6\n",
    )
    got = read_trace(path, options=ReadOptions(columns={"arrival": "arrival_s"}))
    assert got.format == "plain" and list(got.trace.prompt) == [11, 13]
    got = read_trace(path, options=ReadOptions(columns={"prompt": "ContextTokens"}))
    assert got.format == "azure" and list(got.trace.output) == [3, 5]


_ALONE = {
    "azure.csv": (
        (
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9799600,10,3\n"
            "2023-11-16 18:17:05.9799600,12,5\n"
        ),
        "azure",
    ),
    "plain.csv": ("arrival_s,prompt_tokens,output_tokens\n0,10,3\n2,12,5\n", "plain"),
    "burst.csv": (
        (
            "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
            "5,ChatGPT,10,3,13,Conversation log\n7,GPT-4,12,5,17,API log\n"
        ),
        "burstgpt",
    ),
    "moon.jsonl": (
        (
            '{"timestamp": 0, "input_length": 10, "output_length": 3}\n'
            '{"timestamp": 2000, "input_length": 12, "output_length": 5}\n'
        ),
        "mooncake",
    ),
    "chat.jsonl": (
        (
            '{"created": 1700000000, "usage": {"prompt_tokens": 10, '
            '"completion_tokens": 3}}\n{"created": 1700000002, "usage": '
            '{"prompt_tokens": 12, "completion_tokens": 5}}\n'
        ),
        "openai",
    ),
    "resp.jsonl": (
        (
            '{"created_at": 1741476542, "usage": {"input_tokens": 10, "output_tokens": '
            '3}}\n{"created_at": 1741476544, "usage": {"input_tokens": 12, '
            '"output_tokens": 5}}\n'
        ),
        "openai_responses",
    ),
    "batch.jsonl": (
        (
            '{"custom_id": "a", "response": {"body": {"created": 1711652795, "usage": '
            '{"prompt_tokens": 10, "completion_tokens": 3}}}}\n{"custom_id": "b", '
            '"response": {"body": {"created": 1711652797, "usage": {"prompt_tokens": '
            '12, "completion_tokens": 5}}}}\n'
        ),
        "openai_batch",
    ),
}


@pytest.mark.parametrize("name", sorted(_ALONE))
def test_each_format_alone_still_reads(tmp_path, name):
    text, fmt = _ALONE[name]
    got = read_trace(_write(tmp_path, name, text))
    assert got.format == fmt and got.span_s == pytest.approx(2.0)
    assert list(got.trace.prompt) == [10, 12] and list(got.trace.output) == [3, 5]


# ---- numeric arrivals must fit their unit

PLAIN_HEADER = "arrival_s,prompt_tokens,output_tokens\n"
EPOCH = "expected epoch times in 1990-2100 or times from the trace's start"


def test_microsecond_epochs_read_as_seconds_are_refused(tmp_path):
    path = _write(
        tmp_path, "us.csv", PLAIN_HEADER + "1700000000000000,10,3\n1700000000250000,12,5\n"
    )
    assert _refused(path) == (
        f"{path}:2: column 'arrival_s' read in seconds (the plain format's unit, "
        f"workload.time_unit unset): 1.7e+15 is 1.7e+15 s after 1970, past 2100; {EPOCH} -- "
        f"workload.time_unit=us reads it as 2023-11-14 22:13:20 UTC"
    )


def test_millisecond_epochs_with_time_unit_s_are_refused_even_when_skipping(tmp_path):
    path = _jsonl(
        tmp_path,
        "ms.jsonl",
        [
            {"timestamp": 1733390000000, "input_length": 10, "output_length": 3},
            {"timestamp": 1733390000400, "input_length": 12, "output_length": 5},
        ],
    )
    options = ReadOptions(time_unit="s", invalid_rows="skip")
    assert _refused(path, options) == (
        f"{path}:1: 'timestamp' read in seconds (workload.time_unit=s): 1.73339e+12 is "
        f"1.73e+12 s after 1970, past 2100; {EPOCH} -- workload.time_unit=ms reads it as "
        f"2024-12-05 09:13:20 UTC"
    )


def test_nanosecond_epochs_in_the_formats_milliseconds_are_refused(tmp_path):
    path = _jsonl(
        tmp_path,
        "ns.jsonl",
        [{"timestamp": 1700000000123456789, "input_length": 10, "output_length": 3}],
    )
    assert _refused(path) == (
        f"{path}:1: 'timestamp' read in milliseconds (the mooncake format's unit, "
        f"workload.time_unit unset): 1.70000000012e+18 is 1.7e+15 s after 1970, past 2100; "
        f"{EPOCH} -- workload.time_unit=ns reads it as 2023-11-14 22:13:20 UTC"
    )


def test_a_value_no_unit_reads_as_a_date_is_called_corrupt(tmp_path):
    path = _write(tmp_path, "huge.csv", PLAIN_HEADER + "1e30,10,3\n")
    assert _refused(path) == (
        f"{path}:2: column 'arrival_s' read in seconds (the plain format's unit, "
        f"workload.time_unit unset): 1e+30 is 1e+30 s after 1970, past 2100; {EPOCH} -- no "
        f"unit reads it as a date in 1990-2100 (a corrupt row?)"
    )


def test_relative_milliseconds_read_as_seconds_are_too_sparse(tmp_path):
    path = _write(tmp_path, "rel_ms.csv", PLAIN_HEADER + "0,10,3\n1800000,12,5\n3600000,9,2\n")
    assert _refused(path) == (
        f"{path}:2: column 'arrival_s' read in seconds (the plain format's unit, "
        f"workload.time_unit unset): 0 to 3600000 is 3 requests over 41.7 days, fewer than one "
        f"a day; expected a workload's rate -- it fits workload.time_unit=ms (1 h) or us (3.6 s) "
        f"or ns (0.0036 s)"
    )


def test_relative_microseconds_read_as_seconds_exceed_the_span(tmp_path):
    path = _write(tmp_path, "rel_us.csv", PLAIN_HEADER + "0,10,3\n1800000000,12,5\n")
    assert _refused(path) == (
        f"{path}:3: column 'arrival_s' = 1.8e+09 is 1.8e+09 s after the first row; expected a "
        f"trace spanning at most 1e+09 s (wrong unit or a corrupt row?); read in seconds (the "
        f"plain format's unit, workload.time_unit unset), it fits workload.time_unit=us (30 min) "
        f"or ns (1.8 s)"
    )


def test_epochs_in_their_own_unit_and_relative_seconds_still_read(tmp_path, monkeypatch):
    ms = _write(
        tmp_path,
        "ms.csv",
        "timestamp,input_tokens,output_tokens\n1733390000000,10,3\n1733390000400,12,5\n",
    )
    columns = {"arrival": "timestamp", "prompt": "input_tokens", "output": "output_tokens"}
    used = []
    real = trace_csv_fast.read
    monkeypatch.setattr(trace_csv_fast, "read", lambda *a: used.append(real(*a)) or used[-1])
    got = read_trace(ms, options=ReadOptions(columns=columns, time_unit="ms"))
    np.testing.assert_allclose(got.trace.arrival, [0.0, 0.4], atol=1e-6)
    assert used[0] is not None  # a plausible file keeps the vectorized path
    relative = _write(tmp_path, "rel.csv", PLAIN_HEADER + "0,10,3\n0.5,12,5\n7200,9,2\n")
    assert list(read_trace(relative).trace.arrival) == [0.0, 0.5, 7200.0]
    us = _write(tmp_path, "us.csv", PLAIN_HEADER + "1700000000000000,10,3\n1700000000250000,12,5\n")
    got = read_trace(us, options=ReadOptions(time_unit="us"))
    np.testing.assert_allclose(got.trace.arrival, [0.0, 0.25], atol=1e-6)


@pytest.mark.parametrize(
    "name, text",
    [
        # a sparse log of epoch seconds (a request a week) is in its unit: not a rate problem
        (
            "weekly.jsonl",
            (
                '{"created": 1700000000, "usage": {"prompt_tokens": 1, '
                '"completion_tokens": 1}}\n{"created": 1700604800, "usage": '
                '{"prompt_tokens": 1, "completion_tokens": 1}}\n'
            ),
        ),
        # a small relative file whose numbers span under 1e6 units: too few to judge
        ("two.csv", PLAIN_HEADER + "0,1,1\n200000,1,1\n"),
        # the last second before 2100 as the first arrival
        ("late.csv", PLAIN_HEADER + "4102444800,1,1\n4102444801,1,1\n"),
        # date-times far apart carry no unit
        ("dates.csv", PLAIN_HEADER + "2001-01-01 00:00:00,1,1\n2024-01-01 00:00:00,1,1\n"),
    ],
)
def test_plausible_edge_cases_read(tmp_path, name, text):
    assert read_trace(_write(tmp_path, name, text)).n_requests == 2
