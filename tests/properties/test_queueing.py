"""Closed forms from queueing theory.

One sequence at a time, fixed output length OUT and a fixed step time tau make the engine an
M/D/1 queue with service time D = OUT x tau (one prefill iteration plus OUT-1 decodes; an idle
engine starts at the arrival instant, a busy one at the previous completion). Waiting time =
TTFT - tau. Per request it must equal Lindley's recursion W' = max(0, W + D - gap) exactly; on
average, Pollaczek-Khinchine's Wq = rho D / (2 (1 - rho)).
"""

import numpy as np
import pytest
from helpers import linear_params, run

from servetune.core.types import EngineConfig
from servetune.workload.traces import synthetic

TAU, OUT, RHO = 0.05, 2, 0.5
D = OUT * TAU
LAM = RHO / D
SEEDS, N = 8, 20_000  # sampling std of the mean wait ~1.1% at rho = 0.5


@pytest.fixture(scope="module")
def md1():
    cfg = EngineConfig(
        max_slots=1,
        queue_window=64,
        block_size=16,
        max_model_len=64,
        cost_form="linear",
        outbox=512,
    )
    traces = [
        synthetic(
            rate=LAM,
            n_requests=N,
            prompt={"dist": "fixed", "value": 16},
            output={"dist": "fixed", "value": OUT},
            seed=s,
        )
        for s in range(SEEDS)
    ]
    results = run(traces, linear_params({"max_num_seqs": 1}, base_s=TAU), cfg)
    return traces, [r[0] for r in results]


def lindley(arrival, service):
    w = np.zeros(len(arrival))
    for i in range(1, len(arrival)):
        w[i] = max(0.0, w[i - 1] + service - (arrival[i] - arrival[i - 1]))
    return w


def test_md1_waits_equal_lindley_recursion(md1):
    traces, results = md1
    for t, r in list(zip(traces, results, strict=True))[:2]:
        np.testing.assert_allclose(
            r.first_token - t.arrival - TAU, lindley(t.arrival, D), atol=1e-9
        )


def test_md1_mean_wait_matches_pollaczek_khinchine(md1):
    traces, results = md1
    waits = np.concatenate(
        [r.first_token - t.arrival - TAU for t, r in zip(traces, results, strict=True)]
    )
    wq = RHO * D / (2 * (1 - RHO))
    assert abs(waits.mean() / wq - 1) < 0.03, (waits.mean(), wq)


def test_littles_law(md1):
    traces, results = md1
    l_md1 = RHO + LAM * RHO * D / (2 * (1 - RHO))
    for t, r in zip(traces, results, strict=True):
        horizon = r.clock_s
        mean_in_system = float(r.stats["occupancy_s"]) / horizon  # time average, from the loop
        lam = len(t) / horizon
        w = np.mean(r.finish - t.arrival)  # from per-request records
        assert abs(mean_in_system / (lam * w) - 1) < 1e-6
        assert abs(mean_in_system / l_md1 - 1) < 0.1  # sampling error of one seed ~ 2%
