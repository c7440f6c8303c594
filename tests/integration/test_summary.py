"""The printed summary says what was simulated: a pasted summary names the
hardware and instances, the price, the policy's vLLM knobs and the SLOs it was judged against;
a batch table says when it leaves rows out."""

import io

import pandas as pd
import pytest
from rich.console import Console

from servetune.config.scenario import build
from servetune.reporting.summary import grid_summary, summary
from servetune.run import api

BASE = ["workload=poisson", "workload.duration_s=5"]


def _text(print_fn, *args) -> str:
    buf = io.StringIO()
    print_fn(*args, console=Console(file=buf, width=200))
    return buf.getvalue()


class _Figures(dict):
    """A metrics dict with a figure for every key the summary asks for (values irrelevant)."""

    def __missing__(self, key):
        return 0.5


def _metrics(n: int = 3) -> dict:
    return _Figures(
        n_requests=n, n_completed=n, n_rejected=0, n_outstanding=0, preemptions=0, iterations=10
    )


@pytest.fixture(scope="module")
def labels():
    return build(
        api.compose(
            BASE
            + [
                "policy.max_num_seqs=48",
                "hardware.price_per_gpu_hour=3.25",
                "slo.ttft_s=1.5",
                "slo.tpot_s=0.05",
            ]
        )
    ).labels


def test_the_header_names_hardware_price_policy_and_slos(labels):
    text = _text(summary, _metrics(), labels)
    assert "Llama-3-8B on 1 x H100-SXM" in text
    assert "$3.25/GPU-hour" in text
    assert "max_num_seqs 48 |" in text and "max_num_batched_tokens 8192" in text
    assert "queue_cap none" in text  # no limit is said as such, not as inf
    assert "SLOs: TTFT <= 1.5 s, TPOT <= 0.05 s" in text


def test_the_header_counts_instances_and_the_prefill_split():
    split = build(api.compose(BASE + ["engine.n_instances=4", "engine.prefill_instances=1"]))
    text = _text(summary, _metrics(), split.labels)
    assert "4 instances of 1 x H100-SXM (1 prefill, 3 decode)" in text
    plain = build(api.compose(BASE + ["engine.n_instances=2"]))
    assert "2 instances of 1 x H100-SXM |" in _text(summary, _metrics(), plain.labels)


def test_no_slo_is_said_as_such(labels):
    text = _text(summary, _metrics(), dict(labels, slo={"ttft_s": None, "tpot_s": None}))
    assert "SLOs: none (every completed request counts)" in text


def test_a_long_batch_table_says_how_many_rows_it_left_out():
    table = pd.DataFrame(
        {
            "seed": range(25),
            "policy.max_num_seqs": 64.0,
            "goodput_rps": 1.0,
            "slo_attainment": 1.0,
            "ttft_p99_s": 0.1,
            "tpot_p99_s": 0.01,
            "useful_tokens_per_dollar": 1e5,
            "preemptions": 0,
        }
    )
    text = _text(grid_summary, table)
    assert "first 20 of 25 scenarios; 5 left out here, all in metrics.csv" in text
    assert "left out" not in _text(grid_summary, table.head(20))


def test_a_fleet_adds_its_replicas_and_spot_lines_only_when_there_is_one(labels):
    m = _metrics()
    assert "replicas mean" not in _text(summary, m, labels)
    m.update(mean_replicas=2.5, peak_replicas=4.0, scale_ups=7, cold_start_cost_usd=0.125)
    m.update(spot_replica_hours=0.0, spot_preemptions=0, requests_requeued=0)
    text = _text(summary, m, labels)
    assert "2.50 / 4 / 7 (0.125)" in text and "spot replica-hours" not in text
    m.update(spot_replica_hours=1.25, spot_preemptions=3, requests_requeued=17)
    assert "1.25 / 3 / 17" in _text(summary, m, labels)


def test_a_run_that_left_many_requests_outstanding_says_so(labels):
    """(issue 64) 322 of 400 requests outstanding printed no word of it."""
    m = _metrics(400)
    m.update(n_completed=78, n_outstanding=322)
    text = _text(summary, m, labels)
    assert "note: 322 of 400 requests (80%) were still outstanding" in text
    assert "spot preemptions" not in text
    m.update(spot_preemptions=31, requests_requeued=2746, spot_replica_hours=0.7)
    assert "31 spot preemptions re-queued 2,746 requests" in _text(summary, m, labels)
    m.update(n_completed=390, n_outstanding=10)  # 2.5%: a drain cut short, no note
    assert "still outstanding" not in _text(summary, m, labels)


def test_the_header_says_what_kind_of_engine_and_step_times_it_simulated():
    """(issue 57) `engine=static cost=linear` printed a header that said neither."""
    static = build(api.compose(BASE + ["engine=static", "cost=linear"])).labels
    text = _text(summary, _metrics(), static)
    assert "static batching (a batch runs until all of it finishes" in text
    assert "contiguous KV" in text and "step times: linear (5 ms + 0.1 ms per prefill token" in text
    default = build(api.compose(BASE)).labels
    text = _text(summary, _metrics(), default)
    assert "vLLM 0.32 scheduler: continuous batching, paged KV cache, chunked prefill" in text
    assert "step times: roofline (flops efficiency" in text
