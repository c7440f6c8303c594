"""Tuned vs grid vs vLLM defaults: does a tuner find what an exhaustive grid finds, cheaper?

Default mode (one slice). Scenario: Llama-3-8B on one H100, the Azure LLM 2023 conversation
trace, minutes 0-20 replayed at 4x the arrival rate (at 1x one H100 meets every SLO whatever
the policy, so nothing is to be tuned); SLOs TTFT <= 2 s, TPOT <= 100 ms; objective
log(useful tokens) - log(USD) subject to SLO attainment >= 99%. Tuned keys: max_num_seqs,
max_num_batched_tokens, the KV watermark and the admission threshold (queue_cap). The grid is
the product below (576 points); the tuner gets at most 10% of the grid's scenarios. Every
policy is then re-simulated on minutes 20-40 (held out). Prints the table and writes it (and
the grid) under --out.

    python benchmarks/bench_tune.py                  # grid (cached in --out) + tuning
    python benchmarks/bench_tune.py --grid-only      # or --tune-only: one half, cached

Distribution mode. Training distribution: R seeded replicas (--replicas,
default 4) of short slices of the same trace at 4x (--slice-s seconds of the trace, default
120, i.e. 30 s of arrivals; a window shifted by U(0, 1800) s and a 30 s circular block
bootstrap per seed), drain 60 s. Grid: 1,050 points over five knobs (max_num_seqs x
max_num_batched_tokens x watermark x queue_cap x long_prefill_token_threshold, only the
combinations vLLM accepts), every point on every replica, ranked by the tuner's own order
(meeting the attainment target first, then the objective). ES (all five knobs) and pathwise
(the four it has gradients for; long_prefill stays off) tune from vLLM's defaults on the same
replicas with at most --budget-frac (5%) of the grid's simulations. Measured: each tuner's
objective gap to the grid's best (percent of the objective, and of useful tokens per USD) and
the fraction of the grid's simulations it used (ES twice: conf/tune/es.yaml's steps with
--pairs, and --es-long-steps; pathwise with pathwise.yaml's steps and any --pathwise-steps),
all re-scored by the exact simulator on the
training replicas; then vLLM's defaults, the grid's best and both tuned policies on held-out
traces with held-out seeds (1000..): other windows of the conversation trace at 2x and 4x,
the Azure code trace at 1x and 2x, and the Mooncake conversation and synthetic traces (on
Qwen2.5-7B, whose 32k context fits them, thinned to half their rate): mean and 95%
t-interval over replicas of SLO attainment, useful tokens per USD and goodput, the best
policy per trace by the tuner's order, and whether a tuned policy falls below the defaults
(a regression). Writes grid.csv, table.csv, heldout.csv and heldout_replicas.csv under --out.

    python benchmarks/bench_tune.py --distribution --out outputs/bench_tune_dist  # ~30 min, 2 cores
    python benchmarks/bench_tune.py --distribution --grid-only   # or --tune-only (cached)
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import time
from pathlib import Path

import numpy as np
import pandas as pd
from omegaconf import DictConfig, open_dict

from servetune.config.policy import DEFAULTS
from servetune.config.scenario import build
from servetune.run.api import compose
from servetune.tuning.estimators.pathwise_gradient import DIFFERENCE_KEYS, PATHWISE_KEYS
from servetune.tuning.evaluation import half_width
from servetune.tuning.evaluator import Evaluator
from servetune.tuning.objective import Objective
from servetune.tuning.runner import _better, tune

BASE = [
    "workload=azure_conv",
    "workload.start_s=0",
    "workload.duration_s=1200",
    "workload.rate_scale=4",
    "window.drain_s=300",
    "hardware=h100",
    "model=llama3_8b",
    "policy=vllm_default",
    "engine.max_slots=512",
    "output.progress=false",
]
HOLDOUT = ["workload.start_s=1200"]
GRID = {
    "max_num_seqs": [16, 32, 64, 128, 192, 256, 384, 512],
    "max_num_batched_tokens": [512, 768, 1024, 1536, 2048, 4096, 8192, 16384],
    "watermark": [0.0, 0.01, 0.05],
    "queue_cap": [64, 512, 4096],
}
OBJECTIVE = Objective(slo_target=0.99)


def run_grid(out: Path) -> pd.DataFrame:
    """Every GRID point on the training slice (cached in out/grid.csv): knobs, OBJECTIVE's
    summary, and the grid's total wall seconds in column wall_s."""
    path = out / "grid.csv"
    if path.exists():
        return pd.read_csv(path)
    points = list(itertools.product(*GRID.values()))
    values = {k: np.array([p[i] for p in points], float) for i, k in enumerate(GRID)}
    ev = Evaluator(build(compose(BASE)), "fcfs")
    start = time.perf_counter()
    cols = ev(values)
    wall = time.perf_counter() - start
    rows = [
        {**{k: values[k][i] for k in GRID}, **OBJECTIVE.summarize(c, 0.0)}
        for i, c in enumerate(cols)
    ]
    df = pd.DataFrame(rows).assign(wall_s=wall)
    out.mkdir(parents=True, exist_ok=True)
    df.to_csv(path, index=False)
    return df


def run_tuner(out: Path, iterations: int, pairs: int) -> dict:
    """Tune (or load a finished run's tune_summary.json from `out`)."""
    path = out / "tune_summary.json"
    if not path.exists():
        tune(
            compose(
                BASE
                + [
                    f"tune.iterations={iterations}",
                    f"tune.pairs={pairs}",
                    "tune.eval.seeds=0",
                    "tune.eval.holdout=['workload.start_s=1200']",
                ]
            ),
            out_dir=out,
        )
    return json.loads(path.read_text())


def run_robust_tuner(out: Path, iterations: int, pairs: int) -> dict:
    """Tune over two slices at once (worst-case aggregate), or load a finished run."""
    path = out / "tune_summary.json"
    if not path.exists():
        tune(
            compose(
                BASE
                + [
                    f"tune.iterations={iterations}",
                    f"tune.pairs={pairs}",
                    "tune.eval.seeds=0",
                    "tune.workloads=[[],['workload.start_s=1200']]",
                    "tune.objective.aggregate=cvar",
                    "tune.objective.cvar_alpha=0.5",
                ]
            ),
            out_dir=out,
        )
    return json.loads(path.read_text())


def grid_best(df: pd.DataFrame) -> dict:
    """The grid row that is best by the tuner's order (runner._better; the first of ties)."""
    best = None
    for row in df.to_dict("records"):
        if _better(best, row):
            best = row
    return best


def evaluate(named: dict[str, dict], overrides: list[str]) -> list[dict]:
    """OBJECTIVE's summary of each named policy (GRID's keys) on BASE + `overrides`."""
    sc = build(compose(BASE + overrides))
    ev = Evaluator(sc, "fcfs")
    base = ev.base
    values = {k: np.array([float(v.get(k, base[k])) for v in named.values()]) for k in GRID}
    return [OBJECTIVE.summarize(c, 0.0) for c in ev(values)]


# --------------------------------------------------------------------------- distribution mode

SCORE_SLOTS = 1024  # when re-scoring: vLLM's default max_num_seqs runs with every slot it asks
DRAIN_S = 60  # simulated seconds after the last arrival; a request still waiting then has
#               missed its TTFT target many times over
DIST_GRID = {
    "max_num_seqs": [16, 32, 64, 128, 256, 512],
    "max_num_batched_tokens": [256, 512, 1024, 2048, 4096, 8192],
    "watermark": [0.0, 0.05],
    "queue_cap": [16, 32, 64, 128, 4096],
    "long_prefill_token_threshold": [0, 512, 2048],  # prompt tokens per request; 0 = off
}
# The tuners' ranges are the grid's. A long-prefill threshold of 8192 never binds under token
# budgets <= 8192, so the top of its range is "off" (vLLM's default, where the tuner starts).
DIST_SPACE = {
    "max_num_seqs": {"low": 16, "high": 512, "scale": "log"},
    "max_num_batched_tokens": {"low": 256, "high": 8192, "scale": "log"},
    "watermark": {"low": 0.0, "high": 0.05, "scale": "linear"},
    "queue_cap": {"low": 16, "high": 4096, "scale": "log"},
    "long_prefill_token_threshold": {"low": 512, "high": 8192, "scale": "log"},
}
HELD_SEED = 1000  # held-out replicas are seeds 1000, 1001, ...; training uses 0, 1, ...
HELD_COMMON = [
    "workload.replicas.block_s=30",
    f"window.drain_s={DRAIN_S}",
    "hardware=h100",
    "policy=vllm_default",
    f"engine.max_slots={SCORE_SLOTS}",
    "output.progress=false",
    f"seed={HELD_SEED}",
]
# later windows of the conversation trace: they start at 1950 s + U(0, 900) s, after every
# training window ([0, 1800) + the slice) and end before the hour does
CONV_LATER = [
    "workload=azure_conv",
    "model=llama3_8b",
    "workload.start_s=1950",
    "workload.duration_s=600",
    "workload.replicas.shift_s=900",
]
CODE = [
    "workload=azure_code",
    "model=llama3_8b",
    "workload.start_s=0",
    "workload.duration_s=600",
    "workload.replicas.shift_s=1800",
]
# Mooncake's prompts (mean 12-14k tokens, up to 135k) need a long context: Qwen2.5-7B (32k);
# at their own rate they overload one H100 (~40k prompt tokens/s), so thinned to half
MOON = ["model=qwen2_5_7b", "workload.duration_s=150", "workload.replicas.rate=0.5"]
HELDOUT = {
    "azure_conv later windows 2x": CONV_LATER + ["workload.rate_scale=2"],
    "azure_conv later windows 4x": CONV_LATER + ["workload.rate_scale=4"],
    "azure_code 1x": CODE + ["workload.rate_scale=1"],
    "azure_code 2x": CODE + ["workload.rate_scale=2"],
    "mooncake_conv 0.5x (Qwen2.5-7B)": ["workload=mooncake_conv", "workload.replicas.shift_s=450"]
    + MOON,
    "mooncake_synthetic 0.5x (Qwen2.5-7B)": [
        "workload=mooncake_synthetic",
        "workload.replicas.shift_s=150",
    ]
    + MOON,
}
VLLM_DEFAULTS = "vLLM defaults"


def train_overrides(slice_s: float, replicas: int, slots: int) -> list[str]:
    """Hydra overrides of the training distribution: `replicas` seeds (0, 1, ...) of a
    `slice_s`-second slice of the Azure conversation trace at 4x, each window shifted by
    U(0, 1800) s and block-bootstrapped in 30 s blocks; `slots` running slots."""
    return [
        "workload=azure_conv",
        "workload.start_s=0",
        f"workload.duration_s={slice_s}",
        "workload.rate_scale=4",
        "workload.replicas.block_s=30",
        "workload.replicas.shift_s=1800",
        f"window.drain_s={DRAIN_S}",
        "hardware=h100",
        "model=llama3_8b",
        "policy=vllm_default",
        "seed=0",
        f"seeds={replicas}",
        f"engine.max_slots={slots}",
        "output.progress=false",
    ]


def grid_points(max_model_len: int) -> dict[str, np.ndarray]:
    """The points of DIST_GRID that vLLM accepts (max_num_batched_tokens >= max_num_seqs,
    long_prefill_token_threshold <= max_model_len, tokens): policy key -> values [P]."""
    keys = list(DIST_GRID)
    seqs, budget = keys.index("max_num_seqs"), keys.index("max_num_batched_tokens")
    long = keys.index("long_prefill_token_threshold")
    points = [
        p
        for p in itertools.product(*DIST_GRID.values())
        if p[budget] >= p[seqs] and p[long] <= max_model_len
    ]
    return {k: np.array([p[i] for p in points], float) for i, k in enumerate(keys)}


def check_signature(path: Path, doc: dict) -> None:
    """Record what a cached result was computed from (`doc`) at `path`; SystemExit when a
    different record is there already (the cache would be stale: use another --out)."""
    if path.exists() and json.loads(path.read_text()) != doc:
        raise SystemExit(f"{path}: cached results of another configuration; use another --out")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1))


def check_replicas(scenario) -> list[int]:
    """Requests per replica of `scenario`; SystemExit when two replicas are the same slice
    (equal arrival times and prompt lengths), i.e. the replicas are not on."""
    keys = [
        (len(t), np.asarray(t.arrival).tobytes(), np.asarray(t.prompt).tobytes())
        for t in scenario.traces
    ]
    if len(set(keys)) < len(keys):
        raise SystemExit("training replicas repeat one slice: workload.replicas.* are off")
    return [len(t) for t in scenario.traces]


def grid_row(points: dict, i: int, column: list[dict]) -> dict:
    """One grid.csv row: point i's knobs, OBJECTIVE's summary over its replicas (objective:
    mean log(useful tokens / USD); violation: mean shortfall from the attainment target) and
    its worst replica's attainment."""
    return {
        **{k: points[k][i] for k in points},
        **OBJECTIVE.summarize(column, 0.0),
        "min_attainment": min(m["slo_attainment"] for m in column),
    }


def group_end(seqs: np.ndarray, lo: int, chunk: int) -> int:
    """The end of the chunk of grid points starting at `lo`: at most `chunk` points, all with
    the same max_num_seqs (`seqs` [P], sorted)."""
    same = np.flatnonzero(seqs[lo : lo + chunk] != seqs[lo])
    return lo + (int(same[0]) if len(same) else len(seqs[lo : lo + chunk]))


def run_dist_grid(out: Path, slice_s: float, replicas: int, chunk: int) -> pd.DataFrame:
    """Every grid point on every training replica, up to `chunk` points per Evaluator call;
    each max_num_seqs on an engine with exactly that many running slots (exact, and
    cheaper than the largest's). Cached in out/grid.csv (a partial run in grid.partial.csv
    is resumed). Column wall_s: each row's share of its chunk's wall seconds (their sum is
    the grid's wall time, scenario building and compilation included)."""
    path, part = out / "grid.csv", out / "grid.partial.csv"
    overrides = lambda slots: train_overrides(slice_s, replicas, slots)
    check_signature(
        out / "grid_config.json", {"overrides": overrides("max_num_seqs"), "grid": DIST_GRID}
    )
    if path.exists():
        return pd.read_csv(path)
    first = build(compose(overrides(1)))
    print(f"training replicas: {check_replicas(first)} requests")
    points = grid_points(first.engine.max_model_len)
    seqs, n = points["max_num_seqs"], len(points["max_num_seqs"])
    done = pd.read_csv(part) if part.exists() else pd.DataFrame()
    evaluators: dict[float, Evaluator] = {}
    lo = len(done)
    while lo < n:
        start, hi = time.perf_counter(), group_end(seqs, lo, chunk)
        if seqs[lo] not in evaluators:
            scenario = build(compose(overrides(int(seqs[lo]))))
            evaluators[seqs[lo]] = Evaluator(scenario, "fcfs")
        some = {k: v[lo:hi] for k, v in points.items()}
        rows = [grid_row(some, i, col) for i, col in enumerate(evaluators[seqs[lo]](some))]
        wall = time.perf_counter() - start
        done = pd.concat([done, pd.DataFrame(rows).assign(wall_s=wall / len(rows))])
        done.to_csv(part, index=False)
        print(f"grid: {len(done)}/{n} points, {done['wall_s'].sum():.0f} s", flush=True)
        lo = hi
    done.to_csv(path, index=False)
    part.unlink()
    return done


def tuner_plan(estimator: str, budget: int, replicas: int, pairs: int) -> tuple[list, int]:
    """(the tuned keys, iterations) that keep `estimator`'s scenarios within `budget`: ES
    simulates 2 x pairs + 1 policies per iteration on every replica; pathwise one exact and
    one relaxed run per replica plus two paired runs per replica and DIFFERENCE_KEY."""
    if estimator == "es":
        return list(DIST_SPACE), max(1, budget // ((2 * pairs + 1) * replicas))
    keys = [k for k in DIST_SPACE if k in PATHWISE_KEYS + DIFFERENCE_KEYS]
    per = replicas * (2 + 2 * sum(k in DIFFERENCE_KEYS for k in keys))
    return keys, max(1, budget // per)


def tuner_config(
    estimator: str,
    overrides: list[str],
    budget: int,
    replicas: int,
    pairs: int,
    es_steps: tuple[float, float] | None = None,
    pathwise_steps: tuple[float, float] | None = None,
) -> DictConfig:
    """The tune config of `estimator` (es | pathwise) on the training replicas, from vLLM's
    defaults, its space the grid's knobs and ranges only (those it has gradients for);
    `es_steps`: ES's (learning rate, sigma) in place of conf/tune/es.yaml's;
    `pathwise_steps`: pathwise's (learning rate, slo_tau) in place of pathwise.yaml's."""
    keys, iterations = tuner_plan(estimator, budget, replicas, pairs)
    steps = [f"tune.learning_rate={es_steps[0]}", f"tune.sigma={es_steps[1]}"] if es_steps else []
    if pathwise_steps:
        steps = [f"tune.learning_rate={pathwise_steps[0]}", f"tune.slo_tau={pathwise_steps[1]}"]
    cfg = compose(
        overrides
        + [
            f"tune={estimator}",
            f"tune.iterations={iterations}",
            "tune.eval.seeds=0",
            "tune.export=false",
        ]
        + ([f"tune.pairs={pairs}", *steps] if estimator == "es" else steps)
    )
    with open_dict(cfg):
        cfg.tune.space = {k: DIST_SPACE[k] for k in keys}
    return cfg


def run_dist_tuner(out: Path, cfg: DictConfig) -> dict:
    """Tune (or load a finished run's tune_summary.json from `out`): best values, scenarios
    simulated, wall seconds (search and the tuner's own final evaluation)."""
    path = out / "tune_summary.json"
    if not path.exists():
        tune(cfg, out_dir=out)
    return json.loads(path.read_text())


def score(named: dict[str, dict], overrides: list[str]) -> dict[str, list[dict]]:
    """Each named policy (values of DIST_GRID's keys) on the scenario of `overrides` by the
    exact simulator: {name: metrics per replica}."""
    ev = Evaluator(build(compose(overrides)), "fcfs")
    values = {k: np.array([float(v[k]) for v in named.values()]) for k in DIST_GRID}
    return dict(zip(named, ev(values), strict=True))


def interval(x) -> tuple[float, float]:
    """(mean, half-width of its 95% t-interval) of per-replica values x [R] (identical
    replicas give 0, shown as +- 0)."""
    x = np.asarray(x, float)
    return float(x.mean()), half_width(x)


def fmt(x, digits: int = 3, scale: float = 1.0) -> str:
    """'mean +- half-width' of per-replica values x, divided by `scale`."""
    mean, half = interval(np.asarray(x, float) / scale)
    return f"{mean:.{digits}f} +- {half:.{digits}f}"


def markdown(df: pd.DataFrame) -> str:
    """A markdown table of df (every cell as str)."""
    head = "| " + " | ".join(map(str, df.columns)) + " |"
    rule = "|" + "|".join("---" for _ in df.columns) + "|"
    body = ["| " + " | ".join(map(str, row)) + " |" for row in df.itertuples(index=False)]
    return "\n".join([head, rule, *body])


def training_table(named: dict, cols: dict, costs: dict, grid_sims: int) -> pd.DataFrame:
    """One row per policy on the training replicas (exact re-score): knobs, objective (mean
    log(useful tokens / USD)), attainment, whether every replica meets the target, useful
    tokens per USD (1e6), the gap to the grid's best (percent of the objective; and percent
    of useful tokens per USD, exp(objective gap) - 1), scenarios and their fraction of the
    grid's simulations, wall seconds."""
    summ = {n: OBJECTIVE.summarize(c, 0.0) for n, c in cols.items()}
    best = summ["grid best"]
    rows = []
    for name, vals in named.items():
        s = summ[name]
        sims, wall = costs[name]
        rows.append(
            {
                "policy": name,
                **{k: round(float(vals[k]), 3) for k in DIST_GRID},
                "objective": round(s["objective"], 4),
                "attainment": fmt([m["slo_attainment"] for m in cols[name]]),
                "meets 99%": s["violation"] <= 0,
                "useful tok/USD 1e6": fmt(
                    [m["useful_tokens_per_dollar"] for m in cols[name]], 3, 1e6
                ),
                "gap % objective": round(
                    100 * (best["objective"] - s["objective"]) / abs(best["objective"]), 3
                ),
                "gap % tok/USD": round(100 * (1 - math.exp(s["objective"] - best["objective"])), 2),
                "scenarios": sims,
                "% of grid sims": round(100 * sims / grid_sims, 2),
                "wall s": round(wall, 1),
            }
        )
    return pd.DataFrame(rows)


def paired(cols: dict, name: str, key: str, relative: bool = False) -> str:
    """'mean +- half-width' over replicas of policy `name`'s metric `key` minus vLLM's
    defaults' on the same replica (relative: in percent of the defaults')."""
    diff = [
        (m[key] - d[key]) / (d[key] / 100 if relative else 1)
        for m, d in zip(cols[name], cols[VLLM_DEFAULTS], strict=True)
    ]
    mean, half = interval(diff)
    return f"{mean:+.{2 if relative else 3}f} +- {half:.{2 if relative else 3}f}"


def clear_regression(cols: dict, summ: dict, name: str) -> bool:
    """Is policy `name` below vLLM's defaults by the tuner's order beyond noise: the defaults
    meet the target and it does not, or the per-replica paired difference that decides (log
    useful tokens per USD where both meet it, the attainment shortfall where both miss) has
    a 95% t-interval wholly on the worse side."""
    a, d = summ[name], summ[VLLM_DEFAULTS]
    if (a["violation"] <= 0) != (d["violation"] <= 0):
        return d["violation"] <= 0
    key = OBJECTIVE.value if d["violation"] <= 0 else (lambda m: -OBJECTIVE.violation(m))
    mean, half = interval(
        [key(m) - key(n) for m, n in zip(cols[name], cols[VLLM_DEFAULTS], strict=True)]
    )
    return mean + half < 0


def heldout_rows(trace: str, cols: dict) -> list[dict]:
    """The held-out table's rows of one trace: per policy, attainment, useful tokens per
    USD (1e6) and goodput (req/s) with 95% t-intervals over replicas; whether every replica
    meets the target; the best policy by the tuner's order; the paired differences from
    vLLM's defaults (attainment; useful tokens per USD in percent); regression: vLLM's
    defaults better than the policy by that order (at all, and beyond the interval)."""
    summ = {n: OBJECTIVE.summarize(c, 0.0) for n, c in cols.items()}
    best = None
    for name, s in summ.items():
        if _better(best and summ[best], s):
            best = name
    rows = []
    for name, column in cols.items():
        other = name != VLLM_DEFAULTS
        rows.append(
            {
                "trace": trace,
                "policy": name,
                "attainment": fmt([m["slo_attainment"] for m in column]),
                "useful tok/USD 1e6": fmt([m["useful_tokens_per_dollar"] for m in column], 3, 1e6),
                "goodput req/s": fmt([m["goodput_rps"] for m in column], 2),
                "meets 99%": summ[name]["violation"] <= 0,
                "best": name == best,
                "d attainment vs defaults": paired(cols, name, "slo_attainment") if other else "",
                "d tok/USD % vs defaults": (
                    paired(cols, name, "useful_tokens_per_dollar", True) if other else ""
                ),
                "regression": _better(summ[name], summ[VLLM_DEFAULTS]) if other else "",
                "beyond 95% CI": clear_regression(cols, summ, name) if other else "",
            }
        )
    return rows


def replica_rows(trace: str, cols: dict) -> list[dict]:
    """heldout_replicas.csv rows: one per (policy, replica) of a held-out trace."""
    keys = (
        "slo_attainment",
        "useful_tokens_per_dollar",
        "goodput_rps",
        "n_requests",
        "n_rejected",
        "ttft_p99_s",
        "tpot_p99_s",
    )
    return [
        {"trace": trace, "policy": name, "replica": r, **{k: m[k] for k in keys}}
        for name, column in cols.items()
        for r, m in enumerate(column)
    ]


def run_heldout(out: Path, named: dict, seeds: int) -> pd.DataFrame:
    """Every named policy on every HELDOUT trace with `seeds` held-out replicas; writes
    heldout.csv and heldout_replicas.csv under `out`; returns the held-out table."""
    rows, raw = [], []
    for trace, overrides in HELDOUT.items():
        start = time.perf_counter()
        cols = score(named, HELD_COMMON + overrides + [f"seeds={seeds}"])
        rows += heldout_rows(trace, cols)
        raw += replica_rows(trace, cols)
        print(f"held out: {trace}: {time.perf_counter() - start:.0f} s", flush=True)
    table = pd.DataFrame(rows)
    table.to_csv(out / "heldout.csv", index=False)
    pd.DataFrame(raw).to_csv(out / "heldout_replicas.csv", index=False)
    return table


def policies(grid: pd.DataFrame, tuned: dict[str, dict]) -> dict[str, dict]:
    """{name: values of DIST_GRID's keys}: vLLM's defaults, the grid's best by the tuner's
    order, and each tuner's best (keys it did not tune at vLLM's defaults)."""
    best = grid_best(grid)
    named = {
        VLLM_DEFAULTS: {k: DEFAULTS[k] for k in DIST_GRID},
        "grid best": {k: best[k] for k in DIST_GRID},
    }
    for name, summary in tuned.items():
        named[name] = {k: summary["best"].get(k, DEFAULTS[k]) for k in DIST_GRID}
    return named


def verdicts(table: pd.DataFrame, held: pd.DataFrame | None, budget_frac: float) -> list[str]:
    """One line per target: each tuner within 1% of the grid's best objective (meeting the
    target where the grid's best does) with at most budget_frac of its simulations; per
    held-out trace, whether a tuned policy regresses against vLLM's defaults."""
    rows = table.set_index("policy")
    lines = []
    for name in (n for n in rows.index if n.startswith("tuned")):
        r = rows.loc[name]
        feasible = bool(r["meets 99%"]) or not bool(rows.loc["grid best", "meets 99%"])
        ok = feasible and r["gap % objective"] <= 1 and r["% of grid sims"] <= 100 * budget_frac
        lines.append(
            f"{name}: gap {r['gap % objective']:.3f}% of the objective "
            f"({r['gap % tok/USD']:.2f}% of useful tok/USD) with "
            f"{r['% of grid sims']:.2f}% of the grid's simulations"
            f"{'' if feasible else ', misses the attainment target the grid best meets'}"
            f": {'MET' if ok else 'NOT MET'}"
        )
    if held is not None:
        for (trace, name), r in held.set_index(["trace", "policy"]).iterrows():
            if name.startswith("tuned"):
                verdict = (
                    "not below"
                    if not r["regression"]
                    else "REGRESSION (beyond the 95% interval) vs"
                    if r["beyond 95% CI"]
                    else "regression (within the 95% interval) vs"
                )
                lines.append(f"held out {trace}: {name} {verdict} vLLM defaults")
    return lines


def main_distribution(args: argparse.Namespace) -> None:
    """The distribution mode (see the module docstring): grid, tuners, training table,
    held-out table; prints them and writes them under args.out."""
    out = Path(args.out or "outputs/bench_tune_dist")
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    space_slots = int(DIST_SPACE["max_num_seqs"]["high"])  # what the tuners' engines get
    train = train_overrides(args.slice_s, args.replicas, space_slots)
    n_points = len(grid_points(build(compose(train)).engine.max_model_len)["max_num_seqs"])
    grid_sims = n_points * args.replicas
    budget = int(args.budget_frac * grid_sims)
    print(
        f"grid: {n_points} points x {args.replicas} replicas = {grid_sims} simulations; "
        f"tuner budget {budget}"
    )
    tuned = {}
    if not args.tune_only:
        grid = run_dist_grid(out, args.slice_s, args.replicas, args.chunk)
        print(f"grid: {grid['wall_s'].sum():.0f} s; best {grid_best(grid)}")
        if args.grid_only:
            return
    for estimator, label in (("es", "tuned (ES)"), ("pathwise", "tuned (pathwise)")):
        cfg = tuner_config(estimator, train, budget, args.replicas, args.pairs)
        tuned[label] = run_dist_tuner(out / estimator, cfg)
    lr, sigma, pairs = args.es_long_steps
    label = f"tuned (ES, lr {lr:g}, sigma {sigma:g}, {pairs:g} pairs)"
    cfg = tuner_config("es", train, budget, args.replicas, int(pairs), (lr, sigma))
    tuned[label] = run_dist_tuner(out / f"es_lr{lr:g}_sigma{sigma:g}_pairs{pairs:g}", cfg)
    for lr, tau in args.pathwise_steps or []:
        label = f"tuned (pathwise, lr {lr:g}, slo_tau {tau:g})"
        cfg = tuner_config(
            "pathwise", train, budget, args.replicas, args.pairs, pathwise_steps=(lr, tau)
        )
        tuned[label] = run_dist_tuner(out / f"pathwise_lr{lr:g}_tau{tau:g}", cfg)
    if args.tune_only:
        return
    named = policies(grid, tuned)
    costs = {
        VLLM_DEFAULTS: (0, 0.0),
        "grid best": (grid_sims, float(grid["wall_s"].sum())),
        **{n: (s["scenarios_simulated"], s["wall_s"]) for n, s in tuned.items()},
    }
    start = time.perf_counter()
    scoring = train_overrides(args.slice_s, args.replicas, SCORE_SLOTS)
    table = training_table(named, score(named, scoring), costs, grid_sims)
    table.to_csv(out / "table.csv", index=False)
    print(f"\ntraining replicas, re-scored ({time.perf_counter() - start:.0f} s):")
    print(markdown(table))
    held = None if args.skip_heldout else run_heldout(out, named, args.heldout_seeds)
    if held is not None:
        print("\nheld out (mean +- 95% t-interval half-width over replicas):")
        print(markdown(held))
    print("\n" + "\n".join(verdicts(table, held, args.budget_frac)))
    print(f"\ntotal wall time of this call: {time.perf_counter() - t0:.0f} s")


def parse_args() -> argparse.Namespace:
    """The command line (see --help)."""
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--out",
        default=None,
        help="output and cache directory (default outputs/bench_tune, or "
        "outputs/bench_tune_dist with --distribution)",
    )
    ap.add_argument("--grid-only", action="store_true", help="run (or load) the grid only")
    ap.add_argument("--tune-only", action="store_true", help="run (or load) the tuner(s) only")
    ap.add_argument(
        "--robust",
        action="store_true",
        help="also tune over minutes 0-20 and 20-40 at once (CVaR) and compare "
        "every policy on minutes 40-60 (default mode)",
    )
    ap.add_argument("--iterations", type=int, default=7, help="ES iterations (default mode)")
    ap.add_argument("--pairs", type=int, default=3, help="ES antithetic pairs per iteration")
    dist = ap.add_argument_group("distribution mode")
    dist.add_argument(
        "--distribution",
        action="store_true",
        help="grid vs ES vs pathwise on seeded replicas of the Azure conversation "
        "trace, then vLLM defaults / grid best / tuned on held-out traces",
    )
    dist.add_argument(
        "--replicas",
        type=int,
        default=4,
        help="training replicas (seeds 0..R-1) every grid point and tuner sees (default 4)",
    )
    dist.add_argument(
        "--slice-s",
        type=float,
        default=120.0,
        help="seconds of the trace per training replica, before the 4x rate "
        "(default 120: 30 s of arrivals)",
    )
    dist.add_argument(
        "--budget-frac",
        type=float,
        default=0.05,
        help="each tuner's simulations as a fraction of the grid's (default "
        "0.05); iterations are sized to fit",
    )
    dist.add_argument(
        "--chunk",
        type=int,
        default=105,
        help="grid points per Evaluator call (progress and resumable cache)",
    )
    dist.add_argument(
        "--heldout-seeds",
        type=int,
        default=4,
        help="held-out replicas per held-out trace (seeds 1000..)",
    )
    dist.add_argument("--skip-heldout", action="store_true", help="stop after the training table")
    dist.add_argument(
        "--es-long-steps",
        type=float,
        nargs=3,
        default=(2.0, 1.5, 2),
        metavar=("LR", "SIGMA", "PAIRS"),
        help="a second ES run with these adam learning rate, perturbation scale "
        "and pairs (default 2 1.5 2: more, longer steps than es.yaml's "
        "0.4 0.5 and --pairs)",
    )
    dist.add_argument(
        "--pathwise-steps",
        type=float,
        nargs=2,
        action="append",
        metavar=("LR", "SLO_TAU"),
        help="another pathwise run with this adam learning rate and smoothed "
        "SLO width (repeatable; each in its own folder under --out)",
    )
    return ap.parse_args()


def main() -> None:
    """Run the mode the command line asks for."""
    args = parse_args()
    if args.distribution:
        main_distribution(args)
    else:
        main_slice(args)


def main_slice(args: argparse.Namespace) -> None:
    """The default mode: one 20-minute slice, grid vs ES vs vLLM defaults (module docstring)."""
    out = Path(args.out or "outputs/bench_tune")
    if args.tune_only:
        run_tuner(out / "tuned", args.iterations, args.pairs)
        return
    t0 = time.perf_counter()
    grid = run_grid(out)
    grid_wall = float(grid["wall_s"].iloc[0]) if "wall_s" in grid else time.perf_counter() - t0
    gbest = grid_best(grid)
    print(f"grid: {len(grid)} points, {grid_wall:.0f} s; best {gbest}")
    if args.grid_only:
        return
    tuned = run_tuner(out / "tuned", args.iterations, args.pairs)
    named = {
        "vLLM defaults": {k: DEFAULTS[k] for k in GRID},
        "grid best": {k: gbest[k] for k in GRID},
        "tuned (ES)": {k: tuned["best"][k] for k in GRID},
    }
    cost = {
        "vLLM defaults": (1, 0.0),
        "grid best": (len(grid), grid_wall),
        "tuned (ES)": (tuned["scenarios_simulated"], tuned["wall_s"]),
    }
    if args.robust:
        robust = run_robust_tuner(out / "tuned_robust", args.iterations, args.pairs)
        named["tuned (ES, 2 slices, CVaR)"] = {k: robust["best"][k] for k in GRID}
        cost["tuned (ES, 2 slices, CVaR)"] = (robust["scenarios_simulated"], robust["wall_s"])
        third = evaluate(named, ["workload.start_s=2400"])
    train, held = evaluate(named, []), evaluate(named, HOLDOUT)
    rows = []
    for (name, vals), tr, ho in zip(named.items(), train, held, strict=True):
        rows.append(
            {
                "policy": name,
                **{k: round(float(vals.get(k, math.nan)), 3) for k in GRID},
                "objective": tr["objective"],
                "slo_attainment": tr["slo_attainment"],
                "useful_tok_per_usd": tr["useful_tokens_per_dollar"],
                "holdout_objective": ho["objective"],
                "holdout_attainment": ho["slo_attainment"],
                "holdout_useful_tok_per_usd": ho["useful_tokens_per_dollar"],
                **(
                    {
                        "min40_60_attainment": third[len(rows)]["slo_attainment"],
                        "min40_60_useful_tok_per_usd": third[len(rows)]["useful_tokens_per_dollar"],
                    }
                    if args.robust
                    else {}
                ),
                "scenarios": cost[name][0],
                "wall_s": round(cost[name][1], 1),
            }
        )
    table = pd.DataFrame(rows)
    table.to_csv(out / "table.csv", index=False)
    pd.set_option("display.width", 250)
    print(table.to_string(index=False))
    gap = (table.objective[2] - table.objective[1]) / abs(table.objective[1])
    print(
        f"tuned vs grid best objective: {100 * gap:+.2f}% with "
        f"{100 * tuned['scenarios_simulated'] / len(grid):.1f}% of the grid's scenarios"
    )


if __name__ == "__main__":
    main()
