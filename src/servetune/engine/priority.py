"""vLLM 0.32's priority scheduling policy (`--scheduling-policy priority`): which running
requests get their tokens, and which are preempted, when KV blocks run out.

Each request carries a fixed priority from the trace (lower runs first). The waiting queue is
one heap by (priority, arrival), preempted requests included (`order.scheduling_order`). The
running requests are scheduled in order of admission, as under FCFS, but when a request's new
blocks do not fit, the victim is the running request with the largest (priority, arrival),
ties to the earliest admitted, wherever it stands: one scheduled earlier in the iteration gives
back its tokens and blocks, and a request that picks itself ends the scan of the running list
(vllm/v1/core/sched/scheduler.py, `Scheduler.schedule`); from vLLM 0.33 the scan goes on past
it (`engine.vllm_version`), so running requests after it still get their tokens. That is
sequential, so it is a
`lax.while_loop` over the running list, entered only in iterations where some running request's
blocks do not fit (its trip count is 0 otherwise, also under vmap).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from servetune.core.types import EngineConfig, Entries
from servetune.engine.kv import blocks_for


def _victim(alive, priority, arrival):
    """Index [] of vLLM's victim among the `alive` [A] running requests: the largest priority
    value, then the latest arrival, then the earliest in the running list (Python's max)."""
    worst = jnp.max(jnp.where(alive, priority, jnp.iinfo(jnp.int32).min))
    tied = alive & (priority == worst)
    latest = jnp.max(jnp.where(tied, arrival, -jnp.inf))
    return jnp.argmax(tied & (arrival == latest))


def schedule_running(es: Entries, running, need, granted, grow, budget, free, cfg: EngineConfig):
    """The running requests' part of an iteration under the priority policy.

    `es` [A] in scheduling order (running first, in admission order); `running` [A] bool;
    `need` [A] tokens each running request asks for (already cut at the long-prefill
    threshold); `granted`, `grow` [A]: the tokens the budget grants each in that order and the
    new blocks they take, which stand when all of them fit; `budget` [] the iteration's token
    budget; `free` [] free KV blocks.
    Returns (kept [A] bool: still running, tokens [A] i32 granted, grow [A] i32 new blocks of
    each kept request)."""
    n = es.req.shape[0]
    pos = jnp.arange(n)
    goes_on = cfg.vllm_version != "0.32"  # past a request that preempts itself (vLLM 0.33)
    end = jnp.max(jnp.where(running, pos, -1)) + 1  # past the last running entry
    contended = jnp.sum(grow) > free  # else every grant stands and nobody is preempted

    def cond(c):
        i, _, _, _, left, _, cur, stop = c
        return contended & ~stop & (i < end) & ((cur >= 0) | (left > 0))

    def body(c):
        i, alive, tokens, new, left, room, cur, _ = c
        # a request's ask is fixed when the scan reaches it (refunds do not enlarge it)
        ask = jnp.where(cur >= 0, cur, jnp.minimum(need[i], left)).astype(jnp.int32)
        skip = ~alive[i] | (ask <= 0)
        g = jnp.maximum(blocks_for(es.computed[i] + ask, cfg) - es.blocks[i], 0)
        grant = ~skip & (g <= room)
        evict = ~skip & ~grant
        v = _victim(alive, es.priority, es.arrival)
        at_i, at_v = pos == i, (pos == v) & evict
        room = room + jnp.where(evict, es.blocks[v] + new[v], 0) - jnp.where(grant, g, 0)
        left = left + jnp.where(evict, tokens[v], 0) - jnp.where(grant, ask, 0)
        tokens = jnp.where(grant & at_i, ask, jnp.where(at_v, 0, tokens))
        new = jnp.where(grant & at_i, g, jnp.where(at_v, 0, new))
        itself = evict & (v == i)
        moved = (skip | grant | itself) if goes_on else (skip | grant)
        return (
            i + moved.astype(i.dtype),
            alive & ~at_v,
            tokens,
            new,
            left,
            room,
            jnp.where(moved, -1, ask),
            jnp.zeros_like(itself) if goes_on else itself,
        )

    zero = jnp.zeros_like(granted, jnp.int32)
    init = (
        jnp.zeros_like(end),
        running,
        zero,
        zero,
        jnp.asarray(budget, jnp.float64),
        jnp.asarray(free, jnp.float64),
        jnp.asarray(-1, jnp.int32),
        jnp.asarray(False),
    )
    _, alive, tokens, new, _, _, _, _ = jax.lax.while_loop(cond, body, init)
    return (
        jnp.where(contended, alive, running),
        jnp.where(contended, tokens, granted).astype(jnp.int32),
        jnp.where(contended, new, grow).astype(jnp.int32),
    )
