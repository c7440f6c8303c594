"""Async scheduling (vLLM's `--async-scheduling`, `AsyncScheduler` in vLLM 0.32).

vLLM's engine core keeps two batches in flight (`EngineCore.step_with_batch_queue`): it
schedules step k+1 as soon as step k is handed to the model runner, so the CPU's scheduling
hides behind the GPU's step, and processes step k's output only after that. The scheduler
(`AsyncScheduler`) counts the output token still being sampled as a placeholder, so a decoding
request is scheduled again without waiting for it. What this changes in the schedule, against
the synchronous scheduler (each case read in vLLM 0.32's `scheduler.py` and `core.py`, and held
to vLLM's own run by the golden cases `async_*`):

- step k+1 is planned at step k's start: it sees the requests that arrived by then, not those
  arriving while step k runs (they wait one step more);
- a request that produces its last token in step k is not scheduled in step k+1 (the scheduler
  knows max_tokens), but it is still running while step k+1 is planned: it holds its KV blocks
  and its place among max_num_seqs, and can be chosen as a preemption victim; it leaves, and
  its blocks return to the free queue, when step k's output is processed, after that plan.

Servetune's iteration at clock t = end of step k plans step k+1 (as vLLM did at step k's start):
arrivals are offered up to `SimState.offered` (step k's start), the requests that completed in
step k are held through the schedule (their tokens, first-token and finish times are those of
step k, as vLLM reports them) and retired after it (`release_held`).

Supported with one instance, preemption under KV pressure, no speculation, no abandonment and
the hard engine (config/scenario.py refuses the rest); the leap and the simple step are off
with it (each iteration is stepped).
"""

from __future__ import annotations

import jax.numpy as jnp

from servetune.core.types import DONE, RUNNING, WAITING, EngineConfig, Entries
from servetune.engine import prefix as prefix_lib


def held(e: Entries):
    """[A] bool requests that produced their last token in the step before and are still
    running (or were preempted while held): vLLM's finished requests whose output it has not
    processed yet."""
    live = (e.status == RUNNING) | (e.status == WAITING)
    return live & (e.generated >= e.output) & (e.output > 0)


def offer_time(offered, i, t, cfg: EngineConfig):
    """[] seconds up to which arrivals are offered to instance i's iteration at clock t: the
    start of the step before under async scheduling (`SimState.offered`), t otherwise."""
    if not cfg.async_scheduling:
        return t
    assert offered is not None  # on: async_scheduling
    return offered[i]


def next_offered(offered, i, busy, t, t_next, cfg: EngineConfig):
    """`SimState.offered` after instance i's iteration at clock t: its start t when it ran a
    step (the next step is planned while this one runs), else the next clock t_next (nothing in
    flight: the next plan sees everything by then). None when async scheduling is off."""
    if not cfg.async_scheduling:
        return offered
    return offered.at[i].set(jnp.where(busy, t, t_next))


def release_held(e: Entries, pc, t, cfg: EngineConfig):
    """After the schedule: the held requests (`held`) end. Their finish time and end state were
    set when they completed; they now leave the running set and free their KV blocks (with
    prefix caching their full blocks stay cached, as for any completion). Returns (entries,
    prefix cache or None, [] bool whether any left)."""
    which = held(e)
    if cfg.prefix_cache:
        e, pc = prefix_lib.release_completed(e, pc, which & (e.status == RUNNING), t, cfg)
    e = e.replace(status=jnp.where(which, DONE, e.status), blocks=jnp.where(which, 0, e.blocks))
    return e, pc, jnp.any(which)
