"""One compiled call for a batch; traced policy numbers never recompile; batch == alone."""

import numpy as np
from helpers import linear_params, run, trace_of

from servetune.core.types import EngineConfig
from servetune.engine.loop import run_chunk_batch
from servetune.workload.traces import synthetic

CFG = EngineConfig(
    max_slots=8, queue_window=8, block_size=4, max_model_len=512, cost_form="linear", outbox=32
)


def _traces():
    return [
        synthetic(
            rate=r,
            n_requests=80,
            prompt={"dist": "lognormal", "mean": 60, "cv": 1},
            output={"dist": "lognormal", "mean": 30, "cv": 1, "max": 200},
            seed=s,
        )
        for s, r in enumerate((2.0, 6.0))
    ]


def test_changing_policy_numbers_does_not_recompile():
    traces = _traces()
    grid = {"max_num_seqs": [2.0, 4.0, 8.0], "max_num_batched_tokens": [32.0, 64.0, 512.0]}
    run(traces, linear_params(grid, base_s=0.02, per_prefill_token_s=1e-4, kv_blocks=400), CFG)
    compiled = run_chunk_batch._cache_size()
    other = {
        "max_num_seqs": [3.0, 5.5, 7.0],
        "max_num_batched_tokens": [100.0, 17.0, 64.0],
        "watermark": [0.0, 0.05, 0.2],
        "queue_cap": [3.0, 10.0, 1e9],
    }
    results = run(
        traces, linear_params(other, base_s=0.05, per_decode_seq_s=1e-3, kv_blocks=300), CFG
    )
    assert run_chunk_batch._cache_size() == compiled
    # and the numbers did change the outcome
    finish = [r.finish[np.isfinite(r.finish)].max() for r in results[0]]
    assert len(set(np.round(finish, 6))) == 3


def test_batched_scenario_equals_it_run_alone():
    traces = _traces()
    grid = {"max_num_seqs": [2.0, 5.0, 8.0], "max_num_batched_tokens": [32.0, 48.0, 512.0]}
    together = run(
        traces, linear_params(grid, base_s=0.02, per_prefill_token_s=1e-4, kv_blocks=200), CFG
    )
    for p in range(3):
        one = {k: v[p] for k, v in grid.items()}
        alone = run(
            [traces[1]],
            linear_params(one, base_s=0.02, per_prefill_token_s=1e-4, kv_blocks=200),
            CFG,
        )[0][0]
        for f in (
            "end_state",
            "first_token",
            "finish",
            "generated",
            "n_preempt",
            "tokens_computed",
        ):
            np.testing.assert_array_equal(getattr(alone, f), getattr(together[1][p], f))


def test_small_outbox_and_window_lose_nothing():
    # 60 simultaneous arrivals into a window of 8 and an outbox refilled many times
    cfg = EngineConfig(
        max_slots=4, queue_window=4, block_size=4, max_model_len=64, cost_form="linear", outbox=8
    )
    tr = trace_of([(0.0, 5, 3)] * 60)
    res = run(tr, linear_params({"max_num_seqs": 4}, base_s=0.1), cfg)[0][0]
    assert np.all(res.generated == 3)
    assert res.stats["window_overflow"] == 60 - 8
    # FCFS among the overflow: completion order follows trace order
    assert np.all(np.diff(res.finish) >= 0)
