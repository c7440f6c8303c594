"""Bad input gets a clear error naming the file and line, or the config key."""

import pytest

from servetune.config.scenario import build
from servetune.core.errors import ConfigError, TraceError
from servetune.run.api import compose
from servetune.workload.traces import load_trace

AZURE_HEAD = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
ROW = "2023-11-16 18:15:46.6805900,374,44\n"


@pytest.mark.parametrize(
    "name,text,where,expect",
    [
        (
            "missing_column.csv",
            "TIMESTAMP,ContextTokens\n2023-11-16 18:15:46.68,374\n",
            ":1:",
            "expected columns",
        ),
        (
            "non_numeric.csv",
            AZURE_HEAD + ROW + "2023-11-16 18:15:47.1,abc,10\n",
            ":3:",
            "'ContextTokens' = 'abc'",
        ),
        (
            "negative.csv",
            AZURE_HEAD + ROW + "2023-11-16 18:15:47.1,100,-5\n",
            ":3:",
            "'GeneratedTokens' = '-5'",
        ),
        ("fractional.csv", AZURE_HEAD + "2023-11-16 18:15:47.1,10.5,5\n", ":2:", "integer"),
        (
            "unsorted.csv",
            AZURE_HEAD + ROW + "2023-11-16 18:15:40.0,100,5\n",
            ":3:",
            "goes back in time",
        ),
        ("missing_timestamp.csv", AZURE_HEAD + ROW + ",100,5\n", ":3:", "'TIMESTAMP' is empty"),
        (
            "bad_timestamp.csv",
            AZURE_HEAD + "yesterday,100,5\n",
            ":2:",
            "expected seconds >= 0 or a date-time 'YYYY-MM-DD",
        ),
        ("short_row.csv", AZURE_HEAD + ROW + "2023-11-16 18:15:47.1,100\n", ":3:", "2 fields"),
        ("empty.csv", "", "empty.csv", "empty file"),
        ("header_only.csv", AZURE_HEAD, "header_only.csv", "no requests"),
        ("empty.jsonl", "\n", "empty.jsonl", "empty file"),
        (
            "bad_json.jsonl",
            '{"timestamp": 0, "input_length": 5, "output_length": 3}\n{oops\n',
            ":2:",
            "not valid JSON",
        ),
        (
            "missing_key.jsonl",
            '{"timestamp": 0, "input_length": 5}\n',
            ":1:",
            "missing key 'output_length'",
        ),
        (
            "negative_ts.jsonl",
            '{"timestamp": -5, "input_length": 5, "output_length": 3}\n',
            ":1:",
            "milliseconds >= 0",
        ),
        (
            "unsorted.jsonl",
            (
                '{"timestamp": 10, "input_length": 5, "output_length": 3}\n'
                '{"timestamp": 5, "input_length": 5, "output_length": 3}\n'
            ),
            ":2:",
            "goes back in time",
        ),
        (
            "zero_output.jsonl",
            '{"timestamp": 0, "input_length": 5, "output_length": 0}\n',
            ":1:",
            "'output_length' = '0'",
        ),
        ("trace.txt", "whatever", "trace.txt", "expected .csv or .jsonl"),
    ],
)
def test_bad_trace_files(tmp_path, name, text, where, expect):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(TraceError) as err:
        load_trace(path)
    msg = str(err.value)
    assert str(path) in msg and where in msg and expect in msg, msg


def test_not_utf8(tmp_path):
    path = tmp_path / "latin1.csv"
    path.write_bytes(AZURE_HEAD.encode() + "2023-11-16 18:15:46.68,3\xe974,44\n".encode("latin-1"))
    with pytest.raises(TraceError, match="not UTF-8"):
        load_trace(path)


def test_missing_file(tmp_path):
    with pytest.raises(TraceError, match="file not found"):
        load_trace(tmp_path / "nope.csv")


@pytest.mark.parametrize(
    "overrides,key,expect",
    [
        (["hardware.gpu=h900"], "hardware.gpu", "unknown name 'h900'"),
        (["model.name=gpt5"], "model.name", "unknown name 'gpt5'"),
        (["model=llama3_70b"], "model", "does not fit"),
        (["model=llama3_70b", "hardware.tp=3"], "hardware.tp", "divisor"),
        (["model.weight_bits=3"], "model.weight_bits", "expected one of"),
        (["policy.max_num_seqs=0"], "policy.max_num_seqs", "expected within"),
        (["policy.watermark=1.5"], "policy.watermark", "expected within"),
        (["+policy.max_num_sequences=5"], "policy.max_num_sequences", "unknown policy parameter"),
        (["engine.batching=dynamic"], "engine.batching", "expected continuous or static"),
        (["workload.rate_scale=0"], "workload.rate_scale", "expected"),
        (["workload.start_s=99999"], "workload.start_s", "holds no requests"),
        (["window.warmup_s=5000"], "window.warmup_s", "past the last arrival"),
        (["engine.max_model_len=100000"], "engine.max_model_len", "supports at most"),
        (["slo.ttft_s=fast"], "slo.ttft_s", "expected a number"),
        (["workload.bundled=nope.csv"], "workload.bundled", "no bundled trace"),
        (["grid.max_num_seqs=5"], "grid.max_num_seqs", "non-empty list"),
        (["policy.max_num_seqs=[1,2]"], "policy.max_num_seqs", "use grid.max_num_seqs"),
        (["engine.queue_window=inf"], "engine.queue_window", "finite"),
        (["hardware.overhead_s=inf"], "hardware.overhead_s", "finite"),
        (["engine.chunked_prefill=maybe"], "engine.chunked_prefill", "true or false"),
        (["engine.n_instances=0"], "engine.n_instances", "got 0"),
        (["cost=linear", "cost.kv_blocks=5"], "cost.kv_blocks", "cannot hold one"),
        (["workload=poisson", "workload.prompt.dist=fixed"], "workload.prompt.value", "missing"),
        (["workload=poisson", "workload.output.min=0"], "workload.output.min", ">= 1"),
        (["workload=poisson", "workload.rate=inf"], "workload.rate", "finite"),
        (
            ["engine.chunked_prefill=false", "policy.max_num_batched_tokens=2048"],
            "policy.max_num_batched_tokens",
            "could never be scheduled",
        ),
    ],
)
def test_bad_config_names_the_key(overrides, key, expect):
    with pytest.raises(ConfigError) as err:
        build(compose(overrides))
    msg = str(err.value)
    assert msg.startswith(key) and expect in msg, msg


def test_linear_cost_config_builds_and_runs():
    from servetune.run.api import simulate_batch

    sc = build(compose(["cost=linear", "workload.duration_s=20", "output.progress=false"]))
    assert sc.engine.cost_form == "linear" and sc.metrics.kv_blocks > 1000
    m = simulate_batch(sc).metrics[0]
    assert m["n_completed"] == m["n_requests"] > 0
    assert abs(m["itl_p50_s"] / (0.005 + 1e-4 * m["max_running"]) - 1) < 1.0  # linear decodes


def test_model_fits_with_quantization_or_tp():
    # the 70B model that does not fit in bf16 on one H100 fits with TP=2 or 4-bit weights
    for extra in (["hardware.tp=2"], ["model.weight_bits=4"]):
        sc = build(compose(["model=llama3_70b", "workload.duration_s=5"] + extra))
        assert sc.labels["kv_blocks"] > 0
