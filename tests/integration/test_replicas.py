"""Seeded replicas of real traces (workload/replicas.py, `workload.replicas.*`): they differ
between seeds, keep the trace's arrival rate and length distributions within sampling error,
are reproducible, and reach the scenario batch (seeds=N: N different scenarios)."""

import numpy as np
import pytest
from scipy import stats

from servetune.config.scenario import build, load_workload
from servetune.core.errors import ConfigError
from servetune.run.api import compose
from servetune.workload import replicas
from servetune.workload import traces as workload
from servetune.workload.replicas import ReplicaSpec

FULL = workload.load_trace(workload.bundled_path("azure_llm_2023_conv.csv"))
SPAN = 600.0
SLICE = workload.slice_trace(FULL, start_s=0.0, duration_s=SPAN)
SEEDS = range(30)


def _replicas(spec: ReplicaSpec, trace=SLICE):
    return [replicas.replica(trace, SPAN, spec, s) for s in SEEDS]


def _mean_within(values, expected, sigmas=4.0):
    """The mean of `values` lies within `sigmas` standard errors of `expected`."""
    values = np.asarray(values, float)
    se = values.std(ddof=1) / np.sqrt(len(values))
    assert abs(values.mean() - expected) <= sigmas * se + 1e-9, (values.mean(), expected, se)


def test_all_off_replays_the_slice():
    assert not ReplicaSpec().active
    out = replicas.replica(SLICE, SPAN, ReplicaSpec(), 3)
    np.testing.assert_array_equal(out.arrival, SLICE.arrival)
    np.testing.assert_array_equal(out.prompt, SLICE.prompt)


def test_block_bootstrap_differs_per_seed_and_keeps_rate_and_lengths():
    reps = _replicas(ReplicaSpec(block_s=60.0))
    assert len({(len(r), int(r.prompt.sum())) for r in reps}) > 25  # different scenarios
    for r in reps:
        assert np.all(np.diff(r.arrival) >= 0) and 0 <= r.arrival[0] and r.arrival[-1] < SPAN
    _mean_within([len(r) for r in reps], len(SLICE))  # the rate, in expectation
    pooled = np.concatenate([r.prompt for r in reps])
    assert stats.ks_2samp(pooled, SLICE.prompt).statistic < 0.02
    # a block keeps its burst: the gaps inside blocks are the trace's own gaps
    gaps = np.diff(reps[0].arrival)
    assert (
        stats.ks_2samp(gaps[gaps < 5], np.diff(SLICE.arrival)[np.diff(SLICE.arrival) < 5]).pvalue
        > 1e-3
    )


@pytest.mark.parametrize("rate", [0.5, 2.5])
def test_rate_scaling_thins_or_superposes_with_the_expected_count(rate):
    reps = _replicas(ReplicaSpec(rate=rate))
    copies = int(np.ceil(rate))
    p = rate / copies
    counts = np.array([len(r) for r in reps])
    # binomial(copies x N, p): mean and standard deviation known in closed form
    n = copies * len(SLICE)
    assert abs(counts.mean() - n * p) <= 4 * np.sqrt(n * p * (1 - p) / len(counts))
    assert abs(counts.std() - np.sqrt(n * p * (1 - p))) <= 0.5 * np.sqrt(n * p * (1 - p))
    assert all(r.arrival[-1] < SPAN for r in reps)
    assert stats.ks_2samp(reps[0].output, SLICE.output).pvalue > 1e-3


def test_lengths_resampled_within_classes_keep_arrivals_and_classes():
    split = 1024
    classed = workload.classify_by_prompt(SLICE, split)
    reps = _replicas(ReplicaSpec(lengths=True), classed)
    for r in reps[:5]:
        np.testing.assert_array_equal(r.arrival, classed.arrival)
        np.testing.assert_array_equal(r.klass, classed.klass)
        assert np.all((r.prompt >= split) == (r.klass == 1))  # contents from their own class
    assert not np.array_equal(reps[0].prompt, reps[1].prompt)
    _mean_within([r.prompt.mean() for r in reps], classed.prompt.mean())
    _mean_within([r.output.mean() for r in reps], classed.output.mean())


def test_a_seed_gives_the_same_replica_every_time():
    spec = ReplicaSpec(block_s=30.0, rate=1.5, lengths=True)
    a, b = replicas.replica(SLICE, SPAN, spec, 7), replicas.replica(SLICE, SPAN, spec, 7)
    np.testing.assert_array_equal(a.arrival, b.arrival)
    np.testing.assert_array_equal(a.prompt, b.prompt)


def test_shifted_windows_are_slices_of_the_full_trace():
    cfg = compose(
        [
            "workload.duration_s=60",
            "workload.replicas.block_s=null",
            "workload.replicas.shift_s=1200",
        ]
    )
    spec = ReplicaSpec(shift_s=1200.0)
    assert replicas.start_shift(spec, 0) == 0  # seed 0 is the slice as recorded
    for seed in (1, 2):
        start = replicas.start_shift(spec, seed)
        assert 0 < start <= 1200
        expected = workload.slice_trace(FULL, start_s=start, duration_s=60.0)
        np.testing.assert_array_equal(load_workload(cfg, seed).prompt, expected.prompt)
    assert replicas.start_shift(spec, 1) != replicas.start_shift(spec, 2)


def test_seeds_are_different_scenarios_and_seed_0_is_the_recording():
    base = ["workload.duration_s=60", "seeds=3"]
    recorded = workload.slice_trace(FULL, start_s=0.0, duration_s=60.0)
    varied = build(compose(base))  # the bundled default: 60 s blocks
    assert len({tuple(t.prompt) for t in varied.traces}) == 3
    np.testing.assert_array_equal(varied.traces[0].arrival, recorded.arrival)
    every = build(compose(base + ["workload.replicas.recorded_seed=null"]))
    assert not np.array_equal(every.traces[0].arrival, recorded.arrival)
    np.testing.assert_array_equal(every.traces[1].arrival, varied.traces[1].arrival)
    plain = build(compose(base + ["workload.replicas.block_s=null"]))
    assert len({tuple(t.prompt) for t in plain.traces}) == 1  # a replay: one scenario


@pytest.mark.parametrize(
    "override, match",
    [
        ("workload.replicas=5", r"^workload\.replicas: got 5; expected a mapping"),
        ("workload.replicas.rate=0", r"^workload\.replicas\.rate: got 0; expected within"),
        ("workload.replicas.block_s=0.001", r"^workload\.replicas\.block_s: got 0\.001; the slice"),
        ("workload.replicas.shift_s=-1", r"^workload\.replicas\.shift_s: got -1; expected within"),
        ("workload.replicas.lengths=1", r"^workload\.replicas\.lengths: got 1; expected true or"),
        ("workload.replicas.rate=1e-6", r"^workload\.replicas\.rate: got 1e-06; seed 1's replica"),
        ("workload.replicas.recorded_seed=-1", r"^workload\.replicas\.recorded_seed: got -1"),
    ],
)
def test_bad_replica_settings_name_their_key(override, match):
    with pytest.raises(ConfigError, match=match):
        build(compose(["workload.duration_s=600", "seed=1", override]))  # seed 0: as recorded


def test_a_shift_onto_an_empty_stretch_names_the_seed_and_key():
    # the code trace holds no requests from about 720 s to 840 s: a seed whose window lands
    # there is refused by name, not as a bare empty slice
    spec = ReplicaSpec(shift_s=1800.0)
    seed = next(s for s in range(1, 5000) if 725 <= replicas.start_shift(spec, s) <= 775)
    with pytest.raises(
        ConfigError,
        match=rf"^workload\.replicas\.shift_s: seed {seed}'s replica "
        r"starts its window .* holds no requests",
    ):
        build(
            compose(
                [
                    "workload=azure_code",
                    "workload.duration_s=60",
                    f"seed={seed}",
                    "workload.replicas.block_s=null",
                    "workload.replicas.shift_s=1800",
                ]
            )
        )
