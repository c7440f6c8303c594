"""Per-request admission columns of requests.parquet: the first-scheduled time
(vLLM's scheduled timestamp), the queueing delay (vLLM's time_in_queue: first scheduled minus
arrival) and why a rejected request was rejected."""

import numpy as np
import pytest

from servetune.run import api

BASE = ["workload=poisson", "workload.duration_s=20", "workload.rate=8", "window.drain_s=60"]


@pytest.fixture(scope="module")
def queued():
    """An engine of 4 sequences under 8 req/s: requests queue, and past 6 waiting the gateway
    rejects them."""
    res = api.simulate(BASE + ["policy.max_num_seqs=4", "policy.queue_cap=6"])
    return res.requests[0], res.metrics[0]


def test_scheduled_time_lies_between_arrival_and_first_token(queued):
    table, _ = queued
    admitted = table[table["scheduled_s"].notna()]
    assert len(admitted) > 0
    assert (admitted["scheduled_s"] >= admitted["arrival_s"]).all()
    first = admitted[admitted["first_token_s"].notna()]
    assert (first["scheduled_s"] < first["first_token_s"]).all()  # admitted, then an iteration
    np.testing.assert_allclose(admitted["queue_s"], admitted["scheduled_s"] - admitted["arrival_s"])
    assert admitted["queue_s"].max() > 1.0  # they did queue: 4 seats for 8 req/s


def test_every_rejection_has_its_reason_and_no_schedule(queued):
    table, metrics = queued
    rejected = table[table["end_state"] == "rejected"]
    assert len(rejected) == metrics["n_rejected"] > 0
    assert set(rejected["reject_reason"]) == {"queue_cap"}
    assert rejected["scheduled_s"].isna().all() and rejected["queue_s"].isna().all()
    assert table.loc[table["end_state"] != "rejected", "reject_reason"].isna().all()
    # metrics.json counts them by reason, and the summary says why
    assert metrics["rejected_by"] == {"queue_cap": metrics["n_rejected"]}


def test_the_summary_says_why_requests_were_rejected(queued):
    import io

    from rich.console import Console

    from servetune.reporting.summary import summary

    _, metrics = queued
    buf = io.StringIO()
    summary(metrics, {}, console=Console(file=buf, width=200))
    assert (
        f"{metrics['n_rejected']} (queue_cap {metrics['n_rejected']}: policy.queue_cap full)"
        in buf.getvalue()
    )


def test_an_idle_engine_schedules_each_request_at_its_arrival_boundary():
    # one request at a time on an empty engine: admitted at the first iteration boundary at or
    # after its arrival, which is its arrival when the engine is idle
    res = api.simulate(
        ["workload=poisson", "workload.duration_s=20", "workload.rate=0.05", "window.drain_s=60"]
    )
    table = res.requests[0]
    assert len(table) >= 1
    np.testing.assert_array_equal(table["scheduled_s"], table["arrival_s"])
    assert (table["queue_s"] == 0).all()


def test_too_long_prompts_are_rejected_as_such():
    res = api.simulate(BASE + ["engine.max_model_len=512", "engine.max_slots=64"])
    table = res.requests[0]
    too_long = table["prompt_tokens"] >= 512
    assert too_long.any()
    assert (table.loc[too_long, "reject_reason"] == "too_long").all()
    assert table.loc[~too_long, "reject_reason"].isna().all()
    assert res.metrics[0]["rejected_by"]["too_long"] == int((table["counted"] & too_long).sum())
