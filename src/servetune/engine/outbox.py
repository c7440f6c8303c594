"""Finished requests leave the active set as records in a small outbox the host drains.

Per-request results never live in trace-length arrays inside the loop (a batched scatter into
them copies the whole array every iteration); the host assembles them once, after the loop.
Each iteration moves at most `engine.drain_per_step` finished entries, as one contiguous
slice written at the outbox's fill mark (a dynamic-update-slice, not a scatter over [A]);
the rest stay finished in their entries and leave in the following iterations.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from servetune.core import ops
from servetune.core.types import (
    DONE,
    EMPTY,
    OUTSTANDING,
    SWAP_PARTNERS,
    EngineConfig,
    Entries,
    Outbox,
)


@dataclasses.dataclass(frozen=True)
class RecordField:
    """One field of a finished request's record: copied from its entry into the outbox, then
    into the result arrays the host assembles (run/driver.ScenarioResult, and the pathwise
    gradient's tapes: tuning/estimators/pathwise_gradient.py)."""

    name: str  # the Outbox field, and the field of the same name in the entries (or in their
    #            sub-state `only`)
    dtype: type
    unset: float  # the value of a request without a record (still waiting or running, or
    #               never taken in); also what an empty outbox holds
    only: str | None = None  # the mechanism whose records carry it, named as its Entries
    #                          sub-state ("cascade", "relaxed", "swap"); None: every record
    width: int | None = None  # values per record ([R, width]); None: one ([R])
    result: bool = True  # a ScenarioResult field too (the host's per-request results)


RECORDS = (
    RecordField("req", jnp.int32, -1, result=False),
    RecordField("end_state", jnp.int32, OUTSTANDING),
    RecordField("first_token", jnp.float64, float("nan")),  # seconds
    RecordField("finish", jnp.float64, float("nan")),  # seconds
    RecordField("generated", jnp.int32, 0),  # output tokens delivered
    RecordField("n_preempt", jnp.int32, 0),
    RecordField("tokens_computed", jnp.int64, 0),  # recomputation included
    RecordField("kv_ratio", jnp.float64, 1.0),  # KV compression it ended with (1 = none)
    RecordField("scheduled_at", jnp.float64, float("nan")),  # seconds, first admission
    RecordField("reject_reason", jnp.int32, -1),  # types.REJECT_* (-1: not rejected)
    RecordField("tier", jnp.int32, -1, only="cascade"),  # cascade tier (-1: never routed)
    # the relaxed engines' tapes, read by tuning/estimators/pathwise_gradient.py only
    RecordField("shift", jnp.float64, float("nan"), only="relaxed", result=False),  # seconds
    RecordField("admitted_at", jnp.float64, float("nan"), only="swap", result=False),
    RecordField("swap_req", jnp.int32, -1, only="swap", width=SWAP_PARTNERS, result=False),
    RecordField("swap_p", jnp.float64, 0.0, only="swap", width=SWAP_PARTNERS, result=False),
    RecordField("preempted_at", jnp.float64, float("nan"), only="swap", result=False),
    RecordField("victim_of", jnp.int32, -1, only="swap", result=False),
    RecordField("victim_p", jnp.float64, 0.0, only="swap", result=False),
)
RECORD = {f.name: f for f in RECORDS}


def record_fields(box: Outbox) -> tuple[str, ...]:
    """The fields each record of `box` carries: every RECORDS field the outbox holds (its
    mechanism's fields are None when the mechanism is off: static properties of the pytree)."""
    return tuple(f.name for f in RECORDS if getattr(box, f.name) is not None)


def unset_records(n: int, names, like) -> dict:
    """{name: [n] or [n, width] array at the field's `unset` value}: the records of n requests
    of which none has ended; `like` is any traced scalar (keeps carries sharded)."""

    def full(f):
        shape = (n,) if f.width is None else (n, f.width)
        return jnp.full(shape, f.unset, f.dtype) + jnp.zeros_like(like, f.dtype)

    return {name: full(RECORD[name]) for name in names}


def empty_outbox(
    capacity: int, like, cascade: bool = False, relaxed: bool = False, swap: bool = False
) -> Outbox:
    """An empty outbox of `capacity` records, each field at its `unset` value; `like` is any
    traced scalar (keeps carries sharded); `cascade`: records also carry the cascade tier
    (model cascade on); `relaxed`: the time shift of a relaxed engine (engine.relax st or
    soft); `swap`: the latest admission and preemption of a relaxed order (relax_order)."""
    options = {"cascade": cascade, "relaxed": relaxed, "swap": swap}
    names = [f.name for f in RECORDS if f.only is None or options[f.only]]
    return Outbox(**unset_records(capacity, names, like), count=jnp.zeros_like(like, jnp.int32))


def retire(e: Entries, which, end_state, t) -> Entries:
    """Entries with the requests in `which` [A] ended at time t (seconds; [] or [A]) in
    `end_state` (an end-state constant or [A]): DONE, holding no KV blocks, until `drain`
    moves them to the outbox. Completion, the leap's completions and abandonment end a
    request here."""
    return e.replace(
        status=jnp.where(which, DONE, e.status),
        end_state=jnp.where(which, end_state, e.end_state),
        finish=jnp.where(which, t, e.finish),
        blocks=jnp.where(which, 0, e.blocks),
    )


def entry_value(e: Entries, name: str):
    """The entries' values ([A, ...]) of record field `name`, from the entries or from the
    sub-state of the mechanism that carries it."""
    only = RECORD[name].only
    return getattr(e if only is None else getattr(e, only), name)


def _write_at(field, records, at):
    """field [R, ...] with records [F, ...] written from record `at` on."""
    zero = jnp.zeros_like(at)
    return jax.lax.dynamic_update_slice(field, records, (at,) + (zero,) * (field.ndim - 1))


def drain(e: Entries, box: Outbox, per_step: int):
    """Move up to `per_step` DONE entries (the first in entry order) into the outbox; their
    entries become EMPTY. The caller guarantees room: box.count + per_step <= capacity. With
    nothing finished (most iterations) nothing runs but the test."""
    return jax.lax.cond(
        jnp.any(e.status == DONE),
        lambda e, box: _drain(e, box, per_step),
        lambda e, box: (e, box),
        e,
        box,
    )


def _drain(e: Entries, box: Outbox, per_step: int):
    finished = e.status == DONE
    rank = ops.cumsum(finished, dtype=jnp.int32)  # [A] finished entries up to and including i
    # position of the k-th finished entry: how many entries have fewer than k+1 finished before
    k = jnp.arange(per_step, dtype=jnp.int32)
    pos = jnp.sum(rank[None, :] <= k[:, None], axis=1, dtype=jnp.int32)  # [F]; A when none
    n_moved = jnp.minimum(rank[-1], per_step)
    src = jnp.minimum(pos, e.req.shape[0] - 1)
    # records past n_moved are junk beyond the fill mark: the next write starts over them
    updates = {
        f: _write_at(getattr(box, f), entry_value(e, f)[src], box.count) for f in record_fields(box)
    }
    box = Outbox(**updates, count=box.count + n_moved)
    moved = finished & (rank <= per_step)
    e = e.replace(status=jnp.where(moved, EMPTY, e.status), req=jnp.where(moved, -1, e.req))
    return e, box


def capacity(cfg: EngineConfig) -> int:
    """R: at least two iterations' worth of drained records, so a chunk always makes progress."""
    return max(cfg.outbox, 2 * cfg.drain_per_step)
