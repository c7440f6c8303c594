"""Scenario batches sharded over devices (and hosts) with a `jax.sharding` Mesh.

A batch is state [S, P], workloads [S], params [P]. With D > 1 devices it is laid out on a 2-D
mesh of ds x dp = D devices (axes "s" and "p"): each device holds a block of
[S' / ds, P' / dp] scenarios, its ds-th share of the workloads and its dp-th share of the
policy points. The factorization is the one that pads least (ties: more devices on the
workload axis, so workloads are not replicated); S and P are padded up to S' and P' with
copies of their last row, and the padding is dropped from everything the host reads back.

Each device runs its block's while_loop on its own (`shard_map`, no collectives): a scenario
computes exactly what it computes on one device, and a device whose block is done idles
until the others finish the chunk.

Across hosts: call `jax.distributed.initialize(...)` in every process before anything else
touches JAX, and run the same program with the same inputs in each; `jax.devices()` is then
every process's devices, the mesh spans them, and the outbox is gathered to every process
after each chunk (benchmarks/README.md shows the commands).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from servetune.core import ops
from servetune.core.types import EngineConfig, Params, SimState, Workload
from servetune.engine import loop

STATE, WORKLOAD, PARAMS = PartitionSpec("s", "p"), PartitionSpec("s"), PartitionSpec("p")


def mesh_shape(n_s: int, n_p: int, n_devices: int) -> tuple[int, int]:
    """(ds, dp) with ds x dp = n_devices that minimizes the padded batch
    ceil(n_s / ds) * ds * ceil(n_p / dp) * dp (ties: the larger ds)."""
    best = None
    for ds in range(n_devices, 0, -1):
        if n_devices % ds:
            continue
        dp = n_devices // ds
        padded = math.ceil(n_s / ds) * ds * math.ceil(n_p / dp) * dp
        if best is None or padded < best[0]:
            best = (padded, ds, dp)
    return best[1], best[2]


def _pad_rows(x: np.ndarray, n: int) -> np.ndarray:
    """x with its leading axis padded to n by repeating its last row."""
    k = x.shape[0]
    return x if k == n else np.concatenate([x, np.repeat(x[-1:], n - k, axis=0)])


@dataclasses.dataclass(frozen=True)
class Layout:
    """How a batch of n_s workloads x n_p policy points is placed on `mesh` (padded to
    n_s_pad x n_p_pad)."""

    mesh: Mesh
    n_s: int
    n_p: int
    n_s_pad: int
    n_p_pad: int

    def place(self, wl: Workload, params: Params) -> tuple[Workload, Params]:
        """Padded, sharded global copies of workloads [S] and params [P] (every process passes
        the same full arrays)."""

        def put(x, n, spec):
            host = _pad_rows(np.asarray(x), n)
            sharding = NamedSharding(self.mesh, spec)
            return jax.make_array_from_callback(host.shape, sharding, lambda idx: host[idx])

        wl = jax.tree.map(lambda x: put(x, self.n_s_pad, WORKLOAD), wl)
        params = jax.tree.map(lambda x: put(x, self.n_p_pad, PARAMS), params)
        return wl, params

    def fetch(self, tree):
        """Host (numpy) copy of a tree of [S', P', ...] arrays, padding dropped: [S, P, ...]."""
        if jax.process_count() > 1:
            from jax.experimental import multihost_utils

            tree = multihost_utils.process_allgather(tree, tiled=True)
        else:
            tree = jax.device_get(tree)
        return jax.tree.map(lambda x: np.asarray(x)[: self.n_s, : self.n_p], tree)


def layout(n_s: int, n_p: int, devices: Sequence | None = None) -> Layout | None:
    """The sharded layout of an n_s x n_p batch over `devices` (default: all of them, every
    process's), or None when there is only one device."""
    devices = list(jax.devices() if devices is None else devices)
    if len(devices) <= 1:
        return None
    ds, dp = mesh_shape(n_s, n_p, len(devices))
    mesh = Mesh(np.asarray(devices, dtype=object).reshape(ds, dp), ("s", "p"))
    return Layout(mesh, n_s, n_p, math.ceil(n_s / ds) * ds, math.ceil(n_p / dp) * dp)


@functools.lru_cache(maxsize=32)
def _compiled(mesh: Mesh, cfg: EngineConfig):
    init = jax.jit(
        jax.shard_map(
            functools.partial(loop.init_grid, cfg=cfg),
            mesh=mesh,
            in_specs=(WORKLOAD, PARAMS),
            out_specs=STATE,
            check_vma=False,
        ),
        compiler_options=ops.COMPILER_OPTIONS,
    )
    chunk = jax.jit(
        jax.shard_map(
            loop.batched(loop.run_chunk, cfg),
            mesh=mesh,
            in_specs=(STATE, WORKLOAD, PARAMS),
            out_specs=STATE,
            check_vma=False,
        ),
        donate_argnums=(0,),
        compiler_options=ops.COMPILER_OPTIONS,
    )
    return init, chunk


def init(lay: Layout, wl: Workload, params: Params, cfg: EngineConfig) -> SimState:
    """init_batch on placed (`Layout.place`) inputs: state [S', P'], sharded like them."""
    return _compiled(lay.mesh, cfg)[0](wl, params)


def run_chunk(
    lay: Layout, state: SimState, wl: Workload, params: Params, cfg: EngineConfig
) -> SimState:
    """run_chunk_batch on a sharded state, each device running its own block's loop."""
    return _compiled(lay.mesh, cfg)[1](state, wl, params)
