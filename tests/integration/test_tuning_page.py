"""What a tuning run shows (servetune/reporting/tuning_page.py): tuning.html opens with the
start-vs-tuned tables (each split's metrics with intervals, each tuned knob's start, tuned and
exported value, range and bound flag), history.png marks the tuned and the exported point,
says why the exported point is not the line's last one, and draws no value on a frame.

Inputs are built by hand; nothing is simulated."""

import math
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.lines import Line2D

from servetune.cli.commands import _start_vs_tuned, objective_line
from servetune.reporting.tuning_page import KNOB_MARGIN, Outcome, history_figure, page
from servetune.run.api import compose
from servetune.tuning.runner import TuneResult
from servetune.tuning.sensitivity import CAPTION, COLUMNS

KNOBS = {"max_num_seqs": "log", "max_num_batched_tokens": "log", "watermark": "linear"}
HISTORY = pd.DataFrame(
    {
        "iteration": [0, 1, 2, 3],
        "center_objective": [13.2, 13.3, 13.31, 13.31],
        "best_objective": [13.2, 13.3, 13.32, 13.32],
        "center_slo_attainment": [0.95, 0.99, 1.0, 1.0],
        "best_slo_attainment": [0.95, 0.99, 1.0, 1.0],
        "policy.max_num_seqs": [1024.0, 400.0, 120.0, 57.0],
        "policy.max_num_batched_tokens": [8192.0, 2000.0, 400.0, 256.0],
        "policy.watermark": [0.01, 0.0, 0.0, 0.0],
    }
)
RECORDS = [
    {
        "split": "heldout_seeds",
        "held_out": True,
        "scenarios": 2,
        "distinct_scenarios": 2,
        "objective": {"start": 13.1, "tuned": 13.2, "gain": 0.1, "gain_interval": [0.05, 0.15]},
        **{
            key: {"start": 0.9, "tuned": 1.0, "tuned_interval": [0.98, 1.0]}
            for key in ("slo_attainment", "useful_tokens_per_dollar", "goodput_rps")
        },
        "regression": False,
        "tie": False,
        "improvement": True,
        "verdict": "useful tokens per USD better by 10%, ...: an improvement",
    }
]
OUTCOME = Outcome(
    exported="tuned",
    recommendation="improvement: the tuned point is better than the start beyond chance",
    path_note="The line is the current policy. Exported: the tuned point (iteration 2).",
    start={"max_num_seqs": 1024.0, "max_num_batched_tokens": 8192.0, "watermark": 0.01},
    tuned={"max_num_seqs": 100.0, "max_num_batched_tokens": 262.0, "watermark": 0.002},
    tuned_iteration=2,
    tuned_objective=13.32,
    tuned_attainment=1.0,
    ranges={
        "max_num_seqs": (8, 1536),
        "max_num_batched_tokens": (256, 32768),
        "watermark": (0, 0.1),
    },
    bounds={
        "max_num_batched_tokens": "max_num_batched_tokens = 262 at the low bound of "
        "tune.space.max_num_batched_tokens [256, 32768]"
    },
    evaluation=RECORDS,
)


def _fraction(ax, y: float) -> float:
    """Where value y lies on `ax`'s y axis, 0 at the bottom and 1 at the top."""
    lo, hi = ax.get_ylim()
    if ax.get_yscale() == "log":
        return (math.log(y) - math.log(lo)) / (math.log(hi) - math.log(lo))
    return (y - lo) / (hi - lo)


def test_history_marks_the_exported_point_and_keeps_values_off_the_frame():
    fig = history_figure(HISTORY, KNOBS, 0.99, outcome=OUTCOME)
    axes = fig.axes
    assert fig._suptitle.get_text().startswith("tuning history\nThe line is the current policy.")
    labels = {t.get_text() for ax in axes if ax.get_legend() for t in ax.get_legend().get_texts()}
    assert {"exported: the tuned point", "tuned point", "bound of tune.space"} <= labels
    for ax, key in zip(axes[2:], KNOBS, strict=True):
        ys = np.concatenate([np.asarray(line.get_ydata(), float) for line in ax.get_lines()])
        ys = ys[np.isfinite(ys)]
        where = [_fraction(ax, y) for y in ys]
        assert min(where) >= 0.99 * KNOB_MARGIN and max(where) <= 1 - 0.99 * KNOB_MARGIN, key
    # the tuned point is drawn at its iteration (not on the line's last point)
    stars = [
        line
        for ax in axes
        for line in ax.get_lines()
        if isinstance(line, Line2D) and line.get_marker() == "*"
    ]
    assert len(stars) == 2 + len(KNOBS) and all(list(s.get_xdata()) == [2] for s in stars)


def test_the_page_opens_with_the_start_vs_tuned_tables():
    sens = pd.DataFrame(columns=COLUMNS)
    doc = page(HISTORY, sens, 0.99, CAPTION, "runs/tuned", OUTCOME)
    first = doc.index("<h2>Start vs tuned</h2>")
    assert first < doc.index("<h2>Tuning history</h2>") < doc.index("<h2>Sensitivity")
    section = doc[first : doc.index("<h2>Tuning history</h2>")]
    assert OUTCOME.recommendation in section
    for text in (
        "heldout_seeds",
        "objective",
        "SLO attainment",
        "useful tokens / USD",
        "goodput (req/s)",
        "+10% [+5%, +15%]",
        "improvement",
        "exported",
        "range (tune.space)",
        "[256, 32768]",
        "at the low bound of tune.space.max_num_batched_tokens",
        "log(useful tokens / USD)",
    ):
        assert text in section, text
    assert OUTCOME.path_note in doc


def test_the_console_tables_and_the_objective_line_say_what_they_show(monkeypatch):
    from rich.console import Console
    from rich.table import Table

    from servetune.cli import commands

    monkeypatch.setattr(commands, "side_by_side", lambda _: RECORDS)  # the evaluation's records
    result = TuneResult(
        OUTCOME.start,
        OUTCOME.tuned,
        {},
        HISTORY,
        pd.DataFrame(),
        60,
        12.0,
        None,
        tuned=OUTCOME.tuned,
        exported="tuned",
        bounds=OUTCOME.bounds,
        ranges=OUTCOME.ranges,
    )
    metrics, knobs = _start_vs_tuned(result, Table)
    console = Console(width=160, record=True)
    console.print(metrics)
    console.print(knobs)
    text = console.export_text()
    assert "+10% [+5%, +15%]" in text and "improvement" in text
    assert "max_num_batched_tokens" in text and "low bound" in text and "[256, 32768]" in text
    line = objective_line(compose([]), 13.51)
    assert line == (
        "objective (penalized: log(useful tokens / USD) - 100 x the SLO attainment's "
        "shortfall below 0.99, mean over the scenarios; what a sweeper maximizes): 13.51"
    )
    line = objective_line(compose(["sweep.objective=goodput_rps"]), 2.0)
    assert line.startswith("objective (goodput_rps, the mean over the scenarios;")


def test_the_readme_says_the_three_names_of_a_knob_are_one():
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    assert "`policy.X`, `grid.X` and `tune.space.X` name the same knob" in readme
