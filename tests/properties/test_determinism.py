"""Determinism: a seed gives identical metrics run to run, and alone or inside a batch.

Run to run the metrics are bit-identical. Alone and inside a batch they are different XLA
programs (vmapped or not), which may round a float sum differently in the last bit: counts are
identical and times agree to 1e-12 relative.
"""

import json
import math

from servetune.config.scenario import build
from servetune.run.api import compose, simulate_batch

BASE = [
    "workload=poisson",
    "workload.rate=20",
    "workload.duration_s=15",
    "window.drain_s=60",
    "workload.predictor.sigma=0.5",
    "policy=sjf",
    "output.progress=false",
]


def _dump(metrics: dict) -> str:
    return json.dumps(metrics, sort_keys=True, default=str)


# what describes the compiled program rather than the scenario: a batch runs at the width its widest
# scenario needs (servetune/engine/width.py), a scenario alone at its own, and takes the simple step
# only where all its scenarios can (servetune/engine/simple_step.py)
PROGRAM = ("entry_width", "widenings", "simple_steps")


def _same(a, b, where):
    if isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            if k not in PROGRAM:
                _same(a[k], b[k], f"{where}: {k}")
    elif isinstance(a, float) and not (isinstance(b, float) and math.isnan(a) and math.isnan(b)):
        assert math.isclose(a, b, rel_tol=1e-12, abs_tol=0.0), (where, a, b)
    elif not (isinstance(a, float) and math.isnan(a)):
        assert a == b, (where, a, b)


def test_same_seed_same_metrics_alone_and_in_a_batch():
    batch = simulate_batch(
        build(compose(BASE + ["seed=3", "seeds=2", "grid.max_num_seqs=[16,64,256]"]))
    )
    again = simulate_batch(
        build(compose(BASE + ["seed=3", "seeds=2", "grid.max_num_seqs=[16,64,256]"]))
    )
    assert [_dump(m) for m in batch.metrics] == [_dump(m) for m in again.metrics]
    # scenario order: seed-major, then grid point
    for k, (seed, seqs) in enumerate([(s, q) for s in (3, 4) for q in (16, 64, 256)]):
        alone = simulate_batch(
            build(compose(BASE + [f"seed={seed}", f"policy.max_num_seqs={seqs}"]))
        )
        _same(alone.metrics[0], batch.metrics[k], f"seed {seed}, max_num_seqs {seqs}")
    # and the seed matters (arrivals and predictor noise differ)
    assert _dump(batch.metrics[0]) != _dump(batch.metrics[3])
