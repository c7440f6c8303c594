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


# two cases by default (each width a replay passes through compiles once), all with -m slow
NARROW_DEFAULT = ("tight_kv", "priority")


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


def test_fixtures_of_another_vllm_or_damaged_are_refused(tmp_path):
    fixture = golden.load_fixture(PATHS[0])
    other = tmp_path / "other.json.gz"
    golden.write_fixture(dict(fixture, vllm_version="0.31.0"), other)
    with pytest.raises(golden.GoldenError, match=r"other\.json\.gz: written by vLLM '0\.31\.0'"):
        golden.load_fixture(other)
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
    assert "max_model_len: identical" in capsys.readouterr().out
    assert main(["--check", "--cases", "nonesuch"]) == 2
    assert "--cases: unknown case(s) ['nonesuch']" in capsys.readouterr().err
