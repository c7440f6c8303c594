"""Tuning checkpoints: one JSON file, written atomically (a crash leaves the previous one).

Floats are written with Python's repr, which round-trips exactly, so a resumed run continues
from bit-identical state. The optimizer state is stored as its flattened leaves and restored
into the tree structure of a freshly initialized state.
"""

from __future__ import annotations

import json
from pathlib import Path

import jax
import numpy as np

from servetune.files import ensure_dir, write_text

NAME = "checkpoint.json"


def _leaf(x) -> dict:
    a = np.asarray(x)
    return {"dtype": str(a.dtype), "shape": list(a.shape), "data": a.reshape(-1).tolist()}


def _array(d: dict) -> np.ndarray:
    return np.asarray(d["data"], dtype=d["dtype"]).reshape(d["shape"])


def save(out_dir: Path, state: dict, opt_state) -> Path:
    """Write `state` (JSON-able scalars and lists, numpy arrays allowed at the top level) and the
    optimizer state to out_dir/checkpoint.json, atomically."""
    ensure_dir(out_dir)
    doc = {k: (_leaf(v) if isinstance(v, np.ndarray) else v) for k, v in state.items()}
    doc["opt_state"] = [_leaf(x) for x in jax.tree.leaves(opt_state)]
    path = out_dir / NAME
    return write_text(path, json.dumps(doc))


def load(out_dir: Path, opt_state_like, array_keys=("theta",)):
    """(state, opt_state) from out_dir/checkpoint.json, or None if there is none."""
    path = out_dir / NAME
    if not path.exists():
        return None
    doc = json.loads(path.read_text())
    leaves = [_array(d) for d in doc.pop("opt_state")]
    treedef = jax.tree.structure(opt_state_like)
    opt_state = jax.tree.unflatten(treedef, [jax.numpy.asarray(x) for x in leaves])
    for k in array_keys:
        doc[k] = _array(doc[k])
    return doc, opt_state
