"""One self-contained interactive HTML page (plotly, with plotly.js inlined so it works offline):
for each point key, the headline metrics against it with error bars (+- std over seeds) and
bootstrap bands; hover for values, click the legend to toggle a series, buttons to switch the
latency panels between mean, P50, P90 and P99, and linear or log axes. The tables and the data
(runs and points as JSON) are in the page too."""

from __future__ import annotations

import html as html_lib
import json
import math

import numpy as np
import pandas as pd

from servetune.reporting.figures import category, merged_series, x_axis
from servetune.reporting.numbers import fmt
from servetune.reporting.stats import LEVEL
from servetune.reporting.ticks import axis_type_args, fit_range, plotly_log_ticks
from servetune.reporting.units import PALETTE, log_scale, scale, shown, title

TOP = tuple((m, title(m)) for m in ("goodput_rps", "slo_attainment", "useful_tokens_per_dollar"))
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
    """The mean trace of one line of a panel (latencies in ms), with its hover texts: the std
    over seeds and the bootstrap interval, or that they carry no information (stats.intervals:
    every seed gave the same value, an interval of zero width)."""
    from servetune.reporting.stats import NO_INFO_SEEDS, intervals

    k = scale(metric)
    mean, std = _arr(g, f"{metric}_mean") * k, _arr(g, f"{metric}_std") * k
    lo, hi, n = _arr(g, f"{metric}_ci_lo") * k, _arr(g, f"{metric}_ci_hi") * k, _arr(g, "n")
    notes = intervals(g, metric)[2] if f"{metric}_mean" in g else [""] * len(g)
    text = []
    for label, m, s, a, b, seeds, note in zip(g["point"], mean, std, lo, hi, n, notes, strict=True):
        line = f"<b>{html_lib.escape(str(label))}</b><br>{title(metric)}: {_num(m)}"
        if note == NO_INFO_SEEDS:
            line += f" (all {int(seeds)} seeds gave this value)"
        elif math.isfinite(s):
            line += f" ± {_num(s, 3)} (std over {int(seeds)} seeds)"
        else:
            line += f" ({int(seeds)} seed)"
        if math.isfinite(a) and math.isfinite(b) and a != b:
            line += f"<br>{LEVEL:.0%} bootstrap CI [{_num(a)}, {_num(b)}]"
        if note.startswith("no information"):
            line += f"<br>{note}"
        text.append(line)
    return {
        "x": xs,
        "y": _none(mean),
        "error_y": {"type": "data", "array": _none(np.nan_to_num(std)), "visible": True},
        "text": text,
    }


def _band(g: pd.DataFrame, metric: str, xs: list, as_band: bool) -> dict:
    """The bootstrap band (or per-point bars) of one line of a panel, in shown units."""
    lo, hi = _arr(g, f"{metric}_ci_lo") * scale(metric), _arr(g, f"{metric}_ci_hi") * scale(metric)
    ok = np.isfinite(lo) & np.isfinite(hi)
    if as_band and ok.sum() > 1:
        x = [v for v, k in zip(xs, ok, strict=True) if k]
        return {"x": x + x[::-1], "y": _none(hi[ok]) + _none(lo[ok][::-1])}
    x, y = [], []  # one vertical segment per point
    for v, a, b, k in zip(xs, lo, hi, ok, strict=True):
        if k:
            x += [v, v, None]
            y += [float(a), float(b), None]
    return {"x": x, "y": y}


PANELS = [(m, 1, c + 1, None) for c, (m, _) in enumerate(TOP)] + [
    (f"{lat}_p99_s", 2, c + 1, lat) for c, (lat, _) in enumerate(LAT)
]


def _drawn_metrics() -> list:
    """Every metric a per-key figure draws: its panels' and each latency statistic the
    buttons switch to."""
    lats = [f"{lat}_{s}_s" for lat, _ in LAT for s in STAT_NAMES]
    return [m for m, _ in TOP] + lats


def _add_lines(fig, points: pd.DataFrame, keys: list, x: str, numeric: bool) -> dict:
    """Add each line's band and mean traces to every panel (lines that draw the same as one,
    named together: figures.merged_series); returns {stat: {idx, data}}: the latency traces
    and what the mean/P50/P90/P99 buttons restyle them with."""
    import plotly.graph_objects as go

    lat_traces: dict = {s: {"idx": [], "data": []} for s in STAT_NAMES}
    for k, (label, g) in enumerate(merged_series(points, keys, x, _drawn_metrics())):
        name = label or "all points"
        color = PALETTE[k % len(PALETTE)]
        xs = [float(v) for v in g[x]] if numeric else [category(v) for v in g[x]]
        for p, (metric, row, colno, lat) in enumerate(PANELS):
            fig.add_trace(
                go.Scatter(
                    **_band(g, metric, xs, numeric),
                    mode="lines",
                    legendgroup=name,
                    showlegend=False,
                    hoverinfo="skip",
                    line={"width": 0 if numeric and len(g) > 1 else 8, "color": color},
                    fill="toself" if numeric and len(g) > 1 else None,
                    opacity=0.25,
                    fillcolor=color,
                    name=f"{name} CI",
                ),
                row=row,
                col=colno,
            )
            fig.add_trace(
                go.Scatter(
                    **_main(g, metric, xs),
                    mode="lines+markers" if numeric else "markers",
                    name=name,
                    legendgroup=name,
                    showlegend=p == 0,
                    line={"color": color},
                    marker={"size": 7},
                    hovertemplate=HOVER,
                    cliponaxis=metric != "slo_attainment",  # a dot at 1.0 stays whole
                ),
                row=row,
                col=colno,
            )
            if lat is not None:
                n_traces = len(fig.data)
                for s in STAT_NAMES:
                    m = f"{lat}_{s}_s"
                    lat_traces[s]["idx"] += [n_traces - 2, n_traces - 1]
                    lat_traces[s]["data"] += [_band(g, m, xs, numeric), _main(g, m, xs)]
    return lat_traces


def _menus(
    fig, lat_traces: dict, y_axes: list, x_axis: tuple | None, stat_ranges: dict | None = None
) -> list:
    """The buttons: latency statistic (restyles the latency panels, and sets their linear
    ranges `stat_ranges`: {stat: {layout axis: range or None (autorange)}}), y and x axis
    types (x only for a numeric key: x_axis None). y_axes: (starts log, log ticks, linear
    range or None) of each panel's y axis; x_axis: (starts log, log ticks, linear ticks or
    None) of the x axes."""
    buttons = []
    for s, label in STAT_NAMES.items():
        idx, data = lat_traces[s]["idx"], lat_traces[s]["data"]
        restyle = {k: [d.get(k) for d in data] for k in sorted({k for d in data for k in d})}
        annotations = [dict(a.to_plotly_json()) for a in fig.layout.annotations]
        for a, (_, t) in zip(annotations[3:], LAT, strict=True):
            a["text"] = f"{label} {t} (ms)"
        layout: dict = {"annotations": annotations}
        for axis, span in (stat_ranges or {}).get(s, {}).items():
            layout.update({f"{axis}.range": list(span)} if span else {f"{axis}.autorange": True})
        buttons.append({"label": label, "method": "update", "args": [restyle, layout, idx]})
    names = [f"{'' if i == 1 else i}" for i in range(1, 7)]

    def relayout(kind: str, axes: list) -> dict:
        out: dict = {}
        for a, ticks, linear, span in axes:
            out.update(axis_type_args(a, kind, ticks, linear, span))
        return out

    y_args = [(f"yaxis{n}", t, None, r) for n, (_, t, r) in zip(names, y_axes, strict=True)]
    menus = [
        {
            "buttons": buttons,
            "type": "buttons",
            "direction": "right",
            "active": 3,
            "x": 0.0,
            "y": 1.13,
            "xanchor": "left",
            "showactive": True,
        },
        {
            "buttons": [
                {"label": f"y {t}", "method": "relayout", "args": [relayout(t, y_args)]}
                for t in ("linear", "log")
            ],
            "type": "buttons",
            "direction": "right",
            "active": -1 if any(log for log, _, _ in y_axes) else 0,
            "x": 0.42,
            "y": 1.13,
            "xanchor": "left",
        },
    ]
    if x_axis is not None:
        x_args = [(f"xaxis{n}", *x_axis[1:], None) for n in names]
        menus.append(
            {
                "buttons": [
                    {"label": f"x {t}", "method": "relayout", "args": [relayout(t, x_args)]}
                    for t in ("linear", "log")
                ],
                "type": "buttons",
                "direction": "right",
                "active": 1 if x_axis[0] else 0,
                "x": 0.66,
                "y": 1.13,
                "xanchor": "left",
            }
        )
    return menus


def _panel_values(points: pd.DataFrame, metric: str, lat: str | None) -> np.ndarray:
    """Every value a panel may show, in shown units: the means and intervals of its metric,
    and for a latency panel those of each statistic the buttons switch to."""
    metrics = [f"{lat}_{s}_s" for s in STAT_NAMES] if lat else [metric]
    cols = [f"{m}_{c}" for m in metrics for c in ("mean", "ci_lo", "ci_hi") if f"{m}_{c}" in points]
    return points[cols].to_numpy(np.float64).ravel() * scale(metric)


def figure(points: pd.DataFrame, keys: list, x: str):
    """The plotly figure of the headline metrics over `x` (see the module docstring);
    latencies in ms, axes logarithmic where their values span more than 1.5 decades, with
    ticks at 1-2-5 steps labelled as plain numbers."""
    from plotly.subplots import make_subplots

    numeric, cats = x_axis(points, x)
    titles = [t for _, t in TOP] + [f"P99 {t} (ms)" for _, t in LAT]
    fig = make_subplots(
        rows=2, cols=3, subplot_titles=titles, horizontal_spacing=0.07, vertical_spacing=0.14
    )
    lat_traces = _add_lines(fig, points, keys, x, numeric)
    values = [_panel_values(points, m, lat) for m, _, _, lat in PANELS]
    y_axes = [
        (log, plotly_log_ticks(v), None if log else y_range(points, m))
        for (m, _, _, _), v in zip(PANELS, values, strict=True)
        for log in [_y_log(points, m)]
    ]
    stat_ranges = {
        s: {
            f"yaxis{i + 1}": y_range(points, f"{lat}_{s}_s")
            for i, (_, _, _, lat) in enumerate(PANELS)
            if lat is not None and not y_axes[i][0]
        }
        for s in STAT_NAMES
    }
    ticks = sorted({float(v) for v in points[x]}) if numeric else []
    few = numeric and len(ticks) <= 12  # the swept values themselves
    x_log = log_scale(points[x]) if numeric else None
    x_ticks = {"tickmode": "array", "tickvals": ticks} if few else plotly_log_ticks(ticks)
    x_menu = None if x_log is None else (x_log, x_ticks, x_ticks if few else None)
    fig.update_layout(
        updatemenus=_menus(fig, lat_traces, y_axes, x_menu, stat_ranges),
        height=720,
        template="plotly_white",
        legend={"groupclick": "togglegroup", "title": {"text": "series"}},
        margin={"t": 110, "l": 60, "r": 20, "b": 50},
    )
    for i in range(1, 7):
        where = {"row": (i - 1) // 3 + 1, "col": (i - 1) % 3 + 1}
        fig.update_xaxes(
            title_text=x if i > 3 else None,
            type="log" if x_log else None,
            tickmode="array" if few else None,
            tickvals=ticks if few else None,
            **(x_ticks if x_log and not few else {}),
            categoryorder="array" if not numeric else None,
            categoryarray=cats if not numeric else None,
            range=[-0.5, len(cats) - 0.5] if not numeric else None,
            **where,
        )
        log, log_ticks, span = y_axes[i - 1]
        fig.update_yaxes(
            **({"type": "log", **log_ticks} if log else {}),
            **({"range": list(span)} if span else {}),
            exponentformat="none",
            **where,
        )
    return fig


def y_range(points: pd.DataFrame, metric: str) -> tuple | None:
    """A linear panel's explicit y range, None to autorange: +- 5% around values that do
    not spread (ticks.fit_range: plotly's own would span +- 1 around one value, "738,298 ...
    738,299.5"); an attainment's up to 1.02 (its markers are not clipped there)."""
    if f"{metric}_mean" not in points:
        return None
    from servetune.reporting.figures import panel_values

    v = panel_values(points, metric)
    v = v[np.isfinite(v)]
    span = fit_range(v)
    if metric != "slo_attainment" or not len(v):
        return span
    lo, hi = span or (v.min() - 0.05 * (v.max() - v.min()), v.max())
    return (float(lo), max(1.02, float(v.max())))


def _y_log(points: pd.DataFrame, metric: str) -> bool:
    """Whether a panel's y axis starts logarithmic: a positive quantity (not the attainment)
    whose P99 means and intervals span more than 1.5 decades."""
    if metric == "slo_attainment" or f"{metric}_mean" not in points:
        return False
    cols = [c for c in (f"{metric}_mean", f"{metric}_ci_lo", f"{metric}_ci_hi") if c in points]
    return log_scale(points[cols].to_numpy(np.float64))


def _fmt(v, digits=4) -> str:
    return html_lib.escape(fmt(v, digits, missing="\u2013"))


TABLE_METRICS = (
    "goodput_rps",
    "slo_attainment",
    "useful_tokens_per_dollar",
    "ttft_p99_s",
    "tpot_p99_s",
    "e2e_p99_s",
)


def _points_table(points: pd.DataFrame, keys: list) -> str:
    """Every point: its keys, seeds and mean &plusmn; std [bootstrap interval] of the headline
    metrics (latencies in ms; "no info" where the seeds or the interval carry none)."""
    from servetune.reporting.console import cell
    from servetune.reporting.stats import intervals

    metrics = [m for m in TABLE_METRICS if f"{m}_mean" in points]
    head = "".join(f"<th>{html_lib.escape(k)}</th>" for k in (keys or ["point"]))
    head += "<th>n</th>" + "".join(f"<th>{html_lib.escape(title(m))}</th>" for m in metrics)
    notes = {m: intervals(points, m)[2] for m in metrics}
    rows = []
    for i, (_, r) in enumerate(points.iterrows()):
        cells = "".join(f"<td>{_fmt(r[k])}</td>" for k in (keys or ["point"]))
        cells += f"<td>{int(r['n'])}</td>"
        for m in metrics:
            text = cell(r, m, True, scale(m), notes[m][i])
            cells += f"<td>{html_lib.escape(text)}</td>"
        rows.append(f"<tr>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def _best_table(best: pd.DataFrame, points: pd.DataFrame) -> str:
    """One row per condition: its best setting, whether it meets the SLO target, its headline
    numbers (latencies in ms) and why it is the best."""
    metrics = [
        m
        for m in (
            "slo_attainment",
            "useful_tokens_per_dollar",
            "goodput_rps",
            "ttft_p99_s",
            "tpot_p99_s",
        )
        if f"{m}_mean" in points
    ]
    head = (
        "<th>condition</th><th>best setting</th><th>meets SLO target</th>"
        + "".join(f"<th>{html_lib.escape(title(m))}</th>" for m in metrics)
        + "<th>why</th>"
    )
    by_point = points.set_index("point", drop=False)
    rows = []
    for b in best.itertuples(index=False):
        r = by_point.loc[b.point]
        r = r.iloc[0] if isinstance(r, pd.DataFrame) else r
        cells = (
            f"<td>{html_lib.escape(b.condition)}</td><td><b>{html_lib.escape(b.setting)}"
            f"</b></td><td>{'yes' if b.meets_target else 'no'} ({fmt(b.slo_target)})</td>"
        )
        cells += "".join(
            f"<td>{html_lib.escape(shown(r[f'{m}_mean'], m, 4))}</td>" for m in metrics
        )
        cells += f"<td style='text-align:left'>{html_lib.escape(b.why)}</td>"
        rows.append(f"<tr>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def _json(df: pd.DataFrame) -> str:
    text = df.to_json(orient="records", double_precision=10)
    return text.replace("</", "<\\/")


TEMPLATE = "plotly_white"  # the figures' template, written once in the page


def _template() -> dict:
    import plotly.io as pio

    return pio.templates[TEMPLATE].to_plotly_json()


def embed(fig, fid: str) -> str:
    """A figure as an empty div and its JSON (without its template where it is the page's
    shared one, TEMPLATE); RENDER draws every such div once plotly.js is loaded (one script,
    so the page knows when all are drawn)."""
    spec = json.loads(fig.to_json())
    if spec.get("layout", {}).get("template") == _template():
        del spec["layout"]["template"]
    return (
        f"<div class='servetune-figure' id='{fid}'></div>"
        f"<script type='application/json' id='{fid}-json'>{_script_json(spec)}</script>"
    )


def _script_json(obj) -> str:
    """`obj` as compact JSON that cannot end the script element holding it."""
    return json.dumps(obj, separators=(",", ":")).replace("</", "<\\/")


CSS = """body{font-family:system-ui,sans-serif;margin:24px auto;padding:0 16px;max-width:1360px;
color:#222}
table{border-collapse:collapse;font-size:13px;margin:8px 0}td,th{border:1px solid #ddd;
padding:3px 8px;text-align:right}th{background:#f4f4f4}small{color:#666}
.note{color:#555;font-size:13px;max-width:1000px}li{margin:3px 0}
#servetune-js-errors{color:#b00;border:1px solid #b00;padding:6px}
#servetune-js-errors:empty{display:none}"""

# Before plotly.js: JavaScript errors, rejected promises and console.error calls are written
# into the page (#servetune-js-errors), where a reader and a headless browser check see them.
CATCH = """<script>(function(){var seen=[];
function note(m){seen.push(String(m));var el=document.getElementById('servetune-js-errors');
if(el){el.textContent=seen.join('\\n');}}
window.servetuneNote=note;
window.addEventListener('error',function(e){note('error: '+(e.message||e.type)+(e.filename?
' ('+e.filename+':'+e.lineno+')':''));});
window.addEventListener('unhandledrejection',function(e){var r=e.reason;
note('unhandled rejection: '+(r&&r.message?r.message:r));});
var ce=console.error;console.error=function(){note('console.error: '+
Array.prototype.join.call(arguments,' '));return ce.apply(console,arguments);};
document.addEventListener('DOMContentLoaded',function(){
var el=document.getElementById('servetune-js-errors');if(el){el.textContent=seen.join('\\n');}});
})();</script>"""

# After everything: draw each figure (with the shared template where its own is left out), then
# append #servetune-rendered, naming the figures drawn and those with a subplot where nothing was
# drawn (an empty plot). An overlaid subplot (a secondary y axis: the fleet's mean replicas) is
# drawn by plotly into its main subplot's group, so it is judged with that one, not as empty.
RENDER = """<script>(function(){
var divs=Array.prototype.slice.call(document.querySelectorAll('div.servetune-figure'));
var tpl=document.getElementById('servetune-template');tpl=tpl?JSON.parse(tpl.textContent):null;
function empty(div){var out=[];var plots=(div._fullLayout||{})._plots||{};
div.querySelectorAll('g.cartesianlayer > g.subplot')
.forEach(function(sp){var name=sp.getAttribute('class').replace('subplot ','');
if(plots[name]&&plots[name].mainplot){return;}
var n=0;sp.querySelectorAll('.scatterlayer path').forEach(function(p){
var d=p.getAttribute('d');if(d&&d.length>4){n++;}});if(!n){out.push(div.id+':'+name);}});
if(!div.querySelector('g.cartesianlayer > g.subplot')){out.push(div.id);}return out;}
var jobs=divs.map(function(div){try{var el=document.getElementById(div.id+'-json');
var spec=JSON.parse(el.textContent);spec.layout=spec.layout||{};
if(tpl&&!spec.layout.template){spec.layout.template=tpl;}
return Plotly.newPlot(div,spec.data,spec.layout,{displaylogo:false,responsive:true})
.then(function(){return div;});}catch(e){servetuneNote('figure '+div.id+': '+e.message);
return Promise.resolve(null);}});
Promise.all(jobs).then(function(done){var drawn=done.filter(function(d){return d;});
var gaps=[];drawn.forEach(function(d){gaps=gaps.concat(empty(d));});
var m=document.createElement('div');m.id='servetune-rendered';m.hidden=true;
m.setAttribute('data-expected',String(divs.length));
m.setAttribute('data-figures',String(drawn.length));m.setAttribute('data-empty',gaps.join(' '));
document.body.appendChild(m);},function(e){servetuneNote('drawing: '+(e&&e.message||e));});
})();</script>"""


def _head(meta: dict) -> str:
    from plotly.offline import get_plotlyjs

    return (
        f"<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>servetune report: {html_lib.escape(meta.get('root', ''))}</title>"
        f"<style>{CSS}</style>{CATCH}<script type='text/javascript'>{get_plotlyjs()}"
        f"</script></head><body><pre id='servetune-js-errors'></pre>"
        f"<h1>servetune report</h1>"
    )


def _choice_section(points, best, conditions, settings, cdfs, timeline, fleet=None) -> list[str]:
    """Which setting and why: the best per condition, the Pareto front, the latency CDFs,
    the timeline (or how to get one) and, for a run with an autoscaler, its fleet."""
    from servetune.reporting.choose import SETTING_GROUPS
    from servetune.reporting.html_figures import cdf_figure, pareto_figure, timeline_figure

    parts = ["<h2>Which setting, and why</h2>"]
    cond = ", ".join(conditions) or "none (every point faces the same conditions)"
    sett = ", ".join(settings) or "none (no policy knob varies; every point is compared)"
    parts.append(
        f"<p class='note'>Settings are the policy knobs ({', '.join(SETTING_GROUPS)} keys, and "
        f"any given with --setting): here {html_lib.escape(sett)}. Every other swept key is a "
        f"condition, and settings are only compared within one: here "
        f"{html_lib.escape(cond)}. Within a condition the tuner's order decides: a setting "
        f"whose mean SLO attainment meets the target beats one that does not; among those, the "
        f"most useful tokens per dollar wins; if none meets it, the highest attainment.</p>"
    )
    if best is not None and len(best):
        parts.append(_best_table(best, points))
    fig = pareto_figure(
        points, conditions, settings, best if best is not None else pd.DataFrame(columns=["point"])
    )
    if fig is not None:
        parts.append(
            "<h3>Pareto front: value against P99 latency</h3><p class='note'>Lower "
            "latency and more value are better; the labelled staircase joins the "
            "non-dominated settings of each condition, the star marks its best "
            "setting, the dashed lines the SLO targets. Settings whose points "
            "coincide share a label; a label with no room beside its point is left "
            "out: hover the point for its setting.</p>"
        )
        parts.append(embed(fig, "fig-pareto"))
    fig = cdf_figure(
        points,
        cdfs or {},
        best if best is not None else pd.DataFrame(columns=["point"]),
        list(conditions) + list(settings),
    )
    if fig is not None:
        parts.append(
            "<h3>Latency distributions</h3><p class='note'>Empirical CDF over the "
            "counted, completed requests of every seed of a point; click a legend "
            "entry to hide a point.</p>"
        )
        parts.append(embed(fig, "fig-cdf"))
    parts.append("<h3>Timeline</h3>")
    fig = timeline_figure(timeline)
    if fig is not None:
        parts.append(embed(fig, "fig-timeline"))
    elif timeline is not None:
        parts.append(
            f"<p class='note' id='servetune-timeline-note'>{html_lib.escape(timeline.note)}</p>"
        )
    return parts + _fleet_section(fleet)


def _fleet_section(fleet) -> list[str]:
    """The autoscaled fleet of the timeline's run: its figure (fleet.parquet and
    fleet_hourly.parquet) and the note on a file that could not be read; nothing for a run
    without an autoscaler (fleet None)."""
    from servetune.reporting.html_figures import fleet_figure

    if fleet is None:
        return []
    parts = [
        "<h3>Fleet</h3><p class='note'>The autoscaler's replicas over simulated time "
        "(serving, cold-starting and draining stacked; provisioned, the replicas paid for; "
        "desired, what it last asked for), their cumulative cost, and the SLO attainment of "
        "each hour's arrivals with the mean replicas of that hour. The fleet is logged at "
        "each evaluation, when a replica's cold start ends and when it finishes draining.</p>"
    ]
    fig = fleet_figure(fleet)
    if fig is not None:
        parts.append(embed(fig, "fig-fleet"))
    if fleet.note:
        parts.append(f"<p class='note' id='servetune-fleet-note'>{html_lib.escape(fleet.note)}</p>")
    return parts


def page(
    points: pd.DataFrame,
    runs: pd.DataFrame,
    keys: list,
    verdict_lines: list,
    meta: dict,
    best: pd.DataFrame | None = None,
    conditions: list = (),
    settings: list = (),
    cdfs: dict | None = None,
    timeline=None,
    fleet=None,
) -> str:
    """The whole HTML document (plotly.js inlined; nothing is fetched from the network): the
    facts, which setting and why (best, Pareto front, CDFs, timeline, the autoscaled fleet of
    the timeline's run where it has one), the verdicts, a figure per point key, the points
    table and the data."""
    parts = [_head(meta)]
    facts = [f"<b>{html_lib.escape(k)}</b>: {html_lib.escape(str(v))}" for k, v in meta.items()]
    parts.append("<p>" + "<br>".join(facts) + "</p>")
    parts += _choice_section(points, best, list(conditions), list(settings), cdfs, timeline, fleet)
    parts.append("<h2>Which points can be told apart</h2><ul>")
    parts += [f"<li>{html_lib.escape(line)}</li>" for line in verdict_lines] or [
        "<li>one point: nothing to compare</li>"
    ]
    parts.append(
        f"</ul><p class='note'>Points are compared within their condition. Intervals: mean "
        f"&plusmn; std over seeds, widened to the {LEVEL:.0%} bootstrap interval (requests "
        f"resampled within each scenario, mean over seeds) where there is one. Two points "
        f"whose intervals overlap are reported as not distinguishable. Seeds that all gave "
        f"the same value (a replayed trace without replicas) and intervals of zero width carry "
        f"no information: such points are told apart from none. The bootstrap treats "
        f"requests as independent; queueing correlates them, so its intervals are optimistic, "
        f"and more seeds are the honest remedy.</p>"
    )
    parts.append(
        "<h2>Each key</h2><p class='note'>Hover for values; click a legend entry to "
        "hide or show a series (double-click to isolate it); the buttons switch the "
        "latency panels between mean, P50, P90 and P99 and the axes between linear and "
        "log. Latencies in ms. Bars: &plusmn; std over seeds; shaded band or pale bar: "
        "bootstrap interval.</p>"
    )
    for i, x in enumerate(keys or ["point"]):
        parts.append(f"<h3>{html_lib.escape(x)}</h3>")
        parts.append(embed(figure(points, keys, x), f"fig-{i}"))
    parts.append("<h2>Points (mean over seeds)</h2>")
    parts.append(_points_table(points, keys))
    parts.append(
        "<h2>Data</h2><p class='note'>Every scenario (runs) and every point, as JSON in "
        "this page (elements <code>servetune-runs</code> and "
        "<code>servetune-points</code>), and as runs.csv / runs.parquet / points.csv "
        "beside it (latencies there in seconds, as the columns' _s says).</p>"
    )
    parts.append(f"<script type='application/json' id='servetune-runs'>{_json(runs)}</script>")
    parts.append(f"<script type='application/json' id='servetune-points'>{_json(points)}</script>")
    parts.append(
        f"<script type='application/json' id='servetune-template'>"
        f"{_script_json(_template())}</script>"
    )
    parts.append(RENDER)
    parts.append("</body></html>")
    return "\n".join(parts)
