"""engine/prefix.py on hand-built states: the prefix-cache table's lookups, a waiting request's
hits (the leading run of cached full blocks, capped so that a token is computed), the KV counted
once per cached block, references dropped on release, LRU eviction under KV pressure (ties:
deepest first; referenced blocks never), insertion of newly computed full prompt blocks, and
what admissions and preemptions do to the references.

The engine: 4-token KV blocks, 8-token prefix blocks (B = 2 KV blocks each), 64-token sequences
(Hp = 8 prefix blocks per request) and a table of 16 slots (2 sets of WAYS = 8)."""

import types

import jax.numpy as jnp
import numpy as np
from toy import column, config, entries, running

from servetune.core.types import DONE, RUNNING, WAITING, PrefixRefs
from servetune.engine import prefix
from servetune.workload.traces import RaggedIds

CFG = config(prefix_cache=True, prefix_block_tokens=8, prefix_cache_entries=16)
B = prefix.blocks_per_prefix(CFG)  # 2 KV blocks per prefix block
HP = CFG.prefix_width  # 8
A = CFG.n_entries  # 8
C = CFG.prefix_cache_entries  # 16


def _set(block_id) -> int:
    return int(prefix._set_of(jnp.asarray(block_id, jnp.int32), C // prefix.WAYS))


def _same_set(n, like=1) -> list:
    """The first n ids >= 1 in the table set of id `like`."""
    return [k for k in range(1, 1000) if _set(k) == _set(like)][:n]


def _table(*blocks):
    """One instance's table holding `blocks` ((id, ref, last, depth) each), each in the first
    free way of its id's set; returns (table, {id: slot})."""
    ids, ref = np.full(C, -1, np.int32), np.zeros(C, np.int32)
    last, depth = np.zeros(C), np.zeros(C, np.int32)
    where = {}
    for bid, r, t, d in blocks:
        s = _set(bid) * prefix.WAYS
        w = next(w for w in range(s, s + prefix.WAYS) if ids[w] < 0)
        ids[w], ref[w], last[w], depth[w], where[bid] = bid, r, t, d, w
    pc = prefix.instance(prefix.init_cache(CFG, 0), 0)
    return pc.replace(
        ids=jnp.asarray(ids), ref=jnp.asarray(ref), last=jnp.asarray(last), depth=jnp.asarray(depth)
    ), where


def _refs(*rows) -> PrefixRefs:
    """The entries' prefix sub-state from rows (ids, slots, next) per entry: the slots it
    references (n = how many are >= 0), padded with -1 to Hp and with empty entries to A."""
    ids, slot = np.full((A, HP), -1, np.int32), np.full((A, HP), -1, np.int32)
    nxt = np.zeros(A, np.int32)
    for a, (i, s, x) in enumerate(rows):
        ids[a, : len(i)], slot[a, : len(s)], nxt[a] = i, s, x
    return PrefixRefs(
        ids=jnp.asarray(ids),
        slot=jnp.asarray(slot),
        n=jnp.asarray((slot >= 0).sum(1), jnp.int32),
        next=jnp.asarray(nxt),
    )


def _with(rows, refs):
    return entries(CFG, rows).replace(prefix=_refs(*refs))


def _mask(*slots):
    return jnp.arange(A) < 0 if not slots else jnp.isin(jnp.arange(A), jnp.asarray(slots))


def _slots(e, n):
    return np.asarray(e.prefix.slot)[:n].tolist()


def test_lookup_finds_the_slot_of_each_cached_id_and_misses_the_rest():
    pc, at = _table((3, 1, 0.0, 0), (5, 0, 0.0, 1), (9, 0, 0.0, 2))
    q = jnp.asarray([[3, 5, 7, -1], [9, 0, 3, 5]], jnp.int32)
    assert prefix.lookup(pc.ids, q).tolist() == [[at[3], at[5], -1, -1], [at[9], -1, at[3], at[5]]]
    # an empty table's -1 slots never match a -1 (padding) query
    empty = prefix.instance(prefix.init_cache(CFG, 0), 0)
    assert prefix.lookup(empty.ids, jnp.asarray([-1, 0, 3])).tolist() == [-1, -1, -1]
    # set-associative: an id written into the other set's ways is not found
    other = (1 - _set(7)) * prefix.WAYS
    assert prefix.lookup(empty.ids.at[other].set(7), jnp.asarray([7])).tolist() == [-1]


def test_a_waiting_request_reuses_its_leading_cached_blocks_leaving_one_token_to_compute():
    # blocks 1 (referenced by the running row 4), 2 and 4 cached; 7 not
    pc, at = _table((1, 1, 0.0, 0), (2, 0, 0.0, 1), (4, 0, 0.0, 2))
    e = _with(
        [
            {"prompt": 20},  # 2 full blocks + 4 tokens: both found, 16 tokens cached
            {"prompt": 24},  # exactly 3 blocks, all found: capped at (24 - 1) // 8 = 2 blocks
            {"prompt": 24},  # a gap at block 1 stops the run: 1 block
            {"prompt": 24, "generated": 1, "preempted": True},  # 25 tokens: all 3 blocks
            running(20, 8, generated=1),  # running: no hit, whatever it could find
        ],
        [
            ([1, 2, 30], [], 0),
            ([1, 2, 4], [], 0),
            ([1, 7, 2], [], 0),
            ([1, 2, 4], [], 0),
            ([1, 2, 31], [at[1]], 1),
        ],
    )
    h = prefix.hits(e, pc, 1000, CFG)
    assert h.waiting.tolist()[:5] == [True] * 4 + [False]
    assert h.n_hit.tolist()[:5] == [2, 2, 1, 3, 0]
    assert h.n_table.tolist()[:5] == [2, 2, 1, 3, 0]
    assert h.cached.tolist()[:5] == [16, 16, 8, 24, 0]
    # KV blocks taken from the free pool: B per unreferenced block of the hit (2, then 4)
    assert h.claim.tolist()[:5] == [2, 2, 0, 4, 0]
    assert np.asarray(h.slots)[:3, :3].tolist() == [
        [at[1], at[2], -1],
        [at[1], at[2], at[4]],
        [at[1], -1, at[2]],
    ]
    assert np.asarray(h.slots)[4].tolist() == [-1] * HP  # a running request looks nothing up
    assert np.asarray(h.evictable)[1, :3].tolist() == [False, True, True]
    assert h.shared.tolist()[:5] == [0, 0, 0, 0, B]  # the running request's block 1
    # its next token needs a 6th KV block (21 tokens): with 5 blocks in all that does not fit,
    # and then block 1, which it alone references, is what preempting it would free
    assert h.exclusive.tolist()[:5] == [0] * 5
    assert prefix.hits(e, pc, 5, CFG).exclusive.tolist()[:5] == [0, 0, 0, 0, B]


def test_with_nobody_waiting_hits_looks_nothing_up():
    pc, at = _table((1, 1, 0.0, 0))
    e = _with([running(20, 8)], [([1, 2], [at[1]], 1)])
    h = prefix.hits(e, pc, 1000, CFG)
    assert not h.waiting.any() and not h.n_hit.any() and not h.claim.any()
    assert (np.asarray(h.slots) == -1).all()


def test_a_cached_block_counts_once_however_many_requests_reference_it():
    # two running requests of 20 tokens (5 KV blocks each) share blocks 1 and 2; block 3 is
    # cached, nobody references it
    pc, at = _table((1, 2, 0.0, 0), (2, 2, 0.0, 1), (3, 0, 1.0, 0))
    e = _with(
        [running(20, 8), running(20, 8)],
        [([1, 2, 40], [at[1], at[2]], 2), ([1, 2, 41], [at[1], at[2]], 2)],
    )
    assert column(e, "blocks", 2) == [5, 5]
    # physically: 1 private block each + 3 cached prefix blocks x B = 2 + 6
    assert int(prefix.blocks_in_use(e, pc, CFG)) == 8
    # the scheduler's view counts the evictable block 3 as free: 10 - 4 = 6 in use
    assert int(prefix.kv_offset(e, pc, CFG)) == B * 2 - B * 4
    # it fits 8 blocks: nothing evicted
    pc2, used = prefix.make_room(e, pc, 8, CFG)
    assert int(used) == 8 and int(pc2.evictions) == 0
    assert np.asarray(pc2.ids).tolist() == np.asarray(pc.ids).tolist()


def test_release_drops_the_references_and_keeps_the_blocks_cached():
    pc, at = _table((1, 2, 0.0, 0), (2, 2, 0.0, 1))
    e = _with(
        [running(20, 8), running(20, 8)],
        [([1, 2, 40], [at[1], at[2]], 2), ([1, 2, 41], [at[1], at[2]], 2)],
    )
    e1, pc1 = prefix.release(e, pc, _mask(0), 5.0)
    assert int(pc1.ref[at[1]]) == 1 and int(pc1.ref[at[2]]) == 1
    assert float(pc1.last[at[1]]) == 5.0 and float(pc1.last[at[2]]) == 5.0
    assert _slots(e1, 2) == [[-1] * HP, [at[1], at[2]] + [-1] * (HP - 2)]
    assert np.asarray(e1.prefix.n)[:2].tolist() == [0, 2]
    assert np.asarray(e1.prefix.next)[:2].tolist() == [0, 2]
    assert np.asarray(e1.prefix.ids)[0, :3].tolist() == [1, 2, 40]  # its ids stay
    # the second one releases later: both blocks unreferenced, still cached, now evictable
    e2, pc2 = prefix.release(e1, pc1, _mask(1), 7.0)
    assert np.asarray(pc2.ids).tolist() == np.asarray(pc.ids).tolist()
    assert int(pc2.ref[at[1]]) == 0 and float(pc2.last[at[2]]) == 7.0
    assert int(prefix.kv_offset(e2, pc2, CFG)) == 0
    # in use: the entries' own 5 + 5 KV blocks (no longer counted as shared) + 2 cached blocks
    assert int(prefix.blocks_in_use(e2, pc2, CFG)) == 10 + 2 * B
    # releasing nobody changes nothing
    e3, pc3 = prefix.release(e2, pc2, _mask(), 9.0)
    assert float(pc3.last[at[1]]) == 7.0 and _slots(e3, 2) == _slots(e2, 2)


def test_make_room_evicts_least_recently_released_deepest_first_never_referenced_blocks():
    # A and B released at 1 s (B deeper), C at 3 s; D (oldest) is referenced by the running
    # request of 12 tokens (3 KV blocks, 2 of them D's)
    a, b, c, d = 1, 2, 3, 4
    pc, at = _table((a, 0, 1.0, 0), (b, 0, 1.0, 1), (c, 0, 3.0, 0), (d, 1, 0.0, 0))
    e = _with([running(12, 8)], [([d, 50], [at[d]], 1)])
    assert int(prefix.blocks_in_use(e, pc, CFG)) == 3 - B + 4 * B  # 9

    def kept(cache):
        return sorted(int(x) for x in np.asarray(cache.ids) if x >= 0)

    pc8, used = prefix.make_room(e, pc, 8, CFG)  # 1 over: one prefix block (B) goes
    assert kept(pc8) == [a, c, d] and int(used) == 7 and int(pc8.evictions) == 1
    pc5, used = prefix.make_room(e, pc, 5, CFG)  # 4 over: two
    assert kept(pc5) == [c, d] and int(used) == 5 and int(pc5.evictions) == 2
    # more than the evictable blocks would be needed: all of them go, D stays
    pc2, used = prefix.make_room(e, pc, 2, CFG)
    assert kept(pc2) == [d] and int(used) == 3 and int(pc2.evictions) == 3
    assert int(pc2.ref[at[d]]) == 1


def test_after_advance_inserts_newly_computed_full_prompt_blocks_with_a_reference():
    t_end = 2.5
    pc, at = _table((13, 0, 0.5, 1))  # block 13 cached earlier, unreferenced
    e = _with(
        [
            running(20, 8, generated=1),  # 2 full blocks (11, 12); its last 4 tokens are partial
            {"status": RUNNING, "prompt": 24, "output": 8, "computed": 16},  # blocks 11, 13 so far
            {"status": RUNNING, "prompt": 24, "output": 8, "computed": 7},  # no full block yet
            {"status": DONE, "prompt": 16, "output": 1, "generated": 1, "computed": 16},
            {"prompt": 24},  # waiting: computes nothing
        ],
        [
            ([11, 12, 100], [], 0),
            ([11, 13, 14], [], 0),
            ([11, 15, 16], [], 0),
            ([11, 15], [], 0),
            ([11, 12, 13], [], 0),
        ],
    )
    completed = _mask(3)  # completed this iteration: inserts its blocks, then releases them
    e2, pc2, deferred = prefix.after_advance(e, completed, pc, t_end, CFG)
    assert not bool(deferred)
    where = {k: int(prefix.lookup(pc2.ids, jnp.asarray(k))) for k in (11, 12, 13, 15, 100)}
    assert where[100] == -1 and where[13] == at[13]  # the partial block is not cached
    assert sorted(int(x) for x in np.asarray(pc2.ids) if x >= 0) == [11, 12, 13, 15]
    # 11 once, shared by rows 0 and 1 (row 3 released it); 15 cached, unreferenced
    ref = {k: int(pc2.ref[s]) for k, s in where.items() if s >= 0}
    assert ref == {11: 2, 12: 1, 13: 1, 15: 0}
    depth = {k: int(pc2.depth[s]) for k, s in where.items() if s >= 0}
    assert depth == {11: 0, 12: 1, 13: 1, 15: 1}
    last = {k: float(pc2.last[s]) for k, s in where.items() if s >= 0}
    assert last == {11: t_end, 12: t_end, 13: 0.5, 15: t_end}
    pad = [-1] * (HP - 2)
    assert _slots(e2, 5) == [
        [where[11], where[12]] + pad,
        [where[11], where[13]] + pad,
        [-1] * HP,
        [-1] * HP,
        [-1] * HP,
    ]
    assert np.asarray(e2.prefix.n)[:5].tolist() == [2, 2, 0, 0, 0]
    assert np.asarray(e2.prefix.next)[:5].tolist() == [2, 2, 0, 0, 0]
    assert int(pc2.evictions) == 0 and int(pc2.insert_failed) == 0
    # the next iteration: row 2 reaches 16 tokens, block 1 (15) is now cached: it references
    # it; the others have nothing new
    e3, pc3, _ = prefix.after_advance(
        e2.replace(computed=e2.computed.at[2].set(16)), _mask(), pc2, 3.0, CFG
    )
    assert int(pc3.ref[where[11]]) == 3 and int(pc3.ref[where[15]]) == 1
    assert _slots(e3, 3)[2] == [where[11], where[15]] + pad
    assert float(pc3.last[where[15]]) == t_end  # a hit is no release: its time stays


def test_insertion_into_a_full_set_takes_its_lru_unreferenced_block_or_fails():
    s = _same_set(10)  # ids of one table set
    # its 8 ways: s0 released at 2 s, s1 and s2 at 1 s (s2 deeper), s3..s7 referenced
    blocks = [(s[0], 0, 2.0, 0), (s[1], 0, 1.0, 0), (s[2], 0, 1.0, 1)]
    blocks += [(k, 1, 0.0, 0) for k in s[3:8]]
    pc, at = _table(*blocks)
    e = _with(
        [{"status": RUNNING, "prompt": 16, "output": 4, "computed": 16}], [([s[8], s[9]], [], 0)]
    )
    e2, pc2, _ = prefix.after_advance(e, _mask(), pc, 4.0, CFG)
    # two new blocks: they take s2 (LRU, deepest of the tie), then s1
    assert int(pc2.ids[at[s[2]]]) == s[8] and int(pc2.ids[at[s[1]]]) == s[9]
    assert int(pc2.ids[at[s[0]]]) == s[0] and int(pc2.evictions) == 2
    assert _slots(e2, 1) == [[at[s[2]], at[s[1]]] + [-1] * (HP - 2)]
    assert int(pc2.depth[at[s[1]]]) == 1 and int(pc2.ref[at[s[1]]]) == 1
    # a set whose only unreferenced block is hit in the same iteration: that block is
    # referenced, not evicted, and the new block is not cached (the request moves past it)
    pc, at = _table(*[(k, int(k != s[0]), 0.0, 0) for k in s[:8]])
    e = _with(
        [{"status": RUNNING, "prompt": 16, "output": 4, "computed": 16}], [([s[0], s[8]], [], 0)]
    )
    e2, pc2, _ = prefix.after_advance(e, _mask(), pc, 4.0, CFG)
    assert np.asarray(pc2.ids).tolist() == np.asarray(pc.ids).tolist()
    assert int(pc2.ref[at[s[0]]]) == 1
    assert int(pc2.insert_failed) == 1 and int(pc2.evictions) == 0
    assert _slots(e2, 1) == [[at[s[0]]] + [-1] * (HP - 1)]
    assert np.asarray(e2.prefix.n)[0] == 1 and np.asarray(e2.prefix.next)[0] == 2


def test_an_admission_references_its_hits_and_eviction_makes_room_for_it():
    # row 0 waits for 20 tokens, blocks [1 2 ...]: 1 is referenced by the running row 1, 2 and
    # 3 are cached unreferenced (3 released earlier)
    pc, at = _table((1, 1, 0.0, 0), (2, 0, 1.0, 1), (3, 0, 0.5, 0))
    e = _with(
        [{"prompt": 20, "output": 4}, running(12, 4)], [([1, 2, 30], [], 0), ([1, 31], [at[1]], 1)]
    )
    h = prefix.hits(e, pc, 1000, CFG)
    assert h.n_hit.tolist()[:2] == [2, 0] and h.claim.tolist()[:2] == [B, 0]
    # the scheduler admits it: 16 tokens cached, 4 computed now, 5 KV blocks
    after = e.replace(
        status=e.status.at[0].set(RUNNING),
        computed=e.computed.at[0].set(20),
        blocks=e.blocks.at[0].set(5),
    )
    batch = types.SimpleNamespace(preempted=_mask())
    # in use: 5 + 3 KV blocks - B x 3 referenced + B x 3 cached = 8; 7 fit: block 3 goes
    e2, pc2, used = prefix.after_schedule(after, batch, h, pc, 1.5, 7, CFG, e.computed)
    assert int(pc2.ref[at[1]]) == 2 and int(pc2.ref[at[2]]) == 1
    assert int(prefix.lookup(pc2.ids, jnp.asarray(3))) == -1 and int(pc2.evictions) == 1
    assert int(used) == 6
    assert _slots(e2, 1) == [[at[1], at[2]] + [-1] * (HP - 2)]
    assert np.asarray(e2.prefix.n)[:2].tolist() == [2, 1]
    assert np.asarray(e2.prefix.next)[:2].tolist() == [2, 1]
    # vLLM's stats of new requests: 1 request, 20 tokens queried, 16 found
    assert np.asarray(pc2.lookups).tolist() == [[1, 20, 16], [0, 0, 0]]


def test_a_preempted_request_releases_its_blocks_and_leaves_its_output_block_to_find():
    # 12-token prompt (1 full block, id 1) and 8 outputs: 20 tokens computed, blocks 1 and 40
    # (its own id for tokens 8..15) full; only block 1 was inserted while it ran
    pc, at = _table((1, 1, 0.0, 0))
    e = _with([running(12, 16, generated=9)], [([1, 40, 41], [at[1]], 1)])
    assert column(e, "computed", 1) == [20]
    preempted = e.replace(
        status=e.status.at[0].set(WAITING),
        computed=e.computed.at[0].set(0),
        blocks=e.blocks.at[0].set(0),
        preempted=e.preempted.at[0].set(True),
        n_preempt=e.n_preempt.at[0].set(1),
    )
    h = prefix.hits(e, pc, 1000, CFG)
    batch = types.SimpleNamespace(preempted=_mask(0))
    e2, pc2, used = prefix.after_schedule(preempted, batch, h, pc, 3.0, 1000, CFG, e.computed)
    s40 = int(prefix.lookup(pc2.ids, jnp.asarray(40)))
    assert s40 >= 0 and int(prefix.lookup(pc2.ids, jnp.asarray(41))) == -1
    assert int(pc2.ref[at[1]]) == 0 and int(pc2.ref[s40]) == 0
    assert float(pc2.last[at[1]]) == 3.0 and float(pc2.last[s40]) == 3.0
    assert int(pc2.depth[s40]) == 1
    assert _slots(e2, 1) == [[-1] * HP] and int(e2.prefix.n[0]) == 0
    assert int(used) == 2 * B  # nobody runs: just the two cached blocks
    # re-admitted, it finds both: (12 + 9 - 1) // 8 = 2 blocks
    h2 = prefix.hits(e2, pc2, 1000, CFG)
    assert int(h2.n_hit[0]) == 2 and int(h2.claim[0]) == 2 * B


def test_a_completed_request_leaves_its_full_output_blocks_cached_to_be_evicted_in_turn():
    # as vLLM 0.32 keeps every full block it frees: a 12-token prompt (1 full block, id 1,
    # cached while it ran) and 9 outputs, 20 tokens computed: block 40 (its own id for tokens
    # 8..15) is full, 41 partial; block 7 was released earlier, at 0.5 s
    pc, at = _table((1, 1, 0.0, 0), (7, 0, 0.5, 0))
    e = _with([running(12, 9, generated=9)], [([1, 40, 41], [at[1]], 1)])
    done = e.replace(status=e.status.at[0].set(DONE), blocks=e.blocks.at[0].set(0))
    e2, pc2, _ = prefix.after_advance(done, _mask(0), pc, 2.5, CFG)
    s40 = int(prefix.lookup(pc2.ids, jnp.asarray(40)))
    assert s40 >= 0 and int(prefix.lookup(pc2.ids, jnp.asarray(41))) == -1  # full blocks only
    assert (int(pc2.ref[s40]), float(pc2.last[s40]), int(pc2.depth[s40])) == (0, 2.5, 1)
    assert int(pc2.ref[at[1]]) == 0 and int(e2.prefix.n[0]) == 0
    # the three cached blocks count against the KV capacity until evicted; room for one more
    # prefix block in 3 x B evicts the oldest release first (7), then the request's deepest (40)
    assert int(prefix.blocks_in_use(e2, pc2, CFG)) == 3 * B
    pc3, used = prefix.make_room(e2, pc2, 2 * B, CFG)
    assert int(prefix.lookup(pc3.ids, jnp.asarray(7))) == -1 and int(used) == 2 * B
    pc4, _ = prefix.make_room(e2, pc2, 1 * B, CFG)
    assert [int(prefix.lookup(pc4.ids, jnp.asarray(k))) >= 0 for k in (1, 7, 40)] == [
        True,
        False,
        False,
    ]


def test_workload_ids_keep_the_trace_ids_of_full_prompt_blocks_only():
    trace = types.SimpleNamespace(name="t", hash_ids=RaggedIds.from_rows([[5, 6, 7], [5, 8, 9]]))
    out = prefix.workload_ids(trace, np.asarray([20, 8]), CFG, 3)
    # above the largest id 9, request r's block j gets its own id 10 + 8 r + j
    assert out.tolist() == [
        [5, 6, 12, 13, 14, 15, 16, 17],
        [5, 19, 20, 21, 22, 23, 24, 25],
        [-1] * HP,
    ]
    bare = types.SimpleNamespace(name="t")
    assert (prefix.workload_ids(bare, np.asarray([20]), CFG, 2) == -1).all()
