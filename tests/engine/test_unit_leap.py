"""engine/leap.py on hand-built entries: a run of uniform decode iterations in closed form,
the limits that stop it (remaining output, the next arrival, KV blocks, leap_max) and the
cases where it must not run, against iterations worked by hand with a linear cost."""

import numpy as np
from toy import column, config, entries, params, running

from servetune.engine.leap import leap
from servetune.types import COMPLETED, DONE, RUNNING

CFG = config()  # 4-token blocks, leap_max 8
# each iteration: 0.01 s + 1 ms per decoding sequence (no context cost): 0.012 s for two
PARAMS = params(base_s=0.01, per_prefill_token_s=0.0, per_decode_seq_s=1e-3, kv_blocks=1000)


def _leap(e, t=1.0, t_limit=float("inf"), p=PARAMS, cfg=CFG):
    out, t_end, k, dur, _, blocks, done, _ = leap(e, t, t_limit, p, cfg)
    return out, float(t_end), int(k), np.asarray(dur), int(blocks), np.asarray(done)


def test_a_run_stops_at_the_first_completion_with_single_stepping_s_tokens_and_times():
    # two decoding requests: 3 and 6 tokens left; the run stops when the first completes
    e = entries(CFG, [running(8, 5, generated=2, last_emit=0.99),
                      running(8, 9, generated=3, last_emit=0.99)])
    out, t_end, k, dur, blocks, done = _leap(e)
    assert k == 3 and np.isclose(t_end, 1.0 + 3 * 0.012)
    assert np.allclose(dur[:3], 0.012) and (dur[3:] == 0).all()
    assert column(out, "generated", 2) == [5, 6] and column(out, "computed", 2) == [12, 13]
    assert column(out, "status", 2) == [DONE, RUNNING] and done[:2].tolist() == [True, False]
    assert column(out, "end_state", 1) == [COMPLETED] and np.isclose(column(out, "finish", 1)[0],
                                                                     t_end)
    assert column(out, "blocks", 2) == [0, 4]  # 13 tokens: 4 blocks; the completed one freed
    assert blocks == 3 + 4  # the run's peak, in its last iteration: 12 tokens held 3 blocks
    assert np.allclose(column(out, "last_emit", 2), t_end)


def test_the_next_arrival_and_leap_max_bound_the_run():
    e = entries(CFG, [running(8, 60, generated=2)])  # 58 tokens left; 0.011 s per iteration
    # iterations start at 1.000, 1.011, 1.022, 1.033: three start before 1.03
    assert _leap(e, t_limit=1.03)[2] == 3
    assert _leap(e)[2] == CFG.leap_max  # no arrival: the vector's length


def test_kv_blocks_bound_the_run_to_whole_blocks_per_request():
    # 9 computed tokens in 3 blocks; 2 blocks free: at most 2 x 4 = 8 more tokens per request
    e = entries(CFG, [running(8, 60, generated=2)])
    assert _leap(e, p=params(base_s=0.01, per_prefill_token_s=0.0, kv_blocks=5))[2] == 8
    assert _leap(e, p=params(base_s=0.01, per_prefill_token_s=0.0, kv_blocks=4))[2] == 4


def test_no_run_while_a_request_prefills_or_a_waiting_one_could_be_admitted():
    mid_prefill = entries(CFG, [running(8, 9, generated=2), {"status": RUNNING, "prompt": 8,
                                                             "output": 4, "computed": 4}])
    assert _leap(mid_prefill)[2] == 0
    waiting = entries(CFG, [running(8, 9, generated=2), {"prompt": 8, "output": 4}])
    out, t_end, k, *_ = _leap(waiting)
    assert k == 0 and t_end == 1.0 and column(out, "generated", 1) == [2]  # unchanged
    # the same waiting request held back by max_num_seqs = 1: the run may go on
    capped = params({"max_num_seqs": 1}, base_s=0.01, per_prefill_token_s=0.0)
    assert _leap(waiting, p=capped)[2] == 7  # 7 tokens left to its completion
