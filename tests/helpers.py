"""Small builders for tests: scenarios from literal request lists, linear costs, run helpers."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from servetune.config import hardware
from servetune.config.metrics_spec import MetricsSpec
from servetune.config.policy import make_policy
from servetune.config.scenario import stack_workloads
from servetune.core.types import EngineConfig, Params
from servetune.engine.loop import step_trace
from servetune.run.driver import rollout
from servetune.workload.traces import RequestTrace


def trace_of(requests, name="test", priority=None) -> RequestTrace:
    """A RequestTrace from [(arrival_s, prompt_tokens, output_tokens), ...], with per-request
    `priority` (vLLM's, lower first) when given."""
    a = np.asarray(requests, dtype=np.float64).reshape(-1, 3)
    return RequestTrace(
        name,
        a[:, 0],
        a[:, 1].astype(np.int32),
        a[:, 2].astype(np.int32),
        priority=None if priority is None else np.asarray(priority, np.int32),
    )


def linear_params(
    policy=None,
    *,
    base_s=1.0,
    per_prefill_token_s=0.0,
    per_decode_seq_s=0.0,
    per_ctx_token_s=0.0,
    kv_blocks=10_000,
    order="fcfs",
) -> Params:
    """Params with a linear cost model; policy values may be lists (a batch axis)."""
    pol = make_policy(policy or {}, order=order)
    cost = hardware.linear_cost_params(
        base_s=base_s,
        per_prefill_token_s=per_prefill_token_s,
        per_decode_seq_s=per_decode_seq_s,
        per_ctx_token_s=per_ctx_token_s,
        kv_blocks=kv_blocks,
    )
    shape = jnp.shape(pol.max_num_seqs)
    cost = jax.tree.map(lambda x: jnp.broadcast_to(x, shape), cost)
    return Params(policy=pol, cost=cost)


def batched(params: Params) -> Params:
    """Give scalar params a leading batch axis of 1."""
    return jax.tree.map(lambda x: jnp.reshape(x, (-1,)) if jnp.ndim(x) == 0 else x, params)


def run(traces, params: Params, cfg, drain_s=1e6, predicted=None):
    """Roll out traces [S] x params [P]; returns results[s][p] (ScenarioResult)."""
    traces = traces if isinstance(traces, list) else [traces]
    preds = predicted or [t.output.astype(np.float64) for t in traces]
    wl = stack_workloads(traces, preds, drain_s, cfg)
    return rollout(wl, batched(params), cfg, [len(t) for t in traces])


def schedule(trace, params: Params, cfg, n_steps=20, drain_s=1e6):
    """Iteration-by-iteration schedule of one scenario: a list of (t, dur, {request: tokens})
    for the iterations that computed something."""
    wl = stack_workloads([trace], [trace.output.astype(np.float64)], drain_s, cfg)
    wl = jax.tree.map(lambda x: x[0], wl)
    _, info = step_trace(wl, params, cfg, n_steps)
    info = jax.device_get(info)
    out = []
    for k in range(n_steps):
        toks = {
            int(r): int(n) for r, n in zip(info["req"][k], info["tokens"][k], strict=True) if n > 0
        }
        if toks:
            out.append((round(float(info["t"][k]), 9), round(float(info["dur"][k]), 9), toks))
    return out


def spec(kv_blocks=10_000, **kw) -> MetricsSpec:
    base = {
        "slo_ttft_s": None,
        "slo_tpot_s": None,
        "slo_e2e_s": None,
        "warmup_s": 0.0,
        "price_per_gpu_hour": 1.0,
        "n_gpus": 1,
        "kv_blocks": kv_blocks,
    }
    base.update(kw)
    return MetricsSpec(**base)


# small engines the invariant, leap, prefix and batched-loop tests run random workloads on
_BASE = {
    "max_slots": 16,
    "queue_window": 16,
    "block_size": 4,
    "max_model_len": 256,
    "cost_form": "linear",
    "outbox": 64,
}
CONFIGS = {
    "continuous-paged": EngineConfig(**_BASE),
    "static-contiguous": EngineConfig(
        **{**_BASE, "batching": "static", "kv_layout": "contiguous", "chunked_prefill": False}
    ),
    "continuous-no-chunking": EngineConfig(**{**_BASE, "chunked_prefill": False}),
}


def random_traces(rng, n_traces=3, n=120):
    """n_traces random traces of n requests: Poisson arrivals with bursts of simultaneous
    ones, prompts of 1-199 and outputs of 1-119 tokens."""
    traces = []
    for _ in range(n_traces):
        rate = rng.uniform(0.5, 8.0)
        arrival = np.cumsum(rng.exponential(1 / rate, n))
        arrival[rng.random(n) < 0.2] = 0  # bursts of simultaneous arrivals
        arrival = np.sort(arrival)
        prompt = rng.integers(1, 200, n)
        output = rng.integers(1, 120, n)
        traces.append(trace_of(np.stack([arrival, prompt, output], 1)))
    return traces


def random_params(rng, p, cfg):
    """p random policies [P] for engine cfg (limits, watermark, queue cap, score weights) with
    a linear cost and a KV capacity where a lone request always fits."""
    need = cfg.max_blocks_per_request
    kv = rng.integers(need + 1, 6 * need, p)
    policy = {
        "max_num_seqs": rng.integers(1, cfg.max_slots + 1, p).astype(float),
        "max_num_batched_tokens": rng.choice([16.0, 64.0, 256.0, 1024.0], p),
        "watermark": rng.uniform(0, 0.2, p) * (need / kv),  # a lone request always fits
        "queue_cap": np.where(rng.random(p) < 0.3, rng.integers(1, 20, p), np.inf),
        "w_age": rng.uniform(-1, 1, p),
        "w_prompt": rng.uniform(-1, 1, p),
        "w_pred": rng.uniform(-1, 1, p),
        "w_slack": rng.uniform(-1, 1, p),
    }
    params = linear_params(
        policy,
        order="parametric",
        base_s=0.01,
        per_prefill_token_s=1e-4,
        per_decode_seq_s=1e-3,
        per_ctx_token_s=1e-6,
        kv_blocks=0,
    )
    return params.replace(cost=params.cost.replace(kv_blocks=jax.numpy.asarray(kv, "int32")))


def assert_export_round_trips(run_dir, out) -> None:
    """`servetune export run_dir` (into `out`) writes the files the run wrote into
    run_dir/export itself, byte for byte, and leaves those as they were."""
    from pathlib import Path

    from servetune.deploy.choose import export_point

    own = Path(run_dir) / "export"
    before = {p.name: p.read_bytes() for p in own.iterdir()}
    export_point(run_dir, out=out)
    again = {p.name: p.read_bytes() for p in Path(out).iterdir()}
    assert sorted(again) == sorted(before)
    for name, data in again.items():
        assert data == before[name], f"{name} differs from the run's own export"
    assert {p.name: p.read_bytes() for p in own.iterdir()} == before
