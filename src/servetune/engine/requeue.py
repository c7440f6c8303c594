"""Re-queuing: a replica that leaves at once hands its requests to the replicas that serve.

Two things make a replica leave with requests in it (engine/autoscale.py): a scale-down with
`fleet.scale_down: requeue` (no graceful drain: the gateway retries what the replica held),
and a spot preemption (engine/spot.py). Either happens at an autoscaler evaluation at time T
(seconds), when every replica's clock is at or past T; the replica leaves at its own clock,
the end of the iteration it was in at T, so what that iteration finished stays finished.

Each waiting or running request of a leaving replica goes, one at a time in entry order, to
the serving replica with the fewest requests that has a free entry (engine/transfer.py), and
starts over there as a new attempt: nothing computed, nothing emitted, no KV, joining that
replica's queue at its first iteration boundary at or after the leaving replica's clock. Its
arrival time stays the original one: TTFT counts from it, and the tokens the first attempt
streamed count for nothing. A request no replica takes (none has a free entry) stays: on a
scaled-down replica it runs on there (that replica drains it gracefully); on a preempted one
it starts over there once the replacement replica is ready (engine/spot.py). A request still
in transit to a replica that leaves stays with it (it drains it, or starts it once ready).

Nothing here runs unless fleet.scale_down is requeue or some replicas are spot (a static
switch: the compiled program is otherwise unchanged).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from servetune.core.types import INFLIGHT, RUNNING, WAITING, EngineConfig, Entries
from servetune.engine import transfer


def enabled(cfg: EngineConfig) -> bool:
    """Whether an autoscaler can re-queue requests (scale-down at once, or spot replicas)."""
    return cfg.autoscale and (cfg.autoscale_requeue or cfg.autoscale_spot)


def _live(entries: Entries):
    """[I, A] bool: the requests waiting or running in each instance."""
    return (entries.status == WAITING) | (entries.status == RUNNING)


def move_live(entries: Entries, clock, leaving, takes):
    """(entries [I, A], requests moved []) after the waiting and running requests of the
    replicas in `leaving` [I] bool went to the replicas in `takes` [I] bool, as the
    module doc says, each landing at its old replica's clock ([I], seconds)."""

    def waiting_to_move(entries):  # [I] leaving replicas that still hold a live request
        return leaving & jnp.any(_live(entries), axis=1)

    def cond(c):
        entries, go = c
        return go & jnp.any(waiting_to_move(entries))

    def body(c):
        entries, _ = c
        i = jnp.argmax(waiting_to_move(entries))
        before = jnp.sum(_live(entries)[i])
        entries = transfer.move_out(
            entries,
            i,
            lambda en: _live(en)[i],
            lambda en, k: transfer.fewest_requests(en, takes),
            lambda en, k: transfer.fresh_attempt(clock[i]),
        )
        return entries, jnp.sum(_live(entries)[i]) < before  # none moved: no room anywhere

    held = jnp.sum(_live(entries) & leaving[:, None], dtype=jnp.int32)
    entries, _ = jax.lax.while_loop(cond, body, (entries, jnp.asarray(True)))
    return entries, held - jnp.sum(_live(entries) & leaving[:, None], dtype=jnp.int32)


def restart_in_place(entries: Entries, clock, restarting):
    """(entries [I, A], requests restarted []): the waiting and running requests of the
    replicas in `restarting` [I] bool made new attempts in transit to their own replica,
    landing at its clock ([I], seconds), with their KV freed."""
    hit = _live(entries) & restarting[:, None]
    fresh = transfer.fresh_attempt(jnp.broadcast_to(clock[:, None], hit.shape))
    fields = {k: jnp.where(hit, v, getattr(entries, k)) for k, v in fresh.items()}
    status = jnp.where(hit, INFLIGHT, entries.status)
    return entries.replace(status=status, **fields), jnp.sum(hit, dtype=jnp.int32)
