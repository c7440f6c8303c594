"""Smoke tests of the studies in sweeps/: every experiment config composes and builds at the
extremes of each axis it sweeps (no simulation), and the policies the studies add load."""

from __future__ import annotations

from importlib import resources

import pytest
from omegaconf import OmegaConf

from servetune.config import scenario
from servetune.run import api

STUDIES = (
    "kv_pressure",
    "speculation",
    "utilization_vs_value",
    "tuned_vs_default",
    "disaggregation",
    "cascade",
    "async_scheduling",
)


def _params(name: str) -> dict:
    path = resources.files("servetune.conf") / "experiment" / f"{name}.yaml"
    params = OmegaConf.load(str(path)).hydra.sweeper.params
    return {k: str(v).split(",") for k, v in params.items()}


def _points(params: dict) -> list[list[str]]:
    """Override lists: every value of each swept key once (numeric axes: first and last), the
    other keys at their first value."""
    first = {k: v[0] for k, v in params.items()}
    points = []
    for key, values in params.items():
        numeric = all(v.replace(".", "", 1).isdigit() for v in values)
        for v in (values[0], values[-1]) if numeric else values:
            points.append([f"{k}={v if k == key else first[k]}" for k in params])
    return points


@pytest.mark.parametrize("name", STUDIES)
def test_study_builds(name):
    params = _params(name)
    assert params, f"{name}: no sweep"
    for overrides in _points(params):
        sc = scenario.build(api.compose([f"+experiment={name}", *overrides]))
        assert len(sc.seeds) >= 1 and sc.labels["kv_blocks"] > 0, (name, overrides)


def test_study_settings():
    kvp = scenario.build(api.compose(["+experiment=kv_pressure", "engine.kv_pressure=reject"]))
    assert kvp.labels["model"] == "Llama-3-70B" and kvp.labels["tp"] == 2
    assert kvp.engine.kv_pressure == "reject" and len(kvp.seeds) == 3
    both = [
        scenario.build(
            api.compose(["+experiment=async_scheduling", f"engine.async_scheduling={a}"])
        )
        for a in ("false", "true")
    ]
    assert [sc.engine.async_scheduling for sc in both] == [False, True]
    spec = scenario.build(api.compose(["+experiment=speculation", "policy.spec_k=4"]))
    assert spec.engine.speculation
    uv = api.compose(["+experiment=utilization_vs_value", "policy=value_aware"])
    assert uv.policy.queue_cap == 8 and uv.engine.max_slots == 512
    tvd = api.compose(["+experiment=tuned_vs_default", "policy=tuned_azure_conv"])
    assert tvd.policy.queue_cap == 29 and tvd.policy.max_num_seqs == 506


@pytest.mark.aic
def test_the_gpu_choice_study_builds_on_every_gpu_it_compares():
    # study (l) reads aiconfigurator-core's tables for each GPU (cost=aic): the servetune[aic]
    # extra, so it is not among STUDIES
    pytest.importorskip("aiconfigurator_core", reason="needs the servetune[aic] extra")
    gpus = _params("gpu_choice")["hardware"]
    assert len(gpus) == 9
    for gpu in gpus:
        sc = scenario.build(api.compose(["+experiment=gpu_choice", f"hardware={gpu}"]))
        assert sc.labels["cost_model"].startswith("aiconfigurator-core") and len(sc.seeds) == 2
        assert len(sc.grid_points) == 12 and sc.labels["cost_warnings"] == []


def test_the_fleet_day_study_builds_its_arms_and_search_spaces():
    """sweeps/fleet_day/study.py: the day on the autoscaled fleet builds, and both tunings'
    spaces hold the autoscaler's keys (the joint one the engine's too)."""
    import importlib.util
    from pathlib import Path

    from servetune.tuning.space import space_from_config

    path = Path(__file__).resolve().parents[2] / "sweeps" / "fleet_day" / "study.py"
    spec = importlib.util.spec_from_file_location("fleet_day_study", path)
    study = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(study)
    sc = scenario.build(api.compose([*study.DAY, *study.FLEET]))
    assert sc.engine.autoscale and sc.engine.n_instances == 8 and sc.labels["tp"] == 2
    assert len(sc.traces[0]) > 400_000  # the day
    for space, engine in (
        ([*study.NO_ENGINE, study.AUTOSCALER], False),
        ([*study.JOINT, study.AUTOSCALER], True),
    ):
        cfg = api.compose([*study.DAY, *study.FLEET, *space])
        keys = space_from_config(OmegaConf.to_container(cfg.tune.space)).keys
        assert {"fleet.target", "fleet.scale_down_window_s", "fleet.min_replicas"} <= set(keys)
        assert ("max_num_seqs" in keys) == engine
    tuned = {"fleet.target": 6.5, "fleet.min_replicas": 2.5, "max_num_seqs": 64.0, "watermark": 0.0}
    assert study._overrides(tuned) == [
        "fleet.target=6.5",
        "fleet.min_replicas=3",
        "policy.max_num_seqs=64.0",
    ]


def _script(study: str, name: str):
    """A study script of sweeps/ as a module (its main takes argv)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "sweeps" / study / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"{study}_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    "study, name, argv, message",
    [
        ("fleet_day", "study", ["--iterations", "0"], "--iterations: got 0; expected at least 1"),
        ("fleet_day", "figure", ["{tmp}/none"], "cannot read {tmp}/none/compare.json"),
        ("gpu_choice", "figure", ["{tmp}"], "{tmp}/report/runs.csv: not found"),
    ],
)
def test_a_study_script_s_bad_input_is_an_error_with_exit_2(
    tmp_path, capsys, study, name, argv, message
):
    """(issue 64) these ended in tracebacks (FileNotFoundError, ConfigError), one after
    running on past both of its refused tunings."""
    from servetune.run.entry import script_status

    module = _script(study, name)
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    assert script_status(module.main, argv) == 2
    err = capsys.readouterr().err
    assert message.replace("{tmp}", str(tmp_path)) in " ".join(err.split())
    assert "Traceback" not in err


def test_the_fleet_day_study_checks_every_tuning_before_any_step_runs(tmp_path, monkeypatch):
    study = _script("fleet_day", "study")
    started = []
    monkeypatch.setattr(study, "_size", lambda out: started.append("sizing"))
    monkeypatch.setattr(study, "AUTOSCALER", "tune.space.fleet={target: {low: 0, high: 24}}")
    from servetune.core.errors import ConfigError

    with pytest.raises(ConfigError, match=r"tune\.space\.fleet\.target"):
        study.main(["--out", str(tmp_path / "out")])
    assert started == [] and not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--rates", "abc"], "--rates: got 'abc'; expected workload.rate_scale values"),
        (["--rates", "4,-1"], "--rates: got '4,-1'; expected positive rate scales"),
        (["--seeds", "0"], "--seeds: got '0'; expected a whole number of seeds >= 1"),
    ],
)
def test_the_gpu_fleet_table_refuses_bad_arguments_by_name(capsys, argv, message):
    with pytest.raises(SystemExit) as info:
        _script("gpu_choice", "fleet").main(argv)
    assert info.value.code == 2 and message in capsys.readouterr().err
