"""Entry width: each instance's active set sized to the live requests, widened when they need
more (the static-capacity, overflow-flag, reallocate pattern of jax-md's neighbour list).

Every kernel of a loop body works over all A entries of an instance, so an iteration costs
what its width costs, not what its live requests need (benchmarks/README.md: one body 131 us
at 512 entries, 54 us at 128, same results). A run therefore starts narrow,
`EngineConfig.width` = engine.start_width entries, and before each loop body checks that the
body cannot need more entries than that (`need`: entries held plus the arrivals it takes in,
plus, with several instances, the requests it may move between them). If it could, the
scenario stops before that body with `SimState.need` set; the host (servetune/run/driver.py)
pads its entries with empty ones to the next width up (`wider`, then loop.widen_batch) and
goes on from there: nothing is redone.

Results do not depend on the width: where an entry sits never changes what the engine does
(the scheduler works in `order.scheduling_order`, ties broken by request id; sums over
entries are of whole token counts), and a narrow program never runs a body that lacked an
entry. At the full width (engine.max_slots + engine.queue_window, `width` 0) the configured
capacity applies as it always has: arrivals beyond it wait outside the window, counted as
queue_window_overflow.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp

from servetune.core.types import EMPTY, HANDOFF, RETRY, EngineConfig, SimState, Workload
from servetune.engine.arrivals import pending_arrivals
from servetune.engine.step import next_instance

WIDTH_STEP = 2  # each widening at least doubles the width...
HEADROOM = 2  # ...and leaves room for twice the entries needed (every width compiles anew)


def is_narrow(cfg: EngineConfig) -> bool:
    """Whether `cfg` runs fewer entries per instance than its configured capacity (static)."""
    return cfg.n_entries < cfg.full_width


def need(state: SimState, wl: Workload, cfg: EngineConfig, search_window=None):
    """[] i32 entries one instance may need in the next loop body: the most any instance holds
    (running, waiting or finished and not yet drained), plus the arrivals the body takes in,
    plus, with several instances, every request in transit between them (a hand-off or a
    retry may land anywhere). One scenario (unbatched state)."""
    held = jnp.max(jnp.sum(state.entries.status != EMPTY, axis=1, dtype=jnp.int32))
    t = state.clock[next_instance(state, cfg)]
    total = held + pending_arrivals(state.next_req, t, wl, cfg, search_window)
    if cfg.n_instances > 1:
        status = state.entries.status
        total = total + jnp.sum((status == HANDOFF) | (status == RETRY), dtype=jnp.int32)
    return total


def fits(state: SimState, wl: Workload, cfg: EngineConfig, search_window=None):
    """[] bool the next loop body cannot need more entries than `cfg` holds (always, at the
    full width: what does not fit there waits outside, as configured)."""
    if not is_narrow(cfg):
        return jnp.ones_like(state.done)
    return need(state, wl, cfg, search_window) <= cfg.n_entries


def shortfall(state: SimState, wl: Workload, cfg: EngineConfig, search_window=None):
    """[] i32 what `SimState.need` holds after a chunk: the entries the next body may need
    where that is more than a narrow program holds and the scenario is not done, else 0."""
    if not is_narrow(cfg):
        return jnp.zeros_like(state.need)
    n = need(state, wl, cfg, search_window)
    return jnp.where(~state.done & (n > cfg.n_entries), n, 0)


def start(cfg: EngineConfig, start_width: int | None) -> EngineConfig:
    """`cfg` starting at `start_width` entries per instance (None or at least the full width:
    the full width, no widening)."""
    if start_width is None or start_width >= cfg.full_width:
        return dataclasses.replace(cfg, width=0)
    return dataclasses.replace(cfg, width=int(start_width))


def wider(cfg: EngineConfig, needed: int) -> EngineConfig:
    """The next width up for a run that needs `needed` entries per instance: the current width
    times a power of WIDTH_STEP, at least once and until it holds HEADROOM times the need (the
    full width at most)."""
    width = cfg.n_entries * WIDTH_STEP
    while width < HEADROOM * needed:
        width *= WIDTH_STEP
    return start(cfg, width)
