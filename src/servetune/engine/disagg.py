"""Prefill/decode disaggregation (DistServe, Splitwise).

With engine.prefill_instances = P, instances 0..P-1 only prefill: arrivals are routed to them,
and a request whose prompt is done emits its first token there and becomes HANDOFF. At the
prefill instance's next iteration boundary (the end of the one that prefilled it), each
HANDOFF request moves to the decode instance (P..I-1) with the lowest KV use that has a free
entry and room for the request's KV blocks: the blocks are reserved there at once, so they are
free when the transfer lands, and the request's KV leaves the prefill instance. Its KV takes
link_latency_s + tokens x kv_bytes_per_token / link_bytes_per_s (the prefill instance's cost
params) to arrive; until then it is INFLIGHT and the decode instance does not schedule it. If
no decode instance has room, the request waits on the prefill instance, holding its blocks
(back-pressure). TTFT is the prefill instance's; the transfer delays the second token, so it
counts in TPOT, as in a real deployment.

Causality: the handoff happens when the prefill instance has the earliest clock, so every
decode instance is at or past the send time, and it schedules the request only at an
iteration boundary at or after the landing time.
"""

from __future__ import annotations

import jax.numpy as jnp

from servetune.core.types import EMPTY, HANDOFF, INFLIGHT, RUNNING, WAITING, EngineConfig, Entries
from servetune.engine import transfer
from servetune.engine.kv import blocks_for


def is_prefill(i, cfg: EngineConfig):
    """Whether instance i (traced) is a prefill instance."""
    return i < cfg.prefill_instances


def to_handoff(e: Entries, i, cfg: EngineConfig):
    """On a prefill instance, requests that have their first token (and did not complete)
    stop running there and wait for a decode instance."""
    done_prefill = (e.status == RUNNING) & (e.generated > 0) & is_prefill(i, cfg)
    return e.replace(status=jnp.where(done_prefill, HANDOFF, e.status))


def land(e: Entries, t):
    """INFLIGHT requests whose KV has arrived by t (seconds) run from this iteration on."""
    return e.replace(
        status=jnp.where((e.status == INFLIGHT) & (e.ready_at <= t), RUNNING, e.status)
    )


def handoff_horizon(entries: Entries, clock, cfg: EngineConfig):
    """[] the earliest time (seconds) a prefill instance with work can hand a request off: its
    clock (its next iteration boundary). The handoff reads the decode instances' state (KV use)
    as it is then, so the leap on a decode instance stops before it, as single stepping
    would (a decode instance iterates only while its clock is the earliest). inf when no
    prefill instance has work (a new arrival is bounded by the next arrival time). `entries`
    [I, A], `clock` [I]."""
    s = entries.status[: cfg.prefill_instances]
    busy = jnp.any((s == WAITING) | (s == RUNNING) | (s == HANDOFF), axis=1)
    return jnp.min(jnp.where(busy, clock[: cfg.prefill_instances], jnp.inf))


def hand_off(entries: Entries, i, t, cost, cfg: EngineConfig):
    """Move instance i's HANDOFF requests (i a prefill instance, its clock t) to decode
    instances, as many as fit (engine/transfer.py). `cost`: CostParams with leaves [] or
    [I]. Returns entries [I, A]."""
    n_inst = cfg.n_instances
    per = lambda x: jnp.broadcast_to(x, (n_inst,))
    kv_total = per(cost.kv_blocks).astype(jnp.int32)
    decode = jnp.arange(n_inst) >= cfg.prefill_instances
    link_bw = per(cost.link_bytes_per_s)[i]
    link_lat = per(cost.link_latency_s)[i]
    kv_bytes = per(cost.kv_bytes_per_token)[i]

    def pending(entries):
        return (entries.status[i] == HANDOFF) & is_prefill(i, cfg)

    def destination(entries, k):  # the decode instance with the lowest KV use that has room
        need = blocks_for(entries.computed[i, k], cfg)
        used = jnp.sum(entries.blocks, axis=1)
        room = jnp.any(entries.status == EMPTY, axis=1)
        return jnp.where(decode & room & (kv_total - used >= need), used / kv_total, jnp.inf)

    def arrival_fields(entries, k):  # its blocks reserved at once; its KV lands after the link
        tokens = entries.computed[i, k]
        return {
            "ready_at": t + link_lat + tokens * kv_bytes / link_bw,
            "blocks": blocks_for(tokens, cfg),
        }

    return transfer.move_out(entries, i, pending, destination, arrival_fields)
