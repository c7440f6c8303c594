"""What `servetune tune` shows after its last iteration, beside convergence.png: the tuning
history (history.png: the objective, SLO attainment and each tuned knob's value over the
iterations) and the sensitivity of the tuned point (sensitivity.png, sensitivity.csv: each
knob's finite-difference derivative of log(useful tokens / USD) and of SLO attainment with a
95% interval over the training scenarios, servetune.tuning.sensitivity), and both on one
self-contained page (tuning.html: plotly.js inlined once, as report.html has it)."""

from __future__ import annotations

import html as html_lib
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from servetune.core.files import write_whole
from servetune.reporting.convergence import MIN_SPAN, y_range
from servetune.reporting.html import CATCH, CSS, RENDER, TEMPLATE, embed
from servetune.reporting.numbers import fmt
from servetune.reporting.stats import LEVEL
from servetune.reporting.ticks import no_offsets, plotly_log_ticks, set_log

DERIVATIVES = (
    ("d_log_tokens_per_usd", "d log(useful tokens / USD)"),
    ("d_attainment", "d SLO attainment"),
)
NO_INFO = "no information"  # a derivative whose scenarios give no interval


def _label(row) -> str:
    """A knob's axis label: "max_num_seqs (per e-fold)"."""
    return f"{row['knob']} (per {row['per']})"


def _has_interval(sens: pd.DataFrame, name: str) -> np.ndarray:
    """bool [K]: whose `name` derivative has an interval of positive width."""
    lo, hi = sens[f"{name}_low"].to_numpy(float), sens[f"{name}_high"].to_numpy(float)
    return np.isfinite(lo) & np.isfinite(hi) & (hi > lo)


def _errors(sens: pd.DataFrame, name: str) -> tuple[np.ndarray, np.ndarray]:
    """(below, above) [K]: the interval's distances from the mean, 0 where there is none."""
    mean = sens[name].to_numpy(float)
    lo, hi = sens[f"{name}_low"].to_numpy(float), sens[f"{name}_high"].to_numpy(float)
    return np.nan_to_num(mean - lo), np.nan_to_num(hi - mean)


def history_figure(
    history: pd.DataFrame, scales: dict[str, str], target: float, tuned: dict | None = None
) -> Figure:
    """history.png's figure from the tuner's history (history.csv): against the iteration,
    log(useful tokens / USD) and SLO attainment (a fraction; the target dotted) of the current
    and the best policy, then each tuned knob's value (`scales`: knob -> log | linear, a log
    knob on a log axis with 1-2-5 ticks) with its tuned value dotted (`tuned`)."""
    knobs = [k for k in scales if f"policy.{k}" in history]
    fig = Figure(figsize=(7, 2.0 * (2 + len(knobs)) + 0.4), layout="constrained")
    axes = np.atleast_1d(fig.subplots(2 + len(knobs), 1, sharex=True))
    x = history["iteration"]
    for ax, what, name in (
        (axes[0], "objective", "log(useful tokens / USD)"),
        (axes[1], "slo_attainment", "SLO attainment"),
    ):
        ax.plot(x, history[f"center_{what}"], "o-", label="current policy")
        ax.plot(x, history[f"best_{what}"], "s--", label="best so far")
        extra = [target] if what == "slo_attainment" else []
        values = np.concatenate([history[f"center_{what}"], history[f"best_{what}"], extra])
        ax.set_ylim(
            *y_range(values, MIN_SPAN["objective" if what == "objective" else "attainment"])
        )
        ax.set_ylabel(name)
    axes[1].axhline(target, color="gray", lw=1, ls=":", label="target")
    axes[0].legend(fontsize=8)
    axes[1].legend(fontsize=8)
    for i, (ax, k) in enumerate(zip(axes[2:], knobs, strict=True)):
        _knob_panel(
            ax,
            x,
            history[f"policy.{k}"].to_numpy(float),
            k,
            scales[k],
            (tuned or {}).get(k),
            legend=i == 0,
        )
    for ax in axes:
        ax.grid(alpha=0.3)
    axes[-1].xaxis.set_major_locator(MaxNLocator(integer=True))
    axes[-1].set_xlabel("iteration")
    fig.suptitle("tuning history", fontsize=11)
    no_offsets(fig)
    return fig


def knob_limits(values, scale: str) -> tuple[float, float, bool]:
    """(low, high, log) of the y axis of a knob's panel over its `values`: a log knob with
    positive values on a log axis spanning at least a factor 1.5 each way of them (padded
    10%), any other knob linear over y_range."""
    v = np.asarray(values, np.float64)
    v = v[np.isfinite(v)]
    if not len(v):
        return 0.0, 1.0, False
    if scale == "log" and v.min() > 0:
        return min(v.min(), v.max() / 1.5) / 1.1, max(v.max(), v.min() * 1.5) * 1.1, True
    return (*y_range(v, 1e-3 * max(1.0, float(np.abs(v).max()))), False)


def _knob_panel(ax, x, values: np.ndarray, key: str, scale: str, tuned, legend: bool) -> None:
    """One knob's values over the iterations on `ax`, the tuned value dotted (knob_limits)."""
    ax.plot(x, values, "o-", color="C2", label="current policy")
    if tuned is not None:
        ax.axhline(tuned, color="C3", lw=1, ls=":", label="tuned")
    lo, hi, log = knob_limits(np.append(values, [] if tuned is None else tuned), scale)
    if log:
        set_log(ax, "y")
    ax.set_ylim(lo, hi)
    if legend:
        ax.legend(fontsize=8)
    ax.set_ylabel(key, fontsize=9)


def sensitivity_figure(sens: pd.DataFrame) -> Figure:
    """sensitivity.png's figure from the sensitivity table (sensitivity.derivatives): per
    knob, its derivative of log(useful tokens / USD) and of SLO attainment (per e-fold or per
    unit, as labelled) with the 95% interval as a bar; hollow where there is none."""
    fig = Figure(figsize=(9, 1.2 + 0.55 * len(sens)), layout="constrained")
    axes = fig.subplots(1, 2, sharey=True)
    y = np.arange(len(sens))[::-1]
    for ax, (name, title) in zip(axes, DERIVATIVES, strict=True):
        mean = sens[name].to_numpy(float)
        has = _has_interval(sens, name)
        below, above = _errors(sens, name)
        ax.errorbar(
            mean[has],
            y[has],
            xerr=[below[has], above[has]],
            fmt="o",
            color="C0",
            capsize=3,
            label=f"mean, {LEVEL:.0%} interval",
        )
        ax.plot(mean[~has], y[~has], "o", mfc="none", color="C0", label=NO_INFO)
        ax.axvline(0, color="gray", lw=1)
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
    axes[0].set_yticks(y, [_label(r) for _, r in sens.iterrows()])
    axes[0].legend(fontsize=8, loc="best")
    n = int(sens["scenarios"].max()) if len(sens) else 0
    fig.suptitle(
        f"sensitivity at the tuned point: central finite differences of the exact "
        f"simulator over {n} training scenario(s)",
        fontsize=10,
    )
    no_offsets(fig)
    return fig


def history_plotly(
    history: pd.DataFrame, scales: dict[str, str], target: float, tuned: dict | None = None
):
    """The page's history figure: history_figure's panels, one plotly subplot each."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    knobs = [k for k in scales if f"policy.{k}" in history]
    rows = 2 + len(knobs)
    fig = make_subplots(
        rows=rows,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.04,
        subplot_titles=["log(useful tokens / USD)", "SLO attainment"] + knobs,
    )
    x = [int(v) for v in history["iteration"]]
    for row, what in ((1, "objective"), (2, "slo_attainment")):
        for col, name, dash in (
            ("center", "current policy", None),
            ("best", "best so far", "dash"),
        ):
            fig.add_trace(
                go.Scatter(
                    x=x,
                    y=_none(history[f"{col}_{what}"]),
                    name=name,
                    legendgroup=col,
                    showlegend=row == 1,
                    mode="lines+markers",
                    line={"dash": dash, "color": "#1f77b4" if col == "center" else "#ff7f0e"},
                ),
                row=row,
                col=1,
            )
    fig.add_hline(y=target, line={"dash": "dot", "color": "gray"}, row=2, col=1)
    for row, what, span in (
        (1, "objective", MIN_SPAN["objective"]),
        (2, "slo_attainment", MIN_SPAN["attainment"]),
    ):
        values = np.concatenate(
            [history[f"center_{what}"], history[f"best_{what}"]] + ([[target]] if row == 2 else [])
        )
        fig.update_yaxes(range=list(y_range(values, span)), row=row, col=1)
    for i, k in enumerate(knobs, start=3):
        values = history[f"policy.{k}"].to_numpy(float)
        fig.add_trace(
            go.Scatter(
                x=x,
                y=_none(values),
                name=k,
                showlegend=False,
                mode="lines+markers",
                line={"color": "#2ca02c"},
            ),
            row=i,
            col=1,
        )
        if tuned and k in tuned:
            fig.add_hline(y=tuned[k], line={"dash": "dot", "color": "#d62728"}, row=i, col=1)
            values = np.append(values, tuned[k])
        _plotly_knob_axis(fig, i, values, scales[k])
    fig.update_xaxes(title_text="iteration", row=rows, col=1)
    fig.update_xaxes(tickformat="d", dtick=max(1, math.ceil(len(x) / 10)))
    fig.update_layout(height=220 * rows + 60, template=TEMPLATE, margin={"t": 40})
    return fig


def _plotly_knob_axis(fig, row: int, values, scale: str) -> None:
    """Set the y axis of subplot `row` of the page's history figure as knob_limits says (a log
    axis with 1-2-5 ticks)."""
    lo, hi, log = knob_limits(values, scale)
    if log:
        fig.update_yaxes(
            type="log",
            range=[math.log10(lo), math.log10(hi)],
            row=row,
            col=1,
            **plotly_log_ticks([lo * 1.25, hi / 1.25]),
        )
    else:
        fig.update_yaxes(range=[lo, hi], row=row, col=1)


def sensitivity_plotly(sens: pd.DataFrame):
    """The page's sensitivity figure: sensitivity_figure's two panels, hover naming each
    knob's derivative, interval, step and notes."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(
        rows=1, cols=2, shared_yaxes=True, subplot_titles=[t for _, t in DERIVATIVES]
    )
    labels = [_label(r) for _, r in sens.iterrows()]
    for col, (name, _) in enumerate(DERIVATIVES, start=1):
        has = _has_interval(sens, name)
        below, above = _errors(sens, name)
        fig.add_trace(
            go.Scatter(
                x=_none(sens[name]),
                y=labels,
                mode="markers",
                name=name,
                showlegend=False,
                marker={
                    "size": 9,
                    "color": "#1f77b4",
                    "symbol": ["circle" if h else "circle-open" for h in has],
                },
                error_x={
                    "type": "data",
                    "symmetric": False,
                    "array": _none(above),
                    "arrayminus": _none(below),
                },
                text=[_hover(r, name) for _, r in sens.iterrows()],
                hovertemplate="%{text}<extra></extra>",
            ),
            row=1,
            col=col,
        )
        fig.add_vline(x=0, line={"color": "gray", "width": 1}, row=1, col=col)
    fig.update_yaxes(autorange="reversed")
    fig.update_layout(height=140 + 45 * len(sens), template=TEMPLATE, margin={"t": 40})
    return fig


def _hover(row, name: str) -> str:
    """A knob's hover text on the page: the derivative, its interval, the probes, the notes."""
    lo, hi = row[f"{name}_low"], row[f"{name}_high"]
    span = (
        f"[{fmt(lo)}, {fmt(hi)}]"
        if math.isfinite(lo) and math.isfinite(hi) and hi > lo
        else NO_INFO
    )
    return (
        f"<b>{html_lib.escape(row['knob'])}</b> at {fmt(row['value'])}<br>"
        f"{name}: {fmt(row[name])} per {row['per']}, {LEVEL:.0%} interval {span}<br>"
        f"simulated at {fmt(row['minus'])} and {fmt(row['plus'])}, "
        f"{int(row['scenarios'])} scenario(s)"
        + (f"<br>{html_lib.escape(row['note'])}" if row["note"] else "")
    )


def _none(values) -> list:
    """JSON-safe floats: NaN and inf become None (gaps)."""
    return [float(v) if math.isfinite(v) else None for v in np.asarray(values, np.float64)]


def _table(sens: pd.DataFrame) -> str:
    """The sensitivity table as HTML: knob, value, probes, each derivative with its interval."""
    head = (
        "<tr><th>knob</th><th>tuned value</th><th>simulated at</th><th>per</th>"
        + "".join(f"<th>{t}</th><th>{LEVEL:.0%} interval</th>" for _, t in DERIVATIVES)
        + "<th>scenarios</th><th style='text-align:left'>notes</th></tr>"
    )
    rows = []
    for _, r in sens.iterrows():
        cells = [r["knob"], fmt(r["value"]), f"{fmt(r['minus'])} / {fmt(r['plus'])}", r["per"]]
        for name, _ in DERIVATIVES:
            lo, hi = r[f"{name}_low"], r[f"{name}_high"]
            ok = math.isfinite(lo) and math.isfinite(hi) and hi > lo
            cells += [fmt(r[name]), f"[{fmt(lo)}, {fmt(hi)}]" if ok else NO_INFO]
        cells.append(str(int(r["scenarios"])))
        tds = "".join(f"<td>{html_lib.escape(str(c))}</td>" for c in cells)
        rows.append(f"<tr>{tds}<td style='text-align:left'>{html_lib.escape(r['note'])}</td></tr>")
    return f"<table><thead>{head}</thead><tbody>{''.join(rows)}</tbody></table>"


def _template_json() -> str:
    """The shared plotly template as JSON for the page's servetune-template element."""
    import plotly.io as pio

    text = json.dumps(pio.templates[TEMPLATE].to_plotly_json(), separators=(",", ":"))
    return text.replace("</", "<\\/")


def _head(title: str) -> str:
    """The document's head (styles, the error catcher, plotly.js once) and its heading."""
    from plotly.offline import get_plotlyjs

    name = html_lib.escape(title)
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>servetune tuning: "
        f"{name}</title><style>{CSS}</style>{CATCH}<script type='text/javascript'>"
        f"{get_plotlyjs()}</script></head><body><pre id='servetune-js-errors'></pre>"
        f"<h1>servetune tuning</h1><p>{name}</p>"
    )


HISTORY_NOTE = (
    "The current policy's and the best policy's objective and SLO attainment (the "
    "target dotted), and each tuned knob's value, over the iterations; the tuned "
    "value dotted."
)


def page(
    history: pd.DataFrame, sens: pd.DataFrame, target: float, caption: str, title: str = ""
) -> str:
    """tuning.html: one self-contained document (plotly.js inlined once; nothing fetched) with
    the tuning history, the sensitivity figure, its `caption` (HTML) and table, and both
    tables as JSON (elements servetune-history, servetune-sensitivity)."""
    tuned = dict(zip(sens["knob"], sens["value"], strict=True))
    scales = dict(zip(sens["knob"], sens["scale"], strict=True))
    parts = [
        _head(title),
        f"<h2>Tuning history</h2><p class='note'>{HISTORY_NOTE}</p>",
        embed(history_plotly(history, scales, target, tuned), "fig-history"),
        "<h2>Sensitivity at the tuned point</h2>",
        f"<p class='note'>{caption}</p>",
        embed(sensitivity_plotly(sens), "fig-sensitivity"),
        _table(sens),
    ]
    for name, frame in (("history", history), ("sensitivity", sens)):
        data = frame.to_json(orient="records", double_precision=10).replace("</", "<\\/")
        parts.append(f"<script type='application/json' id='servetune-{name}'>{data}</script>")
    template = f"<script type='application/json' id='servetune-template'>{_template_json()}"
    parts += [template + "</script>", RENDER, "</body></html>"]
    return "\n".join(parts)


def write_views(
    out_dir: Path, history: pd.DataFrame, sens: pd.DataFrame, target: float, caption: str
) -> list[Path]:
    """Write sensitivity.csv, history.png, sensitivity.png and tuning.html into `out_dir`
    (each whole or not at all) from the tuner's history (history.csv's rows) and the
    sensitivity table (servetune.tuning.sensitivity.derivatives: its knobs, their scales and
    tuned values), with `target` the SLO attainment target (a fraction) and `caption` the
    page's description of the method (HTML). Returns the paths written."""
    out_dir = Path(out_dir)
    scales = dict(zip(sens["knob"], sens["scale"], strict=True))
    tuned = dict(zip(sens["knob"], sens["value"], strict=True))
    figures = {
        "history.png": history_figure(history, scales, target, tuned),
        "sensitivity.png": sensitivity_figure(sens),
    }
    written = [write_whole(out_dir / "sensitivity.csv", lambda tmp: sens.to_csv(tmp, index=False))]
    for name, fig in figures.items():
        written.append(write_whole(out_dir / name, lambda tmp, f=fig: f.savefig(tmp, dpi=120)))
    doc = page(history, sens, target, caption, str(out_dir))
    written.append(
        write_whole(
            out_dir / "tuning.html", lambda tmp: Path(tmp).write_text(doc, encoding="utf-8")
        )
    )
    return written
