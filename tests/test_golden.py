"""Golden schedules: small scenarios worked out by hand, iteration by iteration.

Cost model: linear with base 1 s and nothing else, so every iteration lasts exactly 1 s and
times are iteration counts. Notation: request k, (arrival s, prompt tokens, output tokens).
A request with O output tokens completes after its prefill iteration plus O-1 decodes.
"""

import numpy as np
import pytest
from helpers import linear_params, run, schedule, trace_of

from servetune.types import EngineConfig

CFG = EngineConfig(max_slots=4, queue_window=4, block_size=2, max_model_len=64,
                   cost_form="linear", outbox=16)


def _times(res):
    return list(zip(res.first_token.tolist(), res.finish.tolist()))


def test_chunked_prefill_across_iterations():
    # r0 (0, 10, 3), budget 4: prefill chunks 4, 4, 2; first token at the end of the third
    # iteration (t=3); two decodes -> done at t=5.
    tr = trace_of([(0, 10, 3)])
    p = linear_params({"max_num_batched_tokens": 4})
    assert schedule(tr, p, CFG) == [
        (0.0, 1.0, {0: 4}), (1.0, 1.0, {0: 4}), (2.0, 1.0, {0: 2}),
        (3.0, 1.0, {0: 1}), (4.0, 1.0, {0: 1})]
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
        (0.0, 1.0, {0: 2}), (1.0, 1.0, {0: 1, 1: 3}), (2.0, 1.0, {0: 1, 1: 3}),
        (3.0, 1.0, {0: 1, 1: 3}), (4.0, 1.0, {1: 1}), (5.0, 1.0, {1: 1})]
    assert _times(run(tr, p, CFG)[0][0]) == [(1.0, 4.0), (5.0, 6.0)]


def test_sequence_cap_serializes_requests():
    # max_num_seqs = 1: r1 waits for r0 to finish even though budget and KV are plentiful.
    tr = trace_of([(0, 2, 2), (0, 2, 2)])
    p = linear_params({"max_num_seqs": 1})
    assert schedule(tr, p, CFG) == [
        (0.0, 1.0, {0: 2}), (1.0, 1.0, {0: 1}), (2.0, 1.0, {1: 2}), (3.0, 1.0, {1: 1})]
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
        (0.0, 1.0, {0: 4, 1: 2}), (1.0, 1.0, {0: 1}), (2.0, 1.0, {0: 1}),
        (3.0, 1.0, {0: 1}), (4.0, 1.0, {1: 3}), (5.0, 1.0, {1: 1}), (6.0, 1.0, {1: 1})]
    res = run(tr, p, CFG)[0][0]
    assert _times(res) == [(1.0, 4.0), (1.0, 7.0)]
    assert res.n_preempt.tolist() == [0, 1]
    assert res.tokens_computed.tolist() == [4 + 3, 2 + 3 + 2]
    assert res.generated.tolist() == [4, 4]
    assert res.stats["preemptions"] == 1
    assert int(res.stats["kv_peak_blocks"][0]) == 4


@pytest.mark.parametrize("watermark,expected", [
    # 4 blocks, watermark 0.25 -> 1 block must stay free after an admission.
    # r0 (0, 4, 2) takes 2 blocks (2 left >= 1). r1 (0, 4, 1) would fit physically (2 free)
    # but would leave 0 < 1: it waits; at [1,2) r0 grows to 3 blocks; r0 ends at 2, r1 runs
    # [2,3). r2 (0, 8, 1) needs 4 blocks: never admissible above the watermark -> rejected.
    (0.25, ([(1.0, 2.0), (3.0, 3.0)], ["completed", "completed", "rejected"])),
    # no watermark: r0 and r1 are admitted together (4 blocks); r1 ends at 1, r0 at 2;
    # r2 (4 blocks) waits for the engine to empty and runs [2,3).
    (0.0, ([(1.0, 2.0), (1.0, 1.0), (3.0, 3.0)], ["completed"] * 3)),
])
def test_watermark_holds_back_admission(watermark, expected):
    tr = trace_of([(0, 4, 2), (0, 4, 1), (0, 8, 1)])
    res = run(tr, linear_params({"watermark": watermark}, kv_blocks=4), CFG)[0][0]
    times, states = expected
    names = np.array(["completed", "rejected", "cancelled", "expired", "outstanding"])
    assert names[res.end_state].tolist() == states
    assert _times(res)[:len(times)] == times
    assert not res.stats["stalled"]


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


@pytest.mark.parametrize("batching,expected_c", [("continuous", (2.0, 2.0)), ("static", (4.0, 4.0))])
def test_static_batching_holds_the_batch(batching, expected_c):
    # r0 (0, 2, 3) and r1 (0, 2, 1) form the first batch; r2 (0.5, 2, 1) arrives during it.
    # Continuous: r2 joins at t=1 and is done at 2. Static: r2 waits until r0 (the last of the
    # batch) finishes at 3, then runs alone in [3,4).
    cfg = EngineConfig(**{**CFG.__dict__, "batching": batching})
    tr = trace_of([(0, 2, 3), (0, 2, 1), (0.5, 2, 1)])
    res = run(tr, linear_params(), cfg)[0][0]
    assert _times(res)[:2] == [(1.0, 3.0), (1.0, 1.0)]
    assert _times(res)[2] == expected_c


def test_queue_cap_and_too_long_are_rejected():
    # max_model_len 64: r1 (0, 60, 10) is too long. queue_cap 1: r2 and r3 arrive while r0's
    # prefill runs; r2 joins the queue (0 waiting ahead), r3 finds 1 waiting -> rejected.
    tr = trace_of([(0, 2, 2), (0, 60, 10), (0.2, 2, 1), (0.3, 2, 1)])
    p = linear_params({"queue_cap": 1.0, "max_num_seqs": 1})
    res = run(tr, p, CFG)[0][0]
    names = np.array(["completed", "rejected", "cancelled", "expired", "outstanding"])
    assert names[res.end_state].tolist() == ["completed", "rejected", "completed", "rejected"]
    assert res.finish[3] == 1.0  # rejected when first seen, at the iteration boundary
