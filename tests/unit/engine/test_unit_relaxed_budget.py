"""The token budget's relaxed work (engine/relaxed/batch.py, step.batch_totals, relaxed/pace.py) on
hand-built entries under relax st: forward-mode derivatives of the iteration's token weights
in the budget and in a request's debt (tokens it computed ahead of the exact path).

While the budget binds, a bigger budget adds its tokens to every iteration: a prefilling
request repays its debt only where its remaining prompt runs out, and the tokens it then
leaves go to the requests after it. Repaying at the next chunk instead (as before) let the
budget's extra tokens cost nothing while they were handed along a busy queue, and took them
off the run's length when the queue emptied: on the distribution benchmark's busiest replica
the relaxed run's length fell by 36 s per unit of log budget where the exact one grows by 3 s,
and the tuner raised the budget where the exact objective falls (benchmarks/README.md).
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from toy import config, entries, params

from servetune.core.types import RUNNING
from servetune.engine.relaxed import pace
from servetune.engine.scheduler import schedule
from servetune.engine.step import batch_totals

ST = dataclasses.replace(config(), relax="st", relax_temperature=0.3, leap_max=0)
TAPE = ("wait_z", "wait_zt", "shift", "debt", "ahead", "pre_s", "pre_tok")


def _prefilling(prompt, computed, qkey):
    return {"status": RUNNING, "prompt": prompt, "output": 4, "computed": computed, "qkey": qkey}


def _tangents(rows, budget, debt_tangent):
    """(batch, d batch, d attention work) of one st schedule of `rows` at max_num_batched_tokens
    `budget`, along d budget = 1 and d debt = `debt_tangent` [len(rows)] (the debts are 0 in
    value, as under st)."""
    n = len(rows)

    e0 = entries(ST, rows, relaxed={f: [0.0] * n for f in TAPE})

    def run(b, debt):
        e = e0.replace(relaxed=e0.relaxed.replace(debt=e0.relaxed.debt.at[:n].set(debt)))
        p = params()
        p = p.replace(policy=p.policy.replace(max_num_batched_tokens=b))
        out, batch, _ = schedule(e, p, ST)
        return batch, batch_totals(out, batch)[3]

    (batch, _), (d_batch, d_attn) = jax.jit(
        lambda t: jax.jvp(run, (jnp.float64(budget), jnp.zeros(n)), (jnp.float64(1.0), t))
    )(jnp.asarray(debt_tangent, jnp.float64))
    return batch, d_batch, float(d_attn)


def test_a_request_the_budget_cuts_keeps_its_debt_and_takes_the_budgets_tokens():
    # 32 prompt tokens left, budget 10: a 10-token chunk, and 22 still to come next time
    batch, d, _ = _tangents([_prefilling(40, 8, 1)], 10.5, [5.0])
    assert np.asarray(batch.tokens)[0] == 10
    # the iteration computes the budget's extra token; the 5 tokens computed earlier are not
    # given back here (the budget still fills this chunk): they shorten the last chunk
    assert np.asarray(d.relaxed.weight)[0] == 1.0
    assert np.asarray(d.relaxed.debt)[0] == 6.0
    assert np.asarray(d.relaxed.gain)[0] == 1.0  # progress: one prompt token more


def test_the_last_chunk_repays_the_debt_and_the_next_request_takes_the_tokens_left():
    # 4 prompt tokens left (debt 3: only 1 in the perturbed run), then a 20-token arrival that
    # gets the 6 the budget of 10 leaves
    rows = [_prefilling(12, 8, 1), {"prompt": 20, "output": 4}]
    batch, d, d_attn = _tangents(rows, 10.5, [3.0, 0.0])
    assert np.asarray(batch.tokens)[:2].tolist() == [4, 6]
    w = np.asarray(d.relaxed.weight)[:2]
    assert w.tolist() == [-3.0, 4.0]  # repaid; the budget's token and the 3 left over
    assert w.sum() == 1.0  # the iteration still computes the whole (bigger) budget
    assert np.asarray(d.relaxed.debt)[:2].tolist() == [0.0, 4.0]
    # the handed-on tokens are the queue's: attention at the mean prefill context
    # (4 x (8 + 2.5) + 6 x (0 + 3.5)) / 10 = 6.3 per token, for the one token more in all;
    # at each request's own context it was -3 x 12.5 + 4 x 6.5 = -11.5
    np.testing.assert_allclose(d_attn, 6.3)


def test_a_prefills_share_of_an_iteration_is_by_its_prompt_tokens():
    tokens = jnp.array([1, 30, 10, 0])
    decode = jnp.array([True, False, False, False])
    share = pace.share_seconds(tokens, decode, 0.2)
    np.testing.assert_allclose(share, [0.0, 0.15, 0.05, 0.0])
