"""The ES tuner: its gradient estimate, the objective, end-to-end improvement, resume, export."""

import json
import math
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from helpers import assert_export_round_trips

from servetune.core.errors import CheckpointError, ConfigError
from servetune.deploy.choose import export_point
from servetune.engine.loop import run_chunk_batch
from servetune.tuning import tune
from servetune.tuning.estimators import es
from servetune.tuning.objective import Objective
from servetune.tuning.space import space_from_config

SPACE = {
    "max_num_seqs": {"low": 8, "high": 512, "scale": "log"},
    "watermark": {"low": 0.0, "high": 0.1, "scale": "linear"},
}
# an overloaded engine: the defaults miss the SLOs, so the policy matters
SMALL = [
    "workload=poisson",
    "workload.rate=35",
    "workload.duration_s=20",
    "window.drain_s=60",
    "output.progress=false",
    "tune.pairs=2",
    "tune.eval.seeds=1",
    "tune.resume=true",
    "tune.space.max_num_seqs.high=256",
]


def test_space_maps_values_both_ways_and_validates():
    space = space_from_config(SPACE)
    z = space.point({"max_num_seqs": 64.0, "watermark": 0.03})
    back = space.values(z)
    assert math.isclose(back["max_num_seqs"], 64.0, rel_tol=1e-12)
    assert math.isclose(back["watermark"], 0.03, rel_tol=1e-12)
    # values outside the bounds start just inside them; any z maps inside the bounds
    assert 8 <= space.values(space.point({"max_num_seqs": 1024.0}))["max_num_seqs"] < 512
    far = space.values(np.array([[50.0, -50.0], [-50.0, 50.0]]))
    assert np.all((far["max_num_seqs"] >= 8) & (far["max_num_seqs"] <= 512))
    with pytest.raises(ConfigError, match=r"tune.space.max_num_seqs.low: got 0.0"):
        space_from_config({"max_num_seqs": {"low": 0, "high": 8, "scale": "log"}})
    with pytest.raises(ConfigError, match=r"tune.space.speed: not a policy parameter"):
        space_from_config({"speed": {"low": 0, "high": 1}})
    with pytest.raises(ConfigError, match=r"tune.space.watermark: expected finite low < high"):
        space_from_config({"watermark": {"low": 0.2, "high": 0.1}})


def test_es_gradient_points_along_the_true_gradient():
    # a smooth objective with a known gradient: f(z) = -|z - z*|^2
    target = np.array([1.0, -2.0, 0.5, 3.0])
    theta = np.zeros(4)
    f = lambda pts: -np.sum((pts - target) ** 2, axis=-1)
    eps = es.perturbations(0, 0, 400, 4)
    pts = es.population(theta, eps, 0.1)
    for shaping in (True, False):
        g = es.gradient(f(pts[1:401]), f(pts[401:]), eps, 0.1, rank_shaping=shaping)
        true = 2 * (target - theta)
        assert g @ true / np.linalg.norm(g) / np.linalg.norm(true) >= 0.95
    # without shaping, the antithetic estimate of a quadratic's gradient is unbiased
    assert np.linalg.norm(g - true) <= 0.15 * np.linalg.norm(true)


def test_centered_ranks_and_perturbations_are_deterministic():
    r = es.centered_ranks(np.array([3.0, np.nan, 1.0, 2.0]))
    assert np.allclose(r, [0.5, -0.5, -1 / 6, 1 / 6])
    assert np.array_equal(es.perturbations(7, 3, 2, 2), es.perturbations(7, 3, 2, 2))
    assert not np.array_equal(es.perturbations(7, 3, 2, 2), es.perturbations(7, 4, 2, 2))


def test_objective_violation_and_cvar():
    obj = Objective(slo_target=0.9, aggregate="cvar", cvar_alpha=0.5)
    ms = [
        {
            "useful_tokens": math.e**3,
            "cost_usd": 1.0,
            "slo_attainment": 0.8,
            "useful_tokens_per_dollar": 1.0,
        },
        {
            "useful_tokens": math.e**5,
            "cost_usd": 1.0,
            "slo_attainment": 1.0,
            "useful_tokens_per_dollar": 1.0,
        },
    ]
    s = obj.summarize(ms, multiplier=10.0)
    assert math.isclose(s["objective"], 3.0)  # worst half
    assert math.isclose(s["violation"], 0.05)  # (0.1 + 0) / 2
    assert math.isclose(s["lagrangian"], 3.0 - 10 * 0.1)
    assert Objective().value({"useful_tokens": 0.0, "cost_usd": 1.0}) < -20  # finite


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    out = tmp_path_factory.mktemp("straight")
    return tune(SMALL + ["tune.iterations=3"], out_dir=out, log=lambda _: None)


def test_tuning_improves_the_constrained_objective(straight):
    ev = straight.evaluation.set_index(["policy", "split"])
    lam = 20.0
    score = lambda p: (
        ev.loc[(p, "train"), "objective"]
        - lam * max(0.0, 0.99 - ev.loc[(p, "train"), "slo_attainment"])
    )
    assert score("tuned") > score("start")
    assert straight.scenarios_simulated == 3 * 5
    assert set(ev.index.get_level_values("split")) == {"train", "heldout_seeds"}
    for name in (
        "history.csv",
        "evaluation.csv",
        "convergence.png",
        "checkpoint.json",
        "export/tuned_policy.yaml",
        "export/vllm_args.json",
    ):
        assert (straight.out_dir / name).exists(), name


def test_interrupted_run_resumes_to_the_same_result(straight, tmp_path):
    compiled = run_chunk_batch._cache_size()
    with pytest.raises(KeyboardInterrupt):
        tune(SMALL + ["tune.iterations=3"], out_dir=tmp_path, stop_after=1, log=lambda _: None)
    assert run_chunk_batch._cache_size() == compiled, "new policy values recompiled"
    lines = []
    resumed = tune(SMALL + ["tune.iterations=3"], out_dir=tmp_path, log=lines.append)
    assert any("resuming" in line for line in lines)
    # the first line says what the run simulates and about how long it takes here (estimate.py):
    # a resumed run, only what is left of it (2 of 3 iterations), not the whole run again
    assert lines[0].startswith(
        "tuning max_num_seqs, max_num_batched_tokens, watermark, "
        "queue_cap: 2 iteration(s) left of 3 x 5 policies x 1 scenario(s) = 10 "
        "simulations of "
    )
    assert "on this machine" in lines[0] and "of memory" in lines[0]
    pd.testing.assert_frame_equal(resumed.history, straight.history)
    assert resumed.best == straight.best
    assert resumed.tuned == straight.tuned  # the points visited resume with the checkpoint


def test_an_improvement_exports_the_tuned_point_off_a_bound_unless_the_gain_needs_it(straight):
    """Where the tuner can improve (an overloaded engine), the tuned point is exported: of the
    points the training scenarios cannot tell from the best found, the one nearest the start,
    and a knob it holds at a bound of its range is one every such point holds there."""
    from servetune.run.api import compose
    from servetune.tuning import checkpoint
    from servetune.tuning.recommend import close_to_best
    from servetune.tuning.runner import settings_from_config

    assert straight.exported == "tuned" and straight.improvement
    assert straight.recommendation.startswith("improvement: the tuned point is better")
    summary = json.loads((straight.out_dir / "tune_summary.json").read_text())
    extra = json.loads((straight.out_dir / "export" / "vllm_args.json").read_text())["extra"]
    assert extra["exported"] == summary["exported"] == "tuned"
    assert extra["point"] == "the tuned point" and extra["chosen"] == straight.recommendation
    assert extra["tuned_at_bound"] == summary["tuned_at_bound"] == straight.bounds
    assert extra["improvement"] is True
    # the choice, redone from the points the checkpoint kept
    visited = checkpoint.read(straight.out_dir)["visited"]
    space = settings_from_config(compose(SMALL)).space
    near = [v for v in visited if close_to_best(visited[0], v, Objective(0.99), 1e-3)]
    origin = space.point(straight.start)
    nearest = min(near, key=lambda v: np.linalg.norm(np.asarray(v["z"]) - origin))
    chosen = {k: float(v) for k, v in space.values(np.asarray(nearest["z"])).items()}
    assert {k: straight.tuned[k] for k in chosen} == chosen
    assert set(straight.bounds) == {"max_num_seqs"}  # its range ends below the start's 1024
    for key, flag in straight.bounds.items():  # at a bound only where the gain needs it
        dim = next(d for d in space.dims if d.key == key)
        for v in near:  # every point as good holds the knob at that end of its range
            value = float(space.values(np.asarray(v["z"]))[key])
            u = (
                math.log(value / dim.low) / math.log(dim.high / dim.low)
                if dim.scale == "log"
                else (value - dim.low) / (dim.high - dim.low)
            )
            assert (u <= 0.05) if "low bound" in flag else (u >= 0.95), (key, value)
    # tuning.html opens with the start-vs-tuned tables
    page = (straight.out_dir / "tuning.html").read_text()
    assert page.index("<h2>Start vs tuned</h2>") < page.index("<h2>Tuning history</h2>")


def test_a_tie_on_held_out_data_keeps_your_settings(tmp_path, monkeypatch):
    """The user's case (issue 57): the tuned point is +0.003% useful tokens per dollar on the
    held-out seeds, no interval: no significant improvement, so the start is exported and
    said so, in the log, the summary, the export's extra and `servetune export` of the
    folder; the tuned point is exported only when asked (tune.export_policy)."""
    from servetune.tuning import runner

    tie = _evaluation(
        [
            ("start", "heldout_seeds", math.log(718_573.0), 1.0, True),
            ("tuned", "heldout_seeds", math.log(718_595.0), 1.0, True),
        ]
    )
    monkeypatch.setattr(runner, "evaluate_policies", lambda *a, **k: tie.copy())
    lines = []
    res = tune(SMALL + ["tune.iterations=1"], out_dir=tmp_path, log=lines.append)
    assert (res.exported, res.improvement, res.regression) == ("start", False, False)
    said = (
        "recommendation: no significant improvement: keep your settings (exported the start; "
        "tune.export_policy=tuned exports the tuned point): a tie on held-out heldout_seeds"
    )
    assert said in lines
    assert any(
        line.startswith("held-out heldout_seeds: useful tokens per USD better by 0.00306%")
        and line.endswith(": a tie")
        for line in lines
    )
    summary = json.loads((tmp_path / "tune_summary.json").read_text())
    assert summary["exported"] == "start" and summary["recommendation"] == said[16:]
    assert summary["evaluation"][0]["tie"] and not summary["evaluation"][0]["improvement"]
    doc = json.loads((tmp_path / "export" / "vllm_args.json").read_text())
    start = {k: int(res.start[k]) for k in ("max_num_seqs", "max_num_batched_tokens")}
    assert {k: doc["args"][k] for k in start} == start  # vLLM's defaults, as configured
    assert doc["extra"]["exported"] == "start" and doc["extra"]["chosen"] == said[16:]
    assert_export_round_trips(tmp_path, tmp_path / "again")  # `servetune export` agrees
    with pytest.raises(ConfigError, match=r"^tune\.export_policy: got 'best'; expected"):
        tune(SMALL + ["tune.export_policy=best"], out_dir=tmp_path / "bad")


def test_a_finished_run_resumed_is_estimated_at_its_evaluation_only(straight, tmp_path):
    """A resumed tuning with only its evaluation left is estimated at that, not at the whole
    run again (its checkpoint holds all 3 iterations)."""
    from servetune.tuning.runner import estimate_tuning

    whole = estimate_tuning(SMALL + ["tune.iterations=3"], out_dir=tmp_path)
    left = estimate_tuning(SMALL + ["tune.iterations=3"], out_dir=straight.out_dir)
    assert left.loop_s < whole.loop_s / 2


def test_resuming_under_a_different_problem_is_refused(straight):
    with pytest.raises(
        CheckpointError,
        match=r"checkpoint.json: written by a run with a "
        r"different scenario or tune settings \(tune.sigma: 1.5 -> 0.1\)",
    ):
        tune(SMALL + ["tune.iterations=3", "tune.sigma=0.1"], out_dir=straight.out_dir)
    # another optimizer's state does not fit this one's: named, not a pytree error
    with pytest.raises(CheckpointError, match=r'tune.optimizer: "adam" -> "sgd"'):
        tune(SMALL + ["tune.iterations=3", "tune.optimizer=sgd"], out_dir=straight.out_dir)


def test_tuning_over_several_workloads_aggregates_them(tmp_path):
    two = [
        "tune.workloads=[[],['workload.rate=20']]",
        "tune.objective.aggregate=cvar",
        "tune.objective.cvar_alpha=0.5",
        "tune.iterations=1",
        "tune.eval.seeds=0",
    ]
    res = tune(SMALL + two, out_dir=tmp_path, log=lambda _: None)
    assert res.scenarios_simulated == 2 * 5  # each policy on both workloads
    ev = res.evaluation.set_index(["policy", "split"])
    assert {"train[0]", "train[1]"} <= set(ev.index.get_level_values("split"))
    # CVaR at alpha 0.5 over two workloads is the worse one: the heavier load scores lower
    # (the tuned point's own training summary, as the search scored it)
    worst = min(
        ev.loc[("tuned", "train[0]"), "objective"], ev.loc[("tuned", "train[1]"), "objective"]
    )
    assert res.tuned_summary["objective"] <= max(
        ev.loc[("tuned", "train[0]"), "objective"], ev.loc[("tuned", "train[1]"), "objective"]
    )
    assert math.isclose(res.tuned_summary["objective"], worst, rel_tol=1e-12)


def test_the_tuner_searches_only_settings_vllm_accepts(tmp_path):
    # a token-budget range below most of the sequence range: vLLM's budget >= sequences check
    # binds at almost every point, and the search projects onto it
    low_budget = [
        "tune.space.max_num_batched_tokens={low: 8, high: 64, scale: log}",
        "tune.iterations=1",
        "tune.eval.seeds=0",
        "tune.export_policy=tuned",  # the search's point, whatever the verdict
    ]
    res = tune(SMALL + low_budget, out_dir=tmp_path, log=lambda _: None)
    h = res.history
    assert (h["policy.max_num_batched_tokens"] >= h["policy.max_num_seqs"]).all()
    assert h["policy.max_num_seqs"].min() > 8  # the start's seqs, above the budget's range
    for point in (res.best, res.tuned):
        assert point["max_num_batched_tokens"] >= point["max_num_seqs"]
    assert res.exported == "tuned"
    doc = json.loads((tmp_path / "export" / "vllm_args.json").read_text())
    assert doc["args"]["max_num_batched_tokens"] >= doc["args"]["max_num_seqs"]
    # the budget vLLM needs lies above the configured range: exported, and said
    (warning,) = doc["warnings"]
    assert warning.startswith(
        f"max_num_batched_tokens = {doc['args']['max_num_batched_tokens']}"
        f" is outside its tuned range [8, 64]"
    )
    assert "vLLM's startup check" in warning


def test_bad_tune_settings_name_the_key(tmp_path):
    with pytest.raises(ConfigError, match=r"tune.pairs: got 0"):
        tune(SMALL + ["tune.pairs=0"], out_dir=tmp_path)
    with pytest.raises(ConfigError, match=r"tune.optimizer: got 'lbfgs'"):
        tune(SMALL + ["tune.optimizer=lbfgs"], out_dir=tmp_path)
    # keys the configured engine never reads: every scenario would be the same
    with pytest.raises(ConfigError, match=r"tune.space.route_w_kv: .* engine.routing=score"):
        tune(SMALL + ["+tune.space.route_w_kv={low: 0, high: 2}"], out_dir=tmp_path)
    with pytest.raises(ConfigError, match=r"tune.space.cascade_threshold: .* cascade"):
        tune(SMALL + ["+tune.space.cascade_threshold={low: 0, high: 1}"], out_dir=tmp_path)


def _strict_json(path):
    """The JSON document in `path`, parsed strictly: a bare NaN or Infinity fails the test."""

    def refuse(name):
        pytest.fail(f"{path}: bare {name} (not strict JSON)")

    return json.loads(path.read_text(), parse_constant=refuse)


def test_cli_tune_writes_exports(tmp_path):
    # two held-out workloads: another rate, and another group's workload (gamma arrivals)
    holdout = (
        "tune.eval.holdout=[['workload.rate=20'],['workload=gamma','workload.rate=35',"
        "'workload.duration_s=20']]"
    )
    args = [
        sys.executable,
        "-m",
        "servetune.cli.main",
        "tune",
        *SMALL,
        "tune.iterations=1",
        "tune.eval.seeds=0",
        holdout,
        "tune.export_policy=tuned",  # the tuned point's export, whatever the verdict
        "tune.export_on_regression=true",
        f"hydra.run.dir={tmp_path}",
    ]
    proc = subprocess.run(
        args,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "COLUMNS": "160"},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "start vs tuned" in proc.stdout and "holdout_workload[1]" in proc.stdout

    # the tables open the summary: each split's metrics, then the tuned knobs, then the verdict
    tables = proc.stdout.index("start vs tuned")
    knobs = proc.stdout.index("tuned knobs")
    assert tables < knobs < proc.stdout.index("exported the tuned point (integer limits floored)")
    assert (tmp_path / "export" / "sglang_args.json").exists()
    for path in tmp_path.rglob("*.json"):
        _strict_json(path)
    # train and held-out figures side by side in the summary and the export
    summary = _strict_json(tmp_path / "tune_summary.json")["evaluation"]
    assert [(r["split"], r["held_out"]) for r in summary] == [
        ("train", False),
        ("holdout_workload[0]", True),
        ("holdout_workload[1]", True),
    ]
    for record in summary:
        assert set(record["slo_attainment"]) == {"start", "tuned", "tuned_interval"}
    extra = _strict_json(tmp_path / "export" / "vllm_args.json")["extra"]
    assert extra["evaluation"] == summary
    regressed = [r["split"] for r in summary if r["regression"]]
    assert extra["regressed_splits"] == regressed
    assert ("regression: the tuned policy is worse" in proc.stdout) == bool(regressed)
    # exported from its folder: the same files, and the tuning's own export kept as it was
    assert_export_round_trips(tmp_path, tmp_path / "again")
    chosen, again = export_point(tmp_path)  # into export/, which holds these files already
    assert chosen.kept and again["vllm_args.json"].parent == tmp_path / "export"
    assert _strict_json(again["vllm_args.json"])["extra"]["evaluation"] == summary


FREE = [
    "workload=poisson",
    "workload.rate=35",
    "workload.duration_s=5",
    "window.drain_s=0.01",
    "output.progress=false",
    "tune.eval.seeds=1",
    "tune.pairs=1",
    "tune.space.max_num_seqs.high=64",
    "hardware.price_per_gpu_hour=0",
]


def test_a_free_gpu_tune_writes_strict_json_and_resumes(tmp_path):
    """At price 0 tokens per dollar are undefined: checkpoint.json writes them as every file
    does (NaN as null: strict JSON) and a resume reads them back."""
    tune(FREE + ["tune.iterations=1"], out_dir=tmp_path, log=lambda _: None)
    files = {p.relative_to(tmp_path).as_posix(): p for p in tmp_path.rglob("*.json")}
    assert {"checkpoint.json", "tune_summary.json", "export/vllm_args.json"} <= set(files)
    for path in files.values():
        _strict_json(path)
    assert_export_round_trips(tmp_path, tmp_path / "again")  # NaN and inf read back alike
    history = _strict_json(files["checkpoint.json"])["history"]
    assert history[0]["center_useful_tokens_per_dollar"] is None
    lines = []
    resumed = tune(FREE + ["tune.iterations=2"], out_dir=tmp_path, log=lines.append)
    assert any(line.startswith("resuming") for line in lines)
    assert resumed.history["iteration"].tolist() == [0, 1]


def test_sigkilled_run_resumes_to_the_same_result(straight, tmp_path):
    import json
    import os
    import signal
    import time

    code = (
        "import sys; from servetune.tuning import tune; "
        f"tune({SMALL + ['tune.iterations=3']!r}, out_dir=sys.argv[1], log=lambda _: None)"
    )
    proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)])
    ckpt = tmp_path / "checkpoint.json"
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None:
        if ckpt.exists() and json.loads(ckpt.read_text())["iteration"] >= 1:
            break
        time.sleep(0.05)
    finished_first = proc.poll() is not None
    if not finished_first:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert finished_first or proc.returncode == -signal.SIGKILL
    assert json.loads(ckpt.read_text())["iteration"] >= 1  # a whole checkpoint survived
    resumed = tune(SMALL + ["tune.iterations=3"], out_dir=tmp_path, log=lambda _: None)
    pd.testing.assert_frame_equal(resumed.history, straight.history)
    assert resumed.best == straight.best


def _evaluation(rows):
    """An evaluate_policies-shaped table from (policy, split, objective, attainment, meets)."""
    nan = math.nan
    return pd.DataFrame(
        [
            {
                "policy": p,
                "split": s,
                "scenarios": 1,
                "objective": o,
                "violation": max(0.0, 0.99 - a),
                "slo_attainment": a,
                "meets_target": m,
                "useful_tokens_per_dollar": math.exp(o),
                "goodput_rps": 1.0,
                "distinct_scenarios": 1,
                "ttft_p99_s": 1.0,
                "tpot_p99_s": 0.1,
                **{
                    f"{k}_{e}": nan
                    for k in ("slo_attainment", "goodput_rps", "useful_tokens_per_dollar")
                    for e in ("low", "high")
                },
            }
            for p, s, o, a, m in rows
        ]
    )


def test_regressions_follow_the_tuners_order():
    from servetune.tuning.evaluation import regressions

    table = _evaluation(
        [
            ("start", "train", 10.0, 0.95, False),
            ("tuned", "train", 12.0, 0.99, True),
            # both meet the target: the objective decides
            ("start", "heldout_seeds", 11.0, 0.99, True),
            ("tuned", "heldout_seeds", 10.5, 1.0, True),
            # meeting the target beats a higher objective
            ("start", "holdout_workload", 9.0, 0.995, True),
            ("tuned", "holdout_workload", 13.0, 0.90, False),
        ]
    )
    assert regressions(table) == ["heldout_seeds", "holdout_workload"]
    better = table.copy()
    better.loc[(better.policy == "tuned") & (better.split == "heldout_seeds"), "objective"] = 11.0
    better.loc[
        (better.policy == "tuned") & (better.split == "holdout_workload"),
        ["meets_target", "slo_attainment"],
    ] = [True, 0.995]
    assert regressions(better) == []  # equal is no regression; the training split never counts
    both_miss = _evaluation(
        [
            ("start", "heldout_seeds", 9.0, 0.90, False),
            ("tuned", "heldout_seeds", 12.0, 0.85, False),
        ]
    )
    assert regressions(both_miss) == ["heldout_seeds"]  # missing both: the shortfall decides


def test_a_regressed_run_says_so_and_exports_only_when_asked(tmp_path, monkeypatch):
    import json

    from servetune.tuning import runner

    regressed = _evaluation(
        [("start", "heldout_seeds", 11.0, 0.99, True), ("tuned", "heldout_seeds", 10.0, 0.99, True)]
    )
    monkeypatch.setattr(runner, "evaluate_policies", lambda *a, **k: regressed.copy())
    lines = []
    res = tune(SMALL + ["tune.iterations=1"], out_dir=tmp_path / "a", log=lines.append)
    assert res.regression and res.exported == "start"
    assert any(line.startswith("regression: the tuned policy is worse") for line in lines)
    # by default the start is exported: keep your settings
    (said,) = [line for line in lines if line.startswith("recommendation: ")]
    assert "no significant improvement: keep your settings (exported the start" in said
    assert "worse beyond chance on held-out heldout_seeds" in said
    summary = json.loads((tmp_path / "a" / "tune_summary.json").read_text())
    assert summary["regression"] is True and summary["exported"] == "start"
    assert pd.read_csv(tmp_path / "a" / "evaluation.csv")["regression"].all()
    args = json.loads((tmp_path / "a" / "export" / "vllm_args.json").read_text())
    assert args["args"]["max_num_seqs"] == 1024  # the start's, vLLM's default
    assert args["extra"]["point"] == "the start (your settings)" and args["warnings"] == []
    # the tuned point, asked for, regressed: written only with tune.export_on_regression
    res = tune(
        SMALL + ["tune.iterations=1", "tune.export_policy=tuned", "tune.export_on_regression=true"],
        out_dir=tmp_path / "b",
        log=lambda _: None,
    )
    assert res.exported == "tuned"
    extra = json.loads((tmp_path / "b" / "export" / "vllm_args.json").read_text())["extra"]
    assert extra["regression"] is True and extra["regressed_splits"] == ["heldout_seeds"]
    assert extra["exported"] == "tuned" and extra["point"] == "the tuned point"


def test_resuming_after_the_trace_file_changed_is_refused(tmp_path):
    """The fingerprint covers the requests trained on, not only the config; a
    checkpoint from before that was recorded still resumes."""
    import json

    from servetune.tuning import runner

    trace = tmp_path / "trace.csv"
    rows = [(0.25 * k, 200 + 7 * k, 50 + k) for k in range(60)]
    write = lambda rs: trace.write_text(
        "arrival_s,prompt_tokens,output_tokens\n" + "".join(f"{a},{p},{o}\n" for a, p, o in rs)
    )
    write(rows)
    args = [
        "workload=file",
        f"workload.path={trace}",
        "output.progress=false",
        "tune.pairs=1",
        "tune.eval.seeds=0",
        "tune.eval.sensitivity=false",
        "tune.space.max_num_seqs.high=64",
    ]
    out = tmp_path / "run"
    tune(args + ["tune.iterations=1"], out_dir=out, log=lambda _: None)
    write(rows[:-1] + [(rows[-1][0], rows[-1][1], 99)])  # one output length edited
    with pytest.raises(
        CheckpointError,
        match=r"data.traces: .* -> .*; the requests it trained "
        r"on differ \(the trace file changed since\)",
    ):
        tune(args + ["tune.iterations=2"], out_dir=out, log=lambda _: None)
    # a checkpoint written before the data was recorded: resumed on its config alone
    path = out / "checkpoint.json"
    doc = json.loads(path.read_text())
    doc["problem"].pop(runner.DATA_KEY)
    doc["fingerprint"] = runner._fingerprint(doc["problem"])
    path.write_text(json.dumps(doc))
    lines = []
    tune(args + ["tune.iterations=2"], out_dir=out, log=lines.append)
    assert any(line.startswith("resuming") for line in lines)


def test_a_run_stopped_while_writing_its_files_leaves_no_summary_to_export(tmp_path, monkeypatch):
    """Tune_summary.json is written last and an earlier run's is removed first, so a
    resumed run that stops while writing its files never pairs its history with the earlier
    run's summary; export then refuses the folder instead of mixing the two."""
    from servetune.core.errors import ServetuneError
    from servetune.deploy.choose import export_point
    from servetune.tuning import runner

    args = SMALL + ["tune.eval.seeds=0", "tune.eval.sensitivity=true"]
    tune(args + ["tune.iterations=1"], out_dir=tmp_path, log=lambda _: None)
    assert (tmp_path / runner.SUMMARY).is_file()

    def disk_full(*_, **__):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(runner, "write_views", disk_full)
    with pytest.raises(OSError):
        tune(args + ["tune.iterations=2"], out_dir=tmp_path, log=lambda _: None)
    assert not (tmp_path / runner.SUMMARY).exists()
    with pytest.raises(ServetuneError):
        export_point(tmp_path)


def test_a_rerun_leaves_no_file_of_the_earlier_finish_it_did_not_write(tmp_path):
    """The files a finished run writes only when due (export/, the sensitivity
    views) are removed with the earlier summary, so a rerun that does not write them never
    leaves the earlier run's beside its own tune_summary.json."""
    from servetune.tuning import runner

    tune(
        SMALL + ["tune.eval.seeds=0", "tune.eval.sensitivity=true", "tune.iterations=1"],
        out_dir=tmp_path,
        log=lambda _: None,
    )
    assert (tmp_path / "sensitivity.csv").is_file() and (tmp_path / "export").is_dir()
    tune(
        SMALL
        + [
            "tune.eval.seeds=0",
            "tune.eval.sensitivity=false",
            "tune.export=false",
            "tune.iterations=2",
        ],
        out_dir=tmp_path,
        log=lambda _: None,
    )
    assert (tmp_path / runner.SUMMARY).is_file() and (tmp_path / "evaluation.csv").is_file()
    for stale in ("sensitivity.csv", "sensitivity.png", "export"):
        assert not (tmp_path / stale).exists(), stale
    assert "not measured" in (tmp_path / "tuning.html").read_text()  # this run's page


def test_export_on_regression_without_export_policy_tuned_is_said_to_do_nothing():
    """(a review's finding) it used to export the tuned point; now the recommended export is
    the start when that regresses, and the run says so instead of changing silently."""
    from servetune.run.api import compose
    from servetune.tuning.runner import export_notes, settings_from_config

    asked = settings_from_config(compose(SMALL + ["tune.export_on_regression=true"]))
    (note,) = export_notes(asked)
    assert note.startswith("note: tune.export_on_regression=true applies to tune.export_policy")
    both = ["tune.export_on_regression=true", "tune.export_policy=tuned"]
    assert export_notes(settings_from_config(compose(SMALL + both))) == []
