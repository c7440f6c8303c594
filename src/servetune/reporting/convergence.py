"""The tuner's convergence figure (convergence.png): its objective and SLO attainment, of the
current policy and of the best so far, against the scenarios simulated. The y axes carry no
offset and span at least a small part of the values' size, so that float noise (a change of
0.01%) is drawn as the flat line it is, not as a jump across the axis."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from servetune.core.files import write_whole
from servetune.reporting.ticks import no_offsets

MIN_RELATIVE_SPAN = 0.01  # a y axis spans at least 1% of its largest magnitude...
MIN_SPAN = {"objective": 1e-6, "attainment": 0.02}  # ...and at least this much (its units)


def y_range(values, min_span: float, rel: float = MIN_RELATIVE_SPAN) -> tuple[float, float]:
    """(low, high) of a y axis over `values` (finite ones; NaN ignored): their span padded 5%
    each way, widened about its middle to at least max(min_span, rel * largest |value|)."""
    v = np.asarray(values, np.float64).ravel()
    v = v[np.isfinite(v)]
    if not len(v):
        return -0.5 * min_span, 0.5 * min_span
    lo, hi = float(v.min()), float(v.max())
    span = max((hi - lo) * 1.1, min_span, rel * float(np.abs(v).max()))
    mid = 0.5 * (lo + hi)
    return mid - 0.5 * span, mid + 0.5 * span


def convergence_figure(history: pd.DataFrame, target: float) -> Figure:
    """The figure of convergence.png from the tuner's history (columns scenarios_simulated,
    center_objective, best_objective: log(useful tokens / USD); center_slo_attainment,
    best_slo_attainment: fractions) and its SLO attainment target (a fraction, dotted)."""
    fig = Figure(figsize=(7, 6), layout="constrained")
    ax1, ax2 = fig.subplots(2, 1, sharex=True)
    x = history["scenarios_simulated"]
    for ax, what, name in (
        (ax1, "objective", "log(useful tokens / USD)"),
        (ax2, "slo_attainment", "SLO attainment"),
    ):
        cols = [f"center_{what}", f"best_{what}"]
        ax.plot(x, history[cols[0]], "o-", label="current policy")
        ax.plot(x, history[cols[1]], "s--", label="best so far")
        shown = [history[c] for c in cols] + ([[target]] if what != "objective" else [])
        ax.set_ylim(
            *y_range(
                np.concatenate([np.asarray(s, np.float64) for s in shown]),
                MIN_SPAN["objective" if what == "objective" else "attainment"],
            )
        )
        ax.set_ylabel(name)
        ax.grid(alpha=0.3)
    ax2.axhline(target, color="gray", lw=1, ls=":", label="target")
    ax2.set_xlabel("scenarios simulated")
    ax1.legend()
    ax2.legend()
    no_offsets(fig)
    return fig


def write_convergence(history: pd.DataFrame, path: Path, target: float) -> None:
    """Write convergence.png (convergence_figure) to `path`, whole or not at all."""
    fig = convergence_figure(history, target)
    write_whole(Path(path), lambda tmp: fig.savefig(tmp, dpi=120))
