"""Override lists that make the tuner's other workloads: `tune.workloads` (trained on together)
and `tune.eval.holdout` (held out). Each item is `key=value` on a key the config already has, or
a group choice (`workload=azure_code`) that replaces that whole section with the group's file;
the items after it then set keys of the new section."""

from __future__ import annotations

import copy
import difflib
from importlib import resources

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from servetune.core.errors import ConfigError

_ABSENT = object()
# groups a held-out split may choose: what is served and how (the policy is what the tuner
# evaluates); training workloads (tune.workloads) share one engine, so they choose workloads only
SPLIT_GROUPS = ("workload", "model", "hardware", "engine", "cost", "speculation")
TRAINING_GROUPS = ("workload",)


def override_list(value, key: str) -> list[str]:
    """One list of overrides (strings like 'workload.start_s=1200'); ConfigError naming `key`."""
    if isinstance(value, str) or not hasattr(value, "__iter__"):
        raise ConfigError(
            f"{key}: got {value!r}; expected a list of overrides like ['workload.start_s=1200']"
        )
    items = list(value)
    for item in items:
        if not isinstance(item, str) or "=" not in item:
            raise ConfigError(
                f"{key}: got {item!r}; expected overrides like 'workload.start_s=1200'"
            )
    return items


def workload_lists(value, key: str = "tune.workloads") -> list[list[str]]:
    """`tune.workloads` as a list of training workloads, each a list of overrides ([] or null:
    the configured workload only); ConfigError naming the key for a scalar, a string or a list
    of anything but override lists."""
    if value is None:
        return []
    if isinstance(value, str) or not isinstance(value, (list, ListConfig)):
        raise ConfigError(
            f"{key}: got {value!r}; expected a list of override lists, e.g. "
            f"[[], ['workload.rate_scale=6']]"
        )
    return [override_list(v, f"{key}[{i}]") for i, v in enumerate(value)]


def holdout_lists(value, key: str = "tune.eval.holdout") -> list[list[str]]:
    """`tune.eval.holdout` as a list of held-out workloads, each a list of overrides: [] (none),
    one list of overrides (one workload) or a list of such lists (several)."""
    if value is None:
        return []
    if isinstance(value, (list, ListConfig)) and any(
        isinstance(v, (list, ListConfig)) for v in value
    ):
        return [override_list(v, f"{key}[{i}]") for i, v in enumerate(value)]
    items = override_list(value, key)
    return [items] if items else []


def _group_section(group: str, name: str, item: str, key: str, groups: tuple) -> DictConfig:
    """The config file `group/name.yaml` shipped with servetune, as a section."""
    if group not in groups:
        raise ConfigError(
            f"{key}: {item!r}: these splits choose among the groups {list(groups)}, not {group!r}"
        )
    folder = resources.files("servetune.conf") / group
    options = sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".yaml"))
    if name not in options:
        near = difflib.get_close_matches(name, options, n=1)
        raise ConfigError(
            f"{key}: {item!r}: no {group} config {name!r}; expected one of "
            f"{options}" + (f" (did you mean {near[0]}?)" if near else "")
        )
    return _load_option(folder, name, f"{key}: {item!r}: {group}/{name}.yaml")


def _load_option(folder, name: str, where: str, depth: int = 0) -> DictConfig:
    """A group option's YAML with its defaults list applied: options of the same group
    (e.g. gamma's `- poisson`), merged in order, `_self_` where listed (else last)."""
    node = OmegaConf.create((folder / f"{name}.yaml").read_text())
    defaults = node.pop("defaults", None)
    if defaults is None:
        return node
    if depth > 8 or not all(isinstance(d, str) for d in defaults):
        raise ConfigError(
            f"{where}: its defaults list is not a plain list of options of its "
            f"own group; choose it on the command line instead"
        )
    order = list(defaults) if "_self_" in defaults else [*defaults, "_self_"]
    return OmegaConf.merge(
        *(node if d == "_self_" else _load_option(folder, d, where, depth + 1) for d in order)
    )


def _check_override(cfg: DictConfig, item: str, key: str) -> None:
    """ConfigError (naming `key`) unless `item` sets a value the composed config already has:
    a misspelt key would otherwise leave the workload as it is (the "held-out" rows would be
    the training workload)."""
    name = item.partition("=")[0].strip()
    if not name or name[0] in "+~":
        raise ConfigError(
            f"{key}: {item!r}; expected a plain override like 'workload.start_s=1200' (no + or ~)"
        )
    node = OmegaConf.select(cfg, name, default=_ABSENT)
    if node is _ABSENT:
        parent, _, leaf = name.rpartition(".")
        section = OmegaConf.select(cfg, parent) if parent else cfg
        known = list(section.keys()) if isinstance(section, DictConfig) else []
        near = difflib.get_close_matches(leaf, [str(k) for k in known], n=1)
        hint = f"; did you mean {parent + '.' if parent else ''}{near[0]}?" if near else ""
        raise ConfigError(f"{key}: {item!r}: the config has no key {name!r}{hint}")
    if isinstance(node, DictConfig):
        raise ConfigError(
            f"{key}: {item!r}: {name!r} is a section, not a value; override its "
            f"keys instead, or choose one of the groups {list(SPLIT_GROUPS)} "
            f"(e.g. workload=azure_code)"
        )


def with_overrides(
    cfg: DictConfig, overrides: list[str], key: str, groups: tuple = SPLIT_GROUPS
) -> DictConfig:
    """A copy of cfg with `overrides` applied in order: choices of `groups` replace their
    section, dotted `key=value` items set keys it has; errors name `key`."""
    out = copy.deepcopy(cfg)
    for item in overrides:
        name, _, value = (part.strip() for part in item.partition("="))
        if name in groups or (
            "." not in name and isinstance(OmegaConf.select(out, name), DictConfig)
        ):
            section = _group_section(name, value, item, key, groups)
            OmegaConf.set_struct(out, False)
            out[name] = section
            continue
        _check_override(out, item, key)
        try:
            out = OmegaConf.merge(out, OmegaConf.from_dotlist([item]))
        except OmegaConfBaseException as err:  # its message names the key
            raise ConfigError(f"{key}: {err}") from None
    return out
