"""Model cascade (engine/cascade.py, config/cascade.py): a small (Llama-3-8B, 1 x H100) and a
large (Llama-3-70B, 4 x H100) pool; arrivals routed by predicted difficulty against a traced
threshold; a small answer that fails its check is retried on the large pool.

Checked here: every logical request ends exactly once, within each instance's KV, with monotone
clocks; routing follows the threshold and the per-request fail bits exactly (threshold 0: nothing
on the small pool, and the same times as a large-only run; 1: everything); retries equal the
small-routed requests that fail, recompute from scratch and start only after the small answer
and its check; router accuracy and confusion counts match a hand count; goodput per dollar has
an interior optimum over the threshold; a new threshold does not recompile; bad configs name
their key. One compiled grid (three thresholds) serves most tests.
"""

import jax
import numpy as np
import pytest

from servetune.config import cascade as cascade_lib
from servetune.config.scenario import build
from servetune.core.errors import CLOCK_REGRESS, KV_OVERFLOW, STALLED, ConfigError
from servetune.core.types import COMPLETED, TIER_LARGE, TIER_RETRIED, TIER_SMALL
from servetune.engine.loop import run_chunk_batch, step_trace
from servetune.run import metrics as metrics_lib
from servetune.run.api import compose
from servetune.run.driver import rollout

# 8 req/s for 60 s: the large pool alone is overloaded, the small pool alone retries the hard
# requests (difficulty exponent 2: failures concentrate on them) with a TTFT past the SLO
BASE = [
    "workload=poisson",
    "workload.rate=8",
    "workload.duration_s=60",
    "window.drain_s=120",
    "model.name=llama3_70b",
    "hardware.tp=4",
    "engine.routing=jsq",
    "engine.max_slots=32",
    "engine.queue_window=64",
    "engine.outbox=256",
    "policy.max_num_seqs=32",
    "quality.difficulty_exponent=2",
]
CASCADE = BASE + [
    "engine.n_instances=2",
    "engine.cascade_small_instances=1",
    "cascade.check_latency_s=0.25",
]
THRESHOLDS = (0.0, 0.5, 1.0)
CHECK_S = 0.25


def _run(sc):
    return rollout(sc.workloads, sc.params, sc.engine, [len(t) for t in sc.traces])


@pytest.fixture(scope="module")
def grid():
    sc = build(compose(CASCADE + [f"grid.cascade_threshold={list(THRESHOLDS)}"]))
    results = _run(sc)[0]
    tr = sc.traces[0]
    tables = [metrics_lib.request_table(tr, r, sc.metrics) for r in results]
    mets = [
        metrics_lib.compute_metrics(tr, r, sc.metrics, t)
        for r, t in zip(results, tables, strict=True)
    ]
    return sc, results, tables, mets


def test_every_logical_request_ends_once_within_capacity(grid):
    sc, results, _, _ = grid
    tr = sc.traces[0]
    caps = sc.metrics.cascade.kv_blocks()
    for res in results:
        assert np.all(res.end_state == COMPLETED)
        np.testing.assert_array_equal(res.generated, tr.output)  # the final answer, whole
        assert int(res.stats["ended"]) == len(tr)  # retries are not counted as ends
        assert np.all(res.tier >= 0)
        assert np.all(res.stats["kv_peak_blocks"] <= caps)
        assert not bool(res.stats["invariants"] & KV_OVERFLOW)
        assert not bool(res.stats["invariants"] & CLOCK_REGRESS)
        assert not bool(res.stats["invariants"] & STALLED)


def test_routing_follows_the_threshold_and_the_fail_bits(grid):
    sc, results, _, _ = grid
    tr = sc.traces[0]
    small = lambda thr: tr.cascade_pred <= thr
    for thr, res in zip(THRESHOLDS, results, strict=True):
        expect = np.where(
            small(thr), np.where(tr.cascade_fail, TIER_RETRIED, TIER_SMALL), TIER_LARGE
        )
        np.testing.assert_array_equal(res.tier, expect)
    zero, one = results[0], results[-1]
    assert np.all(zero.tier == TIER_LARGE) and zero.stats["busy_s"][0] == 0.0
    assert np.all(one.tier != TIER_LARGE)
    assert 0 < tr.cascade_fail.sum() < len(tr)  # the case is not degenerate


def test_retries_equal_failed_small_answers_and_recompute_from_scratch(grid):
    sc, results, _, mets = grid
    tr = sc.traces[0]
    once = tr.prompt + tr.output - 1  # tokens one attempt computes, without preemption
    for thr, res, m in zip(THRESHOLDS, results, mets, strict=True):
        retried = res.tier == TIER_RETRIED
        assert retried.sum() == np.sum((tr.cascade_pred <= thr) & tr.cascade_fail)
        assert m["cascade_retries"] == retried.sum()
        assert np.all(res.tokens_computed[retried] >= 2 * once[retried])
        clean = ~retried & (res.n_preempt == 0)
        np.testing.assert_array_equal(res.tokens_computed[clean], once[clean])
    assert mets[-1]["cascade_retries"] > 0


def test_router_accuracy_and_confusion_match_a_hand_count(grid):
    sc, _, tables, mets = grid
    tr = sc.traces[0]
    for thr, m, table in zip(THRESHOLDS, mets, tables, strict=True):
        s, f = tr.cascade_pred <= thr, tr.cascade_fail
        assert m["cascade_confusion"] == {
            "small_passed": int(np.sum(s & ~f)),
            "small_failed": int(np.sum(s & f)),
            "large_needed": int(np.sum(~s & f)),
            "large_unneeded": int(np.sum(~s & ~f)),
        }
        assert m["cascade_router_accuracy"] == pytest.approx(np.mean(s == ~f))
        assert m["cascade_retry_rate"] == pytest.approx(np.mean(s & f))
        assert m["cascade_small_share"] == pytest.approx(np.mean(s))
        # per difficulty class: the classes partition the requests and the goodput
        by = m["by_difficulty"]
        assert sum(c["n_requests"] for c in by.values()) == len(tr)
        assert sum(c["goodput_rps"] for c in by.values()) == pytest.approx(m["goodput_rps"])
        assert list(table["routed"]) == list(np.where(s, "small", "large"))
    # all on small: hard requests fail their check (and retry) far more often than easy ones
    by = mets[-1]["by_difficulty"]
    assert by["hard"]["retry_rate"] > 3 * by["easy"]["retry_rate"]


def test_goodput_per_dollar_has_an_interior_optimum(grid):
    _, _, _, mets = grid
    zero, mid, one = (m["useful_tokens_per_dollar"] for m in mets)
    # threshold 0: the large pool is overloaded and the small GPU idles; 1: the hard requests
    # fail on small and their retries miss the TTFT target
    assert mid > 1.05 * one and mid > 1.5 * zero
    assert mets[1]["slo_attainment"] > mets[-1]["slo_attainment"] > mets[0]["slo_attainment"]


def test_threshold_zero_matches_a_large_only_run(grid):
    _, results, _, mets = grid
    alone_sc = build(compose(BASE + ["engine.n_instances=1"]))
    alone = _run(alone_sc)[0][0]
    zero = results[0]
    np.testing.assert_allclose(zero.first_token, alone.first_token, rtol=1e-12)
    np.testing.assert_allclose(zero.finish, alone.finish, rtol=1e-12)
    np.testing.assert_array_equal(zero.tokens_computed, alone.tokens_computed)
    m = metrics_lib.compute_metrics(alone_sc.traces[0], alone, alone_sc.metrics)
    assert mets[0]["goodput_rps"] == pytest.approx(m["goodput_rps"])
    # same work, but the cascade also pays for the idle small GPU: 5 GPUs instead of 4
    assert mets[0]["cost_usd"] == pytest.approx(m["cost_usd"] * 5 / 4, rel=1e-9)


def test_a_retry_starts_only_after_the_small_answer_and_its_check(grid):
    sc, results, _, _ = grid
    tr = sc.traces[0]
    wl = jax.tree.map(lambda x: x[0], sc.workloads)
    params = jax.tree.map(lambda x: x[-1], sc.params)  # threshold 1: all on small
    state, info = jax.device_get(step_trace(wl, params, sc.engine, 16000))
    assert bool(state.done) and not bool(state.stats.invariants & CLOCK_REGRESS)
    once = tr.prompt + tr.output - 1
    steps = {}
    for t, dur, reqs, toks in zip(info["t"], info["dur"], info["req"], info["tokens"], strict=True):
        for r, k in zip(reqs[toks > 0], toks[toks > 0], strict=True):
            steps.setdefault(int(r), []).append((float(t), float(dur), int(k)))
    retried = np.flatnonzero(results[-1].tier == TIER_RETRIED)
    assert len(retried) > 0
    for r in range(len(tr)):
        assert steps[r][0][0] >= tr.arrival[r]  # nothing computed before it arrived
    for r in retried:
        done, small_end = 0, None
        for k, (t, dur, n) in enumerate(steps[r]):
            done += n
            if done >= once[r] and small_end is None:
                small_end = t + dur  # the small answer's last token
                retry_start = steps[r][k + 1][0]
                break
        assert retry_start >= small_end + CHECK_S - 1e-9


def test_a_new_threshold_does_not_recompile(grid):
    sc, results, _, _ = grid
    compiled = run_chunk_batch._cache_size()
    other = sc.params.replace(
        policy=sc.params.policy.replace(
            cascade_threshold=sc.params.policy.cascade_threshold * 0 + np.array([0.2, 0.7, 0.9])
        )
    )
    again = rollout(sc.workloads, other, sc.engine, [len(sc.traces[0])])[0]
    assert run_chunk_batch._cache_size() == compiled, "a new threshold recompiled"
    assert np.sum(again[1].tier != TIER_LARGE) != np.sum(results[1].tier != TIER_LARGE)


def test_draws_are_fixed_by_the_seed_and_nested_across_tiers():
    d = np.random.default_rng(0).random(5000)
    a = cascade_lib.predicted_difficulty(d, 0.5, seed=3)
    np.testing.assert_array_equal(a, cascade_lib.predicted_difficulty(d, 0.5, seed=3))
    assert np.all((a > 0) & (a < 1))  # so threshold 0 routes nothing small, 1 everything
    assert not np.array_equal(a, cascade_lib.predicted_difficulty(d, 0.5, seed=4))
    np.testing.assert_allclose(
        cascade_lib.predicted_difficulty(d, 0.0, seed=3), np.clip(d, 1e-9, 1 - 1e-9), atol=1e-12
    )
    assert 0.5 < np.corrcoef(a, d)[0, 1] < 0.99  # noisy, but informative
    sc = build(compose(CASCADE + ["+quality.components.tier={large: 0.05, small: 0.3}"]))
    tr, q = sc.traces[0], sc.metrics.quality
    small = cascade_lib.fails(q, tr.difficulty, tr.quality_u, "small")
    large = cascade_lib.fails(q, tr.difficulty, tr.quality_u, "large")
    np.testing.assert_array_equal(small, tr.cascade_fail)
    assert np.all(small[large]) and small.sum() > large.sum() > 0  # large failures nest
    # the final answer decides quality: the small one where it stood, else the large one
    tier = np.where(tr.cascade_pred <= 0.6, np.where(small, TIER_RETRIED, TIER_SMALL), TIER_LARGE)
    ok = cascade_lib.request_columns(tr, tier, q)["quality_ok"]
    np.testing.assert_array_equal(ok, np.where(tier == TIER_SMALL, True, ~large))


@pytest.mark.parametrize(
    "override,key",
    [
        (["engine.prefill_instances=1", "engine.n_instances=3"], r"engine\.prefill_instances"),
        (["engine.cascade_small_instances=2"], r"engine\.cascade_small_instances"),
        (["cost=linear"], r"cost\.form"),
        (["quality.enabled=false"], r"quality\.enabled"),
        (["cascade.small_model=llama3_70b"], r"cascade\.small_model"),
        (["cascade.difficulty_bins=[0,0.5,0.4,1]"], r"cascade\.difficulty_bins"),
        (["cascade.difficulty_noise=-1"], r"cascade\.difficulty_noise"),
        (["policy.cascade_threshold=1.5"], r"policy\.cascade_threshold"),
        (["+quality.components.tier={large: 0.2, small: 0.1}"], r"quality\.components\.tier"),
    ],
)
def test_bad_cascade_config_names_the_key(override, key):
    with pytest.raises(ConfigError, match=key):
        build(compose(CASCADE + override))


def test_prefix_cache_is_refused_with_the_cascade():
    with pytest.raises(ConfigError, match=r"engine\.prefix_cache"):
        build(
            compose(
                [
                    "workload=mooncake_conv",
                    "workload.duration_s=30",
                    "engine.n_instances=2",
                    "engine.cascade_small_instances=1",
                    "model.name=llama3_70b",
                    "hardware.tp=4",
                    "engine.prefix_cache=true",
                ]
            )
        )


def test_the_tuner_can_search_the_threshold_alone():
    from servetune.tuning.runner import settings_from_config

    space = settings_from_config(compose(["+experiment=cascade"])).space
    assert space.keys == ["cascade_threshold"]  # the default space's keys are nulled
    assert space.dims[0].value(np.array([-50.0, 50.0])) == pytest.approx([0.0, 1.0], abs=1e-12)


@pytest.mark.slow  # ~10 s: its own compilation (keeps the default file under ~40 s)
def test_retries_spread_over_a_large_pool_and_wait_when_it_is_full():
    """Engine level, linear costs: 1 small + 2 large instances with few entries, a burst whose
    small answers mostly fail, so retries outnumber the large pool's entries and must wait."""
    import dataclasses

    import jax.numpy as jnp
    from helpers import linear_params, trace_of

    from servetune.config.scenario import stack_workloads
    from servetune.core.types import EngineConfig

    cfg = EngineConfig(
        max_slots=4,
        queue_window=4,
        block_size=16,
        max_model_len=512,
        cost_form="linear",
        outbox=64,
        n_instances=3,
        routing="jsq",
        cascade_small_instances=1,
    )
    rng = np.random.default_rng(1)
    n = 48
    tr = trace_of(
        [
            (a, int(rng.integers(16, 200)), int(rng.integers(2, 40)))
            for a in np.sort(rng.uniform(0, 3, n))
        ]
    )
    fail = rng.random(n) < 0.7
    tr = dataclasses.replace(tr, cascade_pred=np.full(n, 0.5), cascade_fail=fail)
    p = linear_params(
        {"cascade_threshold": [1.0]}, base_s=0.01, per_prefill_token_s=2e-4, per_decode_seq_s=1e-3
    )
    kv = np.array([[80, 60, 60]])
    p = p.replace(
        cost=p.cost.replace(
            kv_blocks=jnp.asarray(kv, jnp.int32),
            base_s=jnp.asarray([[0.005, 0.02, 0.02]]),
            check_latency_s=jnp.asarray([0.1]),
        )
    )
    wl = stack_workloads([tr], [tr.output.astype(float)], 1e6, cfg)
    res = rollout(wl, p, cfg, [n])[0][0]
    assert np.all(res.end_state == COMPLETED) and int(res.stats["ended"]) == n
    np.testing.assert_array_equal(res.generated, tr.output)
    np.testing.assert_array_equal(res.tier, np.where(fail, TIER_RETRIED, TIER_SMALL))
    assert np.all(res.stats["kv_peak_blocks"] <= kv[0])
    assert not bool(res.stats["invariants"] & (KV_OVERFLOW | STALLED | CLOCK_REGRESS))
    assert np.all(res.stats["busy_s"][1:] > 0)  # both large instances took retries
    assert fail.sum() > 2 * cfg.n_entries  # more retries than the large pool has entries
    once = tr.prompt + tr.output - 1
    assert np.all(res.tokens_computed[fail] >= 2 * once[fail])


@pytest.mark.slow  # ~20 s: its own compilation, and every iteration stepped
def test_event_skipping_does_not_delay_retries(grid):
    """Event skipping stops at a completion and never starts after a retry, so every request's
    times are those of the stepped run (up to float rounding of summed durations)."""
    import dataclasses

    sc, results, _, _ = grid
    stepped = rollout(
        sc.workloads, sc.params, dataclasses.replace(sc.engine, leap_max=0), [len(sc.traces[0])]
    )[0]
    for a, b in zip(results, stepped, strict=True):
        np.testing.assert_array_equal(a.tier, b.tier)
        np.testing.assert_allclose(a.first_token, b.first_token, rtol=1e-9)
        np.testing.assert_allclose(a.finish, b.finish, rtol=1e-9)
    assert int(results[-1].stats["leaped"]) > 0  # skipping did happen in the fixture's run
