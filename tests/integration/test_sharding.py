"""Sharding over devices changes nothing: a batch sharded over 4 (forced host) CPU devices, or
over two local processes joined by jax.distributed, gives the metrics and per-request results
of the same batch on one device.

XLA reads --xla_force_host_platform_device_count once per process, so the sharded runs are
subprocesses (this file, run as a script); they pickle their results back to the test.
"""

import functools
import os
import pickle
import socket
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(HERE)  # tests/: helpers.py
FIELDS = ("end_state", "first_token", "finish", "generated", "n_preempt", "tokens_computed")
# (workloads S, policy points P): on 4 devices, 3 x 3 pads S to 4 (mesh 4 x 1); 1 x 2 pads
# both axes (mesh 2 x 2) and runs each device's 1 x 1 block unbatched.
CASES = ((3, 3), (1, 2))
# two processes with one device each: 1 x 2 on a 1 x 2 mesh
MULTI_HOST_CASE = (1, 2)


def _case(n_s: int, n_p: int):
    from helpers import batched, linear_params

    from servetune.config.scenario import stack_workloads
    from servetune.core.types import EngineConfig
    from servetune.workload.traces import synthetic

    # starting at 4 entries of 16, so that sharded batches widen too (servetune/engine/width.py)
    cfg = EngineConfig(
        max_slots=8,
        queue_window=8,
        block_size=4,
        max_model_len=512,
        cost_form="linear",
        outbox=32,
        leap_max=16,
        width=4,
    )
    traces = [
        synthetic(
            rate=r,
            n_requests=60,
            prompt={"dist": "lognormal", "mean": 60, "cv": 1},
            output={"dist": "lognormal", "mean": 30, "cv": 1, "max": 200},
            seed=s,
        )
        for s, r in enumerate((2.0, 6.0, 4.0)[:n_s])
    ]
    grid = {
        "max_num_seqs": [2.0, 5.0, 8.0][:n_p],
        "max_num_batched_tokens": [32.0, 48.0, 512.0][:n_p],
    }
    params = batched(
        linear_params(
            grid, base_s=0.02, per_prefill_token_s=1e-4, per_decode_seq_s=1e-3, kv_blocks=200
        )
    )
    wl = stack_workloads(traces, [t.output.astype(np.float64) for t in traces], 1e6)
    return traces, wl, params, cfg


def _simulate(n_s: int, n_p: int):
    """[s][p] (per-request arrays, stats, metrics) of one case on all visible devices."""
    from helpers import spec

    from servetune.run.driver import rollout
    from servetune.run.metrics import compute_metrics, request_table

    traces, wl, params, cfg = _case(n_s, n_p)
    results = rollout(wl, params, cfg, [len(t) for t in traces])
    out = []
    for s, row in enumerate(results):
        out_row = []
        for r in row:
            sp = spec(kv_blocks=200)
            m = compute_metrics(traces[s], r, sp, request_table(traces[s], r, sp))
            out_row.append(({f: getattr(r, f) for f in FIELDS}, r.stats, m))
        out.append(out_row)
    return out


# what describes the compiled program rather than the scenario: a batch takes the simple step
# only where all its scenarios can, and runs at the width its widest one needs, so splitting
# it over devices changes these counts and nothing else
PROGRAM = ("simple", "simple_steps", "entry_width", "widenings")


def _assert_same(a, b, where=""):
    if isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            if k not in PROGRAM:
                _assert_same(a[k], b[k], f"{where}.{k}")
    else:
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=where)


def test_mesh_shape_pads_least():
    from servetune.run.shard import mesh_shape

    assert mesh_shape(8, 1, 4) == (4, 1)
    assert mesh_shape(1, 8, 4) == (1, 4)
    assert mesh_shape(3, 3, 4) == (4, 1)  # 12 scenarios either way: workloads not replicated
    assert mesh_shape(2, 6, 4) == (2, 2)
    assert mesh_shape(1, 2, 4) == (2, 2)
    assert mesh_shape(5, 7, 1) == (1, 1)


def test_one_device_has_no_layout():
    import jax

    from servetune.run.shard import layout

    assert layout(4, 4, jax.devices()[:1]) is None


def _env(**extra):
    path = [HERE, TESTS] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=os.pathsep.join(path), **extra)


def _with_this_process_flags(flags: str) -> str:
    """`flags` plus this process's XLA_FLAGS other than the device count: the compared runs
    must compile alike (conftest's backend optimization level changes float rounding)."""
    own = [
        f
        for f in os.environ.get("XLA_FLAGS", "").split()
        if not f.startswith("--xla_force_host_platform_device_count")
    ]
    return " ".join([flags, *own])


def _spawn(*args, env):
    return subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), *map(str, args)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finish(proc, timeout=300):
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    assert proc.returncode == 0, err[-3000:]


@functools.cache
def _one_device(n_s: int, n_p: int):
    return _simulate(n_s, n_p)


def _compare(n_s, n_p, other):
    alone = _one_device(n_s, n_p)
    assert len(other) == n_s and all(len(row) == n_p for row in other)
    for s in range(n_s):
        for p in range(n_p):
            for k, what in enumerate(("requests", "stats", "metrics")):
                _assert_same(alone[s][p][k], other[s][p][k], f"{what}[{s}][{p}]")


@pytest.mark.slow  # ~25 s: a four-device process compiles the simulator again
def test_sharded_over_four_devices_equals_one_device(tmp_path):
    out = tmp_path / "sharded.pkl"
    proc = _spawn(
        "devices",
        out,
        env=_env(XLA_FLAGS=_with_this_process_flags("--xla_force_host_platform_device_count=4")),
    )
    for case in CASES:  # meanwhile, here on one device
        _one_device(*case)
    _finish(proc)
    with open(out, "rb") as f:
        sharded = pickle.load(f)
    assert sharded["devices"] == 4
    for case in CASES:
        _compare(*case, sharded[case])


@pytest.mark.slow  # two more compilations, ~20 s on 2 cores
def test_two_processes_with_jax_distributed_equal_one_device(tmp_path):
    # two local CPU processes, one device each, a localhost coordinator: the mesh spans both
    with socket.socket() as sock:
        sock.bind(("localhost", 0))
        port = sock.getsockname()[1]
    outs = [tmp_path / f"process{i}.pkl" for i in range(2)]
    procs = [_spawn("process", i, port, outs[i], env=_env()) for i in range(2)]
    for proc in procs:
        _finish(proc, timeout=120)
    for out in outs:
        with open(out, "rb") as f:
            res = pickle.load(f)
        assert res["devices"] == 2 and res["local_devices"] == 1
        _compare(*MULTI_HOST_CASE, res[MULTI_HOST_CASE])


def main(argv: list[str]) -> None:
    """Subprocess entry: `devices OUT` (all local devices) or `process I PORT OUT` (process I of
    2 under jax.distributed); pickles the results of the cases to OUT."""
    import jax

    if argv[0] == "process":
        jax.distributed.initialize(
            coordinator_address=f"localhost:{argv[2]}",
            num_processes=2,
            process_id=int(argv[1]),
            initialization_timeout=60,
        )
        cases = (MULTI_HOST_CASE,)
    else:
        cases = CASES
    res = {"devices": len(jax.devices()), "local_devices": len(jax.local_devices())}
    for case in cases:
        res[case] = _simulate(*case)
    with open(argv[-1], "wb") as f:
        pickle.dump(res, f)
    if argv[0] == "process":
        jax.distributed.shutdown()


if __name__ == "__main__":
    main(sys.argv[1:])
