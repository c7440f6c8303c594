"""`servetune observe --import-bench`: a `vllm bench serve --save-result --save-detailed` file
(vLLM 0.32's key names) into a trace and a per-request table, worked by hand; bad files refused
by name, with nothing written."""

import json
import re

import numpy as np
import pandas as pd
import pytest

from servetune.core.errors import TraceError
from servetune.validate.bench_import import load_bench_result
from servetune.validate.observe import main as observe_main
from servetune.workload.traces import load_csv

# four requests: sent at perf_counter 100, 100.5, 101 (after 0.25 s in the client's queue) and
# 102; the third failed; the second delivered one token
BENCH = {
    "date": "20261203-120000",
    "backend": "vllm",
    "model_id": "m",
    "request_rate": 2.0,
    "max_concurrency": 2,
    "completed": 3,
    "failed": 1,
    "duration": 3.0,
    "start_times": [100.0, 100.5, 101.0, 102.0],
    "queue_times": [0.0, 0.0, 0.25, 0.0],
    "input_lens": [10, 20, 30, 40],
    "output_lens": [5, 1, 0, 8],
    "ttfts": [0.1, 0.2, 0.0, 0.3],
    "latencies": [0.5, 0.2, 0.0, 1.0],
    "itls": [[0.1] * 4, [], [], [0.1] * 7],
    "generated_texts": ["", "", "", ""],
    "errors": ["", "", "ReadTimeout", ""],
}


def _file(tmp_path, data, name="bench.json"):
    path = tmp_path / name
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return path


def test_the_requests_on_one_clock_from_the_first_arrival(tmp_path):
    r = load_bench_result(_file(tmp_path, BENCH))["requests"]
    nan = np.nan
    # arrival = send - client queue: 100, 100.5, 100.75, 102 -> from the first
    np.testing.assert_allclose(r["arrival_s"], [0.0, 0.5, 0.75, 2.0])
    np.testing.assert_allclose(r["first_token_s"], [0.1, 0.7, nan, 2.3])
    np.testing.assert_allclose(r["finish_s"], [0.5, 0.7, nan, 3.0])
    np.testing.assert_allclose(r["ttft_s"], [0.1, 0.2, nan, 0.3])
    np.testing.assert_allclose(r["e2e_s"], [0.5, 0.2, nan, 1.0])
    # TPOT = (latency - TTFT) / (output - 1), vLLM's definition; none for a one-token answer
    np.testing.assert_allclose(r["tpot_s"], [0.1, nan, nan, 0.1])
    assert list(r["end_state"]) == ["completed", "completed", "failed", "completed"]
    assert list(r["output_tokens_delivered"]) == [5, 1, 0, 8]


def test_the_import_writes_a_trace_servetune_replays(tmp_path, capsys):
    out = tmp_path / "imported"
    assert observe_main(["--import-bench", str(_file(tmp_path, BENCH)), "--out", str(out)]) == 0
    assert "4 requests (1 failed), 3 in trace.csv" in capsys.readouterr().out
    trace = load_csv(out / "trace.csv")  # the failed request is left out: its length is unknown
    np.testing.assert_allclose(trace.arrival, [0.0, 0.5, 2.0])
    assert list(trace.prompt) == [10, 20, 40] and list(trace.output) == [5, 1, 8]
    table = pd.read_parquet(out / "requests.parquet")
    assert len(table) == 4 and table["end_state"].tolist()[2] == "failed"
    meta = json.loads((out / "bench.json").read_text())
    assert meta["about"]["max_concurrency"] == 2 and meta["in_trace"] == 3


@pytest.mark.parametrize(
    "change, match",
    [
        (
            {"start_times": None},
            ("no start_times; expected a `vllm bench serve --save-result --save-detailed` result"),
        ),
        ({"ttfts": [0.1, 0.2]}, r"ttfts: 2 values; expected a list of 4"),
        ({"latencies": [0.5, -0.2, 0.0, 1.0]}, r"latencies\[1\]: got -0.2; expected seconds in "),
        ({"input_lens": [10, 20.5, 30, 40]}, r"input_lens\[1\]: got 20.5; expected a whole number"),
        ({"errors": "none"}, r"errors: expected a list of 4 strings"),
        ({"start_times": []}, "start_times: no requests"),
        # the optional lists and duration, checked as the others when given
        ({"itls": "none"}, r"itls: str; expected a list of 4 lists"),
        (
            {"itls": [[0.1] * 4, 5, [], [0.1] * 7]},
            r"itls\[1\]: a JSON int; expected a list of seconds",
        ),
        ({"itls": [[0.1] * 4, [], [], [0.1, -1]]}, r"itls\[3\]\[1\]: got -1; expected seconds in "),
        ({"itls": [[0.1] * 4, [], [], [0.1, True]]}, r"itls\[3\]\[1\]: got True; expected seconds"),
        ({"duration": "3 s"}, r"duration: got '3 s'; expected seconds in "),
    ],
)
def test_a_file_of_another_shape_is_refused_by_key(tmp_path, change, match):
    data = {k: v for k, v in {**BENCH, **change}.items() if v is not None}
    with pytest.raises(TraceError, match=match):
        load_bench_result(_file(tmp_path, data))


def test_not_a_bench_result_is_refused_and_nothing_is_written(tmp_path, capsys):
    out = tmp_path / "imported"
    for text, match in (("{oops", r"bench.json:1: not JSON"), ("[1, 2]", "a JSON list")):
        path = _file(tmp_path, text)
        with pytest.raises(TraceError, match=match):
            load_bench_result(path)
        assert observe_main(["--import-bench", str(path), "--out", str(out)]) == 2
        assert "error: " in capsys.readouterr().err and not out.exists()


# Each of these once raised OverflowError or was read as something it is not.
INDENTED = json.dumps(BENCH, indent=1)  # one key per line: line numbers say where


@pytest.mark.parametrize(
    "text, match",
    [
        (
            json.dumps({**BENCH, "input_lens": [10, 10**30, 30, 40]}),
            (
                r"bench\.json: input_lens\[1\]: got 10{30}; expected a whole number of tokens in "
                r"\[0, 10000000\]"
            ),
        ),
        (
            json.dumps({**BENCH, "input_lens": [10, 1e300, 30, 40]}),
            r"bench\.json: input_lens\[1\]: got 1e\+300; expected a whole number of tokens",
        ),
        (
            json.dumps({**BENCH, "output_lens": [5, 10**400, 0, 8]}),
            r"output_lens\[1\]: got 10+\.\.\.0+; expected a whole number",
        ),
        (
            json.dumps({**BENCH, "start_times": [100.0, 1e308, 101.0, 102.0]}),
            (
                r"bench\.json: start_times\[1\]: 1e\+308 is 1e\+308 s after the earliest; expected "
                r"a "
                r"record spanning at most 1e\+09 s"
            ),
        ),
        (
            json.dumps({**BENCH, "start_times": [100.0, 10**400, 101.0, 102.0]}),
            r"start_times\[1\]: got 10+\.\.\.0+; expected a finite time in seconds >= 0",
        ),
        (
            json.dumps({**BENCH, "ttfts": [0.1, 1e300, 0.0, 0.3]}),
            r"ttfts\[1\]: got 1e\+300; expected seconds in \[0, 1e\+09\]",
        ),
        (
            INDENTED[:-2] + ',\n "input_lens": [1, 2, 3, 4]\n}',
            r"bench\.json:\d+: key 'input_lens' appears twice in one object \(again at column 16\)",
        ),
        ("[" * 100_000 + "]" * 100_000, r"bench\.json:1: unreadable JSON"),
        # too deep for the pure-Python scanner that finds a repeated key's place: still refused
        (
            '{"start_times": ' + "[" * 600 + "]" * 600 + ', "start_times": []}',
            r"bench\.json:1: key 'start_times' appears twice in one object; expected each key once",
        ),
        ('{"start_times": [' + "9" * 5000 + "]}", r"bench\.json:1: unreadable JSON"),
    ],
)
def test_damaged_numbers_and_repeated_keys_are_refused_and_nothing_is_written(
    tmp_path, capsys, text, match
):
    path = _file(tmp_path, text)
    with pytest.raises(TraceError, match=match):
        load_bench_result(path)
    out = tmp_path / "imported"
    assert observe_main(["--import-bench", str(path), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert re.search(match, " ".join(err.split())) and "Traceback" not in err
    assert not out.exists()


def test_a_repeated_key_is_named_by_its_line(tmp_path):
    text = INDENTED[:-2] + ',\n "input_lens": [1, 2, 3, 4]\n}'
    line = text.splitlines().index(' "input_lens": [1, 2, 3, 4]') + 1
    with pytest.raises(TraceError, match=rf"bench\.json:{line}: key 'input_lens' appears twice"):
        load_bench_result(_file(tmp_path, text))


def test_a_reimport_replaces_the_set_and_another_format_is_refused(tmp_path, capsys):
    """A stale import file stayed beside a new import. An import's files are one set
    (run_folder.publish); a folder holding another format's import is refused."""
    from servetune.run import run_folder

    out = tmp_path / "imported"
    assert observe_main(["--import-bench", str(_file(tmp_path, BENCH)), "--out", str(out)]) == 0
    doc = run_folder.record(out)
    assert doc["state"] == "complete" and doc["files"] == [
        "bench.json",
        "requests.parquet",
        "trace.csv",
    ]
    fewer = dict(
        BENCH, **{k: v[:2] for k, v in BENCH.items() if isinstance(v, list)}, completed=2, failed=0
    )
    assert (
        observe_main(["--import-bench", str(_file(tmp_path, fewer, "b2.json")), "--out", str(out)])
        == 0
    )
    assert len(pd.read_parquet(out / "requests.parquet")) == 2
    assert json.loads((out / "bench.json").read_text())["requests"] == 2
    (out / "otel.json").write_text("{}")  # as an OTLP import leaves it
    capsys.readouterr()
    assert observe_main(["--import-bench", str(_file(tmp_path, BENCH)), "--out", str(out)]) == 2
    assert (
        f"{out}: holds otel.json, an earlier import of another format"
        in capsys.readouterr().err.replace("\n", "")
    )
