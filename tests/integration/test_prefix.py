"""Prefix caching (engine/prefix.py): closed-form schedules, exactness of the KV accounting and
of the leap with caching on, and the Mooncake synthetic trace: the simulated hit rate
against the trace's own prefix reuse, and TTFT with caching on vs off."""

import dataclasses
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import batched, linear_params, random_params

from servetune.config.scenario import build, stack_workloads
from servetune.core.errors import CLOCK_REGRESS, KV_OVERFLOW, STALLED, ConfigError, TraceError
from servetune.core.types import COMPLETED, OUTSTANDING, EngineConfig
from servetune.engine import prefix as prefix_lib
from servetune.engine.loop import step_trace
from servetune.run.api import compose, simulate_batch
from servetune.run.driver import rollout
from servetune.workload import traces as workload
from servetune.workload.traces import RaggedIds, RequestTrace

CFG = EngineConfig(
    max_slots=4,
    queue_window=4,
    block_size=16,
    max_model_len=4096,
    cost_form="linear",
    outbox=16,
    prefix_cache=True,
    prefix_cache_entries=64,
)


def ptrace(rows, name="prefix") -> RequestTrace:
    """A trace from [(arrival_s, prompt_tokens, output_tokens, [prefix block ids]), ...]."""
    width = max(1, max(len(r[3]) for r in rows))
    ids = np.full((len(rows), width), -1, np.int32)
    for k, r in enumerate(rows):
        ids[k, : len(r[3])] = r[3]
    col = lambda i, t: np.asarray([r[i] for r in rows], t)
    return RequestTrace(name, col(0, np.float64), col(1, np.int32), col(2, np.int32), hash_ids=ids)


def _hits(res) -> int:
    """Prompt tokens found cached at admissions, new and re-admitted requests together."""
    return int(np.asarray(res.stats["prefix_lookups"])[:, 2].sum())


def _wl(traces, cfg, drain_s=1e6):
    return stack_workloads(traces, [t.output.astype(np.float64) for t in traces], drain_s, cfg)


def schedule(trace, params, cfg, n_steps=12):
    """(t, dur, {request: tokens}) of each iteration that computed something."""
    wl = jax.tree.map(lambda x: x[0], _wl([trace], cfg))
    _, info = jax.device_get(step_trace(wl, params, cfg, n_steps))
    out = []
    for k in range(n_steps):
        toks = {
            int(r): int(n) for r, n in zip(info["req"][k], info["tokens"][k], strict=True) if n > 0
        }
        if toks:
            out.append((round(float(info["t"][k]), 9), toks))
    return out


def run(traces, params, cfg, drain_s=1e6):
    traces = traces if isinstance(traces, list) else [traces]
    return rollout(_wl(traces, cfg, drain_s), batched(params), cfg, [len(t) for t in traces])


# --------------------------------------------------------------------------- closed form

# 512-token prefix blocks, KV blocks of 16 tokens; every iteration lasts 1 s.
# r0 (0 s, 2048 tokens = blocks [1 2 3 4], 2 out) runs alone and completes at 2: its 4 blocks
# stay cached. r1 (5 s, 2148 tokens, blocks [1 2 9 10]) shares k = 2 blocks: it prefills
# 2148 - 2 x 512 = 1124 tokens. r2 (10 s, the same 2048 tokens as r0) finds all 4 blocks, but
# at least one token is computed (vLLM caps a hit at prompt - 1 tokens, in whole blocks):
# it reuses 3 blocks and prefills 512 tokens.
SHARED = [(0, 2048, 2, [1, 2, 3, 4]), (5, 2148, 2, [1, 2, 9, 10]), (10, 2048, 1, [1, 2, 3, 4])]


def test_second_request_prefills_k_blocks_fewer():
    p = linear_params({"max_num_batched_tokens": 8192})
    on = schedule(ptrace(SHARED), p, CFG)
    assert on == [
        (0.0, {0: 2048}),
        (1.0, {0: 1}),
        (5.0, {1: 2148 - 2 * 512}),
        (6.0, {1: 1}),
        (10.0, {2: 2048 - 3 * 512}),
    ]
    off = schedule(ptrace(SHARED), p, dataclasses.replace(CFG, prefix_cache=False))
    assert [s[1] for s in off] == [{0: 2048}, {0: 1}, {1: 2148}, {1: 1}, {2: 2048}]
    res = run(ptrace(SHARED), p, CFG)[0][0]
    assert res.tokens_computed.tolist() == [2048 + 1, 1124 + 1, 512]
    assert _hits(res) == 5 * 512


def test_hit_shortens_time_to_first_token_under_a_per_token_cost():
    # 1 ms per prefill token: r1's first token comes 1.024 s sooner with its 2 blocks cached
    p = linear_params({"max_num_batched_tokens": 8192}, base_s=0.01, per_prefill_token_s=1e-3)
    on = run(ptrace(SHARED), p, CFG)[0][0]
    off = run(ptrace(SHARED), p, dataclasses.replace(CFG, prefix_cache=False))[0][0]
    ttft = lambda r: r.first_token - np.array([0, 5, 10])
    np.testing.assert_allclose(ttft(off) - ttft(on), [0, 1.024, 1.536], atol=1e-9)


def test_lookups_counted_as_vllm_prefix_cache_stats():
    # SHARED: three new requests queried 2048 + 2148 + 2048 tokens and found 0, 2 x 512 and
    # 3 x 512 of them cached; nobody was re-admitted after a preemption
    p = linear_params({"max_num_batched_tokens": 8192})
    res = run(ptrace(SHARED), p, CFG)[0][0]
    assert res.stats["prefix_lookups"].tolist() == [[3, 6244, 2560], [0, 0, 0]]
    # a re-admitted request (preempted before) counts apart, its query its prompt plus the
    # tokens it generated (vLLM's request.num_tokens)
    e = types.SimpleNamespace(
        n_preempt=jnp.array([0, 2, 1]),
        prompt=jnp.array([100, 50, 70]),
        generated=jnp.array([0, 7, 3]),
    )
    counts = prefix_lib.lookup_counts(e, jnp.array([True, True, False]), jnp.array([32, 48, 16]))
    assert counts.tolist() == [[1, 100, 32], [1, 57, 48]]


def test_requests_admitted_together_share_the_blocks_the_first_computes():
    # r0 and r1 arrive together with the same prefix. vLLM caches a block when it is
    # scheduled, so r1, admitted after r0 in the same iteration, finds r0's 2 blocks (1 of
    # them, capped so that one token is computed) and prefills 512 tokens, not 1024.
    tr = ptrace([(0, 1024, 2, [1, 2]), (0, 1024, 2, [1, 2]), (3, 1030, 1, [1, 2])])
    p = linear_params({"max_num_batched_tokens": 8192})
    assert schedule(tr, p, CFG) == [
        (0.0, {0: 1024, 1: 512}),
        (1.0, {0: 1, 1: 1}),
        (3.0, {2: 1030 - 1024}),
    ]
    res = run(tr, p, CFG)[0][0]
    assert res.stats["prefix_lookups"].tolist() == [[3, 3078, 512 + 2 * 512], [0, 0, 0]]


def test_a_waiting_request_finds_the_block_a_running_prefill_computes_now():
    # Budget 1536: r0 (2048 tokens, blocks [1 2 3 4]) prefills 3 blocks at 0 and its last
    # block at 1, when r1 (2100 tokens, blocks [1 2 3 4 5]) arrives. r1 finds blocks 1-3 in
    # the cache and block 4 being computed by r0 in this very iteration (vLLM caches it at
    # allocation): 4 blocks hit, 2100 - 4 x 512 = 52 tokens prefilled (3 blocks: 564).
    tr = ptrace([(0, 2048, 1, [1, 2, 3, 4]), (1, 2100, 1, [1, 2, 3, 4, 5])])
    p = linear_params({"max_num_batched_tokens": 1536})
    assert schedule(tr, p, CFG) == [(0.0, {0: 1536}), (1.0, {0: 512, 1: 2100 - 4 * 512})]
    assert _hits(run(tr, p, CFG)[0][0]) == 4 * 512


def test_hits_on_unreferenced_blocks_leave_the_free_pool_before_the_next_admission():
    # KV 164 blocks of 16 tokens, budget 512. r0 (1024 tokens, prefix blocks [1 2]) leaves
    # 2 x 32 evictable blocks. At 5, r1 (1030 tokens, [1 2 3]) reuses them and takes 1 block
    # more: 164 - 64 - 1 = 99 free. r2 (2000 tokens) needs 125 blocks for its whole prompt,
    # so it waits until r1 releases its hits at 6 (vLLM 0.32 does the same; counting r1's
    # hits as still free would admit r2 at 5).
    p = linear_params({"max_num_batched_tokens": 512, "watermark": 0.0}, kv_blocks=164)
    tr = ptrace([(0, 1024, 1, [1, 2]), (5, 1030, 1, [1, 2, 3]), (5, 2000, 1, [7, 8, 9, 10])])
    assert schedule(tr, p, CFG) == [
        (0.0, {0: 512}),
        (1.0, {0: 512}),
        (5.0, {1: 6}),
        (6.0, {2: 512}),
        (7.0, {2: 512}),
        (8.0, {2: 512}),
        (9.0, {2: 464}),
    ]


def test_a_preempted_request_finds_its_own_output_block_again():
    # KV blocks of 512 tokens (one per prefix block), 4 of them. r0 (1000 tokens, 500 out)
    # and r1 (500 tokens, [5], 100 out) decode together until r0 needs its 3rd block at 25:
    # r1, the last admitted, is preempted with 500 + 24 tokens computed, a full first block
    # of its prompt and 12 output tokens. The block stays cached (evictable) and r0 never
    # needs it, so when r0 completes at 500, r1 re-admits on it and computes 500 + 24 - 512
    # = 12 tokens, not 524 (vLLM 0.32 does the same: prefix stats hits 0, preempted hits 512).
    cfg = dataclasses.replace(CFG, block_size=512)
    p = linear_params({"max_num_batched_tokens": 4096, "watermark": 0.0}, kv_blocks=4)
    tr = ptrace([(0, 1000, 500, [1, 2]), (1, 500, 100, [5])])
    wl = jax.tree.map(lambda x: x[0], _wl([tr], cfg))
    _, info = jax.device_get(step_trace(wl, p, cfg, 640))
    prefills = [
        (
            float(info["t"][k]),
            {
                int(r): int(n)
                for r, n in zip(info["req"][k], info["tokens"][k], strict=True)
                if n > 1
            },
            [int(r) for r in info["preempted"][k] if r >= 0],
        )
        for k in range(640)
        if np.any(info["tokens"][k] > 1) or np.any(info["preempted"][k] >= 0)
    ]
    assert prefills == [
        (0.0, {0: 1000}, []),
        (1.0, {1: 500}, []),
        (25.0, {}, [1]),
        (500.0, {1: 12}, []),
    ]
    res = run(tr, p, cfg)[0][0]
    assert res.stats["prefix_lookups"].tolist() == [[2, 1500, 0], [1, 524, 512]]
    assert res.tokens_computed.tolist() == [1000 + 499, 500 + 24 + 12 + 74]


def test_blocks_past_the_prompt_get_ids_only_their_request_has():
    tr = ptrace([(0, 1100, 1, [3, 4, 9]), (0, 300, 1, [3])])
    ids = prefix_lib.workload_ids(tr, tr.prompt, CFG, 3)
    width = CFG.prefix_width  # 4096 // 512 = 8
    assert ids[0, :2].tolist() == [3, 4] and ids[1, 0] != 3  # a partial block is not shared
    own = np.concatenate([ids[0, 2:], ids[1, :]])
    assert len(set(own.tolist())) == len(own) and own.min() > 9  # unique, above trace ids
    assert ids.shape == (3, width) and (ids[2] == -1).all()  # the padding row


def test_blocks_cached_while_shared_count_once_and_lru_evicts_under_pressure():
    # A prefix block of 512 tokens = 32 KV blocks; KV = 4 x 32 + 1 blocks.
    # r0 (blocks [1 2]) then r1 (blocks [3 4]) each leave 2 cached blocks (128 in use, all
    # evictable). r2 (blocks [5 6]) needs 65 blocks: the 2 least recently released (r0's) are
    # evicted; r2's own 2 then enter the cache (dropping its private copies). r3 (1100 tokens,
    # blocks [3 4]) reuses r1's blocks and needs 5 blocks more: one evicted, r2's block 6
    # (released at the same time as its block 5, but deeper).
    tr = ptrace(
        [(0, 1024, 1, [1, 2]), (2, 1024, 1, [3, 4]), (4, 1025, 1, [5, 6]), (6, 1100, 1, [3, 4])]
    )
    p = linear_params({"max_num_batched_tokens": 8192, "watermark": 0.0}, kv_blocks=4 * 32 + 1)
    res = run(tr, p, CFG)[0][0]
    assert res.tokens_computed.tolist() == [1024, 1024, 1025, 1100 - 1024]
    assert res.stats["prefix_evictions"] == 3
    assert res.stats["kv_peak_blocks"].max() <= 4 * 32 + 1
    assert not (res.stats["invariants"] & KV_OVERFLOW)


# --------------------------------------------------------------------------- exactness


def random_prefix_traces(rng, t_blk, n_traces=2, n=100):
    """Requests drawing prefixes from a few shared families (a system prompt, a conversation)
    then unique blocks; bursts of simultaneous arrivals."""
    traces = []
    for _ in range(n_traces):
        arrival = np.sort(
            np.where(rng.random(n) < 0.2, 0.0, np.cumsum(rng.exponential(1 / rng.uniform(1, 8), n)))
        )
        rows, fresh = [], 10_000
        for k in range(n):
            fam, shared = int(rng.integers(0, 4)), int(rng.integers(0, 12))
            own = int(rng.integers(0, 8))
            ids = [fam * 100 + j for j in range(shared)] + list(range(fresh, fresh + own))
            fresh += own
            prompt = max(1, len(ids) * t_blk + int(rng.integers(0, t_blk)))
            rows.append((arrival[k], prompt, int(rng.integers(1, 60)), ids))
        traces.append(ptrace(rows))
    return traces


PCFG = EngineConfig(
    max_slots=16,
    queue_window=16,
    block_size=4,
    max_model_len=256,
    cost_form="linear",
    outbox=64,
    prefix_cache=True,
    prefix_cache_entries=32,
    prefix_block_tokens=8,
)


# the second configuration runs with -m slow (the default suite stays near ten minutes)
@pytest.fixture(
    scope="module",
    params=[(32, True), pytest.param((256, False), marks=pytest.mark.slow)],
    ids=["small-table", "large-table-no-chunking"],
)
def random_batch(request):
    entries, chunked = request.param
    cfg = dataclasses.replace(PCFG, prefix_cache_entries=entries, chunked_prefill=chunked)
    rng = np.random.default_rng(entries + chunked)
    traces = random_prefix_traces(rng, cfg.prefix_block_tokens)
    params = random_params(rng, 4, cfg)
    stepped = run(traces, params, dataclasses.replace(cfg, leap_max=0))
    leaped = run(traces, params, dataclasses.replace(cfg, leap_max=32))
    return cfg, traces, params, stepped, leaped


def test_no_request_lost_and_kv_within_capacity(random_batch):
    _cfg, traces, params, _, results = random_batch
    kv = np.asarray(params.cost.kv_blocks)
    hit_any = preempt_any = evict_any = False
    for s, tr in enumerate(traces):
        for p, res in enumerate(results[s]):
            assert not (res.stats["invariants"] & STALLED)
            assert not (res.stats["invariants"] & KV_OVERFLOW)
            assert res.stats["kv_peak_blocks"].max() <= kv[p]
            assert not (res.stats["invariants"] & CLOCK_REGRESS)
            assert int(res.stats["ended"]) == len(tr)
            assert OUTSTANDING not in res.end_state
            done = res.end_state == COMPLETED
            np.testing.assert_array_equal(res.generated[done], tr.output[done])
            assert int(res.stats["prefill_tokens"]) + int(res.stats["decode_tokens"]) == int(
                res.tokens_computed.sum()
            )
            saved = tr.prompt + tr.output - 1 - res.tokens_computed
            assert np.all(saved[done] <= np.maximum(tr.prompt[done] - 1, 0))
            if res.stats["preemptions"] == 0:  # every admission's hit is a token not computed
                assert saved[done].sum() == _hits(res)
            hit_any |= _hits(res) > 0
            preempt_any |= res.stats["preemptions"] > 0
            evict_any |= res.stats["prefix_evictions"] > 0
    assert hit_any and evict_any
    assert preempt_any


def test_event_skipping_stays_exact_with_caching(random_batch):
    _cfg, traces, _params, stepped, leaped = random_batch
    n_leaped = 0
    for s in range(len(traces)):
        for a, b in zip(stepped[s], leaped[s], strict=True):
            for f in ("end_state", "generated", "n_preempt", "tokens_computed"):
                np.testing.assert_array_equal(getattr(a, f), getattr(b, f), err_msg=f)
            for f in ("first_token", "finish"):
                np.testing.assert_allclose(getattr(a, f), getattr(b, f), rtol=1e-12, err_msg=f)
            for f in (
                "preemptions",
                "prefill_tokens",
                "decode_tokens",
                "kv_peak_blocks",
                "prefix_lookups",
                "prefix_evictions",
                "prefix_insert_failed",
            ):
                np.testing.assert_array_equal(a.stats[f], b.stats[f], err_msg=f)
            n_leaped += int(b.stats["leaped"])
    assert n_leaped > 0


@pytest.mark.slow  # ~20 s: its own compilations (the default suite stays near ten minutes)
def test_caching_without_reuse_schedules_exactly_like_no_caching():
    # every block id unique and no preemption (a re-admitted request would hit its own
    # blocks): no hit, so the same schedule as caching off (cached blocks are evictable, i.e.
    # free to the scheduler, and evicted as KV fills up)
    rng = np.random.default_rng(4)
    traces = random_prefix_traces(rng, PCFG.prefix_block_tokens, 1, 80)
    tr = traces[0]
    uniq = RaggedIds(np.arange(len(tr.hash_ids.ids), dtype=np.int32), tr.hash_ids.offsets)
    tr = dataclasses.replace(tr, hash_ids=uniq)
    params = random_params(rng, 3, PCFG)
    params = params.replace(cost=params.cost.replace(kv_blocks=params.cost.kv_blocks * 0 + 300))
    on = run(tr, params, PCFG)[0]
    off = run(tr, params, dataclasses.replace(PCFG, prefix_cache=False))[0]
    for a, b in zip(on, off, strict=True):
        assert _hits(a) == 0 and a.stats["preemptions"] == 0
        assert a.stats["prefix_evictions"] > 0
        for f in ("end_state", "generated", "n_preempt", "tokens_computed"):
            np.testing.assert_array_equal(getattr(a, f), getattr(b, f), err_msg=f)
        for f in ("first_token", "finish"):  # the leap may sum durations differently
            np.testing.assert_allclose(getattr(a, f), getattr(b, f), rtol=1e-12, err_msg=f)


# --------------------------------------------------------------------------- Mooncake

MOON = [
    "workload=mooncake_synthetic",
    "workload.duration_s=150",
    "model=qwen2_5_7b",
    "window.drain_s=300",
    "seed=0",
]


@pytest.fixture(scope="module")
def mooncake():
    out = {}
    for name, extra in {
        "off": ["hardware=h200", "hardware.tp=4", "engine.prefix_cache=false"],
        "on": ["hardware=h200", "hardware.tp=4", "engine.prefix_cache=true"],
        "small_table": [
            "hardware=h200",
            "hardware.tp=4",
            "engine.prefix_cache=true",
            "engine.prefix_cache_entries=256",
        ],
        "small_kv": ["hardware=h100", "engine.prefix_cache=true"],
    }.items():
        sc = build(compose(MOON + extra))
        out[name] = (sc, simulate_batch(sc).metrics[0])
    return out


@pytest.mark.slow  # the default suite's 10-minute budget on 2 cores
def test_mooncake_hit_rate_matches_the_traces_prefix_reuse(mooncake):
    sc, on = mooncake["on"]
    tr = sc.traces[0]
    admitted = tr.prompt + tr.output <= sc.engine.max_model_len
    reuse = prefix_lib.trace_reuse(tr, 512, admitted)
    assert 0.05 < reuse < 0.5  # the trace reuses prefixes
    assert on["n_rejected"] == int((~admitted).sum()) and on["preemptions"] == 0
    # a large cache: blocks are cached from the iteration after they are computed, not at
    # arrival, so the simulated rate may fall a little short of the infinite-cache reuse
    assert reuse - 0.01 <= on["prefix_hit_rate"] <= reuse + 1e-12
    assert on["prefix_evictions"] == 0
    # a smaller cache (table or KV) finds less
    for small in ("small_table", "small_kv"):
        m = mooncake[small][1]
        assert m["prefix_hit_rate"] < on["prefix_hit_rate"] - 0.02, small
        assert m["prefix_evictions"] > 0
        assert m["kv_peak_occupancy"] <= 1.0


@pytest.mark.slow  # the default suite's 10-minute budget on 2 cores
def test_mooncake_ttft_falls_with_caching(mooncake):
    off, on = mooncake["off"][1], mooncake["on"][1]
    assert on["n_completed"] == off["n_completed"]
    assert on["prefill_tokens"] < off["prefill_tokens"]
    assert on["ttft_mean_s"] < 0.95 * off["ttft_mean_s"]
    assert on["ttft_p50_s"] < 0.8 * off["ttft_p50_s"]
    assert "prefix_hit_rate" not in off


# --------------------------------------------------------------------------- config, trace


@pytest.mark.parametrize(
    "override,match",
    [
        (
            "engine.prefix_cache_entries=100",
            "engine.prefix_cache_entries: got 100; expected a multiple",
        ),
        ("engine.prefix_cache_entries=4", "engine.prefix_cache_entries: got 4"),
        ("engine.prefix_block_tokens=500", "engine.prefix_block_tokens: got 500"),
        ("engine.kv_layout=contiguous", "engine.prefix_cache: needs engine.kv_layout=paged"),
        ("engine.prefix_cache=yes", "engine.prefix_cache: got 'yes'"),
    ],
)
def test_bad_prefix_config_names_the_key(override, match):
    with pytest.raises(ConfigError, match=match):
        build(compose(["workload=mooncake_synthetic", "engine.prefix_cache=true", override]))


def test_prefix_cache_needs_a_trace_with_prefix_ids():
    with pytest.raises(ConfigError, match="engine.prefix_cache: the workload .* has no prefix"):
        build(
            compose(["workload=azure_conv", "workload.duration_s=10", "engine.prefix_cache=true"])
        )


def test_mooncake_hash_ids_loaded_and_checked(tmp_path):
    tr = workload.load_trace(workload.bundled_path("mooncake_synthetic_300s.jsonl"))
    assert len(tr.hash_ids) == len(tr)
    np.testing.assert_array_equal(tr.hash_ids.lengths(), -(-tr.prompt // 512))
    sliced = workload.slice_trace(tr, start_s=10, duration_s=5)
    assert len(sliced.hash_ids) == len(sliced)
    first = int(np.argmax(tr.arrival >= 10))
    np.testing.assert_array_equal(sliced.hash_ids[0], tr.hash_ids[first])
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        '{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [0]}\n'
        '{"timestamp": 1, "input_length": 5, "output_length": 1, '
        '"hash_ids": [1, -3]}\n'
    )
    with pytest.raises(TraceError, match=r"bad.jsonl:2: 'hash_ids' holds -3"):
        workload.load_trace(bad)


@pytest.mark.parametrize(
    "override,key",
    [
        ("engine.n_instances=2", "engine.n_instances"),
        ("engine.kv_pressure=evict", "engine.kv_pressure"),
        ("speculation=draft", "speculation.draft"),
    ],
)
def test_combinations_not_supported_yet_are_refused(override, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        build(
            compose(
                [
                    "workload=mooncake_synthetic",
                    "model=qwen2_5_7b",
                    "engine.prefix_cache=true",
                    "workload.duration_s=10",
                    override,
                ]
            )
        )


def test_caching_is_on_by_default_where_the_trace_has_prefix_block_ids():
    # vLLM enables prefix caching by default: a null engine.prefix_cache turns it on for a
    # trace with hash_ids, where the engine combines with it; explicit settings are kept
    short = ["workload.duration_s=5"]
    moon = lambda *o: build(compose(["workload=mooncake_synthetic", *short, *o])).engine
    assert moon().prefix_cache and moon().prefix_block_tokens == 512
    assert not moon("engine.prefix_cache=false").prefix_cache
    assert not moon("engine.n_instances=2").prefix_cache  # several instances: not combined
    assert not build(compose(["workload=azure_conv", *short])).engine.prefix_cache  # no ids
