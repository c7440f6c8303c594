"""The fast machinery changes no result: a run that steps every iteration one at a time, at the
full entry width, through the full step only, and the same run with the leap (across
completions), a narrow start that widens (servetune/engine/width.py) and the simple step
(servetune/engine/simple_step.py), give the same per-request records and statistics, over mechanism
combinations on slices of the bundled real traces.

Every case compiles a few simulators (both runs, and each width the narrow one passes
through): three run by default, the rest with -m slow.
"""

import dataclasses

import numpy as np
import pytest

from servetune.config.scenario import build
from servetune.engine import width
from servetune.run import api

TIMESTAMPS = ("arrival_s", "scheduled_s", "first_token_s", "finish_s")

BASE = [
    "output.progress=false",
    "window.drain_s=300",
    "engine.max_slots=128",
    "engine.queue_window=128",
]
SLOW = pytest.mark.slow
# a real-trace slice and the mechanisms that act on it
CASES = [
    pytest.param(
        ["workload=azure_conv", "workload.start_s=600", "workload.duration_s=90"],
        id="azure_conv-defaults",
    ),
    pytest.param(
        [
            "workload=azure_code",
            "workload.duration_s=40",
            "workload.rate_scale=4",
            "engine.gpu_memory_utilization=0.25",
            "policy.watermark=0.05",
        ],
        id="azure_code-4x-tight-kv-watermark",
    ),
    pytest.param(
        [
            "workload=azure_conv",
            "workload.start_s=1200",
            "workload.duration_s=60",
            "workload.rate_scale=3",
            "policy=sjf",
            "policy.max_num_seqs=24",
            "policy.max_num_batched_tokens=2048",
            "policy.long_prefill_token_threshold=512",
            "policy.max_num_queued_reqs=60",
        ],
        id="azure_conv-caps-long-prefill-sjf",
    ),
    pytest.param(
        [
            "workload=azure_conv",
            "workload.duration_s=60",
            "workload.rate_scale=4",
            "engine.chunked_prefill=false",
            "policy.max_num_batched_tokens=8192",
            "engine.gpu_memory_utilization=0.25",
            "engine.kv_pressure=evict",
        ],
        id="azure_conv-no-chunking-evict",
        marks=SLOW,
    ),
    pytest.param(
        [
            "workload=azure_code",
            "workload.duration_s=60",
            "workload.rate_scale=3",
            "policy.max_num_seqs=16",
            "policy.queue_cap=40",
            "workload.patience={dist: exponential, mean_s: 8, fraction: 0.5}",
        ],
        id="azure_code-abandonment-queue-cap",
        marks=SLOW,
    ),
    pytest.param(
        [
            "workload=mooncake_conv",
            "workload.start_s=300",
            "workload.duration_s=30",
            "engine.prefix_cache=true",
        ],
        id="mooncake_conv-prefix-cache",
        marks=SLOW,
    ),
    pytest.param(
        [
            "workload=azure_conv",
            "workload.duration_s=60",
            "workload.rate_scale=4",
            "engine.n_instances=3",
            "engine.routing=jsq",
        ],
        id="azure_conv-jsq-3-instances",
        marks=SLOW,
    ),
    pytest.param(
        [
            "workload=azure_conv",
            "workload.start_s=300",
            "workload.duration_s=60",
            "workload.rate_scale=4",
            "engine.gpu_memory_utilization=0.25",
            "engine.kv_pressure=compress",
            "policy.max_num_active_seqs=20",
        ],
        id="azure_conv-compress-active-seqs",
        marks=SLOW,
    ),
    pytest.param(
        ["workload=azure_conv", "workload.duration_s=60", "engine=static"],
        id="azure_conv-static-batching",
        marks=SLOW,
    ),
]


def _runs(overrides):
    """(reference, fast) results of one case: every iteration stepped through the full step at
    the full width, and everything on from a narrow start of 16 entries. With several
    instances the reference skips too: a router sees a skipped run as one iteration
    (engine/routing.py), so skipping is part of what they simulate."""
    sc = build(api.compose(BASE + overrides))
    leap = sc.engine.leap_max if sc.engine.n_instances > 1 else 0
    ref_engine = dataclasses.replace(sc.engine, leap_max=leap, width=0, fast_path=False)
    fast_engine = dataclasses.replace(width.start(sc.engine, 16), leap_max=64, fast_path=True)
    ref = api.simulate_batch(dataclasses.replace(sc, engine=ref_engine))
    fast = api.simulate_batch(dataclasses.replace(sc, engine=fast_engine))
    return sc, ref, fast


@pytest.mark.parametrize("overrides", CASES)
def test_skipping_narrow_widths_and_the_simple_step_change_no_record(overrides):
    sc, ref, fast = _runs(overrides)
    a, b = ref.requests[0], fast.requests[0]
    assert len(a) == len(sc.traces[0]) > 50 and list(a.columns) == list(b.columns)
    span = float(np.nanmax(a["finish_s"].to_numpy()))
    for col in a.columns:
        x, y = a[col].to_numpy(), b[col].to_numpy()
        if col in TIMESTAMPS:  # simulated times, to 1e-9 relative
            np.testing.assert_allclose(x, y, rtol=1e-9, atol=0, err_msg=col)
        elif x.dtype.kind == "f":  # durations between them, to 1e-9 of the run's span
            np.testing.assert_allclose(x, y, rtol=0, atol=1e-9 * span, err_msg=col)
        else:
            assert a[col].equals(b[col]), col
    ma, mb = ref.metrics[0], fast.metrics[0]
    assert mb["leaped_iterations"] > 0
    for key in (
        "iterations",
        "preemptions",
        "prefill_tokens",
        "decode_tokens",
        "max_running",
        "queue_window_overflow",
        "slot_bound_iterations",
    ):
        assert ma[key] == mb[key], key
    for key in (
        "busy_fraction",
        "mean_in_system",
        "ttft_p50_s",
        "ttft_p99_s",
        "tpot_p50_s",
        "goodput_rps",
    ):
        assert np.isclose(ma[key], mb[key], rtol=1e-9, atol=0), key
