"""Study (l), second table: how many replicas of each GPU the trace needs, and what they cost.

    python sweeps/gpu_choice/fleet.py [--rates 4,8] [--seeds 2]     # about 20 minutes on 2 cores

For each GPU of the study (cost=aic, vLLM's defaults for that GPU, the same slice of the Azure
conversation trace) and each load (workload.rate_scale), `servetune.tuning.sizing.smallest_fleet`
finds the smallest engine.n_instances whose mean SLO attainment over the seeds reaches 99%
(round-robin routing, vLLM's default policy for the GPU); the table gives it, the fleet's
dollars per hour at the catalog's price, and the attainment of one replica fewer.
"""

from __future__ import annotations

import argparse
import logging
import sys

from servetune.run.entry import script_status
from servetune.tuning import sizing

GPUS = ("a100", "l40s", "rtx_pro_6000", "h100", "h200", "b200", "b300", "gb200", "gb300")
SMALL_DEFAULTS = ("a100", "l40s")  # vLLM's 256 / 2,048 batch defaults (under 70 GiB, A100)


def _rates(text: str) -> list[float]:
    """--rates: comma-separated positive numbers (argparse's type)."""
    try:
        rates = [float(r) for r in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"got {text!r}; expected workload.rate_scale values such as 4,8"
        ) from None
    if not all(0 < r < 1e6 for r in rates):
        raise argparse.ArgumentTypeError(f"got {text!r}; expected positive rate scales")
    return rates


def _seeds(text: str) -> int:
    """--seeds: a whole number from 1 (argparse's type)."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"got {text!r}; expected a whole number of seeds >= 1")
    return int(text)


def main(argv: list[str] | None = None) -> None:
    """Print the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rates", type=_rates, default="4,8", help="workload.rate_scale values")
    ap.add_argument("--seeds", type=_seeds, default=2)
    args = ap.parse_args(argv)
    logging.getLogger("aiconfigurator_core").setLevel(logging.ERROR)
    print("| load | GPU | replicas for 99% | $ per hour | attainment with one fewer |")
    print("|---|---|---|---|---|")
    for rate in args.rates:
        for gpu in GPUS:
            policy = "vllm_a100" if gpu in SMALL_DEFAULTS else "vllm_default"
            size = sizing.smallest_fleet(
                [
                    "cost=aic",
                    f"hardware={gpu}",
                    f"policy={policy}",
                    f"workload.rate_scale={rate}",
                    f"seeds={args.seeds}",
                    "window.drain_s=120",
                    "output.progress=false",
                    "output.request_table=false",
                ],
                limit=16,
            )
            n = size.replicas
            fewer = size.tried.get(n - 1) if n else None
            rps = 2867 / 600 * rate
            print(
                f"| {rps:.0f} req/s | {gpu} | {n if n else '> 16'} | "
                f"{size.cost_per_hour_usd:.2f} | "
                f"{'-' if fewer is None else f'{fewer[0]:.1%}'} |",
                flush=True,
            )


if __name__ == "__main__":
    sys.exit(script_status(main))
