"""Speculative decoding: tokens per target pass match the closed form, outputs do not change,
the draft costs memory and time, and speculation pays at low load but not at high load."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import batched, linear_params, trace_of

from servetune.config import hardware
from servetune.config.scenario import build, stack_workloads
from servetune.core.errors import KV_OVERFLOW, ConfigError
from servetune.core.types import COMPLETED, EngineConfig
from servetune.engine import speculation
from servetune.run.api import compose, simulate_batch
from servetune.run.driver import rollout

CFG = EngineConfig(
    max_slots=16,
    queue_window=16,
    block_size=16,
    max_model_len=4096,
    cost_form="linear",
    outbox=64,
    speculation=True,
)


def _params(spec_k, kv_blocks=100_000, draft_s=0.1):
    """Linear target (1 s per iteration) and draft (draft_s per pass) costs, spec_k a list."""
    p = linear_params({"spec_k": spec_k}, base_s=1.0, kv_blocks=kv_blocks)
    draft = hardware.linear_cost_params(
        base_s=draft_s,
        per_prefill_token_s=0.0,
        per_decode_seq_s=0.0,
        per_ctx_token_s=0.0,
        kv_blocks=kv_blocks,
    )
    shape = jnp.shape(p.policy.spec_k)
    return dataclasses.replace(p, draft=jax.tree.map(lambda x: jnp.broadcast_to(x, shape), draft))


def _run(traces, params, alphas, cfg=CFG, seeds=None):
    wl = stack_workloads(
        traces, [t.output.astype(float) for t in traces], 1e7, spec_alpha=alphas, seeds=seeds
    )
    return rollout(wl, batched(params), cfg, [len(t) for t in traces])


@pytest.fixture(scope="module")
def long_decodes():
    # two workloads (class 0: alpha 0.5, class 1: alpha 0.8) x k in {0, 2, 4}: 40 requests of
    # 2000 output tokens each, so output-length caps touch well under 1% of the passes
    base = trace_of([(0.01 * i, 16, 2000) for i in range(40)])
    traces = [base, dataclasses.replace(base, klass=np.ones(40, np.int32), class_names=("a", "b"))]
    return traces, _run(traces, _params([0.0, 2.0, 4.0]), (0.5, 0.8))


@pytest.mark.parametrize("s,alpha", [(0, 0.5), (1, 0.8)])
@pytest.mark.parametrize("p,k", [(1, 2), (2, 4)])
def test_tokens_per_target_pass_match_the_closed_form(long_decodes, s, alpha, p, k):
    st = long_decodes[1][s][p].stats
    expected = (1 - alpha ** (k + 1)) / (1 - alpha)
    assert int(st["spec_passes"]) > 10_000
    assert float(st["spec_emitted"]) / float(st["spec_passes"]) == pytest.approx(expected, rel=0.02)
    # drafts accepted / proposed: sum_j alpha^j / k
    rate = sum(alpha**j for j in range(1, k + 1)) / k
    assert float(st["spec_accepted"]) / float(st["spec_proposed"]) == pytest.approx(rate, rel=0.02)


def test_outputs_are_unchanged_and_passes_fewer(long_decodes):
    traces, res = long_decodes
    for s, tr in enumerate(traces):
        off = res[s][0]
        assert int(off.stats["spec_passes"]) == 0
        for r in res[s]:
            assert np.all(r.end_state == COMPLETED)
            np.testing.assert_array_equal(r.generated, tr.output)  # exact: same output lengths
        # more tokens per pass, fewer target iterations: k=4 at alpha 0.8 emits ~3.4 per pass
        assert (
            int(res[s][2].stats["steps"]) < int(res[s][1].stats["steps"]) < int(off.stats["steps"])
        )


def test_draft_passes_cost_time():
    # one request, 1 + 20 tokens: k draft passes of 0.1 s each in every decode iteration
    tr = trace_of([(0.0, 16, 21)])
    res = _run([tr], _params([0.0, 3.0]), (0.0,))[0]
    off, on = res
    assert off.finish[0] == pytest.approx(21.0)  # prefill + 20 decode iterations of 1 s
    # alpha = 0: every draft is rejected, each iteration still emits 1 token and pays 3 draft
    # passes; the prefill iteration pays one draft pass over the prompt (the draft's KV)
    assert on.finish[0] == pytest.approx(1.1 + 20 * 1.3)
    np.testing.assert_array_equal(on.generated, off.generated)


def test_kv_stays_within_capacity_under_pressure():
    rng = np.random.default_rng(0)
    tr = trace_of(
        [(0.05 * i, int(rng.integers(16, 200)), int(rng.integers(50, 400))) for i in range(60)]
    )
    res = _run([tr], _params([4.0], kv_blocks=120), (0.9,))[0][0]
    assert np.all(res.end_state == COMPLETED)
    np.testing.assert_array_equal(res.generated, tr.output)
    assert int(res.stats["preemptions"]) > 0  # the pressure was real
    assert not bool(res.stats["invariants"] & KV_OVERFLOW)
    assert int(res.stats["kv_peak_blocks"][0]) <= 120


def test_acceptance_draws_are_exact_and_reproducible():
    u = speculation.uniform(jnp.arange(200_000), jnp.arange(200_000) % 977, 5)
    assert float(u.min()) > 0 and float(u.max()) < 1
    assert float(u.mean()) == pytest.approx(0.5, abs=0.005)
    a = speculation.accepted(u, 0.6, 3)
    for j in range(4):  # P(A >= j) = alpha^j, truncated at k
        assert float(jnp.mean(a >= j)) == pytest.approx(0.6**j, abs=0.005)
    assert int(a.max()) == 3
    np.testing.assert_array_equal(np.asarray(speculation.accepted(u, 1.0, 3)), 3)
    np.testing.assert_array_equal(np.asarray(speculation.accepted(u, 0.0, 3)), 0)
    u2 = speculation.uniform(jnp.arange(200_000), jnp.arange(200_000) % 977, 6)
    assert float(jnp.mean(u2 == u)) < 1e-3  # another seed, other draws


def test_expected_emission_is_the_mean_of_the_draws():
    u = speculation.uniform(jnp.arange(200_000), jnp.arange(200_000) % 977, 5)
    for alpha in (0.0, 0.6, 1.0):
        for k in (0, 1, 3):
            drawn = float(jnp.mean(1 + speculation.accepted(u, alpha, k)))
            assert float(speculation.expected_emitted(alpha, k)) == pytest.approx(drawn, abs=0.01)
    # a fractional k (the relaxation's) is the closed form between the integers, with finite
    # slopes everywhere, at alpha 0 and 1 included
    e = jax.grad(speculation.expected_emitted, argnums=1)
    assert float(e(0.7, 2.5)) == pytest.approx(-(0.7**3.5) * np.log(0.7) / 0.3, rel=1e-9)
    assert float(e(1.0, 2.5)) == 1.0
    assert float(e(0.0, 2.5)) == pytest.approx(0.0, abs=1e-9)


@pytest.fixture(scope="module")
def load_sweep():
    out = {}
    for rate in (1, 32):
        for k in (0, 4):
            sc = build(
                compose(
                    [
                        "workload=poisson",
                        f"workload.rate={rate}",
                        "workload.duration_s=30",
                        "window.drain_s=300",
                        "speculation=draft",
                        f"policy.spec_k={k}",
                    ]
                )
            )
            out[rate, k] = (sc, simulate_batch(sc).metrics[0])
    return out


def test_speculation_pays_at_low_load_and_not_at_high_load(load_sweep):
    low_off, low_on = load_sweep[1, 0][1], load_sweep[1, 4][1]
    high_off, high_on = load_sweep[32, 0][1], load_sweep[32, 4][1]
    # low load, memory-bound decode: verifying 5 positions costs about one, so TPOT falls
    assert low_on["tpot_mean_s"] < 0.75 * low_off["tpot_mean_s"]
    assert low_on["spec_tokens_per_pass"] == pytest.approx((1 - 0.7**5) / 0.3, rel=0.03)
    # events carry several tokens: the delivery cadence (ITL) is slower than TPOT
    assert low_on["itl_mean_s"] > 2 * low_on["tpot_mean_s"]
    # overload, compute-bound batches: rejected drafts waste FLOPs, throughput falls
    assert high_on["service_rate_rps"] < 0.9 * high_off["service_rate_rps"]


def test_draft_takes_memory(load_sweep):
    sc = load_sweep[1, 0][0]
    target, draft = hardware.MODELS["llama3_8b"], hardware.MODELS["llama3_2_1b"]
    gpu = hardware.GPUS["h100"]
    usable = gpu.memory_bytes * 0.9 - 2.0 * hardware.GIB
    expected = int(
        (usable - hardware.weight_bytes(target, 16) - hardware.weight_bytes(draft, 16))
        // (16 * (hardware.kv_bytes_per_token(target, 16) + hardware.kv_bytes_per_token(draft, 16)))
    )
    assert sc.labels["kv_blocks"] == expected
    plain = build(compose(["workload=poisson", "workload.duration_s=5"]))
    assert plain.labels["kv_blocks"] > 1.2 * expected
    assert sc.engine.speculation and not plain.engine.speculation


@pytest.mark.parametrize(
    "override,key",
    [
        ("speculation.draft=gpt5", "speculation.draft"),
        ("speculation.acceptance=1.5", "speculation.acceptance"),
        ("speculation.acceptance=[0.5,0.6,0.7]", "speculation.acceptance"),
        ("speculation.draft=llama3_70b", "speculation.draft"),
        ("speculation.draft_weight_bits=3", "speculation.draft_weight_bits"),
        ("policy.spec_k=100", "policy.spec_k"),
    ],
)
def test_bad_speculation_config_names_the_key(override, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        build(compose(["workload=poisson", "workload.duration_s=5", "speculation=draft", override]))
