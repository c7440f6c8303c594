"""PNG figures (matplotlib): for each point key, the headline metrics against it, one line per
combination of the other keys (error bars +- std over seeds; the shaded band, or the pale bar
where a line has one point, the bootstrap confidence interval of the mean over seeds); the
Pareto front of value against P99 latency (fig_pareto.png), the latency CDFs of the points
(fig_latency_cdf.png), one run's timeline (fig_timeline.png) and its autoscaled fleet
(fig_fleet.png). Latencies are drawn in ms;
an axis is logarithmic where its positive values span more than 1.5 decades (units.log_scale),
with ticks at 1-2-5 steps labelled as plain numbers, and no axis has an offset (ticks.py).
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
from servetune.reporting.choose import FRONT_PANELS, condition_groups, fronts, targets_s
from servetune.reporting.labels import front_labels, place
from servetune.reporting.numbers import fmt
from servetune.reporting.stats import LATENCIES, LEVEL, series
from servetune.reporting.ticks import no_offsets, set_log
from servetune.reporting.timeline import binned
from servetune.reporting.units import log_scale, scale, title

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
    else:
        ax.set_xticks(range(len(cats)), cats, rotation=20 if len(cats) > 4 else 0, fontsize=8)
        ax.set_xlim(-0.5, len(cats) - 0.5)


def _save(fig: Figure, path: Path) -> Path:
    no_offsets(fig)
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
                xv = np.array([cats.index(category(v)) for v in g[x]], np.float64) + offset
            for ax, (metric, _) in zip(axes, PANELS, strict=True):
                if f"{metric}_mean" in g:
                    _panel(ax, g, xv, metric, f"C{k % 10}", numeric, label)
        for ax, (metric, name) in zip(axes, PANELS, strict=True):
            ax.set_title(name, fontsize=10)
            ax.grid(alpha=0.3)
            _x_ticks(ax, points, x, numeric, cats)
            if f"{metric}_mean" in points and _y_log(points, metric):
                set_log(ax, "y")
            if metric == "slo_attainment":
                ax.set_ylim(top=1.02)
        if any(label for label, _ in lines):
            axes[0].legend(fontsize=7, loc="best")
        n = sorted(set(points["n"])) if "n" in points else [1]
        seeds = f"{n[0]}" if len(n) == 1 else f"{n[0]}-{n[-1]}"
        fig.suptitle(
            f"{x}: mean over {seeds} seed(s) per point; bars +- std, shaded "
            f"{LEVEL:.0%} bootstrap CI",
            fontsize=11,
        )
        paths.append(_save(fig, out_dir / f"fig_{_safe(x)}.png"))
    return paths


def _target_line(ax, target_ms: list, label: str) -> None:
    """Dashed vertical lines at the SLO targets (ms), the axis widened to show them."""
    for t in target_ms:
        ax.axvline(t, ls="--", color="crimson", lw=1)
        ax.annotate(
            f"{label} SLO {fmt(t)} ms",
            (t, 1.0),
            xycoords=("data", "axes fraction"),
            rotation=90,
            va="top",
            ha="right",
            fontsize=7,
            color="crimson",
        )
    if target_ms:
        lo, hi = ax.get_xlim()
        ax.set_xlim(min(lo, min(target_ms) / 1.15), max(hi, max(target_ms) * 1.15))


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
    starred; returns the front labels to place [(x ms, y, text, colour)]."""
    (lat, val), (groups, masks, label_keys) = panel, fronts_of
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
        star = g["point"].isin(set(best["point"])).to_numpy()
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
    """A front panel's scales (log where the values span 1.5 decades), SLO targets, titles."""
    xs = points[f"{lat}_mean"].to_numpy(np.float64) * 1000.0
    target = [t * 1000.0 for t in targets_s(points, f"slo.{lat.split('_')[0]}_s")]
    if log_scale(np.concatenate([xs, target])):
        set_log(ax, "x")
    if log_scale(points[f"{val}_mean"]):
        set_log(ax, "y")
    _target_line(ax, target, lat.split("_")[0].upper())
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
        "useful tokens per $); dashed: the SLO targets",
        fontsize=10,
    )
    fig.draw_without_rendering()  # the layout and limits the labels are placed in
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


def draw_cdfs(
    points: pd.DataFrame, cdfs: dict, best: pd.DataFrame, out_dir: Path, limit: int = 12
) -> Path | None:
    """fig_latency_cdf.png: the empirical CDF of TTFT, TPOT and E2E (ms) over each point's
    requests (all seeds), one line per point (at most `limit`: the best settings first), the
    SLO targets dashed. None when no point has a readable requests.parquet."""
    shown = cdf_order(points, best, cdfs, limit)
    if not shown:
        return None
    fig = Figure(figsize=(14, 5.2 + 0.2 * ((len(shown) + 2) // 3)), layout="constrained")
    for ax, lat in zip(fig.subplots(1, 3), LATENCIES, strict=True):
        values = [cdfs[p][lat].x_ms for p in shown if cdfs[p][lat].n]
        for k, p in enumerate(shown):
            c = cdfs[p][lat]
            if c.n:
                ax.step(
                    c.x_ms, c.p, where="post", color=f"C{k % 10}", lw=1.2, label=f"{p} (n={c.n})"
                )
        if values and log_scale(np.concatenate(values)):
            set_log(ax, "x")
        _target_line(ax, [t * 1000.0 for t in targets_s(points, f"slo.{lat}_s")], lat.upper())
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
    more = f" ({len(shown)} of {len(cdfs)} points)" if len(cdfs) > len(shown) else ""
    fig.suptitle(
        f"Latency CDFs over the counted, completed requests of all seeds{more}", fontsize=10
    )
    return _save(fig, Path(out_dir) / "fig_latency_cdf.png")


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
    return fig


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
    return fig


def draw_fleet(fl, out_dir: Path) -> Path | None:
    """fig_fleet.png: one run's autoscaled fleet against simulated time (hours): (a) its
    serving, cold-starting and draining replicas stacked as steps, provisioned (line) and
    desired (dashed); (b) the provisioned replicas' cumulative cost (USD); (c) the SLO
    attainment per hour with the mean replicas per hour (bars, right axis); the title names
    the run and its totals (replica-hours, cost, cold-start replica-hours). None when the run
    had no autoscaler or neither of its fleet files could be read."""
    fig = fleet_png(fl)
    return None if fig is None else _save(fig, Path(out_dir) / "fig_fleet.png")
