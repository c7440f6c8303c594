"""The autoscaler's pure functions (engine/autoscale.py) on hand-built fleets, against
Kubernetes' HPA algorithm as its documentation states it: the AverageValue recommendation and
its tolerance, the stabilization windows, the Pods/Percent step limits, which replicas a
scale-down removes, and graceful drain."""

import dataclasses

import jax.numpy as jnp
import numpy as np
import pytest

from servetune.core.types import (
    EMPTY,
    REPLICA_DRAINING,
    REPLICA_OFF,
    REPLICA_SERVING,
    RUNNING,
    WAITING,
    EngineConfig,
    FleetParams,
    empty_entries,
)
from servetune.engine import autoscale

CFG = EngineConfig(
    max_slots=4,
    queue_window=4,
    n_instances=5,
    autoscale=True,
    autoscale_history=8,
    autoscale_log=32,
)


def fleet_params(**kw):
    base = dict(
        min_replicas=1.0,
        max_replicas=5.0,
        target=4.0,
        tolerance=0.1,
        interval_s=15.0,
        scale_up_window_s=0.0,
        scale_down_window_s=300.0,
        scale_up_pods=4.0,
        scale_up_percent=100.0,
        scale_down_pods=0.0,
        scale_down_percent=100.0,
        cold_start_s=60.0,
        spot_share=0.0,
        spot_preemptions_per_hour=0.0,
    )
    base.update(kw)
    return FleetParams(**{k: jnp.float64(v) for k, v in base.items()})


def fleet(phase, ready_at=None, **kw):
    f = autoscale.init(fleet_params(**kw), CFG, jnp.float64(0.0))
    ready = jnp.zeros(5) if ready_at is None else jnp.asarray(ready_at, jnp.float64)
    return f.replace(phase=jnp.asarray(phase, jnp.int32), ready_at=ready)


def test_recommendation_is_ceil_of_sum_over_target_outside_the_tolerance():
    fp = fleet_params(target=4.0, tolerance=0.1)
    # 2 replicas, 8.5 waiting: ratio 1.0625 within 0.1 -> stays at 2
    assert float(autoscale.recommend(8.5, 2.0, fp)) == 2.0
    # 9 waiting: ratio 1.125 -> ceil(9 / 4) = 3
    assert float(autoscale.recommend(9.0, 2.0, fp)) == 3.0
    # 0 waiting: ceil(0) = 0 (clamped to min_replicas later)
    assert float(autoscale.recommend(0.0, 3.0, fp)) == 0.0
    # exactly 12 over 4 per replica: 3, no float round-up to 4
    assert float(autoscale.recommend(12.0, 1.0, fp)) == 3.0


def test_scale_down_waits_for_the_largest_recommendation_in_its_window():
    fp = fleet_params(scale_down_window_s=60.0)
    f = fleet([1, 1, 1, 1, 0])
    current = 4.0
    got = []
    for k, raw in enumerate([4.0, 1.0, 1.0, 1.0, 1.0, 1.0]):  # every 15 s
        stable, f = autoscale.stabilize(f, raw, 15.0 * (k + 1), current, fp)
        got.append(float(stable))
    # the 4 at 15 s holds scale-down until it leaves the 60 s window (after 75 s)
    assert got == [4.0, 4.0, 4.0, 4.0, 1.0, 1.0]


def test_scale_up_window_takes_the_smallest_recommendation():
    fp = fleet_params(scale_up_window_s=30.0, scale_down_window_s=0.0)
    f = fleet([1, 0, 0, 0, 0])
    got = []
    for k, raw in enumerate([1.0, 5.0, 5.0, 5.0]):
        stable, f = autoscale.stabilize(f, raw, 15.0 * (k + 1), 1.0, fp)
        got.append(float(stable))
    # the 1 at 15 s keeps the fleet at 1 while it is within 30 s (at 30 s and 45 s? no: 45 - 30
    # = 15, not after the cutoff), so the scale-up comes at 45 s
    assert got == [1.0, 1.0, 5.0, 5.0]


@pytest.mark.parametrize(
    "desired, current, kw, expected",
    [
        (20.0, 2.0, {}, 5.0),  # up: max(2 + 4, 2 x 2) = 6, then max_replicas 5
        (20.0, 1.0, {"scale_up_pods": 1.0, "scale_up_percent": 0.0}, 2.0),
        (20.0, 4.0, {"scale_up_pods": 0.0, "scale_up_percent": 50.0}, 5.0),  # ceil(6), max 5
        (0.0, 4.0, {}, 1.0),  # down 100%: to 0, then min_replicas 1
        (1.0, 4.0, {"scale_down_percent": 50.0}, 2.0),  # 4 x 0.5 = 2
        (1.0, 5.0, {"scale_down_percent": 50.0}, 2.0),  # int(5 x 0.5) = 2: truncated, as k8s
        (1.0, 5.0, {"scale_down_percent": 1.0}, 4.0),  # int(4.95) = 4: any percent moves one
        (1.0, 4.0, {"scale_down_percent": 0.0, "scale_down_pods": 1.0}, 3.0),
        (3.0, 3.0, {"min_replicas": 4.0}, 4.0),  # no change asked: clamped into [min, max]
    ],
)
def test_step_limits_follow_hpa_policies(desired, current, kw, expected):
    out = autoscale.limit_rate(jnp.float64(desired), jnp.float64(current), fleet_params(**kw))
    assert float(out) == expected


def test_scale_up_takes_the_first_replicas_that_are_off_and_they_start_cold():
    f = fleet([1, 0, 2, 0, 0])  # replica 2 is draining: not reused
    clock = jnp.array([10.0, jnp.inf, 12.0, jnp.inf, jnp.inf])
    new, clock = autoscale.scale(f, clock, jnp.float64(3.0), 15.0, fleet_params(cold_start_s=60.0))
    np.testing.assert_array_equal(new.phase, [1, 1, 2, 1, 0])
    assert int(new.refused) == 0
    full, _ = autoscale.scale(f, clock, jnp.float64(5.0), 15.0, fleet_params())
    assert int(full.scale_ups) == 3 and int(full.refused) == 1  # replica 2 is still draining
    np.testing.assert_allclose(np.asarray(new.ready_at)[[1, 3]], [75.0, 75.0])
    np.testing.assert_allclose(clock, [10.0, 75.0, 12.0, 75.0, np.inf])
    assert float(new.cold_s) == 120.0 and int(new.scale_ups) == 2
    # the router takes neither before 75 s
    np.testing.assert_array_equal(autoscale.serving_at(new, 74.9), [1, 0, 0, 0, 0])
    np.testing.assert_array_equal(autoscale.serving_at(new, 75.0), [1, 1, 0, 1, 0])


def test_scale_down_cancels_cold_starts_first_then_drains_the_last_serving():
    f = fleet([1, 1, 1, 1, 1], ready_at=[0.0, 0.0, 0.0, 80.0, 0.0])
    f = f.replace(cold_s=jnp.float64(60.0))
    clock = jnp.array([30.0, 31.0, 32.0, 80.0, 33.0])
    new, clock = autoscale.scale(f, clock, jnp.float64(3.0), 30.0, fleet_params())
    # replica 3 (cold until 80 s) goes off at once; replica 4 (the last serving) drains
    np.testing.assert_array_equal(
        new.phase, [REPLICA_SERVING] * 3 + [REPLICA_OFF, REPLICA_DRAINING]
    )
    assert np.isinf(clock[3]) and float(clock[4]) == 33.0
    assert float(new.cold_s) == 10.0  # 50 s of its cold start were never spent
    assert int(new.scale_downs) == 2


def test_a_draining_replica_goes_off_when_its_last_request_ends():
    f = fleet([1, 2, 0, 0, 0])
    e = empty_entries((4,), jnp.int32(0))
    busy = e.replace(status=e.status.at[0].set(RUNNING))
    clock = jnp.array([5.0, 6.0, jnp.inf, jnp.inf, jnp.inf])
    kept, clock1 = autoscale.retire(f, clock, 1, busy, 5.5, 6.0)
    assert int(kept.phase[1]) == REPLICA_DRAINING and int(kept.n_log) == int(f.n_log)
    off, clock2 = autoscale.retire(f, clock, 1, e, 5.5, 6.0)
    assert int(off.phase[1]) == REPLICA_OFF and np.isinf(clock2[1])
    row = np.asarray(off.log[int(off.n_log) - 1])
    assert list(row[:4]) == [6.0, 1.0, 0.0, 0.0]  # t, provisioned, cold, draining
    # a replica's first step at the end of its cold start logs it ready
    cold = fleet([1, 1, 0, 0, 0], ready_at=[0.0, 75.0, 0.0, 0.0, 0.0])
    ready, _ = autoscale.retire(cold, clock, 1, e, 75.0, 75.0)
    assert int(ready.n_log) == int(cold.n_log) + 1
    assert list(np.asarray(ready.log[int(ready.n_log) - 1])[:3]) == [75.0, 2.0, 0.0]


def test_signal_reads_vllm_gauges_per_replica():
    e = empty_entries((5, 4), jnp.int32(0))
    status = jnp.full((5, 4), EMPTY).at[0, :3].set(WAITING).at[1, :2].set(RUNNING)
    e = e.replace(status=status, blocks=jnp.zeros((5, 4), jnp.int32).at[1, :2].set(5))
    wait = autoscale.signal(e, 10, CFG)
    run = autoscale.signal(
        e, 10, EngineConfig(n_instances=5, autoscale_metric="num_requests_running")
    )
    kv = autoscale.signal(
        e, 10, EngineConfig(n_instances=5, autoscale_metric="kv_cache_usage_perc")
    )
    np.testing.assert_array_equal(wait, [3, 0, 0, 0, 0])
    np.testing.assert_array_equal(run, [0, 2, 0, 0, 0])
    np.testing.assert_allclose(kv, [0, 1.0, 0, 0, 0])


def test_an_evaluation_scales_up_on_waiting_requests_and_logs_it():
    fp = fleet_params(target=2.0, cold_start_s=30.0)
    f = fleet([1, 0, 0, 0, 0])
    e = empty_entries((5, 4), jnp.int32(0))
    e = e.replace(status=jnp.full((5, 4), EMPTY).at[0, :].set(WAITING))  # 4 waiting on replica 0
    clock = jnp.array([15.0] + [jnp.inf] * 4)
    new, clock, _ = autoscale.evaluate(
        f, clock, e, jnp.full((5,), 100), 15.0, fp, CFG, jnp.uint32(0)
    )
    # ceil(4 / 2) = 2 replicas: replica 1 starts, serving at 45 s
    np.testing.assert_array_equal(new.phase, [1, 1, 0, 0, 0])
    assert float(clock[1]) == 45.0
    row = np.asarray(new.log[int(new.n_log) - 1])
    # t, provisioned, cold, draining, desired, spot
    assert list(row) == [15.0, 2.0, 1.0, 0.0, 2.0, 0.0]


def test_a_fleet_whose_every_replica_is_preempted_still_sees_its_load_and_grows():
    """(issue 64) The metric is read before the evaluation's preemptions: with every spot
    replica preempted at each evaluation, reading it after them saw no serving replica, so
    the fleet never grew past one."""
    spot_cfg = dataclasses.replace(CFG, autoscale_spot=True, autoscale_requeue=True)
    fp = fleet_params(target=2.0, spot_share=1.0, spot_preemptions_per_hour=1e6)
    f = autoscale.init(fp, spot_cfg, jnp.float64(0.0)).replace(
        phase=jnp.asarray([1, 0, 0, 0, 0], jnp.int32), ready_at=jnp.zeros(5)
    )
    e = empty_entries((5, 4), jnp.int32(0))
    e = e.replace(status=jnp.full((5, 4), EMPTY).at[0, :].set(WAITING))  # 4 waiting
    clock = jnp.array([15.0] + [jnp.inf] * 4)
    new, _, _ = autoscale.evaluate(
        f, clock, e, jnp.full((5,), 100), 15.0, fp, spot_cfg, jnp.uint32(0)
    )
    assert int(new.preemptions) == 1  # replica 0, certainly
    # ceil(4 / 2) = 2 replicas: the preempted one's replacement and one more, both cold
    np.testing.assert_array_equal(new.phase, [1, 1, 0, 0, 0])
    assert int(new.scale_ups) == 1


def test_whole_rounds_to_what_kubernetes_holds():
    fp = autoscale.whole(
        fleet_params(
            min_replicas=1.5,
            max_replicas=4.49,
            scale_up_pods=0.4,
            scale_up_percent=0.3,
            scale_down_percent=0.0,
            interval_s=0.4,
            scale_down_window_s=299.2,
        )
    )
    assert [float(fp.min_replicas), float(fp.max_replicas), float(fp.scale_up_pods)] == [2, 4, 0]
    assert [float(fp.scale_up_percent), float(fp.scale_down_percent)] == [1.0, 0.0]
    assert [float(fp.interval_s), float(fp.scale_down_window_s)] == [1.0, 300.0]
    assert float(fp.target) == 4.0  # a target stays as tuned
