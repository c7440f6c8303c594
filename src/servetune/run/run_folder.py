"""One run per output folder, and a run's outputs as a set.

A command that writes a run folder (`servetune simulate`, `tune`, a multirun's sweep folder)
claims it first: it takes an exclusive lock on `<folder>/.servetune.lock` (fcntl.flock, held
for the life of the process, so a run that dies releases it and a stale lock cannot outlive
its process) and writes there what runs (command, pid, host, start). A second run that finds
the folder claimed by a live process is refused, naming that process.

A rerun into a folder that already holds a finished run's outputs moves them aside first, into
`<folder>/superseded/<time>/`, whole (`.hydra/` and `cli.log` included), so the two runs' files
never mix and nothing is lost; `servetune report` skips `superseded/` when it collects a parent
folder and reads a superseded run when pointed at it. A tuning folder is not moved aside: a
rerun there resumes from its checkpoint (or, with tune.resume=false, starts over in it).

A run that fails before its set is published (a refused config, a full disk) marks its record
"failed" with the error, and where it had moved an earlier run's set aside puts that set back,
keeping its own files (Hydra's, its log) in `superseded/<time>-failed/`.

A simulate run writes its outputs into `<folder>/.staging-<pid>/`, then publishes them: the
record turns to "publishing" (with the file list), each file is renamed into the folder, and
the record turns to "complete". Readers require a complete record where one exists: a folder
whose record says otherwise and whose process is gone stopped before its outputs were
complete, and is left out with a warning naming it (a folder without a record, written by an
older servetune or by hand, is read as before).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import socket
from datetime import datetime
from pathlib import Path

from servetune.core.errors import ServetuneError
from servetune.core.files import write_text

LOCK = ".servetune.lock"
SUPERSEDED = "superseded"
STAGING = ".staging-"
COMPLETE, PUBLISHING, RUNNING, FAILED = "complete", "publishing", "running", "failed"
REFUSED = "refused"  # stopped before it ran (the resource guard): nothing of it was written
_HELD: dict[str, int] = {}  # folder -> the lock file descriptor this process holds
_MOVED: dict[str, Path] = {}  # folder -> where this process's claim moved an earlier set
_KEPT: dict[str, dict] = {}  # folder -> the finished run's record a claim kept in place


class FolderInUseError(ServetuneError):
    """Another live run holds the output folder."""


def record(folder: Path) -> dict | None:
    """The run record of `folder` ({command, pid, host, started, state, files}), None when it
    has none; {"state": "unreadable"} when the file is there but is not a record."""
    path = Path(folder) / LOCK
    if not path.is_file():
        return None
    try:
        doc = json.loads(path.read_text() or "{}")
    except (OSError, ValueError):
        return {"state": "unreadable"}
    return doc if isinstance(doc, dict) else {"state": "unreadable"}


def _write_record(folder: Path, doc: dict) -> None:
    """Rewrite the record in place (the same file: another process's lock stays on it)."""
    fd = _HELD.get(str(Path(folder).resolve()))
    if fd is None:
        fd = os.open(Path(folder) / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        close = True
    else:
        close = False
    try:
        data = (json.dumps(doc, indent=1) + "\n").encode()
        os.lseek(fd, 0, os.SEEK_SET)
        os.ftruncate(fd, 0)
        os.write(fd, data)
        os.fsync(fd)
    finally:
        if close:
            os.close(fd)


def held_by_live_run(folder: Path) -> bool:
    """Whether a live process holds `folder`'s lock (this process's own lock excluded)."""
    path = Path(folder) / LOCK
    if str(Path(folder).resolve()) in _HELD or not path.is_file():
        return False
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)
    return False


def _holder(doc: dict | None) -> str:
    if not doc:
        return "another run"
    return (
        f"{doc.get('command', 'a servetune run')} (pid {doc.get('pid', '?')} on "
        f"{doc.get('host', '?')}, started {doc.get('started', '?')})"
    )


def claim(folder: Path, command: str, supersede: bool) -> Path | None:
    """Lock `folder` for this process (creating it), naming `command` in its record; with
    `supersede`, move a finished run's outputs found there into superseded/<time>/ first.
    Returns where they went (None when nothing moved). FolderInUseError names the live run
    that holds it."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    key = str(folder.resolve())
    if key in _HELD:
        return None
    fd = os.open(folder / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise FolderInUseError(
            f"{folder}: in use by {_holder(record(folder))}; wait for it "
            f"to finish or write elsewhere (hydra.run.dir=..., or "
            f"hydra.sweep.dir=... for a multirun)"
        ) from None
    _HELD[key] = fd
    earlier = record(folder)
    moved = _move_aside(folder) if supersede else None
    if moved is not None:
        _MOVED[key] = moved
    elif not supersede and earlier is not None and earlier.get("state") == COMPLETE:
        _KEPT[key] = earlier  # a finished tuning folder, rerun in place (it resumes)
    _write_record(
        folder,
        {
            "command": command,
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started": datetime.now().isoformat(timespec="seconds"),
            "state": RUNNING,
        },
    )
    return moved


# what a servetune run leaves in its folder (beside the files its record lists): Hydra's own
# files, the log, the outputs of simulate, tune and report, a sweep's job folders
RUN_ENTRIES = {
    ".hydra",
    "cli.log",
    "config_resolved.yaml",
    "metrics.json",
    "metrics.csv",
    "objective.json",
    "vllm_bench.json",
    "requests.parquet",
    "timeline.parquet",
    "fleet.parquet",
    "fleet_hourly.parquet",
    "jit_cache.json",
    "error.json",
    "report",
    "multirun.yaml",
    "optimization_results.yaml",
}


def _is_run_entry(entry: Path, listed: set) -> bool:
    """Whether `entry` is a run's (RUN_ENTRIES, a file its record lists, a job folder with its
    .hydra/, a staging folder); anything else in the folder is the user's and stays."""
    return (
        entry.name in RUN_ENTRIES
        or entry.name in listed
        or entry.name.startswith(STAGING)
        or (entry.is_dir() and (entry / ".hydra").is_dir())
    )


def _move_aside(folder: Path, tag: str = "") -> Path | None:
    """Move an earlier run's entries in `folder` (_is_run_entry) into superseded/<time><tag>/
    (its record goes along); None when there was none."""
    old = record(folder)
    listed = set((old or {}).get("files") or ())
    entries = [
        p for p in folder.iterdir() if p.name not in (LOCK, SUPERSEDED) and _is_run_entry(p, listed)
    ]
    if not entries:
        return None
    stamp = datetime.now().strftime("%Y-%m-%d_%H-%M-%S") + tag
    target = folder / SUPERSEDED / stamp
    n = 1
    while target.exists():
        n += 1
        target = folder / SUPERSEDED / f"{stamp}-{n}"
    target.mkdir(parents=True)
    for entry in entries:
        entry.rename(target / entry.name)
    if old:  # the earlier run's record (empty: the lock this claim just created)
        write_text(target / LOCK, json.dumps(old, indent=1) + "\n")
    return target


def staging(folder: Path) -> Path:
    """A fresh folder inside `folder` to write this run's outputs into before publish(); left-
    over staging folders of runs that are gone are removed."""
    folder = Path(folder)
    for old in folder.glob(f"{STAGING}*"):
        pid = old.name[len(STAGING) :]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(old, ignore_errors=True)
    path = folder / f"{STAGING}{os.getpid()}"
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def publish(folder: Path, staged: Path, command: str) -> list[str]:
    """Move every file of `staged` into `folder` as one set: the record says "publishing" with
    the list, each file is renamed in, then the record says "complete". Returns the names."""
    folder, staged = Path(folder), Path(staged)
    names = sorted(p.name for p in staged.iterdir())
    old = record(folder) or {}
    doc = dict(old, command=command, pid=os.getpid(), files=names)
    doc.pop("finished", None)
    _write_record(folder, dict(doc, state=PUBLISHING))
    for name in set(old.get("files") or ()) - set(names):  # the earlier set's, not in this one
        if isinstance(name, str) and "/" not in name and name not in (LOCK, SUPERSEDED):
            with contextlib.suppress(OSError):
                (folder / name).unlink()
    for name in names:
        os.replace(staged / name, folder / name)
    staged.rmdir()
    _write_record(
        folder, dict(doc, state=COMPLETE, finished=datetime.now().isoformat(timespec="seconds"))
    )
    return names


@contextlib.contextmanager
def outputs_as_a_set(folder: Path, command: str):
    """Yield a staging folder to write a run's outputs into; on leaving the block they are
    published into `folder` as one set (publish), or, if the block raised, removed (the folder
    keeps what it held)."""
    staged = staging(folder)
    try:
        yield staged
    except BaseException:
        shutil.rmtree(staged, ignore_errors=True)
        raise
    publish(folder, staged, command)


@contextlib.contextmanager
def claimed_set(folder: Path, command: str):
    """`outputs_as_a_set` under this process's lock on `folder` (claim, without moving
    anything aside), released after: for a command that rewrites its own folder's set in
    place (a report, an import)."""
    claim(folder, command, supersede=False)
    try:
        with outputs_as_a_set(folder, command) as staged:
            yield staged
    finally:
        release(folder)


def abandon(folder: Path, error: str, state: str = FAILED) -> Path | None:
    """After this process's run into `folder` failed before its set was published: its record
    says `state` (failed; refused: stopped by the resource guard before it ran) with `error`,
    so no folder claims a run that is gone; where its claim moved
    an earlier run's set aside, that set is put back (the folder again holds one whole run)
    and this run's own entries (Hydra's files, its log) go to superseded/<time>-failed/.
    Returns the folder the earlier set came back from, None when none was moved (or an entry
    of this run's that _is_run_entry does not know holds one of its names: both sets then stay
    whole, the earlier one in superseded/). A set already published, or being published, is
    left as it is; a finished tuning folder that a refused rerun claimed keeps its record,
    with the failure under `last_failed`."""
    folder = Path(folder)
    key = str(folder.resolve())
    doc = record(folder)
    kept = _KEPT.pop(key, None)
    if doc is None or doc.get("state") in (COMPLETE, PUBLISHING):
        _MOVED.pop(key, None)
        return None
    now = datetime.now().isoformat(timespec="seconds")
    failed = {"error": str(error)[:2000], "at": now}
    if kept is not None:  # a finished tuning stays one; the failed rerun is noted in its record
        _write_record(folder, dict(kept, last_failed=dict(failed, command=doc.get("command"))))
        return None
    _write_record(folder, dict(doc, state=state, error=failed["error"], finished=now))
    moved = _MOVED.pop(key, None)
    if moved is None or not moved.is_dir():
        return None
    back = [e for e in moved.iterdir() if e.name != LOCK]
    _move_aside(folder, tag="-failed")
    if any((folder / e.name).exists() for e in back):  # this run left an entry of that name
        return None  # both sets stay whole: the earlier one in superseded/
    earlier = record(moved)
    for entry in back:
        entry.rename(folder / entry.name)
    if earlier is not None:
        _write_record(folder, earlier)
    shutil.rmtree(moved, ignore_errors=True)
    return moved


def incomplete(folder: Path) -> str | None:
    """Why `folder`'s outputs must not be read (its run is still going, or stopped before they
    were complete), or None when they can be (complete, or no record: an older or hand-made
    folder)."""
    doc = record(folder)
    if doc is None or doc.get("state") == COMPLETE:
        return None
    if held_by_live_run(folder):
        return f"still being written by {_holder(doc)}"
    if doc.get("state") in (RUNNING, REFUSED, FAILED) and not doc.get("files"):
        return None if not _has_outputs(folder) else "its run stopped before recording them"
    return (
        f"incomplete: its run ({_holder(doc)}) stopped before all its outputs were "
        f"written ({LOCK} says {doc.get('state')!r})"
    )


def _has_outputs(folder: Path) -> bool:
    return any((Path(folder) / name).exists() for name in ("metrics.json", "metrics.csv"))


def finish(folder: Path) -> None:
    """Mark a run whose files are not published as a set (a tuning folder, a sweep's folder)
    complete once its command ended normally."""
    _KEPT.pop(str(Path(folder).resolve()), None)
    doc = record(folder)
    if doc is not None and doc.get("state") == RUNNING:
        _write_record(
            folder, dict(doc, state=COMPLETE, finished=datetime.now().isoformat(timespec="seconds"))
        )


def release(folder: Path) -> None:
    """Give up this process's lock on `folder` (kept until exit otherwise)."""
    fd = _HELD.pop(str(Path(folder).resolve()), None)
    if fd is not None:
        os.close(fd)
