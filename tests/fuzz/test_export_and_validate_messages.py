"""Silent acceptances, with hand-made values (no simulation runs here): a tuned value
that vLLM's startup checks moved outside its tune.space range is exported with a warning naming
the knob, the value, the range and the check; `servetune validate` counts the NaN or infinite
latencies it leaves out and names both inputs of every comparison it refuses."""

import math

import numpy as np
import pandas as pd
import pytest

from servetune.deploy.export import range_warnings, vllm_args, vllm_warnings
from servetune.tuning.space import Constraints
from servetune.validate import predict

ENGINE = {
    "batching": "continuous",
    "kv_layout": "paged",
    "chunked_prefill": True,
    "block_size": 16,
    "max_model_len": 8192,
}
KEPT = "and vLLM needs it to start, so it is exported as is"


def _moved(constraints: Constraints, tuned: dict, untuned: dict, chunked: bool = True) -> dict:
    """vllm_args() of `tuned` (policy key -> value) after the tuner's projection, with the
    untuned limits `untuned` in the policy."""
    projected = constraints.apply({k: np.asarray(v, np.float64) for k, v in tuned.items()})
    values = {**untuned, **{k: float(v) for k, v in projected.items()}}
    return vllm_args(values, {**ENGINE, "chunked_prefill": chunked}, "fcfs")


@pytest.mark.parametrize(
    "constraints, tuned, untuned, chunked, ranges, message",
    [
        (
            Constraints(),
            {"max_num_seqs": 1536, "max_num_batched_tokens": 600},
            {},
            True,
            {"max_num_batched_tokens": (256, 1024)},
            (
                "max_num_batched_tokens = 1536 is outside its tuned range [256, 1024] "
                "(tune.space.max_num_batched_tokens): vLLM's startup check max_num_batched_tokens "
                ">= "
                f"max_num_seqs (1536) moved it there, {KEPT}; widen "
                "tune.space.max_num_batched_tokens to "
                "tune it there"
            ),
        ),
        (
            Constraints(8192, False),
            {"max_num_seqs": 64, "max_num_batched_tokens": 2048},
            {},
            False,
            {"max_num_batched_tokens": (256, 4096)},
            (
                "max_num_batched_tokens = 8192 is outside its tuned range [256, 4096] "
                "(tune.space.max_num_batched_tokens): vLLM's startup check max_num_batched_tokens "
                ">= "
                f"max_model_len with chunked prefill off (8192) moved it there, {KEPT}; widen "
                "tune.space.max_num_batched_tokens to tune it there"
            ),
        ),
        (
            Constraints(fixed=(("max_num_batched_tokens", 32.0),)),
            {"max_num_seqs": 100},
            {"max_num_batched_tokens": 32},
            True,
            {"max_num_seqs": (64, 1536)},
            (
                "max_num_seqs = 32 is outside its tuned range [64, 1536] "
                "(tune.space.max_num_seqs): vLLM's "
                "startup check max_num_batched_tokens >= max_num_seqs (32) moved it there, "
                f"{KEPT}; widen "
                "tune.space.max_num_seqs to tune it there"
            ),
        ),
        (
            Constraints(fixed=(("max_num_active_seqs", 2048.0),)),
            {"max_num_seqs": 1000},
            {"max_num_active_seqs": 2048, "max_num_batched_tokens": 4096},
            True,
            {"max_num_seqs": (8, 1536)},
            (
                "max_num_seqs = 2048 is outside its tuned range [8, 1536] "
                "(tune.space.max_num_seqs): "
                "vLLM's startup check max_num_seqs >= max_num_active_seqs (2048) moved it there, "
                f"{KEPT}; "
                "widen tune.space.max_num_seqs to tune it there"
            ),
        ),
        (
            Constraints(fixed=(("max_num_seqs", 256.0),)),
            {"max_num_active_seqs": 500},
            {"max_num_seqs": 256},
            True,
            {"max_num_active_seqs": (300, 4096)},
            (
                "max_num_active_seqs = 256 is outside its tuned range [300, 4096] "
                "(tune.space.max_num_active_seqs): vLLM's startup check max_num_active_seqs <= "
                f"max_num_seqs (256) moved it there, {KEPT}; widen tune.space.max_num_active_seqs "
                "to tune "
                "it there"
            ),
        ),
        (
            Constraints(8192),
            {"long_prefill_token_threshold": 20000},
            {},
            True,
            {"long_prefill_token_threshold": (16384, 65536)},
            (
                "long_prefill_token_threshold = 8192 is outside its tuned range [16384, 65536] "
                "(tune.space.long_prefill_token_threshold): vLLM's startup check "
                f"long_prefill_token_threshold <= max_model_len (8192) moved it there, {KEPT}; "
                "widen "
                "tune.space.long_prefill_token_threshold to tune it there"
            ),
        ),
    ],
)
def test_each_vllm_check_that_moves_a_value_out_of_range_is_named(
    constraints, tuned, untuned, chunked, ranges, message
):
    args = _moved(constraints, tuned, untuned, chunked)
    assert range_warnings(args, ranges) == [message]
    assert vllm_warnings(args, ranges) == [message]
    assert vllm_warnings(args) == []  # no search space known (a simulate run's export)


def test_a_value_no_check_explains_is_still_warned_of():
    args = vllm_args({"max_num_seqs": 5000, "max_num_batched_tokens": 8192}, ENGINE, "fcfs")
    assert range_warnings(args, {"max_num_seqs": (8, 1536)}) == [
        (
            "max_num_seqs = 5000 is outside its tuned range [8, 1536] (tune.space.max_num_seqs): "
            "no "
            "vLLM startup check moved it there; widen tune.space.max_num_seqs to tune it there"
        )
    ]


def test_values_floored_inside_their_range_are_not_warned_of():
    # 8.7 within [8.5, 1024.5] is exported as 8 sequences and 1024.9 as 1024 tokens: floored
    # as the value is, the range still holds them
    args = vllm_args({"max_num_seqs": 8.7, "max_num_batched_tokens": 1024.9}, ENGINE, "fcfs")
    ranges = {
        "max_num_seqs": (8.5, 1024.5),
        "max_num_batched_tokens": (256, 1024.5),
        "watermark": (0.05, 0.1),
    }  # not a key vLLM's checks move: not looked at
    assert range_warnings(args, ranges) == []


# ------------------------------------------------------------------------ validate's inputs


def _frame(n: int, **columns) -> pd.DataFrame:
    base = {m: np.linspace(0.1, 1.0, n) for m in predict.METRICS}
    return pd.DataFrame({**base, **columns})


def test_nonfinite_latencies_are_counted_per_metric_and_kind():
    frame = _frame(
        6,
        ttft_s=[np.nan, 0.2, np.inf, 0.4, -np.inf, 0.6],
        tpot_s=[np.nan, np.nan, 0.3, 0.4, 0.5, 0.6],
    )
    counts = predict.nonfinite(frame)
    assert counts == {
        "ttft_s": {"nan": 1, "inf": 2},
        "tpot_s": {"nan": 2, "inf": 0},
        "e2e_s": {"nan": 0, "inf": 0},
    }
    assert predict.dropped_line("B/requests.parquet", counts) == (
        "dropped: B/requests.parquet has 1 NaN ttft_s, 2 infinite ttft_s, 2 NaN tpot_s; those "
        "requests are left out of that latency's comparison (validation.json: dropped)"
    )
    assert predict.dropped_line("B/requests.parquet", predict.nonfinite(_frame(3))) is None


def test_a_request_with_a_nonfinite_latency_is_left_out_on_both_sides():
    observed = _frame(5, ttft_s=[0.1, np.nan, 0.3, np.inf, 0.5])
    predicted = _frame(5, ttft_s=[0.2, 0.4, 0.6, 0.8, 1.0])
    row = predict.compare(predicted, observed)["ttft_s"]
    # requests 0, 2 and 4 remain: predicted 0.2, 0.6, 1.0 against 0.1, 0.3, 0.5
    assert row["mean"] == {
        "predicted": pytest.approx(0.6),
        "observed": pytest.approx(0.3),
        "rel_error": pytest.approx(1.0),
    }
    assert row["per_request_rel_error"] == {"p50": pytest.approx(1.0), "p90": pytest.approx(1.0)}
    nothing = predict.compare(predicted, _frame(5, ttft_s=[np.nan] * 5))["ttft_s"]
    assert math.isnan(nothing["p99"]["observed"])
    assert math.isnan(nothing["per_request_rel_error"]["p90"])


def test_a_refused_comparison_names_both_inputs():
    names = ("the replay of R/trace.csv", "R/requests.parquet")
    with pytest.raises(predict.TraceError) as err:
        predict.compare(_frame(3), _frame(4), names)
    assert str(err.value) == (
        "the replay of R/trace.csv holds 3 requests and "
        "R/requests.parquet 4; expected the same trace slice"
    )
    with pytest.raises(predict.TraceError) as err:
        predict.compare(
            _frame(3, prompt_tokens=[5, 6, 7]),
            _frame(3, prompt_tokens=[5, 6, 8]),
            ("N/requests.parquet", "R/requests.parquet"),
        )
    assert str(err.value) == (
        "request 2 of 3: N/requests.parquet has 7 prompt tokens and "
        "R/requests.parquet 8; expected the same requests in the same "
        "order"
    )
