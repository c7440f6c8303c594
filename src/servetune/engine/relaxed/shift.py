"""Admission time shifts: how a relaxed admission decision moves a request's events.

Under engine.relax st or soft (servetune/core/relax.py) each admission decision carries a
perturbation z = w - exact: its derivative is that of the relaxed gate, and under soft its
value is the fluid excess. A request that waits through iterations k (starting at t_k) with
perturbations z_k and is admitted at iteration a (start t_a, duration d_a) would, to first
order, have been admitted at t_k with weight z_k instead of at t_a, and at t_a + d_a (the next
iteration) with weight -z_a; its admission therefore moves by

    shift = sum_k z_k (t_k - t_a) - z_a d_a            (seconds),

and so do the events that follow it: its first token and its completion. This is the
straight-through reading of PATHWISE (Che et al. 2024) for a FIFO admission queue: the gate's
sigmoid stands for the density of the decision flipping and the shift for what the flip does
to that request. Knock-on effects on other requests reach them through the iteration
durations, which the relaxed token weights also carry. Under st every shift is 0 in value, so
the forward pass is the exact simulator's.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp

from servetune.core.types import WAITING, Entries, RelaxTape
from servetune.engine.relaxed.batch import RelaxedBatch


def init_tape(shape, like) -> RelaxTape:
    """A relaxed engine's tapes for entries of `shape` ([I, A]), all 0; `like` a traced
    scalar (keeps carries sharded)."""
    zero = jnp.zeros(shape, jnp.float64) + jnp.zeros_like(like, jnp.float64)
    return RelaxTape(
        wait_z=zero, wait_zt=zero, shift=zero, debt=zero, ahead=zero, pre_s=zero, pre_tok=zero
    )


def reset_tape(tape: RelaxTape | None, take) -> RelaxTape:
    """`tape` (present: a relaxed engine) with the entries where `take` [A] holds (new
    arrivals) at 0."""
    assert tape is not None
    return tape.replace(
        **{f.name: jnp.where(take, 0.0, getattr(tape, f.name)) for f in dataclasses.fields(tape)}
    )


def admission_shift(e: Entries, rb: RelaxedBatch, generated0, completed, t, dur):
    """Entries after one relaxed iteration starting at t and lasting dur (seconds): admitted
    requests add their shift, waiting ones accumulate the iteration's perturbation, and a
    first token or completion emitted in the iteration moves by the request's shift. `rb`: the
    iteration's relaxed batch.
    `generated0` [A]: output tokens before the iteration; `completed` [A]: entries that
    completed in it. (The iteration ends no waiting request, so those WAITING now are the ones
    the schedule left waiting.)"""
    z, admitted, r = rb.admit_z, rb.admitted, e.relaxed
    assert r is not None  # on: a relaxed engine
    still_waiting = e.status == WAITING
    shift = r.shift + jnp.where(admitted, r.wait_zt - r.wait_z * t - z * dur, 0.0)
    first_now = (generated0 == 0) & (e.generated > 0)
    return e.replace(
        relaxed=r.replace(
            shift=shift,
            debt=rb.debt,
            wait_z=jnp.where(admitted, 0.0, jnp.where(still_waiting, r.wait_z + z, r.wait_z)),
            wait_zt=jnp.where(
                admitted, 0.0, jnp.where(still_waiting, r.wait_zt + z * t, r.wait_zt)
            ),
        ),
        first_token=jnp.where(first_now, e.first_token + shift, e.first_token),
        finish=jnp.where(completed, e.finish + shift, e.finish),
    )
