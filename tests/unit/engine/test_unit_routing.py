"""engine/routing.py on hand-built instances and a small workload: where each router sends the
requests that arrived, counting the ones it routed before them, what an instance that is
mid-iteration still holds, who has room, and how ties are broken."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
from toy import config, entries, params, running

from servetune.config.scenario import stack_workloads
from servetune.core.types import WAITING
from servetune.engine.loop import init_state
from servetune.engine.routing import route
from servetune.workload.traces import RequestTrace


def _workload(rows, cfg):
    """One workload [N] from (arrival_s, prompt, output) rows."""
    a = np.asarray(rows, np.float64)
    trace = RequestTrace("t", a[:, 0], a[:, 1].astype(np.int32), a[:, 2].astype(np.int32))
    wl = stack_workloads([trace], [trace.output.astype(np.float64)], 100.0, cfg)
    return jax.tree.map(lambda x: x[0], wl)


def _state(cfg, wl, p, instances, clock=None, mid_ended=None):
    """A SimState whose instances hold `instances` (rows per instance, toy.entries)."""
    stacked = jax.tree.map(lambda *x: jnp.stack(x), *[entries(cfg, rows) for rows in instances])
    s = init_state(wl, p, cfg).replace(entries=stacked)
    if clock is not None:
        s = s.replace(clock=jnp.asarray(clock, jnp.float64))
    if mid_ended is not None:
        s = s.replace(mid_ended=jnp.asarray(mid_ended, jnp.int32))
    return s


@functools.cache
def _router(cfg):
    return jax.jit(lambda s, t, wl, p: route(s, t, wl, p, cfg))


def _where(cfg, t, wl, p, instances, **state):
    """{request id: instance} after routing at t, and (next_req, left unrouted)."""
    out, nxt, left, _, _ = _router(cfg)(_state(cfg, wl, p, instances, **state), t, wl, p)
    req, status = np.asarray(out.req), np.asarray(out.status)
    seen = {}
    for i, row in enumerate(instances):
        new = (status[i] == WAITING) & (np.arange(req.shape[1]) >= len(row))
        seen.update({int(r): i for r in req[i][new]})
    return seen, int(nxt), int(left)


BUSY = [running(8, 4, req=90 + k) for k in range(2)]  # two running requests, 2 blocks each


def test_jsq_counts_the_requests_it_routed_before_in_the_same_call():
    cfg = config(n_instances=3, routing="jsq")
    wl = _workload([(0.0, 8, 4)] * 3, cfg)
    # queues 2, 0, 1: the first goes to instance 1; then 1 and 2 tie at one request each and the
    # earlier listed takes the second; the third goes to instance 2
    dest, nxt, left = _where(cfg, 0.0, wl, params(), [BUSY, [], BUSY[:1]])
    assert dest == {0: 1, 1: 1, 2: 2} and (nxt, left) == (3, 0)


def test_round_robin_ignores_load():
    cfg = config(n_instances=3, routing="round_robin")
    wl = _workload([(0.0, 8, 4)] * 4, cfg)
    dest, _, _ = _where(cfg, 0.0, wl, params(), [BUSY, [], []])
    assert dest == {0: 0, 1: 1, 2: 2, 3: 0}


def test_least_kv_weighs_the_prompt_blocks_of_earlier_picks():
    cfg = config(n_instances=2, routing="least_kv")
    wl = _workload([(0.0, 40, 4), (0.0, 4, 4)], cfg)
    # instance 0 holds 2 blocks, instance 1 none: the 40-token prompt (10 blocks) goes to 1,
    # and then instance 0 (2 blocks) is the lighter one
    dest, _, _ = _where(cfg, 0.0, wl, params(kv_blocks=100), [BUSY[:1], []])
    assert dest == {0: 1, 1: 0}


def test_an_instance_mid_iteration_still_holds_what_its_iteration_completes():
    cfg = config(n_instances=2, routing="jsq")
    wl = _workload([(1.0, 8, 4)], cfg)
    # instance 0 is empty now but its clock (1.5 s) is past the arrival: at 1.0 s it was still
    # serving the two requests its iteration completed, so instance 1 (one request) wins
    dest, _, _ = _where(cfg, 1.0, wl, params(), [[], BUSY[:1]], clock=[1.5, 0.5], mid_ended=[2, 0])
    assert dest == {0: 1}
    dest, _, _ = _where(
        cfg, 1.0, wl, params(), [[], BUSY[:1]], clock=[0.9, 0.5], mid_ended=[2, 0]
    )  # its iteration ended before the arrival
    assert dest == {0: 0}


def test_only_instances_with_a_free_entry_are_candidates_and_the_rest_wait():
    cfg = config(n_instances=2, routing="jsq")
    wl = _workload([(0.0, 8, 4)] * 3, cfg)
    full = [running(8, 4, req=50 + k) for k in range(cfg.n_entries)]
    almost = [running(8, 4, req=70 + k) for k in range(cfg.n_entries - 1)]
    dest, nxt, left = _where(cfg, 0.0, wl, params(), [full, almost])
    assert dest == {0: 1} and (nxt, left) == (1, 2)  # the others wait outside, in order
    dest, nxt, left = _where(cfg, 0.0, wl, params(), [full, full])
    assert dest == {} and (nxt, left) == (0, 3)


def test_the_score_router_weighs_predicted_work():
    cfg = config(n_instances=2, routing="score")
    wl = _workload([(0.0, 8, 4)], cfg)
    long_job = [{"prompt": 60, "output": 3, "req": 80}]  # 63 tokens of work, one request
    short_jobs = [{"prompt": 4, "output": 2, "req": 81 + k} for k in range(3)]  # 18 tokens
    by_queue = params({"route_w_queue": 1.0, "route_w_work": 0.0})
    by_work = params({"route_w_queue": 0.0, "route_w_work": 1.0})
    assert _where(cfg, 0.0, wl, by_queue, [long_job, short_jobs])[0] == {0: 0}
    assert _where(cfg, 0.0, wl, by_work, [long_job, short_jobs])[0] == {0: 1}


def test_ties_go_to_the_faster_instance_whatever_the_listing_order():
    cfg = config(n_instances=2, routing="jsq")
    wl = _workload([(0.0, 8, 4)], cfg)
    for fast in (0, 1):
        p = params()
        rates = jnp.where(jnp.arange(2) == fast, 2.0, 1.0) * p.cost.byte_rate
        p = p.replace(cost=p.cost.replace(byte_rate=rates))
        assert _where(cfg, 0.0, wl, p, [[], []])[0] == {0: fast}


def test_p2c_draws_two_distinct_candidates_and_takes_the_shorter_queue():
    # with two instances the two candidates are both: the shorter queue, as jsq
    two = config(n_instances=2, routing="p2c")
    wl = _workload([(0.0, 8, 4)] * 3, two)
    assert _where(two, 0.0, wl, params(), [BUSY, []])[0] == {0: 1, 1: 1, 2: 0}
    four = config(n_instances=4, routing="p2c")
    wl = _workload([(0.0, 8, 4)] * 6, four)
    dest, _, _ = _where(four, 0.0, wl, params(), [BUSY, BUSY, [], []])
    assert set(dest) == set(range(6))
    # the draw is a hash of the request id: the same again, and it spreads the requests
    assert _where(four, 0.0, wl, params(), [BUSY, BUSY, [], []])[0] == dest
    assert len(set(dest.values())) > 1
