"""Report figures that read at a glance: tied settings share one label and no
label overprints another on the Pareto fronts; log axes tick at 1-2-5 steps with plain
labels; the timeline's legend names its line styles; convergence.png has no offset axis and
does not magnify float noise; report.html stays small (one plotly.js, decimated series).

Inputs are built by hand (points tables, timeline tables, run folders); nothing is simulated.
"""

import itertools
import re

import numpy as np
import pandas as pd
import pytest
import yaml
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.text import Text
from test_report_choose import _sweep

from servetune.reporting import figures, html, html_figures, report
from servetune.reporting.collect import collect
from servetune.reporting.convergence import convergence_figure, y_range
from servetune.reporting.labels import PLOTLY_POSITIONS, overlap, tie_groups, tied_label
from servetune.reporting.latency import point_cdfs
from servetune.reporting.ticks import plotly_log_ticks, steps_125, tick_text
from servetune.reporting.timeline import Timeline, steps
from servetune.tuning import runner

SETTING = "policy.max_num_seqs"
BEST = pd.DataFrame({"point": ["max_num_seqs=64"]})


def _tied(conditions=(None,)) -> pd.DataFrame:
    """Six settings per condition: 64, 128 and 256 give the same numbers (their cap is never
    reached), 32 lands within 0.5% of them (a different point, drawn on top of theirs)."""
    rows = []
    for rate in conditions:
        for mns, ttft, tpot, tpd, good in (
            (8, 0.30, 0.010, 1000.0, 4.0),
            (16, 0.45, 0.012, 2000.0, 4.5),
            (32, 0.995, 0.0199, 2985.0, 4.78),
            (64, 1.0, 0.020, 3000.0, 4.8),
            (128, 1.0, 0.020, 3000.0, 4.8),
            (256, 1.0, 0.020, 3000.0, 4.8),
        ):
            rows.append(
                {
                    "workload.rate": rate,
                    SETTING: mns,
                    "ttft_p99_s_mean": ttft,
                    "tpot_p99_s_mean": tpot,
                    "useful_tokens_per_dollar_mean": tpd,
                    "goodput_rps_mean": good,
                    "slo.ttft_s": 2.0,
                    "slo.tpot_s": 0.1,
                    "n": 2,
                    "point": f"max_num_seqs={mns}"
                    if rate is None
                    else f"workload.rate={rate}, max_num_seqs={mns}",
                }
            )
    return pd.DataFrame(rows).drop(columns=[] if conditions != (None,) else ["workload.rate"])


def _setting_texts(ax) -> list:
    return [t for t in ax.texts if "max_num_seqs" in t.get_text()]


def _text_box(t, renderer) -> tuple:
    """The box (pixels) of an annotation's text alone (not its line to the point)."""
    b = Text.get_window_extent(t, renderer)
    return b.x0, b.y0, b.x1, b.y1


# --------------------------------------------------------------------------- labels


def test_points_tie_at_display_precision_and_their_settings_share_a_label():
    assert tie_groups([1.0, 1.0004, 1.01, np.nan, np.nan], [5.0, 5.0, 5.0, 1.0, 1.0]) == [
        [0, 1],
        [2],
        [3],
        [4],
    ]  # 3 significant digits; NaN ties with nothing
    rows = pd.DataFrame({SETTING: [64, 128, 256], "policy.order": ["fcfs"] * 3})
    assert tied_label(rows, [SETTING]) == "max_num_seqs=64, 128, 256"
    assert tied_label(rows, ["policy.order", SETTING]) == "order=fcfs, max_num_seqs=64/128/256"
    rows["policy.order"] = ["fcfs", "priority", "fcfs"]
    assert tied_label(rows, ["policy.order", SETTING]) == (
        "order=fcfs, max_num_seqs=64; order=priority, max_num_seqs=128; "
        "order=fcfs, max_num_seqs=256"
    )
    assert tied_label(rows.iloc[:1], [SETTING]) == "max_num_seqs=64"


@pytest.mark.parametrize("conditions, keys", [((None,), []), ((5, 40), ["workload.rate"])])
def test_png_front_labels_group_ties_and_none_overprints_another(conditions, keys):
    """Before: 64, 128 and 256 each drew its label at the same spot, and 32's over them; with
    two conditions of equal numbers, every label twice at one spot."""
    fig = figures.pareto_png(_tied(conditions), keys, [SETTING], BEST)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        texts = _setting_texts(ax)
        assert sorted(t.get_text() for t in texts) == sorted(
            ["max_num_seqs=8", "max_num_seqs=16", "max_num_seqs=32", "max_num_seqs=64, 128, 256"]
            * len(conditions)
        )
        boxes = [_text_box(t, renderer) for t in texts]
        for (i, a), (j, b) in itertools.combinations(enumerate(boxes), 2):
            shared = overlap(a, b)
            assert shared < 1.0, (ax.get_xlabel(), texts[i].get_text(), texts[j].get_text())


@pytest.mark.parametrize("conditions, keys", [((None,), []), ((5, 40), ["workload.rate"])])
def test_page_front_labels_group_ties_and_take_distinct_places(conditions, keys):
    fig = html_figures.pareto_figure(_tied(conditions), keys, [SETTING], BEST)
    fronts = [t for t in fig.data if t.mode == "lines+markers+text" and t.xaxis == "x"]
    drawn = [
        (x, y, text, pos, t.name)
        for t in fronts
        for x, y, text, pos in zip(t.x, t.y, t.texttemplate, t.textposition, strict=True)
        if text
    ]
    assert sorted(d[2] for d in drawn) == sorted(
        ["max_num_seqs=8", "max_num_seqs=16", "max_num_seqs=32", "max_num_seqs=64, 128, 256"]
        * len(conditions)
    )
    assert all(pos in PLOTLY_POSITIONS.values() for *_, pos, _ in drawn)
    # no two labels at one spot: equal points (other conditions) and 32 beside the tie
    # (0.5% apart) take different places around their points
    assert len({(x, y, pos) for x, y, _, pos, _ in drawn}) == len(drawn)
    near = [pos for x, _, text, pos, _ in drawn if "=32" in text or "64, 128" in text]
    assert len(set(near)) == len(near)


def test_a_crowded_front_keeps_every_png_label_apart_and_leaves_some_out_on_the_page():
    """Ten settings within 1% of one another, all on the front: the PNG lifts labels until
    they are free; the page, whose text can only take six places, leaves out those with none
    (hover names them) rather than overprint."""
    k = np.arange(11)  # 0: far away, setting the scale; 1-10: 1% apart, all on the front
    points = pd.DataFrame(
        {
            SETTING: 10 + k,
            "point": [f"max_num_seqs={v}" for v in 10 + k],
            "ttft_p99_s_mean": np.where(k, 1.0 + 0.01 * k, 0.2),
            "tpot_p99_s_mean": np.where(k, 0.02 + 2e-4 * k, 0.01),
            "useful_tokens_per_dollar_mean": np.where(k, 3000.0 + 10 * k, 1e3),
            "goodput_rps_mean": np.where(k, 4.0 + 0.01 * k, 1.0),
            "n": 2,
        }
    )
    fig = figures.pareto_png(points, [], [SETTING], BEST)
    fig.canvas.draw()
    for ax in fig.axes:
        boxes = [_text_box(t, fig.canvas.get_renderer()) for t in _setting_texts(ax)]
        assert len(boxes) == 11
        assert all(overlap(a, b) < 1.0 for a, b in itertools.combinations(boxes, 2))
        inside = ax.get_window_extent(fig.canvas.get_renderer())  # none leaves the axes
        assert all(
            inside.x0 <= b[0] and b[2] <= inside.x1 + 1 and b[3] <= inside.y1 + 1 for b in boxes
        )
    page = html_figures.pareto_figure(points, [], [SETTING], BEST)
    front = next(t for t in page.data if t.mode == "lines+markers+text" and t.xaxis == "x")
    drawn = [
        (pos, text)
        for text, pos in zip(front.texttemplate, front.textposition, strict=True)
        if text
    ]
    assert 1 < len(drawn) < 11 and len(set(drawn)) == len(drawn)
    assert len(front.text) == 11  # every point keeps its hover


# --------------------------------------------------------------------------- log ticks


def test_log_ticks_are_1_2_5_steps_as_plain_numbers():
    assert steps_125(80, 30000) == [100, 200, 500, 1000, 2000, 5000, 10000, 20000]
    assert steps_125(0.04, 3) == [0.05, 0.1, 0.2, 0.5, 1, 2]
    assert steps_125(1e-3, 1e9) == [1e-3, 1e-1, 10, 1e3, 1e5, 1e7, 1e9]  # too many: decades
    assert steps_125(300, 450) == [300, 400]  # under two 1-2-5 steps: 1-9 steps
    assert steps_125(0, 10) == [] and steps_125(1, np.inf) == []
    assert [tick_text(v) for v in (1000.0, 20000.0, 0.05, 1e7)] == [
        "1000",
        "20000",
        "0.05",
        "10000000",
    ]
    assert plotly_log_ticks([800.0, 30000.0, np.nan, 0.0]) == {
        "tickmode": "array",
        "tickvals": [1000, 2000, 5000, 10000, 20000],
        "ticktext": ["1000", "2000", "5000", "10000", "20000"],
    }


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """The hand-made multirun of test_report_choose (P99 TTFT 800 ms to 30 s) and its report
    (no files but the tables)."""
    root = tmp_path_factory.mktemp("figs") / "mr"
    _sweep(root)
    return root, report(root, root.parent / "out", n_boot=50, figures=False, html=False)


def _cdfs(root, rep) -> dict:
    return point_cdfs(collect(root, exclude=rep.out_dir), skipped=[])


def _shown_labels(axis) -> list:
    lo, hi = sorted(axis.get_view_interval())
    return [
        t.get_text()
        for t, v in zip(axis.get_majorticklabels(), axis.get_majorticklocs(), strict=True)
        if lo <= v <= hi
    ]


def test_png_log_axes_tick_at_1_2_5_steps_with_plain_labels(made, monkeypatch):
    """Before: P99 TTFT read '10^3 2x10^3 3x10^3 ...' with the minor ticks' labels colliding."""
    root, rep = made
    fig = figures.pareto_png(rep.points, rep.conditions, rep.settings, rep.best)
    kept = {}
    monkeypatch.setattr(figures, "_save", lambda f, path: kept.setdefault(path.name, f))
    figures.draw_cdfs(rep.points, _cdfs(root, rep), rep.best, root)
    figures.draw(rep.points, rep.keys, root)
    per_key = kept["fig_policy.max_num_seqs.png"].axes[3]  # P99 TTFT over max_num_seqs
    cases = [
        (fig.axes[0].xaxis, ["1000", "2000", "5000", "10000", "20000"]),  # 0.8-30 s
        # 0.1-30 s on a third of the figure's width: its 1-2-5 labels ran into one another
        # ("1000020000"), so the powers of ten
        (kept["fig_latency_cdf.png"].axes[0].xaxis, ["100", "1000", "10000"]),
        (per_key.yaxis, ["500", "1000", "2000", "5000", "10000", "20000"]),
    ]  # with CIs
    for f in (fig, kept["fig_latency_cdf.png"], kept["fig_policy.max_num_seqs.png"]):
        f.draw_without_rendering()
    for axis, want in cases:
        assert axis.get_scale() == "log"
        assert _shown_labels(axis) == want
        assert all(t.get_text() == "" for t in axis.get_minorticklabels())
        renderer = _drawn(axis.axes.figure).canvas.get_renderer()
        boxes = [_text_box(t, renderer) for t in axis.get_majorticklabels() if t.get_text() in want]
        assert all(overlap(a, b) == 0.0 for a, b in itertools.combinations(boxes, 2))


def test_page_log_axes_tick_at_1_2_5_steps_and_the_buttons_keep_them(made):
    root, rep = made
    fig = html_figures.pareto_figure(rep.points, rep.conditions, rep.settings, rep.best)
    want = [1000, 2000, 5000, 10000, 20000]  # 800 ms / 1.25 to 30 s * 1.25
    ax = fig.layout.xaxis
    assert (ax.type, ax.tickmode, list(ax.tickvals)) == ("log", "array", want)
    assert list(ax.ticktext) == [str(v) for v in want] and ax.exponentformat == "none"
    linear, log = fig.layout.updatemenus[0].buttons
    assert log.args[0]["xaxis.tickvals"] == want and log.args[0]["xaxis.type"] == "log"
    assert linear.args[0]["xaxis.tickmode"] == "auto" and linear.args[0]["xaxis2.type"] == "linear"
    # TPOT (15-80 ms) starts linear; its log button still brings 1-2-5 ticks
    assert fig.layout.xaxis2.type is None and log.args[0]["xaxis2.tickvals"] == [20, 50, 100]
    cdf = html_figures.cdf_figure(rep.points, _cdfs(root, rep), rep.best)
    assert cdf.layout.xaxis.type == "log" and list(cdf.layout.xaxis.ticktext) == [
        "100",
        "200",
        "500",
        "1000",
        "2000",
        "5000",
        "10000",
        "20000",
    ]
    per_key = html.figure(rep.points, rep.keys, "policy.max_num_seqs")
    with_ci = [200, 500] + want  # the P99 TTFT panel's intervals and the P50s the buttons show
    assert per_key.layout.yaxis4.type == "log" and list(per_key.layout.yaxis4.ticktext) == [
        str(v) for v in with_ci
    ]
    y_log = per_key.layout.updatemenus[1].buttons[1].args[0]
    assert y_log["yaxis4.tickvals"] == with_ci and y_log["yaxis4.type"] == "log"


# --------------------------------------------------------------------------- timeline


def _timeline(n=6, instances=(0, 1)) -> Timeline:
    t = np.arange(n) * 0.5
    table = pd.concat(
        [
            pd.DataFrame(
                {
                    "t_s": t,
                    "instance": i,
                    "queue_len": (np.arange(n) * 7 + i) % 5,
                    "running": 4,
                    "batch_tokens": 100,
                    "kv_blocks": 10,
                    "preemptions": 0,
                }
            )
            for i in instances
        ]
    )
    return Timeline(run="2", scenario=0, why="by hand", table=table.reset_index(drop=True))


def test_timeline_legends_name_each_instance_and_each_line_style():
    """Before: dotted and solid lines, and a legend of 'instance 0' only (the page)."""
    want = ["instance 0", "instance 1", "waiting (dotted)", "running (solid)"]
    fig = figures.timeline_png(_timeline())
    legend = fig.axes[0].get_legend()
    assert [t.get_text() for t in legend.get_texts()] == want
    assert [h.get_linestyle() for h in legend.legend_handles] == ["-", "-", ":", "-"]
    drawn = {line.get_label(): line.get_linestyle() for line in fig.axes[0].lines}
    assert drawn["instance 1: waiting"] == ":" and drawn["instance 1: running"] == "-"
    page = html_figures.timeline_figure(_timeline())
    assert [t.name for t in page.data if t.showlegend is not False] == want
    dashes = {
        (t.name, t.hovertemplate.split(":")[0]): t.line.dash
        for t in page.data
        if t.xaxis == "x" and t.hovertemplate
    }
    assert dashes[("instance 1", "instance 1 waiting")] == "dot"
    assert dashes[("instance 1", "instance 1 running")] == "solid"
    assert {t.line.dash for t in page.data if t.name == "waiting (dotted)"} == {"dot"}
    assert {t.line.dash for t in page.data if t.showlegend and "instance" in t.name} == {
        "solid"
    }  # an instance's legend line is not mistaken for a waiting line


def test_a_long_timeline_is_decimated_on_the_page():
    t, v = steps(np.arange(6.0), np.array([1, 1, 1, 2, 2, 2]))
    assert list(t) == [0.0, 3.0, 5.0] and list(v) == [1, 2, 2]  # the same step line
    fig = html_figures.timeline_figure(_timeline(n=50_000, instances=(0,)))
    lines = [t for t in fig.data if t.x is not None and len(t.x) > 1]
    assert lines and max(len(t.x) for t in lines) <= html_figures.HTML_BINS
    assert "maximum per" in fig.layout.title.text


# --------------------------------------------------------------------------- convergence


def test_convergence_has_no_offset_axis_and_does_not_magnify_float_noise(tmp_path):
    """Before: the objective's axis read '+1.4265e1' and a 0.01% change filled it."""
    history = pd.DataFrame(
        {
            "scenarios_simulated": [8, 16, 24, 32],
            "center_objective": [14.2650, 14.2651, 14.2664, 14.2655],
            "best_objective": [14.2650, 14.2651, 14.2664, 14.2664],
            "center_slo_attainment": [0.995, 0.995, 0.996, 0.995],
            "best_slo_attainment": [0.995, 0.995, 0.996, 0.996],
        }
    )
    fig = convergence_figure(history, 0.99)
    fig.draw_without_rendering()
    top, bottom = fig.axes
    assert top.get_ylim()[1] - top.get_ylim()[0] >= 0.0099 * 14.2664  # 1% of the value
    assert top.get_ylim()[0] < 14.2650 and top.get_ylim()[1] > 14.2664
    assert bottom.get_ylim()[0] < 0.99 < bottom.get_ylim()[1]  # the target in view
    for ax in fig.axes:
        assert ax.yaxis.get_offset_text().get_text() == ""
        labels = [t.get_text() for t in ax.get_yticklabels()]
        assert all(re.fullmatch(r"-?\d+(\.\d+)?", s) for s in labels), labels
    assert [float(s) for s in (t.get_text() for t in top.get_yticklabels())][1] > 14.0
    assert y_range([1.0, np.nan], 0.5) == (0.75, 1.25) and y_range([], 2.0) == (-1.0, 1.0)
    runner._plot(history, tmp_path / "convergence.png", 0.99)
    assert (tmp_path / "convergence.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# --------------------------------------------------------------------------- page size


def _big_sweep(root, n_req=2000, n_samples=20_000):
    """24 runs (12 settings x 2 seeds) of n_req requests each; run 0 with a timeline of two
    instances x n_samples samples."""
    rng = np.random.default_rng(0)
    for job, (mns, seed) in enumerate(
        itertools.product((1, 2, 4, 8, 16, 24, 32, 48, 64, 128, 256, 512), (0, 1))
    ):
        d = root / str(job)
        (d / ".hydra").mkdir(parents=True)
        (d / ".hydra" / "overrides.yaml").write_text(
            yaml.safe_dump([f"{SETTING}={mns}", f"seed={seed}"])
        )
        ttft = rng.lognormal(np.log(3.2 / mns + 0.1), 0.8, n_req)
        tpot = rng.lognormal(np.log(0.01 + 0.0002 * mns), 0.3, n_req)
        req = pd.DataFrame(
            {
                "counted": True,
                "end_state": "completed",
                "ttft_s": ttft,
                "tpot_s": tpot,
                "e2e_s": ttft + 200 * tpot,
                "qualifies": ttft < 2,
                "scenario": 0,
            }
        )
        req.to_parquet(d / "requests.parquet")
        pd.DataFrame(
            [
                {
                    "seed": seed,
                    "goodput_rps": req["qualifies"].sum() / 60.0,
                    "slo_attainment": req["qualifies"].mean(),
                    "window_s": 60.0,
                    "ttft_p99_s": np.percentile(ttft, 99),
                    "tpot_p99_s": np.percentile(tpot, 99),
                    "e2e_p99_s": np.percentile(ttft + 200 * tpot, 99),
                    "useful_tokens_per_dollar": 1e5 * req["qualifies"].mean(),
                }
            ]
        ).to_csv(d / "metrics.csv", index=False)
    t = np.sort(rng.uniform(0, 600, n_samples))
    pd.concat(
        [
            pd.DataFrame(
                {
                    "t_s": t,
                    "instance": i,
                    "queue_len": rng.integers(0, 300, n_samples),
                    "running": rng.integers(0, 256, n_samples),
                    "batch_tokens": rng.integers(0, 8192, n_samples),
                    "kv_blocks": rng.integers(0, 20000, n_samples),
                    "preemptions": np.cumsum(rng.integers(0, 2, n_samples)),
                }
            )
            for i in (0, 1)
        ]
    ).to_parquet(root / "0" / "timeline.parquet")


def test_a_24_run_page_is_the_plotly_bundle_plus_a_little(tmp_path):
    """Before: 5.9 MB for 24 runs, 1.1 MB of it figures (CDFs of 400 steps and a timeline of
    2000 samples per line, at full float precision, a template per figure)."""
    from plotly.offline import get_plotlyjs

    _big_sweep(tmp_path / "mr")
    rep = report(tmp_path / "mr", tmp_path / "out", n_boot=0, figures=False, timeline="0")
    page = (rep.out_dir / "report.html").read_text()
    bundle = get_plotlyjs()
    assert page.count(bundle[:2000]) == 1  # one plotly.js for the whole page
    # one template too: the page's, not one per figure
    assert page.count("id='servetune-template'") == 1 and '"template":' not in page
    for fid in ("fig-pareto", "fig-cdf", "fig-timeline", "fig-0"):
        assert f"id='{fid}'" in page
    assert len(page) < 1.08 * len(bundle), (len(page) - len(bundle)) / 1e3


# --------------------------------------------------------------------------- nothing clipped


def _inside(box, frame, margin: float) -> bool:
    """Whether pixel box (x0, y0, x1, y1) lies inside Bbox `frame`, `margin` pixels clear."""
    return (
        box[0] >= frame.x0 + margin
        and box[1] >= frame.y0 + margin
        and box[2] <= frame.x1 - margin
        and box[3] <= frame.y1 - margin
    )


def _drawn(fig):
    """`fig` rendered (by Agg), as a PNG of it is."""
    if not isinstance(fig.canvas, FigureCanvasAgg):
        FigureCanvasAgg(fig)
    fig.canvas.draw()
    return fig


def _crossing_markers(fig) -> list:
    """The markers of a rendered figure whose extent crosses their axes' frame: (axes title or
    y label, x, y) of each line marker and scatter point drawn inside the view."""
    _drawn(fig)
    px = fig.dpi / 72.0
    out = []
    for ax in fig.axes:
        drawn = [
            (line.get_xydata(), line.get_markersize() / 2 * px)
            for line in ax.lines
            if line.get_marker() not in (None, "None", "none", "", " ")
        ] + [
            (c.get_offsets(), np.sqrt(np.max(c.get_sizes())) / 2 * px)
            for c in ax.collections
            if len(c.get_offsets())
            and len(c.get_sizes())
            and c.get_offset_transform() == ax.transData
        ]
        (x0, x1), (y0, y1) = sorted(ax.get_xlim()), sorted(ax.get_ylim())
        for xy, r in drawn:
            for x, y in np.asarray(xy, np.float64).reshape(-1, 2):
                if not (x0 <= x <= x1 and y0 <= y <= y1):
                    continue  # outside the view: not drawn
                cx, cy = ax.transData.transform((x, y))
                if not _inside((cx - r, cy - r, cx + r, cy + r), ax.bbox, 0.0):
                    out.append((ax.get_title() or ax.get_ylabel(), x, y))
    return out


def test_pareto_slo_labels_and_markers_are_inside_their_axes():
    """Before: the rotated "TTFT SLO 2000 ms" sat on the frame, cut by it."""
    fig = figures.pareto_png(_tied(), [], [SETTING], BEST)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    slo = [(ax, t) for ax in fig.axes for t in ax.texts if "SLO" in t.get_text()]
    assert len(slo) == 4  # TTFT (dashed, near the points) and TPOT (named at the edge), twice
    for ax, t in slo:
        assert _inside(_text_box(t, renderer), ax.bbox, 1.0), t.get_text()
    assert _crossing_markers(fig) == []


def _cdf_points() -> tuple[pd.DataFrame, dict]:
    """Four settings' points and CDFs: 16, 64 and 256 one result (the same requests), 4 a
    slower one; TTFT 8-150 ms, TPOT 8-10 ms, far below their SLO targets (2000 and 100 ms)."""
    from servetune.reporting.latency import Cdf, ecdf

    rng = np.random.default_rng(5)
    same = {
        "ttft": rng.uniform(8, 90, 50),
        "tpot": rng.uniform(8, 10, 50),
        "e2e": rng.uniform(200, 3500, 50),
    }
    slow = {k: v * (1.6 if k == "ttft" else 1.1) for k, v in same.items()}

    def cdf(values):
        return {k: Cdf(*ecdf(v), n=len(v)) for k, v in values.items()}

    cdfs = {f"max_num_seqs={m}": cdf(slow if m == 4 else same) for m in (4, 16, 64, 256)}
    points = pd.DataFrame(
        {
            SETTING: [4, 16, 64, 256],
            "point": list(cdfs),
            "slo.ttft_s": 2.0,
            "slo.tpot_s": 0.1,
        }
    )
    return points, cdfs


def test_identical_cdfs_are_drawn_once_naming_every_setting(monkeypatch, tmp_path):
    """Before: three identical CDFs overdrew one another while the legend listed three."""
    points, cdfs = _cdf_points()
    best = pd.DataFrame({"point": ["max_num_seqs=16"]})
    kept = {}
    monkeypatch.setattr(figures, "_save", lambda f, path: kept.setdefault(path.name, f))
    figures.draw_cdfs(points, cdfs, best, tmp_path, keys=[SETTING])
    fig = kept["fig_latency_cdf.png"]
    want = ["max_num_seqs=16, 64, 256 (n=50)", "max_num_seqs=4 (n=50)"]
    assert [t.get_text() for t in fig.legends[0].get_texts()] == want
    assert all(len(ax.lines) == 2 for ax in fig.axes)
    page = html_figures.cdf_figure(points, cdfs, best, [SETTING])
    names = [t.name for t in page.data if t.showlegend]
    assert names == ["max_num_seqs=16, 64, 256", "max_num_seqs=4"]
    assert len([t for t in page.data if t.xaxis == "x"]) == 2


def test_latency_axes_fit_the_data_and_name_a_far_slo_at_the_edge(monkeypatch, tmp_path):
    """Before: TTFT (8-150 ms) on an axis stretched to its 2000 ms SLO line, the data in its
    leftmost tenth (and on the page, log because the target was counted as data)."""
    points, cdfs = _cdf_points()
    best = pd.DataFrame({"point": ["max_num_seqs=16"]})
    kept = {}
    monkeypatch.setattr(figures, "_save", lambda f, path: kept.__setitem__(path.name, f))
    figures.draw_cdfs(points, cdfs, best, tmp_path)
    fig = _drawn(kept["fig_latency_cdf.png"])
    ttft, tpot, _ = fig.axes
    for ax, top, name in ((ttft, 160.0, "TTFT SLO 2000 ms"), (tpot, 11.5, "TPOT SLO 100 ms")):
        assert ax.get_xscale() == "linear" and ax.get_xlim()[1] < top  # fits the data
        (text,) = [t for t in ax.texts if "SLO" in t.get_text()]
        assert text.get_text() == f"{name} \u2192"  # named at the edge, pointing at it
        assert _inside(_text_box(text, fig.canvas.get_renderer()), ax.bbox, 1.0)
    page = html_figures.cdf_figure(points, cdfs, best)
    assert page.layout.xaxis.type is None and page.layout.xaxis2.type is None  # linear
    assert not [t for t in page.data if t.name == "SLO targets"]
    edge = {a.text: (a.xref, a.x, a.xanchor) for a in page.layout.annotations if "SLO" in a.text}
    assert edge == {
        "TTFT SLO 2000 ms \u2192": ("x domain", 1.0, "right"),
        "TPOT SLO 100 ms \u2192": ("x2 domain", 1.0, "right"),
    }
    # a target near the data is drawn on the axis, which widens to show it
    near = points.assign(**{"slo.ttft_s": 0.2})
    figures.draw_cdfs(near, cdfs, best, tmp_path / "near")
    ax = _drawn(kept["fig_latency_cdf.png"]).axes[0]
    assert ax.get_xlim()[1] >= 200 and any(t.get_text() == "TTFT SLO 200 ms" for t in ax.texts)


def _one_point(tpd=738298.7) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "point": ["all"],
            "n": [1],
            "goodput_rps_mean": [2.04],
            "goodput_rps_std": [np.nan],
            "slo_attainment_mean": [1.0],
            "slo_attainment_std": [np.nan],
            "useful_tokens_per_dollar_mean": [tpd],
            "useful_tokens_per_dollar_std": [np.nan],
            "ttft_p99_s_mean": [0.0688],
            "ttft_p99_s_std": [np.nan],
            "tpot_p99_s_mean": [0.0101],
            "tpot_p99_s_std": [np.nan],
            "slo.ttft_s": [2.0],
            "slo.tpot_s": [0.1],
        }
    )


def test_a_single_points_axes_span_a_sensible_range():
    """Before: the page drew one point at 738298.7 tokens per $ on an axis of
    738,297.7-738,299.7 (plotly's +- 1), its ticks at 738,298 and 738,299.5."""
    fig = html.figure(_one_point(), [], "point")
    for axis, value in ((fig.layout.yaxis3, 738298.7), (fig.layout.yaxis, 2.04)):
        lo, hi = axis.range
        assert hi - lo >= 0.09 * value and lo < value < hi
    lo, hi = fig.layout.yaxis2.range  # the attainment: 1.0 in view, nothing above 1.02
    assert lo < 1.0 < hi <= 1.021
    pareto = html_figures.pareto_figure(_one_point(), [], [], BEST.assign(point=["all"]))
    lo, hi = pareto.layout.xaxis.range  # P99 TTFT 68.8 ms: +- 5%, not stretched to 2000
    assert 60 < lo < 68.8 < hi < 80
    assert not [t for t in pareto.data if t.name == "SLO targets"]
    assert {a.text for a in pareto.layout.annotations if "SLO" in a.text} == {
        "TTFT SLO 2000 ms \u2192",
        "TPOT SLO 100 ms \u2192",
    }


def test_values_that_agree_are_not_magnified_into_noise(monkeypatch, tmp_path):
    """Two settings 0.00005% apart: before, the PNG's axis spanned them alone, ticked
    738298.7, 738298.8, ...; now +- 5% around them, at three significant digits."""
    points = pd.concat([_one_point(738298.7), _one_point(738299.1)], ignore_index=True)
    points = points.assign(**{SETTING: [16, 64], "point": ["max_num_seqs=16", "max_num_seqs=64"]})
    kept = {}
    monkeypatch.setattr(figures, "_save", lambda f, path: kept.setdefault(path.name, f))
    figures.draw(points, [SETTING], tmp_path)
    ax = _drawn(kept["fig_policy.max_num_seqs.png"]).axes[2]  # useful tokens per $
    lo, hi = ax.get_ylim()
    assert hi - lo >= 0.09 * 738298.7
    shown = [t.get_text() for t in ax.get_yticklabels() if lo <= t.get_position()[1] <= hi]
    assert shown and all(len(s.strip("0")) <= 3 for s in shown), shown


def test_identical_series_are_drawn_once_naming_every_setting(monkeypatch, tmp_path):
    """Two orders that gave the same numbers at every max_num_seqs: one line, 'order=fcfs,
    sjf', not two overprinted lines listed twice."""
    rows = []
    for order in ("fcfs", "sjf"):
        for mns, tpd in ((16, 3000.0), (64, 4000.0)):
            row = _one_point(tpd).iloc[0].to_dict()
            rows.append({**row, "policy.order": order, SETTING: mns, "point": f"{order} {mns}"})
    points = pd.DataFrame(rows)
    keys = ["policy.order", SETTING]
    kept = {}
    monkeypatch.setattr(figures, "_save", lambda f, path: kept.setdefault(path.name, f))
    figures.draw(points, keys, tmp_path)
    ax = kept["fig_policy.max_num_seqs.png"].axes[0]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["order=fcfs, sjf"]
    page = html.figure(points, keys, SETTING)
    assert [t.name for t in page.data if t.showlegend] == ["order=fcfs, sjf"]


# --------------------------------------------------------------------------- fleet


def autoscaled(root):
    """A hand-made autoscaled run in folder `root` (one replica, then two after a cold start;
    one hour of arrivals, all meeting the SLOs): metrics.csv, fleet.parquet and
    fleet_hourly.parquet, nothing else."""
    root.mkdir(parents=True)
    pd.DataFrame(
        [
            {
                "seed": 0,
                "sim_duration_s": 150.0,
                "slo_attainment": 1.0,
                "goodput_rps": 2.0,
                "useful_tokens_per_dollar": 350867.2,
                "ttft_p99_s": 0.0746,
                "tpot_p99_s": 0.0097,
                "e2e_p99_s": 3.38,
            }
        ]
    ).to_csv(root / "metrics.csv", index=False)
    pd.DataFrame(
        {
            "t_s": [0.0, 45.0, 65.0],
            "provisioned": [1, 2, 2],
            "cold": [0, 1, 0],
            "serving": [1, 1, 2],
            "draining": [0, 0, 0],
            "desired": [1, 2, 2],
            "spot": [0, 0, 0],
            "cost_usd": [0.0, 0.03, 0.05],
            "scenario": 0,
        }
    ).to_parquet(root / "fleet.parquet")
    pd.DataFrame(
        {
            "hour": [0.0],
            "arrivals": [300],
            "slo_attainment": [1.0],
            "mean_replicas": [1.7],
            "cost_usd": [0.18],
            "scenario": 0,
        }
    ).to_parquet(root / "fleet_hourly.parquet")
    return root


@pytest.fixture(scope="module")
def fleet_report(tmp_path_factory):
    """The autoscaled run at the root of the report, and its report (tables only)."""
    root = autoscaled(tmp_path_factory.mktemp("fleet_fig") / "autoscaled")
    return root, report(root, root.parent / "out", n_boot=0, figures=False, html=False)


def test_the_fleet_title_names_the_run_by_its_folder(fleet_report):
    """Before: 'Fleet of run . (scenario 0; the first run of the best setting (all))'."""
    root, rep = fleet_report
    from servetune.reporting import fleet as fleets

    title = fleets.title(rep.fleet)
    assert title.startswith(f"Fleet of run {root.name}, scenario 0 (the only run): ")
    assert "run ." not in title and "(all)" not in title


def test_an_attainment_of_one_is_drawn_whole(fleet_report):
    """Before: the page's hourly attainment of 1.0 was a dot cut by the top of a 0-1.02
    axis, and that range held the mean replicas' axis too (1.7 replicas drawn off it)."""
    _, rep = fleet_report
    fig = figures.fleet_png(rep.fleet)
    assert _crossing_markers(fig) == []
    page = html_figures.fleet_figure(rep.fleet)
    (att,) = [t for t in page.data if t.name == "SLO attainment (per hour)"]
    assert att.cliponaxis is False
    replicas = page.layout[att.yaxis.replace("y", "yaxis") if att.yaxis != "y" else "yaxis"]
    assert tuple(replicas.range) == (0, 1.02)
    right = next(a for a in page.layout if a.startswith("yaxis") and page.layout[a].overlaying)
    assert page.layout[right].range is None  # autoranged over the mean replicas (1.7)
    per_key = html.figure(_one_point(), [], "point")
    assert [t.cliponaxis for t in per_key.data if t.yaxis == "y2" and t.mode == "markers"] == [
        False
    ]
