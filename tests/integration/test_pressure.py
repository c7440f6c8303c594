"""KV-pressure policies: preempt (vLLM), evict by value, compress, reject. Closed-form block
counts, the invariants under each, and the seed study's ordering on a workload where the KV
cache binds and compute does not."""

import dataclasses

import jax
import numpy as np
import pytest
from helpers import linear_params, run, spec, trace_of

from servetune.config.scenario import build, stack_workloads
from servetune.core.errors import KV_OVERFLOW, ConfigError
from servetune.core.types import COMPLETED, EVICTED, REJECT_KV_RESERVE, EngineConfig
from servetune.engine.loop import step_trace
from servetune.run.api import compose
from servetune.run.metrics import compute_metrics

CFG = EngineConfig(
    max_slots=8, queue_window=8, block_size=16, max_model_len=1024, cost_form="linear", outbox=64
)


def _state_after(trace, params, cfg, n_steps):
    wl = stack_workloads([trace], [trace.output.astype(float)], 1e6)
    state, _ = step_trace(jax.tree.map(lambda x: x[0], wl), params, cfg, n_steps)
    e = jax.tree.map(lambda x: np.asarray(x[0]), jax.device_get(state.entries))
    return {
        int(r): {
            f: getattr(e, f)[i]
            for f in ("status", "blocks", "computed", "kv_ratio", "end_state", "finish")
        }
        for i, r in enumerate(e.req)
        if r >= 0
    }


# two requests of 64 prompt tokens (4 blocks each) fill an 8-block cache; their first decode
# needs a 5th block each, so the second iteration (t = 1 s) is under pressure
PAIR = trace_of([(0.0, 64, 50), (0.0, 64, 50)])
PAIR_PARAMS = linear_params({"watermark": 0.0, "kv_compress_ratio": 2.0}, base_s=1.0, kv_blocks=8)


def test_evict_drops_the_lowest_priority_request_at_once():
    cfg = dataclasses.replace(CFG, kv_pressure="evict")
    res = run(PAIR, PAIR_PARAMS, cfg)[0][0]
    assert res.end_state.tolist() == [COMPLETED, EVICTED]
    assert res.finish[1] == 1.0 and res.generated[1] == 1  # dropped as the 2nd iteration began
    after = _state_after(PAIR, PAIR_PARAMS, cfg, 2)
    assert 1 not in after  # gone from the engine, its blocks to the higher-priority request
    assert after[0]["blocks"] == 5 and after[0]["computed"] == 65


def test_compress_shrinks_just_enough_requests():
    after = _state_after(PAIR, PAIR_PARAMS, dataclasses.replace(CFG, kv_pressure="compress"), 2)
    # deficit 2 blocks: compressing the lower-priority request saves 5 - ceil(33 / 16) = 2
    assert after[1]["kv_ratio"] == 2.0 and after[1]["blocks"] == 3
    assert after[0]["kv_ratio"] == 1.0 and after[0]["blocks"] == 5
    assert after[0]["computed"] == after[1]["computed"] == 65  # nobody preempted


def test_preempt_requeues_and_reject_reserves():
    pre = _state_after(PAIR, PAIR_PARAMS, CFG, 2)
    assert pre[1]["computed"] == 0 and pre[1]["blocks"] == 0 and pre[0]["blocks"] == 5
    # reject: each request's predicted footprint (114 tokens, 8 blocks) is the whole cache, so
    # the second cannot fit next to the first's reservation: so it is turned away at once instead of
    # being admitted and preempted
    res = run(PAIR, PAIR_PARAMS, dataclasses.replace(CFG, kv_pressure="reject"))[0][0]
    assert res.end_state.tolist() == [COMPLETED, 1] and res.finish[1] == 0.0  # REJECTED at 0
    assert res.n_preempt.tolist() == [0, 0] and res.tokens_computed[1] == 0
    assert res.reject_reason.tolist() == [-1, REJECT_KV_RESERVE]  # refused at admission
    assert res.scheduled_at[0] == 0.0 and np.isnan(res.scheduled_at[1])


@pytest.mark.parametrize("predicted", [1e6, 1e7, 1e12, 1e300])
def test_reject_caps_a_huge_prediction_at_max_model_len(predicted):
    # a prediction beyond the length cap reserves a max_model_len sequence (64 blocks of 16
    # tokens), never a wrapped-around negative footprint: with 64 blocks the first request is
    # admitted alone, the second is turned away; with 63 neither fits
    tr = trace_of([(0.0, 64, 50), (0.0, 64, 50)])
    cfg = dataclasses.replace(CFG, kv_pressure="reject")
    for kv, states in ((64, [COMPLETED, 1]), (63, [1, 1])):
        p = linear_params({"watermark": 0.0}, kv_blocks=kv)
        res = run(tr, p, cfg, predicted=[np.full(2, predicted)])[0][0]
        assert res.end_state.tolist() == states, (kv, predicted)


@pytest.fixture(scope="module")
def seed_study():
    # KV binds (300 blocks hold ~8 requests of ~600 tokens), compute does not (decode is
    # nearly free per sequence): 1.8 requests/s offered for 200 s
    rng = np.random.default_rng(0)
    arrival = np.sort(rng.uniform(0, 200, 360))
    tr = trace_of([(a, int(rng.integers(100, 400)), int(rng.integers(100, 600))) for a in arrival])
    params = linear_params(
        {"max_num_seqs": 64.0, "watermark": 0.0},
        base_s=0.02,
        per_decode_seq_s=0.0001,
        per_prefill_token_s=0.00002,
        kv_blocks=300,
    )
    out = {}
    for mode in ("preempt", "evict", "compress", "reject"):
        cfg = EngineConfig(
            max_slots=64,
            queue_window=64,
            block_size=16,
            max_model_len=2048,
            cost_form="linear",
            outbox=256,
            kv_pressure=mode,
        )
        res = run(tr, params, cfg)[0][0]
        out[mode] = (
            res,
            compute_metrics(
                tr, res, spec(kv_blocks=300, slo_ttft_s=10.0, kv_compress_fail_prob=0.1)
            ),
        )
    return tr, out


@pytest.mark.parametrize("mode", ["preempt", "evict", "compress", "reject"])
def test_invariants_hold_under_every_policy(seed_study, mode):
    tr, out = seed_study
    res, m = out[mode]
    assert int(res.stats["ended"]) == len(tr)  # each request ended exactly once
    assert not bool(res.stats["invariants"] & KV_OVERFLOW)
    assert int(res.stats["kv_peak_blocks"][0]) <= 300
    ended = m["n_completed"] + m["n_rejected"] + m["n_evicted"]
    assert ended == len(tr)
    done = res.end_state == COMPLETED
    np.testing.assert_array_equal(res.generated[done], tr.output[done])


def test_seed_study_ordering(seed_study):
    _, out = seed_study
    m = {mode: metrics for mode, (_, metrics) in out.items()}
    # compression serves everyone at half the bytes and pays 10% quality failures; rejection
    # turns away about half the work: compression delivers more useful tokens
    assert m["compress"]["useful_tokens"] > 1.5 * m["reject"]["useful_tokens"]
    assert m["compress"]["n_kv_compressed"] > 0 and m["compress"]["n_rejected"] == 0
    # eviction throws away half-done requests: less useful work per unit of compute than
    # rejecting up front, which wastes none (oracle predictions: no preemption either)
    assert (
        m["evict"]["useful_tokens_per_computed_token"]
        < 0.9 * m["reject"]["useful_tokens_per_computed_token"]
    )
    assert m["evict"]["n_evicted"] > 0 and m["evict"]["preemptions"] == 0
    assert m["reject"]["preemptions"] == 0 and m["reject"]["wasted_token_ratio"] == 0.0
    # vLLM's recompute thrashes here: the most preemptions and the least useful work
    assert m["preempt"]["preemptions"] > 100
    assert m["preempt"]["useful_tokens"] < min(
        m[k]["useful_tokens"] for k in ("evict", "compress", "reject")
    )


def test_compression_quality_cost_applies(seed_study):
    tr, out = seed_study
    res, m = out["compress"]
    certain = compute_metrics(
        tr, res, spec(kv_blocks=300, slo_ttft_s=10.0, kv_compress_fail_prob=1.0)
    )
    free = compute_metrics(tr, res, spec(kv_blocks=300, slo_ttft_s=10.0))
    assert certain["n_kv_compressed"] == m["n_kv_compressed"] > 100
    assert certain["useful_tokens"] < m["useful_tokens"] < free["useful_tokens"]


@pytest.mark.parametrize(
    "overrides,key",
    [
        (["engine.kv_pressure=drop"], "engine.kv_pressure"),
        (["engine.kv_pressure=compress", "engine.kv_layout=contiguous"], "engine.kv_pressure"),
        (["engine.kv_compress_fail_prob=2"], "engine.kv_compress_fail_prob"),
        (["policy.kv_compress_ratio=0.5"], "policy.kv_compress_ratio"),
    ],
)
def test_bad_pressure_config_names_the_key(overrides, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        build(compose(["workload=poisson", "workload.duration_s=5"] + overrides))


def test_compression_draws_differ_by_seed_and_not_by_policy():
    sc = build(
        compose(
            [
                "workload=poisson",
                "workload.duration_s=5",
                "seeds=2",
                "engine.kv_pressure=compress",
                "grid.max_num_seqs=[8,16]",
            ]
        )
    )
    u0, u1 = sc.traces[0].compress_u, sc.traces[1].compress_u
    assert u0 is not None and u1 is not None and not np.allclose(u0[:10], u1[:10])
    again = build(
        compose(
            [
                "workload=poisson",
                "workload.duration_s=5",
                "seeds=2",
                "engine.kv_pressure=compress",
                "policy.kv_compress_ratio=4",
            ]
        )
    )
    np.testing.assert_array_equal(again.traces[1].compress_u, u1)  # paired across policies
