"""Hydra callback (conf/config.yaml, hydra.callbacks): JAX's persistent compilation cache for
every run, a record of how often the simulator compiled, and a one-screen summary at the end of
a multirun.

- on_run_start / on_multirun_start / on_job_start: point JAX's persistent compilation cache at
  `compilation_cache.dir` (null: leave JAX's setting alone; so does a JAX_COMPILATION_CACHE_DIR
  in the environment), so a structural change compiles once per machine, not once per process.
- on_job_end: write jit_cache.json into the job's output directory: the process id and how many
  executables the simulator's jitted functions hold in this process so far (one per distinct
  static config and shape; Hydra's basic launcher runs every job in one process, so a sweep over
  traced policy values keeps run_chunk_batch at 1).
- on_multirun_start / on_multirun_end: a progress bar over the sweep's jobs (run/progress.py:
  job k of n, elapsed, ETA; plain lines at most every `progress_every_s` when not a terminal),
  then the sweep's points (overrides -> goodput, SLO attainment, P99 TTFT; seeds averaged), how
  often the simulator compiled, and the report command.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Any

from hydra.core.utils import JobStatus
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf
from rich.console import Console
from rich.markup import escape

from servetune.core.errors import ServetuneError
from servetune.core.files import write_json
from servetune.run import run_folder
from servetune.run.entry import JOB_ERROR_FILE

# (module, function) of the jitted simulator entry points whose compilations are counted
JITTED = (
    ("servetune.engine.loop", "run_chunk_batch"),
    ("servetune.engine.loop", "init_batch"),
    ("servetune.run.shard", "run_chunk"),
)
STATS_FILE = "jit_cache.json"


def enable_compilation_cache(directory: str | None, min_compile_time_s: float = 1.0) -> str | None:
    """Use JAX's persistent compilation cache in `directory` (~ expanded); returns the directory
    used, or None when `directory` is None or JAX_COMPILATION_CACHE_DIR is set (JAX's own)."""
    if not directory or os.environ.get("JAX_COMPILATION_CACHE_DIR"):
        return None
    import jax

    try:
        path = str(Path(directory).expanduser())
    except RuntimeError:  # ~nosuchuser: scenario.build names the key
        return None
    if jax.config.jax_compilation_cache_dir != path:
        jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", float(min_compile_time_s))
    return path


def jit_cache_sizes() -> dict:
    """{function name: executables in its jit cache} for the simulator's jitted functions that
    this process has imported."""
    sizes = {}
    for module, name in JITTED:
        fn = getattr(sys.modules.get(module), name, None)
        if fn is not None and hasattr(fn, "_cache_size"):
            sizes[name] = int(fn._cache_size())
    return sizes


def compile_summary(root: Path) -> dict | None:
    """From the jit_cache.json files of a sweep: jobs, processes and compilations of each
    function (per process the last job's count, summed over processes)."""
    per_pid: dict = {}
    jobs = 0
    for path in Path(root).rglob(STATS_FILE):
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        jobs += 1
        pid = doc.get("pid")
        for name, n in (doc.get("jit_cache") or {}).items():
            per_pid.setdefault(pid, {})
            per_pid[pid][name] = max(per_pid[pid].get(name, 0), int(n))
    if not jobs:
        return None
    total: dict = {}
    for sizes in per_pid.values():
        for name, n in sizes.items():
            total[name] = total.get(name, 0) + n
    return {"jobs": jobs, "processes": len(per_pid), "compilations": total}


def count_jobs(config: DictConfig) -> int | None:
    """How many jobs the multirun of `config` will launch: the product of the swept values for
    Hydra's basic sweeper (hydra.sweeper.params, then command-line overrides, the later one
    winning per key, as the sweeper does), n_trials for Optuna; None when it cannot tell."""
    target = str(OmegaConf.select(config, "hydra.sweeper._target_", default="") or "")
    if target.endswith("OptunaSweeper"):
        n = OmegaConf.select(config, "hydra.sweeper.n_trials", default=None)
        return int(n) if n is not None else None
    if not target.endswith("BasicSweeper"):
        return None
    from hydra.core.override_parser.overrides_parser import OverridesParser

    params = OmegaConf.select(config, "hydra.sweeper.params", default=None) or {}
    args = [f"{k}={v}" for k, v in params.items()]
    args += list(OmegaConf.select(config, "hydra.overrides.task", default=None) or [])
    try:
        parsed = OverridesParser.create().parse_overrides(args)
        counts = {
            o.get_key_element(): (
                len(list(o.sweep_string_iterator())) if o.is_sweep_override() else 1
            )
            for o in parsed
        }
    except Exception:  # noqa: BLE001 -- the sweeper reports bad overrides itself
        return None
    total = 1
    for n in counts.values():
        total *= n
    return total


def _claim(folder, command: str, supersede: bool) -> None:
    """Claim the run's output folder (run_folder.claim) before Hydra writes into it; a folder
    another live run holds, or one that cannot be claimed, ends the command with exit 2."""
    if not folder:
        return
    try:
        moved = run_folder.claim(Path(str(folder)), str(command), supersede)
    except (ServetuneError, OSError) as err:
        Console(stderr=True).print(
            f"[red]error:[/red] {escape(str(err))}", highlight=False, soft_wrap=True
        )
        sys.exit(2)
    if moved is not None:
        Console(stderr=True).print(
            f"note: {folder} held an earlier run's outputs; moved them to {moved}",
            highlight=False,
            soft_wrap=True,
        )


class ServetuneCallback(Callback):
    """See the module docstring. `summary`: print the end-of-sweep table; `max_rows`: its rows;
    `progress`: show the sweep's progress (a live bar on a terminal, else a plain line at most
    every `progress_every_s` seconds and one at the end)."""

    def __init__(
        self,
        summary: bool = True,
        max_rows: int = 20,
        progress: bool = True,
        progress_every_s: float = 30.0,
    ) -> None:
        self.summary = summary
        self.max_rows = max_rows
        self.progress = progress
        self.progress_every_s = progress_every_s
        self._bar = None

    def __getstate__(self) -> dict:
        # parallel launchers (joblib, Ray) pickle the callbacks into their workers; the
        # progress display stays in the sweep's process
        return dict(self.__dict__, _bar=None)

    @staticmethod
    def _cache(config: DictConfig) -> None:
        directory = OmegaConf.select(config, "compilation_cache.dir", default=None)
        min_s = OmegaConf.select(config, "compilation_cache.min_compile_time_s", default=1.0)
        enable_compilation_cache(directory, 1.0 if min_s is None else min_s)

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        command = OmegaConf.select(config, "hydra.help.app_name", default="servetune")
        # a tuning folder resumes; any other run moves a finished run's outputs aside
        _claim(
            OmegaConf.select(config, "hydra.run.dir"),
            command,
            supersede=not str(command).endswith("tune"),
        )
        self._cache(config)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        command = OmegaConf.select(config, "hydra.help.app_name", default="servetune")
        _claim(OmegaConf.select(config, "hydra.sweep.dir"), f"{command} -m", supersede=True)
        self._cache(config)
        if self.progress:
            from servetune.run.progress import SweepProgress

            root = Path(str(OmegaConf.select(config, "hydra.sweep.dir")))
            self._bar = SweepProgress(
                root, count_jobs(config), STATS_FILE, every_s=float(self.progress_every_s)
            ).start()

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._cache(config)  # launchers may run jobs in other processes

    def on_job_end(self, config: DictConfig, job_return: Any = None, **kwargs: Any) -> None:
        # written at every job's end (the sweep's progress counts these files)
        out = OmegaConf.select(config, "hydra.runtime.output_dir", default=None)
        if out is None:
            return
        try:
            doc = {
                "pid": os.getpid(),
                "job": OmegaConf.select(config, "hydra.job.num"),
                "jit_cache": jit_cache_sizes(),
            }
            write_json(Path(out) / STATS_FILE, doc, indent=None)
        except ServetuneError:
            pass
        if self._bar is not None:  # jobs in this process: count it now
            self._bar.poll()

    def on_run_end(self, config: DictConfig, job_return: Any = None, **kwargs: Any) -> None:
        folder = Path(str(OmegaConf.select(config, "hydra.run.dir")))
        if getattr(job_return, "status", None) == JobStatus.COMPLETED:
            run_folder.finish(folder)
        elif job_return is not None:  # it raised: the record says so, an earlier set is back
            with contextlib.suppress(OSError):
                run_folder.abandon(folder, repr(getattr(job_return, "_return_value", None)))

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        run_folder.finish(Path(str(OmegaConf.select(config, "hydra.sweep.dir"))))
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
        root = Path(str(OmegaConf.select(config, "hydra.sweep.dir")))
        if self.summary:
            self._print_summary(root)
        failed = failed_jobs(root)
        if failed:  # after the summary of the jobs that ran; the sweep as a whole failed
            err = Console(stderr=True)
            err.print(f"[red]{len(failed)} job(s) failed:[/red]", highlight=False)
            for doc in failed:
                err.print(
                    f"  #{doc.get('job')} ({' '.join(doc.get('overrides') or [])}): "
                    f"{doc.get('error')}",
                    highlight=False,
                    soft_wrap=True,
                )
            sys.exit(2)

    def _print_summary(self, root: Path) -> None:
        try:
            print_sweep_summary(root, self.max_rows)
        except Exception as err:  # noqa: BLE001 -- a summary must never fail the sweep
            Console(stderr=True).print(
                f"[yellow]sweep summary unavailable:[/yellow] {escape(str(err))}",
                highlight=False,
                soft_wrap=True,
            )


def failed_jobs(root: Path) -> list[dict]:
    """The error records ({job, overrides, error}) of the sweep's failed jobs under `root`,
    by job number (servetune.core.errors.exit_on_user_error writes them)."""
    docs = []
    for path in Path(root).rglob(JOB_ERROR_FILE):
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            doc = {"job": path.parent.name, "error": f"{path}: unreadable error record"}
        docs.append(doc if isinstance(doc, dict) else {"job": path.parent.name})
    return sorted(docs, key=lambda d: int(d["job"]) if str(d.get("job")).isdigit() else 1 << 30)


def print_sweep_summary(root: Path, max_rows: int = 20, console=None) -> bool:
    """Print the one-screen summary of the runs under `root`; False if there are none."""

    from servetune.reporting.collect import ReportError, collect
    from servetune.reporting.console import COLUMNS, points_table, wide_console
    from servetune.reporting.stats import aggregate

    console = console or wide_console()
    try:
        col = collect(root)
    except ReportError:
        return False
    points = aggregate(col)
    failed = len(failed_jobs(root))
    jobs = f"{col.runs['run'].nunique()} job(s)" + (f" ({failed} more failed)" if failed else "")
    console.print(
        points_table(
            points,
            col.keys,
            f"sweep: {jobs}, {len(points)} point(s), mean ±std over seeds",
            max_rows,
            columns=COLUMNS,
            ci=False,
        )
    )  # the report's, tokens per $ too
    comp = compile_summary(root)
    if comp is not None and comp["compilations"]:
        counts = ", ".join(f"{name} {n}x" for name, n in comp["compilations"].items() if n)
        console.print(
            f"simulator compilations: {counts or 'none'} in {comp['processes']} "
            f"process(es) across {comp['jobs']} job(s)",
            highlight=False,
            soft_wrap=True,
        )
    for message in col.skipped:
        console.print(f"warning: left out {message}", highlight=False, soft_wrap=True)
    console.print(f"report: servetune report {root}", highlight=False, soft_wrap=True)
    return True
