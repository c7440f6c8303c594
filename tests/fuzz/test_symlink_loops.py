"""An output or input folder inside a loop of symbolic links is named, never an OSError or
RuntimeError traceback: inputs.expand checks every path a command takes, and the
dispatcher checks hydra.run.dir / hydra.sweep.dir before Hydra starts."""

import subprocess
import sys

import pytest


@pytest.fixture()
def loop(tmp_path):
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    return tmp_path / "a"


def _cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "servetune.cli.main", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["simulate", "hydra.run.dir={loop}/run"],
            "hydra.run.dir: got '{loop}/run'; it runs into a loop of symbolic links",
        ),
        (
            ["simulate", "-m", "policy.max_num_seqs=8,16", "hydra.sweep.dir={loop}/sweep"],
            "hydra.sweep.dir: got '{loop}/sweep'; it runs into a loop of symbolic links",
        ),
        (["report", "{loop}/x"], "DIR: got '{loop}/x'; {loop} is a loop of symbolic links"),
        (["export", "{loop}"], "DIR: got '{loop}'; {loop} is a loop of symbolic links"),
        (
            ["report", ".", "--out", "{loop}/r"],
            "--out: got '{loop}/r'; {loop} is a loop of symbolic links",
        ),
    ],
)
def test_a_path_in_a_symlink_loop_is_named(loop, args, message):
    proc = _cli(*[a.format(loop=loop) for a in args])
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert message.format(loop=loop) in proc.stderr


def test_a_trace_in_a_symlink_loop_is_named(loop):
    import servetune
    from servetune.core.errors import ServetuneError

    with pytest.raises(ServetuneError, match=r"workload.path: got .*; .* is a loop of symbolic"):
        servetune.simulate(["workload=file", f"workload.path={loop}/trace.csv"])
