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
    staging folder and publish the result: into `out` (checked by check_out first; the export
    files it held and this set lacks are removed, so it holds one set), else into root/export
    or beside it (module docstring). An OSError (a read-only folder, a full disk) is a
    ServetuneError naming the folder; nothing of the set is left where it failed."""
    dest = (root / DEFAULT if out is None else out).resolve()  # a symlink: where it points
    try:
        ensure_dir(dest.parent)
        stage = Path(tempfile.mkdtemp(prefix=f".{dest.name}.staging-", dir=dest.parent))
    except (OSError, ServetuneError) as err:
        raise ServetuneError(
            f"{'--out ' if out is not None else ''}{dest}: cannot write an export there "
            f"({getattr(err, 'strerror', None) or err})"
        ) from None
    try:
        stage.chmod(0o777 & ~_umask())  # as a folder made by mkdir, not mkdtemp's 0700
        written = write(stage)
        names = {name: Path(path).name for name, path in written.items()}
        return _place(stage, dest, names, out is not None)
    except OSError as err:
        raise ServetuneError(
            f"{dest}: could not publish the export ({err.strerror or err}); nothing of it "
            f"was left there"
        ) from None
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def _place(stage: Path, dest: Path, names: dict, asked: bool) -> Published:
    """Move the staged set to where it belongs (publish): `dest` when `asked` (--out) or when
    it holds no export; nowhere when `dest` or a sibling holds the same files; else the next
    free sibling (another run taking one first moves this one to the next)."""
    at = lambda folder: {n: folder / f for n, f in names.items()}
    if asked or not holds_export(dest):
        if not dest.exists():
            try:
                stage.rename(dest)
                return Published(at(dest))
            except OSError:  # made by another run meanwhile: publish into it as a folder
                pass
        if not asked and holds_export(dest):
            return _place(stage, dest, names, asked)
        _replace_set(stage, dest)
        return Published(at(dest))
    for folder in (dest, *_siblings(dest)):
        if _same_files(stage, folder):
            return Published(
                at(folder),
                f"{folder}/ holds this export already (the same files); left as it is",
                kept=True,
            )
    for _ in range(MAX_BESIDE):
        beside = _free_sibling(dest)
        try:
            stage.rename(beside)
        except OSError:  # another export took that name first: the next one
            continue
        return Published(
            at(beside), f"{dest}/ holds another export, kept as it is; this one is beside it"
        )
    raise ServetuneError(f"{dest}: no free folder beside it; pass --out")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _same_files(a: Path, b: Path) -> bool:
    """Do folders `a` and `b` hold the same export files with the same bytes."""
    names = holds_export(a)
    return names == holds_export(b) and all(
        (a / n).read_bytes() == (b / n).read_bytes() for n in names
    )


def _siblings(dest: Path) -> list[Path]:
    """The folders dest-2, dest-3, ... that exist, in order."""
    out = []
    for k in range(2, MAX_BESIDE):
        candidate = dest.with_name(f"{dest.name}-{k}")
        if not candidate.exists():
            break
        out.append(candidate)
    return out


def _free_sibling(dest: Path) -> Path:
    """The first of dest-2, dest-3, ... that does not exist."""
    for k in range(2, MAX_BESIDE + 2):
        candidate = dest.with_name(f"{dest.name}-{k}")
        if not candidate.exists():
            return candidate
    raise ServetuneError(f"{dest}: {MAX_BESIDE:,} exports beside it already; pass --out")


def _replace_set(stage: Path, out: Path) -> None:
    """Make `out` hold the staged set: every staged file moved in, replacing its namesake
    whole, and the export files `out` held that the set lacks (a fleet's hpa.yaml beside a
    plain export) removed."""
    out.mkdir(parents=True, exist_ok=True)
    staged = {p.name for p in stage.iterdir()}
    for name in holds_export(out):
        if name not in staged:
            (out / name).unlink()
    for name in sorted(staged):
        os.replace(stage / name, out / name)
