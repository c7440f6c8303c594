"""vLLM 0.32's priority scheduling (policy.order=priority, engine/priority.py), worked by hand.

Cost model: linear with base 1 s, so every iteration that computes lasts 1 s. KV blocks of 2
tokens. Notation: request k, (arrival s, prompt tokens, output tokens), priority p (lower runs
first). The golden fixture `priority` checks the same rules against vLLM's own scheduler on a
real trace (tests/golden/).
"""

import dataclasses

import numpy as np
import pytest
from helpers import linear_params, run, schedule, trace_of

from servetune.config.scenario import build
from servetune.core.errors import ConfigError, TraceError
from servetune.core.types import EngineConfig
from servetune.deploy.export import unmapped_knobs, vllm_args
from servetune.run.api import compose
from servetune.workload.traces import load_csv, load_jsonl

PRIORITY = EngineConfig(
    max_slots=4,
    queue_window=4,
    block_size=2,
    max_model_len=64,
    cost_form="linear",
    outbox=16,
    scheduling_policy="priority",
)
FCFS = dataclasses.replace(PRIORITY, scheduling_policy="fcfs")


def _params(cfg, **kw):
    order = "priority" if cfg.scheduling_policy == "priority" else "fcfs"
    return linear_params(kw.pop("policy", None), order=order, **kw)


def _times(res):
    return list(zip(res.first_token.tolist(), res.finish.tolist(), strict=True))


def test_waiting_requests_by_priority_then_arrival():
    # one sequence at a time; r0 (0, 2, 1) p2, r1 (0, 2, 1) p0, r2 (0.1, 2, 1) p0 are all
    # waiting at t=0 except r2 (seen at t=1). t=0: r1 (p0) runs; t=1: r2 (p0) beats r0 (p2)
    # though r0 came first; t=2: r0. Under FCFS trace order decides: r0, r1, r2.
    tr = trace_of([(0, 2, 1), (0, 2, 1), (0.1, 2, 1)], priority=[2, 0, 0])
    res = run(tr, _params(PRIORITY, policy={"max_num_seqs": 1}), PRIORITY)[0][0]
    assert _times(res) == [(3.0, 3.0), (1.0, 1.0), (2.0, 2.0)]
    fcfs = run(tr, _params(FCFS, policy={"max_num_seqs": 1}), FCFS)[0][0]
    assert _times(fcfs) == [(1.0, 1.0), (2.0, 2.0), (3.0, 3.0)]


def test_victim_scheduled_earlier_gives_back_its_tokens():
    # 4 blocks. r0 (0, 2, 4) p1, r1 (0.5, 4, 3) p0.
    # [0,1): r0 prefills (1 block). [1,2): r0 decodes into a 2nd block; r1 is admitted (its
    #   whole prompt, 2 blocks, fits the 2 free) and prefills: 4 blocks in use.
    # [2,3): r0 (first in the running list) decodes within its block and is scheduled; r1
    #   needs a 3rd block and none is free. vLLM preempts the largest (priority, arrival):
    #   r0, though scheduled already: its token goes back to the budget, its 2 blocks are
    #   freed, and r1 gets its block. (FCFS pops the running list's tail: r1 itself.)
    # [3,4): r1 decodes its last token (done at 4); r0 (prompt 2 + 2 generated = 2 blocks)
    #   does not fit the 1 free block. [4,5): r0 recomputes 4 tokens, its 3rd output at 5;
    #   [5,6): its 4th, done at 6.
    tr = trace_of([(0, 2, 4), (0.5, 4, 3)], priority=[1, 0])
    p = _params(PRIORITY, kv_blocks=4)
    assert schedule(tr, p, PRIORITY) == [
        (0.0, 1.0, {0: 2}),
        (1.0, 1.0, {0: 1, 1: 4}),
        (2.0, 1.0, {1: 1}),
        (3.0, 1.0, {1: 1}),
        (4.0, 1.0, {0: 4}),
        (5.0, 1.0, {0: 1}),
    ]
    res = run(tr, p, PRIORITY)[0][0]
    assert _times(res) == [(1.0, 6.0), (2.0, 4.0)]
    assert res.n_preempt.tolist() == [1, 0]
    assert res.tokens_computed.tolist() == [2 + 1 + 4 + 1, 4 + 1 + 1]
    fcfs = run(tr, _params(FCFS, kv_blocks=4), FCFS)[0][0]
    assert fcfs.n_preempt.tolist() == [0, 1]


def test_a_request_that_picks_itself_ends_the_scan_in_a_zero_second_step():
    # 4 blocks. r0 (0, 2, 4) p1, r1 (0.5, 2, 3) p0.
    # [0,1): r0 prefills. [1,2): r0 takes a 2nd block, r1 is admitted (1 block). [2,3): both
    #   decode, r1 into its 2nd block: 4 in use. At 3 r0 (first in the list) needs a 3rd block:
    #   the victim is r0 itself, which ends the scan, so r1 gets nothing either: a step that
    #   only preempts, run by vLLM as an empty batch (0 s). Still at 3: r1 decodes its last
    #   token (done at 4); r0 (5 tokens, 3 blocks) waits for r1's blocks and recomputes in
    #   [4,5), where its 4th token completes it.
    tr = trace_of([(0, 2, 4), (0.5, 2, 3)], priority=[1, 0])
    p = _params(PRIORITY, kv_blocks=4)
    assert schedule(tr, p, PRIORITY) == [
        (0.0, 1.0, {0: 2}),
        (1.0, 1.0, {0: 1, 1: 2}),
        (2.0, 1.0, {0: 1, 1: 1}),
        (3.0, 1.0, {1: 1}),
        (4.0, 1.0, {0: 5}),
    ]
    res = run(tr, p, PRIORITY)[0][0]
    assert _times(res) == [(1.0, 5.0), (2.0, 4.0)]
    assert res.n_preempt.tolist() == [1, 0] and res.stats["preemptions"] == 1
    # FCFS: at 3 the tail, r1, is preempted instead, and r0 takes its blocks
    fcfs = run(tr, _params(FCFS, kv_blocks=4), FCFS)[0][0]
    assert fcfs.n_preempt.tolist() == [0, 1]


def test_priority_is_read_from_traces(tmp_path):
    csv = tmp_path / "t.csv"
    csv.write_text("arrival_s,prompt_tokens,output_tokens,priority\n0,5,2,1\n0.5,7,3,-2\n")
    assert load_csv(csv).priority.tolist() == [1, -2]
    jsonl = tmp_path / "t.jsonl"
    jsonl.write_text(
        '{"timestamp": 0, "input_length": 5, "output_length": 2, "priority": 3}\n'
        '{"timestamp": 10, "input_length": 5, "output_length": 2, "priority": 0}\n'
    )
    assert load_jsonl(jsonl).priority.tolist() == [3, 0]
    # through the config: the column reaches the engine's workload (padding at priority 0)
    sc = build(compose(["policy=priority", f"workload.path={csv}"]))
    assert np.asarray(sc.workloads.priority)[0, :2].tolist() == [1, -2]
    bad = tmp_path / "bad.csv"
    bad.write_text("arrival_s,prompt_tokens,output_tokens,priority\n0,5,2,high\n")
    with pytest.raises(TraceError, match=r"bad\.csv:2: 'priority' = 'high'; expected an integer"):
        load_csv(bad)
    half = tmp_path / "half.jsonl"
    half.write_text(
        '{"timestamp": 0, "input_length": 5, "output_length": 2, "priority": 1}\n'
        '{"timestamp": 1, "input_length": 5, "output_length": 2}\n'
    )
    with pytest.raises(TraceError, match=r"half\.jsonl:2: no 'priority' where other rows"):
        load_jsonl(half)


def test_order_priority_builds_the_priority_engine_and_refuses_what_it_lacks():
    sc = build(compose(["policy=priority", "workload.duration_s=5"]))
    assert sc.engine.scheduling_policy == "priority"
    assert np.all(np.asarray(sc.workloads.priority) == 0)  # no column: all priority 0
    assert vllm_args({}, {"block_size": 16}, "priority")["scheduling_policy"] == "priority"
    assert unmapped_knobs({}, "priority")[0]["name"] == "order"  # the priorities: per request
    with pytest.raises(
        ConfigError,
        match=r"^engine\.kv_pressure: not supported with "
        r"policy\.order=priority",
    ):
        build(compose(["policy.order=priority", "engine.kv_pressure=evict"]))
