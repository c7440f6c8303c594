"""Traffic over a day (servetune/workload/rate_curve.py): curve files, tiling a slice, and the
modulated rate against its closed form (the expected count in a window is the trace's rate
times the curve's integral over it)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from servetune.config import scenario
from servetune.core.errors import ConfigError, TraceError
from servetune.run import api
from servetune.workload import rate_curve
from tests.helpers import trace_of


def uniform_trace(n: int, span: float, seed: int = 0):
    """n requests at sorted uniform times over [0, span) s: a Poisson process given its count."""
    t = np.sort(np.random.default_rng(seed).uniform(0.0, span, n))
    return trace_of([(x, 100, 10) for x in t])


def test_a_curve_file_reads_its_knots_and_interpolates_between_them():
    curve = rate_curve.parse("# comment\ntime_s,multiplier\n0,1\n100,3\n200,0\n", "c.csv")
    np.testing.assert_allclose(curve.at(np.array([0, 50, 100, 150, 250])), [1, 2, 3, 1.5, 0])
    assert curve.span_s == 200 and curve.name == "c"


@pytest.mark.parametrize(
    "text, message",
    [
        ("time,m\n0,1\n", r"c\.csv:1: got 'time,m'; expected the header 'time_s,multiplier'"),
        ("time_s,multiplier\n0,1\n", r"c\.csv: got 1 knot\(s\); expected at least two rows"),
        ("time_s,multiplier\n0,1\n10,-2\n", r"c\.csv:3: multiplier -2\.0; expected a finite"),
        ("time_s,multiplier\n0,1\n10,nan\n", r"c\.csv:3: multiplier nan; expected a finite"),
        ("time_s,multiplier\n5,1\n10,1\n", r"c\.csv:2: time_s 5\.0; expected times increasing"),
        ("time_s,multiplier\n0,1\n0,1\n", r"c\.csv:3: time_s 0\.0; expected times increasing"),
        ("time_s,multiplier\n0,1\nten,1\n", r"c\.csv:3: got 'ten,1'; expected two numbers"),
        ("time_s,multiplier\n0,0\n10,0\n", r"c\.csv: every multiplier is 0"),
    ],
)
def test_a_bad_curve_names_the_file_line_and_what_was_expected(text, message):
    with pytest.raises(TraceError, match=message):
        rate_curve.parse(text, "c.csv")


def test_the_bundled_weekday_curve_averages_one_over_the_day():
    curve = rate_curve.load("azure_llm_2024_weekday")
    t = np.linspace(0, 86400, 86401)
    assert curve.span_s == 86400 and abs(np.trapezoid(curve.at(t), t) / 86400 - 1) < 0.01
    assert curve.at(np.array([14.5 * 3600]))[0] == pytest.approx(1.34, abs=0.01)  # peak, UTC
    assert curve.multipliers.min() == pytest.approx(0.688)  # 22:00-23:00 UTC


def test_tiling_repeats_the_slice_as_recorded_or_from_seeded_offsets():
    trace = uniform_trace(100, 60.0)
    same = rate_curve.tile(trace, 60.0, 150.0, None)
    first = trace.arrival
    expected = np.concatenate([first, first + 60, (first + 120)[first + 120 < 150]])
    np.testing.assert_allclose(same.arrival, np.sort(expected))
    shifted = rate_curve.tile(trace, 60.0, 150.0, np.random.default_rng(1))
    # each whole repeat holds the slice's 100 requests, read from its own offset
    counts, _ = np.histogram(shifted.arrival, bins=[0, 60, 120, 150])
    assert list(counts[:2]) == [100, 100] and shifted.arrival.max() < 150
    assert not np.allclose(shifted.arrival[:100], first)


def test_the_modulated_rate_follows_the_curve_window_by_window():
    # 20,000 requests over 1,000 s (20 req/s); m rises from 0.5 to 2.5 and back: superposed
    # 3 times, kept with m / 3. The count in each 100 s window is binomial around 20 x its
    # integral of m.
    trace = uniform_trace(20_000, 1000.0)
    curve = rate_curve.parse("time_s,multiplier\n0,0.5\n500,2.5\n1000,0.5\n", "tri.csv")
    out = rate_curve.modulate(trace, 1000.0, curve, np.random.default_rng(3))
    assert np.all(np.diff(out.arrival) >= 0) and out.arrival.max() < 1000
    counts, _ = np.histogram(out.arrival, bins=np.arange(0, 1001, 100))
    t = np.linspace(0, 1000, 100_001)
    for k, count in enumerate(counts):
        inside = (t >= 100 * k) & (t <= 100 * (k + 1))
        expected = 20.0 * np.trapezoid(curve.at(t[inside]), t[inside])
        p = stats.poisson.cdf(count, expected)
        assert 1e-4 < p < 1 - 1e-4, (k, count, expected)


def test_the_shifted_copies_bring_the_trace_s_mean_rate_not_its_local_one():
    # the stated expectation m(t) (lambda(t) + (C - 1) lambda_bar) / C on a trace with a
    # trend: 2,000 requests all in the first 100 s of a 1,000 s span, a flat curve of 1.5 (C =
    # 2). Inside: 2,000 x (1 + 0.1) x 0.75 = 1,650; outside: 2,000 x 0.9 x 0.75 = 1,350.
    trace = uniform_trace(2000, 100.0)
    curve = rate_curve.parse("time_s,multiplier\n0,1.5\n1000,1.5\n", "flat.csv")
    inside, outside = [], []
    for seed in range(100):  # the expectation is over the copy's offset: average seeds
        out = rate_curve.modulate(trace, 1000.0, curve, np.random.default_rng(seed))
        inside.append(np.sum(out.arrival < 100.0))
        outside.append(len(out) - inside[-1])
    # the offsets' sampling error over 100 seeds is ~2%; the claim's alternative,
    # m(t) lambda(t), would put 3,000 inside and none outside
    assert np.mean(inside) == pytest.approx(1650, rel=0.06)
    assert np.mean(outside) == pytest.approx(1350, rel=0.06)


def test_a_flat_curve_of_one_keeps_the_trace_and_of_two_doubles_it():
    trace = uniform_trace(500, 100.0)
    one = rate_curve.parse("time_s,multiplier\n0,1\n100,1\n", "one.csv")
    same = rate_curve.modulate(trace, 100.0, one, np.random.default_rng(0))
    np.testing.assert_array_equal(same.arrival, trace.arrival)
    two = rate_curve.parse("time_s,multiplier\n0,2\n100,2\n", "two.csv")
    assert len(rate_curve.modulate(trace, 100.0, two, np.random.default_rng(0))) == 1000


def test_config_errors_name_the_key(tmp_path):
    short = tmp_path / "short.csv"
    short.write_text("time_s,multiplier\n0,1\n300,1\n")
    with pytest.raises(
        ConfigError,
        match=r"^workload\.rate_curve\.curve: short spans 300 s; "
        r"the trace it modulates spans 600 s",
    ):
        scenario.build(api.compose([f"workload.rate_curve.curve={short}"]))
    with pytest.raises(
        ConfigError,
        match=r"^workload\.rate_curve\.curve: got 'weekday'; "
        r"expected a bundled curve \(azure_llm_2024_weekday\)",
    ):
        scenario.build(api.compose(["workload.rate_curve.curve=weekday"]))
    with pytest.raises(ConfigError, match=r"^workload\.rate_curve\.span_s: got -5"):
        scenario.build(
            api.compose(
                [
                    "workload.rate_curve.curve=azure_llm_2024_weekday",
                    "workload.rate_curve.span_s=-5",
                ]
            )
        )
    # a day's curve over a 600 s slice would apply only its first 600 s: refused
    with pytest.raises(
        ConfigError,
        match=r"^workload\.rate_curve\.curve: azure_llm_2024_weekday "
        r"spans 86,400 s; the trace it modulates spans 600 s .*span_s=86400",
    ):
        scenario.build(api.compose(["workload.rate_curve.curve=azure_llm_2024_weekday"]))
    with pytest.raises(
        ConfigError,
        match=r"^workload\.rate_curve\.span_s: got 100 without a "
        r"curve",
    ):
        scenario.build(api.compose(["workload.rate_curve.span_s=100"]))
    with pytest.raises(
        ConfigError,
        match=r"^workload\.rate_curve\.span_s: got 100; a synthetic "
        r"workload is drawn over workload\.duration_s",
    ):
        scenario.build(
            api.compose(
                [
                    "workload=poisson",
                    "workload.rate_curve.curve=azure_llm_2024_weekday",
                    "workload.rate_curve.span_s=100",
                ]
            )
        )
    bad = tmp_path / "bad.csv"
    bad.write_text("time_s,multiplier\n0,1\n700,-1\n")
    with pytest.raises(TraceError, match=r"bad\.csv:3: multiplier -1\.0"):
        scenario.build(api.compose([f"workload.rate_curve.curve={bad}"]))
