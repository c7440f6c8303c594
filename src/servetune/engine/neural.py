"""A small neural priority score: an MLP over what the engine knows at scheduling time.

The score of an entry at time t is the linear score (order.priority_score, the w_* weights)
plus a one-hidden-layer network over normalized request and engine features:

    score = linear(e, t, pol) + w2 . tanh(W1^T x + b1) + b2,   x_f = raw_f / SCALE_f

so the family contains the linear one (zero output weights) and tuning can start from the best
linear policy. The network's weights are one flat traced vector, `PolicyParams.score_net` [W],
laid out as W1 [F, H] (row-major), b1 [H], w2 [H], b2 [1] with W = H (F + 2) + 1; the hidden
width H follows from W, so changing weights never recompiles (a different H does). Features
never include the true output length: only the predicted one.

The forward pass is a flax.linen module applied to parameters sliced from the flat vector, so
the same vector drives the simulator, the ES tuner (a point of the search space) and the
exported dependency-free gateway function (neural_export.py). Weights are read from a list
or a score_net.json by neural_weights.py.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from servetune.core.errors import ConfigError
from servetune.core.types import RUNNING, WAITING, Entries, PolicyParams

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
        raise ConfigError(
            f"policy.score_net: {n} weights; expected H x {n_features + 2} + 1 for "
            f"a hidden width H >= 1 ({n_features} features)"
        )
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
    return {
        "params": {
            "hidden": {"kernel": w[: f * h].reshape(f, h), "bias": w[f * h : f * h + h]},
            "out": {"kernel": w[f * h + h : f * h + 2 * h].reshape(h, 1), "bias": w[-1:]},
        }
    }


def init_weights(hidden: int, seed: int = 0, out_scale: float = 0.0) -> np.ndarray:
    """Flat weights [W]: flax's default (LeCun-normal) hidden layer from `seed`, and output
    weights LeCun-normal times out_scale (0: the network adds nothing until tuned)."""
    p = ScoreMLP(hidden).init(jax.random.PRNGKey(seed), jnp.zeros((1, N_FEATURES)))["params"]
    p = jax.tree.map(lambda x: np.asarray(x, np.float64), p)
    out = p["out"]["kernel"].reshape(-1) * out_scale
    return np.concatenate(
        [p["hidden"]["kernel"].reshape(-1), p["hidden"]["bias"].reshape(-1), out, np.zeros(1)]
    )


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
    cols = [
        age,
        e.prompt / 1000.0,
        pred / 1000.0,
        slack,
        started.astype(age.dtype),
        e.generated / jnp.maximum(pred, 1.0),
        e.computed / 1000.0,
        (e.status == RUNNING).astype(age.dtype),
    ]
    cols += [
        jnp.broadcast_to(x / s, age.shape).astype(age.dtype)
        for x, s in ((n_waiting, 1.0), (n_running, 1.0), (kv_used, 1000.0))
    ]
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
