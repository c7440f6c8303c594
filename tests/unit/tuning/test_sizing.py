"""The static fleet size (servetune/tuning/sizing.py): the search against a known threshold, the
peak it sizes for, and one sizing run whose neighbours are checked to miss and meet the
target."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from servetune.core.errors import ConfigError
from servetune.run import api
from servetune.tuning import sizing


@pytest.mark.parametrize("threshold", [1, 2, 3, 5, 17, 64])
def test_the_search_finds_the_smallest_count_in_about_two_log2_tries(threshold):
    asked = []

    def meets(n):
        asked.append(n)
        return n >= threshold

    assert sizing.search(meets, 64) == threshold
    assert len(asked) <= 2 * math.ceil(math.log2(threshold)) + 1
    assert sizing.search(lambda n: n >= 65, 64) is None


def test_the_peak_is_the_curve_s_highest_multiplier_held_without_the_curve():
    trace = api.compose(["workload.rate_curve.curve=azure_llm_2024_weekday"])
    over, peak = sizing.peak_overrides(trace)
    assert peak == pytest.approx(1.34)
    assert over == [
        "workload.rate_curve.curve=null",
        "workload.rate_curve.span_s=null",
        f"workload.replicas.rate={1.34!r}",
        "workload.replicas.recorded_seed=null",  # seed 0 too: every seed at the peak rate
    ]
    synthetic = api.compose(
        [
            "workload=poisson",
            "workload.rate=10",
            "workload.rate_curve.curve=azure_llm_2024_weekday",
        ]
    )
    assert sizing.peak_overrides(synthetic)[0][-1] == f"workload.rate={10 * 1.34!r}"
    bench = api.compose(
        ["workload=vllm_random", "workload.rate_curve.curve=azure_llm_2024_weekday"]
    )
    rate = bench.workload.vllm_bench.request_rate
    assert sizing.peak_overrides(bench)[0][-1] == (
        f"workload.vllm_bench.request_rate={rate * 1.34!r}"
    )
    assert sizing.peak_overrides(api.compose([])) == ([], 1.0)


def test_bad_targets_and_limits_are_refused():
    with pytest.raises(ConfigError, match=r"^target: got 1\.5; expected an SLO attainment"):
        sizing.smallest_fleet([], target=1.5)
    with pytest.raises(ConfigError, match=r"^limit: got 0; expected replicas in \[1, 1024\]"):
        sizing.smallest_fleet([], limit=0)


@pytest.mark.slow  # two simulator compilations (about a minute on 2 cores)
def test_a_doubled_peak_needs_the_replica_one_instance_cannot_replace(tmp_path):
    # 20 req/s for 20 s under a flat curve of 2: 40 req/s at the peak, where one H100 reaches
    # 37-51% attainment and two reach 100%
    flat = tmp_path / "flat.csv"
    flat.write_text("time_s,multiplier\n0,2\n20,2\n")
    size = sizing.smallest_fleet(
        [
            "workload=poisson",
            "workload.rate=20",
            "workload.duration_s=20",
            "seeds=2",
            "window.drain_s=60",
            "output.progress=false",
            f"workload.rate_curve.curve={flat}",
        ]
    )
    assert size.replicas == 2 and size.peak_multiplier == 2.0
    assert size.tried[1][0] < 0.99 <= size.tried[2][0]
    assert size.cost_per_hour_usd == pytest.approx(2 * 2.50)  # two H100s at the catalog price


def _fake_simulate(seen: list, needs: int):
    """api.simulate's stand-in: records each call's overrides; a count of at least `needs`
    replicas (the last override) meets every SLO, fewer meet half."""

    def simulate(overrides):
        seen.append(list(overrides))
        n = int(overrides[-1].removeprefix("engine.n_instances="))
        return SimpleNamespace(metrics=[{"slo_attainment": 1.0 if n >= needs else 0.5}])

    return simulate


def test_an_autoscaled_config_is_sized_as_a_fixed_fleet_and_says_so(monkeypatch):
    """(issue 64) With fleet.autoscale on, engine.n_instances=1 meant the autoscaler's whole
    capacity, so the search answered "1 replica"; it turns the autoscaler off, saying so."""
    seen: list = []
    monkeypatch.setattr(sizing.api, "simulate", _fake_simulate(seen, needs=3))
    size = sizing.smallest_fleet(
        ["workload=poisson", "fleet.autoscale=true", "fleet.max_replicas=4"]
    )
    assert size.replicas == 3
    assert seen and all("fleet.autoscale=false" in overrides for overrides in seen)
    assert "fleet.autoscale turned off" in size.notes[0]
    seen.clear()
    assert sizing.smallest_fleet(["workload=poisson"]).notes == ()
    assert not any("fleet.autoscale=false" in overrides for overrides in seen)


@pytest.mark.parametrize(
    "overrides,match",
    [
        ("workload=poisson", r"^overrides: got 'workload=poisson'; expected a list of Hydra"),
        (b"seeds=2", r"^overrides: got b'seeds=2'; expected a list"),
        (["workload=poisson", 3], r"^overrides: item 3 is a int; expected each override as text"),
        (7, r"^overrides: got 7; expected a list"),
    ],
)
def test_overrides_that_are_not_a_list_of_text_are_refused(overrides, match):
    """(issue 64) a string was read character by character, one override per letter."""
    with pytest.raises(ConfigError, match=match):
        sizing.smallest_fleet(overrides)
