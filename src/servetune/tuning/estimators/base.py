"""The one interface of the tuner's gradient estimators (optax's habit: a small typed
contract, implementations beside it): an estimator maps the current point theta [d], the
constraint's multiplier lambda and the iteration to an Estimate. The runner calls it without
knowing which one it is (tuning/runner.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple, Protocol

import numpy as np

# points [M, d] (in the search space's coordinates) and lambda -> each point's objective
# summary (tuning/objective.py), scored by the exact simulator on the tuning workloads
Score = Callable[[np.ndarray, float], list[dict]]


class Estimate(NamedTuple):
    """One estimate at a point: the `points` [M, d] the exact simulator scored (the center
    first) with their `summaries`, the ascent direction `gradient` [d] of the Lagrangian, and
    the estimator's own figures for history.csv (`extra`, e.g. the smoothed objective)."""

    points: np.ndarray
    summaries: list[dict]
    gradient: np.ndarray
    extra: dict


class Estimator(Protocol):
    """What the runner calls each iteration."""

    def __call__(self, theta: np.ndarray, lam: float, iteration: int) -> Estimate: ...
