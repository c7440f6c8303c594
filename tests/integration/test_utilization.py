"""Model FLOPs and bandwidth utilization: the loop's work counters against the
roofline's accounting worked by hand for one request, with the leap on and off (its closed
form must add up to the iterations it skips), MFU / MBU over the GPUs' peaks, and the energy
those counters and the busy time give (run/energy.py)."""

import pytest

from servetune.config import hardware
from servetune.run import api, energy

P, OUT = 100, 20  # prompt and output tokens of the one request
ONE = [
    "workload=poisson",
    "workload.n_requests=1",
    "workload.duration_s=null",
    f"workload.prompt.min={P}",
    f"workload.prompt.max={P}",  # clipped: exactly P and OUT
    f"workload.output.min={OUT}",
    f"workload.output.max={OUT}",
]

# by hand: the prefill iteration computes P tokens reading no context (attention work
# P (P + 1) / 2); decode k = 1..OUT-1 computes one token reading P + k - 1 context tokens
# (attention work P + k)
ITERATIONS = OUT
TOKENS = P + OUT - 1
CTX_READ = (OUT - 1) * P + (OUT - 1) * (OUT - 2) // 2
ATTN_WORK = P * (P + 1) / 2 + (OUT - 1) * P + (OUT - 1) * OUT / 2


@pytest.fixture(scope="module", params=[0, 64], ids=["stepped", "skipped"])
def one(request):
    res = api.simulate(ONE + [f"engine.leap_max={request.param}"])
    return res.metrics[0], request.param


def test_the_work_counters_add_up_to_the_hand_worked_sums(one):
    m, leap = one
    assert m["leaped_iterations"] > 0 if leap else m["leaped_iterations"] == 0
    model, gpu = hardware.MODELS["llama3_8b"], hardware.GPUS["h100"]
    work = hardware.model_work(gpu, model, tp=1, weight_bits=16, kv_bits=16)
    flops = work.flops_per_token * TOKENS + work.attn_flops_per_work * ATTN_WORK
    moved = work.weight_bytes * ITERATIONS + work.kv_bytes_per_token * (CTX_READ + TOKENS)
    assert m["iterations"] == ITERATIONS
    assert m["model_flops"] == pytest.approx(flops, rel=1e-12)
    assert m["model_bytes"] == pytest.approx(moved, rel=1e-12)
    assert m["mfu"] == pytest.approx(flops / (gpu.peak_flops * m["sim_duration_s"]), rel=1e-12)
    assert m["mbu"] == pytest.approx(moved / (gpu.hbm_bytes_per_s * m["sim_duration_s"]), rel=1e-12)


def test_the_energy_is_the_busy_and_idle_draw_of_the_hand_worked_run(one):
    m, _ = one
    gpu = hardware.GPUS["h100"]
    busy = m["busy_fraction"] * m["sim_duration_s"]
    u = m["model_flops"] / (gpu.peak_flops * busy)
    joules = (
        busy * gpu.tdp_w * energy.busy_power_fraction(u)
        + (m["sim_duration_s"] - busy) * gpu.tdp_w * 0.1
    )
    assert m["energy_j"] == pytest.approx(float(joules), rel=1e-9)
    assert m["joules_per_useful_token"] == pytest.approx(m["energy_j"] / OUT, rel=1e-12)
    assert m["energy_cost_usd"] == 0.0  # electricity has no price by default
    priced = api.simulate(ONE + ["hardware.energy_price_usd_per_kwh=0.15"]).metrics[0]
    assert priced["energy_cost_usd"] == pytest.approx(priced["energy_j"] / 3.6e6 * 0.15)
    share = priced["energy_cost_usd"] / (priced["energy_cost_usd"] + priced["cost_usd"])
    assert priced["energy_cost_share"] == pytest.approx(share)


def test_a_lone_decode_stream_is_memory_bound():
    # one sequence decoding reads every weight per token: far from the FLOP peak, and its
    # bandwidth use is most of what the busy time allows (the roofline's efficiency < 1)
    m = api.simulate(ONE).metrics[0]
    assert m["mfu"] < 0.02
    assert 0.3 * m["busy_fraction"] < m["mbu"] < m["busy_fraction"]


def test_the_wasted_tokens_split_into_recomputation_and_misses():
    m = api.simulate(
        [
            "workload=poisson",
            "workload.duration_s=20",
            "workload.rate=12",
            "policy.max_num_seqs=64",
            "engine.gpu_memory_utilization=0.25",
            "slo.ttft_s=0.5",
        ]
    ).metrics[0]
    assert m["preemptions"] > 0 and m["wasted_missed_tokens"] > 0
    total = m["prefill_tokens"] + m["decode_tokens"]
    assert (m["wasted_recomputed_tokens"] + m["wasted_missed_tokens"]) / total == pytest.approx(
        m["wasted_token_ratio"], rel=1e-9
    )
