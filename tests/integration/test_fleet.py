"""The autoscaler in the loop (engine/autoscale.py): every request ends once over random fleets,
a fleet held at N replicas is today's N instances, a cold start that outlasts the load leaves
the result of one replica, and changing the autoscaler's numbers does not recompile."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import yaml
from helpers import assert_export_round_trips, linear_params, random_traces, trace_of
from scipy import stats

from servetune.config.scenario import build, stack_workloads
from servetune.core.errors import ConfigError
from servetune.core.types import COMPLETED, EngineConfig, FleetParams
from servetune.deploy import autoscaler_export, export
from servetune.engine.loop import run_chunk_batch
from servetune.run.api import compose, simulate_batch
from servetune.run.driver import rollout
from servetune.run.fleet_metrics import provisioned_replica_s, replicas_over_time, step_integral
from servetune.tuning import tune
from servetune.tuning.space import space_from_config

BASE = dict(
    max_slots=8,
    queue_window=16,
    block_size=16,
    max_model_len=512,
    cost_form="linear",
    outbox=64,
    routing="jsq",
)
FIXED = EngineConfig(**BASE, n_instances=3)
FLEET = EngineConfig(**BASE, n_instances=3, autoscale=True, autoscale_log=4096)
# scale-down at once with requests re-queued, and spot replicas (engine/requeue.py, spot.py)
LEAVING = dataclasses.replace(FLEET, autoscale_requeue=True, autoscale_spot=True)


def fleet_params(p=1, **kw):
    """FleetParams [p]: HPA's defaults, scaled to a short run."""
    base = dict(
        min_replicas=1.0,
        max_replicas=3.0,
        target=2.0,
        tolerance=0.1,
        interval_s=1.0,
        scale_up_window_s=0.0,
        scale_down_window_s=5.0,
        scale_up_pods=4.0,
        scale_up_percent=100.0,
        scale_down_pods=0.0,
        scale_down_percent=100.0,
        cold_start_s=2.0,
        spot_share=0.0,
        spot_preemptions_per_hour=0.0,
    )
    base.update(kw)
    return FleetParams(
        **{k: jnp.broadcast_to(jnp.asarray(v, jnp.float64), (p,)) for k, v in base.items()}
    )


def params(p=1, fleet=None):
    """Params [p]: a linear cost where a replica serves about 10 requests/s."""
    one = linear_params(base_s=0.01, per_decode_seq_s=0.002, per_prefill_token_s=0.0002)
    batched = jax.tree.map(lambda x: jnp.broadcast_to(x, (p,)), one)
    return dataclasses.replace(batched, fleet=fleet)


def run(traces, prm, cfg):
    wl = stack_workloads(traces, [t.output.astype(float) for t in traces], 1e6, cfg)
    return rollout(wl, prm, cfg, [len(t) for t in traces])


def _outcome(res):
    return res.end_state, res.first_token, res.finish


def test_every_request_ends_once_over_random_fleets():
    rng = np.random.default_rng(7)
    traces = random_traces(rng, n_traces=2, n=150)
    p = 6
    fp = fleet_params(
        p,
        min_replicas=rng.integers(1, 3, p).astype(float),
        max_replicas=np.full(p, 3.0),
        target=rng.uniform(0.5, 4.0, p),
        interval_s=rng.uniform(0.2, 2.0, p),
        scale_down_window_s=rng.uniform(0.0, 4.0, p),
        scale_up_pods=rng.integers(1, 3, p).astype(float),
        scale_down_percent=rng.uniform(10.0, 100.0, p),
        cold_start_s=rng.uniform(0.0, 3.0, p),
    )
    results = run(traces, params(p, fp), FLEET)  # raises if a request is reported twice
    scaled = 0
    for s, row in enumerate(results):
        for k, res in enumerate(row):
            assert int(res.stats["invariants"]) == 0, (s, k)
            assert np.all(res.end_state == COMPLETED), (s, k)
            counts = replicas_over_time(res.stats)
            serving = counts["provisioned"] - counts["draining"]
            assert np.all(serving >= float(fp.min_replicas[k])), (s, k)
            assert np.all(counts["provisioned"] <= FLEET.n_instances)
            assert np.all(np.diff(counts["t_s"]) >= 0)
            scaled += res.stats["fleet_scale_ups"] > 0 and res.stats["fleet_scale_downs"] > 0
    assert scaled >= 3, "too few fleets scaled both ways to test anything"


def test_every_request_ends_once_when_replicas_leave_at_once_or_are_preempted():
    rng = np.random.default_rng(11)
    traces = random_traces(rng, n_traces=2, n=150)
    p = 6
    fp = fleet_params(
        p,
        min_replicas=rng.integers(1, 3, p).astype(float),
        target=rng.uniform(0.5, 4.0, p),
        interval_s=rng.uniform(0.2, 1.0, p),
        scale_down_window_s=rng.uniform(0.0, 2.0, p),
        cold_start_s=rng.uniform(0.0, 2.0, p),
        spot_share=rng.choice([0.0, 0.5, 1.0], p),
        spot_preemptions_per_hour=rng.uniform(36.0, 360.0, p),  # every 10 to 100 s
    )
    results = run(traces, params(p, fp), LEAVING)  # raises if a request is reported twice
    preempted = requeued = 0
    for s, row in enumerate(results):
        for k, res in enumerate(row):
            assert int(res.stats["invariants"]) == 0, (s, k)
            assert np.all(res.end_state == COMPLETED), (s, k)
            counts = replicas_over_time(res.stats)
            assert np.all(counts["spot"] <= counts["provisioned"]), (s, k)
            assert np.all(counts["provisioned"] <= LEAVING.n_instances), (s, k)
            if float(fp.spot_share[k]) == 0.0:
                assert res.stats["fleet_preemptions"] == 0, (s, k)
            preempted += res.stats["fleet_preemptions"]
            requeued += res.stats["fleet_requeued"]
            # a re-queued request computes its tokens again: the work exceeds the tokens
            assert np.all(res.tokens_computed >= res.generated)
    assert preempted >= 10 and requeued >= 10, "too few replicas left to test anything"


def test_spot_preemptions_follow_their_rate():
    """Three spot replicas held up, replaced at once (cold start 0): each evaluation preempts
    each with probability 1 - exp(-rate x interval): a binomial count."""
    tr = trace_of([(0.25 * k, 50, 20) for k in range(400)])  # 100 s of light traffic
    rate, interval = 1800.0, 0.5  # per replica-hour; p = 1 - exp(-0.25)
    fp = fleet_params(
        min_replicas=3.0,
        interval_s=interval,
        cold_start_s=0.0,
        spot_share=1.0,
        spot_preemptions_per_hour=rate,
    )
    res = run([tr], params(fleet=fp), LEAVING)[0][0]
    assert np.all(res.end_state == COMPLETED)
    evaluations = int(res.clock_s // interval)
    prob = 1.0 - np.exp(-rate * interval / 3600.0)
    count = res.stats["fleet_preemptions"]
    assert stats.binomtest(count, 3 * evaluations, prob).pvalue > 1e-3, (count, evaluations)
    # each preemption restarts its replica cold from the evaluation until its clock plus the
    # cold start (0 here): the counter and the log's integral agree
    log = res.stats["fleet_log"]
    cold_s = step_integral(log, "cold", 0.0, res.clock_s)
    assert res.stats["fleet_cold_s"] == pytest.approx(cold_s, rel=1e-9, abs=1e-12)
    assert cold_s < 0.1 * count  # under an iteration each (idle replicas: none)


def test_spot_replicas_never_preempted_serve_as_on_demand_ones():
    traces = random_traces(np.random.default_rng(3), n_traces=1, n=120)
    base = fleet_params(target=1.0, interval_s=0.5, cold_start_s=0.5)
    plain = run(traces, params(fleet=base), FLEET)[0][0]
    spot = dataclasses.replace(base, spot_share=jnp.ones(1), spot_preemptions_per_hour=jnp.zeros(1))
    calm = run(traces, params(fleet=spot), LEAVING)[0][0]
    for a, b in zip(_outcome(plain), _outcome(calm), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12)
    assert calm.stats["fleet_preemptions"] == 0
    log = replicas_over_time(calm.stats)
    np.testing.assert_array_equal(log["spot"], log["provisioned"])


def test_a_scale_down_at_once_hands_its_requests_on_and_costs_less_than_a_drain():
    """A burst, then quiet: scaled-down replicas holding long requests go off at once rather
    than after their last token; every request still completes, some of them re-queued."""
    rng = np.random.default_rng(2)
    burst = [(rng.uniform(0.0, 2.0), 100, 400) for _ in range(60)]
    tr = trace_of(sorted(burst))
    fp = fleet_params(target=2.0, interval_s=0.5, scale_down_window_s=0.0, cold_start_s=0.2)
    graceful = run([tr], params(fleet=fp), FLEET)[0][0]
    at_once = run([tr], params(fleet=fp), dataclasses.replace(LEAVING, autoscale_spot=False))
    at_once = at_once[0][0]
    assert np.all(at_once.end_state == COMPLETED) and np.all(graceful.end_state == COMPLETED)
    assert at_once.stats["fleet_requeued"] > 0 and graceful.stats["fleet_requeued"] == 0
    assert np.sum(at_once.tokens_computed) > np.sum(graceful.tokens_computed)  # redone work
    span = max(at_once.clock_s, graceful.clock_s)
    replica_s = lambda r: provisioned_replica_s(r.stats, 0.0, span)
    assert replica_s(at_once) < replica_s(graceful)


def test_a_fleet_held_at_n_replicas_is_n_instances():
    traces = random_traces(np.random.default_rng(3), n_traces=1, n=200)
    fixed = run(traces, params(), FIXED)[0][0]
    held = run(traces, params(fleet=fleet_params(min_replicas=3.0, max_replicas=3.0)), FLEET)
    held = held[0][0]
    np.testing.assert_array_equal(fixed.end_state, held.end_state)
    for a, b in zip(_outcome(fixed)[1:], _outcome(held)[1:], strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-9)
    np.testing.assert_allclose(fixed.stats["busy_s"], held.stats["busy_s"], rtol=1e-12)
    assert held.stats["fleet_scale_ups"] == 0 and held.stats["fleet_scale_downs"] == 0


def _burst(n=120, until=3.0):
    rng = np.random.default_rng(0)
    arrival = np.sort(rng.uniform(0.0, until, n))
    return trace_of([(a, int(rng.integers(20, 200)), int(rng.integers(20, 80))) for a in arrival])


def test_no_request_reaches_a_replica_before_its_cold_start_ends():
    """Arrivals end at 3 s; the replicas started at the first evaluation (1 s) serve from
    101 s: every request is served by replica 0 alone, as by one instance."""
    tr = _burst()
    one = run([tr], params(), dataclasses.replace(FIXED, n_instances=1))[0][0]
    cold = fleet_params(interval_s=1.0, target=1.0, cold_start_s=100.0)
    slow = run([tr], params(fleet=cold), FLEET)[0][0]
    assert slow.stats["fleet_scale_ups"] >= 1  # it did scale up, in vain
    np.testing.assert_array_equal(one.end_state, slow.end_state)
    np.testing.assert_allclose(one.finish, slow.finish, rtol=1e-12)
    assert np.all(slow.stats["busy_s"][1:] == 0.0)
    # the run ends with its last request, not where the cold starts would have ended
    assert slow.clock_s == pytest.approx(one.clock_s, rel=1e-12) and slow.clock_s < 100.0
    # a short cold start lets the new replicas take part, and the burst clears sooner
    warm = run(
        [tr], params(fleet=fleet_params(interval_s=1.0, target=1.0, cold_start_s=0.2)), FLEET
    )
    warm = warm[0][0]
    assert np.all(warm.stats["busy_s"][1:] > 0.0)
    assert np.max(warm.finish) < np.max(slow.finish)


def test_new_autoscaler_numbers_do_not_recompile():
    traces = random_traces(np.random.default_rng(5), n_traces=1, n=60)
    run(traces, params(fleet=fleet_params(target=1.0)), FLEET)
    compiled = run_chunk_batch._cache_size()
    run(traces, params(fleet=fleet_params(target=3.0, interval_s=0.7, cold_start_s=0.1)), FLEET)
    assert run_chunk_batch._cache_size() == compiled, "new autoscaler numbers recompiled"


# ---- through the config: fleet.* keys, the cost of what was provisioned ----

SMALL = [
    "workload=poisson",
    "workload.rate=12",
    "workload.duration_s=120",
    "workload.prompt.mean=300",
    "workload.output.mean=80",
    "engine.routing=jsq",
]


def test_a_fixed_fleet_costs_what_n_instances_cost_and_autoscaling_less():
    fixed = simulate_batch(build(compose(SMALL + ["engine.n_instances=3"]))).metrics[0]
    held = simulate_batch(
        build(
            compose(
                SMALL + ["fleet.autoscale=true", "fleet.min_replicas=3", "fleet.max_replicas=3"]
            )
        )
    ).metrics[0]
    for key in ("cost_usd", "goodput_rps", "ttft_p99_s", "energy_j", "busy_fraction", "mfu"):
        assert held[key] == pytest.approx(fixed[key], rel=1e-9), key
    assert held["mean_replicas"] == pytest.approx(3.0)
    scaled = simulate_batch(
        build(
            compose(
                SMALL
                + [
                    "fleet.autoscale=true",
                    "fleet.max_replicas=3",
                    "fleet.metric=num_requests_running",
                    "fleet.target=8",
                    "fleet.cold_start_s=20",
                ]
            )
        )
    ).metrics[0]
    assert 1.0 < scaled["mean_replicas"] < 3.0
    assert scaled["cost_usd"] < fixed["cost_usd"]
    assert scaled["cold_start_replica_s"] == pytest.approx(20.0 * scaled["scale_ups"])
    # what a replica-second costs: the H100's price per hour
    per_s = scaled["cost_usd"] / (scaled["replica_hours"] * 3600.0)
    assert per_s == pytest.approx(build(compose(SMALL)).labels["price_per_gpu_hour"] / 3600.0)


def test_spot_replicas_cost_their_price_ratio():
    """All replicas spot, never preempted, at 0.4 of the price: the same run at 0.4 the cost."""
    fleet = ["fleet.autoscale=true", "fleet.max_replicas=3", "fleet.target=2"]
    fleet += ["fleet.cold_start_s=10"]
    plain = simulate_batch(build(compose(SMALL + fleet))).metrics[0]
    spot = fleet + ["fleet.spot_share=1", "fleet.spot_preemptions_per_hour=0"]
    cheap = simulate_batch(build(compose(SMALL + spot + ["fleet.spot_price_ratio=0.4"])))
    cheap = cheap.metrics[0]
    assert cheap["goodput_rps"] == pytest.approx(plain["goodput_rps"], rel=1e-12)
    assert cheap["replica_hours"] == pytest.approx(plain["replica_hours"], rel=1e-12)
    assert cheap["spot_replica_hours"] == pytest.approx(cheap["replica_hours"], rel=1e-12)
    assert cheap["cost_usd"] == pytest.approx(0.4 * plain["cost_usd"], rel=1e-9)
    assert cheap["spot_preemptions"] == 0 and plain["spot_replica_hours"] == 0.0


@pytest.mark.parametrize(
    "overrides, key",
    [
        (["fleet.min_replicas=5", "fleet.max_replicas=3"], r"fleet\.min_replicas"),
        (["fleet.max_replicas=1"], r"fleet\.max_replicas"),
        (["fleet.interval_s=0"], r"fleet\.interval_s"),
        (["fleet.interval_s=-5"], r"fleet\.interval_s"),
        (["fleet.target=0"], r"fleet\.target"),
        (["fleet.metric=gpu_util"], r"fleet\.metric"),
        (["fleet.metric=kv_cache_usage_perc", "fleet.target=80"], r"fleet\.target"),
        (["fleet.cold_start_s=1000"], r"fleet\.cold_start_s"),
        (["fleet.acquire_s=5000"], r"fleet\.acquire_s"),
        (["fleet.load_gb_per_s=0"], r"fleet\.load_gb_per_s"),
        (["fleet.scale_down_window_s=2000"], r"fleet\.scale_down_window_s"),
        (["fleet.scale_up_pods=1.5"], r"fleet\.scale_up_pods"),
        (["fleet.scale_down_percent=150"], r"fleet\.scale_down_percent"),
        (["engine.n_instances=2"], r"engine\.n_instances"),
        (["engine.n_instances=5", "engine.prefill_instances=1"], r"fleet\.autoscale"),
        (["+fleet.max_replica=3"], r"fleet\.max_replica"),
        (["fleet.interval_s=0.5"], r"fleet\.interval_s"),
        (["fleet.scale_down=kill"], r"fleet\.scale_down"),
        (["fleet.spot_share=1.5"], r"fleet\.spot_share"),
        (["fleet.spot_share=0.5"], r"fleet\.spot_preemptions_per_hour: not set"),
        (
            ["fleet.spot_share=0.5", "fleet.spot_preemptions_per_hour=1"],
            r"fleet\.spot_price_ratio: not set",
        ),
        (
            [
                "fleet.spot_share=0.5",
                "fleet.spot_preemptions_per_hour=-1",
                "fleet.spot_price_ratio=0.4",
            ],
            r"fleet\.spot_preemptions_per_hour",
        ),
        (
            [
                "fleet.spot_share=0.5",
                "fleet.spot_preemptions_per_hour=1",
                "fleet.spot_price_ratio=0",
            ],
            r"fleet\.spot_price_ratio",
        ),
        (["fleet.scale_down_window_s=4000", "fleet.history=1000"], r"scale_down_window_s"),
        (
            ["fleet.interval_s=10", "tune.space.fleet={scale_down_window_s: {low: 0, high: 900}}"],
            r"tune\.space\.fleet\.scale_down_window_s: 900 s",
        ),
        (
            [
                "fleet.metric=kv_cache_usage_perc",
                "fleet.target=0.8",
                "tune.space.fleet={target: {low: 0.5, high: 2}}",
            ],
            r"tune\.space\.fleet\.target",
        ),
    ],
)
def test_bad_fleet_settings_are_refused_by_key(overrides, key):
    with pytest.raises(ConfigError, match=key):
        build(
            compose(
                SMALL
                + ["workload.duration_s=60", "window.drain_s=300", "fleet.autoscale=true"]
                + overrides
            )
        )


def test_the_export_writes_the_autoscaler_beside_the_vllm_arguments(tmp_path):
    cfg = compose(
        SMALL
        + ["fleet.autoscale=true", "fleet.max_replicas=6", "fleet.target=3", "fleet.tolerance=0.2"]
    )
    scenario = build(cfg)
    fleet = export.fleet_values(scenario)
    assert fleet["max_replicas"] == 6.0 and fleet["metric"] == "num_requests_waiting"
    paths = export.write_export(
        tmp_path / "export", {}, "fcfs", {}, deploy=export.deployment(cfg, scenario), fleet=fleet
    )
    hpa = yaml.safe_load(paths["hpa"].read_text())
    keda = yaml.safe_load(paths["keda"].read_text())
    autoscaler_export.validate(hpa, "HorizontalPodAutoscaler")
    autoscaler_export.validate(keda, "ScaledObject")
    assert hpa["spec"]["maxReplicas"] == 6 and keda["spec"]["maxReplicaCount"] == 6
    assert (
        hpa["spec"]["scaleTargetRef"]["name"] == "vllm-meta-llama-3-8b"
    )  # meta-llama/Meta-Llama-3-8B
    assert (tmp_path / "export" / "vllm_args.json").is_file()
    # without an autoscaler, no autoscaler files
    plain = export.write_export(tmp_path / "plain", {}, "fcfs", {}, fleet=None)
    assert "hpa" not in plain and not (tmp_path / "plain" / "hpa.yaml").exists()


def test_the_tuner_moves_the_autoscaler_with_the_engine_and_exports_it(tmp_path):
    res = tune(
        SMALL
        + [
            "workload.duration_s=60",
            "window.drain_s=60",
            "output.progress=false",
            "tune.pairs=2",
            "tune.eval.seeds=0",
            "tune.eval.sensitivity=false",
            "tune.iterations=1",
            "tune.export_policy=tuned",  # the tuned point's export, whatever the verdict
            "fleet.autoscale=true",
            "fleet.max_replicas=3",
            "fleet.cold_start_s=10",
            "tune.space.max_num_batched_tokens=null",
            "tune.space.watermark=null",
            "tune.space.queue_cap=null",
            "tune.space.fleet={target: {low: 0.5, high: 16}, max_replicas: {low: 1, high: 3}}",
        ],
        out_dir=tmp_path,
        log=lambda _: None,
    )
    assert {"max_num_seqs", "fleet.target", "fleet.max_replicas"} <= set(res.tuned)
    hpa = yaml.safe_load((tmp_path / "export" / "hpa.yaml").read_text())
    assert hpa["spec"]["maxReplicas"] == int(np.floor(res.tuned["fleet.max_replicas"] + 0.5))
    target = autoscaler_export.quantity_number(
        hpa["spec"]["metrics"][0]["pods"]["target"]["averageValue"]
    )
    assert target == pytest.approx(res.tuned["fleet.target"], rel=1e-3)
    shown = export.as_deployed(res.tuned)  # what the CLI prints: as simulated, counts whole
    assert shown["fleet.max_replicas"] == hpa["spec"]["maxReplicas"]
    policy = yaml.safe_load((tmp_path / "export" / "tuned_policy.yaml").read_text())
    assert not any(k.startswith("fleet") for k in policy)
    # the folder exports again, through the tuner's own convention: the same files
    assert_export_round_trips(tmp_path, tmp_path / "again")
    with pytest.raises(ConfigError, match=r"tune\.space\.fleet\.cold_start_s: not a tunable"):
        space_from_config({"fleet": {"cold_start_s": {"low": 1, "high": 2}}})
    with pytest.raises(ConfigError, match=r"tune\.space\.fleet\.target: got \[0, 1\]"):
        space_from_config({"fleet": {"target": {"low": 0, "high": 1, "scale": "linear"}}})


def test_fleet_keys_are_checked_with_the_autoscaler_off_and_tuning_it_needs_it(tmp_path):
    with pytest.raises(ConfigError, match=r"fleet\.taget: unknown key"):
        build(compose(SMALL + ["+fleet.taget=3"]))
    with pytest.raises(ConfigError, match=r"tune\.space\.fleet: tunes fleet\.target.*autoscale"):
        tune(
            SMALL + ["tune.space.fleet={target: {low: 1, high: 8}}", "output.progress=false"],
            out_dir=tmp_path,
            log=lambda _: None,
        )
