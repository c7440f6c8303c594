"""A step's statistics: what the scenario's Stats (core/types.py) gain from one step of one
instance, read from the step's phase records (engine/phases.py): tokens, busy seconds, KV peaks,
the invariants' flags, occupancy (request-seconds in the system) and the model's work."""

from __future__ import annotations

import jax.numpy as jnp

from servetune.core import errors, histogram, ops
from servetune.core.types import EngineConfig, SimState, Stats, Workload
from servetune.engine.phases import Boundary, Leapt, StepRecord


def breach(code, *checks):
    """[] i32 the error code `code` with the bit of each (invariant, broken []) in `checks` set
    where it is broken (core/errors.py: KV_OVERFLOW, CLOCK_REGRESS, STALLED)."""
    for bit, broken in checks:
        code = code | jnp.where(broken, bit, 0).astype(code.dtype)
    return code


def occupancy_s(wl: Workload, t, t_next, n_arrived, ended_by_t, search_window=ops.SEARCH_WINDOW):
    """Integral over [t, t_next) of the requests in the system (arrived, not ended), in
    request-seconds: those present at t for the whole interval, plus each arrival inside it
    from its arrival time on. Requests end only at iteration boundaries."""
    k2 = jnp.minimum(ops.count_at_most(wl.arrival, t_next, n_arrived, search_window), wl.n)
    csum = lambda k: jnp.where(k > 0, wl.arrival_cumsum[jnp.maximum(k - 1, 0)], 0.0)
    inside = (k2 - n_arrived) * t_next - (csum(k2) - csum(n_arrived))
    return (n_arrived - ended_by_t) * (t_next - t) + inside


def model_work(totals, boundary: Boundary, leapt: Leapt):
    """[4] the step's model work (types.WORK_COLUMNS): the iteration's (none if it computed
    no token) and the leap's."""
    prefill, decode, ctx_read, attn_work = totals
    computed = prefill + decode > 0
    f = lambda x: jnp.asarray(x, jnp.float64)
    return jnp.stack(
        [
            f(computed) + leapt.n_leap,
            f(prefill + decode) + leapt.tokens + leapt.prefill_tokens,
            f(ctx_read) + leapt.ctx_read,
            f(attn_work) + leapt.attn_work,
        ]
    )


def account(
    state: SimState,
    wl: Workload,
    record: StepRecord,
    kv_blocks,
    search_window,
    i,
    cfg: EngineConfig,
) -> Stats:
    """The scenario's statistics (Stats) after instance i's step `record`; `kv_blocks`: the
    instance's KV capacity (blocks); `search_window`: ops.count_at_most's (None: the whole
    trace)."""
    arrived, batch, totals, _, advanced = record.iteration
    boundary, leapt = record.boundary, record.leapt
    st, t, t_next = state.stats, boundary.t, boundary.t_next
    ended_by_t = (
        st.ended + arrived.n_rejected + arrived.n_abandoned + jnp.sum(batch.ended, dtype=jnp.int32)
    )
    if cfg.n_instances == 1:  # requests completed by the first iteration leave at t_next
        occupancy = (
            occupancy_s(wl, t, leapt.t_end, arrived.n_arrived, ended_by_t, search_window)
            - jnp.sum(advanced.completed) * (leapt.t_end - t_next)
            - leapt.early_s
        )
    else:  # instances' iterations overlap in time: the host integrates it (metrics.py)
        occupancy = 0.0
    stats = st.replace(
        steps=st.steps + boundary.busy.astype(jnp.int32) + leapt.n_leap,
        leaped=st.leaped + leapt.n_leap,
        busy_s=st.busy_s.at[i].add(boundary.dur + leapt.busy_s),
        kv_peak_blocks=st.kv_peak_blocks.at[i].max(leapt.kv_used),
        invariants=breach(
            st.invariants,
            (errors.KV_OVERFLOW, leapt.kv_used > kv_blocks),
            (errors.CLOCK_REGRESS, (t_next < t) | (leapt.t_end < t_next)),
            (errors.STALLED, boundary.stalled),
        ),
        preemptions=st.preemptions + jnp.sum(batch.preempted, dtype=jnp.int32),
        prefill_tokens=(
            st.prefill_tokens
            + jnp.sum(jnp.where(batch.decode, 0, batch.tokens))
            + leapt.prefill_tokens
        ),
        decode_tokens=(
            st.decode_tokens + jnp.sum(jnp.where(batch.decode, batch.tokens, 0)) + leapt.tokens
        ),
        window_overflow=jnp.maximum(st.window_overflow, arrived.outside),
        max_running=st.max_running.at[i].max(jnp.maximum(advanced.n_running, leapt.max_running)),
        occupancy_s=st.occupancy_s + occupancy,
        ended=ended_by_t + leapt.n_completed,
        slot_bound=st.slot_bound + batch.slot_bound.astype(jnp.int32),
        itl_hist=histogram.add(st.itl_hist, *leapt.gaps),
        work=(
            st.work + model_work(totals, boundary, leapt)
            if cfg.n_instances == 1
            else st.work.at[i].add(model_work(totals, boundary, leapt))
        ),
    )
    if cfg.speculation:
        drafted = batch.decode & (batch.tokens > 1)
        assert advanced.generated0 is not None  # the full iteration's (no simple step here)
        assert batch.accepted is not None  # on: speculation
        emitted = jnp.where(drafted, advanced.e.generated - advanced.generated0, 0)
        stats = stats.replace(
            spec_passes=st.spec_passes + jnp.sum(drafted),
            spec_proposed=st.spec_proposed + jnp.sum(jnp.where(drafted, batch.tokens - 1, 0)),
            spec_accepted=st.spec_accepted + jnp.sum(jnp.where(drafted, batch.accepted, 0)),
            spec_emitted=st.spec_emitted + jnp.sum(emitted),
        )
    return stats
