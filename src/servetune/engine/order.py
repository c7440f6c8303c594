"""The order the scheduler serves requests in: groups (running, preempted, waiting), vLLM's own
order under FCFS, otherwise the policy's priority score (the linear w_* score, plus the neural
score's network where the policy has one)."""

from __future__ import annotations

import jax.numpy as jnp

from servetune.core.types import RUNNING, WAITING, Entries, PolicyParams
from servetune.engine.neural import neural_score


def priority_score(e: Entries, t, pol: PolicyParams):
    """Priority of each entry at time t (higher is served first), shape [A].

    w_age x seconds since arrival - w_prompt x prompt ktokens - w_pred x predicted output ktokens
    - w_slack x seconds of TTFT slack left (requests that already have a first token have none).
    """
    age = t - e.arrival
    slack = jnp.where(e.generated > 0, 0.0, pol.ttft_target_s - age)
    score = (
        pol.w_age * age
        - pol.w_prompt * e.prompt / 1000.0
        - pol.w_pred * e.predicted / 1000.0
        - pol.w_slack * slack
    )
    return jnp.where(jnp.isfinite(score), score, 0.0)


def priority(e: Entries, t, pol: PolicyParams):
    """[A] the score the scheduling order sorts by (higher first): `priority_score`, plus the
    neural score's network where the policy has one."""
    score = priority_score(e, t, pol)
    if pol.score_net is not None:  # order neural: a structural (static) switch
        score = neural_score(e, t, pol, score)
    return score


def scheduling_group(e: Entries, by_priority: bool = False):
    """[A] the order's groups, first to last: running (0), preempted waiting requests (1: vLLM
    puts them back at the head of the queue), other waiting ones (2), empty or finished (3).
    `by_priority` (vLLM's priority policy): every waiting request is in group 1 (one heap)."""
    queued = 1 if by_priority else jnp.where(e.preempted, 1, 2)
    return jnp.where(e.status == RUNNING, 0, jnp.where(e.status == WAITING, queued, 3))


def is_fcfs(pol: PolicyParams):
    """[] whether the priority score orders by arrival alone (vLLM's fcfs policy): only w_age
    set, and no neural score."""
    if pol.score_net is not None:
        return jnp.asarray(False)
    return (pol.w_age > 0) & (pol.w_prompt == 0) & (pol.w_pred == 0) & (pol.w_slack == 0)


def scheduling_order(e: Entries, t, pol: PolicyParams, by_priority: bool = False):
    """Permutation [A] of the entries: by `scheduling_group`; within the running and preempted
    groups under FCFS, vLLM's own order (`Entries.qkey`: admission order; the front of the
    queue), otherwise by priority; ties go to the earlier request in trace order.

    `by_priority` (engine.scheduling_policy priority, static): running requests in admission
    order, every waiting one by (its fixed priority, arrival), as vLLM's priority heap."""
    group = scheduling_group(e, by_priority)
    if by_priority:
        assert e.priority is not None  # on: engine.scheduling_policy priority
        running = group == 0
        key = jnp.where(running, e.qkey, e.priority)
        return jnp.lexsort((e.req, jnp.where(running, 0.0, e.arrival), key, group))
    vllm_order = is_fcfs(pol) & (group <= 1)
    key = jnp.where(vllm_order, e.qkey.astype(jnp.float64), -priority(e, t, pol))
    return jnp.lexsort((e.req, key, group))
