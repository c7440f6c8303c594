"""Pathwise vs ES gradients, and a short tuning run with each estimator.

Scenario (the documented one of tests/integration/test_pathwise.py, longer): Llama-3-8B on one H100,
Poisson arrivals at 35 req/s for 20 s (an overloaded engine: the sequence cap binds), SLOs
TTFT <= 2 s and TPOT <= 100 ms, two seeds. Tuned keys: max_num_seqs, max_num_batched_tokens
and the KV watermark, at the point max_num_seqs 48.5, max_num_batched_tokens 2048.5,
watermark 0.0105 (between integer flips).

1. The gradient of the objective log(useful tokens / USD) at that point: ES on the exact
   simulator (antithetic pairs, no rank shaping, sigma 0.15 in the tuner's coordinates), and
   the pathwise gradient of the smoothed objective through the st and soft engines at several
   temperatures; the cosine of each with the ES estimate, and wall time per estimate.
2. `tune=es` and `tune=pathwise` from max_num_seqs 24.5 for the same number of iterations:
   final objective and attainment, scenarios simulated, wall time.
3. and 4. The keys that act through a request's pace (engine/relaxed/pace.py), one at a time,
   along a grid: the exact objective, its central difference between grid neighbours, and the st
   and soft pathwise derivatives at each point (in the key's units: per draft token, per
   unit of log budget). Table 3: spec_k with a Llama-3.2-1B draft (acceptance 0.7) at
   6 req/s. Table 4: max_num_batched_tokens at 20 req/s with TTFT <= 0.25 s, from an
   overloaded engine (small budgets) to a comfortable one.
6. The queue cap (tuning/estimators/paired_difference.py) along a grid, in two engines: one
   that keeps up (30 req/s, no sequence cap: a short queue rejects requests it could serve) and an
   overloaded one (35 req/s, 48 sequences: a long queue makes every request late): the exact
   objective, the exact difference across the caps the estimator pairs, and the st and soft
   paired differences, per request of cap; then tune=es and tune=pathwise on the cap alone
   in the overloaded engine, from 128.5, as in table 2.
7. The cascade threshold (paired differences through a relaxed engine of two instances, one
   Llama-3-8B and one Llama-3-70B: conf/experiment/cascade.yaml, 30 s of arrivals, 2 seeds)
   along a grid: the exact objective and its difference across the estimator's paired
   thresholds, and the st and soft paired differences; then tune=es and tune=pathwise on
   the threshold alone from 0.1.
8. The score router's weight on predicted work (route_w_work; two Llama-3-8B instances at
   57 req/s, 20 s, 2 seeds) along a grid: the exact objective and its difference across the
   paired weights, and the st paired difference.

    python benchmarks/bench_pathwise.py                # ~20 min on 2 cores (by its tables)
    python benchmarks/bench_pathwise.py --tables 1     # the gradient table only
"""

from __future__ import annotations

import argparse
import tempfile
import time

import numpy as np

from servetune.config.scenario import build
from servetune.run.api import compose
from servetune.tuning import tune
from servetune.tuning.estimators import es
from servetune.tuning.estimators.paired_difference import bracket, cap_bracket
from servetune.tuning.estimators.pathwise import PathwiseEstimator
from servetune.tuning.evaluator import Evaluator
from servetune.tuning.objective import Objective
from servetune.tuning.space import space_from_config

SCENARIO = [
    "workload=poisson",
    "workload.rate=35",
    "workload.duration_s=20",
    "window.drain_s=60",
    "engine.max_slots=256",
    "seeds=2",
]
SPACE = {
    "max_num_seqs": {"low": 8, "high": 256, "scale": "log"},
    "max_num_batched_tokens": {"low": 256, "high": 16384, "scale": "log"},
    "watermark": {"low": 0.0, "high": 0.1, "scale": "linear"},
}
START = {"max_num_seqs": 48.5, "max_num_batched_tokens": 2048.5, "watermark": 0.0105}


def cosine(a, b) -> float:
    """Cosine similarity of two vectors."""
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def gradients(pairs: list[int], temperatures: list[float]) -> None:
    """Print table 1: ES and pathwise gradient estimates and their cosines."""
    sc = build(compose(SCENARIO))
    space = space_from_config(SPACE)
    ev = Evaluator(sc, "fcfs", "loop")
    z0 = space.point(START)
    obj = Objective()
    print(
        f"{'estimator':<28} {'gradient (seqs, tokens, watermark)':<42} {'cos vs ES':>9} "
        f"{'wall s':>7}"
    )
    g_es = None
    for m in pairs:
        t0 = time.perf_counter()
        eps = es.perturbations(1, 0, m, len(z0))
        cols = ev(space.values(es.population(z0, eps, 0.15)))
        f = np.array([np.mean([obj.value(x) for x in col]) for col in cols])
        g = es.gradient(f[1 : 1 + m], f[1 + m :], eps, 0.15, rank_shaping=False)
        wall = time.perf_counter() - t0
        g_es = g if g_es is None else g_es
        print(
            f"{f'ES, {m} pairs x 2 seeds':<28} {np.array2string(g, precision=4):<42} "
            f"{cosine(g, g_es):>9.3f} {wall:>7.1f}"
        )
    for mode in ("st", "soft"):
        for tau in temperatures:
            est = PathwiseEstimator(ev, space, mode, tau, 0.99, 0.05)
            est(z0, 0.0)  # compile
            t0 = time.perf_counter()
            g, _ = est(z0, 0.0)
            wall = time.perf_counter() - t0
            print(
                f"{f'pathwise {mode}, tau {tau}':<28} {np.array2string(g, precision=4):<42} "
                f"{cosine(g, g_es):>9.3f} {wall:>7.1f}"
            )


def tuning(
    iterations: int,
    scenario: list[str] | None = None,
    key: str = "max_num_seqs",
    start: float = 24.5,
) -> None:
    """Print table 2: tune=es vs tune=pathwise from the same start, `key` (the configured
    space's keys tuned) from `start` on `scenario`."""
    scenario = scenario or [
        "workload=poisson",
        "workload.rate=35",
        "workload.duration_s=20",
        "window.drain_s=60",
        "seeds=2",
        "tune.space.max_num_seqs.high=256",
    ]
    common = [
        *scenario,
        "output.progress=false",
        f"tune.iterations={iterations}",
        "tune.eval.seeds=2",
        f"policy.{key}={start}",
        "tune.export=false",
    ]
    print(
        f"\n{'tuner':<10} {'objective':>10} {'attainment':>11} {'held-out obj':>13} "
        f"{key:>13} {'scenarios':>10} {'wall s':>7}"
    )
    for name in ("es", "pathwise"):
        with tempfile.TemporaryDirectory() as out:
            r = tune([f"tune={name}"] + common, out_dir=out, log=lambda m: None)
        ev = r.evaluation.set_index(["policy", "split"])
        print(
            f"{name:<10} {ev.loc[('tuned', 'train'), 'objective']:>10.4f} "
            f"{ev.loc[('tuned', 'train'), 'slo_attainment']:>11.4f} "
            f"{ev.loc[('tuned', 'heldout_seeds'), 'objective']:>13.4f} "
            f"{r.best[key]:>13.4g} {r.scenarios_simulated:>10d} {r.wall_s:>7.1f}"
        )
    print(
        f"{'start':<10} {ev.loc[('start', 'train'), 'objective']:>10.4f} "
        f"{ev.loc[('start', 'train'), 'slo_attainment']:>11.4f} "
        f"{ev.loc[('start', 'heldout_seeds'), 'objective']:>13.4f} {start:>13.4g}"
    )


PACE = {
    "spec_k": (
        [
            "workload=poisson",
            "workload.rate=6",
            "workload.duration_s=10",
            "window.drain_s=30",
            "engine.max_slots=128",
            "seeds=2",
            "speculation=draft",
        ],
        {"low": 0.0, "high": 8.0, "scale": "linear"},
        np.arange(8) + 0.5,
    ),
    "max_num_batched_tokens": (
        [
            "workload=poisson",
            "workload.rate=20",
            "workload.duration_s=10",
            "window.drain_s=30",
            "engine.max_slots=128",
            "seeds=2",
            "slo.ttft_s=0.25",
        ],
        {"low": 64, "high": 16384, "scale": "log"},
        np.array([128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 4096]) + 0.5,
    ),
}


def dvalue_dz(dim: dict, z: float) -> float:
    """d value / d z of the tuner's coordinate z of a dimension (per unit of the value, or of
    its log for a log scale)."""
    u = 1.0 / (1.0 + np.exp(-z))
    span = np.log(dim["high"] / dim["low"]) if dim["scale"] == "log" else dim["high"] - dim["low"]
    return span * u * (1.0 - u)


def pace_table(key: str) -> None:
    """Print table 3 or 4: exact objective along a grid of one key, its central difference,
    and the pathwise derivatives (per unit of the key, or of its log for a log scale)."""
    overrides, dim, grid = PACE[key]
    sc = build(compose(overrides))
    space = space_from_config({key: dim})
    ev = Evaluator(sc, "fcfs", "loop")
    obj = Objective()
    cols = ev({key: grid})
    f = np.array([np.mean([obj.value(m) for m in col]) for col in cols])
    att = np.array([np.mean([m["slo_attainment"] for m in col]) for col in cols])
    x = np.log(grid) if dim["scale"] == "log" else grid
    est = {mode: PathwiseEstimator(ev, space, mode, 0.3, 0.99, 0.05) for mode in ("st", "soft")}
    unit = "d/dlog" if dim["scale"] == "log" else "d/d"
    print(
        f"\n{key:<24} {'objective':>10} {'attainment':>11} {'exact ' + unit:>12} "
        f"{'st ' + unit:>12} {'soft ' + unit:>12}"
    )
    for i, v in enumerate(grid):
        lo, hi = max(i - 1, 0), min(i + 1, len(grid) - 1)
        secant = (f[hi] - f[lo]) / (x[hi] - x[lo])
        z = space.point({key: v})
        dx_dz = dvalue_dz(dim, z[0])
        g = {mode: e(z, 0.0)[0][0] / dx_dz for mode, e in est.items()}
        print(
            f"{v:<24} {f[i]:>10.4f} {att[i]:>11.3f} {secant:>+12.4f} {g['st']:>+12.4f} "
            f"{g['soft']:>+12.4f}"
        )


QUEUE = {"keeps up": (30, 256.5), "overloaded": (35, 48.5)}  # rate, max_num_seqs
QUEUE_DIM = {"low": 1, "high": 512, "scale": "log"}
QUEUE_GRID = np.array([2, 4, 8, 12, 16, 24, 32, 48, 64, 128]) + 0.5


def exact_along(ev: Evaluator, key: str, grid, pairs, metric: str = "slo_attainment"):
    """The exact simulator along one key, in one call, as means over the seeds: (objective
    [G] and `metric` [G] at the grid points, objective [G, 2] at each point's paired settings
    `pairs` [G, 2])."""
    n = len(grid)
    cols = ev({key: np.concatenate([grid, np.asarray(pairs, np.float64).ravel()])})
    obj = Objective()
    f = np.array([np.mean([obj.value(m) for m in col]) for col in cols])
    other = np.array([np.mean([m[metric] for m in col]) for col in cols[:n]])
    return f[:n], other, f[n:].reshape(n, 2)


def queue_table(step: float = 0.1) -> None:
    """Print table 6: the queue cap along a grid in both QUEUE engines, exact objective and
    difference across the estimator's paired caps, and the paired differences (per request
    of cap) through the st and soft engines; then both tuners on the cap alone."""
    space = space_from_config({"queue_cap": QUEUE_DIM})
    print(
        f"\n{'engine':<11} {'queue_cap':>9} {'objective':>10} {'attainment':>11} "
        f"{'paired caps':>12} {'exact d/dc':>11} {'st d/dc':>9} {'soft d/dc':>10}"
    )
    for name, (rate, seqs) in QUEUE.items():
        sc = build(compose(queue_scenario(rate, seqs)))
        ev = Evaluator(sc, "fcfs", "loop")
        caps = [cap_bracket(c, step) for c in QUEUE_GRID]
        f, att, f_pairs = exact_along(ev, "queue_cap", QUEUE_GRID, np.array(caps) + 0.5)
        est = {
            mode: PathwiseEstimator(ev, space, mode, 0.3, 0.99, 0.05, difference_step=step)
            for mode in ("st", "soft")
        }
        for i, cap in enumerate(QUEUE_GRID):
            lo, hi = caps[i]
            z = space.point({"queue_cap": cap})
            dc_dz = dvalue_dz(QUEUE_DIM, z[0]) * cap  # log scale: d log c / dz x c
            g = {mode: e(z, 0.0)[0][0] / dc_dz for mode, e in est.items()}
            exact = (f_pairs[i, 1] - f_pairs[i, 0]) / (hi - lo)
            print(
                f"{name:<11} {cap:>9} {f[i]:>10.4f} {att[i]:>11.3f} {f'{lo}/{hi}':>12} "
                f"{exact:>+11.4f} {g['st']:>+9.4f} {g['soft']:>+10.4f}"
            )
    # the cap alone in the overloaded engine, from 128.5 (the sequence cap fixed)
    tuning(
        6,
        [
            *queue_scenario(*QUEUE["overloaded"]),
            "tune.space.max_num_seqs=null",
            "tune.space.max_num_batched_tokens=null",
            "tune.space.watermark=null",
            "tune.space.queue_cap.low=1",
            "tune.space.queue_cap.high=512",
        ],
        "queue_cap",
        128.5,
    )


CASCADE = ["+experiment=cascade", "workload.duration_s=30", "window.drain_s=60", "seeds=2"]
CASCADE_DIM = {"low": 0.0, "high": 1.0, "scale": "linear"}
CASCADE_GRID = np.arange(0.15, 0.9, 0.1)


def cascade_table(step: float = 0.1) -> None:
    """Print table 7: the cascade threshold along a grid (the study of conf/experiment/
    cascade.yaml, 30 s): exact objective, the fraction served by the small model, the exact
    difference across the estimator's paired thresholds, and the st and soft paired
    differences (per unit of threshold); then both tuners on the threshold alone from 0.1."""
    sc = build(compose(CASCADE))
    ev = Evaluator(sc, "fcfs", "loop")
    space = space_from_config({"cascade_threshold": CASCADE_DIM})
    pairs = [bracket(space.dims[0], t, step) for t in CASCADE_GRID]
    f, small, f_pairs = exact_along(
        ev, "cascade_threshold", CASCADE_GRID, pairs, "cascade_small_share"
    )
    est = {
        mode: PathwiseEstimator(ev, space, mode, 0.3, 0.0, 0.05, difference_step=step)
        for mode in ("st", "soft")
    }
    print(
        f"\n{'threshold':>9} {'objective':>10} {'small share':>12} {'paired':>11} "
        f"{'exact d/dt':>11} {'st d/dt':>9} {'soft d/dt':>10}"
    )
    for i, t in enumerate(CASCADE_GRID):
        lo, hi = pairs[i]
        z = space.point({"cascade_threshold": t})
        dt_dz = dvalue_dz(CASCADE_DIM, z[0])
        g = {mode: e(z, 0.0)[0][0] / dt_dz for mode, e in est.items()}
        exact = (f_pairs[i, 1] - f_pairs[i, 0]) / (hi - lo)
        print(
            f"{t:>9.2f} {f[i]:>10.4f} {small[i]:>12.3f} {f'{lo:.2f}/{hi:.2f}':>11} "
            f"{exact:>+11.4f} {g['st']:>+9.4f} {g['soft']:>+10.4f}"
        )
    tuning(6, CASCADE, "cascade_threshold", 0.1)


ROUTING = [
    "workload=poisson",
    "workload.rate=57",
    "workload.duration_s=20",
    "window.drain_s=60",
    "engine.n_instances=2",
    "engine.routing=score",
    "engine.max_slots=256",
    "seeds=2",
    "policy.max_num_seqs=256.5",
]
ROUTING_DIM = {"low": 0.0, "high": 4.0, "scale": "linear"}
ROUTING_GRID = np.array([0.2, 0.6, 1.0, 1.4, 2.0, 3.0])


def routing_table(step: float = 0.1) -> None:
    """Print table 8: the score router's weight per 1000 tokens of predicted work
    (route_w_work, with route_w_queue 1) along a grid, two Llama-3-8B instances on H100s at
    57 req/s: exact objective, its difference across the estimator's paired weights, and the
    st paired difference (per unit of weight)."""
    sc = build(compose(ROUTING))
    ev = Evaluator(sc, "fcfs", "loop")
    space = space_from_config({"route_w_work": ROUTING_DIM})
    pairs = [bracket(space.dims[0], w, step) for w in ROUTING_GRID]
    f, att, f_pairs = exact_along(ev, "route_w_work", ROUTING_GRID, pairs)
    st = PathwiseEstimator(ev, space, "st", 0.3, 0.99, 0.05, difference_step=step)
    print(
        f"\n{'route_w_work':>12} {'objective':>10} {'attainment':>11} {'paired':>11} "
        f"{'exact d/dw':>11} {'st d/dw':>9}"
    )
    for i, w in enumerate(ROUTING_GRID):
        lo, hi = pairs[i]
        z = space.point({"route_w_work": w})
        g = st(z, 0.0)[0][0] / dvalue_dz(ROUTING_DIM, z[0])
        exact = (f_pairs[i, 1] - f_pairs[i, 0]) / (hi - lo)
        print(
            f"{w:>12.2f} {f[i]:>10.4f} {att[i]:>11.3f} {f'{lo:.2f}/{hi:.2f}':>11} "
            f"{exact:>+11.4f} {g:>+9.4f}"
        )


def queue_scenario(rate: float, max_num_seqs: float) -> list[str]:
    """Overrides of table 6's scenario: Poisson arrivals at `rate` req/s for 20 s."""
    return [
        "workload=poisson",
        f"workload.rate={rate}",
        "workload.duration_s=20",
        "window.drain_s=30",
        "engine.max_slots=256",
        "seeds=2",
        f"policy.max_num_seqs={max_num_seqs}",
    ]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--pairs", default="32,16", help="ES pairs per estimate (first = reference)")
    p.add_argument("--temperatures", default="0.1,0.3,1.0")
    p.add_argument("--iterations", type=int, default=6)
    p.add_argument(
        "--tables",
        default="1,2,3,4,6,7,8",
        help="which tables to print (5 is by hand: benchmarks/README.md)",
    )
    a = p.parse_args()
    tables = {int(t) for t in a.tables.split(",")}
    if 1 in tables:
        gradients(
            [int(x) for x in a.pairs.split(",")], [float(x) for x in a.temperatures.split(",")]
        )
    if 2 in tables:
        tuning(a.iterations)
    if 3 in tables:
        pace_table("spec_k")
    if 4 in tables:
        pace_table("max_num_batched_tokens")
    if 6 in tables:
        queue_table()
    if 7 in tables:
        cascade_table()
    if 8 in tables:
        routing_table()


if __name__ == "__main__":
    main()
