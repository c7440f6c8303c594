"""Python keyword settings as Hydra override strings: `policy={"max_num_seqs": 64}, seeds=2`
becomes `["policy.max_num_seqs=64", "seeds=2"]`, so the Python API and the command line go
through one config reader (api.compose) and fail with the same messages.

A string value selects a config group (`workload="poisson"`) or sets that very string (a
`${...}` in it is not an interpolation); a dict sets the
fields under its key (nested dicts give dotted keys); lists and tuples become Hydra lists. Keys
may be dotted already (`**{"workload.duration_s": 60}`).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from pathlib import PurePath

from servetune.core.errors import ConfigError
from servetune.core.suggest import group_options

_PLAIN = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./")
_WORDS = {"true", "false", "null", "none", "inf", "nan"}  # read as other types when unquoted


def _is_scalar_array(value) -> bool:
    return hasattr(value, "tolist") and hasattr(value, "dtype")


def value_text(key: str, value) -> str:
    """`value` in Hydra's override grammar (booleans true/false, None null, floats by repr
    with inf/nan, strings quoted when they would read as anything else); ConfigError naming
    `key` for a type no config value has."""
    if _is_scalar_array(value):
        value = value.tolist()
    if isinstance(value, PurePath):
        value = str(value)
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, numbers.Integral):
        return str(int(value))
    if isinstance(value, numbers.Real):
        value = float(value)
        if math.isnan(value):
            return "nan"
        return repr(value)  # 'inf' / '-inf' are Hydra floats too
    if isinstance(value, str):
        return _string_text(key, value)
    if isinstance(value, list | tuple):
        return "[" + ",".join(value_text(key, v) for v in value) + "]"
    if isinstance(value, Mapping):
        return (
            "{"
            + ",".join(f"{_key_text(key, k)}:{value_text(key, v)}" for k, v in value.items())
            + "}"
        )
    raise ConfigError(
        f"{key}: got a {type(value).__name__}; expected a number, string, bool, None, list or dict"
    )


def _string_text(key: str, text: str) -> str:
    """`text` as a Hydra string value: as is where it reads as that string, else quoted; a
    `${` is escaped (`\\${`), so the value is the literal text, never an interpolation."""
    text = text.replace("${", "\\${")
    if text and set(text) <= _PLAIN and text.lower() not in _WORDS and not _numeric(text):
        return text
    for quote in ("'", '"'):
        if quote not in text and not text.endswith("\\"):
            return f"{quote}{text}{quote}"
    raise ConfigError(
        f"{key}: the string {text!r} has both quote kinds or ends in a backslash; "
        f"expected a string Hydra can quote"
    )


def _numeric(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _key_text(key: str, name) -> str:
    name = str(name)
    if not name or not set(name) <= _PLAIN or name.startswith("."):
        raise ConfigError(f"{key}: the key {name!r} is not a config key (letters, digits, _ - . /)")
    return name


def to_overrides(settings: Mapping) -> list[str]:
    """Hydra overrides for keyword `settings`, in their order: a dict value gives one override
    per leaf (`key.field=value`; an empty dict sets `key={}`), anything else `key=value`."""
    out: list[str] = []

    def walk(prefix: str, value) -> None:
        if isinstance(value, Mapping) and value:
            for name, sub in value.items():
                walk(f"{prefix}.{_key_text(prefix, name)}", sub)
        else:
            out.append(f"{prefix}={value_text(prefix, value)}")

    for key, value in settings.items():
        name = _key_text("settings", key)
        _check_group_value(name, value)
        walk(name, value)
    return out


def _check_group_value(key: str, value) -> None:
    """A keyword that names a config group (`policy=`, `workload=`, ...) takes an option's name
    or a dict of the group's fields; ConfigError naming the key for anything else (a list
    reached Hydra's defaults list as a TypeError)."""
    if "." in key or isinstance(value, (str, Mapping, PurePath)) or not group_options(key):
        return
    options = ", ".join(group_options(key))
    raise ConfigError(
        f"{key}: got {value!r}; expected the name of a {key} option ({options}) "
        f"or a dict of {key}.* fields"
    )
