"""Small array primitives tuned for the per-iteration hot loop."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def cumsum(x, dtype=None):
    """Inclusive prefix sum along the last axis.

    An associative scan (log2(A) vectorized adds): on XLA:CPU it is about 3x faster than
    jnp.cumsum for the few-hundred-entry arrays of the active set, and the loop does a dozen.
    """
    x = jnp.asarray(x)
    if dtype is not None:
        x = x.astype(dtype)
    elif x.dtype == jnp.bool_:
        x = x.astype(jnp.int32)
    return jax.lax.associative_scan(jnp.add, x, axis=x.ndim - 1)
