"""One run per output folder and outputs as a set: a folder another
live run holds is refused naming it, a rerun moves the earlier run's outputs aside whole, a
run that fails while writing leaves no part of its set, and readers leave out a folder whose
run stopped before its set was complete (servetune/run/run_folder.py)."""

import json
import os
import shlex
import subprocess
import sys

import pandas as pd
import pytest

from servetune.reporting.collect import collect
from servetune.run import run_folder

SIM = ["workload=poisson", "workload.duration_s=5", "output.progress=false"]


def _cli(*args, limit_kib=None):
    cmd = [sys.executable, "-m", "servetune.cli.main", *map(str, args)]
    if limit_kib:  # a file-size limit: writes past it fail with EFBIG, as on a full disk
        # (set by the shell, not a preexec_fn: forking this JAX process could deadlock)
        cmd = ["bash", "-c", f"trap '' XFSZ; ulimit -f {limit_kib}; exec {shlex.join(cmd)}"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)


def _set_is_whole(folder):
    """The folder's record says complete and every file it lists is there."""
    doc = run_folder.record(folder)
    return doc["state"] == "complete" and all((folder / f).is_file() for f in doc["files"])


@pytest.mark.parametrize(
    "command", [["simulate", *SIM], ["tune", *SIM, "tune.iterations=1"], ["simulate", "-m", *SIM]]
)
def test_a_folder_a_live_run_holds_is_refused_naming_it(tmp_path, command):
    folder = tmp_path / "run"
    key = "hydra.sweep.dir" if "-m" in command else "hydra.run.dir"
    run_folder.claim(folder, "servetune simulate", supersede=False)  # this process holds it
    try:
        proc = _cli(*command, f"{key}={folder}")
    finally:
        run_folder.release(folder)
    assert proc.returncode == 2
    assert f"{folder}: in use by servetune simulate (pid {os.getpid()}" in proc.stderr
    assert not (folder / ".hydra").exists() and not (folder / "cli.log").exists()


def test_a_rerun_moves_the_earlier_outputs_aside_and_reports_read_one_run(tmp_path):
    folder = tmp_path / "run"
    assert _cli("simulate", *SIM, f"hydra.run.dir={folder}").returncode == 0
    first = json.loads((folder / "metrics.json").read_text())
    proc = _cli("simulate", *SIM, "seed=5", f"hydra.run.dir={folder}")
    assert proc.returncode == 0 and "held an earlier run's outputs; moved them" in proc.stderr
    (old,) = (folder / run_folder.SUPERSEDED).iterdir()
    assert json.loads((old / "metrics.json").read_text()) == first
    assert _set_is_whole(folder) and _set_is_whole(old)
    assert "seed=5" in (folder / ".hydra" / "overrides.yaml").read_text()
    assert "seed=5" not in (old / ".hydra" / "overrides.yaml").read_text()
    assert len(collect(folder).runs) == 1  # superseded/ is not collected with the new run
    assert collect(old).runs["seed"].tolist() == [0]  # and reads alone when named


# the set in the order simulate writes it (commands._write_outputs), then objective.json
ORDER = (
    "config_resolved.yaml",
    "metrics.json",
    "vllm_bench.json",
    "metrics.csv",
    "requests.parquet",
)


@pytest.mark.slow  # each case runs simulate three times (about 25 s on 2 cores)
@pytest.mark.parametrize(
    "fails, extra",
    [
        ("metrics.json", ["seeds=3", "output.save_detailed=false"]),  # three scenarios' metrics
        ("vllm_bench.json", []),  # its per-request arrays
        ("requests.parquet", ["output.save_detailed=false"]),
    ],
)
def test_a_failed_write_publishes_no_part_of_the_set(tmp_path, fails, extra):
    """A file-size limit just below one file of the set (measured on the same run) makes that
    write fail, as a full disk would: the folder then holds the earlier run's set, put back
    whole, and no part of the new one, whose own files (its log) are kept aside."""
    folder = tmp_path / "run"
    assert _cli("simulate", *SIM, *extra, f"hydra.run.dir={folder}").returncode == 0
    sizes = {p.name: p.stat().st_size for p in folder.rglob("*") if p.is_file()}
    limit_kib = (sizes[fails] - 64) // 1024
    limit = limit_kib * 1024
    before = ORDER[: ORDER.index(fails)]
    assert all(sizes[name] < limit for name in before)  # the earlier files fit under it
    assert all(
        size < limit
        for name, size in sizes.items()
        if name.endswith((".yaml", ".log")) and name not in ORDER
    )  # so do Hydra's own files
    proc = _cli("simulate", *SIM, *extra, f"hydra.run.dir={folder}", limit_kib=limit_kib)
    assert proc.returncode == 2 and f"{fails}: could not write it (" in proc.stderr
    assert "File too large" in proc.stderr
    assert not list(folder.glob(".staging-*"))
    assert "put back the earlier run's outputs" in proc.stderr
    # (issue 64) the folder held neither set; now it holds the earlier run's, whole
    assert _set_is_whole(folder)
    assert {p.name: p.stat().st_size for p in folder.glob("metrics.*")} == {
        k: v for k, v in sizes.items() if k.startswith("metrics.")
    }
    (failed,) = (folder / run_folder.SUPERSEDED).iterdir()
    assert failed.name.endswith("-failed") and (failed / "cli.log").is_file()
    assert run_folder.record(failed)["state"] == "failed"
    assert "could not write it" in run_folder.record(failed)["error"]
    # a later run into the folder moves the earlier set aside and publishes its own
    assert _cli("simulate", *SIM, f"hydra.run.dir={folder}").returncode == 0
    assert _set_is_whole(folder)


def test_readers_leave_out_a_run_that_stopped_while_publishing(tmp_path):
    for name in ("a", "b"):
        run = tmp_path / name
        run.mkdir()
        pd.DataFrame({"seed": [0], "goodput_rps": [1.0], "slo_attainment": [1.0]}).to_csv(
            run / "metrics.csv", index=False
        )
    (tmp_path / "b" / run_folder.LOCK).write_text(
        json.dumps(
            {
                "command": "servetune simulate",
                "pid": 999999999,
                "host": "h",
                "started": "t",
                "state": "publishing",
                "files": ["metrics.csv", "metrics.json"],
            }
        )
    )
    col = collect(tmp_path)
    assert set(col.runs["run"]) == {"a"}
    assert any(
        "b: incomplete: its run (servetune simulate (pid 999999999" in m for m in col.skipped
    )


def test_a_stale_lock_of_a_dead_run_is_taken_over(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / run_folder.LOCK).write_text(json.dumps({"pid": 999999999, "state": "running"}))
    assert not run_folder.held_by_live_run(folder)  # no process holds its flock
    run_folder.claim(folder, "servetune simulate", supersede=True)
    try:
        assert run_folder.record(folder)["pid"] == os.getpid()
    finally:
        run_folder.release(folder)


def test_a_report_replaces_its_set_whole(tmp_path):
    """A second report over other runs removes the first one's figures it does not draw."""
    out = tmp_path / "report"
    out.mkdir()
    staged = run_folder.staging(out)
    for name in ("runs.csv", "fig_timeline.png"):
        (staged / name).write_text("first")
    run_folder.publish(out, staged, "servetune report")
    staged = run_folder.staging(out)
    (staged / "runs.csv").write_text("second")
    run_folder.publish(out, staged, "servetune report")
    assert sorted(p.name for p in out.iterdir()) == [run_folder.LOCK, "runs.csv"]
    assert (out / "runs.csv").read_text() == "second"


def test_only_a_runs_own_entries_are_moved_aside(tmp_path):
    """hydra.run.dir=. in a project folder: the user's files stay where they are."""
    (tmp_path / "my_trace.csv").write_text("arrival_s,prompt_tokens,output_tokens\n")
    (tmp_path / "notes").mkdir()
    for name in ("metrics.json", "cli.log"):
        (tmp_path / name).write_text("{}")
    (tmp_path / ".hydra").mkdir()
    (tmp_path / "0" / ".hydra").mkdir(parents=True)  # a sweep's job folder
    moved = run_folder.claim(tmp_path, "servetune simulate", supersede=True)
    try:
        assert sorted(p.name for p in moved.iterdir()) == [".hydra", "0", "cli.log", "metrics.json"]
        assert sorted(p.name for p in tmp_path.iterdir()) == [
            run_folder.LOCK,
            "my_trace.csv",
            "notes",
            run_folder.SUPERSEDED,
        ]
    finally:
        run_folder.release(tmp_path)


KILLED = [*SIM, "seeds=2"]


@pytest.fixture(scope="module")
def full_run_s(tmp_path_factory):
    """Wall seconds of an uninterrupted run of KILLED (compilation cached by then)."""
    import time

    folder = tmp_path_factory.mktemp("timed") / "run"
    assert _cli("simulate", *KILLED, f"hydra.run.dir={folder}").returncode == 0  # compiles
    start = time.perf_counter()
    assert _cli("simulate", *KILLED, f"hydra.run.dir={folder}").returncode == 0
    return time.perf_counter() - start


@pytest.mark.slow
@pytest.mark.parametrize("fraction", [0.1, 0.5, 0.8, 0.9, 0.95, 0.98, 1.0])
def test_a_run_killed_at_any_point_leaves_a_folder_the_next_run_and_report_read(
    tmp_path, full_run_s, fraction
):
    """SIGKILL at fractions of a run's wall time (start, simulation, writing, publishing):
    the folder then holds a complete set, or none a reader takes, and a rerun into it
    publishes its own."""
    import time

    folder = tmp_path / "run"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "servetune.cli.main",
            "simulate",
            *KILLED,
            f"hydra.run.dir={folder}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(full_run_s * fraction)
    proc.kill()
    proc.wait()
    doc = run_folder.record(folder) if folder.exists() else None
    if doc is not None and doc.get("state") == "complete":
        assert _set_is_whole(folder)
    elif folder.exists():  # stopped before its set was whole: no reader takes it
        assert run_folder.incomplete(folder) is not None or not (folder / "metrics.csv").exists()
    assert _cli("simulate", *SIM, f"hydra.run.dir={folder}").returncode == 0
    assert _set_is_whole(folder) and len(collect(tmp_path).runs) == 1
