"""Policy tuning: evolution-strategies gradients into optax under an SLO constraint."""

from servetune.tuning.runner import TuneResult, tune

__all__ = ["TuneResult", "tune"]
