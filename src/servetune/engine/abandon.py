"""Cancellation and deadlines: requests that end before completing.

A request's client may cancel it (it gave up waiting, or aborts mid-stream), or the server
drops it at its deadline (expired). Either happens at the request's `give_up_at` time; the
engine notices at the first iteration boundary at or after it, before scheduling, and releases
the request's KV blocks and slot at once, so the same iteration can use them. The request ends
at `give_up_at` with the tokens it was delivered so far; the compute it consumed stays in the
cost (busy time) and counts as wasted.
"""

from __future__ import annotations

import jax.numpy as jnp

from servetune.core.types import RUNNING, WAITING, Entries
from servetune.engine.outbox import retire


def live(e: Entries):
    """[A] entries that can still give up: waiting or running."""
    return (e.status == WAITING) | (e.status == RUNNING)


def abandon(e: Entries, t):
    """End every waiting or running entry whose give-up time is at or before t (seconds).

    Returns (entries, number of requests that ended)."""
    gone = live(e) & (e.give_up_at <= t)
    e = retire(
        e.replace(preempted=jnp.where(gone, False, e.preempted)),
        gone,
        e.give_up_state,
        e.give_up_at,
    )
    return e, jnp.sum(gone, dtype=jnp.int32)


def next_give_up(e: Entries):
    """[] earliest give-up time among waiting or running entries (inf when none): the
    leap must stop before the iteration that would notice it."""
    return jnp.min(jnp.where(live(e), e.give_up_at, jnp.inf))
