"""Quality model: the probability that a served request fails its task check.

Serving choices that save memory or time (weight and KV-cache quantization today; a compressed
KV cache for one request, or a smaller model tier in a cascade, later) spend an error budget: some
requests that the reference model (16-bit weights and KV) would have answered correctly now fail
their task check. A failed request does not qualify for goodput, however fast it was served.

The model (host-side numpy, applied to finished runs by `servetune.run.metrics`):

    hazard  L = sum over components c of  -log(1 - delta_c(level_c))   (+ a per-request extra)
    weight  w(d) = (gamma + 1) d^gamma                    d = request difficulty in [0, 1]
    P(fail | d) = 1 - (1 - base_fail) exp(-w(d) L)        (base_fail enters with the same w(d))

- A *component* is one degradation knob and its *levels*: `weight_bits` {16, 8, 4},
  `kv_bits` {16, 8, 4}, or anything a later mechanism names (`tier` {large, small},
  `kv_compression` {none, 2x, 4x}); `delta_c(level)` is the extra failure probability of that
  level for a request of reference difficulty (w(d) = 1). Levels are looked up by their string
  form (`4` and `"4"` are the same level); a level may also be given per request (an array).
- gamma (`difficulty_exponent`) says how much harder requests suffer more: gamma = 0 gives every
  request exactly P = 1 - (1 - base)(1 - delta_1)(1 - delta_2)...; gamma = 1 makes the hazard
  proportional to difficulty (the easiest requests never fail, the hardest at twice the reference
  hazard). w has mean 1 over uniform difficulty, so for small deltas the mean extra failure rate
  over uniform difficulty is about the sum of the deltas (`mean_failure` computes it exactly).
- Independent components multiply survival probabilities (hazards add), so the model needs no
  interaction terms; that is an assumption, not a measured fact.
- `base_fail` is the reference model's own failure rate. It defaults to 0: the metrics measure
  what serving choices cost against the unquantized model, and at 16/16 bits every metric is the
  same as without a quality model.

Common random numbers: each request carries one uniform draw u in [0, 1) fixed by the scenario
seed (not by the precision or the policy), and fails iff u < P(fail). Two precisions or two
policies on the same seed therefore compare paired, and because P grows with the hazard, a
request that fails at 8 bits also fails at 4 (the config check enforces deltas that do not fall
as bits fall).

Default deltas (`DEFAULT_COMPONENTS`, also in conf/config.yaml) -- published accuracy deltas,
read as "extra fraction of requests failing" (an absolute accuracy drop of x points on a
benchmark = x/100 of its items flipped from pass to fail, net):
- 8-bit weights (W8A16, per-channel GPTQ): Neural Magic's Meta-Llama-3-8B-Instruct-quantized.w8a16
  model card: OpenLLM v1 average 68.69 vs 68.54 unquantized (no loss); the 70B w8a16 card:
  77.90 vs 79.18 (-1.3 points, mostly GSM8K -4.4). Default 0.005.
- 4-bit weights (W4A16, GPTQ/AWQ, group size 128): Kurtic et al. 2024, "Give Me BF16 or Give Me
  Death? Accuracy-Performance Trade-Offs in LLM Quantization" (arXiv 2411.02355, ACL 2025) and
  the RedHatAI Meta-Llama-3.1-8B-Instruct-quantized.w4a16 card: 98.9% recovery on OpenLLM v1
  (about -0.8 points), 96.1% on OpenLLM v2, 93.0% on Arena-Hard; Huang et al. 2024, "How Good Are
  Low-bit Quantized LLaMA3 Models?" (arXiv 2404.14047): about a 2% average drop at 4 bits for
  LLaMA3-8B, less for 70B. Default 0.02 (chat-style judged tasks lose more than multiple choice).
- 8-bit KV cache (int8/FP8): reported near lossless (KVQuant, Hooper et al. 2024, arXiv
  2401.18079: < 0.1 perplexity at 4 bits and below that at 8). Default 0.002: an assumption.
- 4-bit KV cache: Liu et al. 2025, "Quantization Hurts Reasoning?" (arXiv 2504.04823) find
  4-bit KV (and W4A16 weights) close to lossless on reasoning benchmarks and 3-bit risky.
  Default 0.01: an assumption on the pessimistic side of those reports.
- gamma = 1: an assumption. Liu et al. 2025 name task difficulty as a determinant of the loss
  (harder benchmarks lose more); no published curve gives its shape.
- Difficulty, when the trace has none: uniform on [0, 1] (an assumption: a neutral prior).
None of these is a measurement of your task: calibrate the deltas with an evaluation of your own
(quantized vs unquantized pass rates on your task check) and set them in `quality.*`.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Mapping

import numpy as np

from servetune.config import settings
from servetune.core import streams
from servetune.core.errors import ConfigError

# Levels in order of increasing degradation, for the components whose order is known: the config
# check requires their deltas not to fall along it (what makes failures monotone in precision).
ORDERED_LEVELS = {"weight_bits": ("16", "8", "4"), "kv_bits": ("16", "8", "4")}

DEFAULT_COMPONENTS = {
    "weight_bits": {"16": 0.0, "8": 0.005, "4": 0.02},
    "kv_bits": {"16": 0.0, "8": 0.002, "4": 0.01},
}
DIFFICULTY_DISTS = ("uniform", "beta", "constant")
_SOURCES = ("auto", "trace", "draw")


@dataclasses.dataclass(frozen=True)
class QualityModel:
    """P(fail | difficulty, degradation setting); see the module docstring for the formula.

    components: {component name: {level (str): delta = extra failure probability at reference
    difficulty, in [0, 1)}}; base_fail: the reference model's own failure probability at
    reference difficulty, in [0, 1); difficulty_exponent: gamma >= 0.
    """

    components: Mapping[str, Mapping[str, float]] = dataclasses.field(
        default_factory=lambda: {c: dict(t) for c, t in DEFAULT_COMPONENTS.items()}
    )
    base_fail: float = 0.0
    difficulty_exponent: float = 1.0

    def hazard(self, setting: Mapping[str, object]):
        """Summed hazard -log(1 - delta) of `setting` {component: level, or [N] levels}.

        A component the setting does not name contributes nothing; a level the model does not
        know raises ConfigError (naming quality.<component>)."""
        total = 0.0
        for comp, level in setting.items():
            table = self.components.get(comp)
            if table is None:
                continue
            lam = {str(k): -math.log1p(-float(v)) for k, v in table.items()}
            levels = np.asarray(level)
            keys = (
                np.vectorize(_level_key, otypes=[object])(levels)
                if levels.ndim
                else _level_key(levels.item())
            )
            missing = set(np.atleast_1d(keys).tolist()) - set(lam)
            if missing:
                raise ConfigError(
                    f"quality.{comp}: no delta for level(s) {sorted(missing)}; "
                    f"expected one of {sorted(lam)}"
                )
            total = total + (
                np.vectorize(lam.__getitem__, otypes=[float])(keys) if levels.ndim else lam[keys]
            )
        return total

    def weight(self, difficulty) -> np.ndarray:
        """w(d) = (gamma + 1) d^gamma: mean 1 over uniform difficulty."""
        g = self.difficulty_exponent
        return (g + 1.0) * np.power(np.asarray(difficulty, np.float64), g)

    def failure_prob(self, difficulty, setting: Mapping[str, object], extra_hazard=0.0):
        """P(fail) per request: difficulty [N] in [0, 1]; setting {component: level or [N]};
        extra_hazard: a further per-request hazard ([N] or scalar >= 0), the hook for
        mechanisms that degrade single requests (-log(1 - delta) of their own delta)."""
        lam = -math.log1p(-self.base_fail) + self.hazard(setting) + np.asarray(extra_hazard)
        return -np.expm1(-self.weight(difficulty) * lam)

    def mean_failure(
        self, setting: Mapping[str, object], dist: DifficultySpec | None = None, n: int = 200_001
    ) -> float:
        """Mean P(fail) over a difficulty distribution (a midpoint grid for uniform and
        constant, n seeded draws for beta)."""
        dist = dist or DifficultySpec()
        d = dist.draw(n, 0) if dist.dist == "beta" else dist.quantile((np.arange(n) + 0.5) / n)
        return float(np.mean(self.failure_prob(d, setting)))


def _level_key(level) -> str:
    """'4' for 4, 4.0 and '4' alike."""
    if isinstance(level, (float, np.floating)) and float(level).is_integer():
        level = int(level)
    return str(level)


@dataclasses.dataclass(frozen=True)
class DifficultySpec:
    """Where request difficulty comes from: `source` auto (the trace's column if it has one,
    else drawn), trace (required from the trace) or draw (always drawn, ignoring the trace);
    `dist` uniform | beta (parameters a, b) | constant (value)."""

    source: str = "auto"
    dist: str = "uniform"
    a: float = 1.0
    b: float = 1.0
    value: float = 0.5

    def quantile(self, q):
        q = np.asarray(q, np.float64)
        if self.dist == "uniform":
            return q
        if self.dist == "constant":
            return np.full_like(q, self.value)
        raise ValueError("no closed-form quantile for beta difficulty; draw() instead")

    def draw(self, n: int, seed: int) -> np.ndarray:
        rng = streams.rng(seed, streams.DIFFICULTY)
        if self.dist == "uniform":
            return rng.random(n)
        if self.dist == "constant":
            return np.full(n, self.value)
        return rng.beta(self.a, self.b, n)


@dataclasses.dataclass(frozen=True)
class QualitySpec:
    """What the metrics need: the model, the scenario's degradation setting (e.g.
    {"weight_bits": 4, "kv_bits": 16}) and where difficulty comes from."""

    model: QualityModel
    setting: Mapping[str, object]
    difficulty: DifficultySpec = DifficultySpec()

    def failure_prob(self, difficulty, extra_hazard=0.0):
        return self.model.failure_prob(difficulty, self.setting, extra_hazard)


def draws(
    n: int, seed: int, spec: DifficultySpec, trace_difficulty=None, name: str = "trace"
) -> tuple[np.ndarray, np.ndarray]:
    """(difficulty [N], u [N]) of one seed: the trace's difficulty (per spec.source) or drawn,
    and the uniform of each request's quality check (common random numbers: fixed by the seed
    alone). Seed s gives the same u whatever the precision, policy or difficulty source."""
    u = streams.rng(seed, streams.QUALITY_U).random(n)
    has = trace_difficulty is not None
    if spec.source == "trace" and not has:
        raise ConfigError(
            f"quality.difficulty.source: 'trace' but {name} has no difficulty "
            f"column; use auto or draw, or add a difficulty column in [0, 1]"
        )
    if has and spec.source != "draw":
        return np.asarray(trace_difficulty, np.float64), u
    return spec.draw(n, seed), u


# --------------------------------------------------------------------------- config


def _num(value, key: str, lo: float, hi: float, *, hi_open: bool = False) -> float:
    return settings.check_number(value, key, lo=lo, hi=hi, hi_open=hi_open)


_KEYS = {
    "enabled",
    "base_fail",
    "difficulty_exponent",
    "difficulty",
    "weight_bits",
    "kv_bits",
    "components",
}
_DIFF_KEYS = {"source", "dist", "a", "b", "value"}


def from_config(section, setting: Mapping[str, object]) -> QualitySpec | None:
    """QualitySpec from the `quality:` config section (a plain dict or None = defaults), or None
    when `quality.enabled` is false. Every bad key raises ConfigError naming it."""
    if section is None:
        section = {}
    if not isinstance(section, Mapping):
        raise ConfigError(f"quality: got {section!r}; expected a mapping of quality.* keys")
    for k in section:
        if k not in _KEYS:
            raise ConfigError(f"quality.{k}: unknown key; expected one of {sorted(_KEYS)}")
    enabled = section.get("enabled", True)
    if not isinstance(enabled, bool):
        raise ConfigError(f"quality.enabled: got {enabled!r}; expected true or false")
    if not enabled:
        return None
    base = _num(section.get("base_fail", 0.0), "quality.base_fail", 0.0, 1.0, hi_open=True)
    gamma = _num(section.get("difficulty_exponent", 1.0), "quality.difficulty_exponent", 0.0, 100.0)
    comps: dict[str, dict[str, float]] = {}
    extra = section.get("components") or {}
    if not isinstance(extra, Mapping):
        raise ConfigError(
            f"quality.components: got {extra!r}; expected a mapping {{component: {{level: delta}}}}"
        )
    named = {
        "weight_bits": section.get("weight_bits", DEFAULT_COMPONENTS["weight_bits"]),
        "kv_bits": section.get("kv_bits", DEFAULT_COMPONENTS["kv_bits"]),
    }
    for comp, table in list(named.items()) + [(f"components.{c}", t) for c, t in extra.items()]:
        key = f"quality.{comp}"
        if not isinstance(table, Mapping) or not table:
            raise ConfigError(
                f"{key}: got {table!r}; expected a mapping {{level: extra failure "
                f"probability in [0, 1)}}"
            )
        out: dict[str, float] = {}
        for level, delta in table.items():
            lk = _level_key(level)
            if lk in out:
                raise ConfigError(f"{key}.{lk}: given twice (as {level!r} and its string form)")
            out[lk] = _num(delta, f"{key}.{lk}", 0.0, 1.0, hi_open=True)
        name = comp.removeprefix("components.")
        order = ORDERED_LEVELS.get(name)
        if order:
            missing = [lv for lv in order if lv not in out]
            if missing:
                raise ConfigError(
                    f"{key}: no delta for level(s) {missing}; expected one for "
                    f"each of {list(order)}"
                )
            for hi_lv, lo_lv in itertools.pairwise(order):
                if out[lo_lv] < out[hi_lv]:
                    raise ConfigError(
                        f"{key}.{lo_lv}: got {out[lo_lv]}, below {key}.{hi_lv} = {out[hi_lv]}; "
                        f"expected deltas that do not fall as precision falls (a request that "
                        f"fails at {hi_lv} bits must also fail at {lo_lv})"
                    )
        comps[name] = out
    dsec = section.get("difficulty") or {}
    if not isinstance(dsec, Mapping):
        raise ConfigError(
            f"quality.difficulty: got {dsec!r}; expected a mapping like "
            f"{{source: auto, dist: uniform}}"
        )
    for k in dsec:
        if k not in _DIFF_KEYS:
            raise ConfigError(
                f"quality.difficulty.{k}: unknown key; expected one of {sorted(_DIFF_KEYS)}"
            )
    source = dsec.get("source", "auto")
    if source not in _SOURCES:
        raise ConfigError(
            f"quality.difficulty.source: got {source!r}; expected one of {list(_SOURCES)}"
        )
    dist = dsec.get("dist", "uniform")
    if dist not in DIFFICULTY_DISTS:
        raise ConfigError(
            f"quality.difficulty.dist: got {dist!r}; expected one of {list(DIFFICULTY_DISTS)}"
        )
    diff = DifficultySpec(
        source=source,
        dist=dist,
        a=_num(dsec.get("a", 1.0), "quality.difficulty.a", 1e-3, 1e3),
        b=_num(dsec.get("b", 1.0), "quality.difficulty.b", 1e-3, 1e3),
        value=_num(dsec.get("value", 0.5), "quality.difficulty.value", 0.0, 1.0),
    )
    model = QualityModel(components=comps, base_fail=base, difficulty_exponent=gamma)
    model.hazard(setting)  # every level of the setting has a delta
    return QualitySpec(model=model, setting=dict(setting), difficulty=diff)
