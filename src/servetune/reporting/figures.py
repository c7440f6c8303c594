"""PNG figures (matplotlib): for each point key, the headline metrics against it, one line per
combination of the other keys (error bars +- std over seeds; the shaded band, or the pale bar
where a line has one point, the bootstrap confidence interval of the mean over seeds); the
Pareto front of value against P99 latency (fig_pareto.png), the latency CDFs of the points
(fig_latency_cdf.png) and one run's timeline (fig_timeline.png). Latencies are drawn in ms;
an axis is logarithmic where its positive values span more than 1.5 decades (units.log_scale).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from servetune.files import write_whole
from servetune.reporting.choose import (
    FRONT_PANELS,
    condition_groups,
    fronts,
    setting_label,
    targets_s,
)
from servetune.reporting.numbers import fmt
from servetune.reporting.stats import LATENCIES, LEVEL, series
from servetune.reporting.timeline import binned
from servetune.reporting.units import log_scale, scale, title

PANELS = tuple((m, title(m)) for m in ("goodput_rps", "slo_attainment",
                                       "useful_tokens_per_dollar", "ttft_p99_s", "tpot_p99_s",
                                       "e2e_p99_s"))


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=-]+", "_", name).strip("_") or "point"


def x_axis(points: pd.DataFrame, x: str) -> tuple[bool, list]:
    """(numeric, categories): whether `x` is plotted on a numeric axis, and for a categorical
    axis its values in order of first appearance."""
    col = points[x]
    numeric = pd.api.types.is_numeric_dtype(col) and not pd.api.types.is_bool_dtype(col) \
        and bool(col.notna().all())
    return numeric, ([] if numeric else list(dict.fromkeys(col.astype(str))))


def _y_log(points: pd.DataFrame, metric: str) -> bool:
    """Whether the panel of `metric` is drawn on a log y axis: a positive quantity (not the
    attainment, a fraction) whose means and intervals span more than 1.5 decades."""
    if metric == "slo_attainment":
        return False
    cols = [f"{metric}_{s}" for s in ("mean", "ci_lo", "ci_hi") if f"{metric}_{s}" in points]
    return log_scale(points[cols].to_numpy(np.float64)) if cols else False


def _panel(ax, g: pd.DataFrame, xv: np.ndarray, metric: str, color: str, numeric: bool,
           label: str) -> None:
    """One line of one panel: means with +- std bars and the bootstrap band, in shown units."""
    k = scale(metric)
    y = g[f"{metric}_mean"].to_numpy(np.float64) * k
    err = np.nan_to_num(g[f"{metric}_std"].to_numpy(np.float64)) * k
    ax.errorbar(xv, y, yerr=err, color=color, marker="o", ms=4, capsize=3,
                ls="-" if numeric else "none", label=label or None)
    if f"{metric}_ci_lo" in g:
        lo = g[f"{metric}_ci_lo"].to_numpy(np.float64) * k
        hi = g[f"{metric}_ci_hi"].to_numpy(np.float64) * k
        ok = np.isfinite(lo) & np.isfinite(hi)
        if numeric and ok.sum() > 1:
            ax.fill_between(xv[ok], lo[ok], hi[ok], color=color, alpha=0.18, lw=0)
        elif ok.any():
            ax.vlines(xv[ok], lo[ok], hi[ok], color=color, alpha=0.3, lw=7)


def _x_ticks(ax, points: pd.DataFrame, x: str, numeric: bool, cats: list) -> None:
    if numeric:
        if log_scale(points[x]):
            ax.set_xscale("log")
        ticks = sorted({float(v) for v in points[x]})
        if len(ticks) <= 12:  # the swept values themselves
            ax.minorticks_off()
            ax.set_xticks(ticks, [f"{v:g}" for v in ticks])
        ax.set_xlabel(x)
    else:
        ax.set_xticks(range(len(cats)), cats, rotation=20 if len(cats) > 4 else 0, fontsize=8)
        ax.set_xlim(-0.5, len(cats) - 0.5)


def _save(fig: Figure, path: Path) -> Path:
    write_whole(path, lambda tmp: fig.savefig(tmp, dpi=100))
    return path


def draw(points: pd.DataFrame, keys: list, out_dir: Path) -> list[Path]:
    """One PNG per point key (or one over the single point when nothing varies): the
    headline metrics against the key, latencies in ms; returns the paths."""
    out_dir = Path(out_dir)
    paths = []
    for x in keys or ["point"]:
        numeric, cats = x_axis(points, x)
        fig = Figure(figsize=(13, 7.2), layout="constrained")
        axes = fig.subplots(2, 3).ravel()
        lines = series(points, keys, x)
        for k, (label, g) in enumerate(lines):
            if numeric:
                xv = g[x].to_numpy(np.float64)
            else:
                offset = (k - (len(lines) - 1) / 2) * 0.08
                xv = np.array([cats.index(str(v)) for v in g[x]], np.float64) + offset
            for ax, (metric, _) in zip(axes, PANELS):
                if f"{metric}_mean" in g:
                    _panel(ax, g, xv, metric, f"C{k % 10}", numeric, label)
        for ax, (metric, name) in zip(axes, PANELS):
            ax.set_title(name, fontsize=10)
            ax.grid(alpha=0.3)
            _x_ticks(ax, points, x, numeric, cats)
            if f"{metric}_mean" in points and _y_log(points, metric):
                ax.set_yscale("log")
            if metric == "slo_attainment":
                ax.set_ylim(top=1.02)
        if any(label for label, _ in lines):
            axes[0].legend(fontsize=7, loc="best")
        n = sorted(set(points["n"])) if "n" in points else [1]
        seeds = f"{n[0]}" if len(n) == 1 else f"{n[0]}-{n[-1]}"
        fig.suptitle(f"{x}: mean over {seeds} seed(s) per point; bars +- std, shaded "
                     f"{LEVEL:.0%} bootstrap CI", fontsize=11)
        paths.append(_save(fig, out_dir / f"fig_{_safe(x)}.png"))
    return paths


def _target_line(ax, target_ms: list, label: str) -> None:
    """Dashed vertical lines at the SLO targets (ms), the axis widened to show them."""
    for t in target_ms:
        ax.axvline(t, ls="--", color="crimson", lw=1)
        ax.annotate(f"{label} SLO {fmt(t)} ms", (t, 1.0), xycoords=("data", "axes fraction"),
                    rotation=90, va="top", ha="right", fontsize=7, color="crimson")
    if target_ms:
        lo, hi = ax.get_xlim()
        ax.set_xlim(min(lo, min(target_ms) / 1.15), max(hi, max(target_ms) * 1.15))


def draw_pareto(points: pd.DataFrame, conditions: list, settings: list, best: pd.DataFrame,
                out_dir: Path) -> Path | None:
    """fig_pareto.png: useful tokens per $ and goodput (req/s) against P99 TTFT and P99 TPOT
    (ms), one colour per condition; each condition's Pareto front (lower latency, higher value)
    drawn as a staircase with its points labelled by their setting, the best setting by the
    tuner's order starred, the SLO targets dashed. None when the metrics are missing."""
    if any(f"{m}_mean" not in points for pair in FRONT_PANELS for m in pair):
        return None
    points = points.reset_index(drop=True)
    masks = fronts(points, conditions)
    groups = condition_groups(points, conditions)
    keys = list(conditions) + list(settings)
    fig = Figure(figsize=(13, 9), layout="constrained")
    for ax, (lat, val) in zip(fig.subplots(2, 2).ravel(), FRONT_PANELS):
        for k, (cond, g) in enumerate(groups):
            color = f"C{k % 10}"
            x = g[f"{lat}_mean"].to_numpy(np.float64) * 1000.0
            y = g[f"{val}_mean"].to_numpy(np.float64)
            on = masks[(lat, val)][g.index.to_numpy()]
            ax.scatter(x[~on], y[~on], color=color, alpha=0.45, s=18)
            ax.scatter(x[on], y[on], color=color, s=40, label=cond if len(groups) > 1 else None)
            order = np.argsort(x[on])
            ax.step(x[on][order], y[on][order], where="post", color=color, lw=1.2)
            for (_, row), xi, yi in zip(g[on].iterrows(), x[on], y[on]):
                ax.annotate(setting_label(row, settings, keys), (xi, yi), fontsize=7,
                            xytext=(4, 4), textcoords="offset points", color=color)
            star = g["point"].isin(set(best["point"])).to_numpy()
            ax.scatter(x[star], y[star], marker="*", s=220, facecolors="none",
                       edgecolors="black", lw=1.2, zorder=5)
        xs = points[f"{lat}_mean"].to_numpy(np.float64) * 1000.0
        target = [t * 1000.0 for t in targets_s(points, f"slo.{lat.split('_')[0]}_s")]
        if log_scale(np.concatenate([xs, target])):
            ax.set_xscale("log")
        if log_scale(points[f"{val}_mean"]):
            ax.set_yscale("log")
        _target_line(ax, target, lat.split("_")[0].upper())
        ax.set_xlabel(title(lat))
        ax.set_ylabel(title(val))
        ax.grid(alpha=0.3)
        if len(groups) > 1:
            ax.legend(fontsize=7, loc="best", title="condition", title_fontsize=7)
    fig.suptitle("Pareto front per condition (lower P99 latency, more value): labelled points "
                 "are non-dominated;\n* the best setting (meets the SLO target, then most "
                 "useful tokens per $); dashed: the SLO targets", fontsize=10)
    return _save(fig, Path(out_dir) / "fig_pareto.png")


def cdf_order(points: pd.DataFrame, best: pd.DataFrame, cdfs: dict, limit: int) -> list:
    """The point labels whose CDFs are drawn: the best setting of each condition first, then
    the others in order; only those with a CDF, at most `limit`."""
    first = [p for p in best["point"] if p in cdfs] if len(best) else []
    rest = [p for p in points["point"] if p in cdfs and p not in first]
    return (first + rest)[:limit]


def draw_cdfs(points: pd.DataFrame, cdfs: dict, best: pd.DataFrame, out_dir: Path,
              limit: int = 12) -> Path | None:
    """fig_latency_cdf.png: the empirical CDF of TTFT, TPOT and E2E (ms) over each point's
    requests (all seeds), one line per point (at most `limit`: the best settings first), the
    SLO targets dashed. None when no point has a readable requests.parquet."""
    shown = cdf_order(points, best, cdfs, limit)
    if not shown:
        return None
    fig = Figure(figsize=(14, 5.2 + 0.2 * ((len(shown) + 2) // 3)), layout="constrained")
    for ax, lat in zip(fig.subplots(1, 3), LATENCIES):
        values = [cdfs[p][lat].x_ms for p in shown if cdfs[p][lat].n]
        for k, p in enumerate(shown):
            c = cdfs[p][lat]
            if c.n:
                ax.step(c.x_ms, c.p, where="post", color=f"C{k % 10}", lw=1.2,
                        label=f"{p} (n={c.n})")
        if values and log_scale(np.concatenate(values)):
            ax.set_xscale("log")
        _target_line(ax, [t * 1000.0 for t in targets_s(points, f"slo.{lat}_s")], lat.upper())
        ax.set_xlabel(f"{lat.upper()} (ms)")
        ax.set_ylabel("fraction of requests at or below")
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
    fig.legend(*fig.axes[0].get_legend_handles_labels(), loc="outside lower center",
               ncol=min(3, len(shown)), fontsize=8)
    more = f" ({len(shown)} of {len(cdfs)} points)" if len(cdfs) > len(shown) else ""
    fig.suptitle(f"Latency CDFs over the counted, completed requests of all seeds{more}",
                 fontsize=10)
    return _save(fig, Path(out_dir) / "fig_latency_cdf.png")


TIMELINE_PANELS = ((("queue_len", "waiting"), ("running", "running")),
                   (("batch_tokens", "batch tokens"),), (("kv_blocks", "KV blocks in use"),),
                   (("preemptions", "preemptions (cumulative)"),))


def draw_timeline(tl, out_dir: Path) -> Path | None:
    """fig_timeline.png: one run's requests waiting and running, batch tokens, KV blocks in
    use and cumulative preemptions against simulated time (s), one colour per instance
    (binned: the maximum per bin, where there are more than timeline.MAX_BINS samples).
    None when the run has no timeline table."""
    if tl is None or tl.table is None:
        return None
    data, width = binned(tl.table)
    fig = Figure(figsize=(13, 9), layout="constrained")
    axes = fig.subplots(4, 1, sharex=True)
    instances = list(dict.fromkeys(data["instance"]))
    for ax, panel in zip(axes, TIMELINE_PANELS):
        for k, inst in enumerate(instances):
            g = data[data["instance"] == inst]
            for (col, name), ls in zip(panel, ("-", ":")):
                label = f"instance {inst}: {name}" if len(panel) > 1 or len(instances) > 1 \
                    else name
                ax.step(g["t_s"], g[col], where="post", color=f"C{k % 10}", ls=ls, lw=1,
                        label=label)
        ax.set_ylabel(" / ".join(name for _, name in panel), fontsize=8)
        ax.grid(alpha=0.3)
        if len(instances) <= 8:
            ax.legend(fontsize=7, loc="upper right")
    axes[-1].set_xlabel("simulated time (s)")
    note = f"; maximum per {width:.3g} s bin" if width else ""
    fig.suptitle(f"Timeline of run {tl.run} (scenario {tl.scenario}; {tl.why}){note}",
                 fontsize=10)
    return _save(fig, Path(out_dir) / "fig_timeline.png")
