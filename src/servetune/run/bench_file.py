"""vllm_bench.json: a simulated run as the JSON `vllm bench serve --save-result` writes (vLLM 0.32,
vllm/benchmarks/serve.py), key for key and in its order, so that a real benchmark's file and
the simulation's can be diffed.

- Run metadata: date, endpoint_type and backend ("vllm"), label, model_id and tokenizer_id
  (the model the run names), num_prompts (the counted requests), request_rate (req/s),
  burstiness (the Gamma shape of the arrival gaps), max_concurrency (null: the simulated
  clients never wait for one another). For a trace, request_rate is its mean arrival rate and
  burstiness 1 / CV^2 of its gaps, the shape vLLM's generator would need to send as burstily.
- The aggregates (`metrics.bench_metrics`) in vLLM's units: seconds, tokens, req/s, tok/s, ms.
- The per-request arrays of `--save-detailed` (input_lens, output_lens, ttfts, itls, latencies,
  start_times, queue_times, generated_texts, errors) over the counted requests in arrival order;
  a request that did not complete is a failed one as vLLM records it (0 output tokens, TTFT and
  latency 0, no ITLs) with its end state as the error. servetune keeps no per-token clock, so a
  request's `itls` are its mean inter-token gap (TPOT) once per token after the first: their
  sum is its latency less its TTFT, as in vLLM's. Long runs leave the arrays out as vLLM does
  without --save-detailed (`output.save_detailed`: null = only while the arrays hold at most
  DETAILED_VALUES numbers; true / false always / never). `latencies` and `queue_times` stay
  in either case, as in vLLM's file.
"""

from __future__ import annotations

import math
from datetime import datetime

import numpy as np

BACKEND = "vllm"  # what vLLM 0.32's own server is named among `vllm bench serve --backend`s
DETAILED_VALUES = 200_000  # the most per-request numbers (ITLs included) written by default
DATE_FORMAT = "%Y%m%d-%H%M%S"  # vLLM's `date`
# vLLM 0.32's order of the aggregates before its per-request arrays
_HEAD = (
    "duration",
    "completed",
    "failed",
    "total_input_tokens",
    "total_output_tokens",
    "request_throughput",
    "request_goodput",
    "output_throughput",
    "total_token_throughput",
)
METRIC_ORDER = ("ttft", "tpot", "itl", "e2el")
DETAILED_ONLY = (
    "input_lens",
    "output_lens",
    "start_times",
    "ttfts",
    "itls",
    "generated_texts",
    "errors",
)  # the arrays vLLM drops without --save-detailed
_ERRORS = {  # an end state other than completed, as the benchmark client would report it
    "rejected": "rejected by the server ({reason})",
    "cancelled": "cancelled by the client (workload.patience)",
    "expired": "dropped by the server at its deadline (workload.deadline_s)",
    "outstanding": "not finished when the simulation stopped (engine.drain_s)",
    "evicted": "evicted by the server",
}


def arrival_shape(arrival_s: np.ndarray) -> tuple[float, float]:
    """(mean arrival rate in req/s, Gamma shape of the gaps = 1 / CV^2) of sorted arrival times
    in seconds; (inf, 1.0) when they all arrive at once or there are fewer than two."""
    gaps = np.diff(np.sort(np.asarray(arrival_s, dtype=np.float64)))
    span = float(gaps.sum()) if len(gaps) else 0.0
    if span <= 0.0:
        return math.inf, 1.0
    cv = float(gaps.std() / gaps.mean())
    return len(gaps) / span, (1.0 / cv**2 if cv > 0 else math.inf)


def about(
    model_id: str, arrival_s: np.ndarray, vllm_bench: dict | None, when: datetime | None = None
) -> dict:
    """The run metadata vLLM writes first: `vllm_bench` (workload.vllm_bench, vLLM's own flags)
    gives request_rate and burstiness when set, else the trace's arrivals do (`arrival_shape`);
    num_prompts is the number of `arrival_s` (the counted requests)."""
    rate, burstiness = arrival_shape(arrival_s)
    if vllm_bench:
        rate = float(vllm_bench.get("request_rate") or rate)
        burstiness = float(vllm_bench.get("burstiness") or 1.0)
    return {
        "date": (when or datetime.now()).strftime(DATE_FORMAT),
        "endpoint_type": BACKEND,
        "backend": BACKEND,
        "label": None,
        "model_id": model_id,
        "tokenizer_id": model_id,
        "num_prompts": len(arrival_s),
        "request_rate": rate if math.isfinite(rate) else "inf",
        "burstiness": burstiness,
        "max_concurrency": None,
    }


def _requests(cols: dict) -> dict:
    """The per-request arrays over the counted requests of the request table `cols`."""
    c = np.asarray(cols["counted"], dtype=bool)
    order = np.argsort(np.asarray(cols["arrival_s"])[c], kind="stable")
    pick = {
        k: np.asarray(v)[c][order]
        for k, v in cols.items()
        if k
        in (
            "end_state",
            "reject_reason",
            "arrival_s",
            "prompt_tokens",
            "output_tokens_delivered",
            "ttft_s",
            "tpot_s",
            "e2e_s",
        )
    }
    done = pick["end_state"] == "completed"
    out_lens = np.where(done, pick["output_tokens_delivered"], 0).astype(np.int64)
    gap = np.where(done & (out_lens > 1), np.nan_to_num(pick["tpot_s"]), 0.0)
    reasons = pick.get("reject_reason", np.full(len(done), None, dtype=object))
    return {
        "input_lens": pick["prompt_tokens"].astype(np.int64).tolist(),
        "output_lens": out_lens.tolist(),
        "ttfts": np.where(done, pick["ttft_s"], 0.0).tolist(),
        "itls": [
            [g] * int(max(n - 1, 0)) for g, n in zip(gap.tolist(), out_lens.tolist(), strict=True)
        ],
        "latencies": np.where(done, pick["e2e_s"], 0.0).tolist(),
        "start_times": pick["arrival_s"].astype(np.float64).tolist(),
        "queue_times": [0.0] * len(done),
        "generated_texts": [""] * len(done),
        "errors": [
            "" if state == "completed" else _ERRORS.get(state, state).format(reason=r)
            for state, r in zip(pick["end_state"].tolist(), reasons.tolist(), strict=True)
        ],
    }


def peaks(
    start: np.ndarray, ttft: np.ndarray, gap: np.ndarray, out_lens: np.ndarray, latency: np.ndarray
) -> tuple[float, int]:
    """vLLM's max_output_tokens_per_s and max_concurrent_requests over completed requests (all
    arrays [N], seconds and tokens): tokens bucketed by the whole second since the first start
    at which each arrives (the first at start + TTFT, the rest one gap apart), and requests
    counted in every second from their start's to their end's."""
    if len(start) == 0:
        return 0.0, 0
    t0 = float(start.min())
    seconds = int(np.ceil(float((start + latency).max()) - t0)) + 1
    tokens = np.zeros(seconds)
    for lo in range(0, len(start), 4096):  # bounded memory: a few thousand requests at a time
        s = slice(lo, lo + 4096)
        n = out_lens[s].astype(np.int64)
        k = np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n)
        when = np.repeat(start[s] + ttft[s] - t0, n) + k * np.repeat(gap[s], n)
        bucket = when.astype(np.int64)
        tokens += np.bincount(bucket[(bucket >= 0) & (bucket < seconds)], minlength=seconds)
    active = np.zeros(seconds + 1)
    np.add.at(active, (start - t0).astype(np.int64), 1)
    np.add.at(active, (start + latency - t0).astype(np.int64) + 1, -1)
    return float(tokens.max()), int(np.cumsum(active)[:seconds].max())


def bench_result(cols: dict, aggregates: dict, meta: dict, detailed: bool | None) -> dict:
    """The vllm_bench.json document of one scenario: `meta` (`about`), then `aggregates`
    (`metrics.bench_metrics`) and the per-request arrays (`_requests`) in vLLM 0.32's order.
    `detailed` None: the arrays of DETAILED_ONLY only while they hold at most DETAILED_VALUES
    numbers."""
    rows = _requests(cols)
    done = np.asarray([e == "" for e in rows["errors"]], dtype=bool)
    lens = np.asarray(rows["output_lens"], dtype=np.int64)
    start, ttft, latency = (
        np.asarray(rows[k], dtype=np.float64)[done] for k in ("start_times", "ttfts", "latencies")
    )
    gap = np.asarray([g[0] if g else 0.0 for g in rows["itls"]], dtype=np.float64)[done]
    top_tokens, top_requests = peaks(start, ttft, gap, lens[done], latency)
    if detailed is None:
        detailed = len(lens) * 8 + int(np.maximum(lens - 1, 0).sum()) <= DETAILED_VALUES
    doc = dict(meta)
    doc.update({k: aggregates[k] for k in _HEAD})
    doc.update({k: v for k, v in rows.items() if detailed or k not in DETAILED_ONLY})
    doc.update(
        {
            "max_output_tokens_per_s": top_tokens,
            "max_concurrent_requests": top_requests,
            "rtfx": 0.0,
        }
    )
    for metric in METRIC_ORDER:  # vLLM prints and stores ttft, tpot, itl, e2el in turn
        doc.update({k: v for k, v in aggregates.items() if k.endswith(f"_{metric}_ms")})
    doc.update({k: v for k, v in aggregates.items() if k not in doc})
    return doc
