"""Tune a policy with evolution strategies under an SLO-attainment constraint.

An overloaded engine (Poisson arrivals at 35 requests/s for 20 s on one H100 with Llama-3-8B):
vLLM's defaults queue too much and miss the SLOs. `servetune.tuning.tune` searches max_num_seqs,
max_num_batched_tokens, the KV watermark and a queue cap (tune.space in conf/tune/es.yaml) for
the most useful tokens per dollar at 99% SLO attainment, then compares start and tuned policy
on a held-out seed and exports the tuned one where it is better beyond chance, else the start.
Tiny on purpose (2 iterations of 2 antithetic pairs): about a minute on 2 CPU cores; raise
tune.iterations and tune.pairs for a real search.

    python examples/tune_policy.py [output folder]
"""

import sys
import tempfile

from servetune.tuning import tune

OVERRIDES = [
    "workload=poisson",
    "workload.rate=35",
    "workload.duration_s=20",
    "window.drain_s=60",
    "tune.iterations=2",
    "tune.pairs=2",
    "tune.eval.seeds=1",
    "tune.resume=false",
    "tune.space.max_num_seqs.high=256",
]


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="servetune-tune-")
    result = tune(OVERRIDES, out_dir=out, log=print)
    cols = [
        "policy",
        "split",
        "slo_attainment",
        "useful_tokens_per_dollar",
        "ttft_p99_s",
        "regression",
    ]
    print(result.evaluation[cols].to_string(index=False))
    print("start: " + ", ".join(f"{k}={v:.4g}" for k, v in result.start.items()))
    print("tuned: " + ", ".join(f"{k}={v:.4g}" for k, v in result.tuned.items()))
    print(result.recommendation)  # which of the two export/ holds, and why
    print(
        f"{result.scenarios_simulated} scenarios simulated in {result.wall_s:.0f} s; "
        f"history, evaluation and the vLLM/SGLang exports in {result.out_dir}"
    )


if __name__ == "__main__":
    main()
