"""Per-request table and aggregate metrics of a finished scenario (seconds, tokens, dollars)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from servetune.config import cascade as cascade_lib
from servetune.config import quality
from servetune.config.metrics_spec import MetricsSpec
from servetune.core import histogram, streams
from servetune.core.errors import STALLED, ServetuneError
from servetune.core.types import (
    CANCELLED,
    COMPLETED,
    END_STATE_NAMES,
    EVICTED,
    EXPIRED,
    OUTSTANDING,
    REJECT_REASON_NAMES,
    REJECTED,
    TIMELINE_COLUMNS,
)
from servetune.run import energy, fleet_metrics
from servetune.run.driver import ScenarioResult
from servetune.workload.traces import RequestTrace


def quality_outcome(
    trace: RequestTrace, spec: MetricsSpec, extra_hazard=0.0
) -> tuple[np.ndarray, np.ndarray]:
    """(difficulty [N], quality_ok [N]) of every request: ok iff its uniform draw u is at least
    P(fail) (common random numbers, see servetune.config.quality). Without a quality model every
    request passes; a trace without draws (one not built by scenario.build) gets seed 0's.
    extra_hazard: per-request hazard of mechanisms that degrade single requests."""
    n = len(trace)
    q = spec.quality
    if q is None:
        d = trace.difficulty if trace.difficulty is not None else np.full(n, np.nan)
        return np.asarray(d, np.float64), np.ones(n, bool)
    if trace.quality_u is None:  # scenario.build sets both u and the resolved difficulty
        d, u = quality.draws(n, 0, q.difficulty, trace.difficulty, trace.name)
    else:
        d, u = trace.difficulty, trace.quality_u
        if d is None:
            d = quality.draws(n, 0, q.difficulty, None, trace.name)[0]
    return np.asarray(d, np.float64), u >= q.failure_prob(d, extra_hazard)


def request_table(trace: RequestTrace, res: ScenarioResult, spec: MetricsSpec) -> pd.DataFrame:
    """One row per request: times (seconds), tokens, end state, preemptions, SLO outcome,
    difficulty and quality outcome. `slo_ok`: completed within every SLO; `quality_ok`: passes
    its task check (whatever its end state); `qualifies`: both."""
    return pd.DataFrame(request_columns(trace, res, spec))


def request_columns(trace: RequestTrace, res: ScenarioResult, spec: MetricsSpec) -> dict:
    """`request_table`'s columns as {name: numpy array [N]}: what the metrics read without a
    DataFrame's per-column costs (a batch of short scenarios spent most of its time there)."""
    completed = res.end_state == COMPLETED
    ttft = res.first_token - trace.arrival
    # a completed request delivered its output, cut at max_model_len (vLLM's length cap)
    o = np.where(completed, res.generated, trace.output).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(o > 1, (res.finish - res.first_token) / (o - 1), np.nan)
    e2e = res.finish - trace.arrival
    ok = completed.copy()
    for target, value in ((spec.slo_ttft_s, ttft), (spec.slo_tpot_s, tpot), (spec.slo_e2e_s, e2e)):
        if target is not None:
            ok &= ~(value > target)  # nan (single-token TPOT) passes
    counted = trace.arrival >= spec.warmup_s
    difficulty, quality_ok = quality_outcome(trace, spec)
    # a request whose KV was compressed under pressure also fails its task check with
    # kv_compress_fail_prob, by its own uniform draw: fixed per request and seed, the same for
    # every policy (paired comparisons), independent of the precision model's draw
    compressed = res.kv_ratio > 1.0
    if spec.kv_compress_fail_prob > 0 and compressed.any():
        u = (
            trace.compress_u
            if trace.compress_u is not None
            else streams.rng(0, streams.KV_COMPRESS).random(len(trace))
        )
        quality_ok = quality_ok & ~(compressed & (u < spec.kv_compress_fail_prob))
    names = np.asarray(trace.class_names, dtype=object)
    extra = {}
    if spec.cascade is not None and res.tier is not None:  # the final answer's tier decides
        extra = cascade_lib.request_columns(trace, res.tier, spec.quality)
        quality_ok = extra.pop("quality_ok")
    return {
        "request": np.arange(len(trace)),
        "arrival_s": trace.arrival,
        "prompt_tokens": trace.prompt,
        "output_tokens": trace.output,
        "class": names[trace.klass],
        "scheduled_s": res.scheduled_at,
        "queue_s": res.scheduled_at - trace.arrival,
        "first_token_s": res.first_token,
        "finish_s": res.finish,
        "output_tokens_delivered": res.generated,
        "end_state": np.asarray(END_STATE_NAMES, dtype=object)[res.end_state],
        "reject_reason": np.asarray(REJECT_REASON_NAMES + (None,), dtype=object)[res.reject_reason],
        "preemptions": res.n_preempt,
        "tokens_computed": res.tokens_computed,
        "kv_compressed": compressed,
        "ttft_s": np.where(np.isfinite(res.first_token), ttft, np.nan),
        "tpot_s": np.where(completed, tpot, np.nan),
        "e2e_s": np.where(completed, e2e, np.nan),
        "difficulty": difficulty,
        "slo_ok": ok,
        "quality_ok": quality_ok,
        "qualifies": ok & quality_ok,
        "counted": counted,
        **extra,
    }


BENCH_PERCENTILES = (50, 90, 99)


def percentiles(sorted_values: np.ndarray, ps) -> list[float]:
    """The `ps` percentiles (0-100) of ascending finite values, as np.percentile's default
    (linear) method computes them, bit for bit, without its per-call cost (~10x, which a
    batch of thousands of short scenarios pays a dozen times each)."""
    n = len(sorted_values)
    out = []
    for p in ps:
        at = (n - 1) * (p / 100)
        if at >= n - 1:
            out.append(float(sorted_values[-1]))
            continue
        lo = int(at)
        t, a, b = at - lo, sorted_values[lo], sorted_values[lo + 1]
        diff = b - a  # numpy's lerp, from the nearer end
        out.append(float(b - diff * (1 - t) if t >= 0.5 else a + diff * t))
    return out


def _median(sorted_values: np.ndarray) -> float:
    """np.median of ascending values."""
    n = len(sorted_values)
    if n % 2:
        return float(sorted_values[n // 2])
    return float((sorted_values[n // 2 - 1] + sorted_values[n // 2]) / 2.0)


def _bench_stats(name: str, seconds: np.ndarray) -> dict:
    """mean, median, std and percentiles of `seconds` in ms, under `vllm bench serve`'s keys
    (mean_ttft_ms, median_ttft_ms, std_ttft_ms, p99_ttft_ms, ...); NaN when empty."""
    ms = np.sort(seconds[np.isfinite(seconds)] * 1000.0)
    if len(ms) == 0:
        out = {f"{k}_{name}_ms": float("nan") for k in ("mean", "median", "std")}
        return out | {f"p{p}_{name}_ms": float("nan") for p in BENCH_PERCENTILES}
    out = {
        f"mean_{name}_ms": float(ms.mean()),
        f"median_{name}_ms": _median(ms),
        f"std_{name}_ms": float(ms.std()),
    }
    return out | {
        f"p{p}_{name}_ms": v
        for p, v in zip(BENCH_PERCENTILES, percentiles(ms, BENCH_PERCENTILES), strict=True)
    }


def _bench_itl(hist: np.ndarray) -> dict:
    """ITL statistics in ms from the pooled gap histogram (within its 1% bins)."""
    values = histogram.bin_values() * 1000.0
    total = hist.sum()
    if total <= 0:
        return _bench_stats("itl", np.zeros(0))
    mean = float((hist * values).sum() / total)
    median, *tail = histogram.quantiles(hist, (0.5, *(p / 100 for p in BENCH_PERCENTILES)))
    out = {
        "mean_itl_ms": mean,
        "median_itl_ms": median * 1000.0,
        "std_itl_ms": float(np.sqrt((hist * (values - mean) ** 2).sum() / total)),
    }
    return out | {f"p{p}_itl_ms": v * 1000.0 for p, v in zip(BENCH_PERCENTILES, tail, strict=True)}


def bench_metrics(table: pd.DataFrame | dict, res: ScenarioResult) -> dict:
    """The run in `vllm bench serve --save-result`'s names and units, to diff against a real
    benchmark: over the counted requests, `completed` and `failed` (every other end, the
    outstanding ones included), total input and output tokens of the completed ones,
    `duration` (s, from the first counted arrival to the last counted request's end),
    request_throughput, request_goodput (completed within every SLO; no quality check, as vLLM's
    --goodput), output_throughput and total_token_throughput per second of that duration, and
    TTFT, TPOT, ITL and E2E latency (e2el) as mean / median / std / P50 / P90 / P99 in ms."""
    cols = _columns(table, _BENCH_COLUMNS)
    c = cols["counted"]
    done = c & cols["completed"]
    finish = cols["finish_s"][c]
    start = float(cols["arrival_s"][c].min()) if c.any() else 0.0
    end = float(np.nanmax(finish)) if (~np.isnan(finish)).any() else start
    duration = max(end - start, 1e-9)
    n_input = int(cols["prompt_tokens"][done].sum())
    n_output = int(cols["output_tokens_delivered"][done].sum())
    n_done, good = int(done.sum()), int((done & cols["slo_ok"]).sum())
    out = {
        "completed": n_done,
        "failed": int(c.sum()) - n_done,
        "duration": duration,
        "total_input_tokens": n_input,
        "total_output_tokens": n_output,
        "request_throughput": n_done / duration,
        "request_goodput": good / duration,
        "output_throughput": n_output / duration,
        "total_token_throughput": (n_input + n_output) / duration,
    }
    for name, column in (("ttft", "ttft_s"), ("tpot", "tpot_s"), ("e2el", "e2e_s")):
        out.update(_bench_stats(name, cols[column][done].astype(np.float64)))
    out.update(_bench_itl(np.asarray(res.stats["itl_hist"])))
    return out


# the request table's columns the metrics read, as numpy arrays (pandas' per-call overhead was
# most of a batch's cost: ~20 ms a scenario)
_BENCH_COLUMNS = (
    "counted",
    "end_state",
    "arrival_s",
    "finish_s",
    "prompt_tokens",
    "output_tokens_delivered",
    "slo_ok",
    "ttft_s",
    "tpot_s",
    "e2e_s",
)
_METRIC_COLUMNS = _BENCH_COLUMNS + (
    "reject_reason",
    "output_tokens",
    "class",
    "first_token_s",
    "tokens_computed",
    "kv_compressed",
    "quality_ok",
    "qualifies",
)
_FLAGS = ("slo_ok", "quality_ok", "qualifies", "counted", "kv_compressed")


def _rejected_by(cols: dict, counted: np.ndarray) -> dict:
    """{reject reason (types.REJECT_REASON_NAMES): counted requests rejected for it}, the
    reasons that occurred only, in the order of precedence."""
    reasons = cols["reject_reason"][counted & (cols["end_state"] == END_STATE_NAMES[REJECTED])]
    return {
        name: int((reasons == name).sum())
        for name in REJECT_REASON_NAMES
        if (reasons == name).any()
    }


def _columns(table: pd.DataFrame | dict, names=_METRIC_COLUMNS) -> dict:
    """{column: numpy array} of `names` of the request table (or of `request_columns`), plus
    `completed` (bool) from its end_state."""
    get = (
        (lambda name: np.asarray(table[name]))
        if isinstance(table, dict)
        else (lambda name: table[name].to_numpy())
    )
    cols = {name: get(name).astype(bool) if name in _FLAGS else get(name) for name in names}
    cols["completed"] = cols["end_state"] == END_STATE_NAMES[COMPLETED]
    return cols


def timeline_table(samples: np.ndarray) -> pd.DataFrame:
    """The sampled timeline ([T, I, 6], types.TIMELINE_COLUMNS; NaN where no step started) as
    one row per sample, by time: t_s (seconds), instance, queue_len, running (requests),
    batch_tokens (tokens), kv_blocks, preemptions (so far)."""
    periods, instances, _ = samples.shape
    flat = samples.reshape(periods * instances, -1)
    keep = np.isfinite(flat[:, 0])
    table = pd.DataFrame(flat[keep], columns=list(TIMELINE_COLUMNS))
    table.insert(1, "instance", np.tile(np.arange(instances), periods)[keep])
    for col in TIMELINE_COLUMNS[1:]:
        table[col] = table[col].astype(np.int64)
    return table.sort_values(["t_s", "instance"], kind="stable", ignore_index=True)


def _stats(prefix: str, values: np.ndarray) -> dict:
    v = values[np.isfinite(values)]
    if len(v) == 0:
        return {f"{prefix}_{k}_s": float("nan") for k in ("mean", "p50", "p90", "p99")}
    p50, p90, p99 = percentiles(np.sort(v), (50, 90, 99))
    return {
        f"{prefix}_mean_s": float(v.mean()),
        f"{prefix}_p50_s": p50,
        f"{prefix}_p90_s": p90,
        f"{prefix}_p99_s": p99,
    }


def _core(cols: dict, rows, window_s: float, cost_usd: float, warmup_s: float) -> dict:
    """The headline metrics of the requests in `rows` ([N] bool) of the table's columns
    (`_columns`)."""
    c = rows & cols["counted"]
    state = cols["end_state"]
    completed = cols["completed"]
    done = c & completed
    # service rate: completions inside the window, whoever arrived when -- which a backlogged
    # engine cannot raise by finishing its queue during the drain
    fin = cols["finish_s"]
    in_window = rows & completed & (fin >= warmup_s) & (fin <= warmup_s + window_s)
    q = c & cols["qualifies"]
    delivered = cols["output_tokens_delivered"]
    useful = float(delivered[q].sum())
    failed_check = c & ~cols["quality_ok"]
    lost = failed_check & cols["slo_ok"]  # on time, but failed the task check
    n_failed = int((failed_check & completed).sum())
    n_done, n, n_q = int(done.sum()), int(c.sum()), int(q.sum())
    count = lambda end: int((c & (state == END_STATE_NAMES[end])).sum())
    m = {
        "n_requests": n,
        "offered_rps": n / window_s,
        "n_completed": n_done,
        "n_rejected": count(REJECTED),
        "n_cancelled": count(CANCELLED),
        # of those, cancelled after their first token (the client aborted mid-stream)
        "n_cancelled_mid_stream": int(
            (c & (state == END_STATE_NAMES[CANCELLED]) & np.isfinite(cols["first_token_s"])).sum()
        ),
        "n_expired": count(EXPIRED),
        "n_evicted": count(EVICTED),
        "n_outstanding": count(OUTSTANDING),
        "rejected_by": _rejected_by(cols, c),
    }
    m.update(_stats("ttft", cols["ttft_s"][done]))
    m.update(_stats("tpot", cols["tpot_s"][done]))
    m.update(_stats("e2e", cols["e2e_s"][done]))
    m.update(
        {
            # throughput and goodput count one population, the counted requests, over one window
            # (as vllm bench serve's request_throughput and request_goodput): goodput <= throughput
            "throughput_rps": n_done / window_s,
            "output_tokens_per_s": float(delivered[done].sum()) / window_s,
            "goodput_rps": n_q / window_s,
            "service_rate_rps": float(in_window.sum()) / window_s,
            "slo_attainment": n_q / n if n else float("nan"),
            "useful_tokens": useful,
            "useful_tokens_per_dollar": useful / cost_usd if cost_usd > 0 else float("nan"),
            # undefined (NaN, written as null / empty) when nothing qualifies: no output holds inf
            "cost_per_qualifying_request_usd": cost_usd / n_q if n_q else float("nan"),
            "n_quality_failed": n_failed,
            "quality_failure_rate": n_failed / n_done if n_done else float("nan"),
            "goodput_lost_to_quality_rps": float(lost.sum()) / window_s,
            "useful_tokens_lost_to_quality": float(delivered[lost].sum()),
        }
    )
    return m


def _mean_in_system(trace: RequestTrace, res: ScenarioResult, st: dict, sim_s: float) -> float:
    """Time-average of requests arrived and not ended. One instance integrates it in the loop;
    with several (their iterations overlap in time) it is integrated here from each request's
    arrival and end (outstanding ones until the simulation's end)."""
    if sim_s <= 0:
        return float("nan")
    if np.size(st["busy_s"]) == 1:
        return float(st["occupancy_s"]) / sim_s
    end = np.where(np.isfinite(res.finish), np.minimum(res.finish, sim_s), sim_s)
    return float(np.sum(np.maximum(end - trace.arrival, 0.0))) / sim_s


def compute_metrics(
    trace: RequestTrace,
    res: ScenarioResult,
    spec: MetricsSpec,
    table: pd.DataFrame | dict | None = None,
) -> dict:
    """Aggregate metrics over the measurement window (arrivals from warm-up to the last arrival).

    Rates are per second of the window. Throughput counts the counted requests that completed,
    goodput those of them that qualify (so goodput <= throughput); output_tokens_per_s is the output
    of the completed counted requests; service_rate_rps counts the completions that fall inside the
    window whoever arrived when (what a backlogged engine sustains). Cost is the GPUs provisioned
    from the warm-up's end until the simulation ends (the drain that finishes counted requests is
    paid for): price x GPUs x hours. busy_fraction is the time an instance spends in iterations over
    the simulated time (not model FLOPs utilization: a busy engine can be memory-bound at a few
    percent of peak); mfu and mbu are the model's FLOPs and bytes over the GPUs' peaks for the
    simulated time (`_utilization`). energy_j, mean_power_w, joules_per_useful_token,
    energy_cost_usd and energy_cost_share are run/energy.py's, over the same window as the cost.
    ITL pools every inter-token gap of the run (warm-up included),
    from a histogram. wasted_token_ratio = tokens computed for requests that did not qualify, plus
    recomputation of those that did, over all tokens computed.

    Not-a-number only where a metric is undefined (see ALWAYS_FINITE for the ones that never are):
    TTFT/TPOT/E2E statistics with no completed counted request (TPOT also when every completion has
    one output token), ITL statistics with no inter-token gap, busy_fraction, mfu, mbu, model_flops,
    model_bytes and mean_in_system when no simulated time passed, useful_tokens_per_dollar when the
    cost is 0 (a price of 0), slo_attainment with no counted request, quality_failure_rate with no
    completed counted request, spec_acceptance_rate and spec_tokens_per_pass without a draft pass,
    cost_per_qualifying_request_usd when nothing qualifies, joules_per_useful_token when no
    token is useful, energy_cost_share when both costs are 0. Any other non-finite value raises
    ServetuneError.

    Quality (servetune.config.quality): n_quality_failed counts the completed counted requests that
    failed their task check, quality_failure_rate is their share of the completed ones, and
    goodput_lost_to_quality_rps / useful_tokens_lost_to_quality are the requests (per second
    of the window) and output tokens that met every SLO but do not qualify because of it.
    """
    table = request_columns(trace, res, spec) if table is None else table
    sim_s = res.clock_s
    provisioned_s = max(sim_s - spec.warmup_s, 0.0)
    window_s = float(trace.arrival[-1]) - spec.warmup_s
    if window_s <= 0:  # every counted request arrived at once (an offline batch)
        window_s = max(provisioned_s, 1e-9)
    st = res.stats
    cost_usd = spec.price_per_gpu_hour * spec.n_gpus * provisioned_s / 3600.0
    instance_s = sim_s  # seconds each instance was provisioned, on average
    if spec.gpus_per_replica:  # an autoscaled fleet: the replicas its log says were provisioned
        usd_per_replica_s = spec.price_per_gpu_hour * spec.gpus_per_replica / 3600.0
        paid_s = fleet_metrics.paid_replica_s(st, spec.warmup_s, sim_s, spec.spot_price_ratio)
        cost_usd = paid_s * usd_per_replica_s
        instance_s = fleet_metrics.provisioned_replica_s(st, 0.0, sim_s) / np.size(st["busy_s"])
    cols = _columns(table)
    m = _core(cols, np.ones(len(trace), bool), window_s, cost_usd, spec.warmup_s)
    computed = cols["tokens_computed"].astype(np.float64)
    hist = np.asarray(st["itl_hist"])
    itl_p50, itl_p90, itl_p99 = histogram.quantiles(hist, (0.5, 0.9, 0.99))
    m.update(
        {
            "itl_mean_s": histogram.mean(hist),
            "itl_p50_s": itl_p50,
            "itl_p90_s": itl_p90,
            "itl_p99_s": itl_p99,
            "cost_usd": cost_usd,
            # busy time over provisioned instance time (averaged over instances)
            "busy_fraction": (
                float(np.sum(st["busy_s"])) / (instance_s * np.size(st["busy_s"]))
                if instance_s > 0
                else float("nan")
            ),
            **_utilization(np.asarray(st["work"]), spec.work, instance_s),
            **_wasted(cols, computed),
            # useful output per unit of compute: useful tokens / tokens computed (all requests)
            "useful_tokens_per_computed_token": (
                m["useful_tokens"] / computed.sum() if computed.sum() > 0 else 0.0
            ),
            "n_kv_compressed": int(cols["kv_compressed"].sum()),
            "kv_blocks": int(spec.kv_blocks),  # KV capacity (after weights, at kv_bits)
            "kv_peak_occupancy": float(
                np.max(
                    np.asarray(st["kv_peak_blocks"])
                    / (spec.kv_blocks if spec.cascade is None else spec.cascade.kv_blocks())
                )
            ),
            "sim_duration_s": sim_s,
            "provisioned_s": provisioned_s,
            "mean_in_system": _mean_in_system(trace, res, st, sim_s),
            "window_s": window_s,
            **_engine_counts(st),
        }
    )
    m.update(_energy(st, spec, sim_s, provisioned_s, m["useful_tokens"], cost_usd, instance_s))
    if spec.gpus_per_replica:
        m.update(
            fleet_metrics.fleet_metrics(
                st, spec.warmup_s, sim_s, usd_per_replica_s, spec.spot_price_ratio
            )
        )
    m.update(_speculation_metrics(st))
    if "prefix_lookups" in st:  # prefix caching (engine/prefix.py), as vLLM 0.32 counts it
        m.update(_prefix_metrics(st))
    m["by_class"] = _by_class(trace, cols, window_s, cost_usd, spec.warmup_s)
    if spec.cascade is not None and "retried" in table:  # model cascade (servetune.config.cascade)
        frame = table if isinstance(table, pd.DataFrame) else pd.DataFrame(table)
        m.update(cascade_lib.metrics(frame, window_s, spec.cascade, st["busy_s"], sim_s))
    _check_finite(m)
    return m


def _engine_counts(st: dict) -> dict:
    """What the engine did, from the run's statistics: iterations (stepped and leaped, loop
    bodies that took the simple step), preemptions, tokens processed, the largest batch, the
    capacity counters and the entry width it ended at."""
    return {
        "preemptions": int(st["preemptions"]),
        "prefill_tokens": int(st["prefill_tokens"]),  # prompt and recomputed tokens processed
        "decode_tokens": int(st["decode_tokens"]),
        "iterations": int(st["steps"]),
        "leaped_iterations": int(st["leaped"]),
        "simple_steps": int(st["simple"]),  # loop bodies that took the simple step
        "max_running": int(np.max(st["max_running"])),
        "queue_window_overflow": int(st["window_overflow"]),
        "slot_bound_iterations": int(st["slot_bound"]),
        # entries per instance the run ended at, and how often it widened
        # (servetune/engine/width.py)
        "entry_width": int(st.get("entry_width", 0)),
        "widenings": int(st.get("widenings", 0)),
        "stalled": bool(int(st["invariants"]) & STALLED),
    }


def _wasted(cols: dict, computed: np.ndarray) -> dict:
    """wasted_token_ratio (tokens computed for requests that did not qualify, plus the
    recomputation of those that did, over all tokens computed) and its two parts in tokens:
    wasted_recomputed_tokens (recomputation after preemption of qualifying requests) and
    wasted_missed_tokens (every token of a request that did not qualify). `computed` [N]:
    tokens computed per request."""
    minimal = (cols["prompt_tokens"] + cols["output_tokens"] - 1).astype(np.float64)
    qual = cols["qualifies"]
    recomputed = float(np.where(qual, np.maximum(computed - minimal, 0.0), 0.0).sum())
    missed = float(np.where(qual, 0.0, computed).sum())
    total = computed.sum()
    return {
        "wasted_token_ratio": (recomputed + missed) / total if total > 0 else 0.0,
        "wasted_recomputed_tokens": recomputed,
        "wasted_missed_tokens": missed,
    }


def _instance_flops(work: np.ndarray, models: tuple) -> np.ndarray:
    """Model FLOPs [I] of each instance from its work counters ([I, 4]: iterations, tokens,
    context tokens read, attention work): 2 x parameters x tokens + attention."""
    return (
        _per_instance(models, "flops_per_token") * work[:, 1]
        + _per_instance(models, "attn_flops_per_work") * work[:, 3]
    )


def _per_instance(models: tuple, name: str) -> np.ndarray:
    """[I] field `name` of each instance's hardware.ModelWork."""
    return np.asarray([getattr(m, name) for m in models], np.float64)


def _utilization(work: np.ndarray, models: tuple, sim_s: float) -> dict:
    """Model FLOPs and memory-bandwidth utilization over the simulated time, from each
    instance's work counters ([I, 4]: iterations, tokens, context tokens read, attention work)
    and its model and GPUs (hardware.ModelWork), with the roofline's accounting: FLOPs = 2 x
    parameters x tokens + attention; bytes = weights once per iteration + KV of the context
    read and of the new tokens. Over the GPUs' peak rates (not the cost model's efficiencies)."""
    if not models:  # a MetricsSpec built without the hardware: nothing to say
        return {}
    if sim_s <= 0:
        return {
            "model_flops": float("nan"),
            "model_bytes": float("nan"),
            "mfu": float("nan"),
            "mbu": float("nan"),
        }
    get = lambda name: _per_instance(models, name)
    iterations, tokens, ctx_read, _ = work.T
    flops = _instance_flops(work, models)
    moved = get("weight_bytes") * iterations + get("kv_bytes_per_token") * (ctx_read + tokens)
    return {
        "model_flops": float(flops.sum()),
        "model_bytes": float(moved.sum()),
        "mfu": float(flops.sum() / (get("peak_flops").sum() * sim_s)),
        "mbu": float(moved.sum() / (get("peak_bytes_per_s").sum() * sim_s)),
    }


def _energy(
    st: dict,
    spec: MetricsSpec,
    sim_s: float,
    provisioned_s: float,
    useful: float,
    cost: float,
    instance_s: float,
) -> dict:
    """run/energy.py's metrics of the run: energy over the provisioned window, joules per
    useful token, its cost and share (none without the instances' hardware). `instance_s`:
    seconds each instance was provisioned on average (sim_s but for an autoscaled fleet, whose
    replicas draw idle power only while provisioned)."""
    if not spec.work or sim_s <= 0:
        return {}
    busy = np.asarray(st["busy_s"], np.float64).reshape(-1)
    tdp = _per_instance(spec.work, "tdp_w")
    joules = energy.instance_energy_j(
        busy,
        _instance_flops(np.asarray(st["work"], np.float64), spec.work),
        _per_instance(spec.work, "peak_flops"),
        tdp,
        sim_s,
        spec.idle_power_fraction,
    ).sum()
    if spec.gpus_per_replica:  # idle only while provisioned (one GPU model: tdp is uniform)
        idle_s = max(instance_s * busy.size - busy.sum(), 0.0)
        joules += (idle_s - (sim_s * busy.size - busy.sum())) * tdp[0] * spec.idle_power_fraction
    return energy.energy_metrics(
        float(joules), sim_s, provisioned_s, useful, cost, spec.energy_price_usd_per_kwh
    )


def _speculation_metrics(st: dict) -> dict:
    """Speculative decoding's acceptance rate, tokens per draft pass (nan without draft
    passes) and draft tokens proposed."""
    passes = float(st["spec_passes"])
    return {
        "spec_acceptance_rate": (
            float(st["spec_accepted"]) / float(st["spec_proposed"])
            if st["spec_proposed"] > 0
            else float("nan")
        ),
        "spec_tokens_per_pass": float(st["spec_emitted"]) / passes if passes else float("nan"),
        "spec_draft_tokens": int(st["spec_proposed"]),
    }


def _prefix_metrics(st: dict) -> dict:
    """Prefix caching's counts as vLLM 0.32's PrefixCacheStats has them (new and re-admitted
    requests, queried and hit tokens), the hit rate, evictions and insertions."""
    (new_reqs, queries, hits), (re_reqs, re_queries, re_hits) = (
        [int(v) for v in row] for row in np.asarray(st["prefix_lookups"])
    )
    return {
        "prefix_hit_rate": hits / queries if queries else float("nan"),
        "prefix_requests": new_reqs,
        "prefix_queries": queries,
        "prefix_hits": hits,
        "prefix_preempted_requests": re_reqs,
        "prefix_preempted_queries": re_queries,
        "prefix_preempted_hits": re_hits,
        "prefix_evictions": int(st["prefix_evictions"]),
        "prefix_insert_failed": int(st["prefix_insert_failed"]),
        "prefix_insert_deferred_iterations": int(st["prefix_insert_deferred"]),
    }


def _by_class(
    trace: RequestTrace, cols: dict, window_s: float, cost_usd: float, warmup_s: float
) -> dict:
    """{request class: its counts, goodput and latency percentiles} for the classes present."""
    out = {}
    for name in trace.class_names:
        rows = cols["class"] == name
        if rows.any():
            c = _core(cols, rows, window_s, cost_usd, warmup_s)
            out[name] = {
                k: c[k]
                for k in (
                    "n_requests",
                    "n_completed",
                    "n_rejected",
                    "n_outstanding",
                    "goodput_rps",
                    "slo_attainment",
                    "ttft_p50_s",
                    "ttft_p99_s",
                    "tpot_p50_s",
                    "tpot_p99_s",
                    "e2e_mean_s",
                    "e2e_p99_s",
                )
            }
    return out


# Metrics that are finite in every run; a NaN or inf here means the simulation went wrong (e.g.
# a clock that overflowed), and is raised rather than reported.
ALWAYS_FINITE = (
    "offered_rps",
    "throughput_rps",
    "output_tokens_per_s",
    "goodput_rps",
    "service_rate_rps",
    "useful_tokens",
    "cost_usd",
    "wasted_token_ratio",
    "kv_peak_occupancy",
    "sim_duration_s",
    "provisioned_s",
    "window_s",
    "goodput_lost_to_quality_rps",
    "useful_tokens_lost_to_quality",
)


def _check_finite(m: dict) -> None:
    bad = {k: m[k] for k in ALWAYS_FINITE if not np.isfinite(m[k])}
    if bad:
        raise ServetuneError(
            f"metrics: {bad} not finite; every input was validated, so this is "
            f"a simulator bug (or times beyond float range) -- please report it"
        )
