"""engine/outbox.py and engine/kv.py on hand-built entries: retiring a request, draining
finished ones into the outbox at most drain_per_step at a time, and KV block counts."""

import jax.numpy as jnp
import numpy as np
from toy import column, config, entries, running

from servetune.core.types import (
    CANCELLED,
    COMPLETED,
    DONE,
    EMPTY,
    EXPIRED,
    RUNNING,
    SWAP_PARTNERS,
    WAITING,
)
from servetune.engine.abandon import abandon, next_give_up
from servetune.engine.kv import blocks_for
from servetune.engine.outbox import drain, empty_outbox, retire
from servetune.engine.relaxed import shift, swap

CFG = config()  # 4-token blocks, drain_per_step 2


def test_paged_blocks_round_up_and_contiguous_reserves_max_model_len():
    tokens = jnp.asarray([0, 1, 4, 5, 8, 9])
    assert blocks_for(tokens, CFG).tolist() == [0, 1, 1, 2, 2, 3]
    contiguous = config(kv_layout="contiguous")  # 64 tokens in 4-token blocks: 16 at once
    assert blocks_for(tokens, contiguous).tolist() == [0, 16, 16, 16, 16, 16]
    # compressed 2x: 9 tokens take ceil(9 / 2) = 5 tokens' worth, 2 blocks
    assert blocks_for(jnp.asarray([9]), CFG, jnp.asarray([2.0])).tolist() == [2]


def test_retire_ends_only_the_chosen_requests_and_frees_their_blocks():
    e = entries(CFG, [running(8, 4, generated=2), running(8, 4, generated=1)])
    out = retire(e, jnp.arange(CFG.n_entries) == 1, COMPLETED, 3.5)
    assert column(out, "status", 2) == [RUNNING, DONE]
    assert column(out, "end_state", 2) == [-1, COMPLETED]
    assert column(out, "blocks", 2) == [3, 0]  # 9 computed tokens: 3 blocks, kept
    assert np.isnan(column(out, "finish", 1)[0]) and column(out, "finish", 2)[1] == 3.5


def test_drain_moves_at_most_drain_per_step_finished_entries_in_entry_order():
    rows = [
        {"status": DONE, "end_state": COMPLETED, "finish": 1.0 + i, "generated": i, "req": 10 + i}
        for i in range(3)
    ]
    e = entries(CFG, [rows[0], running(8, 4, req=20), rows[1], rows[2]])
    box = empty_outbox(CFG.outbox, 0)
    e, box = drain(e, box, CFG.drain_per_step)
    assert int(box.count) == 2 and np.asarray(box.req)[:2].tolist() == [10, 11]
    assert np.asarray(box.finish)[:2].tolist() == [1.0, 2.0]
    # the third stays DONE in its entry; the drained ones' entries are free
    assert column(e, "status", 4) == [EMPTY, RUNNING, EMPTY, DONE]
    assert column(e, "req", 4) == [-1, 20, -1, 12]
    e, box = drain(e, box, CFG.drain_per_step)  # the next iteration appends it
    assert int(box.count) == 3 and np.asarray(box.req)[2] == 12
    assert column(e, "status", 4)[3] == EMPTY


def test_drain_carries_a_relaxed_order_tape_with_its_record():
    """With a relaxed order (engine/relaxed/swap.py) a record also carries the request's latest
    admission and preemption, its pair table [m] included, written at the fill mark."""
    e = entries(
        CFG,
        [running(8, 4, req=20), {"status": DONE, "end_state": COMPLETED, "finish": 2.0, "req": 11}],
    )
    tape = swap.init_tape((CFG.n_entries,), 0)
    tape = tape.replace(
        admitted_at=tape.admitted_at.at[1].set(1.5),
        swap_req=tape.swap_req.at[1, :2].set(jnp.asarray([7, 3], jnp.int32)),
        swap_p=tape.swap_p.at[1, :2].set(jnp.asarray([0.25, 0.5])),
        victim_of=tape.victim_of.at[1].set(9),
    )
    box = empty_outbox(CFG.outbox, 0, relaxed=True, swap=True)
    box = box.replace(count=jnp.asarray(3, jnp.int32))  # three records collected before
    relaxed = shift.init_tape((CFG.n_entries,), 0)
    e, box = drain(e.replace(swap=tape, relaxed=relaxed), box, CFG.drain_per_step)
    assert int(box.count) == 4 and int(box.req[3]) == 11
    assert box.swap_req.shape == (CFG.outbox, SWAP_PARTNERS)
    assert np.asarray(box.swap_req[3]).tolist() == [7, 3, -1, -1]
    assert np.asarray(box.swap_p[3]).tolist() == [0.25, 0.5, 0.0, 0.0]
    assert float(box.admitted_at[3]) == 1.5 and int(box.victim_of[3]) == 9
    assert np.isnan(float(box.preempted_at[3]))
    assert np.all(np.asarray(box.swap_req[:3]) == -1)  # the earlier records are untouched


def test_drain_with_nothing_finished_moves_nothing():
    e = entries(CFG, [running(8, 4)])
    box = empty_outbox(CFG.outbox, 0)
    e2, box = drain(e, box, CFG.drain_per_step)
    assert int(box.count) == 0 and column(e2, "status", 1) == [RUNNING]


def test_abandon_ends_waiting_and_running_requests_at_their_give_up_time():
    e = entries(
        CFG,
        [
            {"give_up_at": 2.0, "give_up_state": CANCELLED},  # waiting, gives up at 2 s
            running(8, 4, give_up_at=1.5, give_up_state=EXPIRED, preempted=False),
            running(8, 4, give_up_at=2.5, give_up_state=CANCELLED),  # not yet at t = 2
            {"status": DONE, "end_state": COMPLETED, "give_up_at": 0.5, "give_up_state": EXPIRED},
        ],
    )
    assert float(next_give_up(e)) == 1.5  # the DONE request's time does not count
    out, n = abandon(e, 2.0)
    assert int(n) == 2
    assert column(out, "status", 4) == [DONE, DONE, RUNNING, DONE]
    assert column(out, "end_state", 4) == [CANCELLED, EXPIRED, -1, COMPLETED]
    assert column(out, "finish", 2) == [2.0, 1.5]  # at its give-up time, not at t
    assert column(out, "blocks", 3) == [0, 0, 2]
    assert float(next_give_up(out)) == 2.5


def test_a_preempted_request_that_gives_up_is_no_longer_marked_preempted():
    e = entries(
        CFG, [{"status": WAITING, "preempted": True, "give_up_at": 1.0, "give_up_state": CANCELLED}]
    )
    out, _ = abandon(e, 1.0)  # at exactly its give-up time
    assert column(out, "status", 1) == [DONE] and column(out, "preempted", 1) == [False]
