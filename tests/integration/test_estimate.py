"""The first line's estimate (servetune/run/estimate.py) and the resource guard
(servetune/run/guard.py): the model against runs measured on this machine kind
(benchmarks/README.md, "Run estimates"), this machine's record, and the refusals, each on an
outline or a built scenario: nothing here simulates."""

import json
import time

import pytest

from servetune.config import scenario
from servetune.core.errors import ConfigError, ResourceLimitError
from servetune.engine import memory
from servetune.run import api, estimate, guard
from servetune.tuning.runner import estimate_tuning
from servetune.workload import rate_curve

DAY = [
    "workload.duration_s=null",
    "workload.rate_curve.curve=azure_llm_2024_weekday",
    "workload.rate_curve.span_s=86400",
]
FLEET = [  # the README's day-long fleet command (Autoscaling)
    "model=llama3_70b",
    "hardware.tp=2",
    "engine.routing=jsq",
    "fleet.autoscale=true",
    "fleet.min_replicas=2",
    "fleet.max_replicas=8",
    "fleet.metric=num_requests_running",
    "fleet.target=12",
]
TINY = [
    "workload=poisson",
    "workload.duration_s=5",
    "engine.max_slots=16",
    "engine.queue_window=32",
]


@pytest.fixture(autouse=True)
def fresh_record(tmp_path, monkeypatch):
    """Each test's own record of this machine's runs: the model's figures, no correction."""
    monkeypatch.setenv("SERVETUNE_PACE_FILE", str(tmp_path / "record.json"))


def outline_of(overrides):
    return scenario.outline(api.compose(overrides))


def model(overrides, tmp_path, batched=True):
    """The model's estimate alone: a fresh record (no correction), nothing compiled here."""
    return estimate.simulation(outline_of(overrides), batched, path=tmp_path / "pace.json")


@pytest.mark.parametrize(
    "overrides, measured_s",
    [
        # benchmarks/README.md, "Run estimates" (bench_estimate.py: first runs, compilation in)
        ([], 4.5),  # the default 600 s slice: mostly compilation
        (["workload.duration_s=null"], 5.1),  # the Azure hour
        (["seeds=4", "grid.max_num_seqs=[64,128,256]"], 9.9),  # a vmapped batch of 12
        (DAY, 13.9),  # a day of it on one instance
        (DAY + FLEET, 107.8),  # the README's fleet day, 2 to 8 replicas of Llama-3-70B
        (["workload.max_requests=191", "engine.n_instances=256"], 71.5),  # few requests, many
    ],
    ids=["default", "hour", "grid", "day", "readme fleet day", "256 instances, 191 requests"],
)
def test_the_estimate_is_within_2x_of_the_measured_time(overrides, measured_s, tmp_path):
    est = model(overrides, tmp_path)
    assert measured_s / 2 <= est.wall_s <= 2 * measured_s, est


def test_a_tuning_run_is_estimated_within_2x(tmp_path):
    """bench_estimate.py's small tuning run: 3 iterations x 5 policies on a minute of Poisson
    arrivals, then the evaluation (10.2 s measured)."""
    est = estimate_tuning(
        [
            "workload=poisson",
            "workload.rate=4",
            "workload.duration_s=60",
            "tune.iterations=3",
            "tune.eval.seeds=2",
            "tune.eval.sensitivity=false",
        ],
        out_dir=tmp_path,
    )
    assert 10.2 / 2 <= est.wall_s <= 2 * 10.2, est


def test_a_week_long_run_is_estimated_from_its_load(tmp_path):
    """A week of Poisson arrivals at 5/s (3 M requests) was estimated at 16.9 hours from the
    recorded rates of small runs; a day of it runs in 13.7 s compiled (8.8 M iterations), so a
    week in about seven times that: under the hour, it runs. The README's fleet over a week
    (a week-long curve) is seven of its days, and past a 10-minute limit it is refused."""
    week = model(["workload=poisson", "workload.duration_s=604800"], tmp_path)
    assert 7 * 13.7 / 2 <= week.wall_s - week.compile_s <= 7 * 13.7 * 2
    curve = tmp_path / "week.csv"
    curve.write_text("time_s,multiplier\n0,1\n604800,1\n")
    fleet_week = [
        "workload.duration_s=null",
        f"workload.rate_curve.curve={curve}",
        "workload.rate_curve.span_s=604800",
        *FLEET,
    ]
    days = model(fleet_week, tmp_path).loop_s / model(DAY + FLEET, tmp_path).loop_s
    assert 5 < days < 9
    with pytest.raises(ResourceLimitError, match=r"more than guard\.max_wall_s = 600 s"):
        api.estimate([*fleet_week, "guard.max_wall_s=600"])


def test_the_estimate_follows_the_load_not_only_the_request_count(tmp_path):
    """A day's requests on one instance cost what the day's iterations cost; the same requests
    on 512 mostly idle replicas cost each idle replica's wake at every other's iteration."""
    day = model(DAY, tmp_path).load
    wide = model(DAY + ["engine.n_instances=512", "engine.routing=jsq"], tmp_path).load
    assert 6e6 < day.iterations < 1.2e7  # 8,461,413 measured (bench_day.py)
    assert day.width == 64 and day.widenings == 0  # at most 39 running at once, measured
    assert wide.loop_s > 1000 * day.loop_s


def test_an_overloaded_run_widens_and_drains(tmp_path):
    load = model(["workload.rate_scale=4"], tmp_path).load
    assert load.saturated > 0.2 and load.width >= 1024 and load.widenings >= 1


def test_a_fleet_scales_with_its_load(tmp_path):
    """The fleet held to its rule: 5.48 mean replicas measured over the Azure hour."""
    load = model(["workload.duration_s=null"] + FLEET, tmp_path).load
    assert 3.5 < load.replicas < 7.0


# ---- this machine's record ---------------------------------------------------------------


def test_the_record_corrects_the_model_by_this_machines_runs(tmp_path):
    path = tmp_path / "pace.json"
    o = outline_of(TINY)
    first = estimate.simulation(o, path=path)
    assert first.correction == 1.0 and first.runs == 0
    estimate.record(first, 2 * first.wall_s, path=path)
    estimate.record(first, 8 * first.wall_s, path=path)  # geometric mean 4
    again = estimate.simulation(o, path=path)
    assert again.correction == pytest.approx(4.0) and again.runs == 2
    assert again.wall_s == pytest.approx(4 * first.wall_s)
    for _ in range(20):
        estimate.record(first, 100 * first.wall_s, path=path)
    doc = json.loads(path.read_text())
    assert len(doc["ratios"]["single"]) == estimate.RECENT
    assert estimate.correction_of("single", path)[0] == estimate.MAX_CORRECTION
    assert estimate.correction_of("multi", path) == (1.0, 0)  # each path its own


@pytest.mark.parametrize(
    "text",
    [
        "{oops",
        "[1, 2]",
        '{"simulate": [120.5, 80.0]}',  # the older record: rates, not ratios
        '{"version": 2, "ratios": {"single": "fast"}}',
        '{"version": 2, "ratios": {"single": [-1, NaN, 0]}}',
        '{"version": 2, "ratios": [1]}',
    ],
)
def test_an_older_or_damaged_record_is_ignored_and_replaced(text, tmp_path):
    path = tmp_path / "pace.json"
    path.write_text(text)
    assert estimate.correction_of("single", path) == (1.0, 0)
    est = estimate.simulation(outline_of(TINY), path=path)
    estimate.record(est, est.wall_s * 2, path=path)
    assert estimate.correction_of("single", path) == (pytest.approx(2.0), 1)


def test_an_unwritable_record_does_not_fail_the_run(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    est = estimate.simulation(outline_of(TINY), path=blocker / "pace.json")
    estimate.record(est, 1.0, path=blocker / "pace.json")  # its folder is a file: nothing
    assert estimate.correction_of("single", blocker / "pace.json") == (1.0, 0)


@pytest.mark.parametrize(
    "seconds, text", [(0.2, "1 s"), (40, "40 s"), (210, "3.5 min"), (9000, "2.5 h")]
)
def test_durations_read_naturally(seconds, text):
    assert estimate.duration_shown(seconds) == text


def test_the_first_line_states_time_and_memory(tmp_path):
    est = model(TINY, tmp_path)
    line = estimate.plan_line(1, 25, 5.0, est)
    assert line.startswith("simulating 1 scenario(s) of 25 requests, 5 s of traffic each; about")
    assert "on this machine (compiling" in line and "of memory" in line


# ---- the guard ------------------------------------------------------------------------------


@pytest.fixture
def no_tiling(monkeypatch):
    """Fails a test where a rate curve's tiles are drawn (a refusal must come first)."""

    def refuse(*args, **kwargs):
        raise AssertionError("tiled before the guard refused")

    monkeypatch.setattr(rate_curve, "tile", refuse)


def test_a_512_replica_day_is_refused_at_once_with_its_estimate(no_tiling):
    start = time.perf_counter()
    with pytest.raises(ResourceLimitError) as err:
        api.estimate(DAY + ["engine.n_instances=512", "engine.routing=jsq"])
    assert time.perf_counter() - start < 10
    msg = str(err.value)
    assert msg.startswith("engine.n_instances / workload.rate_curve.span_s")
    assert "is estimated at ~" in msg and " days on this machine" in msg
    assert "more than guard.max_wall_s = 3600 s" in msg and "--yes (guard.confirmed=true)" in msg
    assert len(msg) < 600


def test_a_day_of_24_million_requests_is_refused_before_it_is_drawn(no_tiling, monkeypatch):
    """The Azure hour at 50x tiled over a day: ~24 M requests, ~14 GiB of host arrays, on a
    machine of this kind (19 GiB available): refused by memory before any tile is drawn."""
    monkeypatch.setattr(memory, "host_available_bytes", lambda: 19 * memory.GIB)
    with pytest.raises(ResourceLimitError) as err:
        api.estimate(DAY + ["workload.rate_scale=50"])
    msg = str(err.value)
    assert msg.startswith("workload.rate_curve.span_s / workload.duration_s")
    assert "23,89" in msg and "GiB at its peak" in msg and "guard.max_memory_fraction" in msg
    assert len(msg) < 600


def test_a_day_long_fleet_tuning_is_refused_before_simulating(no_tiling, tmp_path):
    with pytest.raises(ResourceLimitError) as err:
        estimate_tuning(DAY + FLEET + ["tune.iterations=8", "tune.pairs=4"], out_dir=tmp_path)
    msg = str(err.value)
    assert msg.startswith("tune.iterations / tune.pairs / seeds / tune.eval.seeds: the tuning")
    assert "8 iteration(s) x 9 policies" in msg and "more than guard.max_wall_s" in msg


def test_the_limit_is_a_key_and_yes_goes_past_it(tmp_path):
    with pytest.raises(ResourceLimitError, match=r"more than guard\.max_wall_s = 1 s"):
        api.estimate(TINY + ["guard.max_wall_s=1"])  # its compilation alone takes longer
    with pytest.raises(ResourceLimitError, match=r"more than guard\.max_wall_s = 1 s"):
        api.simulate(TINY + ["guard.max_wall_s=1"])  # refused before it compiles
    assert api.estimate(TINY + ["guard.max_wall_s=1", "guard.confirmed=true"]).wall_s > 1
    assert api.estimate(TINY + ["guard.max_wall_s=null"]).wall_s > 0
    with pytest.raises(ConfigError, match=r"^guard\.max_wall_s: got 0; expected within"):
        api.estimate(TINY + ["guard.max_wall_s=0"])
    with pytest.raises(ConfigError, match=r"^guard\.confirmed: got 'sure'; expected true or false"):
        api.estimate(TINY + ["guard.confirmed=sure"])


def test_a_fleet_sizing_search_is_guarded_as_a_whole():
    from servetune.tuning import sizing

    with pytest.raises(
        ResourceLimitError, match=r"^limit / workload\.duration_s / seeds: the fleet-sizing"
    ):
        sizing.check_search(api.compose(["workload.duration_s=null", "guard.max_wall_s=5"]), 64)
    counts = sizing.expected_counts(outline_of(["workload.rate_scale=4"]), 64)
    assert counts[:2] == [1, 2] and max(counts) <= 8


def test_the_cli_refuses_with_exit_2_and_no_traceback(tmp_path):
    import subprocess
    import sys

    run = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "servetune.cli.main", "simulate", *DAY]
        + ["engine.n_instances=512", "engine.routing=jsq", f"hydra.run.dir={run}"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "error: engine.n_instances / workload.rate_curve.span_s" in proc.stderr
    record = json.loads((run / ".servetune.lock").read_text())
    assert record["state"] == "refused" and "guard.max_wall_s" in record["error"]
    assert not (run / "metrics.json").exists()


def test_yes_on_the_command_line_is_the_guards_override():
    from servetune.cli.main import with_yes

    assert with_yes(["servetune", "workload=poisson", "--yes"]) == [
        "servetune",
        "workload=poisson",
        "guard.confirmed=true",
    ]
    assert with_yes(["servetune", "workload=poisson"]) == ["servetune", "workload=poisson"]


def test_a_refusal_names_the_instances_first_where_idle_ones_dominate():
    o = outline_of(["workload.max_requests=191", "engine.n_instances=256"])
    assert guard.keys_for(o)[0] == "engine.n_instances"
    assert guard.keys_for(outline_of(DAY))[0] == "workload.rate_curve.span_s"


@pytest.mark.slow  # two processes, one compiling a tiny run (~20 s on 2 cores)
def test_yes_lets_a_tiny_run_past_a_lowered_limit(tmp_path):
    import subprocess
    import sys

    base = [sys.executable, "-m", "servetune.cli.main", "simulate", *TINY, "guard.max_wall_s=1"]
    refused = subprocess.run(
        [*base, f"hydra.run.dir={tmp_path / 'refused'}"], capture_output=True, text=True
    )
    assert refused.returncode == 2 and "more than guard.max_wall_s = 1 s" in refused.stderr
    ran = subprocess.run(
        [*base, "--yes", f"hydra.run.dir={tmp_path / 'ran'}"], capture_output=True, text=True
    )
    assert ran.returncode == 0, ran.stderr
    assert (tmp_path / "ran" / "metrics.json").is_file()
    assert "simulating 1 scenario(s) of" in ran.stderr and "of memory" in ran.stderr
