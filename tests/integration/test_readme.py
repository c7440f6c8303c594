"""Every command the README shows, run as a user would type it.

The README's shell commands are read from its ```bash blocks (continuation lines joined, comments
dropped, `&&` chains split) and its Python snippet from its ```python block. Each one must have an
entry in COMMANDS, and each entry must still be in the README, so the table cannot drift from the
text. The default suite runs every runnable command, with a short-workload override appended where
the command as written takes minutes, except those whose work other default tests already do (marked
slow); `-m slow` runs those and the rest exactly as written. Installs are checked against
pyproject's extras (CI runs the install itself), commands that need a cluster or the vLLM extra are
skipped with the reason where that is missing.
"""

from __future__ import annotations

import gzip
import importlib.util
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
FIXTURES = ROOT / "tests" / "golden" / "fixtures"
REPORT_DIR = "outputs/multirun/2026-11-30/12-00-00"  # the folder the README's report command names


@dataclass(frozen=True)
class How:
    """How the test runs one README command."""

    kind: str  # run | install | suite | cluster
    fast: str = ""  # overrides appended in the default suite (empty: run as written)
    needs: str = ""  # a module without which the command is skipped, with the reason
    cwd: str = "tmp"  # tmp: a fresh folder; repo: the repository root
    setup: str = ""  # a command run first in the same folder
    slow: bool = False  # run only with -m slow (another default test covers what it runs)


MULTIRUN = (
    "servetune simulate -m workload=poisson policy.max_num_seqs=32,64,128 workload.rate=5,10 "
    "seed=0,1,2"
)
# the trace files the "Tune for my trace" commands name: 2 minutes of requests, and a log with
# its own column names, epoch milliseconds and a failed request (0 output tokens)
MY_TRACE = (
    "python -c \"import random; r = random.Random(0); open('my_trace.csv', 'w').write("
    "'arrival_s,prompt_tokens,output_tokens\\n' + ''.join(f'{k * 0.5},"
    "{r.randint(10, 2000)},{r.randint(1, 300)}\\n' for k in range(240)))\""
)
REQUESTS = (
    "python -c \"import random; r = random.Random(1); open('requests.csv', 'w').write("
    "'id,timestamp,input_tokens,output_tokens\\n' + ''.join(f'{k},{1733390000000 + 400 * k},"
    "{r.randint(10, 2000)},{0 if k % 50 == 7 else r.randint(1, 300)}\\n' "
    'for k in range(300)))"'
)

PATH_TUNE = "servetune tune workload=file workload.path=my_trace.csv hydra.run.dir=runs/tuned"
PATH_TUNE_FAST = "tune.iterations=1 tune.pairs=1 tune.eval.seeds=1"
PATH_SWEEP = (
    "servetune simulate -m workload=file workload.path=my_trace.csv "
    "policy.max_num_seqs=16,64,256 hydra.sweep.dir=runs/sweep"
)

COMMANDS: dict[str, How] = {
    "pip install -e .": How("install"),
    "servetune simulate": How("run"),
    'pip install -e ".[dev]"': How("install"),
    "python -m pytest -q": How("suite"),
    "servetune simulate workload=azure_conv model=llama3_8b hardware=h100 policy=vllm_default "
    "policy.max_num_seqs=128 policy.max_num_batched_tokens=4096 engine.block_size=16 seed=3": How(
        "run"
    ),
    "servetune simulate workload.duration_s=null workload.rate_scale=2 hardware=h200": How(
        "run", fast="workload.duration_s=600"
    ),
    "servetune simulate seeds=4 workload.predictor.sigma=0.5 grid.max_num_seqs=[64,128,256] "
    "grid.max_num_batched_tokens=[2048,8192]": How("run", fast="workload.duration_s=60"),
    "servetune simulate engine=static cost=linear": How("run"),
    # the first screen's path, in one folder as a user runs it (test_user_path walks it too)
    "servetune simulate workload=file workload.path=my_trace.csv hydra.run.dir=runs/sim": How(
        "run", setup=MY_TRACE
    ),
    PATH_TUNE: How("run", setup=MY_TRACE, fast=PATH_TUNE_FAST, slow=True),
    "servetune export runs/tuned": How(
        "run", setup=f"{MY_TRACE} && {PATH_TUNE} {PATH_TUNE_FAST}", slow=True
    ),
    PATH_SWEEP: How("run", setup=MY_TRACE, slow=True),
    "servetune report runs/sweep": How("run", setup=f"{MY_TRACE} && {PATH_SWEEP}", slow=True),
    "servetune simulate workload=file workload.path=requests.csv "
    "workload.columns.arrival=timestamp workload.columns.prompt=input_tokens "
    "workload.columns.output=output_tokens workload.time_unit=ms workload.invalid_rows=skip": How(
        "run", setup=REQUESTS
    ),
    "servetune simulate workload.duration_s=null workload.rate_curve.curve=azure_llm_2024_weekday "
    "workload.rate_curve.span_s=86400": How("run", fast="workload.rate_scale=0.25"),
    "servetune simulate workload.duration_s=null workload.rate_curve.curve=azure_llm_2024_weekday "
    "workload.rate_curve.span_s=86400 model=llama3_70b hardware.tp=2 engine.routing=jsq "
    "fleet.autoscale=true fleet.min_replicas=2 fleet.max_replicas=8 "
    "fleet.metric=num_requests_running fleet.target=12": How(
        # test_fleet.py simulates the autoscaler through the config; the day command above the day
        "run",
        fast="workload.rate_scale=0.05 fleet.max_replicas=3",
        slow=True,
    ),
    "servetune tune workload=poisson workload.rate=20 workload.duration_s=300 engine.routing=jsq "
    "fleet.autoscale=true fleet.max_replicas=4 fleet.metric=num_requests_running "
    "'tune.space.fleet={target: {low: 4, high: 128}, scale_down_window_s: {low: 0, high: 600}}' "
    "hydra.run.dir=runs/fleet_tuned": How(
        # test_fleet.py's tuner test tunes and exports an autoscaler the same way
        "run",
        fast="tune.iterations=1 tune.pairs=1 tune.eval.seeds=0 workload.duration_s=60",
        slow=True,
    ),
    "servetune --help": How("run"),
    "servetune simulate --help": How("run"),
    "servetune tune workload.rate_scale=4 workload.duration_s=1200 tune.iterations=8 "
    "'tune.eval.holdout=[\"workload.start_s=1200\"]'": How(
        "run", fast="tune.iterations=1 workload.duration_s=120"
    ),
    "servetune tune workload.rate_scale=4 workload.duration_s=300 seeds=4 "
    "workload.replicas.block_s=30 workload.replicas.shift_s=1800 "
    "'tune.workloads=[[],[\"workload.rate_scale=6\"]]' tune.objective.aggregate=cvar "
    '\'tune.eval.holdout=[["workload.start_s=2400","workload.replicas.shift_s=600"],'
    '["workload=azure_code","workload.rate_scale=4"]]\'': How(
        "run",
        fast="tune.iterations=1 tune.pairs=1 seeds=2 workload.duration_s=60 "
        "tune.eval.seeds=1 tune.space.max_num_seqs.high=256",
        slow=True,
    ),  # test_tune's CLI test tunes with two held-out workloads, one a group
    MULTIRUN: How("run", slow=True),  # 18 jobs; test_sweeps runs multiruns by default
    f"servetune report {REPORT_DIR}": How(
        "run",
        setup="servetune simulate -m workload=poisson policy.max_num_seqs=32,64 "
        f"hydra.sweep.dir={REPORT_DIR}",
    ),
    f"servetune export {REPORT_DIR} --point workload.rate=10":  # test_export_cli runs it too
    How(
        "run",
        slow=True,
        setup="servetune simulate -m workload=poisson workload.duration_s=8 "
        f"policy.max_num_seqs=32,64 workload.rate=5,10 hydra.sweep.dir={REPORT_DIR}",
    ),
    'pip install -e ".[joblib]"': How("install"),
    "servetune simulate -m hydra/launcher=joblib_local hydra.launcher.n_jobs=4 "
    "policy.max_num_seqs=32,64,128 workload.rate_scale=0.5,1,2": How(
        "run", needs="hydra_plugins.hydra_joblib_launcher", slow=True
    ),  # and test_sweeps
    'pip install -e ".[optuna]"': How("install"),
    "servetune simulate -m +experiment=optuna_policy hydra.sweeper.n_trials=40": How(
        "run",
        fast="hydra.sweeper.n_trials=3",
        needs="hydra_plugins.hydra_optuna_sweeper",
        slow=True,
    ),  # test_sweeps runs the Optuna study by default
    'pip install -e ".[ray]"': How("install"),
    "servetune simulate -m hydra/launcher=ray_local policy.max_num_seqs=32,64,128": How(
        "run", needs="hydra_plugins.hydra_ray_launcher"
    ),
    "servetune simulate -m hydra/launcher=ray_local hydra.launcher.ray.init.address=auto ...": How(
        "cluster"
    ),
    'pip install -e ".[slurm]"': How("install"),
    "servetune simulate -m hydra/launcher=slurm hydra.launcher.partition=gpu "
    "compilation_cache.dir=/shared/jax_cache policy.max_num_seqs=32,64,128": How("cluster"),
    'pip install -e ".[vllm]"': How("install"),
    "pip uninstall -y torchvision torchaudio torchcodec triton": How("install"),
    "OMP_NUM_THREADS=1 servetune golden": How("run", needs="vllm"),
    # slow: tests/golden replays every fixture in the default suite
    "servetune golden --check": How(
        "run", fast="--cases roomy_kv,small_budget", cwd="repo", slow=True
    ),
    "OMP_NUM_THREADS=1 servetune observe --duration-s 60 --max-model-len 8192 "
    "--out outputs/observe": How("run", needs="vllm", fast="--duration-s 20 --max-requests 8"),
    "servetune calibrate path=outputs/observe/steps.csv form=linear": How(
        "run",
        needs="vllm",
        setup="OMP_NUM_THREADS=1 servetune observe --duration-s 20 "
        "--max-requests 8 --max-model-len 8192 "
        "--out outputs/observe",
    ),
    "python -m pytest -q tests/fuzz/test_fuzz.py": How("suite"),
    "python -m pytest -q tests/properties/test_properties.py": How("suite"),
    "HYPOTHESIS_PROFILE=slow python -m pytest -q tests/properties/test_properties.py": How("suite"),
    "python -m pytest -q -m slow": How("suite"),
}


def _blocks(lang: str) -> list[str]:
    """The README's fenced code blocks in language `lang`, in order."""
    return re.findall(rf"^```{lang}\n(.*?)^```", README.read_text(), flags=re.MULTILINE | re.DOTALL)


def readme_commands() -> list[str]:
    """The README's shell commands: continuation lines joined, comments dropped, `a && b` split."""
    out = []
    for block in _blocks("bash"):
        for line in block.replace("\\\n", " ").splitlines():
            line = " ".join(shlex.split(line, comments=True, posix=False)) if line.strip() else ""
            out += [part.strip() for part in line.split(" && ") if part.strip()]
    return out


def test_every_readme_command_has_an_entry_and_every_entry_is_in_the_readme():
    shown = readme_commands()
    assert len(shown) == len(set(shown)), "a README command appears twice"
    assert sorted(set(shown) - set(COMMANDS)) == [], "README commands no test runs"
    assert sorted(set(COMMANDS) - set(shown)) == [], "entries no longer in the README"


def test_the_installs_name_extras_pyproject_defines():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    for cmd, how in COMMANDS.items():
        if how.kind == "install" and cmd.startswith("pip install"):
            target = shlex.split(cmd)[-1]
            name = re.fullmatch(r"\.(?:\[(\w+)\])?", target)
            assert name, f"{cmd!r}: installs something other than this project"
            assert name.group(1) in (None, *extras), f"{cmd!r}: no extra {name.group(1)!r}"
    # the uninstall is the one the vllm extra's comment in pyproject asks for
    assert (
        "uninstall torchvision torchaudio torchcodec triton"
        in (ROOT / "pyproject.toml").read_text()
    )


def test_the_suite_commands_name_what_exists():
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert any(m.startswith("slow:") for m in cfg["markers"])
    for cmd, how in COMMANDS.items():
        if how.kind == "suite":
            for word in shlex.split(cmd):
                if word.startswith("tests/"):
                    assert (ROOT / word).is_file(), f"{cmd!r}: no {word}"
    assert '"slow"' in (ROOT / "tests" / "conftest.py").read_text()  # HYPOTHESIS_PROFILE=slow


def _run(cmd: str, how: How, tmp_path: Path, exact: bool) -> subprocess.CompletedProcess:
    if how.needs and _missing(how.needs):
        pytest.skip(f"{how.needs} is not installed (its extra is optional)")
    cwd = ROOT if how.cwd == "repo" else tmp_path
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    line = cmd if exact or not how.fast else f"{cmd} {how.fast}"
    if how.setup:
        first = subprocess.run(
            how.setup,
            check=False,
            shell=True,
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert first.returncode == 0, first.stderr[-3000:]
    proc = subprocess.run(
        line,
        check=False,
        shell=True,
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
        executable="/bin/bash",
    )
    assert proc.returncode == 0, f"{line}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return proc


def _missing(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is None
    except ModuleNotFoundError:
        return True


RUNNABLE = [c for c, h in COMMANDS.items() if h.kind == "run"]


def _check(cmd: str, proc: subprocess.CompletedProcess, tmp_path: Path, exact: bool) -> None:
    """What the command must have produced, beyond exiting 0."""
    if cmd.endswith("--help"):  # a help page: what the command is and how to call it
        assert "usage: servetune" in proc.stdout, proc.stdout[:2000]
        return
    if cmd.startswith(("servetune simulate", "servetune tune", "servetune calibrate")):
        assert [p for p in tmp_path.rglob("*") if p.is_file()], f"{cmd!r} wrote nothing"
    if "servetune observe" in cmd:
        assert (tmp_path / "outputs" / "observe" / "steps.csv").is_file()
    words = cmd.split()
    folder = tmp_path / (
        words[2] if len(words) > 2 and words[2].startswith("runs/") else REPORT_DIR
    )
    if cmd.startswith("servetune report"):
        assert (folder / "report" / "report.html").is_file()
    if cmd.startswith("servetune export"):
        assert "--max-num-seqs" in (folder / "export" / "vllm_args.json").read_text()
    if cmd == "servetune golden --check":
        checked = 2 if not exact else len(list(FIXTURES.glob("*.json.gz")))
        assert proc.stdout.count(": servetune identical") == checked, proc.stdout
    if cmd.endswith("servetune golden"):  # vLLM rewrites the committed fixtures byte for byte
        for fixture in FIXTURES.glob("*.json.gz"):
            made = tmp_path / "tests" / "golden" / "fixtures" / fixture.name
            assert gzip.decompress(made.read_bytes()) == gzip.decompress(fixture.read_bytes())


def _id(cmd: str) -> str:
    """A short test id: the command without an environment prefix, up to its first key."""
    return re.sub(r"^[A-Z_]+=\S+ ", "", cmd).split("=")[0][:40]


@pytest.mark.parametrize(
    "cmd",
    [
        pytest.param(c, id=_id(c), marks=[pytest.mark.slow] if COMMANDS[c].slow else [])
        for c in RUNNABLE
    ],
)
def test_readme_command_runs(cmd, tmp_path):
    _check(cmd, _run(cmd, COMMANDS[cmd], tmp_path, exact=False), tmp_path, exact=False)


@pytest.mark.slow
@pytest.mark.parametrize("cmd", [c for c in RUNNABLE if COMMANDS[c].fast], ids=_id)
def test_readme_command_runs_as_written(cmd, tmp_path):
    _check(cmd, _run(cmd, COMMANDS[cmd], tmp_path, exact=True), tmp_path, exact=True)


def test_readme_python_snippet_runs(tmp_path):
    (snippet,) = _blocks("python")
    proc = subprocess.run(
        [sys.executable, "-c", snippet],
        check=False,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    goodput = float(proc.stdout.split()[0])
    assert goodput > 0
