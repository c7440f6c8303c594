"""The fleet path's inputs (issue 64): tuning folders of autoscaled runs export from their
folder, hand-edited ones are named by entry; a rate curve as long as a synthetic run is taken;
each cost form reads the keys its file defines. No simulation runs here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from servetune.config import scenario
from servetune.core.errors import ServetuneError
from servetune.deploy import autoscaler_export
from servetune.deploy.choose import export_point
from servetune.run.api import compose

CURVES = Path(__file__).parent / "curves"
CONF = Path(scenario.__file__).resolve().parents[3] / "conf"
FLEET = [
    "workload=poisson",
    "workload.duration_s=60",
    "engine.routing=jsq",
    "fleet.autoscale=true",
    "fleet.max_replicas=3",
    "fleet.cold_start_s=10",
]
BEST = {"max_num_seqs": 64.0, "fleet.target": 6.5, "fleet.max_replicas": 2.6}


def _tuning_folder(tmp_path, overrides, summary) -> Path:
    """A tuning run's folder as `servetune tune` leaves it, written by hand."""
    folder = tmp_path / "tuned"
    folder.mkdir()
    cfg = compose(overrides)
    (folder / "config_resolved.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    (folder / "tune_summary.json").write_text(json.dumps(summary))
    return folder


@pytest.mark.parametrize(
    "summary",
    [
        {"best": BEST, "regression": False},  # before the summary named its order and ranges
        {"best": BEST, "order": "fcfs", "ranges": {"fleet.target": [1, 16]}},
        {"best": {**BEST, "fleet.scale_down_window_s": 120.4}, "regression": True},
    ],
)
def test_a_tuning_folder_of_an_autoscaled_run_exports(tmp_path, summary):
    """(issue 64) it was refused: "policy.fleet.min_replicas: unknown policy parameter"."""
    space = "tune.space.fleet={target: {low: 1, high: 16}, max_replicas: {low: 1, high: 3}}"
    folder = _tuning_folder(tmp_path, [*FLEET, space], summary)
    _, paths = export_point(folder)
    hpa = yaml.safe_load(paths["hpa"].read_text())
    assert hpa["spec"]["maxReplicas"] == 3  # 2.6 rounded, as the simulator rounds it
    target = hpa["spec"]["metrics"][0]["pods"]["target"]["averageValue"]
    assert autoscaler_export.quantity_number(target) == pytest.approx(6.5)
    args = json.loads(paths["vllm_args.json"].read_text())
    assert args["args"]["max_num_seqs"] == 64
    policy = yaml.safe_load(paths["tuned_policy.yaml"].read_text())
    assert not any(k.startswith("fleet") for k in policy)


@pytest.mark.parametrize(
    "overrides, best, match",
    [
        (FLEET, {"fleet.taget": 6.0}, r"best\.fleet\.taget: unknown autoscaler setting"),
        (
            FLEET[:3],
            {"fleet.target": 6.0},
            r"best\.fleet\.target: an autoscaler setting, but config_resolved\.yaml has "
            r"fleet\.autoscale off",
        ),
        (FLEET, {"fleet.target": "many"}, r"best\.fleet\.target = 'many'; expected a number"),
        (
            FLEET,
            {"max_num_seqs": 64, "order": 1},
            r"best\.order: unknown policy parameter; expected one of \[.*\], score_net or fleet",
        ),
    ],
)
def test_a_hand_edited_fleet_summary_is_named_by_its_entry(tmp_path, overrides, best, match):
    folder = _tuning_folder(tmp_path, overrides, {"best": best})
    with pytest.raises(ServetuneError, match=match):
        export_point(folder, out=tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "summary, match",
    [
        ({"order": "random"}, r"order = 'random'; expected one of"),
        ({"order": ["fcfs"]}, r"order = \['fcfs'\]; expected one of"),
        ({"exported": ["start"]}, r"exported = \"\['start'\]\"; expected one of"),
        ({"ranges": {"max_num_seqs": {"low": 1}}}, r"ranges = .*; expected \{key: \[low"),
        ({"ranges": {"max_num_seqs": 8}}, r"ranges = .*; expected \{key: \[low, high\]\}"),
        ({"ranges": {"max_num_seqs": ["a", 2]}}, r"ranges = .*; expected"),
    ],
)
def test_a_summary_s_order_and_ranges_are_checked(tmp_path, summary, match):
    folder = _tuning_folder(tmp_path, FLEET, {"best": {"max_num_seqs": 64}, **summary})
    with pytest.raises(ServetuneError, match=rf"tune_summary\.json: {match}"):
        export_point(folder, out=tmp_path / "out")


@pytest.mark.parametrize("duration", [600, 580, 546])
def test_a_curve_as_long_as_a_synthetic_run_is_taken(duration):
    """(issue 64) the last arrival's span, past workload.duration_s, refused a curve exactly as
    long as the run; up to 10% longer is taken as for traces."""
    built = scenario.build(
        compose(
            [
                "workload=poisson",
                f"workload.duration_s={duration}",
                f"workload.rate_curve.curve={CURVES / 'ok_600s.csv'}",
            ]
        )
    )
    assert 0 < built.traces[0].arrival.max() < duration


@pytest.mark.parametrize("form", sorted(scenario.COST_KEYS))
def test_each_cost_form_reads_exactly_the_keys_of_its_file(form):
    keys = yaml.safe_load((CONF / "cost" / f"{form}.yaml").read_text())
    assert set(keys) == set(scenario.COST_KEYS[form])
