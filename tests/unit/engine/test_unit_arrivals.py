"""engine/arrivals.py on hand-built entries and a small workload: arrivals join in trace order
into free entries, wait outside a full window, and are rejected by vLLM 0.32's arrival checks
(length, KV, the API server's caps) and a gateway's queue cap."""

import jax
import numpy as np
from toy import column, config, entries, params, running

from servetune.config.scenario import stack_workloads
from servetune.core.types import (
    DONE,
    REJECT_KV_CAPACITY,
    REJECT_QUEUE_CAP,
    REJECT_QUEUED_REQS,
    REJECT_QUEUED_TOKENS,
    REJECT_TOO_LONG,
    REJECTED,
    RUNNING,
    WAITING,
)
from servetune.engine.arrivals import take_arrivals
from servetune.workload.traces import RequestTrace

CFG = config()  # 4 + 4 entries, max_model_len 64, 4-token blocks


def _workload(rows):
    """One workload [N] from (arrival_s, prompt, output) rows."""
    a = np.asarray(rows, np.float64)
    trace = RequestTrace("t", a[:, 0], a[:, 1].astype(np.int32), a[:, 2].astype(np.int32))
    wl = stack_workloads([trace], [trace.output.astype(np.float64)], 100.0, CFG)
    return jax.tree.map(lambda x: x[0], wl)


WL = _workload([(0.0, 8, 4), (1.0, 10, 4), (1.0, 12, 4), (3.0, 14, 4)])


def _take(e, t, next_req=0, wl=WL, p=None):
    out, nxt, outside, arrived, rejected = take_arrivals(
        e, t, next_req, wl, p or params(), CFG, None
    )
    return out, int(nxt), int(outside), int(arrived), int(rejected)


def test_arrivals_by_t_join_in_trace_order_into_the_free_entries():
    e = entries(CFG, [running(8, 4, req=9)])  # entry 0 is taken
    out, nxt, outside, arrived, rejected = _take(e, 1.0)
    assert (nxt, outside, arrived, rejected) == (3, 0, 3, 0)
    assert column(out, "req", 4) == [9, 0, 1, 2]
    assert column(out, "status", 4) == [RUNNING, WAITING, WAITING, WAITING]
    assert column(out, "prompt", 4) == [8, 8, 10, 12] and column(out, "arrival", 4)[1:] == [
        0.0,
        1.0,
        1.0,
    ]
    _, nxt, _, arrived, _ = _take(e, 0.5)  # only the first has arrived at 0.5 s
    assert (nxt, arrived) == (1, 1)


def test_arrivals_that_find_no_free_entry_wait_outside_in_order():
    full = entries(CFG, [running(8, 4, req=20 + i) for i in range(CFG.n_entries - 1)])
    out, nxt, outside, arrived, _ = _take(full, 3.0)  # 4 arrived, one free entry
    assert (nxt, outside, arrived) == (1, 3, 4)
    assert column(out, "req", CFG.n_entries)[-1] == 0  # the first in trace order
    later, nxt, outside, _, _ = _take(full, 3.0, next_req=1)  # later, from where it stopped
    assert (nxt, outside) == (2, 2) and column(later, "req", CFG.n_entries)[-1] == 1


def test_too_long_and_never_fitting_prompts_are_rejected_at_their_arrival():
    wl = _workload([(0.0, 64, 4), (0.0, 40, 4), (0.0, 8, 4)])
    # 64 tokens: at max_model_len (vLLM refuses >=); 40 + 4 - 1 = 43 tokens need 11 blocks of 10
    out, _, _, _, rejected = _take(entries(CFG, []), 0.0, wl=wl, p=params(kv_blocks=10))
    assert rejected == 2
    assert column(out, "status", 3) == [DONE, DONE, WAITING]
    assert column(out, "end_state", 2) == [REJECTED, REJECTED] and column(out, "finish", 2) == [
        0.0,
        0.0,
    ]
    assert column(out, "reject_reason", 3) == [REJECT_TOO_LONG, REJECT_KV_CAPACITY, -1]
    assert all(np.isnan(column(out, "scheduled_at", 3)))  # none scheduled yet


def test_a_rejection_names_the_first_check_it_failed():
    # the 64-token prompt is both too long and too big for 10 blocks, and past the queue cap:
    # the length check comes first; the 40-token one fails the KV check before the cap
    wl = _workload([(0.0, 64, 4), (0.0, 40, 4), (0.0, 8, 4), (0.0, 8, 4)])
    out, _, _, _, rejected = _take(
        entries(CFG, []), 0.0, wl=wl, p=params({"queue_cap": 1}, kv_blocks=10)
    )
    assert rejected == 3
    assert column(out, "reject_reason", 4) == [
        REJECT_TOO_LONG,
        REJECT_KV_CAPACITY,
        -1,
        REJECT_QUEUE_CAP,
    ]


def test_the_queue_caps_each_see_the_arrivals_let_in_before_them():
    e = entries(CFG, [{"prompt": 8, "output": 4, "req": 9}])  # one waiting already
    cases = {
        "queue_cap": (2, [WAITING, DONE, DONE], REJECT_QUEUE_CAP),  # room for one more
        "max_num_queued_reqs": (3, [WAITING, WAITING, DONE], REJECT_QUEUED_REQS),
        # prompt tokens without a first token: 8 + 8 = 16 < 20 lets the second in,
        # 8 + 8 + 10 = 26 refuses the third
        "max_num_queued_tokens": (20, [WAITING, WAITING, DONE], REJECT_QUEUED_TOKENS),
    }
    for key, (cap, statuses, code) in cases.items():
        out, _, _, _, rejected = _take(e, 1.0, p=params({key: cap}))
        assert column(out, "status", 4)[1:] == statuses, key
        assert rejected == statuses.count(DONE), key
        assert column(out, "reject_reason", 4)[1:] == [
            code if s == DONE else -1 for s in statuses
        ], key


def test_the_queued_token_cap_counts_past_int32_without_wrapping():
    # 300 arrivals of 10^7 prompt tokens (the loader's largest) against a cap of 2.5e9 tokens:
    # the running total passes 2**31 at the 215th; a wrapped int32 total would turn negative
    # there and let every later one in. Exactly 250 get in (250 x 10^7 = 2.5e9 is refused).
    cfg = config(max_slots=4, queue_window=300, max_model_len=2**31 - 1)
    rows = [(0.0, 10**7, 4)] * 300
    a = np.asarray(rows, np.float64)
    trace = RequestTrace("t", a[:, 0], a[:, 1].astype(np.int32), a[:, 2].astype(np.int32))
    wl = jax.tree.map(lambda x: x[0], stack_workloads([trace], [trace.output * 1.0], 100.0, cfg))
    p = params({"max_num_queued_tokens": 2.5e9}, kv_blocks=2**30)
    out, _, _, arrived, rejected = take_arrivals(entries(cfg, []), 0.0, 0, wl, p, cfg, None)
    assert (int(arrived), int(rejected)) == (300, 50)
    assert column(out, "status", 300) == [WAITING] * 250 + [DONE] * 50
