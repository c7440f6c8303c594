"""Which policy `servetune export DIR` exports, and exporting it (export_cli.py is the command):
the policy of any run, or of one point of a grid, sweep or tuning run, as the engine files
servetune.deploy.export writes (tuned_policy.yaml, vllm_args.json, sglang_args.json,
unmapped_knobs.json).

DIR is a `servetune tune` run (it holds tune_summary.json: its best policy is exported), or a
`servetune simulate` run or multirun folder (metrics.csv under it). Of the latter's points,
`--point KEY=VALUE` keeps those whose KEY has VALUE (a swept key, `workload.rate=5`, or a grid
or policy key, `policy.max_num_seqs=64`; `max_num_seqs=64` names the same); the points left must
share one condition (reporting/choose.py: every swept key that is not a policy knob), and of
their settings the best by the tuner's order is exported (meets the SLO target, then the most
useful tokens per dollar), with what it was chosen over.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pandas as pd
from omegaconf import DictConfig, OmegaConf

from servetune.config.policy import DEFAULTS
from servetune.config.scenario import build
from servetune.core import inputs
from servetune.core.errors import ConfigError, ServetuneError
from servetune.deploy import export, export_folder, tuned
from servetune.reporting.choose import condition_groups, rank, setting_label, split_keys, tie
from servetune.reporting.collect import collect
from servetune.reporting.numbers import fmt
from servetune.reporting.stats import aggregate, bootstrap
from servetune.workload.trace_text import DuplicateKeyError, unique_keys

TUNE_SUMMARY = tuned.SUMMARY
RESOLVED = tuned.RESOLVED


@dataclasses.dataclass(frozen=True)
class Chosen:
    """The point to export: its run folder and resolved config, its policy values (policy keys
    of servetune.config.policy.DEFAULTS, plus score_net for a neural order) and order, in words
    which point it is and why it was chosen, the damaged run folders left out of the choice, and
    for a tuning run its search space (tune.space: key -> (low, high), in the key's units)."""

    run_dir: Path
    cfg: DictConfig
    values: dict
    order: str
    label: str
    why: str
    skipped: tuple = ()
    ranges: dict = dataclasses.field(default_factory=dict)
    summary: dict | None = None  # a tuning run's tune_summary.json (deploy/tuned.py)
    note: str = ""  # where the export went, where not where asked (export_folder.publish)
    kept: bool = False  # the same export was there already: nothing was written


def _resolved(run_dir: Path) -> DictConfig:
    """The run's config_resolved.yaml; ServetuneError naming it when missing or unreadable."""
    path = run_dir / RESOLVED
    inputs.check_regular(path, "resolved config (config_resolved.yaml)", ServetuneError)
    try:
        cfg = OmegaConf.load(path)
    except Exception as err:  # noqa: BLE001 -- YAML and OmegaConf raise many kinds
        raise ServetuneError(f"{path}: cannot read ({str(err).splitlines()[0]})") from None
    if not isinstance(cfg, DictConfig) or not isinstance(cfg.get("policy"), DictConfig):
        raise ServetuneError(f"{path}: no policy section; expected a servetune run's config")
    return cfg


def _policy(cfg: DictConfig, overrides: dict) -> tuple[dict, str]:
    """(values, order) of the run's policy section with `overrides` (policy key -> value)."""
    section = OmegaConf.to_container(cfg.policy, resolve=True)
    values = {k: v for k, v in section.items() if k in DEFAULTS or k == export.NET_KEY}
    values.update(overrides)
    return values, str(section.get("order", "fcfs"))


def _tune_summary(path: Path) -> dict:
    """A tune_summary.json with its best policy's values read as numbers (deploy/tuned.py
    reads the rest); ServetuneError naming the file and what is wrong with it."""
    expected = "expected the tune_summary.json servetune tune writes"
    try:
        summary = json.loads(
            inputs.read_bytes(path, "tuning summary", ServetuneError),
            object_pairs_hook=unique_keys,
            parse_constant=_refuse_constant,
        )
    except DuplicateKeyError as err:
        raise ServetuneError(f"{path}: key {err.key!r} given twice; {expected}") from None
    except (ValueError, RecursionError) as err:
        raise ServetuneError(f"{path}: not JSON ({str(err)[:80]}); {expected}") from None
    return tuned.parse(summary, path)


def choose_tuned(run_dir: Path) -> Chosen:
    """The policy a `servetune tune` run folder exports (deploy/tuned.py: the convention the
    tuner wrote its own export by); every value checked before any file is made."""
    path = run_dir / TUNE_SUMMARY
    summary = _tune_summary(path)
    cfg = _resolved(run_dir)
    order = tuned.order(summary, cfg)
    values = tuned.policy_values(summary, cfg)
    entry = tuned.exported(summary)  # the summary's entry the values come from
    try:
        policy, fleet = export.split_fleet(values)
        export.policy_to_config(policy, order)
    except ConfigError as err:
        named = f"{entry}.{err}" if str(err).startswith("fleet.") else str(err)
        raise ServetuneError(f"{path}: {named}") from None
    if fleet and not OmegaConf.select(cfg, "fleet.autoscale"):
        raise ServetuneError(
            f"{path}: {entry}.fleet.{next(iter(fleet))}: an autoscaler setting, but "
            f"{RESOLVED} has fleet.autoscale off"
        )
    return Chosen(
        run_dir,
        cfg,
        values,
        order,
        tuned.point(summary),
        tuned.why(summary),
        ranges=tuned.ranges(summary, cfg, run_dir),
        summary=summary,
    )


def _refuse_constant(name: str):
    raise ValueError(f"non-standard JSON constant {name}")


def _column(runs: pd.DataFrame, key: str) -> str:
    """The runs' column for a --point key: as given, under policy. (grid.X is policy.X)."""
    bare = key.removeprefix("grid.")
    names = (f"policy.{bare}",) if key.startswith("grid.") else (key, f"policy.{bare}")
    for name in names:
        if name in runs.columns:
            return name
    shown = [c for c in runs.columns if "." in c and not c.endswith(("_s", "_rps"))][:12]
    raise ServetuneError(
        f"--point {key}: no such key in the runs; expected a swept or grid "
        f"key, e.g. {', '.join(shown)}"
    )


def _matches(column: pd.Series, value: str) -> pd.Series:
    """Rows whose value equals `value` (as a number where both are numbers, to 1e-9 relative,
    an infinity only itself; else as text)."""
    try:
        number = float(value)
    except ValueError:
        return column.astype(str) == value
    as_numbers = pd.to_numeric(column, errors="coerce")
    if not math.isfinite(number):
        return as_numbers == number
    return (as_numbers - number).abs() <= 1e-9 * max(1.0, abs(number))


def filter_runs(runs: pd.DataFrame, points: list[str]) -> pd.DataFrame:
    """The rows of `runs` that every KEY=VALUE of `points` keeps; ServetuneError naming the
    filter and the values there are when none does."""
    for item in points:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ServetuneError(
                f"--point {item!r}: expected KEY=VALUE, e.g. policy.max_num_seqs=64"
            )
        column = _column(runs, key)
        kept = runs[_matches(runs[column], value)]
        if kept.empty:
            values = sorted({fmt(v) if isinstance(v, float) else str(v) for v in runs[column]})
            raise ServetuneError(
                f"--point {item}: no run has {column}={value}; it has {', '.join(values[:20])}"
            )
        runs = kept
    return runs


def choose_point(root: Path, points: list[str]) -> Chosen:
    """The point of the simulate run(s) under `root` that `points` (KEY=VALUE filters) and the
    tuner's order choose (module docstring)."""
    col = collect(root)
    col = dataclasses.replace(col, runs=filter_runs(col.runs, points).reset_index(drop=True))
    table = aggregate(col, bootstrap(col))  # the report's intervals: ties as it has them
    conditions, settings = split_keys(col.keys)
    groups = condition_groups(table, conditions)
    if len(groups) > 1:
        names = "; ".join(label for label, _ in groups[:6])
        raise ServetuneError(
            f"{root}: the points left are under {len(groups)} conditions "
            f"({names}); pick one with --point, e.g. --point "
            f"{conditions[0]}={fmt(groups[0][1].iloc[0][conditions[0]])}"
        )
    g = groups[0][1].reset_index(drop=True)
    order = rank(g)
    best = g.iloc[order[0]]
    label = setting_label(best, settings, col.keys)
    tied = tie(g, settings, col.keys, order)
    numbers = (
        f"SLO attainment {_pct(best.get('slo_attainment_mean'))}, useful tokens per $ "
        f"{fmt(best.get('useful_tokens_per_dollar_mean'))}"
    )
    if len(g) == 1:
        why = "the only point left"
    elif len(tied.members) > 1:  # as the report says it; the first of the tie, deterministically
        why = (
            f"tied: {tied.label} ({tied.reason}; {numbers}); exported the first by the "
            f"tuner's order, then sweep order; --point picks another"
        )
    else:
        why = (
            f"the best of {len(g)} settings by the tuner's order ({numbers}); runner-up "
            f"{setting_label(g.iloc[order[1]], settings, col.keys)}; --point picks another"
        )
    same = col.runs
    for k in col.keys:
        same = same[same[k].astype(str) == str(best[k])]
    row = same.iloc[0]
    run_dir = col.run_dirs[row["run"]]
    grid = {
        c.removeprefix("policy."): row[c]
        for c in col.runs.columns
        if c.startswith("policy.") and c.removeprefix("policy.") in DEFAULTS and pd.notna(row[c])
    }
    values, order_name = _policy(_resolved(run_dir), grid)
    name = "the run" if row["run"] == "." else f"run {row['run']}"
    return Chosen(
        run_dir,
        _resolved(run_dir),
        values,
        order_name,
        label if label != "all" else name,
        why,
        tuple(col.skipped),
    )


def _pct(value) -> str:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return "-"
    return f"{100 * v:.3g}%" if math.isfinite(v) else "-"


def export_point(
    directory: str | Path,
    points: list[str] | None = None,
    out: str | Path | None = None,
    force: bool = False,
) -> tuple[Chosen, dict]:
    """Write the engine files of the point of `directory` that `points` choose, as one set,
    into `out` or by default DIR/export, never over another export unasked
    (deploy/export_folder.py: an `out` holding export files needs `force`). Returns (the
    point, with where it went in `note`; {file name: path})."""
    if not str(directory).strip() or (out is not None and not str(out).strip()):
        raise ServetuneError(
            f"{'DIR' if not str(directory).strip() else '--out'}: got an empty "
            f"path; expected a folder"
        )
    root = inputs.expand(directory, "DIR", ServetuneError).resolve()
    if not root.is_dir():
        raise ServetuneError(
            f"{directory}: not a folder; expected a servetune run, multirun or tuning folder"
        )
    is_tuning = (root / TUNE_SUMMARY).is_file()
    if is_tuning and points:
        raise ServetuneError(
            f"--point: {root} is a tuning run with one policy, its best; "
            f"--point chooses among the points of simulate runs"
        )
    chosen = choose_tuned(root) if is_tuning else choose_point(root, list(points or []))
    target = None if out is None else inputs.expand(out, "--out", ServetuneError)
    if target is not None:
        export_folder.check_out(target, force)
    try:
        scenario = build(chosen.cfg)
    except ServetuneError as err:
        raise ServetuneError(
            f"{chosen.run_dir / RESOLVED}: cannot rebuild the run to read its engine ({err})"
        ) from None
    if chosen.summary is not None:  # the tuner's own convention (deploy/tuned.py)
        write = lambda folder: tuned.write(folder, chosen.summary, chosen.cfg, scenario, root)
    else:
        write = lambda folder: export.write_export(
            folder,
            chosen.values,
            chosen.order,
            OmegaConf.to_container(chosen.cfg.engine, resolve=True),
            extra={"source": str(chosen.run_dir), "point": chosen.label, "chosen": chosen.why},
            deploy=export.deployment(chosen.cfg, scenario),
            ranges=chosen.ranges,
            fleet=export.fleet_values(scenario),
        )
    done = export_folder.publish(write, root, target)
    return dataclasses.replace(chosen, note=done.note, kept=done.kept), done.paths
