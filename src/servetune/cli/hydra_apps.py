"""The Hydra apps of `servetune simulate`, `servetune tune` and `servetune calibrate` (cli.py
runs them). This module stays light: Hydra answers `--help` and composes the config before a
job function, and with it JAX and the simulator, is imported (commands.py, calibrate.py)."""

from __future__ import annotations

import hydra
from omegaconf import DictConfig, OmegaConf

from servetune.run.entry import exit_on_user_error


@hydra.main(config_path="pkg://servetune.conf", config_name="config", version_base=None)
def simulate_app(cfg: DictConfig) -> float:
    """`servetune simulate`: the job's return value is what a sweeper such as Optuna maximizes
    (sweep.objective)."""
    from servetune.cli.commands import simulate_job

    return exit_on_user_error(lambda c: simulate_job(c)[1], cfg)


@hydra.main(config_path="pkg://servetune.conf", config_name="config", version_base=None)
def tune_app(cfg: DictConfig) -> None:
    """`servetune tune`: exit 2 with the message on a user error."""
    from servetune.cli.commands import run_tune

    exit_on_user_error(run_tune, cfg)


@hydra.main(config_path="pkg://servetune.conf", config_name="calibrate", version_base=None)
def calibrate_app(cfg: DictConfig) -> None:
    """`servetune calibrate`: exit 2 with the message on a user error."""
    from servetune.validate.calibrate import run_calibrate

    exit_on_user_error(run_calibrate, cfg)


def _aic_coverage() -> str:
    """`simulate --help`'s lines on what cost=aic covers (config/aic.coverage), read only when
    the help is printed."""
    from servetune.config import aic

    return aic.coverage()


OmegaConf.register_new_resolver("servetune.aic_coverage", _aic_coverage, replace=True)
