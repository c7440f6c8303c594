"""The simulator's programs compile with ops.COMPILER_OPTIONS: no reduction in the compiled
loop is split by XLA:CPU's tree-reduction rewriter (one kernel per sum, not two)."""

import jax
import numpy as np
from helpers import batched, linear_params, trace_of

from servetune.config.scenario import stack_workloads
from servetune.core import ops
from servetune.core.types import EngineConfig
from servetune.engine.loop import batched as batched_loop
from servetune.engine.loop import init_batch, run_chunk, run_chunk_batch

# 64 entries: sums over them are long enough (> 32) for the rewriter to split
CFG = EngineConfig(
    max_slots=32, queue_window=32, block_size=4, max_model_len=256, cost_form="linear", outbox=32
)


def _inputs():
    trace = trace_of([(0.1 * k, 20, 5) for k in range(10)])
    wl = stack_workloads([trace], [trace.output.astype(np.float64)], 1e6, CFG)
    params = batched(linear_params(base_s=0.01, kv_blocks=1000))
    return init_batch(wl, params, CFG), wl, params


def _plain(state, wl, params):
    """The same program compiled with XLA's default passes."""
    return jax.jit(batched_loop(run_chunk, CFG)).lower(state, wl, params).compile()


def test_the_loop_compiles_without_split_reductions():
    state, wl, params = _inputs()
    lowered = run_chunk_batch.lower(state, wl, params, CFG)
    assert "reduce-window" not in lowered.compile().as_text()
    # the control: XLA's default pipeline splits them, so the check above can fail
    assert "reduce-window" in _plain(state, wl, params).as_text()
    assert ops.COMPILER_OPTIONS["xla_disable_hlo_passes"] == "tree_reduction_rewriter"


def test_the_options_leave_the_results_alone():
    state, wl, params = _inputs()
    lowered = run_chunk_batch.lower(state, wl, params, CFG)
    ours = jax.device_get(lowered.compile()(state, wl, params))
    state, _, _ = _inputs()  # the call donates its state
    plain = jax.device_get(_plain(state, wl, params)(state, wl, params))
    assert bool(np.all(ours.done)) and int(ours.outbox.count.sum()) == 10
    np.testing.assert_array_equal(ours.outbox.req, plain.outbox.req)
    np.testing.assert_allclose(ours.outbox.finish, plain.outbox.finish, rtol=1e-12)
