"""What `servetune tune` shows after its last iteration, beside convergence.png: the start
against the tuned point (the run's result: per split, the objective, SLO attainment, useful
tokens per USD and goodput with their intervals, and each tuned knob's start, tuned and
exported value, range and bound flag; `comparison_rows`, `knob_rows`, shared with the
console), the tuning history (history.png: the objective, SLO attainment and each tuned
knob's value over the iterations, the tuned and the exported point marked, and why they are
not the path's last point) and the sensitivity of the tuned point (sensitivity.png,
sensitivity.csv: each knob's finite-difference derivative of log(useful tokens / USD) and of
SLO attainment with a 95% interval over the training scenarios,
servetune.tuning.sensitivity), all on one self-contained page (tuning.html: plotly.js inlined
once, as report.html has it)."""

from __future__ import annotations

import dataclasses
import html as html_lib
import json
import math
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from servetune.core.files import write_whole
from servetune.reporting.convergence import MIN_RELATIVE_SPAN, MIN_SPAN, y_range
from servetune.reporting.html import CATCH, CSS, RENDER, TEMPLATE, embed
from servetune.reporting.numbers import fmt
from servetune.reporting.stats import LEVEL
from servetune.reporting.ticks import no_offsets, plotly_log_ticks, set_log

DERIVATIVES = (
    ("d_log_tokens_per_usd", "d log(useful tokens / USD)"),
    ("d_attainment", "d SLO attainment"),
)
NO_INFO = "no information"  # a derivative whose scenarios give no interval
# a knob panel's values stay this far (a fraction of the axis) inside its frame
KNOB_MARGIN = 0.1
OBJECTIVE_NOTE = (
    "objective: log(useful tokens / USD) over the split's scenarios (tune.objective.aggregate), "
    "the tuner's; tuned - start: the paired per-scenario gain (0.01 is about 1% more useful "
    "tokens per dollar) with its 95% interval"
)


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What the tuning recommends, as the page and history.png show it: which policy was
    exported ("start" or "tuned") and why (`recommendation`), why the exported point is not
    the history's last point (`path_note`), the tuned knobs' start and tuned values, the
    iteration that scored the tuned point with its training objective and SLO attainment (None
    and NaN where unknown), the ranges (knob -> (low, high)), the knobs at a bound (knob ->
    words) and the evaluation's side-by-side records (tuning.evaluation.side_by_side)."""

    exported: str
    recommendation: str
    path_note: str
    start: dict
    tuned: dict
    tuned_iteration: int | None = None
    tuned_objective: float = math.nan
    tuned_attainment: float = math.nan
    ranges: dict = dataclasses.field(default_factory=dict)
    bounds: dict = dataclasses.field(default_factory=dict)
    evaluation: list = dataclasses.field(default_factory=list)
    deployed: dict = dataclasses.field(default_factory=dict)  # the export's values (floored)

    @property
    def exported_values(self) -> dict:
        """The exported policy's tuned knobs."""
        return self.start if self.exported == "start" else self.tuned


METRIC_HEADS = (  # side_by_side's metrics: (key, head)
    ("objective", "objective"),
    ("slo_attainment", "SLO attainment"),
    ("useful_tokens_per_dollar", "useful tokens / USD"),
    ("goodput_rps", "goodput (req/s)"),
)


def _verdict_word(record: dict) -> str:
    """A split's verdict in one word (side_by_side's record)."""
    if not record["held_out"]:
        return "trained on"
    if record.get("regression"):
        return "regression"
    return "improvement" if record.get("improvement") else "tie"


def _span(pair, fmt_one=fmt) -> str:
    return f"[{fmt_one(pair[0])}, {fmt_one(pair[1])}]" if pair else NO_INFO


def _signed_pct(x: float) -> str:
    if not math.isfinite(x):
        return "-"
    return "0%" if abs(x) < 5e-16 else f"{100 * x:+.3g}%"


def comparison_rows(records: list[dict]) -> list[dict]:
    """The start-vs-tuned table's rows from side_by_side's records: per split and metric, the
    start's and the tuned point's values (`start`, `tuned`: text), the tuned one's 95% interval
    over the split's scenarios (`interval`), the paired gain with its interval for the
    objective (`gain`), and on the split's first row its name, scenario count and verdict."""
    rows = []
    for rec in records:
        for k, (key, head) in enumerate(METRIC_HEADS):
            m = rec.get(key)
            if m is None:
                continue
            objective = key == "objective"
            rows.append(
                {
                    "split": rec["split"] if k == 0 else "",
                    "scenarios": f"{rec['scenarios']} scenario(s)" if k == 0 else "",
                    "metric": head,
                    "start": fmt(m["start"]),
                    "tuned": fmt(m["tuned"]),
                    "interval": "" if objective else _span(m["tuned_interval"]),
                    "gain": (
                        f"{_signed_pct(m['gain'])} {_span(m['gain_interval'], _signed_pct)}"
                        if objective
                        else ""
                    ),
                    "verdict": _verdict_word(rec) if k == 0 else "",
                }
            )
    return rows


BOUND_WORDS = ("low bound", "high bound", "below the range", "above the range")  # bound flags


def knob_rows(
    start: dict,
    tuned: dict,
    exported: str,
    ranges: dict,
    bounds: dict,
    deployed: dict | None = None,
) -> list[dict]:
    """The start-vs-tuned table's knob rows: per tuned knob (`ranges`: knob -> (low, high),
    tune.space) its start, tuned and exported value (`deployed`'s where given: as the export
    writes it, integer limits floored), its range and its bound flag (`bound`: words, or "";
    `at`: the flag's BOUND_WORDS)."""
    rows = []
    for key, (low, high) in ranges.items():
        value = (start if exported == "start" else tuned).get(key)
        value = (deployed or {}).get(key, value)
        rows.append(
            {
                "knob": key,
                "start": fmt(start.get(key)),
                "tuned": fmt(tuned.get(key)),
                "exported": fmt(value),
                "range": f"[{low:g}, {high:g}]",
                "bound": bounds.get(key, ""),
                "at": next((w for w in BOUND_WORDS if w in bounds.get(key, "")), ""),
            }
        )
    return rows


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


def _marks(outcome: Outcome | None, key: str) -> dict:
    """What a knob's panel marks (knob -> value, None where not drawn): the tuned point at its
    iteration, the exported value, and the bound of its range it sits at."""
    if outcome is None:
        return {}
    finite = lambda v: v if v is not None and math.isfinite(float(v)) else None
    flag = outcome.bounds.get(key, "")
    low, high = outcome.ranges.get(key, (None, None))
    value = outcome.exported_values.get(key)
    return {
        "tuned": finite(outcome.tuned.get(key)),
        "exported": finite(value),
        "unlimited": value is not None and math.isinf(float(value)),
        "bound": low if "low bound" in flag else high if "high bound" in flag else None,
    }


def _exported_label(outcome: Outcome) -> str:
    return "exported: the start" if outcome.exported == "start" else "exported: the tuned point"


def history_figure(
    history: pd.DataFrame,
    scales: dict[str, str],
    target: float,
    tuned: dict | None = None,
    outcome: Outcome | None = None,
) -> Figure:
    """history.png's figure from the tuner's history (history.csv): against the iteration,
    log(useful tokens / USD) and SLO attainment (a fraction; the target dotted) of the current
    and the best policy, then each tuned knob's value (`scales`: knob -> log | linear, a log
    knob on a log axis with 1-2-5 ticks; every value KNOB_MARGIN inside the frame). With an
    `outcome`: the tuned point as a star at its iteration, the exported value dotted, a bound
    the tuned knob sits at dashed, and, under the title, why the exported point is not the
    line's last point; else the `tuned` values dotted."""
    knobs = [k for k in scales if f"policy.{k}" in history]
    note = textwrap.fill(outcome.path_note, 100) if outcome is not None else ""
    lines = note.count("\n") + 1 if note else 0
    fig = Figure(figsize=(7, 2.0 * (2 + len(knobs)) + 0.4 + 0.18 * lines), layout="constrained")
    axes = np.atleast_1d(fig.subplots(2 + len(knobs), 1, sharex=True))
    x = history["iteration"]
    star = outcome is not None and outcome.tuned_iteration is not None
    for ax, what, name in (
        (axes[0], "objective", "log(useful tokens / USD)"),
        (axes[1], "slo_attainment", "SLO attainment"),
    ):
        ax.plot(x, history[f"center_{what}"], "o-", label="current policy")
        ax.plot(x, history[f"best_{what}"], "s--", label="best so far")
        extra = [target] if what == "slo_attainment" else []
        if star:
            value = outcome.tuned_objective if what == "objective" else outcome.tuned_attainment
            ax.plot([outcome.tuned_iteration], [value], "*", ms=13, color="C3", label="tuned point")
            extra.append(value)
        values = np.concatenate([history[f"center_{what}"], history[f"best_{what}"], extra])
        ax.set_ylim(
            *y_range(values, MIN_SPAN["objective" if what == "objective" else "attainment"])
        )
        ax.set_ylabel(name)
    axes[1].axhline(target, color="gray", lw=1, ls=":", label="target")
    axes[0].legend(fontsize=8)
    axes[1].legend(fontsize=8)
    for i, (ax, k) in enumerate(zip(axes[2:], knobs, strict=True)):
        marks = _marks(outcome, k) or {"exported": (tuned or {}).get(k)}
        _knob_panel(
            ax,
            x,
            history[f"policy.{k}"].to_numpy(float),
            k,
            scales[k],
            marks,
            outcome.tuned_iteration if star else None,
            _exported_label(outcome) if outcome is not None else "tuned",
            legend=i == 0 or bool(_marks(outcome, k).get("bound")),
        )
    for ax in axes:
        ax.grid(alpha=0.3)
    axes[-1].xaxis.set_major_locator(MaxNLocator(integer=True))
    axes[-1].set_xlabel("iteration")
    fig.suptitle("tuning history" + (f"\n{note}" if note else ""), fontsize=9 if note else 11)
    no_offsets(fig)
    return fig


def knob_limits(values, scale: str, margin: float = KNOB_MARGIN) -> tuple[float, float, bool]:
    """(low, high, log) of the y axis of a knob's panel over its `values`: a log knob whose
    positive values span a factor 3 or more on a log axis, any other knob on a linear one at
    least y_range's smallest span wide; either way the values kept `margin` of the axis
    inside its ends, so that none is drawn on the frame."""
    v = np.asarray(values, np.float64)
    v = v[np.isfinite(v)]
    if not len(v):
        return 0.0, 1.0, False
    # a log axis where the values span a factor 3 at least (a narrower one has one tick)
    log = scale == "log" and v.min() > 0 and v.max() >= 3 * v.min()
    if log:
        lo, hi = math.log(v.min()), math.log(v.max())
        span = hi - lo
    else:  # at least y_range's smallest span
        lo, hi, top = float(v.min()), float(v.max()), float(np.abs(v).max())
        span = max(hi - lo, 1e-3 * max(1.0, top), MIN_RELATIVE_SPAN * top)
    mid = 0.5 * (lo + hi)
    half = 0.5 * span / (1 - 2 * margin)  # the values' span is (1 - 2 margin) of the axis
    lo, hi = mid - half, mid + half
    return (math.exp(lo), math.exp(hi), True) if log else (lo, hi, False)


def _knob_panel(
    ax,
    x,
    values: np.ndarray,
    key: str,
    scale: str,
    marks: dict,
    at: int | None,
    exported_label: str,
    legend: bool,
) -> None:
    """One knob's values over the iterations on `ax` (knob_limits), with `marks` (_marks:
    the tuned point as a star at iteration `at`, the exported value dotted, a bound the
    tuned point sits at dashed)."""
    ax.plot(x, values, "o-", color="C2", label="current policy")
    shown = [values]
    if marks.get("exported") is not None:
        ax.axhline(marks["exported"], color="C3", lw=1.5, ls=":", label=exported_label, zorder=3)
        shown.append([marks["exported"]])
    elif marks.get("unlimited"):  # an unlimited cap: no line to draw, said in words
        ax.text(
            0.99,
            0.95,
            f"{exported_label}: inf",
            transform=ax.transAxes,
            ha="right",
            va="top",
            fontsize=8,
            color="C3",
        )
    if marks.get("tuned") is not None and at is not None:
        ax.plot([at], [marks["tuned"]], "*", ms=13, color="C3", label="tuned point")
        shown.append([marks["tuned"]])
    if marks.get("bound") is not None:
        ax.axhline(marks["bound"], color="gray", lw=1, ls="--", label="bound of tune.space")
        shown.append([marks["bound"]])
    lo, hi, log = knob_limits(np.concatenate([np.asarray(v, float) for v in shown]), scale)
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
    history: pd.DataFrame,
    scales: dict[str, str],
    target: float,
    tuned: dict | None = None,
    outcome: Outcome | None = None,
):
    """The page's history figure: history_figure's panels and marks, one plotly subplot
    each."""
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
    at = None if outcome is None else outcome.tuned_iteration
    star = lambda row, y, first: fig.add_trace(
        go.Scatter(
            x=[at],
            y=_none([y]),
            name="tuned point",
            legendgroup="tuned",
            showlegend=first,
            mode="markers",
            marker={"symbol": "star", "size": 14, "color": "#d62728"},
        ),
        row=row,
        col=1,
    )
    for row, what, span in (
        (1, "objective", MIN_SPAN["objective"]),
        (2, "slo_attainment", MIN_SPAN["attainment"]),
    ):
        extra = [target] if row == 2 else []
        if outcome is not None and at is not None:
            value = outcome.tuned_objective if row == 1 else outcome.tuned_attainment
            star(row, value, row == 1)
            extra.append(value)
        values = np.concatenate([history[f"center_{what}"], history[f"best_{what}"], extra])
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
        marks = _marks(outcome, k) or {"exported": (tuned or {}).get(k)}
        if marks.get("exported") is not None:
            fig.add_hline(
                y=marks["exported"], line={"dash": "dot", "color": "#d62728"}, row=i, col=1
            )
            values = np.append(values, marks["exported"])
        if marks.get("tuned") is not None and at is not None:
            star(i, marks["tuned"], False)
            values = np.append(values, marks["tuned"])
        if marks.get("bound") is not None:
            fig.add_hline(y=marks["bound"], line={"dash": "dash", "color": "gray"}, row=i, col=1)
            values = np.append(values, marks["bound"])
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
    "target dotted), and each tuned knob's value, over the iterations; the exported "
    "value dotted, the tuned point a star, a bound of tune.space the tuned point sits at "
    "dashed."
)


def _html_table(heads: list[str], rows: list[list[str]], left: int = 0) -> str:
    """An HTML table of text cells, escaped; the first `left` columns left-aligned."""
    style = lambda k: " style='text-align:left'" if k < left else ""
    head = "".join(f"<th{style(k)}>{html_lib.escape(h)}</th>" for k, h in enumerate(heads))
    body = "".join(
        "<tr>"
        + "".join(f"<td{style(k)}>{html_lib.escape(str(c))}</td>" for k, c in enumerate(r))
        + "</tr>"
        for r in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def outcome_section(outcome: Outcome) -> str:
    """The page's first section: the recommendation in words, the start-vs-tuned table per
    split (comparison_rows) and the tuned knobs (knob_rows)."""
    rows = comparison_rows(outcome.evaluation)
    metrics = _html_table(
        ["split", "", "metric", "start", "tuned", "tuned: 95% interval", "tuned - start"]
        + ["verdict"],
        [
            [r["split"], r["scenarios"], r["metric"], r["start"], r["tuned"], r["interval"]]
            + [r["gain"], r["verdict"]]
            for r in rows
        ],
        left=3,
    )
    knobs = knob_rows(
        outcome.start,
        outcome.tuned,
        outcome.exported,
        outcome.ranges,
        outcome.bounds,
        outcome.deployed,
    )
    knob_table = _html_table(
        ["knob", "start", "tuned", "exported", "range (tune.space)", "bound"],
        [[r["knob"], r["start"], r["tuned"], r["exported"], r["range"], r["bound"]] for r in knobs],
        left=1,
    )
    verdicts = "".join(
        f"<li>{html_lib.escape(r['split'])}: {html_lib.escape(r['verdict'])}</li>"
        for r in outcome.evaluation
        if r.get("verdict")
    )
    return (
        "<h2>Start vs tuned</h2>"
        f"<p><b>{html_lib.escape(outcome.recommendation)}</b></p>"
        + (f"<ul class='note'>{verdicts}</ul>" if verdicts else "")
        + metrics
        + f"<p class='note'>{html_lib.escape(OBJECTIVE_NOTE)}</p>"
        + knob_table
    )


def page(
    history: pd.DataFrame,
    sens: pd.DataFrame,
    target: float,
    caption: str,
    title: str = "",
    outcome: Outcome | None = None,
    measured: bool = True,
) -> str:
    """tuning.html: one self-contained document (plotly.js inlined once; nothing fetched)
    opening with the start-vs-tuned section (`outcome`: outcome_section), then the tuning
    history (with why the exported point is not its last point), the sensitivity figure, its
    `caption` (HTML) and table where `measured` (tune.eval.sensitivity), and the tables as JSON
    (elements servetune-history, servetune-sensitivity)."""
    tuned = dict(zip(sens["knob"], sens["value"], strict=True))
    scales = dict(zip(sens["knob"], sens["scale"], strict=True))
    path = f" {html_lib.escape(outcome.path_note)}" if outcome is not None else ""
    parts = [
        _head(title),
        outcome_section(outcome) if outcome is not None else "",
        f"<h2>Tuning history</h2><p class='note'>{HISTORY_NOTE}{path}</p>",
        embed(history_plotly(history, scales, target, tuned, outcome), "fig-history"),
    ]
    parts += (
        [
            "<h2>Sensitivity at the tuned point</h2>",
            f"<p class='note'>{caption}</p>",
            embed(sensitivity_plotly(sens), "fig-sensitivity"),
            _table(sens),
        ]
        if measured
        else ["<p class='note'>Sensitivity: not measured (tune.eval.sensitivity=false).</p>"]
    )
    for name, frame in (("history", history), ("sensitivity", sens)):
        data = frame.to_json(orient="records", double_precision=10).replace("</", "<\\/")
        parts.append(f"<script type='application/json' id='servetune-{name}'>{data}</script>")
    template = f"<script type='application/json' id='servetune-template'>{_template_json()}"
    parts += [template + "</script>", RENDER, "</body></html>"]
    return "\n".join(parts)


def write_views(
    out_dir: Path,
    history: pd.DataFrame,
    sens: pd.DataFrame,
    target: float,
    caption: str,
    outcome: Outcome | None = None,
    measured: bool = True,
) -> list[Path]:
    """Write history.png and tuning.html, and where `measured` (tune.eval.sensitivity)
    sensitivity.csv and sensitivity.png, into `out_dir` (each whole or not at all) from the
    tuner's history (history.csv's rows), the sensitivity table (servetune.tuning.sensitivity:
    its knobs, their scales and tuned values; sensitivity.unmeasured's where not measured)
    and the recommendation (`outcome`: the page's first section and the marks of
    history.png), with `target` the SLO attainment target (a fraction) and `caption` the
    page's description of the method (HTML). Returns the paths written."""
    out_dir = Path(out_dir)
    scales = dict(zip(sens["knob"], sens["scale"], strict=True))
    tuned = dict(zip(sens["knob"], sens["value"], strict=True))
    figures = {"history.png": history_figure(history, scales, target, tuned, outcome)}
    written = []
    if measured:
        figures["sensitivity.png"] = sensitivity_figure(sens)
        written.append(
            write_whole(out_dir / "sensitivity.csv", lambda tmp: sens.to_csv(tmp, index=False))
        )
    for name, fig in figures.items():
        written.append(write_whole(out_dir / name, lambda tmp, f=fig: f.savefig(tmp, dpi=120)))
    doc = page(history, sens, target, caption, str(out_dir), outcome, measured)
    written.append(
        write_whole(
            out_dir / "tuning.html", lambda tmp: Path(tmp).write_text(doc, encoding="utf-8")
        )
    )
    return written
