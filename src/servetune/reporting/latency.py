"""Latency distributions per point: the empirical CDF of TTFT, TPOT and E2E (in ms) over the
requests of every seed of a point, read from each run's requests.parquet: the same requests
the metrics count (counted, completed, a finite latency)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from servetune.core.inputs import check_regular
from servetune.reporting.collect import Collection, ReportError, point_label
from servetune.reporting.stats import LATENCIES

MAX_STEPS = 400  # CDF points kept per latency and point (the tail is kept dense)
COLUMNS = ("counted", "end_state") + tuple(f"{lat}_s" for lat in LATENCIES)


@dataclasses.dataclass
class Cdf:
    """An empirical CDF: at x_ms[i] (sorted latencies, ms) the fraction p[i] of the n
    requests at or below it; a subset of the n steps when n > MAX_STEPS."""

    x_ms: np.ndarray
    p: np.ndarray
    n: int


def ecdf(values, max_steps: int = MAX_STEPS) -> tuple[np.ndarray, np.ndarray]:
    """(sorted values, ECDF at each): the i-th smallest of n finite values has p = (i+1)/n.
    Over max_steps values, the ranks kept are evenly spaced in p plus the tail (p = 1 - 10^-k
    for k up to 5), the smallest and the largest: the steps of a CDF drawn on a screen."""
    v = np.asarray(values, np.float64).ravel()
    v = np.sort(v[np.isfinite(v)])
    n = len(v)
    if n <= max_steps:
        return v, np.arange(1, n + 1) / max(n, 1)
    tail = 1.0 - np.logspace(-1, -5, 41)  # every 0.1 decade: P90, P99, P99.9 among them
    q = np.concatenate([np.linspace(0.0, 1.0, max_steps - len(tail)), tail])
    ranks = np.unique(np.clip(np.ceil(np.round(q * n, 6)).astype(np.int64) - 1, 0, n - 1))
    return v[ranks], (ranks + 1) / n


def thin(cdf: Cdf, max_steps: int) -> Cdf:
    """`cdf` with at most about `max_steps` of its steps (each kept step exact): those nearest
    above evenly spaced fractions, the tail (as ecdf keeps it), the first and the last; `cdf`
    itself when it has no more steps than that."""
    if len(cdf.p) <= max_steps:
        return cdf
    tail = 1.0 - np.logspace(-1, -5, 41)
    q = np.concatenate([np.linspace(0.0, 1.0, max(max_steps - len(tail), 2)), tail])
    idx = np.unique(np.minimum(np.searchsorted(cdf.p, q), len(cdf.p) - 1))
    idx = np.unique(np.concatenate([[0], idx, [len(cdf.p) - 1]]))
    return Cdf(cdf.x_ms[idx], cdf.p[idx], cdf.n)


def _read(path, skipped: list) -> pd.DataFrame | None:
    """The latency columns of a requests.parquet, or None; a reason is appended to `skipped`
    unless one naming this file is there already (the bootstrap read it first)."""
    try:
        check_regular(path, "parquet file", ReportError)
        import pyarrow.parquet as pq

        names = set(pq.read_schema(path).names)
        missing = [c for c in COLUMNS if c not in names]
        if missing:
            raise ValueError(f"no column {', '.join(missing)}")
        cols = list(COLUMNS) + (["scenario"] if "scenario" in names else [])
        return pd.read_parquet(path, columns=cols)
    except Exception as err:  # noqa: BLE001 -- pyarrow raises several kinds on a damaged file
        if not any(str(path) in m for m in skipped):
            why = (str(err).strip().splitlines() or [type(err).__name__])[0]
            skipped.append(f"{path}: cannot read ({why}); no latency CDFs for this run")
        return None


def _latencies(table: pd.DataFrame) -> dict:
    """{lat: values in ms} of the counted, completed requests of one scenario."""
    done = table[table["counted"].to_numpy(bool) & (table["end_state"] == "completed").to_numpy()]
    out = {}
    for lat in LATENCIES:
        v = done[f"{lat}_s"].to_numpy(np.float64) * 1000.0
        out[lat] = v[np.isfinite(v)]
    return out


def point_cdfs(col: Collection, skipped: list | None = None) -> dict:
    """{point label: {lat: Cdf}} for every point with a readable requests.parquet for each of
    its seeds (pooled over the seeds; latencies in ms). Runs are read one at a time and a
    point's requests are reduced to its CDF as soon as its last seed is read."""
    skipped = col.skipped if skipped is None else skipped
    runs = col.runs
    labels = [point_label(row, col.keys) for _, row in runs.iterrows()]
    left = pd.Series(labels).value_counts().to_dict()  # seeds still to read, per point
    pooled: dict = {}
    out: dict = {}
    broken: set = set()
    for run, rows in runs.groupby("run", sort=False):
        path = col.run_dirs[run] / "requests.parquet"
        table = _read(path, skipped) if path.exists() else None
        by_scenario = {}
        if table is not None:
            by_scenario = (
                dict(tuple(table.groupby("scenario"))) if "scenario" in table else {0: table}
            )
        for idx in rows.index:
            label = labels[runs.index.get_loc(idx)]
            req = by_scenario.get(int(runs.at[idx, "scenario"]))
            if req is None:
                broken.add(label)
            else:
                for lat, v in _latencies(req).items():
                    pooled.setdefault(label, {}).setdefault(lat, []).append(v)
            left[label] -= 1
            if left[label] == 0:
                parts = pooled.pop(label, {})
                if label not in broken and parts:
                    out[label] = {
                        lat: Cdf(*ecdf(np.concatenate(v)), n=sum(map(len, v)))
                        for lat, v in parts.items()
                    }
    return out
