"""Model cascade (FrugalGPT-style routing with fallback): a small and a large model pool.

With engine.cascade_small_instances = S, instances 0..S-1 serve a small model and S..I-1 a
large one (each pool's cost params come in with an instance axis [I]). The router sends an
arrival to the small pool when its *predicted* difficulty (Workload.cascade_pred, in (0, 1)) is
at most policy.cascade_threshold (a traced gate in relax.py), else to the large pool; within a
pool the configured replica router (engine/routing.py) picks the instance.

Whether a request's small answer fails its quality check is a fixed property of the request
and the seed (Workload.cascade_fail, drawn on the host by servetune.config.cascade from the
quality model), the same for every policy. A small answer that fails is not delivered: when the
small instance completes it, the request becomes RETRY (its blocks are already free). At that
instance's next iteration boundary (the end of the iteration that completed it: the leap
stops at a completion and is not started after an iteration that produced a retry), the
request moves to the large instance with the fewest requests that has a free entry (ties: the
first listed). It arrives INFLIGHT with ready_at = max(send time, small finish +
cost.check_latency_s) and joins that instance's queue as a new WAITING request at the first
iteration boundary at or after ready_at: it prefills its prompt from scratch and generates its
whole output again. Its arrival time stays the original one (TTFT counts from it, and FCFS
ages it from it); its computed tokens and preemptions accumulate over both attempts. If no
large instance has a free entry, it waits on the small instance (holding no KV) and is offered
again at that instance's next boundary. With abandonment on, a retry can give up only once it
has joined the large instance's queue (the engine checks waiting and running requests); it
then ends at its give-up time as usual.

The leap (engine/leap.py) stays exact: on a large instance it stops before the earliest time a
retry could be ready for it (`retry_horizon`), as it stops before the next arrival.

Causality: the move happens when the small instance has the earliest clock (so every large
instance is at or past the send time), and the large instance acts on the request only at a
boundary at or after ready_at. The scenario builder guarantees that a request admissible on
the small pool is admissible on the large pool (each pool holds a max_model_len sequence
above the watermark); if that ever fails, the engine's stall flag reports it.

Nothing here runs when the cascade is off (every call site is behind the static switch).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from servetune.core import relax
from servetune.core.cost import step_time
from servetune.core.types import (
    COMPLETED,
    DONE,
    RETRY,
    RUNNING,
    TIER_LARGE,
    TIER_RETRIED,
    TIER_SMALL,
    WAITING,
    CascadeEntries,
    EngineConfig,
    Entries,
)
from servetune.engine import transfer


def is_small(i, cfg: EngineConfig):
    """Whether instance i (traced or static) serves the small model."""
    return i < cfg.cascade_small_instances


def to_small(pred, threshold):
    """Router decision per request: True where the predicted difficulty `pred` (in (0, 1)) is
    at most `threshold` (policy.cascade_threshold), i.e. the request goes to the small pool."""
    return relax.at_most(pred, threshold)


def pool_mask(small, cfg: EngineConfig):
    """[I] instances a request may be routed to: the small pool where `small` ([] bool), else
    the large pool."""
    idx = jnp.arange(cfg.n_instances)
    return jnp.where(small, idx < cfg.cascade_small_instances, idx >= cfg.cascade_small_instances)


def init_entries(shape, like) -> CascadeEntries:
    """The cascade sub-state of entries of `shape` ([I, A]): no failure, never routed (-1);
    `like` a traced int (keeps carries sharded)."""
    never = jnp.full(shape, -1, jnp.int32) + jnp.zeros_like(like, jnp.int32)
    return CascadeEntries(fail=never > 0, tier=never)


def arrival_fields(e: Entries, take, read, wl, j, cfg: EngineConfig) -> dict:
    """The cascade sub-state (for arrivals.fill's `extra`) of requests routed to instance j,
    where `take` [A] holds: their small-answer check outcome, and their tier (small or
    large)."""
    tier = jnp.where(is_small(j, cfg), TIER_SMALL, TIER_LARGE).astype(jnp.int32)
    c = e.cascade
    assert c is not None  # the mechanism is on (a static switch)
    return {
        "cascade": CascadeEntries(
            fail=jnp.where(take, read(wl.cascade_fail), c.fail), tier=jnp.where(take, tier, c.tier)
        )
    }


def to_retry(e: Entries, i, cfg: EngineConfig):
    """On a small instance, completed requests whose answer fails its check become RETRY
    (not delivered; the large pool will serve them). Returns (entries, how many)."""
    assert e.cascade is not None  # the mechanism is on (a static switch)
    failed = (
        (e.status == DONE)
        & (e.end_state == COMPLETED)
        & e.cascade.fail
        & (e.cascade.tier == TIER_SMALL)
        & is_small(i, cfg)
    )
    e = e.replace(status=jnp.where(failed, RETRY, e.status))
    return e, jnp.sum(failed, dtype=jnp.int32)


def retry_horizon(entries: Entries, clock, cost, cfg: EngineConfig):
    """[] a lower bound (seconds) on when any retry not yet on a large instance can be ready
    there: for a pending retry on small instance i, max(clock_i, finish + check); for a request
    on i whose small answer will fail, clock_i + (output tokens left) x (the shortest iteration
    of i) + check (each token needs one iteration of i). inf when there is none. `entries`
    [I, A], `clock` [I], `cost`: CostParams with leaves [] or [I]."""
    s_n = cfg.cascade_small_instances
    small = jax.tree.map(lambda x: x[:s_n], entries)
    clk = clock[:s_n, None]
    costs = jax.tree.map(lambda x: jnp.broadcast_to(x, (cfg.n_instances,))[:s_n], cost)
    shortest = jax.vmap(
        lambda c: jnp.minimum(
            step_time(c, cfg.cost_form, 1, 0, 0, 0), step_time(c, cfg.cost_form, 0, 1, 0, 0)
        )
    )(costs)
    check_s = costs.check_latency_s[:, None]
    live = (small.status == WAITING) | (small.status == RUNNING)
    will_fail = live & small.cascade.fail & (small.cascade.tier == TIER_SMALL)
    left = jnp.maximum(small.output - small.generated, 1)
    soonest = jnp.where(will_fail, clk + left * shortest[:, None] + check_s, jnp.inf)
    pending = jnp.where(small.status == RETRY, jnp.maximum(clk, small.finish + check_s), jnp.inf)
    return jnp.minimum(jnp.min(soonest), jnp.min(pending))


def fall_back(entries: Entries, i, t, cost, cfg: EngineConfig):
    """Move instance i's RETRY requests (i a small instance, its clock t in seconds) to large
    instances, as many as have a free entry (engine/transfer.py). `cost`: CostParams with
    leaves [] or [I] (the small instance's check_latency_s applies). Returns entries [I, A]."""
    n_inst = cfg.n_instances
    large = jnp.arange(n_inst) >= cfg.cascade_small_instances
    check_s = jnp.broadcast_to(cost.check_latency_s, (n_inst,))[i]

    def pending(entries):
        return (entries.status[i] == RETRY) & is_small(i, cfg)

    def destination(entries, k):  # the large instance with the fewest requests, with room
        return transfer.fewest_requests(entries, large)

    def arrival_fields(entries, k):  # a new attempt: nothing computed, nothing emitted
        return {
            **transfer.fresh_attempt(jnp.maximum(t, entries.finish[i, k] + check_s)),
            "cascade.tier": TIER_RETRIED,
        }

    return transfer.move_out(entries, i, pending, destination, arrival_fields)
