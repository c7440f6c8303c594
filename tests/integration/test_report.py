"""Sweeps and reports: a tiny multirun end to end, then `servetune report` on it; the simulator
compiles once across the multirun's jobs (and a later process reuses the compiled simulator from
the persistent cache); the statistics behind the report's verdicts.

CLI runs go through a subprocess: Hydra's logging setup interferes with pytest's capture.
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from servetune.cli.report import main as report_main
from servetune.reporting import report
from servetune.reporting.browser import check_page, find_chromium
from servetune.reporting.collect import collect, parse_overrides
from servetune.reporting.latency import point_cdfs
from servetune.reporting.numbers import fmt
from servetune.reporting.stats import aggregate, bootstrap, compare, verdicts

SWEEP = [
    "workload=poisson",
    "workload.duration_s=8",
    "window.drain_s=30",
    "policy.max_num_seqs=8,32",
    "seed=0,1",
    "output.progress=false",
]


def _env():
    env = dict(os.environ, JAX_LOG_COMPILES="1")
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    return env


def _servetune(*args, timeout=600):
    cmd = [sys.executable, "-m", "servetune.cli.main", *args]
    return subprocess.run(
        cmd, capture_output=True, text=True, timeout=timeout, check=False, env=_env()
    )


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """A 2 x 2 multirun (max_num_seqs x seed), 4 jobs in one process, with its own
    persistent compilation cache."""
    tmp = tmp_path_factory.mktemp("sweep")
    cache = tmp / "jax_cache"
    proc = _servetune(
        "simulate",
        "-m",
        *SWEEP,
        f"compilation_cache.dir={cache}",
        "compilation_cache.min_compile_time_s=0",
        f"hydra.sweep.dir={tmp / 'mr'}",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return tmp / "mr", cache, proc


def test_multirun_compiles_the_simulator_once(sweep):
    root, cache, proc = sweep
    stats = [json.loads((root / str(k) / "jit_cache.json").read_text()) for k in range(4)]
    # Hydra's basic launcher: every job in one process, whose jit cache holds one executable
    assert len({s["pid"] for s in stats}) == 1
    assert [s["jit_cache"]["run_chunk_batch"] for s in stats] == [1, 1, 1, 1]
    # JAX's own compile log agrees: run_chunk_batch compiled once across the four jobs
    log = proc.stdout + proc.stderr
    assert len(re.findall(r"Compiling jit\(run_chunk_batch\)", log)) == 1
    # the end-of-sweep summary: the swept values, the compile count, the report command
    assert "sweep: 4 job(s), 2 point(s)" in proc.stdout
    assert re.search(
        r"compilations: run_chunk_batch 1x.* in 1 process\(es\) across 4 job\(s\)", proc.stdout
    )
    assert f"servetune report {root}" in proc.stdout
    # and the persistent cache holds it for later processes
    assert any(p.name.startswith("jit_run_chunk_batch") for p in cache.iterdir())


def test_a_later_process_loads_the_simulator_from_the_persistent_cache(sweep, tmp_path):
    _, cache, _ = sweep
    proc = _servetune(
        "simulate",
        "workload=poisson",
        "workload.duration_s=8",
        "window.drain_s=30",
        "policy.max_num_seqs=16",
        "output.progress=false",
        f"compilation_cache.dir={cache}",
        f"hydra.run.dir={tmp_path}",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Persistent compilation cache hit for 'jit_run_chunk_batch'" in proc.stdout + proc.stderr


def test_report_on_a_multirun(sweep, tmp_path):
    root, _, _ = sweep
    out = tmp_path / "rep"
    proc = _servetune("report", str(root), "--out", str(out), "--bootstrap", "300")
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = pd.read_parquet(out / "runs.parquet")
    assert len(runs) == 4
    assert {
        "run",
        "scenario",
        "policy.max_num_seqs",
        "seed",
        "workload",
        "goodput_rps",
        "slo_attainment",
        "ttft_p99_s",
        "tpot_p99_s",
        "useful_tokens_per_dollar",
        "ttft_p99_s_ci_lo",
        "ttft_p99_s_ci_hi",
    } <= set(runs.columns)
    assert sorted(zip(runs["policy.max_num_seqs"], runs["seed"], strict=True)) == [
        (8, 0),
        (8, 1),
        (32, 0),
        (32, 1),
    ]
    assert set(runs["workload"]) == {"poisson"} and set(runs["workload.duration_s"]) == {8}
    csv = pd.read_csv(out / "runs.csv")
    assert len(csv) == 4 and np.allclose(csv["goodput_rps"], runs["goodput_rps"])
    # each run's numbers are its own metrics.csv's
    for _, row in runs.iterrows():
        own = pd.read_csv(root / row["run"] / "metrics.csv").iloc[0]
        assert own["seed"] == row["seed"] and own["goodput_rps"] == row["goodput_rps"]
        assert row["ttft_p99_s_ci_lo"] <= row["ttft_p99_s"] <= row["ttft_p99_s_ci_hi"]
    points = pd.read_csv(out / "points.csv")
    assert list(points["policy.max_num_seqs"]) == [8, 32] and list(points["n"]) == [2, 2]
    for _, p in points.iterrows():
        seeds = runs[runs["policy.max_num_seqs"] == p["policy.max_num_seqs"]]
        assert np.isclose(p["goodput_rps_mean"], seeds["goodput_rps"].mean())
        assert np.isclose(p["goodput_rps_std"], seeds["goodput_rps"].std(ddof=1))
        assert p["ttft_p99_s_ci_lo"] < p["ttft_p99_s_ci_hi"]
    png = out / "fig_policy.max_num_seqs.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = (out / "report.html").read_text()
    # self-contained: plotly.js inline, no script from the network
    assert "<script src=" not in page and "Plotly.newPlot" in page and len(page) > 1_000_000
    data = json.loads(
        re.search(r"id='servetune-runs'>(.*?)</script>", page, re.DOTALL)
        .group(1)
        .replace("<\\/", "</")
    )
    assert sorted(r["policy.max_num_seqs"] for r in data) == [8, 8, 32, 32]
    assert np.allclose(sorted(r["goodput_rps"] for r in data), sorted(runs["goodput_rps"]))
    for label in ("P99", "P90", "P50", "mean", "y log", "x log", "togglegroup"):
        assert label in page
    assert "distinguishable" in page and "distinguishable" in proc.stdout
    _check_answers(root, out, points, page, proc.stdout)


def _check_answers(root, out, points, page, stdout):
    """Which setting and why, on a real sweep: the best by the tuner's order worked out from
    points.csv, the CDFs from the requests, latencies in ms, the missing timeline explained."""
    best = pd.read_csv(out / "best.csv")
    assert list(best["condition"]) == ["all points"]  # max_num_seqs is a setting, no condition
    meets = points[points["slo_attainment_mean"] >= 0.99]
    want = (
        meets.loc[meets["useful_tokens_per_dollar_mean"].idxmax()]
        if len(meets)
        else points.loc[points["slo_attainment_mean"].idxmax()]
    )
    assert best["setting"].iloc[0] == f"max_num_seqs={want['policy.max_num_seqs']}"
    assert bool(best["meets_target"].iloc[0]) == bool(len(meets))
    assert best["run"].iloc[0] == want["run"] and best["slo_target"].iloc[0] == 0.99
    # the CDF of TTFT of max_num_seqs=8, by hand: the counted, completed requests of both seeds
    runs = pd.read_csv(out / "runs.csv")
    lat = []
    for run in runs.loc[runs["policy.max_num_seqs"] == 8, "run"]:
        req = pd.read_parquet(root / str(run) / "requests.parquet")
        req = req[req["counted"] & (req["end_state"] == "completed")]
        lat += list(req["ttft_s"] * 1000.0)
    cdf = point_cdfs(collect(root, exclude=out), skipped=[])["max_num_seqs=8"]["ttft"]
    assert len(lat) == cdf.n > 20 and np.allclose(cdf.x_ms, sorted(lat))
    assert np.allclose(cdf.p, np.arange(1, len(lat) + 1) / len(lat))
    for png in ("fig_pareto.png", "fig_latency_cdf.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not (out / "fig_timeline.png").exists()
    for fid in ("fig-pareto", "fig-cdf", "fig-0"):
        assert f"class='servetune-figure' id='{fid}'" in page
    assert "has no timeline.parquet" in page and "output.timeline=true" in page
    assert "<b>SLO TTFT target</b>: 2000 ms" in page and "P99 TTFT (ms)" in page
    assert "P99 TTFT ms" in stdout and "best setting per condition" in stdout
    assert "timeline: run " in stdout and "output.timeline=true" in stdout


def test_report_without_runs_is_a_clear_error(tmp_path):
    proc = _servetune("report", str(tmp_path))
    assert proc.returncode == 2
    assert "no runs found" in proc.stderr


def _fake_run(path, overrides, seed, ttft, window_s=10.0):
    """A run directory as `servetune simulate` writes it, with made-up requests."""
    (path / ".hydra").mkdir(parents=True)
    (path / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    n = len(ttft)
    req = pd.DataFrame(
        {
            "counted": np.ones(n, bool),
            "end_state": ["completed"] * n,
            "ttft_s": ttft,
            "tpot_s": np.full(n, 0.01),
            "e2e_s": ttft + 1.0,
            "qualifies": ttft < 2.0,
            "scenario": np.zeros(n, int),
        }
    )
    req.to_parquet(path / "requests.parquet")
    metrics = {
        "seed": seed,
        "goodput_rps": req["qualifies"].sum() / window_s,
        "slo_attainment": req["qualifies"].mean(),
        "window_s": window_s,
        "ttft_p99_s": np.percentile(ttft, 99),
        "tpot_p99_s": 0.01,
        "useful_tokens_per_dollar": 1000.0 * req["qualifies"].mean(),
    }
    pd.DataFrame([metrics]).to_csv(path / "metrics.csv", index=False)


def test_points_verdicts_and_overrides(tmp_path):
    rng = np.random.default_rng(1)
    scale = {"a": 0.5, "b": 0.5, "c": 5.0}  # a and b: one distribution; c: ten times slower
    job = 0
    for policy, s in scale.items():
        for seed in (0, 1):
            _fake_run(
                tmp_path / str(job),
                [f"policy={policy}", f"seed={seed}", "x=[1,2]"],
                seed,
                rng.exponential(s, 400),
            )
            job += 1
    col = collect(tmp_path)
    assert col.keys == ["policy"] and len(col.runs) == 6
    assert set(col.runs["x"]) == {"[1, 2]"}  # a list override is one text cell
    reps = bootstrap(col, 400)
    points = aggregate(col, reps)
    assert list(points["point"]) == ["policy=a", "policy=b", "policy=c"]
    assert list(points["n"]) == [2, 2, 2]
    comp = compare(points)
    ttft = comp[comp["metric"] == "ttft_p99_s"].set_index("other")["distinguishable"]
    best = comp[comp["metric"] == "ttft_p99_s"]["best"].iloc[0]
    assert best in ("policy=a", "policy=b")
    assert bool(ttft["policy=c"]) is True
    twin = "policy=b" if best == "policy=a" else "policy=a"
    assert bool(ttft[twin]) is False
    lines = verdicts(comp)
    assert any(  # a and b cannot be told apart: tied, not "best"
        line.startswith(f"P99 TTFT: tied: {best} (")
        and " ms)" in line
        and "not distinguishable from 1 of 2" in line
        and line.endswith(twin)
        for line in lines
    )
    rep = report(tmp_path, tmp_path / "out", n_boot=200, html=False)
    assert (tmp_path / "out" / "fig_policy.png").exists() and len(rep.runs) == 6


def test_parse_overrides_reads_as_hydra_does():
    values, swept = parse_overrides(["a.b=1", "+c=x", "d=1,2", "e=[1,2]", "f=null", "~g"])
    assert values == {"a.b": 1, "c": "x", "d": None, "e": "[1, 2]", "f": None}
    assert swept == ["d"]


def test_the_one_number_formatter():
    assert fmt(4096.0) == "4096" and fmt(0.012345) == "0.01235" and fmt(1234567.8) == "1.235e+06"
    assert fmt(float("inf")) == "inf" and fmt(-np.inf) == "-inf"  # an unlimited cap stays visible
    assert fmt(None) == "-" and fmt(float("nan")) == "-" and fmt(np.nan, missing="?") == "?"
    assert fmt(np.float32(2.5)) == "2.5" and fmt(7) == "7" and fmt("fcfs") == "fcfs"


def _damaged_sweep(root):
    """Seven fake runs of two policies; five of them damaged in a different way each."""
    rng = np.random.default_rng(2)
    for job in range(7):
        _fake_run(
            root / str(job),
            [f"policy={'ab'[job % 2]}", f"seed={job}"],
            job,
            rng.exponential(0.5, 50),
        )
    (root / "1" / "metrics.csv").write_bytes(b"\x00\xff\xfe binary \x89PNG\r\n")
    (root / "2" / "metrics.csv").write_text("seed,goodput_rps,slo_attainment\n")
    (root / "3" / ".hydra" / "overrides.yaml").write_text("- policy=[unclosed\n")
    (root / "4" / ".hydra" / "overrides.yaml").write_text("- policy: {: oops\n")
    parquet = (root / "5" / "requests.parquet").read_bytes()
    (root / "5" / "requests.parquet").write_bytes(parquet[: len(parquet) // 2])
    (root / "6" / "config_resolved.yaml").write_bytes(b"\xff\xfe\x00binary")
    (root / "multirun.yaml").write_text("hydra: [unclosed\n")


def test_a_report_leaves_out_damaged_run_folders_and_names_them(tmp_path):
    _damaged_sweep(tmp_path)
    rep = report(tmp_path, tmp_path / "out", n_boot=50, figures=False)
    assert sorted(rep.runs["run"]) == ["0", "5"]  # 5 keeps its metrics, loses its intervals
    names = [m.split(": cannot read")[0] for m in rep.skipped]
    assert sorted(names) == sorted(
        str(tmp_path / p)
        for p in (
            "1/metrics.csv",
            "2/metrics.csv",
            "3/.hydra/overrides.yaml",
            "4/.hydra/overrides.yaml",
            "6/config_resolved.yaml",
            "multirun.yaml",
            "5/requests.parquet",
        )
    )
    assert any("a header and no rows" in m for m in rep.skipped)
    five = rep.runs.set_index("run").loc["5"]
    assert np.isnan(five["ttft_p99_s_ci_lo"]) and np.isfinite(five["ttft_p99_s"])
    assert "left out (damaged)" in (tmp_path / "out" / "report.html").read_text()


def test_report_command_warns_for_each_damaged_folder(tmp_path):
    _damaged_sweep(tmp_path)
    proc = _servetune(
        "report", str(tmp_path), "--bootstrap", "20", "--no-figures", "--no-html", timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    err = proc.stderr.replace("\n", " ")
    assert err.count("warning: left out") == 7
    assert f"{tmp_path / '1' / 'metrics.csv'}: cannot read" in err
    assert "Traceback" not in proc.stderr


def test_a_report_of_only_damaged_runs_is_an_error_listing_them(tmp_path):
    _damaged_sweep(tmp_path)
    for job in (0, 5, 6):
        (tmp_path / str(job) / "metrics.csv").write_text("")
    proc = _servetune("report", str(tmp_path), timeout=120)
    assert proc.returncode == 2
    assert "no readable runs; every run folder is damaged" in proc.stderr
    assert proc.stderr.count("cannot read") >= 6 and "Traceback" not in proc.stderr


# --------------------------------------------------------------------------- damaged folders

HEADER = "seed,goodput_rps,slo_attainment\n"


def _two_runs(root):
    """Runs `good` (policy a) and `bad` (policy b) under `root`, for a test to damage `bad`."""
    rng = np.random.default_rng(0)
    _fake_run(root / "good", ["policy=a", "seed=0"], 0, rng.exponential(0.5, 50))
    _fake_run(root / "bad", ["policy=b", "seed=1"], 1, rng.exponential(0.5, 50))
    return root / "bad"


def _replace_with_folder(path):
    path.unlink()
    path.mkdir()


@pytest.mark.parametrize(
    "damage, says",
    [
        # a row with more fields than the header: pandas took its first fields as an index and
        # read the run as seed 0.5, goodput 7 (ranked best)
        (
            lambda bad: (bad / "metrics.csv").write_text(HEADER + "0,1.0,0.5,7,8\n"),
            (
                r"bad/metrics\.csv:2: cannot read \(5 fields; the header has 3: seed, goodput_rps, "
                r"slo_attainment\)"
            ),
        ),
        (
            lambda bad: (bad / "metrics.csv").write_text(HEADER + "0,1.0,0.5\n\n1,1.0\n"),
            r"bad/metrics\.csv:4: cannot read \(2 fields; the header has 3",
        ),
        # text where a metric belongs: it went into runs.csv as a string
        (
            lambda bad: (bad / "metrics.csv").write_text(HEADER + "0,abc,xyz\n"),
            r"bad/metrics\.csv:2: cannot read \(column 'goodput_rps' = 'abc'; expected a number\)",
        ),
        (
            lambda bad: (bad / "metrics.csv").write_text(HEADER + "0,1.0,0.5\n1,1_000,0.5\n"),
            r"bad/metrics\.csv:3: cannot read \(column 'goodput_rps' = '1_000'; "
            r"expected a number\)",
        ),
        (
            lambda bad: _replace_with_folder(bad / "metrics.csv"),
            r"bad/metrics\.csv: is a directory; expected a metrics\.csv",
        ),
        # values no run can have: a fraction above 1, an infinite or negative rate, no seed
        (
            lambda bad: (bad / "metrics.csv").write_text(HEADER + "0,1.0,1.5\n"),
            (
                r"bad/metrics\.csv:2: cannot read \(column 'slo_attainment' = 1\.5; expected "
                r"within "
                r"\[0, 1\]\)"
            ),
        ),
        (
            lambda bad: (bad / "metrics.csv").write_text(HEADER + "0,inf,0.5\n"),
            (
                r"bad/metrics\.csv:2: cannot read \(column 'goodput_rps' = inf; expected a finite "
                r"number >= 0\)"
            ),
        ),
        (
            lambda bad: (bad / "metrics.csv").write_text(HEADER + "0,1.0,0.5\n1,-2.0,0.5\n"),
            r"bad/metrics\.csv:3: cannot read \(column 'goodput_rps' = -2; expected a finite",
        ),
        (
            lambda bad: (bad / "metrics.csv").write_text(HEADER + "0.5,1.0,0.5\n"),
            r"bad/metrics\.csv:2: cannot read \(column 'seed' = 0\.5; expected",
        ),
        (
            lambda bad: (bad / "metrics.csv").write_text("goodput_rps,slo_attainment\n1.0,0.5\n"),
            (
                r"bad/metrics\.csv: cannot read \(no column 'seed'; expected the metrics\.csv "
                r"servetune "
                r"simulate writes\)"
            ),
        ),
        (
            lambda bad: (bad / ".hydra" / "overrides.yaml").write_text("policy: b\n"),
            r"bad/\.hydra/overrides\.yaml: cannot read \(a dict; expected a list of Hydra "
            r"overrides\)",
        ),
    ],
)
def test_a_damaged_run_folder_is_left_out_with_its_file_and_line(tmp_path, capsys, damage, says):
    damage(_two_runs(tmp_path))
    rep = report(tmp_path, tmp_path / "out", n_boot=20, figures=False, html=False)
    assert list(rep.runs["run"]) == ["good"]
    assert len(rep.skipped) == 1 and re.search(says, rep.skipped[0]), rep.skipped
    assert (
        report_main(
            [
                str(tmp_path),
                "--out",
                str(tmp_path / "cli"),
                "--bootstrap",
                "0",
                "--no-figures",
                "--no-html",
            ]
        )
        == 0
    )
    err = " ".join(capsys.readouterr().err.split())
    assert re.search("warning: left out .*" + says, err) and "Traceback" not in err


def test_an_empty_requests_parquet_costs_its_run_the_intervals_only(tmp_path):
    (_two_runs(tmp_path) / "requests.parquet").write_bytes(b"")
    rep = report(tmp_path, tmp_path / "out", n_boot=20, figures=False, html=False)
    assert sorted(rep.runs["run"]) == ["bad", "good"]
    assert len(rep.skipped) == 1 and re.search(
        r"bad/requests\.parquet: cannot read \(.*0 bytes\); no intervals for this run",
        rep.skipped[0],
    ), rep.skipped
    runs = rep.runs.set_index("run")
    assert np.isnan(runs.loc["bad", "ttft_p99_s_ci_lo"])
    assert np.isfinite(runs.loc["good", "ttft_p99_s_ci_lo"])


def test_metrics_as_simulate_writes_them_are_read(tmp_path):
    """Flags, empty (undefined) metrics, inf and text grid values are not damage."""
    bad = _two_runs(tmp_path)
    (bad / "metrics.csv").write_text(
        "seed,policy.order,goodput_rps,stalled,ttft_p99_s,"
        "cost_per_qualifying_request_usd\n1,fcfs,1.5,False,,inf\n"
    )
    rep = report(tmp_path, tmp_path / "out", n_boot=0, figures=False, html=False)
    assert sorted(rep.runs["run"]) == ["bad", "good"] and rep.skipped == []
    row = rep.runs.set_index("run").loc["bad"]
    assert row["goodput_rps"] == 1.5 and row["policy.order"] == "fcfs"


# --------------------------------------------------------------------------- --out


def _report_cli(root, out, *more):
    return report_main([str(root), "--out", str(out), "--bootstrap", "0", *more])


def test_out_with_an_unknown_user_is_an_error_not_a_literal_folder(tmp_path, monkeypatch, capsys):
    _two_runs(tmp_path / "runs")
    monkeypatch.chdir(tmp_path)
    assert _report_cli("runs", "~nosuchuser_servetune/out", "--no-figures") == 2
    err = " ".join(capsys.readouterr().err.split())
    assert (
        "error: --out: got '~nosuchuser_servetune/out'; cannot expand "
        "'~nosuchuser_servetune' (no such user or home folder)"
    ) in err
    assert not (tmp_path / "~nosuchuser_servetune").exists()
    assert report_main(["~nosuchuser_servetune/runs"]) == 2
    assert "error: DIR: got '~nosuchuser_servetune/runs'; cannot expand" in " ".join(
        capsys.readouterr().err.split()
    )


def test_out_under_home_is_expanded(tmp_path, monkeypatch):
    _two_runs(tmp_path / "runs")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    assert _report_cli("runs", "~/rep", "--no-figures", "--no-html") == 0
    assert (tmp_path / "home" / "rep" / "runs.csv").exists()
    assert not (tmp_path / "~").exists()


@pytest.mark.parametrize("taken", ["report.html", "runs.csv", "fig_policy.png"])
def test_a_folder_where_a_report_file_goes_is_refused_before_anything_is_written(
    tmp_path, capsys, taken
):
    _two_runs(tmp_path / "runs")
    out = tmp_path / "out"
    (out / taken).mkdir(parents=True)
    assert _report_cli(tmp_path / "runs", out) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert (
        f"error: --out {out}: {taken} is a folder; expected a file the report replaces "
        f"(move the folder away); nothing was written"
    ) in err
    assert [p.name for p in out.iterdir()] == [taken] and not any((out / taken).iterdir())


def test_out_in_a_read_only_place_is_an_error(tmp_path, capsys):
    _two_runs(tmp_path / "runs")
    places = []
    if Path("/sys/kernel").is_dir():  # sysfs: no new folder there, even for the superuser
        places.append(Path("/sys/servetune-report"))
    if os.geteuid() != 0:  # the superuser writes into a read-only folder
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o555)
        places.append(locked / "out")
    if not places:
        pytest.skip("no read-only place on this system")
    for out in places:
        assert _report_cli(tmp_path / "runs", out, "--no-figures") == 2
        err = " ".join(capsys.readouterr().err.split())
        assert re.search(
            rf"error: (--out )?{re.escape(str(out))}: cannot be an output folder "
            r"\(",
            err,
        ), err
        assert "Traceback" not in err and not out.exists()


@pytest.mark.slow
def test_report_per_condition_and_of_a_replay_on_real_runs(tmp_path):
    """A real sweep over a workload condition (rate) and a setting, and a replayed trace whose
    seeds are identical: best per rate, 'no information' for the replay; the page in Chromium
    when there is one."""
    proc = _servetune(
        "simulate",
        "-m",
        "workload=poisson",
        "workload.duration_s=8",
        "window.drain_s=30",
        "workload.rate=5,40",
        "policy.max_num_seqs=4,32",
        "output.progress=false",
        f"hydra.sweep.dir={tmp_path / 'mr'}",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rep = report(tmp_path / "mr", tmp_path / "out", n_boot=200)
    assert rep.conditions == ["workload.rate"] and list(rep.best["condition"]) == [
        "workload.rate=5",
        "workload.rate=40",
    ]
    for (cond, g), best in zip(
        rep.points.groupby("workload.rate", sort=False), rep.best.itertuples(), strict=True
    ):
        meets = g[g["slo_attainment_mean"] >= 0.99]
        want = (
            meets.loc[meets["useful_tokens_per_dollar_mean"].idxmax()]
            if len(meets)
            else g.loc[g["slo_attainment_mean"].idxmax()]
        )
        assert best.setting == f"max_num_seqs={want['policy.max_num_seqs']}", (cond, best)
    if find_chromium() is not None:
        result = check_page(rep.out_dir / "report.html")
        assert result.problems == [] and result.drawn == 4  # pareto, cdf, 2 keys
    trace = tmp_path / "trace.csv"
    trace.write_text(
        "arrival_s,prompt_tokens,output_tokens\n"
        + "".join(f"{k * 0.1},{200 + 37 * k % 900},{1 + 13 * k % 200}\n" for k in range(80))
    )
    proc = _servetune(
        "simulate",
        "-m",
        "workload=file",
        f"workload.path={trace}",
        "workload.replicas.block_s=null",  # every seed replays the file
        "policy.max_num_seqs=8,64",
        "seed=0,1",
        "output.progress=false",
        f"hydra.sweep.dir={tmp_path / 'replay'}",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rep = report(tmp_path / "replay", tmp_path / "out2", n_boot=200, figures=False)
    # every seed replays the file: a metric without a bootstrap of its requests has no
    # information; useful tokens per dollar has one (its requests'), which here overlaps
    good = rep.comparisons[rep.comparisons["metric"] == "goodput_rps"].iloc[0]
    assert good["distinguishable"] is None and good["note"].startswith("no information")
    assert any(
        v.startswith("goodput: best") and "no information to tell it from 1" in v
        for v in rep.verdicts
    )
    tpd = rep.comparisons[rep.comparisons["metric"] == "useful_tokens_per_dollar"].iloc[0]
    assert tpd["distinguishable"] is False
    assert any(v.startswith("useful tokens per $: tied: ") for v in rep.verdicts)
