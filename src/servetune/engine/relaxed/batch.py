"""An iteration's schedule as relaxed decisions (engine.relax st or soft): the token weights,
admission perturbations, token debts and prefill gains the relaxed engine carries beside the
exact schedule (engine/scheduler.py computes the exact one and calls this), for pathwise
gradients (tuning/estimators/pathwise_gradient.py)."""

from __future__ import annotations

import jax.numpy as jnp
from flax import struct

from servetune.core import ops, relax
from servetune.core.types import EngineConfig, Entries
from servetune.engine.relaxed import swap
from servetune.engine.speculation import draft_tokens, relaxed_draft_tokens


class RelaxedBatch(struct.PyTreeNode):
    """A relaxed engine's part of an iteration's batch (engine.relax st or soft, core/relax.py),
    per entry in scheduling order."""

    weight: jnp.ndarray  # [A] f64 tokens with their decisions' relaxed weights (equal to the
    #                      batch's tokens in value under st)
    admit_z: jnp.ndarray  # [A] f64 admission weight minus the exact admission
    admitted: jnp.ndarray  # [A] bool waiting entries admitted this iteration
    debt: jnp.ndarray  # [A] f64 each entry's token debt after the iteration
    gain: jnp.ndarray  # [A] f64 prompt tokens a relaxed budget computes for the entry beyond
    #                    the exact ones (0 in value under st)
    swap_req: jnp.ndarray | None = None  # [A, m] i32 with a relaxed order: requests each
    #                                      admission passed over (-1 none; relaxed/swap.py)
    swap_p: jnp.ndarray | None = None  # [A, m] f64 their pair perturbations
    victim_of: jnp.ndarray | None = None  # [A] i32 with a relaxed order: for the first request
    #                                       preempted, the last one kept (-1 elsewhere)
    victim_p: jnp.ndarray | None = None  # [A] f64 that pair's perturbation


def relaxed_batch(
    es: Entries, tokens, run, adm, budget, rank, n_running, pol, cfg: EngineConfig, scores=None
) -> RelaxedBatch:
    """The iteration's token counts as relaxed decisions (engine.relax st or soft).

    `budget` is the relaxed token budget (scheduler.token_budget(..., relaxed=True):
    `relax.relaxed_limit` of max_num_batched_tokens), so the running requests' shares and the
    admitted chunks are piecewise linear in it; an admission weighs in through `relax.weight`
    of its two tunable gates: the sequence cap (margin in requests) and the KV watermark
    (margin in blocks, measured in the request's own first-chunk blocks), among the eligible
    waiting requests (candidates within the slot capacity: the exact gates that are not
    tunable hold). `run` and `adm` are the exact schedule's two phases (scheduler: the running
    requests' need, decoding and keep; the admissions' need_w, candidate, want, kv_margin and
    admit), `rank` [A] each waiting entry's place in the queue, `n_running` the requests kept
    running. Which requests
    are preempted stays exact; with `scores` (engine.relax_order) the pairs each admission
    passes over, and the pair at the preemption boundary, are recorded for order swaps
    (engine/relaxed/swap.py). `tokens` [A]: the exact token counts. With speculation a decoding
    request verifies 1 + k positions with k relaxed (`speculation.relaxed_draft_tokens`);
    those positions are not owed back (a longer draft is more work, not work moved). Returns
    the RelaxedBatch (its gain: the prompt tokens the relaxed budget adds to a request's
    progress, engine/relaxed/pace.py)."""
    assert es.relaxed is not None  # the mechanism is on (a static switch)
    mode, tau = cfg.relax, cfg.relax_temperature
    need, decoding, keep = run.need, run.decoding, run.keep
    need_w, want, kv_margin, admit = adm.need_w, adm.want, adm.kv_margin, adm.admit
    eligible = adm.candidate & (rank < cfg.max_slots - n_running)
    # A prefilling request that computed tokens ahead of the exact path (its debt) needs that
    # many fewer: it repays them where its remaining prompt runs out (its last chunk), and
    # the budget it leaves goes to the requests after it (the queue drains faster). While
    # the budget binds its chunk stays the whole budget share: a bigger budget adds work to
    # every such iteration (longer iterations: the decodes' cost), given back only where
    # the budget stops binding. Its progress (`gain`, engine/relaxed/pace.py) counts its whole need.
    prefilling = keep & ~decoding
    need_left = jnp.where(prefilling, jnp.maximum(need - es.relaxed.debt, 0.0), need)
    taken_before = ops.exclusive_cumsum(jnp.where(keep, need_left, 0.0))
    alloc = jnp.where(keep, jnp.clip(budget - taken_before, 0, need), 0.0)
    alloc_left = jnp.where(keep, jnp.clip(budget - taken_before, 0, need_left), 0.0)
    budget_left = budget - jnp.sum(alloc_left)
    if cfg.chunked_prefill:
        chunk = jnp.clip(budget_left - ops.exclusive_cumsum(need_w), 0, need_w)
    else:
        chunk = jnp.where(ops.cumsum(need_w) <= budget_left, need_w, 0.0)
    seq_margin = (
        relax.relaxed_limit(jnp.minimum(pol.max_num_seqs, pol.max_num_active_seqs), mode)
        - n_running
        - rank
    )
    w = relax.weight(
        admit,
        eligible,
        (seq_margin, kv_margin),
        (1.0, jnp.maximum(want, 1).astype(jnp.float64)),
        mode,
        tau,
    )
    # of a waiting request, only the mass not yet admitted early (1 - wait_z) is still to
    # admit: a fluid request is admitted at most once in all (0 in value under st)
    w = admit + (1.0 - es.relaxed.wait_z) * relax.perturbation(w, admit)
    relaxed = jnp.where(prefilling, alloc_left, alloc) + w * chunk
    # Work is conserved: tokens a perturbation computes early (or late) are owed back, so a
    # perturbation moves the times within a busy period, not forever after. A prefilling
    # request repays through its smaller remaining need (above); any other request (a
    # decode, a re-admitted one) settles its debt at its next iteration that computes.
    paid = jnp.where((tokens > 0) & ~prefilling, es.relaxed.debt, 0.0)
    gain = jnp.where(prefilling, alloc, jnp.where(admit, chunk, 0.0)) - jnp.where(
        prefilling | admit, tokens, 0
    )
    drafts: jnp.ndarray | float = 0.0
    if cfg.speculation:  # decodes granted their whole ask verify 1 + k positions
        k, k_rel = draft_tokens(pol), relaxed_draft_tokens(pol, mode)
        room_len = jnp.maximum(cfg.max_model_len - es.computed, 1)
        full = decoding & keep & (tokens > 0) & (tokens == need)
        drafts = jnp.where(
            full, jnp.minimum(1.0 + k_rel, room_len) - jnp.minimum(1 + k, room_len), 0.0
        )
    out = {
        "weight": relaxed - paid + drafts,
        "admit_z": relax.perturbation(w, admit),
        "admitted": admit,
        "debt": es.relaxed.debt - paid + (relaxed - tokens),
        "gain": gain,
    }
    if scores is not None:  # the relaxed order: the admission and preemption boundaries' pairs
        out["swap_req"], out["swap_p"] = swap.partners(
            es, admit, scores, mode, tau, cfg.queue_window
        )
        out["victim_of"], out["victim_p"] = swap.victim_pair(es, keep, scores, mode, tau)
    return RelaxedBatch(**out)
