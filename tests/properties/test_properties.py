"""Property-based tests (Hypothesis): random small workloads -- bursts of simultaneous arrivals
included -- random policies, engine mechanisms and KV capacities. Whatever is drawn:

- no request is lost or counted twice: each ends exactly once (completed, rejected, or
  outstanding when the drain limit cuts the run short), and the loop's counters agree;
- KV use stays within capacity, the running set within max_num_seqs and the slots;
- clocks are monotone: arrival < first token <= finish <= end of the run, no clock went back;
- a completed request received exactly its output tokens, a rejected one none, and the engine
  computed at least prompt + output - 1 tokens for it (exactly that without preemption);
- cost is non-negative and finite, and every metric is finite or NaN/inf exactly where
  documented (servetune.run.metrics.compute_metrics).

Speed: JAX compiles once per static EngineConfig and array shape, so engine configs come from
a small fixed set and every workload pads to the same 64 rows (n <= 32); compiled rollouts
are reused across examples. Profiles (tests/conftest.py): "ci" (default, 25 examples) and
"slow" (HYPOTHESIS_PROFILE=slow, 500 examples, and more engine configs).
"""

from __future__ import annotations

import math
import os

import jax.numpy as jnp
import numpy as np
from helpers import linear_params, run, spec, trace_of
from hypothesis import event, given, note
from hypothesis import strategies as st

from servetune.core.errors import CLOCK_REGRESS, KV_OVERFLOW, STALLED
from servetune.core.types import COMPLETED, OUTSTANDING, REJECTED, EngineConfig
from servetune.run.metrics import ALWAYS_FINITE, compute_metrics, request_table

BASE = {
    "max_slots": 16,
    "queue_window": 16,
    "block_size": 4,
    "max_model_len": 256,
    "cost_form": "linear",
    "outbox": 64,
}
# Each config compiles once (~10 s on a 2-core CPU). The CI set covers every mechanism value at
# least once: continuous and static batching, paged and contiguous KV, chunked prefill on and
# off, the leap on (leap_max=64) and off (0). The first three equal test_invariants' (a
# shared compilation when both files run in one session); the fourth has room for only 12
# requests in its active set, so bursts overflow the queue window (and wait outside it).
ENGINES = {
    "continuous-paged-chunked-leap": EngineConfig(**BASE),
    "static-contiguous": EngineConfig(
        **{**BASE, "batching": "static", "kv_layout": "contiguous", "chunked_prefill": False}
    ),
    "continuous-paged-unchunked-leap": EngineConfig(**{**BASE, "chunked_prefill": False}),
    "continuous-contiguous-chunked-noleap-small": EngineConfig(
        **{**BASE, "kv_layout": "contiguous", "leap_max": 0, "max_slots": 8, "queue_window": 4}
    ),
}
if os.environ.get("HYPOTHESIS_PROFILE") == "slow":
    ENGINES.update(
        {
            "continuous-paged-chunked-noleap": EngineConfig(**{**BASE, "leap_max": 0}),
            "static-paged-noleap": EngineConfig(
                **{**BASE, "batching": "static", "leap_max": 0, "chunked_prefill": False}
            ),
            "continuous-contiguous-unchunked-leap": EngineConfig(
                **{**BASE, "kv_layout": "contiguous", "chunked_prefill": False}
            ),
        }
    )

MAX_REQUESTS = 32  # pads to 64 rows: one array shape for every example

finite = {"allow_nan": False, "allow_infinity": False}


@st.composite
def workloads(draw):
    """[(arrival_s, prompt, output)]: sorted arrivals, about half of the gaps zero (bursts), or
    one burst of more requests than the queue window holds (overflow waits outside it)."""
    if draw(st.booleans()):
        n = draw(st.integers(1, MAX_REQUESTS))
        gap = st.one_of(st.just(0.0), st.floats(0.0, 5.0, **finite))
    else:
        n = draw(st.integers(12, MAX_REQUESTS))
        gap = st.just(0.0)
    start = draw(st.one_of(st.just(0.0), st.floats(0.0, 50.0, **finite)))
    arrival = start + np.cumsum(draw(st.lists(gap, min_size=n, max_size=n)))
    # mostly requests that fit max_model_len = 256, some that do not (rejected on arrival)
    prompt = draw(
        st.lists(
            st.sampled_from([120, 120, 120, 300]).flatmap(lambda hi: st.integers(1, hi)),
            min_size=n,
            max_size=n,
        )
    )
    output = draw(
        st.lists(
            st.sampled_from([60, 60, 60, 160]).flatmap(lambda hi: st.integers(1, hi)),
            min_size=n,
            max_size=n,
        )
    )
    return trace_of(np.stack([arrival, prompt, output], 1))


@st.composite
def policies(draw, cfg: EngineConfig):
    need = cfg.max_blocks_per_request
    return {
        "policy": {
            "max_num_seqs": draw(st.floats(1.0, cfg.max_slots + 4.0, **finite)),
            "max_num_batched_tokens": draw(
                st.sampled_from([8.0, 16.0, 64.0, 256.0, 1024.0, math.inf])
                | st.floats(1.0, 2048.0, **finite)
            ),
            "watermark": draw(
                st.just(0.0) | st.floats(0.0, 0.05, **finite) | st.floats(0.0, 0.5, **finite)
            ),
            "queue_cap": draw(
                st.sampled_from([math.inf, math.inf, math.inf, None]).flatmap(
                    lambda c: st.just(c) if c else st.integers(0, 20).map(float)
                )
            ),
            "w_age": draw(st.floats(-1, 1, **finite)),
            "w_prompt": draw(st.floats(-1, 1, **finite)),
            "w_pred": draw(st.floats(-1, 1, **finite)),
            "w_slack": draw(st.floats(-1, 1, **finite)),
            "ttft_target_s": draw(st.floats(0.0, 10.0, **finite)),
        },
        "cost": {
            "base_s": draw(st.floats(1e-3, 0.05, **finite)),
            "per_prefill_token_s": draw(st.floats(0.0, 1e-3, **finite)),
            "per_decode_seq_s": draw(st.floats(0.0, 5e-3, **finite)),
            "per_ctx_token_s": draw(st.floats(0.0, 1e-5, **finite)),
        },
        # from one lone max_model_len request's worth (tight: preemptions) to 4x that
        "kv_blocks": draw(st.integers(need, 2 * need) | st.integers(need, 4 * need)),
        "drain_s": draw(st.just(1e6) | st.floats(0.01, 5.0, **finite)),
        "slo": {
            k: draw(st.none() | st.floats(0.01, 20.0, **finite))
            for k in ("slo_ttft_s", "slo_tpot_s", "slo_e2e_s")
        },
        "price": draw(st.sampled_from([0.0, 2.5])),
    }


@st.composite
def scenarios(draw):
    name = draw(st.sampled_from(sorted(ENGINES)))
    cfg = ENGINES[name]
    return name, cfg, draw(workloads()), draw(policies(cfg))


def simulate(cfg, trace, draw):
    params = linear_params(
        draw["policy"], order="parametric", kv_blocks=draw["kv_blocks"], **draw["cost"]
    )
    return run(trace, params, cfg, drain_s=draw["drain_s"])[0][0]


@given(scenarios())
def test_simulator_properties(scenario):
    name, cfg, tr, d = scenario
    note(
        f"engine={name} n={len(tr)} arrivals={tr.arrival.tolist()} prompt={tr.prompt.tolist()} "
        f"output={tr.output.tolist()} draw={d}"
    )
    res = simulate(cfg, tr, d)
    event(f"engine {name}")
    event(f"preempted: {bool(res.n_preempt.any())}")
    event(f"rejected: {bool((res.end_state == REJECTED).any())}")
    event(f"outstanding: {bool((res.end_state == OUTSTANDING).any())}")
    event(f"queue window overflow: {int(res.stats['window_overflow']) > 0}")
    check(cfg, tr, d, res)


def test_subnormal_arrival_times_are_zero():
    # found by the slow profile: XLA on CPU flushes subnormal floats to zero, so a request
    # arriving at 2.2e-313 s arrived at 0 for the simulator but not for the host metrics (it
    # seemed rejected before it arrived, and a 2.2e-313 s window made every rate infinite)
    name = "continuous-contiguous-chunked-noleap-small"
    tr = trace_of([(2.2250738585e-313, 1, 1)] * 12)
    assert np.all(tr.arrival == 0)
    d = {
        "policy": {
            "max_num_seqs": 1.0,
            "max_num_batched_tokens": 8.0,
            "watermark": 0.0,
            "queue_cap": 0.0,
            "w_age": 0.0,
            "w_prompt": 0.0,
            "w_pred": 0.0,
            "w_slack": 0.0,
            "ttft_target_s": 0.0,
        },
        "cost": {
            "base_s": 0.03125,
            "per_prefill_token_s": 0.0,
            "per_decode_seq_s": 0.0,
            "per_ctx_token_s": 0.0,
        },
        "kv_blocks": 64,
        "drain_s": 1e6,
        "price": 0.0,
        "slo": {"slo_ttft_s": None, "slo_tpot_s": None, "slo_e2e_s": None},
    }
    check(ENGINES[name], tr, d, simulate(ENGINES[name], tr, d))


def check(cfg, tr, d, res):
    """Every property of one simulated scenario (see the module docstring)."""
    n = len(tr)
    st_ = res.stats
    state = res.end_state
    done, rejected, outstanding = state == COMPLETED, state == REJECTED, state == OUTSTANDING

    # no request lost or counted twice (a request reported twice raises in rollout)
    assert set(np.unique(state)) <= {COMPLETED, REJECTED, OUTSTANDING}
    assert int(st_["ended"]) == int(done.sum() + rejected.sum())
    assert 0 <= int(st_["requests_taken"]) <= n
    if d["drain_s"] >= 1e6:  # an unlimited drain finishes everything
        assert not outstanding.any(), "request left outstanding with an unlimited drain"
    # the simulator's own invariant flags
    assert not bool(st_["invariants"] & STALLED), "idle engine with waiting work it can never admit"
    assert not (st_["invariants"] & KV_OVERFLOW), "KV blocks in use exceeded capacity"
    assert not (st_["invariants"] & CLOCK_REGRESS), "a clock went back"

    # KV and running set within capacity
    assert int(np.max(st_["kv_peak_blocks"])) <= d["kv_blocks"]
    assert int(np.max(st_["max_running"])) <= min(
        math.floor(d["policy"]["max_num_seqs"]), cfg.max_slots
    )

    # monotone clocks: arrival < first token <= finish <= end of the run
    assert np.all(res.first_token[done] > tr.arrival[done])
    assert np.all(res.finish[done] >= res.first_token[done])
    assert np.all(res.finish[rejected] >= tr.arrival[rejected])
    ended = done | rejected
    if ended.any():
        assert np.max(res.finish[ended]) <= res.clock_s + 1e-9
    assert math.isfinite(res.clock_s) and res.clock_s >= 0

    # tokens delivered == tokens requested (cut at max_model_len, vLLM's length cap) for
    # completed requests, none for rejected ones
    output = np.minimum(tr.output, np.maximum(cfg.max_model_len - tr.prompt, 0))
    np.testing.assert_array_equal(res.generated[done], output[done])
    assert np.all(res.generated[rejected] == 0)
    assert np.all((res.generated >= 0) & (res.generated <= output))
    minimal = tr.prompt + output - 1
    assert np.all(res.tokens_computed[done] >= minimal[done])
    clean = done & (res.n_preempt == 0)
    np.testing.assert_array_equal(res.tokens_computed[clean], minimal[clean])
    assert int(st_["prefill_tokens"]) + int(st_["decode_tokens"]) == int(res.tokens_computed.sum())
    assert int(st_["preemptions"]) == int(res.n_preempt.sum())
    if not outstanding.any():  # Little's law, exactly: occupancy integral == sum of sojourns
        assert np.isclose(float(st_["occupancy_s"]), np.sum(res.finish - tr.arrival), rtol=1e-9)

    # metrics: cost non-negative, everything finite or NaN/inf exactly where documented
    ms = spec(d["kv_blocks"], price_per_gpu_hour=d["price"], **d["slo"])
    m = compute_metrics(tr, res, ms, request_table(tr, res, ms))
    assert m["cost_usd"] >= 0
    for k in ALWAYS_FINITE:
        assert math.isfinite(m[k]), (k, m[k])
    counts = ("n_completed", "n_rejected", "n_cancelled", "n_expired", "n_outstanding")
    assert sum(m[k] for k in counts) == m["n_requests"] == n
    assert m["n_completed"] == int(done.sum()) and m["n_rejected"] == int(rejected.sum())
    # goodput and throughput count one population over one window
    assert m["goodput_rps"] <= m["throughput_rps"] <= m["offered_rps"]
    assert m["useful_tokens"] / m["window_s"] <= m["output_tokens_per_s"] * (1 + 1e-12)
    _check_documented_nan(m, tr, res, done)
    for c in m["by_class"].values():
        assert sum(c[k] for k in ("n_completed", "n_rejected", "n_outstanding")) <= c["n_requests"]
        for k, v in c.items():
            assert not (isinstance(v, float) and math.isinf(v)), (k, v)


def _check_documented_nan(m: dict, tr, res, done) -> None:
    """Each float metric is finite unless compute_metrics documents why it may not be."""
    multi = done & (tr.output > 1)
    allowed = {  # metric prefix -> the condition under which it is undefined
        "ttft_": not done.any(),
        "e2e_": not done.any(),
        "tpot_": not multi.any(),
        "itl_": True,  # any gap at all (also from unfinished requests) makes it finite
        "busy_fraction": res.clock_s == 0,
        "mean_in_system": res.clock_s == 0,
        "mfu": res.clock_s == 0,
        "mbu": res.clock_s == 0,
        "model_": res.clock_s == 0,
        "useful_tokens_per_dollar": m["cost_usd"] == 0,
        "slo_attainment": m["n_requests"] == 0,
        "quality_failure_rate": not done.any(),
        # speculation metrics: undefined without a draft pass
        "spec_acceptance_rate": m["spec_draft_tokens"] == 0,
        "spec_tokens_per_pass": m["spec_draft_tokens"] == 0,
    }
    for k, v in m.items():
        if not isinstance(v, float) or math.isfinite(v):
            continue
        if k == "cost_per_qualifying_request_usd":
            assert math.isnan(v) and m["goodput_rps"] == 0, (k, v)
            continue
        why = [ok for prefix, ok in allowed.items() if k.startswith(prefix)]
        assert why and why[0] and math.isnan(v), f"{k} = {v} where it should be defined"
    if multi.any():  # a completed request with >= 2 tokens leaves at least one gap
        assert math.isfinite(m["itl_mean_s"])


def test_profile_is_registered():
    from hypothesis import settings

    profile = os.environ.get("HYPOTHESIS_PROFILE", "ci")
    assert settings.get_profile(profile).deadline is None
    assert settings.default.max_examples >= (500 if profile == "slow" else 25)


def test_kv_blocks_dtype_fixed():
    # every example builds params the same way, so the compiled rollout is reused
    p = linear_params({"max_num_seqs": 3.0}, order="parametric", kv_blocks=70, base_s=0.01)
    assert p.cost.kv_blocks.dtype == jnp.int32 and p.policy.max_num_seqs.dtype == jnp.float64


# The fast machinery against the plainest run, on the same draws: every iteration stepped through
# the full step at the full width (the reference), and the leap across completions and
# arrivals, a start at 4 entries that widens (servetune/engine/width.py) and the simple step
# (servetune/engine/simple_step.py). One engine by default (each width compiles once), all of them
# with the slow profile.
FAST_ENGINES = (
    sorted(ENGINES)
    if os.environ.get("HYPOTHESIS_PROFILE") == "slow"
    else ["continuous-paged-chunked-leap"]
)
COUNTS = ("end_state", "generated", "n_preempt", "tokens_computed", "reject_reason")
TIMES = ("first_token", "finish", "scheduled_at")
COUNT_STATS = (
    "steps",
    "preemptions",
    "prefill_tokens",
    "decode_tokens",
    "kv_peak_blocks",
    "max_running",
    "ended",
    "slot_bound",
    "window_overflow",
    "requests_taken",
)


@given(
    st.sampled_from(FAST_ENGINES).flatmap(
        lambda name: st.tuples(st.just(name), workloads(), policies(ENGINES[name]))
    )
)
def test_skipping_narrow_widths_and_the_simple_step_change_no_record(scenario):
    import dataclasses

    from servetune.engine import width

    name, tr, d = scenario
    note(
        f"engine={name} arrivals={tr.arrival.tolist()} prompt={tr.prompt.tolist()} "
        f"output={tr.output.tolist()} draw={d}"
    )
    cfg = ENGINES[name]
    ref = simulate(dataclasses.replace(cfg, leap_max=0, fast_path=False), tr, d)
    fast = simulate(dataclasses.replace(width.start(cfg, 4), leap_max=64, fast_path=True), tr, d)
    event(f"widened: {int(fast.stats['widenings']) > 0}")
    for f in COUNTS:
        np.testing.assert_array_equal(getattr(ref, f), getattr(fast, f), err_msg=f)
    for f in TIMES:
        np.testing.assert_allclose(getattr(ref, f), getattr(fast, f), rtol=1e-9, err_msg=f)
    for f in COUNT_STATS:
        np.testing.assert_array_equal(ref.stats[f], fast.stats[f], err_msg=f)
    for f in ("busy_s", "occupancy_s"):
        np.testing.assert_allclose(ref.stats[f], fast.stats[f], rtol=1e-9, err_msg=f)
