"""cost=aic: the engine's linear step-time form fitted to NVIDIA's aiconfigurator-core
performance database (servetune/config/aic.py). The fit itself is checked on synthetic data
here; the tests marked aic need the servetune[aic] extra and check the fit against the
database's own estimates and a run on it."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from servetune.config import aic, scenario
from servetune.core.errors import ConfigError
from servetune.run import api


def test_the_fit_recovers_a_linear_step_time_and_reports_no_error():
    rng = np.random.default_rng(0)
    work = np.column_stack(
        [
            rng.integers(0, 8192, 60),
            rng.integers(0, 512, 60),
            rng.integers(0, 10**6, 60),
            rng.integers(0, 10**8, 60),
        ]
    ).astype(float)
    truth = np.array([5e-3, 1.5e-5, 1.2e-5, 4e-8, 2e-9])
    seconds = truth[0] + work @ truth[1:]
    theta, rel = aic.fit_linear(work, seconds)
    np.testing.assert_allclose(theta, truth, rtol=1e-6)
    assert np.max(np.abs(rel)) < 1e-9


def test_the_grid_spans_prefills_decodes_and_mixes_within_max_model_len():
    shapes = aic._grid(8192)
    prompts = {isl for _, isl, _, _ in shapes if isl}
    assert max(prompts) == 4096  # one prompt stays below max_model_len; longer prefills are several
    assert max(p for p, _, _, _ in shapes) == 16384
    decode_contexts = [ctx for p, _, d, ctx in shapes if d and not p]
    assert max(decode_contexts) <= 8192
    # a 16,384-token prefill of 4,096-token prompts: 4 prompts' attention, no context read
    assert aic._work(16384, 4096, 0, 0) == (16384.0, 0.0, 0.0, 16384 * 4097 / 2)


def test_without_the_extra_cost_aic_names_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "aiconfigurator_core", None)  # import fails as uninstalled
    with pytest.raises(
        ConfigError, match=r"cost=aic needs the optional extra: pip install 'servetune\[aic\]'"
    ):
        scenario.build(api.compose(["cost=aic"]))


def test_a_gpu_or_model_the_database_lacks_is_refused_by_key():
    with pytest.raises(
        ConfigError,
        match=r"^hardware\.gpu: 'tpu' has no aiconfigurator-core system; cost=aic covers "
        r"a100_80gb, b200, h100, h200, l40s",
    ):
        aic._names("tpu", "llama3_8b", "vllm")
    with pytest.raises(
        ConfigError, match=r"^model\.name: 'qwen2_5_7b' has no aiconfigurator-core model"
    ):
        aic._names("h100", "qwen2_5_7b", "vllm")
    with pytest.raises(
        ConfigError, match=r"^cost\.backend: got 'tgi'; expected one of vllm, sglang, trtllm"
    ):
        aic._names("h100", "llama3_8b", "tgi")


@pytest.mark.aic
def test_the_fit_follows_the_database_on_h100_within_its_reported_error():
    pytest.importorskip("aiconfigurator_core", reason="needs the servetune[aic] extra")
    fit = aic.linear_fit("h100", "llama3_8b", 1, "vllm", None, 8192)
    assert fit.system == "h100_sxm" and fit.model == "meta-llama/Meta-Llama-3.1-8B"
    # (the reported figures on this release: p50 5.7%, p90 11.8%, max 28.6% over 209 batches)
    assert fit.rel_error_p50 < 0.08 and fit.rel_error_p90 < 0.15 and fit.rel_error_max < 0.35
    c = fit.coefficients
    step = lambda p, d, ctx, w: (
        c["base_s"]
        + c["per_prefill_token_s"] * p
        + c["per_decode_seq_s"] * d
        + c["per_ctx_token_s"] * ctx
        + c["per_attn_work_s"] * w
    )
    work, seconds, joules, _ = aic.query("h100", "llama3_8b", 1, "vllm", None, 8192)
    rel = np.array([step(*w) for w in work]) / seconds - 1
    assert np.max(np.abs(rel)) <= fit.rel_error_max + 1e-12
    assert np.all(joules >= 0)  # vLLM's H100 tables carry no power data: 0 J
    # a 2,048-token prefill (the database: about 43 ms) and a 32-sequence decode at 1k context
    # (about 8.5 ms) within the fit's p90 error
    assert 0.035 < step(*aic._work(2048, 2048, 0, 0)) < 0.052
    assert 0.0075 < step(*aic._work(0, 0, 32, 1026)) < 0.0095


@pytest.mark.aic
def test_a_run_on_the_database_reports_where_its_step_times_come_from():
    pytest.importorskip("aiconfigurator_core", reason="needs the servetune[aic] extra")
    sc = scenario.build(
        api.compose(["cost=aic", "workload.duration_s=30", "engine.max_model_len=4096"])
    )
    assert sc.engine.cost_form == "linear"
    assert sc.labels["cost_model"].startswith("aiconfigurator-core 0.12.0: vllm ")
    assert "h100_sxm" in sc.labels["cost_model"] and "relative error p50" in sc.labels["cost_model"]
    # the default budget (8,192) is within the fitted prefills (16,384): no range warning
    assert sc.labels["cost_warnings"] == []
    res = api.simulate_batch(sc)
    m = res.metrics[0]
    assert m["n_completed"] == m["n_requests"] > 0 and 0 < m["tpot_mean_s"] < 0.05
