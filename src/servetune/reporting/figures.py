"""PNG figures (matplotlib): for each point key, the headline metrics against it, one line per
combination of the other keys; error bars are +- std over seeds, the shaded band (or the pale
bar where a line has one point) is the bootstrap confidence interval of the mean over seeds."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from servetune.files import write_whole
from servetune.reporting.stats import LEVEL, series

PANELS = (
    ("goodput_rps", "goodput (req/s)"),
    ("slo_attainment", "SLO attainment"),
    ("useful_tokens_per_dollar", "useful tokens per $"),
    ("ttft_p99_s", "P99 TTFT (s)"),
    ("tpot_p99_s", "P99 TPOT (s)"),
    ("e2e_p99_s", "P99 E2E (s)"),
)


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=-]+", "_", name).strip("_") or "point"


def x_axis(points: pd.DataFrame, x: str) -> tuple[bool, list]:
    """(numeric, categories): whether `x` is plotted on a numeric axis, and for a categorical
    axis its values in order of first appearance."""
    col = points[x]
    numeric = pd.api.types.is_numeric_dtype(col) and not pd.api.types.is_bool_dtype(col) \
        and bool(col.notna().all())
    return numeric, ([] if numeric else list(dict.fromkeys(col.astype(str))))


def log_scale(values) -> bool:
    """Whether a numeric axis over `values` reads better logarithmic (positive, >= 10x span)."""
    v = np.asarray(values, np.float64)
    v = v[np.isfinite(v)]
    return len(v) > 1 and bool(np.all(v > 0)) and v.max() / v.min() >= 10


def draw(points: pd.DataFrame, keys: list, out_dir: Path) -> list[Path]:
    """One PNG per point key (or one over the single point when nothing varies); returns paths."""
    out_dir = Path(out_dir)
    xs = keys or ["point"]
    paths = []
    for x in xs:
        numeric, cats = x_axis(points, x)
        fig = Figure(figsize=(13, 7.2), layout="constrained")
        axes = fig.subplots(2, 3).ravel()
        lines = series(points, keys, x)
        for k, (label, g) in enumerate(lines):
            color = f"C{k % 10}"
            if numeric:
                xv = g[x].to_numpy(np.float64)
            else:
                offset = (k - (len(lines) - 1) / 2) * 0.08
                xv = np.array([cats.index(str(v)) for v in g[x]], np.float64) + offset
            for ax, (metric, _) in zip(axes, PANELS):
                if f"{metric}_mean" not in g:
                    continue
                y = g[f"{metric}_mean"].to_numpy(np.float64)
                err = np.nan_to_num(g[f"{metric}_std"].to_numpy(np.float64))
                ax.errorbar(xv, y, yerr=err, color=color, marker="o", ms=4, capsize=3,
                            ls="-" if numeric else "none", label=label or None)
                if f"{metric}_ci_lo" in g:
                    lo = g[f"{metric}_ci_lo"].to_numpy(np.float64)
                    hi = g[f"{metric}_ci_hi"].to_numpy(np.float64)
                    ok = np.isfinite(lo) & np.isfinite(hi)
                    if numeric and ok.sum() > 1:
                        ax.fill_between(xv[ok], lo[ok], hi[ok], color=color, alpha=0.18, lw=0)
                    elif ok.any():
                        ax.vlines(xv[ok], lo[ok], hi[ok], color=color, alpha=0.3, lw=7)
        for ax, (metric, title) in zip(axes, PANELS):
            ax.set_title(title, fontsize=10)
            ax.grid(alpha=0.3)
            if numeric:
                if log_scale(points[x]):
                    ax.set_xscale("log")
                ticks = sorted({float(v) for v in points[x]})
                if len(ticks) <= 12:  # the swept values themselves
                    ax.minorticks_off()
                    ax.set_xticks(ticks, [f"{v:g}" for v in ticks])
                ax.set_xlabel(x)
            else:
                ax.set_xticks(range(len(cats)), cats, rotation=20 if len(cats) > 4 else 0,
                              fontsize=8)
                ax.set_xlim(-0.5, len(cats) - 0.5)
            if metric == "slo_attainment":
                ax.set_ylim(top=1.02)
        if any(label for label, _ in lines):
            axes[0].legend(fontsize=7, loc="best")
        n = sorted(set(points["n"])) if "n" in points else [1]
        seeds = f"{n[0]}" if len(n) == 1 else f"{n[0]}-{n[-1]}"
        fig.suptitle(f"{x}: mean over {seeds} seed(s) per point; bars +- std, shaded "
                     f"{LEVEL:.0%} bootstrap CI", fontsize=11)
        path = out_dir / f"fig_{_safe(x)}.png"
        write_whole(path, lambda tmp, fig=fig: fig.savefig(tmp, dpi=100))
        paths.append(path)
    return paths
