"""engine/priority.py on hand-built running lists: the victim by (priority, arrival), refunds.

Rows are running requests in admission order (the scheduling order of the running list); a
decode of 8 computed tokens opens a 3rd 4-token block, one of 7 stays in its 2. The end-to-end
cases (a victim scheduled earlier gives back its blocks, a request that picks itself ends the
scan) are in tests/integration/test_priority.py.
"""

import jax
import jax.numpy as jnp
import numpy as np
from toy import column, config, entries, params, running

from servetune.core.types import RUNNING, WAITING
from servetune.engine.priority import schedule_running
from servetune.engine.scheduler import schedule

PRI = config(scheduling_policy="priority")
FCFS = config()

_schedule = jax.jit(schedule, static_argnums=2)


def _running_list(rows, priority, arrival):
    """Entries whose first rows run, with their fixed priorities and arrivals."""
    rows = [{**row, "arrival": float(a)} for row, a in zip(rows, arrival, strict=True)]
    return entries(PRI, rows, priority=priority)


def _vector(values, dtype=jnp.int32):
    return jnp.asarray(list(values) + [0] * (PRI.n_entries - len(values)), dtype)


def _call(e, need, granted, grow, budget, free):
    running_mask = jnp.asarray(np.asarray(e.status) == RUNNING)
    kept, tokens, new = schedule_running(
        e, running_mask, _vector(need), _vector(granted), _vector(grow), budget, free, PRI
    )
    n = len(need)
    return (
        np.asarray(kept)[:n].tolist(),
        np.asarray(tokens)[:n].tolist(),
        np.asarray(new)[:n].tolist(),
    )


def test_when_every_grant_fits_the_grants_stand():
    # two decodes each open a block; 2 blocks free: no scan, nobody preempted
    e = _running_list([running(8, 4, 1), running(8, 4, 1)], priority=[5, 0], arrival=[0, 1])
    assert _call(e, [1, 1], [1, 1], [1, 1], 100, 2) == ([True, True], [1, 1], [1, 1])


def test_the_victim_is_the_largest_priority_value_wherever_it_stands():
    # 1 block free, two new ones wanted: when the third needs its block the victim is the
    # middle one (priority 3), whose 2 blocks make room; the third is then scheduled
    e = _running_list(
        [running(8, 4, 1), running(7, 4, 1), running(8, 4, 1)],
        priority=[0, 3, 0],
        arrival=[0, 1, 2],
    )
    assert _call(e, [1, 1, 1], [1, 1, 1], [1, 0, 1], 100, 1) == (
        [True, False, True],
        [1, 0, 1],
        [1, 0, 1],
    )


def test_among_equal_priorities_the_latest_arrival_is_the_victim():
    # the second of the two at priority 1 arrived last: it goes, not the first in the list
    e = _running_list(
        [running(7, 4, 1), running(7, 4, 1), running(8, 4, 1)],
        priority=[1, 1, 0],
        arrival=[2, 5, 1],
    )
    assert _call(e, [1, 1, 1], [1, 1, 1], [0, 0, 1], 100, 0) == (
        [True, False, True],
        [1, 0, 1],
        [0, 0, 1],
    )
    # the first arrived last: it goes, though scheduled already
    e = _running_list(
        [running(7, 4, 1), running(7, 4, 1), running(8, 4, 1)],
        priority=[1, 1, 0],
        arrival=[5, 2, 1],
    )
    assert _call(e, [1, 1, 1], [1, 1, 1], [0, 0, 1], 100, 0) == (
        [False, True, True],
        [0, 1, 1],
        [0, 0, 1],
    )


def test_an_exact_tie_goes_to_the_earliest_in_the_running_list():
    # (priority, arrival) equal: Python's max keeps the first of the running list
    e = _running_list(
        [running(7, 4, 1), running(7, 4, 1), running(8, 4, 1)],
        priority=[1, 1, 0],
        arrival=[1, 1, 0],
    )
    assert _call(e, [1, 1, 1], [1, 1, 1], [0, 0, 1], 100, 0) == (
        [False, True, True],
        [0, 1, 1],
        [0, 0, 1],
    )


def test_victims_are_taken_until_the_blocks_fit():
    # the third prefills 8 -> 20 tokens: 3 new blocks, none free. The worst (priority 2)
    # frees 2: not enough, so the next worst (priority 1) goes too
    prefill = {"status": RUNNING, "prompt": 20, "output": 4, "computed": 8}
    e = _running_list(
        [running(7, 4, 1), running(7, 4, 1), prefill], priority=[2, 1, 0], arrival=[0, 1, 2]
    )
    assert _call(e, [1, 1, 12], [1, 1, 12], [0, 0, 3], 100, 0) == (
        [False, False, True],
        [0, 0, 12],
        [0, 0, 3],
    )
    # when the worst holds 3 blocks (11 tokens) it is enough alone
    e = _running_list(
        [running(11, 4, 1), running(7, 4, 1), prefill], priority=[2, 1, 0], arrival=[0, 1, 2]
    )
    assert _call(e, [1, 1, 12], [1, 1, 12], [0, 0, 3], 100, 0) == (
        [False, True, True],
        [0, 1, 12],
        [0, 0, 3],
    )


def test_a_victim_scheduled_earlier_gives_its_tokens_to_the_requests_after():
    # budget 6: 1 + 1 + 4 for the prefill (7 -> 11 tokens, a 3rd block). No block free: the
    # second decode's block costs the first request (priority 5) its place and its token,
    # so the prefill, reached after, asks for 5 (7 -> 12 tokens: still its 3rd block)
    prefill = {"status": RUNNING, "prompt": 20, "output": 4, "computed": 7}
    e = _running_list(
        [running(7, 4, 1), running(8, 4, 1), prefill], priority=[5, 0, 0], arrival=[0, 1, 2]
    )
    assert _call(e, [1, 1, 13], [1, 1, 4], [0, 1, 1], 6, 0) == (
        [False, True, True],
        [0, 1, 5],
        [0, 1, 1],
    )


def test_schedule_under_the_priority_policy_preempts_the_victim_not_the_tail():
    # 7 blocks, 6 held, 2 new ones wanted; a new 4-token request waits
    rows = [
        running(8, 4, 1, qkey=1),
        running(7, 4, 1, qkey=2),
        running(8, 4, 1, qkey=3),
        {"prompt": 4, "output": 4},
    ]
    e = entries(PRI, rows, priority=[0, 3, 0, 0])
    out, batch, _ = _schedule(e, params(kv_blocks=7, order="priority"), PRI)
    assert column(batch, "tokens", 4) == [1, 0, 1, 0]
    assert column(batch, "preempted", 4) == [False, True, False, False]
    assert column(out, "status", 4) == [RUNNING, WAITING, RUNNING, WAITING]  # none admitted
    assert column(out, "blocks", 4) == [3, 0, 3, 0] and column(out, "computed", 4)[1] == 0
    assert column(out, "qkey", 4) == [1, -1, 3, 0]  # the victim heads the queue
    # FCFS pops the tail instead: the third request
    out, batch, _ = _schedule(entries(FCFS, rows, priority=[0, 3, 0, 0]), params(kv_blocks=7), FCFS)
    assert column(batch, "tokens", 4) == [1, 1, 0, 0]
    assert column(out, "status", 4) == [RUNNING, RUNNING, WAITING, WAITING]
