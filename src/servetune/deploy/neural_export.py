"""A tuned neural score for deployment: score_net.json (features, scales, layer weights, the
linear part) and priority.py, a dependency-free function a gateway calls to set each request's
vLLM priority."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from servetune.core.files import ensure_dir, write_json, write_text
from servetune.engine.neural import FEATURE_NAMES, FEATURES, N_FEATURES, SCALES, hidden_of

FILES = ("score_net.json", "priority.py")  # what export_score_net writes


def spec(w: Sequence[float], linear: dict, ttft_target_s: float) -> dict:
    """The content of score_net.json: features (names, units, scales), the layer weights and the
    linear part, enough to recompute the score anywhere."""
    w = np.asarray(w, np.float64)
    f, h = N_FEATURES, hidden_of(len(w))
    return {
        "format": "servetune.score_net/1",
        "score": "linear + w2 . tanh(W1^T (x / scale) + b1) + b2; higher is served first",
        "linear": {
            "w_age": linear["w_age"],
            "w_prompt": linear["w_prompt"],
            "w_pred": linear["w_pred"],
            "w_slack": linear["w_slack"],
            "formula": "w_age*age_s - w_prompt*prompt_ktok - w_pred*pred_ktok - "
            "w_slack*ttft_slack_s",
        },
        "ttft_target_s": ttft_target_s,
        "features": {
            "names": list(FEATURE_NAMES),
            "units": [u for _, u, _ in FEATURES],
            "scale": SCALES.tolist(),
        },
        "hidden": h,
        "W1": w[: f * h].reshape(f, h).tolist(),
        "b1": w[f * h : f * h + h].tolist(),
        "w2": w[f * h + h : f * h + 2 * h].tolist(),
        "b2": float(w[-1]),
        "flat": w.tolist(),
    }


PRIORITY_SCALE = 10**6  # priority = round(-PRIORITY_SCALE x score): lower is served first

_TEMPLATE = '''"""Request priority for vLLM's priority scheduling (--scheduling-policy priority),
from a servetune neural score (generated; do not edit: regenerate from score_net.json).

A gateway calls priority(request, engine) when it forwards a request and sends the result as
the request's "priority" (vLLM serves lower values first; ties by arrival). Dependency-free.

request: prompt_tokens, predicted_output_tokens (an output-length predictor's estimate; never
  the true length), and optionally age_s (seconds since arrival, default 0 = at submission),
  generated_tokens and computed_tokens (default 0), running (default False).
engine: num_waiting, num_running (vllm:num_requests_waiting / _running) and kv_blocks_used
  (vllm:gpu_cache_usage_perc x num_gpu_blocks).
Caveat: the simulator re-scores every request at every iteration; vLLM keeps the priority a
request was submitted with, so the deployed order equals the simulated one only while the
network's ranking does not change as requests age.
"""

import math

TTFT_TARGET_S = {ttft!r}
LINEAR = {linear!r}
SCALE = {scale!r}
W1 = {W1!r}
B1 = {b1!r}
W2 = {w2!r}
B2 = {b2!r}
PRIORITY_SCALE = {pscale!r}


def features(request, engine):
    """The network's raw inputs, in the order of score_net.json's features.names."""
    age = float(request.get("age_s", 0.0))
    generated = float(request.get("generated_tokens", 0))
    pred = float(request["predicted_output_tokens"])
    started = generated > 0
    slack = 0.0 if started else TTFT_TARGET_S - age
    return [age, float(request["prompt_tokens"]) / 1000.0, pred / 1000.0, slack,
            1.0 if started else 0.0, generated / max(pred, 1.0),
            float(request.get("computed_tokens", 0)) / 1000.0,
            1.0 if request.get("running", False) else 0.0,
            float(engine["num_waiting"]), float(engine["num_running"]),
            float(engine["kv_blocks_used"]) / 1000.0]


def score(request, engine):
    """The simulator's score (higher is served first)."""
    x = features(request, engine)
    lin = (LINEAR["w_age"] * x[0] - LINEAR["w_prompt"] * x[1] - LINEAR["w_pred"] * x[2]
           - LINEAR["w_slack"] * x[3])
    xn = [xi / s for xi, s in zip(x, SCALE)]
    out = B2
    for j in range(len(B1)):
        out += W2[j] * math.tanh(B1[j] + sum(xn[i] * W1[i][j] for i in range(len(xn))))
    return lin + out


def priority(request, engine):
    """vLLM priority (int, lower first) = round(-PRIORITY_SCALE x score)."""
    return int(round(-PRIORITY_SCALE * score(request, engine)))
'''


def gateway_source(doc: dict) -> str:
    """priority.py: the dependency-free Python function of score_net.json's content `doc`."""
    return _TEMPLATE.format(
        ttft=float(doc["ttft_target_s"]),
        linear={k: float(doc["linear"][k]) for k in ("w_age", "w_prompt", "w_pred", "w_slack")},
        scale=list(doc["features"]["scale"]),
        W1=doc["W1"],
        b1=doc["b1"],
        w2=doc["w2"],
        b2=doc["b2"],
        pscale=PRIORITY_SCALE,
    )


def export_score_net(out_dir: Path, w, linear: dict, ttft_target_s: float) -> dict[str, Path]:
    """Write score_net.json and priority.py into out_dir; returns {name: path}."""
    out_dir = Path(out_dir)
    ensure_dir(out_dir)
    doc = spec(w, linear, ttft_target_s)
    paths = {name: out_dir / name for name in FILES}
    write_json(paths["score_net.json"], doc, indent=1)
    write_text(paths["priority.py"], gateway_source(doc))
    return paths
