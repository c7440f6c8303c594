"""The one place where the scheduler's tunable decisions are made, and relaxed for gradients.

Every comparison against a tunable limit goes through these gates. The engine's state (which
request runs, how many tokens it computes, which KV blocks it holds) always follows the exact
decision, so capacities and invariants hold in every mode. What the mode changes is the float
*weight* a decision carries into the quantities that time is computed from (the tokens an
iteration computes, when a request was admitted), and so the derivative of the simulated times
with respect to the policy (engine.relax, see servetune/tuning/estimators/pathwise_gradient.py):

- ``hard``: the exact decision; weight 1 or 0, no gradient. The numbers the simulator reports.
- ``st``: straight-through (the PATHWISE estimator of Che et al. 2024, "Differentiable
  Discrete Event Simulation for Queuing Network Control"): the forward value is the exact
  decision, the derivative that of the sigmoid sigma((limit - x) / (tau x scale)).
- ``soft``: the fluid relaxation: the weight is the sigmoid itself, a fractional decision
  whose value and derivative move smoothly with the limit at temperature tau.

Integer limits (max_num_seqs, max_num_batched_tokens) are continuous thresholds: the engine
floors them (`integer_limit`); `relaxed_limit` gives the floored value with the derivative of
the identity (st) or the unfloored value (soft). The exporter rounds them the same way.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

MODES = ("hard", "st", "soft")


def below(x, limit):
    """True where x < limit (exact gate; `x` counts, `limit` a tunable threshold)."""
    return x < limit


def at_most(x, limit):
    """True where x <= limit (exact gate)."""
    return x <= limit


def integer_limit(limit):
    """A continuous limit (e.g. max_num_seqs = 127.6) as the integer count the engine enforces."""
    return jnp.floor(limit)


def relaxed_limit(limit, mode: str):
    """`integer_limit` with a derivative: hard, the floor (no gradient); st, the floor's value
    with the identity's derivative (1); soft, the limit itself (continuous)."""
    if mode == "hard":
        return integer_limit(limit)
    if mode == "st":
        return integer_limit(limit) + (limit - jax.lax.stop_gradient(limit))
    if mode == "soft":
        return limit + 0.0
    raise ValueError(f"relax mode must be one of {MODES}, got {mode!r}")


def weight(exact, eligible, margins, scales, mode: str, tau: float):
    """Float weight [A] of a decision taken where `exact` (bool [A]) holds: `eligible` (bool
    [A]) where the exact conditions that are not tunable hold, and tunable gates whose
    `margins` (limit - x, > 0 where the gate passes, in the gate's units) are measured in
    `scales` (a request, a request's KV blocks).

    The soft weight is eligible x prod_k sigmoid(margin_k / (tau x scale_k)): each sigmoid goes
    from 0.12 to 0.88 over four tau x scale around its flip. hard: `exact` as 0/1; st: that
    value with the soft weight's derivative; soft: the soft weight."""
    hard = exact.astype(jnp.float64)
    if mode == "hard":
        return hard
    soft = eligible.astype(jnp.float64)
    for margin, scale in zip(margins, scales, strict=True):
        soft = soft * jax.nn.sigmoid(margin / (tau * scale))
    if mode == "st":
        return hard + (soft - jax.lax.stop_gradient(soft))
    if mode == "soft":
        return soft
    raise ValueError(f"relax mode must be one of {MODES}, got {mode!r}")


def perturbation(w, exact):
    """w - exact: the part of a decision's weight that differs from the exact decision, with
    its derivative: 0 in value under st (derivative of the sigmoid), the fluid excess under
    soft. It is what shifts a request's admission time (tuning/estimators/pathwise_gradient.py)."""
    return w - exact.astype(jnp.float64)
