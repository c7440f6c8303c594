"""Axis ticks that read at a glance, the same in the PNGs (matplotlib) and on the page
(plotly): a logarithmic axis gets major ticks at 1-2-5 steps (1, 2, 5, 10, 20, 50, ...) in the
axis' own unit (ms for a latency), labelled as plain numbers ("200", "1000", "0.5"; no
scientific notation, no labelled minor ticks); no axis gets an offset (a constant added to
every tick label, "+1.4265e1", which draws a change of 0.01% as a jump across the axis); and
an axis whose values (one point, or several that agree) spread over less than MIN_SPAN of
their size spans MIN_SPAN around them (fit_range): a single point at 738298.7 reads
"720000 ... 760000", not "738298 ... 738299.5", and float noise is not magnified."""

from __future__ import annotations

import math

import numpy as np
from matplotlib.ticker import FuncFormatter, Locator, NullFormatter, ScalarFormatter

MANTISSAS = (1.0, 2.0, 5.0)
MAX_TICKS = 10  # more 1-2-5 steps than this in view: the powers of ten only (then every k-th)
PAD = 1.25  # the tick span of a plotly log axis: the data's, widened by this factor each way
MIN_SPAN = 0.1  # the least span of a linear axis, relative to its values' size (+- 5%)


def fit_range(values, min_span: float = MIN_SPAN) -> tuple[float, float] | None:
    """The range of a linear axis over `values` (finite ones) that spread over less than
    `min_span` times their largest magnitude: that span centred on them ((-1, 1) where they
    are all 0); None where they spread more (or there are none): the axis autoranges."""
    v = np.asarray(values, np.float64).ravel()
    v = v[np.isfinite(v)]
    if not len(v):
        return None
    size = float(np.abs(v).max())
    lo, hi = float(v.min()), float(v.max())
    if size == 0.0:
        return (-1.0, 1.0)
    if hi - lo >= min_span * size:
        return None
    mid, half = (lo + hi) / 2, min_span * size / 2
    return (mid - half, mid + half)


def _in(values, lo: float, hi: float) -> list[float]:
    eps = 1e-9
    return [float(f"{v:.12g}") for v in values if lo * (1 - eps) <= v <= hi * (1 + eps)]


def steps_125(lo: float, hi: float, max_ticks: int = MAX_TICKS) -> list[float]:
    """The tick values of a log axis spanning [lo, hi] (in its own unit, lo > 0): 1, 2 and 5
    times the powers of ten inside it; the powers of ten only where those are more than
    `max_ticks` (every k-th power where even those are); 1-9 times the powers of ten where
    fewer than two 1-2-5 steps fall inside. [] for a span that is not positive and finite."""
    lo, hi = sorted((float(lo), float(hi)))
    if not (math.isfinite(lo) and math.isfinite(hi) and lo > 0):
        return []
    decades = range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)
    ticks = _in([m * 10.0**e for e in decades for m in MANTISSAS], lo, hi)
    if len(ticks) > max_ticks:
        ticks = _in([10.0**e for e in decades], lo, hi)
        ticks = ticks[:: math.ceil(len(ticks) / max_ticks)]
    if len(ticks) < 2:
        ticks = _in([m * 10.0**e for e in decades for m in range(1, 10)], lo, hi)
    return ticks


def tick_text(value: float) -> str:
    """A tick value as a plain number: "1000", "20", "0.5" (never "1e+03" or "10³")."""
    return np.format_float_positional(float(value), trim="-")


def plotly_log_ticks(values) -> dict:
    """The tick settings of a plotly axis drawn logarithmic over `values` (its data, in the
    axis' unit): {tickmode, tickvals, ticktext} at 1-2-5 steps over the positive finite
    values widened by PAD each way; plotly's own ticks ({tickmode: auto}) when there is none."""
    v = np.asarray(values, np.float64).ravel()
    v = v[np.isfinite(v) & (v > 0)]
    ticks = steps_125(v.min() / PAD, v.max() * PAD) if len(v) else []
    if not ticks:
        return {"tickmode": "auto"}
    return {"tickmode": "array", "tickvals": ticks, "ticktext": [tick_text(t) for t in ticks]}


def axis_type_args(
    axis: str, kind: str, ticks: dict, linear: dict | None = None, linear_range=None
) -> dict:
    """plotly relayout arguments switching layout axis `axis` ("xaxis2") to `kind` ("linear"
    or "log"): log with the 1-2-5 `ticks` (plotly_log_ticks), autoranged; linear with the
    ticks `linear` (default plotly's own) and `linear_range` ([lo, hi]: an axis over values
    that do not spread, fit_range) or autoranged."""
    out = {f"{axis}.type": kind}
    chosen = ticks if kind == "log" else linear or {"tickmode": "auto"}
    out.update({f"{axis}.{k}": v for k, v in chosen.items()})
    if kind == "linear" and linear_range is not None:
        out[f"{axis}.range"] = list(linear_range)
    else:
        out[f"{axis}.autorange"] = True
    return out


def mpl_log_axis(axis) -> None:
    """Make a matplotlib Axis (ax.xaxis, already log scale) tick at 1-2-5 steps of the view,
    labelled as plain numbers, its minor ticks unlabelled."""
    axis.set_major_locator(Steps125())
    axis.set_major_formatter(FuncFormatter(lambda v, _pos: tick_text(v)))
    axis.set_minor_formatter(NullFormatter())


def set_log(ax, which: str) -> None:
    """Put `which` ("x" or "y") of matplotlib Axes `ax` on a log scale with 1-2-5 ticks."""
    (ax.set_xscale if which == "x" else ax.set_yscale)("log")
    mpl_log_axis(ax.xaxis if which == "x" else ax.yaxis)


def no_offsets(fig) -> None:
    """Turn off the offset (and the scientific multiplier) of every linear axis of a
    matplotlib Figure: each tick label then reads as the value itself."""
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            f = axis.get_major_formatter()
            if isinstance(f, ScalarFormatter):
                f.set_useOffset(False)
                f.set_scientific(False)


CHAR_EM = 0.62  # a tick label digit's width, in ems (DejaVu Sans)
TICK_GAP_PX = 6.0  # the least gap between two tick labels of a matplotlib log axis


class Steps125(Locator):
    """A matplotlib tick locator: steps_125 over the axis' view interval; the powers of ten
    alone where the 1-2-5 steps' labels would run into one another ("1000020000" on a narrow
    x axis)."""

    def __call__(self):
        lo, hi = self.axis.get_view_interval()
        ticks = steps_125(lo, hi)
        if len(ticks) > 2 and self._crowded(ticks):
            ticks = steps_125(lo, hi, len(ticks) - 1)
        return ticks

    def _crowded(self, ticks: list) -> bool:
        """Whether labels of `ticks` placed at their pixels would overlap along the axis."""
        axes = getattr(self.axis, "axes", None)
        if axes is None:
            return False
        import matplotlib as mpl

        x = self.axis.axis_name == "x"
        size = mpl.font_manager.FontProperties(
            size=mpl.rcParams[f"{'x' if x else 'y'}tick.labelsize"]
        )
        px = size.get_size_in_points() * axes.figure.dpi / 72.0
        at = axes.transData.transform([(t, t) for t in ticks])[:, 0 if x else 1]
        extent = np.array([len(tick_text(t)) * CHAR_EM * px if x else px for t in ticks])
        need = (extent[:-1] + extent[1:]) / 2 + TICK_GAP_PX
        return bool(np.any(np.abs(np.diff(at)) < need))

    def tick_values(self, vmin, vmax):
        """The 1-2-5 steps within [vmin, vmax] (steps_125)."""
        return steps_125(vmin, vmax)
