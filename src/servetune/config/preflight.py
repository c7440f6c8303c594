"""What a command line is checked for before JAX loads, so a bad value or a missing file is
refused in a second (`servetune simulate` and `tune` run these after the typo checks of
core/suggest.py, before Hydra starts; the config reader, config/scenario.py, checks every
key again with its range when it builds):

  - a value of another type than the key's default: text where a number belongs
    (`policy.max_num_seqs=abc`), a number where true/false belongs; the default's type is the
    one every option of the group defines (a key whose default is null is left to the reader);
  - an input file that does not exist (`workload.path`, `workload.rate_curve.curve` where it
    names no bundled curve), with the key and the closest file that exists beside it
    (core/inputs.existing_file: the reader names it the same way).
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, ListConfig, OmegaConf

from servetune.core import inputs
from servetune.core.errors import ServetuneError
from servetune.core.suggest import group_choices
from servetune.workload import rate_curve

# the keys naming an input file (relative to paths.root): (names there that are not files,
# what the key expects where it takes more than a file)
FILE_KEYS = {
    "workload.path": ((), None),
    "workload.rate_curve.curve": (tuple(rate_curve.BUNDLED), rate_curve.EXPECTED),
}


def problem(overrides: list[str]) -> str | None:
    """The first bad value type or missing input file among command-line `overrides` (the
    config composed with them, against the one composed with their group choices alone);
    None when there is none, or the overrides do not compose (Hydra says why) or sweep
    (a multirun's values are checked per job)."""
    if any(o.startswith("-") for o in overrides) or _sweeps(overrides):
        return None
    chosen = [o for o in overrides if not o.startswith(("hydra", "~"))]
    given, reference = _compose(chosen), _compose(group_choices(chosen))
    if given is None or reference is None:
        return None
    return type_problem(given, reference) or file_problem(given)


def _sweeps(overrides: list[str]) -> bool:
    """Whether an override sweeps (a,b or a range: a multirun), by Hydra's own parser (a
    mapping or list value holds commas too); True where it cannot parse them (Hydra says
    why)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except Exception:  # noqa: BLE001 -- Hydra's own run reports it, in its words
        return True
    return any(o.is_sweep_override() for o in parsed)


def _compose(overrides: list[str]) -> DictConfig | None:
    """conf/config.yaml composed with `overrides`; None where Hydra refuses them."""
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    try:
        with initialize_config_module(config_module="servetune.conf", version_base=None):
            return compose(config_name="config", overrides=overrides)
    except Exception:  # noqa: BLE001 -- Hydra's own run reports it, in its words
        return None
    finally:
        GlobalHydra.instance().clear()


def _kind(value) -> str | None:
    """ "number" or "true or false" for a default of that type; None for the rest."""
    if isinstance(value, bool):
        return "true or false"
    if isinstance(value, (int, float)):
        return "a number"
    return None


def type_problem(given: DictConfig, reference: DictConfig, prefix: str = "") -> str | None:
    """The first key of `given` whose value is not of its default's type in `reference`
    (text for a number, a number for true/false), worded as the config reader words it."""
    for key in reference:
        if key == "hydra" or key not in given:
            continue
        ref, got = reference._get_node(key), given._get_node(key)
        name = f"{prefix}{key}"
        if isinstance(ref, DictConfig) and isinstance(got, DictConfig):
            found = type_problem(got, ref, f"{name}.")
            if found:
                return found
            continue
        if isinstance(ref, (DictConfig, ListConfig)) or isinstance(got, (DictConfig, ListConfig)):
            continue  # a grid axis, a mapping: the reader checks its shape
        expected, value = _kind(ref._value()), got._value()
        if expected is None or value is None:
            continue
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not (number if expected == "a number" else isinstance(value, bool)):
            return f"{name}: got {value!r}; expected {expected}"
    return None


def file_problem(cfg: DictConfig) -> str | None:
    """The first input file key (FILE_KEYS) naming a file that does not exist, with the
    closest file beside it (inputs.existing_file's message)."""
    root = OmegaConf.select(cfg, "paths.root")
    for key, (names, expected) in FILE_KEYS.items():
        value = OmegaConf.select(cfg, key)
        if not isinstance(value, str) or not value.strip() or value in names:
            continue
        try:
            inputs.existing_file(
                value, key, Path(root) if isinstance(root, str) else None, expected
            )
        except ServetuneError as err:
            return str(err)
    return None
