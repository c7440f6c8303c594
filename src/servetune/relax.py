"""The one place where the scheduler's tunable decisions are made.

Every comparison against a tunable limit goes through these gates, so that the straight-through
and soft relaxations the tuner needs can be added here without touching the engine. This
version implements the exact (`hard`) decisions the simulator reports its numbers with.
"""

from __future__ import annotations

import jax.numpy as jnp


def below(x, limit):
    """True where x < limit (hard gate; `x` counts, `limit` a tunable threshold)."""
    return x < limit


def at_most(x, limit):
    """True where x <= limit (hard gate)."""
    return x <= limit


def integer_limit(limit):
    """A continuous limit (e.g. max_num_seqs = 127.6) as the integer count the engine enforces."""
    return jnp.floor(limit)
