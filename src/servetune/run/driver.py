"""Rollouts on the host: drives the compiled chunks of engine/loop.py (sharded over devices
by run/shard.py) until every scenario is done, collecting the outbox of finished requests
after each chunk; per-request results are assembled once, at the end.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import numpy as np

from servetune.core.errors import ServetuneError
from servetune.core.types import DONE, EMPTY, OUTSTANDING, EngineConfig, Params, SimState, Workload
from servetune.engine import memory, width
from servetune.engine.loop import init_batch, run_chunk_batch, widen_batch
from servetune.engine.outbox import RECORD, entry_value, record_fields
from servetune.run import shard


@dataclasses.dataclass
class ScenarioResult:
    """Per-request outcome arrays of one scenario ([N] each, in trace order) and its totals."""

    end_state: np.ndarray
    first_token: np.ndarray
    finish: np.ndarray
    generated: np.ndarray
    n_preempt: np.ndarray
    tokens_computed: np.ndarray
    kv_ratio: np.ndarray
    scheduled_at: np.ndarray  # [N] f64 time first scheduled (seconds; nan if never)
    reject_reason: np.ndarray  # [N] i32 types.REJECT_* (-1: not rejected)
    stats: dict
    clock_s: float
    tier: np.ndarray | None = None  # [N] i32 model cascade: TIER_* each request was served on
    #                                 (-1: never routed); None when the cascade is off
    timeline: np.ndarray | None = None  # [T, I, 6] f64 the sampled timeline (types.Timeline;
    #                                     output.timeline), None when off


def _collect(box, sink: list) -> None:
    count = np.asarray(box.count)
    cap = box.req.shape[-1]
    valid = np.arange(cap) < count[..., None]
    if valid.any():
        sink.append((valid, {f: np.asarray(getattr(box, f)) for f in record_fields(box)}))


def rollout(
    wl: Workload, params: Params, cfg: EngineConfig, n_real: list[int], progress=None, devices=None
) -> list[list[ScenarioResult]]:
    """Run every scenario (workloads [S] x params [P]) to the end; results indexed [s][p].

    `n_real[s]` is workload s's unpadded request count; `progress(done, total)` is called after each
    compiled chunk. A narrow `cfg` (servetune/engine/width.py) is widened where the live requests
    need it (every scenario of the batch together); each result's stats name the final width
    (`entry_width`, entries per instance) and how often it grew (`widenings`). With several
    `devices` (default: all, every process's) the batch is sharded over them
    (servetune/run/shard.py); results do not depend on it. A batch whose state would not fit in
    memory is a ConfigError before anything is allocated (servetune/engine/memory.py).
    """
    n_p = int(jax.tree.leaves(params)[0].shape[0])
    lay = shard.layout(len(n_real), n_p, devices)
    n_devices = 1 if lay is None else lay.mesh.devices.size
    memory.check_fits(wl, params, cfg, n_devices)
    if lay is None:
        state = init_batch(wl, params, cfg)
        chunk = lambda s, cfg: run_chunk_batch(s, wl, params, cfg)
        fetch = jax.device_get
    else:
        wl, params = lay.place(wl, params)
        state = shard.init(lay, wl, params, cfg)
        chunk = lambda s, cfg: shard.run_chunk(lay, s, wl, params, cfg)
        fetch = lay.fetch
    total = int(np.sum(n_real)) * n_p
    chunks: list = []
    widenings = 0
    while True:
        state = chunk(state, cfg)
        box, done, next_req, need = fetch((state.outbox, state.done, state.next_req, state.need))
        _collect(box, chunks)
        if progress is not None:
            progress(int(np.sum(next_req)), total)
        if np.any(need > 0):  # a narrow program ran out of entries: go on wider
            cfg = width.wider(cfg, int(np.max(need)))
            memory.check_fits(wl, params, cfg, n_devices)
            state = widen_batch(state, wl, params, cfg)
            widenings += 1
        elif bool(np.all(done)):
            break
    final = fetch(state)
    s_count, p_count = final.done.shape
    results = []
    for s in range(s_count):
        row = []
        for p in range(p_count):
            res = _assemble(final, chunks, s, p, n_real[s])
            res.stats.update(entry_width=cfg.n_entries, widenings=widenings)
            row.append(res)
        results.append(row)
    return results


def fleet_state(fleet, s: int, p: int) -> dict:
    """The autoscaler's totals and log of scenario (s, p) as stats entries (fleet_log: rows of
    FLEET_LOG_COLUMNS in time order); an error when the log ran out of rows."""
    rows = int(fleet.n_log[s, p])
    log = np.asarray(fleet.log[s, p])
    if rows > log.shape[0]:
        raise ServetuneError(
            f"the fleet's log needed {rows} rows and holds {log.shape[0]}: set fleet.log_rows "
            f"to at least {rows}"
        )
    log = log[:rows]
    return {
        "fleet_log": log[np.argsort(log[:, 0], kind="stable")],
        "fleet_cold_s": float(fleet.cold_s[s, p]),
        "fleet_scale_ups": int(fleet.scale_ups[s, p]),
        "fleet_scale_downs": int(fleet.scale_downs[s, p]),
        "fleet_refused": int(fleet.refused[s, p]),
        "fleet_preemptions": int(fleet.preemptions[s, p]),
        "fleet_requeued": int(fleet.requeued[s, p]),
    }


def _assemble(final: SimState, chunks: list, s: int, p: int, n: int) -> ScenarioResult:
    # every record field of the results (the cascade tier with a cascade)
    fields = [f for f in record_fields(final.outbox) if RECORD[f].result]
    out = {f: np.full(n, RECORD[f].unset, RECORD[f].dtype) for f in fields}
    seen = np.zeros(n, np.int32)
    for valid, rec in chunks:
        m = valid[s, p]
        ids = rec["req"][s, p][m]
        seen[ids] += 1
        for f in fields:
            out[f][ids] = rec[f][s, p][m]
    # what is still in an active set at the end: running or waiting -> outstanding;
    # finished but not yet collected -> its own end state
    ent = jax.tree.map(lambda x: x[s, p].reshape(-1), final.entries)
    live = ent.status != EMPTY
    ids = ent.req[live]
    seen[ids] += 1
    for f in fields:
        out[f][ids] = entry_value(ent, f)[live]
    out["end_state"][ids] = np.where(ent.status[live] == DONE, ent.end_state[live], OUTSTANDING)
    if np.any(seen > 1):
        twice = int(np.argmax(seen > 1))
        raise AssertionError(f"request {twice} reported twice (scenario {s},{p})")
    st = jax.tree.map(lambda x: np.asarray(x[s, p]), final.stats)
    stats = {f.name: getattr(st, f.name) for f in dataclasses.fields(st)}
    stats["requests_taken"] = int(final.next_req[s, p])
    if final.prefix is not None:  # prefix caching totals (engine/prefix.py)
        for f in ("evictions", "insert_failed", "insert_deferred"):
            stats[f"prefix_{f}"] = int(getattr(final.prefix, f)[s, p])
        stats["prefix_lookups"] = np.asarray(final.prefix.lookups[s, p])
    clock = float(np.max(final.clock[s, p]))
    if final.fleet is not None:  # off and cold replicas' clocks are not the run's (autoscale.py)
        stats.update(fleet_state(final.fleet, s, p))
        clock = float(final.fleet.t_last[s, p])
    clock_s = clock if math.isfinite(clock) else float("nan")
    if final.timeline is not None:
        out["timeline"] = np.asarray(final.timeline.samples[s, p])
    return ScenarioResult(stats=stats, clock_s=clock_s, **out)
