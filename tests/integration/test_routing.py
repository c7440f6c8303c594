"""Several instances: causal routing (no request is computed before it arrived, clocks never
go back), results independent of the order instances are listed in, every request served
once, and join-shortest-queue beating round-robin on P99 TTFT under bursty load."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import linear_params, trace_of

from servetune.config.scenario import build, stack_workloads
from servetune.core.errors import CLOCK_REGRESS, KV_OVERFLOW, ConfigError
from servetune.core.types import COMPLETED, EngineConfig
from servetune.engine.loop import step_trace
from servetune.run.api import compose, simulate_batch
from servetune.run.driver import rollout

CFG = EngineConfig(
    max_slots=8,
    queue_window=16,
    block_size=16,
    max_model_len=512,
    cost_form="linear",
    outbox=64,
    n_instances=3,
    routing="jsq",
)


def _bursty(n=240, seed=0):
    """Bursts of 20 near-simultaneous requests every 4 s, mixed sizes."""
    rng = np.random.default_rng(seed)
    arrival = np.sort(np.repeat(np.arange(n // 20) * 4.0, 20) + rng.uniform(0, 0.05, n))
    return trace_of([(a, int(rng.integers(16, 200)), int(rng.integers(5, 120))) for a in arrival])


def _params(base_s, kv_blocks, policy=None):
    """Unbatched params; linear costs with an instance axis: base_s and kv_blocks [I]."""
    p = linear_params(policy or {}, base_s=0.01, per_decode_seq_s=0.002, per_prefill_token_s=0.0002)
    cost = p.cost.replace(
        base_s=jnp.asarray(base_s, jnp.float64), kv_blocks=jnp.asarray(kv_blocks, jnp.int32)
    )
    return dataclasses.replace(p, cost=cost)


def _run(trace, params, cfg):
    wl = stack_workloads([trace], [trace.output.astype(float)], 1e6)
    one = jax.tree.map(lambda x: x[None], params)  # a policy axis of 1
    return rollout(wl, one, cfg, [len(trace)])[0][0]


def test_no_request_is_computed_before_it_arrives():
    tr = _bursty(120)
    params = _params([0.01, 0.02, 0.015], [60, 80, 100])
    wl = jax.tree.map(lambda x: x[0], stack_workloads([tr], [tr.output.astype(float)], 1e6))
    state, info = jax.device_get(step_trace(wl, params, CFG, 3000))
    assert bool(state.done)
    first = {}
    for t, reqs, toks in zip(info["t"], info["req"], info["tokens"], strict=True):
        for r in reqs[toks > 0]:
            first.setdefault(int(r), float(t))
    assert len(first) == len(tr)
    starts = np.array([first[r] for r in range(len(tr))])
    assert np.all(starts >= tr.arrival)  # nothing consumed before it was sent
    assert not bool(state.stats.invariants & CLOCK_REGRESS)


@pytest.mark.parametrize("router", ["jsq", "least_kv", "score"])
def test_listing_order_does_not_change_results(router):
    tr = _bursty()
    cfg = dataclasses.replace(CFG, routing=router)
    base, kv = [0.01, 0.02, 0.015], [60, 80, 100]
    a = _run(tr, _params(base, kv, {"route_w_kv": 2.0, "route_w_work": 0.5}), cfg)
    perm = [2, 0, 1]
    b = _run(
        tr,
        _params(
            [base[i] for i in perm], [kv[i] for i in perm], {"route_w_kv": 2.0, "route_w_work": 0.5}
        ),
        cfg,
    )
    np.testing.assert_array_equal(a.end_state, b.end_state)
    np.testing.assert_array_equal(a.finish, b.finish)
    np.testing.assert_array_equal(a.first_token, b.first_token)
    np.testing.assert_array_equal(np.sort(a.stats["busy_s"]), np.sort(b.stats["busy_s"]))


@pytest.mark.parametrize("router", ["round_robin", "jsq", "least_kv", "p2c", "score"])
def test_every_request_is_served_once_within_capacity(router):
    tr = _bursty()
    res = _run(
        tr, _params([0.01, 0.02, 0.015], [60, 80, 100]), dataclasses.replace(CFG, routing=router)
    )
    assert np.all(res.end_state == COMPLETED)
    np.testing.assert_array_equal(res.generated, tr.output)
    assert int(res.stats["ended"]) == len(tr)
    assert not bool(res.stats["invariants"] & KV_OVERFLOW)
    assert np.all(res.stats["kv_peak_blocks"] <= np.array([60, 80, 100]))
    assert np.all(res.stats["busy_s"] > 0)  # every instance got work
    assert not bool(res.stats["invariants"] & CLOCK_REGRESS)


@pytest.fixture(scope="module")
def bursty_azure():
    out = {}
    for router in ("round_robin", "jsq"):
        # 4 x H100, Llama-3-8B, Gamma arrivals with cv 4 near capacity, 16 sequences each
        sc = build(
            compose(
                [
                    "workload=gamma",
                    "workload.rate=20",
                    "workload.cv=4",
                    "workload.duration_s=120",
                    "window.drain_s=600",
                    "seeds=2",
                    "engine.n_instances=4",
                    f"engine.routing={router}",
                    "policy.max_num_seqs=16",
                ]
            )
        )
        out[router] = (sc, simulate_batch(sc).metrics)
    return out


@pytest.mark.slow  # ~45 s: 4 x H100 roofline runs
def test_jsq_beats_round_robin_on_p99_ttft_under_bursty_load(bursty_azure):
    rr, jsq = bursty_azure["round_robin"][1], bursty_azure["jsq"][1]
    for m_rr, m_jsq in zip(rr, jsq, strict=True):
        # measured: P99 TTFT 11.0 vs 12.0 s and 3.6 vs 4.3 s (seeds 0, 1); round-robin splits a
        # burst evenly, so the gain comes from balancing long requests, not the bursts
        assert m_jsq["ttft_p99_s"] < 0.95 * m_rr["ttft_p99_s"]
        assert m_jsq["ttft_mean_s"] < m_rr["ttft_mean_s"]
        assert m_jsq["n_completed"] == m_rr["n_completed"] == m_rr["n_requests"]


@pytest.mark.slow
def test_cost_counts_every_instance(bursty_azure):
    sc, metrics = bursty_azure["jsq"]
    assert sc.metrics.n_gpus == 4
    m = metrics[0]
    assert m["cost_usd"] == pytest.approx(
        sc.metrics.price_per_gpu_hour * 4 * m["provisioned_s"] / 3600.0
    )
    assert 0 < m["busy_fraction"] <= 1.0


def test_bad_routing_config_names_the_key():
    with pytest.raises(ConfigError, match=r"engine\.routing"):
        build(
            compose(
                [
                    "workload=poisson",
                    "workload.duration_s=5",
                    "engine.n_instances=2",
                    "engine.routing=random",
                ]
            )
        )
    with pytest.raises(ConfigError, match=r"engine\.n_instances"):
        build(compose(["workload=poisson", "workload.duration_s=5", "engine.n_instances=0"]))


@pytest.mark.slow  # ~20 s; a grid equals separate runs is checked in test_batched_loop
def test_a_grid_of_policies_matches_separate_runs():
    base = [
        "workload=poisson",
        "workload.rate=20",
        "workload.duration_s=10",
        "engine.n_instances=3",
        "engine.routing=jsq",
        "seeds=2",
    ]
    grid = simulate_batch(build(compose(base + ["grid.max_num_seqs=[8,32]"]))).metrics
    for k, seqs in enumerate((8, 32)):
        alone = simulate_batch(build(compose(base + [f"policy.max_num_seqs={seqs}"]))).metrics
        for s in range(2):  # metrics are ordered seed-major, then grid point
            assert grid[2 * s + k]["ttft_p99_s"] == alone[s]["ttft_p99_s"]
            assert grid[2 * s + k]["n_completed"] == alone[s]["n_completed"]
