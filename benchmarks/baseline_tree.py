"""A git revision checked out beside this tree, for benchmarks that measure both side by side.

Each measurement runs in a fresh process with `PYTHONPATH` at the revision's `src/`. The
revision's Hydra configs must come with it: the editable install maps the package
`servetune.conf` to *this* tree's `conf/` (pyproject's package-dir), so a plain PYTHONPATH
would run the revision's code on this tree's defaults (on 2026-12-06 that ran bf604a6 with
engine.max_slots 1024 instead of its own 256). The checkout therefore links `src/servetune/conf`
to its own `conf/`, found first on the package's path, and `conf_dir` lets a worker report
which configs it composed so the caller can check.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
from pathlib import Path


@contextlib.contextmanager
def checkout(repo: Path, revision: str):
    """Yield the `src/` folder of `revision` checked out in a temporary git worktree of `repo`
    (its configs linked in as above); the worktree is removed afterwards."""
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            ["git", "-C", str(repo), "worktree", "add", "--detach", tmp, revision],
            check=True,
            capture_output=True,
        )
        try:
            link = Path(tmp) / "src" / "servetune" / "conf"
            if not link.exists():
                link.symlink_to(Path(tmp) / "conf", target_is_directory=True)
            yield Path(tmp) / "src"
        finally:
            subprocess.run(
                ["git", "-C", str(repo), "worktree", "remove", "--force", tmp],
                check=False,
                capture_output=True,
            )


def environment(src: Path | None) -> dict:
    """The environment of a worker that imports servetune from `src` (None: as installed)."""
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = str(src)
    return env


def conf_dir() -> str:
    """The folder of the Hydra configs this process composes (`servetune.conf`), resolved."""
    import servetune.conf

    return str(Path(next(iter(servetune.conf.__path__))).resolve())


def check_conf(src: Path | None, reported: str) -> None:
    """SystemExit unless a worker run from `src` composed that tree's own configs."""
    if src is None:
        return
    expected = str((src.parent / "conf").resolve())
    if reported != expected:
        raise SystemExit(f"the baseline composed {reported}, not its own configs {expected}")
