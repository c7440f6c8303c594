"""Relaxed gates and the pathwise gradient: exactness of st, finite differences of the soft
objective, finiteness over random scenarios, agreement with ES, and the tune=pathwise loop."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from servetune.config.scenario import build
from servetune.core import relax
from servetune.core.errors import ConfigError
from servetune.core.types import RUNNING, TIER_SMALL, WAITING
from servetune.engine.relaxed import swap
from servetune.run.api import compose
from servetune.run.driver import rollout
from servetune.tuning.estimators import es, paired_difference
from servetune.tuning.estimators import pathwise_gradient as pathwise
from servetune.tuning.estimators.pathwise import PathwiseEstimator
from servetune.tuning.evaluator import Evaluator
from servetune.tuning.objective import Objective
from servetune.tuning.space import space_from_config

SPACE = {
    "max_num_seqs": {"low": 8, "high": 256, "scale": "log"},
    "max_num_batched_tokens": {"low": 256, "high": 16384, "scale": "log"},
    "watermark": {"low": 0.0, "high": 0.1, "scale": "linear"},
}
# an overloaded engine (Llama-3-8B, one H100, 35 req/s): the sequence cap binds, so admitting
# sooner trades TTFT against longer iterations; limits sit between integers (no exact flip
# within a finite-difference step)
OVERLOADED = [
    "workload=poisson",
    "workload.rate=35",
    "workload.duration_s=6",
    "window.drain_s=30",
    "engine.max_slots=256",
    "seeds=2",
]
START = {"max_num_seqs": 48.5, "max_num_batched_tokens": 2048.5, "watermark": 0.0105}


def cosine(a, b):
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


@pytest.fixture(scope="module")
def problem():
    sc = build(compose(OVERLOADED))
    space = space_from_config(SPACE)
    ev = Evaluator(sc, "fcfs", "loop")
    z0 = space.point(START)
    return sc, space, ev, z0


def estimator(problem, mode, temperature=0.3):
    _sc, space, ev, _ = problem
    return PathwiseEstimator(ev, space, mode, temperature, slo_target=0.99, slo_tau=0.05)


def test_gates_by_mode():
    exact = jnp.array([True, False, False])
    eligible = jnp.array([True, True, False])
    margin = jnp.array([1.0, -0.5, 3.0])
    for mode in ("hard", "st", "soft"):
        w = relax.weight(exact, eligible, (margin,), (1.0,), mode, 0.5)
        soft = jax.nn.sigmoid(margin / 0.5) * eligible
        assert np.allclose(w, soft if mode == "soft" else exact)
        # d w / d margin: the sigmoid's derivative (st, soft), none when exact
        dw = jax.jacfwd(
            lambda m, mode=mode: relax.weight(exact, eligible, (m,), (1.0,), mode, 0.5)
        )(margin)
        expect = jnp.diag(soft * (1 - jax.nn.sigmoid(margin / 0.5)) / 0.5)
        assert np.allclose(dw, 0.0 if mode == "hard" else expect)
        # st perturbations are 0 in value: the forward pass is the exact one
        z = relax.perturbation(w, exact)
        assert np.allclose(z, 0.0 if mode != "soft" else soft - exact)
    lim = 127.6
    assert relax.relaxed_limit(lim, "hard") == 127.0
    assert relax.relaxed_limit(lim, "st") == 127.0
    assert jax.grad(lambda x: relax.relaxed_limit(x, "st"))(lim) == 1.0
    assert jax.grad(lambda x: relax.relaxed_limit(x, "hard"))(lim) == 0.0
    assert relax.relaxed_limit(lim, "soft") == lim
    with pytest.raises(ValueError, match="relax mode"):
        relax.relaxed_limit(lim, "fuzzy")


def test_st_forward_pass_is_the_exact_simulator(problem):
    assert_st_is_exact(*problem)


def assert_st_is_exact(sc, space, ev, z0):
    """The st engine's per-request times at z0 are the exact simulator's."""
    one = {k: np.array([v]) for k, v in space.values(z0).items()}
    params = ev.params(one)
    hard = rollout(sc.workloads, params, sc.engine, [len(t) for t in sc.traces])
    cfg = pathwise.relaxed_engine(sc.engine, "st", 0.3)
    for s, trace in enumerate(sc.traces):
        wl = jax.tree.map(lambda x, s=s: x[s], sc.workloads)
        rt = jax.jit(pathwise.request_times, static_argnames="cfg")(
            wl, jax.tree.map(lambda x: x[0], params), cfg
        )
        first, finish, completed = rt.first, rt.finish, rt.completed
        n = len(trace)
        res = hard[s][0]
        assert np.array_equal(np.asarray(completed[:n]), res.end_state == 0)
        if res.tier is not None:  # a model cascade: the final answers' model
            assert np.array_equal(np.asarray(rt.final_small[:n]), res.tier == TIER_SMALL)
            assert 0 < np.sum(res.tier == TIER_SMALL) < n
        assert res.end_state.size == n and (res.end_state == 0).sum() > 0.8 * n
        # the leap sums durations in another order: equal up to float rounding
        np.testing.assert_allclose(np.asarray(first[:n]), res.first_token, rtol=1e-9)
        np.testing.assert_allclose(np.asarray(finish[:n]), res.finish, rtol=1e-9)


def test_soft_gradient_matches_finite_differences_and_st_agrees(problem):
    _, _space, _, z0 = problem
    soft = estimator(problem, "soft")
    st = estimator(problem, "st")
    g_soft, _ = soft(z0, 0.0)
    g_st, _ = st(z0, 0.0)
    # central differences of the soft Lagrangian; steps small enough that no exact decision
    # flips (the limits sit between integers)
    # (the soft objective also has jumps of ~1e-6 where an arrival crosses an iteration
    # boundary, so the steps are tiny)
    h = 1e-7
    fd = np.zeros(len(z0))
    for k in range(2):  # the watermark does not bind here: its gradient is 0 (checked below)
        e = np.zeros(len(z0))
        e[k] = h
        fd[k] = (
            soft(z0 + e, 0.0)[1]["soft_lagrangian"] - soft(z0 - e, 0.0)[1]["soft_lagrangian"]
        ) / (2 * h)
    fd[2] = g_soft[2]
    assert g_soft[2] == 0.0
    np.testing.assert_allclose(g_soft, fd, rtol=1e-5)
    assert np.abs(fd[0]) > 0.1  # the sequence cap matters here
    # straight-through: the same direction (its magnitude is the sigmoid's at exact margins)
    assert cosine(g_st, fd) >= 0.9


@pytest.mark.slow  # the default suite's 10-minute budget
def test_priority_weight_gradient_through_soft_ranks_matches_finite_differences():
    # soft ranks cost O(W^2) per iteration: a small queue window
    sc = build(
        compose([*OVERLOADED[:-2], "engine.max_slots=64", "engine.queue_window=64", "seeds=1"])
    )
    space = space_from_config(
        {
            **SPACE,
            "max_num_seqs": {"low": 8, "high": 64, "scale": "log"},
            "w_prompt": {"low": 0.0, "high": 4.0},
        }
    )
    ev = Evaluator(sc, "parametric", "loop")
    est = PathwiseEstimator(ev, space, "soft", 0.3, 0.99, 0.05)
    assert est.cfg.relax_order
    z = space.point({**START, "w_prompt": 0.3})
    g, _ = est(z, 0.0)
    h = 1e-7
    e = np.eye(len(z))[3] * h
    fd = (est(z + e, 0.0)[1]["soft_lagrangian"] - est(z - e, 0.0)[1]["soft_lagrangian"]) / (2 * h)
    assert abs(g[3]) > 1e-3  # the order matters here
    np.testing.assert_allclose(g[3], fd, rtol=1e-5)


def test_order_swaps_settle_to_the_exchanged_times():
    """Closed forms of engine/relaxed/swap.py's settlement. Admissions: request 0 admitted at 2 s
    passed over request 1 (admitted at 5 s) with pair weight 0.1, so 1 moves by 0.1 x (2 - 5)
    and 0 by the opposite. Preemptions: request 2, preempted at 4 s in place of request 3
    (kept) with weight 0.25 and re-admitted at 10 s, completes 0.25 x 6 s sooner and 3 that
    much later; their first tokens move only if they came after the preemption (3's did, 2's
    did not); a victim not re-admitted since its preemption (request 1) moves no one."""
    nan = np.nan
    admitted_at = jnp.array([2.0, 5.0, 10.0, 1.0])
    swap_req = jnp.array([[1, -1], [-1, -1], [-1, -1], [-1, -1]])
    swap_p = jnp.array([[0.1, 0.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0]])
    np.testing.assert_allclose(swap.settle(admitted_at, swap_req, swap_p), [0.3, -0.3, 0, 0])
    first = jnp.array([2.5, 5.5, 3.0, 4.5])
    d_first, d_finish = swap.settle_victims(
        first,
        admitted_at,
        jnp.array([nan, 6.0, 4.0, nan]),
        jnp.array([-1, 0, 3, -1]),
        jnp.array([0.0, 0.5, 0.25, 0.0]),
    )
    np.testing.assert_allclose(d_finish, [0, 0, -1.5, 1.5])
    np.testing.assert_allclose(d_first, [0, 0, 0, 1.5])


def test_the_victim_pair_is_the_preemption_boundary():
    """engine/relaxed/swap.py's pair at a preemption: on the first preempted entry, the last kept
    request and p = sigma((s_j - s_i) / (tau x unit)), unit the running scores' range over
    their count less one; none without a preemption; 0 in value under st and hard."""
    from types import SimpleNamespace

    es = SimpleNamespace(status=jnp.array([RUNNING] * 4 + [WAITING] * 2), req=jnp.arange(10, 16))
    scores = jnp.array([3.0, 2.0, 1.5, 0.0, 9.0, 9.0])
    keep = jnp.array([True, True, False, False, False, False])
    p_soft = float(jax.nn.sigmoid((1.5 - 2.0) / (0.3 * 1.0)))
    for mode, p in (("soft", p_soft), ("st", 0.0), ("hard", 0.0)):
        ids, ps = swap.victim_pair(es, keep, scores, mode, 0.3)
        np.testing.assert_array_equal(ids, [-1, -1, 11, -1, -1, -1])
        np.testing.assert_allclose(ps, [0, 0, p, 0, 0, 0])
    # st: the soft weight's derivative in the victim's score
    dp = jax.grad(lambda s: swap.victim_pair(es, keep, s, "st", 0.3)[1][2])(scores)
    assert dp[2] == pytest.approx(p_soft * (1 - p_soft) / 0.3, rel=1e-6)
    ids, _ = swap.victim_pair(es, jnp.array([True] * 4 + [False] * 2), scores, "soft", 0.3)
    assert np.all(np.asarray(ids) == -1)


# KV-bound: Llama-3-70B on two H100s (1,740 KV blocks), long outputs predicted with noise:
# the running requests outgrow the cache and the lowest-priority ones are preempted
PREEMPTING = [
    "model=llama3_70b",
    "hardware.tp=2",
    "workload=poisson",
    "workload.rate=4",
    "workload.duration_s=10",
    "window.drain_s=60",
    "engine.max_slots=64",
    "engine.queue_window=64",
    "seeds=1",
    "workload.output.mean=1000",
    "workload.predictor.sigma=0.5",
    "policy.max_num_seqs=64",
]


@pytest.mark.slow
def test_soft_gradient_with_preemption_victims_matches_finite_differences():
    """With preemptions the relaxed order's victim pairs join its admission pairs: the soft
    gradient in w_pred still matches central differences of the soft objective."""
    sc = build(compose(PREEMPTING))
    space = space_from_config({"w_pred": {"low": 0.0, "high": 4.0}})
    ev = Evaluator(sc, "parametric", "loop")
    assert ev({"w_pred": np.array([2.0])})[0][0]["preemptions"] > 0
    est = PathwiseEstimator(ev, space, "soft", 0.3, 0.99, 0.05)
    z = space.point({"w_pred": 2.0})
    g, _ = est(z, 0.0)
    h = 1e-7
    fd = (est(z + h, 0.0)[1]["soft_lagrangian"] - est(z - h, 0.0)[1]["soft_lagrangian"]) / (2 * h)
    assert abs(g[0]) > 1e-3
    np.testing.assert_allclose(g[0], fd, rtol=1e-5)


# speculative decoding at low load (Llama-3-8B with a Llama-3.2-1B draft, acceptance 0.7):
# more draft tokens shorten decoding until the draft's passes cost more than they save
SPECULATIVE = [
    "workload=poisson",
    "workload.rate=6",
    "workload.duration_s=4",
    "window.drain_s=30",
    "engine.max_slots=64",
    "seeds=1",
    "speculation=draft",
]
SPEC_SPACE = {"spec_k": {"low": 0.0, "high": 8.0, "scale": "linear"}}


@pytest.mark.slow
def test_speculation_length_st_is_exact_and_soft_matches_finite_differences():
    sc = build(compose(SPECULATIVE))
    space = space_from_config(SPEC_SPACE)
    ev = Evaluator(sc, "fcfs", "loop")
    z = space.point({"spec_k": 2.5})
    assert_st_is_exact(sc, space, ev, z)
    soft = PathwiseEstimator(ev, space, "soft", 0.3, 0.99, 0.05)
    g, _ = soft(z, 0.0)
    h = 1e-6
    fd = (soft(z + h, 0.0)[1]["soft_lagrangian"] - soft(z - h, 0.0)[1]["soft_lagrangian"]) / (2 * h)
    assert abs(g[0]) > 1e-3  # the speculation length matters here
    np.testing.assert_allclose(g[0], fd, rtol=1e-5)


def test_queue_cap_brackets():
    # (lo, hi): the integer caps either side, a step of 10% of the cap and at least 1
    assert paired_difference.cap_bracket(28.5, 0.1) == (26, 30)
    assert paired_difference.cap_bracket(3.5, 0.1) == (2, 4)
    assert paired_difference.cap_bracket(1.5, 0.1) == (1, 2)  # one-sided: a cap of 0 rejects all
    assert paired_difference.cap_bracket(0.5, 0.1) == (0, 1)
    assert paired_difference.cap_bracket(100.0, 0.25) == (75, 125)


@pytest.mark.slow  # ~40 s on 2 cores; the default suite keeps the soft FD check
def test_queue_cap_column_is_the_paired_difference_of_the_soft_lagrangian(problem):
    """The queue cap's entry of the gradient: (L(hi) - L(lo)) / (hi - lo) x dcap/dz, with L
    the smoothed Lagrangian at the integer caps either side, computed here by hand from the
    estimator's own values; the other keys keep their forward-mode columns."""
    _, _, ev, _ = problem
    space = space_from_config({**SPACE, "queue_cap": {"low": 1, "high": 512, "scale": "log"}})
    est = PathwiseEstimator(ev, space, "st", 0.3, 0.99, 0.05, difference_step=0.1)
    cap = 16.5
    z = space.point({**START, "queue_cap": cap})
    before = ev.scenarios_simulated
    g, _ = est(z, 5.0)
    assert ev.scenarios_simulated - before == 3 * len(ev.scenario.traces)  # 1 + 2 paired runs
    lo, hi = paired_difference.cap_bracket(cap, 0.1)
    lagrangian = [
        est(space.point({**START, "queue_cap": c + 0.5}), 5.0)[1]["soft_lagrangian"]
        for c in (lo, hi)
    ]
    u = 1.0 / (1.0 + np.exp(-z[3]))  # the space's log scale: cap = exp(log 1 + log 512 u)
    dcap_dz = cap * np.log(512.0) * u * (1.0 - u)
    expect = (lagrangian[1] - lagrangian[0]) / (hi - lo) * dcap_dz
    assert abs(expect) > 1e-3  # the cap binds here
    assert g[3] == pytest.approx(expect, rel=1e-9)
    # the forward-mode columns are those of the same policy with the cap fixed, not tuned
    fixed = Evaluator(ev.scenario, "fcfs", "loop")
    fixed.base["queue_cap"] = cap
    g_fixed, _ = PathwiseEstimator(fixed, space_from_config(SPACE), "st", 0.3, 0.99, 0.05)(
        z[:3], 5.0
    )
    np.testing.assert_allclose(g[:3], g_fixed, rtol=1e-9)
    assert abs(g[0]) > 0.1


# a model cascade over three instances: one Llama-3-8B (the small pool) and two Llama-3-70B
# (TP 4), routed within the large pool by score; 8 req/s for 12 s
FLEET = [
    "+experiment=cascade",
    "engine.n_instances=3",
    "engine.routing=score",
    "workload.duration_s=12",
    "window.drain_s=60",
    "seeds=1",
]
FLEET_SPACE = {
    "route_w_work": {"low": 0.0, "high": 2.0, "scale": "linear"},
    "cascade_threshold": {"low": 0.0, "high": 1.0, "scale": "linear"},
}
FLEET_START = {"route_w_work": 0.5, "cascade_threshold": 0.45}


@pytest.fixture(scope="module")
def fleet():
    sc = build(compose(FLEET))
    space = space_from_config(FLEET_SPACE)
    ev = Evaluator(sc, "fcfs", "loop")
    # sharp SLO checks: the smoothed objective is the reported one (checked below)
    est = PathwiseEstimator(ev, space, "st", 0.3, 0.0, 1e-6, difference_step=0.1)
    return sc, space, ev, est


@pytest.mark.slow
def test_several_instances_st_is_exact(fleet):
    """With several instances (a cascade, a score router) each instance's iterations are
    relaxed as one instance's: the st engine's times and final models are the exact
    simulator's."""
    sc, space, ev, _ = fleet
    assert_st_is_exact(sc, space, ev, space.point(FLEET_START))


@pytest.mark.slow  # ~40 s on 2 cores, a compilation of its own
def test_several_instances_gradient_and_the_soft_objective(fleet):
    """Through a cascade over three instances: with sharp SLO checks the smoothed objective is
    the reported one, useful tokens counted by the model whose answer is final (a small answer
    that would fail is retried on the large model). The routing weight's and the cascade
    threshold's entries of the gradient are (L(hi) - L(lo)) / (hi - lo) x dvalue/dz, with the
    key a step of 10% of its range either side and the other keys at the point, from the
    estimator's own values."""
    _, space, ev, est = fleet
    z = space.point(FLEET_START)
    assert np.any(est.weights[:, 0] != est.weights[:, 1])  # the final model matters
    before = ev.scenarios_simulated
    g, value = est(z, 0.0)
    assert ev.scenarios_simulated - before == 1 + 2 * 2  # one run, two paired per key
    metrics = ev({k: np.array([v]) for k, v in space.values(z).items()})[0][0]
    assert value["soft_objective"] == pytest.approx(Objective().value(metrics), abs=1e-9)
    assert np.all(np.isfinite(g))
    for k, key in enumerate(FLEET_SPACE):
        dim = FLEET_SPACE[key]
        lo, hi = paired_difference.bracket(space.dims[k], FLEET_START[key], 0.1)
        step = 0.1 * (dim["high"] - dim["low"])
        assert (lo, hi) == pytest.approx((FLEET_START[key] - step, FLEET_START[key] + step))
        lagrangian = [
            pathwise.per_scenario(space.point({**FLEET_START, key: v}), *est.run_args(z, 0.0))[0][
                0, 2
            ]
            for v in (lo, hi)
        ]
        u = 1.0 / (1.0 + np.exp(-z[k]))
        expect = (
            (lagrangian[1] - lagrangian[0]) / (hi - lo) * (dim["high"] - dim["low"]) * u * (1.0 - u)
        )
        assert g[k] == pytest.approx(expect, rel=1e-9, abs=1e-12)
    assert g[1] != 0.0  # the threshold moves requests between the models here


def exact_objective(ev, key, values):
    """[len(values)] the tuner's objective of the exact simulator, mean over the scenario's
    seeds, at each value of one policy key."""
    obj = Objective()
    return np.array(
        [np.mean([obj.value(m) for m in col]) for col in ev({key: np.asarray(values, np.float64)})]
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "overrides, key, space, points",
    [
        # benchmarks/README.md (bench_pathwise.py, tables 3 and 4)
        (
            [
                *SPECULATIVE[:2],
                "workload.duration_s=10",
                *SPECULATIVE[3:5],
                "seeds=2",
                SPECULATIVE[-1],
            ],
            "spec_k",
            SPEC_SPACE,
            (2.5, 6.5),
        ),
        (
            [
                "workload=poisson",
                "workload.rate=20",
                "workload.duration_s=10",
                "window.drain_s=30",
                "engine.max_slots=128",
                "seeds=2",
                "slo.ttft_s=0.25",
            ],
            "max_num_batched_tokens",
            {"max_num_batched_tokens": {"low": 64, "high": 16384, "scale": "log"}},
            (192.5, 768.5),
        ),
    ],
)
def test_progress_gradients_follow_the_exact_objective(overrides, key, space, points):
    """The speculation length and the token budget act through a request's pace (engine/
    pace.py): at a point below the exact objective's peak and one above it, the st gradient
    has the sign of the exact objective's difference between the neighbouring integers."""
    sc = build(compose(overrides))
    space = space_from_config(space)
    ev = Evaluator(sc, "fcfs", "loop")
    st = PathwiseEstimator(ev, space, "st", 0.3, 0.99, 0.05)
    for x in points:
        lo, hi = np.floor(x) * 0.75 + 0.5, np.floor(x) * 1.25 + 0.5  # a step either side
        if key == "spec_k":
            lo, hi = np.floor(x) - 0.5, np.floor(x) + 1.5
        f_lo, f_hi = exact_objective(ev, key, [lo, hi])
        g, _ = st(space.point({key: x}), 0.0)
        assert np.sign(g[0]) == np.sign(f_hi - f_lo), (x, g, f_lo, f_hi)


@pytest.mark.slow
@pytest.mark.parametrize(
    "rate, max_num_seqs, cap",
    [
        # benchmarks/README.md (bench_pathwise.py, table 6): a short queue costs requests where
        # the engine keeps up (rate 30, no sequence cap), and saves the SLOs of the rest where
        # it cannot (rate 35, 48 sequences)
        (30, 256.5, 3.5),
        (35, 48.5, 28.5),
    ],
)
def test_queue_cap_gradient_follows_the_exact_objective(rate, max_num_seqs, cap):
    """At a queue cap below the exact objective's plateau and one above its peak, the paired
    difference has the sign of the exact objective's difference a quarter of the cap away."""
    sc = build(
        compose(
            [
                OVERLOADED[0],
                f"workload.rate={rate}",
                "workload.duration_s=20",
                *OVERLOADED[3:],
                f"policy.max_num_seqs={max_num_seqs}",
            ]
        )
    )
    space = space_from_config({"queue_cap": {"low": 1, "high": 512, "scale": "log"}})
    ev = Evaluator(sc, "fcfs", "loop")
    f_lo, f_hi = exact_objective(
        ev, "queue_cap", [np.floor(cap) * 0.75 + 0.5, np.floor(cap) * 1.25 + 0.5]
    )
    g, _ = PathwiseEstimator(ev, space, "st", 0.3, 0.99, 0.05)(space.point({"queue_cap": cap}), 0.0)
    assert abs(f_hi - f_lo) > 0.02  # a clear slope
    assert np.sign(g[0]) == np.sign(f_hi - f_lo), (g, f_lo, f_hi)


@pytest.mark.slow
def test_priority_weight_gradient_follows_the_exact_objective():
    """Shortest-prompt-first pays in an overloaded engine whose sequence cap binds: the exact
    objective rises with w_prompt, and the st gradient through order swaps (engine/relaxed/swap.py)
    is positive (benchmarks/README.md, table 5)."""
    sc = build(
        compose(
            [
                *OVERLOADED[:2],
                "workload.duration_s=20",
                "window.drain_s=60",
                "engine.max_slots=64",
                "engine.queue_window=64",
                "seeds=2",
                "policy.max_num_seqs=32.5",
            ]
        )
    )
    space = space_from_config({"w_prompt": {"low": 0.0, "high": 4.0, "scale": "linear"}})
    ev = Evaluator(sc, "parametric", "loop")
    f = exact_objective(ev, "w_prompt", [1.0, 3.0])
    assert f[1] > f[0]
    st = PathwiseEstimator(ev, space, "st", 0.3, 0.99, 0.05)
    for w in (1.0, 2.5):
        g, _ = st(space.point({"w_prompt": w}), 0.0)
        assert g[0] > 0, (w, g)


@pytest.mark.slow  # the default suite's 10-minute budget
def test_gradients_are_finite_on_a_random_batch(problem):
    # random policy points anywhere in the space (limits at their bounds included) and
    # multipliers, on both seeds' workloads, in both modes
    rng = np.random.default_rng(7)
    for mode in ("st", "soft"):
        est = estimator(problem, mode)
        for z in rng.normal(0, 2.0, size=(2, len(SPACE))):
            g, value = est(z, float(rng.uniform(0, 50)))
            assert np.all(np.isfinite(g)), (mode, z, g)
            assert np.isfinite(value["soft_lagrangian"])


@pytest.mark.slow  # the default suite's 10-minute budget
def test_cvar_takes_the_worst_scenario(problem):
    _, space, ev, z0 = problem
    est = estimator(problem, "st")
    values, jac = pathwise.per_scenario(z0, *est.run_args(z0, 0.0))
    worst = int(np.argmin(values[:, 2]))
    assert values[worst, 2] < values[1 - worst, 2]  # the two seeds differ
    g, value = PathwiseEstimator(ev, space, "st", 0.3, 0.99, 0.05, "cvar", 0.5)(z0, 0.0)
    assert value["soft_lagrangian"] == pytest.approx(float(values[worst, 2]), rel=1e-12)
    np.testing.assert_allclose(g, np.asarray(jac[worst, 2]), rtol=1e-9)
    g_mean, _ = est(z0, 0.0)
    np.testing.assert_allclose(g_mean, np.asarray(jac[:, 2]).mean(0), rtol=1e-9)


def test_changing_the_point_does_not_recompile(problem):
    _, _, _, z0 = problem
    est = estimator(problem, "st")
    est(z0, 0.0)
    size = pathwise._per_scenario._cache_size()
    est(z0 + 0.3, 5.0)
    assert pathwise._per_scenario._cache_size() == size


def test_unsupported_scenarios_are_refused_by_key(problem):
    sc, _space, ev, _ = problem
    with pytest.raises(ConfigError, match="engine.prefill_instances"):
        pathwise.relaxed_engine(
            dataclasses.replace(sc.engine, n_instances=2, prefill_instances=1), "st", 0.3
        )
    with pytest.raises(ConfigError, match="tune.relax"):
        pathwise.relaxed_engine(sc.engine, "fuzzy", 0.3)
    with pytest.raises(ConfigError, match="tune.space.kv_compress_ratio"):
        PathwiseEstimator(
            ev,
            space_from_config({"kv_compress_ratio": {"low": 1, "high": 4}}),
            "st",
            0.3,
            0.99,
            0.05,
        )
    with pytest.raises(ConfigError, match="tune.difference_step"):
        PathwiseEstimator(ev, space_from_config(SPACE), "st", 0.3, 0.99, 0.05, difference_step=0.0)


@pytest.mark.slow
def test_pathwise_and_es_agree_in_direction(problem):
    """The documented scenario (benchmarks/README.md, bench_pathwise.py): the st gradient of
    the smoothed objective and an ES estimate of the exact objective's gradient."""
    _sc, space, ev, z0 = problem
    g_st, _ = estimator(problem, "st")(z0, 0.0)
    obj = Objective()
    sigma, pairs = 0.15, 16
    eps = es.perturbations(1, 0, pairs, len(z0))
    cols = ev(space.values(es.population(z0, eps, sigma)))
    f = np.array([np.mean([obj.value(m) for m in col]) for col in cols])
    g_es = es.gradient(f[1 : 1 + pairs], f[1 + pairs :], eps, sigma, rank_shaping=False)
    assert cosine(g_st, g_es) >= 0.9, (g_st, g_es)


@pytest.mark.slow  # the default suite's 10-minute budget on 2 cores
def test_tune_pathwise_improves_the_objective(tmp_path):
    from servetune.tuning import tune

    # the module's scenario and space (the default's less queue_cap, whose paired difference
    # test_queue_cap_column_... checks): the compiled simulators are reused
    res = tune(
        [
            "tune=pathwise",
            *OVERLOADED,
            "output.progress=false",
            "tune.iterations=3",
            "tune.eval.seeds=2",
            "tune.space.max_num_seqs.high=256",
            "tune.space.queue_cap=null",
            "policy.max_num_seqs=24.5",
            "tune.export=false",
        ],
        out_dir=tmp_path,
        log=lambda m: None,
    )
    h = res.history
    assert h["center_objective"].iloc[-1] > h["center_objective"].iloc[0]
    assert h["policy.max_num_seqs"].iloc[-1] > 24.5  # admitting more pays here
    assert np.all(np.isfinite(h["soft_lagrangian"]))
    ev = res.evaluation.set_index(["policy", "split"])
    assert (
        ev.loc[("tuned", "heldout_seeds"), "objective"]
        > ev.loc[("start", "heldout_seeds"), "objective"]
    )
