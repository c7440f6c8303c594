"""cost=aic: the engine's linear step-time form fitted to NVIDIA's aiconfigurator-core
performance database (servetune/config/aic.py). The fit itself is checked on synthetic data
here; the tests marked aic need the servetune[aic] extra and check the fit against the
database's own estimates and a run on it."""

from __future__ import annotations

import sys
import types
from pathlib import Path

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


class _SyntheticDatabase:
    """A stand-in for aiconfigurator-core's SDK with the same calls and shapes, whose step time
    is a known linear form of the batch as the SDK describes it: a mixed step's prefill of
    ctx_tokens is prompts of isl tokens each (causal attention over each), and its decodes (or
    a decode step's) sit at context isl + osl // 2 + 1."""

    TRUTH = {"base": 4e-3, "P": 2e-5, "D": 1e-5, "C": 3e-8, "W": 1e-9}  # seconds per unit

    def __init__(self):
        self.calls = []
        self.config = types.SimpleNamespace(ModelConfig=lambda **kw: kw)
        modes = {"bfloat16": "bf16", "fp8": "fp8"}
        self.common = types.SimpleNamespace(GEMMQuantMode=modes, KVCacheQuantMode=modes)
        self.models = types.SimpleNamespace(get_model=lambda mid, cfg, backend: (mid, cfg))
        self.perf_database = types.SimpleNamespace(
            get_latest_database_version=lambda system, backend: "9.9",
            get_database=lambda system, backend, version: {"system": system},
        )
        self.sdk = types.SimpleNamespace(
            estimate_decode_step_breakdown_with_rust=self.decode,
            estimate_mixed_step_breakdown_with_rust=self.mixed,
        )

    def seconds(self, prefill, isl, decode, osl):
        t, ctx = self.TRUTH, isl + osl // 2 + 1
        attn = prefill * (isl + 1) / 2 + decode * (ctx + 1)
        return (
            t["base"] + t["P"] * prefill + t["D"] * decode + t["C"] * decode * ctx + t["W"] * attn
        )

    def decode(self, model, db, *, gen_tokens, isl, osl):
        self.calls.append(("decode", gen_tokens, isl, osl))
        return 1e3 * self.seconds(0, isl, gen_tokens, osl), 0.0, {}

    def mixed(self, model, db, *, ctx_tokens, gen_tokens, isl, osl, prefix):
        self.calls.append(("mixed", ctx_tokens, gen_tokens, isl, osl))
        return {"latency_ms": 1e3 * self.seconds(ctx_tokens, isl, gen_tokens, osl), "energy_wms": 0}


def test_the_fit_on_a_synthetic_database_recovers_its_step_time_and_ranges(monkeypatch):
    # the whole path (grid -> database calls -> work -> fit) without the extra
    fake = _SyntheticDatabase()
    modules = (fake.config, fake.models, fake.perf_database, fake.sdk, fake.common)
    monkeypatch.setattr(aic, "_import", lambda: modules)
    fit = aic.linear_fit(aic.AicTarget("b300", "qwen3_8b", tp=2, max_model_len=8192))
    assert (fit.system, fit.model, fit.version) == ("b300_sxm", "Qwen/Qwen3-8B", "9.9")
    assert fit.precision == "bfloat16 / bfloat16"
    t = fake.TRUTH
    got = fit.coefficients
    np.testing.assert_allclose(
        [
            got["base_s"],
            got["per_prefill_token_s"],
            got["per_decode_seq_s"],
            got["per_ctx_token_s"],
            got["per_attn_work_s"],
        ],
        [t["base"], t["P"], t["D"], t["C"], t["W"]],
        rtol=1e-6,
    )
    assert fit.rel_error_max < 1e-9 and fit.n_points == len(fake.calls) == len(aic._grid(8192))
    assert (fit.max_prefill_tokens, fit.max_decode_seqs) == (16384, 1024)
    # every prompt the database was asked about fits in max_model_len
    assert max(c[3] for c in fake.calls if c[0] == "mixed") < 8192
    warn = aic.range_warnings(fit, 32768, 2048)
    assert "32768 is 2.0x the largest prefill" in warn[0] and "2048 is 2.0x" in warn[1]


def test_precisions_map_to_the_database_modes_and_others_are_refused_by_key(monkeypatch):
    fake = _SyntheticDatabase()
    built = []
    fake.config.ModelConfig = lambda **kw: built.append(kw) or kw
    modules = (fake.config, fake.models, fake.perf_database, fake.sdk, fake.common)
    monkeypatch.setattr(aic, "_import", lambda: modules)
    fit = aic.linear_fit(
        aic.AicTarget("h100", "llama3_8b", max_model_len=4096, weight_bits=8, kv_bits=8)
    )
    assert fit.precision == "fp8 / fp8"
    assert built[-1] == {"tp_size": 1, "gemm_quant_mode": "fp8", "kvcache_quant_mode": "fp8"}
    with pytest.raises(ConfigError, match=r"^model\.weight_bits: got 4; cost=aic reads"):
        aic.linear_fit(aic.AicTarget("h100", "llama3_8b", max_model_len=4096, weight_bits=4))
    # a batch the database cannot estimate names the batch and the configuration
    fake.sdk.estimate_decode_step_breakdown_with_rust = lambda *a, **k: 1 / 0
    with pytest.raises(
        ConfigError,
        match=r"could not estimate a batch of 0 prefill tokens .* "
        r"and 1 decodes at context 128 from its vllm 9\.9 data for "
        r"meta-llama/Meta-Llama-3\.1-8B on h100_sxm with tp 1",
    ):
        aic.linear_fit(aic.AicTarget("h100", "llama3_8b", max_model_len=4096))


@pytest.mark.parametrize(
    "bits, lacks, blamed",
    [
        ({"weight_bits": 8}, ("gemm_quant_mode",), r"model\.weight_bits=8"),
        ({"kv_bits": 8}, ("kvcache_quant_mode",), r"model\.kv_bits=8"),
        (
            {"weight_bits": 8, "kv_bits": 8},
            ("gemm_quant_mode", "kvcache_quant_mode"),
            r"model\.weight_bits=8 and model\.kv_bits=8",
        ),
        ({"weight_bits": 8, "kv_bits": 8}, ("gemm_quant_mode",), r"model\.weight_bits=8"),
    ],
)
def test_a_precision_the_database_lacks_names_its_key(monkeypatch, bits, lacks, blamed):
    """(issue 64) FP8 on an A100 said "could not estimate a batch of 16 prefill tokens"
    instead of naming model.weight_bits: a database without a precision's tables (FP8 on a
    GPU without FP8 tensor cores) is told by the same batch estimable at 16 bits."""
    fake = _SyntheticDatabase()
    fake.config.ModelConfig = lambda **kw: kw
    modules = (fake.config, fake.models, fake.perf_database, fake.sdk, fake.common)
    monkeypatch.setattr(aic, "_import", lambda: modules)
    decode, mixed = fake.decode, fake.mixed

    def refuse(model):
        missing = [k for k in lacks if model[1][k] == "fp8"]
        if missing:
            raise KeyError(f"no fp8 table for {missing[0]}")

    fake.sdk.estimate_decode_step_breakdown_with_rust = lambda m, db, **k: (
        refuse(m) or decode(m, db, **k)
    )
    fake.sdk.estimate_mixed_step_breakdown_with_rust = lambda m, db, **k: (
        refuse(m) or mixed(m, db, **k)
    )
    with pytest.raises(
        ConfigError, match=rf"^{blamed}: aiconfigurator-core's vllm 9\.9 data"
    ) as info:
        aic.linear_fit(aic.AicTarget("a100_80gb", "llama3_8b", max_model_len=4096, **bits))
    assert "at 16 bits it estimates the same batch: set" in str(info.value)
    assert len(str(info.value)) < 600


def test_without_the_extra_cost_aic_names_it(monkeypatch):
    # the import fails as uninstalled, even where an earlier test of this process imported it
    for name in [m for m in sys.modules if m.split(".")[0] == "aiconfigurator_core"]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "aiconfigurator_core", None)
    with pytest.raises(
        ConfigError, match=r"cost=aic needs the optional extra: pip install 'servetune\[aic\]'"
    ):
        scenario.build(api.compose(["cost=aic"]))


def test_a_gpu_or_model_the_database_lacks_is_refused_by_key():
    with pytest.raises(
        ConfigError,
        match=r"^hardware\.gpu: 'a30' has no aiconfigurator-core system; cost=aic covers "
        r"b300, gb300, a100_80gb, ",
    ):
        aic._names("a30", "llama3_8b", "vllm")
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
    fit = aic.linear_fit(aic.AicTarget("h100", "llama3_8b", max_model_len=8192))
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
    work, seconds, joules, _ = aic.query(aic.AicTarget("h100", "llama3_8b", max_model_len=8192))
    rel = np.array([step(*w) for w in work]) / seconds - 1
    assert np.max(np.abs(rel)) <= fit.rel_error_max + 1e-12
    assert np.all(joules >= 0)  # vLLM's H100 tables carry no power data: 0 J
    # a 2,048-token prefill (the database: about 43 ms) and a 32-sequence decode at 1k context
    # (about 8.5 ms) within the fit's p90 error
    assert 0.035 < step(*aic._work(2048, 2048, 0, 0)) < 0.052
    assert 0.0075 < step(*aic._work(0, 0, 32, 1026)) < 0.0095


@pytest.mark.aic
def test_fp8_and_the_other_engines_read_their_own_tables():
    pytest.importorskip("aiconfigurator_core", reason="needs the servetune[aic] extra")
    bf16 = aic.linear_fit(aic.AicTarget("h100", "llama3_8b", max_model_len=4096))
    fp8 = aic.linear_fit(
        aic.AicTarget("h100", "llama3_8b", max_model_len=4096, weight_bits=8, kv_bits=8)
    )
    # FP8 GEMMs halve the weight bytes and run at twice the tensor-core rate: cheaper per token
    assert fp8.coefficients["per_prefill_token_s"] < bf16.coefficients["per_prefill_token_s"]
    assert fp8.rel_error_p90 < 0.2
    for backend in ("sglang", "trtllm"):
        fit = aic.linear_fit(
            aic.AicTarget("h100", "llama3_8b", backend=backend, max_model_len=4096)
        )
        assert fit.backend == backend and fit.version != bf16.version and fit.rel_error_p90 < 0.2
    # the A100 has no FP8 tensor cores: the database says so, by configuration
    # and the error names the key that asked for them (issue 64)
    with pytest.raises(
        ConfigError, match=r"^model\.weight_bits=8: .* data for a100_sxm has no tables .*fp8"
    ):
        aic.linear_fit(aic.AicTarget("a100_80gb", "llama3_8b", max_model_len=4096, weight_bits=8))


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


@pytest.mark.aic
def test_the_busy_power_curve_follows_the_b200_power_measurements():
    # run/energy.py's constants were read off these tables: held to them bin by bin
    pd = pytest.importorskip("pandas")
    core = pytest.importorskip("aiconfigurator_core", reason="needs the servetune[aic] extra")
    from servetune.run import energy

    tables = Path(core.__file__).parent / "systems/data/b200_sxm/attention/vllm/0.22.0"
    ctx = pd.read_parquet(tables / "context_attention_perf.parquet")
    ctx = ctx[ctx["attn_dtype"] == "bfloat16"]
    flops = 4 * ctx["batch_size"] * ctx["isl"] ** 2 / 2 * ctx["num_heads"] * ctx["head_dim"]
    u = flops / (ctx["latency"] * 1e-3 * 2250e12)  # over the B200's dense BF16 peak
    share = ctx["power"] / ctx["power_limit"]
    bins = (0.001, 0.003, 0.01, 0.02, 0.05, 0.1, 0.2, 0.4, 0.6)
    for lo, hi in zip(bins[:-1], bins[1:], strict=True):
        inside = (u >= lo) & (u < hi)
        curve = energy.busy_power_fraction(np.array([u[inside].median()]))[0]
        assert abs(share[inside].median() - curve) < 0.03, (lo, hi)
    # decode attention alone (memory-bound, no arithmetic to speak of) draws less than the
    # floor: the overcharge the module docstring states
    gen = pd.read_parquet(tables / "generation_attention_perf.parquet")
    assert 0.3 < (gen["power"] / gen["power_limit"]).median() < energy.BUSY_FLOOR
