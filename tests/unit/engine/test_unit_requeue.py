"""engine/requeue.py and engine/spot.py on hand-built entries of three replicas: which requests
move where, what they keep and lose, who stays, and which replicas are spot."""

import jax
import jax.numpy as jnp
import numpy as np
from toy import config, entries, running

from servetune.core.types import COMPLETED, DONE, EMPTY, INFLIGHT, RUNNING, WAITING
from servetune.engine import requeue, spot, transfer

CFG = config(n_instances=3, autoscale=True, autoscale_requeue=True)


def _stack(*instances):
    return jax.tree.map(lambda *x: jnp.stack(x), *instances)


def test_a_leaving_replica_hands_its_live_requests_to_the_least_loaded_as_new_attempts():
    done = {"status": DONE, "end_state": COMPLETED, "prompt": 8, "output": 2, "req": 9}
    leaving = entries(
        CFG,
        [
            running(20, 8, generated=3, req=4, first_token=1.0, arrival=0.5),
            {"prompt": 12, "output": 5, "req": 5, "arrival": 0.7},  # waiting
            done,
        ],
    )
    busy = entries(CFG, [running(8, 8, generated=1), running(8, 8, generated=1)])
    light = entries(CFG, [running(8, 8, generated=1)])
    clock = jnp.array([3.25, 3.0, 3.1])
    gone, takes = jnp.array([True, False, False]), jnp.array([False, True, True])
    out, moved = requeue.move_live(_stack(leaving, busy, light), clock, gone, takes)
    assert int(moved) == 2
    # both go to the lighter replica 2 (1 request, then 2, against replica 1's 2: first listed
    # on the tie goes to 1)
    assert out.req[2, 1] == 4 and out.status[2, 1] == INFLIGHT
    assert out.req[1, 2] == 5 and out.status[1, 2] == INFLIGHT
    assert float(out.ready_at[2, 1]) == 3.25 and float(out.ready_at[1, 2]) == 3.25
    # a new attempt: nothing computed or emitted, no KV; the original arrival kept
    assert int(out.generated[2, 1]) == 0 and int(out.computed[2, 1]) == 0
    assert int(out.blocks[2, 1]) == 0 and np.isnan(float(out.first_token[2, 1]))
    assert float(out.arrival[2, 1]) == 0.5
    # the leaving replica keeps only what it finished
    assert list(np.asarray(out.status[0, :3])) == [EMPTY, EMPTY, DONE]
    landed = transfer.land(jax.tree.map(lambda x: x[2], out), 3.25)
    assert landed.status[1] == WAITING


def test_requests_no_replica_can_take_stay_and_a_preempted_replica_restarts_them():
    leaving = entries(CFG, [running(20, 8, generated=3, req=4)])
    full = entries(CFG, [running(8, 8)] * CFG.n_entries)
    clock = jnp.array([2.0, 2.0, jnp.inf])
    gone = jnp.array([True, False, False])
    out, moved = requeue.move_live(
        _stack(leaving, full, full), clock, gone, jnp.array([False, True, False])
    )
    assert int(moved) == 0 and out.status[0, 0] == RUNNING and int(out.generated[0, 0]) == 3
    out, restarted = requeue.restart_in_place(out, clock, gone)
    assert int(restarted) == 1 and out.status[0, 0] == INFLIGHT
    assert int(out.generated[0, 0]) == 0 and int(out.blocks[0, 0]) == 0
    assert float(out.ready_at[0, 0]) == 2.0
    assert (out.status[1] == RUNNING).all()  # the others untouched


def test_spot_replicas_spread_their_share_over_the_listing():
    np.testing.assert_array_equal(spot.is_spot(4, 0.0), [False] * 4)
    np.testing.assert_array_equal(spot.is_spot(4, 1.0), [True] * 4)
    np.testing.assert_array_equal(spot.is_spot(4, 0.5), [False, True, False, True])
    for share in (0.25, 1 / 3, 0.6):  # any first k replicas hold floor(k x share) spot ones
        first_k = np.cumsum(np.asarray(spot.is_spot(12, share)))
        np.testing.assert_array_equal(first_k, np.floor(np.arange(1, 13) * share + 1e-9))
