"""Output files written whole or not at all.

Every file servetune writes goes through `write_whole`: a temporary file in the target folder,
fsync, rename. A reader sees the old file or the whole new one; a full or read-only disk raises
OutputError naming the file, and leaves no partial file behind.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from servetune.core.errors import OutputError


def write_whole(path: Path, write: Callable[[Path], object]) -> Path:
    """Create `path` through `write(tmp)` on a temporary file in the same folder, fsync it and
    rename it into place. On an error the temporary file is removed; an OSError (disk full,
    read-only folder, a folder where the file should be) becomes OutputError naming `path`,
    anything else is raised as it is. Returns `path`."""
    path = Path(path)
    ensure_dir(path.parent)
    tmp = None
    try:
        fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=path.suffix)
        os.close(fd)
        tmp = Path(name)
        write(tmp)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except OSError as err:
        _discard(tmp)
        reason = err.strerror or str(err)
        raise OutputError(
            f"{path}: could not write it ({reason}); nothing was written there"
        ) from err
    except BaseException:
        _discard(tmp)
        raise
    return path


def ensure_dir(path: Path) -> Path:
    """Create the folder `path` (and its parents) if it is missing; an OSError (a file in the
    way, a read-only place) becomes OutputError naming `path`. Returns `path`."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise OutputError(f"{path}: cannot be an output folder ({err.strerror or err})") from err
    return path


def _discard(tmp: Path | None) -> None:
    if tmp is not None:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass


def write_text(path: Path, text: str) -> Path:
    """Write `text` (UTF-8) to `path` whole (write_whole)."""
    return write_whole(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def jsonable(obj):
    """`obj` with numpy scalars as Python numbers and non-finite floats spelled out (NaN as
    null, infinities as the strings "inf" / "-inf", as `vllm bench serve` writes an unlimited
    request rate), so strict JSON can hold it; `json_number` reads such a number back."""
    if isinstance(obj, dict):
        return {k: jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if hasattr(obj, "tolist"):  # numpy / JAX arrays and scalars
        return jsonable(obj.tolist())
    if isinstance(obj, float) and not math.isfinite(obj):
        return None if math.isnan(obj) else ("inf" if obj > 0 else "-inf")
    return obj


NON_FINITE_TEXT = {"inf": math.inf, "-inf": -math.inf}  # jsonable's spelling of infinities


def json_number(value) -> float | int | None:
    """A number as `jsonable` wrote it, read back: ints and floats as they are, "inf" / "-inf"
    as infinities (an unlimited cap), null (a NaN, or a value that was never set) as None;
    ValueError for anything else (a bool, other text, a container)."""
    if value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)):
        return value
    if isinstance(value, str) and value in NON_FINITE_TEXT:
        return NON_FINITE_TEXT[value]
    raise ValueError(f'{str(value)[:40]!r} is not a number (or "inf", "-inf", null)')


def from_jsonable(obj, null=None):
    """`obj` as `jsonable` wrote it, read back through dicts and lists: "inf" / "-inf" as the
    infinities, null as `null` (math.nan where every value is a number, as in a table's row)."""
    if isinstance(obj, dict):
        return {k: from_jsonable(v, null) for k, v in obj.items()}
    if isinstance(obj, list):
        return [from_jsonable(v, null) for v in obj]
    if obj is None:
        return null
    if isinstance(obj, str) and obj in NON_FINITE_TEXT:
        return NON_FINITE_TEXT[obj]
    return obj


def write_json(path: Path, doc, indent: int | None = 2) -> Path:
    """Write `doc` to `path` whole as strict JSON (no bare NaN or Infinity: see jsonable),
    ending with a newline."""
    text = json.dumps(jsonable(doc), indent=indent, allow_nan=False, default=str) + "\n"
    return write_text(path, text)
