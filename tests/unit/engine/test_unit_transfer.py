"""engine/transfer.py with disaggregation's hand-off and the cascade's fall-back (engine/disagg.py,
engine/cascade.py) on hand-built entries of two or three instances: who moves where, when it
lands, what it carries, and who waits."""

import jax
import jax.numpy as jnp
import numpy as np
from toy import config, entries, params, running

from servetune.core.types import (
    COMPLETED,
    DONE,
    EMPTY,
    HANDOFF,
    INFLIGHT,
    RETRY,
    RUNNING,
    TIER_RETRIED,
    TIER_SMALL,
    WAITING,
)
from servetune.engine import cascade, disagg, transfer


def _stack(*instances):
    return jax.tree.map(lambda *x: jnp.stack(x), *instances)


def _cost(kv_blocks=20, **kw):
    cost = params(kv_blocks=kv_blocks).cost
    return cost.replace(**{k: jnp.asarray(v) for k, v in kw.items()})


def test_a_handoff_goes_to_the_decode_instance_with_the_lowest_kv_use_and_lands_later():
    cfg = config(n_instances=3, prefill_instances=1)
    prefill = entries(cfg, [running(40, 8, generated=1, status=HANDOFF, req=7)])  # 10 blocks
    busy = entries(cfg, [running(20, 8, generated=2)])  # 6 blocks of 20
    light = entries(cfg, [running(8, 8, generated=2)])  # 3 blocks of 20
    cost = _cost(link_bytes_per_s=1000.0, link_latency_s=0.5, kv_bytes_per_token=100.0)
    out = disagg.hand_off(_stack(prefill, busy, light), 0, 2.0, cost, cfg)
    assert out.status[0, 0] == EMPTY and out.req[0, 0] == -1 and out.blocks[0, 0] == 0
    assert out.status[2, 1] == INFLIGHT and out.req[2, 1] == 7  # the lighter one, first free slot
    assert out.blocks[2, 1] == 10  # its blocks reserved at once
    # lands after 0.5 s + 40 tokens x 100 bytes / 1000 bytes/s = 4.5 s after 2 s
    assert float(out.ready_at[2, 1]) == 6.5 and out.status[1, 1] == EMPTY
    assert disagg.land(jax.tree.map(lambda x: x[2], out), 6.4).status[1] == INFLIGHT
    assert disagg.land(jax.tree.map(lambda x: x[2], out), 6.5).status[1] == RUNNING


def test_a_handoff_waits_on_the_prefill_instance_while_no_decode_instance_has_room():
    cfg = config(n_instances=2, prefill_instances=1)
    prefill = entries(cfg, [running(40, 8, generated=1, status=HANDOFF)])  # 10 blocks
    full = entries(cfg, [running(44, 8, generated=1)])  # 11 of 20 blocks: 9 free
    out = disagg.hand_off(_stack(prefill, full), 0, 2.0, _cost(), cfg)
    assert out.status[0, 0] == HANDOFF and out.blocks[0, 0] == 10  # holds its blocks
    assert (out.status[1, 1:] == EMPTY).all()


def test_a_failed_small_answer_retries_on_the_least_loaded_large_instance_from_scratch():
    cfg = config(n_instances=3, cascade_small_instances=1)
    done = {
        "status": DONE,
        "end_state": COMPLETED,
        "prompt": 8,
        "output": 4,
        "generated": 4,
        "computed": 11,
        "first_token": 1.0,
        "finish": 3.0,
        "req": 5,
        "n_preempt": 1,
    }
    small = entries(cfg, [done], cascade={"fail": [True], "tier": [TIER_SMALL]})
    small, n = cascade.to_retry(small, 0, cfg)
    assert int(n) == 1 and small.status[0] == RETRY
    two = entries(cfg, [{}, {}], cascade={"fail": [False, False], "tier": [0, 0]})  # 2 waiting
    one = entries(cfg, [{}], cascade={"fail": [False], "tier": [0]})  # 1 waiting
    out = cascade.fall_back(_stack(small, two, one), 0, 3.2, _cost(check_latency_s=0.5), cfg)
    assert out.status[0, 0] == EMPTY and out.req[0, 0] == -1
    assert out.status[2, 1] == INFLIGHT and out.req[2, 1] == 5
    assert out.cascade.tier[2, 1] == TIER_RETRIED
    # ready at max(send 3.2 s, finish 3 s + check 0.5 s); a new attempt: nothing computed
    assert float(out.ready_at[2, 1]) == 3.5
    assert (out.computed[2, 1], out.generated[2, 1], out.end_state[2, 1]) == (0, 0, -1)
    assert np.isnan(float(out.first_token[2, 1])) and out.n_preempt[2, 1] == 1  # accumulates
    landed = transfer.land(jax.tree.map(lambda x: x[2], out), 3.5)
    assert landed.status[1] == WAITING  # joins the queue, to prefill again
