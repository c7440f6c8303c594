"""output.timeline: a sampled per-iteration timeline, written as
timeline.parquet; off by default, where the loop carries nothing for it."""

import numpy as np
import pytest

from servetune.config.scenario import build
from servetune.engine.loop import init_state
from servetune.run import api

P, OUT = 100, 20
ONE = [
    "workload=poisson",
    "workload.n_requests=1",
    "workload.duration_s=null",
    f"workload.prompt.min={P}",
    f"workload.prompt.max={P}",
    f"workload.output.min={OUT}",
    f"workload.output.max={OUT}",
    "engine.leap_max=0",
    "window.drain_s=1",
]


@pytest.fixture(scope="module")
def one():
    """One request stepped iteration by iteration, the periods (1 s / 2048) shorter than an
    iteration: every step has its own sample."""
    res = api.simulate(ONE + ["output.timeline=true"])
    return res.timelines[0], res.metrics[0]


def test_each_iteration_of_one_request_is_sampled(one):
    table, m = one
    assert list(table.columns) == [
        "t_s",
        "instance",
        "queue_len",
        "running",
        "batch_tokens",
        "kv_blocks",
        "preemptions",
    ]
    assert len(table) == m["iterations"] == OUT  # a prefill, then OUT - 1 decodes
    assert table["t_s"].iloc[0] == 0.0 and table["t_s"].is_monotonic_increasing
    assert table["batch_tokens"].tolist() == [P] + [1] * (OUT - 1)
    # running after each step; the last step completes it
    assert table["running"].tolist() == [1] * (OUT - 1) + [0]
    assert (table["queue_len"] == 0).all() and (table["preemptions"] == 0).all()
    # KV blocks of 16 tokens held after each step: ceil((P + k) / 16) while it runs
    expected = [int(np.ceil((P + k) / 16)) for k in range(OUT - 1)]
    assert table["kv_blocks"].tolist()[: OUT - 1] == expected


def test_an_overloaded_engine_shows_its_queue_and_kv_growing():
    res = api.simulate(
        [
            "workload=poisson",
            "workload.duration_s=20",
            "workload.rate=8",
            "policy.max_num_seqs=4",
            "output.timeline=true",
        ]
    )
    table, m = res.timelines[0], res.metrics[0]
    assert table["queue_len"].max() > 20 and table["running"].max() == 4
    assert table["kv_blocks"].max() <= m["kv_blocks"]
    assert table["preemptions"].is_monotonic_increasing
    assert table["t_s"].max() <= m["sim_duration_s"]


def test_off_by_default_the_loop_carries_no_timeline():
    sc = build(api.compose(ONE))
    assert sc.engine.timeline_samples == 0 and sc.workloads.timeline_dt is None
    import jax

    state = init_state(
        jax.tree.map(lambda x: x[0], sc.workloads),
        jax.tree.map(lambda x: x[0], sc.params),
        sc.engine,
    )
    assert state.timeline is None
    assert api.simulate_batch(sc).timelines == []
