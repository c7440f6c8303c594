"""Uncertainty: bootstrap replicates from request tables, seeds aggregated into points
(mean +- std and a bootstrap confidence interval), and which points are not distinguishable.

The bootstrap resamples a scenario's requests with replacement and recomputes each statistic;
a point's interval is the 2.5-97.5 percentile range of the mean over its seeds of those
replicates. Requests in a queue are correlated (one burst delays many), so these intervals are
optimistic; the spread over seeds (std) is the honest one when there are several.

Identical runs are one result: a scenario's *outcome* is a digest of its request outcomes
(every request's end state, counting, qualification, latencies and tokens delivered), and its
resampling is seeded from that digest, so two runs with the same outcomes get the same
replicates and the same interval wherever they sit in the sweep. Points whose seeds have the
same outcomes (settings that never changed what the engine did: a max_num_seqs above the most
requests ever running) are *identical*: compared as one point, under one label naming each.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pandas as pd

from servetune.core.inputs import check_regular
from servetune.reporting.collect import (
    TARGET_KEYS,
    Collection,
    ReportError,
    condition_label,
    point_label,
)
from servetune.reporting.units import shown as shown_value
from servetune.reporting.units import title, unit

LATENCIES = ("ttft", "tpot", "e2e")
STATS = ("mean", "p50", "p90", "p99")
QUANTILES = {"p50": 50.0, "p90": 90.0, "p99": 99.0}
# Metrics with bootstrap intervals: every latency statistic, SLO attainment and goodput.
CI_METRICS = tuple(f"{m}_{s}_s" for m in LATENCIES for s in STATS) + (
    "slo_attainment",
    "goodput_rps",
    "useful_tokens_per_dollar",
)
# Headline metrics and which way is better (+1 higher, -1 lower).
HEADLINE = {
    "goodput_rps": 1,
    "slo_attainment": 1,
    "useful_tokens_per_dollar": 1,
    "ttft_p99_s": -1,
    "tpot_p99_s": -1,
}
LEVEL = 0.95
TOL = 1e-9  # relative: a spread or an interval width below this is zero
NO_INFO_SEEDS = "no information (every seed gave the same value)"
NO_INFO_WIDTH = "no information (an interval of zero width)"
NO_INTERVAL = "no interval (one seed, no bootstrap)"
# Columns of requests.parquet the bootstrap reads.
REQUEST_COLUMNS = ("counted", "end_state", "qualifies") + tuple(f"{lat}_s" for lat in LATENCIES)
DELIVERED = "output_tokens_delivered"  # read where present: useful tokens per dollar
OUTCOME = "outcome"  # the key of a scenario's outcome digest among its replicates


def outcome_digest(requests: pd.DataFrame) -> str:
    """A digest (hex) of one scenario's request outcomes: each request's counting, end state,
    qualification, TTFT, TPOT and E2E and, where the table has them, tokens delivered. Two
    runs with equal digests had the same outcome for every request, in order."""
    h = hashlib.blake2b(digest_size=16)
    for name in (*REQUEST_COLUMNS, DELIVERED):
        if name not in requests:
            continue
        col = requests[name]
        if name == "end_state":
            data = "\x1f".join(map(str, col)).encode()
        else:
            v = pd.to_numeric(col, errors="coerce").to_numpy(np.float64)
            data = np.where(np.isnan(v), np.nan, v).tobytes()  # one NaN, whatever its bits
        h.update(name.encode() + b"=" + data + b";")
    return h.hexdigest()


def outcome_rng(seed: int, digest: str) -> np.random.Generator:
    """The resampling generator of a scenario: seeded from `seed` and its outcome digest, so
    the same requests resampled give the same replicates in any run order."""
    seed = [int(seed), int(digest[:15], 16)]  # (core/streams.py: outside its table)
    rng = np.random.default_rng(seed)
    return rng


def _resamples(n: int, n_boot: int, rng: np.random.Generator):
    """Index arrays [k, n] of resamples with replacement, n_boot rows in all, in chunks of at
    most ~2M entries."""
    chunk = max(1, min(n_boot, 2_000_000 // max(n, 1)))
    for start in range(0, n_boot, chunk):
        yield rng.integers(0, n, (min(chunk, n_boot - start), n))


def _replicate_stats(values: np.ndarray, n_boot: int, rng: np.random.Generator) -> dict:
    """{mean, p50, p90, p99: [n_boot]} of resamples of `values` (finite, 1-D)."""
    if len(values) == 0:
        return {s: np.full(n_boot, np.nan) for s in STATS}
    out = {s: [] for s in STATS}
    for idx in _resamples(len(values), n_boot, rng):
        sample = values[idx]
        out["mean"].append(sample.mean(axis=1))
        qs = np.percentile(sample, list(QUANTILES.values()), axis=1)
        for name, q in zip(QUANTILES, qs, strict=True):
            out[name].append(q)
    return {s: np.concatenate(v) for s, v in out.items()}


def bootstrap_scenario(
    requests: pd.DataFrame,
    window_s: float,
    n_boot: int,
    rng: np.random.Generator,
    tokens_per_dollar: float = np.nan,
) -> dict:
    """Replicates [n_boot] of every CI_METRICS entry for one scenario's request table, over the
    same requests the metrics use (counted; latencies of completed requests). Useful tokens
    per dollar (the scenario's value `tokens_per_dollar`; its cost is fixed) scales with the
    resampled output tokens of the qualifying requests; NaN without that value or the table's
    output_tokens_delivered."""
    counted = requests[requests["counted"].to_numpy(bool)]
    done = counted[(counted["end_state"] == "completed").to_numpy()]
    reps = {}
    for lat in LATENCIES:
        v = done[f"{lat}_s"].to_numpy(np.float64)
        for s, r in _replicate_stats(v[np.isfinite(v)], n_boot, rng).items():
            reps[f"{lat}_{s}_s"] = r
    q = counted["qualifies"].to_numpy(np.float64)
    n = len(q)
    useful = np.full(n, np.nan)
    if DELIVERED in counted and np.isfinite(tokens_per_dollar):
        useful = q * pd.to_numeric(counted[DELIVERED], errors="coerce").to_numpy(np.float64)
    att, tpd = np.full(n_boot, np.nan), np.full(n_boot, np.nan)
    if n:
        parts = [
            (q[idx].mean(axis=1), useful[idx].sum(axis=1)) for idx in _resamples(n, n_boot, rng)
        ]
        att = np.concatenate([a for a, _ in parts])
        total = useful.sum()
        if np.isfinite(total) and total > 0:
            tpd = np.concatenate([u for _, u in parts]) * (tokens_per_dollar / total)
        elif np.isfinite(total):  # nothing useful: every replicate is the value, 0
            tpd = np.full(n_boot, float(tokens_per_dollar))
    reps["slo_attainment"] = att
    reps["goodput_rps"] = att * n / window_s if window_s > 0 else np.full(n_boot, np.nan)
    reps["useful_tokens_per_dollar"] = tpd
    return reps


def _read_requests(path, skipped: list) -> pd.DataFrame | None:
    """A run's requests.parquet, or None (its message appended to `skipped`) when it is
    truncated, not parquet or lacks the columns the bootstrap reads."""
    try:
        check_regular(path, "parquet file", ReportError)
        table = pd.read_parquet(path)
    except ReportError as err:
        skipped.append(f"{err}; no intervals for this run")
        return None
    except Exception as err:  # noqa: BLE001 -- pyarrow raises several kinds on a damaged file
        why = (str(err).strip().splitlines() or [type(err).__name__])[0]
        skipped.append(f"{path}: cannot read ({why}); no intervals for this run")
        return None
    missing = [c for c in REQUEST_COLUMNS if c not in table.columns]
    if missing:
        skipped.append(
            f"{path}: cannot read (no column {', '.join(missing)}); no intervals for this run"
        )
        return None
    return table


def bootstrap(col: Collection, n_boot: int = 1000, seed: int = 0) -> dict:
    """{row index of col.runs: {metric: replicates [n_boot], OUTCOME: digest}} for every
    scenario whose run has a readable requests.parquet (with n_boot <= 0, the digests alone);
    each scenario resampled by outcome_rng(seed, its digest): deterministic in `seed`, and the
    same for runs with the same request outcomes."""
    out = {}
    for run, rows in col.runs.groupby("run", sort=False):
        path = col.run_dirs[run] / "requests.parquet"
        if not path.exists():
            continue
        table = _read_requests(path, col.skipped)
        if table is None:
            continue
        by_scenario = dict(tuple(table.groupby("scenario"))) if "scenario" in table else {0: table}
        for idx, row in rows.iterrows():
            req = by_scenario.get(int(row["scenario"]))
            if req is None:
                continue
            digest = outcome_digest(req)
            reps = {}
            if n_boot > 0:
                reps = bootstrap_scenario(
                    req,
                    float(row.get("window_s", np.nan)),
                    n_boot,
                    outcome_rng(seed, digest),
                    _float(row.get("useful_tokens_per_dollar", np.nan)),
                )
            out[idx] = {**reps, OUTCOME: digest}
    return out


def _float(v) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return float(np.nan)


def metric_columns(runs: pd.DataFrame, keys: list) -> list:
    """The numeric metric columns of a runs table (configuration columns excluded)."""
    skip = set(keys) | {"scenario", "seed"}
    return [
        c
        for c in runs.columns
        if c not in skip
        and not c.startswith("policy.")
        and "." not in c
        and pd.api.types.is_numeric_dtype(runs[c])
        and not pd.api.types.is_bool_dtype(runs[c])
    ]


def aggregate(col: Collection, replicates: dict | None = None) -> pd.DataFrame:
    """One row per point (rows that agree on col.keys): the key values, `point` (a label),
    `n` (seeds), `run` (the run folder of its first seed), the SLO targets of its runs
    (TARGET_KEYS, where the runs say), `outcome` (its seeds' outcome digests, sorted and
    joined; "" unless every seed has one), and for each metric M: M_mean, M_std (ddof 1; NaN
    with one seed) and, where replicates exist for every seed, M_ci_lo and M_ci_hi (a LEVEL
    bootstrap interval of the mean over seeds). Seeds that gave one same value of M (a replayed
    trace without replicas) are one sample, not several: the interval is the first seed's."""
    runs = col.runs
    replicates = replicates or {}
    metrics = metric_columns(runs, col.keys)
    if col.keys:
        groups = runs.groupby([runs[k].astype(str) for k in col.keys], sort=False, dropna=False)
        parts = [g for _, g in groups]
    else:
        parts = [runs]
    rows = []
    for g in parts:
        first = g.iloc[0]
        row = {k: first[k] for k in col.keys}
        row["point"] = point_label(first, col.keys)
        row["n"] = len(g)
        row["seeds"] = " ".join(str(s) for s in g["seed"]) if "seed" in g else ""
        row["run"] = first["run"]
        row.update({k: first[k] for k in TARGET_KEYS if k in g and k not in col.keys})
        digests = [replicates.get(i, {}).get(OUTCOME) for i in g.index]
        row[OUTCOME] = " ".join(sorted(digests)) if all(digests) else ""
        for m in metrics:
            v = g[m].to_numpy(np.float64)
            finite = v[np.isfinite(v)]
            row[f"{m}_mean"] = float(finite.mean()) if len(finite) else float(np.nan)
            row[f"{m}_std"] = float(finite.std(ddof=1)) if len(finite) > 1 else float(np.nan)
        for m in CI_METRICS:
            row[f"{m}_ci_lo"], row[f"{m}_ci_hi"] = _point_ci(g, m, replicates)
        rows.append(row)
    return pd.DataFrame(rows)


def _point_ci(g: pd.DataFrame, metric: str, replicates: dict) -> tuple[float, float]:
    """The LEVEL bootstrap interval of the mean over the seeds (rows of `g`) of `metric`;
    NaN unless every seed has replicates. Seeds whose values of `metric` are all the same
    count once (their replicates would average copies of one sample into a narrower one)."""
    reps = [replicates[i][metric] for i in g.index if metric in replicates.get(i, {})]
    if len(reps) != len(g) or not reps:
        return float(np.nan), float(np.nan)
    if len(reps) > 1 and metric in g and identical(g[metric].to_numpy(np.float64)):
        reps = reps[:1]
    mean_rep = np.mean(np.stack(reps), axis=0)
    mean_rep = mean_rep[np.isfinite(mean_rep)]
    if not len(mean_rep):
        return float(np.nan), float(np.nan)
    lo, hi = np.percentile(mean_rep, [50 * (1 - LEVEL), 50 * (1 + LEVEL)])
    return float(lo), float(hi)


def identical(values: np.ndarray) -> bool:
    """Whether two or more values, all finite, are one value (to TOL relative): seeds that
    carry no information about each other."""
    v = np.asarray(values, np.float64)
    return len(v) > 1 and bool(np.isfinite(v).all()) and _zero(v.max() - v.min(), v)


def _zero(width: float, around) -> bool:
    """Whether `width` is zero relative to the magnitude of `around` (TOL)."""
    size = float(np.max(np.abs(np.asarray(around, np.float64)))) if np.size(around) else 0.0
    return bool(width <= TOL * size) or width == 0.0


def runs_ci(col: Collection, replicates: dict) -> pd.DataFrame:
    """col.runs with M_ci_lo / M_ci_hi columns (one scenario's bootstrap interval) appended."""
    runs = col.runs.copy()
    lo_q, hi_q = 50 * (1 - LEVEL), 50 * (1 + LEVEL)
    for m in CI_METRICS:
        lo, hi = np.full(len(runs), np.nan), np.full(len(runs), np.nan)
        for pos, idx in enumerate(runs.index):
            r = replicates.get(idx, {}).get(m)
            if r is not None and np.isfinite(r).any():
                lo[pos], hi[pos] = np.percentile(r[np.isfinite(r)], [lo_q, hi_q])
        runs[f"{m}_ci_lo"], runs[f"{m}_ci_hi"] = lo, hi
    return runs


def intervals(points: pd.DataFrame, metric: str) -> tuple[np.ndarray, np.ndarray, list]:
    """Each point's uncertainty interval for `metric` and why it has none: (lo, hi, notes).

    The interval is mean +- std over seeds, widened to the bootstrap interval where there is
    one. A spread is information only when it is not zero: seeds that all gave the same value
    (NO_INFO_SEEDS) have no spread, and a bootstrap interval of zero width (NO_INFO_WIDTH)
    tells nothing either; with neither part, lo and hi are NaN and the note says why (also
    NO_INTERVAL: one seed and no bootstrap). notes[i] is "" where there is an interval."""
    mean = points[f"{metric}_mean"].to_numpy(np.float64)
    nan = pd.Series(np.nan, index=points.index)
    std = points.get(f"{metric}_std", nan).to_numpy(np.float64)
    clo = points.get(f"{metric}_ci_lo", nan).to_numpy(np.float64)
    chi = points.get(f"{metric}_ci_hi", nan).to_numpy(np.float64)
    n = points.get("n", pd.Series(1, index=points.index)).to_numpy(np.float64)
    lo, hi, notes = np.full(len(points), np.nan), np.full(len(points), np.nan), []
    for i in range(len(points)):
        same = n[i] > 1 and np.isfinite(std[i]) and _zero(std[i], mean[i])
        seeds_ok = n[i] > 1 and np.isfinite(std[i]) and np.isfinite(mean[i]) and not same
        has_ci = bool(np.isfinite(clo[i]) and np.isfinite(chi[i]))
        ci_ok = has_ci and not _zero(chi[i] - clo[i], [clo[i], chi[i]])
        if seeds_ok:
            lo[i], hi[i] = mean[i] - std[i], mean[i] + std[i]
        if ci_ok:
            lo[i] = np.fmin(lo[i], clo[i])
            hi[i] = np.fmax(hi[i], chi[i])
        if seeds_ok or ci_ok:
            notes.append("")
        else:
            notes.append(NO_INFO_SEEDS if same else NO_INFO_WIDTH if has_ci else NO_INTERVAL)
    return lo, hi, notes


def interval(points: pd.DataFrame, metric: str) -> tuple[np.ndarray, np.ndarray]:
    """Each point's uncertainty interval for `metric` (see `intervals`); NaN where there is
    no information to build one from."""
    lo, hi, _ = intervals(points, metric)
    return lo, hi


IDENTICAL = "identical request outcomes"  # why points are one result


def identical_groups(points: pd.DataFrame) -> list[list[int]]:
    """Positions of `points` grouped where their runs had the same request outcomes (equal
    `outcome`, see aggregate) and their headline means agree (to TOL relative: a cost that
    differed with the same requests keeps them apart); a point without an outcome is alone.
    Groups and members in order of first appearance."""
    outcome = points.get(OUTCOME, pd.Series("", index=points.index)).fillna("").astype(str)
    outcome = outcome.where(outcome != "", _metrics_keys(points))
    means = [f"{m}_mean" for m in HEADLINE if f"{m}_mean" in points]
    values = points[means].to_numpy(np.float64) if means else np.zeros((len(points), 0))
    groups: list[list[int]] = []
    for i, key in enumerate(outcome):
        home = None
        if key:
            home = next(
                (g for g in groups if outcome.iloc[g[0]] == key and _same(values[g[0]], values[i])),
                None,
            )
        if home is None:
            groups.append([i])
        else:
            home.append(i)
    return groups


def _metrics_keys(points: pd.DataFrame) -> pd.Series:
    """Where runs kept no request table (output.request_table=false), a key of each point's
    every metric mean ("metrics:" and their values): points whose dozens of metrics are all
    equal to the last digit had the same outcomes for every purpose of a report; "" where a
    point has fewer than MIN_METRICS of them."""
    cols = [c for c in points.columns if c.endswith("_mean")]
    if len(cols) < MIN_METRICS:
        return pd.Series("", index=points.index)
    values = points[cols].to_numpy(np.float64)
    return pd.Series(["metrics:" + row.tobytes().hex() for row in values], index=points.index)


MIN_METRICS = 10  # metric means a point needs to be keyed by them (_metrics_keys)


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two rows of means agree: NaN where the other is NaN, else to TOL relative."""
    both = np.isnan(a) & np.isnan(b)
    close = np.abs(a - b) <= TOL * np.maximum(np.abs(a), np.abs(b))
    return bool(np.all(both | close))


def group_label(rows: pd.DataFrame, keys: list | None) -> str:
    """One label naming every point of `rows` (labels.tied_label over `keys`; their `point`
    labels joined by "; " when keys is None)."""
    from servetune.reporting.labels import tied_label

    if keys is None:
        return "; ".join(dict.fromkeys(str(p) for p in rows["point"]))
    return tied_label(rows, list(keys))


COMPARISON_COLUMNS = [
    "condition",
    "metric",
    "best",
    "other",
    "best_mean",
    "other_mean",
    "distinguishable",
    "note",
    "identical",
]


def compare(
    points: pd.DataFrame, metrics: dict = HEADLINE, conditions: list = (), keys: list | None = None
) -> pd.DataFrame:
    """For each condition (points that agree on the `conditions` keys: a workload, a
    hardware; "" when there are none) and headline metric, the best point against every other
    point of that condition: columns condition, metric, best, other (points named by their
    `keys` other than the conditions; by their `point` label when keys is None), best_mean,
    other_mean (stored units), distinguishable (True: the intervals do not overlap; False:
    they overlap, the two cannot be told apart; None: no interval to judge by), note (why
    None: see `intervals`) and identical (how many points share the best's request outcomes).

    Identical points (identical_groups) are compared as one, named together
    ("max_num_seqs=16, 64, 256"); where every point of a condition is one such group, its one
    row has other "" (nothing else to compare), distinguishable False and note IDENTICAL."""
    rows = []
    conditions = [k for k in conditions if k in points]
    rest = None if keys is None else [k for k in keys if k not in conditions]
    if rest is not None:
        points = points.assign(point=[point_label(r, rest) for _, r in points.iterrows()])
    if conditions:
        groups = [
            g
            for _, g in points.groupby(
                [points[k].astype(str) for k in conditions], sort=False, dropna=False
            )
        ]
    else:
        groups = [points]
    for g in groups:
        label = condition_label(g.iloc[0], conditions) if conditions else ""
        rows += _compare_group(_one_per_outcome(g.reset_index(drop=True), rest), metrics, label)
    return pd.DataFrame(rows, columns=COMPARISON_COLUMNS)


def _one_per_outcome(points: pd.DataFrame, keys: list | None) -> pd.DataFrame:
    """`points` with each group of identical points as its first row, labelled by the whole
    group (group_label) and counted in column `identical`."""
    groups = identical_groups(points)
    out = points.iloc[[g[0] for g in groups]].copy()
    out["point"] = [group_label(points.iloc[g], keys) for g in groups]
    out["identical"] = [len(g) for g in groups]
    return out.reset_index(drop=True)


def _compare_group(points: pd.DataFrame, metrics: dict, condition: str) -> list[dict]:
    if len(points) < 2 and points["identical"].iloc[0] < 2:
        return []
    rows = []
    for metric, sign in metrics.items():
        if f"{metric}_mean" not in points:
            continue
        mean = points[f"{metric}_mean"].to_numpy(np.float64)
        if not np.isfinite(mean).any():
            continue
        best = int(np.nanargmax(sign * mean))
        lo, hi, notes = intervals(points, metric)
        common = {
            "condition": condition,
            "metric": metric,
            "best": points["point"].iloc[best],
            "best_mean": mean[best],
            "identical": int(points["identical"].iloc[best]),
        }
        if len(points) == 1:
            rows.append(
                {
                    **common,
                    "other": "",
                    "other_mean": mean[best],
                    "distinguishable": False,
                    "note": IDENTICAL,
                }
            )
        for j in range(len(points)):
            if j == best:
                continue
            if np.isfinite([lo[best], hi[best], lo[j], hi[j]]).all():
                dist, note = bool(hi[j] < lo[best] or hi[best] < lo[j]), ""
            else:
                dist, note = None, notes[best] or notes[j]
            rows.append(
                {
                    **common,
                    "other": points["point"].iloc[j],
                    "other_mean": mean[j],
                    "distinguishable": dist,
                    "note": note,
                }
            )
    return rows


def verdicts(comparisons: pd.DataFrame) -> list[str]:
    """One sentence per condition and headline metric: the best point (latencies in ms), or
    "tied:" where it is several identical points or cannot be told from another, then the
    points it cannot be told from, those it has no information to be told from (identical
    seeds, zero-width intervals) and those without an interval."""
    lines = []
    if comparisons.empty:
        return lines
    for (condition, metric), g in comparisons.groupby(["condition", "metric"], sort=False):
        best, value = g["best"].iloc[0], g["best_mean"].iloc[0]
        many = "identical" in g and int(g["identical"].iloc[0]) > 1
        g = g[g["other"] != ""]
        dist = list(g["distinguishable"])
        same = [o for o, d in zip(g["other"], dist, strict=True) if d is not None and not d]
        blind = [
            o
            for o, d, note in zip(g["other"], dist, g["note"], strict=True)
            if d is None and str(note).startswith("no information")
        ]
        unknown = [
            o
            for o, d, note in zip(g["other"], dist, g["note"], strict=True)
            if d is None and not str(note).startswith("no information")
        ]
        where = f"[{condition}] " if condition else ""
        shown = f"{shown_value(value, metric, 4)} {unit(metric)}".strip()
        tied = many or bool(same)
        text = f"{where}{title(metric, False)}: {'tied:' if tied else 'best'} {best} ({shown}"
        text += f", {IDENTICAL})" if many else ")"
        if same and len(same) == len(g):
            text += f"; not distinguishable from any of the {len(g)} other point(s)"
        elif same:
            more = f" and {len(same) - 4} more" if len(same) > 4 else ""
            text += (
                f"; not distinguishable from {len(same)} of {len(g)} other(s): "
                + "; ".join(same[:4])
                + more
            )
        if blind:
            text += (
                f"; no information to tell it from {len(blind)} point(s) (identical seeds "
                f"or zero-width intervals)"
            )
        if unknown:
            text += f"; no interval to compare with {len(unknown)} point(s) (one seed, no CI)"
        if len(g) and not same and not unknown and not blind:
            text += "; distinguishable from every other point"
        lines.append(text)
    return lines


def series(points: pd.DataFrame, keys: list, x: str) -> list:
    """Split points into the lines of a figure over `x`: [(label, rows sorted by x)], one per
    combination of the other point keys (label '' when there are none)."""
    others = [k for k in keys if k != x]
    numeric = (
        x in points
        and pd.api.types.is_numeric_dtype(points[x])
        and not pd.api.types.is_bool_dtype(points[x])
    )
    if others:
        groups = points.groupby([points[k].astype(str) for k in others], sort=False)
        parts = [(point_label(g.iloc[0], others), g) for _, g in groups]
    else:
        parts = [("", points)]
    return [(label, g.sort_values(x) if numeric else g) for label, g in parts]


def format_mean_std(mean: float, std: float, scale: float = 1.0, fmt: str = "{:.3g}") -> str:
    """`mean +- std` for a table cell (both multiplied by `scale`, formatted with `fmt`); just
    the mean where the spread is zero or undefined, "-" where the mean is undefined."""
    if not np.isfinite(mean):
        return "-"
    m = fmt.format(mean * scale)
    if not np.isfinite(std) or std <= 1e-9 * max(abs(mean), 1e-12):
        return m
    return f"{m} +- {fmt.format(std * scale)}"


def format_ci(point: pd.Series, metric: str, scale: float = 1.0, fmt: str = "{:.3g}") -> str:
    """ " [lo, hi]": the 95% bootstrap interval `aggregate` gives a P99 metric of one point
    (scaled and formatted); empty for other metrics or where there is none."""
    lo, hi = point.get(f"{metric}_ci_lo", np.nan), point.get(f"{metric}_ci_hi", np.nan)
    if "p99" not in metric or not np.isfinite([lo, hi]).all():
        return ""
    return f" [{fmt.format(lo * scale)}, {fmt.format(hi * scale)}]"
