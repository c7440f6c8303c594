"""Evolution strategies: a gradient estimate of a black-box objective from a population.

Antithetic sampling (each perturbation eps is evaluated at theta + sigma eps and theta - sigma eps),
common random numbers (every member of a population runs on the same workloads) and centered
rank shaping (fitness replaced by its rank, scaled to [-0.5, 0.5]) give the estimate
  g = 1 / (2 m sigma) * sum_i (r(theta + sigma eps_i) - r(theta - sigma eps_i)) eps_i
(Salimans et al. 2017), which feeds any optax optimizer.
"""

from __future__ import annotations

import numpy as np

from servetune.tuning.estimators.base import Estimate, Score


def perturbations(seed: int, iteration: int, pairs: int, dim: int) -> np.ndarray:
    """Standard normal eps [pairs, dim], a pure function of (seed, iteration) so a resumed
    run draws what an uninterrupted one would."""
    return np.random.default_rng([seed, iteration]).standard_normal((pairs, dim))


def population(theta: np.ndarray, eps: np.ndarray, sigma: float) -> np.ndarray:
    """Points [1 + 2 pairs, dim]: the center, then theta + sigma eps, then theta - sigma eps."""
    theta = np.asarray(theta, np.float64)
    return np.concatenate([theta[None], theta + sigma * eps, theta - sigma * eps])


def centered_ranks(x: np.ndarray) -> np.ndarray:
    """Ranks of x scaled to [-0.5, 0.5] (ties broken by position); NaN ranks lowest."""
    x = np.where(np.isfinite(x), x, -np.inf)
    ranks = np.empty(len(x))
    ranks[np.argsort(x, kind="stable")] = np.arange(len(x))
    return ranks / max(len(x) - 1, 1) - 0.5


def gradient(
    fit_plus: np.ndarray,
    fit_minus: np.ndarray,
    eps: np.ndarray,
    sigma: float,
    rank_shaping: bool = True,
) -> np.ndarray:
    """ES estimate [dim] of the gradient of the expected fitness at theta (ascent direction)."""
    fit = np.concatenate([fit_plus, fit_minus])
    if rank_shaping:
        fit = centered_ranks(fit)
    m = len(fit_plus)
    diff = fit[:m] - fit[m:]
    return (diff[:, None] * eps).sum(0) / (2 * m * sigma)


class EvolutionStrategies:
    """The ES estimator (tune.estimator=es): `pairs` antithetic pairs of standard deviation
    `sigma` (in the search space's coordinates) around theta, drawn from (`seed`, iteration),
    scored by `score` together with the center; the gradient from the Lagrangians' ranks."""

    def __init__(self, score: Score, seed: int, pairs: int, sigma: float):
        self.score, self.seed, self.pairs, self.sigma = score, seed, pairs, sigma

    def __call__(self, theta: np.ndarray, lam: float, iteration: int) -> Estimate:
        """The center and its population scored, and the ES gradient [d] at theta."""
        eps = perturbations(self.seed, iteration, self.pairs, np.shape(theta)[-1])
        points = population(theta, eps, self.sigma)
        summaries = self.score(points, lam)
        lagr = np.array([s["lagrangian"] for s in summaries])
        m = self.pairs
        grad = gradient(lagr[1 : 1 + m], lagr[1 + m :], eps, self.sigma)
        return Estimate(points, summaries, grad, {})
