"""Where `servetune export` writes, and how: never over another export unasked, and as one set.

The files are written into a staging folder beside the destination and published from there,
so a failure while writing (a full disk, a bad value found late) leaves no half export:
  - by default into DIR/export; where that already holds an export (the one a tuning run wrote
    itself, or an earlier `servetune export`), an identical one is left as it is and said so,
    and a different one goes into the first free DIR/export-2, export-3, ... beside it;
  - into `--out`, which must not hold export files already unless `--force` (then they are
    replaced, each file whole).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from servetune.core.errors import ServetuneError
from servetune.core.files import ensure_dir
from servetune.deploy import export

DEFAULT = "export"  # the default export folder inside DIR
MAX_BESIDE = 10_000


@dataclasses.dataclass(frozen=True)
class Published:
    """An export as published: {file name: path} and, in words, where it went and why."""

    paths: dict[str, Path]
    note: str = ""
    kept: bool = False  # an identical export was there already: nothing written


def holds_export(folder: Path) -> list[str]:
    """The export files (export.FILE_NAMES) already in `folder`, sorted."""
    if not folder.is_dir():
        return []
    return sorted(p.name for p in folder.iterdir() if p.name in export.FILE_NAMES)


def check_out(out: Path, force: bool) -> None:
    """Refuse an `--out` that is a file, or holds an export already without `force`."""
    if out.exists() and not out.is_dir():
        raise ServetuneError(f"--out {out}: not a folder; expected a folder to write into")
    held = holds_export(out)
    if held and not force:
        raise ServetuneError(
            f"--out {out}: holds an export already ({', '.join(held[:4])}); choose another "
            f"folder, or pass --force to replace its files"
        )


def publish(write: Callable[[Path], dict], root: Path, out: Path | None) -> Published:
    """Call `write(folder)` (it writes the export's files there, returning {name: path}) on a
    staging folder and publish the result: into `out` (checked by check_out first), else into
    root/export or beside it (module docstring)."""
    dest = root / DEFAULT if out is None else out
    ensure_dir(dest.parent)
    stage = Path(tempfile.mkdtemp(prefix=f".{dest.name}.staging-", dir=dest.parent))
    umask = os.umask(0)
    os.umask(umask)
    stage.chmod(0o777 & ~umask)  # as a folder made by mkdir, not mkdtemp's 0700
    try:
        written = write(stage)
        names = {name: Path(path).name for name, path in written.items()}
        at = lambda folder: {n: folder / f for n, f in names.items()}
        if out is not None:
            if out.exists():
                _move_files(stage, out)
            else:
                stage.rename(out)
            return Published(at(out))
        if not dest.exists():
            stage.rename(dest)
            return Published(at(dest))
        if dest.is_dir() and not holds_export(dest):  # a folder of that name, no export in it
            _move_files(stage, dest)
            return Published(at(dest))
        if dest.is_dir() and _same_files(stage, dest):
            return Published(
                at(dest),
                f"{dest}/ holds this export already (the same files); left as it is",
                kept=True,
            )
        beside = _free_sibling(dest)
        stage.rename(beside)
        return Published(
            at(beside), f"{dest}/ holds another export, kept as it is; this one is beside it"
        )
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def _same_files(a: Path, b: Path) -> bool:
    """Do folders `a` and `b` hold the same export files with the same bytes."""
    names = holds_export(a)
    return names == holds_export(b) and all(
        (a / n).read_bytes() == (b / n).read_bytes() for n in names
    )


def _free_sibling(dest: Path) -> Path:
    """The first of dest-2, dest-3, ... that does not exist."""
    for k in range(2, MAX_BESIDE):
        candidate = dest.with_name(f"{dest.name}-{k}")
        if not candidate.exists():
            return candidate
    raise ServetuneError(f"{dest}: {MAX_BESIDE:,} exports beside it already; pass --out")


def _move_files(stage: Path, out: Path) -> None:
    """Move every file of `stage` into `out`, each replacing its namesake whole."""
    for path in sorted(stage.iterdir()):
        os.replace(path, out / path.name)
