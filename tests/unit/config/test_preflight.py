"""The checks before JAX loads (servetune/config/preflight.py): a value of another type than
its key's default and a missing input file are refused by key, with the closest file; a
refused command line never loads JAX and leaves no run folder."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from servetune.config import preflight


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["policy.max_num_seqs=abc"], "policy.max_num_seqs: got 'abc'; expected a number"),
        (["policy.max_num_seqs='128'"], "policy.max_num_seqs: got '128'; expected a number"),
        (["engine.max_slots=lots"], "engine.max_slots: got 'lots'; expected a number"),
        (["seed=x"], "seed: got 'x'; expected a number"),
        (["slo.ttft_s=true"], "slo.ttft_s: got True; expected a number"),
        (["fleet.autoscale=3"], "fleet.autoscale: got 3; expected true or false"),
        (
            ["workload=poisson", "workload.rate=fast"],
            "workload.rate: got 'fast'; expected a number",
        ),
        (  # a mapping's commas do not make a sweep
            ["policy.max_num_seqs=abc", "tune.space.max_num_seqs={low: 8, high: 64}"],
            "policy.max_num_seqs: got 'abc'; expected a number",
        ),
        (["seed=x", "grid.max_num_seqs=[64,128]"], "seed: got 'x'; expected a number"),
    ],
)
def test_a_value_of_another_type_than_its_default_is_named(overrides, message):
    assert preflight.problem(overrides) == message


@pytest.mark.parametrize(
    "overrides",
    [
        [],
        ["policy.max_num_seqs=64", "policy.queue_cap=inf", "policy.watermark=0.01"],
        ["workload=poisson", "workload.duration_s=null", "workload.n_requests=100"],
        ["grid.max_num_seqs=[64,128]", "seeds=2", "fleet.autoscale=true"],
        ["policy.max_num_seqs=16,64"],  # a multirun: each job's values are checked as it runs
        ["workload.rate_curve.curve=azure_llm_2024_weekday", "workload.rate_curve.span_s=86400"],
    ],
)
def test_good_command_lines_pass(overrides):
    assert preflight.problem(overrides) is None


@pytest.mark.parametrize(
    "key, given, made, hint",
    [
        ("workload.path", "my_trce.csv", ["my_trace.csv"], r"did you mean .*my_trace\.csv\?$"),
        (
            "workload.path",
            "data/t.csv",
            ["alpha.parquet", "notes"],
            r"it holds alpha\.parquet, notes$",
        ),
        ("workload.rate_curve.curve", "curv.csv", ["curve.csv"], r"did you mean .*curve\.csv\?"),
        ("workload.path", "none/t.csv", [], r"none is not a folder, so no such file$"),
    ],
)
def test_a_missing_input_file_is_named_by_key_with_the_closest_file(
    tmp_path, monkeypatch, key, given, made, hint
):
    """(issue 57) "my_trce.csv: file not found", 33 s in, without the key or the file that
    exists."""
    folder = tmp_path / "data" if given.startswith("data/") else tmp_path
    folder.mkdir(exist_ok=True)
    for name in made:
        (folder / name).write_text("arrival_s,prompt_tokens,output_tokens\n0,1,1\n")
    monkeypatch.chdir(tmp_path)
    extra = ["workload=file"] if key == "workload.path" else ["workload.rate_curve.span_s=600"]
    message = preflight.problem([*extra, f"{key}={given}"])
    assert message is not None and message.startswith(f"{key}: got '{given}'; ")
    assert re.search(hint, message), message


def test_a_refused_command_line_never_loads_jax_and_leaves_no_folder(tmp_path):
    code = (
        "import atexit, sys\n"
        "atexit.register(lambda: print('jax loaded' if 'jax' in sys.modules else 'no jax'))\n"
        "sys.argv = ['servetune', 'simulate', 'policy.max_num_seqs=abc', "
        f"'hydra.run.dir={tmp_path / 'run'}']\n"
        "from servetune.cli.main import main\n"
        "main()\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 2
    assert "policy.max_num_seqs: got 'abc'; expected a number" in proc.stderr
    assert proc.stdout.strip() == "no jax"
    assert not (tmp_path / "run").exists()
