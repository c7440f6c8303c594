"""The whole user path of the README on a small trace of one's own:
simulate my file, import the vllm_bench.json it wrote as a real benchmark and simulate that,
tune (the README's command, shortened), export the tuning folder, resume the tuning run, sweep,
report, and export from the sweep. Every file a step writes is read back by the next step, the
way a user chains them, through the `servetune` command line."""

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

pytestmark = pytest.mark.slow  # about 3 minutes of subprocesses on 2 cores


def _servetune(*args, cwd, ok=True):
    proc = subprocess.run(
        [sys.executable, "-m", "servetune.cli.main", *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    if ok:
        assert proc.returncode == 0, (args, proc.stdout[-3000:], proc.stderr[-3000:])
    return proc


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    """A folder holding my_trace.csv: 150 requests over 60 s, in the plain CSV format."""
    home = tmp_path_factory.mktemp("user")
    rng = np.random.default_rng(7)
    pd.DataFrame(
        {
            "arrival_s": np.sort(rng.uniform(0, 60, 150)).round(3),
            "prompt_tokens": rng.integers(50, 3000, 150),
            "output_tokens": rng.integers(10, 400, 150),
        }
    ).to_csv(home / "my_trace.csv", index=False)
    return home


FILE = ["workload=file", "workload.path=my_trace.csv", "output.progress=false"]
TUNE = [
    *FILE,
    "workload.duration_s=30",
    "tune.iterations=2",
    "tune.pairs=1",
    "tune.eval.seeds=1",
    "tune.space.max_num_queued_reqs={low: 64, high: 4096, scale: log}",
    'tune.eval.holdout=["workload.start_s=30"]',
]


def test_simulate_my_file_then_replay_its_bench_file(home):
    _servetune("simulate", *FILE, "hydra.run.dir=sim", cwd=home)
    metrics = json.loads((home / "sim/metrics.json").read_text())
    bench = json.loads((home / "sim/vllm_bench.json").read_text())
    assert metrics["n_requests"] == bench["num_prompts"] == 150
    # vllm_bench.json read back as a real benchmark's file, and simulated again
    _servetune("observe", "--import-bench", "sim/vllm_bench.json", "--out", "imported", cwd=home)
    trace = pd.read_csv(home / "imported/trace.csv")
    assert len(trace) == bench["completed"]
    _servetune(
        "simulate",
        "workload=file",
        "workload.path=imported/trace.csv",
        "output.progress=false",
        "hydra.run.dir=replayed",
        cwd=home,
    )
    again = json.loads((home / "replayed/metrics.json").read_text())
    assert again["n_requests"] == bench["completed"]


def test_tune_export_and_resume(home):
    proc = _servetune("tune", *TUNE, "hydra.run.dir=tuned", cwd=home)
    said = " ".join(proc.stdout.split())  # as printed, unwrapped
    summary = json.loads((home / "tuned/tune_summary.json").read_text())
    assert summary["tuned"]["max_num_queued_reqs"] is not None
    # a light trace that vLLM's defaults serve within the SLOs: nothing to gain, so the
    # tuner says so and exports the start (issue 57), and the tables come first
    assert summary["exported"] == "start" and not summary["improvement"], said[-3000:]
    assert "no significant improvement: keep your settings (exported the start;" in said
    assert (
        said.index("start vs tuned")
        < said.index("tuned knobs")
        < said.index("exported the start (integer")
    )
    # the tuning folder exports what the tuning exported, whether or not it wrote export/
    proc = _servetune("export", "tuned", "--out", "deploy", cwd=home)
    doc = json.loads((home / "deploy/vllm_args.json").read_text())
    assert doc["extra"]["exported"] == "start", proc.stdout
    assert "--max-num-seqs 1024" in doc["flags"] and "--max-num-batched-tokens 8192" in doc["flags"]
    assert "no significant improvement" in " ".join(proc.stdout.split())
    # started again in its folder with more iterations, the run resumes from its checkpoint
    proc = _servetune(
        "tune",
        *[o for o in TUNE if not o.startswith("tune.iterations")],
        "tune.iterations=3",
        "hydra.run.dir=tuned",
        cwd=home,
    )
    assert "resum" in (proc.stdout + proc.stderr).lower()
    history = pd.read_csv(home / "tuned/history.csv")
    assert list(history["iteration"]) == [0, 1, 2]


def test_sweep_report_and_export_from_the_sweep(home):
    _servetune(
        "simulate", "-m", *FILE, "policy.max_num_seqs=4,64", "hydra.sweep.dir=sweep", cwd=home
    )
    _servetune("report", "sweep", cwd=home)
    best = pd.read_csv(home / "sweep/report/best.csv")
    assert len(best) == 1 and (home / "sweep/report/report.html").stat().st_size > 0
    _servetune("export", "sweep", "--out", "from_sweep", cwd=home)
    args = json.loads((home / "from_sweep/vllm_args.json").read_text())
    assert best["setting"].iloc[0] == "max_num_seqs=64"  # 4 sequences miss the SLO target
    assert args["args"]["max_num_seqs"] == 64
