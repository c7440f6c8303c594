"""The records one step of an instance passes from phase to phase (engine/step.py): arrivals,
the schedule, the advance, the iteration they make, its boundary, and the leap of uniform
decode iterations after it (engine/leap.py). The step's statistics (engine/statistics.py)
read them."""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp

from servetune.core.types import Entries, PrefixCache
from servetune.engine.scheduler import Batch


class Arrived(NamedTuple):
    """The first phase of an iteration: its start time `t` (seconds), the instance's entries
    after arrivals, and whether the priority order can matter (`sort`)."""

    t: jnp.ndarray
    e: Entries | None  # [A] after arrivals; None once scheduled (conclude does not read it)
    next_req: jnp.ndarray
    outside: jnp.ndarray
    n_arrived: jnp.ndarray
    n_rejected: jnp.ndarray
    sort: jnp.ndarray
    n_abandoned: jnp.ndarray
    entries_all: Entries | None = None  # [I, A] every instance's entries after routing (I > 1)
    t_plan: jnp.ndarray | None = None  # [] when the step is planned (seconds; async scheduling)


class Scheduled(NamedTuple):
    """The schedule phase's result: entries after it, the batch, the instance's prefix cache
    (None without prefix caching) and the KV blocks in use the scheduler saw."""

    e: Entries
    batch: Batch
    pc: PrefixCache | None
    kv_used: jnp.ndarray


class Advanced(NamedTuple):
    """The advance phase's result: entries after the iteration, the inter-token gaps it made
    (values [A], weights), which requests completed [A], how many of those left for another
    pool instead (a cascade's failed small answers, engine/pools.py), whether prefix-cache
    insertions are still due, and what the accounting needs from before the iteration: the
    batch's request ids [A], tokens generated [A] and running requests."""

    e: Entries
    gaps: jnp.ndarray  # [A] f64 the inter-token gaps the iteration made (seconds)
    completed: jnp.ndarray
    n_withdrawn: jnp.ndarray  # [] i32 completions that left for another pool (not completed)
    pc: PrefixCache | None
    kv_used: jnp.ndarray
    insertions_due: jnp.ndarray
    batch_req: jnp.ndarray | None  # None from the simple step, whose conclude does not read it
    generated0: jnp.ndarray | None
    n_running: jnp.ndarray
    released: jnp.ndarray | bool = False  # [] requests held from the step before left (async)


class Iteration(NamedTuple):
    """What the first iteration of a step did: its arrivals phase, the `batch` it computed with
    the batch's `totals` (step.batch_totals) and its `dur` (seconds), and the advance phase. The
    full step and the simple one (engine/simple_step.py) both produce it; `step.conclude`
    finishes the step from it."""

    arrived: Arrived
    batch: Batch
    totals: tuple
    dur: jnp.ndarray
    advanced: Advanced


class Boundary(NamedTuple):
    """When the iteration ran: start `t` and duration `dur` (seconds), the next boundary
    `t_next` (its end, or when an idle instance wakes), whether it did work (`busy`) and
    whether the instance is stuck idle with waiting work (`stalled`)."""

    t: jnp.ndarray
    dur: jnp.ndarray
    t_next: jnp.ndarray
    busy: jnp.ndarray
    stalled: jnp.ndarray


class Leapt(NamedTuple):
    """The leap phase's result: entries and cache after the run of uniform decode iterations,
    its end time (the iteration's boundary when there is none), iterations K, their summed
    seconds, decode tokens, completions and the gap increments of the whole step."""

    e: Entries
    pc: PrefixCache | None
    t_end: jnp.ndarray
    n_leap: jnp.ndarray
    busy_s: jnp.ndarray | float
    tokens: jnp.ndarray
    n_completed: jnp.ndarray
    kv_used: jnp.ndarray
    gaps: tuple  # (values, weights) of the inter-token gaps
    ctx_read: jnp.ndarray | float  # context tokens the run's iterations read, summed
    early_s: jnp.ndarray | float  # request-seconds the run's completions left before t_end
    taken: jnp.ndarray  # arrivals the run took in (0 or 1)
    prefill_tokens: jnp.ndarray  # prompt tokens the run computed (a taken arrival's)
    attn_work: jnp.ndarray | float  # attention work of the run's iterations
    max_running: jnp.ndarray  # most requests running in one of the run's iterations


class StepRecord(NamedTuple):
    """Everything a step did, for its statistics and its commit: the first `iteration`, its
    `boundary` and the `leapt` run of uniform decode iterations after it."""

    iteration: Iteration
    boundary: Boundary
    leapt: Leapt
