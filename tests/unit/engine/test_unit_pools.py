"""engine/pools.py, the one interface behind disaggregation and the cascade, on hand-built
entries: which split a config selects, what each of its points does, and that without a split
every point leaves its input as it was."""

import jax
import jax.numpy as jnp
from toy import config, entries, params, running

from servetune.core.types import COMPLETED, DONE, HANDOFF, INFLIGHT, RETRY, TIER_SMALL
from servetune.engine import pools

INF = float("inf")


def _in_transit(cfg, ready_at):
    return entries(cfg, [running(8, 8, generated=1, status=INFLIGHT, ready_at=ready_at)])


def test_the_config_selects_the_split_and_its_sending_pool():
    assert pools.split_of(config(n_instances=2)) is None
    disagg = config(n_instances=3, prefill_instances=1)
    cascade = config(n_instances=3, cascade_small_instances=2)
    assert pools.split_of(disagg) is pools.DISAGGREGATION
    assert pools.split_of(cascade) is pools.CASCADE
    assert [bool(pools.is_sender(i, disagg)) for i in range(3)] == [True, False, False]
    assert [bool(pools.is_sender(i, cascade)) for i in range(3)] == [True, True, False]


def test_without_a_split_every_point_leaves_its_input_alone():
    cfg = config(n_instances=2)
    e = _in_transit(cfg, 1.0)
    assert pools.land(e, 5.0, cfg) is e
    left, withdrawn = pools.leave(e, 0, cfg)
    assert left is e and int(withdrawn) == 0
    assert pools.next_landing(e, cfg) == INF
    assert pools.leap_limit(7.0, e, 1, 2.0, 3.0, cfg) == 7.0
    assert not bool(pools.excuses_stall(e, cfg))


def test_a_receiving_instance_leaps_no_further_than_the_next_landing_or_the_remote_horizon():
    cfg = config(n_instances=2, prefill_instances=1)
    e = _in_transit(cfg, 4.0)
    assert float(pools.next_landing(e, cfg)) == 4.0
    assert float(pools.leap_limit(9.0, e, 1, 2.0, 3.0, cfg)) == 3.0  # receiver: the horizon
    assert float(pools.leap_limit(9.0, e, 0, 2.0, 3.0, cfg)) == 4.0  # sender: the landing only
    assert float(pools.leap_limit(9.0, e, 1, 2.0, 6.0, cfg)) == 4.0


def test_disaggregation_hands_a_prefilled_request_on_without_withdrawing_a_completion():
    cfg = config(n_instances=2, prefill_instances=1)
    e = entries(cfg, [running(8, 8, generated=1), running(8, 8, generated=0)])
    left, withdrawn = pools.leave(e, 0, cfg)
    assert [int(s) for s in left.status[:2]] == [HANDOFF, int(e.status[1])]
    assert int(withdrawn) == 0
    assert bool(pools.excuses_stall(left, cfg))  # its KV is on its way: not a stall
    left_on_decode, _ = pools.leave(e, 1, cfg)  # a decode instance hands nothing on
    assert (left_on_decode.status == e.status).all()


def test_a_cascade_withdraws_a_failed_small_answer_and_leaps_nothing_until_it_is_sent():
    cfg = config(n_instances=2, cascade_small_instances=1)
    done = {"status": DONE, "end_state": COMPLETED, "prompt": 8, "output": 4, "generated": 4}
    e = entries(cfg, [done], cascade={"fail": [True], "tier": [TIER_SMALL]})
    left, withdrawn = pools.leave(e, 0, cfg)
    assert left.status[0] == RETRY and int(withdrawn) == 1
    assert float(pools.leap_limit(9.0, left, 0, 2.0, 3.0, cfg)) == 2.0  # held at t_next
    assert not bool(pools.excuses_stall(left, cfg))
    # the large instance hears of it no sooner than its finish plus the check: 3 + 0.5 s
    large = entries(cfg, [], cascade={"fail": [False], "tier": [0]})
    both = jax.tree.map(
        lambda *x: jnp.stack(x), left.replace(finish=left.finish.at[0].set(3.0)), large
    )
    cost = params().cost.replace(check_latency_s=jnp.asarray(0.5))
    assert float(pools.horizon(both, jnp.array([2.0, 2.0]), cost, cfg)) == 3.5
