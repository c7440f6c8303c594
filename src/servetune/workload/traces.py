"""Workloads: synthetic generators, and slices of trace files -> arrival-sorted request arrays.

Trace files are read by servetune.workload.trace_file (formats, checks, streaming); the request
arrays are servetune.workload.request_trace's. Generators check every setting and raise ConfigError
naming the key.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from servetune.core import streams
from servetune.core.errors import ConfigError
from servetune.workload.request_trace import (  # noqa: F401 -- re-exported: the trace's types
    MAX_SPAN_S,
    MAX_TOKENS,
    RaggedIds,
    RequestTrace,
    flush_subnormal,
)
from servetune.workload.trace_file import bundled_path, load_trace, read_trace  # noqa: F401
from servetune.workload.trace_text import (  # noqa: F401 -- re-exported for the measurement readers
    DuplicateKeyError,
    csv_records,
    read_text,
    strict_float,
    unique_keys,
)

# Highest synthetic arrival rate (requests/s): a 1 ns mean gap. Faster gaps approach the
# subnormal floats, and rates over such windows overflow.
MAX_RATE = 1e9
# Most requests a synthetic workload may draw (memory: a few arrays of this length per seed).
MAX_SYNTHETIC_REQUESTS = 1 << 26


def load_csv(path, name: str | None = None) -> RequestTrace:
    """Every request of the CSV trace `path` (any CSV format of servetune.workload.trace_file)."""
    return load_trace(path, name)


def load_jsonl(path, name: str | None = None) -> RequestTrace:
    """Every request of the JSONL trace `path` (any JSON format of workload/trace_file.py)."""
    return load_trace(path, name)


def slice_trace(
    trace: RequestTrace,
    *,
    start_s: float = 0.0,
    duration_s: float | None = None,
    rate_scale: float = 1.0,
    max_requests: int | None = None,
    span_s: float | None = None,
) -> RequestTrace:
    """Requests arriving in [start_s, start_s + duration_s) of the trace, re-based to time 0,
    with time compressed by `rate_scale` (2.0 doubles the rate), keeping at most `max_requests`.
    `span_s`: the seconds the whole trace file spans, for the message when the slice is empty
    (default: the last arrival of `trace`)."""
    if not 0 < rate_scale <= 1e9:
        raise ConfigError(f"workload.rate_scale: got {rate_scale}; expected > 0 and <= 1e9")
    if start_s < 0:
        raise ConfigError(f"workload.start_s: got {start_s}; expected >= 0")
    end = math.inf if duration_s is None else start_s + duration_s
    out = trace.subset((trace.arrival >= start_s) & (trace.arrival < end))
    if max_requests is not None:
        out = out.subset(np.arange(len(out)) < int(max_requests))
    if len(out) == 0:
        if span_s is None:
            span_s = float(trace.arrival[-1]) if len(trace) else 0.0
        raise ConfigError(
            f"workload.start_s/duration_s: the slice [{start_s}, {end}) s of "
            f"{trace.name} holds no requests (trace spans {span_s:.1f} s)"
        )
    out.arrival = flush_subnormal((out.arrival - start_s) / rate_scale)
    if not out.arrival[-1] <= MAX_SPAN_S:
        raise ConfigError(
            f"workload.rate_scale: got {rate_scale}; the slice would span "
            f"{out.arrival[-1]:.3g} s, expected at most {MAX_SPAN_S:.0e} s"
        )
    return out


# --------------------------------------------------------------------------- synthetic


def _as_float(value) -> float | None:
    """float(value) for a real number (not a bool); None for anything else or an int beyond
    float range."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return float(value)
    except OverflowError:
        return None


def _spec_number(spec: dict, name: str, key: str, lo: float, hi: float = math.inf) -> float:
    if name not in spec or spec[name] is None:
        raise ConfigError(f"{key}.{name}: missing; expected a number for dist={spec.get('dist')!r}")
    value = _as_float(spec[name])
    if value is None or not math.isfinite(value) or not lo <= value <= hi:
        expect = f">= {lo}" if hi == math.inf else f">= {lo} and <= {hi}"
        raise ConfigError(f"{key}.{name}: got {spec[name]!r}; expected a finite number {expect}")
    return value


def _lengths(spec: dict, n: int, rng: np.random.Generator, key: str) -> np.ndarray:
    if not isinstance(spec, dict):
        raise ConfigError(
            f"{key}: got {spec!r}; expected a mapping like {{dist: lognormal, "
            f"mean: 1000, cv: 1.0, min: 1, max: 6000}}"
        )
    dist = spec.get("dist", "fixed")
    lo = _spec_number({"min": 1, **spec}, "min", key, 1, MAX_TOKENS)
    hi = _spec_number({"max": 32768, **spec}, "max", key, lo, MAX_TOKENS)
    if dist == "fixed":
        x = np.full(n, _spec_number(spec, "value", key, 1))
    elif dist == "lognormal":
        mean = _spec_number(spec, "mean", key, 1e-9)
        cv = _spec_number({"cv": 1.0, **spec}, "cv", key, 0, 1e3)
        sigma2 = math.log1p(cv * cv)
        x = rng.lognormal(math.log(mean) - sigma2 / 2, math.sqrt(sigma2), n)
    elif dist == "uniform":  # integers min..max, each equally likely (vLLM's random dataset)
        x = rng.integers(lo, hi + 1, n).astype(float)
    elif dist == "empirical":
        src = spec.get("trace")
        if src is None:
            raise ConfigError(f"{key}.trace: empirical lengths need a bundled trace name")
        trace = load_trace(bundled_path(src))
        column = spec.get("column", "prompt")
        if column not in ("prompt", "output"):
            raise ConfigError(f"{key}.column: got {column!r}; expected prompt or output")
        pool = trace.prompt if column == "prompt" else trace.output
        x = rng.choice(pool, n).astype(float)
    else:
        raise ConfigError(
            f"{key}.dist: got {dist!r}; expected fixed, lognormal, uniform or empirical"
        )
    return np.clip(np.round(x), lo, hi).astype(np.int32)


VLLM_BENCH_KEYS = (
    "random_input_len",
    "random_output_len",
    "random_range_ratio",
    "request_rate",
    "burstiness",
    "num_prompts",
)


def vllm_random(spec: dict, key: str = "workload.vllm_bench") -> dict:
    """`synthetic`'s arguments for `vllm bench serve --dataset-name random` given in its own
    flags (`spec`: VLLM_BENCH_KEYS), as vLLM 0.32's RandomDataset and request generator draw
    them: prompt and output lengths uniform over the integers of [len (1 - ratio),
    len (1 + ratio)] (floored, ceiled; an output at least 1; the tokenizer's special tokens not
    counted), `num_prompts` requests from t = 0 with Gamma gaps of shape `burstiness` at
    `request_rate` req/s (burstiness 1: Poisson; an infinite rate: all at once)."""
    unknown = sorted(set(spec) - set(VLLM_BENCH_KEYS))
    if unknown:
        raise ConfigError(
            f"{key}.{unknown[0]}: not a vllm bench serve flag here; expected "
            f"{', '.join(VLLM_BENCH_KEYS)}"
        )
    defaults = {
        "random_input_len": 1024,
        "random_output_len": 128,
        "random_range_ratio": 0.0,
        "request_rate": 5.0,
        "burstiness": 1.0,
        "num_prompts": 1000,
    }

    def get(name: str, lo: float, hi: float, integer: bool = False, bounds: str = "") -> float:
        raw = spec.get(name)
        value = defaults[name] if raw is None else _as_float(raw)
        if (
            value is None
            or not lo <= value <= hi
            or (integer and (not math.isfinite(value) or value != int(value)))
        ):
            what = "a whole number" if integer else "a number"
            shown = f"[{int(lo)}, {int(hi)}]" if integer else f"[{lo:g}, {hi:g}]"
            raise ConfigError(
                f"{key}.{name}: got {raw!r}; expected {what} within {bounds or shown}"
            )
        return value

    # vLLM's own check: a ratio of 1 or more could make a length 0
    ratio = get("random_range_ratio", 0.0, 1.0 - 1e-12, bounds="[0, 1), as vLLM requires")
    rate = get("request_rate", 1e-9, math.inf)
    burstiness = get("burstiness", 1e-6, 1e6)

    def lengths(name: str) -> dict:
        length = get(name, 1, MAX_TOKENS, integer=True)
        return {
            "dist": "uniform",
            "min": max(math.floor(length * (1 - ratio)), 1),
            "max": max(math.ceil(length * (1 + ratio)), 1),
        }

    return {
        "rate": min(rate, MAX_RATE),
        "n_requests": int(get("num_prompts", 1, MAX_SYNTHETIC_REQUESTS, True)),
        "arrival": "poisson" if burstiness == 1.0 else "gamma",
        "cv": 1.0 / math.sqrt(burstiness),
        "prompt": lengths("random_input_len"),
        "output": lengths("random_output_len"),
    }


def synthetic(
    *,
    rate: float,
    n_requests: int | None = None,
    duration_s: float | None = None,
    arrival: str = "poisson",
    cv: float = 1.0,
    prompt: dict,
    output: dict,
    seed: int = 0,
    name: str = "synthetic",
) -> RequestTrace:
    """Synthetic requests: Poisson or Gamma inter-arrivals (rate in req/s, burstiness `cv` =
    coefficient of variation of the gaps) and fixed / lognormal / empirical lengths."""
    if not 0 < rate <= MAX_RATE:
        raise ConfigError(
            f"workload.rate: got {rate}; expected requests per second > 0 and <= {MAX_RATE:.0e}"
        )
    if n_requests is None and duration_s is None:
        raise ConfigError("workload: set n_requests or duration_s")
    if arrival not in ("poisson", "gamma"):
        raise ConfigError(f"workload.arrival: got {arrival!r}; expected poisson or gamma")
    if arrival == "gamma" and not 1e-3 <= cv <= 1e3:
        raise ConfigError(
            f"workload.cv: got {cv}; expected within [0.001, 1000] (the "
            f"coefficient of variation of the inter-arrival gaps)"
        )
    if n_requests is not None and not 1 <= n_requests <= MAX_SYNTHETIC_REQUESTS:
        raise ConfigError(
            f"workload.n_requests: got {n_requests}; expected within [1, {MAX_SYNTHETIC_REQUESTS}]"
        )
    if duration_s is not None and not 0 < duration_s <= MAX_SPAN_S:
        raise ConfigError(
            f"workload.duration_s: got {duration_s}; expected seconds within (0, {MAX_SPAN_S:.0e}]"
        )
    if n_requests is None and rate * duration_s > MAX_SYNTHETIC_REQUESTS:
        raise ConfigError(
            f"workload.rate: {rate} requests/s over workload.duration_s = "
            f"{duration_s} s is {rate * duration_s:.3g} requests; expected at most "
            f"{MAX_SYNTHETIC_REQUESTS} (lower the rate or the duration)"
        )
    rng = np.random.default_rng(seed)

    def draw(k):
        if arrival == "poisson":
            return rng.exponential(1.0 / rate, k)
        shape = 1.0 / (cv * cv)
        return rng.gamma(shape, 1.0 / (rate * shape), k)

    with np.errstate(over="ignore", invalid="ignore"):
        if n_requests is not None:
            gaps = draw(int(n_requests))
            times = np.cumsum(gaps) - gaps[0]
            if duration_s is not None:
                times = times[times < duration_s]
        else:  # draw until the duration is covered, however bursty the gaps
            chunks, total, drawn = [], 0.0, 0
            while total < duration_s:
                k = int(rate * duration_s) + 64
                drawn += k
                if drawn > 4 * MAX_SYNTHETIC_REQUESTS + 1024:
                    raise ConfigError(
                        f"workload.cv: got {cv}; gaps this bursty do not cover "
                        f"workload.duration_s = {duration_s} s within "
                        f"{drawn} draws; lower cv"
                    )
                g = draw(k)
                chunks.append(g)
                total += g.sum()
            gaps = np.concatenate(chunks)
            times = np.cumsum(gaps) - gaps[0]
            times = times[times < duration_s]
    if len(times) == 0:
        raise ConfigError("workload: the synthetic workload is empty; raise rate or duration_s")
    if not (np.all(np.isfinite(times)) and times[-1] <= MAX_SPAN_S):
        raise ConfigError(
            f"workload.rate: got {rate}; {len(times)} arrivals would span "
            f"{times[-1]:.3g} s, expected at most {MAX_SPAN_S:.0e} s (raise the "
            f"rate or set workload.duration_s)"
        )
    n = len(times)
    return RequestTrace(
        name,
        times.astype(np.float64),
        _lengths(prompt, n, rng, "workload.prompt"),
        _lengths(output, n, rng, "workload.output"),
    )


# --------------------------------------------------------------------------- classes, predictor


def classify_by_prompt(trace: RequestTrace, split_tokens: int) -> RequestTrace:
    """Class 0 'short' (prompt < split_tokens) and class 1 'long'."""
    klass = (trace.prompt >= split_tokens).astype(np.int32)
    return dataclasses.replace(
        trace, klass=klass, class_names=(f"prompt<{split_tokens}", f"prompt>={split_tokens}")
    )


def predict_output(
    trace: RequestTrace, *, sigma: float = 0.0, bias: float = 1.0, seed: int = 0
) -> np.ndarray:
    """Output lengths as a predictor sees them: true x bias x lognormal(0, sigma) noise.

    sigma = 0 and bias = 1 is an oracle. Returns [N] float64 tokens (>= 1).
    """
    if not (0 <= sigma < math.inf and 0 < bias < math.inf):
        raise ConfigError(
            f"workload.predictor: got sigma={sigma}, bias={bias}; expected "
            f"finite sigma >= 0 and bias > 0"
        )
    rng = streams.rng(seed, streams.PREDICTOR)
    with np.errstate(over="ignore", invalid="ignore"):
        noise = np.exp(sigma * rng.standard_normal(len(trace))) if sigma > 0 else 1.0
        pred = np.maximum(trace.output * bias * noise, 1.0)
    if not np.all(np.isfinite(pred)):
        raise ConfigError(
            f"workload.predictor: sigma={sigma}, bias={bias} overflow the "
            f"predicted output lengths to infinity; expected a noise scale that "
            f"keeps them finite (sigma of a few units, bias near 1)"
        )
    return pred


# --------------------------------------------------------------------------- client patience


def with_abandonment(
    trace: RequestTrace,
    *,
    patience: dict | None = None,
    deadline_s: float | None = None,
    seed: int = 0,
    key: str = "workload",
) -> RequestTrace:
    """The trace with client patience and server deadlines set (seconds after arrival).

    patience: {dist: exponential | lognormal | fixed, mean_s, cv (lognormal), fraction}: each
      request, with probability `fraction` (default 1), gets a patience drawn from the
      distribution; its client cancels it that long after arrival unless it has completed
      (while queued or mid-stream). An explicit `cancel_after` already in the trace is kept
      where it is earlier. None or dist: none = patient clients.
    deadline_s: every request must complete within this many seconds of arrival, or the server
      drops it (expired); None = no deadline.
    Draws are seeded by `seed`, independently of arrivals and lengths.
    """
    n = len(trace)
    cancel_after = trace.cancel_after.copy()
    if patience is not None and patience.get("dist", "none") not in (None, "none"):
        pk = f"{key}.patience"
        dist = patience["dist"]
        rng = streams.rng(seed, streams.PATIENCE)
        mean = _spec_number(patience, "mean_s", pk, 1e-9, MAX_SPAN_S)
        if dist == "exponential":
            draw = rng.exponential(mean, n)
        elif dist == "lognormal":
            cv = _spec_number({"cv": 1.0, **patience}, "cv", pk, 0, 1e3)
            sigma2 = math.log1p(cv * cv)
            draw = rng.lognormal(math.log(mean) - sigma2 / 2, math.sqrt(sigma2), n)
        elif dist == "fixed":
            draw = np.full(n, mean)
        else:
            raise ConfigError(
                f"{pk}.dist: got {dist!r}; expected none, exponential, lognormal or fixed"
            )
        fraction = _spec_number({"fraction": 1.0, **patience}, "fraction", pk, 0.0, 1.0)
        impatient = rng.random(n) < fraction
        cancel_after = np.where(impatient, np.minimum(cancel_after, draw), cancel_after)
    deadline = trace.deadline.copy()
    if deadline_s is not None:
        value = _as_float(deadline_s)
        if value is None or not 0 < value <= MAX_SPAN_S:
            raise ConfigError(
                f"{key}.deadline_s: got {deadline_s!r}; expected seconds > 0 "
                f"and <= {MAX_SPAN_S:.0e}, or null for none"
            )
        deadline = np.minimum(deadline, value)
    return dataclasses.replace(trace, cancel_after=cancel_after, deadline=deadline)
