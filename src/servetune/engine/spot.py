"""Spot replicas: cheaper, and preempted at a rate (engine/autoscale.py calls this).

Which replicas are spot is fixed by their listing position and params.fleet.spot_share s:
replica i is spot where floor((i + 1) s) > floor(i s), so the share is spread evenly over the
listing and the first k replicas (those the autoscaler provisions first) hold about k s spot
ones (s = 0.5: every second replica; s = 1: all). The host prices a spot replica's
provisioned time at fleet.spot_price_ratio of the on-demand price (run/fleet_metrics.py).

At every evaluation (time T, every interval_s seconds) each spot replica that serves (warm)
is preempted with probability 1 - exp(-rate x interval_s / 3600), rate being
params.fleet.spot_preemptions_per_hour: a Poisson process of preemptions per spot replica,
seen at the evaluations' times. The draw is a fixed function of the replica, the evaluation's
period (T / interval_s) and the scenario's seed, so every policy of a scenario meets the same
preemptions where it has the same replicas up. A preempted replica leaves at its clock (the end
of its iteration in progress at T); its requests are re-queued (engine/requeue.py) and the
Deployment's replacement starts at once in its place: cold for cold_start_s, then serving
(the autoscaler's replica count does not change; Kubernetes' ReplicaSet replaces a lost pod
without the HPA). Not modelled: preemption of a replica still cold-starting, and the cloud's
advance notice (two minutes on AWS, 30 s on GCP) that a graceful drain could use.
"""

from __future__ import annotations

import jax.numpy as jnp

from servetune.core.types import EngineConfig, Entries, Fleet, FleetParams
from servetune.engine import requeue, speculation

_SALT_MIX = 0x5B07  # separates these draws from the per-token draws of the same seed


def is_spot(n: int, share):
    """[I] bool: the replicas that are spot among n, for a spot share in [0, 1]."""
    i = jnp.arange(n, dtype=jnp.float64)
    return jnp.floor((i + 1.0) * share + 1e-9) > jnp.floor(i * share + 1e-9)


def preemption_probability(fp: FleetParams):
    """[] the chance a serving spot replica is preempted between two evaluations."""
    return 1.0 - jnp.exp(-fp.spot_preemptions_per_hour * fp.interval_s / 3600.0)


def preempted(fleet: Fleet, warm, t, fp: FleetParams, salt):
    """[I] bool: the spot replicas among `warm` ([I] bool: serving, not cold) preempted at
    the evaluation at time t (seconds; its period's index and the scenario's `salt` fix the
    draw)."""
    n = warm.shape[0]
    period = jnp.round(t / fp.interval_s)
    u = speculation.uniform(jnp.arange(n), period, salt ^ _SALT_MIX)
    return warm & fleet.spot & (u < preemption_probability(fp))


def preempt(fleet: Fleet, clock, entries: Entries, hit, takes, t, fp: FleetParams):
    """(fleet, clock [I], entries [I, A]) after the replicas in `hit` [I] bool were preempted
    at the evaluation at time t (seconds): their requests re-queued to the replicas in `takes`
    [I] bool (the rest restart where they were), each restarted cold from its clock (seconds;
    cold from t in the log and in Fleet.cold_s)."""
    entries, moved = requeue.move_live(entries, clock, hit, takes)
    entries, stayed = requeue.restart_in_place(entries, clock, hit)
    ready = jnp.where(hit, clock + fp.cold_start_s, fleet.ready_at)
    n_hit = jnp.sum(hit, dtype=jnp.int32)
    fleet = fleet.replace(
        ready_at=ready,
        cold_s=fleet.cold_s + jnp.sum(jnp.where(hit, ready - t, 0.0)),
        preemptions=fleet.preemptions + n_hit,
        requeued=fleet.requeued + moved + stayed,
    )
    return fleet, jnp.where(hit, ready, clock), entries


def enabled(cfg: EngineConfig) -> bool:
    """Whether some replicas can be spot (static)."""
    return cfg.autoscale and cfg.autoscale_spot
