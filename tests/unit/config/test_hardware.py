"""Catalog, memory -> KV capacity, and the roofline step time against hand computation."""

import dataclasses

import numpy as np
import pytest

from servetune.config import hardware as hw
from servetune.core import cost
from servetune.core.errors import ConfigError

H100, L8B = hw.GPUS["h100"], hw.MODELS["llama3_8b"]
KW = {
    "block_size": 16,
    "gpu_memory_utilization": 0.9,
    "activation_reserve_gib": 2.0,
    "max_model_len": 8192,
}


def blocks(gpu=H100, model=L8B, tp=1, wbits=16, kvbits=16):
    return hw.kv_capacity_blocks(gpu, model, tp=tp, weight_bits=wbits, kv_bits=kvbits, **KW)


def test_llama3_8b_kv_bytes_and_capacity_on_h100():
    # 2 (K,V) x 32 layers x 8 KV heads x 128 dims x 2 bytes = 131,072 bytes per token
    assert hw.kv_bytes_per_token(L8B, 16) == 131_072
    kv_mem = 0.9 * 80 * hw.GIB - 8.03e9 * 2 - 2 * hw.GIB
    assert blocks() == int(kv_mem // (16 * 131_072))


def test_quantization_frees_memory_for_kv():
    # 16 -> 4-bit weights frees 0.75 x 16.06 GB; within rounding of one block
    freed = 8.03e9 * 2 * 0.75
    gained = blocks(wbits=4) - blocks()
    assert abs(gained - freed / (16 * 131_072)) <= 1
    # 8-bit KV halves bytes per token: twice the blocks, within rounding
    assert abs(blocks(kvbits=8) - 2 * blocks()) <= 1


def test_tensor_parallel_adds_memory():
    one, two = blocks(), blocks(tp=2)
    assert two > 2 * one  # the weights are paid for once


def test_more_kv_blocks_than_int32_arithmetic_allows_is_a_config_error():
    # a GPU of 10^6 GiB at one token per block: ~8e9 blocks, past MAX_KV_BLOCKS (2**30), where
    # the engine's sums of block counts (free + held, the watermark's total + 1) could wrap
    huge = dataclasses.replace(H100, memory_bytes=1e6 * hw.GIB)
    with pytest.raises(ConfigError, match=r"^engine\.block_size: .* at most 1073741824"):
        hw.kv_capacity_blocks(
            huge, L8B, tp=1, weight_bits=16, kv_bits=16, **{**KW, "block_size": 1}
        )
    assert blocks(huge) <= hw.MAX_KV_BLOCKS  # 16-token blocks: 4.8e8, allowed


def _params(**kw):
    base = {
        "tp": 1,
        "weight_bits": 16,
        "kv_bits": 16,
        "kv_blocks": 100,
        "flops_efficiency": 0.5,
        "bandwidth_efficiency": 0.8,
        "overhead_s": 0.002,
        "allreduce_latency_s": 0.0,
    }
    base.update(kw)
    return hw.roofline_cost_params(H100, L8B, **base)


def test_decode_step_is_bandwidth_bound_and_matches_formula():
    c = _params()
    d, ctx = 32, 32 * 1000
    t = float(cost.step_time(c, "roofline", 0, d, ctx, d * 1000.5))
    bytes_moved = 8.03e9 * 2 + 131_072 * (ctx + d)
    assert np.isclose(t, bytes_moved / (3.35e12 * 0.8) + 0.002)
    # 4-bit weights: the weight-read part shrinks 4x, as the bandwidth model says
    t4 = float(cost.step_time(_params(weight_bits=4), "roofline", 0, d, ctx, d * 1000.5))
    assert np.isclose(t4, (8.03e9 * 0.5 + 131_072 * (ctx + d)) / (3.35e12 * 0.8) + 0.002)


def test_prefill_step_is_compute_bound():
    c = _params()
    p = 8192
    attn = p * (p + 1) / 2
    t = float(cost.step_time(c, "roofline", p, 0, 0, attn))
    flops = 2 * 8.03e9 * p + 4 * 32 * 32 * 128 * attn
    assert np.isclose(t, flops / (989e12 * 0.5) + 0.002)


def test_tensor_parallel_step_adds_allreduce():
    one = float(cost.step_time(_params(), "roofline", 4096, 0, 0, 0.0))
    two = float(
        cost.step_time(_params(tp=2, allreduce_latency_s=5e-6), "roofline", 4096, 0, 0, 0.0)
    )
    comm = 2 * 32 * (2 * 4096 * 4096 * 2 * 0.5 / 900e9 + 5e-6)
    compute = 2 * 8.03e9 * 4096 / (2 * 989e12 * 0.5)
    assert np.isclose(two, compute + 0.002 + comm)
    assert two < one


def test_async_scheduling_hides_the_host_overhead_behind_the_device_step():
    # a 32-sequence decode reads the weights (~6 ms on an H100), longer than the 2 ms host
    # overhead: async scheduling's step is the device's; a 2-GPU tiny step is shorter than the
    # overhead, so the host's 2 ms sets the pace. A linear fit keeps its measured form.
    c = _params(overhead_s=0.002)
    d, ctx = 32, 32 * 1000
    sync = float(cost.step_time(c, "roofline", 0, d, ctx, d * 1000.5))
    overlapped = float(cost.step_time(c, "roofline", 0, d, ctx, d * 1000.5, overlap_host=True))
    assert np.isclose(overlapped, sync - 0.002)
    slow_host = _params(overhead_s=0.05)
    assert float(cost.step_time(slow_host, "roofline", 0, 1, 10, 10.5, overlap_host=True)) == 0.05
    lin = hw.linear_cost_params(
        base_s=0.01,
        per_prefill_token_s=0.0,
        per_decode_seq_s=1e-3,
        per_ctx_token_s=0.0,
        kv_blocks=10,
    )
    assert float(cost.step_time(lin, "linear", 0, 5, 0, 0.0, overlap_host=True)) == float(
        cost.step_time(lin, "linear", 0, 5, 0, 0.0)
    )
    assert float(cost.step_time(c, "roofline", 0, 0, 0, 0.0, overlap_host=True)) == 0.0


def test_linear_form_and_empty_batch():
    c = hw.linear_cost_params(
        base_s=0.01,
        per_prefill_token_s=1e-4,
        per_decode_seq_s=1e-3,
        per_ctx_token_s=1e-6,
        kv_blocks=10,
    )
    assert np.isclose(
        float(cost.step_time(c, "linear", 100, 5, 1000, 0.0)), 0.01 + 0.01 + 0.005 + 0.001
    )
    assert float(cost.step_time(c, "linear", 0, 0, 0, 0.0)) == 0.0
    # attention work (new tokens x context) is charged only when its coefficient is set
    attn = dataclasses.replace(c, per_attn_work_s=hw.jnp.asarray(2e-9))
    assert np.isclose(
        float(cost.step_time(attn, "linear", 100, 5, 1000, 3e6)),
        0.01 + 0.01 + 0.005 + 0.001 + 0.006,
    )


@pytest.mark.parametrize("name", list(hw.GPUS))
def test_catalog_gpus_are_sane(name):
    g = hw.GPUS[name]
    assert 1e14 < g.peak_flops < 5e15 and 5e11 < g.hbm_bytes_per_s < 1e13
    assert 40 * hw.GIB <= g.memory_bytes <= 300 * hw.GIB and g.price_per_gpu_hour > 0
    assert 300 <= g.tdp_w <= 1400  # datasheet board power, watts


def test_the_database_names_of_gpus_and_models_name_the_same_entries():
    assert hw.lookup(hw.GPUS, "h100_sxm", "hardware.gpu") is hw.GPUS["h100"]
    assert hw.lookup(hw.GPUS, "rtx_pro_6000_server", "hardware.gpu") is hw.GPUS["rtx_pro_6000"]
    assert hw.lookup(hw.MODELS, "Qwen/Qwen3-32B", "model.name") is hw.MODELS["qwen3_32b"]
    assert all(alias not in hw.GPUS and key in hw.GPUS for alias, key in hw.GPU_ALIASES.items())


def test_an_unknown_name_is_refused_with_the_closest_names_first():
    with pytest.raises(
        ConfigError,
        match=r"^hardware\.gpu: unknown name 'h10'; expected one of "
        r"h100, h200, .*\(or a100_sxm, b200_sxm",
    ):
        hw.lookup(hw.GPUS, "h10", "hardware.gpu")
    with pytest.raises(
        ConfigError,
        match=r"^model\.name: unknown name 'qwen3_7b'; expected one "
        r"of qwen3_8b, ",
    ):
        hw.lookup(hw.MODELS, "qwen3_7b", "model.name")
