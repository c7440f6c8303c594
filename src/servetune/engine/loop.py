"""The device loop: a while_loop of iterations per compiled call (`run_chunk`), its state
(`init_state`), and their compiled entry points over workloads [S] x policies [P]
(`init_batch`, `run_chunk_batch`, whose loop is engine/grid.py). The host drives these chunks
in servetune/run/driver.py."""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp

from servetune.core import histogram, ops
from servetune.core.types import (
    EngineConfig,
    Params,
    SimState,
    Workload,
    empty_entries,
    zero_stats,
)
from servetune.engine import autoscale, cascade, timeline, width
from servetune.engine import prefix as prefix_lib
from servetune.engine.grid import run_chunk_grid
from servetune.engine.outbox import capacity as outbox_capacity
from servetune.engine.outbox import empty_outbox
from servetune.engine.relaxed import shift, swap
from servetune.engine.simple_step import iterate
from servetune.engine.step import step_or_stay


def init_state(wl: Workload, params: Params, cfg: EngineConfig) -> SimState:
    """The initial carry; every array derives from an input so sharded vmaps place it right."""
    zf = jnp.zeros_like(wl.t_stop, jnp.float64)
    zi = jnp.zeros_like(wl.n, jnp.int32)
    shape = (cfg.n_instances, cfg.n_entries)
    entries = empty_entries(
        shape,
        zi,
        prefix=prefix_lib.init_refs(shape, zi, cfg) if cfg.prefix_cache else None,
        relaxed=shift.init_tape(shape, zi) if cfg.relax != "hard" else None,
        swap=swap.init_tape(shape, zi) if cfg.relax_order else None,
        cascade=cascade.init_entries(shape, zi) if cfg.cascade_small_instances > 0 else None,
        priority=(
            jnp.zeros(shape, jnp.int32) + zi if cfg.scheduling_policy == "priority" else None
        ),
    )
    per_inst = jnp.zeros((cfg.n_instances,), jnp.int32) + zi
    stats = zero_stats(cfg.n_instances, histogram.BINS, zi)
    fleet = None
    clock = per_inst + zf
    if cfg.autoscale:  # replicas beyond min_replicas start off (engine/autoscale.py)
        assert params.fleet is not None
        fleet = autoscale.init(autoscale.whole(params.fleet), cfg, zf)
        clock = autoscale.initial_clock(fleet, clock)
    return SimState(
        clock=clock,
        entries=entries,
        next_req=zi,
        outbox=empty_outbox(
            outbox_capacity(cfg),
            zi,
            cfg.cascade_small_instances > 0,
            cfg.relax != "hard",
            cfg.relax_order,
        ),
        stats=stats,
        done=wl.n <= 0,
        mid_ended=per_inst,
        mid_blocks=per_inst,
        stuck=per_inst > 0,
        need=zi,
        prefix=prefix_lib.init_cache(cfg, zi) if cfg.prefix_cache else None,
        timeline=timeline.empty(cfg, zf) if cfg.timeline_samples > 0 else None,
        offered=per_inst + zf if cfg.async_scheduling else None,
        fleet=fleet,
    )


def run_chunk(state: SimState, wl: Workload, params: Params, cfg: EngineConfig) -> SimState:
    """Iterate one scenario until it is done, its outbox is nearly full, the chunk's step
    limit is reached, or (a narrow program) its next loop body could need more entries than the
    program holds (`SimState.need`, servetune/engine/width.py). The outbox starts empty (the host
    has collected it)."""
    cap = outbox_capacity(cfg)
    state = state.replace(outbox=state.outbox.replace(count=state.outbox.count * 0))

    def cond(carry):
        s, k = carry
        room = s.outbox.count + cfg.drain_per_step <= cap
        return (
            (~s.done)
            & room
            & (k < cfg.max_steps_per_chunk)
            & width.fits(s, wl, cfg, ops.SEARCH_WINDOW)
        )

    def body(carry):
        s, k = carry
        return iterate(s, wl, params, cfg), k + 1

    def fixed(_, carry):  # engine.chunk_length: a body that does nothing once inactive
        return jax.lax.cond(cond(carry), body, lambda c: c, carry)

    start = (state, jnp.zeros_like(state.next_req))
    if cfg.chunk_length:
        state, _ = jax.lax.fori_loop(0, cfg.chunk_length, fixed, start)
    else:
        state, _ = jax.lax.while_loop(cond, body, start)
    return state.replace(need=width.shortfall(state, wl, cfg, ops.SEARCH_WINDOW))


@functools.partial(
    jax.jit, static_argnames=("cfg", "n_steps"), compiler_options=ops.COMPILER_OPTIONS
)
def step_trace(wl: Workload, params: Params, cfg: EngineConfig, n_steps: int):
    """Run one scenario (unbatched wl and params) for `n_steps` iterations, recording each.

    For golden tests and debugging: returns (final state, info) with info["t"], info["dur"] of
    shape [n_steps], and info["req"], info["tokens"] of shape [n_steps, A] (the iterating
    instance's entries). The outbox is reset every step: use it for schedules, not results.
    The leap is off here, so every step is one iteration.
    """
    cfg = dataclasses.replace(cfg, leap_max=0, width=0)
    state = init_state(wl, params, cfg)

    def body(s, _):
        s, info = step_or_stay(s, wl, params, cfg)
        s = s.replace(outbox=s.outbox.replace(count=s.outbox.count * 0))
        return s, info

    return jax.lax.scan(body, state, None, length=n_steps)


def batched(fn, cfg):
    """fn over state [S, P], workloads [S], params [P]. A 1 x 1 batch runs unbatched: under vmap
    the loop's data-dependent branches (lax.cond) turn into selects that run both sides.
    run_chunk runs as run_chunk_grid."""
    if fn is run_chunk:
        outer = functools.partial(run_chunk_grid, cfg=cfg)
    else:
        outer = ops.over_grid(functools.partial(fn, cfg=cfg), "gsp")

    def call(state, wl, params):
        if state.done.shape == (1, 1):
            out = fn(
                jax.tree.map(lambda x: x[0, 0], state),
                jax.tree.map(lambda x: x[0], wl),
                jax.tree.map(lambda x: x[0], params),
                cfg=cfg,
            )
            return jax.tree.map(lambda x: x[None, None], out)
        return outer(state, wl, params)

    return call


def init_grid(wl: Workload, params: Params, cfg: EngineConfig) -> SimState:
    """init_state for workloads [S] x params [P] -> state [S, P]."""
    return ops.over_grid(functools.partial(init_state, cfg=cfg), "sp")(wl, params)


init_batch = jax.jit(init_grid, static_argnames=("cfg",), compiler_options=ops.COMPILER_OPTIONS)


@functools.partial(
    jax.jit, static_argnames=("cfg",), donate_argnums=(0,), compiler_options=ops.COMPILER_OPTIONS
)
def run_chunk_batch(state: SimState, wl: Workload, params: Params, cfg: EngineConfig) -> SimState:
    """run_chunk over state [S, P], workloads [S], params [P] in one compiled call."""
    return batched(run_chunk, cfg)(state, wl, params)


@functools.partial(jax.jit, static_argnames=("cfg",), compiler_options=ops.COMPILER_OPTIONS)
def widen_batch(state: SimState, wl: Workload, params: Params, cfg: EngineConfig) -> SimState:
    """State [S, P] with each instance's entries padded to `cfg`'s (wider) width
    (servetune/engine/width.py): the entries keep their places, the new ones are empty, everything
    else is unchanged and `need` is cleared."""
    fresh = init_grid(wl, params, cfg)
    held = state.entries.req.shape[3]  # entries leaves are [S, P, I, A, ...]
    entries = jax.tree.map(
        lambda new, old: new.at[:, :, :, :held].set(old), fresh.entries, state.entries
    )
    return state.replace(entries=entries, need=jnp.zeros_like(state.need))
