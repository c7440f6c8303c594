"""Cancellation, deadlines and overload: requests that give up release their KV blocks and slot
in the iteration that notices it, every request ends exactly once, and a 10x burst with
impatient clients keeps the queue bounded and recovers."""

import dataclasses

import numpy as np
import pytest
from helpers import linear_params, run, schedule, trace_of

from servetune.config.scenario import build
from servetune.core.errors import KV_OVERFLOW, ConfigError
from servetune.core.types import CANCELLED, COMPLETED, EXPIRED, EngineConfig
from servetune.run.api import compose, simulate_batch
from servetune.workload.traces import with_abandonment

CFG = EngineConfig(
    max_slots=8,
    queue_window=16,
    block_size=16,
    max_model_len=256,
    cost_form="linear",
    outbox=64,
    abandonment=True,
)


def _with(trace, cancel_after=None, deadline=None):
    n = len(trace)
    return dataclasses.replace(
        trace,
        cancel_after=np.full(n, np.inf)
        if cancel_after is None
        else np.asarray(cancel_after, float),
        deadline=np.full(n, np.inf) if deadline is None else np.asarray(deadline, float),
    )


def test_cancelled_request_frees_its_blocks_in_the_same_iteration():
    # A (64-token prompt, 4 blocks) runs; B needs 4 blocks but only 2 of 6 are free. A's client
    # cancels at 2.5 s: the iteration starting at 3 s sees it, frees A's blocks and admits B.
    tr = _with(trace_of([(0.0, 64, 20), (0.5, 64, 5)]), cancel_after=[2.5, np.inf])
    params = linear_params({"watermark": 0.0}, base_s=1.0, kv_blocks=6)
    sched = schedule(tr, params, CFG, n_steps=12)
    starts = {t: toks for t, _, toks in sched}
    assert starts[0.0] == {0: 64}
    assert starts[1.0] == {0: 1} and starts[2.0] == {0: 1}
    assert starts[3.0] == {1: 64}  # A gone, B admitted in the iteration that noticed it
    res = run(tr, params, CFG)[0][0]
    assert res.end_state.tolist() == [CANCELLED, COMPLETED]
    assert res.finish[0] == 2.5 and res.generated[0] == 3  # tokens delivered before it left
    assert res.tokens_computed[0] == 64 + 2  # its compute was spent (and stays in the cost)
    assert int(res.stats["ended"]) == 2 and not bool(res.stats["invariants"] & KV_OVERFLOW)


def test_queued_and_mid_stream_cancellations_and_deadlines_are_counted_apart():
    # one slot: request 0 runs 10 iterations; 1 gives up while queued, 2 is cancelled
    # mid-stream, 3 expires at its deadline while running, 4 completes within its deadline
    tr = _with(
        trace_of([(0.0, 16, 10), (0.1, 16, 10), (0.2, 16, 10), (0.3, 16, 10), (0.4, 16, 2)]),
        cancel_after=[np.inf, 3.0, 13.0, np.inf, np.inf],
        deadline=[np.inf, np.inf, np.inf, 22.0, 100.0],
    )
    params = linear_params({"max_num_seqs": 1.0}, base_s=1.0)
    res = run(tr, params, CFG)[0][0]
    assert res.end_state.tolist() == [COMPLETED, CANCELLED, CANCELLED, EXPIRED, COMPLETED]
    assert np.isnan(res.first_token[1])  # never started
    assert res.first_token[2] == 11.0 and res.finish[2] == 13.2  # aborted mid-stream
    assert res.finish[3] == pytest.approx(22.3) and 0 < res.generated[3] < 10
    assert res.finish[4] < 0.4 + 100.0
    assert int(res.stats["ended"]) == len(tr)


def test_event_skipping_stops_for_give_ups():
    rng = np.random.default_rng(3)
    arrival = np.sort(rng.uniform(0, 20, 60))
    tr = trace_of([(a, int(rng.integers(8, 64)), int(rng.integers(20, 200))) for a in arrival])
    tr = with_abandonment(tr, patience={"dist": "exponential", "mean_s": 8.0}, seed=1)
    params = linear_params({"max_num_seqs": 6.0}, base_s=0.05, per_decode_seq_s=0.01)
    stepped = run(tr, params, dataclasses.replace(CFG, leap_max=0))[0][0]
    leaped = run(tr, params, dataclasses.replace(CFG, leap_max=64))[0][0]
    assert int(leaped.stats["leaped"]) > 0
    np.testing.assert_array_equal(stepped.end_state, leaped.end_state)
    np.testing.assert_array_equal(stepped.generated, leaped.generated)
    np.testing.assert_allclose(stepped.finish, leaped.finish, rtol=0, atol=1e-9)
    assert (stepped.end_state == CANCELLED).sum() > 5


def test_patience_draws():
    tr = trace_of([(float(k), 10, 10) for k in range(4000)])
    exp = with_abandonment(tr, patience={"dist": "exponential", "mean_s": 30.0}, seed=0)
    assert exp.cancel_after.mean() == pytest.approx(30.0, rel=0.05)
    half = with_abandonment(
        tr, patience={"dist": "fixed", "mean_s": 5.0, "fraction": 0.5}, deadline_s=60.0, seed=0
    )
    assert np.isfinite(half.cancel_after).mean() == pytest.approx(0.5, abs=0.03)
    assert np.all(half.deadline == 60.0) and tr.gives_up is False and half.gives_up
    with pytest.raises(ConfigError, match=r"workload.patience.dist"):
        with_abandonment(tr, patience={"dist": "weibull", "mean_s": 1.0})
    with pytest.raises(ConfigError, match=r"workload.patience.mean_s"):
        with_abandonment(tr, patience={"dist": "exponential"})
    with pytest.raises(ConfigError, match=r"workload.deadline_s"):
        with_abandonment(tr, deadline_s=-1.0)


# capacity: 8 sequences x 1 token per 20 ms iteration; a request is a 16-token prompt and 20
# output tokens, so about 20 requests/s at best. A 5 s burst at 10x, then calm load.
BURST_RATE, CALM_RATE, BURST_S, CALM_S = 200.0, 2.0, 5.0, 150.0


def _burst_trace():
    rng = np.random.default_rng(0)
    burst = np.cumsum(rng.exponential(1 / BURST_RATE, int(BURST_RATE * BURST_S)))
    calm = BURST_S + np.cumsum(rng.exponential(1 / CALM_RATE, int(CALM_RATE * CALM_S)))
    return trace_of([(a, 16, 20) for a in np.concatenate([burst[burst < BURST_S], calm])])


def test_burst_with_impatient_clients_and_a_queue_cap_recovers():
    tr = _burst_trace()
    impatient = with_abandonment(tr, patience={"dist": "exponential", "mean_s": 3.0}, seed=0)
    cfg = dataclasses.replace(CFG, max_model_len=64)
    params = linear_params({"max_num_seqs": 8.0, "queue_cap": 12.0}, base_s=0.02)
    patient, quitting = (run(t, params, cfg, drain_s=1e5)[0][0] for t in (tr, impatient))
    for res in (patient, quitting):
        # every request ends exactly once; the queue cap bounds the backlog (rejections counted)
        assert int(res.stats["ended"]) == len(tr)
        assert not bool(res.stats["invariants"] & KV_OVERFLOW)
        assert (res.end_state == 1).sum() > 100  # REJECTED at the cap during the burst
        # the backlog outside the queue window stays bounded (rejected entries wait a few
        # iterations for the outbox), where without a cap it grows to hundreds (test_overload)
        assert int(res.stats["window_overflow"]) <= cfg.queue_window
    n_cancel = (quitting.end_state == CANCELLED).sum()
    assert n_cancel > 50
    # the engine recovers: burst-phase work is gone soon after the burst, and later arrivals
    # are served at normal latency (one 20 ms prefill iteration, no queueing)
    burst = tr.arrival < BURST_S
    gone = np.nanmax(quitting.finish[burst])
    assert gone < BURST_S + 15.0
    late = tr.arrival > gone + 1.0
    ttft = quitting.first_token - tr.arrival
    assert late.sum() > 200 and np.all(ttft[late] < 0.05)
    # late requests end by cancellation only where the client's patience is shorter than the
    # 0.4 s a request takes on an idle engine
    patient_enough = impatient.cancel_after > 0.45
    assert np.all(quitting.end_state[late & patient_enough] == COMPLETED)
    assert np.all(quitting.end_state[late & (impatient.cancel_after < 0.38)] == CANCELLED)


@pytest.fixture(scope="module")
def patience_runs():
    base = [
        "workload=poisson",
        "workload.rate=10",
        "workload.duration_s=40",
        "window.drain_s=300",
        "policy.max_num_seqs=16",
    ]
    out = {}
    for name, extra in (
        ("patient", []),
        ("impatient", ["workload.patience={dist: exponential, mean_s: 4.0}"]),
    ):
        sc = build(compose(base + extra))
        out[name] = (sc, simulate_batch(sc).metrics[0])
    return out


def test_patience_from_config_cancels_waiting_work(patience_runs):
    sc_p, patient = patience_runs["patient"]
    sc_i, impatient = patience_runs["impatient"]
    assert not sc_p.engine.abandonment and sc_i.engine.abandonment
    assert patient["n_cancelled"] == 0 and impatient["n_cancelled"] > 20
    assert 0 < impatient["n_cancelled_mid_stream"] <= impatient["n_cancelled"]
    total = sum(
        impatient[k]
        for k in ("n_completed", "n_rejected", "n_cancelled", "n_expired", "n_outstanding")
    )
    assert total == impatient["n_requests"]
    # at ~1.5x overload, clients that give up shed load: the queue they leave behind is
    # shorter, so the requests that stay start sooner and more of them meet the SLOs
    assert impatient["ttft_p50_s"] < 0.1 * patient["ttft_p50_s"]
    assert impatient["goodput_rps"] > 2 * patient["goodput_rps"]
    assert impatient["busy_fraction"] > 0.95  # the engine stays busy either way


def test_bad_patience_config_names_the_key():
    with pytest.raises(ConfigError, match=r"workload.patience"):
        build(
            compose(
                [
                    "workload=poisson",
                    "workload.duration_s=5",
                    "workload.patience={dist: forever, mean_s: 1}",
                ]
            )
        )
    with pytest.raises(ConfigError, match=r"workload.deadline_s"):
        build(compose(["workload=poisson", "workload.duration_s=5", "workload.deadline_s=0"]))


def test_prefix_cached_requests_that_give_up_release_their_blocks():
    # Mooncake prefixes cached on a loaded instance; impatient clients abandon requests that
    # hold cache references. simulate_batch checks the invariants (KV within capacity, clocks)
    sc = build(
        compose(
            [
                "workload=mooncake_synthetic",
                "model=qwen2_5_7b",
                "engine.prefix_cache=true",
                "workload.duration_s=60",
                "workload.rate_scale=2",
                "window.drain_s=300",
                "workload.patience={dist: exponential, mean_s: 2.0}",
            ]
        )
    )
    assert sc.engine.prefix_cache and sc.engine.abandonment
    m = simulate_batch(sc).metrics[0]
    assert m["n_cancelled"] > 20 and m["n_completed"] > 0
    assert m["n_completed"] + m["n_cancelled"] + m["n_rejected"] == m["n_requests"]
    assert m["prefix_hit_rate"] > 0  # released blocks stay cached and are hit again
