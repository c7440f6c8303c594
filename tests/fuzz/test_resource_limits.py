"""Resource limits (issue 23 item 11): sizes the validator allows but this machine cannot hold
are refused before anything is allocated, with the estimate, the limit and the keys."""

import jax
import pytest

from servetune import api, memory
from servetune.errors import ConfigError
from servetune.loop import init_batch
from servetune.scenario import build

SMALL = ["workload=poisson", "workload.duration_s=5", "engine.max_slots=16",
         "engine.queue_window=32"]


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
    """engine.queue_window = 2^20 (the validator's bound) on 4 instances and 16 seeds: about
    8 GiB of state (~120 bytes per entry), twice over while a chunk runs."""
    sc = build(api.compose(["workload=poisson", "workload.duration_s=5",
                            "engine.queue_window=1048576", "engine.n_instances=4", "seeds=16"]))
    need = memory.STATE_COPIES * memory.state_bytes(sc.workloads, sc.params, sc.engine)
    assert need > 12 * memory.GIB
    with pytest.raises(ConfigError, match=r"^engine\.max_slots / engine\.queue_window / seeds / "
                                          r"grid: the simulator would need ~\d+\.\d GiB .*"
                                          r"1048576 queued entries.* 8\.0 GiB available"):
        memory.check_fits(sc.workloads, sc.params, sc.engine, available=8 * memory.GIB)


def test_a_simulation_too_large_for_the_machine_fails_before_allocating(small, monkeypatch):
    need = memory.check_fits(small.workloads, small.params, small.engine,
                             available=1 << 40)
    monkeypatch.setattr(memory, "available_bytes", lambda device=None: need)  # 80% < need
    with pytest.raises(ConfigError, match="more than 80% of the"):
        api.simulate_batch(small)


def test_the_default_sizes_fit_easily(small):
    assert memory.check_fits(small.workloads, small.params, small.engine,
                             available=memory.GIB) < 64 << 20
