"""Two pools of instances with requests moving from the first to the second: the one interface
behind prefill/decode disaggregation (engine/disagg.py: prefilled requests go to a decode
instance) and the model cascade (engine/cascade.py: failed small answers go to the large pool).

A split puts instances 0..n-1 in the sending pool and the rest in the receiving pool. Over one
step of instance i (engine/step.py) it acts at six points, each a function here that does
nothing when no split is configured (a static switch: the compiled program is unchanged):

- `hand_on`: before i iterates, i's requests that wait to move go to the receiving pool
  (engine/transfer.py), arriving INFLIGHT with a landing time.
- `land`: requests in transit to i whose landing time has come join i's entries.
- `leave`: after i's iteration, requests that stop being served on i wait to move (a prefilled
  request; a failed small answer, which then did not complete).
- `horizon`: the earliest time a sending instance can move work to another instance.
- `leap_limit`: a leap (a run of decode iterations in closed form, engine/leap.py) on a
  receiving instance stops before that horizon, and on any instance before a landing.
- `next_landing`: an idle instance wakes for the landing of a request in transit to it.

At most one split is on (the config reader refuses both together). An autoscaler that
re-queues requests (engine/requeue.py: a scale-down at once, a spot preemption) moves them
between replicas with no split: `land`, `next_landing` and `leap_limit` then act on its
requests in transit as on a split's (`moves_requests`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax.numpy as jnp

from servetune.core.types import HANDOFF, INFLIGHT, RETRY, EngineConfig, Entries
from servetune.engine import cascade, disagg, requeue, transfer


class PoolSplit(NamedTuple):
    """How one mechanism moves requests between its two pools (static, not traced)."""

    senders: Callable[[EngineConfig], int]  # instances 0..n-1 send
    outgoing: int  # the status of a request waiting on its sender to move (HANDOFF, RETRY)
    hand_on: Callable  # (entries [I, A], i, t, cost, cfg) -> entries [I, A]
    land: Callable  # (e [A], t) -> e
    leave: Callable  # (e [A], i, cfg) -> (e, completions withdrawn [] int32)
    horizon: Callable  # (entries [I, A], clock [I], cost, cfg) -> [] seconds
    hold_after_leave: bool  # no leap after an iteration that produced an outgoing request
    receiver_reserves_kv: bool  # a request in transit holds KV it frees later (stall excused)


def _handoff_leave(e: Entries, i, cfg: EngineConfig):
    """disagg.to_handoff with the (interface's) count of withdrawn completions: none."""
    return disagg.to_handoff(e, i, cfg), jnp.zeros((), jnp.int32)


DISAGGREGATION = PoolSplit(
    senders=lambda cfg: cfg.prefill_instances,
    outgoing=HANDOFF,
    hand_on=disagg.hand_off,
    land=disagg.land,
    leave=_handoff_leave,
    horizon=lambda entries, clock, cost, cfg: disagg.handoff_horizon(entries, clock, cfg),
    hold_after_leave=False,
    receiver_reserves_kv=True,
)

CASCADE = PoolSplit(
    senders=lambda cfg: cfg.cascade_small_instances,
    outgoing=RETRY,
    hand_on=cascade.fall_back,
    land=transfer.land,
    leave=cascade.to_retry,
    horizon=cascade.retry_horizon,
    hold_after_leave=True,
    receiver_reserves_kv=False,
)


def split_of(cfg: EngineConfig) -> PoolSplit | None:
    """The pool split `cfg` configures (static): disaggregation, a cascade, or None."""
    if cfg.prefill_instances > 0:
        return DISAGGREGATION
    if cfg.cascade_small_instances > 0:
        return CASCADE
    return None


def moves_requests(cfg: EngineConfig) -> bool:
    """Whether requests can be in transit between instances (INFLIGHT): a split, or an
    autoscaler that re-queues (engine/requeue.py). Static."""
    return split_of(cfg) is not None or requeue.enabled(cfg)


def is_sender(i, cfg: EngineConfig):
    """Whether instance i (traced or static) is in the sending pool (False without a split)."""
    split = split_of(cfg)
    return False if split is None else i < split.senders(cfg)


def hand_on(entries: Entries, i, t, cost, cfg: EngineConfig) -> Entries:
    """Entries [I, A] after instance i (its clock t, seconds) moved its outgoing requests to
    the receiving pool. `cost`: CostParams with leaves [] or [I]."""
    split = split_of(cfg)
    return entries if split is None else split.hand_on(entries, i, t, cost, cfg)


def land(e: Entries, t, cfg: EngineConfig) -> Entries:
    """Instance entries [A] with the requests in transit whose landing time is at most t
    (seconds) taken in."""
    split = split_of(cfg)
    if split is None:
        return transfer.land(e, t) if requeue.enabled(cfg) else e
    return split.land(e, t)


def leave(e: Entries, i, cfg: EngineConfig):
    """(entries [A], completions withdrawn []): instance i's requests that stop being served
    there marked outgoing; the count is of those that had completed (a failed small answer is
    not delivered)."""
    split = split_of(cfg)
    if split is None:
        return e, jnp.zeros((), jnp.int32)
    return split.leave(e, i, cfg)


def horizon(entries: Entries, clock, cost, cfg: EngineConfig):
    """[] the earliest time (seconds) a sending instance can move a request to another
    instance; inf when none can (or there is no split). `entries` [I, A], `clock` [I]."""
    split = split_of(cfg)
    return jnp.inf if split is None else split.horizon(entries, clock, cost, cfg)


def next_landing(e: Entries, cfg: EngineConfig):
    """[] the earliest landing time (seconds) of a request in transit to this instance; inf
    when none (or there is no split)."""
    if not moves_requests(cfg):
        return jnp.inf
    return jnp.min(jnp.where(e.status == INFLIGHT, e.ready_at, jnp.inf))


def leap_limit(limit, e: Entries, i, t_next, remote, cfg: EngineConfig):
    """[] `limit` (seconds) for a leap of instance i starting at t_next,
    lowered to the next landing; to t_next where this iteration produced an outgoing request
    that must be sent first (the cascade); on a receiving instance, to `remote` (`horizon`)."""
    split = split_of(cfg)
    if split is None:  # re-queued requests (engine/requeue.py) land as a split's do
        return jnp.minimum(limit, next_landing(e, cfg)) if requeue.enabled(cfg) else limit
    limit = jnp.minimum(limit, next_landing(e, cfg))
    if split.hold_after_leave:
        limit = jnp.where(jnp.any(e.status == split.outgoing), t_next, limit)
    return jnp.where(is_sender(i, cfg), limit, jnp.minimum(limit, remote))


def excuses_stall(e: Entries, cfg: EngineConfig):
    """[] whether an idle instance with waiting requests is waiting for KV that a request in
    transit holds (disaggregation reserves a decode instance's blocks at the hand-off)."""
    split = split_of(cfg)
    if split is None or not split.receiver_reserves_kv:
        return jnp.asarray(False)
    return jnp.any((e.status == split.outgoing) | (e.status == INFLIGHT))
