"""The host's memory, as the size checks read it (before JAX loads: the workload readers and
the resource guard use it as well as the simulator's own fit check, engine/memory.py)."""

from __future__ import annotations

USABLE = 0.8  # of the memory available, the most a rollout may plan to take
GIB = 1 << 30


def host_available_bytes() -> int | None:
    """The host's available memory (MemAvailable of /proc/meminfo), None when unknown: what
    the host-side arrays of a run (its traces, results and metrics) can take."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None
