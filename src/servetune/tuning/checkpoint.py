"""Tuning checkpoints: one JSON file, written atomically (a crash leaves the previous one).

Floats are written with Python's repr, which round-trips exactly, so a resumed run continues
from bit-identical state. The file is strict JSON: a non-finite float (an infinite queue cap,
tokens per dollar at price 0) is written as {"$float": "nan" | "inf" | "-inf"} and read back
as the float. The optimizer state is stored as its flattened leaves and restored into the tree
structure of a freshly initialized state.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import jax
import numpy as np

from servetune.errors import CheckpointError
from servetune.files import ensure_dir, write_json

NAME = "checkpoint.json"
FORMAT = 3  # 3: non-finite floats tagged (strict JSON); 2: the settings that shape the search
#             recorded ("problem"), bare NaN / Infinity; 1 had no "format" key
READS = (2, 3)  # formats this servetune resumes from (2 read with Python's NaN / Infinity)
_TAG = "$float"  # {"$float": "nan"}: a non-finite float in strict JSON


def _leaf(x) -> dict:
    a = np.asarray(x)
    return {"dtype": str(a.dtype), "shape": list(a.shape), "data": a.reshape(-1).tolist()}


def _array(d: dict) -> np.ndarray:
    return np.asarray(d["data"], dtype=d["dtype"]).reshape(d["shape"])


def _encode(obj):
    """`obj` (dicts, lists, scalars, numpy values) as JSON-able values with every non-finite
    float tagged ({"$float": "inf"})."""
    if isinstance(obj, (np.ndarray, np.generic)):
        obj = obj.tolist()
    if isinstance(obj, dict):
        return {k: _encode(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_encode(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return {_TAG: "nan" if math.isnan(obj) else ("inf" if obj > 0 else "-inf")}
    return obj


def _decode(obj: dict):
    """A JSON object as read: a tagged non-finite float as the float, anything else as is."""
    if len(obj) == 1 and obj.get(_TAG) in ("nan", "inf", "-inf"):
        return float(obj[_TAG])
    return obj


def save(out_dir: Path, state: dict, opt_state) -> Path:
    """Write `state` (JSON-able scalars and lists, numpy arrays allowed at the top level) and the
    optimizer state to out_dir/checkpoint.json, atomically, as strict JSON."""
    ensure_dir(out_dir)
    doc = {k: (_leaf(v) if isinstance(v, np.ndarray) else v) for k, v in state.items()}
    doc["opt_state"] = [_leaf(x) for x in jax.tree.leaves(opt_state)]
    doc["format"] = FORMAT
    return write_json(out_dir / NAME, _encode(doc), indent=None)


REQUIRED = ("iteration", "theta", "fingerprint", "problem", "opt_state", "history",
            "scenarios")


def _refuse(path: Path, what: str) -> CheckpointError:
    return CheckpointError(f"{path}: {what}; resume in another folder, or pass "
                           f"tune.resume=false to start over here (it overwrites the file)")


def read(out_dir: Path) -> dict | None:
    """The checkpoint document in out_dir (checked: JSON of this format with every key a
    resume needs, its arrays not yet unpacked), or None if there is none. CheckpointError
    names the file and what is wrong: unreadable, empty, binary, truncated, another format."""
    path = Path(out_dir) / NAME
    if not path.exists():
        return None
    if not path.is_file():
        raise _refuse(path, "is not a regular file")
    try:
        data = path.read_bytes()
    except OSError as err:
        raise _refuse(path, f"cannot be read ({err.strerror or err})") from None
    if not data.strip():
        raise _refuse(path, "is empty (not a checkpoint)")
    try:
        doc = json.loads(data.decode("utf-8"), object_hook=_decode)
    except UnicodeDecodeError as err:
        raise _refuse(path, f"is binary, not a JSON checkpoint (byte {err.start})") from None
    except json.JSONDecodeError as err:
        raise _refuse(path, f"is truncated or corrupt JSON (line {err.lineno}, column "
                            f"{err.colno}: {err.msg})") from None
    if not isinstance(doc, dict):
        raise _refuse(path, f"holds a JSON {type(doc).__name__}; expected a checkpoint object")
    version = doc.get("format", 1)
    if version not in READS:
        raise _refuse(path, f"has checkpoint format {version!r}; this servetune reads "
                            f"formats {' and '.join(map(str, READS))}")
    missing = [k for k in REQUIRED if k not in doc]
    if missing:
        raise _refuse(path, f"lacks {', '.join(missing)}: an older or foreign format")
    return doc


def unpack(doc: dict, opt_state_like, out_dir: Path, array_keys=("theta",)):
    """(state, opt_state) from a checkpoint document (read): arrays restored, the optimizer
    leaves put into opt_state_like's tree. CheckpointError when they do not fit it (the file
    was written for another optimizer or search space)."""
    path = Path(out_dir) / NAME
    doc = dict(doc)
    treedef = jax.tree.structure(opt_state_like)
    like = jax.tree.leaves(opt_state_like)
    try:
        leaves = [_array(d) for d in doc.pop("opt_state")]
        for k in array_keys:
            doc[k] = _array(doc[k])
    except (KeyError, TypeError, ValueError) as err:
        raise _refuse(path, f"has a malformed array ({err})") from None
    shapes = [tuple(np.shape(x)) for x in like]
    if [x.shape for x in leaves] != shapes:
        raise _refuse(path, f"has optimizer state of {len(leaves)} arrays "
                            f"{[x.shape for x in leaves]}; this run's optimizer has "
                            f"{len(like)} {shapes}")
    opt_state = jax.tree.unflatten(treedef, [jax.numpy.asarray(x) for x in leaves])
    return doc, opt_state


def load(out_dir: Path, opt_state_like, array_keys=("theta",)):
    """(state, opt_state) from out_dir/checkpoint.json, or None if there is none (read, then
    unpack)."""
    doc = read(out_dir)
    return None if doc is None else unpack(doc, opt_state_like, out_dir, array_keys)
