"""`servetune calibrate`: fit the step-time cost model to measured iteration times.

Input: a CSV with a header line and one row per measured iteration (engine step). Columns, by
name, in any order (other columns are ignored):

  prefill_tokens  prompt (or recomputed) tokens processed in the iteration (tokens, >= 0)
  decode_seqs     sequences that decoded one token in the iteration (>= 0)
  ctx_tokens      KV-cache tokens attention read: over the sequences in the batch, the sum of
                  each one's context length before the iteration (tokens, >= 0; the simulator's
                  `ctx_read`)
  attn_work       optional: over the sequences in the batch, the sum of new tokens x (context
                  before the iteration + (new tokens + 1) / 2) (tokens^2, >= 0; the simulator's
                  `attn_work`). When the column is absent it is approximated as
                  ctx_tokens + decode_seqs + prefill_tokens x (prefill_tokens + 1) / 2,
                  exact for decodes plus at most one prefill chunk that starts a fresh prompt
                  (it undercounts a chunk continuing a long cached prompt; measure the column if
                  your batches carry those and the model is large relative to its contexts).
  seconds         measured duration of the iteration (seconds, > 0)

Every row is checked: a missing column, a row with fewer or more fields than the header (an
unquoted comma shifts every value after it), a non-numeric, negative or non-finite value, a
`seconds` outside [1e-6, 3600] (one engine iteration: a microsecond to an hour; outside, the
column is in another unit), a token count past int32 or an empty batch (prefill_tokens +
decode_seqs = 0) raises TraceError naming the file, the line and what was expected.

Two forms are fitted, the same two the simulator uses (`cost_model.step_time`):

  linear    seconds = base_s + per_prefill_token_s x P + per_decode_seq_s x D + per_ctx_token_s x C
                      + per_attn_work_s x A
            (all five >= 0; optimized in log space, columns that are zero in every row fixed at
            0; A, attn_work, carries the quadratic attention cost of long prompts' chunks)
  roofline  seconds = max(FLOPs / (tp x peak x flops_efficiency),
                          bytes / (tp x HBM bandwidth x bandwidth_efficiency))
                      + overhead_s + tensor-parallel all-reduce time
            for the configured GPU, model, tp and weight/KV precision (from
            `hardware.roofline_cost_params`); efficiencies in (0, 1) (sigmoid space), overhead_s
            > 0 (log space).

Loss: mean squared relative error (`rel`, default) or mean squared log error (`log`), minimized
by optax.adam under a cosine-decayed learning rate in one jit-compiled `lax.scan`. The linear
form starts from the weighted least-squares solution (numpy lstsq, negative coefficients
clipped) unless `init="scale"`; the roofline form runs several starting points at once (vmapped)
and keeps the best. The command writes `calibrated.yaml` (a `hardware=` group file for roofline,
a `cost=` group file for linear) and `calibration.json` (fit metrics) into the Hydra run dir,
or, when the fit diverges or its RMS relative error exceeds `fit.max_rms_rel_error`, nothing
(a CalibrationError: exit 2).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from pathlib import Path
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pandas as pd
from omegaconf import DictConfig, OmegaConf

from servetune.config import hardware, settings
from servetune.core import cost as cost_model
from servetune.core import inputs
from servetune.core.errors import CalibrationError, ConfigError, TraceError
from servetune.core.files import write_json, write_text
from servetune.deploy.export import config_group_hint
from servetune.workload.traces import csv_records, read_text, strict_float

REQUIRED = ("prefill_tokens", "decode_seqs", "ctx_tokens", "seconds")
FEATURES = ("prefill_tokens", "decode_seqs", "ctx_tokens", "attn_work")
LINEAR_KEYS = (
    "base_s",
    "per_prefill_token_s",
    "per_decode_seq_s",
    "per_ctx_token_s",
    "per_attn_work_s",
)
ROOFLINE_KEYS = ("flops_efficiency", "bandwidth_efficiency", "overhead_s")
FORMS = ("linear", "roofline")
OBJECTIVES = ("rel", "log")
INITS = ("lstsq", "scale")
STEPS, LEARNING_RATE = 5000, 0.1  # Adam's defaults (also in conf/calibrate.yaml)
MAX_RMS_REL_ERROR = 0.5  # the command refuses to write a fit worse than this (fit.* key)
_LINEAR_COLUMNS = (
    None,
    "prefill_tokens",
    "decode_seqs",
    "ctx_tokens",  # base_s: all ones
    "attn_work",
)
# Roofline starting points (flops_efficiency, bandwidth_efficiency); the configured values join.
_ROOFLINE_STARTS = tuple((f, b) for f in (0.3, 0.6, 0.9) for b in (0.4, 0.7, 0.95))


@dataclasses.dataclass
class CalibrationResult:
    """A fitted step-time model and how well it matches the measurements.

    coefficients: the fitted values by config key (seconds, seconds per token or per sequence,
      or dimensionless efficiencies); std_errors: each one's standard error relative to its
      value (a fraction; from the Gauss-Newton covariance of the relative residuals at the fit;
      inf where the data do not determine it, 0 for coefficients fixed at 0); rms_rel_error,
      max_rel_error: of predicted vs measured seconds over all rows (fractions, 0.01 = 1%);
      worst_row: the index (the CSV line for
      `load_measurements` tables) of the row with the largest relative error; n_rows: rows
      fitted; init: how the optimizer was started; final_loss: the objective at the result;
      predicted_s: [n_rows] predicted seconds; compute_bound_rows: rows where the fitted
      roofline's compute term exceeds its memory term (roofline only); warnings: what the data
      could not determine.
    """

    form: str
    coefficients: dict
    std_errors: dict
    rms_rel_error: float
    max_rel_error: float
    worst_row: object
    n_rows: int
    init: str
    objective: str
    steps: int
    learning_rate: float
    final_loss: float
    predicted_s: np.ndarray
    compute_bound_rows: int | None = None
    warnings: list = dataclasses.field(default_factory=list)
    labels: dict = dataclasses.field(default_factory=dict)

    @property
    def undetermined(self) -> list[str]:
        """The coefficients the measurements do not determine (an infinite standard error):
        their values are where the fit started, not measured."""
        return [k for k, err in self.std_errors.items() if not math.isfinite(err)]

    def metrics(self) -> dict:
        """The fit's JSON-able summary (everything but the per-row predictions): a standard
        error the data leave undefined is null, and `undetermined` names those coefficients
        (`determined` is false where there are any)."""
        d = dataclasses.asdict(self)
        d.pop("predicted_s")
        d["worst_row"] = _plain(self.worst_row)
        d["std_errors"] = {
            k: (None if k in self.undetermined else err) for k, err in self.std_errors.items()
        }
        d["undetermined"] = self.undetermined
        d["determined"] = not self.undetermined
        return d


def _plain(v):
    return v.item() if hasattr(v, "item") else v


# --------------------------------------------------------------------------- loading

# A measured engine iteration lasts between a microsecond and an hour: outside that the column
# is in another unit (ns, or a timestamp) or corrupt, and a fit would write coefficients of
# 1e-300 or 1e+300 s. Token counts are int32 on device; attention work is tokens^2.
ITERATION_SECONDS = (1e-6, 3600.0)
_COLUMN_MAX = {
    "prefill_tokens": 2**31 - 1,
    "decode_seqs": 2**31 - 1,
    "ctx_tokens": 2**31 - 1,
    "attn_work": 2.0**62,
    "seconds": ITERATION_SECONDS[1],
}


def _expected(column: str) -> str:
    if column == "seconds":
        lo, hi = ITERATION_SECONDS
        return (
            f"seconds within [{lo:g}, {hi:g}] (one engine iteration; a value outside is in "
            f"another unit or corrupt)"
        )
    return f"a number within [0, {_COLUMN_MAX[column]:.4g}] (tokens)"


def _plausible(column: str, value: float) -> bool:
    """Whether `value` is finite and within the plausible range of `column`."""
    lo = ITERATION_SECONDS[0] if column == "seconds" else 0.0
    return math.isfinite(value) and lo <= value <= _COLUMN_MAX[column]


def _cell(raw: str, path, line: int, column: str) -> float:
    text = (raw or "").strip()
    try:
        value = strict_float(text)
    except ValueError:
        raise TraceError(
            f"{path}:{line}: column {column!r} = {raw!r}; expected {_expected(column)}"
        ) from None
    if not _plausible(column, value):
        raise TraceError(
            f"{path}:{line}: column {column!r} = {raw!r}; expected {_expected(column)}"
        )
    return value


def approximate_attn_work(prefill_tokens, decode_seqs, ctx_tokens):
    """Approximate attention work (tokens^2) when it was not measured:
    ctx_tokens + decode_seqs + prefill_tokens (prefill_tokens + 1) / 2, exact for decodes plus
    at most one prefill chunk that starts a fresh prompt (see the module docstring)."""
    p = np.asarray(prefill_tokens, np.float64)
    return (
        np.asarray(ctx_tokens, np.float64) + np.asarray(decode_seqs, np.float64) + p * (p + 1) / 2.0
    )


def linear_seconds(coefficients: dict, table: pd.DataFrame) -> np.ndarray:
    """[rows] seconds the linear form with `coefficients` (LINEAR_KEYS; absent ones 0)
    gives each row of a step table (prefill_tokens, decode_seqs, ctx_tokens and attn_work
    columns, as `load_measurements` returns)."""
    out = np.full(len(table), float(coefficients.get("base_s", 0.0)))
    for key, column in zip(LINEAR_KEYS[1:], _LINEAR_COLUMNS[1:], strict=True):
        out += float(coefficients.get(key, 0.0)) * table[column].to_numpy(np.float64)
    return out


def load_measurements(path: str | Path) -> pd.DataFrame:
    """Load and check a CSV of measured iterations (columns in the module docstring).

    Returns a float64 DataFrame with columns prefill_tokens, decode_seqs, ctx_tokens (tokens),
    attn_work (tokens^2; approximated when absent, which sets attrs["attn_work_approximated"])
    and seconds, indexed by the CSV line of each row; attrs["source"] is the path. Raises
    TraceError naming file:line, the column and what was expected on any bad row.
    """
    path = Path(path)
    text = read_text(path, "CSV of measured iterations")
    records = csv_records(path, text)
    header = next(records, (1, None))[1]
    if header is None or not any(h.strip() for h in header):
        raise TraceError(
            f"{path}: empty file; expected a header line with columns "
            f"{', '.join(REQUIRED)} (and optionally attn_work), then data rows"
        )
    header = [h.strip() for h in header]
    twice = sorted({h for h in header if h and header.count(h) > 1})
    if twice:
        raise TraceError(
            f"{path}:1: column {twice[0]!r} appears {header.count(twice[0])} times in the "
            f"header; expected each column once (which one is measured?)"
        )
    missing = [c for c in REQUIRED if c not in header]
    if missing:
        raise TraceError(
            f"{path}:1: header {header} lacks column(s) {missing}; expected "
            f"{', '.join(REQUIRED)} (and optionally attn_work)"
        )
    columns = [c for c in FEATURES + ("seconds",) if c in header]
    index = {c: header.index(c) for c in columns}
    values = {c: [] for c in columns}
    lines = []
    for line, row in records:
        if not row or all(not cell.strip() for cell in row):
            continue
        if len(row) < len(header) or any(cell.strip() for cell in row[len(header) :]):
            raise TraceError(
                f"{path}:{line}: {len(row)} fields; expected {len(header)} "
                f"({', '.join(header)}); an unquoted comma would shift the "
                f"values into the wrong columns"
            )
        parsed = {c: _cell(row[index[c]], path, line, c) for c in columns}
        if parsed["prefill_tokens"] + parsed["decode_seqs"] <= 0:
            raise TraceError(
                f"{path}:{line}: prefill_tokens = decode_seqs = 0 (an empty batch); "
                f"expected an iteration that computed at least one token"
            )
        for c in columns:
            values[c].append(parsed[c])
        lines.append(line)
    if not lines:
        raise TraceError(f"{path}: no data rows; expected one row per measured iteration")
    table = pd.DataFrame(
        {c: np.asarray(values[c], np.float64) for c in columns}, index=pd.Index(lines, name="line")
    )
    approximated = "attn_work" not in table
    if approximated:
        table.insert(
            3,
            "attn_work",
            approximate_attn_work(
                table["prefill_tokens"], table["decode_seqs"], table["ctx_tokens"]
            ),
        )
    table.attrs["source"] = str(path)
    table.attrs["attn_work_approximated"] = approximated
    return table[list(FEATURES) + ["seconds"]]


def _check_table(table: pd.DataFrame) -> pd.DataFrame:
    """The same checks as the loader, for a DataFrame given directly (rows named by index)."""
    if not isinstance(table, pd.DataFrame):
        raise ConfigError(f"table: got {type(table).__name__}; expected a pandas DataFrame")
    where = table.attrs.get("source", "table")
    missing = [c for c in REQUIRED if c not in table]
    if missing:
        raise TraceError(
            f"{where}: lacks column(s) {missing}; expected {', '.join(REQUIRED)} "
            f"(and optionally attn_work)"
        )
    table = table.copy()
    if "attn_work" not in table:
        table.attrs["attn_work_approximated"] = True
        table["attn_work"] = approximate_attn_work(
            table["prefill_tokens"], table["decode_seqs"], table["ctx_tokens"]
        )
    for c in FEATURES + ("seconds",):
        col = pd.to_numeric(table[c], errors="coerce").to_numpy(np.float64)
        bad = [k for k, v in enumerate(col) if not _plausible(c, float(v))]
        if bad:
            k = bad[0]
            raise TraceError(
                f"{where}: row {table.index[k]}: column {c!r} = "
                f"{_plain(table[c].iloc[k])!r}; expected {_expected(c)}"
            )
        table[c] = col
    empty = (table["prefill_tokens"] + table["decode_seqs"]).to_numpy() <= 0
    if empty.any():
        k = int(np.nonzero(empty)[0][0])
        raise TraceError(
            f"{where}: row {table.index[k]}: prefill_tokens = decode_seqs = 0 (an "
            f"empty batch); expected an iteration that computed at least one token"
        )
    return table


# --------------------------------------------------------------------------- the fit


def _coefficients(form: str, theta, scale, mask):
    """Unconstrained parameters -> coefficients in config order (see LINEAR_KEYS, ROOFLINE_KEYS):
    linear exp (masked, scaled); roofline sigmoid, sigmoid, scaled exp."""
    if form == "linear":
        return mask * scale * jnp.exp(theta)
    return jnp.stack(
        [jax.nn.sigmoid(theta[0]), jax.nn.sigmoid(theta[1]), scale[2] * jnp.exp(theta[2])]
    )


def _cost_of(form: str, base, c):
    """CostParams with coefficients c (config order) on top of `base`."""
    if form == "linear":
        return base.replace(
            base_s=c[0],
            per_prefill_token_s=c[1],
            per_decode_seq_s=c[2],
            per_ctx_token_s=c[3],
            per_attn_work_s=c[4],
        )
    # roofline_cost_params' rates are tp x peak x efficiency: base holds them at efficiency 1.
    return base.replace(
        flops_rate=base.flops_rate * c[0], byte_rate=base.byte_rate * c[1], overhead_s=c[2]
    )


@functools.partial(jax.jit, static_argnames=("form", "steps", "objective"))
def _fit_loop(theta0, base, scale, mask, feats, y, learning_rate, *, form, steps, objective):
    """Adam from each row of theta0 [K, n]; returns (best theta [K, n], best loss [K])."""

    def loss_fn(theta):
        c = _coefficients(form, theta, scale, mask)
        pred = cost_model.step_time(_cost_of(form, base, c), form, *feats)
        ratio = pred / y
        if objective == "log":
            return jnp.mean(jnp.log(jnp.maximum(ratio, 1e-300)) ** 2)
        return jnp.mean((ratio - 1.0) ** 2)

    opt = optax.adam(optax.cosine_decay_schedule(learning_rate, steps, alpha=1e-3))

    def one(start):
        def body(carry, _):
            theta, state, best, best_loss = carry
            loss, grad = jax.value_and_grad(loss_fn)(theta)
            better = loss < best_loss
            best = jnp.where(better, theta, best)
            best_loss = jnp.where(better, loss, best_loss)
            updates, state = opt.update(grad, state, theta)
            return (optax.apply_updates(theta, updates), state, best, best_loss), None

        carry = (start, opt.init(start), start, jnp.asarray(jnp.inf, y.dtype))
        (theta, _, best, best_loss), _ = jax.lax.scan(body, carry, None, length=steps)
        last = loss_fn(theta)
        return jnp.where(last < best_loss, theta, best), jnp.minimum(last, best_loss)

    return jax.vmap(one)(theta0)


def _relative_std_errors(form, base, c, feats, y, mask, rel) -> np.ndarray:
    """Standard errors of the coefficients relative to their values (fractions), from the
    Gauss-Newton covariance s^2 (J^T J)^-1 of the relative residuals; inf where the Jacobian is
    rank-deficient (the data do not determine the coefficient), 0 where it is fixed at 0."""
    c = jnp.asarray(c)
    free = np.asarray(mask) > 0
    # Jacobian with respect to log-coefficients: d residual / d c x c.
    jac = jax.jacfwd(lambda v: cost_model.step_time(_cost_of(form, base, v), form, *feats) / y)(c)
    jac = np.asarray(jac) * np.asarray(c)
    out = np.zeros(len(free))
    dof = max(len(rel) - int(free.sum()), 1)
    s2 = float(np.sum(rel**2)) / dof
    # A coefficient no row's prediction depends on is undetermined; the rest are inverted.
    moves = free & np.all(np.isfinite(jac), axis=0) & (np.abs(jac).max(axis=0) > 0)
    out[free & ~moves] = np.inf
    h = jac[:, moves].T @ jac[:, moves]
    if moves.any():
        if np.linalg.cond(h) > 1e14:
            out[moves] = np.inf
        else:
            out[moves] = np.sqrt(np.maximum(np.diag(np.linalg.inv(h)), 0.0) * s2)
    return out


def _spec(catalog, value, key):
    if value is None or isinstance(value, str):
        return hardware.lookup(catalog, value, key)
    return value


def _logit(p: float) -> float:
    return math.log(p / (1.0 - p))


class _Start(NamedTuple):
    """Where the fit starts: the cost params its coefficients go into (`base`), which
    coefficients the data can determine (`mask` [K]), their natural scales [K], starting points
    theta0 [M, K] (unconstrained), a label of the start, the hardware labels and warnings."""

    base: object
    mask: np.ndarray
    scale: np.ndarray
    theta0: np.ndarray
    label: str
    labels: dict
    warnings: list


def _linear_start(table: pd.DataFrame, y_np: np.ndarray, median: float, init: str) -> _Start:
    """The linear form's start: weighted least squares (`init` lstsq) or equal shares of the
    median time (scale); columns that are 0 in every row are fixed at 0, with a warning."""
    base = hardware.linear_cost_params(
        base_s=0.0, per_prefill_token_s=0.0, per_decode_seq_s=0.0, per_ctx_token_s=0.0, kv_blocks=1
    )
    x = np.stack(
        [np.ones_like(y_np)] + [table[c].to_numpy(np.float64) for c in _LINEAR_COLUMNS[1:]], axis=1
    )
    present = np.any(x > 0, axis=0)
    warnings = [
        f"{key}: column {col!r} is 0 in every row, so the data cannot determine it; fixed at 0"
        for key, col, ok in zip(LINEAR_KEYS, _LINEAR_COLUMNS, present, strict=True)
        if not ok
    ]
    unit = x / np.maximum(np.abs(x).max(axis=0), 1e-300)  # columns on one scale for the rank
    attn, rank = len(_LINEAR_COLUMNS) - 1, lambda cols: np.linalg.matrix_rank(unit[:, cols])
    others = present.copy()
    others[attn] = False
    if present[attn] and rank(present) == rank(others):
        # e.g. decode-only batches, whose attention work is exactly ctx_tokens + decode_seqs
        present[attn] = False
        warnings.append(
            "per_attn_work_s: column 'attn_work' is a combination of the other "
            "columns in these rows (no prefill chunks?), so the data cannot "
            "determine it; fixed at 0"
        )
    # Natural scales: the coefficient at which its column alone explains the median time.
    scale = np.where(present, median / np.maximum(x.mean(axis=0), 1e-300), 1.0)
    if init == "lstsq":
        coef = np.zeros(len(LINEAR_KEYS))
        w = x[:, present] / y_np[:, None]  # relative-error weighting
        coef[present] = np.linalg.lstsq(w, np.ones_like(y_np), rcond=None)[0]
        clipped = [k for k, c, ok in zip(LINEAR_KEYS, coef, present, strict=True) if ok and c <= 0]
        coef = np.where(coef > 0, coef, 1e-6 * scale)
        label = "lstsq" + (f" (clipped {', '.join(clipped)} to ~0)" if clipped else "")
    else:
        coef = scale / present.sum()
        label = "scale"
    return _Start(
        base, present.astype(np.float64), scale, np.log(coef / scale)[None, :], label, {}, warnings
    )


def _roofline_start(
    gpu, model, tp, weight_bits, kv_bits, allreduce_latency_s, start, median: float
) -> _Start:
    """The roofline form's start: a grid of efficiencies (plus the configured ones, `start`)
    and an overhead near a tenth of the median time; the catalog names checked."""
    gpu = _spec(hardware.GPUS, gpu, "hardware.gpu")
    model = _spec(hardware.MODELS, model, "model.name")
    if not (isinstance(tp, int) and tp >= 1 and model.heads % tp == 0):
        raise ConfigError(
            f"hardware.tp: got {tp!r}; expected a positive divisor of "
            f"{model.name}'s {model.heads} attention heads"
        )
    for key, bits in (("model.weight_bits", weight_bits), ("model.kv_bits", kv_bits)):
        if bits not in (4, 8, 16):
            raise ConfigError(f"{key}: got {bits!r}; expected one of (4, 8, 16)")
    base = hardware.roofline_cost_params(
        gpu,
        model,
        tp=tp,
        weight_bits=weight_bits,
        kv_bits=kv_bits,
        kv_blocks=1,
        flops_efficiency=1.0,
        bandwidth_efficiency=1.0,
        overhead_s=0.0,
        allreduce_latency_s=allreduce_latency_s,
    )
    labels = {
        "gpu": gpu.name,
        "model": model.name,
        "tp": tp,
        "weight_bits": weight_bits,
        "kv_bits": kv_bits,
    }
    starts = list(_ROOFLINE_STARTS)
    over0 = 0.1 * median
    if start:
        fe = min(max(float(start.get("flops_efficiency", 0.5)), 1e-3), 0.999)
        be = min(max(float(start.get("bandwidth_efficiency", 0.5)), 1e-3), 0.999)
        starts.insert(0, (fe, be))
        if start.get("overhead_s"):
            over0 = float(start["overhead_s"])
    over0 = min(max(over0, 1e-4 * median), median)
    theta0 = np.array([[_logit(f), _logit(b), math.log(over0 / median)] for f, b in starts])
    return _Start(
        base,
        np.ones(3),
        np.array([1.0, 1.0, median]),
        theta0,
        f"multi-start ({len(starts)} starting points, best kept)",
        labels,
        [],
    )


def _check_fit_settings(form, objective, init, steps, learning_rate) -> None:
    if form not in FORMS:
        raise ConfigError(f"form: got {form!r}; expected one of {FORMS}")
    if objective not in OBJECTIVES:
        raise ConfigError(f"fit.objective: got {objective!r}; expected one of {OBJECTIVES}")
    if init not in INITS:
        raise ConfigError(f"fit.init: got {init!r}; expected one of {INITS}")
    if not (isinstance(steps, int) and steps >= 1):
        raise ConfigError(f"fit.steps: got {steps!r}; expected an integer >= 1")
    if not (isinstance(learning_rate, (int, float)) and 0 < learning_rate < math.inf):
        raise ConfigError(f"fit.learning_rate: got {learning_rate!r}; expected a number > 0")


def _roofline_warnings(cost, feats, pred, coefficients) -> tuple[int, list[str]]:
    """(rows that are compute-bound under the fit, warnings about efficiencies the data only
    bound from below or that sit at their bound of 1)."""
    memory_only = np.asarray(
        cost_model.step_time(cost.replace(flops_rate=jnp.inf), "roofline", *feats)
    )
    compute_bound = int(np.sum(pred > memory_only * (1 + 1e-12)))
    warnings = []
    if compute_bound == 0:
        warnings.append(
            "flops_efficiency: no row is compute-bound under the fit, so the data "
            "only bound it from below; measure larger prefill batches"
        )
    if compute_bound == len(pred):
        warnings.append(
            "bandwidth_efficiency: no row is memory-bound under the fit, so the "
            "data only bound it from below; measure small decode batches"
        )
    for key in ("flops_efficiency", "bandwidth_efficiency"):
        if coefficients[key] > 0.99:
            warnings.append(
                f"{key}: fitted {coefficients[key]:.3f}, at the bound of 1; check "
                f"hardware.gpu, hardware.tp, model and its weight/KV bits"
            )
    return compute_bound, warnings


def _determination_warnings(std_errors: dict, warned: list[str]) -> list[str]:
    """Warnings for coefficients the data barely or do not determine (relative standard error
    over 10% or infinite), except those `warned` about already."""
    out = []
    for key, err in std_errors.items():
        if any(w.startswith(f"{key}:") for w in warned):
            continue
        if math.isinf(err):
            out.append(
                f"{key}: the measurements do not determine it (nearly collinear "
                f"columns, or too few distinct batch compositions)"
            )
        elif err > 0.1:
            out.append(
                f"{key}: standard error {err:.0%} of its value; the measurements "
                f"barely determine it (too few or too similar batch compositions, "
                f"or nearly collinear columns)"
            )
    return out


def _fit_warnings(form, st, cost, feats, pred, coefficients, std_errors, table):
    """(roofline rows that are compute-bound or None, the fit's warnings): the start's, the
    roofline's, the coefficients the data barely determine, and an approximated attn_work."""
    warnings, compute_bound = list(st.warnings), None
    if form == "roofline":
        compute_bound, more = _roofline_warnings(cost, feats, pred, coefficients)
        warnings += more
    warnings += _determination_warnings(std_errors, warnings)
    if table.attrs.get("attn_work_approximated"):  # both forms charge attention work
        warnings.append(
            "attn_work: not measured; approximated from the other columns (see the "
            "servetune.validate.calibrate module docstring)"
        )
    return compute_bound, warnings


def _check_compositions(table: pd.DataFrame, form: str, where) -> None:
    """CalibrationError where every row is the same batch composition (prefill tokens,
    decode sequences, context tokens): the rows then fix one step time and no coefficient,
    whatever the fit writes."""
    distinct = table[list(FEATURES)].drop_duplicates()
    if len(distinct) < 2:
        row = distinct.iloc[0]
        raise CalibrationError(
            f"{where}: every one of the {len(table)} rows is the batch prefill_tokens = "
            f"{row['prefill_tokens']:g}, decode_seqs = {row['decode_seqs']:g}, ctx_tokens = "
            f"{row['ctx_tokens']:g}; the {form} fit needs iterations of different batches "
            f"(measure other batch sizes and prompt lengths)"
        )


def fit_cost_model(
    table: pd.DataFrame,
    form: str,
    gpu=None,
    model=None,
    tp: int = 1,
    *,
    weight_bits: int = 16,
    kv_bits: int = 16,
    allreduce_latency_s: float = 0.0,
    start: dict | None = None,
    steps: int = STEPS,
    learning_rate: float = LEARNING_RATE,
    objective: str = "rel",
    init: str = "lstsq",
) -> CalibrationResult:
    """Fit the `form` ("linear" or "roofline") step-time model to measured iteration seconds.

    table: measured iterations (see `load_measurements`). gpu, model: catalog names or
    GPUSpec/ModelSpec (roofline only); tp, weight_bits, kv_bits, allreduce_latency_s (seconds)
    as in the `hardware=` and `model=` configs. start: roofline starting values by key (e.g. the
    configured efficiencies and overhead_s), tried alongside a built-in grid. steps,
    learning_rate: Adam's iterations and peak rate (in the unconstrained parameter space).
    objective: "rel" (mean squared relative error) or "log" (mean squared log error). init:
    linear form only, "lstsq" (weighted least squares, then Adam) or "scale" (equal shares of
    the median time, Adam only: slow to converge when columns are nearly collinear). Returns
    the fitted coefficients (seconds, seconds per token/sequence, efficiencies) and the
    relative fit errors over all rows.
    """
    _check_fit_settings(form, objective, init, steps, learning_rate)
    table = _check_table(table)
    n_params = len(LINEAR_KEYS) if form == "linear" else len(ROOFLINE_KEYS)
    where = table.attrs.get("source", "table")
    if len(table) < n_params:
        raise TraceError(
            f"{where}: {len(table)} data row(s); expected at least {n_params} to fit "
            f"the {form} form's {n_params} coefficients (a few hundred, spread over "
            f"batch compositions, fit well)"
        )
    _check_compositions(table, form, where)
    feats = tuple(jnp.asarray(table[c].to_numpy(np.float64)) for c in FEATURES)
    y_np = table["seconds"].to_numpy(np.float64)
    y = jnp.asarray(y_np)
    median = float(np.median(y_np))
    st = (
        _linear_start(table, y_np, median, init)
        if form == "linear"
        else _roofline_start(
            gpu, model, tp, weight_bits, kv_bits, allreduce_latency_s, start, median
        )
    )
    args = (
        jnp.asarray(st.scale),
        jnp.asarray(st.mask),
        feats,
        y,
        jnp.asarray(float(learning_rate)),
    )
    thetas, losses = _fit_loop(
        jnp.asarray(st.theta0), st.base, *args, form=form, steps=steps, objective=objective
    )
    losses_np = np.asarray(losses)
    if not np.isfinite(losses_np).any():
        raise CalibrationError(
            f"{where}: the {form} fit diverged (loss {losses_np.min()} after {steps} Adam "
            f"steps at fit.learning_rate={learning_rate:g}); lower fit.learning_rate "
            f"(default {LEARNING_RATE:g}) or check the 'seconds' column's scale"
        )
    k = int(np.nanargmin(np.where(np.isfinite(losses_np), losses_np, np.nan)))
    c = _coefficients(form, thetas[k], args[0], args[1])
    cost = _cost_of(form, st.base, c)
    pred = np.asarray(cost_model.step_time(cost, form, *feats))
    rel = pred / y_np - 1.0
    if not np.isfinite(rel).all():
        raise CalibrationError(
            f"{where}: the {form} fit predicts non-finite step times; "
            f"check the measurements' scale (seconds per iteration)"
        )
    keys = LINEAR_KEYS if form == "linear" else ROOFLINE_KEYS
    coefficients = dict(zip(keys, map(float, np.asarray(c)), strict=True))
    std_errors = dict(
        zip(
            keys,
            map(float, _relative_std_errors(form, st.base, c, feats, y, st.mask, rel)),
            strict=True,
        )
    )
    compute_bound, warnings = _fit_warnings(
        form, st, cost, feats, pred, coefficients, std_errors, table
    )
    worst = int(np.argmax(np.abs(rel)))
    return CalibrationResult(
        form=form,
        coefficients=coefficients,
        rms_rel_error=float(np.sqrt(np.mean(rel**2))),
        max_rel_error=float(np.abs(rel).max()),
        std_errors=std_errors,
        worst_row=table.index[worst],
        n_rows=len(table),
        init=st.label,
        objective=objective,
        steps=steps,
        learning_rate=float(learning_rate),
        final_loss=float(losses[k]),
        predicted_s=pred,
        compute_bound_rows=compute_bound,
        warnings=warnings,
        labels=st.labels,
    )


def calibrated_config(result: CalibrationResult, hardware_cfg: dict | None = None) -> dict:
    """The config-group file of `result`: for roofline, `hardware_cfg` (a `hardware=` group's
    keys) with flops_efficiency, bandwidth_efficiency and overhead_s (seconds) replaced; for
    linear, a `cost=` group file (form, the four coefficients in seconds, kv_blocks null).
    Values are rounded to 6 significant digits."""
    r = {k: float(f"{v:.6g}") for k, v in result.coefficients.items()}
    if result.form == "linear":
        return {"form": "linear", **r, "kv_blocks": None}
    out = dict(hardware_cfg or {})
    out.update(r)
    return out


# --------------------------------------------------------------------------- the command


def _print_result(result: CalibrationResult, start: dict, source: str, console) -> None:
    from rich.table import Table

    head = f"{source}: {result.n_rows} rows, {result.form} form"
    if result.labels:
        lb = result.labels
        head += (
            f" | {lb['model']} ({lb['weight_bits']}-bit weights, {lb['kv_bits']}-bit KV) on "
            f"{lb['tp']} x {lb['gpu']}"
        )
    t = Table(title=f"servetune calibrate\n{head}", box=None, padding=(0, 2))
    t.add_column("coefficient", style="bold")
    t.add_column("fitted", justify="right")
    t.add_column("std. error", justify="right")
    if start:
        t.add_column("configured", justify="right")
    for k, v in result.coefficients.items():
        err = result.std_errors[k]
        row = [k, f"{v:.6g}", "undetermined" if not math.isfinite(err) else f"±{err:.2%}"]
        t.add_row(*row, *([f"{start[k]:.6g}"] if start else []))
    console.print(t)
    console.print(
        f"fit error over {result.n_rows} rows: RMS relative "
        f"{result.rms_rel_error:.3%}, max relative {result.max_rel_error:.3%} "
        f"(at {source}:{result.worst_row})"
    )
    extra = (
        ""
        if result.compute_bound_rows is None
        else f"; {result.compute_bound_rows} of {result.n_rows} rows compute-bound"
    )
    console.print(
        f"optimizer: adam, {result.steps} steps, lr {result.learning_rate:g} cosine-"
        f"decayed, {result.objective} loss {result.final_loss:.3g}, init "
        f"{result.init}{extra}"
    )
    for w in result.warnings:
        console.print(f"[yellow]note:[/yellow] {w}")


def run_calibrate(cfg: DictConfig) -> CalibrationResult:
    """Load `path`, fit `form`, print the result and write calibrated.yaml and
    calibration.json into the Hydra run directory. Returns the CalibrationResult."""
    from hydra.core.hydra_config import HydraConfig
    from rich.console import Console

    raw = OmegaConf.select(cfg, "path")
    if raw is None or not str(raw).strip():
        raise ConfigError(
            "path: required; the CSV of measured iterations, e.g. "
            "servetune calibrate path=measurements.csv form=linear"
        )
    path = inputs.expand(str(raw), "path")
    if not path.is_absolute():
        path = Path(OmegaConf.select(cfg, "paths.root") or ".") / path
    form = OmegaConf.select(cfg, "form")
    if form not in FORMS:
        raise ConfigError(f"form: got {form!r}; expected one of {FORMS}")
    table = load_measurements(path)
    hw_cfg = OmegaConf.to_container(cfg.hardware, resolve=True)
    kwargs = {}
    if form == "roofline":
        kwargs = {
            "gpu": OmegaConf.select(cfg, "hardware.gpu"),
            "model": OmegaConf.select(cfg, "model.name"),
            "tp": settings.number(cfg, "hardware.tp", lo=1, integer=True, default=1),
            "weight_bits": settings.number(cfg, "model.weight_bits", integer=True, default=16),
            "kv_bits": settings.number(cfg, "model.kv_bits", integer=True, default=16),
            "allreduce_latency_s": settings.number(
                cfg, "hardware.allreduce_latency_s", lo=0, default=0.0
            ),
            "start": {
                k: settings.number(cfg, f"hardware.{k}", lo=0, default=0.0) for k in ROOFLINE_KEYS
            },
        }
    steps = settings.number(cfg, "fit.steps", lo=1, integer=True, default=STEPS)
    max_rms = settings.number(cfg, "fit.max_rms_rel_error", lo=0, hi=1e6, default=MAX_RMS_REL_ERROR)
    lr = settings.number(cfg, "fit.learning_rate", lo=1e-12, default=LEARNING_RATE)
    console = Console()
    console.print(
        f"fitting the {form} step-time model to {len(table)} measured iterations "
        f"(compiling on first use) ..."
    )
    t0 = time.perf_counter()
    result = fit_cost_model(
        table,
        form,
        steps=steps,
        learning_rate=lr,
        objective=OmegaConf.select(cfg, "fit.objective") or "rel",
        init=OmegaConf.select(cfg, "fit.init") or "lstsq",
        **kwargs,
    )
    wall = time.perf_counter() - t0
    if not result.rms_rel_error <= max_rms:
        _print_result(result, kwargs.get("start", {}), path.name, console)
        raise CalibrationError(
            f"{path}: RMS relative fit error {result.rms_rel_error:.1%} exceeds "
            f"fit.max_rms_rel_error={max_rms:g}, so no calibrated.yaml was written. The "
            f"measurements may mix setups or come from a shared machine's wall clock; to use "
            f"the fit anyway, raise fit.max_rms_rel_error"
        )
    out = Path(HydraConfig.get().runtime.output_dir)
    doc = calibrated_config(result, hw_cfg)
    hint = config_group_hint(
        out / "calibrated.yaml", "hardware" if form == "roofline" else "cost", "calibrated"
    )
    comment = (
        f"# servetune calibrate: {result.form} form fitted to {result.n_rows} iterations "
        f"of {path.name}\n# RMS relative error {result.rms_rel_error:.3%}, max "
        f"{result.max_rel_error:.3%}.\n# {hint}\n"
    )
    if result.undetermined:
        comment += (
            f"# NOT DETERMINED by the measurements: {', '.join(result.undetermined)} (their "
            f"values are where the fit started; calibration.json: determined false).\n"
        )
    if form == "roofline":
        lb = result.labels
        comment += (
            f"# Fitted for {lb['model']} ({lb['weight_bits']}-bit weights, "
            f"{lb['kv_bits']}-bit KV) on {lb['tp']} x {lb['gpu']}.\n"
        )
    write_text(out / "calibrated.yaml", comment + OmegaConf.to_yaml(OmegaConf.create(doc)))
    metrics = dict(
        result.metrics(),
        source=str(path),
        wall_s=wall,
        attn_work_approximated=bool(table.attrs.get("attn_work_approximated")),
    )
    write_json(out / "calibration.json", metrics)
    _print_result(result, kwargs.get("start", {}), path.name, console)
    console.print(
        f"wrote {out}/calibrated.yaml, calibration.json  ({wall:.1f} s)\n{hint}", markup=False
    )
    return result
