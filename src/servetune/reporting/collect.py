"""Find the runs under a directory and collect them into one table, one row per scenario.

A run is a directory holding metrics.csv (written by `servetune simulate`: one row per scenario,
with its seed, grid values and scalar metrics). Its configuration comes from Hydra's
`.hydra/overrides.yaml` (the values this job was given) and config_resolved.yaml; a multirun's
`multirun.yaml` says which keys were swept and in what order.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import yaml
from hydra.errors import OverrideParseException

from servetune.core import inputs
from servetune.core.errors import ServetuneError
from servetune.reporting.numbers import fmt
from servetune.run import run_folder
from servetune.workload.traces import strict_float

# Resolved config values copied into every row, for context (they are not point keys).
CONTEXT_KEYS = ("workload.name", "model.name", "hardware.gpu", "policy.order")
# Resolved config values the report judges the runs by: the SLO targets (seconds), the SLO
# attainment the tuner requires and the number a sweeper maximizes (reporting/choose.py).
TARGET_KEYS = (
    "slo.ttft_s",
    "slo.tpot_s",
    "slo.e2e_s",
    "tune.objective.slo_target",
    "sweep.objective",
)
RESOLVED_KEYS = CONTEXT_KEYS + TARGET_KEYS
# Overrides that change what a run writes or how fast, never what it simulates: never point
# keys (a run simulated again with output.timeline=true is still a seed of its point).
NOT_KEYS = ("output.", "compilation_cache.", "hydra.")


class ReportError(ServetuneError):
    """Nothing to report, or a run directory that cannot be read."""


@dataclasses.dataclass
class Collection:
    """Every scenario found under `root`.

    runs: one row per scenario: `run` (directory relative to root), `scenario` (index within the
      run, as in its requests.parquet), the run's overrides, `seed`, grid columns (`policy.*`),
      context columns (CONTEXT_KEYS), the targets the runs are judged by (TARGET_KEYS, from
      config_resolved.yaml or the overrides; absent when neither says) and every scalar metric
      of metrics.csv.
    keys: point keys, the configuration columns whose values differ between scenarios (seed
      excluded), in sweep order; rows that agree on them are seeds of one point.
    overrides: every override key seen, in order.
    run_dirs: absolute path of each run, by `run`.
    skipped: one message per damaged file left out ("path[:line]: cannot read (why)"): a run
      whose metrics.csv (binary, header only, a row of another field count, text where a
      metric belongs) or overrides are damaged is not in `runs`; one whose requests.parquet
      is has no bootstrap intervals (stats.bootstrap appends those).
    """

    root: Path
    runs: pd.DataFrame
    keys: list
    overrides: list
    run_dirs: dict
    skipped: list = dataclasses.field(default_factory=list)

    def numeric_keys(self) -> list:
        """Point keys whose values are all numbers (plotted on a numeric axis)."""
        return [k for k in self.keys if is_numeric(self.runs[k])]

    def run_name(self, run: str) -> str:
        """A run as a title names it: its folder relative to the root ("3" of a sweep), and
        the root folder's own name for the root itself (run "."), never "."."""
        return (self.root.name or str(self.root)) if run in (".", "") else run


def is_numeric(col: pd.Series) -> bool:
    """Whether a column holds only numbers (not flags, no gaps): a numeric axis."""
    return (
        pd.api.types.is_numeric_dtype(col)
        and not pd.api.types.is_bool_dtype(col)
        and bool(col.notna().all())
    )


def _natural(path: Path):
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", str(path))]


def find_runs(root: Path, exclude: Path | None = None) -> list[Path]:
    """Directories under `root` (itself included) that hold metrics.csv, in natural order
    (job 2 before job 10); anything under `exclude` (the report's own folder), under a
    `superseded/` folder below `root` (earlier runs a rerun moved aside, run_folder.py) or in a
    run's staging folder is skipped."""
    root = Path(root)
    found = []
    for path in root.rglob("metrics.csv"):
        d = path.parent
        if exclude is not None and (d == exclude or exclude in d.parents):
            continue
        inside = d.relative_to(root).parts
        if run_folder.SUPERSEDED in inside or any(p.startswith(run_folder.STAGING) for p in inside):
            continue
        found.append(d)
    return sorted(found, key=_natural)


def _scalar(value):
    """A table cell for an override value: lists and dicts become JSON text."""
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(value)
    return value


def parse_overrides(lines: list[str]) -> tuple[dict, list[str]]:
    """Hydra override strings -> ({key: value}, [keys that are sweeps]), in order.

    Uses Hydra's own parser, so `a=1`, `+a=1`, `group=option`, `a=[1,2]` and `a=1,2` (a sweep)
    read as Hydra reads them. Deletions (`~a`) are left out.
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser

    values, swept = {}, []
    for o in OverridesParser.create().parse_overrides([str(x) for x in lines]):
        if o.is_delete():
            continue
        key = o.key_or_group
        if o.is_sweep_override():
            swept.append(key)
            values[key] = None
        else:
            values[key] = _scalar(o.value())
    return values, swept


def _read_yaml(path: Path):
    try:
        return yaml.safe_load(inputs.read_bytes(path, "YAML file", ReportError).decode())
    except (UnicodeDecodeError, yaml.YAMLError) as err:
        raise ReportError(f"{path}: cannot read ({_first_line(err)})") from None


def _first_line(err: Exception) -> str:
    """A one-line reason for a read error: where a YAML or UTF-8 error is, else its first line."""
    if isinstance(err, UnicodeDecodeError):
        byte = err.object[err.start]
        return f"not UTF-8 text (byte {err.start} = 0x{byte:02x}): binary or damaged"
    mark = getattr(err, "problem_mark", None)
    if isinstance(err, yaml.YAMLError) and mark is not None:
        return f"not YAML at line {mark.line + 1}, column {mark.column + 1}: {err.problem}"
    return (str(err).strip().splitlines() or [type(err).__name__])[0]


def _read_overrides(path: Path) -> dict:
    """{key: value} of a run's .hydra/overrides.yaml (a list of Hydra override strings)."""
    doc = _read_yaml(path) or []
    if not isinstance(doc, list):
        raise ReportError(
            f"{path}: cannot read (a {type(doc).__name__}; expected a list of Hydra overrides)"
        )
    try:
        return parse_overrides(doc)[0]
    except OverrideParseException as err:
        raise ReportError(f"{path}: cannot read ({_first_line(err)})") from None


def _read_metrics(path: Path) -> pd.DataFrame:
    """A run's metrics.csv: a header naming its columns, then at least one row of as many
    fields, whose metrics (the columns without a dot: seed and every scalar metric, which
    `servetune simulate` writes as numbers, true/false or empty) are numbers. ReportError
    naming the file, and the line where there is one, when it is damaged."""
    try:
        text = inputs.read_bytes(path, "metrics.csv", ReportError).decode("utf-8")
        lines = _row_lines(path, text)
        table = pd.read_csv(io.StringIO(text))
    except (
        OSError,
        UnicodeDecodeError,
        ValueError,
        pd.errors.ParserError,
        pd.errors.EmptyDataError,
    ) as err:
        raise ReportError(f"{path}: cannot read ({_first_line(err)})") from None
    if table.empty:
        raise ReportError(f"{path}: cannot read (a header and no rows)")
    missing = [c for c in REQUIRED_METRICS if c not in table.columns]
    if missing:
        raise ReportError(
            f"{path}: cannot read (no column {missing[0]!r}; expected the "
            f"metrics.csv servetune simulate writes)"
        )
    for column in table.columns:
        if "." not in str(column):
            _check_numbers(table[column], path, lines)
            _check_range(table[column], path, lines)
    return table


# columns every metrics.csv of `servetune simulate` has, and the ranges metrics can take
REQUIRED_METRICS = ("seed",)
FRACTIONS = (
    "slo_attainment",
    "busy_fraction",
    "kv_peak_occupancy",
    "wasted_token_ratio",
    "quality_failure_rate",
    "mfu",
    "mbu",
    "prefix_hit_rate",
    "spec_acceptance_rate",
)
UNBOUNDED = ("cost_per_qualifying_request_usd",)  # inf when nothing qualified (before 12-05)


def _check_range(col: pd.Series, path: Path, lines: list[int]) -> None:
    """ReportError naming the line of the first value of metric column `col` that no run can
    have: a fraction outside [0, 1], a negative count, rate, time or cost, an infinity (but
    the cost per qualifying request with none), a seed that is not a whole number. Empty cells
    (undefined metrics) and true/false pass."""
    values = pd.to_numeric(
        col.replace({"True": 1, "False": 0, True: 1, False: 0}), errors="coerce"
    ).to_numpy(np.float64)
    name = str(col.name)
    # (a fraction of time summed in floating point may pass 1 by rounding: 1.0000000000000004)
    lo, hi = (0.0, 1.0 + 1e-9) if name in FRACTIONS else (0.0, np.inf)
    if name.startswith("objective"):  # a sweep objective: log(tokens per $) may be negative
        lo = -np.inf
    bad = ~np.isnan(values) & (
        (values < lo) | (values > hi) | (np.isinf(values) & (name not in UNBOUNDED))
    )
    if name == "seed":
        bad |= ~np.isnan(values) & (values != np.round(values))
    if bad.any():
        k = int(np.argmax(bad))
        line = f":{lines[k]}" if len(lines) == len(col) else ""
        expect = "within [0, 1]" if name in FRACTIONS else "a finite number >= 0"
        raise ReportError(
            f"{path}{line}: cannot read (column {name!r} = "
            f"{fmt(col.iloc[k], digits=12)}; expected {expect})"
        )


def _row_lines(path: Path, text: str) -> list[int]:
    """The line of each data row of the CSV `text` (blank lines skipped, as pandas does);
    ReportError naming the line of a row whose field count is not the header's (a shifted
    row: pandas would read its first fields as an index and every value one column off)."""
    reader = csv.reader(io.StringIO(text))
    header = next(reader, None)
    lines = []
    try:
        for row in reader:
            if not row:
                continue
            if len(row) != len(header):
                raise ReportError(
                    f"{path}:{reader.line_num}: cannot read ({len(row)} fields; "
                    f"the header has {len(header)}: {', '.join(header)})"
                )
            lines.append(reader.line_num)
    except csv.Error as err:
        raise ReportError(
            f"{path}:{reader.line_num}: cannot read (unreadable CSV: {err})"
        ) from None
    return lines


def _is_number(cell) -> bool:
    """Whether a metrics.csv cell as pandas read it is a number, true/false or empty."""
    if not isinstance(cell, str):
        return bool(pd.isna(cell)) or isinstance(cell, (bool, int, float, np.number, np.bool_))
    text = cell.strip()
    if text in ("", "True", "False"):
        return True
    try:
        strict_float(text)
    except ValueError:
        return False
    return True


def _check_numbers(col: pd.Series, path: Path, lines: list[int]) -> None:
    """ReportError naming the line and column of the first cell of metric column `col` that
    is text (pandas would keep the column as text and the report would rank strings)."""
    if pd.api.types.is_numeric_dtype(col) or pd.api.types.is_bool_dtype(col):
        return
    for k, cell in enumerate(col):
        if not _is_number(cell):
            line = f":{lines[k]}" if len(lines) == len(col) else ""
            raise ReportError(
                f"{path}{line}: cannot read (column {col.name!r} = "
                f"{str(cell)[:40]!r}; expected a number)"
            )


def sweep_order(root: Path, skipped: list | None = None) -> list[str]:
    """Keys swept by the multiruns under `root` (from each multirun.yaml), in override order;
    an unreadable multirun.yaml is left out, its message appended to `skipped`."""
    keys: list[str] = []
    for path in sorted(Path(root).rglob("multirun.yaml"), key=_natural):
        try:
            doc = _read_yaml(path)
        except ReportError as err:
            (skipped if skipped is not None else []).append(str(err))
            continue
        doc = doc if isinstance(doc, dict) else {}
        task = (((doc.get("hydra") or {}).get("overrides") or {}).get("task")) or []
        try:
            _, swept = parse_overrides(task)
        except OverrideParseException:  # written by another Hydra version: not ours to judge
            continue
        keys += [k for k in swept if k not in keys]
    return keys


def _select(doc, dotted: str):
    for part in dotted.split("."):
        if not isinstance(doc, dict) or part not in doc:
            return None
        doc = doc[part]
    return doc if not isinstance(doc, (dict, list)) else None


def read_run(run_dir: Path) -> tuple[pd.DataFrame, dict]:
    """One run's metrics.csv rows and its overrides {key: value}; ReportError naming the file
    when one of them is damaged (binary, truncated, header only, not YAML)."""
    table = _read_metrics(run_dir / "metrics.csv")
    path = run_dir / ".hydra" / "overrides.yaml"
    overrides = _read_overrides(path) if path.exists() else {}
    resolved = run_dir / "config_resolved.yaml"
    context = {}
    if resolved.exists():
        doc = _read_yaml(resolved)
        doc = doc if isinstance(doc, dict) else {}
        context = {k: _select(doc, k) for k in RESOLVED_KEYS}
    for k, v in context.items():
        if k not in table.columns:
            table[k] = v
    return table, overrides


def _tidy(col: pd.Series) -> pd.Series:
    """One type per column (parquet needs it): numbers stay numbers, anything mixed is text."""
    values = [v for v in col if v is not None and not (isinstance(v, float) and math.isnan(v))]
    if all(isinstance(v, bool) for v in values):
        return col
    if all(
        isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)
        for v in values
    ):
        return pd.to_numeric(col)
    return col.map(
        lambda v: None if v is None or (isinstance(v, float) and math.isnan(v)) else str(v)
    ).astype(object)


def collect(root: Path | str, exclude: Path | None = None) -> Collection:
    """Collect every run under `root` into a Collection (see its docstring)."""
    root = Path(root).resolve()
    if not root.is_dir():
        raise ReportError(f"{root}: not a directory")
    dirs = find_runs(root, exclude.resolve() if exclude is not None else None)
    if not dirs:
        raise ReportError(
            f"{root}: no runs found (no metrics.csv under it; is this the output "
            f"directory of `servetune simulate`?)"
        )
    frames, order, run_dirs, skipped = [], [], {}, []
    for d in dirs:
        why = run_folder.incomplete(d)
        if why is not None:  # never a mix of two runs, nor half of one
            skipped.append(f"{d}: {why}")
            continue
        try:
            table, overrides = read_run(d)
        except ReportError as err:  # a damaged run folder: report the others
            skipped.append(str(err))
            continue
        name = str(d.relative_to(root)) if d != root else "."
        run_dirs[name] = d
        order += [k for k in overrides if k not in order]
        rows = table.assign(run=name, scenario=np.arange(len(table)))
        for key, value in overrides.items():
            if key in rows.columns and key not in RESOLVED_KEYS:
                continue  # a grid column or the seed: metrics.csv holds the simulated value
            rows[key] = [value] * len(rows)
        frames.append(rows)
    if not frames:
        raise ReportError(
            f"{root}: no readable runs; every run folder is damaged:\n  " + "\n  ".join(skipped)
        )
    runs = pd.concat(frames, ignore_index=True)
    for c in runs.columns:
        if runs[c].dtype == object:
            runs[c] = _tidy(runs[c])
    grid_cols = [
        c
        for c in runs.columns
        if c.startswith("policy.") and c not in CONTEXT_KEYS and c not in order
    ]
    candidates = sweep_order(root, skipped)
    candidates += [k for k in order + grid_cols if k not in candidates]
    keys = [
        k
        for k in candidates
        if k in runs.columns
        and k != "seed"
        and not k.lstrip("+").startswith(NOT_KEYS)
        and runs[k].astype(str).nunique(dropna=False) > 1
    ]
    front = (
        ["run", "scenario"]
        + [k for k in order if k != "seed"]
        + ["seed"]
        + [c for c in grid_cols if c not in order]
        + list(CONTEXT_KEYS)
    )
    front = [c for c in dict.fromkeys(front) if c in runs.columns]
    runs = runs[front + [c for c in runs.columns if c not in front]]
    return Collection(
        root=root, runs=runs, keys=keys, overrides=order, run_dirs=run_dirs, skipped=skipped
    )


def short_names(keys: list) -> dict:
    """{key: display name}: a dotted prefix shared by every key is dropped ("policy.")."""
    parts = [k.split(".") for k in keys]
    common = 0
    while parts and all(len(p) > common + 1 and p[common] == parts[0][common] for p in parts):
        common += 1
    return {k: ".".join(p[common:]) for k, p in zip(keys, parts, strict=True)}


def point_label(row: dict | pd.Series, keys: list) -> str:
    """'key=value, ...' of a point ('all' when nothing varies), keys as short_names gives."""
    if not keys:
        return "all"
    names = short_names(keys)
    return ", ".join(f"{names[k]}={fmt(row[k])}" for k in keys)


def condition_label(row: dict | pd.Series, keys: list) -> str:
    """'key=value, ...' of a condition with the keys in full ("workload.rate=5"); 'all points'
    when there are no condition keys."""
    return ", ".join(f"{k}={fmt(row[k])}" for k in keys) if keys else "all points"
