"""cost=aic (NVIDIA's aiconfigurator-core database, fitted to the linear form) cross-checked:
(a) against aiconfigurator-core's own static-batch estimate, (b) against cost=roofline on the
bundled Azure conversation trace per GPU, (c) against Vidur's profiled A100 operator times, and
(d) its coverage: Llama-3-8B and -70B at each tensor-parallel degree per GPU. Needs the
servetune[aic] extra.

    python benchmarks/bench_aic.py                 # ~6 minutes on 2 cores
    python benchmarks/bench_aic.py --only c        # one section

(a) B requests of isl prompt and osl output tokens arrive at t = 0; servetune schedules them
with a token budget that takes every prompt in one iteration (so its schedule is the static
batch's: one prefill, then osl - 1 decodes). aiconfigurator-core's static estimate
(`estimate_static_latency_breakdown_with_rust`) gives the prefill (TTFT) and the generation
phase; servetune's TTFT and its E2E - TTFT are compared with them.
(b) Llama-3-8B on one GPU of each kind (H100, H200, B200, A100): the first 10 minutes of the
Azure conversation trace at 4x its rate, under each cost model, and the two models' step times
for a 2,048-token prefill and a 64-sequence decode at 1k context, with the database's largest
operations for the one that differs most.
(c) Vidur (Microsoft, MLSys'24) profiled Llama-3-8B's token-level operators on one A100
(github.com/microsoft/vidur, data/profiling/compute/a100/meta-llama/Meta-Llama-3-8B/mlp.csv,
commit 7d47513, MIT): per layer, the QKV, output, up/gate and down projections, RoPE, the two
RMSNorms, the activation and the residual add, for N tokens. Their medians summed over the 32
layers (VIDUR_A100_LINEAR_MS) against the same operators in aiconfigurator-core's A100 vLLM
database and against servetune's roofline for the linear layers (2 x 6.98e9 non-embedding
parameters x N FLOPs at 60% of peak, or their weights at 80% of the bandwidth). Vidur's
attention profile (attention.csv) is not in its repository snapshot, so whole steps are not
compared.
(d) The fit's error and a run of the Azure trace (first 10 minutes, 1x) per GPU, model and
tensor-parallel degree; a pair that does not fit in memory is reported as refused.
(e) Against aiconfigurator-core's aggregated-serving estimate (`run_agg`: continuous batching
at a steady concurrency b, prompts of isl and outputs of osl tokens, ctx_tokens per step), a
closed-form mean-field model. servetune runs the same load open-loop: requests of isl / osl
tokens arriving evenly (Gamma gaps, cv 0.001) at the throughput the estimate gives for b, with
max_num_seqs b and max_num_batched_tokens ctx_tokens, 5 minutes after a 1-minute warm-up.
Little's law then says servetune's mean number of requests in the system should be b where the
two agree.
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
from servetune.core.errors import ConfigError
from servetune.run.api import compose, simulate_batch

GPUS = ("h100", "h200", "b200", "a100_80gb")
GROUP = {"a100_80gb": "a100"}  # hardware= group of a GPU whose name differs
# Vidur's A100 profile of Llama-3-8B (see the docstring): median ms of the token-level
# operators, summed over 32 layers, by tokens in the batch (two profiled rows averaged at 2,048
# and 4,096)
VIDUR_A100_LINEAR_MS = {
    1: 9.70,
    32: 10.91,
    128: 13.18,
    512: 34.64,
    1024: 75.14,
    2048: 143.68,
    4096: 273.25,
}
NON_EMBEDDING_PARAMS = 8.03e9 - 2 * 128256 * 4096  # Llama-3-8B less its untied embeddings
AIC_LINEAR_OPS = (  # aiconfigurator-core's names of the same operators
    "add_norm_1",
    "qkv_gemm",
    "proj_gemm",
    "add_norm_2",
    "gate_ffn1_gemm",
    "act_gate",
    "ffn2_gemm",
)
COVERAGE_GPUS = ("h100", "h200", "b200", "a100_80gb")
COVERAGE_MODELS = ("llama3_8b", "llama3_70b")
TP_DEGREES = (1, 2, 4, 8)
COMPARED = (
    ("ttft_mean_s", "mean TTFT (s)"),
    ("ttft_p99_s", "P99 TTFT (s)"),
    ("tpot_mean_s", "mean TPOT (s)"),
    ("useful_tokens_per_dollar", "useful tokens / $"),
)


def static_batch(batch: int, isl: int, osl: int) -> dict:
    """servetune (cost=aic) vs aiconfigurator-core's static estimate for one batch on H100."""
    config, models, perf_database, sdk, _ = aic._import()
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
        f"hardware={GROUP.get(gpu, gpu)}",
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


def vidur_linear() -> list[tuple[int, float, float, float]]:
    """(tokens, Vidur ms, aiconfigurator-core ms, roofline ms) of Llama-3-8B's token-level
    operators on one A100 (section c)."""
    config, models, perf_database, sdk, _ = aic._import()
    db = perf_database.get_database(
        "a100_sxm", "vllm", perf_database.get_latest_database_version("a100_sxm", "vllm")
    )
    model = models.get_model(aic.MODELS["llama3_8b"], config.ModelConfig(tp_size=1), "vllm")
    sc = build(compose(["hardware=a100", "output.progress=false"]))
    cost = jax.tree.map(lambda x: float(np.asarray(x).reshape(-1)[0]), sc.params.cost)
    rows = []
    for n, vidur in VIDUR_A100_LINEAR_MS.items():
        if n == 1:  # one token: a decode step of one sequence
            _, _, ops, _, _ = sdk.estimate_decode_step_breakdown_with_rust(
                model, db, gen_tokens=1, isl=126, osl=2
            )
            theirs = sum(ops[f"generation_{op}"] for op in AIC_LINEAR_OPS)
        else:
            out = sdk.estimate_mixed_step_breakdown_with_rust(
                model, db, ctx_tokens=n, gen_tokens=0, isl=n, osl=2, prefix=0
            )
            theirs = sum(out["per_op_latency_ms"][f"context_{op}"] for op in AIC_LINEAR_OPS)
        flops_s = 2 * NON_EMBEDDING_PARAMS * n / cost.flops_rate  # effective rates of
        bytes_s = 2 * NON_EMBEDDING_PARAMS / cost.byte_rate  # hardware=a100's roofline
        rows.append((n, vidur, theirs, 1e3 * max(flops_s, bytes_s)))
    return rows


def coverage(gpu: str, model: str, tp: int) -> dict | str:
    """The aic fit's error and the Azure trace's first 10 minutes (1x) under it for one GPU,
    model and tensor-parallel degree; the refusal's message where the pair does not fit."""
    overrides = [
        "cost=aic",
        f"hardware={GROUP.get(gpu, gpu)}",
        f"model={model}",
        f"hardware.tp={tp}",
        "output.progress=false",
    ]
    try:
        sc = build(compose(overrides))
    except ConfigError as err:
        return str(err).split(";")[0]
    m = simulate_batch(sc).metrics[0]
    return {
        "fit": sc.labels["cost_model"].split("relative error ")[1],
        "ttft": m["ttft_mean_s"],
        "tpot": m["tpot_mean_s"],
        "per_dollar": m["useful_tokens_per_dollar"],
        "attainment": m["slo_attainment"],
    }


def print_static() -> None:
    """Section (a)."""
    print("(a) static batch on 1 x H100, Llama-3-8B: servetune (cost=aic) / aiconfigurator-core")
    print("| batch | isl | osl | TTFT (s) ours / theirs | generation (s) ours / theirs |")
    print("|---|---|---|---|---|")
    for batch, isl, osl in ((1, 1024, 128), (8, 1024, 128), (32, 512, 256), (64, 256, 128)):
        r = static_batch(batch, isl, osl)
        cells = [f"{a:.4f} / {b:.4f} ({a / b:.3f})" for a, b in (r["ttft"], r["generation"])]
        print(f"| {batch} | {isl} | {osl} | " + " | ".join(cells) + " |")


def print_per_gpu() -> None:
    """Section (b)."""
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
    config, models, perf_database, sdk, _ = aic._import()
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


def print_vidur() -> None:
    """Section (c)."""
    print("(c) Llama-3-8B's token-level operators on 1 x A100 (ms, 32 layers): Vidur's profile,")
    print("aiconfigurator-core's database, servetune's roofline (ratios to Vidur)")
    print("| tokens | Vidur | aiconfigurator-core | roofline |")
    print("|---|---|---|---|")
    for n, vidur, theirs, roof in vidur_linear():
        print(
            f"| {n:,} | {vidur:.2f} | {theirs:.2f} ({theirs / vidur:.2f}) | "
            f"{roof:.2f} ({roof / vidur:.2f}) |"
        )


def print_coverage() -> None:
    """Section (d)."""
    print("(d) cost=aic per GPU, model and TP: the fit's error and the Azure trace (10 min, 1x)")
    print(
        "| GPU | model | TP | fit (p50 / p90 / max) | mean TTFT (s) | mean TPOT (s) | "
        "useful tok/$ | SLO att. |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for gpu in COVERAGE_GPUS:
        for model in COVERAGE_MODELS:
            for tp in TP_DEGREES:
                r = coverage(gpu, model, tp)
                if isinstance(r, str):
                    print(f"| {gpu} | {model} | {tp} | refused: {r} | | | | |")
                    continue
                print(
                    f"| {gpu} | {model} | {tp} | {r['fit']} | {r['ttft']:.4g} | "
                    f"{r['tpot']:.4g} | {r['per_dollar']:,.0f} | {r['attainment']:.1%} |"
                )


AGG_POINTS = ((8, 1024, 256), (32, 1024, 256), (64, 1024, 256), (32, 2048, 128))
AGG_CTX_TOKENS = 2048


def agg(batch: int, isl: int, osl: int) -> dict:
    """aiconfigurator-core's run_agg on 1 x H100 (Llama-3-8B, vLLM) and servetune's open-loop
    run of the same load (section e)."""
    from aiconfigurator_core.sdk.backends.factory import get_backend

    config, models, perf_database, _, _ = aic._import()
    db = perf_database.get_database(
        "h100_sxm", "vllm", perf_database.get_latest_database_version("h100_sxm", "vllm")
    )
    model = models.get_model(aic.MODELS["llama3_8b"], config.ModelConfig(tp_size=1), "vllm")
    rc = config.RuntimeConfig(batch_size=batch, isl=isl, osl=osl)
    theirs = get_backend("vllm").run_agg(model, db, rc, ctx_tokens=AGG_CTX_TOKENS)
    row = theirs.get_summary_df().iloc[0]
    rate = float(row["request_rate"])
    sc = build(
        compose(
            [
                "cost=aic",
                "workload=gamma",
                "workload.cv=0.001",
                f"workload.rate={rate}",
                f"workload.n_requests={int(rate * 360)}",
                "workload.duration_s=null",
                "workload.prompt.dist=fixed",
                f"+workload.prompt.value={isl}",
                "workload.output.dist=fixed",
                f"+workload.output.value={osl}",
                "window.warmup_s=60",
                f"policy.max_num_seqs={batch}",
                f"policy.max_num_batched_tokens={AGG_CTX_TOKENS}",
                "output.progress=false",
            ]
        )
    )
    m = simulate_batch(sc).metrics[0]
    return {
        "rate": rate,
        "ttft": (m["ttft_mean_s"], float(row["ttft"]) / 1e3),
        "tpot": (m["tpot_mean_s"], float(row["tpot"]) / 1e3),
        "in_system": m["mean_in_system"],
    }


def print_agg() -> None:
    """Section (e)."""
    print("(e) aggregated serving on 1 x H100, Llama-3-8B: servetune (cost=aic, open loop at the")
    print(f"estimate's throughput) / aiconfigurator-core's run_agg (ctx_tokens {AGG_CTX_TOKENS})")
    print(
        "| concurrency b | isl | osl | req/s | mean TTFT (s) ours / theirs | "
        "mean TPOT (s) ours / theirs | servetune's mean in system |"
    )
    print("|---|---|---|---|---|---|---|")
    for batch, isl, osl in AGG_POINTS:
        r = agg(batch, isl, osl)
        cells = [f"{a:.4f} / {b:.4f} ({a / b:.2f})" for a, b in (r["ttft"], r["tpot"])]
        print(
            f"| {batch} | {isl} | {osl} | {r['rate']:.2f} | "
            + " | ".join(cells)
            + f" | {r['in_system']:.1f} |"
        )


SECTIONS = {
    "a": print_static,
    "b": print_per_gpu,
    "c": print_vidur,
    "d": print_coverage,
    "e": print_agg,
}


def main() -> None:
    """Print the cross-checks' tables."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=sorted(SECTIONS), action="append", help="sections to run")
    args = ap.parse_args()
    logging.getLogger("aiconfigurator_core").setLevel(logging.ERROR)
    for name in args.only or sorted(SECTIONS):
        SECTIONS[name]()
        print()


if __name__ == "__main__":
    main()
