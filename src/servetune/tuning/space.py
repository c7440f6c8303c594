"""Search space: tunable policy keys as bounded transforms of an unconstrained vector.

The tuner moves a point z in R^d; each coordinate maps to its policy value through a sigmoid
onto [low, high], on a log scale for limits that span orders of magnitude (max_num_seqs,
max_num_batched_tokens, queue_cap) or a linear one (the KV watermark, priority weights).
Integer limits stay continuous here; the engine floors them (relax.integer_limit) and the
exporter rounds them the same way. With the neural policy family the point also carries the
score network's flat weights (unbounded coordinates, scaled by tune.net.scale).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

import numpy as np

from servetune.errors import ConfigError
from servetune.policy import BOUNDS, DEFAULTS

_EDGE = 0.02  # initial points are kept this far inside the bounds (sigmoid units), where
#               a perturbation of the coordinate still moves the value


@dataclasses.dataclass(frozen=True)
class Dimension:
    """One tunable key: value = low..high through a sigmoid of z, on a `log` or `linear` scale."""

    key: str
    low: float
    high: float
    scale: str = "linear"

    def value(self, z: np.ndarray) -> np.ndarray:
        """Policy value(s) of coordinate(s) z."""
        u = 1.0 / (1.0 + np.exp(-np.asarray(z, np.float64)))
        if self.scale == "log":
            v = np.exp(math.log(self.low) + (math.log(self.high) - math.log(self.low)) * u)
        else:
            v = self.low + (self.high - self.low) * u
        return np.clip(v, self.low, self.high)  # exp(log(x)) may round past a bound

    def coordinate(self, value: float) -> float:
        """The z whose value is `value` (clipped just inside the bounds)."""
        if self.scale == "log":
            u = (math.log(value) - math.log(self.low)) / (math.log(self.high) - math.log(self.low))
        else:
            u = (value - self.low) / (self.high - self.low)
        u = min(max(u, _EDGE), 1.0 - _EDGE)
        return math.log(u / (1.0 - u))


@dataclasses.dataclass(frozen=True)
class SearchSpace:
    """The ordered tunable dimensions, then (policy family neural) `net_size` coordinates of
    the score network's flat weights, score_net = net_scale x z (unbounded)."""

    dims: tuple[Dimension, ...]
    net_size: int = 0
    net_scale: float = 1.0

    @property
    def keys(self) -> list[str]:
        """Tuned policy keys (scalars), in coordinate order."""
        return [d.key for d in self.dims]

    @property
    def size(self) -> int:
        """Coordinates of a point: the scalar dimensions, then the network's weights."""
        return len(self.dims) + self.net_size

    def values(self, z: np.ndarray) -> dict[str, np.ndarray]:
        """Policy values of points z [..., size]: a dict key -> array [...] (score_net:
        [..., net_size])."""
        z = np.asarray(z, np.float64)
        out = {d.key: d.value(z[..., k]) for k, d in enumerate(self.dims)}
        if self.net_size:
            out["score_net"] = self.net_scale * z[..., len(self.dims):]
        return out

    def point(self, values: Mapping[str, float]) -> np.ndarray:
        """The z [size] of a policy (missing keys take the policy defaults; a network's
        weights come from values["score_net"])."""
        z = [d.coordinate(float(values.get(d.key, DEFAULTS[d.key]))) for d in self.dims]
        if self.net_size:
            w = np.asarray(values["score_net"], np.float64).reshape(-1)
            if w.shape != (self.net_size,):
                raise ConfigError(f"policy.score_net: {w.size} weights; the tuned network has "
                                  f"{self.net_size}")
            z = np.concatenate([z, w / self.net_scale])
        return np.asarray(z, np.float64)


def space_from_config(spec: Mapping[str, Mapping], key_prefix: str = "tune.space",
                      net_size: int = 0, net_scale: float = 1.0) -> SearchSpace:
    """Build a SearchSpace from {key: {low, high, scale} or null (not tuned)} (plus net_size
    network weights); errors name `tune.space.<key>`."""
    dims = []
    for key, d in (spec or {}).items():
        where = f"{key_prefix}.{key}"
        if d is None:  # null: not tuned (lets an experiment drop a key the tune config lists)
            continue
        if key not in DEFAULTS:
            raise ConfigError(f"{where}: not a policy parameter; expected one of "
                              f"{sorted(DEFAULTS)}")
        if not isinstance(d, Mapping) or not {"low", "high"} <= set(d):
            raise ConfigError(f"{where}: got {d!r}; expected "
                              f"{{low: ..., high: ..., scale: log|linear}}")
        scale = d.get("scale", "linear")
        try:
            low, high = float(d["low"]), float(d["high"])
        except (TypeError, ValueError):
            raise ConfigError(f"{where}: low/high must be numbers; got {d['low']!r}, "
                              f"{d['high']!r}") from None
        if scale not in ("log", "linear"):
            raise ConfigError(f"{where}.scale: got {scale!r}; expected log or linear")
        if not (math.isfinite(low) and math.isfinite(high) and low < high):
            raise ConfigError(f"{where}: expected finite low < high; got [{low}, {high}]")
        if scale == "log" and low <= 0:
            raise ConfigError(f"{where}.low: got {low}; a log scale needs low > 0")
        valid_lo, valid_hi = BOUNDS[key]
        if low < valid_lo or high > valid_hi:
            raise ConfigError(f"{where}: got [{low:g}, {high:g}]; policy.{key} is valid within "
                              f"[{valid_lo:g}, {valid_hi:g}]")
        dims.append(Dimension(key, low, high, scale))
    if not dims and not net_size:
        raise ConfigError(f"{key_prefix}: empty; name at least one policy key to tune")
    return SearchSpace(tuple(dims), net_size, net_scale)
