"""The per-request table and the trace that every import of a deployment's own record yields
(validate/bench_import.py, validate/otel_import.py), in the shape of `servetune observe`'s."""

from __future__ import annotations

import math

import numpy as np


def non_negative(v, whole: bool = False) -> bool:
    """Whether a value read from a record is a finite number >= 0 (a whole one with `whole`);
    booleans are not numbers here."""
    return (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
            and v >= 0 and (not whole or float(v).is_integer()))


def request_columns(arrival, prompt, output, first, finish, ok) -> tuple[dict, dict]:
    """(requests.parquet's columns, the trace's) from per-request arrays [N] in the record's
    order: arrival, first token and finish (seconds, one clock), prompt and output tokens, and
    whether the request succeeded (`ok`; the others get end state `failed` and no times). The
    trace holds the succeeded requests with at least one output token, in arrival order."""
    first, finish = np.where(ok, first, np.nan), np.where(ok, finish, np.nan)
    tpot = np.where(ok & (output > 1), (finish - first) / np.maximum(output - 1, 1), np.nan)
    requests = {"request": np.arange(len(arrival)), "arrival_s": arrival,
                "prompt_tokens": prompt, "output_tokens": output, "first_token_s": first,
                "finish_s": finish, "output_tokens_delivered": np.where(ok, output, 0),
                "end_state": np.where(ok, "completed", "failed"), "ttft_s": first - arrival,
                "tpot_s": tpot, "e2e_s": finish - arrival}
    order = np.argsort(arrival, kind="stable")
    keep = order[ok[order] & (output[order] > 0)]
    trace = {"arrival_s": arrival[keep], "prompt_tokens": prompt[keep],
             "output_tokens": output[keep]}
    return requests, trace
