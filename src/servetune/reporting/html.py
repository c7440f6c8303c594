"""One self-contained interactive HTML page (plotly, with plotly.js inlined so it works offline):
for each point key, the headline metrics against it with error bars (+- std over seeds) and
bootstrap bands; hover for values, click the legend to toggle a series, buttons to switch the
latency panels between mean, P50, P90 and P99, and linear or log axes. The tables and the data
(runs and points as JSON) are in the page too."""

from __future__ import annotations

import html as html_lib
import math

import numpy as np
import pandas as pd

from servetune.reporting.figures import log_scale, x_axis
from servetune.reporting.numbers import fmt
from servetune.reporting.stats import LEVEL, series

TOP = (("goodput_rps", "goodput (req/s)"), ("slo_attainment", "SLO attainment"),
       ("useful_tokens_per_dollar", "useful tokens per $"))
LAT = (("ttft", "TTFT"), ("tpot", "TPOT"), ("e2e", "E2E"))
STAT_NAMES = {"mean": "mean", "p50": "P50", "p90": "P90", "p99": "P99"}
HOVER = "%{text}<extra>%{fullData.name}</extra>"


def _arr(g: pd.DataFrame, col: str) -> np.ndarray:
    return g[col].to_numpy(np.float64) if col in g else np.full(len(g), np.nan)


def _none(values) -> list:
    """JSON-safe list: NaN and inf become None (gaps)."""
    return [None if not math.isfinite(v) else float(v) for v in np.asarray(values, np.float64)]


def _num(v: float, digits: int = 4) -> str:
    return f"{v:.{digits}g}" if math.isfinite(v) else "-"


def _main(g: pd.DataFrame, metric: str, xs: list) -> dict:
    mean, std = _arr(g, f"{metric}_mean"), _arr(g, f"{metric}_std")
    lo, hi, n = _arr(g, f"{metric}_ci_lo"), _arr(g, f"{metric}_ci_hi"), _arr(g, "n")
    text = []
    for label, m, s, a, b, k in zip(g["point"], mean, std, lo, hi, n):
        line = f"<b>{html_lib.escape(str(label))}</b><br>{metric}: {_num(m)}"
        line += f" ± {_num(s, 3)} (std over {int(k)} seeds)" if math.isfinite(s) else \
            f" ({int(k)} seed)"
        if math.isfinite(a) and math.isfinite(b):
            line += f"<br>{LEVEL:.0%} bootstrap CI [{_num(a)}, {_num(b)}]"
        text.append(line)
    return {"x": xs, "y": _none(mean),
            "error_y": {"type": "data", "array": _none(np.nan_to_num(std)), "visible": True},
            "text": text}


def _band(g: pd.DataFrame, metric: str, xs: list, as_band: bool) -> dict:
    lo, hi = _arr(g, f"{metric}_ci_lo"), _arr(g, f"{metric}_ci_hi")
    ok = np.isfinite(lo) & np.isfinite(hi)
    if as_band and ok.sum() > 1:
        x = [v for v, k in zip(xs, ok) if k]
        return {"x": x + x[::-1], "y": _none(hi[ok]) + _none(lo[ok][::-1])}
    x, y = [], []  # one vertical segment per point
    for v, a, b, k in zip(xs, lo, hi, ok):
        if k:
            x += [v, v, None]
            y += [float(a), float(b), None]
    return {"x": x, "y": y}


def figure(points: pd.DataFrame, keys: list, x: str):
    """The plotly figure of the headline metrics over `x` (see the module docstring)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    numeric, cats = x_axis(points, x)
    titles = [t for _, t in TOP] + [f"P99 {t} (s)" for _, t in LAT]
    fig = make_subplots(rows=2, cols=3, subplot_titles=titles, horizontal_spacing=0.07,
                        vertical_spacing=0.14)
    lines = series(points, keys, x)
    lat_traces: dict = {s: {"idx": [], "data": []} for s in STAT_NAMES}
    palette = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
               "#7f7f7f", "#bcbd22", "#17becf"]
    for k, (label, g) in enumerate(lines):
        name = label or "all points"
        color = palette[k % len(palette)]
        xs = [float(v) for v in g[x]] if numeric else [str(v) for v in g[x]]
        panels = [(m, 1, c + 1, None) for c, (m, _) in enumerate(TOP)]
        panels += [(f"{lat}_p99_s", 2, c + 1, lat) for c, (lat, _) in enumerate(LAT)]
        for p, (metric, row, colno, lat) in enumerate(panels):
            band = _band(g, metric, xs, numeric)
            fig.add_trace(go.Scatter(
                **band, mode="lines", legendgroup=name, showlegend=False, hoverinfo="skip",
                line={"width": 0 if numeric and len(g) > 1 else 8, "color": color},
                fill="toself" if numeric and len(g) > 1 else None, opacity=0.25,
                fillcolor=color, name=f"{name} CI"), row=row, col=colno)
            fig.add_trace(go.Scatter(
                **_main(g, metric, xs), mode="lines+markers" if numeric else "markers",
                name=name, legendgroup=name,
                showlegend=p == 0, line={"color": color}, marker={"size": 7},
                hovertemplate=HOVER), row=row, col=colno)
            if lat is not None:
                n_traces = len(fig.data)
                for s in STAT_NAMES:
                    m = f"{lat}_{s}_s"
                    lat_traces[s]["idx"] += [n_traces - 2, n_traces - 1]
                    lat_traces[s]["data"] += [_band(g, m, xs, numeric), _main(g, m, xs)]
    buttons = []
    for s, label in STAT_NAMES.items():
        idx, data = lat_traces[s]["idx"], lat_traces[s]["data"]
        keys_ = sorted({k for d in data for k in d})
        restyle = {k: [d.get(k) for d in data] for k in keys_}
        annotations = [dict(a.to_plotly_json()) for a in fig.layout.annotations]
        for a, (_, t) in zip(annotations[3:], LAT):
            a["text"] = f"{label} {t} (s)"
        buttons.append({"label": label, "method": "update",
                        "args": [restyle, {"annotations": annotations}, idx]})
    axes = [f"yaxis{'' if i == 1 else i}" for i in range(1, 7)]
    xaxes = [f"xaxis{'' if i == 1 else i}" for i in range(1, 7)]
    menus = [
        {"buttons": buttons, "type": "buttons", "direction": "right", "active": 3,
         "x": 0.0, "y": 1.13, "xanchor": "left", "showactive": True},
        {"buttons": [{"label": f"y {t}", "method": "relayout",
                      "args": [{f"{a}.type": t for a in axes}]} for t in ("linear", "log")],
         "type": "buttons", "direction": "right", "active": 0, "x": 0.42, "y": 1.13,
         "xanchor": "left"},
    ]
    if numeric:
        menus.append({"buttons": [{"label": f"x {t}", "method": "relayout",
                                   "args": [{f"{a}.type": t for a in xaxes}]}
                                  for t in ("linear", "log")],
                      "type": "buttons", "direction": "right",
                      "active": 1 if log_scale(points[x]) else 0, "x": 0.66, "y": 1.13,
                      "xanchor": "left"})
    fig.update_layout(updatemenus=menus, height=720, template="plotly_white",
                      legend={"groupclick": "togglegroup", "title": {"text": "series"}},
                      margin={"t": 110, "l": 60, "r": 20, "b": 50})
    ticks = sorted({float(v) for v in points[x]}) if numeric else None
    for i in range(1, 7):
        fig.update_xaxes(title_text=x if i > 3 else None, row=(i - 1) // 3 + 1,
                         col=(i - 1) % 3 + 1,
                         type="log" if numeric and log_scale(points[x]) else None,
                         tickmode="array" if numeric and len(ticks) <= 12 else None,
                         tickvals=ticks if numeric and len(ticks) <= 12 else None,
                         categoryorder="array" if not numeric else None,
                         categoryarray=cats if not numeric else None,
                         range=[-0.5, len(cats) - 0.5] if not numeric else None)
    return fig


def _fmt(v, digits=4) -> str:
    return html_lib.escape(fmt(v, digits, missing="\u2013"))


def _points_table(points: pd.DataFrame, keys: list) -> str:
    metrics = [("goodput_rps", "goodput (req/s)"), ("slo_attainment", "SLO attainment"),
               ("useful_tokens_per_dollar", "useful tok/$"), ("ttft_p99_s", "P99 TTFT (s)"),
               ("tpot_p99_s", "P99 TPOT (s)")]
    head = "".join(f"<th>{html_lib.escape(k)}</th>" for k in (keys or ["point"]))
    head += "<th>n</th>" + "".join(f"<th>{t}</th>" for _, t in metrics)
    rows = []
    for _, r in points.iterrows():
        cells = "".join(f"<td>{_fmt(r[k])}</td>" for k in (keys or ["point"]))
        cells += f"<td>{int(r['n'])}</td>"
        for m, _ in metrics:
            text = _fmt(r.get(f"{m}_mean"))
            if math.isfinite(r.get(f"{m}_std", math.nan)):
                text += f" &plusmn; {_fmt(r[f'{m}_std'], 3)}"
            if math.isfinite(r.get(f"{m}_ci_lo", math.nan)):
                text += f" <small>[{_fmt(r[f'{m}_ci_lo'])}, {_fmt(r[f'{m}_ci_hi'])}]</small>"
            cells += f"<td>{text}</td>"
        rows.append(f"<tr>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def _json(df: pd.DataFrame) -> str:
    text = df.to_json(orient="records", double_precision=10)
    return text.replace("</", "<\\/")


CSS = """body{font-family:system-ui,sans-serif;margin:24px auto;padding:0 16px;max-width:1360px;
color:#222}
table{border-collapse:collapse;font-size:13px;margin:8px 0}td,th{border:1px solid #ddd;
padding:3px 8px;text-align:right}th{background:#f4f4f4}small{color:#666}
.note{color:#555;font-size:13px;max-width:1000px}li{margin:3px 0}"""


def page(points: pd.DataFrame, runs: pd.DataFrame, keys: list, verdict_lines: list,
         meta: dict) -> str:
    """The whole HTML document (plotly.js inlined)."""
    from plotly.offline import get_plotlyjs

    head = (f"<!doctype html><html><head><meta charset='utf-8'>"
            f"<title>servetune report: {html_lib.escape(meta.get('root', ''))}</title>"
            f"<style>{CSS}</style><script type='text/javascript'>{get_plotlyjs()}</script>"
            f"</head><body><h1>servetune report</h1>")
    parts = [head]
    facts = [f"<b>{html_lib.escape(k)}</b>: {html_lib.escape(str(v))}" for k, v in meta.items()]
    parts.append("<p>" + "<br>".join(facts) + "</p>")
    parts.append("<h2>Which points can be told apart</h2><ul>")
    parts += [f"<li>{html_lib.escape(line)}</li>" for line in verdict_lines] or \
        ["<li>one point: nothing to compare</li>"]
    parts.append(
        f"</ul><p class='note'>Intervals: mean &plusmn; std over seeds, widened to the "
        f"{LEVEL:.0%} bootstrap interval (requests resampled within each scenario, mean over "
        f"seeds) where there is one. Two points whose intervals overlap are reported as not "
        f"distinguishable. The bootstrap treats requests as independent; queueing correlates "
        f"them, so its intervals are optimistic, and more seeds are the honest remedy.</p>")
    parts.append("<h2>Figures</h2><p class='note'>Hover for values; click a legend entry to "
                 "hide or show a series (double-click to isolate it); the buttons switch the "
                 "latency panels between mean, P50, P90 and P99 and the axes between linear and "
                 "log. Bars: &plusmn; std over seeds; shaded band or pale bar: bootstrap "
                 "interval.</p>")
    for i, x in enumerate(keys or ["point"]):
        fig = figure(points, keys, x)
        parts.append(f"<h3>{html_lib.escape(x)}</h3>")
        parts.append(fig.to_html(full_html=False, include_plotlyjs=False,
                                 div_id=f"fig-{i}", config={"displaylogo": False}))
    parts.append("<h2>Points (mean over seeds)</h2>")
    parts.append(_points_table(points, keys))
    parts.append("<h2>Data</h2><p class='note'>Every scenario (runs) and every point, as JSON in "
                 "this page (elements <code>servetune-runs</code> and "
                 "<code>servetune-points</code>), and as runs.csv / runs.parquet / points.csv "
                 "beside it.</p>")
    parts.append(f"<script type='application/json' id='servetune-runs'>{_json(runs)}</script>")
    parts.append(f"<script type='application/json' id='servetune-points'>{_json(points)}"
                 f"</script>")
    parts.append("</body></html>")
    return "\n".join(parts)
