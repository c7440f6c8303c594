"""Search space: tunable policy keys as bounded transforms of an unconstrained vector.

The tuner moves a point z in R^d; each coordinate maps to its policy value through a sigmoid
onto [low, high], on a log scale for limits that span orders of magnitude (max_num_seqs,
max_num_batched_tokens, queue_cap) or a linear one (the KV watermark, priority weights).
Integer limits stay continuous here; the engine floors them (relax.integer_limit) and the
exporter rounds them the same way. With the neural policy family the point also carries the
score network's flat weights (unbounded coordinates, scaled by tune.net.scale).

Every point maps to limits vLLM accepts: `Constraints` projects the tuned values onto vLLM's
own startup checks (budget >= sequences, and so on), so the search never visits, and the
export never carries, a setting the engine would refuse.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

import numpy as np

from servetune.config import fleet as fleet_lib
from servetune.config.policy import BOUNDS, DEFAULTS, FIELDS
from servetune.core.errors import ConfigError

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
        v = np.clip(v, self.low, self.high)  # exp(log(x)) may round past a bound
        # exp(log(8192)) is 8191.999...: snap round-trip error to the integer, so a limit the
        # engine floors keeps the value it was started at
        whole = np.round(v)
        return np.where(np.abs(v - whole) <= 1e-9 * np.maximum(np.abs(v), 1.0), whole, v)

    def coordinate(self, value: float) -> float:
        """The z whose value is `value` (clipped just inside the bounds; a knob that is off,
        such as an unlimited cap, at the top of the range)."""
        if self.key in FIELDS and value == FIELDS[self.key].off:  # an off knob starts where
            # it binds least
            value = math.inf
        if self.scale == "log":
            u = (math.log(max(value, self.low)) - math.log(self.low)) / (
                math.log(self.high) - math.log(self.low)
            )
        else:
            u = (value - self.low) / (self.high - self.low)
        u = min(max(u, _EDGE), 1.0 - _EDGE)
        return math.log(u / (1.0 - u))


@dataclasses.dataclass(frozen=True)
class Constraints:
    """vLLM 0.32's startup checks on the scheduler's limits (vllm/config/scheduler.py,
    SchedulerConfig's verification), as a projection of tuned values onto settings it accepts:

    - max_num_batched_tokens >= max_num_seqs (every running sequence can take a token), and
      >= max_model_len when chunked prefill is off (a whole prompt fits one iteration);
    - max_num_seqs >= max_num_active_seqs;
    - long_prefill_token_threshold <= max_model_len.

    A tuned key is moved to the nearest value that passes, given the others (tuned, or the
    policy's fixed values in `fixed`); the token budget gives way first, so a tuned
    max_num_seqs is clipped only by a budget that is not tuned. Works on numpy or jax.numpy
    arrays (`xp`), so the exact and the relaxed tuners search the same set. A projection may
    leave a value outside its tune.space range; export.vllm_rule names these checks when
    it does (keep the two lists in step)."""

    max_model_len: float = math.inf  # tokens
    chunked_prefill: bool = True
    fixed: tuple[tuple[str, float], ...] = ()  # (policy key, value) of the untuned limits

    def apply(self, values: dict, xp=np) -> dict:
        """`values` (policy key -> array [...]) with the tuned limits projected."""
        out, fixed = dict(values), dict(self.fixed)
        get = lambda key: out[key] if key in out else fixed.get(key)
        seqs, budget, active = "max_num_seqs", "max_num_batched_tokens", "max_num_active_seqs"
        if seqs in out and active not in out and fixed.get(active, math.inf) < math.inf:
            out[seqs] = xp.maximum(out[seqs], fixed[active])
        if seqs in out and budget not in out and fixed.get(budget) is not None:
            out[seqs] = xp.minimum(out[seqs], fixed[budget])
        if budget in out:
            floor = 0.0 if self.chunked_prefill else self.max_model_len
            if get(seqs) is not None:
                floor = xp.maximum(get(seqs), floor)
            out[budget] = xp.maximum(out[budget], floor)
        if active in out and get(seqs) is not None:
            out[active] = xp.minimum(out[active], get(seqs))
        if "long_prefill_token_threshold" in out:
            out["long_prefill_token_threshold"] = xp.minimum(
                out["long_prefill_token_threshold"], self.max_model_len
            )
        return out


_CONSTRAINED = ("max_num_seqs", "max_num_batched_tokens", "max_num_active_seqs")


def constraints_for(
    base: Mapping[str, object], max_model_len: int, chunked_prefill: bool
) -> Constraints:
    """The Constraints of a scenario: its policy `base` (key -> value; the untuned limits are
    read from it), its engine's max_model_len (tokens) and chunked prefill on or off."""
    fixed = tuple((k, float(base[k])) for k in _CONSTRAINED if k in base)
    return Constraints(float(max_model_len), bool(chunked_prefill), fixed)


@dataclasses.dataclass(frozen=True)
class SearchSpace:
    """The ordered tunable dimensions, then (policy family neural) `net_size` coordinates of
    the score network's flat weights, score_net = net_scale x z (unbounded); `constraints`
    project every point onto limits vLLM accepts."""

    dims: tuple[Dimension, ...]
    net_size: int = 0
    net_scale: float = 1.0
    constraints: Constraints = Constraints()

    @property
    def keys(self) -> list[str]:
        """Tuned policy keys (scalars), in coordinate order."""
        return [d.key for d in self.dims]

    @property
    def ranges(self) -> dict[str, tuple[float, float]]:
        """Tuned policy key -> its configured (low, high), in the key's units."""
        return {d.key: (d.low, d.high) for d in self.dims}

    @property
    def size(self) -> int:
        """Coordinates of a point: the scalar dimensions, then the network's weights."""
        return len(self.dims) + self.net_size

    def values(self, z: np.ndarray) -> dict[str, np.ndarray]:
        """Policy values of points z [..., size], projected by the constraints: a dict
        key -> array [...] (score_net: [..., net_size])."""
        z = np.asarray(z, np.float64)
        out = self.constraints.apply({d.key: d.value(z[..., k]) for k, d in enumerate(self.dims)})
        if self.net_size:
            out["score_net"] = self.net_scale * z[..., len(self.dims) :]
        return out

    def point(self, values: Mapping[str, float]) -> np.ndarray:
        """The z [size] of a policy (missing keys take the policy defaults; a network's
        weights come from values["score_net"])."""
        z = [d.coordinate(float(values.get(d.key, DEFAULTS.get(d.key)))) for d in self.dims]
        if self.net_size:
            w = np.asarray(values["score_net"], np.float64).reshape(-1)
            if w.shape != (self.net_size,):
                raise ConfigError(
                    f"policy.score_net: {w.size} weights; the tuned network has {self.net_size}"
                )
            z = np.concatenate([z, w / self.net_scale])
        return np.asarray(z, np.float64)


def space_from_config(
    spec: Mapping[str, Mapping],
    key_prefix: str = "tune.space",
    net_size: int = 0,
    net_scale: float = 1.0,
) -> SearchSpace:
    """Build a SearchSpace from {key: {low, high, scale} or null (not tuned)} (plus net_size
    network weights); a key without a scale takes the policy table's (config/policy.FIELDS:
    log for limits that span orders of magnitude). `fleet` holds the autoscaler's keys the same
    way (config/fleet.TUNABLE; tuned values name them "fleet.<key>"). Errors name
    `tune.space.<key>`."""
    dims = []
    for key, d in (spec or {}).items():
        if key == "fleet" and d is not None:
            dims += _fleet_dims(d, f"{key_prefix}.fleet")
            continue
        where = f"{key_prefix}.{key}"
        if d is None:  # null: not tuned (lets an experiment drop a key the tune config lists)
            continue
        if key not in DEFAULTS:
            raise ConfigError(
                f"{where}: not a policy parameter; expected one of {sorted(DEFAULTS)} "
                f"(or fleet: {{<fleet key>: ...}})"
            )
        dims.append(_dimension(key, d, where, FIELDS[key].scale, BOUNDS[key], f"policy.{key}"))
    if not dims and not net_size:
        raise ConfigError(f"{key_prefix}: empty; name at least one policy key to tune")
    return SearchSpace(tuple(dims), net_size, net_scale)


def _fleet_dims(spec, where: str) -> list[Dimension]:
    """The dimensions of tune.space.fleet: {fleet key: {low, high, scale} or null}."""
    if not isinstance(spec, Mapping):
        raise ConfigError(f"{where}: got {spec!r}; expected {{<fleet key>: {{low, high}}}}")
    dims = []
    for key, d in spec.items():
        if d is None:
            continue
        if key not in fleet_lib.TUNABLE:
            raise ConfigError(
                f"{where}.{key}: not a tunable fleet key; expected one of "
                f"{sorted(fleet_lib.TUNABLE)}"
            )
        lo, hi, scale = fleet_lib.TUNABLE[key]
        name = fleet_lib.PREFIX + key
        dims.append(_dimension(name, d, f"{where}.{key}", scale, (lo, hi), name))
    return dims


def _dimension(key: str, d, where: str, default_scale: str, valid, named: str) -> Dimension:
    """One Dimension from {low, high, scale}, checked: numbers, finite low < high, a log scale
    above 0, within the key's `valid` (low, high) range; errors name `where`."""
    if not isinstance(d, Mapping) or not {"low", "high"} <= set(d):
        raise ConfigError(
            f"{where}: got {d!r}; expected {{low: ..., high: ..., scale: log|linear}}"
        )
    scale = d.get("scale", default_scale)  # the key's own where none is named
    try:
        low, high = float(d["low"]), float(d["high"])
    except (TypeError, ValueError):
        raise ConfigError(
            f"{where}: low/high must be numbers; got {d['low']!r}, {d['high']!r}"
        ) from None
    if scale not in ("log", "linear"):
        raise ConfigError(f"{where}.scale: got {scale!r}; expected log or linear")
    if not (math.isfinite(low) and math.isfinite(high) and low < high):
        raise ConfigError(f"{where}: expected finite low < high; got [{low}, {high}]")
    if scale == "log" and low <= 0:
        default = "" if "scale" in d else f" ({named}'s default scale)"
        raise ConfigError(
            f"{where}.low: got {low}; a log scale{default} needs low > 0 (or scale: linear)"
        )
    valid_lo, valid_hi = valid
    if low < valid_lo or high > valid_hi:
        raise ConfigError(
            f"{where}: got [{low:g}, {high:g}]; {named} is valid within "
            f"[{valid_lo:g}, {valid_hi:g}]"
        )
    return Dimension(key, low, high, scale)
