"""Golden schedules: small scenarios worked out by hand, iteration by iteration.

Cost model: linear with base 1 s and nothing else, so every iteration lasts exactly 1 s and
times are iteration counts. Notation: request k, (arrival s, prompt tokens, output tokens).
A request with O output tokens completes after its prefill iteration plus O-1 decodes.
"""

import dataclasses

import numpy as np
import pytest
from helpers import linear_params, run, schedule, trace_of

from servetune.core.errors import STALLED
from servetune.core.types import EngineConfig

CFG = EngineConfig(
    max_slots=4, queue_window=4, block_size=2, max_model_len=64, cost_form="linear", outbox=16
)


NAMES = np.array(["completed", "rejected", "cancelled", "expired", "outstanding"])


def _times(res):
    return list(zip(res.first_token.tolist(), res.finish.tolist(), strict=True))


def test_chunked_prefill_across_iterations():
    # r0 (0, 10, 3), budget 4: prefill chunks 4, 4, 2; first token at the end of the third
    # iteration (t=3); two decodes -> done at t=5.
    tr = trace_of([(0, 10, 3)])
    p = linear_params({"max_num_batched_tokens": 4})
    assert schedule(tr, p, CFG) == [
        (0.0, 1.0, {0: 4}),
        (1.0, 1.0, {0: 4}),
        (2.0, 1.0, {0: 2}),
        (3.0, 1.0, {0: 1}),
        (4.0, 1.0, {0: 1}),
    ]
    res = run(tr, p, CFG)[0][0]
    assert _times(res) == [(3.0, 5.0)]
    assert res.generated.tolist() == [3]


def test_token_budget_shared_by_decodes_and_prefill_chunks():
    # budget 4. r0 (0, 2, 4) prefills alone in [0,1): first token at 1.
    # r1 (0.5, 10, 2) is seen at t=1: r0's decode takes 1 token, r1 gets the other 3,
    # for three iterations (3+3+3 = 9 of 10); r0 finishes its 3 decodes at t=4.
    # [4,5): r1's last prompt token -> first token at 5; [5,6): decode -> done at 6.
    tr = trace_of([(0, 2, 4), (0.5, 10, 2)])
    p = linear_params({"max_num_batched_tokens": 4})
    assert schedule(tr, p, CFG) == [
        (0.0, 1.0, {0: 2}),
        (1.0, 1.0, {0: 1, 1: 3}),
        (2.0, 1.0, {0: 1, 1: 3}),
        (3.0, 1.0, {0: 1, 1: 3}),
        (4.0, 1.0, {1: 1}),
        (5.0, 1.0, {1: 1}),
    ]
    assert _times(run(tr, p, CFG)[0][0]) == [(1.0, 4.0), (5.0, 6.0)]


def test_sequence_cap_serializes_requests():
    # max_num_seqs = 1: r1 waits for r0 to finish even though budget and KV are plentiful.
    tr = trace_of([(0, 2, 2), (0, 2, 2)])
    p = linear_params({"max_num_seqs": 1})
    assert schedule(tr, p, CFG) == [
        (0.0, 1.0, {0: 2}),
        (1.0, 1.0, {0: 1}),
        (2.0, 1.0, {1: 2}),
        (3.0, 1.0, {1: 1}),
    ]
    assert _times(run(tr, p, CFG)[0][0]) == [(1.0, 2.0), (3.0, 4.0)]


def test_preemption_and_recompute():
    # 4 KV blocks of 2 tokens, no watermark. r0 (0, 4, 4), r1 (0, 2, 4).
    # [0,1): both prefill (r0 2 blocks, r1 1 block); both emit their first token at 1.
    # [1,2): r0 needs a 3rd block, r1 a 2nd; one block is free, so r1 (lowest priority) is
    #        preempted: its block is freed, its 2 prompt tokens + 1 output token must be
    #        recomputed. r0 decodes -> token 2 at 2. Nothing is admitted in this iteration.
    # [2,3): r0 decodes in its 3rd block; r1 needs 2 blocks for 3 tokens, 1 is free: waits.
    # [3,4): r0 takes the last block, emits its 4th token and completes at 4 (frees 4 blocks).
    # [4,5): r1 recomputes 3 tokens -> emits its 2nd token at 5; decodes at 6 and 7.
    tr = trace_of([(0, 4, 4), (0, 2, 4)])
    p = linear_params({"watermark": 0.0}, kv_blocks=4)
    assert schedule(tr, p, CFG) == [
        (0.0, 1.0, {0: 4, 1: 2}),
        (1.0, 1.0, {0: 1}),
        (2.0, 1.0, {0: 1}),
        (3.0, 1.0, {0: 1}),
        (4.0, 1.0, {1: 3}),
        (5.0, 1.0, {1: 1}),
        (6.0, 1.0, {1: 1}),
    ]
    res = run(tr, p, CFG)[0][0]
    assert _times(res) == [(1.0, 4.0), (1.0, 7.0)]
    assert res.n_preempt.tolist() == [0, 1]
    assert res.tokens_computed.tolist() == [4 + 3, 2 + 3 + 2]
    assert res.generated.tolist() == [4, 4]
    assert res.stats["preemptions"] == 1
    assert int(res.stats["kv_peak_blocks"][0]) == 4


@pytest.mark.parametrize(
    "watermark,expected",
    [
        # vLLM 0.32: 4 usable blocks (5 with vLLM's null block), watermark 0.25 -> floor(1.25) = 1
        # block kept free by admissions while anything runs. r0 (0, 4, 2) enters the empty engine
        # (no watermark): 2 blocks. r1 (0, 4, 1) would fit physically (2 free) but would leave
        # 0 < 1: it waits, and r2 behind it. [1,2): r0 grows to 3 blocks; it ends at 2. At 2 the
        # engine is empty: r1 enters without the watermark; r2 (0, 8, 1, 4 blocks) would leave
        # none next to r1: it waits until r1 ends at 3, then runs alone [3,4).
        (0.25, ([(1.0, 2.0), (3.0, 3.0), (4.0, 4.0)], ["completed"] * 3)),
        # no watermark: r0 and r1 are admitted together (4 blocks); r1 ends at 1, r0 at 2;
        # r2 (4 blocks) waits for the engine to empty and runs [2,3).
        (0.0, ([(1.0, 2.0), (1.0, 1.0), (3.0, 3.0)], ["completed"] * 3)),
    ],
)
def test_watermark_holds_back_admission(watermark, expected):
    tr = trace_of([(0, 4, 2), (0, 4, 1), (0, 8, 1)])
    res = run(tr, linear_params({"watermark": watermark}, kv_blocks=4), CFG)[0][0]
    times, states = expected
    names = np.array(["completed", "rejected", "cancelled", "expired", "outstanding"])
    assert names[res.end_state].tolist() == states
    assert _times(res)[: len(times)] == times
    assert not (res.stats["invariants"] & STALLED)


def test_slot_capacity_below_max_num_seqs_is_counted():
    # max_num_seqs 4 but only 1 slot: behaves like max_num_seqs 1, and says so
    cfg = EngineConfig(**{**CFG.__dict__, "max_slots": 1})
    tr = trace_of([(0, 2, 2), (0, 2, 2)])
    res = run(tr, linear_params({"max_num_seqs": 4}), cfg)[0][0]
    assert _times(res) == [(1.0, 2.0), (3.0, 4.0)]
    assert int(res.stats["slot_bound"]) == 2  # r1 held back at t=0 and t=1
    exact = run(tr, linear_params({"max_num_seqs": 4}), CFG)[0][0]
    assert _times(exact) == [(1.0, 2.0), (1.0, 2.0)] and int(exact.stats["slot_bound"]) == 0


def test_idle_clock_jumps_to_next_arrival():
    tr = trace_of([(0, 2, 1), (10.0, 2, 2)])
    p = linear_params()
    assert schedule(tr, p, CFG) == [(0.0, 1.0, {0: 2}), (10.0, 1.0, {1: 2}), (11.0, 1.0, {1: 1})]


@pytest.mark.parametrize(
    "batching,expected_c", [("continuous", (2.0, 2.0)), ("static", (4.0, 4.0))]
)
def test_static_batching_holds_the_batch(batching, expected_c):
    # r0 (0, 2, 3) and r1 (0, 2, 1) form the first batch; r2 (0.5, 2, 1) arrives during it.
    # Continuous: r2 joins at t=1 and is done at 2. Static: r2 waits until r0 (the last of the
    # batch) finishes at 3, then runs alone in [3,4).
    cfg = EngineConfig(**{**CFG.__dict__, "batching": batching})
    tr = trace_of([(0, 2, 3), (0, 2, 1), (0.5, 2, 1)])
    res = run(tr, linear_params(), cfg)[0][0]
    assert _times(res)[:2] == [(1.0, 3.0), (1.0, 1.0)]
    assert _times(res)[2] == expected_c


def test_queue_cap_rejects_arrivals_beyond_it():
    # queue_cap 1 (a gateway's cap on waiting requests), max_num_seqs 1. r0 and r1 arrive at 0:
    # r0 finds 0 waiting, r1 finds r0 waiting -> rejected. r2 and r3 are seen at t=1, when r0
    # runs: r2 finds 0 waiting, r3 finds r2 -> rejected at the iteration boundary.
    tr = trace_of([(0, 2, 2), (0, 2, 2), (0.2, 2, 1), (0.3, 2, 1)])
    p = linear_params({"queue_cap": 1.0, "max_num_seqs": 1})
    res = run(tr, p, CFG)[0][0]
    assert NAMES[res.end_state].tolist() == ["completed", "rejected", "completed", "rejected"]
    assert res.finish[3] == 1.0


def test_max_model_len_rejects_prompts_and_caps_sequences():
    # vLLM 0.32, max_model_len 64: a prompt of 64 tokens or more is refused by the input
    # processor; r1 (0, 60, 10) runs and stops at the length cap, 60 + 4 = 64 tokens: its 4th
    # output token (t=4: prefill, then 3 decodes) ends it. r2 (0, 63, 5) gets 1 token.
    tr = trace_of([(0, 64, 1), (0, 60, 10), (0, 63, 5)])
    res = run(tr, linear_params(), CFG)[0][0]
    assert NAMES[res.end_state].tolist() == ["rejected", "completed", "completed"]
    assert res.generated.tolist() == [0, 4, 1]
    assert _times(res)[1:] == [(1.0, 4.0), (1.0, 1.0)]


def test_whole_prompt_admission_against_first_chunk():
    # 4 blocks of 2 tokens, budget 6. r0 (0, 4, 3) is admitted (2 blocks) with 2 tokens of
    # budget left for r1 (0, 6, 1), whose whole prompt needs 3 blocks.
    # vLLM 0.32 (scheduler_reserve_full_isl): 2 + 3 > 4, r1 waits until r0 completes at 3, then
    # prefills its 6 tokens in [3,4). The older rule admits r1 on its first chunk (2 tokens,
    # 1 block) at 0; at 1, r0's decode and r1's next 4 tokens need 1 + 2 blocks, 1 is free:
    # r1 is preempted, waits for r0 to end, and recomputes in [3,4): same times, 1 preemption.
    tr = trace_of([(0, 4, 3), (0, 6, 1)])
    out = {}
    for full in (True, False):
        cfg = dataclasses.replace(CFG, scheduler_reserve_full_isl=full)
        p = linear_params({"max_num_batched_tokens": 6}, kv_blocks=4)
        res = run(tr, p, cfg)[0][0]
        out[full] = (schedule(tr, p, cfg), _times(res), res.n_preempt.tolist())
    assert out[True] == (
        [(0.0, 1.0, {0: 4}), (1.0, 1.0, {0: 1}), (2.0, 1.0, {0: 1}), (3.0, 1.0, {1: 6})],
        [(1.0, 3.0), (4.0, 4.0)],
        [0, 0],
    )
    assert out[False] == (
        [(0.0, 1.0, {0: 4, 1: 2}), (1.0, 1.0, {0: 1}), (2.0, 1.0, {0: 1}), (3.0, 1.0, {1: 6})],
        [(1.0, 3.0), (4.0, 4.0)],
        [0, 1],
    )


def test_long_prefill_threshold_spares_the_only_request():
    # budget 8, long_prefill_token_threshold 4. r0 (0, 10, 2) and r1 (0, 2, 2): with two
    # requests r0 takes 4 tokens per iteration; once r1 completes (t=2) r0 is the only request
    # and takes its last 2 at once. Alone from the start, r0 takes 8 then 2.
    p = linear_params({"max_num_batched_tokens": 8, "long_prefill_token_threshold": 4})
    assert schedule(trace_of([(0, 10, 2), (0, 2, 2)]), p, CFG) == [
        (0.0, 1.0, {0: 4, 1: 2}),
        (1.0, 1.0, {0: 4, 1: 1}),
        (2.0, 1.0, {0: 2}),
        (3.0, 1.0, {0: 1}),
    ]
    assert schedule(trace_of([(0, 10, 2)]), p, CFG) == [
        (0.0, 1.0, {0: 8}),
        (1.0, 1.0, {0: 2}),
        (2.0, 1.0, {0: 1}),
    ]


@pytest.mark.parametrize(
    "policy,states",
    [
        # max_num_queued_reqs 2 counts unfinished requests (waiting + running): r2 is the third
        ({"max_num_queued_reqs": 2.0}, ["completed", "completed", "rejected"]),
        # max_num_queued_tokens 4 counts the prompt tokens of requests without a first token: r1
        # finds r0's 4 -> rejected; r2 (seen at 1) finds r0 decoding -> admitted
        ({"max_num_queued_tokens": 4.0}, ["completed", "rejected", "completed"]),
    ],
)
def test_api_server_queue_caps(policy, states):
    tr = trace_of([(0, 4, 2), (0, 4, 1), (0.5, 2, 1)])
    res = run(tr, linear_params({"max_num_seqs": 1, **policy}), CFG)[0][0]
    assert NAMES[res.end_state].tolist() == states
