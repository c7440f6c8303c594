"""The export of a tuning run: one convention for its writer (`servetune tune`, at the end of
tuning/runner.py) and its reader (`servetune export <tune folder>`, deploy/choose.py), so that
exporting a tuning folder gives the files the tuning itself wrote.

Both read the policy, its order, the search space's ranges and the records the export carries
from the run's summary (the dict written as tune_summary.json), and the engine from the run's
config (config_resolved.yaml) and its scenario:
  - `exported(summary)`: which of the summary's policies the tuning exports, its "exported"
    entry: "start" (no significant improvement: keep your settings), "tuned" (the tuned point,
    tuning/recommend.py), or, in a summary without the entry (written before it, or by hand),
    "best";
  - `policy_values(summary, cfg)`: that policy, policy keys and the autoscaler's
    "fleet.<key>" values (config/fleet.py's PREFIX) side by side, as the tuner simulated them;
  - `summary["order"]` (policy.order; a summary without it names the neural order by its
    weights, else the config's order), `summary["ranges"]` (tuned key -> [low, high], in the
    key's units; read from the config's tune.space where a summary lacks it; not passed to
    the export of the start, whose values the search did not choose);
  - `RECORDS`: the summary's entries each exported file carries under "extra", with which
    policy it is (`point`) and why (`why`: the tuner's recommendation in words).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from servetune.config.policy import DEFAULTS, ORDERS
from servetune.core.errors import ServetuneError
from servetune.core.files import json_number, jsonable
from servetune.deploy import export

# the summary's records each exported file carries (under "extra", and as YAML comments)
RECORDS = (
    "exported",
    "recommendation",
    "improvement",
    "tuned_at_bound",
    "scenarios_simulated",
    "regression",
    "regressed_splits",
    "evaluation",
)
POINT = "the tuned policy"  # what a summary without an "exported" entry exports
POINTS = {"start": "the start (your settings)", "tuned": "the tuned point", "best": POINT}
SUMMARY = "tune_summary.json"  # the summary's file in a tuning folder (written last)
RESOLVED = "config_resolved.yaml"  # the run's config in a tuning folder (written first)


def exported(summary: Mapping) -> str:
    """Which of the summary's policies the tuning exports: its "exported" entry ("start" or
    "tuned"), "best" where it has none."""
    return str(summary.get("exported", "best"))


def parse(summary, path: Path) -> dict:
    """A summary as read from its JSON (`path`, named in errors): its exported policy's values
    (`exported`; the best's too, where given) as numbers ("inf" an unlimited cap, a network's
    weights a list), its regression flag and order checked; ServetuneError naming the entry
    and what was expected."""
    expected = "expected the tune_summary.json servetune tune writes"
    which = summary.get("exported", "best") if isinstance(summary, dict) else "best"
    if not isinstance(which, str) or which not in POINTS:
        raise ServetuneError(
            f"{path}: exported = {str(which)[:40]!r}; expected one of {sorted(POINTS)}"
        )
    read = {}
    for name in dict.fromkeys([which, "best"]):
        values = summary.get(name) if isinstance(summary, dict) else None
        if values is None and name != which:
            continue
        if not isinstance(values, dict) or not values:
            raise ServetuneError(f"{path}: no {name!r} object of policy values; {expected}")
        read[name] = _values(values, name, path)
    regression = summary.get("regression", False)
    if not isinstance(regression, bool):
        raise ServetuneError(f"{path}: regression = {regression!r}; expected true or false")
    if "order" in summary and not (
        isinstance(summary["order"], str) and summary["order"] in ORDERS
    ):
        raise ServetuneError(
            f"{path}: order = {summary['order']!r}; expected one of {sorted(ORDERS)}"
        )
    return {**summary, **read}


def _values(values: Mapping, name: str, path: Path) -> dict:
    """A summary's policy values (its entry `name`) as numbers; ServetuneError naming
    name.key otherwise."""
    read = {}
    for key, value in values.items():
        if key not in DEFAULTS and key != export.NET_KEY and not key.startswith("fleet."):
            raise ServetuneError(
                f"{path}: {name}.{key}: unknown policy parameter; expected one of "
                f"{sorted(DEFAULTS)}, {export.NET_KEY} or fleet.<key>"
            )
        try:
            read[key] = _weights(value) if key == export.NET_KEY else json_number(value)
        except ValueError as err:
            raise ServetuneError(
                f"{path}: {name}.{key} = {str(value)[:40]!r}; expected a number ({err})"
            ) from None
    return read


def as_read(summary: Mapping, path: Path) -> dict:
    """`summary` (the tuner's, in memory) as `servetune export` will read it back from its
    JSON file: the writer exports from this, so both export the same files."""
    return parse(json.loads(json.dumps(jsonable(dict(summary)))), path)


def _weights(value) -> list[float]:
    """A score net's weights: a list of finite numbers (ValueError otherwise)."""
    numbers = [json_number(v) for v in value] if isinstance(value, list) else None
    if numbers is None or any(x is None or not math.isfinite(x) for x in numbers):
        raise ValueError("a score net is a list of finite weights")
    return numbers


def policy_values(summary: Mapping, cfg: DictConfig) -> dict:
    """The policy a tuning run exports (`exported`: the start, the tuned point, or a summary's
    best): the config's policy section (its policy keys and a network's weights) with that
    policy's values (policy keys and "fleet.<key>" autoscaler values) over it. The tuner's
    policies hold every policy key; a summary written by hand may name only the tuned ones."""
    section = OmegaConf.select(cfg, "policy")
    section = OmegaConf.to_container(section, resolve=True) if section is not None else {}
    values = {k: v for k, v in section.items() if k in DEFAULTS or k == export.NET_KEY}
    values.update(summary[exported(summary)])
    if exported(summary) == "start" and export.NET_KEY not in section:
        values.pop(export.NET_KEY, None)  # the network a neural tuning started from adds nothing
    return values


def order(summary: Mapping, cfg: DictConfig) -> str:
    """The exported policy's order: the config's policy.order for the start (your settings,
    not the family a tuning searched), else the summary's, else neural where the values hold
    a network's weights, else the config's (fcfs by default)."""
    configured = str(OmegaConf.select(cfg, "policy.order") or "fcfs")
    if exported(summary) == "start":
        return configured
    if isinstance(summary.get("order"), str):
        return summary["order"]
    if summary[exported(summary)].get(export.NET_KEY) is not None:
        return "neural"
    return configured


def point(summary: Mapping) -> str:
    """Which policy is exported, in words: "the start (your settings)", "the tuned point"."""
    return POINTS[exported(summary)]


def why(summary: Mapping) -> str:
    """Why this policy is the one exported, in words: the tuner's recommendation (a summary
    without one: the best policy found)."""
    if isinstance(summary.get("recommendation"), str):
        return summary["recommendation"]
    regressed = " (it regressed on held-out data: see evaluation.csv)" * bool(
        summary.get("regression")
    )
    return f"the best policy servetune tune found{regressed}"


def extra(summary: Mapping, source: Path) -> dict:
    """What each exported file records under "extra": the tuning folder it came from, which
    policy (`point`) and why (`chosen`), and the summary's RECORDS (which was exported and
    the recommendation, the tuned knobs at a bound of their range, the held-out evaluation,
    regression verdicts)."""
    out = {"source": str(source), "point": point(summary), "chosen": why(summary)}
    out.update({key: summary[key] for key in RECORDS if key in summary})
    return out


def ranges(summary: Mapping, cfg: DictConfig, folder: Path) -> dict[str, tuple[float, float]]:
    """The search space: tuned key -> (low, high) in the key's units, from the summary's
    "ranges", else (a summary written before it had them) from the config's tune.space,
    autoscaler keys (tune.space.fleet.<key>) as "fleet.<key>"; errors name the tuning
    `folder`'s file they read."""
    own = summary.get("ranges")
    if isinstance(own, Mapping):
        try:
            return {str(k): (float(v[0]), float(v[1])) for k, v in own.items()}
        except (TypeError, IndexError, KeyError, ValueError):
            raise ServetuneError(
                f"{folder / SUMMARY}: ranges = {str(own)[:80]}; expected {{key: [low, high]}} "
                f"as servetune tune writes it"
            ) from None
    return config_ranges(cfg, folder / RESOLVED)


def config_ranges(cfg: DictConfig, path: Path) -> dict[str, tuple[float, float]]:
    """tune.space of a tuning run's config (`path`, named in errors): tuned key -> (low, high)
    ({} when it has none); the tuner checked the ranges when it ran."""
    spec = OmegaConf.select(cfg, "tune.space")
    spec = OmegaConf.to_container(spec, resolve=True) if isinstance(spec, DictConfig) else {}
    flat = {k: v for k, v in spec.items() if k != "fleet"}
    fleet = spec.get("fleet") or {}
    if not isinstance(fleet, dict):
        raise ServetuneError(
            f"{path}: tune.space.fleet = {fleet!r}; expected {{key: {{low: ..., high: ...}}}} "
            f"as servetune tune read it"
        )
    flat.update({f"fleet.{k}": v for k, v in fleet.items()})
    out = {}
    for key, dim in flat.items():
        if dim is None:  # not tuned
            continue
        try:
            out[key] = (float(dim["low"]), float(dim["high"]))
        except (TypeError, KeyError, ValueError):
            raise ServetuneError(
                f"{path}: tune.space.{key} = {dim!r}; expected {{low: ..., "
                f"high: ..., scale: log|linear}} as servetune tune read it"
            ) from None
    return out


def write(target: Path, summary: Mapping, cfg: DictConfig, scenario, folder: Path):
    """Write the engine files of the tuning run in `folder` whose summary is `summary` into
    `target` (export.write_export): its policy_values with their order and ranges, the engine
    of `cfg` (the run's config) and `scenario` (scenario.build of it), and the extra records.
    Returns {file name: path}."""
    cfg_engine = OmegaConf.to_container(cfg.engine, resolve=True)
    return export.write_export(
        target,
        policy_values(summary, cfg),
        order(summary, cfg),
        cfg_engine,
        extra=extra(summary, folder),
        deploy=export.deployment(cfg, scenario),
        ranges=ranges(summary, cfg, folder) if exported(summary) != "start" else None,
        fleet=export.fleet_values(scenario),
    )
