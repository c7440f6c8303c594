"""engine/scheduler.py on hand-built entries: budgets, caps, preemption and admission (relax hard).

Entries are in scheduling order, as step.py passes them (order.scheduling_order under FCFS):
running requests by `qkey` (1, 2, ... in admission order), then preempted waiting ones (qkey
below 0), then new arrivals (qkey 0). The small engine: 4 running slots, 4-token KV blocks.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from toy import column, config, entries, params, running

from servetune.core.types import RUNNING, WAITING
from servetune.engine.scheduler import (
    admission_cap,
    full_sequence_blocks,
    new_blocks,
    pending_tokens,
    prefill_cap,
    queue_keys,
    schedule,
    token_budget,
    wanted_tokens,
    watermark_blocks,
)

CFG = config()
RESERVE_OFF = config(scheduler_reserve_full_isl=False)
NO_CHUNK = config(chunked_prefill=False)
STATIC = config(batching="static")

_schedule = jax.jit(schedule, static_argnums=2)
_queue_keys = jax.jit(queue_keys)


def _pol(**values):
    return params(values).policy


def _waiting(prompt, **row):
    """A row of a new arrival waiting with `prompt` tokens."""
    return dict(prompt=prompt, output=4, **row)


def _prefilling(prompt, computed, qkey=0, **row):
    """A row of a RUNNING request that has computed `computed` of its `prompt` tokens (of its
    prompt + generated ones when it recomputes after a preemption)."""
    return {
        "status": RUNNING,
        "prompt": prompt,
        "output": 4,
        "computed": computed,
        "qkey": qkey,
        **row,
    }


def _mask(flags, n):
    return jnp.asarray(list(flags) + [False] * (n - len(flags)))


# -- the numbers the schedule is made of ------------------------------------------------------


def test_the_token_budget_is_max_num_batched_tokens_floored():
    assert float(token_budget(_pol(max_num_batched_tokens=100.7), CFG)) == 100.0


def test_without_chunked_prefill_the_budget_is_at_least_max_model_len():
    # a whole prompt (up to max_model_len = 64 tokens) must fit one iteration
    assert float(token_budget(_pol(max_num_batched_tokens=10), NO_CHUNK)) == 64.0
    assert float(token_budget(_pol(max_num_batched_tokens=100), NO_CHUNK)) == 100.0


def test_static_batching_has_no_token_budget():
    assert float(token_budget(_pol(max_num_batched_tokens=10), STATIC)) >= 2**30


def test_the_watermark_counts_the_null_block_and_is_floored():
    # 0.25 x (19 usable + 1 null) = 5; 0.25 x (18 + 1) = 4.75, floored to 4
    assert float(watermark_blocks(_pol(watermark=0.25), 19)) == 5.0
    assert float(watermark_blocks(_pol(watermark=0.25), 18)) == 4.0
    assert float(watermark_blocks(_pol(), 1000)) == 0.0  # vLLM 0.32's default: off


@pytest.mark.parametrize(
    "values, cap",
    [
        ({"max_num_seqs": 8.9}, 8),  # max_num_active_seqs unset (inf): max_num_seqs, floored
        ({"max_num_seqs": 8, "max_num_active_seqs": 3.5}, 3),
        ({"max_num_seqs": 4, "max_num_active_seqs": 10}, 4),  # never above max_num_seqs
    ],
)
def test_the_admission_cap_is_the_smaller_cap_floored(values, cap):
    assert float(admission_cap(_pol(**values))) == cap


def test_the_long_prefill_cap_is_the_threshold_floored_when_others_are_eligible():
    pol = _pol(long_prefill_token_threshold=8.5)
    assert float(prefill_cap(pol, 100, 2, CFG)) == 8.0
    assert np.isinf(prefill_cap(pol, 100, 1, CFG))  # the only request starves nobody
    assert np.isinf(prefill_cap(_pol(), 100, 5, CFG))  # threshold 0: no cap


def test_the_adaptive_long_prefill_cap_is_at_least_the_budget_shared_out():
    adaptive = config(long_prefill_token_threshold_adaptive=True)
    pol = _pol(long_prefill_token_threshold=8)
    assert float(prefill_cap(pol, 100, 4, adaptive)) == 25.0  # 100 // 4 > 8
    assert float(prefill_cap(pol, 20, 4, adaptive)) == 8.0  # 20 // 4 = 5 < 8
    assert float(prefill_cap(pol, 103, 4, adaptive)) == 25.0  # floor(103 / 4)
    assert np.isinf(prefill_cap(_pol(), 100, 4, adaptive))  # still off at threshold 0


def test_full_sequence_blocks_cover_prompt_and_generated_tokens_up_to_max_model_len():
    e = entries(
        CFG, [_waiting(8), _waiting(9), _waiting(10, generated=3), _waiting(62, generated=5)]
    )
    # 8 tokens: 2 blocks; 9: 3; 10 + 3 = 13: 4; 62 + 5 = 67, cut to 64: 16 (not 17)
    assert np.asarray(full_sequence_blocks(e, CFG))[:4].tolist() == [2, 3, 4, 16]


def test_pending_tokens_are_the_rest_of_the_prompt_or_one_decode():
    e = entries(
        CFG,
        [
            _prefilling(10, 4, 1),
            running(10, 5, generated=2, qkey=2),
            _prefilling(10, 0, generated=3),
            _waiting(10),
        ],
    )
    # 10 - 4 left to prefill; a decode; a resumed request recomputes 10 + 3; waiting and
    # empty slots want nothing from the running phase
    assert np.asarray(pending_tokens(e)).tolist() == [6, 1, 13, 0, 0, 0, 0, 0]


def test_only_a_running_request_past_its_prompt_is_decoding():
    e = entries(
        CFG,
        [
            running(10, 5, generated=2),
            _prefilling(10, 9, 2),
            _prefilling(10, 0, generated=3),
            _waiting(1, generated=1),
        ],
    )
    need, decoding = wanted_tokens(e, params(), CFG)
    assert np.asarray(need)[:4].tolist() == [1, 1, 13, 0]
    # the last prompt token is a prefill token; a recompute is a prefill though it generated
    assert np.asarray(decoding)[:4].tolist() == [True, False, False, False]


def test_with_speculation_a_decode_asks_for_its_drafts_within_max_model_len():
    spec = config(speculation=True)
    e = entries(
        spec, [running(10, 20, generated=2), running(60, 10, generated=3), _prefilling(10, 4, 3)]
    )
    need, decoding = wanted_tokens(e, params({"spec_k": 3}), spec)
    # 1 + 3 positions; at 62 computed tokens only 64 - 62 = 2 fit; a prefill asks as before
    assert np.asarray(need)[:3].tolist() == [4, 2, 6]
    assert np.asarray(decoding)[:3].tolist() == [True, True, False]


def test_new_blocks_are_the_blocks_the_new_tokens_open():
    e = entries(
        CFG,
        [
            _prefilling(20, 8),
            _prefilling(20, 7),
            _prefilling(20, 4),  # 2, 2, 1
            _prefilling(20, 8, blocks=5),
            _waiting(8),
        ],
    )  # blocks held
    tokens = jnp.asarray([1, 1, 12, 1, 4, 0, 0, 0], jnp.int32)
    # 9 tokens: a 3rd block; 8 tokens fill the 2nd exactly; 16 tokens: 4 blocks, 3 new;
    # holding more than 9 tokens need adds none; waiting requests are not the running phase's
    assert np.asarray(new_blocks(e, tokens, CFG))[:5].tolist() == [1, 0, 3, 0, 0]


def test_admissions_join_the_running_list_after_the_last_one_kept():
    e = entries(
        CFG,
        [
            running(8, 4, 1, qkey=1),
            running(8, 4, 1, qkey=2),
            running(8, 4, 1, qkey=3),
            _waiting(4),
            _waiting(4),
        ],
    )
    n = CFG.n_entries
    keep = _mask([True, True, True], n)
    keys = _queue_keys(e, keep, _mask([False] * 3 + [True, True], n), _mask([], n))
    assert np.asarray(keys)[:5].tolist() == [1, 2, 3, 4, 5]
    # into an idle engine, the first admission is 1
    idle = entries(CFG, [_waiting(4), _waiting(4)])
    keys = _queue_keys(idle, _mask([], n), _mask([True, True], n), _mask([], n))
    assert np.asarray(keys)[:2].tolist() == [1, 2]


def test_preempted_requests_go_to_the_queue_front_earliest_admitted_first():
    # vLLM pops the running tail (qkey 3) and prepends it, then qkey 2 before it: [2, 3, old]
    e = entries(
        CFG,
        [
            running(8, 4, 1, qkey=1),
            running(8, 4, 1, qkey=2),
            running(8, 4, 1, qkey=3),
            _waiting(4, preempted=True, qkey=-1),
            _waiting(4),
        ],
    )
    n = CFG.n_entries
    keys = _queue_keys(e, _mask([True], n), _mask([], n), _mask([False, True, True], n))
    assert np.asarray(keys)[:5].tolist() == [1, -3, -2, -1, 0]


# -- schedule: the running requests --------------------------------------------------------


def test_decodes_take_one_token_and_a_mid_prefill_request_its_next_chunk():
    e = entries(CFG, [running(8, 4, generated=2, qkey=1), _prefilling(20, 8, 2)])
    out, batch, _ = _schedule(e, params(), CFG)
    assert column(batch, "tokens", 2) == [1, 12]  # 1 decode; the 20 - 8 prompt tokens left
    assert column(batch, "decode", 2) == [True, False]
    # 9 computed + 1 stays in 3 blocks; 20 prompt tokens take 5
    assert column(out, "blocks", 2) == [3, 5]
    assert column(out, "status", 2) == [RUNNING, RUNNING]
    assert not np.asarray(batch.preempted).any() and not bool(batch.slot_bound)
    assert batch.relaxed is None  # relax hard: no relaxed weights


def test_long_prefill_threshold_cuts_chunks_when_others_are_eligible():
    e = entries(CFG, [_prefilling(20, 4, 1), running(8, 4, generated=2, qkey=2), _waiting(12)])
    out, batch, _ = _schedule(e, params({"long_prefill_token_threshold": 8}), CFG)
    # three requests: the 16-token rest and the 12-token prompt are cut to 8; decodes are 1
    assert column(batch, "tokens", 3) == [8, 1, 8]
    assert column(out, "status", 3) == [RUNNING] * 3
    assert column(out, "blocks", 3) == [3, 3, 2]  # 12, 10 and 8 tokens


def test_long_prefill_threshold_does_not_cut_the_only_request():
    pol = params({"long_prefill_token_threshold": 8})
    _, batch, _ = _schedule(entries(CFG, [_prefilling(20, 4, 1)]), pol, CFG)
    assert column(batch, "tokens", 1) == [16]
    _, batch, _ = _schedule(entries(CFG, [_waiting(20)]), pol, CFG)
    assert column(batch, "tokens", 1) == [20]


def test_running_requests_take_the_budget_in_order_until_it_runs_out():
    rows = [running(8, 4, generated=2, qkey=1), _prefilling(20, 8, 2), _waiting(4)]
    out, batch, _ = _schedule(entries(CFG, rows), params({"max_num_batched_tokens": 10}), CFG)
    # 1 decode, 9 of the 12 prompt tokens; nothing left to admit the waiting request with
    assert column(batch, "tokens", 3) == [1, 9, 0]
    assert column(out, "status", 3) == [RUNNING, RUNNING, WAITING]
    assert column(out, "blocks", 3) == [3, 5, 0]  # 8 + 9 = 17 tokens: 5 blocks
    # the prefill first: it takes all 10, and the decode waits (not preempted)
    rows = [_prefilling(20, 8, 1), running(8, 4, generated=2, qkey=2)]
    out, batch, _ = _schedule(entries(CFG, rows), params({"max_num_batched_tokens": 10}), CFG)
    assert column(batch, "tokens", 2) == [10, 0]
    assert column(batch, "decode", 2) == [False, False]
    assert column(out, "status", 2) == [RUNNING, RUNNING] and not np.asarray(batch.preempted).any()


@pytest.mark.parametrize("budget, admitted", [(13, False), (14, True)])
def test_a_waiting_request_gets_the_budget_the_running_ones_leave(budget, admitted):
    rows = [running(8, 4, generated=2, qkey=1), _prefilling(20, 8, 2), _waiting(4)]
    out, batch, _ = _schedule(entries(CFG, rows), params({"max_num_batched_tokens": budget}), CFG)
    # 1 + 12 = 13 tokens for the running ones: a budget of 14 leaves a 1-token first chunk
    assert column(batch, "tokens", 3) == [1, 12, int(admitted)]
    assert column(out, "status", 3)[2] == (RUNNING if admitted else WAITING)
    assert column(out, "blocks", 3)[2] == int(admitted)


# -- schedule: KV shortfall ----------------------------------------------------------------


def _three_decodes_opening_a_block():
    """Three running decodes of 8 computed tokens (2 full blocks, 6 in all): each decode opens
    a 3rd block; then a new 4-token request (1 block)."""
    return entries(
        CFG,
        [running(8, 4, 1, qkey=1), running(8, 4, 1, qkey=2), running(8, 4, 1, qkey=3), _waiting(4)],
    )


def test_a_kv_shortfall_preempts_the_most_recently_admitted_and_admits_nothing():
    # 8 blocks, 6 held, 3 wanted: preempting qkey 3 frees its 2, and the other two fit
    out, batch, _ = _schedule(_three_decodes_opening_a_block(), params(kv_blocks=8), CFG)
    assert column(batch, "tokens", 4) == [1, 1, 0, 0]
    assert column(batch, "preempted", 4) == [False, False, True, False]
    assert column(out, "status", 4) == [RUNNING, RUNNING, WAITING, WAITING]
    assert column(out, "blocks", 4) == [3, 3, 0, 0]  # the victim's blocks are freed
    assert column(out, "computed", 4) == [8, 8, 0, 0]  # its progress is dropped ...
    assert column(out, "generated", 4) == [1, 1, 1, 0]  # ... not its output
    assert column(out, "preempted", 4) == [False, False, True, False]
    assert column(out, "n_preempt", 4) == [0, 0, 1, 0]
    assert column(out, "qkey", 4) == [1, 2, -1, 0]  # the front of the queue
    # 2 blocks are free after it, enough for the new request's 1: it waits all the same
    assert column(batch, "ended", 4) == [False] * 4


def test_with_one_block_more_nobody_is_preempted():
    # 9 blocks: the 3 new blocks fit exactly; none is left for the waiting request
    out, batch, _ = _schedule(_three_decodes_opening_a_block(), params(kv_blocks=9), CFG)
    assert column(batch, "tokens", 4) == [1, 1, 1, 0]
    assert not np.asarray(batch.preempted).any()
    assert column(out, "status", 4) == [RUNNING, RUNNING, RUNNING, WAITING]
    # 10 blocks: one is left, and the new request is admitted on it
    out, batch, _ = _schedule(_three_decodes_opening_a_block(), params(kv_blocks=10), CFG)
    assert column(batch, "tokens", 4) == [1, 1, 1, 4]
    assert column(out, "qkey", 4) == [1, 2, 3, 4]


def test_a_large_shortfall_preempts_from_the_tail_until_the_rest_fits():
    # qkey 1 prefills 32 tokens: 8 -> 40 computed, 2 -> 10 blocks (8 new); the decodes open a
    # block each. 10 blocks, 6 held, 4 free: keeping qkey 1 alone costs 8, which the 4 free
    # and the decodes' 4 freed cover; keeping a decode too would need 9 - 2 > 4.
    e = entries(
        CFG,
        [
            _prefilling(40, 8, 1),
            running(8, 4, 1, qkey=2),
            running(8, 4, 1, qkey=3),
            _waiting(4, generated=1, preempted=True, qkey=-1),
        ],
    )
    out, batch, _ = _schedule(e, params(kv_blocks=10), CFG)
    assert column(batch, "tokens", 4) == [32, 0, 0, 0]
    assert column(batch, "preempted", 4) == [False, True, True, False]
    assert column(out, "blocks", 4) == [10, 0, 0, 0]
    # both go ahead of the request preempted before them, qkey 2 (admitted earlier) first
    assert column(out, "qkey", 4) == [1, -3, -2, -1]
    assert column(out, "status", 4) == [RUNNING, WAITING, WAITING, WAITING]


# -- schedule: admission ----------------------------------------------------------------------


def _long_prompt_between_short_ones():
    """Waiting: 4 tokens, 60 tokens, 4 tokens, into an idle engine. With a long-prefill
    threshold of 8 their first chunks take 1, 2 and 1 blocks; the 60-token sequence 15."""
    return entries(CFG, [_waiting(4), _waiting(60), _waiting(4)])


@pytest.mark.parametrize("kv_blocks, admitted", [(15, 1), (16, 3)])
def test_admission_stops_at_the_first_request_whose_full_sequence_does_not_fit(kv_blocks, admitted):
    # the second needs its whole 15 blocks free after the first one's 1: 16 blocks. Short of
    # that the third (1 block) would fit, but vLLM does not skip ahead.
    pol = params({"long_prefill_token_threshold": 8}, kv_blocks=kv_blocks)
    out, batch, _ = _schedule(_long_prompt_between_short_ones(), pol, CFG)
    assert column(batch, "tokens", 3) == [4, 8, 4][:admitted] + [0] * (3 - admitted)
    assert column(out, "status", 3) == [RUNNING] * admitted + [WAITING] * (3 - admitted)
    assert column(out, "blocks", 3) == [1, 2, 1][:admitted] + [0] * (3 - admitted)
    assert column(out, "qkey", 3) == [1, 2, 3][:admitted] + [0] * (3 - admitted)


def test_without_full_isl_reservation_only_the_first_chunk_must_fit():
    # 1 + 2 + 1 first-chunk blocks fit in 15 though the 60-token sequence will need 15
    pol = params({"long_prefill_token_threshold": 8}, kv_blocks=15)
    out, batch, _ = _schedule(_long_prompt_between_short_ones(), pol, RESERVE_OFF)
    assert column(batch, "tokens", 3) == [4, 8, 4]
    assert column(out, "blocks", 3) == [1, 2, 1]
    # ... and 4 blocks is exactly enough
    out, batch, _ = _schedule(
        _long_prompt_between_short_ones(),
        params({"long_prefill_token_threshold": 8}, kv_blocks=4),
        RESERVE_OFF,
    )
    assert column(out, "status", 3) == [RUNNING] * 3
    out, batch, _ = _schedule(
        _long_prompt_between_short_ones(),
        params({"long_prefill_token_threshold": 8}, kv_blocks=3),
        RESERVE_OFF,
    )
    assert column(out, "status", 3) == [RUNNING, RUNNING, WAITING]


def test_a_preempted_request_must_fit_its_prompt_and_generated_tokens():
    # 6 prompt + 3 generated = 9 tokens to recompute: 3 blocks, though the prompt takes 2
    e = entries(CFG, [_waiting(6, generated=3, preempted=True, qkey=-1)])
    out, batch, _ = _schedule(e, params(kv_blocks=2), CFG)
    assert column(out, "status", 1) == [WAITING]
    out, batch, _ = _schedule(e, params(kv_blocks=3), CFG)
    assert column(batch, "tokens", 1) == [9] and column(out, "blocks", 1) == [3]
    assert column(out, "preempted", 1) == [False]  # running again


@pytest.mark.parametrize("watermark, admitted", [(0.25, False), (0.0, True)])
def test_the_watermark_stays_free_while_a_request_runs(watermark, admitted):
    # 7 blocks, watermark floor(0.25 x 8) = 2. The running decode stays in its 2 blocks
    # (7 -> 8 tokens), 5 are free: the 16-token request's 4 fit, but not with 2 more free.
    e = entries(CFG, [running(7, 4, 1, qkey=1), _waiting(16)])
    out, batch, _ = _schedule(e, params({"watermark": watermark}, kv_blocks=7), CFG)
    assert column(batch, "tokens", 2) == [1, 16 if admitted else 0]
    assert column(out, "status", 2)[1] == (RUNNING if admitted else WAITING)


def test_the_watermark_spares_the_first_admission_into_an_idle_engine_only():
    # 7 blocks, watermark 2. The first request may take all 7 (nothing runs yet) ...
    out, _, _ = _schedule(
        entries(CFG, [_waiting(28)]), params({"watermark": 0.25}, kv_blocks=7), CFG
    )
    assert column(out, "status", 1) == [RUNNING]
    # ... but once it is admitted the watermark holds: 4 + 2 blocks fit 7, not with 2 free
    e = entries(CFG, [_waiting(16), _waiting(8)])
    out, _, _ = _schedule(e, params({"watermark": 0.25}, kv_blocks=7), CFG)
    assert column(out, "status", 2) == [RUNNING, WAITING]
    out, _, _ = _schedule(e, params({"watermark": 0.0}, kv_blocks=7), CFG)
    assert column(out, "status", 2) == [RUNNING, RUNNING]


@pytest.mark.parametrize(
    "values, admitted",
    [
        ({"max_num_seqs": 3}, 2),  # 1 running + 2
        ({"max_num_seqs": 3.9}, 2),  # floored
        ({"max_num_active_seqs": 2}, 1),
        ({"max_num_seqs": 2, "max_num_active_seqs": 3}, 1),
        ({"max_num_seqs": 1}, 0),  # already at the cap
    ],
)
def test_the_sequence_caps_count_the_running_requests(values, admitted):
    e = entries(CFG, [running(7, 4, 1, qkey=1), _waiting(4), _waiting(4), _waiting(4)])
    out, batch, _ = _schedule(e, params(values), CFG)
    assert column(out, "status", 4) == [RUNNING] * (1 + admitted) + [WAITING] * (3 - admitted)
    assert not bool(batch.slot_bound)  # the policy stopped it, not engine.max_slots


def test_max_slots_caps_the_running_set_and_flags_the_iteration():
    # 3 running of max_slots 4: one of the two waiting requests gets the last slot, and the
    # policy (max_num_seqs 1024) would have admitted the other one too
    rows = [
        running(7, 4, 1, qkey=1),
        running(7, 4, 1, qkey=2),
        running(7, 4, 1, qkey=3),
        _waiting(4),
        _waiting(4),
    ]
    out, batch, _ = _schedule(entries(CFG, rows), params(), CFG)
    assert column(out, "status", 5) == [RUNNING] * 4 + [WAITING]
    assert bool(batch.slot_bound)
    # with max_num_seqs 4 the policy stops it at the same place: not slot-bound
    out, batch, _ = _schedule(entries(CFG, rows), params({"max_num_seqs": 4}), CFG)
    assert column(out, "status", 5) == [RUNNING] * 4 + [WAITING]
    assert not bool(batch.slot_bound)
    # one waiting request fills the last slot: nothing was held back
    out, batch, _ = _schedule(entries(CFG, rows[:4]), params(), CFG)
    assert column(out, "status", 4) == [RUNNING] * 4 and not bool(batch.slot_bound)


def test_without_chunked_prefill_a_prompt_is_admitted_whole_or_not_at_all():
    # max_num_batched_tokens 16 is raised to max_model_len 64; the decode takes 1, 63 left:
    # 40 fit, the 24 after them do not (64 > 63), and admission stops there
    rows = [running(7, 4, 1, qkey=1), _waiting(40), _waiting(24), _waiting(4)]
    out, batch, _ = _schedule(
        entries(NO_CHUNK, rows), params({"max_num_batched_tokens": 16}), NO_CHUNK
    )
    assert column(batch, "tokens", 4) == [1, 40, 0, 0]
    assert column(out, "status", 4) == [RUNNING, RUNNING, WAITING, WAITING]
    # 23 tokens fit exactly
    rows[2] = _waiting(23)
    out, batch, _ = _schedule(
        entries(NO_CHUNK, rows), params({"max_num_batched_tokens": 16}), NO_CHUNK
    )
    assert column(batch, "tokens", 4) == [1, 40, 23, 0]
    # with chunking (the same 64-token budget) the 24-token prompt starts on a 23-token chunk
    rows[2] = _waiting(24)
    out, batch, _ = _schedule(entries(CFG, rows), params({"max_num_batched_tokens": 64}), CFG)
    assert column(batch, "tokens", 4) == [1, 40, 23, 0]
    assert column(out, "status", 4) == [RUNNING, RUNNING, RUNNING, WAITING]


def test_static_batching_admits_a_whole_batch_only_into_an_idle_engine():
    pol = params({"max_num_batched_tokens": 8})
    # no token budget: both prompts whole, far above 8 tokens
    out, batch, _ = _schedule(entries(STATIC, [_waiting(20), _waiting(30)]), pol, STATIC)
    assert column(batch, "tokens", 2) == [20, 30]
    assert column(out, "status", 2) == [RUNNING, RUNNING]
    # while the batch runs nothing joins it
    e = entries(STATIC, [running(7, 4, 1, qkey=1), _waiting(4)])
    out, batch, _ = _schedule(e, pol, STATIC)
    assert column(batch, "tokens", 2) == [1, 0]
    assert column(out, "status", 2) == [RUNNING, WAITING]


def test_empty_entries_schedule_nothing():
    e = entries(CFG, [])
    out, batch, _ = _schedule(e, params(), CFG)
    n = CFG.n_entries
    assert not np.asarray(batch.tokens).any() and not np.asarray(batch.preempted).any()
    assert column(out, "status", n) == column(e, "status", n)
    assert column(out, "qkey", n) == column(e, "qkey", n) and not bool(batch.slot_bound)


def test_whole_prompt_admission_counts_tokens_past_int32_without_wrapping():
    # 250 waiting prompts of 10^7 tokens (the trace loader's largest) against a budget of
    # max_model_len = 2**31 - 1 tokens: 214 fit (2.14e9); the running total of the 215th,
    # 2.15e9, would wrap negative in int32 and let it and those after it in
    cfg = config(
        chunked_prefill=False,
        max_slots=256,
        queue_window=256,
        block_size=16,
        max_model_len=2**31 - 1,
    )
    e = entries(cfg, [_waiting(10**7)] * 250)
    out, batch, _ = _schedule(e, params({"max_num_seqs": 1024}, kv_blocks=2**30), cfg)
    assert column(batch, "tokens", 250) == [10**7] * 214 + [0] * 36
    assert column(out, "status", 250) == [RUNNING] * 214 + [WAITING] * 36
