"""vLLM 0.32's own `vllm bench serve --save-result --save-detailed` run over the requests of a
servetune vllm_bench.json: vLLM's benchmark client (vllm/benchmarks/serve.py, `main`) with its
network calls replaced by the simulated outcomes (each request returns at once the TTFT, ITLs,
latency, tokens and error servetune recorded for it), so the file it writes is vLLM's own format
filled with the simulation's requests. Needs the servetune[vllm] extra (or any environment with
vllm 0.32 installed; servetune itself is not imported). Run as a script to regenerate the
committed example the default tests diff against:

    python tests/vllm_bench_reference.py SERVETUNE_VLLM_BENCH_JSON OUT_DIR
"""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

# the flags the simulated run corresponds to: every metric and servetune's percentiles
FLAGS = [
    "--backend",
    "vllm",
    "--dataset-name",
    "random",
    "--request-rate",
    "inf",
    "--save-result",
    "--save-detailed",
    "--percentile-metrics",
    "ttft,tpot,itl,e2el",
    "--metric-percentiles",
    "50,90,99",
    "--goodput",
    "ttft:2000",
    "tpot:100",
    "--disable-tqdm",
]


def run(servetune_file: Path, out_dir: Path) -> Path:
    """vLLM's result file (in `out_dir`) for the requests of `servetune_file`."""
    from vllm.benchmarks import serve
    from vllm.benchmarks.datasets import SampleRequest
    from vllm.benchmarks.lib.endpoint_request_func import RequestFuncOutput
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    sim = json.loads(Path(servetune_file).read_text())
    n = len(sim["input_lens"])
    outcomes = {}
    for i in range(n):
        ok = sim["errors"][i] == ""
        outcomes[str(i)] = RequestFuncOutput(
            success=ok,
            latency=sim["latencies"][i],
            output_tokens=sim["output_lens"][i],
            ttft=sim["ttfts"][i],
            itl=list(sim["itls"][i]),
            prompt_len=sim["input_lens"][i],
            error=sim["errors"][i],
            start_time=sim["start_times"][i],
        )

    async def fake_request(request_func_input, session, pbar=None):
        if request_func_input.request_id is None:  # vLLM's readiness probe
            return RequestFuncOutput(success=True)
        return outcomes[request_func_input.request_id]

    async def no_metrics(*args, **kwargs):
        return None

    async def ready(request_func, test_input, **kwargs):
        return RequestFuncOutput(success=True)

    samples = [
        SampleRequest(
            prompt="x",
            prompt_len=sim["input_lens"][i],
            expected_output_len=max(sim["output_lens"][i], 1),
            request_id=str(i),
        )
        for i in range(n)
    ]
    serve.ASYNC_REQUEST_FUNCS["vllm"] = fake_request
    serve.get_tokenizer = lambda *a, **k: types.SimpleNamespace(  # truthy: latency stats kept
        __call__=None
    )
    serve.get_samples = lambda args, tokenizer: samples
    serve.wait_for_endpoint = ready
    serve.fetch_spec_decode_metrics = no_metrics
    serve.fetch_diffusion_metrics = no_metrics
    parser = FlexibleArgumentParser()
    serve.add_cli_args(parser)
    args = parser.parse_args(
        FLAGS
        + [
            "--model",
            sim["model_id"],
            "--num-prompts",
            str(n),
            "--result-dir",
            str(out_dir),
            "--result-filename",
            "vllm_result.json",
        ]
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    serve.main(args)
    return out_dir / "vllm_result.json"


if __name__ == "__main__":
    print(run(Path(sys.argv[1]), Path(sys.argv[2])))
