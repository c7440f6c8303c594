"""The run under `vllm bench serve`'s names and units: vllm_bench.json holds
what `vllm bench serve --save-result` writes for the same quantities, so the two can be
diffed key by key. Values worked by hand on a small table; test_cli checks the file a run
writes."""

import types

import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest

from servetune.core import histogram
from servetune.run.metrics import bench_metrics

# the keys vllm bench serve (vLLM 0.32) writes for these quantities, with its default
# percentile (99); servetune adds the median's twin p50 and p90
VLLM_KEYS = [
    "completed",
    "duration",
    "total_input_tokens",
    "total_output_tokens",
    "request_throughput",
    "request_goodput",
    "output_throughput",
    "total_token_throughput",
] + [
    f"{s}_{m}_ms" for m in ("ttft", "tpot", "itl", "e2el") for s in ("mean", "median", "std", "p99")
]


def _table():
    """Four counted requests: three completed (one missing its TTFT SLO), one rejected; and one
    warm-up request that is not counted."""
    return pd.DataFrame(
        {
            "counted": [False, True, True, True, True],
            "end_state": ["completed", "completed", "completed", "completed", "rejected"],
            "arrival_s": [0.0, 1.0, 2.0, 3.0, 3.5],
            "finish_s": [0.5, 3.0, 5.0, 9.0, 3.5],
            "prompt_tokens": [7, 100, 200, 300, 50],
            "output_tokens_delivered": [3, 10, 20, 30, 0],
            "ttft_s": [0.1, 0.2, 0.4, 0.6, np.nan],
            "tpot_s": [0.01, 0.02, 0.03, 0.04, np.nan],
            "e2e_s": [0.5, 2.0, 3.0, 6.0, np.nan],
            "slo_ok": [True, True, True, False, False],
        }
    )


def _result(gaps):
    hist = histogram.add(jnp.zeros(histogram.BINS), jnp.asarray(gaps, jnp.float64))
    return types.SimpleNamespace(stats={"itl_hist": np.asarray(hist)})


def test_counts_rates_and_latencies_by_hand():
    m = bench_metrics(_table(), _result([0.02] * 10))
    assert set(VLLM_KEYS) <= set(m)
    assert (m["completed"], m["failed"]) == (3, 1)
    assert m["duration"] == pytest.approx(9.0 - 1.0)  # first counted arrival to last end
    assert (m["total_input_tokens"], m["total_output_tokens"]) == (600, 60)
    assert m["request_throughput"] == pytest.approx(3 / 8)
    assert m["request_goodput"] == pytest.approx(2 / 8)  # the SLO miss is not good
    assert m["output_throughput"] == pytest.approx(60 / 8)
    assert m["total_token_throughput"] == pytest.approx(660 / 8)
    assert m["mean_ttft_ms"] == pytest.approx(400.0)
    assert m["median_ttft_ms"] == pytest.approx(400.0)
    assert m["std_ttft_ms"] == pytest.approx(np.std([200.0, 400.0, 600.0]))
    assert m["p99_ttft_ms"] == pytest.approx(np.percentile([200.0, 400.0, 600.0], 99))
    assert m["mean_tpot_ms"] == pytest.approx(30.0)
    assert m["mean_e2el_ms"] == pytest.approx(1000 * 11 / 3)
    assert m["median_itl_ms"] == pytest.approx(20.0, rel=0.01)  # within the histogram's bins
    assert m["std_itl_ms"] == pytest.approx(0.0, abs=1e-9)


def test_no_completion_gives_nan_latencies_and_zero_rates():
    t = _table().assign(end_state="rejected")
    m = bench_metrics(t, _result([]))
    assert m["completed"] == 0 and m["request_throughput"] == 0.0
    assert np.isnan(m["mean_ttft_ms"]) and np.isnan(m["p99_itl_ms"])
