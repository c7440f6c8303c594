"""A sampled per-iteration timeline (output.timeline): what each instance looked like, a few
thousand times over the run, at a fixed cost per step and none when it is off.

Time is cut into engine.timeline_samples periods of Workload.timeline_dt seconds, which span
the run (the arrivals and the drain limit); each step writes one sample, TIMELINE_COLUMNS, into the
period its start falls in, so each period keeps the latest step of each instance that started
in it. A run of uniform decodes applied in closed form (engine/leap.py) is one step: its
periods keep the sample of the step that began it. Periods no step started in hold NaN.
"""

from __future__ import annotations

import jax.numpy as jnp

from servetune.core.types import RUNNING, TIMELINE_COLUMNS, WAITING, EngineConfig, Timeline


def empty(cfg: EngineConfig, like) -> Timeline:
    """A timeline of cfg.timeline_samples periods with no sample; `like`: any traced float
    scalar (keeps carries sharded)."""
    shape = (cfg.timeline_samples, cfg.n_instances, len(TIMELINE_COLUMNS))
    return Timeline(samples=jnp.full(shape, jnp.nan, jnp.float64) + like)


def record(tl: Timeline, dt, t, i, e, batch_tokens, kv_blocks, preemptions) -> Timeline:
    """`tl` with instance i's step that started at t (seconds) sampled into its period of `dt`
    seconds: t, then after the step the requests waiting and running in entries `e`, the
    iteration's tokens `batch_tokens` [A], KV blocks in use and preemptions so far."""
    periods = tl.samples.shape[0]
    slot = jnp.clip(jnp.floor(t / dt), 0, periods - 1).astype(jnp.int32)
    row = jnp.stack(
        [
            jnp.asarray(t, jnp.float64),
            jnp.sum(e.status == WAITING).astype(jnp.float64),
            jnp.sum(e.status == RUNNING).astype(jnp.float64),
            jnp.sum(batch_tokens).astype(jnp.float64),
            jnp.asarray(kv_blocks, jnp.float64),
            jnp.asarray(preemptions, jnp.float64),
        ]
    )
    return tl.replace(samples=tl.samples.at[slot, i].set(row))
