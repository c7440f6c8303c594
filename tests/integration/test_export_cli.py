"""`servetune export DIR [--point K=V] [--out OUT]`: any run or sweep point
(grid, multirun, tune) to the policy YAML and the vLLM / SGLang files, the point chosen by
--point filters and then by the tuner's order within one condition."""

import json
import math
import shutil
import subprocess
import sys

import pytest
from omegaconf import OmegaConf

from servetune.cli.export import main as export_main
from servetune.core.errors import ServetuneError
from servetune.core.files import write_json
from servetune.deploy.choose import export_point

SHORT = ["workload=poisson", "workload.duration_s=8", "window.drain_s=60", "output.progress=false"]


def _simulate(*args, cwd):
    flags = [a for a in args if a == "-m"]  # the multirun flag before the overrides
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "servetune.cli.main",
            "simulate",
            *flags,
            *SHORT,
            *(a for a in args if a != "-m"),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=cwd,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.fixture(scope="module")
def grid(tmp_path_factory):
    """One run of a 2-point grid (max_num_seqs 2 and 64) over 2 seeds at 6 req/s: 2 sequences
    cannot keep up, so 64 meets the SLOs and 2 does not."""
    run = tmp_path_factory.mktemp("grid")
    _simulate(
        "workload.rate=6", "grid.max_num_seqs=[2,64]", "seeds=2", f"hydra.run.dir={run}", cwd=run
    )
    return run


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """A multirun over max_num_seqs (a setting) x workload.rate (a condition)."""
    root = tmp_path_factory.mktemp("sweep")
    _simulate(
        "-m", "policy.max_num_seqs=2,64", "workload.rate=3,6", f"hydra.sweep.dir={root}", cwd=root
    )
    return root


def _vllm(paths) -> dict:
    return json.loads(paths["vllm_args.json"].read_text())["args"]


def test_a_grid_run_exports_its_best_point_by_the_tuners_order(grid):
    chosen, paths = export_point(grid)
    assert chosen.label == "max_num_seqs=64" and "runner-up max_num_seqs=2" in chosen.why
    assert _vllm(paths)["max_num_seqs"] == 64
    assert paths["tuned_policy.yaml"].parent == grid / "export"
    policy = OmegaConf.load(paths["tuned_policy.yaml"])
    assert policy.max_num_seqs == 64 and policy.order == "fcfs"


def test_point_picks_another_grid_point(grid, tmp_path):
    chosen, paths = export_point(grid, ["max_num_seqs=2"], tmp_path / "two")
    assert chosen.why == "the only point left" and _vllm(paths)["max_num_seqs"] == 2
    same, _ = export_point(grid, ["grid.max_num_seqs=2"], tmp_path / "again")
    assert same.label == chosen.label


def test_a_sweep_needs_one_condition_then_chooses_the_setting(sweep, tmp_path):
    with pytest.raises(
        ServetuneError,
        match=r"under 2 conditions \(workload\.rate=3; "
        r"workload\.rate=6\); pick one with --point, e\.g\. "
        r"--point workload\.rate=3",
    ):
        export_point(sweep)
    chosen, paths = export_point(sweep, ["workload.rate=6"], tmp_path / "six")
    assert chosen.label == "max_num_seqs=64" and _vllm(paths)["max_num_seqs"] == 64
    assert json.loads(paths["vllm_args.json"].read_text())["extra"]["source"] == str(chosen.run_dir)


def test_a_tuning_run_exports_its_best_policy(grid, tmp_path):
    tuned = tmp_path / "tuned"
    tuned.mkdir()
    shutil.copy(grid / "config_resolved.yaml", tuned)
    (tuned / "tune_summary.json").write_text(
        json.dumps(
            {
                "best": {"max_num_seqs": 37.8, "max_num_batched_tokens": 3000.4, "watermark": 0.02},
                "regression": False,
            }
        )
    )
    chosen, paths = export_point(tuned)
    assert chosen.label == "the tuned policy"
    args = _vllm(paths)
    assert (args["max_num_seqs"], args["max_num_batched_tokens"], args["watermark"]) == (
        37,
        3000,
        0.02,
    )  # integer limits floored, as the engine floors them
    with pytest.raises(ServetuneError, match=r"is a tuning run with one policy"):
        export_point(tuned, ["max_num_seqs=4"])


def test_a_summary_written_by_the_tuner_exports_its_unlimited_values(grid, tmp_path):
    """tune_summary.json spells an unlimited queue cap "inf" (files.jsonable,
    vLLM's own spelling); the export reads it back as unlimited, not as bad input."""
    tuned = tmp_path / "tuned"
    tuned.mkdir()
    shutil.copy(grid / "config_resolved.yaml", tuned)
    write_json(
        tuned / "tune_summary.json",
        {
            "best": {"max_num_seqs": 48.0, "max_num_queued_reqs": math.inf, "watermark": 0.01},
            "regression": False,
        },
    )
    assert '"max_num_queued_reqs": "inf"' in (tuned / "tune_summary.json").read_text()
    chosen, paths = export_point(tuned)
    assert chosen.values["max_num_queued_reqs"] == math.inf
    assert _vllm(paths)["max_num_seqs"] == 48


def _tuned_with(grid, folder, best: dict, **config) -> None:
    """A tuning run folder: grid's config with `config` (dotted key -> value) set, and `best`."""
    folder.mkdir()
    cfg = OmegaConf.load(grid / "config_resolved.yaml")
    for key, value in config.items():
        OmegaConf.update(cfg, key.replace("__", "."), value, merge=False)
    (folder / "config_resolved.yaml").write_text(OmegaConf.to_yaml(cfg))
    (folder / "tune_summary.json").write_text(json.dumps({"best": best, "regression": False}))


def test_a_budget_vllm_raised_past_its_tuned_range_is_warned_of(grid, tmp_path):
    # with chunked prefill off vLLM needs the budget >= max_model_len; the tuner
    # projected it there, above tune.space's top, and the export says so
    _tuned_with(
        grid,
        tmp_path / "tuned",
        {"max_num_seqs": 37.8, "max_num_batched_tokens": 4096},
        engine__chunked_prefill=False,
        engine__max_model_len=4096,
        tune__space__max_num_batched_tokens={"low": 256, "high": 2048, "scale": "log"},
    )
    chosen, paths = export_point(tmp_path / "tuned")
    assert chosen.ranges["max_num_batched_tokens"] == (256.0, 2048.0)
    doc = json.loads(paths["vllm_args.json"].read_text())
    assert doc["args"]["max_num_batched_tokens"] == 4096
    assert doc["warnings"] == [
        (
            "max_num_batched_tokens = 4096 is outside its tuned range [256, 2048] "
            "(tune.space.max_num_batched_tokens): vLLM's startup check max_num_batched_tokens >= "
            "max_model_len with chunked prefill off (4096) moved it there, and vLLM needs it to "
            "start, so it is exported as is; widen tune.space.max_num_batched_tokens to tune it "
            "there"
        )
    ]


def test_a_damaged_search_space_is_named(grid, tmp_path):
    _tuned_with(
        grid, tmp_path / "tuned", {"max_num_seqs": 37.8}, tune__space__max_num_seqs={"low": 8}
    )
    with pytest.raises(ServetuneError) as err:
        export_point(tmp_path / "tuned", out=tmp_path / "out")
    assert str(err.value) == (
        f"{tmp_path / 'tuned' / 'config_resolved.yaml'}: tune.space.max_num_seqs = {{'low': 8}}; "
        f"expected {{low: ..., high: ..., scale: log|linear}} as servetune tune read it"
    )
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "key,value",
    [
        ("max_num_seqs", '"infinite"'),
        ("max_num_seqs", "true"),
        ("max_num_seqs", "[1]"),
        ("max_num_seqs", '"nan"'),
        ("score_net", "3"),
        ("score_net", '[1, "inf"]'),
    ],
)
def test_a_summary_value_that_is_no_number_is_named(grid, tmp_path, key, value):
    tuned = tmp_path / "tuned"
    tuned.mkdir()
    shutil.copy(grid / "config_resolved.yaml", tuned)
    (tuned / "tune_summary.json").write_text(f'{{"best": {{"{key}": {value}}}}}')
    with pytest.raises(
        ServetuneError,
        match=rf"tune_summary\.json: best\.{key} = .*; "
        r"expected a number",
    ):
        export_point(tuned)


@pytest.mark.parametrize(
    "point,match",
    [
        ("max_num_seqs", r"--point 'max_num_seqs': expected KEY=VALUE"),
        ("nosuch=3", r"--point nosuch: no such key in the runs"),
        (
            "max_num_seqs=5",
            r"--point max_num_seqs=5: no run has policy\.max_num_seqs=5; it has 2, 64",
        ),
    ],
)
def test_bad_points_are_named(grid, point, match):
    with pytest.raises(ServetuneError, match=match):
        export_point(grid, [point])


def test_the_command_prints_the_vllm_flags_and_exits_2_on_a_bad_folder(grid, tmp_path, capsys):
    assert export_main([str(grid), "--out", str(tmp_path / "cli")]) == 0
    out = capsys.readouterr().out
    assert "exported max_num_seqs=64 of" in out and "--max-num-seqs 64" in out
    assert export_main([str(tmp_path / "missing")]) == 2
    assert "not a folder" in capsys.readouterr().err


def test_an_export_is_never_written_over_another_unasked(grid, tmp_path, capsys):
    """(issue 57) DIR/export taken: the next export goes beside it; an --out holding an
    export is refused unless --force, and its files stay as they were."""
    run = tmp_path / "run"
    shutil.copytree(grid, run, ignore=shutil.ignore_patterns("export*"))
    _, first = export_point(run)
    _, second = export_point(run, ["max_num_seqs=2"])
    assert first["vllm_args.json"].parent == run / "export"
    assert second["vllm_args.json"].parent == run / "export-2"
    assert _vllm(first)["max_num_seqs"] == 64 and _vllm(second)["max_num_seqs"] == 2
    kept = (run / "export" / "vllm_args.json").read_bytes()
    with pytest.raises(ServetuneError, match=r"--out .*/export: holds an export already .*--force"):
        export_point(run, ["max_num_seqs=2"], run / "export")
    assert (run / "export" / "vllm_args.json").read_bytes() == kept
    assert export_main([str(run), "--point", "max_num_seqs=2", "--out", str(run / "export")]) == 2
    assert "pass --force" in capsys.readouterr().err
    assert export_main([str(run), "--point", "max_num_seqs=2", "--out", str(run / "export"),
                        "--force"]) == 0  # fmt: skip
    assert _vllm({"vllm_args.json": run / "export" / "vllm_args.json"})["max_num_seqs"] == 2
    assert export_main([str(run)]) == 0  # the best point: another export than export/'s now
    out = capsys.readouterr().out
    assert f"wrote {run}/export-3/" in out and "holds another export, kept as it is" in out
    assert export_main([str(run), "--point", "max_num_seqs=2"]) == 0  # export/'s own point
    out = capsys.readouterr().out
    assert f"kept {run}/export/" in out and "holds this export already" in out
    assert not (run / "export-4").exists() and not list(run.glob(".export*"))


def test_a_forced_export_leaves_only_its_own_set(grid, tmp_path):
    """An --out that held another kind of export (a fleet's manifests, a network's files)
    keeps none of them beside the new set: a deploy would apply a stale HPA."""
    out = tmp_path / "out"
    out.mkdir()
    for stale in ("hpa.yaml", "keda_scaledobject.yaml", "score_net.json", "vllm_args.json"):
        (out / stale).write_text("stale\n")
    (out / "notes.txt").write_text("mine\n")  # not an export file: the user's, kept
    _, paths = export_point(grid, ["max_num_seqs=64"], out, force=True)
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [*(p.name for p in paths.values()), "notes.txt"]
    )
    assert "stale" not in (out / "vllm_args.json").read_text()


def test_exporting_the_same_point_again_finds_it_beside_export(grid, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(grid, run, ignore=shutil.ignore_patterns("export*"))
    export_point(run, ["max_num_seqs=64"])
    _, second = export_point(run, ["max_num_seqs=2"])
    again, paths = export_point(run, ["max_num_seqs=2"])  # the same as export-2 holds
    assert again.kept and paths["vllm_args.json"].parent == run / "export-2"
    assert second["vllm_args.json"] == paths["vllm_args.json"]
    assert not (run / "export-3").exists()


def test_an_export_that_cannot_be_written_is_named_not_a_traceback(grid, tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("a file, not a folder\n")
    with pytest.raises(ServetuneError, match=r"--out .*file/x: cannot write an export there"):
        export_point(grid, ["max_num_seqs=64"], blocked / "x")


def test_a_neural_tuning_that_keeps_your_settings_exports_them_without_its_network(grid, tmp_path):
    """A neural tuning starts from your (fcfs) policy plus a network that adds nothing;
    exporting the start ("keep your settings") writes your order and no gateway files."""
    tuned = tmp_path / "tuned"
    tuned.mkdir()
    shutil.copy(grid / "config_resolved.yaml", tuned)
    start = {"max_num_seqs": 64.0, "score_net": [0.1] * 16 + [0.0] * 5}
    summary = {"exported": "start", "order": "neural", "start": start, "best": start}
    (tuned / "tune_summary.json").write_text(json.dumps(summary))
    _, paths = export_point(tuned, out=tmp_path / "out")
    assert "score_net.json" not in {p.name for p in paths.values()}
    assert OmegaConf.load(paths["tuned_policy.yaml"]).order == "fcfs"
    assert _vllm(paths)["scheduling_policy"] == "fcfs"


# ---- found by an adversarial pass (2026-12-05)


def test_an_infinite_point_value_matches_only_an_infinite_one(grid):
    with pytest.raises(
        ServetuneError,
        match=r"--point max_num_seqs=inf: no run has "
        r"policy\.max_num_seqs=inf",
    ):
        export_point(grid, ["max_num_seqs=inf"])


@pytest.mark.parametrize(
    "args,match",
    [
        (("",), r"^DIR: got an empty path"),
        (("GRID", [], ""), r"^--out: got an empty path"),
    ],
)
def test_empty_paths_are_refused(grid, args, match):
    args = tuple(str(grid) if a == "GRID" else a for a in args)
    with pytest.raises(ServetuneError, match=match):
        export_point(*args)


@pytest.mark.parametrize(
    "summary,match",
    [
        ('{"regression": false}', r"tune_summary\.json: no 'best' object"),
        (
            '{"best": {"max_num_seqs": "abc"}}',
            (
                r"tune_summary\.json: best\.max_num_seqs = 'abc'; "
                r"expected a number"
            ),
        ),
        (
            '{"best": {"max_num_seqs": 64}, "regression": "no"}',
            r"tune_summary\.json: regression = 'no'; expected true or false",
        ),
        (
            '{"best": {"max_num_seqs": 64}, "best": {"max_num_seqs": 32}}',
            r"tune_summary\.json: key 'best' given twice",
        ),
        ('{"best": {"max_num_seqs": 0}}', r"tune_summary\.json: policy\.max_num_seqs: got 0"),
        ('{"best": {"max_num_seqs": NaN}}', r"tune_summary\.json: not JSON"),
    ],
)
def test_a_damaged_tune_summary_is_named_and_nothing_is_written(grid, tmp_path, summary, match):
    tuned = tmp_path / "tuned"
    tuned.mkdir()
    shutil.copy(grid / "config_resolved.yaml", tuned)
    (tuned / "tune_summary.json").write_text(summary)
    with pytest.raises(ServetuneError, match=match):
        export_point(tuned, out=tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_damaged_runs_left_out_are_warned_of(sweep, tmp_path, capsys):
    copy = tmp_path / "sweep"
    shutil.copytree(sweep, copy)
    (copy / "0" / "metrics.csv").write_text("seed,goodput_rps\n0,inf\n")
    assert (
        export_main([str(copy), "--point", "workload.rate=6", "--out", str(tmp_path / "out")]) == 0
    )
    err = " ".join(capsys.readouterr().err.split())
    assert "warning: left out" in err and "0/metrics.csv:2" in err
