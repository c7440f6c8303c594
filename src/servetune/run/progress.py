"""Progress display: a bar over the jobs of a multirun and one per long simulation.

- `SweepProgress` (started by the Hydra callback, reporting/callback.py) follows a multirun's
  jobs: job k of n with elapsed time and ETA. It counts finished jobs by the marker file that
  the callback writes at each job's end (jit_cache.json), polling the sweep directory, so it
  works whatever the launcher: Hydra's basic one (jobs in this process), joblib (worker
  processes), Ray or SLURM (other machines sharing the filesystem).
- `simulation_progress` gives `api.simulate_batch` its progress callback (requests taken into
  the simulation out of all, after each compiled chunk) and shows it as a bar: a line under
  the sweep's bar when a multirun runs its jobs in this process, a bar of its own otherwise.

On a terminal the bars are live (rich). Elsewhere (a log file, CI, a SLURM job, a notebook)
nothing is redrawn: a simulation prints a plain line at most every 10 s (none for a short
run), and a sweep one at most every `every_s` seconds plus one when the last job ends (its
jobs' simulations then print none), so logs stay short. A worker process of a parallel
launcher never draws its own bar (the sweep's process does).
"""

from __future__ import annotations

import atexit
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

PID_ENV = "SERVETUNE_SWEEP_PID"  # the process that draws the sweep's display
_LIVE: Progress | None = None  # the sweep's live display, when this process draws it


def _bar(console: Console, **kwargs) -> Progress:
    return Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=console,
        **kwargs,
    )


def _fmt(seconds: float) -> str:
    s = round(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


class SweepProgress:
    """Jobs of a multirun finished so far, as a live bar (terminal) or sparse plain lines.

    root: the sweep directory; total: the number of jobs (None when the sweeper cannot tell);
    marker: the file name a finished job leaves in its directory; every_s: on a non-terminal,
    the least interval between two plain lines; console: where to draw (stderr by default).
    """

    def __init__(
        self,
        root: Path,
        total: int | None,
        marker: str,
        every_s: float = 30.0,
        console: Console | None = None,
        poll_s: float = 0.5,
    ) -> None:
        self.root, self.total, self.marker = Path(root), total, marker
        self.every_s, self.poll_s = float(every_s), float(poll_s)
        self.console = console or Console(stderr=True)
        self.live = self.console.is_terminal
        self.done = 0
        self._seen: set[Path] = set()
        self._t0 = time.time()
        self._last_line = -float("inf")
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._bar: Progress | None = None
        self._task = None

    def start(self) -> SweepProgress:
        global _LIVE
        self._t0 = time.time()
        os.environ[PID_ENV] = str(os.getpid())
        if self.live:
            self._bar = _bar(self.console, transient=False)
            self._task = self._bar.add_task("sweep jobs", total=self.total)
            self._bar.start()
            _LIVE = self._bar
        self._thread = threading.Thread(
            target=self._run, name="servetune-sweep-progress", daemon=True
        )
        self._thread.start()
        atexit.register(self.stop)
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.poll_s):
            self.poll()

    def _count(self) -> int:
        try:
            for path in self.root.rglob(self.marker):
                if path not in self._seen and path.stat().st_mtime >= self._t0 - 1.0:
                    self._seen.add(path)
        except OSError:
            pass
        return len(self._seen)

    def poll(self) -> int:
        """Count finished jobs and update the display; returns the count."""
        with self._lock:
            done = self._count()
            if done != self.done:
                self.done = done
                if self._bar is not None:
                    self._bar.update(self._task, completed=done)
                else:
                    now = time.time()
                    if now - self._last_line >= self.every_s or done == self.total:
                        self._last_line = now
                        self.console.print(self.line(), highlight=False, soft_wrap=True)
            return self.done

    def line(self) -> str:
        """One plain line: jobs done of all, elapsed, ETA."""
        elapsed = time.time() - self._t0
        of = f"/{self.total}" if self.total else ""
        text = f"sweep: {self.done}{of} job(s) done, {_fmt(elapsed)} elapsed"
        if self.total and 0 < self.done < self.total:
            text += f", ETA {_fmt(elapsed / self.done * (self.total - self.done))}"
        return text

    def stop(self) -> None:
        """Stop polling (after a last count) and close the display; idempotent."""
        global _LIVE
        if self._stop.is_set():
            return
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5.0)
        self.poll()
        if self._bar is not None:
            self._bar.stop()
            if _LIVE is self._bar:
                _LIVE = None
            self._bar = None
        if os.environ.get(PID_ENV) == str(os.getpid()):
            del os.environ[PID_ENV]
        atexit.unregister(self.stop)


LOG_WIDTH = 160  # columns of a console writing to a file or a pipe


def console(stderr: bool = False) -> Console:
    """A console for a job's output: while this process draws the sweep's live bar, its console
    (printing above the bar; a console of its own would write through it) when the stream is a
    terminal too; otherwise a Console on stdout or stderr, LOG_WIDTH columns wide when that is a
    file or a pipe (a log's lines are not wrapped at 80)."""
    con = Console(stderr=stderr)
    live = _LIVE
    if live is not None and con.is_terminal:
        return live.console
    return con if con.is_terminal else Console(stderr=stderr, width=LOG_WIDTH)


class PlainProgress:
    """A simulation's progress as a plain line at most every `every_s` seconds (a log, a
    notebook, a pipe: nothing is redrawn there): requests taken of all, elapsed, ETA. The first
    line comes once `every_s` have passed, so a short run prints none."""

    def __init__(self, console: Console, label: str, every_s: float = 10.0) -> None:
        self.console, self.label, self.every_s = console, label, float(every_s)
        self._t0 = time.time()
        self._last = self._t0

    def __call__(self, done: int, total: int) -> None:
        now = time.time()
        if now - self._last < self.every_s:
            return
        self._last = now
        elapsed = now - self._t0
        text = f"simulating: {done:,} of {total:,} {self.label}, {_fmt(elapsed)} elapsed"
        if 0 < done < total:
            text += f", ETA {_fmt(elapsed / done * (total - done))} (requests are uneven)"
        self.console.print(text, highlight=False, soft_wrap=True)


@contextmanager
def simulation_progress(
    enabled: bool = True,
    label: str = "requests taken",
    console: Console | None = None,
    every_s: float = 10.0,
) -> Iterator[Callable[[int, int], None] | None]:
    """The progress callback for `api.simulate_batch` (None: no display), as a context: a live
    bar on a terminal, a plain line at most every `every_s` seconds elsewhere (a log file, a
    notebook, a pipe), nothing in a parallel launcher's worker (its sweep's process shows the
    jobs) or when not `enabled` (output.progress=false)."""
    if not enabled:
        yield None
        return
    sweep = _LIVE
    if sweep is not None:  # a multirun's jobs in this process: a line under the sweep's bar
        task = sweep.add_task(f"  {label}", total=None)
        try:
            yield lambda done, total: sweep.update(task, completed=done, total=total)
        finally:
            sweep.remove_task(task)
        return
    owner = os.environ.get(PID_ENV)
    console = console or Console(stderr=True)
    if owner and owner != str(os.getpid()):
        yield None  # a parallel launcher's worker: the sweep's process shows the jobs
        return
    if owner or not console.is_terminal:  # a sweep's job in a log, or a log, notebook, pipe
        yield None if owner else PlainProgress(console, label, every_s)
        return
    with _bar(console, transient=True) as bar:
        task = bar.add_task(label, total=None)
        yield lambda done, total: bar.update(task, completed=done, total=total)
