"""Reading one config key: the single place where a setting is checked and every bad value
is answered by a ConfigError that names its key and what was expected."""

from __future__ import annotations

import math

import numpy as np
from omegaconf import OmegaConf

from servetune.core.errors import ConfigError


def get(cfg, key: str, default=None):
    """The value at dotted `key` of an OmegaConf config (or a plain mapping), `default` if
    absent."""
    if not OmegaConf.is_config(cfg):
        cfg = OmegaConf.create(dict(cfg) if cfg is not None else {})
    return OmegaConf.select(cfg, key, default=default)


_SHOWN_ITEMS = 6  # an array longer than this is shown by its first items and its length


def _plain_number(x):
    """A number from an array as a user would write it: an integral float as an int."""
    if isinstance(x, float) and x.is_integer() and abs(x) < 2**53:
        return int(x)
    return x


def shown(value) -> str:
    """`value` as an error message shows it: a Python value by its repr ('abc', 1.5, None), a
    numpy array or scalar by the plain number or list it holds (0, not array([0.]) or
    np.float64(0.0); a long array by its first items and length)."""
    if not isinstance(value, (np.ndarray, np.generic)):
        return repr(value)
    items = [_plain_number(x) for x in np.asarray(value).reshape(-1).tolist()]
    if len(items) == 1:
        return repr(items[0])
    if len(items) > _SHOWN_ITEMS:
        head = ", ".join(map(repr, items[:_SHOWN_ITEMS]))
        return f"[{head}, ... ({len(items)} values)]"
    return repr(items)


def check_number(
    value, key: str, *, lo=-math.inf, hi=math.inf, integer=False, allow_inf=False, hi_open=False
):
    """`value` as an int (`integer`) or a float after checking that it is a number (not a
    bool), finite (unless `allow_inf`), integral (if `integer`) and within [lo, hi] ([lo, hi)
    with `hi_open`); otherwise a ConfigError naming `key`."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{key}: got {shown(value)}; expected a number")
    try:
        as_float = float(value)
    except OverflowError:  # an integer beyond float range
        raise ConfigError(
            f"{key}: got {str(value)[:30]}... ({len(str(value))} digits); expected "
            f"within [{lo}, {hi}]"
        ) from None
    if math.isnan(as_float) or (not allow_inf and not math.isfinite(as_float)):
        raise ConfigError(f"{key}: got {shown(value)}; expected a finite number")
    if integer and value != int(value):
        raise ConfigError(f"{key}: got {shown(value)}; expected an integer")
    if not (lo <= value <= hi) or (hi_open and value >= hi):
        raise ConfigError(
            f"{key}: got {shown(value)}; expected within [{lo}, {hi}{')' if hi_open else ']'}"
        )
    return int(value) if integer else as_float


def number(
    cfg,
    key: str,
    *,
    lo=-math.inf,
    hi=math.inf,
    integer=False,
    default=None,
    allow_none=False,
    where: str | None = None,
):
    """The number at `key` of `cfg`, checked as `check_number` does. Absent or null (YAML
    `null`: "use the default"), it is `default` when one is given, else None with
    `allow_none`, else an error. `where`: the key's name in messages when `cfg` is a
    sub-section (default `key`)."""
    value = get(cfg, key, default)
    if value is None and default is not None:
        value = default
    if value is None and allow_none:
        return None
    return check_number(value, where or key, lo=lo, hi=hi, integer=integer)


def string(cfg, key: str, default=None, allow_none=False, where: str | None = None):
    """The string at `key` of `cfg` (`default` when absent; None allowed with `allow_none`)."""
    value = get(cfg, key, default)
    if value is None and allow_none:
        return None
    if not isinstance(value, str):
        raise ConfigError(f"{where or key}: got {value!r}; expected a string")
    return value


def flag(cfg, key: str, default: bool, where: str | None = None) -> bool:
    """The boolean at `key` of `cfg` (`default` when absent)."""
    value = get(cfg, key, default)
    if not isinstance(value, bool):
        raise ConfigError(f"{where or key}: got {value!r}; expected true or false")
    return value


def choice(cfg, key: str, options, default=None, where: str | None = None):
    """The value at `key` of `cfg` (`default` when absent), which must be one of `options`."""
    value = get(cfg, key, default)
    if value not in options:
        options = list(options)
        expected = f"{options[0]} or {options[1]}" if len(options) == 2 else f"one of {options}"
        raise ConfigError(f"{where or key}: got {value!r}; expected {expected}")
    return value
