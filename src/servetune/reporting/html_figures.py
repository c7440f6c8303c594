"""The report page's answer figures (plotly): the Pareto front of value against P99 latency
per condition, the latency CDFs of the points, one run's timeline and its autoscaled fleet.
Latencies in ms; an
axis starts logarithmic where its values span more than 1.5 decades, and buttons switch it."""

from __future__ import annotations

import html as html_lib

import numpy as np
import pandas as pd

from servetune.reporting import fleet as fleets
from servetune.reporting.choose import (
    FRONT_PANELS,
    best_points,
    condition_groups,
    fronts,
    targets_s,
)
from servetune.reporting.figures import (
    FLEET_STATES,
    TIMELINE_PANELS,
    cdf_groups,
    dash,
    fleet_panels,
    style_names,
)
from servetune.reporting.labels import PLOTLY_POSITIONS, front_labels, place
from servetune.reporting.latency import thin
from servetune.reporting.numbers import fmt
from servetune.reporting.stats import LATENCIES
from servetune.reporting.ticks import axis_type_args, fit_range, plotly_log_ticks
from servetune.reporting.timeline import binned, steps
from servetune.reporting.units import PALETTE, log_scale, near, title

CDF_LIMIT = 40  # CDF lines on the page (the best settings first)
CDF_STEPS = 150  # steps per CDF line on the page (latency.thin; the PNG keeps MAX_STEPS)
HTML_BINS = 800  # timeline samples per instance on the page (the PNG keeps timeline.MAX_BINS)
# the estimate of a front panel's geometry on the page that its labels are placed apart in
PANEL_PX = (460.0, 280.0)  # plot area (pixels) of one of the four panels, about
LABEL_PX = 10  # label font size (pixels)
CHAR_PX, LINE_PX, GAP_PX = 6.0, 13.0, 6.0  # a label's width per character, its height, and
#   how far from its point plotly draws it


def _axis_names(n: int) -> list[tuple[str, str]]:
    return [(f"xaxis{'' if i == 1 else i}", f"yaxis{'' if i == 1 else i}") for i in range(1, n + 1)]


def _type_buttons(axis: str, logs: list, ticks: list, x: float, ranges: list | None = None) -> dict:
    """Buttons setting the `axis` ("x" or "y") of every subplot linear or log (log with its
    1-2-5 `ticks`, one dict per subplot: ticks.plotly_log_ticks, autoranged); linear with
    the subplot's range in `ranges` (None: autoranged); the one matching every subplot's
    starting type (`logs`) is shown active (none when they differ)."""
    names = [a if axis == "x" else b for a, b in _axis_names(len(logs))]
    ranges = ranges or [None] * len(logs)

    def args(kind: str) -> dict:
        out: dict = {}
        for a, t, r in zip(names, ticks, ranges, strict=True):
            out.update(axis_type_args(a, kind, t, linear_range=r))
        return out

    return {
        "buttons": [
            {"label": f"{axis} {t}", "method": "relayout", "args": [args(t)]}
            for t in ("linear", "log")
        ],
        "type": "buttons",
        "direction": "right",
        "active": 1 if all(logs) else 0 if not any(logs) else -1,
        "x": x,
        "y": 1.0,
        "yanchor": "bottom",
        "xanchor": "left",
        "pad": {"b": 30},
    }


def axis_style(values, log: bool) -> dict:
    """The plotly axis settings of an axis over `values` (its data, in its unit): plain
    number labels (no "k" or exponent); where it starts logarithmic, type log with ticks at
    1-2-5 steps (ticks.plotly_log_ticks); else, where the values do not spread (one point),
    a range of +- 5% around them (ticks.fit_range) rather than plotly's +- 1."""
    out = {"exponentformat": "none", "type": "log" if log else None}
    if log:
        return {**out, **plotly_log_ticks(values)}
    span = fit_range(values)
    return out if span is None else {**out, "range": list(span)}


def _target_trace(x_ms: float, y: list, name: str, show: bool):
    """A dashed vertical line at an SLO target (ms) as a trace: it scales with the axes
    whatever their type, and the legend toggles it."""
    import plotly.graph_objects as go

    return go.Scatter(
        x=[x_ms, x_ms],
        y=y,
        mode="lines",
        name="SLO targets",
        legendgroup="slo",
        showlegend=show,
        hovertemplate=f"{name} SLO {fmt(x_ms)} ms<extra></extra>",
        line={"color": "crimson", "dash": "dash", "width": 1.5},
    )


def add_targets(fig, targets: list, data, name: str, where: tuple, y: list, show: bool) -> None:
    """The SLO targets (ms) of a subplot's latency x axis over `data` (ms), `where` = (its
    index from 0, row, col): those near the data (units.near) as dashed lines from y[0] to
    y[1] (the first in the legend when `show`), those far from it named at the axis' edge
    with an arrow towards them (bottom right for a target above the data, top left below
    it), so that the axis fits the data."""
    values = np.asarray(data, np.float64).ravel()
    values = values[np.isfinite(values)]
    index, row, col = where
    ref = "x" if index == 0 else f"x{index + 1}"
    first = True
    for t in targets:
        if near(t, values):
            fig.add_trace(_target_trace(t, y, name, show and first), row=row, col=col)
            first = False
            continue
        above = not len(values) or t > values.max()
        fig.add_annotation(
            text=f"{name} SLO {fmt(t)} ms \u2192" if above else f"\u2190 {name} SLO {fmt(t)} ms",
            xref=f"{ref} domain",
            yref=f"{ref.replace('x', 'y')} domain",
            x=1.0 if above else 0.0,
            y=0.0 if above else 1.0,
            xanchor="right" if above else "left",
            yanchor="bottom" if above else "top",
            showarrow=False,
            font={"size": 10, "color": "crimson"},
        )


def _hover(g: pd.DataFrame, lat: str, val: str) -> list[str]:
    return [
        f"<b>{html_lib.escape(str(p))}</b><br>{title(lat)}: {fmt(a * 1000.0)}<br>"
        f"{title(val)}: {fmt(b)}<br>SLO attainment: {fmt(c)}"
        for p, a, b, c in zip(
            g["point"],
            g[f"{lat}_mean"],
            g[f"{val}_mean"],
            g.get("slo_attainment_mean", pd.Series(np.nan, g.index)),
            strict=True,
        )
    ]


def _pareto_condition(
    fig, g: pd.DataFrame, on: np.ndarray, star: np.ndarray, where: dict, style: dict
) -> None:
    """One condition's points, front (staircase, labelled: style["labels"] maps a position
    in g to its label and text position) and best setting in one panel."""
    import plotly.graph_objects as go

    lat, val, labels = style["lat"], style["val"], style["labels"]
    x = g[f"{lat}_mean"].to_numpy(np.float64) * 1000.0
    y = g[f"{val}_mean"].to_numpy(np.float64)
    text = _hover(g, lat, val)
    common = {"legendgroup": style["name"], "hovertemplate": "%{text}<extra></extra>"}
    fig.add_trace(
        go.Scatter(
            x=x[~on].tolist(),
            y=y[~on].tolist(),
            mode="markers",
            name=style["name"],
            showlegend=False,
            opacity=0.5,
            text=[t for t, k in zip(text, on, strict=True) if not k],
            marker={"color": style["color"], "size": 7},
            **common,
        ),
        **where,
    )
    front = np.flatnonzero(on)[np.argsort(x[on], kind="stable")]
    fig.add_trace(
        go.Scatter(
            x=x[front].tolist(),
            y=y[front].tolist(),
            mode="lines+markers+text",
            line_shape="hv",
            name=style["name"],
            showlegend=style["show"],
            text=[text[i] for i in front],
            texttemplate=[labels.get(i, ("", ""))[0] for i in front],
            textposition=[labels.get(i, ("", "top right"))[1] for i in front],
            textfont={"size": LABEL_PX, "color": style["color"]},
            cliponaxis=False,
            marker={"color": style["color"], "size": 10},
            **common,
        ),
        **where,
    )
    if star.any():
        fig.add_trace(
            go.Scatter(
                x=x[star].tolist(),
                y=y[star].tolist(),
                mode="markers",
                name="best setting",
                showlegend=False,
                text=[t for t, k in zip(text, star, strict=True) if k],
                marker={"symbol": "star-open", "size": 18, "color": "black"},
                **common,
            ),
            **where,
        )


def _pixels(v, values, log: bool, size: float) -> np.ndarray:
    """Where values `v` fall on an axis of `size` pixels autoranged over `values` (their
    span padded 5% each way, as plotly pads), in log10 on a log axis."""
    f = np.log10 if log else np.asarray
    with np.errstate(divide="ignore", invalid="ignore"):
        a, w = f(np.asarray(values, np.float64)), f(np.asarray(v, np.float64))
    a = a[np.isfinite(a)]
    lo, hi = (a.min(), a.max()) if len(a) else (0.0, 1.0)
    pad = 0.05 * ((hi - lo) or 1.0)
    return (w - lo + pad) / (hi - lo + 2 * pad) * size


def front_places(found: list, axes_values: tuple, logs: tuple) -> list[dict]:
    """For each condition's front labels `found` [[(position, label, x, y)]] in one panel,
    {position: (label, plotly textposition)}: labels.place over an estimate of where plotly
    draws them (a panel of PANEL_PX pixels autoranged over `axes_values` (xs, ys) with axis
    types `logs`; CHAR_PX per character, LINE_PX high). A label with no free place is left
    out (its point's hover names the setting)."""
    flat = [item for labels in found for item in labels]
    px = _pixels([x for _, _, x, _ in flat], axes_values[0], logs[0], PANEL_PX[0])
    py = _pixels([y for _, _, _, y in flat], axes_values[1], logs[1], PANEL_PX[1])
    sizes = [(CHAR_PX * len(text), LINE_PX) for _, text, _, _ in flat]
    room = (-20.0, -LINE_PX, PANEL_PX[0] + 40.0, PANEL_PX[1] + LINE_PX)  # margins too
    spots = iter(place(px, py, sizes, GAP_PX, bounds=room))
    placed = [[(i, text, next(spots)[0]) for i, text, _, _ in labels] for labels in found]
    return [
        {i: (text, PLOTLY_POSITIONS[p]) for i, text, p in labels if p is not None}
        for labels in placed
    ]


def _front_panel(fig, points: pd.DataFrame, p: int, best: pd.DataFrame, parts: tuple) -> list:
    """Front panel p (FRONT_PANELS[p]): each condition's points and labelled front, the SLO
    targets (near the points dashed, else named at the edge: add_targets); returns [(values,
    log, linear range or None)] of its x and y axes."""
    (lat, val), (groups, masks, label_keys) = FRONT_PANELS[p], parts
    where = {"row": p // 2 + 1, "col": p % 2 + 1}
    xs = points[f"{lat}_mean"].to_numpy(np.float64) * 1000.0
    target = [t * 1000.0 for t in targets_s(points, f"slo.{lat.split('_')[0]}_s")]
    shown = [t for t in target if near(t, xs)]  # drawn inside the axis: it autoranges over them
    axes = [np.concatenate([xs, shown]), points[f"{val}_mean"].to_numpy(np.float64)]
    logs = (log_scale(xs), log_scale(axes[1]))
    starred = best_points(best)
    found, ons = [], []
    for _, g in groups:
        x = g[f"{lat}_mean"].to_numpy(np.float64) * 1000.0
        y = g[f"{val}_mean"].to_numpy(np.float64)
        on = masks[(lat, val)][g.index.to_numpy()]
        found.append([(i, text, x[i], y[i]) for i, text in front_labels(g, x, y, on, label_keys)])
        ons.append(on)
    for k, ((cond, g), labels) in enumerate(
        zip(groups, front_places(found, axes, logs), strict=True)
    ):
        style = {
            "lat": lat,
            "val": val,
            "name": cond,
            "color": PALETTE[k % len(PALETTE)],
            "show": p == 0,
            "labels": labels,
        }
        _pareto_condition(fig, g, ons[k], g["point"].isin(starred).to_numpy(), where, style)
    ys = axes[1][np.isfinite(axes[1])]
    span = [float(ys.min()), float(ys.max())] if len(ys) else [0.0, 1.0]
    add_targets(fig, target, xs, lat.split("_")[0].upper(), (p, *where.values()), span, p == 0)
    styles = [axis_style(axes[0], logs[0]), axis_style(axes[1], logs[1])]
    fig.update_xaxes(title_text=title(lat), **styles[0], **where)
    fig.update_yaxes(title_text=title(val), **styles[1], **where)
    return [(v, log, st.get("range")) for v, log, st in zip(axes, logs, styles, strict=True)]


def pareto_figure(points: pd.DataFrame, conditions: list, settings: list, best: pd.DataFrame):
    """Useful tokens per $ and goodput against P99 TTFT and TPOT (ms): each condition's
    points, its Pareto front as a staircase labelled by setting (settings whose points
    coincide share a label; labels placed apart), its best setting (and those tied with it)
    starred, and the SLO targets dashed (or, far from the points, named at the axis' edge);
    log axes tick at 1-2-5 steps; one point's axes span +- 5% of it. None when a metric is
    missing."""
    from plotly.subplots import make_subplots

    if any(f"{m}_mean" not in points for pair in FRONT_PANELS for m in pair):
        return None
    points = points.reset_index(drop=True)
    parts = (
        condition_groups(points, conditions),
        fronts(points, conditions),
        list(settings) or list(conditions),
    )
    fig = make_subplots(
        rows=2,
        cols=2,
        horizontal_spacing=0.08,
        vertical_spacing=0.12,
        subplot_titles=[f"{title(v)} vs {title(lat)}" for lat, v in FRONT_PANELS],
    )
    panels = [_front_panel(fig, points, p, best, parts) for p in range(len(FRONT_PANELS))]
    menus = [
        _type_buttons(
            a,
            [pn[i][1] for pn in panels],
            [plotly_log_ticks(pn[i][0]) for pn in panels],
            x,
            [pn[i][2] for pn in panels],
        )
        for i, (a, x) in enumerate((("x", 0.0), ("y", 0.25)))
    ]
    fig.update_layout(
        height=820,
        template="plotly_white",
        margin={"t": 100},
        legend={"groupclick": "togglegroup", "title": {"text": "condition"}},
        updatemenus=menus,
    )
    return fig


def cdf_figure(points: pd.DataFrame, cdfs: dict, best: pd.DataFrame, keys: list | None = None):
    """The empirical CDFs of TTFT, TPOT and E2E (ms) of each point (all seeds pooled; at
    most CDF_STEPS steps a line), one legend entry per line (points whose CDFs are the same
    as one, named together: figures.cdf_groups; the best settings first, at most CDF_LIMIT),
    SLO targets dashed near the data, named at the axis' edge far from it; an axis fits its
    data, log where it spans 1.5 decades (1-2-5 ticks). None when no point has a CDF."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    shown = cdf_groups(points, best, cdfs, CDF_LIMIT, keys)
    if not shown:
        return None
    fig = make_subplots(
        rows=1,
        cols=3,
        horizontal_spacing=0.06,
        subplot_titles=[f"{lat.upper()} (ms)" for lat in LATENCIES],
    )
    logs, ticks, ranges = [], [], []
    for c, lat in enumerate(LATENCIES, start=1):
        for k, (label, _, cdf_of) in enumerate(shown):
            cdf = thin(cdf_of[lat], CDF_STEPS)
            if cdf.n:
                fig.add_trace(
                    go.Scatter(
                        x=cdf.x_ms.astype(np.float32),
                        y=cdf.p.astype(np.float32),
                        mode="lines",
                        line_shape="hv",
                        name=label,
                        legendgroup=label,
                        showlegend=c == 1,
                        line={"color": PALETTE[k % len(PALETTE)], "width": 1.5},
                        hovertemplate=f"{html_lib.escape(label)}<br>%{{x:.4g}} ms: "
                        f"%{{y:.4f}} of {cdf.n} requests<extra></extra>",
                    ),
                    row=1,
                    col=c,
                )
        target = [t * 1000.0 for t in targets_s(points, f"slo.{lat}_s")]
        data = np.concatenate([cdf_of[lat].x_ms for _, _, cdf_of in shown])
        add_targets(fig, target, data, lat.upper(), (c - 1, 1, c), [0.0, 1.0], False)
        values = np.concatenate([data, [t for t in target if near(t, data)]])
        logs.append(log_scale(data))
        ticks.append(plotly_log_ticks(values))
        style = axis_style(values, logs[-1])
        ranges.append(style.get("range"))
        fig.update_xaxes(title_text=f"{lat.upper()} (ms)", **style, row=1, col=c)
        fig.update_yaxes(
            range=[0, 1.02], title_text="fraction at or below" if c == 1 else None, row=1, col=c
        )
    fig.update_layout(
        height=500,
        template="plotly_white",
        margin={"t": 110},
        legend={"title": {"text": "point"}},
        updatemenus=[_type_buttons("x", logs, ticks, 0.0, ranges)],
    )
    return fig


def _style_keys(fig) -> None:
    """Legend entries naming the line styles of the timeline's first panel ("waiting
    (dotted)", "running (solid)"): lines with no data, in grey."""
    import plotly.graph_objects as go

    for name, d in style_names():
        fig.add_trace(
            go.Scatter(
                x=[None],
                y=[None],
                mode="lines",
                name=name,
                legendgroup="line styles",
                legendgrouptitle_text="line style",
                line={"color": "#555", "dash": d, "width": 1.5},
                hoverinfo="skip",
            ),
            row=1,
            col=1,
        )


def timeline_figure(tl):
    """One run's waiting (dotted) and running (solid) requests, batch tokens, KV blocks in use
    and cumulative preemptions over simulated time (s), one colour per instance, the legend
    naming the instances and the line styles; at most HTML_BINS samples per instance (the
    maximum per bin: timeline.binned), each line's unchanged steps left out. None without a
    table."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    if tl is None or tl.table is None:
        return None
    data, width = binned(tl.table, HTML_BINS)
    fig = make_subplots(
        rows=4,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.04,
        subplot_titles=[" / ".join(n for _, n in panel) for panel in TIMELINE_PANELS],
    )
    for r, panel in enumerate(TIMELINE_PANELS, start=1):
        for k, (inst, g) in enumerate(data.groupby("instance", sort=True)):
            for col, name in panel:  # the instance's legend entry: its solid line
                t, v = steps(g["t_s"].to_numpy(np.float32), g[col].to_numpy())
                fig.add_trace(
                    go.Scatter(
                        x=t,
                        y=v,
                        mode="lines",
                        line_shape="hv",
                        name=f"instance {inst}",
                        legendgroup=f"instance {inst}",
                        showlegend=r == 1 and dash(col) == "solid",
                        line={"color": PALETTE[k % len(PALETTE)], "dash": dash(col), "width": 1.3},
                        hovertemplate=f"instance {inst} {name}: %{{y}} at %{{x:.4g}} s"
                        f"<extra></extra>",
                    ),
                    row=r,
                    col=1,
                )
    _style_keys(fig)
    fig.update_xaxes(title_text="simulated time (s)", row=4, col=1)
    note = f"; maximum per {width:.3g} s bin" if width else ""
    fig.update_layout(
        height=900,
        template="plotly_white",
        margin={"t": 80},
        title={
            "text": f"Timeline of run {html_lib.escape(tl.name)}, scenario {tl.scenario} "
            f"({html_lib.escape(tl.why)}){note}",
            "font": {"size": 13},
        },
        legend={"groupclick": "togglegroup"},
    )
    return fig


def _changes(v: np.ndarray) -> np.ndarray:
    """Which points of a step line (each value held until the next) to keep: the first,
    every change and the last (timeline.steps' rule, as a mask)."""
    keep = np.ones(len(v), bool)
    keep[1:-1] = v[1:-1] != v[:-2]
    return keep


def _fleet_replicas(fig, fl, row: int) -> None:
    """The replicas panel: serving, cold-starting and draining stacked as steps,
    provisioned as a line, desired dashed, against hours (h); unchanged steps left out."""
    import plotly.graph_objects as go

    states = [fleets.step_series(fl, col) for col, _, _ in FLEET_STATES]
    # stacked lines share their points: those where any of the states changes
    hold = np.any([_changes(v) for _, v in states], axis=0)
    for (t, v), (_, name, colour) in zip(states, FLEET_STATES, strict=True):
        fig.add_trace(
            go.Scatter(
                x=t[hold] / fleets.HOUR_S,
                y=v[hold],
                mode="lines",
                line_shape="hv",
                stackgroup="replicas",
                name=name,
                line={"color": colour, "width": 0.5},
                hovertemplate=f"{name}: %{{y}} at %{{x:.4g}} h<extra></extra>",
            ),
            row=row,
            col=1,
        )
    for col, colour, d in (("provisioned", "#222", "solid"), ("desired", "#d62728", "dash")):
        t, v = fleets.step_series(fl, col)
        hold = _changes(v)
        fig.add_trace(
            go.Scatter(
                x=t[hold] / fleets.HOUR_S,
                y=v[hold],
                mode="lines",
                line_shape="hv",
                name=col,
                line={"color": colour, "dash": d, "width": 1.5},
                hovertemplate=f"{col}: %{{y}} at %{{x:.4g}} h<extra></extra>",
            ),
            row=row,
            col=1,
        )
    fig.update_yaxes(title_text="replicas", rangemode="tozero", row=row, col=1)


def _fleet_cost(fig, fl, row: int) -> None:
    """The cost panel: the provisioned replicas' cumulative cost (USD), its points where
    the slope (the provisioned count) changes."""
    import plotly.graph_objects as go

    t, cost = fleets.cost_curve(fl)
    prov = fl.table["provisioned"].to_numpy(np.float64)
    knots = _changes(np.append(prov, prov[-1])[: len(t)])
    fig.add_trace(
        go.Scatter(
            x=t[knots] / fleets.HOUR_S,
            y=cost[knots],
            mode="lines",
            name="cumulative cost",
            line={"color": "#9467bd", "width": 1.5},
            hovertemplate="cost: %{y:.4g} USD at %{x:.4g} h<extra></extra>",
        ),
        row=row,
        col=1,
    )
    fig.update_yaxes(title_text="cumulative cost (USD)", rangemode="tozero", row=row, col=1)


def _fleet_hourly(fig, fl, row: int) -> None:
    """The hourly panel: the SLO attainment per hour (line with markers, at the middle of
    the part of the hour the run covers) and the mean replicas provisioned per hour (grey
    steps, right axis)."""
    import plotly.graph_objects as go

    start, width = fleets.hour_spans(fl)
    mean = fl.hourly["mean_replicas"].to_numpy(np.float64)
    fig.add_trace(
        go.Scatter(
            x=np.append(start, start[-1] + width[-1]) / fleets.HOUR_S,
            y=np.append(mean, mean[-1]),
            mode="lines",
            line_shape="hv",
            fill="tozeroy",
            name="mean replicas (per hour)",
            line={"color": "#999", "width": 1},
            hovertemplate="mean replicas: %{y:.4g} from %{x:.4g} h<extra></extra>",
        ),
        row=row,
        col=1,
        secondary_y=True,
    )
    fig.add_trace(
        go.Scatter(
            x=(start + width / 2) / fleets.HOUR_S,
            y=fl.hourly["slo_attainment"].to_numpy(np.float64),
            mode="lines+markers",
            name="SLO attainment (per hour)",
            line={"color": "#17becf", "width": 1.5},
            cliponaxis=False,  # an attainment of 1.0 under the top of 1.02 stays whole
            hovertemplate="SLO attainment: %{y:.4g} in the hour at %{x:.4g} h<extra></extra>",
        ),
        row=row,
        col=1,
        secondary_y=False,
    )
    # (secondary_y=False: without it the range would hold the replicas' axis to [0, 1.02] too)
    fig.update_yaxes(
        title_text="SLO attainment", range=[0, 1.02], row=row, col=1, secondary_y=False
    )
    fig.update_yaxes(
        title_text="mean replicas",
        rangemode="tozero",
        tickmode="auto",  # its own round ticks (1, 1.5), not the left axis' grid (0.35, 0.701)
        showgrid=False,
        row=row,
        col=1,
        secondary_y=True,
    )


def fleet_figure(fl):
    """One run's autoscaled fleet against simulated time (hours), as fig_fleet.png draws it:
    its serving, cold-starting and draining replicas stacked as steps with provisioned
    (line) and desired (dashed); the cumulative cost (USD); the SLO attainment per hour with
    the mean replicas per hour (right axis). Panels of a file that could not be read are
    left out; None without a fleet or with neither file read."""
    from plotly.subplots import make_subplots

    panels = fleet_panels(fl) if fl is not None else []
    if not panels:
        return None
    names = {
        "replicas": "replicas (serving, cold-starting and draining stacked)",
        "cost": "cumulative cost (USD)",
        "hourly": "SLO attainment and mean replicas per hour",
    }
    fig = make_subplots(
        rows=len(panels),
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.08,
        subplot_titles=[names[p] for p in panels],
        specs=[[{"secondary_y": p == "hourly"}] for p in panels],
    )
    draw = {"replicas": _fleet_replicas, "cost": _fleet_cost, "hourly": _fleet_hourly}
    for row, name in enumerate(panels, start=1):
        draw[name](fig, fl, row)
    fig.update_xaxes(title_text="simulated time (h)", row=len(panels), col=1)
    fig.update_layout(
        height=260 * len(panels) + 120,
        template="plotly_white",
        margin={"t": 90},
        title={"text": html_lib.escape(fleets.title(fl)), "font": {"size": 13}},
        hovermode="x unified",
    )
    return fig
