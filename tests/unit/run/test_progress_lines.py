"""Progress wherever a run is long (issue 57): a simulation in a log or a notebook prints a
plain line every few seconds (run/progress.py), the Python API shows it as the command line
does, and the printed wall time counts from the process start, split into start-up,
compilation and the rest (run/clock.py). No simulation runs here."""

from __future__ import annotations

import io
import time

from rich.console import Console

from servetune.run import clock, progress


def _log_console() -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(file=buf, width=160, force_terminal=False), buf


def test_a_log_gets_a_plain_line_every_few_seconds_and_a_short_run_none(monkeypatch):
    con, buf = _log_console()
    now = [1000.0]
    monkeypatch.setattr(progress.time, "time", lambda: now[0])
    line = progress.PlainProgress(con, "requests taken", every_s=10.0)
    line(100, 1000)  # at once: no line yet
    now[0] += 4.0
    line(300, 1000)
    assert buf.getvalue() == ""
    now[0] += 8.0  # 12 s in
    line(400, 1000)
    now[0] += 3.0
    line(500, 1000)  # 3 s after the last line: none
    now[0] += 10.0
    line(1000, 1000)
    lines = buf.getvalue().splitlines()
    assert lines == [
        "simulating: 400 of 1,000 requests taken, 0:00:12 elapsed, ETA 0:00:18 (requests are "
        "uneven)",
        "simulating: 1,000 of 1,000 requests taken, 0:00:25 elapsed",
    ]


def test_outside_a_terminal_the_simulation_prints_lines_not_nothing(monkeypatch):
    """(issue 57) a simulated day in a log showed nothing for 5 minutes after its first line."""
    monkeypatch.delenv(progress.PID_ENV, raising=False)
    con, _ = _log_console()
    with progress.simulation_progress(True, console=con) as callback:
        assert isinstance(callback, progress.PlainProgress)
    with progress.simulation_progress(False, console=con) as callback:
        assert callback is None  # output.progress=false
    monkeypatch.setenv(progress.PID_ENV, "1")  # another process draws a sweep: its worker
    with progress.simulation_progress(True, console=con) as callback:
        assert callback is None


def test_the_python_api_shows_progress_unless_told_not_to():
    """(issue 57) servetune.simulate printed nothing until its result."""
    import inspect

    from servetune.run import api

    assert inspect.signature(api.simulate).parameters["progress"].default is True


def test_the_wall_time_counts_from_the_process_start_and_splits_it():
    started = clock.process_started()
    assert started <= time.time() and time.time() - started < 24 * 3600
    watch = clock.Stopwatch()
    wall = watch.wall()
    assert wall.startup >= 0 and wall.compiling >= 0
    assert wall.total >= wall.startup
    text = clock.WallTime(41.6, 4.1, 6.3).text()
    assert text == "41.6 s wall: 4.1 s start-up, 6.3 s compiling, 31.2 s simulating and writing"


def test_a_later_job_of_a_multirun_counts_from_the_job_before_it(monkeypatch):
    """(a review's finding) job k of a multirun in one process said "890 s start-up"."""
    now = [5000.0]
    monkeypatch.setattr(clock.time, "time", lambda: now[0])
    monkeypatch.setattr(clock, "process_started", lambda: 4000.0)
    monkeypatch.setattr(clock, "_last_end", [0.0])
    first = clock.Stopwatch()
    now[0] += 10.0
    assert first.wall().total == 1010.0  # the first job: since the process started
    now[0] += 2.0
    second = clock.Stopwatch()
    now[0] += 5.0
    wall = second.wall()
    assert wall.total == 7.0 and wall.startup == 2.0
