"""A small neural priority score: an MLP over what the engine knows at scheduling time.

The score of an entry at time t is the linear score (policy.priority_score, the w_* weights)
plus a one-hidden-layer network over normalized request and engine features:

    score = linear(e, t, pol) + w2 . tanh(W1^T x + b1) + b2,   x_f = raw_f / SCALE_f

so the family contains the linear one (zero output weights) and tuning can start from the best
linear policy. The network's weights are one flat traced vector, `PolicyParams.score_net` [W],
laid out as W1 [F, H] (row-major), b1 [H], w2 [H], b2 [1] with W = H (F + 2) + 1; the hidden
width H follows from W, so changing weights never recompiles (a different H does). Features
never include the true output length: only the predicted one.

The forward pass is a flax.linen module applied to parameters sliced from the flat vector, so
the same vector drives the simulator, the ES tuner (a point of the search space) and the
exported dependency-free gateway function (export_score_net).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from servetune import inputs
from servetune.errors import ConfigError
from servetune.files import ensure_dir, write_json, write_text
from servetune.types import RUNNING, WAITING, Entries, PolicyParams

# (name, unit, scale): the network sees raw / scale. Request features come first, then engine
# features (the same for every request of an iteration: they change the ranking only through
# the nonlinearity, e.g. "prefer short prompts when the queue is long").
FEATURES: tuple[tuple[str, str, float], ...] = (
    ("age_s", "seconds since arrival", 10.0),
    ("prompt_ktok", "prompt tokens / 1000", 1.0),
    ("pred_ktok", "predicted output tokens / 1000", 1.0),
    ("ttft_slack_s", "ttft_target_s - age_s before the first token, else 0 (seconds)", 2.0),
    ("started", "1 if the first output token was emitted, else 0", 1.0),
    ("progress", "output tokens emitted / max(predicted output tokens, 1)", 1.0),
    ("computed_ktok", "tokens whose KV is computed (prompt + output so far) / 1000", 1.0),
    ("running", "1 if running (holds KV blocks), 0 if waiting", 1.0),
    ("n_waiting", "requests waiting in the engine's queue (the scheduler's window)", 100.0),
    ("n_running", "requests running in the engine", 100.0),
    ("kv_used_kblocks", "KV-cache blocks in use / 1000", 10.0),
)
N_FEATURES = len(FEATURES)
FEATURE_NAMES = tuple(f[0] for f in FEATURES)
SCALES = np.array([f[2] for f in FEATURES])


def n_weights(hidden: int, n_features: int = N_FEATURES) -> int:
    """Length W of the flat weight vector of an MLP with `hidden` tanh units."""
    return hidden * (n_features + 2) + 1


def hidden_of(n: int, n_features: int = N_FEATURES) -> int:
    """Hidden width H of a flat weight vector of length n (ConfigError if none fits)."""
    h, rem = divmod(n - 1, n_features + 2)
    if n < 1 or rem or h < 1:
        raise ConfigError(f"policy.score_net: {n} weights; expected H x {n_features + 2} + 1 for "
                          f"a hidden width H >= 1 ({n_features} features)")
    return h


class ScoreMLP(nn.Module):
    """features [..., F] (normalized) -> score [...]: Dense(H) -> tanh -> Dense(1)."""

    hidden: int

    @nn.compact
    def __call__(self, x):
        h = jnp.tanh(nn.Dense(self.hidden, name="hidden")(x))
        return nn.Dense(1, name="out")(h)[..., 0]


def unflatten(w, n_features: int = N_FEATURES) -> dict:
    """The flax parameter tree of flat weights w [W]."""
    hidden = hidden_of(w.shape[-1], n_features)
    f, h = n_features, hidden
    return {"params": {
        "hidden": {"kernel": w[:f * h].reshape(f, h), "bias": w[f * h:f * h + h]},
        "out": {"kernel": w[f * h + h:f * h + 2 * h].reshape(h, 1), "bias": w[-1:]}}}


def init_weights(hidden: int, seed: int = 0, out_scale: float = 0.0) -> np.ndarray:
    """Flat weights [W]: flax's default (LeCun-normal) hidden layer from `seed`, and output
    weights LeCun-normal times out_scale (0: the network adds nothing until tuned)."""
    p = ScoreMLP(hidden).init(jax.random.PRNGKey(seed), jnp.zeros((1, N_FEATURES)))["params"]
    p = jax.tree.map(lambda x: np.asarray(x, np.float64), p)
    out = p["out"]["kernel"].reshape(-1) * out_scale
    return np.concatenate([p["hidden"]["kernel"].reshape(-1), p["hidden"]["bias"].reshape(-1),
                           out, np.zeros(1)])


def features(e: Entries, t, pol: PolicyParams, kv_used=None):
    """Raw (unnormalized) features [A, F] of the entries at time t, in FEATURES order.

    kv_used: KV blocks in use (default: the blocks the entries hold)."""
    age = t - e.arrival
    started = e.generated > 0
    slack = jnp.where(started, 0.0, pol.ttft_target_s - age)
    pred = e.predicted
    n_waiting = jnp.sum(e.status == WAITING)
    n_running = jnp.sum(e.status == RUNNING)
    kv_used = jnp.sum(e.blocks) if kv_used is None else kv_used
    cols = [age, e.prompt / 1000.0, pred / 1000.0, slack, started.astype(age.dtype),
            e.generated / jnp.maximum(pred, 1.0), e.computed / 1000.0,
            (e.status == RUNNING).astype(age.dtype)]
    cols += [jnp.broadcast_to(x / s, age.shape).astype(age.dtype)
             for x, s in ((n_waiting, 1.0), (n_running, 1.0), (kv_used, 1000.0))]
    x = jnp.stack(cols, axis=-1)
    return jnp.where(jnp.isfinite(x), x, 0.0)  # empty entries (arrival inf) score 0


def net_score(x, w):
    """The network's part of the score for raw features x [..., F] and flat weights w [W]."""
    hidden = hidden_of(w.shape[-1], x.shape[-1])
    return ScoreMLP(hidden).apply(unflatten(w, x.shape[-1]), x / jnp.asarray(SCALES))


def neural_score(e: Entries, t, pol: PolicyParams, linear):
    """linear [A] (the linear score) plus the network's score of each entry, shape [A]."""
    score = linear + net_score(features(e, t, pol), pol.score_net)
    return jnp.where(jnp.isfinite(score), score, 0.0)


def load(value) -> np.ndarray:
    """Flat weights from a list of numbers or the path of an exported score_net.json."""
    if isinstance(value, (str, Path)):
        path = Path(value)
        try:
            doc = json.loads(inputs.read_bytes(path, "score_net.json", ConfigError))
        except ConfigError as err:
            raise ConfigError(f"policy.score_net: {err}") from None
        except ValueError as err:
            raise ConfigError(f"policy.score_net: cannot read {path}: {err}") from None
        if not isinstance(doc, dict):
            raise ConfigError(f"policy.score_net: {path} holds a JSON {type(doc).__name__}; "
                              f"expected the object `servetune tune` exports")
        if list(doc.get("features", {}).get("names", [])) != list(FEATURE_NAMES):
            raise ConfigError(f"policy.score_net: {path} has features "
                              f"{doc.get('features', {}).get('names')}; this servetune "
                              f"computes {list(FEATURE_NAMES)}")
        value = doc.get("flat")
    try:
        w = np.asarray(value, np.float64)
    except (TypeError, ValueError):
        raise ConfigError(f"policy.score_net: got {value!r}; expected a list of numbers or "
                          f"the path of a score_net.json") from None
    if w.ndim < 1 or not np.isfinite(w).all():
        raise ConfigError(f"policy.score_net: expected finite numbers, got shape {w.shape}")
    hidden_of(w.shape[-1])
    return w


# ---------------------------------------------------------------- export (dependency-free)

def spec(w: Sequence[float], linear: dict, ttft_target_s: float) -> dict:
    """The content of score_net.json: features (names, units, scales), the layer weights and the
    linear part, enough to recompute the score anywhere."""
    w = np.asarray(w, np.float64)
    f, h = N_FEATURES, hidden_of(len(w))
    return {
        "format": "servetune.score_net/1",
        "score": "linear + w2 . tanh(W1^T (x / scale) + b1) + b2; higher is served first",
        "linear": {"w_age": linear["w_age"], "w_prompt": linear["w_prompt"],
                   "w_pred": linear["w_pred"], "w_slack": linear["w_slack"],
                   "formula": "w_age*age_s - w_prompt*prompt_ktok - w_pred*pred_ktok - "
                              "w_slack*ttft_slack_s"},
        "ttft_target_s": ttft_target_s,
        "features": {"names": list(FEATURE_NAMES), "units": [u for _, u, _ in FEATURES],
                     "scale": SCALES.tolist()},
        "hidden": h,
        "W1": w[:f * h].reshape(f, h).tolist(),
        "b1": w[f * h:f * h + h].tolist(),
        "w2": w[f * h + h:f * h + 2 * h].tolist(),
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
    return _TEMPLATE.format(ttft=float(doc["ttft_target_s"]),
                            linear={k: float(doc["linear"][k]) for k in
                                    ("w_age", "w_prompt", "w_pred", "w_slack")},
                            scale=list(doc["features"]["scale"]), W1=doc["W1"], b1=doc["b1"],
                            w2=doc["w2"], b2=doc["b2"], pscale=PRIORITY_SCALE)


def export_score_net(out_dir: Path, w, linear: dict, ttft_target_s: float) -> dict[str, Path]:
    """Write score_net.json and priority.py into out_dir; returns {name: path}."""
    out_dir = Path(out_dir)
    ensure_dir(out_dir)
    doc = spec(w, linear, ttft_target_s)
    paths = {"score_net.json": out_dir / "score_net.json", "priority.py": out_dir / "priority.py"}
    write_json(paths["score_net.json"], doc, indent=1)
    write_text(paths["priority.py"], gateway_source(doc))
    return paths
