"""Replica routing: arrivals are assigned to one of several instances as they arrive.

Instances advance causally. The simulation always steps the instance with the earliest clock
t; before it does, every request that arrived by t is routed. So a request routed to an
instance that is mid-iteration waits for that instance's next iteration boundary (at or after
its arrival): no instance acts on a request before it was sent.

The router sees each instance as it was at the request's arrival time a: the requests in it
(waiting or running) and the KV blocks it holds. An instance whose clock is past a is
mid-iteration at a: the requests that iteration completes, and the blocks it frees, are still
there at a (with the leap, the whole skipped run counts as one iteration).

Routers (`engine.routing`):
  round_robin  request k goes to instance k mod I (in listing order);
  jsq          join the shortest queue: fewest requests in the instance;
  least_kv     lowest fraction of KV blocks in use;
  p2c          power of two choices: two instances drawn at random (a hash of the request id,
               so the same for every policy), the one with fewer requests;
  score        lowest policy.route_w_queue x requests + route_w_kv x KV fraction +
               route_w_work x predicted work (ktokens: remaining prompt + predicted output).
With a model cascade (engine/cascade.py) a request's candidates are the instances of the pool
its predicted difficulty picks (policy.cascade_threshold); the router chooses among them.
With an autoscaler (engine/autoscale.py) only the replicas serving at a request's arrival are
candidates (not off, cold-starting or draining); where none was (spot preemptions left only cold
ones), those serving by the routing time t. Only instances with a free entry are
candidates (if none has one, the arrivals wait and are counted as queue-window overflow).
Ties go to the faster instance (byte rate, then FLOP rate, then KV capacity), then to the
earlier listed; so, except for round_robin and p2c (defined by listing positions), results do
not depend on the order the instances are listed in.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from servetune.core import ops
from servetune.core.types import EMPTY, RUNNING, WAITING, EngineConfig, Params, SimState, Workload
from servetune.engine import autoscale, cascade, speculation, spot
from servetune.engine.arrivals import fill
from servetune.engine.kv import blocks_for

ROUTERS = ("round_robin", "jsq", "least_kv", "p2c", "score")


def instance_cost(cost, i):
    """The cost params of instance i: leaves with an instance axis [I] are indexed."""
    return jax.tree.map(lambda x: x[i] if jnp.ndim(x) == 1 else x, cost)


def _loads(state: SimState, cfg: EngineConfig):
    """Per instance [I]: requests in it, KV blocks held, predicted work (tokens), free entries."""
    e = state.entries
    live = (e.status == WAITING) | (e.status == RUNNING)
    work = jnp.where(
        live,
        jnp.maximum(e.prompt - e.computed, 0) + jnp.maximum(e.predicted - e.generated, 0.0),
        0.0,
    )
    return (
        jnp.sum(live, axis=1, dtype=jnp.int32),
        jnp.sum(e.blocks, axis=1, dtype=jnp.int32),
        jnp.sum(work, axis=1),
        jnp.sum(e.status == EMPTY, axis=1, dtype=jnp.int32),
    )


def _tie_rank(cost, n: int):
    """[I] rank of each instance for tie-breaking: faster first, then listing order."""
    per = lambda x: jnp.broadcast_to(x, (n,)).astype(jnp.float64)
    order = jnp.lexsort(
        (jnp.arange(n), -per(cost.kv_blocks), -per(cost.flops_rate), -per(cost.byte_rate))
    )
    return jnp.zeros((n,), jnp.int32).at[order].set(jnp.arange(n, dtype=jnp.int32))


def _router_value(cfg: EngineConfig, req, queue, kv, kv_total, work, pol, salt):
    """[I] each instance's value for request `req` under engine.routing (lowest wins, ties by
    listing order): round robin's turn, the queue length (jsq), the KV fraction in use
    (least_kv: blocks `kv` of `kv_total`), the queue of two instances drawn at random (p2c;
    the others inf), or the policy's score (route_w_queue x requests + route_w_kv x KV
    fraction + route_w_work x ktokens of predicted `work`)."""
    n_inst = cfg.n_instances
    if cfg.routing == "round_robin":
        return jnp.mod(jnp.arange(n_inst) - req, n_inst).astype(jnp.float64)
    if cfg.routing == "jsq":
        return queue.astype(jnp.float64)
    if cfg.routing == "least_kv":
        return kv / kv_total
    if cfg.routing == "p2c":
        u1 = speculation.uniform(req, 0, salt)
        u2 = speculation.uniform(req, 1, salt)
        c1 = jnp.floor(u1 * n_inst).astype(jnp.int32)
        c2 = jnp.mod(c1 + 1 + jnp.floor(u2 * (n_inst - 1)).astype(jnp.int32), n_inst)
        pair = (jnp.arange(n_inst) == c1) | (jnp.arange(n_inst) == c2)
        return jnp.where(pair, queue.astype(jnp.float64), jnp.inf)
    return (
        pol.route_w_queue * queue
        + pol.route_w_kv * kv / kv_total
        + pol.route_w_work * work / 1000.0
    )


def route(state: SimState, t, wl: Workload, params: Params, cfg: EngineConfig, search_window=None):
    """Route every request that arrived by t (at most engine.route_window per call) and put it
    into its instance's entries. Returns (entries [I, A], next_req, arrived requests left
    unrouted, requests arrived by t, requests rejected on arrival). Most steps have no arrival
    to route: they skip the routing's [I, A] reads and writes (one scenario; under vmap both
    sides run)."""
    n_arrived = jnp.minimum(
        ops.count_at_most(wl.arrival, t, state.next_req, search_window), wl.n
    ).astype(jnp.int32)

    def nothing(state):
        zero = jnp.zeros_like(state.next_req)
        return state.entries, state.next_req, zero, zero

    entries, next_req, left, rejected = jax.lax.cond(
        n_arrived > state.next_req,
        lambda state: _route_arrived(state, t, n_arrived, wl, params, cfg),
        nothing,
        state,
    )
    return entries, next_req, left, n_arrived, rejected


def _route_arrived(state: SimState, t, n_arrived, wl: Workload, params: Params, cfg: EngineConfig):
    """`route` where requests up to n_arrived have arrived by t: (entries [I, A], next_req,
    arrived requests left unrouted, requests rejected on arrival)."""
    n_inst, window = cfg.n_instances, cfg.route_window
    n = wl.arrival.shape[0]
    pending = jnp.minimum(n_arrived - state.next_req, window)
    start = jnp.minimum(state.next_req, max(n - window, 0))
    offset = state.next_req - start
    w = min(window, n)
    win = lambda x: jax.lax.dynamic_slice(x, (start,), (w,))
    arrival, prompt, predicted = win(wl.arrival), win(wl.prompt), win(wl.predicted)
    if cfg.cascade_small_instances > 0:  # each request's pool, by its predicted difficulty
        small = cascade.to_small(win(wl.cascade_pred), params.policy.cascade_threshold)

    queue, blocks, work, room = _loads(state, cfg)
    if cfg.prefill_instances > 0:  # disaggregated: arrivals go to prefill instances only
        room = jnp.where(jnp.arange(n_inst) < cfg.prefill_instances, room, 0)
    cost, pol = params.cost, params.policy
    kv_total = jnp.broadcast_to(cost.kv_blocks, (n_inst,)).astype(jnp.float64)
    rank = _tie_rank(cost, n_inst)

    def choose(k, add_q, add_blocks, add_work, room):
        req = state.next_req + k
        a = arrival[offset + k]
        mid = state.clock > a  # mid-iteration at a: what it completes at its end is still in
        q = queue + jnp.where(mid, state.mid_ended, 0) + add_q
        kv = jnp.where(mid, jnp.maximum(state.mid_blocks, blocks), blocks) + add_blocks
        value = _router_value(cfg, req, q, kv, kv_total, work + add_work, pol, wl.salt)
        ok = room > 0
        if cfg.autoscale:  # only replicas serving at its arrival (engine/autoscale.py)
            assert state.fleet is not None
            serving = autoscale.serving_at(state.fleet, a)
            if spot.enabled(cfg):  # none may serve (all preempted, cold): it waited at the
                # gateway for the first to be ready, by now
                later = autoscale.serving_at(state.fleet, t)
                serving = jnp.where(jnp.any(serving), serving, later)
            ok = ok & serving
        if cfg.cascade_small_instances > 0:
            ok = ok & cascade.pool_mask(small[offset + k], cfg)
        value = jnp.where(ok, value, jnp.inf)
        pick = jnp.lexsort((rank, value))[0].astype(jnp.int32)
        return pick, jnp.isfinite(value[pick])

    def cond(c):
        k, *_, go = c
        return (k < pending) & go

    def body(c):
        k, add_q, add_blocks, add_work, room, dest, _ = c
        pick, ok = choose(k, add_q, add_blocks, add_work, room)
        j = offset + k
        one = (jnp.arange(n_inst) == pick) & ok
        # count the blocks its prompt will take, so a burst does not herd to one instance
        return (
            k + ok.astype(k.dtype),
            add_q + one,
            add_blocks + jnp.where(one, blocks_for(prompt[j], cfg), 0),
            add_work + jnp.where(one, prompt[j] + predicted[j], 0.0),
            room - one,
            dest.at[j].set(jnp.where(ok, pick, -1)),
            ok,
        )

    zi = jnp.zeros((n_inst,), jnp.int32)
    carry = (
        jnp.zeros_like(state.next_req),
        zi,
        zi,
        jnp.zeros((n_inst,)),
        room,
        jnp.full((w,), -1, jnp.int32),
        jnp.asarray(True),
    )
    routed, *_, dest, _ = jax.lax.while_loop(cond, body, carry)

    def insert(e, j, cost_j):
        sel = dest == j  # [W] window requests routed here, in trace order
        empty = e.status == EMPTY
        slot_rank = ops.cumsum(empty, dtype=jnp.int32) - 1
        n_sel = jnp.sum(sel, dtype=jnp.int32)
        take = empty & (slot_rank < n_sel)
        csel = ops.cumsum(sel, dtype=jnp.int32)
        pos = jnp.sum(csel[None, :] <= slot_rank[:, None], axis=1, dtype=jnp.int32)  # [A]
        local = jnp.clip(pos, 0, w - 1)
        read = lambda x: win(x)[local]
        extra = (
            cascade.arrival_fields(e, take, read, wl, j, cfg)
            if cfg.cascade_small_instances > 0
            else None
        )
        e, n_rej = fill(
            e, t, take, start + local, read, wl, params.replace(cost=cost_j), cfg, extra
        )
        return e, n_rej

    costs = jax.tree.map(lambda x: jnp.broadcast_to(x, (n_inst,)), cost)
    entries, rejected = jax.vmap(insert)(state.entries, jnp.arange(n_inst), costs)
    left = n_arrived - state.next_req - routed
    return entries, state.next_req + routed, left, jnp.sum(rejected, dtype=jnp.int32)
