"""engine/leap.py on hand-built entries: a run of uniform decode iterations in closed form,
the limits that stop it (remaining output, the next arrival, KV blocks, leap_max) and the
cases where it must not run, against iterations worked by hand with a linear cost."""

import jax.numpy as jnp
import numpy as np
from toy import column, config, entries, params, running

from servetune.core.types import COMPLETED, DONE, RUNNING
from servetune.engine.leap import NextArrival, leap

CFG = config()  # 4-token blocks, leap_max 8
# each iteration: 0.01 s + 1 ms per decoding sequence (no context cost): 0.012 s for two
PARAMS = params(base_s=0.01, per_prefill_token_s=0.0, per_decode_seq_s=1e-3, kv_blocks=1000)


def _leap(e, t=1.0, t_limit=float("inf"), p=PARAMS, cfg=CFG):
    run = leap(e, t, t_limit, p, cfg)
    return (
        run.e,
        float(run.t_end),
        int(run.k),
        np.asarray(run.dur),
        int(run.kv_peak),
        np.asarray(run.completed),
    )


def test_with_a_request_waiting_a_run_stops_at_the_first_completion():
    # two decoding requests: 3 and 6 tokens left; a third waits, held back by max_num_seqs 2:
    # the first completion could let it in, so the run stops there
    e = entries(
        CFG,
        [
            running(8, 5, generated=2, last_emit=0.99),
            running(8, 9, generated=3, last_emit=0.99),
            {"prompt": 4, "output": 2},
        ],
    )
    capped = params({"max_num_seqs": 2}, base_s=0.01, per_prefill_token_s=0.0)
    out, t_end, k, dur, blocks, done = _leap(e, p=capped)
    assert k == 3 and np.isclose(t_end, 1.0 + 3 * 0.012)
    assert np.allclose(dur[:3], 0.012) and (dur[3:] == 0).all()
    assert column(out, "generated", 2) == [5, 6] and column(out, "computed", 2) == [12, 13]
    assert column(out, "status", 2) == [DONE, RUNNING] and done[:2].tolist() == [True, False]
    assert column(out, "end_state", 1) == [COMPLETED] and np.isclose(
        column(out, "finish", 1)[0], t_end
    )
    assert column(out, "blocks", 2) == [0, 4]  # 13 tokens: 4 blocks; the completed one freed
    assert blocks == 3 + 4  # the run's peak, in its last iteration: 12 tokens held 3 blocks
    assert np.allclose(column(out, "last_emit", 2), t_end)


def test_with_nobody_waiting_a_run_goes_on_past_completions():
    # the same two requests alone: iterations 0-2 decode both (0.012 s), the first completes
    # at the end of iteration 2 (1.036 s), iterations 3-5 decode the second alone (0.011 s)
    e = entries(
        CFG,
        [running(8, 5, generated=2, last_emit=0.99), running(8, 9, generated=3, last_emit=0.99)],
    )
    run = leap(e, 1.0, float("inf"), PARAMS, CFG)
    assert int(run.k) == 6 and np.isclose(float(run.t_end), 1.069)
    assert np.allclose(np.asarray(run.dur)[:6], [0.012] * 3 + [0.011] * 3)
    assert column(run.e, "generated", 2) == [5, 9] and column(run.e, "computed", 2) == [12, 16]
    assert column(run.e, "status", 2) == [DONE, DONE]
    assert np.allclose(column(run.e, "finish", 2), [1.036, 1.069])
    assert np.allclose(column(run.e, "last_emit", 2), [1.036, 1.069])
    assert column(run.e, "blocks", 2) == [0, 0]
    # the peak is iteration 2's: 12 tokens in 3 blocks and 13 in 4; later only 4 are held
    assert int(run.kv_peak) == 7
    assert int(run.tokens) == 3 + 6 and np.isclose(float(run.early_s), 1.069 - 1.036)
    # context read: 9 + 10, 10 + 11, 11 + 12, then 13, 14, 15
    assert float(run.ctx_read) == 19 + 21 + 23 + 13 + 14 + 15
    gaps, weights = (np.asarray(x) for x in run.gaps)
    later = np.isfinite(gaps[CFG.n_entries :])
    assert np.allclose(gaps[CFG.n_entries :][later], [0.012] * 2 + [0.011] * 3)
    assert weights[CFG.n_entries :][later].tolist() == [2, 2, 1, 1, 1]
    assert np.allclose(gaps[:2], 1.012 - 0.99)


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
    mid_prefill = entries(
        CFG,
        [running(8, 9, generated=2), {"status": RUNNING, "prompt": 8, "output": 4, "computed": 4}],
    )
    assert _leap(mid_prefill)[2] == 0
    waiting = entries(CFG, [running(8, 9, generated=2), {"prompt": 8, "output": 4}])
    out, t_end, k, *_ = _leap(waiting)
    assert k == 0 and t_end == 1.0 and column(out, "generated", 1) == [2]  # unchanged
    # the same waiting request held back by max_num_seqs = 1: the run may go on
    capped = params({"max_num_seqs": 1}, base_s=0.01, per_prefill_token_s=0.0)
    assert _leap(waiting, p=capped)[2] == 7  # 7 tokens left to its completion


def _arrival(at, prompt, output, t_limit=float("inf")):
    return NextArrival(
        req=jnp.int32(7),
        at=jnp.float64(at),
        prompt=jnp.int32(prompt),
        output=jnp.int32(output),
        predicted=jnp.float64(output),
        priority=None,
        t_limit=jnp.float64(t_limit),
    )


def test_a_run_takes_in_the_next_arrival_as_the_full_step_admits_it():
    # one request decoding (0.011 s an iteration) and an arrival at 1.015: iterations start at
    # 1.000 and 1.011, so it is admitted at iteration 2 (1.022): its 4-token prompt makes that
    # iteration 0.015 s (first token 1.037), two decodes of both follow (0.012 s: 1.049,
    # 1.061, where its third token completes it), then the first alone to leap_max 8
    p = params(base_s=0.01, per_prefill_token_s=1e-3, per_decode_seq_s=1e-3, kv_blocks=1000)
    e = entries(CFG, [running(8, 20, generated=2, last_emit=0.99)])
    run = leap(e, 1.0, 1.015, p, CFG, arrival=_arrival(1.015, 4, 3))
    assert int(run.taken) == 1 and int(run.k) == 8
    assert np.allclose(
        np.asarray(run.dur), [0.011, 0.011, 0.015, 0.012, 0.012, 0.011, 0.011, 0.011]
    )
    assert np.isclose(float(run.t_end), 1.094)
    assert column(run.e, "generated", 2) == [10, 3] and column(run.e, "computed", 2) == [17, 6]
    assert column(run.e, "req", 2) == [0, 7] and column(run.e, "status", 2) == [RUNNING, DONE]
    assert np.allclose(column(run.e, "scheduled_at", 2)[1], 1.022)
    assert np.allclose(column(run.e, "first_token", 2)[1], 1.037)
    assert np.allclose(column(run.e, "finish", 2)[1], 1.061)
    assert column(run.e, "qkey", 2) == [0, 1] and column(run.e, "tokens_computed", 2)[1] == 6
    assert int(run.prefill_tokens) == 4 and int(run.tokens) == 8 + 2
    assert int(run.max_running) == 2 and int(run.kv_peak) == 4 + 2  # iterations 3 and 4
    # context read: the first's 9..16, the arrival's decodes read 4 and 5
    assert float(run.ctx_read) == sum(range(9, 17)) + 4 + 5
    assert float(run.attn_work) == float(run.ctx_read) + 10 + 4 * 5 / 2
    weights = np.asarray(run.gaps[1])  # one gap per request decoding in each later iteration
    assert weights[CFG.n_entries + 1 :].tolist() == [1, 1, 2, 2, 1, 1, 1]
    assert np.isclose(float(run.early_s), 1.094 - 1.061)


def test_a_run_leaves_an_arrival_the_full_step_would_not_admit_whole():
    # a budget of 4 tokens: 1 decode + an 8-token prompt do not fit one iteration, so the run
    # stops before the iteration that would see it (at 1.022: two iterations)
    p = params(
        {"max_num_batched_tokens": 4},
        base_s=0.01,
        per_prefill_token_s=1e-3,
        per_decode_seq_s=1e-3,
        kv_blocks=1000,
    )
    e = entries(CFG, [running(8, 20, generated=2, last_emit=0.99)])
    run = leap(e, 1.0, 1.015, p, CFG, arrival=_arrival(1.015, 8, 3))
    assert int(run.taken) == 0 and int(run.k) == 2 and int(run.prefill_tokens) == 0
    assert column(run.e, "status", 2) == [RUNNING, 0]
    # nor one that arrives after everybody has completed (the engine would be idle)
    short = entries(CFG, [running(8, 4, generated=2, last_emit=0.99)])  # 2 tokens left
    run = leap(short, 1.0, 1.5, PARAMS, CFG, arrival=_arrival(1.5, 4, 3))
    assert int(run.taken) == 0 and int(run.k) == 2
