"""The first line of a run says what it simulates and about how long it will take on this
machine, from the pace of the runs before it (servetune/run/estimate.py)."""

import json

import pytest

from servetune.run import estimate


def test_no_record_says_there_is_no_estimate_yet(tmp_path):
    line = estimate.plan_line(12, 2867, 600.0, tmp_path / "pace.json")
    assert line.startswith("simulating 12 scenario(s) of 2,867 requests, 600 s of traffic each")
    assert "no estimate yet" in line


def test_the_estimate_divides_the_requests_by_the_recent_rates(tmp_path):
    path = tmp_path / "pace.json"
    estimate.record(1000, 10.0, path)  # 100 requests/s
    estimate.record(4000, 10.0, path)  # 400 requests/s: geometric mean 200
    seconds, runs = estimate.wall_estimate(12 * 500, path)
    assert (seconds, runs) == (pytest.approx(30.0), 2)
    assert "about 30 s on this machine (from 2 earlier runs" in estimate.plan_line(
        12, 500, 60.0, path
    )
    for _ in range(20):
        estimate.record(100, 1.0, path)
    assert len(json.loads(path.read_text())["simulate"]) == estimate.RECENT
    # a tuner's pace is its own: it simulates populations in batches
    assert estimate.wall_estimate(100, path, kind="tune") is None
    estimate.record(1000, 1.0, path, kind="tune")
    assert estimate.wall_estimate(2000, path, kind="tune") == (pytest.approx(2.0), 1)
    assert len(json.loads(path.read_text())["simulate"]) == estimate.RECENT


def test_each_instance_count_keeps_its_own_pace(tmp_path):
    """19 requests on 1,024 instances took 132 s where the one-instance pace said
    5 s; a run's time per request grows with its instances, so each count has its record."""
    path = tmp_path / "pace.json"
    estimate.record(19, 5.0, path, kind=estimate.simulate_kind(1))
    line = estimate.plan_line(1, 19, 13.0, path, instances=1024)
    assert line.endswith(
        "no estimate yet (the first run on 1024 instances on this machine; "
        "time per request grows with the instances, about as their square "
        "when most are idle)"
    )
    estimate.record(19, 132.0, path, kind=estimate.simulate_kind(1024))
    assert "about 2.2 min on this machine (from 1 earlier run" in estimate.plan_line(
        1, 19, 13.0, path, instances=1024
    )
    assert "about 5 s" in estimate.plan_line(1, 19, 13.0, path)


def test_a_damaged_record_is_ignored_and_replaced(tmp_path):
    path = tmp_path / "pace.json"
    for text in (
        "{oops",
        '{"simulate": "fast"}',
        "[1, 2]",
        '{"simulate": [-1, NaN, 0]}',
        '{"simulate": 5}',
    ):
        path.write_text(text)
        assert estimate.wall_estimate(100, path) is None
    estimate.record(50, 0.5, path)
    assert estimate.wall_estimate(100, path) == (pytest.approx(1.0), 1)
    estimate.record(50, 0.0, path)  # a run of no time records nothing
    assert estimate.wall_estimate(100, path)[1] == 1


def test_an_unwritable_record_does_not_fail_the_run(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    estimate.record(100, 1.0, blocker / "pace.json")  # its folder is a file: nothing happens
    assert estimate.wall_estimate(100, blocker / "pace.json") is None


@pytest.mark.parametrize(
    "seconds, text", [(0.2, "1 s"), (40, "40 s"), (210, "3.5 min"), (9000, "2.5 h")]
)
def test_durations_read_naturally(seconds, text):
    assert estimate._duration(seconds) == text
