"""Memory a rollout will need, estimated before anything is allocated, against what the
machine has: a size the config validator allows (engine.queue_window = 1,048,576 on several
instances, thousands of seeds) must be refused with the figures, not swap the machine to a halt
or die of an out-of-memory kill.

The estimate is the loop state's exact size (jax.eval_shape of its initializer: shapes only,
nothing allocated or compiled) times STATE_COPIES, plus the workload arrays, plus what a loop
body holds while it runs (`temporary_bytes`: a multiple of the state, and the leap's
[entries, engine.leap_max / block_size] boundary table, which grows with engine.leap_max).
tests/fuzz/test_resource_limits.py checks it against XLA's own figure for compiled programs.
"""

from __future__ import annotations

import functools
import math

import jax

from servetune.core import ops
from servetune.core.errors import ConfigError
from servetune.core.host import GIB, USABLE, host_available_bytes
from servetune.core.types import FLEET_LOG_COLUMNS, EngineConfig, Params, Workload
from servetune.engine.loop import init_grid

STATE_COPIES = 2  # the donated loop state and the one its compiled chunk writes


def tree_bytes(tree) -> int:
    """Bytes of every array (or ShapeDtypeStruct) leaf of `tree`."""
    return sum(math.prod(leaf.shape) * leaf.dtype.itemsize for leaf in jax.tree.leaves(tree))


def _signature(tree) -> tuple:
    return tuple((tuple(leaf.shape), str(leaf.dtype)) for leaf in jax.tree.leaves(tree))


_STATE_BYTES: dict = {}  # (cfg, input signatures) -> bytes: tuning estimates every iteration


def state_bytes(wl: Workload, params: Params, cfg: EngineConfig) -> int:
    """Bytes of the simulator state of workloads [S] x params [P] under `cfg` (not allocated;
    cached per config and input shapes)."""
    key = (cfg, _signature(wl), _signature(params))
    if key not in _STATE_BYTES:
        shapes = jax.eval_shape(functools.partial(init_grid, cfg=cfg), wl, params)
        _STATE_BYTES[key] = tree_bytes(shapes)
    return _STATE_BYTES[key]


# A loop body's temporaries (XLA:CPU's memory_analysis().temp_size_in_bytes) measured at 1.6
# to 2.3 times the state they step for 64 to 2,048 entries per instance; bytes per element of
# the leap's boundary table measured at 16 to 18 (three arrays of it live at once, fused).
TEMPORARIES_PER_STATE = 3
LEAP_TABLE_BYTES = 24
LEAP_VECTOR_BYTES = 128  # per iteration of a leap: its durations, ends, counts, bins [L]


def leap_bytes(cfg: EngineConfig) -> int:
    """Bytes one scenario's leap (engine/leap.py) holds while it runs: its [A, columns]
    boundary table (columns: the block boundaries engine.leap_max iterations can cross, or
    every iteration under kv_pressure=compress) and its [L] vectors; 0 when the leap is
    off. The prefix-sum triangle the leap shares across scenarios is `shared_leap_bytes`."""
    L = cfg.leap_max
    if L == 0 or cfg.speculation:
        return 0
    if cfg.kv_pressure == "compress":
        columns = L
    elif cfg.kv_layout == "paged":
        columns = L // cfg.block_size + 1
    else:
        columns = 0
    return LEAP_TABLE_BYTES * cfg.n_entries * columns + LEAP_VECTOR_BYTES * L


def shared_leap_bytes(cfg: EngineConfig) -> int:
    """Bytes of the leap's [L, L] float64 prefix-sum triangle (ops.float_cumsum), a constant
    every scenario of a compiled call shares: 8 L^2 while L <= ops.MAX_TRIANGLE, else 0
    (longer axes scan instead)."""
    L = cfg.leap_max
    if L == 0 or cfg.speculation or L > ops.MAX_TRIANGLE:
        return 0
    return 8 * L * L


def temporary_bytes(state: int, lanes: int, cfg: EngineConfig) -> int:
    """Bytes a compiled loop body of `lanes` scenarios (workloads x policy points) holds
    besides its state of `state` bytes: TEMPORARIES_PER_STATE x the state, each scenario's
    leap, and the leap's shared triangle once."""
    return TEMPORARIES_PER_STATE * state + lanes * leap_bytes(cfg) + shared_leap_bytes(cfg)


def fleet_log_bytes(cfg: EngineConfig, lanes: int) -> int:
    """Bytes of the autoscaler's log in the state of `lanes` scenarios (engine/autoscale.py:
    [fleet.log_rows, 6] f64 each), 0 without an autoscaler."""
    if not cfg.autoscale:
        return 0
    return lanes * max(cfg.autoscale_log, 1) * len(FLEET_LOG_COLUMNS) * 8


def available_bytes(device=None) -> int | None:
    """Memory a rollout on `device` (default: the first) can use: the accelerator's free memory
    as its runtime reports it, or on CPU the host's MemAvailable; None when unknown."""
    device = device or jax.devices()[0]
    if device.platform != "cpu":
        stats = device.memory_stats() or {}
        if "bytes_limit" in stats:
            return int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0))
        return None
    return host_available_bytes()


def rollout_bytes(wl: Workload, params: Params, cfg: EngineConfig) -> int:
    """Bytes a rollout of workloads [S] x params [P] under `cfg` holds at its peak: the state
    STATE_COPIES times, a loop body's temporaries and the workload arrays."""
    state = state_bytes(wl, params, cfg)
    lanes = wl.arrival.shape[0] * int(jax.tree.leaves(params)[0].shape[0])
    return STATE_COPIES * state + temporary_bytes(state, lanes, cfg) + tree_bytes(wl)


def check_fits(
    wl: Workload,
    params: Params,
    cfg: EngineConfig,
    n_devices: int = 1,
    available: int | None = None,
) -> int:
    """The estimated bytes of a rollout (per device when sharded over `n_devices`
    accelerators; CPU devices share the host's memory); ConfigError naming the settings that
    size it when that exceeds USABLE of `available` (default: available_bytes())."""
    available = available_bytes() if available is None else available
    cpu = jax.devices()[0].platform == "cpu"
    n_s = wl.arrival.shape[0]
    n_p = int(jax.tree.leaves(params)[0].shape[0])
    leap = temporary_bytes(0, n_s * n_p, cfg)  # the leap's part: its tables and triangle
    need = rollout_bytes(wl, params, cfg)
    if not cpu:
        need = -(-need // max(n_devices, 1))
    if available is None or need <= USABLE * available:
        return need
    log = fleet_log_bytes(cfg, n_s * n_p) * (STATE_COPIES + TEMPORARIES_PER_STATE)
    if log > need / 2:  # the autoscaler's log, not the engine's entries, is what is large
        raise ConfigError(
            f"fleet.log_rows / fleet.interval_s / seeds / grid: the fleet's log of "
            f"{cfg.autoscale_log:,} rows per scenario ({n_s} workload(s) x {n_p} policy "
            f"point(s)) would take ~{log / GIB:.1f} GiB of the simulator's ~{need / GIB:.1f} "
            f"GiB, more than {USABLE:.0%} of the {available / GIB:.1f} GiB available; expected "
            f"fewer rows: lower fleet.log_rows (null: sized to the run, about three per "
            f"evaluation), raise fleet.interval_s, or run fewer seeds or grid points per call"
        )
    held = (
        f", {cfg.n_entries} of them held as the live requests need"
        if cfg.n_entries < cfg.full_width
        else ""
    )
    leaps = (
        f"; the leap's tables {leap / GIB:.1f} GiB of it (engine.leap_max = {cfg.leap_max})"
        if leap > need / 4
        else ""
    )
    raise ConfigError(
        f"engine.max_slots / engine.queue_window / engine.n_instances / engine.leap_max / seeds "
        f"/ grid: the simulator would need ~{need / GIB:.1f} GiB ({n_s} workload(s) x {n_p} "
        f"policy point(s), each with {cfg.max_slots} slots + {cfg.queue_window} queued entries"
        f"{held} x {cfg.n_instances} instance(s){leaps}), more than {USABLE:.0%} of the "
        f"{available / GIB:.1f} GiB available; lower engine.queue_window, engine.max_slots, "
        f"engine.n_instances or engine.leap_max, or run fewer seeds or grid points per call"
    )


# bytes of one request's entries in the Workload arrays (times, lengths, draws): 5 f64 and
# 4 i32, plus the optional priority and cascade fields; prefix caching adds its block ids
WORKLOAD_BYTES_PER_REQUEST = 5 * 8 + 4 * 4 + 4 + 9


def workload_bytes(n_workloads: int, n_padded: int, cfg: EngineConfig) -> int:
    """Bytes of the Workload arrays of `n_workloads` traces padded to `n_padded` requests
    (at most: the optional fields counted), prefix block ids included with prefix caching."""
    per_request = WORKLOAD_BYTES_PER_REQUEST + (4 * cfg.prefix_width if cfg.prefix_cache else 0)
    return n_workloads * n_padded * per_request


def check_workload_fits(
    n_workloads: int, n_padded: int, cfg: EngineConfig, available: int | None = None
) -> int:
    """The estimated bytes of the workload arrays (before they are built); ConfigError naming
    the settings that size them when that exceeds USABLE of `available` (default:
    available_bytes())."""
    available = available_bytes() if available is None else available
    need = workload_bytes(n_workloads, n_padded, cfg)
    if available is None or need <= USABLE * available:
        return need
    prefix = f", each with {cfg.prefix_width} prefix block ids" if cfg.prefix_cache else ""
    coarser = ", or coarser prefix blocks (engine.prefix_block_tokens)" if cfg.prefix_cache else ""
    raise ConfigError(
        f"workload.duration_s / workload.max_requests / seeds"
        f"{' / engine.prefix_block_tokens' if cfg.prefix_cache else ''}: the workload would "
        f"need ~{need / GIB:.1f} GiB ({n_workloads} workload(s) x {n_padded} requests"
        f"{prefix}), more than {USABLE:.0%} of the {available / GIB:.1f} GiB available; "
        f"simulate a shorter slice (workload.duration_s, workload.max_requests) or fewer "
        f"seeds{coarser}"
    )
