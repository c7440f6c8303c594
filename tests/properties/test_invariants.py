"""Invariants over many random configurations: no request lost or counted twice, KV never over
capacity, clocks monotone, completed requests received exactly their output tokens, and the
time-integral of requests in the system equals the sum of their sojourns (Little's law, exactly)."""

import jax
import numpy as np
import pytest
from helpers import CONFIGS, batched, linear_params, random_params, random_traces, run, trace_of

from servetune.config.scenario import stack_workloads
from servetune.core.errors import CLOCK_REGRESS, KV_OVERFLOW, STALLED
from servetune.core.types import COMPLETED, OUTSTANDING, REJECTED, EngineConfig
from servetune.engine.loop import step_trace


# without chunked prefill with -m slow (the default suite's 10-minute budget); test_properties
# draws chunking on and off
@pytest.fixture(
    scope="module",
    params=[
        pytest.param(name, marks=[pytest.mark.slow] if name == "continuous-no-chunking" else [])
        for name in CONFIGS
    ],
)
def batch(request):
    cfg = CONFIGS[request.param]
    rng = np.random.default_rng(abs(hash(request.param)) % 2**32)
    traces = random_traces(rng)
    params = random_params(rng, 12, cfg)
    return cfg, traces, params, run(traces, params, cfg)


def test_every_request_ends_once_with_its_tokens(batch):
    _cfg, traces, _params, results = batch
    for s, tr in enumerate(traces):
        for res in results[s]:
            assert not (res.stats["invariants"] & STALLED)
            assert set(np.unique(res.end_state)) <= {COMPLETED, REJECTED}, "lost or outstanding"
            assert int(res.stats["ended"]) == len(tr)
            done = res.end_state == COMPLETED
            # vLLM's length cap: a sequence stops at max_model_len tokens
            output = np.minimum(tr.output, _cfg.max_model_len - tr.prompt)
            np.testing.assert_array_equal(res.generated[done], output[done])
            assert np.all(res.generated[~done] == 0)
            minimal = tr.prompt + output - 1
            assert np.all(res.tokens_computed[done] >= minimal[done])
            clean = done & (res.n_preempt == 0)
            np.testing.assert_array_equal(res.tokens_computed[clean], minimal[clean])
            # loop totals agree with per-request records
            assert int(res.stats["prefill_tokens"]) + int(res.stats["decode_tokens"]) == int(
                res.tokens_computed.sum()
            )
            assert np.all(res.first_token[done] > tr.arrival[done])
            assert np.all(res.finish[done] >= res.first_token[done])


def test_kv_within_capacity_and_clocks_monotone(batch):
    _cfg, traces, params, results = batch
    kv = np.asarray(params.cost.kv_blocks)
    for s in range(len(traces)):
        for p, res in enumerate(results[s]):
            assert not (res.stats["invariants"] & KV_OVERFLOW)
            assert not (res.stats["invariants"] & CLOCK_REGRESS)
            assert res.stats["kv_peak_blocks"].max() <= kv[p]
            assert res.stats["max_running"].max() <= np.floor(
                np.asarray(params.policy.max_num_seqs)[p]
            )


def test_littles_law_exact(batch):
    _cfg, traces, _params, results = batch
    for s, tr in enumerate(traces):
        for res in results[s]:
            sojourn = np.sum(res.finish - tr.arrival)
            assert np.isclose(float(res.stats["occupancy_s"]), sojourn, rtol=1e-9)


def _never_fits(tr, cfg, params, p):
    """Requests vLLM 0.32 refuses on arrival: a prompt of max_model_len tokens or more, or a
    sequence (cut at max_model_len) the whole KV cache cannot hold."""
    output = np.minimum(tr.output, np.maximum(cfg.max_model_len - tr.prompt, 1))
    kv = np.asarray(params.cost.kv_blocks)[p]
    whole = (
        np.full(len(tr), cfg.max_blocks_per_request)
        if cfg.kv_layout == "contiguous"
        else np.ceil((tr.prompt + output - 1) / cfg.block_size)
    )
    return (tr.prompt >= cfg.max_model_len) | (whole > kv)


def test_rejections_only_for_never_fitting_or_capped(batch):
    cfg, traces, params, results = batch
    caps = np.asarray(params.policy.queue_cap)
    for s, tr in enumerate(traces):
        for p, res in enumerate(results[s]):
            never = _never_fits(tr, cfg, params, p)
            rejected = res.end_state == REJECTED
            assert np.all(rejected[never])
            if np.isinf(caps[p]):
                np.testing.assert_array_equal(rejected, never)


def test_step_clock_monotone_per_iteration():
    cfg = CONFIGS["continuous-paged"]
    rng = np.random.default_rng(5)
    tr = random_traces(rng, 1, 60)[0]
    params = random_params(rng, 1, cfg)
    wl = stack_workloads([tr], [tr.output.astype(float)], 1e6)
    one = jax.tree.map(lambda x: x[0], wl)
    p0 = jax.tree.map(lambda x: x[0], batched(params))
    _, info = step_trace(one, p0, cfg, 400)
    t = np.asarray(info["t"])
    assert np.all(np.diff(t) >= 0)
    assert np.all(np.asarray(info["dur"]) >= 0)


def test_drain_limit_leaves_requests_outstanding():
    # a request needing 100 iterations of 1 s cannot finish within a 10 s drain
    cfg = CONFIGS["continuous-paged"]
    tr = trace_of([(0, 4, 100), (0, 4, 2)])
    res = run(tr, linear_params(), cfg, drain_s=10.0)[0][0]
    assert res.end_state.tolist() == [OUTSTANDING, COMPLETED]
    assert 0 < res.generated[0] < 100


@pytest.mark.parametrize("name", ["continuous-paged", "continuous-no-chunking"])
def test_skipping_the_sort_when_order_cannot_matter_is_exact(name):
    cfg = CONFIGS[name]
    rng = np.random.default_rng(11)
    tr = random_traces(rng, 1, 150)[0]
    for p in range(3):  # one scenario at a time: the unbatched path where the sort is skipped
        params = jax.tree.map(lambda x, p=p: x[p : p + 1], random_params(rng, 3, cfg))
        lazy = run(tr, params, cfg)[0][0]
        eager = run(tr, params, EngineConfig(**{**cfg.__dict__, "lazy_order": False}))[0][0]
        for f in ("end_state", "first_token", "finish", "generated", "n_preempt"):
            np.testing.assert_array_equal(getattr(lazy, f), getattr(eager, f))
