"""Exporting a tuned policy: config round trip, exact engine flags, rounding, errors, and an
exported policy that simulates exactly like the tuned one."""

import json
import math
import shlex
from importlib import resources

import numpy as np
import pytest
from omegaconf import OmegaConf

from servetune.config import scenario
from servetune.config.policy import make_policy
from servetune.core.errors import ConfigError
from servetune.deploy.export import (
    policy_to_config,
    sglang_args,
    sglang_flags,
    unmapped_knobs,
    vllm_args,
    vllm_flags,
    write_export,
)
from servetune.run import api

ENGINE = {
    "batching": "continuous",
    "kv_layout": "paged",
    "chunked_prefill": True,
    "block_size": 16,
    "max_model_len": 8192,
    "gpu_memory_utilization": 0.9,
}
TUNED = {
    "max_num_seqs": 127.9,
    "max_num_batched_tokens": 4096.7,
    "watermark": 0.02,
    "queue_cap": 64.2,
    "w_age": 1.0,
    "w_prompt": 0.25,
    "w_pred": 0.5,
}


def test_config_rounds_integer_limits_like_the_simulator():
    cfg = policy_to_config(TUNED, "parametric", ENGINE)
    assert cfg == {
        "order": "parametric",
        "max_num_seqs": 127,
        "max_num_batched_tokens": 4096,
        "watermark": 0.02,
        "queue_cap": 64,
        "max_num_queued_reqs": None,
        "max_num_queued_tokens": None,
        "max_num_active_seqs": None,
        "long_prefill_token_threshold": 0,
        "w_age": 1.0,
        "w_prompt": 0.25,
        "w_pred": 0.5,
        "w_slack": 0.0,
        "ttft_target_s": 2.0,
        "spec_k": 0,
        "kv_compress_ratio": 2.0,
        "route_w_queue": 1.0,
        "route_w_kv": 0.0,
        "route_w_work": 0.0,
        "cascade_threshold": 0.5,
    }
    assert isinstance(cfg["max_num_seqs"], int) and isinstance(cfg["queue_cap"], int)
    # limits stay >= 1; an unbounded queue is null, as in the conf files
    low = policy_to_config({"max_num_seqs": 1.0, "queue_cap": 0.3}, "fcfs")
    assert (low["max_num_seqs"], low["queue_cap"]) == (1, 0)
    assert policy_to_config({"queue_cap": math.inf}, "fcfs")["queue_cap"] is None
    assert policy_to_config({"queue_cap": None}, "sjf")["queue_cap"] is None
    # the order's weights are written out (sjf: shortest prompt + predicted output first)
    sjf = policy_to_config({}, "sjf")
    assert (sjf["w_age"], sjf["w_prompt"], sjf["w_pred"]) == (0.0, 1.0, 1.0)
    # numpy / jax scalars, as a tuner hands them over, are fine
    assert policy_to_config({"max_num_seqs": np.float32(8.5)}, "fcfs")["max_num_seqs"] == 8


def test_yaml_loads_back_as_the_rounded_policy(tmp_path):
    paths = write_export(tmp_path / "policy", TUNED, "parametric", ENGINE)
    loaded = OmegaConf.to_container(OmegaConf.load(paths["tuned_policy.yaml"]))
    default = OmegaConf.load(resources.files("servetune.conf") / "policy" / "vllm_default.yaml")
    assert set(default) <= set(loaded)
    order = loaded.pop("order")
    got = make_policy({k: math.inf if v is None else v for k, v in loaded.items()}, order)
    want = make_policy(
        {**TUNED, "max_num_seqs": 127, "max_num_batched_tokens": 4096, "queue_cap": 64},
        "parametric",
    )
    for field in want.__dataclass_fields__:
        if getattr(want, field) is None:  # score_net: none without order neural
            assert getattr(got, field) is None, field
            continue
        assert float(getattr(got, field)) == float(getattr(want, field)), field


DEPLOY = {
    "model": "meta-llama/Meta-Llama-3-8B",
    "tensor_parallel_size": 2,
    "num_gpu_blocks": 5000,
    "max_model_len": 4096,
    "weight_bits": 8,
    "kv_bits": 8,
    "prefix_cache": False,
    "draft_model": "meta-llama/Llama-3.2-1B",
}


def test_vllm_flags_exact():
    # async scheduling and the stream interval as simulated (vLLM 0.32 turns async scheduling
    # on by default, so it is named either way)
    args = vllm_args(
        {**TUNED, "spec_k": 3.0},
        {**ENGINE, "async_scheduling": True, "stream_interval": 4},
        order="parametric",
    )
    assert vllm_flags(args) == [
        "--max-num-seqs",
        "127",
        "--max-num-batched-tokens",
        "4096",
        "--enable-chunked-prefill",
        "--block-size",
        "16",
        "--max-model-len",
        "8192",
        "--scheduling-policy",
        "priority",
        "--watermark",
        "0.02",
        "--scheduler-reserve-full-isl",
        "--async-scheduling",
        "--stream-interval",
        "4",
        "--prefill-schedule-interval",
        "1",
        "--gpu-memory-utilization",
        "0.9",
        "--speculative-config",
        '{"num_speculative_tokens":3}',
    ]
    plain = vllm_args(
        {
            "max_num_seqs": 64,
            "long_prefill_token_threshold": 256.5,
            "max_num_queued_tokens": 9000.0,
        },
        {
            **ENGINE,
            "chunked_prefill": False,
            "max_model_len": None,
            "gpu_memory_utilization": None,
            "scheduler_reserve_full_isl": False,
        },
    )
    assert vllm_flags(plain) == [
        "--max-num-seqs",
        "64",
        "--max-num-batched-tokens",
        "8192",
        "--no-enable-chunked-prefill",
        "--block-size",
        "16",
        "--scheduling-policy",
        "fcfs",
        "--watermark",
        "0.0",
        "--no-scheduler-reserve-full-isl",
        "--no-async-scheduling",
        "--stream-interval",
        "1",
        "--prefill-schedule-interval",
        "1",
        "--long-prefill-token-threshold",
        "256",
        "--no-long-prefill-token-threshold-adaptive",
        "--max-num-queued-tokens",
        "9000",
    ]
    # without `order`, the weights in the values decide; sjf needs order= to be said
    assert vllm_args(TUNED, ENGINE)["scheduling_policy"] == "priority"
    assert vllm_args({}, ENGINE, order="sjf")["scheduling_policy"] == "priority"


def test_vllm_args_pin_the_simulated_engine():
    # the deployment: model, TP, KV blocks (+ vLLM's null block), prefix caching off, fp8
    # weights and KV, the draft model in the speculative config; the KV capacity replaces
    # gpu_memory_utilization
    args = vllm_args({"max_num_seqs": 64, "spec_k": 2}, ENGINE, "fcfs", DEPLOY)
    assert args["model"] == "meta-llama/Meta-Llama-3-8B" and args["max_model_len"] == 4096
    assert {
        k: args[k]
        for k in (
            "tensor_parallel_size",
            "num_gpu_blocks_override",
            "enable_prefix_caching",
            "quantization",
            "kv_cache_dtype",
        )
    } == {
        "tensor_parallel_size": 2,
        "num_gpu_blocks_override": 5001,
        "enable_prefix_caching": False,
        "quantization": "fp8",
        "kv_cache_dtype": "fp8",
    }
    assert "gpu_memory_utilization" not in args
    assert args["speculative_config"] == {
        "model": "meta-llama/Llama-3.2-1B",
        "num_speculative_tokens": 2,
    }
    s_args = sglang_args({"max_num_seqs": 64}, ENGINE, "fcfs", DEPLOY)
    assert {
        k: s_args[k]
        for k in (
            "model_path",
            "tp_size",
            "max_total_tokens",
            "disable_radix_cache",
            "kv_cache_dtype",
        )
    } == {
        "model_path": "meta-llama/Meta-Llama-3-8B",
        "tp_size": 2,
        "max_total_tokens": 80_000,
        "disable_radix_cache": True,
        "kv_cache_dtype": "fp8_e4m3",
    }
    four = {
        k["name"]
        for k in unmapped_knobs({}, "fcfs", ENGINE, {**DEPLOY, "weight_bits": 4, "kv_bits": 4})
    }
    assert {"weight_bits", "kv_bits"} <= four


def test_unmapped_knobs_name_what_needs_a_gateway():
    fcfs = unmapped_knobs({"max_num_seqs": 128}, "fcfs")
    assert [k["name"] for k in fcfs] == ["max_num_batched_tokens"]  # --watermark: 0, off
    sjf = {k["name"]: k for k in unmapped_knobs({"queue_cap": 10.5, "spec_k": 2}, "sjf", ENGINE)}
    assert list(sjf) == [
        "queue_cap",
        "order",
        "w_age",
        "w_prompt",
        "w_pred",
        "w_slack",
        "max_num_batched_tokens",
        "spec_k",
        "gpu_memory_utilization",
    ]
    assert sjf["queue_cap"]["value"] == 10 and sjf["queue_cap"]["engines"] == ["vllm"]
    assert (
        "priority = round(1000 * (0 * arrival_s + 1 * prompt_tokens / 1000 + "
        "1 * predicted_output_tokens / 1000))"
    ) in sjf["order"]["note"]
    for knob in sjf.values():
        assert set(knob) == {"name", "value", "engines", "note"} and knob["note"]
    slack = {k["name"]: k for k in unmapped_knobs({"w_slack": 0.5, "w_age": 0.25}, "parametric")}
    assert "0.75 * arrival_s" in slack["order"]["note"]
    assert slack["ttft_target_s"]["value"] == 2.0


@pytest.mark.parametrize(
    "values,order,engine,match",
    [
        ({"max_seqs": 4}, "fcfs", ENGINE, r"policy\.max_seqs: unknown"),
        ({"watermark": float("nan")}, "fcfs", ENGINE, r"policy\.watermark: .*\[0\.0, 0\.999\]"),
        (
            {"max_num_seqs": math.inf},
            "fcfs",
            ENGINE,
            r"policy\.max_num_seqs: .*finite number within \[1\.0, inf\]",
        ),
        ({"max_num_batched_tokens": math.inf}, "fcfs", ENGINE, r"policy\.max_num_batched_tokens"),
        ({"max_num_seqs": 0.5}, "fcfs", ENGINE, r"policy\.max_num_seqs: got 0\.5; .*\[1\.0, inf\]"),
        ({"w_prompt": math.inf}, "parametric", ENGINE, r"policy\.w_prompt: .*finite"),
        ({"max_num_seqs": [4, 8]}, "fcfs", ENGINE, r"policy\.max_num_seqs: .*one number"),
        ({"queue_cap": "ten"}, "fcfs", ENGINE, r"policy\.queue_cap: got 'ten'"),
        ({"spec_k": -1}, "fcfs", ENGINE, r"policy\.spec_k: .*\[0\.0, 64\.0\]"),
        ({}, "lifo", ENGINE, r"policy\.order: got 'lifo'"),
        ({}, "fcfs", {**ENGINE, "batching": "static"}, r"engine: batching='static'"),
    ],
)
def test_bad_values_raise_config_error(tmp_path, values, order, engine, match):
    with pytest.raises(ConfigError, match=match):
        write_export(tmp_path, values, order, engine)


def test_write_export_files(tmp_path):
    out = tmp_path / "a" / "b"
    paths = write_export(out, TUNED, "parametric", ENGINE, extra={"goodput_rps": 3.5})
    assert (
        sorted(p.name for p in out.iterdir())
        == sorted(paths)
        == sorted(
            ["tuned_policy.yaml", "vllm_args.json", "sglang_args.json", "unmapped_knobs.json"]
        )
    )
    assert all(p.parent == out for p in paths.values())
    for name, flags in (("vllm_args.json", vllm_flags), ("sglang_args.json", sglang_flags)):
        doc = json.loads(paths[name].read_text())
        assert shlex.split(doc["flags"]) == flags(doc["args"])
        assert doc["extra"] == {"goodput_rps": 3.5}
    assert (
        json.loads(paths["unmapped_knobs.json"].read_text())["unmapped"][0]["name"] == "watermark"
    )
    assert "# goodput_rps: 3.5" in paths["tuned_policy.yaml"].read_text()
    # how to select it, as test_exported_policy_simulates_like_the_tuned_one does
    assert (
        "copy it to <dir>/policy/tuned_policy.yaml and pass hydra.searchpath=[file://<dir>] "
        "policy=tuned_policy"
    ) in paths["tuned_policy.yaml"].read_text()


def _same_metrics(a: dict, b: dict):
    # exact, nested, and NaN (no requests of a class) equal to NaN
    dump = lambda m: json.dumps(m, sort_keys=True, default=str)
    assert dump(a) == dump(b)


def test_exported_policy_simulates_like_the_tuned_one(tmp_path):
    # small and overloaded, so max_num_seqs, the token budget and queue_cap all bind
    base = [
        "workload=poisson",
        "workload.rate=30",
        "workload.duration_s=8",
        "engine.max_slots=8",
        "engine.queue_window=16",
    ]
    tuned = {
        "max_num_seqs": 4.7,
        "max_num_batched_tokens": 1000.9,
        "queue_cap": 5.5,
        "w_prompt": 0.3,
        "w_pred": 0.5,
    }
    engine = OmegaConf.to_container(api.compose(base).engine)
    write_export(tmp_path / "policy", tuned, "parametric", engine)

    def simulate(overrides):
        sc = scenario.build(api.compose(base + overrides))
        return sc.params.policy, api.simulate_batch(sc).metrics[0]

    def as_overrides(values):
        return ["policy=parametric"] + [f"policy.{k}={v}" for k, v in values.items()]

    exported_pol, exported = simulate(
        [f"hydra.searchpath=[file://{tmp_path}]", "policy=tuned_policy"]
    )
    rounded = {**tuned, "max_num_seqs": 4, "max_num_batched_tokens": 1000, "queue_cap": 5}
    rounded_pol, by_rounded = simulate(as_overrides(rounded))
    _, by_tuned = simulate(as_overrides(tuned))
    for field in exported_pol.__dataclass_fields__:
        np.testing.assert_array_equal(getattr(exported_pol, field), getattr(rounded_pol, field))
    _same_metrics(exported, by_rounded)
    _same_metrics(exported, by_tuned)  # rounding changed nothing the simulator enforces
    assert exported["n_rejected"] > 0
    # and the cap binds: one more waiting place changes the rejections
    _, looser = simulate(as_overrides({**rounded, "queue_cap": 6}))
    assert looser["n_rejected"] != exported["n_rejected"]


def test_vllm_refusals_are_flagged(tmp_path):
    from servetune.deploy.export import vllm_warnings

    ok = vllm_args(TUNED, ENGINE, "parametric")
    assert vllm_warnings(ok) == []
    tight = vllm_args({**TUNED, "max_num_batched_tokens": 100.5}, ENGINE, "parametric")
    (msg,) = vllm_warnings(tight)
    assert msg.startswith("max_num_batched_tokens (100) < max_num_seqs (127)")
    paths = write_export(tmp_path, {**TUNED, "max_num_batched_tokens": 100.5}, "parametric", ENGINE)
    assert json.loads(paths["vllm_args.json"].read_text())["warnings"] == [msg]


def test_mechanisms_without_engine_flags_are_listed():
    knobs = {
        k["name"]: k
        for k in unmapped_knobs(
            {"kv_compress_ratio": 4.0},
            "fcfs",
            {**ENGINE, "kv_pressure": "compress", "n_instances": 4, "routing": "jsq"},
        )
    }
    assert knobs["kv_pressure"]["value"] == "compress" and "ratio 4" in knobs["kv_pressure"]["note"]
    assert knobs["routing"]["value"] == "jsq"
    plain = {k["name"] for k in unmapped_knobs({}, "fcfs", ENGINE)}
    assert "kv_pressure" not in plain and "routing" not in plain


@pytest.mark.parametrize(
    "watermark, blocks, expected",
    [
        (9.48133442695364e-08, 28183, 0.0),  # floor(0.0027) = 0 blocks: vLLM keeps none
        (0.0020000000000000005, 28183, 0.002),  # 56 blocks either way: the float noise goes
        (0.01, 1001, 0.01),  # 10 blocks
        (0.0123456789, 1001, 0.012),  # 12 blocks: 0.012 x 1001 = 12.01
        (0.5, 3, 0.4),  # 1 block: the shortest decimal at or above 1/3 that still floors to 1
        (0.02, None, 0.02),  # no block count: kept, noise-free
        (0.0, 28183, 0.0),
    ],
)
def test_the_watermark_says_what_vllm_will_do(watermark, blocks, expected):
    from servetune.deploy.export import snap_watermark

    snapped = snap_watermark(watermark, blocks)
    assert snapped == expected
    if blocks:  # the same blocks kept free as the tuned value keeps (scheduler.watermark_blocks)
        assert math.floor(snapped * blocks) == math.floor(watermark * blocks)


def test_snapped_watermarks_keep_the_block_count():
    from servetune.deploy.export import snap_watermark

    rng = np.random.default_rng(3)
    for w, b in zip(rng.uniform(0, 0.999, 2000), rng.integers(1, 200_000, 2000), strict=True):
        snapped = snap_watermark(float(w), int(b))
        assert math.floor(snapped * b) == math.floor(w * b) and len(repr(snapped)) <= 10


def test_the_vllm_flag_carries_the_snapped_watermark():
    deploy = {"model": "m", "num_gpu_blocks": 28182}
    args = vllm_args({"watermark": 9.48133442695364e-08}, ENGINE, "fcfs", deploy)
    assert args["watermark"] == 0.0 and args["num_gpu_blocks_override"] == 28183


def test_the_console_shows_the_policy_as_exported():
    from servetune.deploy.export import as_deployed

    shown = as_deployed({"max_num_seqs": 1199.7, "queue_cap": math.inf, "watermark": 0.02})
    assert shown == {"max_num_seqs": 1199, "queue_cap": math.inf, "watermark": 0.02}
    assert vllm_args({"max_num_seqs": 1199.7}, ENGINE, "fcfs")["max_num_seqs"] == 1199


def test_a_value_moved_outside_its_tuned_range_is_warned_of(tmp_path):
    # the tuner raised the budget to max_num_seqs (vLLM's startup check) above the
    # top of its range; the export keeps what vLLM needs and says so
    moved = {**TUNED, "max_num_seqs": 1536.0, "max_num_batched_tokens": 1536.0}
    ranges = {
        "max_num_seqs": (8.0, 1536.0),
        "max_num_batched_tokens": (256.0, 1024.0),
        "watermark": (0.0, 0.1),
    }
    paths = write_export(tmp_path, moved, "parametric", ENGINE, ranges=ranges)
    doc = json.loads(paths["vllm_args.json"].read_text())
    assert doc["args"]["max_num_batched_tokens"] == 1536
    assert doc["warnings"] == [
        (
            "max_num_batched_tokens = 1536 is outside its tuned range [256, 1024] "
            "(tune.space.max_num_batched_tokens): vLLM's startup check max_num_batched_tokens >= "
            "max_num_seqs (1536) moved it there, and vLLM needs it to start, so it is exported as "
            "is; widen tune.space.max_num_batched_tokens to tune it there"
        )
    ]
    # without the search space (a simulate run's export) nothing is known to be out of range
    again = write_export(tmp_path / "plain", moved, "parametric", ENGINE)
    assert json.loads(again["vllm_args.json"].read_text())["warnings"] == []
