"""cost=aic (NVIDIA's aiconfigurator-core database, fitted to the linear form) cross-checked:
(a) against aiconfigurator-core's own static-batch estimate, (b) against cost=roofline on the
bundled Azure conversation trace per GPU. Needs the servetune[aic] extra.

    python benchmarks/bench_aic.py                 # ~2 minutes on 2 cores

(a) B requests of isl prompt and osl output tokens arrive at t = 0; servetune schedules them
with a token budget that takes every prompt in one iteration (so its schedule is the static
batch's: one prefill, then osl - 1 decodes). aiconfigurator-core's static estimate
(`estimate_static_latency_breakdown_with_rust`) gives the prefill (TTFT) and the generation
phase; servetune's TTFT and its E2E - TTFT are compared with them.
(b) Llama-3-8B on one GPU of each kind both databases cover (H100, H200, A100): the first 10
minutes of the Azure conversation trace at 4x its rate, under each cost model, and the two
models' step times for a 2,048-token prefill and a 64-sequence decode at 1k context, with the
database's largest operations for the one that differs most.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
from pathlib import Path

import jax
import numpy as np

from servetune.config import aic
from servetune.config.scenario import build
from servetune.core.cost import step_time
from servetune.run.api import compose, simulate_batch

GPUS = ("h100", "h200", "a100_80gb")
COMPARED = (
    ("ttft_mean_s", "mean TTFT (s)"),
    ("ttft_p99_s", "P99 TTFT (s)"),
    ("tpot_mean_s", "mean TPOT (s)"),
    ("useful_tokens_per_dollar", "useful tokens / $"),
)


def static_batch(batch: int, isl: int, osl: int) -> dict:
    """servetune (cost=aic) vs aiconfigurator-core's static estimate for one batch on H100."""
    config, models, perf_database, sdk = aic._import()
    system, model_id = aic._names("h100", "llama3_8b", "vllm")
    db = perf_database.get_database(
        system, "vllm", perf_database.get_latest_database_version(system, "vllm")
    )
    model = models.get_model(model_id, config.ModelConfig(tp_size=1), "vllm")
    rc = config.RuntimeConfig(batch_size=batch, isl=isl, osl=osl)
    ctx, gen, *_ = sdk.estimate_static_latency_breakdown_with_rust(model, db, rc, "static", 32, 1.0)
    theirs_ttft, theirs_gen = sum(ctx.values()) / 1e3, sum(gen.values()) / 1e3
    budget = batch * isl
    with tempfile.TemporaryDirectory() as tmp:  # B requests at t = 0 (a plain trace file)
        path = Path(tmp) / "static.csv"
        rows = "".join(f"0.0,{isl},{osl}\n" for _ in range(batch))
        path.write_text("arrival_s,prompt_tokens,output_tokens\n" + rows)
        res = simulate_batch(
            build(
                compose(
                    [
                        "cost=aic",
                        "workload=file",
                        f"workload.path={path}",
                        f"policy.max_num_batched_tokens={budget}",
                        f"policy.max_num_seqs={max(batch, 2)}",
                        "output.progress=false",
                    ]
                )
            )
        )
    m = res.metrics[0]
    ours_ttft = m["ttft_mean_s"]
    ours_gen = m["e2e_mean_s"] - m["ttft_mean_s"]
    return {
        "batch": batch,
        "isl": isl,
        "osl": osl,
        "n": m["n_requests"],
        "ttft": (ours_ttft, theirs_ttft),
        "generation": (ours_gen, theirs_gen),
    }


def per_gpu(gpu: str) -> dict:
    """Azure conversation at 4x under cost=aic and cost=roofline on one GPU."""
    base = [
        f"hardware={'a100' if gpu == 'a100_80gb' else gpu}",
        "workload.rate_scale=4",
        "output.progress=false",
    ]
    out = {}
    for form in ("aic", "roofline"):
        sc = build(compose([*base, f"cost={form}"]))
        out[form] = (sc, simulate_batch(sc).metrics[0])
    return out


def step_pair(sc_aic, sc_roof, shape) -> tuple[float, float]:
    """(aic, roofline) seconds of one batch shape (P, D, C, W) under the two scenarios' costs."""

    def one(sc) -> float:
        cost = jax.tree.map(lambda x: x[0], sc.params.cost)  # the first grid point's
        return float(step_time(cost, sc.engine.cost_form, *shape))

    return one(sc_aic), one(sc_roof)


def main() -> None:
    """Print the two cross-checks' tables."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.parse_args()
    logging.getLogger("aiconfigurator_core").setLevel(logging.ERROR)
    print("(a) static batch on 1 x H100, Llama-3-8B: servetune (cost=aic) / aiconfigurator-core")
    print("| batch | isl | osl | TTFT (s) ours / theirs | generation (s) ours / theirs |")
    print("|---|---|---|---|---|")
    for batch, isl, osl in ((1, 1024, 128), (8, 1024, 128), (32, 512, 256), (64, 256, 128)):
        r = static_batch(batch, isl, osl)
        cells = [f"{a:.4f} / {b:.4f} ({a / b:.3f})" for a, b in (r["ttft"], r["generation"])]
        print(f"| {batch} | {isl} | {osl} | " + " | ".join(cells) + " |")
    print()
    print("(b) Azure conversation, first 10 min at 4x, Llama-3-8B on 1 GPU: aic / roofline")
    head = " | ".join(f"{t} aic / roofline" for _, t in COMPARED)
    print(
        f"| GPU | fit (p50 / p90 / max rel. error) | {head} | prefill 2048 (ms) | decode 64 (ms) |"
    )
    print("|---" * (len(COMPARED) + 4) + "|")
    for gpu in GPUS:
        runs = per_gpu(gpu)
        (sc_a, m_a), (sc_r, m_r) = runs["aic"], runs["roofline"]
        fit = sc_a.labels["cost_model"].split("relative error ")[1]
        cells = [f"{m_a[k]:.4g} / {m_r[k]:.4g} ({m_a[k] / m_r[k]:.2f})" for k, _ in COMPARED]
        prefill = step_pair(sc_a, sc_r, aic._work(2048, 2048, 0, 0))
        decode = step_pair(sc_a, sc_r, aic._work(0, 0, 64, 1026))
        steps = [f"{a * 1e3:.1f} / {r * 1e3:.1f}" for a, r in (prefill, decode)]
        print(f"| {gpu} | {fit} | " + " | ".join(cells + steps) + " |")
    # what explains a decode step: the database's largest operations on H100
    config, models, perf_database, sdk = aic._import()
    db = perf_database.get_database(
        "h100_sxm", "vllm", perf_database.get_latest_database_version("h100_sxm", "vllm")
    )
    model = models.get_model(aic.MODELS["llama3_8b"], config.ModelConfig(tp_size=1), "vllm")
    _, _, per_op, _, _ = sdk.estimate_decode_step_breakdown_with_rust(
        model, db, gen_tokens=64, isl=1024, osl=2
    )
    top = sorted(per_op.items(), key=lambda kv: -kv[1])[:6]
    print()
    print("H100 decode of 64 sequences at 1k context, the database's largest operations (ms):")
    print(
        ", ".join(f"{name} {ms:.2f}" for name, ms in top),
        f"; total {np.sum(list(per_op.values())):.2f}",
    )


if __name__ == "__main__":
    main()
