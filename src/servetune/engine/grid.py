"""The engine over a grid of scenarios, state [S, P] for workloads [S] x policies [P]: one loop
(`run_chunk_grid`) that steps every scenario still active, and its loop body (`iterate_grid`:
the grid's first iteration, simple or full, then `conclude_grid`). Results are those of
vmapping the one-scenario loop (engine/loop.py) and step (engine/step.py,
engine/simple_step.py); what differs is what runs: a vmapped `cond` would run both sides, so
the grid chooses once for all its scenarios, sorts only those whose order can matter, and
writes outbox records only for the active ones."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from servetune.core import ops
from servetune.core.types import EngineConfig, Params, SimState, Workload
from servetune.engine import width
from servetune.engine.outbox import capacity as outbox_capacity
from servetune.engine.outbox import record_fields
from servetune.engine.phases import Iteration
from servetune.engine.simple_step import applies, counted, lean, plan, simple_iteration
from servetune.engine.step import arrive, conclude, in_scheduling_order, scheduled_iteration


def iteration_grid(
    state: SimState, wl: Workload, params: Params, cfg: EngineConfig, active
) -> Iteration:
    """`iteration` over state [S, P], workloads [S], params [P] (scenarios where `active`
    [S, P] is False step too; the caller discards their result).

    Vmapping `step` would sort every scenario in every iteration (its lax.cond becomes a
    select that runs both sides). Here only the scenarios whose order can matter are sorted:
    they are gathered into a block of at most ceil(S x P / 8) rows (all rows when more need
    it; none when none does), sorted and written back.
    """
    arrived = ops.over_grid(lambda s, w, p: arrive(s, w, p, cfg, None), "gsp")(state, wl, params)
    n_s, n_p = arrived.sort.shape
    n = n_s * n_p
    flat = lambda x: x.reshape((n,) + x.shape[2:])
    e, t = jax.tree.map(flat, arrived.e), flat(arrived.t)
    pol = jax.tree.map(lambda x: flat(jnp.broadcast_to(x, (n_s,) + x.shape)), params.policy)
    need = flat(arrived.sort & active)
    permute = jax.vmap(in_scheduling_order(cfg))
    block = -(-n // 8)

    def some():
        rows = jnp.nonzero(need, size=block, fill_value=n)[0]
        take = lambda x: x[jnp.minimum(rows, n - 1)]
        out = permute(jax.tree.map(take, e), take(t), jax.tree.map(take, pol))
        return jax.tree.map(lambda x, y: x.at[rows].set(y, mode="drop"), e, out)

    def every():
        out = permute(e, t, pol)
        return jax.tree.map(
            lambda x, y: jnp.where(need.reshape((n,) + (1,) * (x.ndim - 1)), y, x), e, out
        )

    count = jnp.sum(need, dtype=jnp.int32)
    which = jnp.where(count == 0, 0, jnp.where(count <= block, 1, 2))
    e = jax.lax.switch(which, (lambda: e, some, every))
    e = jax.tree.map(lambda x: x.reshape((n_s, n_p) + x.shape[1:]), e)
    proceed = lambda s, w, p, arrived, e: scheduled_iteration(s, w, p, cfg, arrived, e)
    return ops.over_grid(proceed, "gspgg")(state, wl, params, arrived, e)


def conclude_grid(
    state: SimState, wl: Workload, params: Params, cfg: EngineConfig, it: Iteration
) -> SimState:
    """`conclude` over state [S, P], workloads [S], params [P] and iterations [S, P]."""
    finish = lambda s, w, p, it: conclude(s, w, p, cfg, it, None)
    return ops.over_grid(finish, "gspg")(state, wl, params, it)


def iterate_grid(state: SimState, wl: Workload, params: Params, cfg: EngineConfig, active):
    """`iterate` over state [S, P], workloads [S], params [P] (scenarios where `active`
    [S, P] is False step too; the caller discards their result): the simple first iteration
    for every scenario when every active one qualifies, else the full one for every one."""
    if applies(cfg):
        pl = ops.over_grid(lambda s, w, p: plan(s, w, p, cfg, None), "gsp")(state, wl, params)
        simple = ops.over_grid(lambda s, w, p, q: simple_iteration(s, w, p, cfg, q), "gspg")
        all_simple = jnp.all(pl.ok | ~active)
        it = jax.lax.cond(
            all_simple,
            lambda: simple(state, wl, params, pl),
            lambda: lean(iteration_grid(state, wl, params, cfg, active)),
        )
        return counted(conclude_grid(state, wl, params, cfg, it), all_simple)
    return conclude_grid(state, wl, params, cfg, iteration_grid(state, wl, params, cfg, active))


def run_chunk_grid(state: SimState, wl: Workload, params: Params, cfg: EngineConfig) -> SimState:
    """run_chunk over state [S, P], workloads [S], params [P]: one loop that steps every
    scenario still active (same iterations, same results as vmapping run_chunk).

    Vmapping a while_loop makes every iteration select each carry leaf between old and new for
    every scenario, the whole outbox included ([R] records x 7 fields, though an iteration
    writes at most drain_per_step of them). Here each iteration's step drains into a scratch
    outbox of drain_per_step records, which are then written at the fill mark only for the
    scenarios that are active (a slice read and write, not a select over [R]).
    """
    cap = outbox_capacity(cfg)
    per = cfg.drain_per_step
    box0 = state.outbox.replace(count=state.outbox.count * 0)
    state = state.replace(outbox=box0)
    rec_fields = record_fields(box0)
    scratch = box0.replace(**{f: getattr(box0, f)[:, :, :per] for f in rec_fields})

    fits = ops.over_grid(lambda s, w: width.fits(s, w, cfg), "gs")

    def active(s, k):
        return (
            (~s.done) & (s.outbox.count + per <= cap) & (k < cfg.max_steps_per_chunk) & fits(s, wl)
        )

    def write(old, rec, at, on):  # one scenario: records [per, ...] at the fill mark, if active
        start = (at,) + (jnp.zeros_like(at),) * (old.ndim - 1)
        cur = jax.lax.dynamic_slice(old, start, rec.shape)
        return jax.lax.dynamic_update_slice(old, jnp.where(on, rec, cur), start)

    write_all = jax.vmap(jax.vmap(write))

    def body(carry):  # `on` [S, P]: the scenarios this trip steps (active, computed once)
        s, k, on = carry
        new = iterate_grid(s.replace(outbox=scratch), wl, params, cfg, on)
        box, rec = s.outbox, new.outbox
        fields = {f: write_all(getattr(box, f), getattr(rec, f), box.count, on) for f in rec_fields}
        box = box.replace(**fields, count=box.count + jnp.where(on, rec.count, 0))
        rest = jax.tree.map(
            lambda a, b: jnp.where(on.reshape(on.shape + (1,) * (a.ndim - 2)), a, b),
            new.replace(outbox=None),
            s.replace(outbox=None),
        )
        s, k = rest.replace(outbox=box), k + on.astype(k.dtype)
        return s, k, active(s, k)

    def cond(carry):
        return jnp.any(carry[2])

    k0 = jnp.zeros_like(state.next_req)
    start = (state, k0, active(state, k0))
    if cfg.chunk_length:  # engine.chunk_length: inactive scenarios' bodies are discarded
        state, _, _ = jax.lax.fori_loop(0, cfg.chunk_length, lambda _, c: body(c), start)
    else:
        state, _, _ = jax.lax.while_loop(cond, body, start)
    return state.replace(
        need=ops.over_grid(lambda s, w: width.shortfall(s, w, cfg), "gs")(state, wl)
    )
