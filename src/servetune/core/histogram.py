"""Log-spaced histogram of inter-token gaps: <= 1% relative error on any quantile it reports."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

LOW_S = 1e-5  # smallest resolved gap (seconds); shorter gaps land in the first bin
RATIO = 1.02  # bin edges grow 2% per bin, so a bin's geometric midpoint is within 1% of its edges
BINS = int(np.ceil(np.log(1e5 / LOW_S) / np.log(RATIO)))  # up to 1e5 s


def add(hist, gaps, weights=1.0):
    """Histogram `hist` [H] plus `weights` (default one) counts per finite entry of `gaps`
    (seconds); `weights` broadcasts against `gaps`."""
    ok = jnp.isfinite(gaps)
    idx = jnp.floor(jnp.log(jnp.maximum(gaps, LOW_S) / LOW_S) / np.log(RATIO)).astype(jnp.int32)
    idx = jnp.where(ok, jnp.clip(idx, 0, BINS - 1), BINS)
    return hist.at[idx].add(jnp.broadcast_to(weights, gaps.shape), mode="drop")


def bin_values() -> np.ndarray:
    """Representative value (geometric midpoint, seconds) of each bin, shape [H]."""
    return LOW_S * RATIO ** (np.arange(BINS) + 0.5)


_BIN_VALUES = bin_values()


def quantiles(hist: np.ndarray, qs) -> list[float]:
    """The qs-quantiles (0..1 each) of the histogrammed gaps, seconds; nan when empty (one
    running sum for all of them)."""
    total = hist.sum()
    if total <= 0:
        return [float("nan")] * len(qs)
    idx = np.searchsorted(np.cumsum(hist), np.asarray(qs) * total, side="left")
    return [float(v) for v in _BIN_VALUES[np.minimum(idx, BINS - 1)]]


def mean(hist: np.ndarray) -> float:
    """Mean of the histogrammed gaps (seconds, within 1%); nan when empty."""
    total = hist.sum()
    return float((hist * _BIN_VALUES).sum() / total) if total > 0 else float("nan")
