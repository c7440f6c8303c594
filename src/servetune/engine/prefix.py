"""Automatic prefix caching (vLLM's APC), at the granularity of the trace's prefix block ids.

Model. A prompt is cut into prefix blocks of T = engine.prefix_block_tokens tokens (Mooncake's
`hash_ids`: one id per 512-token block, equal ids meaning equal prefixes up to and including
that block, so an id stands for vLLM's chained block hash). One prefix block holds
B = T / block_size KV blocks. Only full blocks are cached (vLLM hashes full blocks only).

- Cache table: C = engine.prefix_cache_entries slots per instance, set-associative
  (WAYS slots per set, the set chosen by a hash of the id). A slot holds a block id, the number
  of running requests referencing it (`ref`), the time it was last released (`last`) and its
  position in its prompt (`depth`).
- Admission: a waiting request looks up its blocks; the leading run found is its hit, capped so
  that at least one token is computed (vLLM caps the hit at num_tokens - 1 = prompt + output so
  far - 1 tokens, in whole blocks: here whole prefix blocks, so a prompt of exactly k x T tokens
  found whole recomputes its last T tokens where vLLM recomputes its last block_size tokens).
  Hit tokens count as computed at admission (not prefilled, no token budget); the blocks are
  referenced (ref += 1); a hit on an unreferenced block takes it out of the free pool, counted
  before the next admission is checked. As in vLLM, which caches a block when it allocates it,
  the lookup also finds blocks being computed in this iteration: by the running requests'
  chunks and by the requests admitted before it (`settle`).
- Insertion: when a running request has computed a full prompt block, the block enters the
  cache (or, when another request inserted it first, the request references that copy and
  frees its own: a dedup vLLM does not do) at the end of that iteration. At most MAX_INSERTS
  blocks per iteration (the rest in the next iterations, counted in `insert_deferred`); a block
  whose set is full of referenced blocks is not cached (counted in `insert_failed`). A new block
  takes an empty slot of its set or else the set's least recently used unreferenced block (an
  eviction). Blocks past the prompt's full blocks (its partial last block completed by output
  tokens, then output blocks) have ids only their request holds (`workload_ids`): they enter
  the cache when the request completes or is preempted, as vLLM keeps every full block it
  frees; re-admitted after a preemption, the request finds them again.
- Release: a request that completes or is preempted drops its references at that time (`last`);
  blocks nobody references stay cached and evictable, a request's deepest first (vLLM frees a
  request's blocks tail first), after every free block that was never cached (vLLM 0.32's
  BlockPool.free_blocks puts those at the front of its free queue).
- KV: every cached block counts once, whoever references it: blocks in use = sum over running
  requests of their private blocks (e.blocks, which counts all the request's blocks, minus
  B x prefix.n referenced ones) + B x cached blocks. The scheduler sees evictable blocks as free
  (as vLLM's free-block pool does); after it allocates, the least recently used evictable
  blocks (ties: deepest first, so a prefix outlives its extensions) are evicted until the
  blocks in use fit the KV capacity again, so `kv_peak_blocks <= kv_blocks` holds exactly.

Per iteration the work is O(A x Hp x WAYS) for the lookup (only when a request waits), O(A x Hp)
for reference updates (only when a request is admitted, completes or is preempted), O(C log C)
only in iterations that evict under KV pressure and O(MAX_INSERTS^2) for insertion (only when
a block is due); nothing scales with the trace.

Known differences from vLLM, beyond the granularity: two requests computing the same new block
at once end up sharing one copy (vLLM keeps both); a block being computed in an iteration is
found by later admissions only among the first MAX_INSERTS such blocks; a request ending with
more than MAX_INSERTS full blocks not yet cached leaves only the first MAX_INSERTS; requests
released at the same time are evicted in table order, where vLLM follows the order it freed
them in; when preempting, blocks referenced by several victims and nobody else are not counted
as freed (conservative: at most an extra preemption); conflicts in a full table set evict that
set's LRU block. With KV blocks of the trace's block size the golden cases prefix_cache,
prefix_cache_tight_kv and prefix_cache_conversation (tests/golden/) are compared with vLLM 0.32
iteration by iteration.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from servetune.core import ops
from servetune.core.errors import TraceError
from servetune.core.types import RUNNING, WAITING, EngineConfig, Entries, PrefixCache, PrefixRefs
from servetune.engine.kv import blocks_for

WAYS = 8  # slots per set of the cache table
MAX_INSERTS = 64  # blocks inserted into the cache per iteration at most


def blocks_per_prefix(cfg: EngineConfig) -> int:
    """B: KV blocks of one prefix block."""
    return cfg.prefix_block_tokens // cfg.block_size


def workload_ids(trace, prompt: np.ndarray, cfg: EngineConfig, n: int) -> np.ndarray:
    """[n, Hp] int32 prefix block ids for the device: the trace's `hash_ids` of full prompt
    blocks, then ids unique to the request for its later blocks (the prompt's partial last
    block and the output: their content is the request's own output, so only the request
    itself, re-admitted after a preemption, can find them), -1 in padding rows and for
    traces without block ids."""
    width = cfg.prefix_width
    out = np.full((n, width), -1, np.int32)
    ids = getattr(trace, "hash_ids", None)
    if ids is None:
        return out
    rows = len(prompt)
    out[:rows] = ids.dense(width)
    base = int(max(ids.ids.max(initial=-1), -1)) + 1
    if base + rows * width > np.iinfo(np.int32).max:
        raise TraceError(
            f"trace {getattr(trace, 'name', '?')!r}: {rows} requests x {width} "
            f"prefix blocks do not fit int32 block ids above its largest hash id "
            f"{base - 1}; use fewer requests or a larger "
            f"engine.prefix_block_tokens"
        )
    own = base + np.arange(rows, dtype=np.int64)[:, None] * width + np.arange(width)[None, :]
    full = (np.asarray(prompt) // cfg.prefix_block_tokens)[:, None]
    out[:rows] = np.where(np.arange(width)[None, :] < full, out[:rows], own)
    return out


def init_refs(shape, like, cfg: EngineConfig) -> PrefixRefs:
    """The entries' prefix sub-state, all empty, for entries of `shape` ([I, A])."""
    z = jnp.zeros(shape, jnp.int32) + jnp.zeros_like(like, jnp.int32)
    wide = jnp.zeros(shape + (cfg.prefix_width,), jnp.int32) - 1 + jnp.zeros_like(like, jnp.int32)
    return PrefixRefs(ids=wide, slot=wide, n=z, next=z)


def init_cache(cfg: EngineConfig, like) -> PrefixCache:
    """An empty cache table per instance; `like` is a traced int scalar (keeps carries sharded)."""
    shape = (cfg.n_instances, cfg.prefix_cache_entries)
    zi = jnp.zeros(shape, jnp.int32) + jnp.zeros_like(like, jnp.int32)
    zs = jnp.zeros_like(like, jnp.int32)
    return PrefixCache(
        ids=zi - 1,
        ref=zi,
        last=zi.astype(jnp.float64),
        depth=zi,
        lookups=jnp.zeros((2, 3), jnp.int64) + zs.astype(jnp.int64),
        evictions=zs,
        insert_failed=zs,
        insert_deferred=zs,
    )


def instance(cache: PrefixCache, i) -> PrefixCache:
    """Instance i's table (fields [C]) with the scenario's totals."""
    return cache.replace(**{f: getattr(cache, f)[i] for f in ("ids", "ref", "last", "depth")})


def store(cache: PrefixCache, pc: PrefixCache, cfg: EngineConfig, i) -> PrefixCache:
    """`cache` with instance i's table replaced by `pc`."""
    put = (
        (lambda all_, one: one[None])
        if cfg.n_instances == 1
        else (lambda all_, one: all_.at[i].set(one))
    )
    return pc.replace(
        **{f: put(getattr(cache, f), getattr(pc, f)) for f in ("ids", "ref", "last", "depth")}
    )


def arrive(e: Entries, take, idx, next_req, wl) -> PrefixRefs:
    """The prefix sub-state of entries after arrivals: the requests taken (`take` [A], trace indices
    `idx` [A] = next_req, next_req + 1, ...) get their block ids and no references. The rows
    come from one contiguous window of the trace (as arrivals.take_arrivals reads)."""
    ids = wl.prefix_ids
    n, a = ids.shape[0], take.shape[0]
    if n > a:
        start = jnp.minimum(next_req, n - a)
        rows = jax.lax.dynamic_slice(ids, (start, jnp.zeros_like(start)), (a, ids.shape[1]))
        rows = rows[jnp.clip(idx - start, 0, a - 1)]
    else:
        rows = ids[idx]
    t2 = take[:, None]
    r = e.prefix
    assert r is not None  # the mechanism is on (a static switch)
    return PrefixRefs(
        ids=jnp.where(t2, rows, r.ids),
        slot=jnp.where(t2, -1, r.slot),
        n=jnp.where(take, 0, r.n),
        next=jnp.where(take, 0, r.next),
    )


def _set_of(ids, n_sets: int):
    h = ids.astype(jnp.uint32) * jnp.uint32(2654435761)
    h = h ^ (h >> 16)
    return (h % jnp.uint32(n_sets)).astype(jnp.int32)


def lookup(table_ids, ids):
    """Slot holding each id ([...] int32), -1 where absent (or id < 0)."""
    n_sets = table_ids.shape[0] // WAYS
    first_way = _set_of(jnp.maximum(ids, 0), n_sets)[..., None] * WAYS
    ways = first_way + jnp.arange(WAYS, dtype=jnp.int32)
    match = (table_ids[ways] == ids[..., None]) & (ids[..., None] >= 0)
    return jnp.where(
        jnp.any(match, -1), jnp.sum(jnp.where(match, ways, 0), -1, dtype=jnp.int32), -1
    )


class Hits(NamedTuple):
    """What the scheduler needs from the cache, per entry in scheduling order."""

    waiting: jnp.ndarray  # [A] bool waiting before this iteration's schedule
    slots: jnp.ndarray  # [A, Hp] i32 cache slots of a waiting request's blocks (-1 absent)
    n_hit: jnp.ndarray  # [A] i32 prefix blocks a waiting request would reuse
    cached: jnp.ndarray  # [A] i32 their tokens (count as computed at admission)
    claim: jnp.ndarray  # [A] i32 KV blocks an admission takes from the evictable cache
    n_table: jnp.ndarray  # [A] i32 the leading hits found in the table (referenced at
    #                       admission; the rest are being computed this iteration: `settle`)
    evictable: jnp.ndarray  # [A, Hp] bool a waiting request's block is cached, unreferenced
    exclusive: jnp.ndarray  # [A] i32 KV blocks in the cache only this running request references
    shared: jnp.ndarray  # [A] i32 KV blocks of a running request that live in the cache
    kv_offset: jnp.ndarray  # [] i32 blocks in use beyond sum(e.blocks), counting evictable
    #                         cached blocks as free (<= 0: sharing saves)


def kv_offset(e: Entries, pc: PrefixCache, cfg: EngineConfig):
    """Referenced cached blocks minus the requests' referenced blocks, in KV blocks: the
    scheduler's blocks in use are sum(e.blocks) + this."""
    assert e.prefix is not None  # the mechanism is on (a static switch)
    b = blocks_per_prefix(cfg)
    return b * jnp.sum(pc.ref > 0, dtype=jnp.int32) - b * jnp.sum(
        jnp.where(e.status == RUNNING, e.prefix.n, 0), dtype=jnp.int32
    )


def hits(e: Entries, pc: PrefixCache, kv_total, cfg: EngineConfig) -> Hits:
    """Cache lookups for waiting requests and the KV view of running ones. The [A, Hp] work
    (gathers) runs only when needed: lookups when someone waits, the exclusive counts when
    the running requests' growth could exceed the free blocks (a preemption)."""
    assert e.prefix is not None  # the mechanism is on (a static switch)
    b, t_blk = blocks_per_prefix(cfg), cfg.prefix_block_tokens
    waiting = e.status == WAITING
    running = e.status == RUNNING

    def look():
        slots = lookup(pc.ids, jnp.where(waiting[:, None], e.prefix.ids, -1))
        evictable = (slots >= 0) & (pc.ref[jnp.maximum(slots, 0)] == 0)
        n_hit, _, claim = _leads(e, waiting, slots, slots >= 0, evictable, cfg)
        return slots, evictable, n_hit, claim

    def none():
        z = jnp.zeros_like(e.prefix.n)
        wide = e.prefix.ids.shape
        return jnp.full(wide, -1, jnp.int32), jnp.zeros(wide, bool), z, z

    slots, evictable, n_hit, claim = jax.lax.cond(jnp.any(waiting), look, none)
    offset = kv_offset(e, pc, cfg)
    shared = jnp.where(running, b * e.prefix.n, 0)
    grow = jnp.where(running, blocks_for(e.prompt + e.generated, cfg) - e.blocks, 0)
    tight = jnp.sum(grow) > kv_total - jnp.sum(e.blocks) - offset

    def exclusive():
        only = (e.prefix.slot >= 0) & (pc.ref[jnp.maximum(e.prefix.slot, 0)] == 1)
        return jnp.where(running, b * jnp.sum(only, axis=1, dtype=jnp.int32), 0)

    return Hits(
        waiting=waiting,
        slots=slots,
        n_hit=n_hit,
        cached=n_hit * t_blk,
        claim=claim,
        n_table=n_hit,
        evictable=evictable,
        exclusive=jax.lax.cond(tight, exclusive, lambda: jnp.zeros_like(shared)),
        shared=shared,
        kv_offset=offset,
    )


def _leads(e: Entries, waiting, slots, found, evictable, cfg: EngineConfig):
    """A waiting request's hit from `found` [A, Hp] (its blocks cached or being computed):
    (blocks reused [A]: the leading run found, capped so that at least one token of the
    sequence is computed (vLLM: num_tokens - 1, in whole blocks); of them, the leading ones in
    the table `slots` [A, Hp] [A]; KV blocks taken from the `evictable` [A, Hp] cache [A])."""
    assert e.prefix is not None  # the mechanism is on (a static switch)
    t_blk, width = cfg.prefix_block_tokens, e.prefix.ids.shape[1]
    cap = (e.prompt + e.generated - 1) // t_blk
    lead = jnp.sum(jnp.cumprod(found, axis=1), axis=1, dtype=jnp.int32)
    n_hit = jnp.where(waiting, jnp.minimum(lead, cap), 0).astype(jnp.int32)
    in_table = jnp.sum(jnp.cumprod(slots >= 0, axis=1), axis=1, dtype=jnp.int32)
    in_hit = jnp.arange(width)[None, :] < n_hit[:, None]
    free_hit = in_hit & evictable
    claim = blocks_per_prefix(cfg) * jnp.sum(free_hit, axis=1, dtype=jnp.int32)
    return n_hit, jnp.minimum(in_table, n_hit), claim


def _full_prompt_blocks(e: Entries, tokens, cfg: EngineConfig):
    """[A] full prompt blocks (the ones other requests may share) among the first `tokens` [A]
    of each request."""
    return jnp.minimum(jnp.minimum(tokens, e.prompt) // cfg.prefix_block_tokens, cfg.prefix_width)


_NOBODY = np.iinfo(np.int32).max  # rank (and id) of an unused pending row


def _pending(e: Entries, start, end, rank):
    """The prefix blocks being computed this iteration, as sorted rows (ids [K], ranks [K]):
    entry a computes its blocks start[a] <= j < end[a]; `rank` [A] orders who may reuse
    them (a request reuses a block pending from a lower rank). At most MAX_INSERTS rows, in
    entry order (the rest are not found until inserted); a block pending twice keeps its
    lowest rank first."""
    assert e.prefix is not None  # the mechanism is on (a static switch)
    a_n, width = e.req.shape[0], e.prefix.ids.shape[1]
    count = jnp.maximum(end - start, 0).astype(jnp.int32)
    csum = ops.cumsum(count, dtype=jnp.int32)
    k = jnp.arange(MAX_INSERTS, dtype=jnp.int32)
    a = jnp.minimum(jnp.searchsorted(csum, k, side="right"), a_n - 1).astype(jnp.int32)
    used = k < csum[-1]
    j = jnp.clip(start[a] + k - (csum[a] - count[a]), 0, width - 1)
    ids = jnp.where(used, e.prefix.ids[a, j], _NOBODY)
    ranks = jnp.where(used & (ids >= 0), rank[a], _NOBODY)
    order = jnp.lexsort((ranks, ids))
    return ids[order], ranks[order]


def settle(e: Entries, h: Hits, keep, alloc, rank, admission, cfg: EngineConfig):
    """The hits and admissions of one iteration as vLLM finds them: vLLM caches a block when
    it is scheduled, so a waiting request also reuses blocks the running requests (`keep` [A],
    taking `alloc` [A] tokens) compute in this iteration, and blocks the requests admitted
    before it in this iteration compute (`rank` [A]: queue rank of a waiting request).

    `admission(cached, claim)` is the scheduler's admission pass given the waiting requests'
    hit tokens and claimed blocks; it returns an object with `admit` [A] and `chunk` [A]. The
    pass is repeated until the hits no longer change (a request's hit depends only on the
    requests ranked before it, so this ends; usually after one pass). Returns (Hits,
    admission)."""
    t_blk = cfg.prefix_block_tokens
    full_of = lambda tokens: _full_prompt_blocks(e, tokens, cfg)
    running = e.status == RUNNING
    run_end = jnp.where(keep, full_of(e.computed + alloc), 0)

    def with_pending(before: Hits, admit, chunk) -> Hits:
        """`h` with the blocks computed this iteration found too: the running requests', and
        those of the requests `admit` [A] taking `chunk` [A] tokens after `before`'s hits."""
        assert e.prefix is not None  # the mechanism is on (a static switch)
        end = jnp.where(running, run_end, jnp.where(admit, full_of(before.cached + chunk), 0))
        start = jnp.where(running, e.prefix.next, before.n_hit)

        def look():
            ids, ranks = _pending(e, start, end, jnp.where(running, -1, rank))
            q = jnp.where(h.waiting[:, None], e.prefix.ids, -1)
            pos = jnp.minimum(jnp.searchsorted(ids, q, side="left"), MAX_INSERTS - 1)
            pending = (ids[pos] == q) & (q >= 0) & (ranks[pos] < rank[:, None])
            return _leads(e, h.waiting, h.slots, (h.slots >= 0) | pending, h.evictable, cfg)

        computing = jnp.any(h.waiting) & jnp.any(end > start)
        n_hit, n_table, claim = jax.lax.cond(computing, look, lambda: (h.n_hit, h.n_table, h.claim))
        return h._replace(n_hit=n_hit, cached=n_hit * t_blk, claim=claim, n_table=n_table)

    def step(carry):
        hits, _, _, passes = carry
        adm = admission(hits.cached, hits.claim)
        after = with_pending(hits, adm.admit, adm.chunk)
        return after, adm, jnp.any(after.n_hit != hits.n_hit), passes + 1

    nobody = jnp.zeros_like(h.waiting)
    first = with_pending(h, nobody, jnp.zeros_like(h.n_hit))
    blank = jax.tree.map(
        lambda x: jnp.zeros(x.shape, x.dtype), jax.eval_shape(admission, h.cached, h.claim)
    )
    limit = h.waiting.shape[0] + 1  # (the induction above bounds the passes by this)
    hits, adm, _, _ = jax.lax.while_loop(
        lambda c: c[2] & (c[3] < limit), step, (first, blank, jnp.asarray(True), jnp.asarray(0))
    )
    return hits, adm


def _release(pc: PrefixCache, slots, mask, t):
    """Drop the references `mask` [A, Hp] at `slots` [A, Hp], released at time t."""
    c = pc.ids.shape[0]
    idx = jnp.where(mask, slots, c)
    return pc.replace(
        ref=pc.ref.at[idx].add(-1, mode="drop"), last=pc.last.at[idx].set(t, mode="drop")
    )


def release(e: Entries, pc: PrefixCache, which, t):
    """Requests `which` [A] (completed or preempted) release their cached blocks at time t."""

    def do(e, pc):
        mask = which[:, None] & (e.prefix.slot >= 0)
        pc = _release(pc, e.prefix.slot, mask, t)
        r = e.prefix
        e = e.replace(
            prefix=r.replace(
                slot=jnp.where(which[:, None], -1, r.slot),
                n=jnp.where(which, 0, r.n),
                next=jnp.where(which, 0, r.next),
            )
        )
        return e, pc

    return jax.lax.cond(jnp.any(which), do, lambda e, pc: (e, pc), e, pc)


def _evict_lru(pc: PrefixCache, n):
    """Evict the n least recently released unreferenced blocks (ties: deepest first)."""
    c = pc.ids.shape[0]
    evictable = (pc.ids >= 0) & (pc.ref == 0)
    key = jnp.where(evictable, pc.last, jnp.inf)
    order = jnp.lexsort((-pc.depth, key))
    rank = jnp.zeros((c,), jnp.int32).at[order].set(jnp.arange(c, dtype=jnp.int32))
    out = evictable & (rank < n)
    return pc.replace(
        ids=jnp.where(out, -1, pc.ids), evictions=pc.evictions + jnp.sum(out, dtype=jnp.int32)
    )


def blocks_in_use(e: Entries, pc: PrefixCache, cfg: EngineConfig, blocks_sum=None):
    """KV blocks physically in use: the requests' private blocks plus every cached block.
    `blocks_sum`: sum(e.blocks) when it is known (e.g. a leap's peak)."""
    assert e.prefix is not None  # the mechanism is on (a static switch)
    b = blocks_per_prefix(cfg)
    total = jnp.sum(e.blocks, dtype=jnp.int32) if blocks_sum is None else blocks_sum
    return (
        total - b * jnp.sum(e.prefix.n, dtype=jnp.int32) + b * jnp.sum(pc.ids >= 0, dtype=jnp.int32)
    )


def make_room(e: Entries, pc: PrefixCache, kv_total, cfg: EngineConfig, blocks_sum=None):
    """Evict LRU blocks until the blocks in use fit `kv_total`; returns (cache, blocks in use).
    The scheduler counted evictable blocks as free, so evicting enough of them always fits."""
    b = blocks_per_prefix(cfg)
    used = blocks_in_use(e, pc, cfg, blocks_sum)
    n = jnp.maximum(used - kv_total + b - 1, 0) // b
    before = pc.evictions
    pc = jax.lax.cond(n > 0, _evict_lru, lambda pc, n: pc, pc, n)
    return pc, used - b * (pc.evictions - before)


def _full_blocks(computed, cfg: EngineConfig):
    """[A] the prefix blocks whose every token is computed (`computed` [A] tokens), prompt
    and output alike, up to the ids a request holds."""
    return jnp.minimum(computed // cfg.prefix_block_tokens, cfg.prefix_width)


def _keep_full_blocks(e: Entries, pc: PrefixCache, leaving, computed, t, cfg: EngineConfig):
    """Requests `leaving` [A] (preempted or completed) leave every full block they computed
    (`computed` [A] tokens: the prompt tail and output blocks too) in the cache, as vLLM 0.32
    keeps every full block it frees (BlockPool.free_blocks: cached and evictable in turn).
    Re-admitted after a preemption, a request finds them; a completed request's own blocks
    are found by nobody, but they hold their place in the eviction order as in vLLM. (A
    running request inserts only its shareable prompt blocks.) Returns (entries, cache)."""
    assert e.prefix is not None  # the mechanism is on (a static switch)
    full = _full_blocks(computed, cfg)
    due = leaving & (full > e.prefix.next)
    return jax.lax.cond(
        jnp.any(due), lambda e, pc: _insert(e, pc, due, full, t)[:2], lambda e, pc: (e, pc), e, pc
    )


def after_schedule(
    e: Entries, batch, h: Hits, pc: PrefixCache, t, kv_total, cfg: EngineConfig, computed_before
):
    """Admissions reference their hits; preempted requests release theirs (`computed_before`
    [A]: tokens computed before this iteration's preemptions); then LRU eviction makes room
    for what was allocated. Returns (entries, cache, KV blocks in use)."""
    admitted = h.waiting & (e.status == RUNNING)
    e, pc = _keep_full_blocks(e, pc, batch.preempted, computed_before, t, cfg)
    e, pc = release(e, pc, batch.preempted, t)
    # the leading table hits are referenced now; hits after them (blocks computed in this
    # iteration) are referenced when the iteration's blocks enter the cache (after_advance)
    in_hit = admitted[:, None] & (jnp.arange(h.slots.shape[1])[None, :] < h.n_table[:, None])
    c = pc.ids.shape[0]
    ref = jax.lax.cond(
        jnp.any(admitted & (h.n_hit > 0)),  # an [A, Hp] scatter: only if needed
        lambda: pc.ref.at[jnp.where(in_hit, h.slots, c)].add(1, mode="drop"),
        lambda: pc.ref,
    )
    pc = pc.replace(ref=ref, lookups=pc.lookups + lookup_counts(e, admitted, h.cached))
    r = e.prefix
    assert r is not None  # the mechanism is on (a static switch)
    e = e.replace(
        prefix=r.replace(
            slot=jnp.where(admitted[:, None], jnp.where(in_hit, h.slots, -1), r.slot),
            n=jnp.where(admitted, h.n_table, r.n),
            next=jnp.where(admitted, h.n_table, r.next),
        )
    )
    # until then such a block counts in two requests' blocks: once is in use
    twice = blocks_per_prefix(cfg) * jnp.sum(
        jnp.where(admitted, h.n_hit - h.n_table, 0), dtype=jnp.int32
    )
    pc, used = make_room(e, pc, kv_total, cfg, jnp.sum(e.blocks, dtype=jnp.int32) - twice)
    return e, pc, used


def lookup_counts(e: Entries, admitted, cached):
    """[2, 3] i64 this iteration's prefix-cache lookups as vLLM 0.32's PrefixCacheStats records
    them at admission: rows new requests and requests re-admitted after a preemption
    (`num_preemptions > 0`); columns requests, queries (the request's tokens, prompt plus
    output so far) and hits (tokens found cached), of the `admitted` [A] entries."""
    resumed = e.n_preempt > 0
    cols = jnp.stack([jnp.ones_like(e.prompt), e.prompt + e.generated, cached], axis=-1)
    cols = jnp.where(admitted[:, None], cols, 0).astype(jnp.int64)
    return jnp.stack(
        [
            jnp.sum(jnp.where(resumed[:, None], 0, cols), axis=0),
            jnp.sum(jnp.where(resumed[:, None], cols, 0), axis=0),
        ]
    )


def _insert(e: Entries, pc: PrefixCache, active, full, t):
    """Insert the blocks before `full` [A] that `active` [A] requests have not yet inserted
    (at most MAX_INSERTS, in entry order). Returns (entries, cache, deferred: more were due)."""
    assert e.prefix is not None  # the mechanism is on (a static switch)
    width = e.prefix.ids.shape[1]
    a_n, c = e.req.shape[0], pc.ids.shape[0]
    pend = jnp.where(active, jnp.maximum(full - e.prefix.next, 0), 0).astype(jnp.int32)
    csum = ops.cumsum(pend, dtype=jnp.int32)
    start = csum - pend
    total = csum[-1]
    k = jnp.arange(MAX_INSERTS, dtype=jnp.int32)
    a = jnp.minimum(jnp.searchsorted(csum, k, side="right"), a_n - 1).astype(jnp.int32)
    in_range = k < total
    j = jnp.clip(e.prefix.next[a] + k - start[a], 0, width - 1)
    ids = jnp.where(in_range, e.prefix.ids[a, j], -1)
    valid = ids >= 0
    exist = lookup(pc.ids, ids)
    earlier = k[None, :] < k[:, None]  # [K, K] k' < k
    same = (ids[:, None] == ids[None, :]) & valid[None, :] & earlier
    has_first = jnp.any(same, axis=1)
    first = jnp.where(has_first, jnp.argmax(same, axis=1).astype(jnp.int32), k)
    new = valid & (exist < 0) & ~has_first
    s = _set_of(jnp.maximum(ids, 0), c // WAYS)
    rank = jnp.sum(new[None, :] & (s[None, :] == s[:, None]) & earlier, axis=1, dtype=jnp.int32)
    ways = s[:, None] * WAYS + jnp.arange(WAYS, dtype=jnp.int32)  # [K, W]
    w_ids, w_ref = pc.ids[ways], pc.ref[ways]
    hit_slots = jnp.where(valid & (exist >= 0), exist, -1)
    claimed = jnp.any(ways[:, :, None] == hit_slots[None, None, :], axis=-1)
    empty = w_ids < 0
    avail = empty | ((w_ref == 0) & ~claimed)
    key = jnp.where(empty, -jnp.inf, jnp.where(avail, pc.last[ways], jnp.inf))
    order = jnp.lexsort((-pc.depth[ways], key), axis=-1)
    ranked = jnp.take_along_axis(ways, order, axis=1)
    pick = jnp.take_along_axis(ranked, jnp.minimum(rank, WAYS - 1)[:, None], axis=1)[:, 0]
    target = jnp.where(new & (rank < jnp.sum(avail, axis=1)), pick, -1)
    slot = jnp.where(exist >= 0, exist, jnp.where(has_first, target[first], target))
    ok = valid & (slot >= 0)
    written = new & (target >= 0)
    w_at = jnp.where(written, target, c)
    victims = written & (pc.ids[jnp.minimum(target, c - 1)] >= 0)
    pc = pc.replace(
        ids=pc.ids.at[w_at].set(ids, mode="drop"),
        depth=pc.depth.at[w_at].set(j, mode="drop"),
        last=pc.last.at[w_at].set(t, mode="drop"),
        ref=pc.ref.at[jnp.where(ok, slot, c)].add(1, mode="drop"),
        evictions=pc.evictions + jnp.sum(victims, dtype=jnp.int32),
        insert_failed=pc.insert_failed + jnp.sum(valid & ~ok & ~has_first, dtype=jnp.int32),
        insert_deferred=pc.insert_deferred + (total > MAX_INSERTS).astype(jnp.int32),
    )
    tried = jnp.clip(MAX_INSERTS - start, 0, pend)
    a_ok = jnp.where(ok, a, a_n)
    r = e.prefix
    assert r is not None  # the mechanism is on (a static switch)
    e = e.replace(
        prefix=r.replace(
            slot=r.slot.at[a_ok, j].set(slot, mode="drop"),
            n=r.n.at[a_ok].add(1, mode="drop"),
            next=r.next + tried,
        )
    )
    return e, pc, total > MAX_INSERTS


def after_advance(e: Entries, completed, pc: PrefixCache, t_end, cfg: EngineConfig):
    """End of an iteration: newly computed full prompt blocks enter the cache, and every full
    block of the requests that completed (`_keep_full_blocks`); then the completed requests
    release theirs. Returns (entries, cache, deferred: blocks left to insert)."""
    assert e.prefix is not None  # the mechanism is on (a static switch)
    active = (e.status == RUNNING) | completed
    full = jnp.where(
        completed, _full_blocks(e.computed, cfg), _full_prompt_blocks(e, e.computed, cfg)
    )
    due = active & (full > e.prefix.next)
    e, pc, deferred = jax.lax.cond(
        jnp.any(due),
        lambda e, pc: _insert(e, pc, active, full, t_end),
        lambda e, pc: (e, pc, jnp.asarray(False)),
        e,
        pc,
    )
    e, pc = release(e, pc, completed, t_end)
    return e, pc, deferred


def release_completed(e: Entries, pc: PrefixCache, which, t, cfg: EngineConfig):
    """Completed requests `which` [A] leave every full block in the cache
    (`_keep_full_blocks`) and release their blocks at time t (seconds). Returns (entries,
    cache)."""
    e, pc = _keep_full_blocks(e, pc, which, e.computed, t, cfg)
    return release(e, pc, which, t)


def after_leap(e: Entries, done, leap_blocks, pc: PrefixCache, t_end, kv_total, cfg: EngineConfig):
    """After a run of decode iterations (engine/leap.py): evict what its growth needs (nothing
    else touched the cache during it, so the LRU choice is the one stepping makes), then the
    requests it completed leave their full blocks in the cache and release them. Returns
    (entries, cache, peak KV blocks)."""
    pc, peak = make_room(e, pc, kv_total, cfg, blocks_sum=leap_blocks)
    e, pc = release_completed(e, pc, done, t_end, cfg)
    return e, pc, peak


def trace_reuse(trace, block_tokens: int, admitted: np.ndarray) -> float:
    """Host-side reference: the trace's own prefix reuse under an infinite cache that holds a
    block from its request's arrival on, in the simulator's terms: prompt tokens of each
    admitted request's leading full blocks whose id appeared in an earlier admitted request
    (capped at prompt - 1 tokens, in whole blocks), over all admitted prompt tokens."""
    seen, hit = set(), 0
    for r in np.nonzero(admitted)[0]:
        p, ids = int(trace.prompt[r]), trace.hash_ids[r]
        full = p // block_tokens
        k = 0
        while k < full and ids[k] in seen:
            k += 1
        hit += min(k, (p - 1) // block_tokens) * block_tokens
        seen.update(ids[:full].tolist())
    return hit / max(int(trace.prompt[admitted].sum()), 1)
