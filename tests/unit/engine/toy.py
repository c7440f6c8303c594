"""Hand-built engine states for unit tests of the pure functions in servetune/engine/.

`entries(cfg, rows)` builds one instance's active set [A] from a few rows (a dict per request,
naming only what the test is about); every other field takes the value an empty or freshly
arrived request has, and the unused slots are EMPTY. The tests then call one engine function
on it and check the outcome worked out by hand: no simulator, one small compilation each.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np

from servetune.config import hardware
from servetune.config.policy import make_policy
from servetune.core.types import (
    EMPTY_ENTRY,
    RUNNING,
    WAITING,
    CascadeEntries,
    EngineConfig,
    Entries,
    Params,
    PrefixRefs,
    RelaxTape,
    SwapTape,
)
from servetune.engine.kv import blocks_for

# A small engine: 4 running slots, 4 visible waiting, 4-token blocks, 64-token sequences.
SMALL = {
    "max_slots": 4,
    "queue_window": 4,
    "block_size": 4,
    "max_model_len": 64,
    "cost_form": "linear",
    "leap_max": 8,
    "drain_per_step": 2,
    "outbox": 16,
}


def config(**overrides) -> EngineConfig:
    """The small engine with `overrides` (EngineConfig field names)."""
    return EngineConfig(**{**SMALL, **overrides})


# Values of a slot nobody holds (EMPTY) and of the per-request fields a row leaves out: the
# engine's own (core/types.EMPTY_ENTRY).
_EMPTY = {name: value for name, (value, _) in EMPTY_ENTRY.items()}
_DTYPE = {name: dtype for name, (_, dtype) in EMPTY_ENTRY.items()}
_OPTIONAL = {f.name for f in dataclasses.fields(Entries)} - set(_EMPTY)
_SUBSTATES = {
    "prefix": PrefixRefs,
    "relaxed": RelaxTape,
    "swap": SwapTape,
    "cascade": CascadeEntries,
}


def entries(cfg: EngineConfig, rows, **optional) -> Entries:
    """Entries [A = cfg.n_entries] holding `rows` in slots 0..len(rows)-1.

    A row is a dict of Entries fields. Defaults: `req` its slot, status WAITING, arrival 0,
    `predicted` its output, `blocks` what `computed` tokens occupy (cfg's block size), the rest
    as an empty slot. `optional` sets mechanism fields, padded with zeros: a list per entry
    (priority=[...]), or for a mechanism's sub-state a dict of such lists
    (cascade={'fail': [...], 'tier': [...]}); the others stay None.
    """
    n = cfg.n_entries
    assert len(rows) <= n, f"{len(rows)} rows for {n} slots"
    cols = {name: [v] * n for name, v in _EMPTY.items()}
    for slot, row in enumerate(rows):
        unknown = set(row) - set(_EMPTY)
        assert not unknown, f"not Entries fields: {sorted(unknown)}"
        full = dict(_EMPTY, req=slot, status=WAITING, arrival=0.0)
        full.update(row)
        if "predicted" not in row:
            full["predicted"] = float(full["output"])
        if "blocks" not in row:
            full["blocks"] = int(blocks_for(jnp.asarray([full["computed"]]), cfg)[0])
        for name, v in full.items():
            cols[name][slot] = v
    fields = {name: jnp.asarray(np.asarray(v), _DTYPE[name]) for name, v in cols.items()}
    for name, values in optional.items():
        assert name in _OPTIONAL, f"{name} is not a mechanism field of Entries"
        if isinstance(values, dict):
            fields[name] = _SUBSTATES[name](**{f: _padded(v, n) for f, v in values.items()})
        else:
            fields[name] = _padded(values, n)
    return Entries(**fields)


def _padded(values, n: int):
    """values (one per row) padded with zeros of their dtype to n entries."""
    a = np.asarray(values)
    return jnp.asarray(np.concatenate([a, np.zeros((n - len(a),) + a.shape[1:], a.dtype)]))


def running(prompt, output, generated=0, **row) -> dict:
    """A row of a RUNNING request that has computed its prompt and `generated` outputs (the
    last emitted token's KV not yet computed, as in vLLM: it is the next decode's input);
    `row` adds or overrides fields (status, computed, ...)."""
    computed = prompt + max(generated - 1, 0) if generated else prompt
    return {
        "status": RUNNING,
        "prompt": prompt,
        "output": output,
        "generated": generated,
        "computed": computed,
        **row,
    }


def params(
    policy=None,
    *,
    kv_blocks=1000,
    base_s=0.01,
    per_prefill_token_s=1e-4,
    per_decode_seq_s=1e-3,
    order="fcfs",
) -> Params:
    """Scalar Params: `policy` values over vLLM's defaults, a linear cost."""
    cost = hardware.linear_cost_params(
        base_s=base_s,
        per_prefill_token_s=per_prefill_token_s,
        per_decode_seq_s=per_decode_seq_s,
        per_ctx_token_s=0.0,
        kv_blocks=kv_blocks,
    )
    return Params(policy=make_policy(policy or {}, order=order), cost=cost)


def column(e: Entries, name: str, n: int) -> list:
    """Field `name` of the first n slots, as Python values."""
    return np.asarray(getattr(e, name))[:n].tolist()
