"""Model cascade, host side: pools from config, per-request draws, and cascade metrics.

The engine side (routing by predicted difficulty, retries on the large pool) is
engine/cascade.py. Here:

- `from_config` reads `engine.cascade_small_instances` and the `cascade:` section: the small
  pool's model, GPU, tensor-parallel degree and price (the large pool is `model.*` on
  `hardware.*`), the router's predictor noise, the check latency and the difficulty classes
  metrics are reported by. It builds per-instance cost params (leaves [I]) and refuses what
  the cascade does not support, naming the key.
- Tier quality: the quality model's `tier` component {large, small} (servetune.config.quality) gives
  each tier's extra failure probability at reference difficulty. A request's check uses its
  one common-random-number draw u (quality.draws): it fails on tier T iff u < P(fail | d, T).
  Because delta_small >= delta_large (checked), a request that fails on the large model also
  fails on the small one, and whether its small answer fails is fixed by (request, seed),
  whatever the policy: comparisons across thresholds are paired.
- Predicted difficulty (what the router sees): pred = sigmoid(logit(d) + sigma z), z ~ N(0, 1)
  drawn per request from the scenario seed (its own stream, so it moves neither u nor d).
  It lies strictly inside (0, 1): threshold 0 routes nothing to the small pool and threshold 1
  routes everything there. sigma = 0 is a perfect predictor.

Default tier deltas (`DEFAULT_TIER`, an assumption from published benchmark gaps, read as
"extra fraction of requests failing"): Meta's Llama 3 model card (instruction-tuned, April
2024) reports Llama-3-8B-Instruct vs Llama-3-70B-Instruct at MMLU 68.4 vs 82.0, GPQA 34.2 vs
39.5, HumanEval 62.2 vs 81.7, GSM-8K 79.6 vs 93.0, MATH 30.0 vs 50.4: a mean gap of about 14
points. So the small tier defaults to delta 0.15 against the large model (delta 0: the large
model is the reference, as 16-bit weights are for quantization). Calibrate with your own pass
rates per tier (quality.components.tier).
"""

from __future__ import annotations

import dataclasses
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from servetune.config import hardware, settings
from servetune.config.quality import QualityModel, QualitySpec
from servetune.core import streams
from servetune.core.errors import ConfigError
from servetune.core.types import TIER_LARGE, TIER_RETRIED, TIER_SMALL, CostParams

DEFAULT_TIER = {"large": 0.0, "small": 0.15}
DEFAULT_BINS = (0.0, 1.0 / 3.0, 2.0 / 3.0, 1.0)
_EPS = 1e-9  # difficulty is clipped to [eps, 1 - eps] before the logit


@dataclasses.dataclass(frozen=True)
class CascadeSpec:
    """A built cascade: pool sizes and what the metrics need.

    small_instances / large_instances: instances per pool; *_gpus: GPUs per instance (TP);
    *_price: USD per GPU-hour; *_kv_blocks: KV blocks per instance; *_model: model names;
    noise: logit-scale sigma of the difficulty predictor; check_latency_s: seconds from a small
    answer's end to its check's verdict; bins: difficulty class edges (ascending, 0 .. 1);
    class_names: one per bin."""

    small_instances: int
    large_instances: int
    small_gpus: int
    large_gpus: int
    small_price: float
    large_price: float
    small_kv_blocks: int
    large_kv_blocks: int
    small_model: str
    large_model: str
    noise: float
    check_latency_s: float
    bins: tuple
    class_names: tuple
    small_work: hardware.ModelWork | None = None  # the small model on its GPUs (utilization)

    @property
    def n_gpus(self) -> int:
        """GPUs provisioned in both pools."""
        return self.small_instances * self.small_gpus + self.large_instances * self.large_gpus

    @property
    def price_per_gpu_hour(self) -> float:
        """The GPU-weighted mean price (USD per GPU-hour): n_gpus x it = the fleet's $/hour."""
        usd_h = (
            self.small_instances * self.small_gpus * self.small_price
            + self.large_instances * self.large_gpus * self.large_price
        )
        return usd_h / self.n_gpus

    def kv_blocks(self) -> np.ndarray:
        """[I] KV blocks of each instance (small pool first)."""
        return np.asarray(
            [self.small_kv_blocks] * self.small_instances
            + [self.large_kv_blocks] * self.large_instances
        )


# --------------------------------------------------------------------------- draws


def predicted_difficulty(difficulty, sigma: float, seed: int) -> np.ndarray:
    """[N] the router's difficulty estimates in (0, 1): sigmoid(logit(d) + sigma z), z standard
    normal from the seed's predictor stream."""
    d = np.clip(np.asarray(difficulty, np.float64), _EPS, 1.0 - _EPS)
    z = streams.rng(seed, streams.CASCADE_PRED).standard_normal(len(d))
    x = np.log(d) - np.log1p(-d) + sigma * z
    return np.clip(1.0 / (1.0 + np.exp(-x)), 1e-12, 1.0 - 1e-12)


def fails(quality: QualitySpec, difficulty, u, tier: str) -> np.ndarray:
    """[N] whether each request's answer from `tier` ("small" or "large") fails its check:
    u < P(fail | difficulty, the scenario's precision, tier)."""
    setting = {**quality.setting, "tier": tier}
    return np.asarray(u) < quality.model.failure_prob(difficulty, setting)


def with_draws(trace, quality: QualitySpec, spec: CascadeSpec, seed: int):
    """The trace with its cascade draws: predicted difficulty and small-answer failures
    (needs the trace's difficulty and quality_u, set by scenario.build)."""
    return dataclasses.replace(
        trace,
        cascade_pred=predicted_difficulty(trace.difficulty, spec.noise, seed),
        cascade_fail=fails(quality, trace.difficulty, trace.quality_u, "small"),
    )


# --------------------------------------------------------------------------- config


def _bins(cfg) -> tuple[tuple, tuple]:
    raw = settings.get(cfg, "cascade.difficulty_bins")
    if raw is None:
        return DEFAULT_BINS, ("easy", "medium", "hard")
    edges = list(raw) if not isinstance(raw, (str, int, float)) else None
    if (
        not edges
        or len(edges) < 2
        or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in edges)
        or edges[0] != 0
        or edges[-1] != 1
        or any(b <= a for a, b in itertools.pairwise(edges))
    ):
        raise ConfigError(
            f"cascade.difficulty_bins: got {raw!r}; expected ascending edges from "
            f"0 to 1, e.g. [0, 0.333, 0.667, 1] (easy, medium, hard)"
        )
    edges = tuple(float(v) for v in edges)
    names = (
        ("easy", "medium", "hard")
        if len(edges) == 4
        else tuple(f"d{a:g}-{b:g}" for a, b in itertools.pairwise(edges))
    )
    return edges, names


def tier_quality(quality: QualitySpec | None) -> QualitySpec:
    """The quality spec with a `tier` component (DEFAULT_TIER unless quality.components.tier
    is given). ConfigError when the quality model is off: the cascade needs it."""
    if quality is None:
        raise ConfigError(
            "quality.enabled: false, but engine.cascade_small_instances > 0 needs "
            "the quality model (the small tier's answers are checked); enable it"
        )
    comps = {c: dict(t) for c, t in quality.model.components.items()}
    tier = comps.setdefault("tier", dict(DEFAULT_TIER))
    if set(tier) != {"large", "small"}:
        raise ConfigError(
            f"quality.components.tier: got levels {sorted(tier)}; expected exactly large and small"
        )
    if tier["small"] < tier["large"]:
        raise ConfigError(
            f"quality.components.tier.small: got {tier['small']}, below "
            f"tier.large = {tier['large']}; expected the small model to fail at "
            f"least as often"
        )
    model = QualityModel(
        components=comps,
        base_fail=quality.model.base_fail,
        difficulty_exponent=quality.model.difficulty_exponent,
    )
    return dataclasses.replace(quality, model=model)


def from_config(
    cfg,
    *,
    n_instances: int,
    large_gpu,
    large_model,
    large_tp: int,
    large_price: float,
    large_cost: CostParams,
    large_kv_blocks: int,
    kv_args: dict,
    gpu_figures: dict | None,
    incompatible: dict,
):
    """(CascadeSpec, cost params with leaves [I], small instances S) from the config, or
    (None, large_cost, 0) when engine.cascade_small_instances is 0.

    kv_args: the keyword arguments hardware.kv_capacity_blocks got for the large pool (the
    small pool's capacity uses the same memory settings); gpu_figures: the roofline
    efficiencies and overheads (None with cost.form=linear, which the cascade refuses);
    incompatible: {config key: whether it is on} of mechanisms the cascade does not combine
    with. Every problem raises ConfigError naming its key."""
    small_n = settings.number(
        cfg, "engine.cascade_small_instances", lo=0, hi=n_instances, integer=True, default=0
    )
    if small_n == 0:
        return None, large_cost, 0
    if small_n >= n_instances:
        raise ConfigError(
            f"engine.cascade_small_instances: got {small_n} of engine.n_instances"
            f" = {n_instances}; expected fewer, so that the large pool has at "
            f"least one instance"
        )
    for key, on in incompatible.items():
        if on:
            raise ConfigError(
                f"{key}: not supported together with "
                f"engine.cascade_small_instances > 0 (a model cascade); turn one "
                f"of them off"
            )
    if gpu_figures is None:
        raise ConfigError(
            "cost.form: the model cascade needs cost.form=roofline (each pool's "
            "step time comes from its own model and GPU)"
        )
    sel = lambda k, d=None: settings.get(cfg, k, d)
    small_model = hardware.lookup(
        hardware.MODELS, sel("cascade.small_model", "llama3_8b"), "cascade.small_model"
    )
    if small_model.params >= large_model.params:
        raise ConfigError(
            f"cascade.small_model: {small_model.name} is not smaller than the "
            f"large pool's model.name {large_model.name}"
        )
    gpu_name = sel("cascade.small_gpu")
    small_gpu = (
        large_gpu
        if gpu_name is None
        else hardware.lookup(hardware.GPUS, gpu_name, "cascade.small_gpu")
    )
    small_tp = settings.number(cfg, "cascade.small_tp", lo=1, hi=1024, integer=True, default=1)
    price = settings.number(cfg, "cascade.small_price_per_gpu_hour", lo=0, hi=1e6, allow_none=True)
    small_price = small_gpu.price_per_gpu_hour if price is None else price
    hardware.check_price(small_price, "cascade.small_price_per_gpu_hour")
    try:
        small_kv = hardware.kv_capacity_blocks(
            small_gpu, small_model, **{**kv_args, "tp": small_tp}
        )
    except ConfigError as err:  # name the cascade's keys, not the large pool's
        raise ConfigError(
            f"cascade.small_tp: the small pool ({small_model.name} on "
            f"{small_tp} x {small_gpu.name}): {err}"
        ) from None
    small_cost = hardware.roofline_cost_params(
        small_gpu,
        small_model,
        tp=small_tp,
        weight_bits=kv_args["weight_bits"],
        kv_bits=kv_args["kv_bits"],
        kv_blocks=small_kv,
        **gpu_figures,
    )
    check_s = settings.number(cfg, "cascade.check_latency_s", lo=0, hi=1e9, default=0.0)
    noise = settings.number(cfg, "cascade.difficulty_noise", lo=0, hi=100, default=0.5)
    bins, names = _bins(cfg)
    large_n = n_instances - small_n
    spec = CascadeSpec(
        small_instances=small_n,
        large_instances=large_n,
        small_gpus=small_tp,
        large_gpus=large_tp,
        small_price=float(small_price),
        large_price=float(large_price),
        small_kv_blocks=int(small_kv),
        large_kv_blocks=int(large_kv_blocks),
        small_model=small_model.name,
        large_model=large_model.name,
        noise=noise,
        check_latency_s=check_s,
        bins=bins,
        class_names=names,
        small_work=hardware.model_work(
            small_gpu,
            small_model,
            tp=small_tp,
            weight_bits=kv_args["weight_bits"],
            kv_bits=kv_args["kv_bits"],
        ),
    )
    stacked = jax.tree.map(
        lambda s, lg: jnp.concatenate(
            [
                jnp.broadcast_to(jnp.asarray(s), (small_n,)),
                jnp.broadcast_to(jnp.asarray(lg), (large_n,)),
            ]
        ),
        small_cost.replace(check_latency_s=jnp.asarray(check_s, jnp.float64)),
        large_cost.replace(check_latency_s=jnp.asarray(check_s, jnp.float64)),
    )
    return spec, stacked, small_n


# --------------------------------------------------------------------------- metrics


def request_columns(trace, tier: np.ndarray, quality: QualitySpec) -> dict:
    """Per-request cascade columns ([N] each) for the request table: the tier it was routed to
    (`routed`: small / large / none if never routed), whether it was retried on the large pool,
    whether its small answer fails (`small_fails`, the router's ground truth), the router's
    predicted difficulty, and `quality_ok`: whether its final answer (small if its small answer
    stood, else large) passes."""
    d, u = trace.difficulty, trace.quality_u
    small_ok = ~np.asarray(trace.cascade_fail)
    large_ok = ~fails(quality, d, u, "large")
    final_small = tier == TIER_SMALL
    routed = np.where(
        tier < 0, "none", np.where((tier == TIER_SMALL) | (tier == TIER_RETRIED), "small", "large")
    )
    return {
        "routed": routed.astype(object),
        "retried": tier == TIER_RETRIED,
        "small_fails": ~small_ok,
        "predicted_difficulty": trace.cascade_pred,
        "quality_ok": np.where(final_small, small_ok, large_ok),
    }


def _router(c: pd.DataFrame) -> dict:
    routed = c[c["routed"] != "none"]
    small = (routed["routed"] == "small").to_numpy()
    bad = routed["small_fails"].to_numpy()
    n = len(routed)
    counts = {
        "small_passed": int((small & ~bad).sum()),
        "small_failed": int((small & bad).sum()),
        "large_needed": int((~small & bad).sum()),
        "large_unneeded": int((~small & ~bad).sum()),
    }
    correct = counts["small_passed"] + counts["large_needed"]
    return {
        "router_accuracy": correct / n if n else float("nan"),
        "confusion": counts,
        "small_share": float(small.mean()) if n else float("nan"),
        "retry_rate": counts["small_failed"] / n if n else float("nan"),
    }


def metrics(table: pd.DataFrame, window_s: float, spec: CascadeSpec, busy_s, sim_s: float) -> dict:
    """Cascade metrics over the counted requests of a request table (with request_columns):

    cascade_router_accuracy: fraction of routed requests sent to the tier that was right for
      them (small when the small answer passes, large when it would fail);
    cascade_confusion: counts small_passed, small_failed (= retries), large_needed,
      large_unneeded; cascade_small_share: fraction routed to the small pool;
    cascade_retry_rate: retried (small answer failed, served again on large) / routed;
    cascade_retries: retries that reached the large pool (all requests, warm-up included);
    cascade_quality_pass_rate: completed requests whose final answer passes / completed;
    cascade_utilization_small / _large: busy time over provisioned time, per pool;
    busy_s: [I] busy seconds per instance; sim_s: simulated seconds.
    by_difficulty: per difficulty class (spec.bins): n_requests, goodput_rps, slo_attainment,
      useful_tokens, quality_pass_rate, retry_rate, small_share, router_accuracy."""
    c = table[table["counted"].to_numpy()]
    done = c["end_state"].to_numpy() == "completed"
    out = {f"cascade_{k}": v for k, v in _router(c).items()}
    out["cascade_retries"] = int(table["retried"].sum())
    out["cascade_quality_pass_rate"] = (
        float(c["quality_ok"].to_numpy()[done].mean()) if done.any() else float("nan")
    )
    busy = np.asarray(busy_s, np.float64)  # [I] seconds each instance spent in iterations
    s = spec.small_instances
    for name, part in (("small", busy[:s]), ("large", busy[s:])):
        out[f"cascade_utilization_{name}"] = (
            float(part.sum() / (sim_s * len(part))) if sim_s > 0 else float("nan")
        )
    d = c["difficulty"].to_numpy()
    klass = np.clip(
        np.searchsorted(np.asarray(spec.bins), d, side="right") - 1, 0, len(spec.class_names) - 1
    )
    by = {}
    for k, name in enumerate(spec.class_names):
        sub = c[klass == k]
        fin = sub["end_state"].to_numpy() == "completed"
        q = sub["qualifies"].to_numpy()
        r = _router(sub)
        by[name] = {
            "difficulty_range": (spec.bins[k], spec.bins[k + 1]),
            "n_requests": len(sub),
            "goodput_rps": float(q.sum()) / window_s,
            "slo_attainment": float(q.mean()) if len(sub) else float("nan"),
            "useful_tokens": float(sub["output_tokens"].to_numpy()[q].sum()),
            "quality_pass_rate": (
                float(sub["quality_ok"].to_numpy()[fin].mean()) if fin.any() else float("nan")
            ),
            "retry_rate": r["retry_rate"],
            "small_share": r["small_share"],
            "router_accuracy": r["router_accuracy"],
        }
    out["by_difficulty"] = by
    return out


TIERS = {TIER_LARGE: "large", TIER_SMALL: "small", TIER_RETRIED: "retried"}
