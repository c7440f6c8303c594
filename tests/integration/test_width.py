"""Entry width (servetune/engine/width.py): a run that starts narrow widens where its live requests
need more entries, and gives, record for record and statistic for statistic, what the same
run gives at the full width."""

import math

import numpy as np
import pytest
from helpers import CONFIGS, linear_params, random_params, random_traces, run, trace_of

from servetune.core.errors import ConfigError
from servetune.engine import width
from servetune.run import api

RECORDS = (
    "end_state",
    "first_token",
    "finish",
    "generated",
    "n_preempt",
    "tokens_computed",
    "kv_ratio",
    "scheduled_at",
    "reject_reason",
)
RUN_ONLY = ("entry_width", "widenings")  # what a narrow run reports beyond the full one


def assert_same_runs(full, narrow):
    """Every scenario's per-request records and statistics equal (bit for bit)."""
    for row_f, row_n in zip(full, narrow, strict=True):
        for a, b in zip(row_f, row_n, strict=True):
            for f in RECORDS:
                np.testing.assert_array_equal(getattr(a, f), getattr(b, f), err_msg=f)
            assert a.stats.keys() == b.stats.keys()
            for k in a.stats:
                if k not in RUN_ONLY:
                    np.testing.assert_array_equal(a.stats[k], b.stats[k], err_msg=k)


def test_wider_at_least_doubles_and_covers_the_need_up_to_the_full_width():
    cfg = width.start(CONFIGS["continuous-paged"], 4)  # 16 slots + 16 window = 32
    assert cfg.n_entries == 4 and width.is_narrow(cfg)
    assert width.wider(cfg, 4).n_entries == 8  # at least doubled
    assert width.wider(cfg, 5).n_entries == 16  # ...until twice the need fits
    full = width.wider(cfg, 9)
    assert full.width == 0 and full.n_entries == 32 and not width.is_narrow(full)
    assert width.start(cfg, None).width == 0 and width.start(cfg, 32).width == 0


@pytest.fixture(scope="module")
def batch():
    cfg = CONFIGS["continuous-paged"]
    rng = np.random.default_rng(39)
    traces = random_traces(rng, 2, 100)
    params = random_params(rng, 4, cfg)
    return cfg, traces, params, run(traces, params, cfg)


def test_a_narrow_batch_widens_and_matches_the_full_width(batch):
    cfg, traces, params, full = batch
    narrow = run(traces, params, width.start(cfg, 4))
    assert_same_runs(full, narrow)
    assert narrow[0][0].stats["widenings"] >= 1
    assert all(
        r.stats["entry_width"] == narrow[0][0].stats["entry_width"] for row in narrow for r in row
    )  # one width per compiled batch


def test_one_scenario_widens_step_by_step_and_matches_the_full_width():
    # steady arrivals that pile up behind max_num_seqs 2: the queue grows a few at a time
    cfg = CONFIGS["continuous-paged"]
    tr = trace_of([(0.2 * k, 20, 30) for k in range(80)])
    params = linear_params({"max_num_seqs": 2.0}, base_s=0.05, per_decode_seq_s=1e-3)
    full = run(tr, params, cfg)
    narrow = run(tr, params, width.start(cfg, 2))
    assert_same_runs(full, narrow)
    assert narrow[0][0].stats["widenings"] >= 2 and narrow[0][0].stats["entry_width"] > 2
    # beyond the full width the configured window applies: arrivals wait outside, as before
    assert full[0][0].stats["window_overflow"] > 0


@pytest.mark.parametrize(
    "mechanism",
    [
        ["engine.n_instances=3", "engine.routing=jsq"],
        ["engine.n_instances=3", "engine.prefill_instances=1"],
        pytest.param(
            [
                "engine.n_instances=3",
                "engine.cascade_small_instances=1",
                "model=llama3_70b",
                "hardware.tp=4",
            ],
            marks=pytest.mark.slow,
        ),
    ],
    ids=["jsq", "disaggregated", "cascade"],
)
def test_several_instances_narrow_match_the_full_width(mechanism):
    # a burst of Azure conversation traffic at 3x: routing, hand-offs and retries see each
    # instance's free entries, so a narrow run must never let one run short
    base = [
        "workload=azure_conv",
        "workload.duration_s=40",
        "workload.rate_scale=3",
        "engine.max_slots=32",
        "engine.queue_window=32",
        "output.progress=false",
        *mechanism,
    ]
    full = api.simulate(base + ["engine.start_width=null"])
    narrow = api.simulate(base + ["engine.start_width=4"])
    assert full.metrics[0]["entry_width"] == 64 and full.metrics[0]["widenings"] == 0
    assert narrow.metrics[0]["widenings"] >= 1
    a, b = full.requests[0], narrow.requests[0]
    assert a.columns.equals(b.columns)
    for col in a.columns:
        np.testing.assert_array_equal(a[col].to_numpy(), b[col].to_numpy(), err_msg=col)
    skip = {"entry_width", "widenings"}
    for key, value in full.metrics[0].items():
        if key not in skip and not isinstance(value, dict):
            same_nan = (
                isinstance(value, float)
                and math.isnan(value)
                and math.isnan(narrow.metrics[0][key])
            )
            assert narrow.metrics[0][key] == value or same_nan, key


@pytest.mark.parametrize(
    "override,expected",
    [
        ("engine.start_width=0", r"engine\.start_width: got 0; expected within \[1, "),
        ("engine.start_width=2.5", r"engine\.start_width: got 2\.5; expected an integer"),
        ("engine.start_width='wide'", r"engine\.start_width: got 'wide'; expected a number"),
        ("engine.chunk_length=-1", r"engine\.chunk_length: got -1; expected within \[0, "),
        ("engine.chunk_length=2097152", r"engine\.chunk_length: got 2097152; expected within"),
    ],
)
def test_a_bad_width_or_chunk_length_is_refused_by_key(override, expected):
    from servetune.config.scenario import build

    with pytest.raises(ConfigError, match=expected):
        build(api.compose([override]))
