"""The tuned point's sensitivity view (servetune/tuning/sensitivity.py, reporting/tuning_page.py):
the finite-difference arithmetic and intervals on a fake evaluator whose objective is a known
function of the knobs, and a small real tune: the files it writes, one derivative against an
independent finite difference through servetune.run.api.simulate, and the setting that turns it
off."""

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from servetune.core.errors import ConfigError
from servetune.reporting.browser import check_page, find_chromium
from servetune.reporting.tuning_page import write_views
from servetune.run.api import compose, simulate
from servetune.tuning import tune
from servetune.tuning.objective import Objective
from servetune.tuning.runner import settings_from_config
from servetune.tuning.sensitivity import (
    CAPTION,
    COLUMNS,
    NO_INFO,
    measure,
    paired,
    probe_values,
    probes,
)
from servetune.tuning.space import space_from_config

SPACE = {
    "max_num_seqs": {"low": 8, "high": 512, "scale": "log"},
    "watermark": {"low": 0.0, "high": 0.1, "scale": "linear"},
    "queue_cap": {"low": 8, "high": 4096, "scale": "log"},
}
TUNED = {"max_num_seqs": 100.7, "watermark": 0.04, "queue_cap": 300.0}
SLOPES = np.array([0.9, 1.1, 0.7, 1.3])  # d log(tokens / USD) per e-fold of seqs, per scenario
ATT_SLOPE = -2.0  # d attainment per unit of watermark, every scenario


class FakeEvaluator:
    """Metrics [P][S] of a known function of the knobs: log(useful tokens / USD) =
    SLOPES[s] x log(floor(max_num_seqs)) (floored, as the engine does), attainment =
    0.9 + ATT_SLOPE x watermark; queue_cap changes nothing. Records each call's policies."""

    def __init__(self):
        self.calls = []

    def __call__(self, values):
        self.calls.append({k: np.asarray(v) for k, v in values.items()})
        seqs, wm = np.floor(values["max_num_seqs"]), values["watermark"]
        return [
            [
                {
                    "useful_tokens": math.exp(a * math.log(n)),
                    "cost_usd": 1.0,
                    "slo_attainment": 0.9 + ATT_SLOPE * w,
                }
                for a in SLOPES
            ]
            for n, w in zip(seqs, wm, strict=True)
        ]


@pytest.fixture(scope="module")
def fake():
    ev = FakeEvaluator()
    return ev, measure(ev, space_from_config(SPACE), TUNED, Objective()).set_index("knob")


def test_the_derivatives_of_a_known_function_come_out_right(fake):
    ev, table = fake
    assert len(ev.calls) == 1 and len(ev.calls[0]["max_num_seqs"]) == 2 * len(SPACE)
    assert list(table.reset_index().columns) == COLUMNS
    seqs = table.loc["max_num_seqs"]
    # floored knob: probed at whole numbers around floor(100.7) = 100, about e^-/+0.1
    assert (seqs["minus"], seqs["plus"]) == (90.0, 111.0)
    assert "floored by the engine" in seqs["note"]
    assert math.isclose(seqs["step"], 0.5 * math.log(111 / 90))
    assert seqs["per"] == "e-fold"
    assert math.isclose(seqs["d_log_tokens_per_usd"], SLOPES.mean(), rel_tol=1e-12)
    half = stats.t.ppf(0.975, 3) * SLOPES.std(ddof=1) / 2
    assert math.isclose(
        seqs["d_log_tokens_per_usd_high"] - seqs["d_log_tokens_per_usd"], half, rel_tol=1e-9
    )
    assert seqs["d_log_tokens_per_usd_low"] < 1.0 < seqs["d_log_tokens_per_usd_high"]
    # a linear knob, per unit: 5% of the range each side
    wm = table.loc["watermark"]
    assert (wm["minus"], wm["plus"], wm["per"]) == (
        pytest.approx(0.035),
        pytest.approx(0.045),
        "unit",
    )
    assert math.isclose(wm["d_attainment"], ATT_SLOPE, rel_tol=1e-9)
    assert wm["d_attainment_low"] == wm["d_attainment_high"] == wm["d_attainment"]
    assert "d_attainment: no information: the knob gave the same difference" in wm["note"]


def test_a_knob_that_changes_nothing_gets_zero_and_no_information(fake):
    cap = fake[1].loc["queue_cap"]
    for m in ("d_log_tokens_per_usd", "d_attainment"):
        assert cap[m] == cap[f"{m}_low"] == cap[f"{m}_high"] == 0.0
    assert cap["note"].count(f"{NO_INFO}: the knob changed nothing on all 4 scenarios") == 2
    assert cap["scenarios"] == 4


def test_paired_differences_by_hand():
    mean, low, high, n, note = paired([0, 0, 0], [1, 2, 3], 0.5)  # differences 2, 4, 6
    half = stats.t.ppf(0.975, 2) * 2 / math.sqrt(3)
    assert (mean, n, note) == (4.0, 3, "")
    assert math.isclose(low, 4 - half) and math.isclose(high, 4 + half)
    mean, low, high, n, note = paired([1.0, np.nan], [2.0, 5.0], 1.0)  # one finite scenario
    assert (mean, n) == (1.0, 1) and math.isnan(low) and note == f"{NO_INFO}: one scenario"
    mean, _, _, _, note = paired([1.0], [1.0], 0.0)
    assert math.isnan(mean) and note == f"{NO_INFO}: the knob could not move"


def test_steps_stop_at_the_range_and_follow_vllms_checks():
    space = space_from_config(
        {**SPACE, "max_num_batched_tokens": {"low": 16, "high": 64, "scale": "log"}}
    )
    values = {**TUNED, "watermark": 0.0, "max_num_batched_tokens": 40.0}
    found = probes(space, values)
    wm = next(p for p in found if p.key == "watermark")
    assert (wm.minus, wm.plus) == (0.0, pytest.approx(0.005))
    assert "one-sided (at the range's bottom)" in wm.note
    policy, simulated = probe_values(space, values, found)
    assert len(policy["max_num_seqs"]) == 2 * len(found)
    # vLLM's budget >= sequences check raises the budget's probes (36, 44) to the sequences
    budget = next(p for p in simulated if p.key == "max_num_batched_tokens")
    assert (budget.minus, budget.plus) == (100.0, 100.0)
    assert "vLLM's checks moved it to 100 / 100" in budget.note
    seqs = next(p for p in simulated if p.key == "max_num_seqs")
    assert "vLLM's checks moved max_num_batched_tokens too" in seqs.note


def test_the_views_are_written_without_a_scalar_knob(tmp_path):
    history = pd.DataFrame(
        {
            "iteration": [0],
            "center_objective": [1.0],
            "best_objective": [1.0],
            "center_slo_attainment": [1.0],
            "best_slo_attainment": [1.0],
        }
    )
    write_views(tmp_path, history, pd.DataFrame(columns=COLUMNS), 0.99, CAPTION)
    assert {p.name for p in tmp_path.iterdir()} == {
        "sensitivity.csv",
        "history.png",
        "sensitivity.png",
        "tuning.html",
    }


# an overloaded engine (as tests/integration/test_tune.py's): max_num_seqs binds, so its
# derivative is not 0
SMALL = [
    "workload=poisson",
    "workload.rate=35",
    "workload.duration_s=5",
    "tune.iterations=1",
    "tune.pairs=1",
    "tune.eval.seeds=1",
    "seeds=2",
    "output.progress=false",
    "tune.space.max_num_seqs.high=64",
]


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    out = tmp_path_factory.mktemp("tuned")
    return tune(SMALL, out_dir=out, log=lambda _: None)


def test_tune_writes_the_history_and_sensitivity_views(tuned):
    for name in ("sensitivity.csv", "history.png", "sensitivity.png", "tuning.html"):
        assert (tuned.out_dir / name).exists(), name
    table = pd.read_csv(tuned.out_dir / "sensitivity.csv")
    assert list(table["knob"]) == [
        "max_num_seqs",
        "max_num_batched_tokens",
        "watermark",
        "queue_cap",
    ]
    assert (table["scenarios"] == 2).all()
    page = (tuned.out_dir / "tuning.html").read_text()
    assert "pathwise relaxation is not used" in page and "<script src=" not in page
    assert page.count("class='servetune-figure'") == 2


@pytest.mark.browser
@pytest.mark.skipif(find_chromium() is None, reason="no chromium on PATH")
def test_the_page_draws_both_figures_offline(tuned):
    result = check_page(tuned.out_dir / "tuning.html")
    assert result.problems == [], result.stderr[-3000:]
    assert (result.expected, result.drawn, result.empty, result.errors) == (2, 2, [], [])


def _log_tokens_per_usd(values: dict) -> np.ndarray:
    """log(useful tokens / USD) [seeds] of one policy, simulated through the public API one
    seed at a time (the tuner's CPU evaluator's shapes: its compiled program is reused)."""
    policy = [f"policy.{k}={float(v)!r}" for k, v in values.items()]
    runs = [
        simulate(SMALL + policy + ["engine.max_slots=64", "seeds=1", f"seed={s}"]) for s in range(2)
    ]
    return np.array([Objective().value(r.metrics[0]) for r in runs])


def test_a_derivative_matches_an_independent_finite_difference(tuned):
    row = pd.read_csv(tuned.out_dir / "sensitivity.csv").set_index("knob").loc["max_num_seqs"]
    assert row["d_log_tokens_per_usd"] != 0  # the knob binds here
    tuned_knobs = {
        k: tuned.tuned[k]
        for k in ("max_num_seqs", "max_num_batched_tokens", "watermark", "queue_cap")
    }
    lo = _log_tokens_per_usd({**tuned_knobs, "max_num_seqs": row["minus"]})
    hi = _log_tokens_per_usd({**tuned_knobs, "max_num_seqs": row["plus"]})
    d = (hi - lo) / (math.log(row["plus"]) - math.log(row["minus"]))
    assert math.isclose(row["d_log_tokens_per_usd"], d.mean(), rel_tol=1e-9, abs_tol=1e-12)


def test_the_setting_turns_the_sensitivity_off_and_is_checked(tmp_path):
    """Off, nothing more is simulated and no sensitivity file is written; tuning.html and
    history.png still show the run (the page opens with the start-vs-tuned table)."""
    tune(SMALL + ["tune.eval.sensitivity=false"], out_dir=tmp_path, log=lambda _: None)
    assert (tmp_path / "convergence.png").exists() and (tmp_path / "history.png").exists()
    for name in ("sensitivity.csv", "sensitivity.png"):
        assert not (tmp_path / name).exists(), name
    page = (tmp_path / "tuning.html").read_text()
    assert "Start vs tuned" in page and "not measured (tune.eval.sensitivity=false)" in page
    with pytest.raises(
        ConfigError,
        match=r"tune.eval.sensitivity: got 'yes'; expected true "
        r"or false",
    ):
        tune(SMALL + ["tune.eval.sensitivity=yes"], out_dir=tmp_path / "bad")


@pytest.mark.parametrize("group", ["es", "pathwise"])
def test_both_tuners_have_the_setting_on_by_default(group):
    cfg = compose([f"tune={group}"])
    assert settings_from_config(cfg).sensitivity is True
    cfg = compose([f"tune={group}", "tune.eval.sensitivity=false"])
    assert settings_from_config(cfg).sensitivity is False
