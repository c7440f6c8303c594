"""Quantization end to end: 16 -> 4-bit weights free the memory the closed form
says for KV, decode iterations shorten as the bandwidth model says, and the quality model lowers
goodput as configured -- paired across precisions by common random numbers."""

import math

import numpy as np
import pytest

from servetune.config import hardware, quality, scenario
from servetune.core.errors import ConfigError, TraceError
from servetune.run import api
from servetune.workload.traces import load_trace

GIB = hardware.GIB
# a flat quality model: every request fails with probability p at its precision (gamma = 0)
FLAT = [
    "quality.difficulty_exponent=0",
    "quality.weight_bits.8=0.1",
    "quality.weight_bits.4=0.3",
    "quality.kv_bits.8=0",
    "quality.kv_bits.4=0",
]
LOOSE = ["slo.ttft_s=null", "slo.tpot_s=null", "workload.duration_s=300"]


def build(overrides):
    return scenario.build(api.compose(overrides))


# --------------------------------------------------------------------------- memory -> KV


@pytest.mark.parametrize("model, tp", [("llama3_70b", 2), ("llama3_8b", 1)])
def test_4bit_weights_free_the_expected_kv_blocks(model, tp):
    """blocks(4) - blocks(16) = params x (16 - 4) / 8 bytes / (block x KV bytes per token), to
    within the rounding of each capacity down to whole blocks."""
    b = {
        w: build([f"model={model}", f"hardware.tp={tp}", f"model.weight_bits={w}"]).labels[
            "kv_blocks"
        ]
        for w in (16, 8, 4)
    }
    spec = hardware.MODELS[model]
    block_bytes = 16 * hardware.kv_bytes_per_token(spec, 16)
    for w in (8, 4):
        freed = spec.params * (16 - w) / 8
        assert abs((b[w] - b[16]) - freed / block_bytes) < 1, (w, b)
    # closed form of the 16-bit capacity itself
    kv_mem = tp * (0.9 * 80 * GIB - 2 * GIB) - spec.params * 2
    assert b[16] == int(kv_mem // block_bytes)
    if model == "llama3_70b":  # 4-bit makes a real difference there: over 10x the KV
        assert b[4] > 10 * b[16]


def test_kv_bits_scale_blocks_per_byte():
    b = {k: build([f"model.kv_bits={k}"]).labels["kv_blocks"] for k in (16, 8, 4)}
    assert abs(b[8] - 2 * b[16]) <= 1 and abs(b[4] - 4 * b[16]) <= 3


# --------------------------------------------------------------------------- decode speed


def _one_request(tmp_path, prompt, output):
    path = tmp_path / "one.csv"
    path.write_text(f"arrival_s,prompt_tokens,output_tokens\n0,{prompt},{output}\n")
    return [
        f"workload.path={path}",
        "workload.duration_s=null",
        "classes.prompt_split_tokens=null",
        "slo.ttft_s=null",
        "slo.tpot_s=null",
        "quality.enabled=false",
    ]


def test_decode_time_falls_as_the_bandwidth_model_says(tmp_path):
    """A lone request decodes bandwidth-bound: iteration j reads the weights and P + j - 1 KV
    tokens and writes one, so TPOT = mean_j (W + kvb (P + j)) / B + overhead, and 16 -> 4-bit
    weights shorten every decode iteration by exactly 0.75 W16 / B."""
    prompt, output = 1000, 129
    base = _one_request(tmp_path, prompt, output)
    tpot = {}
    for w, kv in ((16, 16), (4, 16), (4, 4)):
        res = api.simulate(base + [f"model.weight_bits={w}", f"model.kv_bits={kv}"])
        tpot[w, kv] = res.metrics[0]["tpot_mean_s"]
        spec = hardware.MODELS["llama3_8b"]
        weights = hardware.weight_bytes(spec, w)
        kvb = hardware.kv_bytes_per_token(spec, kv)
        rate = 3.35e12 * 0.8  # H100 HBM x hardware.bandwidth_efficiency
        j = np.arange(1, output)
        steps = (weights + kvb * (prompt + j)) / rate + 0.002
        # still bandwidth bound: 2 x params FLOPs at 60% of 989 TFLOP/s is far shorter
        assert 2 * spec.params / (989e12 * 0.6) < steps.min() - 0.002
        assert math.isclose(tpot[w, kv], steps.mean(), rel_tol=1e-9), (w, kv)
    saved = 0.75 * hardware.weight_bytes(hardware.MODELS["llama3_8b"], 16) / (3.35e12 * 0.8)
    assert math.isclose(tpot[16, 16] - tpot[4, 16], saved, rel_tol=1e-9)
    assert tpot[4, 4] < tpot[4, 16]


# --------------------------------------------------------------------------- quality -> goodput


@pytest.fixture(scope="module")
def runs():
    """One seed of 5 minutes of the Azure conversation trace at each precision, no SLOs."""
    out = {(w, "flat"): api.simulate(LOOSE + FLAT + [f"model.weight_bits={w}"]) for w in (16, 8, 4)}
    out[16, "default"] = api.simulate(LOOSE)
    out[16, "off"] = api.simulate(LOOSE + ["quality.enabled=false"])
    return out


def test_16_bit_default_changes_no_metric(runs):
    """At 16/16 bits the default quality model fails nothing: every metric is what it was
    without a quality model."""
    on, off = runs[16, "default"].metrics[0], runs[16, "off"].metrics[0]
    assert on["n_quality_failed"] == 0 and on["goodput_lost_to_quality_rps"] == 0
    for k, v in off.items():
        assert on[k] == v or (isinstance(v, float) and math.isnan(v) and math.isnan(on[k])), k
    assert runs[16, "default"].requests[0]["quality_ok"].all()


def test_flat_failure_probability_lowers_attainment_binomially(runs):
    """With P(fail) = p on every request and every request served, attainment is 1 - p up to
    binomial noise, and exactly the share of requests whose uniform draw is at least p."""
    for w, p in ((8, 0.1), (4, 0.3)):
        res = runs[w, "flat"]
        m, t = res.metrics[0], res.requests[0]
        n = m["n_requests"]
        assert m["n_completed"] == n > 500
        tol = 4 * math.sqrt(p * (1 - p) / n)
        assert abs(m["slo_attainment"] - (1 - p)) < tol, (w, m["slo_attainment"])
        u = res.scenario.traces[0].quality_u
        np.testing.assert_array_equal(t["quality_ok"].to_numpy(), u >= p)
        np.testing.assert_array_equal(t["qualifies"].to_numpy(), t["slo_ok"].to_numpy() & (u >= p))
        assert m["n_quality_failed"] == int((u < p).sum())
        assert math.isclose(m["goodput_rps"] * m["window_s"], int((u >= p).sum()))
        assert m["goodput_lost_to_quality_rps"] * m["window_s"] == pytest.approx((u < p).sum())
        assert m["useful_tokens_lost_to_quality"] == t["output_tokens"][u < p].sum()


def test_failures_are_paired_and_monotone_in_precision(runs):
    """Same seed, same uniforms: a request that fails at 8 bits fails at 4; none fails at 16."""
    ok = {w: runs[w, "flat"].requests[0]["quality_ok"].to_numpy() for w in (16, 8, 4)}
    us = [runs[w, "flat"].scenario.traces[0].quality_u for w in (16, 8, 4)]
    np.testing.assert_array_equal(us[0], us[1])
    np.testing.assert_array_equal(us[0], us[2])
    assert ok[16].all()
    assert not np.any(~ok[8] & ok[4])  # failed at 8 => failed at 4
    assert (~ok[4]).sum() > (~ok[8]).sum() > 0
    att = {w: runs[w, "flat"].metrics[0]["slo_attainment"] for w in (16, 8, 4)}
    assert att[16] == 1.0 > att[8] > att[4]


def test_seeds_draw_different_uniforms():
    sc = build(["seeds=2", "workload.replicas.block_s=null"])  # one trace, two seeds' draws
    u0, u1 = (t.quality_u for t in sc.traces)
    assert len(u0) == len(u1) and not np.array_equal(u0, u1)
    assert not np.array_equal(sc.traces[0].difficulty, sc.traces[1].difficulty)


# --------------------------------------------------------------------------- the model itself


def test_model_formula_and_hooks():
    m = quality.QualityModel(difficulty_exponent=1.0)
    d = np.array([0.0, 0.5, 1.0])
    p = m.failure_prob(d, {"weight_bits": 4, "kv_bits": 16})
    lam = -math.log(1 - 0.02)
    np.testing.assert_allclose(p, [0.0, 1 - math.exp(-lam), 1 - math.exp(-2 * lam)])
    # mean over uniform difficulty is about delta (exactly E[1 - exp(-2 lam d)])
    mean = m.mean_failure({"weight_bits": 4})
    assert math.isclose(mean, 1 - (1 - math.exp(-2 * lam)) / (2 * lam), rel_tol=1e-6)
    assert abs(mean - 0.02) < 0.001
    # hazards add: 4-bit weights and 4-bit KV at gamma = 0 survive both
    flat = quality.QualityModel(difficulty_exponent=0.0)
    both = flat.failure_prob(np.array([0.3]), {"weight_bits": "4", "kv_bits": 4.0})
    assert math.isclose(both[0], 1 - 0.98 * 0.99)
    # a generic component with per-request levels (a cascade's tier) and an extra hazard
    tiers = quality.QualityModel(
        components={"tier": {"large": 0.0, "small": 0.2}}, difficulty_exponent=0.0
    )
    pt = tiers.failure_prob(
        np.zeros(3),
        {"tier": np.array(["large", "small", "small"])},
        extra_hazard=np.array([0.0, 0.0, -math.log(0.5)]),
    )
    np.testing.assert_allclose(pt, [0.0, 0.2, 1 - 0.8 * 0.5])
    with pytest.raises(ConfigError, match=r"^quality\.tier: no delta"):
        tiers.hazard({"tier": "medium"})


def test_trace_difficulty_column(tmp_path):
    path = tmp_path / "d.csv"
    rows = "".join(f"{i},100,10,{i % 2}\n" for i in range(200))
    path.write_text("arrival_s,prompt_tokens,output_tokens,difficulty\n" + rows)
    tr = load_trace(path)
    np.testing.assert_array_equal(tr.difficulty, np.arange(200) % 2)
    base = [
        f"workload.path={path}",
        "workload.duration_s=null",
        "slo.ttft_s=null",
        "slo.tpot_s=null",
        "model.weight_bits=4",
        "quality.weight_bits.4=0.5",
    ]
    res = api.simulate(base)
    t = res.requests[0]
    np.testing.assert_array_equal(t["difficulty"], np.arange(200) % 2)
    assert t["quality_ok"][t["difficulty"] == 0].all()  # gamma = 1: easy requests never fail
    assert not t["quality_ok"][t["difficulty"] == 1].all()
    drawn = build(base + ["quality.difficulty.source=draw"]).traces[0].difficulty
    assert not np.isin(drawn, [0.0, 1.0]).all()
    bad = tmp_path / "bad.csv"
    bad.write_text("arrival_s,prompt_tokens,output_tokens,difficulty\n0,1,1,0.5\n1,1,1,1.5\n")
    with pytest.raises(TraceError, match=r"bad\.csv:3: 'difficulty' = '1\.5'"):
        load_trace(bad)
    jl = tmp_path / "m.jsonl"
    jl.write_text(
        '{"timestamp": 0, "input_length": 5, "output_length": 2, "difficulty": 0.2}\n'
        '{"timestamp": 5, "input_length": 5, "output_length": 2}\n'
    )
    with pytest.raises(TraceError, match=r"m\.jsonl:2: no 'difficulty'"):
        load_trace(jl)


@pytest.mark.parametrize(
    "override, key",
    [
        ("quality.weight_bits.4=-0.1", "quality.weight_bits.4"),
        ("quality.weight_bits.4=1.0", "quality.weight_bits.4"),
        ("quality.weight_bits.4=0.001", "quality.weight_bits.4"),  # below the 8-bit delta
        ("quality.kv_bits.8=abc", "quality.kv_bits.8"),
        ("quality.base_fail=2", "quality.base_fail"),
        ("quality.difficulty_exponent=-1", "quality.difficulty_exponent"),
        ("quality.enabled=maybe", "quality.enabled"),
        ("quality.difficulty.dist=normal", "quality.difficulty.dist"),
        ("quality.difficulty.source=oracle", "quality.difficulty.source"),
        ("quality.difficulty.value=2", "quality.difficulty.value"),
        ("+quality.bogus=1", "quality.bogus"),
        ("+quality.difficulty.mean=0.3", "quality.difficulty.mean"),
        ("quality.difficulty.source=trace", "quality.difficulty.source"),  # azure has none
        ("quality=7", "quality"),
    ],
)
def test_bad_quality_config_names_the_key(override, key):
    with pytest.raises(ConfigError) as err:
        build([override])
    assert str(err.value).startswith(key + ":"), str(err.value)


def test_study_config_composes_and_builds():
    """sweeps/quantization: the experiment builds at every precision it sweeps (5 seeds, 70B
    on two H100s) without simulating."""
    from importlib import resources

    from omegaconf import OmegaConf

    path = resources.files("servetune.conf") / "experiment" / "quantization.yaml"
    params = OmegaConf.load(str(path)).hydra.sweeper.params
    assert params["model.weight_bits"] == "16,8,4" and params["model.kv_bits"] == "16,8,4"
    for w in (16, 8, 4):
        sc = build(["+experiment=quantization", f"model.weight_bits={w}", "model.kv_bits=4"])
        assert sc.labels["model"] == "Llama-3-70B" and sc.labels["tp"] == 2 and len(sc.seeds) == 5
        assert sc.metrics.quality.setting == {"weight_bits": w, "kv_bits": 4}


@pytest.mark.parametrize(
    "section, key",
    [
        ({"weight_bits": {"16": 0, "4": 0.1}}, "quality.weight_bits"),  # no 8-bit delta
        ({"kv_bits": {16: 0, "16": 0, 8: 0, 4: 0}}, "quality.kv_bits.16"),  # a level twice
        ({"components": {"tier": []}}, "quality.components.tier"),
        ({"components": {"tier": {"small": 1.5}}}, "quality.components.tier.small"),
        ({"difficulty": {"dist": "beta", "a": 0}}, "quality.difficulty.a"),
    ],
)
def test_bad_quality_section_names_the_key(section, key):
    with pytest.raises(ConfigError) as err:
        quality.from_config(section, {"weight_bits": 16, "kv_bits": 16})
    assert str(err.value).startswith(key + ":"), str(err.value)
    assert quality.from_config({"enabled": False}, {}) is None
