"""Resource limits: sizes the validator allows but this machine cannot hold
are refused before anything is allocated, with the estimate, the limit and the keys."""

import re

import jax
import numpy as np
import pytest

from servetune.config.scenario import build
from servetune.core import ops
from servetune.core.errors import ConfigError
from servetune.engine import memory
from servetune.engine.loop import init_batch
from servetune.run import api

SMALL = [
    "workload=poisson",
    "workload.duration_s=5",
    "engine.max_slots=16",
    "engine.queue_window=32",
]


@pytest.fixture(scope="module")
def small():
    return build(api.compose(SMALL))


def test_the_estimate_is_the_allocated_state(small):
    """eval_shape sizes exactly what init_batch allocates (shapes only, nothing run)."""
    estimate = memory.state_bytes(small.workloads, small.params, small.engine)
    state = init_batch(small.workloads, small.params, small.engine)
    assert estimate == memory.tree_bytes(state) > 0
    jax.block_until_ready(state)


def test_a_queue_window_of_a_million_is_refused_with_the_figures():
    """engine.queue_window = 2^20 (the validator's bound) on 4 instances and 16 seeds, started
    at the full width: about 8 GiB of state (~120 bytes per entry), twice over while a chunk
    runs."""
    sc = build(
        api.compose(
            [
                "workload=poisson",
                "workload.duration_s=5",
                "engine.queue_window=1048576",
                "engine.n_instances=4",
                "seeds=16",
                "engine.start_width=null",
            ]
        )
    )
    need = memory.STATE_COPIES * memory.state_bytes(sc.workloads, sc.params, sc.engine)
    assert need > 12 * memory.GIB
    with pytest.raises(
        ConfigError,
        match=r"^engine\.max_slots / engine\.queue_window / "
        r"engine\.n_instances / engine\.leap_max / seeds / "
        r"grid: the simulator "
        r"would need ~\d+\.\d GiB .*"
        r"1048576 queued entries.* 8\.0 GiB available",
    ):
        memory.check_fits(sc.workloads, sc.params, sc.engine, available=8 * memory.GIB)


def test_a_narrow_start_allocates_only_what_the_run_needs():
    """The same window started narrow (the default) holds 64 entries per instance: the run
    allocates what its live requests need, not the configured capacity."""
    sc = build(
        api.compose(
            [
                "workload=poisson",
                "workload.duration_s=5",
                "engine.queue_window=1048576",
                "engine.n_instances=4",
                "seeds=16",
            ]
        )
    )
    assert sc.engine.n_entries == 64
    assert (
        memory.check_fits(sc.workloads, sc.params, sc.engine, available=8 * memory.GIB) < 64 << 20
    )


def test_a_run_that_would_widen_past_the_memory_is_refused_by_key(monkeypatch):
    """A narrow run whose live requests need more entries than the machine can hold stops with
    the settings that size them, not an out-of-memory kill (every request arrives at once)."""
    sc = build(
        api.compose(
            [
                "workload=vllm_random",
                "workload.vllm_bench.num_prompts=200",
                "workload.vllm_bench.request_rate=inf",
                "engine.start_width=8",
                "engine.max_slots=512",
                "engine.queue_window=512",
                "output.progress=false",
            ]
        )
    )
    narrow = memory.check_fits(sc.workloads, sc.params, sc.engine, available=1 << 40)
    # room for the narrow state, not for a wider one
    monkeypatch.setattr(memory, "available_bytes", lambda device=None: 1.05 * narrow / 0.8)
    with pytest.raises(
        ConfigError,
        match=r"^engine\.max_slots / engine\.queue_window / .* "
        r"each with 512 slots \+ 512 queued entries, 512 of "
        r"them held as the live requests need x 1 instance",
    ):
        api.simulate_batch(sc)


def test_a_simulation_too_large_for_the_machine_fails_before_allocating(small, monkeypatch):
    need = memory.check_fits(small.workloads, small.params, small.engine, available=1 << 40)
    monkeypatch.setattr(memory, "available_bytes", lambda device=None: need)  # 80% < need
    with pytest.raises(ConfigError, match="more than 80% of the"):
        api.simulate_batch(small)


def test_the_default_sizes_fit_easily(small):
    assert (
        memory.check_fits(small.workloads, small.params, small.engine, available=memory.GIB)
        < 64 << 20
    )


PREFIX = ["workload=mooncake_conv", "engine.prefix_cache=true", "engine.prefix_block_tokens=16"]


def test_the_workload_estimate_bounds_what_is_built():
    sc = build(api.compose(PREFIX))
    n_s, n_pad = sc.workloads.arrival.shape
    estimate = memory.workload_bytes(n_s, n_pad, sc.engine)
    assert sc.engine.prefix_width == 512  # 8192-token sequences in 16-token blocks
    assert memory.tree_bytes(sc.workloads) <= estimate <= 1.05 * memory.tree_bytes(sc.workloads)


@pytest.mark.parametrize(
    "overrides,match",
    [
        (
            PREFIX,
            (
                r"^workload\.duration_s / workload\.max_requests / seeds / "
                r"engine\.prefix_block_tokens: the workload would need ~0\.0 GiB \(1 workload\(s\) "
                r"x 2048 requests, each with 512 prefix block ids\), more than 80% of the 0\.0 GiB"
                r" available; .*or coarser prefix blocks \(engine\.prefix_block_tokens\)"
            ),
        ),
        (
            ["workload=poisson", "workload.duration_s=60", "seeds=64"],
            (
                r"^workload\.duration_s / workload\.max_requests / seeds: the workload would need "
                r"~\d+\.\d "
                r"GiB \(64 workload\(s\) x 512 requests\)"
            ),
        ),
    ],
)
def test_a_workload_too_large_is_refused_before_it_is_built(overrides, match, monkeypatch):
    # the machine's memory set just below the need: nothing is stacked or allocated
    built = []
    monkeypatch.setattr(memory, "available_bytes", lambda device=None: 1 << 20)
    import servetune.config.scenario as scenario_lib

    real = scenario_lib.stack_workloads
    monkeypatch.setattr(
        scenario_lib, "stack_workloads", lambda *a, **k: built.append(1) or real(*a, **k)
    )
    with pytest.raises(ConfigError, match=match):
        build(api.compose(overrides))
    assert not built


@pytest.mark.parametrize(
    "slots, leap_max, pressure, lanes",
    [
        (256, 4096, "preempt", 1),  # the leap's [A, L / block_size + 1] table dominates
        (64, 2048, "compress", 2),  # compressed KV: the [A, L] table, two policy points
        (1024, 64, "preempt", 1),  # wide entries, short leaps: the state's own temporaries
        (64, 1024, "preempt", 8),  # the leap's [L, L] triangle, shared by eight lanes
    ],
)
def test_the_temporaries_estimate_bounds_what_xla_allocates(slots, leap_max, pressure, lanes):
    """memory.temporary_bytes against XLA's own figure for the compiled loop body: never below
    it (a refusal must not let an out-of-memory kill through), at most 4x it."""
    from helpers import linear_params, trace_of

    from servetune.config.scenario import stack_workloads
    from servetune.core.types import EngineConfig
    from servetune.engine.loop import run_chunk_batch

    cfg = EngineConfig(
        max_slots=slots,
        queue_window=slots,
        block_size=16,
        max_model_len=4096,
        cost_form="linear",
        outbox=64,
        leap_max=leap_max,
        kv_pressure=pressure,
    )
    trace = trace_of([(0.1 * k, 20, 5) for k in range(10)])
    wl = stack_workloads([trace], [trace.output.astype(float)], 1e6, cfg)
    params = linear_params({"max_num_seqs": [64.0] * lanes}, base_s=0.01, kv_blocks=100_000)
    state = init_batch(wl, params, cfg)
    compiled = run_chunk_batch.lower(state, wl, params, cfg).compile()
    temp = compiled.memory_analysis().temp_size_in_bytes
    shared = memory.shared_leap_bytes(cfg)  # a constant: outside XLA's temp figure
    estimate = memory.temporary_bytes(memory.tree_bytes(state), lanes, cfg) - shared
    assert temp <= estimate <= 4 * temp + (1 << 20)
    triangles = re.findall(
        rf"= f64\[{leap_max},{leap_max}\]\{{1,0\}} constant\(", compiled.as_text()
    )
    if leap_max > ops.MAX_TRIANGLE:  # long leaps scan: no triangle at all
        assert shared == 0 and not triangles
    elif leap_max > cfg.outbox:  # no other prefix sum of that length: one per program
        assert shared == 8 * leap_max**2 and len(triangles) == 1


def test_a_leap_table_too_large_is_refused_naming_engine_leap_max():
    """engine.leap_max = 65,536 at the full width of a 65,536-entry window: ~6 GiB of leap
    tables for 19 requests (5.3 GB peak measured before this check), refused by key."""
    sc = build(
        api.compose(
            [
                "workload.max_requests=19",
                "engine.leap_max=65536",
                "engine.queue_window=65536",
                "engine.start_width=null",
            ]
        )
    )
    assert memory.leap_bytes(sc.engine) > 6 * memory.GIB
    with pytest.raises(
        ConfigError,
        match=r"engine\.leap_max / seeds / grid: the simulator would "
        r"need ~\d+\.\d GiB \(.*; the leap's tables "
        r"\d+\.\d GiB of it \(engine\.leap_max = 65536\)\), "
        r"more than 80% of the 4\.0 GiB available",
    ):
        memory.check_fits(sc.workloads, sc.params, sc.engine, available=4 * memory.GIB)
    narrow = build(api.compose(["workload.max_requests=19", "engine.leap_max=65536"]))
    assert (
        memory.check_fits(narrow.workloads, narrow.params, narrow.engine, available=4 * memory.GIB)
        < 0.8 * 4 * memory.GIB
    )


def test_a_fleet_log_too_large_is_refused_naming_fleet_log_rows():
    """The autoscaler's log is part of the state: where it is what does not fit, the message
    names fleet.log_rows, not the engine's entries."""
    sc = build(api.compose(SMALL + ["fleet.autoscale=true", "fleet.log_rows=4194304", "seeds=4"]))
    assert memory.fleet_log_bytes(sc.engine, 4) == 4 * 4194304 * 6 * 8
    with pytest.raises(
        ConfigError,
        match=r"^fleet\.log_rows / fleet\.interval_s / seeds / grid: the fleet's log of "
        r"4,194,304 rows per scenario \(4 workload\(s\) x 1 policy point\(s\)\) would take "
        r"~\d+\.\d GiB",
    ):
        memory.check_fits(sc.workloads, sc.params, sc.engine, available=2 * memory.GIB)


def test_tiles_and_copies_are_counted_before_they_are_drawn(monkeypatch):
    """workload.rate_curve.span_s and workload.replicas.rate: refused by key, with the largest
    value that fits, before any copy is drawn (a machine with 64 MiB available)."""
    from helpers import trace_of

    from servetune.workload import rate_curve, replicas

    monkeypatch.setattr(replicas, "host_available_bytes", lambda: 64 << 20)
    trace = trace_of([(0.1 * k, 20, 5) for k in range(10_000)])
    with pytest.raises(
        ConfigError,
        match=r"^workload\.rate_curve\.span_s: got 1e\+06; repeating test's 10,000 requests "
        r"over 1,000 s 1,000 times draws 10,000,000 requests .*expected a span of at most "
        r"37,000 s",
    ):
        rate_curve.tile(trace, 1000.0, 1e6, None)
    with pytest.raises(ConfigError, match=r"^workload\.replicas\.rate: 100 superposes 100"):
        replicas.scale_rate(trace, 1000.0, 100.0, np.random.default_rng(0))
