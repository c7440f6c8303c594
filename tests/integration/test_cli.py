"""The command line: a small run writes the resolved config, metrics.json and the request table."""

import json
import os
import subprocess
import sys

import pandas as pd
import pytest

from servetune.cli import hydra_apps
from servetune.cli import main as cli

KEYS = [
    "n_requests",
    "offered_rps",
    "n_completed",
    "n_rejected",
    "n_cancelled",
    "n_expired",
    "n_outstanding",
    "ttft_mean_s",
    "ttft_p50_s",
    "ttft_p90_s",
    "ttft_p99_s",
    "tpot_mean_s",
    "tpot_p50_s",
    "tpot_p90_s",
    "tpot_p99_s",
    "itl_mean_s",
    "itl_p50_s",
    "itl_p90_s",
    "itl_p99_s",
    "e2e_mean_s",
    "e2e_p50_s",
    "e2e_p90_s",
    "e2e_p99_s",
    "throughput_rps",
    "output_tokens_per_s",
    "goodput_rps",
    "slo_attainment",
    "useful_tokens_per_dollar",
    "cost_usd",
    "cost_per_qualifying_request_usd",
    "busy_fraction",
    "wasted_token_ratio",
    "kv_peak_occupancy",
    "preemptions",
    "sim_duration_s",
    "by_class",
]


def _run(tmp_path, *overrides):
    cmd = [
        sys.executable,
        "-m",
        "servetune.cli.main",
        "simulate",
        f"hydra.run.dir={tmp_path}",
        "output.progress=false",
        *overrides,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)


def test_simulate_writes_outputs(tmp_path):
    proc = _run(
        tmp_path,
        "workload.duration_s=30",
        "policy.max_num_seqs=128",
        "policy.max_num_batched_tokens=4096",
        "engine.block_size=16",
        "seed=3",
        "output.timeline=true",
    )
    assert proc.returncode == 0, proc.stderr
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert set(KEYS) <= set(metrics)
    assert metrics["n_completed"] == metrics["n_requests"] > 0
    assert set(metrics["by_class"]) == {"prompt<2048", "prompt>=2048"}
    table = pd.read_parquet(tmp_path / "requests.parquet")
    assert len(table) == metrics["n_requests"]
    assert {
        "arrival_s",
        "first_token_s",
        "finish_s",
        "output_tokens_delivered",
        "end_state",
        "preemptions",
    } <= set(table.columns)
    resolved = (tmp_path / "config_resolved.yaml").read_text()
    assert "max_num_seqs: 128" in resolved and "seed: 3" in resolved
    assert "goodput" in proc.stdout
    # the first line: what is simulated and how long it should take here (estimate.py)
    assert "simulating 1 scenario(s) of" in proc.stderr and "s of traffic each;" in proc.stderr
    assert "on this machine" in proc.stderr
    # vllm bench serve's names (tests/unit/run/test_vllm_bench_names.py) and the timeline
    bench = json.loads((tmp_path / "vllm_bench.json").read_text())
    assert {k: bench[k] for k in metrics["vllm_bench"]} == metrics["vllm_bench"]
    assert bench["completed"] == metrics["n_completed"] == len(bench["latencies"])
    assert {
        "request_goodput",
        "mean_ttft_ms",
        "median_tpot_ms",
        "p99_itl_ms",
        "std_e2el_ms",
    } <= set(bench)
    assert bench["mean_ttft_ms"] == pytest.approx(1000 * metrics["ttft_mean_s"])
    timeline = pd.read_parquet(tmp_path / "timeline.parquet")
    assert len(timeline) > 0 and set(timeline["scenario"]) == {0}
    assert "timeline.parquet" in proc.stdout
    # the run folder's log keeps what was printed, as plain text
    log = (tmp_path / "cli.log").read_text()
    assert "servetune simulate" in log and "goodput (req/s) / SLO attainment" in log
    assert f"wrote {tmp_path}/metrics.json" in log and "\x1b[" not in log


def test_grid_from_cli_is_one_batch(tmp_path):
    proc = _run(
        tmp_path,
        "workload.duration_s=20",
        "seeds=2",
        "workload.predictor.sigma=0.5",
        "grid.max_num_seqs=[8,64]",
        "policy=sjf",
    )
    assert proc.returncode == 0, proc.stderr
    table = pd.read_csv(tmp_path / "metrics.csv")
    assert len(table) == 4 and set(table["policy.max_num_seqs"]) == {8, 64}
    assert table.groupby("policy.max_num_seqs")["max_running"].max()[8] <= 8


def test_bad_config_exits_with_message(tmp_path):
    proc = _run(tmp_path, "hardware.gpu=h900")
    assert proc.returncode == 2
    assert "hardware.gpu: unknown name 'h900'" in proc.stderr
    assert "error: hardware.gpu: unknown name 'h900'" in (tmp_path / "cli.log").read_text()


@pytest.mark.parametrize("argv", [[], ["--help"], ["-h"], ["help"]])
def test_servetune_alone_or_with_help_lists_the_commands(argv, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["servetune", *argv])
    with pytest.raises(SystemExit) as exit_:
        cli.main()
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    for command in cli.COMMANDS:
        assert f"\n  {command} " in out
    assert "servetune COMMAND --help" in out


def test_an_unknown_command_is_an_error_that_lists_the_commands(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["servetune", "simulat"])
    with pytest.raises(SystemExit) as exit_:
        cli.main()
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "unknown command 'simulat'" in err and "  simulate " in err


@pytest.mark.parametrize("command", ["simulate", "tune", "calibrate"])
def test_each_hydra_command_has_its_own_help(command):
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "servetune.cli.main", command, "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    imported = {
        line.rpartition("|")[2].strip().split(".")[0]
        for line in proc.stderr.splitlines()
        if line.startswith("import time:")
    }
    assert imported & {"jax", "scipy", "pandas", "matplotlib", "plotly", "optax"} == set(), (
        "Hydra answers --help before the job's module (and JAX) loads: hydra_apps.py"
    )
    assert proc.stdout.startswith(f"servetune {command}: ")
    assert f"usage: servetune {command}" in proc.stdout
    assert "powered by Hydra" not in proc.stdout
    assert "== Configuration groups ==" in proc.stdout  # Hydra's reference stays
    # (issue 57) a page, not the whole config (291 lines): the config is one flag away
    assert len(proc.stdout.splitlines()) < 80 and f"servetune {command} --cfg job" in proc.stdout
    if command == "simulate":  # what cost=aic covers, and every file a run writes, is named
        assert "cost=aic (NVIDIA aiconfigurator-core" in proc.stdout
        assert "hardware.gpu: a100_80gb (a100_sxm), h100 (h100_sxm)" in proc.stdout
        for name in (
            "metrics.json",
            "metrics.csv",
            "objective.json",
            "vllm_bench.json",
            "requests.parquet",
            "timeline.parquet",
            "config_resolved.yaml",
        ):
            assert name in proc.stdout, name


def test_the_dispatcher_keeps_overrides_after_the_multirun_flag(monkeypatch):
    """The help override goes last: argparse drops overrides after -m if it comes first."""
    from hydra._internal.utils import get_args_parser

    seen = {}
    monkeypatch.setattr(hydra_apps, "simulate_app", lambda: seen.setdefault("argv", list(sys.argv)))
    monkeypatch.setattr(
        sys, "argv", ["servetune", "simulate", "-m", "workload=poisson", "policy.max_num_seqs=8,16"]
    )
    cli.main()
    args = get_args_parser().parse_args(seen["argv"][1:])
    assert args.multirun
    assert args.overrides == ["workload=poisson", "policy.max_num_seqs=8,16", "hydra/help=simulate"]


def test_an_output_folder_under_a_file_exits_2_naming_the_key(tmp_path, monkeypatch, capsys):
    (tmp_path / "f").write_text("")
    monkeypatch.setattr(hydra_apps, "simulate_app", lambda: pytest.fail("Hydra must not start"))
    monkeypatch.setattr(sys, "argv", ["servetune", "simulate", f"hydra.run.dir={tmp_path}/f/r"])
    with pytest.raises(SystemExit) as exit_:
        cli.main()
    assert exit_.value.code == 2
    assert (
        f"hydra.run.dir: got '{tmp_path}/f/r'; {tmp_path}/f is a file"
        in capsys.readouterr().err.replace("\n", "")
    )


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["hydra.run.dir=/proc/servetune_x"],
            "hydra.run.dir: got '/proc/servetune_x'; no folder can be created in /proc (",
        ),
        (
            ["-m", "workload=poisson", "hydra.sweep.dir=/sys/servetune_x/sweep"],
            "hydra.sweep.dir: got '/sys/servetune_x/sweep'; no folder can be created in /sys (",
        ),
    ],
)
def test_an_output_folder_that_cannot_be_created_exits_2_naming_the_key(
    args, message, monkeypatch, capsys
):
    """/proc and /sys exist and pass os.access as root, but take no new folder: Hydra raised a
    bare OSError traceback (exit 1)."""
    if not os.path.isdir("/proc/self") or not os.path.isdir("/sys"):
        pytest.skip("needs Linux /proc and /sys")
    monkeypatch.setattr(hydra_apps, "simulate_app", lambda: pytest.fail("Hydra must not start"))
    monkeypatch.setattr(sys, "argv", ["servetune", "simulate", *args])
    with pytest.raises(SystemExit) as exit_:
        cli.main()
    assert exit_.value.code == 2
    err = capsys.readouterr().err.replace("\n", "")
    assert message in err and err.endswith("expected a writable folder")


def test_a_writable_output_folder_is_left_as_it_was(tmp_path):
    """The probe makes and removes a folder: nothing is left behind."""
    assert cli.output_dir_problem([f"hydra.run.dir={tmp_path}/new/run"]) is None
    assert cli.output_dir_problem([f"hydra.run.dir={tmp_path}"]) is None
    assert list(tmp_path.iterdir()) == []


HEAVY = ("jax", "scipy", "pandas", "hydra", "matplotlib", "plotly", "optax")


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["simulat"],
        ["simulate", "hydra.run.dir=/proc/x"],
        ["export", "--help"],
        ["export"],
    ],
)
def test_help_and_bad_commands_answer_without_loading_the_simulator(argv):
    """`servetune --help`, an unknown command and a bad output folder answer
    without loading JAX, scipy, pandas, Hydra or the plotting libraries (python -X importtime
    lists every module a process imports)."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "servetune.cli.main", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == (0 if argv[-1] == "--help" else 2), proc.stderr[-2000:]
    imported = {
        line.rpartition("|")[2].strip().split(".")[0]
        for line in proc.stderr.splitlines()
        if line.startswith("import time:")
    }
    assert "servetune" in imported and imported & set(HEAVY) == set()


def test_importing_servetune_is_light_and_its_names_load_on_use():
    code = (
        "import sys, servetune; light = not {'jax', 'scipy', 'pandas'} & set(sys.modules); "
        "import jax; x64 = jax.config.jax_enable_x64; "
        "print(light, x64, servetune.simulate.__module__, 'jax' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    ).stdout.split()
    assert out == ["True", "True", "servetune.run.api", "True"]


@pytest.mark.parametrize(
    "override,message",
    [
        (
            "policy.max_num_seq=64",
            ("error: policy.max_num_seq: no such key; did you mean policy.max_num_seqs"),
        ),
        (
            "policy=vlm_default",
            ("error: policy=vlm_default: no such policy; did you mean policy=vllm_default?"),
        ),
        (
            "polcy.max_num_seqs=64",
            ("error: polcy.max_num_seqs: no such key; did you mean policy.max_num_seqs?"),
        ),
    ],
)
def test_a_typo_gets_did_you_mean_before_hydra_or_jax_start(override, message):
    """The CLI names the closest key or choice (suggest.py) and exits 2,
    without Hydra's "+key" advice and without loading JAX."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "servetune.cli.main", "simulate", override],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2 and message in proc.stderr and "+policy" not in proc.stderr
    assert "| jax" not in proc.stderr


def test_a_typo_in_a_python_keyword_gets_did_you_mean_not_hydras_plus():
    from servetune import ConfigError, compose

    with pytest.raises(
        ConfigError,
        match=r"^policy\.max_num_seq: no such key; did you mean "
        r"policy\.max_num_seqs",
    ):
        compose(policy={"max_num_seq": 64})
    with pytest.raises(
        ConfigError,
        match=r"^workload\.pth: no such key; did you mean "
        r"workload\.path\?$",
    ):
        compose(["workload=file", "workload.pth=x"])
    with pytest.raises(
        ConfigError, match=r"^workload\.rat: no such key; workload has .*rate_scale"
    ):
        compose(["workload.rat=3"])


def test_hydra_flags_and_other_primary_configs_are_left_to_hydra():
    from servetune.core.suggest import check_overrides

    assert check_overrides(["--cfg=job", "--info=config", "policy.max_num_seqs=8"]) is None
    assert check_overrides(["-cn", "other", "other_section.key=1"]) is None
    assert check_overrides(["policy.max_num_seqz=8"]).startswith("policy.max_num_seqz: no such")
