""" "Did you mean": the one place that turns an unknown config key or group choice into a message
naming what exists, for the command line (servetune.cli.main, before Hydra starts) and for Python
keywords (servetune.run.api.compose), where Hydra's own advice ("To append to your config use
+policy.max_num_seq=64") would add a key the simulator never reads."""

from __future__ import annotations

import difflib
from importlib import resources

from omegaconf import DictConfig


def _close(word: str, options) -> list[str]:
    return difflib.get_close_matches(word, sorted(options), n=3, cutoff=0.6)


def closest_first(name: str, names) -> list[str]:
    """`names` sorted with the ones most like `name` first (difflib), the rest alphabetical:
    the order a catalog's names are offered in when `name` is not one of them."""
    names = sorted(names)
    close = difflib.get_close_matches(str(name), names, n=len(names), cutoff=0.4)
    return close + [n for n in names if n not in close]


def _phrase(close: list[str]) -> str:
    return "did you mean " + " or ".join(close) + "?" if close else ""


def closest_phrase(word: str, options, prefix: str = "") -> str:
    """ "did you mean <prefix>X?" for the options closest to `word`; "" when none is close."""
    return _phrase([prefix + c for c in _close(word, options)])


def unknown_key(key: str, cfg: DictConfig) -> str | None:
    """A message when dotted `key` is not in `cfg` ("policy.max_num_seq: no such key; did you
    mean policy.max_num_seqs?"): the closest keys beside the first missing part, or the keys
    there are; None when the key exists (or lies under a value that is not a mapping)."""
    node, parts = cfg, key.split(".")
    path: list[str] = []
    for i, part in enumerate(parts):
        if not isinstance(node, DictConfig):
            return None
        if part not in node:
            siblings = [str(k) for k in node]
            close = [".".join([*path, c, *parts[i + 1 :]]) for c in _close(part, siblings)]
            if close:
                return f"{key}: no such key; {_phrase(close)}"
            return (
                f"{key}: no such key; {'.'.join(path) or 'the config'} has "
                f"{', '.join(sorted(siblings))}"
            )
        node = node[part]
        path.append(part)
    return None


def group_options(group: str) -> list[str]:
    """The choices of config group `group` (e.g. "policy"): its YAML files' names."""
    folder = resources.files("servetune.conf")
    for part in group.split("/"):
        folder = folder / part
    if not folder.is_dir():
        return []
    return sorted(f.name[:-5] for f in folder.iterdir() if f.name.endswith(".yaml"))


def unknown_choice(group: str, choice: str) -> str | None:
    """A message when `choice` is not an option of config group `group`, with the closest
    options (or all of them); None when it is one, or `group` is not a servetune group."""
    options = group_options(group)
    if not options or choice in options:
        return None
    close = _close(choice, options)
    return f"{group}={choice}: no such {group}; " + (
        _phrase([f"{group}={c}" for c in close])
        if close
        else f"expected one of {', '.join(options)}"
    )


# sections whose entries the user names (a knob's search range, a file's column names) or
# whose keys depend on a choice inside them (a length distribution's parameters)
OPEN_SECTIONS = (
    "tune.space",
    "tune.workloads",
    "workload.columns",
    "workload.vllm_bench",
    "workload.prompt",
    "workload.output",
    "workload.patience",
)


def group_keys(group: str) -> set[str]:
    """Every dotted key (group prefix included) that some option of config group `group`
    defines, e.g. workload.replicas.block_s: the keys servetune reads under that group."""
    import yaml

    keys: set[str] = set()

    def walk(prefix: str, node) -> None:
        keys.add(prefix)
        if isinstance(node, dict):
            for k, v in node.items():
                walk(f"{prefix}.{k}", v)

    folder = resources.files("servetune.conf") / group
    for option in group_options(group):
        try:
            doc = yaml.safe_load((folder / f"{option}.yaml").read_text()) or {}
        except (OSError, yaml.YAMLError):
            continue
        walk(group, {k: v for k, v in doc.items() if k != "defaults"})
    return keys


def unknown_addition(key: str) -> str | None:
    """A message when `+key` adds a key to a section inside a config group (e.g.
    workload.replicas.*) that none of the group's options defines, so nothing reads it, with
    the closest known keys; None otherwise (a key some option defines, an open section's
    entry, a key outside the groups, or a group's own top-level key: its reader checks those,
    as make_policy does policy.*)."""
    group = key.split(".", 1)[0]
    if key.count(".") < 2 or not group_options(group) or key.startswith(OPEN_SECTIONS):
        return None
    known = group_keys(group)
    if key in known:
        return None
    close = _close(key, known)
    return f"+{key}: no such key under any {group} option, so nothing would read it; " + (
        _phrase(close) if close else "a + adds only a key servetune reads"
    )


def addition_problem(overrides: list[str]) -> str | None:
    """unknown_addition's message for the first `+key=value` override (not `++`, which forces)
    that adds a key nothing reads; None when there is none. Needs no composed config."""
    for override in overrides:
        key, eq, _ = override.partition("=")
        if eq and key.startswith("+") and not key.startswith("++"):
            message = unknown_addition(key[1:])
            if message:
                return message
    return None


def override_problem(overrides: list[str], cfg: DictConfig) -> str | None:
    """The first override that names no key or choice of `cfg` (the config composed with the
    overrides' group choices), as unknown_key / unknown_choice word it, or a `+key` addition
    nothing reads (unknown_addition); None when all are known. Deletions (`~`), Hydra's own
    keys and flags are left to Hydra."""
    message = addition_problem(overrides)
    if message:
        return message
    for override in overrides:
        key, eq, value = override.partition("=")
        if not eq or key.startswith(("+", "~", "hydra", "-")):  # additions, deletions, flags
            continue
        if "." not in key and "/" not in key and group_options(key):
            message = None if "," in value else unknown_choice(key, value)
        else:
            message = unknown_key(key, cfg) if "/" not in key else None
        if message:
            return message
    return None


def group_choices(overrides: list[str]) -> list[str]:
    """The overrides that choose a known option of a config group (`workload=file`,
    `+experiment=cascade`), single-valued: what must be composed before a key under that group
    can be checked."""
    out = []
    for override in overrides:
        key, eq, value = override.partition("=")
        group = key.lstrip("+")
        if (
            eq
            and "." not in key
            and not key.startswith(("~", "hydra", "-"))
            and "," not in value
            and group_options(group)
            and not unknown_choice(group, value)
        ):
            out.append(override)
    return out


OTHER_CONFIG_FLAGS = ("-cn", "--config-name", "-cp", "--config-path", "-cd", "--config-dir")


def check_overrides(overrides: list[str]) -> str | None:
    """override_problem for command-line overrides, before Hydra starts: the config composed
    with their group choices, then each plain override checked against it. None where the
    choices themselves do not compose (Hydra will say why)."""
    if any(a.split("=")[0] in OTHER_CONFIG_FLAGS for a in overrides):
        return None  # another primary config: Hydra checks its keys
    for override in overrides:  # a group takes an option's name (Hydra raised a TypeError)
        key, eq, value = override.partition("=")
        group = key.lstrip("+")
        if eq and "." not in group and value[:1] in "[{" and value and group_options(group):
            return (
                f"{group}: got {value}; expected the name of a {group} option "
                f"({', '.join(group_options(group))}), or {group}.KEY=VALUE to "
                f"set one of its fields"
            )
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    try:
        with initialize_config_module(config_module="servetune.conf", version_base=None):
            cfg = compose(config_name="config", overrides=group_choices(overrides))
    except Exception:  # noqa: BLE001 -- Hydra's own run reports it, in its words
        return None
    finally:
        GlobalHydra.instance().clear()
    return override_problem(overrides, cfg)
