"""The example studies in examples/ run end to end against the public API (about a minute in
all on 2 cores, hence slow: `python -m pytest -m slow tests/integration/test_examples.py`)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _run(name, *args):
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env=dict(os.environ),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


@pytest.mark.slow
def test_grid_search_prints_the_best_point():
    out = _run("grid_search.py")
    assert "16 scenarios (8 grid points x 2 seeds)" in out
    assert "best: max_num_seqs=" in out and "useful tokens per dollar" in out


@pytest.mark.slow
def test_tune_policy_compares_start_and_tuned(tmp_path):
    out = _run("tune_policy.py", str(tmp_path))
    assert "heldout_seeds" in out and "tuned: max_num_seqs=" in out
    assert (tmp_path / "history.csv").exists() and (tmp_path / "evaluation.csv").exists()


@pytest.mark.slow
def test_compare_policies_across_traces():
    out = _run("compare_policies.py")
    for trace in ("azure_conv", "azure_code", "mooncake_conv"):
        assert f"-> {trace}: best SLO attainment with" in out
    for policy in ("vllm_default", "fcfs", "sjf"):
        assert policy in out
