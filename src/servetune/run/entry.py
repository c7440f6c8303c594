"""How the Hydra commands end on a user error: exit 2 with the message, or, inside a
multirun, record the failed job and let the others run."""

import contextlib
import math
import sys
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import OmegaConf
from rich.console import Console
from rich.markup import escape

from servetune.core.errors import ResourceLimitError, ServetuneError
from servetune.core.files import write_json
from servetune.run import run_folder
from servetune.run.joblog import kept_in_log

JOB_ERROR_FILE = "error.json"  # a failed multirun job's record, in its output folder


def exit_on_user_error(run, cfg):
    """Return run(cfg); a ServetuneError (a user error) prints its message and exits with 2.
    What the command prints is also kept in the run folder's log (servetune.run.joblog).

    In a Hydra multirun the job does not exit (that would end the other jobs too): it writes
    JOB_ERROR_FILE ({job, overrides, error}) into its output folder and returns the worst
    objective for the sweeper's direction (-inf when maximizing; Optuna refuses NaN), so an
    Optuna study steers away from it; the sweep's end names the failed jobs and exits 2
    (servetune.reporting.callback)."""
    with kept_in_log():  # the run folder's log keeps what the command prints
        try:
            return run(cfg)
        except ServetuneError as err:
            job = _multirun_job()
            where = "" if job is None else f"job #{job['job']} ({' '.join(job['overrides'])}): "
            Console(stderr=True).print(
                f"[red]error:[/red] {escape(where + str(err))}", highlight=False, soft_wrap=True
            )
            if job is None:
                _abandon_run_folder(str(err), isinstance(err, ResourceLimitError))
                sys.exit(2)
            write_json(Path(job.pop("output_dir")) / JOB_ERROR_FILE, dict(job, error=str(err)))
            return _worst_value()


def _abandon_run_folder(error: str, refused: bool) -> None:
    """run_folder.abandon on this Hydra run's output folder (the earlier set put back), its
    record "refused" where the resource guard stopped it before it ran, else "failed"."""
    if not HydraConfig.initialized():
        return
    folder = Path(str(HydraConfig.get().runtime.output_dir))
    state = run_folder.REFUSED if refused else run_folder.FAILED
    with contextlib.suppress(OSError):
        restored = run_folder.abandon(folder, error, state)
        if restored is not None:
            Console(stderr=True).print(
                f"note: put back the earlier run's outputs in {folder} (this run's files: "
                f"{folder / run_folder.SUPERSEDED}/*-failed)",
                highlight=False,
                soft_wrap=True,
            )


def _worst_value() -> float:
    """-inf, or +inf when the sweeper minimizes (hydra.sweeper.direction: minimize)."""
    direction = OmegaConf.select(HydraConfig.get(), "sweeper.direction", default="maximize")
    return math.inf if str(direction).lower() == "minimize" else -math.inf


def _multirun_job() -> dict | None:
    """{job, overrides, output_dir} of the Hydra multirun job running now; None outside one."""
    if not HydraConfig.initialized() or HydraConfig.get().mode != RunMode.MULTIRUN:
        return None
    hc = HydraConfig.get()
    return {
        "job": hc.job.num,
        "overrides": list(hc.overrides.task),
        "output_dir": hc.runtime.output_dir,
    }


def script_status(main, argv: list[str] | None = None) -> int:
    """The exit status of a study script's `main(argv)` (sweeps/*/*.py): its own (0 when it
    returns None), or 2 with the message and no traceback on a user error (a ServetuneError:
    a refused config, a missing extra, a failed step the script names)."""
    try:
        status = main(argv)
    except ServetuneError as err:
        Console(stderr=True).print(
            f"[red]error:[/red] {escape(str(err))}", highlight=False, soft_wrap=True
        )
        return 2
    return 0 if status is None else int(status)
