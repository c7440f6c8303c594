"""The batched loop (run_chunk_grid: masked outbox writes, sorting only the scenarios whose
order can matter) leaves every scenario in exactly the state a plain vmap of run_chunk does,
chunk after chunk, on random workloads and policies (whatever number of scenarios needs a sort
in an iteration: none, a few, or more than the sorted block holds)."""

import functools

import jax
import numpy as np
import pytest
from helpers import CONFIGS, batched, random_params, random_traces

from servetune.config.scenario import stack_workloads
from servetune.engine.grid import run_chunk_grid
from servetune.engine.loop import init_batch, run_chunk
from servetune.engine.outbox import record_fields


def _vmapped(cfg):
    """What the rollout did before: JAX's batching of the while loop itself."""
    one = functools.partial(run_chunk, cfg=cfg)
    return jax.vmap(jax.vmap(one, in_axes=(0, None, 0)), in_axes=(0, 0, None))


def _assert_same_records(box_a, box_b):
    """The two outboxes hold the same records (what lies past the fill mark is junk)."""
    count = np.asarray(box_a.count)
    np.testing.assert_array_equal(count, np.asarray(box_b.count))
    valid = np.arange(box_a.req.shape[-1]) < count[..., None]
    for f in record_fields(box_a):
        x, y = np.asarray(getattr(box_a, f)), np.asarray(getattr(box_b, f))
        np.testing.assert_array_equal(x[valid], y[valid], err_msg=f)


def test_grid_loop_equals_vmapped_while_loop_chunk_after_chunk():
    import dataclasses

    cfg = dataclasses.replace(
        CONFIGS["continuous-paged"], outbox=16, max_steps_per_chunk=150, leap_max=8
    )
    rng = np.random.default_rng(11)
    traces = random_traces(rng, 2, 80)
    params = batched(random_params(rng, 5, cfg))  # 2 x 5 = 10 scenarios: sorted block of 2
    wl = stack_workloads(traces, [t.output.astype(np.float64) for t in traces], 1e6)
    grid = jax.jit(functools.partial(run_chunk_grid, cfg=cfg))
    plain = jax.jit(_vmapped(cfg))
    a = b = init_batch(wl, params, cfg)
    for _ in range(400):
        a, b = grid(a, wl, params), plain(b, wl, params)
        # (a batch takes the simple step only where all its scenarios can: Stats.simple
        # counts the program's path, not the scenario's)
        program = lambda s: s.replace(outbox=None, stats=s.stats.replace(simple=None))
        for x, y in zip(jax.tree.leaves(program(a)), jax.tree.leaves(program(b)), strict=True):
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
        _assert_same_records(a.outbox, b.outbox)
        a = a.replace(outbox=a.outbox.replace(count=a.outbox.count * 0))
        b = b.replace(outbox=b.outbox.replace(count=b.outbox.count * 0))
        if bool(np.all(np.asarray(a.done))):
            break
    assert bool(np.all(np.asarray(a.done)))


@pytest.mark.parametrize(
    "batch",
    [
        pytest.param(["seeds=2", "grid.max_num_seqs=[4,32]"], id="batch"),
        pytest.param([], id="one-scenario", marks=pytest.mark.slow),
    ],
)
def test_fixed_length_chunks_give_the_while_loop_s_results(batch):
    # engine.chunk_length: each compiled call runs exactly L bodies (a GPU tests the loop's
    # condition once per call), a batch and one scenario alike
    from servetune.run import api

    base = [
        "workload.duration_s=45",
        "output.progress=false",
        "engine.max_slots=32",
        "engine.queue_window=32",
        *batch,
    ]
    loop = api.simulate(base)
    fixed = api.simulate(base + ["engine.chunk_length=16"])
    assert len(loop.requests) == len(fixed.requests) == (4 if batch else 1)
    for a, b in zip(loop.requests, fixed.requests, strict=True):
        assert a.equals(b)
    for a, b in zip(loop.metrics, fixed.metrics, strict=True):
        assert a["iterations"] == b["iterations"] and a["goodput_rps"] == b["goodput_rps"]
