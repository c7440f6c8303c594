"""Moving requests between instances: the one loop behind disaggregation's hand-off
(engine/disagg.py) and the cascade's fall-back (engine/cascade.py).

One at a time, in entry order, each of instance i's requests that wait to move goes to the
destination instance its mechanism values lowest (the first listed on ties), into that
instance's first EMPTY entry, as INFLIGHT with the fields its mechanism sets on arrival; its
entry on i is freed (EMPTY, no request, no blocks). The loop stops at the first request that
no destination takes: it and the ones after it wait on i for i's next iteration boundary.
A moved request joins its destination's queue at the destination's first iteration boundary
at or after its ready_at (`land`; disaggregation lands it running instead: engine/disagg.py).
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

from servetune.core.types import EMPTY, INFLIGHT, RUNNING, WAITING, Entries


def _set(entries: Entries, name: str, at, value) -> Entries:
    """entries with field `name` ("field" or "sub.field") set to value at index `at`."""
    sub, _, leaf = name.rpartition(".")
    holder = getattr(entries, sub) if sub else entries
    holder = holder.replace(**{leaf: getattr(holder, leaf).at[at].set(value)})
    return entries.replace(**{sub: holder}) if sub else holder


def fresh_attempt(ready_at) -> dict:
    """The fields of a request that starts over on another instance (a cascade's retry, a
    re-queued request), for `move_out`'s arrival_fields: nothing computed, nothing emitted,
    no KV, landing at `ready_at` (seconds). Its arrival time stays the original one."""
    return {
        "ready_at": ready_at,
        "computed": 0,
        "generated": 0,
        "blocks": 0,
        "preempted": False,
        "first_token": jnp.nan,
        "last_emit": jnp.nan,
        "finish": jnp.nan,
        "end_state": -1,
        "kv_ratio": 1.0,
    }


def fewest_requests(entries: Entries, ok):
    """[I] f64 each instance's value as a destination: its requests (waiting, running or in
    transit to it) where `ok` [I] bool holds and it has a free entry, else inf."""
    s = entries.status
    load = jnp.sum((s == WAITING) | (s == RUNNING) | (s == INFLIGHT), axis=1)
    room = jnp.any(s == EMPTY, axis=1)
    return jnp.where(ok & room, load.astype(jnp.float64), jnp.inf)


def move_out(
    entries: Entries, i, pending: Callable, destination: Callable, arrival_fields: Callable
) -> Entries:
    """Entries [I, A] after moving instance i's pending requests, as the module doc says.

    pending(entries) -> [A] bool: i's entries waiting to move.
    destination(entries, k) -> [I] f64: how much each instance is valued as the destination of
      i's entry k (lowest wins; inf where it cannot take it).
    arrival_fields(entries, k) -> {field: value}: what the moved entry's fields become on the
      destination (besides status INFLIGHT), e.g. its ready_at in seconds; a field of a
      mechanism's sub-state as "sub.field" (e.g. "cascade.tier")."""

    def cond(c):
        entries, go = c
        return go & jnp.any(pending(entries))

    def body(c):
        entries, _ = c
        k = jnp.argmax(pending(entries))  # the first waiting request, in entry order
        value = destination(entries, k)
        j = jnp.argmin(value)
        go = jnp.isfinite(value[j])
        slot = jnp.argmax(entries.status[j] == EMPTY)

        def move(entries):
            arriving = {"status": INFLIGHT, **arrival_fields(entries, k)}
            moved = jax.tree.map(lambda x: x.at[j, slot].set(x[i, k]), entries)
            for name, v in arriving.items():
                moved = _set(moved, name, (j, slot), v)
            return moved.replace(
                status=moved.status.at[i, k].set(EMPTY),
                req=moved.req.at[i, k].set(-1),
                blocks=moved.blocks.at[i, k].set(0),
            )

        return jax.lax.cond(go, move, lambda x: x, entries), go

    entries, _ = jax.lax.while_loop(cond, body, (entries, jnp.asarray(True)))
    return entries


def land(e: Entries, t) -> Entries:
    """Instance entries [A] with the requests in transit whose ready_at is at most t (seconds)
    joined the queue: WAITING."""
    return e.replace(
        status=jnp.where((e.status == INFLIGHT) & (e.ready_at <= t), WAITING, e.status)
    )
