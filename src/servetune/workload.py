"""Workloads: synthetic generators and trace loaders -> arrival-sorted request arrays.

Loaders check every row and raise TraceError naming the file, the line and what was expected.
"""

from __future__ import annotations

import csv
import dataclasses
import datetime as dt
import json
import math
from importlib import resources
from pathlib import Path

import numpy as np

from servetune.errors import ConfigError, TraceError

MAX_TOKENS = 10_000_000  # a per-request token count above this is a corrupt row, not a request


@dataclasses.dataclass
class RequestTrace:
    """Requests of one workload, sorted by arrival (host-side numpy arrays).

    arrival: [N] float64 seconds from the trace start; prompt, output: [N] int32 tokens;
    klass: [N] int32 class id (names in `class_names`).
    """

    name: str
    arrival: np.ndarray
    prompt: np.ndarray
    output: np.ndarray
    klass: np.ndarray = None
    class_names: tuple = ("all",)

    def __post_init__(self):
        if self.klass is None:
            self.klass = np.zeros(len(self.arrival), np.int32)

    def __len__(self) -> int:
        return len(self.arrival)

    def subset(self, mask: np.ndarray) -> RequestTrace:
        """The requests where `mask` holds, in order."""
        return dataclasses.replace(self, arrival=self.arrival[mask], prompt=self.prompt[mask],
                                   output=self.output[mask], klass=self.klass[mask])


# --------------------------------------------------------------------------- loaders

def _int_field(raw: str, path, line: int, column: str, minimum: int) -> int:
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise TraceError(f"{path}:{line}: column {column!r} = {raw!r}; expected an integer "
                         f"token count >= {minimum}") from None
    if not math.isfinite(value) or value != int(value) or value < minimum or value > MAX_TOKENS:
        raise TraceError(f"{path}:{line}: column {column!r} = {raw!r}; expected an integer "
                         f"token count in [{minimum}, {MAX_TOKENS}]")
    return int(value)


def _parse_timestamp(raw: str, path, line: int) -> float:
    text = (raw or "").strip()
    if not text:
        raise TraceError(f"{path}:{line}: column 'TIMESTAMP' is empty; expected a timestamp")
    if "." in text:  # Azure writes 7 fractional digits; Python parses at most 6
        head, frac = text.split(".", 1)
        text = f"{head}.{frac[:6]}"
    try:
        stamp = dt.datetime.fromisoformat(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            raise TraceError(f"{path}:{line}: column 'TIMESTAMP' = {raw!r}; expected "
                             f"'YYYY-MM-DD HH:MM:SS.ffffff' or seconds") from None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=dt.timezone.utc)
    return stamp.timestamp()


def _check_sorted(arrival: np.ndarray, lines: list[int], path, what: str) -> None:
    if len(arrival) == 0:
        raise TraceError(f"{path}: no requests; expected at least one data row")
    back = np.nonzero(np.diff(arrival) < 0)[0]
    if len(back):
        k = back[0] + 1
        raise TraceError(f"{path}:{lines[k]}: {what} goes back in time "
                         f"({arrival[k]:.6f} after {arrival[k - 1]:.6f}); expected rows sorted "
                         f"by arrival")
    if not np.all(np.isfinite(arrival)):
        k = int(np.nonzero(~np.isfinite(arrival))[0][0])
        raise TraceError(f"{path}:{lines[k]}: {what} is not finite; expected a time")


def _open_text(path: Path):
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise TraceError(f"{path}: file not found") from None
    except IsADirectoryError:
        raise TraceError(f"{path}: is a directory; expected a trace file") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise TraceError(f"{path}: not UTF-8 text (byte {err.start}); expected a UTF-8 "
                         f"CSV or JSONL trace") from None


def load_csv(path: str | Path, name: str | None = None) -> RequestTrace:
    """Load a CSV trace: Azure LLM 2023 (TIMESTAMP, ContextTokens, GeneratedTokens) or plain
    (arrival_s, prompt_tokens, output_tokens). Arrival times become seconds from the first row."""
    path = Path(path)
    text = _open_text(path)
    reader = csv.reader(text.splitlines())
    header = next(reader, None)
    if header is None or not any(h.strip() for h in header):
        raise TraceError(f"{path}: empty file; expected a header line and data rows")
    header = [h.strip() for h in header]
    formats = {
        "azure": ("TIMESTAMP", "ContextTokens", "GeneratedTokens"),
        "plain": ("arrival_s", "prompt_tokens", "output_tokens"),
    }
    for kind, cols in formats.items():
        if all(c in header for c in cols):
            break
    else:
        raise TraceError(f"{path}:1: header {header}; expected columns "
                         f"{list(formats['azure'])} (Azure LLM 2023) or {list(formats['plain'])}")
    t_col, p_col, o_col = (header.index(c) for c in cols)
    arrival, prompt, output, lines = [], [], [], []
    for line, row in enumerate(reader, start=2):
        if not row or all(not cell.strip() for cell in row):
            continue
        if len(row) < len(header):
            raise TraceError(f"{path}:{line}: {len(row)} fields; expected {len(header)} "
                             f"({', '.join(header)})")
        if kind == "azure":
            arrival.append(_parse_timestamp(row[t_col], path, line))
        else:
            try:
                arrival.append(float(row[t_col]))
            except ValueError:
                raise TraceError(f"{path}:{line}: column 'arrival_s' = {row[t_col]!r}; "
                                 f"expected seconds") from None
        prompt.append(_int_field(row[p_col], path, line, cols[1], 1))
        output.append(_int_field(row[o_col], path, line, cols[2], 1))
        lines.append(line)
    arr = np.asarray(arrival, np.float64)
    _check_sorted(arr, lines, path, f"column {cols[0]!r}")
    if kind == "plain" and arr[0] < 0:
        raise TraceError(f"{path}:{lines[0]}: arrival_s = {arr[0]}; expected >= 0")
    return RequestTrace(name or path.stem, arr - arr[0], np.asarray(prompt, np.int32),
                        np.asarray(output, np.int32))


def load_jsonl(path: str | Path, name: str | None = None) -> RequestTrace:
    """Load a Mooncake JSONL trace: one object per line with `timestamp` (ms), `input_length`,
    `output_length` (and optional `hash_ids`). Arrival times become seconds from the first row."""
    path = Path(path)
    text = _open_text(path)
    arrival, prompt, output, lines = [], [], [], []
    for line, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as err:
            raise TraceError(f"{path}:{line}: not valid JSON ({err.msg}); expected one object "
                             f"per line") from None
        if not isinstance(obj, dict):
            raise TraceError(f"{path}:{line}: got {type(obj).__name__}; expected a JSON object")
        for key in ("timestamp", "input_length", "output_length"):
            if key not in obj:
                raise TraceError(f"{path}:{line}: missing key {key!r}; expected timestamp (ms), "
                                 f"input_length, output_length")
        stamp = obj["timestamp"]
        if isinstance(stamp, bool) or not isinstance(stamp, (int, float)) or not math.isfinite(stamp) or stamp < 0:
            raise TraceError(f"{path}:{line}: 'timestamp' = {stamp!r}; expected milliseconds >= 0")
        arrival.append(stamp / 1000.0)
        for key, store in (("input_length", prompt), ("output_length", output)):
            value = obj[key]
            if isinstance(value, bool) or not isinstance(value, (int, float, str)):
                raise TraceError(f"{path}:{line}: {key!r} = {value!r}; expected an integer "
                                 f"token count >= 1")
            store.append(_int_field(str(value), path, line, key, 1))
        lines.append(line)
    if not arrival:
        raise TraceError(f"{path}: empty file; expected JSON lines with timestamp, "
                         f"input_length, output_length")
    arr = np.asarray(arrival, np.float64)
    _check_sorted(arr, lines, path, "'timestamp'")
    return RequestTrace(name or path.stem, arr - arr[0], np.asarray(prompt, np.int32),
                        np.asarray(output, np.int32))


def load_trace(path: str | Path, name: str | None = None) -> RequestTrace:
    """Load a trace file by extension: .csv (Azure or plain) or .jsonl (Mooncake)."""
    path = Path(path)
    if path.suffix == ".jsonl":
        return load_jsonl(path, name)
    if path.suffix == ".csv":
        return load_csv(path, name)
    raise TraceError(f"{path}: unknown trace format {path.suffix!r}; expected .csv or .jsonl")


def bundled_path(filename: str) -> Path:
    """Path of a trace shipped inside the package (see servetune/data/README.md)."""
    path = Path(str(resources.files("servetune") / "data" / filename))
    if not path.exists():
        raise ConfigError(f"workload.bundled: no bundled trace {filename!r}; expected one of "
                          f"{sorted(p.name for p in path.parent.glob('*.*') if p.suffix != '.md')}")
    return path


def slice_trace(trace: RequestTrace, *, start_s: float = 0.0, duration_s: float | None = None,
                rate_scale: float = 1.0, max_requests: int | None = None) -> RequestTrace:
    """Requests arriving in [start_s, start_s + duration_s) of the trace, re-based to time 0,
    with time compressed by `rate_scale` (2.0 doubles the rate), keeping at most `max_requests`."""
    if not rate_scale > 0:
        raise ConfigError(f"workload.rate_scale: got {rate_scale}; expected > 0")
    if start_s < 0:
        raise ConfigError(f"workload.start_s: got {start_s}; expected >= 0")
    end = math.inf if duration_s is None else start_s + duration_s
    out = trace.subset((trace.arrival >= start_s) & (trace.arrival < end))
    if max_requests is not None:
        out = out.subset(np.arange(len(out)) < int(max_requests))
    if len(out) == 0:
        raise ConfigError(f"workload.start_s/duration_s: the slice [{start_s}, {end}) s of "
                          f"{trace.name} holds no requests (trace spans "
                          f"{trace.arrival[-1]:.1f} s)")
    out.arrival = (out.arrival - start_s) / rate_scale
    return out


# --------------------------------------------------------------------------- synthetic

def _spec_number(spec: dict, name: str, key: str, lo: float) -> float:
    if name not in spec or spec[name] is None:
        raise ConfigError(f"{key}.{name}: missing; expected a number for dist={spec.get('dist')!r}")
    value = spec[name]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or value < lo:
        raise ConfigError(f"{key}.{name}: got {value!r}; expected a finite number >= {lo}")
    return float(value)


def _lengths(spec: dict, n: int, rng: np.random.Generator, key: str) -> np.ndarray:
    dist = spec.get("dist", "fixed")
    lo = _spec_number({"min": 1, **spec}, "min", key, 1)
    hi = _spec_number({"max": 32768, **spec}, "max", key, lo)
    if dist == "fixed":
        x = np.full(n, _spec_number(spec, "value", key, 1))
    elif dist == "lognormal":
        mean = _spec_number(spec, "mean", key, 1e-9)
        cv = _spec_number({"cv": 1.0, **spec}, "cv", key, 0)
        sigma2 = math.log1p(cv * cv)
        x = rng.lognormal(math.log(mean) - sigma2 / 2, math.sqrt(sigma2), n)
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
        raise ConfigError(f"{key}.dist: got {dist!r}; expected fixed, lognormal or empirical")
    return np.clip(np.round(x), lo, hi).astype(np.int32)


def synthetic(*, rate: float, n_requests: int | None = None, duration_s: float | None = None,
              arrival: str = "poisson", cv: float = 1.0, prompt: dict, output: dict,
              seed: int = 0, name: str = "synthetic") -> RequestTrace:
    """Synthetic requests: Poisson or Gamma inter-arrivals (rate in req/s, burstiness `cv` =
    coefficient of variation of the gaps) and fixed / lognormal / empirical lengths."""
    if not rate > 0:
        raise ConfigError(f"workload.rate: got {rate}; expected requests per second > 0")
    if n_requests is None and duration_s is None:
        raise ConfigError("workload: set n_requests or duration_s")
    if arrival not in ("poisson", "gamma"):
        raise ConfigError(f"workload.arrival: got {arrival!r}; expected poisson or gamma")
    if arrival == "gamma" and not cv > 0:
        raise ConfigError(f"workload.cv: got {cv}; expected > 0")
    rng = np.random.default_rng(seed)

    def draw(k):
        if arrival == "poisson":
            return rng.exponential(1.0 / rate, k)
        shape = 1.0 / (cv * cv)
        return rng.gamma(shape, 1.0 / (rate * shape), k)

    if n_requests is not None:
        gaps = draw(int(n_requests))
        times = np.cumsum(gaps) - gaps[0]
        if duration_s is not None:
            times = times[times < duration_s]
    else:  # draw until the duration is covered, however bursty the gaps
        chunks, total = [], 0.0
        while total < duration_s:
            g = draw(int(rate * duration_s) + 64)
            chunks.append(g)
            total += g.sum()
        gaps = np.concatenate(chunks)
        times = np.cumsum(gaps) - gaps[0]
        times = times[times < duration_s]
    n = len(times)
    return RequestTrace(name, times.astype(np.float64), _lengths(prompt, n, rng, "workload.prompt"),
                        _lengths(output, n, rng, "workload.output"))


# --------------------------------------------------------------------------- classes, predictor

def classify_by_prompt(trace: RequestTrace, split_tokens: int) -> RequestTrace:
    """Class 0 'short' (prompt < split_tokens) and class 1 'long'."""
    klass = (trace.prompt >= split_tokens).astype(np.int32)
    return dataclasses.replace(trace, klass=klass,
                               class_names=(f"prompt<{split_tokens}", f"prompt>={split_tokens}"))


def predict_output(trace: RequestTrace, *, sigma: float = 0.0, bias: float = 1.0,
                   seed: int = 0) -> np.ndarray:
    """Output lengths as a predictor sees them: true x bias x lognormal(0, sigma) noise.

    sigma = 0 and bias = 1 is an oracle. Returns [N] float64 tokens (>= 1).
    """
    if sigma < 0 or bias <= 0:
        raise ConfigError(f"workload.predictor: got sigma={sigma}, bias={bias}; expected "
                          f"sigma >= 0 and bias > 0")
    rng = np.random.default_rng([seed, 7919])
    noise = np.exp(sigma * rng.standard_normal(len(trace))) if sigma > 0 else 1.0
    return np.maximum(trace.output * bias * noise, 1.0)
