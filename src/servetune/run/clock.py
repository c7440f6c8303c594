"""Where a command's wall time went, as it prints it: seconds since the process started (what
the user waited; for a later job of a multirun in one process, since the job before it ended),
of which start-up (the interpreter, imports, Hydra, reading the config and the trace), XLA
compilation (summed from JAX's own compile events) and the rest (simulating, writing).

The process's start is read from /proc (Linux); elsewhere it is when this module was first
imported, which servetune.cli.main does first thing.
"""

from __future__ import annotations

import dataclasses
import os
import time

_IMPORTED = time.time()
_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"  # jax.monitoring's name
_compiled_s = [0.0]  # seconds of XLA compilation in this process, once counting started
_listening = [False]


def process_started() -> float:
    """time.time() when this process started (seconds since the epoch)."""
    try:
        with open(f"/proc/{os.getpid()}/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return time.time() - uptime + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return _IMPORTED


def _on_event(event: str, duration: float, **_) -> None:
    if event == _COMPILE_EVENT:
        _compiled_s[0] += duration


def count_compilation() -> None:
    """Start summing this process's XLA compile seconds (idempotent; imports JAX)."""
    if not _listening[0]:
        import jax.monitoring

        jax.monitoring.register_event_duration_secs_listener(_on_event)
        _listening[0] = True


def compiled_s() -> float:
    """Seconds of XLA compilation counted so far in this process."""
    return _compiled_s[0]


@dataclasses.dataclass(frozen=True)
class WallTime:
    """A command's seconds: since the process started (`total`), of which `startup` before its
    work began, `compiling` during it; the rest simulated and wrote."""

    total: float
    startup: float
    compiling: float

    def text(self) -> str:
        """ "41.6 s wall: 4.1 s start-up, 6.3 s compiling, 31.2 s simulating and writing"."""
        rest = max(self.total - self.startup - self.compiling, 0.0)
        return (
            f"{self.total:.1f} s wall: {self.startup:.1f} s start-up, {self.compiling:.1f} s "
            f"compiling, {rest:.1f} s simulating and writing"
        )


_last_end = [0.0]  # when the previous command of this process ended (a multirun's jobs)


class Stopwatch:
    """Started where a command's work begins (after the config and trace are read); `wall()`
    then splits the time since the command started: the process's start, or, for a later
    job of a multirun in the same process, the previous job's end."""

    def __init__(self) -> None:
        count_compilation()
        self.began = time.time()
        self.started = max(process_started(), _last_end[0])
        self.compiled_at_start = compiled_s()

    def wall(self) -> WallTime:
        """The split so far (and the command's end, for the next one in this process)."""
        now = time.time()
        _last_end[0] = now
        return WallTime(
            total=now - self.started,
            startup=max(self.began - self.started, 0.0),
            compiling=compiled_s() - self.compiled_at_start,
        )
