"""engine/async_scheduling.py on hand-built entries: under vLLM's async scheduling a request
that completes keeps its running place and KV blocks until the next step is planned, asks for
no token in that plan, and arrivals are offered up to the start of the step before."""

import jax.numpy as jnp
from toy import column, config, entries, params, running

from servetune.core.types import COMPLETED, DONE, RUNNING, WAITING
from servetune.engine import async_scheduling
from servetune.engine.advance import advance
from servetune.engine.scheduler import Batch, schedule, wanted_tokens

ASYNC = config(async_scheduling=True, leap_max=0)
SYNC = config(leap_max=0)


def _decode_batch(cfg, n_rows):
    n = cfg.n_entries
    one = jnp.asarray([1] * n_rows + [0] * (n - n_rows), jnp.int32)
    return Batch(
        tokens=one,
        decode=one > 0,
        preempted=jnp.zeros(n, bool),
        slot_bound=jnp.asarray(False),
        ended=jnp.zeros(n, bool),
    )


def test_a_completion_is_held_with_its_blocks_and_finish_time_until_released():
    # request 0 decodes its last token, request 1 its second of four
    rows = [running(8, 2, generated=1), running(8, 4, generated=2)]
    for cfg, held in ((SYNC, False), (ASYNC, True)):
        e = entries(cfg, rows)
        after, _, completed = advance(e, _decode_batch(cfg, 2), 5.0, hold=cfg.async_scheduling)
        assert completed[:2].tolist() == [True, False]
        assert column(after, "finish", 1) == [5.0]
        assert column(after, "end_state", 1) == [COMPLETED]
        assert column(after, "status", 1) == [RUNNING if held else DONE]
        assert column(after, "blocks", 1) == [2 if held else 0]  # 8 tokens, 4-token blocks
        assert async_scheduling.held(after)[:2].tolist() == [held, False]
    released, _, any_left = async_scheduling.release_held(after, None, 5.0, ASYNC)
    assert bool(any_left)
    assert column(released, "status", 2) == [DONE, RUNNING]
    assert column(released, "blocks", 2) == [0, 3]
    assert column(released, "finish", 1) == [5.0]  # the completion's time, not the release's


def test_a_held_request_asks_for_no_token_but_keeps_its_place_among_max_num_seqs():
    # max_num_seqs 2: request 0 is held (its last token was sampled in the step before), so
    # the waiting request 2 cannot be admitted in this plan; request 1 decodes
    rows = [
        running(8, 2, generated=2, computed=9),
        running(8, 4, generated=2),
        {"status": WAITING, "prompt": 4, "output": 2},
    ]
    e = entries(ASYNC, rows)
    need, decoding = wanted_tokens(e, params({"max_num_seqs": 2}), ASYNC)
    assert need[:2].tolist() == [0, 1] and decoding[:2].tolist() == [False, True]
    after, batch, _ = schedule(e, params({"max_num_seqs": 2}), ASYNC)
    assert batch.tokens[:3].tolist() == [0, 1, 0]
    assert column(after, "status", 3) == [RUNNING, RUNNING, WAITING]
    # once it is released, the next plan admits the waiting request
    released, _, _ = async_scheduling.release_held(after, None, 1.0, ASYNC)
    _, batch, _ = schedule(released, params({"max_num_seqs": 2}), ASYNC)
    assert batch.tokens[:3].tolist() == [0, 1, 4]


def test_arrivals_are_offered_up_to_the_start_of_the_step_before():
    offered = jnp.asarray([2.0])
    assert float(async_scheduling.offer_time(offered, 0, 3.5, ASYNC)) == 2.0
    assert async_scheduling.offer_time(None, 0, 3.5, SYNC) == 3.5
    # after a step starting at 3.5 the next plan is made at 3.5; after an idle iteration, at
    # the next clock
    busy = async_scheduling.next_offered(offered, 0, jnp.asarray(True), 3.5, 4.0, ASYNC)
    idle = async_scheduling.next_offered(offered, 0, jnp.asarray(False), 3.5, 9.0, ASYNC)
    assert busy.tolist() == [3.5] and idle.tolist() == [9.0]
    assert async_scheduling.next_offered(None, 0, True, 3.5, 4.0, SYNC) is None
