"""Workload generators and trace handling: rates, burstiness, lengths, slicing, prediction."""

import numpy as np
import pytest

from servetune.workload.traces import (
    RaggedIds,
    RequestTrace,
    bundled_path,
    classify_by_prompt,
    load_trace,
    predict_output,
    slice_trace,
    synthetic,
)

LOGN = {"dist": "lognormal", "mean": 500, "cv": 1.0, "max": 10**6}


@pytest.mark.parametrize("arrival,cv", [("poisson", 1.0), ("gamma", 0.5), ("gamma", 3.0)])
def test_arrival_rate_and_burstiness(arrival, cv):
    tr = synthetic(
        rate=4.0,
        n_requests=40_000,
        arrival=arrival,
        cv=cv,
        prompt=LOGN,
        output={"dist": "fixed", "value": 10},
        seed=1,
    )
    gaps = np.diff(tr.arrival)
    assert abs(1 / gaps.mean() / 4.0 - 1) < 0.03
    assert abs(gaps.std() / gaps.mean() / cv - 1) < 0.06
    assert np.all(gaps >= 0) and tr.arrival[0] == 0


def test_length_distributions():
    tr = synthetic(
        rate=1.0,
        n_requests=40_000,
        prompt=LOGN,
        output={"dist": "empirical", "trace": "azure_llm_2023_conv.csv", "column": "output"},
        seed=2,
    )
    assert abs(tr.prompt.mean() / 500 - 1) < 0.05
    assert abs(tr.prompt.std() / tr.prompt.mean() - 1.0) < 0.15
    azure = load_trace(bundled_path("azure_llm_2023_conv.csv"))
    assert set(np.unique(tr.output)) <= set(np.unique(azure.output))
    assert abs(tr.output.mean() / azure.output.mean() - 1) < 0.05


def test_duration_bounds_synthetic_arrivals():
    tr = synthetic(rate=10.0, duration_s=60.0, prompt=LOGN, output=LOGN, seed=0)
    assert tr.arrival.max() < 60.0 and abs(len(tr) / 600 - 1) < 0.15


def test_bundled_azure_trace_matches_its_published_summary():
    tr = load_trace(bundled_path("azure_llm_2023_conv.csv"))
    # shared/traces/README.md: 19,366 rows, 3,502 s, prompt mean 1,155, output mean 211
    assert len(tr) == 19_366
    assert abs(tr.arrival[-1] - 3502) < 1
    assert round(tr.prompt.mean()) == 1155 and round(tr.output.mean()) == 211
    moon = load_trace(bundled_path("mooncake_conversation_600s.jsonl"))
    assert len(moon) == 1750 and moon.arrival[-1] < 600


def test_slice_rate_scale_and_cap():
    tr = load_trace(bundled_path("azure_llm_2023_conv.csv"))
    part = slice_trace(tr, start_s=600, duration_s=300)
    inside = (tr.arrival >= 600) & (tr.arrival < 900)
    assert len(part) == inside.sum() and part.arrival[0] >= 0 and part.arrival[-1] < 300
    fast = slice_trace(tr, start_s=600, duration_s=300, rate_scale=2.0, max_requests=100)
    assert len(fast) == 100
    np.testing.assert_allclose(fast.arrival, part.arrival[:100] / 2.0)
    np.testing.assert_array_equal(fast.prompt, part.prompt[:100])


def test_predictor_noise():
    tr = synthetic(rate=1.0, n_requests=20_000, prompt=LOGN, output=LOGN, seed=3)
    np.testing.assert_array_equal(predict_output(tr), tr.output)  # oracle
    noisy = predict_output(tr, sigma=0.5, seed=1)
    ratio = np.log(noisy / tr.output)
    assert abs(ratio.std() - 0.5) < 0.02 and abs(ratio.mean()) < 0.02
    assert not np.array_equal(noisy, predict_output(tr, sigma=0.5, seed=2))


def test_classes_by_prompt_length():
    tr = classify_by_prompt(synthetic(rate=1.0, n_requests=1000, prompt=LOGN, output=LOGN), 500)
    assert np.array_equal(tr.klass == 1, tr.prompt >= 500)
    assert tr.class_names == ("prompt<500", "prompt>=500")


def test_ragged_ids_index_like_a_per_request_column():
    ids = RaggedIds.from_rows([[1, 2, 3], None, [7], [8, 9]])
    assert len(ids) == 4 and ids.lengths().tolist() == [3, 0, 1, 2]
    assert ids[0].tolist() == [1, 2, 3] and ids[1].tolist() == []
    picked = ids[np.array([True, False, True, True])]
    assert [r.tolist() for r in picked] == [[1, 2, 3], [7], [8, 9]]
    assert [r.tolist() for r in ids[np.array([3, 0, 3])]] == [[8, 9], [1, 2, 3], [8, 9]]
    assert ids.dense(2).tolist() == [[1, 2], [-1, -1], [7, -1], [8, 9]]
    # a dense [N, H] -1-padded array given to RequestTrace becomes the same rows
    trace = RequestTrace(
        "t",
        np.zeros(2),
        np.ones(2, np.int32),
        np.ones(2, np.int32),
        hash_ids=np.array([[4, 5, -1], [6, -1, -1]]),
    )
    assert [r.tolist() for r in trace.hash_ids] == [[4, 5], [6]]


def test_one_long_hash_id_row_does_not_widen_the_others(tmp_path):
    """A row of 100k hash ids among 2,000 short rows: stored flat, ~100k ids, not the
    2,000 x 100k (800 MB) a padded table would take."""
    rows = [
        f'{{"timestamp": {k}, "input_length": 600, "output_length": 5, '
        f'"hash_ids": [{2 * k}, {2 * k + 1}]}}'
        for k in range(2000)
    ]
    long_ids = ", ".join(str(10_000 + j) for j in range(100_000))
    rows.append(
        '{"timestamp": 2000, "input_length": 60000, "output_length": 5, '
        f'"hash_ids": [{long_ids}]}}'
    )
    path = tmp_path / "wide.jsonl"
    path.write_text("\n".join(rows) + "\n")
    trace = load_trace(path)
    assert trace.hash_ids.ids.nbytes + trace.hash_ids.offsets.nbytes < 1_000_000
    assert trace.hash_ids.lengths()[-1] == 100_000 and trace.hash_ids[5].tolist() == [10, 11]


# ---- vllm bench serve's random dataset (workload=vllm_random)


def _vllm(**flags):
    from servetune.config.scenario import build
    from servetune.run import api

    return build(
        api.compose(
            ["workload=vllm_random"] + [f"workload.vllm_bench.{k}={v}" for k, v in flags.items()]
        )
    ).traces[0]


def test_vllm_random_lengths_and_arrivals_follow_vllms_random_dataset():
    tr = _vllm(
        random_input_len=1000,
        random_output_len=100,
        random_range_ratio=0.25,
        request_rate=8,
        burstiness=0.5,
        num_prompts=20000,
    )
    # lengths uniform over the integers of [floor(L (1 - r)), ceil(L (1 + r))]
    assert (tr.prompt.min(), tr.prompt.max()) == (750, 1250)
    assert (tr.output.min(), tr.output.max()) == (75, 125)
    assert abs(tr.prompt.mean() / 1000 - 1) < 0.01 and abs(tr.output.mean() / 100 - 1) < 0.01
    assert abs(np.var(tr.prompt) / ((501**2 - 1) / 12) - 1) < 0.05  # discrete uniform
    gaps = np.diff(tr.arrival)
    assert tr.arrival[0] == 0 and len(tr) == 20000
    assert abs(1 / gaps.mean() / 8 - 1) < 0.03
    assert abs(gaps.std() / gaps.mean() / np.sqrt(2) - 1) < 0.06  # Gamma shape 0.5: cv sqrt(2)


def test_vllm_random_keeps_the_arrivals_of_workload_duration_s():
    tr = _vllm(num_prompts=2000, request_rate=10)
    from servetune.config.scenario import build
    from servetune.run import api

    cut = build(
        api.compose(
            [
                "workload=vllm_random",
                "workload.vllm_bench.num_prompts=2000",
                "workload.vllm_bench.request_rate=10",
                "workload.duration_s=30",
            ]
        )
    ).traces[0]
    assert cut.arrival[-1] < 30 and len(cut) == int((tr.arrival < 30).sum())


def test_vllm_random_at_an_infinite_rate_sends_everything_at_once():
    tr = _vllm(request_rate="inf", num_prompts=50, random_range_ratio=0)
    assert tr.arrival[-1] < 1e-6 and set(tr.prompt) == {1024} and set(tr.output) == {128}


@pytest.mark.parametrize(
    "flag,value,match",
    [
        (
            "random_range_ratio",
            1,
            (
                r"^workload\.vllm_bench\.random_range_ratio: got 1; expected a "
                r"number within \[0, 1\)"
            ),
        ),
        ("num_prompts", 0, r"^workload\.vllm_bench\.num_prompts: got 0; expected a whole number"),
        ("request_rate", "fast", r"^workload\.vllm_bench\.request_rate: got 'fast'"),
    ],
)
def test_vllm_random_flags_are_checked_by_key(flag, value, match):
    from servetune.core.errors import ConfigError

    with pytest.raises(ConfigError, match=match):
        _vllm(**{flag: value})
