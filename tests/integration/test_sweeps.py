"""Sweeps at scale: the Optuna sweeper end to end (the float `servetune simulate` returns, the
study's results file, a sqlite storage), the joblib launcher's parallel workers, the Ray
launcher on a local Ray instance and submitit's local executor (slow, skipped without the
`ray` / `slurm` extras), the sweep objective, job counting and the progress display.

CLI runs go through a subprocess: Hydra's logging setup interferes with pytest's capture.
"""

import io
import json
import math
import os
import subprocess
import sys

import pytest
import yaml
from omegaconf import OmegaConf
from rich.console import Console

from servetune.core.errors import ConfigError
from servetune.reporting.callback import count_jobs
from servetune.run import progress as progress_lib
from servetune.tuning.sweeper import sweep_objective

TINY = [
    "workload=poisson",
    "workload.duration_s=8",
    "window.drain_s=30",
    "output.progress=false",
    "output.request_table=false",
    "hydra.callbacks.servetune.progress_every_s=0",
]


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """One persistent compilation cache for the module's CLI runs."""
    return tmp_path_factory.mktemp("jax_cache")


def _servetune(*args, cache=None, timeout=600):
    cmd = [sys.executable, "-m", "servetune.cli.main", *args]
    if cache is not None:
        cmd += [f"compilation_cache.dir={cache}", "compilation_cache.min_compile_time_s=0"]
    env = dict(os.environ)
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    env.pop(progress_lib.PID_ENV, None)
    return subprocess.run(
        cmd, capture_output=True, text=True, timeout=timeout, check=False, env=env
    )


def _jobs(root):
    """{job number: (overrides, objective, jit_cache.json)} of a multirun's job folders."""
    jobs = {}
    for sub in root.iterdir():
        if sub.is_dir() and sub.name.isdigit():
            overrides = yaml.safe_load((sub / ".hydra" / "overrides.yaml").read_text())
            objective = json.loads((sub / "objective.json").read_text())["objective"]
            stats = json.loads((sub / "jit_cache.json").read_text())
            jobs[int(sub.name)] = (overrides, objective, stats)
    return jobs


def test_optuna_sweep_end_to_end(tmp_path, cache):
    """4 TPE trials (2 per batch) of the sweeps/optuna_policy study on a tiny workload: the
    results file names the best trial, which is the job with the highest returned objective,
    and the study persists in sqlite."""
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    optuna = pytest.importorskip("optuna")
    root, db = tmp_path / "study", tmp_path / "study.db"
    proc = _servetune(
        "simulate",
        "-m",
        "+experiment=optuna_policy",
        *TINY,
        "workload.rate_scale=1",
        "hydra.sweeper.n_trials=4",
        "hydra.sweeper.n_jobs=2",
        "hydra.sweeper.sampler.n_startup_trials=2",
        f"hydra.sweeper.storage=sqlite:///{db}",
        f"hydra.sweep.dir={root}",
        cache=cache,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = yaml.safe_load((root / "optimization_results.yaml").read_text())
    assert result["name"] == "optuna"
    assert set(result["best_params"]) == {
        "policy.max_num_seqs",
        "policy.max_num_batched_tokens",
        "policy.watermark",
    }
    jobs = _jobs(root)
    assert sorted(jobs) == [0, 1, 2, 3]
    objectives = {k: obj for k, (_, obj, _) in jobs.items()}
    assert all(math.isfinite(v) for v in objectives.values())
    best = max(objectives, key=objectives.get)
    assert result["best_value"] == pytest.approx(objectives[best], rel=1e-12)
    chosen = dict(o.split("=", 1) for o in jobs[best][0] if o.startswith("policy."))
    assert int(chosen["policy.max_num_seqs"]) == result["best_params"]["policy.max_num_seqs"]
    for overrides, _, _ in jobs.values():
        vals = dict(o.split("=", 1) for o in overrides if o.startswith("policy."))
        assert 8 <= int(vals["policy.max_num_seqs"]) <= 512
        assert 256 <= int(vals["policy.max_num_batched_tokens"]) <= 16384
        assert 0.0 <= float(vals["policy.watermark"]) <= 0.1
    # numeric trial values are traced: one process, one compiled simulator for all trials
    assert {s["pid"] for _, _, s in jobs.values()} == {jobs[0][2]["pid"]}
    assert {s["jit_cache"]["run_chunk_batch"] for _, _, s in jobs.values()} == {1}
    # progress across the jobs, then the end-of-sweep summary
    assert "sweep: 4/4 job(s) done" in proc.stderr
    assert "sweep: 4 job(s), 4 point(s)" in proc.stdout
    study = optuna.load_study(study_name="optuna_policy", storage=f"sqlite:///{db}")
    assert len(study.trials) == 4 and study.best_value == pytest.approx(result["best_value"])
    # the study's figure script draws these trials
    script = os.path.join(
        os.path.dirname(__file__), "..", "..", "sweeps", "optuna_policy", "figure.py"
    )
    fig = subprocess.run(
        [sys.executable, script, str(root), "--out", str(tmp_path / "f.png")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert fig.returncode == 0, fig.stderr[-2000:]
    assert (tmp_path / "f.png").stat().st_size > 10_000
    # the study's folder exports like any sweep: the best trial's policy,
    # chosen by the tuner's order among the trials
    out = _servetune("export", str(root), "--out", str(tmp_path / "export"))
    assert out.returncode == 0, out.stderr[-2000:]
    args = json.loads((tmp_path / "export" / "vllm_args.json").read_text())["args"]
    assert int(args["max_num_seqs"]) in {
        int(dict(o.split("=", 1) for o in ov if o.startswith("policy."))["policy.max_num_seqs"])
        for ov, _, _ in jobs.values()
    }


def test_a_failed_job_does_not_stop_the_sweep_and_is_named_at_its_end(tmp_path, cache):
    """hardware.gpu=h900,h100: job 0's bad value is its own error (error.json, its message);
    job 1 still runs; the summary counts the failure and the sweep exits 2 naming job 0."""
    root = tmp_path / "mr"
    proc = _servetune(
        "simulate", "-m", *TINY, "hardware.gpu=h900,h100", f"hydra.sweep.dir={root}", cache=cache
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    record = json.loads((root / "0" / "error.json").read_text())
    assert record["job"] == 0 and "hardware.gpu=h900" in record["overrides"]
    assert record["error"].startswith("hardware.gpu: unknown name 'h900'")
    assert not (root / "0" / "metrics.csv").exists()
    assert json.loads((root / "1" / "metrics.json").read_text())["n_completed"] > 0
    assert "sweep: 1 job(s) (1 more failed)" in proc.stdout
    err = proc.stderr.replace("\n", " ")
    assert "1 job(s) failed:" in err and "#0 (" in err and "unknown name 'h900'" in err
    assert "Traceback" not in proc.stderr


def _bad_paths(tmp_path):
    """(a trace file that does not exist, one that is not UTF-8 text)."""
    binary = tmp_path / "binary.csv"
    binary.write_bytes(b"arrival_s,prompt,output\n" + bytes(range(128, 256)) + b"\n")
    return tmp_path / "missing.csv", binary


@pytest.mark.parametrize(
    "sweep, errors",
    [
        (
            lambda tmp: ["workload=poisson", "hardware.gpu=h900,h901"],
            ["hardware.gpu: unknown name 'h900'", "hardware.gpu: unknown name 'h901'"],
        ),
        (
            lambda tmp: ["workload.path={},{}".format(*_bad_paths(tmp))],
            ["missing.csv'; no such file in", "binary.csv:2: not UTF-8 text"],
        ),
    ],
    ids=["unknown gpus", "missing and binary traces"],
)
def test_every_failed_job_is_recorded_and_named_at_the_sweeps_end(tmp_path, sweep, errors):
    """Each job fails on its own (before simulating): its error.json holds its message, the
    sweep goes on to the next one, ends listing both, and exits 2 without a traceback."""
    root = tmp_path / "mr"
    proc = _servetune("simulate", "-m", *TINY[1:], *sweep(tmp_path), f"hydra.sweep.dir={root}")
    assert proc.returncode == 2, proc.stderr[-3000:]
    err = proc.stderr.replace("\n", " ")
    assert "2 job(s) failed:" in err and "Traceback" not in proc.stderr
    for job, message in enumerate(errors):
        record = json.loads((root / str(job) / "error.json").read_text())
        assert record["job"] == job and message in record["error"]
        assert f"#{job} (" in err and message in err
        assert not (root / str(job) / "metrics.json").exists()


@pytest.mark.slow  # ~12 s; the basic sweeper's failure path is in the default suite
def test_an_optuna_trial_that_fails_is_the_worst_value_not_the_end_of_the_study(tmp_path, cache):
    """Optuna refuses NaN; a failed trial returns -inf (the study maximizes), so the study
    goes on and its best trial is one that ran."""
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    root = tmp_path / "study"
    proc = _servetune(
        "simulate",
        "-m",
        "+experiment=optuna_policy",
        *TINY,
        "hardware.gpu=choice(h900,h100)",
        "hydra.sweeper.n_trials=4",
        "hydra.sweeper.n_jobs=2",
        "hydra.sweeper.sampler.n_startup_trials=2",
        f"hydra.sweep.dir={root}",
        cache=cache,
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    failed = sorted(int(p.parent.name) for p in root.glob("*/error.json"))
    ran = sorted(int(p.parent.name) for p in root.glob("*/metrics.json"))
    assert failed and ran and sorted(failed + ran) == [0, 1, 2, 3]
    result = yaml.safe_load((root / "optimization_results.yaml").read_text())
    assert result["best_params"]["hardware.gpu"] == "h100"
    assert math.isfinite(result["best_value"])
    assert f"{len(failed)} job(s) failed:" in proc.stderr


def test_joblib_launcher_runs_jobs_in_parallel_workers(tmp_path, cache):
    """hydra/launcher=joblib_local, n_jobs=2: a 2 x 2 multirun in two worker processes, each
    compiling (or loading) the simulator once."""
    pytest.importorskip("hydra_plugins.hydra_joblib_launcher")
    root = tmp_path / "mr"
    proc = _servetune(
        "simulate",
        "-m",
        "hydra/launcher=joblib_local",
        "hydra.launcher.n_jobs=2",
        *TINY,
        "policy.max_num_seqs=8,32",
        "seed=0,1",
        f"hydra.sweep.dir={root}",
        cache=cache,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "n_jobs=2,backend=loky" in proc.stdout + proc.stderr
    jobs = _jobs(root)
    assert sorted(jobs) == [0, 1, 2, 3]
    pids = {s["pid"] for _, _, s in jobs.values()}
    assert len(pids) == 2
    assert {s["jit_cache"]["run_chunk_batch"] for _, _, s in jobs.values()} == {1}
    assert "sweep: 4/4 job(s) done" in proc.stderr
    assert "sweep: 4 job(s), 2 point(s)" in proc.stdout
    for header in ("goodput rps", "SLO att.", "P99 TTFT ms", "P99 TPOT ms", "useful tok/$"):
        assert header in proc.stdout, header  # the report's columns, the headline included
    assert "in 2 process(es) across 4 job(s)" in proc.stdout


@pytest.mark.slow
def test_ray_launcher_on_a_local_ray_instance(tmp_path, cache):
    """hydra/launcher=ray_local: Ray starts a local instance and runs each job as a task."""
    pytest.importorskip("ray")
    pytest.importorskip("hydra_plugins.hydra_ray_launcher")
    root = tmp_path / "mr"
    proc = _servetune(
        "simulate",
        "-m",
        "hydra/launcher=ray_local",
        "hydra.launcher.ray.init.num_cpus=2",
        *TINY,
        "policy.max_num_seqs=8,32",
        f"hydra.sweep.dir={root}",
        cache=cache,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Ray Launcher is launching 2 jobs" in proc.stdout + proc.stderr
    jobs = _jobs(root)
    assert sorted(jobs) == [0, 1]
    assert all(math.isfinite(obj) for _, obj, _ in jobs.values())
    assert "sweep: 2/2 job(s) done" in proc.stderr
    assert "sweep: 2 job(s), 2 point(s)" in proc.stdout


@pytest.mark.slow
def test_submitit_launcher_locally(tmp_path, cache):
    """hydra/launcher=submitit_local: the SLURM launcher's plugin with local processes (what
    hydra/launcher=slurm runs on a cluster, less the queue)."""
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    root = tmp_path / "mr"
    proc = _servetune(
        "simulate",
        "-m",
        "hydra/launcher=submitit_local",
        "hydra.launcher.timeout_min=10",
        *TINY,
        "policy.max_num_seqs=8,32",
        f"hydra.sweep.dir={root}",
        cache=cache,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    jobs = _jobs(root)
    assert sorted(jobs) == [0, 1]
    assert len({s["pid"] for _, _, s in jobs.values()}) == 2  # one process per job
    assert "sweep: 2/2 job(s) done" in proc.stderr


def _metrics(useful=1000.0, cost=0.01, att=1.0, goodput=2.0):
    return {
        "useful_tokens": useful,
        "cost_usd": cost,
        "slo_attainment": att,
        "goodput_rps": goodput,
        "by_class": {},
    }


def test_sweep_objective():
    cfg = OmegaConf.create(
        {
            "sweep": {"objective": "penalized", "penalty": 100.0},
            "tune": {"objective": {"slo_target": 0.99, "aggregate": "mean"}},
        }
    )
    assert sweep_objective(cfg, [_metrics()]) == pytest.approx(math.log(1e5))
    # 4 points of attainment short of 99%: 100 x 0.04 below log(useful tokens per dollar)
    assert sweep_objective(cfg, [_metrics(att=0.95)]) == pytest.approx(math.log(1e5) - 4.0)
    # seeds averaged
    assert sweep_objective(cfg, [_metrics(), _metrics(useful=4000.0)]) == pytest.approx(
        (math.log(1e5) + math.log(4e5)) / 2
    )
    cfg.sweep.objective = "goodput_rps"
    assert sweep_objective(cfg, [_metrics(goodput=1.0), _metrics(goodput=3.0)]) == 2.0
    cfg.sweep.objective = "by_class"
    with pytest.raises(ConfigError, match="sweep.objective: got 'by_class'.*goodput_rps"):
        sweep_objective(cfg, [_metrics()])
    cfg.sweep.objective, cfg.sweep.penalty = "penalized", -1.0
    with pytest.raises(ConfigError, match="sweep.penalty: got -1.0"):
        sweep_objective(cfg, [_metrics()])
    cfg.sweep.objective, cfg.sweep.penalty = 3, 100.0
    with pytest.raises(ConfigError, match="sweep.objective: got 3"):
        sweep_objective(cfg, [_metrics()])


def test_count_jobs():
    basic = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"
    cfg = OmegaConf.create(
        {
            "hydra": {
                "sweeper": {"_target_": basic, "params": {"engine": "vllm,static", "seed": "0,1"}},
                "overrides": {
                    "task": ["policy.max_num_seqs=8,16,32", "seed=range(0,4)", "seeds=2"]
                },
            }
        }
    )
    assert count_jobs(cfg) == 2 * 3 * 4  # the command line's seed=range(0,4) wins
    cfg.hydra.overrides.task = []
    assert count_jobs(cfg) == 4
    optuna = "hydra_plugins.hydra_optuna_sweeper.optuna_sweeper.OptunaSweeper"
    assert (
        count_jobs(OmegaConf.create({"hydra": {"sweeper": {"_target_": optuna, "n_trials": 7}}}))
        == 7
    )
    assert count_jobs(OmegaConf.create({"hydra": {"sweeper": {"_target_": "x.Other"}}})) is None


def test_sweep_progress_plain_lines(tmp_path):
    """Not a terminal: a line when a job ends, at most every `every_s`, and one at the last."""
    out = io.StringIO()
    bar = progress_lib.SweepProgress(
        tmp_path,
        3,
        "done.json",
        every_s=3600,
        console=Console(file=out, force_terminal=False),
        poll_s=3600,
    ).start()
    try:
        assert os.environ[progress_lib.PID_ENV] == str(os.getpid())
        for k in range(3):
            (tmp_path / str(k)).mkdir()
            (tmp_path / str(k) / "done.json").write_text("{}")
            assert bar.poll() == k + 1
    finally:
        bar.stop()
    lines = out.getvalue().splitlines()
    assert len(lines) == 2  # job 2 fell within every_s of job 1's line
    assert lines[0].startswith("sweep: 1/3 job(s) done, 0:00:0") and "ETA" in lines[0]
    assert lines[1].startswith("sweep: 3/3 job(s) done")
    assert progress_lib.PID_ENV not in os.environ
    # a simulation without a terminal prints plain lines (run/progress.PlainProgress)
    with progress_lib.simulation_progress(True, console=Console(file=io.StringIO())) as cb:
        assert isinstance(cb, progress_lib.PlainProgress)


def test_sweep_progress_live_bar_hosts_the_simulation_bar(tmp_path, monkeypatch):
    """On a terminal the sweep draws a live bar; a simulation in the same process becomes a
    line under it; a parallel launcher's worker draws nothing of its own."""
    out = io.StringIO()
    bar = progress_lib.SweepProgress(
        tmp_path,
        2,
        "done.json",
        poll_s=3600,
        console=Console(file=out, force_terminal=True, width=100),
    ).start()
    try:
        assert progress_lib._LIVE is not None
        with progress_lib.simulation_progress(True) as cb:
            cb(5, 10)
            assert len(progress_lib._LIVE.tasks) == 2
        assert len(progress_lib._LIVE.tasks) == 1
        (tmp_path / "0").mkdir()
        (tmp_path / "0" / "done.json").write_text("{}")
        assert bar.poll() == 1
    finally:
        bar.stop()
    assert progress_lib._LIVE is None
    assert "sweep jobs" in out.getvalue() and "1/2" in out.getvalue()
    monkeypatch.setenv(progress_lib.PID_ENV, str(os.getpid() + 1))
    term = Console(file=io.StringIO(), force_terminal=True)
    with progress_lib.simulation_progress(True, console=term) as cb:
        assert cb is None
