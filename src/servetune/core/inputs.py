"""Input files read safely: only regular files are opened.

Opening a FIFO blocks until a writer comes (a hang), a character device such as /dev/zero never
ends, and `~nosuchuser/...` makes pathlib raise RuntimeError. Every file servetune reads goes
through `read_bytes` (or `check_regular` before a library opens it), and every user path
through `expand`, so each of these is an error naming the file or the key instead.
"""

from __future__ import annotations

import difflib
import os
import stat
from pathlib import Path

from servetune.core.errors import ConfigError, ServetuneError, TraceError

_KINDS = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a directory"),
)


def expand(path: str | Path, key: str, error: type[ServetuneError] = ConfigError) -> Path:
    """`path` with a leading ~ or ~user expanded; `error` naming `key` when the user (or the
    home folder) is unknown."""
    try:
        expanded = Path(path).expanduser()
    except RuntimeError:
        raise error(
            f"{key}: got {str(path)!r}; cannot expand {str(path).split('/')[0]!r} "
            f"(no such user or home folder)"
        ) from None
    loop = symlink_loop(expanded)
    if loop is not None:
        raise error(
            f"{key}: got {str(path)!r}; {loop} is a loop of symbolic links (each "
            f"points, in the end, back to itself); expected a folder or file path"
        )
    return expanded


def symlink_loop(path: Path) -> Path | None:
    """The first part of `path` that is a loop of symbolic links (resolving it never ends),
    or None."""
    try:
        Path(path).resolve()
    except (RuntimeError, OSError):
        pass
    else:
        return None
    for part in [*reversed(Path(path).parents), Path(path)]:
        try:
            part.resolve(strict=False)
        except (RuntimeError, OSError):
            return part
    return Path(path)


def check_regular(path: Path, what: str, error: type[ServetuneError] = TraceError) -> int:
    """The size in bytes of the regular file `path`; `error` naming it when it is missing,
    unreadable, or a directory, FIFO, device or socket (never opened: a FIFO would block)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise error(f"{path}: file not found") from None
    except OSError as err:
        raise error(
            f"{path}: cannot be read ({err.strerror or err}); expected a readable {what}"
        ) from None
    for test, kind in _KINDS:
        if test(st.st_mode):
            raise error(f"{path}: is {kind}; expected a {what} (a regular file)")
    return st.st_size


def read_bytes(path: Path, what: str, error: type[ServetuneError] = TraceError) -> bytes:
    """The contents of the regular file `path` (see check_regular); `error` naming it when
    it cannot be read."""
    path = Path(path)
    check_regular(path, what, error)
    try:
        return path.read_bytes()
    except OSError as err:
        raise error(
            f"{path}: cannot be read ({err.strerror or err}); expected a readable {what}"
        ) from None


def existing_file(
    value: str, key: str, root: Path | None = None, expected: str | None = None
) -> Path:
    """The file config key `key` names (`value`, relative to `root`, default the current
    folder); ConfigError naming the key, what it `expected` (where it takes more than a file),
    the folder it looked in and the closest file there (or what the folder holds) where there
    is no such file."""
    path = expand(value, key)
    if not path.is_absolute():
        path = (root or Path(".")) / path
    if path.exists():
        return path
    folder = path.parent
    where = folder.resolve() if folder.is_dir() else folder
    said = f"{key}: got {value!r}; " + (f"expected {expected}; " if expected else "")
    if not folder.is_dir():
        raise ConfigError(f"{said}{where} is not a folder, so no such file")
    try:
        names = sorted(p.name for p in folder.iterdir() if not p.name.startswith("."))
    except OSError as err:  # a folder it may not list
        raise ConfigError(
            f"{said}no such file in {where} (which cannot be listed: {err.strerror or err})"
        ) from None
    close = difflib.get_close_matches(path.name, names, n=2, cutoff=0.6)
    hint = (
        f"did you mean {' or '.join(str(folder / c) for c in close)}?"
        if close
        else f"it holds {', '.join(names[:6])}{', ...' if len(names) > 6 else ''}"
        if names
        else "it is empty"
    )
    raise ConfigError(f"{said}no such file in {where}; {hint}")
