"""Small builders for tests: scenarios from literal request lists, linear costs, run helpers."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from servetune import hardware
from servetune.driver import rollout
from servetune.loop import step_trace
from servetune.metrics import MetricsSpec
from servetune.policy import make_policy
from servetune.scenario import stack_workloads
from servetune.types import Params
from servetune.workload import RequestTrace


def trace_of(requests, name="test", priority=None) -> RequestTrace:
    """A RequestTrace from [(arrival_s, prompt_tokens, output_tokens), ...], with per-request
    `priority` (vLLM's, lower first) when given."""
    a = np.asarray(requests, dtype=np.float64).reshape(-1, 3)
    return RequestTrace(name, a[:, 0], a[:, 1].astype(np.int32), a[:, 2].astype(np.int32),
                        priority=None if priority is None else np.asarray(priority, np.int32))


def linear_params(policy=None, *, base_s=1.0, per_prefill_token_s=0.0, per_decode_seq_s=0.0,
                  per_ctx_token_s=0.0, kv_blocks=10_000, order="fcfs") -> Params:
    """Params with a linear cost model; policy values may be lists (a batch axis)."""
    pol = make_policy(policy or {}, order=order)
    cost = hardware.linear_cost_params(base_s=base_s, per_prefill_token_s=per_prefill_token_s,
                                       per_decode_seq_s=per_decode_seq_s,
                                       per_ctx_token_s=per_ctx_token_s, kv_blocks=kv_blocks)
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
        toks = {int(r): int(n) for r, n in zip(info["req"][k], info["tokens"][k]) if n > 0}
        if toks:
            out.append((round(float(info["t"][k]), 9), round(float(info["dur"][k]), 9), toks))
    return out


def spec(kv_blocks=10_000, **kw) -> MetricsSpec:
    base = {"slo_ttft_s": None, "slo_tpot_s": None, "slo_e2e_s": None, "warmup_s": 0.0,
                "price_per_gpu_hour": 1.0, "n_gpus": 1, "kv_blocks": kv_blocks}
    base.update(kw)
    return MetricsSpec(**base)
