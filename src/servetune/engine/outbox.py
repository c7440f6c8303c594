"""Finished requests leave the active set as records in a small outbox the host drains.

Per-request results never live in trace-length arrays inside the loop (a batched scatter into
them copies the whole array every iteration); the host assembles them once, after the loop.
Each iteration moves at most `engine.drain_per_step` finished entries, as one contiguous
slice written at the outbox's fill mark (a dynamic-update-slice, not a scatter over [A]);
the rest stay finished in their entries and leave in the following iterations.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from servetune import ops
from servetune.types import DONE, EMPTY, Entries, Outbox

RECORD_FIELDS = ("req", "end_state", "first_token", "finish", "generated", "n_preempt",
                 "tokens_computed", "kv_ratio")


def record_fields(box: Outbox) -> tuple[str, ...]:
    """The fields each record carries: RECORD_FIELDS, plus the cascade tier and the relaxed
    time shift when the outbox has them (static properties of the pytree)."""
    return (RECORD_FIELDS + (("tier",) if box.tier is not None else ())
            + (("shift",) if box.shift is not None else ()))


def empty_outbox(capacity: int, like, tier: bool = False, shift: bool = False) -> Outbox:
    """An empty outbox of `capacity` records; `like` is any traced scalar (keeps carries
    sharded); `tier`: records also carry the cascade tier (model cascade on); `shift`: the
    time shift of a relaxed engine (engine.relax st or soft)."""
    zi = jnp.zeros((capacity,), jnp.int32) + jnp.zeros_like(like, jnp.int32)
    zf = jnp.full((capacity,), jnp.nan) + jnp.zeros_like(like, jnp.float64)
    return Outbox(req=zi - 1, end_state=zi - 1, first_token=zf, finish=zf, generated=zi,
                  n_preempt=zi, tokens_computed=zi, kv_ratio=zf,
                  count=jnp.zeros_like(like, jnp.int32), tier=zi - 1 if tier else None,
                  shift=zf if shift else None)


def drain(e: Entries, box: Outbox, per_step: int):
    """Move up to `per_step` DONE entries (the first in entry order) into the outbox; their
    entries become EMPTY. The caller guarantees room: box.count + per_step <= capacity."""
    finished = e.status == DONE
    rank = ops.cumsum(finished, dtype=jnp.int32)  # [A] finished entries up to and including i
    # position of the k-th finished entry: how many entries have fewer than k+1 finished before
    k = jnp.arange(per_step, dtype=jnp.int32)
    pos = jnp.sum(rank[None, :] <= k[:, None], axis=1, dtype=jnp.int32)  # [F]; A when none
    n_moved = jnp.minimum(rank[-1], per_step)
    src = jnp.minimum(pos, e.req.shape[0] - 1)
    # records past n_moved are junk beyond the fill mark: the next write starts over them
    updates = {f: jax.lax.dynamic_update_slice(getattr(box, f), getattr(e, f)[src], (box.count,))
               for f in record_fields(box)}
    box = Outbox(**updates, count=box.count + n_moved)
    moved = finished & (rank <= per_step)
    e = e.replace(status=jnp.where(moved, EMPTY, e.status), req=jnp.where(moved, -1, e.req))
    return e, box
