"""Event skipping is exact: runs of uniform decode iterations applied in closed form give what
stepping every iteration gives, on random workloads, policies and engine configurations."""

import dataclasses

import numpy as np
import pytest
from helpers import CONFIGS, random_params, random_traces, run

EXACT = ("end_state", "generated", "n_preempt", "tokens_computed")
TIMES = ("first_token", "finish")
EXACT_STATS = (
    "steps",
    "preemptions",
    "prefill_tokens",
    "decode_tokens",
    "kv_peak_blocks",
    "max_running",
    "ended",
    "slot_bound",
    "window_overflow",
)


# continuous-paged runs by default; the other configurations with -m slow (the default suite's
# 10-minute budget; static batching's invariants are checked in test_invariants)
@pytest.fixture(
    scope="module",
    params=[
        pytest.param(name, marks=[pytest.mark.slow] if name != "continuous-paged" else [])
        for name in CONFIGS
    ],
)
def pair(request):
    cfg = CONFIGS[request.param]
    rng = np.random.default_rng(abs(hash(request.param + "leap")) % 2**32)
    traces = random_traces(rng, 2, 100)
    params = random_params(rng, 8, cfg)
    stepped = run(traces, params, dataclasses.replace(cfg, leap_max=0))
    leaped = run(traces, params, dataclasses.replace(cfg, leap_max=32))
    return traces, stepped, leaped


def test_same_requests_and_totals_as_single_stepping(pair):
    traces, stepped, leaped = pair
    total_leaped = 0
    for s in range(len(traces)):
        for a, b in zip(stepped[s], leaped[s], strict=True):
            for f in EXACT:
                np.testing.assert_array_equal(getattr(a, f), getattr(b, f), err_msg=f)
            for f in TIMES:  # durations are summed in another order: float rounding only
                np.testing.assert_allclose(getattr(a, f), getattr(b, f), rtol=1e-12, err_msg=f)
            for f in EXACT_STATS:
                np.testing.assert_array_equal(a.stats[f], b.stats[f], err_msg=f)
            for f in ("busy_s", "occupancy_s"):
                np.testing.assert_allclose(a.stats[f], b.stats[f], rtol=1e-9, err_msg=f)
            assert a.stats["leaped"] == 0
            total_leaped += int(b.stats["leaped"])
            # the same inter-token gaps, up to a rounding flip across a bin edge
            ha, hb = a.stats["itl_hist"], b.stats["itl_hist"]
            assert ha.sum() == hb.sum()
            assert np.abs(ha - hb).sum() <= 1e-3 * ha.sum()
    assert total_leaped > 0, "no run of decode iterations was skipped"


def test_leaps_cover_most_iterations_of_a_decode_heavy_run():
    from helpers import linear_params, trace_of

    # sparse arrivals with long outputs: almost every iteration is a uniform decode
    rng = np.random.default_rng(3)
    reqs = [(10.0 * k, int(rng.integers(8, 64)), int(rng.integers(100, 300))) for k in range(20)]
    params = linear_params({"max_num_seqs": 8.0}, base_s=0.02, per_decode_seq_s=1e-3)
    cfg = CONFIGS["continuous-paged"]
    res = run(trace_of(reqs), params, dataclasses.replace(cfg, leap_max=64))[0][0]
    steps, leaped = int(res.stats["steps"]), int(res.stats["leaped"])
    assert leaped > 0.9 * steps, (leaped, steps)
