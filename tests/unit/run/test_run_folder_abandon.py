"""A run that fails before publishing its set (servetune/run/run_folder.abandon): its record
says failed, so no folder claims a run that is gone, and an earlier run's set it had moved
aside is put back, its own files kept in superseded/<time>-failed/. On hand-made folders: no
simulation, no subprocess."""

from __future__ import annotations

import json

import pytest

from servetune.run import run_folder


@pytest.fixture
def finished(tmp_path):
    """A folder holding a finished simulate run's set (as publish leaves it)."""
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / ".hydra").mkdir()
    (folder / ".hydra" / "overrides.yaml").write_text("- seed=0\n")
    (folder / "cli.log").write_text("the earlier run\n")
    files = ["metrics.json", "metrics.csv", "vllm_bench.json"]
    for name in files:
        (folder / name).write_text(json.dumps({"run": "earlier", "file": name}))
    record = {"command": "servetune simulate", "pid": 1, "state": "complete", "files": files}
    (folder / run_folder.LOCK).write_text(json.dumps(record))
    return folder, files


def _new_run_starts(folder):
    """What Hydra writes for a new run once it has claimed the folder."""
    (folder / ".hydra").mkdir()
    (folder / ".hydra" / "overrides.yaml").write_text("- seed=5\n")
    (folder / "cli.log").write_text("error: metrics.json: could not write it\n")


def test_a_rerun_that_fails_puts_the_earlier_set_back_and_keeps_its_log(finished):
    """(issue 64) the rerun moved the earlier outputs aside, then wrote nothing: the folder
    held neither set."""
    folder, files = finished
    moved = run_folder.claim(folder, "servetune simulate", supersede=True)
    try:
        assert moved is not None and not (folder / "metrics.json").exists()
        _new_run_starts(folder)
        assert run_folder.abandon(folder, "metrics.json: could not write it") == moved
    finally:
        run_folder.release(folder)
    doc = run_folder.record(folder)
    assert doc["state"] == "complete" and doc["files"] == files
    for name in files:
        assert json.loads((folder / name).read_text())["run"] == "earlier"
    assert (folder / "cli.log").read_text() == "the earlier run\n"
    assert "seed=0" in (folder / ".hydra" / "overrides.yaml").read_text()
    assert not moved.exists()
    (failed,) = (folder / run_folder.SUPERSEDED).iterdir()
    assert failed.name.endswith("-failed")
    assert "could not write" in (failed / "cli.log").read_text()
    assert run_folder.record(failed)["state"] == "failed"
    assert run_folder.record(failed)["error"] == "metrics.json: could not write it"
    assert run_folder.incomplete(folder) is None  # readers take the earlier run again


def test_a_refused_run_leaves_no_folder_claiming_to_run(tmp_path):
    """(issue 57) a refused config left a record saying "state": "running"."""
    folder = tmp_path / "fresh"
    run_folder.claim(folder, "servetune simulate", supersede=True)
    try:
        (folder / "cli.log").write_text("error: policy.max_num_seqs: got 'abc'\n")
        assert run_folder.abandon(folder, "policy.max_num_seqs: got 'abc'") is None
    finally:
        run_folder.release(folder)
    doc = run_folder.record(folder)
    assert doc["state"] == "failed" and "got 'abc'" in doc["error"] and doc["finished"]
    assert not (folder / run_folder.SUPERSEDED).exists()
    assert run_folder.incomplete(folder) is None  # nothing of it to read, nor to leave out


def test_a_set_already_published_is_left_as_it_is(finished):
    folder, _ = finished
    run_folder.claim(folder, "servetune simulate", supersede=True)
    try:
        staged = run_folder.staging(folder)
        (staged / "metrics.json").write_text('{"run": "new"}')
        run_folder.publish(folder, staged, "servetune simulate")
        assert run_folder.abandon(folder, "an error after publishing") is None
    finally:
        run_folder.release(folder)
    assert run_folder.record(folder)["state"] == "complete"
    assert json.loads((folder / "metrics.json").read_text()) == {"run": "new"}
    (earlier,) = (folder / run_folder.SUPERSEDED).iterdir()  # the earlier set stays aside
    assert json.loads((earlier / "metrics.json").read_text())["run"] == "earlier"


def test_a_refused_rerun_of_a_finished_tuning_keeps_it_finished(tmp_path):
    """A tuning folder is not moved aside (a rerun resumes there): a rerun refused at once
    (a different problem's checkpoint) must not mark the finished tuning failed."""
    folder = tmp_path / "tuned"
    folder.mkdir()
    (folder / "tune_summary.json").write_text("{}")
    done = {"command": "servetune tune", "pid": 1, "state": "complete"}
    (folder / run_folder.LOCK).write_text(json.dumps(done))
    run_folder.claim(folder, "servetune tune", supersede=False)
    try:
        assert run_folder.abandon(folder, "checkpoint.json: written by a run with ...") is None
    finally:
        run_folder.release(folder)
    doc = run_folder.record(folder)
    assert doc["state"] == "complete" and doc["pid"] == 1
    assert doc["last_failed"]["error"].startswith("checkpoint.json")
    assert (folder / "tune_summary.json").is_file()


def test_an_entry_of_the_failed_run_in_the_way_keeps_both_sets_whole(tmp_path):
    """The earlier set listed a file of its own name (extra.csv); the failed run left a file
    of that name, which is not one of a run's entries: nothing is overwritten."""
    folder = tmp_path / "run"
    folder.mkdir()
    for name in ("metrics.json", "extra.csv"):
        (folder / name).write_text("earlier")
    record = {"state": "complete", "files": ["metrics.json", "extra.csv"]}
    (folder / run_folder.LOCK).write_text(json.dumps(record))
    moved = run_folder.claim(folder, "servetune simulate", supersede=True)
    try:
        (folder / "extra.csv").write_text("the failed run's")
        assert run_folder.abandon(folder, "refused") is None
    finally:
        run_folder.release(folder)
    assert (moved / "extra.csv").read_text() == "earlier"  # the earlier set, whole, aside
    assert (moved / "metrics.json").read_text() == "earlier"
    assert (folder / "extra.csv").read_text() == "the failed run's"
    assert run_folder.record(folder)["state"] == "failed"
