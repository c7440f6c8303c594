"""Finished requests leave the active set as records in a small outbox the host drains.

Per-request results never live in trace-length arrays inside the loop (a batched scatter into
them copies the whole array every iteration); the host assembles them once, after the loop.
"""

from __future__ import annotations

import jax.numpy as jnp

from servetune import ops
from servetune.types import DONE, EMPTY, Entries, Outbox


def empty_outbox(capacity: int, like) -> Outbox:
    """An empty outbox of `capacity` records; `like` is any traced scalar (keeps carries sharded)."""
    zi = jnp.zeros((capacity,), jnp.int32) + jnp.zeros_like(like, jnp.int32)
    zf = jnp.full((capacity,), jnp.nan) + jnp.zeros_like(like, jnp.float64)
    return Outbox(req=zi - 1, end_state=zi - 1, first_token=zf, finish=zf, generated=zi,
                  n_preempt=zi, tokens_computed=zi, count=jnp.zeros_like(like, jnp.int32))


def drain(e: Entries, box: Outbox):
    """Move DONE entries into the outbox while it has room; their entries become EMPTY."""
    cap = box.req.shape[0]
    finished = e.status == DONE
    pos = box.count + ops.cumsum(finished, dtype=jnp.int32) - 1
    put = finished & (pos < cap)
    where = jnp.where(put, pos, cap)  # out of range -> dropped by the scatter

    def write(dst, src):
        return dst.at[where].set(src, mode="drop")

    box = Outbox(
        req=write(box.req, e.req),
        end_state=write(box.end_state, e.end_state),
        first_token=write(box.first_token, e.first_token),
        finish=write(box.finish, e.finish),
        generated=write(box.generated, e.generated),
        n_preempt=write(box.n_preempt, e.n_preempt),
        tokens_computed=write(box.tokens_computed, e.tokens_computed),
        count=box.count + jnp.sum(put, dtype=jnp.int32),
    )
    e = e.replace(status=jnp.where(put, EMPTY, e.status), req=jnp.where(put, -1, e.req))
    return e, box
