"""Tuning checkpoints: one JSON file, written atomically (a crash leaves the previous one).

Floats are written with Python's repr, which round-trips exactly, so a resumed run continues from
bit-identical state. The file is strict JSON with every other file's convention (files.jsonable /
files.from_jsonable): an infinite value (an unlimited queue cap, tokens per dollar at price 0) is
the string "inf" or "-inf", a NaN is null (a history row's NaN reads back as NaN). Arrays must be
finite. The optimizer state is stored as its flattened leaves and restored into the tree structure
of a freshly initialized state.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import jax
import numpy as np

from servetune.core.errors import CheckpointError
from servetune.core.files import ensure_dir, from_jsonable, write_json

NAME = "checkpoint.json"
FORMAT = 4  # 4: non-finite floats as every servetune file writes them ("inf", null); 3: tagged
#             {"$float": "inf"}; 2: the settings that shape the search recorded ("problem"), bare
#             NaN / Infinity; 1 had no "format" key
READS = (2, 3, 4)  # formats this servetune resumes from (2 read with Python's NaN / Infinity)
_TAG = "$float"  # format 3's {"$float": "nan"}: a non-finite float in strict JSON


def _leaf(x) -> dict:
    a = np.asarray(x)
    return {"dtype": str(a.dtype), "shape": list(a.shape), "data": a.reshape(-1).tolist()}


def _array(d: dict) -> np.ndarray:
    """The numeric array of a _leaf document; TypeError or ValueError when it is none."""
    dtype = np.dtype(d["dtype"])
    if dtype.kind not in "biuf":
        raise TypeError(f"dtype {d['dtype']!r} is not numeric")
    return np.asarray(d["data"], dtype=dtype).reshape(d["shape"])


def _decode(obj: dict):
    """A format-3 JSON object as read: a tagged non-finite float as the float, anything else
    as is."""
    if len(obj) == 1 and obj.get(_TAG) in ("nan", "inf", "-inf"):
        return float(obj[_TAG])
    return obj


def _from_json(doc: dict) -> dict:
    """A format-4 document with its non-finite values read back (files.from_jsonable): the
    history rows' and the best point's nulls as NaN, "inf" as unlimited; the settings
    ("problem") are strings as written; arrays are left to _array (which reads "inf" and null
    too, and the finiteness check refuses them)."""
    doc = dict(doc)
    if isinstance(doc.get("history"), list):
        doc["history"] = [
            from_jsonable(r, null=math.nan) if isinstance(r, dict) else r for r in doc["history"]
        ]
    if isinstance(doc.get("best"), dict):
        doc["best"] = from_jsonable(doc["best"], null=math.nan)
    doc["best_values"] = from_jsonable(doc.get("best_values"))
    if isinstance(doc.get("visited"), list):
        doc["visited"] = from_jsonable(doc["visited"], null=math.nan)
    return doc


def save(out_dir: Path, state: dict, opt_state) -> Path:
    """Write `state` (JSON-able scalars and lists, numpy arrays allowed at the top level) and the
    optimizer state to out_dir/checkpoint.json, atomically, as strict JSON."""
    ensure_dir(out_dir)
    doc = {k: (_leaf(v) if isinstance(v, np.ndarray) else v) for k, v in state.items()}
    doc["opt_state"] = [_leaf(x) for x in jax.tree.leaves(opt_state)]
    doc["format"] = FORMAT
    return write_json(out_dir / NAME, doc, indent=None)  # files.jsonable's spelling


REQUIRED = (
    "iteration",
    "theta",
    "lambda",
    "fingerprint",
    "problem",
    "opt_state",
    "history",
    "best",
    "best_values",
    "scenarios",
)


def _refuse(path: Path, what: str) -> CheckpointError:
    return CheckpointError(
        f"{path}: {what}; resume in another folder, or pass "
        f"tune.resume=false to start over here (it overwrites the file)"
    )


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _count(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _finite(v) -> bool:
    return _number(v) and math.isfinite(v)


def _policy_value(v) -> bool:
    """A policy value as the tuner records it: a number (inf: unlimited), or the network's
    weights (a list of finite numbers)."""
    if isinstance(v, list):
        return all(_finite(x) for x in v)
    return _number(v) and not math.isnan(v)


def _is_leaf(v) -> bool:
    return (
        isinstance(v, dict)
        and isinstance(v.get("dtype"), str)
        and isinstance(v.get("shape"), list)
        and all(_count(n) for n in v["shape"])
        and isinstance(v.get("data"), list)
    )


FIELDS = {  # key -> (check of its value, what is expected)
    "iteration": (_count, "a whole number >= 0"),
    "scenarios": (_count, "a whole number >= 0"),
    "lambda": (lambda v: _finite(v) and v >= 0, "a finite number >= 0"),
    "fingerprint": (lambda v: isinstance(v, str), "a string"),
    "problem": (lambda v: isinstance(v, dict), "an object of settings"),
    "history": (
        lambda v: isinstance(v, list) and all(isinstance(r, dict) for r in v),
        "a list of objects, one row per iteration",
    ),
    "best": (
        lambda v: (
            v is None
            or (isinstance(v, dict) and _finite(v.get("objective")) and _finite(v.get("violation")))
        ),
        "null or an object with a finite objective and violation",
    ),
    "best_values": (
        lambda v: v is None or (isinstance(v, dict) and all(_policy_value(x) for x in v.values())),
        "null or an object of policy values (numbers; score_net a list)",
    ),
    "theta": (_is_leaf, "an array {dtype, shape, data}"),
    "opt_state": (
        lambda v: isinstance(v, list) and all(_is_leaf(x) for x in v),
        "a list of arrays {dtype, shape, data}",
    ),
}


def _visit(v) -> bool:
    """A point the tuner scored (tuning/recommend.visits): its coordinates, summary and
    per-scenario objective and shortfall."""
    return (
        isinstance(v, dict)
        and isinstance(v.get("iteration"), int)
        and isinstance(v.get("z"), list)
        and all(_finite(x) for x in v["z"])
        and all(_number(v.get(k)) for k in ("objective", "violation", "slo_attainment"))
        and all(isinstance(v.get(k), list) and all(map(_number, v[k])) for k in ("f", "v"))
    )


# fields a checkpoint may lack (written before they were recorded): key -> (check, expected)
OPTIONAL = {
    "visited": (
        lambda v: isinstance(v, list) and all(_visit(x) for x in v),
        "a list of scored points {iteration, z, objective, violation, slo_attainment, f, v}",
    ),
}


def _shown(value) -> str:
    """`value` for a message: its JSON-like repr, or its type and length when long."""
    text = repr(value)
    if len(text) <= 60:
        return text
    size = f" of {len(value)}" if hasattr(value, "__len__") else ""
    return f"a {type(value).__name__}{size}"


def _check_fields(path: Path, doc: dict) -> None:
    """CheckpointError naming the first field of the wrong type or range (FIELDS), or a
    history or best policy that does not match the iteration count."""
    for key, (ok, expected) in {**FIELDS, **OPTIONAL}.items():
        if key in doc and not ok(doc[key]):
            raise _refuse(path, f"field {key!r} is {_shown(doc[key])}; expected {expected}")
    done, rows = doc["iteration"], len(doc["history"])
    if rows != done:
        raise _refuse(
            path,
            f"field 'history' has {rows} row(s) after {done} iteration(s); "
            f"expected one per iteration",
        )
    for key in ("best", "best_values"):
        if done and doc[key] is None:
            raise _refuse(
                path,
                f"field {key!r} is null after {done} iteration(s); expected the best policy found",
            )


def read(out_dir: Path) -> dict | None:
    """The checkpoint document in out_dir (checked: JSON of this format with every key a
    resume needs, each of its type and range, its arrays not yet unpacked), or None if there
    is none. CheckpointError names the file and what is wrong: unreadable, empty, binary,
    truncated, another format, a field of the wrong type."""
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
        raise _refuse(
            path, f"is truncated or corrupt JSON (line {err.lineno}, column {err.colno}: {err.msg})"
        ) from None
    if not isinstance(doc, dict):
        raise _refuse(path, f"holds a JSON {type(doc).__name__}; expected a checkpoint object")
    version = doc.get("format", 1)
    if version not in READS:
        raise _refuse(
            path,
            f"has checkpoint format {version!r}; this servetune reads "
            f"formats {', '.join(map(str, READS))}",
        )
    if version >= 4:
        doc = _from_json(doc)
    missing = [k for k in REQUIRED if k not in doc]
    if missing:
        raise _refuse(path, f"lacks {', '.join(missing)}: an older or foreign format")
    _check_fields(path, doc)
    return doc


def _arrays(path: Path, doc: dict, shapes: dict[str, tuple]) -> dict[str, np.ndarray]:
    """The arrays of `doc` named in `shapes` ({key: shape}), each checked: numeric, of that
    shape, finite."""
    out = {}
    for key, shape in shapes.items():
        try:
            a = _array(doc[key])
        except (KeyError, TypeError, ValueError, OverflowError) as err:
            raise _refuse(path, f"has a malformed array {key!r} ({err})") from None
        if a.shape != tuple(shape):
            raise _refuse(
                path,
                f"field {key!r} has shape {list(a.shape)}; this run's search "
                f"space has {list(shape)}",
            )
        out[key] = a
    return out


def _finite_arrays(path: Path, arrays: dict[str, np.ndarray]) -> None:
    for key, a in arrays.items():
        if not np.isfinite(a).all():
            raise _refuse(
                path, f"field {key!r} holds NaN or infinite values; expected finite numbers"
            )


def _check_values(path: Path, best: dict | None, value_keys) -> None:
    """The best policy's keys are this run's policy keys (the evaluation reads each)."""
    if best is None or value_keys is None or set(best) == set(value_keys):
        return
    differ = sorted(set(best) ^ set(value_keys))
    raise _refuse(
        path,
        f"field 'best_values' has keys {sorted(best)}; this run's policy has "
        f"{sorted(value_keys)} (they differ in {', '.join(differ)})",
    )


def unpack(doc: dict, opt_state_like, out_dir: Path, shapes: dict[str, tuple], value_keys=None):
    """(state, opt_state) from a checkpoint document (read): the arrays of `shapes` ({key:
    expected shape}, e.g. theta's) restored, the optimizer leaves put into opt_state_like's
    tree, every array finite; `value_keys` (if given) the keys best_values must have.
    CheckpointError when they do not fit (the file was written for another optimizer or search
    space, or edited)."""
    path = Path(out_dir) / NAME
    doc = dict(doc)
    treedef = jax.tree.structure(opt_state_like)
    like = jax.tree.leaves(opt_state_like)
    try:
        leaves = [_array(d) for d in doc.pop("opt_state")]
    except (TypeError, ValueError, OverflowError) as err:
        raise _refuse(path, f"has a malformed array 'opt_state' ({err})") from None
    expected = [tuple(np.shape(x)) for x in like]
    if [x.shape for x in leaves] != expected:
        raise _refuse(
            path,
            f"has optimizer state of {len(leaves)} arrays "
            f"{[x.shape for x in leaves]}; this run's optimizer has "
            f"{len(like)} {expected}",
        )
    arrays = _arrays(path, doc, shapes)
    size = tuple(shapes.get("theta", ()))
    for visit in doc.get("visited", []):
        if size and (len(visit["z"]),) != size:
            raise _refuse(
                path,
                f"field 'visited' holds a point of {len(visit['z'])} coordinates; this run's "
                f"search space has {size[0]}",
            )
    _finite_arrays(path, {**arrays, **{f"opt_state[{i}]": x for i, x in enumerate(leaves)}})
    _check_values(path, doc["best_values"], value_keys)
    doc.update(arrays)
    opt_state = jax.tree.unflatten(treedef, [jax.numpy.asarray(x) for x in leaves])
    return doc, opt_state


def load(out_dir: Path, opt_state_like, shapes: dict[str, tuple], value_keys=None):
    """(state, opt_state) from out_dir/checkpoint.json, or None if there is none (read, then
    unpack)."""
    doc = read(out_dir)
    return None if doc is None else unpack(doc, opt_state_like, out_dir, shapes, value_keys)
