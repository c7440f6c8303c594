"""Order swaps: how a relaxed priority order moves requests' events (engine.relax_order).

The priority weights decide *who* fills the admission slots that the sequence cap, the token
budget and the KV watermark open, not how many open. Where an iteration admits request i and
leaves request j waiting, the exact order put i before j; the relaxed order puts j first with
weight p_ji = sigma((s_j - s_i) / (tau x unit)) (scores s, `unit` the score gap of one rank:
the waiting scores' range over their count), through `relax.weight`: 0 in value with that
derivative under st, the weight itself under soft. Swapping two requests in the order
exchanges their slots: j would have been admitted at i's admission time t_i and i at j's, t_j.
To first order each pair therefore moves

    j's events by  p_ji (t_i - t_j)    and    i's events by  p_ji (t_j - t_i)    (seconds),

first token and completion alike. Each pair is counted at the one iteration where it
straddles the admission boundary, so a request that waits long does not pile up
perturbations. t_j is known only once j is admitted, later: each admitted request records
its SWAP_PARTNERS waiting partners of largest weight (the pairs closest in score, which carry
almost all of it) and the shifts are settled after the run (`settle`).

The preemption victim is the same kind of decision: where an iteration keeps running request
i and preempts j, the next after it in the order (the first preempted), the relaxed order puts
j first with weight p_ji (the unit now the running scores' range over their count), and
i would have been preempted at that iteration's start t_p and resumed at j's re-admission
t_j, while j went on running. To first order the pair moves

    j's events by  -p_ji (t_j - t_p)    and    i's events by  p_ji (t_j - t_p)    (seconds),

the events after t_p: the completion, and the first token only where it had none yet. The
pair is recorded on the victim j (its latest preemption) and settled with its next
admission, after the run.

Approximations: slots are exchanged as if the two requests needed the same budget and
blocks (and, at a preemption, the same recompute); a request admitted or preempted several
times keeps the pairs of its latest admission and its latest preemption; the budget shares
among running requests stay exact.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from servetune.core import relax
from servetune.core.types import RUNNING, SWAP_PARTNERS, WAITING, Entries, SwapTape
from servetune.engine.outbox import RECORDS

# The tape (types.SwapTape) and its values before an admission: the latest admission time
# (s), that admission's partners (request ids) and pair perturbations, and the latest
# preemption's time, the request it kept in the victim's place and their pair's perturbation.
# They leave with the request's record: their unset values and widths are the record table's.
_RECORDS = tuple(f for f in RECORDS if f.only == "swap")
SWAP_FIELDS = tuple(f.name for f in _RECORDS)


def init_tape(shape, like) -> SwapTape:
    """The tape for entries of `shape` ([I, A]), nobody admitted yet, the pair tables
    [..., m]; `like` a traced int."""

    def full(f):
        width = () if f.width is None else (f.width,)
        return jnp.full((*shape, *width), f.unset, f.dtype) + jnp.zeros_like(like, f.dtype)

    return SwapTape(**{f.name: full(f) for f in _RECORDS})


def reset_tape(tape: SwapTape | None, take) -> SwapTape:
    """`tape` (present: a relaxed order) with the entries where `take` [A] holds (new
    arrivals) as nobody admitted."""
    assert tape is not None

    def reset(f):
        x = getattr(tape, f.name)
        return jnp.where(take.reshape(take.shape + (1,) * (x.ndim - 1)), f.unset, x)

    return SwapTape(**{f.name: reset(f) for f in _RECORDS})


def rank_gap(scores, among):
    """[] the score gap of one rank among the entries where `among` [A] holds: their scores'
    range over their count less one (1 where they do not differ); the unit of pair weights."""
    lo = jnp.min(jnp.where(among, scores, jnp.inf))
    hi = jnp.max(jnp.where(among, scores, -jnp.inf))
    return jnp.where(hi > lo, (hi - lo) / jnp.maximum(jnp.sum(among) - 1, 1), 1.0)


def partners(es: Entries, admit, scores, mode: str, tau: float, window: int):
    """For entries in scheduling order (running first, then the waiting ones): the
    SWAP_PARTNERS requests each admitted entry (`admit` [A]) passed over, of largest pair
    weight, in the same group (preempted requests stay ahead of the others: not tunable).
    `scores` [A]: the priority scores the order came from. Returns (request ids [A, m], -1
    where none; pair perturbations p_ji [A, m]). Computed on the `window` entries after the
    running ones ([W, W] pairs)."""
    start = jnp.sum(es.status == RUNNING)
    cut = lambda x: jax.lax.dynamic_slice_in_dim(x, start, window)
    waiting, admitted = cut(es.status == WAITING), cut(admit)
    preempted, s, req = cut(es.preempted), cut(scores), cut(es.req)
    left = waiting & ~admitted
    unit = rank_gap(s, waiting)
    pair = admitted[:, None] & left[None, :] & (preempted[:, None] == preempted[None, :])
    gap = s[None, :] - s[:, None]  # [W, W] (i admitted, j left): s_j - s_i
    p = relax.weight(jnp.zeros_like(pair), pair, (gap,), (unit,), mode, tau)
    closeness = jnp.where(pair, jax.lax.stop_gradient(-jnp.abs(gap)), -jnp.inf)
    picks = []  # the m closest by repeated argmax (XLA's top_k is slow on CPU in this loop)
    for _ in range(SWAP_PARTNERS):
        k = jnp.argmax(closeness, axis=1)
        picks.append((k, jnp.take_along_axis(closeness, k[:, None], axis=1)[:, 0]))
        closeness = jnp.where(jnp.arange(window)[None, :] == k[:, None], -jnp.inf, closeness)
    idx = jnp.stack([k for k, _ in picks], axis=1)  # [W, m]
    chosen = jnp.isfinite(jnp.stack([v for _, v in picks], axis=1))
    ids = jnp.where(chosen, req[idx], -1)
    p_top = jnp.where(chosen, jnp.take_along_axis(p, idx, axis=1), 0.0)
    n = es.req.shape[0]
    place = lambda x, fill: jax.lax.dynamic_update_slice_in_dim(
        jnp.full((n, SWAP_PARTNERS), fill, x.dtype), x, start, axis=0
    )
    return place(ids, -1), place(p_top, 0.0)


def victim_pair(es: Entries, keep, scores, mode: str, tau: float):
    """For entries in scheduling order (running first, by priority) where the schedule keeps
    the prefix `keep` [A] of the running ones and preempts the rest: on the first preempted
    entry j, the request id of the last kept one i and their pair perturbation p_ji (the
    module doc; `scores` [A] the priority scores the order came from). Returns (request ids
    [A], -1 elsewhere; perturbations [A], 0 elsewhere)."""
    running = es.status == RUNNING
    m = jnp.sum(keep, dtype=jnp.int32)  # kept: entries 0..m-1; entry m the first preempted
    n = es.req.shape[0]
    i, j = jnp.maximum(m - 1, 0), jnp.minimum(m, n - 1)
    valid = (m >= 1) & (m < n) & running[j] & ~keep[j]
    p = relax.weight(
        jnp.zeros((), bool),
        valid,
        (scores[j] - scores[i],),
        (rank_gap(scores, running),),
        mode,
        tau,
    )
    at_j = (jnp.arange(n) == j) & valid
    return jnp.where(at_j, es.req[i], -1), jnp.where(at_j, p, 0.0)


def record_victims(e: Entries, victim_of, victim_p, t):
    """Entries with the preemption time t (seconds) and pair of the entry where `victim_of`
    [A] names a kept request recorded."""
    hit, tape = victim_of >= 0, e.swap
    assert tape is not None  # the mechanism is on (a static switch)
    return e.replace(
        swap=tape.replace(
            preempted_at=jnp.where(hit, t, tape.preempted_at),
            victim_of=jnp.where(hit, victim_of, tape.victim_of),
            victim_p=jnp.where(hit, victim_p, tape.victim_p),
        )
    )


def record(e: Entries, admitted, swap_req, swap_p, t):
    """Entries with the admission time t (seconds) and partners of each `admitted` [A]
    entry recorded."""
    a, tape = admitted[:, None], e.swap
    assert tape is not None  # the mechanism is on (a static switch)
    return e.replace(
        swap=tape.replace(
            admitted_at=jnp.where(admitted, t, tape.admitted_at),
            swap_req=jnp.where(a, swap_req, tape.swap_req),
            swap_p=jnp.where(a, swap_p, tape.swap_p),
        )
    )


def settle_victims(first, admitted_at, preempted_at, victim_of, victim_p):
    """Seconds each request's (first token [N], completion [N]) move by from the preemption
    pairs (module doc): a victim j re-admitted at t_j (its latest admission, admitted_at [N])
    after its latest preemption at t_p (preempted_at [N], nan if none) with the pair kept
    request victim_of [N] (-1 none) and perturbation victim_p [N] moves by -p (t_j - t_p),
    the kept request by p (t_j - t_p); a first token moves only if it came after t_p (first
    [N]: the first-token times, seconds)."""
    n = admitted_at.shape[0]
    valid = (victim_of >= 0) & (admitted_at > preempted_at)  # (nan compares False)
    t_p = jnp.where(valid, preempted_at, 0.0)
    delay = jnp.where(valid, victim_p * (jnp.where(valid, admitted_at, 0.0) - t_p), 0.0)
    kept = jnp.where(valid, victim_of, n)
    d_finish = -delay + jnp.zeros(n, delay.dtype).at[kept].add(delay, mode="drop")
    kept_first_after = first[jnp.clip(kept, 0, n - 1)] > t_p
    d_first = jnp.where(first > t_p, -delay, 0.0) + jnp.zeros(n, delay.dtype).at[
        jnp.where(kept_first_after, kept, n)
    ].add(delay, mode="drop")
    return d_first, d_finish


def settle(admitted_at, swap_req, swap_p):
    """[N] seconds each request's events move by, from every request's latest admission time
    admitted_at [N] (nan if never admitted) and the pairs recorded on it (swap_req, swap_p
    [N, m]): sum over its pairs as the admitted one, p (t_j - t_i), and as the waiting one,
    p (t_i - t_j). Pairs with a request never admitted are dropped."""
    n = admitted_at.shape[0]
    t_j = admitted_at[jnp.clip(swap_req, 0, n - 1)]
    valid = (swap_req >= 0) & jnp.isfinite(t_j) & jnp.isfinite(admitted_at)[:, None]
    move = jnp.where(
        valid,
        swap_p * (jnp.where(valid, t_j, 0.0) - jnp.where(valid, admitted_at[:, None], 0.0)),
        0.0,
    )
    as_admitted = jnp.sum(move, axis=1)
    as_waiting = jnp.zeros(n, move.dtype).at[jnp.where(valid, swap_req, n)].add(-move, mode="drop")
    return as_admitted + as_waiting
