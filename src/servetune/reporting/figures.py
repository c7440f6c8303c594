"""PNG figures (matplotlib): for each point key, the headline metrics against it, one line per
combination of the other keys (error bars +- std over seeds; the shaded band, or the pale bar
where a line has one point, the bootstrap confidence interval of the mean over seeds); the
Pareto front of value against P99 latency (fig_pareto.png), the latency CDFs of the points
(fig_latency_cdf.png), one run's timeline (fig_timeline.png) and its autoscaled fleet
(fig_fleet.png). Latencies are drawn in ms;
an axis is logarithmic where its positive values span more than 1.5 decades (units.log_scale),
with ticks at 1-2-5 steps labelled as plain numbers, and no axis has an offset (ticks.py); an
axis over one value spans +- 5% of it (ticks.fit_range). A latency axis fits its data: an SLO
target within a factor of 2 of it is drawn dashed, one further off is named at the axis' edge
with an arrow (units.near). Series that are the same (identical points) are drawn once,
labelled with every setting they stand for. Nothing drawn is cut by an axes' frame: labels are
placed inside, and a limit is widened where a marker would cross it (fit_markers).
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from servetune.core.files import write_whole
from servetune.reporting import fleet as fleets
from servetune.reporting.choose import (
    FRONT_PANELS,
    best_points,
    condition_groups,
    fronts,
    targets_s,
)
from servetune.reporting.labels import front_labels, place, tied_label
from servetune.reporting.numbers import fmt
from servetune.reporting.stats import LATENCIES, LEVEL, group_label, series
from servetune.reporting.ticks import fit_range, no_offsets, set_log
from servetune.reporting.timeline import binned
from servetune.reporting.units import log_scale, near, scale, title

PANELS = tuple(
    (m, title(m))
    for m in (
        "goodput_rps",
        "slo_attainment",
        "useful_tokens_per_dollar",
        "ttft_p99_s",
        "tpot_p99_s",
        "e2e_p99_s",
    )
)


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=-]+", "_", name).strip("_") or "point"


NOT_SET = "(not set)"  # the category of a point whose run did not set the key


def category(value) -> str:
    """A categorical axis's label of `value`: NOT_SET for a missing one (None, NaN: a run that
    did not set the key, beside a sweep that did), a whole float as an integer, else its
    text."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return NOT_SET
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))  # 64.0 in a column a missing value made float: "64"
    return str(value)


def x_axis(points: pd.DataFrame, x: str) -> tuple[bool, list]:
    """(numeric, categories): whether `x` is plotted on a numeric axis, and for a categorical
    axis its values' labels (`category`) in order of first appearance."""
    col = points[x]
    numeric = (
        pd.api.types.is_numeric_dtype(col)
        and not pd.api.types.is_bool_dtype(col)
        and bool(col.notna().all())
    )
    return numeric, ([] if numeric else list(dict.fromkeys(category(v) for v in col)))


def _y_log(points: pd.DataFrame, metric: str) -> bool:
    """Whether the panel of `metric` is drawn on a log y axis: a positive quantity (not the
    attainment, a fraction) whose means and intervals span more than 1.5 decades."""
    if metric == "slo_attainment":
        return False
    cols = [f"{metric}_{s}" for s in ("mean", "ci_lo", "ci_hi") if f"{metric}_{s}" in points]
    return log_scale(points[cols].to_numpy(np.float64)) if cols else False


def _panel(
    ax, g: pd.DataFrame, xv: np.ndarray, metric: str, color: str, numeric: bool, label: str
) -> None:
    """One line of one panel: means with +- std bars and the bootstrap band, in shown units."""
    k = scale(metric)
    y = g[f"{metric}_mean"].to_numpy(np.float64) * k
    err = np.nan_to_num(g[f"{metric}_std"].to_numpy(np.float64)) * k
    ax.errorbar(
        xv,
        y,
        yerr=err,
        color=color,
        marker="o",
        ms=4,
        capsize=3,
        ls="-" if numeric else "none",
        label=label or None,
    )
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
            set_log(ax, "x")
        ticks = sorted({float(v) for v in points[x]})
        if len(ticks) <= 12:  # the swept values themselves
            ax.minorticks_off()
            ax.set_xticks(ticks, [f"{v:g}" for v in ticks])
        ax.set_xlabel(x)
        span = fit_range(ticks)
        if span is not None and ax.get_xscale() != "log":  # one swept value: +- 5% of it
            ax.set_xlim(*span)
    else:
        ax.set_xticks(range(len(cats)), cats, rotation=20 if len(cats) > 4 else 0, fontsize=8)
        ax.set_xlim(-0.5, len(cats) - 0.5)


def panel_values(points: pd.DataFrame, metric: str) -> np.ndarray:
    """Every value a panel of `metric` draws, in shown units: the means, mean +- std and the
    bootstrap intervals."""
    mean = points[f"{metric}_mean"].to_numpy(np.float64)
    std = points.get(f"{metric}_std", pd.Series(0.0, index=points.index)).to_numpy(np.float64)
    std = np.nan_to_num(std)
    parts = [mean, mean - std, mean + std]
    parts += [
        points[c].to_numpy(np.float64)
        for c in (f"{metric}_ci_lo", f"{metric}_ci_hi")
        if c in points
    ]
    return np.concatenate(parts) * scale(metric)


def merged_series(points: pd.DataFrame, keys: list, x: str, metrics) -> list:
    """stats.series's lines over `x`, the lines that draw the same (equal x values and, for
    each of `metrics`, equal means, spreads and intervals) as one, labelled with every
    combination of the other keys it stands for (labels.tied_label): [(label, rows)]."""
    others = [k for k in keys if k != x]
    cols = [
        f"{m}_{s}"
        for m in metrics
        for s in ("mean", "std", "ci_lo", "ci_hi")
        if f"{m}_{s}" in points
    ]
    merged: list = []  # [(first row of each line it stands for, its rows, what it draws)]
    for _, g in series(points, keys, x):
        drawn = (tuple(category(v) for v in g[x]), g[cols].to_numpy(np.float64))
        home = next((m for m in merged if _same_drawing(m[2], drawn)), None)
        if home is None:
            merged.append(([g.iloc[0]], g, drawn))
        else:
            home[0].append(g.iloc[0])
    return [(tied_label(pd.DataFrame(f), others) if others else "", g) for f, g, _ in merged]


def _same_drawing(a: tuple, b: tuple) -> bool:
    return (
        a[0] == b[0]
        and a[1].shape == b[1].shape
        and bool(np.allclose(a[1], b[1], rtol=1e-12, atol=0.0, equal_nan=True))
    )


def _y_range(ax, points: pd.DataFrame, metric: str) -> None:
    """A linear panel's y range: +- 5% around values that do not spread (ticks.fit_range);
    an attainment's top at 1.02 (a marker at 1.0 is kept whole by fit_markers)."""
    span = fit_range(panel_values(points, metric))
    if span is not None:
        ax.set_ylim(*span)
    if metric == "slo_attainment":
        ax.set_ylim(top=1.02)


def key_png(points: pd.DataFrame, keys: list, x: str) -> Figure:
    """The Figure of fig_<x>.png (see draw)."""
    numeric, cats = x_axis(points, x)
    fig = Figure(figsize=(13, 7.2), layout="constrained")
    axes = fig.subplots(2, 3).ravel()
    lines = merged_series(points, keys, x, [m for m, _ in PANELS])
    for k, (label, g) in enumerate(lines):
        if numeric:
            xv = g[x].to_numpy(np.float64)
        else:
            offset = (k - (len(lines) - 1) / 2) * 0.08
            xv = np.array([cats.index(category(v)) for v in g[x]], np.float64) + offset
        for ax, (metric, _) in zip(axes, PANELS, strict=True):
            if f"{metric}_mean" in g:
                _panel(ax, g, xv, metric, f"C{k % 10}", numeric, label)
    for ax, (metric, name) in zip(axes, PANELS, strict=True):
        ax.set_title(name, fontsize=10)
        ax.grid(alpha=0.3)
        _x_ticks(ax, points, x, numeric, cats)
        if f"{metric}_mean" not in points:
            continue
        if _y_log(points, metric):
            set_log(ax, "y")
        else:
            _y_range(ax, points, metric)
    if any(label for label, _ in lines):
        axes[0].legend(fontsize=7, loc="best")
    n = sorted(set(points["n"])) if "n" in points else [1]
    seeds = f"{n[0]}" if len(n) == 1 else f"{n[0]}-{n[-1]}"
    fig.suptitle(
        f"{x}: mean over {seeds} seed(s) per point; bars +- std, shaded {LEVEL:.0%} bootstrap CI",
        fontsize=11,
    )
    return finish(fig)


def _save(fig: Figure, path: Path) -> Path:
    no_offsets(fig)
    write_whole(path, lambda tmp: fig.savefig(tmp, dpi=100))
    return path


def draw(points: pd.DataFrame, keys: list, out_dir: Path) -> list[Path]:
    """One PNG per point key (or one over the single point when nothing varies): the
    headline metrics against the key, latencies in ms, lines that draw the same drawn once
    (merged_series); returns the paths."""
    out_dir = Path(out_dir)
    return [
        _save(key_png(points, keys, x), out_dir / f"fig_{_safe(x)}.png") for x in keys or ["point"]
    ]


# --------------------------------------------------------------------------- extents


def _markers(ax) -> list[tuple[np.ndarray, float]]:
    """[(data points [n, 2], marker radius in pixels)] of what Axes `ax` draws with markers:
    its lines' markers and its scatter points."""
    px = ax.figure.dpi / 72.0
    out = []
    for line in ax.lines:
        if line.get_visible() and line.get_marker() not in (None, "None", "none", "", " "):
            r = (line.get_markersize() + line.get_markeredgewidth()) / 2 * px
            out.append((np.asarray(line.get_xydata(), np.float64), r + 2.0))
    for coll in ax.collections:
        if not coll.get_visible() or coll.get_offset_transform() != ax.transData:
            continue
        offsets = np.asarray(coll.get_offsets(), np.float64)
        sizes = np.asarray(coll.get_sizes(), np.float64)
        if len(offsets) and len(sizes):
            widths = np.asarray(coll.get_linewidths(), np.float64)
            edge = float(widths.max()) if len(widths) else 0.0
            out.append((offsets, (np.sqrt(sizes.max()) + edge) / 2 * px + 2.0))
    return out


def _widen(view: tuple, v: np.ndarray, r: np.ndarray, size_px: float, log: bool) -> tuple:
    """A view (lo, hi) widened until markers at values `v` of radii `r` (pixels) lie wholly
    inside an axis of `size_px` pixels; markers outside the view do not count."""
    lo, hi = view
    if log:
        if lo <= 0 or hi <= 0:
            return view
        with np.errstate(divide="ignore", invalid="ignore"):
            v = np.log10(v)
        lo, hi = np.log10(lo), np.log10(hi)
    keep = np.isfinite(v) & (v >= lo) & (v <= hi)
    if not keep.any() or hi <= lo or size_px <= 0:
        return view
    v, k = v[keep], np.minimum(r[keep] / size_px, 0.25)
    a, b = lo, hi
    for _ in range(8):  # the margin needed grows with the span it widens
        w = b - a
        a, b = min(a, float(np.min(v - k * w))), max(b, float(np.max(v + k * w)))
    if (a, b) == (lo, hi):
        return view
    return (10.0**a, 10.0**b) if log else (a, b)


def fit_markers(fig: Figure) -> None:
    """Widen each axes' limits just enough that no marker is cut by its frame (an attainment
    of 1.0 under a top of 1.02); lays the figure out to measure it."""
    fig.draw_without_rendering()
    for ax in fig.axes:
        drawn = _markers(ax)
        if not drawn:
            continue
        xy = np.concatenate([d.reshape(-1, 2) for d, _ in drawn])
        r = np.concatenate([np.full(len(d), rad) for d, rad in drawn])
        (x0, x1), (y0, y1) = ax.get_xlim(), ax.get_ylim()
        in_x = (xy[:, 0] >= min(x0, x1)) & (xy[:, 0] <= max(x0, x1))
        in_y = (xy[:, 1] >= min(y0, y1)) & (xy[:, 1] <= max(y0, y1))
        log_x, log_y = ax.get_xscale() == "log", ax.get_yscale() == "log"
        new_x = _widen((x0, x1), xy[in_y, 0], r[in_y], ax.bbox.width, log_x)
        new_y = _widen((y0, y1), xy[in_x, 1], r[in_x], ax.bbox.height, log_y)
        if new_x != (x0, x1):
            ax.set_xlim(*new_x)
        if new_y != (y0, y1):
            ax.set_ylim(*new_y)


def finish(fig: Figure) -> Figure:
    """A figure made ready to save: no offset on any axis (ticks.no_offsets) and no marker
    cut by a frame (fit_markers)."""
    no_offsets(fig)
    fit_markers(fig)
    return fig


# --------------------------------------------------------------------------- SLO targets

SLO_COLOR = "crimson"
EDGE_PT = 4.0  # points between a label and the axes' frame


def _target_line(ax, target_ms: list, label: str, data) -> None:
    """The SLO targets (ms) of a latency x axis over `data` (ms): a target near the data
    (units.near) as a dashed vertical line, the axis widened to show it and its name beside
    it inside the frame (on the side of the line with more room); a target far from the data
    named at the axis' edge with an arrow towards it (right edge, at the bottom, for one above
    the data; left edge, at the top, for one below), the axis left to fit the data."""
    close = [t for t in target_ms if near(t, data)]
    if close:
        lo, hi = ax.get_xlim()
        ax.set_xlim(min(lo, min(close) / 1.15), max(hi, max(close) * 1.15))
    lo, hi = ax.get_xlim()
    f = np.log10 if ax.get_xscale() == "log" else float
    for t in close:
        ax.axvline(t, ls="--", color=SLO_COLOR, lw=1)
        right_half = (f(t) - f(lo)) / ((f(hi) - f(lo)) or 1.0) > 0.5
        ax.annotate(
            f"{label} SLO {fmt(t)} ms",
            (t, 1.0),
            xycoords=("data", "axes fraction"),
            xytext=(-2.0 if right_half else 2.0, -EDGE_PT),
            textcoords="offset points",
            rotation=90,
            va="top",
            ha="right" if right_half else "left",
            fontsize=7,
            color=SLO_COLOR,
        )
    values = np.asarray(data, np.float64).ravel()
    values = values[np.isfinite(values)]
    for t in (t for t in target_ms if t not in close):
        above = not len(values) or t > values.max()
        ax.annotate(
            f"{label} SLO {fmt(t)} ms \u2192" if above else f"\u2190 {label} SLO {fmt(t)} ms",
            (1.0, 0.0) if above else (0.0, 1.0),
            xycoords="axes fraction",
            xytext=(-EDGE_PT, EDGE_PT) if above else (EDGE_PT, -EDGE_PT),
            textcoords="offset points",
            ha="right" if above else "left",
            va="bottom" if above else "top",
            fontsize=7,
            color=SLO_COLOR,
        )


LABEL_GAP_PT = 4.0  # points between a front point and its label


def annotate_apart(ax, labels: list, renderer) -> list:
    """Annotate Axes `ax` with labels [(x, y, text, colour)] (data coordinates) each where it
    overprints no other (labels.place, inside the axes; a label that fits nowhere is shifted
    until free, with a thin line to its point); the layout and limits must be final. Returns
    the Annotations, kept out of the layout."""
    if not labels:
        return []
    sizes = []
    for x, y, text, _ in labels:  # measured, then drawn where they go
        probe = ax.annotate(text, (x, y), fontsize=7)
        b = probe.get_window_extent(renderer)
        sizes.append((b.width, b.height))
        probe.remove()
    at = ax.transData.transform([(x, y) for x, y, _, _ in labels])
    px = ax.figure.dpi / 72.0  # pixels per point
    spots = place(
        at[:, 0],
        at[:, 1],
        sizes,
        LABEL_GAP_PT * px,
        stack=True,
        bounds=tuple(ax.get_window_extent(renderer).extents),
    )
    anns = []
    for (x, y, text, color), ((sx, sy), lift) in zip(labels, spots, strict=True):
        line = {"arrowstyle": "-", "lw": 0.5, "color": color, "alpha": 0.6} if lift else None
        anns.append(
            ax.annotate(
                text,
                (x, y),
                xytext=(sx * LABEL_GAP_PT, sy * LABEL_GAP_PT + lift / px),
                textcoords="offset points",
                fontsize=7,
                color=color,
                arrowprops=line,
                ha="left" if sx > 0 else "right",
                va={1: "bottom", -1: "top", 0: "center"}[sy],
            )
        )
        anns[-1].set_in_layout(False)
    return anns


def _pareto_points(
    ax, points: pd.DataFrame, panel: tuple, best: pd.DataFrame, fronts_of: tuple
) -> list:
    """One panel's points per condition, each front as a staircase and the best settings
    (with those tied with them) starred; returns the front labels to place [(x ms, y, text,
    colour)]."""
    (lat, val), (groups, masks, label_keys) = panel, fronts_of
    starred = best_points(best)
    labels = []
    for k, (cond, g) in enumerate(groups):
        color = f"C{k % 10}"
        x = g[f"{lat}_mean"].to_numpy(np.float64) * 1000.0
        y = g[f"{val}_mean"].to_numpy(np.float64)
        on = masks[(lat, val)][g.index.to_numpy()]
        ax.scatter(x[~on], y[~on], color=color, alpha=0.45, s=18)
        ax.scatter(x[on], y[on], color=color, s=40, label=cond if len(groups) > 1 else None)
        order = np.argsort(x[on])
        ax.step(x[on][order], y[on][order], where="post", color=color, lw=1.2)
        labels += [(x[i], y[i], text, color) for i, text in front_labels(g, x, y, on, label_keys)]
        star = g["point"].isin(starred).to_numpy()
        ax.scatter(
            x[star],
            y[star],
            marker="*",
            s=220,
            facecolors="none",
            edgecolors="black",
            lw=1.2,
            zorder=5,
        )
    return labels


def _pareto_axes(ax, points: pd.DataFrame, lat: str, val: str, legend: bool) -> None:
    """A front panel's scales (log where the values span 1.5 decades; +- 5% around one
    value), SLO targets (the axis fits the points: units.near), titles."""
    xs = points[f"{lat}_mean"].to_numpy(np.float64) * 1000.0
    ys = points[f"{val}_mean"].to_numpy(np.float64)
    target = [t * 1000.0 for t in targets_s(points, f"slo.{lat.split('_')[0]}_s")]
    for which, values in (("x", xs), ("y", ys)):
        if log_scale(values):
            set_log(ax, which)
        elif (span := fit_range(values)) is not None:
            (ax.set_xlim if which == "x" else ax.set_ylim)(*span)
    _target_line(ax, target, lat.split("_")[0].upper(), xs)
    ax.set_xlabel(title(lat))
    ax.set_ylabel(title(val))
    ax.grid(alpha=0.3)
    if legend:
        ax.legend(fontsize=7, loc="best", title="condition", title_fontsize=7)


def pareto_png(
    points: pd.DataFrame, conditions: list, settings: list, best: pd.DataFrame
) -> Figure | None:
    """The Figure of fig_pareto.png (see draw_pareto); None when the metrics are missing.
    Settings whose points coincide share one label, and no label overprints another."""
    if any(f"{m}_mean" not in points for pair in FRONT_PANELS for m in pair):
        return None
    points = points.reset_index(drop=True)
    groups = condition_groups(points, conditions)
    fronts_of = (
        groups,
        fronts(points, conditions),
        list(settings) or list(conditions) + list(settings),
    )
    fig = Figure(figsize=(13, 9), layout="constrained")
    FigureCanvasAgg(fig)  # a renderer to measure the labels with
    placed = []
    for ax, panel in zip(fig.subplots(2, 2).ravel(), FRONT_PANELS, strict=True):
        placed.append((ax, _pareto_points(ax, points, panel, best, fronts_of)))
        _pareto_axes(ax, points, *panel, legend=len(groups) > 1)
    fig.suptitle(
        "Pareto front per condition (lower P99 latency, more value): labelled points "
        "are non-dominated;\n* the best setting (meets the SLO target, then most "
        "useful tokens per $; every setting tied with it); dashed: the SLO targets",
        fontsize=10,
    )
    finish(fig)  # the layout and limits the labels are placed in
    for ax, labels in placed:
        annotate_apart(ax, labels, fig.canvas.get_renderer())
    return fig


def draw_pareto(
    points: pd.DataFrame, conditions: list, settings: list, best: pd.DataFrame, out_dir: Path
) -> Path | None:
    """fig_pareto.png: useful tokens per $ and goodput (req/s) against P99 TTFT and P99 TPOT
    (ms), one colour per condition; each condition's Pareto front (lower latency, higher value)
    drawn as a staircase with its points labelled by their setting, the best setting by the
    tuner's order starred, the SLO targets dashed. None when the metrics are missing."""
    fig = pareto_png(points, conditions, settings, best)
    return None if fig is None else _save(fig, Path(out_dir) / "fig_pareto.png")


def cdf_order(points: pd.DataFrame, best: pd.DataFrame, cdfs: dict, limit: int) -> list:
    """The point labels whose CDFs are drawn: the best setting of each condition first, then
    the others in order; only those with a CDF, at most `limit`."""
    first = [p for p in best["point"] if p in cdfs] if len(best) else []
    rest = [p for p in points["point"] if p in cdfs and p not in first]
    return (first + rest)[:limit]


def _same_cdfs(a: dict, b: dict) -> bool:
    """Whether two points' CDFs ({lat: Cdf}) are one: the same requests' latencies."""
    return a.keys() == b.keys() and all(
        a[k].n == b[k].n and np.array_equal(a[k].x_ms, b[k].x_ms) and np.array_equal(a[k].p, b[k].p)
        for k in a
    )


def cdf_groups(
    points: pd.DataFrame, best: pd.DataFrame, cdfs: dict, limit: int, keys: list | None = None
) -> list[tuple[str, list, dict]]:
    """[(label, point labels, {lat: Cdf})] of the CDF lines to draw, in cdf_order (the best
    settings first): points whose CDFs are the same (identical runs) as one line, labelled
    with every one of them (stats.group_label over `keys`: "max_num_seqs=16, 64, 256"; their
    labels joined by "; " without keys); at most `limit` lines."""
    groups: list = []  # [(point labels, their CDFs)]
    for p in cdf_order(points, best, cdfs, len(cdfs)):
        home = next((g for g in groups if _same_cdfs(g[1], cdfs[p])), None)
        if home is None:
            groups.append(([p], cdfs[p]))
        else:
            home[0].append(p)
    by_point = points.drop_duplicates("point").set_index("point", drop=False)
    return [
        (group_label(by_point.loc[members], keys) if len(members) > 1 else members[0], members, c)
        for members, c in groups[:limit]
    ]


def cdf_png(
    points: pd.DataFrame, cdfs: dict, best: pd.DataFrame, limit: int = 12, keys=None
) -> Figure | None:
    """The Figure of fig_latency_cdf.png (see draw_cdfs); None without a CDF."""
    shown = cdf_groups(points, best, cdfs, limit, keys)
    if not shown:
        return None
    fig = Figure(figsize=(14, 5.2 + 0.2 * ((len(shown) + 2) // 3)), layout="constrained")
    for ax, lat in zip(fig.subplots(1, 3), LATENCIES, strict=True):
        values = [c[lat].x_ms for _, _, c in shown if c[lat].n]
        for k, (label, _, c) in enumerate(shown):
            if c[lat].n:
                ax.step(
                    c[lat].x_ms,
                    c[lat].p,
                    where="post",
                    color=f"C{k % 10}",
                    lw=1.2,
                    label=f"{label} (n={c[lat].n})",
                )
        data = np.concatenate(values) if values else np.array([])
        if log_scale(data):
            set_log(ax, "x")
        elif (span := fit_range(data)) is not None:
            ax.set_xlim(*span)
        targets = [t * 1000.0 for t in targets_s(points, f"slo.{lat}_s")]
        _target_line(ax, targets, lat.upper(), data)
        ax.set_xlabel(f"{lat.upper()} (ms)")
        ax.set_ylabel("fraction of requests at or below")
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
    fig.legend(
        *fig.axes[0].get_legend_handles_labels(),
        loc="outside lower center",
        ncol=min(3, len(shown)),
        fontsize=8,
    )
    drawn = sum(len(members) for _, members, _ in shown)
    more = f" ({drawn} of {len(cdfs)} points)" if drawn < len(cdfs) else ""
    fig.suptitle(
        f"Latency CDFs over the counted, completed requests of all seeds{more}", fontsize=10
    )
    return finish(fig)


def draw_cdfs(
    points: pd.DataFrame,
    cdfs: dict,
    best: pd.DataFrame,
    out_dir: Path,
    limit: int = 12,
    keys: list | None = None,
) -> Path | None:
    """fig_latency_cdf.png: the empirical CDF of TTFT, TPOT and E2E (ms) over each point's
    requests (all seeds), one line per point (identical ones as one, named together:
    cdf_groups; at most `limit` lines: the best settings first), the SLO targets dashed (or
    named at the edge, far from the data). None when no point has a readable
    requests.parquet."""
    fig = cdf_png(points, cdfs, best, limit, keys)
    return None if fig is None else _save(fig, Path(out_dir) / "fig_latency_cdf.png")


TIMELINE_PANELS = (
    (("queue_len", "waiting"), ("running", "running")),
    (("batch_tokens", "batch tokens"),),
    (("kv_blocks", "KV blocks in use"),),
    (("preemptions", "preemptions (cumulative)"),),
)
# how a gauge's line is drawn where two share a panel: waiting dotted, the rest solid
DASHES = {"queue_len": "dot"}
MPL_DASHES = {"dot": ":", "solid": "-"}
LEGEND_INSTANCES = 10  # instances named in the legend (the colours repeat after ten)


def dash(col: str) -> str:
    """The line style of gauge `col` in the timeline ("dot" or "solid", plotly's names)."""
    return DASHES.get(col, "solid")


def style_names() -> list[tuple[str, str]]:
    """[(legend entry, plotly dash)] of the line styles of the timeline's shared panel:
    "waiting (dotted)", "running (solid)"."""
    return [
        (f"{name} ({'dotted' if dash(col) == 'dot' else 'solid'})", dash(col))
        for col, name in TIMELINE_PANELS[0]
    ]


def _timeline_legend(ax, instances: list) -> None:
    """The legend of the timeline: a colour per instance (the first LEGEND_INSTANCES), then
    the line style of each gauge of the first panel."""
    handles = [
        Line2D([], [], color=f"C{k % 10}", lw=1.5, label=f"instance {inst}")
        for k, inst in enumerate(instances[:LEGEND_INSTANCES])
    ]
    if len(instances) > LEGEND_INSTANCES:
        handles.append(Line2D([], [], color="none", label=f"... {len(instances)} instances"))
    handles += [
        Line2D([], [], color="0.25", lw=1.5, ls=MPL_DASHES[d], label=name)
        for name, d in style_names()
    ]
    ax.legend(handles=handles, fontsize=7, loc="upper right", ncol=2 if len(handles) > 6 else 1)


def timeline_png(tl) -> Figure | None:
    """The Figure of fig_timeline.png (see draw_timeline); None without a table."""
    if tl is None or tl.table is None:
        return None
    data, width = binned(tl.table)
    fig = Figure(figsize=(13, 9), layout="constrained")
    axes = fig.subplots(4, 1, sharex=True)
    instances = list(dict.fromkeys(data["instance"]))
    for ax, panel in zip(axes, TIMELINE_PANELS, strict=True):
        for k, inst in enumerate(instances):
            g = data[data["instance"] == inst]
            for col, name in panel:
                ax.step(
                    g["t_s"],
                    g[col],
                    where="post",
                    color=f"C{k % 10}",
                    ls=MPL_DASHES[dash(col)],
                    lw=1,
                    label=f"instance {inst}: {name}",
                )
        ax.set_ylabel(" / ".join(name for _, name in panel), fontsize=8)
        ax.grid(alpha=0.3)
    _timeline_legend(axes[0], instances)
    axes[-1].set_xlabel("simulated time (s)")
    note = f"; maximum per {width:.3g} s bin" if width else ""
    fig.suptitle(f"Timeline of run {tl.name}, scenario {tl.scenario} ({tl.why}){note}", fontsize=10)
    return finish(fig)


def draw_timeline(tl, out_dir: Path) -> Path | None:
    """fig_timeline.png: one run's requests waiting (dotted) and running (solid), batch
    tokens, KV blocks in use and cumulative preemptions against simulated time (s), one colour
    per instance, the legend naming the colours and the line styles (binned: the maximum per
    bin, where there are more than timeline.MAX_BINS samples). None when the run has no
    timeline table."""
    fig = timeline_png(tl)
    return None if fig is None else _save(fig, Path(out_dir) / "fig_timeline.png")


# --------------------------------------------------------------------------- fleet

# the stacked states of the provisioned replicas: (column, legend name, colour)
FLEET_STATES = (
    ("serving", "serving", "#2ca02c"),
    ("cold", "cold-starting", "#1f77b4"),
    ("draining", "draining", "#ff7f0e"),
)


def _fleet_replicas(ax, fl) -> None:
    """Panel (a) of fig_fleet.png: serving, cold-starting and draining replicas stacked as
    steps, provisioned as a line, desired dashed, against hours."""
    base = None
    for col, name, colour in FLEET_STATES:
        t, v = fleets.step_series(fl, col)
        lo = np.zeros_like(v) if base is None else base
        ax.fill_between(
            t / fleets.HOUR_S, lo, lo + v, step="post", color=colour, alpha=0.45, lw=0, label=name
        )
        base = lo + v
    t, prov = fleets.step_series(fl, "provisioned")
    ax.step(t / fleets.HOUR_S, prov, where="post", color="k", lw=1.3, label="provisioned")
    t, want = fleets.step_series(fl, "desired")
    ax.step(
        t / fleets.HOUR_S, want, where="post", color="#d62728", lw=1.2, ls="--", label="desired"
    )
    ax.set_ylim(0, max(float(np.nanmax(prov)), float(np.nanmax(want)), 1.0) * 1.15)
    ax.set_ylabel("replicas", fontsize=8)
    ax.legend(fontsize=7, loc="upper left", ncol=5)


def _fleet_cost(ax, fl) -> None:
    """Panel (b) of fig_fleet.png: the cumulative cost of the provisioned replicas (USD)."""
    t, cost = fleets.cost_curve(fl)
    ax.plot(t / fleets.HOUR_S, cost, color="#9467bd", lw=1.3)
    ax.set_ylabel("cumulative cost (USD)", fontsize=8)


def _fleet_hourly(ax, fl) -> None:
    """Panel (c) of fig_fleet.png: the SLO attainment per hour (line with markers, at the
    middle of the part of the hour the run covers) and, on a twin axis, the mean replicas
    provisioned per hour (bars)."""
    start, width = fleets.hour_spans(fl)
    twin = ax.twinx()
    twin.bar(
        start / fleets.HOUR_S,
        fl.hourly["mean_replicas"],
        width=width / fleets.HOUR_S,
        align="edge",
        color="0.6",
        alpha=0.35,
        label="mean replicas",
    )
    twin.set_ylabel("mean replicas (per hour)", fontsize=8)
    twin.set_ylim(bottom=0)
    ax.set_zorder(twin.get_zorder() + 1)  # the attainment line above the bars
    ax.patch.set_visible(False)
    ax.plot(
        (start + width / 2) / fleets.HOUR_S,
        fl.hourly["slo_attainment"],
        marker="o",
        color="#17becf",
        lw=1.3,
        label="SLO attainment",
    )
    ax.set_ylim(0, 1.02)
    ax.set_ylabel("SLO attainment (per hour)", fontsize=8)
    handles = ax.get_legend_handles_labels()[0] + twin.get_legend_handles_labels()[0]
    ax.legend(handles=handles, fontsize=7, loc="lower left")


def fleet_panels(fl) -> list:
    """The panels of the fleet figure that the fleet's files allow, in order: ("replicas",
    "cost") with its table, ("hourly",) with its hourly table."""
    return (["replicas", "cost"] if fl.table is not None else []) + (
        ["hourly"] if fl.hourly is not None else []
    )


def fleet_png(fl) -> Figure | None:
    """The Figure of fig_fleet.png (see draw_fleet); None without a fleet or anything of it
    that could be read."""
    if fl is None or not fleet_panels(fl):
        return None
    panels = fleet_panels(fl)
    fig = Figure(figsize=(13, 2.8 * len(panels) + 0.8), layout="constrained")
    axes = fig.subplots(len(panels), 1, sharex=True, squeeze=False)[:, 0]
    draw_panel = {"replicas": _fleet_replicas, "cost": _fleet_cost, "hourly": _fleet_hourly}
    for ax, name in zip(axes, panels, strict=True):
        draw_panel[name](ax, fl)
        ax.grid(alpha=0.3)
    axes[-1].set_xlabel("simulated time (h)")
    fig.suptitle(fleets.title(fl), fontsize=10)
    return finish(fig)


def draw_fleet(fl, out_dir: Path) -> Path | None:
    """fig_fleet.png: one run's autoscaled fleet against simulated time (hours): (a) its
    serving, cold-starting and draining replicas stacked as steps, provisioned (line) and
    desired (dashed); (b) the provisioned replicas' cumulative cost (USD); (c) the SLO
    attainment per hour with the mean replicas per hour (bars, right axis); the title names
    the run and its totals (replica-hours, cost, cold-start replica-hours). None when the run
    had no autoscaler or neither of its fleet files could be read."""
    fig = fleet_png(fl)
    return None if fig is None else _save(fig, Path(out_dir) / "fig_fleet.png")
