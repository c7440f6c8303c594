"""The report page's answer figures (plotly): the Pareto front of value against P99 latency
per condition, the latency CDFs of the points and one run's timeline. Latencies in ms; an
axis starts logarithmic where its values span more than 1.5 decades, and buttons switch it."""

from __future__ import annotations

import html as html_lib

import numpy as np
import pandas as pd

from servetune.reporting.choose import (
    FRONT_PANELS,
    condition_groups,
    fronts,
    setting_label,
    targets_s,
)
from servetune.reporting.figures import TIMELINE_PANELS, cdf_order
from servetune.reporting.numbers import fmt
from servetune.reporting.stats import LATENCIES
from servetune.reporting.timeline import binned
from servetune.reporting.units import PALETTE, log_scale, title

CDF_LIMIT = 40  # CDF lines on the page (the best settings first)


def _axis_names(n: int) -> list[tuple[str, str]]:
    return [(f"xaxis{'' if i == 1 else i}", f"yaxis{'' if i == 1 else i}")
            for i in range(1, n + 1)]


def _type_buttons(n: int, axis: str, logs: list, x: float) -> dict:
    """Buttons setting the `axis` ("x" or "y") of all n subplots linear or log; the one
    matching every subplot's starting type (`logs`) is shown active (none when they differ)."""
    names = [a if axis == "x" else b for a, b in _axis_names(n)]
    return {"buttons": [{"label": f"{axis} {t}", "method": "relayout",
                         "args": [{f"{a}.type": t for a in names}]} for t in ("linear", "log")],
            "type": "buttons", "direction": "right",
            "active": 1 if all(logs) else 0 if not any(logs) else -1,
            "x": x, "y": 1.0, "yanchor": "bottom", "xanchor": "left", "pad": {"b": 30}}


def _target_trace(x_ms: float, y: list, name: str, show: bool):
    """A dashed vertical line at an SLO target (ms) as a trace: it scales with the axes
    whatever their type, and the legend toggles it."""
    import plotly.graph_objects as go

    return go.Scatter(x=[x_ms, x_ms], y=y, mode="lines", name="SLO targets",
                      legendgroup="slo", showlegend=show, hovertemplate=f"{name} SLO "
                      f"{fmt(x_ms)} ms<extra></extra>", line={"color": "crimson",
                                                              "dash": "dash", "width": 1.5})


def _hover(g: pd.DataFrame, lat: str, val: str) -> list[str]:
    return [f"<b>{html_lib.escape(str(p))}</b><br>{title(lat)}: {fmt(a * 1000.0)}<br>"
            f"{title(val)}: {fmt(b)}<br>SLO attainment: {fmt(c)}"
            for p, a, b, c in zip(g["point"], g[f"{lat}_mean"], g[f"{val}_mean"],
                                  g.get("slo_attainment_mean", pd.Series(np.nan, g.index)))]


def _pareto_condition(fig, g: pd.DataFrame, on: np.ndarray, star: np.ndarray, where: dict,
                      style: dict) -> None:
    """One condition's points, front (staircase, labelled) and best setting in one panel."""
    import plotly.graph_objects as go

    lat, val, labels = style["lat"], style["val"], style["labels"]
    x = g[f"{lat}_mean"].to_numpy(np.float64) * 1000.0
    y = g[f"{val}_mean"].to_numpy(np.float64)
    text = _hover(g, lat, val)
    common = {"legendgroup": style["name"], "hovertemplate": "%{text}<extra></extra>"}
    fig.add_trace(go.Scatter(x=x[~on].tolist(), y=y[~on].tolist(), mode="markers",
                             name=style["name"], showlegend=False, opacity=0.5,
                             text=[t for t, k in zip(text, on) if not k],
                             marker={"color": style["color"], "size": 7}, **common), **where)
    order = np.argsort(x[on])
    fig.add_trace(go.Scatter(x=x[on][order].tolist(), y=y[on][order].tolist(),
                             mode="lines+markers+text", line_shape="hv", name=style["name"],
                             showlegend=style["show"], textposition="top right",
                             text=[[t for t, k in zip(text, on) if k][i] for i in order],
                             texttemplate=[[lb for lb, k in zip(labels, on) if k][i]
                                           for i in order],
                             textfont={"size": 10, "color": style["color"]}, cliponaxis=False,
                             marker={"color": style["color"], "size": 10}, **common), **where)
    if star.any():
        fig.add_trace(go.Scatter(x=x[star].tolist(), y=y[star].tolist(), mode="markers",
                                 name="best setting", showlegend=False,
                                 text=[t for t, k in zip(text, star) if k],
                                 marker={"symbol": "star-open", "size": 18, "color": "black"},
                                 **common), **where)


def pareto_figure(points: pd.DataFrame, conditions: list, settings: list, best: pd.DataFrame):
    """Useful tokens per $ and goodput against P99 TTFT and TPOT (ms): each condition's
    points, its Pareto front as a labelled staircase, its best setting starred, and the SLO
    targets dashed; None when a metric is missing."""
    from plotly.subplots import make_subplots

    if any(f"{m}_mean" not in points for pair in FRONT_PANELS for m in pair):
        return None
    points = points.reset_index(drop=True)
    masks, groups = fronts(points, conditions), condition_groups(points, conditions)
    keys = list(conditions) + list(settings)
    fig = make_subplots(rows=2, cols=2, horizontal_spacing=0.08, vertical_spacing=0.12,
                        subplot_titles=[f"{title(v)} vs {title(lat)}" for lat, v in FRONT_PANELS])
    x_log, y_log = [], []
    for p, (lat, val) in enumerate(FRONT_PANELS):
        where = {"row": p // 2 + 1, "col": p % 2 + 1}
        for k, (cond, g) in enumerate(groups):
            style = {"lat": lat, "val": val, "name": cond, "color": PALETTE[k % len(PALETTE)],
                     "show": p == 0, "labels": [setting_label(r, settings, keys)
                                                for _, r in g.iterrows()]}
            _pareto_condition(fig, g, masks[(lat, val)][g.index.to_numpy()],
                              g["point"].isin(set(best["point"])).to_numpy(), where, style)
        ys = points[f"{val}_mean"].to_numpy(np.float64)
        ys = ys[np.isfinite(ys)]
        target = [t * 1000.0 for t in targets_s(points, f"slo.{lat.split('_')[0]}_s")]
        for t in target:
            span = [float(ys.min()), float(ys.max())] if len(ys) else [0.0, 1.0]
            fig.add_trace(_target_trace(t, span, lat.split("_")[0].upper(), p == 0 and
                                        t == target[0]), **where)
        x_log.append(log_scale(np.concatenate([points[f"{lat}_mean"] * 1000.0, target])))
        fig.update_xaxes(title_text=title(lat), type="log" if x_log[-1] else None, **where)
        y_log.append(log_scale(points[f"{val}_mean"]))
        fig.update_yaxes(title_text=title(val), type="log" if y_log[-1] else None, **where)
    fig.update_layout(height=820, template="plotly_white", margin={"t": 100},
                      legend={"groupclick": "togglegroup", "title": {"text": "condition"}},
                      updatemenus=[_type_buttons(4, "x", x_log, 0.0),
                                   _type_buttons(4, "y", y_log, 0.25)])
    return fig


def cdf_figure(points: pd.DataFrame, cdfs: dict, best: pd.DataFrame):
    """The empirical CDFs of TTFT, TPOT and E2E (ms) of each point (all seeds pooled), one
    legend entry per point (the best settings first, at most CDF_LIMIT), SLO targets dashed;
    None when no point has a CDF."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    shown = cdf_order(points, best, cdfs, CDF_LIMIT)
    if not shown:
        return None
    fig = make_subplots(rows=1, cols=3, horizontal_spacing=0.06,
                        subplot_titles=[f"{lat.upper()} (ms)" for lat in LATENCIES])
    logs = []
    for c, lat in enumerate(LATENCIES, start=1):
        for k, p in enumerate(shown):
            cdf = cdfs[p][lat]
            if cdf.n:
                fig.add_trace(go.Scatter(
                    x=cdf.x_ms.tolist(), y=cdf.p.tolist(), mode="lines", line_shape="hv",
                    name=p, legendgroup=p, showlegend=c == 1,
                    line={"color": PALETTE[k % len(PALETTE)], "width": 1.5},
                    hovertemplate=f"{html_lib.escape(p)}<br>%{{x:.4g}} ms: %{{y:.4f}} of "
                                  f"{cdf.n} requests<extra></extra>"), row=1, col=c)
        values = [cdfs[p][lat].x_ms for p in shown if cdfs[p][lat].n]
        target = [t * 1000.0 for t in targets_s(points, f"slo.{lat}_s")]
        for t in target:
            fig.add_trace(_target_trace(t, [0.0, 1.0], lat.upper(), False), row=1, col=c)
        logs.append(bool(values) and log_scale(np.concatenate(values + [np.asarray(target)])))
        fig.update_xaxes(title_text=f"{lat.upper()} (ms)", type="log" if logs[-1] else None,
                         row=1, col=c)
        fig.update_yaxes(range=[0, 1.02], title_text="fraction at or below" if c == 1 else None,
                         row=1, col=c)
    fig.update_layout(height=500, template="plotly_white", margin={"t": 110},
                      legend={"title": {"text": "point"}},
                      updatemenus=[_type_buttons(3, "x", logs, 0.0)])
    return fig


def timeline_figure(tl):
    """One run's waiting and running requests, batch tokens, KV blocks in use and cumulative
    preemptions over simulated time (s), one colour per instance; None without a table."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    if tl is None or tl.table is None:
        return None
    data, width = binned(tl.table)
    fig = make_subplots(rows=4, cols=1, shared_xaxes=True, vertical_spacing=0.04,
                        subplot_titles=[" / ".join(n for _, n in panel)
                                        for panel in TIMELINE_PANELS])
    for r, panel in enumerate(TIMELINE_PANELS, start=1):
        for k, (inst, g) in enumerate(data.groupby("instance", sort=True)):
            for (col, name), dash in zip(panel, ("solid", "dot")):
                fig.add_trace(go.Scatter(
                    x=g["t_s"].tolist(), y=g[col].tolist(), mode="lines", line_shape="hv",
                    name=f"instance {inst}", legendgroup=f"instance {inst}",
                    showlegend=r == 1 and dash == "solid",
                    line={"color": PALETTE[k % len(PALETTE)], "dash": dash, "width": 1.3},
                    hovertemplate=f"instance {inst} {name}: %{{y}} at %{{x:.4g}} s"
                                  f"<extra></extra>"), row=r, col=1)
    fig.update_xaxes(title_text="simulated time (s)", row=4, col=1)
    note = f"; maximum per {width:.3g} s bin" if width else ""
    fig.update_layout(height=900, template="plotly_white", margin={"t": 80},
                      title={"text": f"run {html_lib.escape(tl.run)}, scenario {tl.scenario} "
                                     f"({html_lib.escape(tl.why)}){note}", "font": {"size": 13}},
                      legend={"groupclick": "togglegroup"})
    return fig
