"""engine/advance.py on hand-built entries: which requests emit, complete and free their KV."""

import jax.numpy as jnp
import numpy as np
from toy import column, config, entries, running

from servetune.core.types import COMPLETED, DONE, RUNNING
from servetune.engine.advance import advance
from servetune.engine.scheduler import Batch

CFG = config()


def _batch(tokens, decode=None, accepted=None):
    n = CFG.n_entries
    tok = jnp.asarray(list(tokens) + [0] * (n - len(tokens)), jnp.int32)
    dec = jnp.asarray(list(decode or [False] * len(tokens)) + [False] * (n - len(tokens)))
    acc = (
        None
        if accepted is None
        else jnp.asarray(list(accepted) + [0] * (n - len(accepted)), jnp.int32)
    )
    return Batch(
        tokens=tok,
        decode=dec,
        preempted=jnp.zeros(n, bool),
        slot_bound=jnp.asarray(False),
        ended=jnp.zeros(n, bool),
        accepted=acc,
    )


def test_a_prefill_emits_only_when_its_last_chunk_is_computed():
    e = entries(
        CFG,
        [
            {"status": RUNNING, "prompt": 10, "output": 3},
            {"status": RUNNING, "prompt": 10, "output": 3},
        ],
    )
    out, gap, done = advance(e, _batch([6, 10]), 2.5)
    assert column(out, "computed", 2) == [6, 10]
    assert column(out, "generated", 2) == [0, 1]  # the first chunk emits nothing
    assert np.isnan(column(out, "first_token", 1)[0]) and column(out, "first_token", 2)[1] == 2.5
    assert np.isnan(np.asarray(gap)[:2]).all()  # a first token is not an inter-token gap
    assert not np.asarray(done).any()


def test_a_decode_emits_a_token_and_its_gap_since_the_previous_one():
    e = entries(CFG, [running(10, 5, generated=2, last_emit=1.0, first_token=0.5)])
    out, gap, done = advance(e, _batch([1], [True]), 1.25)
    assert column(out, "generated", 1) == [3] and column(out, "computed", 1) == [12]
    assert float(gap[0]) == 0.25 and column(out, "last_emit", 1) == [1.25]
    assert column(out, "first_token", 1) == [0.5] and not bool(done[0])


def test_the_last_token_completes_the_request_and_frees_its_blocks():
    e = entries(
        CFG,
        [running(10, 3, generated=2, last_emit=1.0), running(10, 9, generated=2, last_emit=1.0)],
    )
    out, _, done = advance(e, _batch([1, 1], [True, True]), 2.0)
    assert np.asarray(done)[:2].tolist() == [True, False]
    assert column(out, "status", 2) == [DONE, RUNNING]
    assert column(out, "end_state", 1) == [COMPLETED] and column(out, "finish", 1) == [2.0]
    assert column(out, "blocks", 2) == [0, 3]  # 11 computed tokens in 4-token blocks: 3
    assert column(out, "tokens_computed", 2) == [1, 1]


def test_speculation_emits_the_accepted_drafts_but_never_past_the_output_length():
    e = entries(CFG, [running(10, 20, generated=2), running(10, 4, generated=2)])
    # 3 drafts accepted each: 1 + 3 tokens, cut to the 2 the second request has left
    out, _, done = advance(e, _batch([4, 4], [True, True], accepted=[3, 3]), 1.0)
    assert column(out, "generated", 2) == [6, 4]
    assert column(out, "computed", 2) == [15, 13]  # only emitted positions stay computed
    assert np.asarray(done)[:2].tolist() == [False, True]


def test_empty_slots_are_left_alone():
    e = entries(CFG, [])
    out, gap, done = advance(e, _batch([]), 1.0)
    assert column(out, "status", CFG.n_entries) == column(e, "status", CFG.n_entries)
    assert np.isnan(np.asarray(gap)).all() and not np.asarray(done).any()


def test_a_stream_interval_turns_the_inter_token_gaps_into_the_chunks_gaps():
    # one request decodes tokens 2..6 at t = 2..6 after its first token at t = 1: one token at
    # a time reaches the client with interval 1; with interval 4 tokens 2-5 arrive together at
    # t = 5 (gap 4 s) and token 6, its last, at t = 6 (gap 1 s), as vLLM streams them
    for interval, expected in ((1, [1.0] * 5), (4, [4.0, 1.0])):
        e = entries(CFG, [running(4, 6, generated=1, last_emit=1.0, first_token=1.0)])
        gaps = []
        for t in range(2, 7):
            e, gap, _ = advance(e, _batch([1], [True]), float(t), stream_interval=interval)
            gaps += [float(g) for g in np.asarray(gap)[:1] if not np.isnan(g)]
        assert gaps == expected
        assert column(e, "first_token", 1) == [1.0] and column(e, "finish", 1) == [6.0]
