"""Figure and tables of study (l): which GPU, and which settings, for the Azure conversation trace.

    python sweeps/gpu_choice/figure.py outputs/study_gpu_4x outputs/study_gpu [--out FIGURE.png]

Reads each <root>/report/runs.csv (written by `servetune report <root>`; one root per load,
`workload.rate_scale`): one row per GPU, grid point (max_num_seqs x max_num_batched_tokens) and
seed. Per GPU it takes vLLM's defaults for that GPU (EngineArgs' batch defaults: 256 / 2048
under 70 GiB and on the A100, else 1024 / 8192) and the tuned point, the grid point with the
best objective averaged over seeds (the tuner's and `sweep.objective`'s: log useful tokens per
dollar - 100 x the SLO-attainment shortfall below 99%), vLLM's defaults where no point beats
them by 0.1%. It draws useful tokens per dollar and SLO attainment of both per GPU, best GPU
first, one row of panels per load, and prints the README's tables.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from servetune.config import hardware
from servetune.core.errors import ServetuneError
from servetune.run.entry import script_status

SEQS, BUDGET = "policy.max_num_seqs", "policy.max_num_batched_tokens"
SMALL_DEFAULTS = (256, 2048)  # vLLM's batch defaults under 70 GiB and on the A100
LARGE_DEFAULTS = (1024, 8192)
TARGET, PENALTY = 0.99, 100.0  # tune.objective.slo_target and sweep.penalty's defaults
GROUP_GPU = {"a100": "a100_80gb"}  # hardware= group -> catalog GPU where they differ
TIE = 1e-3  # objective (log units): points within 0.1% of the best are as good as it
RATE_RPS = 2867 / 600  # the slice's own rate: 2,867 requests over its 600 s (req/s)


def vllm_defaults(group: str) -> tuple[int, int]:
    """(max_num_seqs, max_num_batched_tokens) vLLM 0.32 picks on this GPU."""
    gpu = hardware.GPUS[GROUP_GPU.get(group, group)]
    small = gpu.memory_bytes < 70 * hardware.GIB or gpu.name.startswith("A100")
    return SMALL_DEFAULTS if small else LARGE_DEFAULTS


def points(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per GPU and grid point: means over seeds and the objective."""
    runs = runs.copy().assign(  # (read_csv's frame of ~200 columns is fragmented)
        objective=np.log(runs["useful_tokens_per_dollar"].clip(lower=1e-9))
        - PENALTY * (TARGET - runs["slo_attainment"]).clip(lower=0.0)
    )
    cols = [
        "objective",
        "useful_tokens_per_dollar",
        "slo_attainment",
        "goodput_rps",
        "ttft_p99_s",
        "tpot_p99_s",
        "joules_per_useful_token",
    ]
    return runs.groupby(["hardware", SEQS, BUDGET])[cols].mean().reset_index()


def per_gpu(table: pd.DataFrame) -> pd.DataFrame:
    """Per GPU: its price, vLLM's default point and the tuned point, best tuned GPU first."""
    rows = []
    for group, g in table.groupby("hardware"):
        seqs, budget = vllm_defaults(group)
        default = g[(g[SEQS] == seqs) & (g[BUDGET] == budget)]
        if default.empty:
            raise ServetuneError(
                f"{group}: the grid lacks vLLM's defaults there ({SEQS}={seqs}, {BUDGET}="
                f"{budget}); run the experiment's grid (conf/experiment/gpu_choice.yaml)"
            )
        default = default.iloc[0]
        tuned = g.loc[g["objective"].idxmax()]
        if default["objective"] >= tuned["objective"] - TIE:  # no better point: keep vLLM's
            tuned = default
        rows.append(
            {
                "gpu": group,
                "price": hardware.GPUS[GROUP_GPU.get(group, group)].price_per_gpu_hour,
                "default": default,
                "tuned": tuned,
            }
        )
    return pd.DataFrame(rows).sort_values("tuned", key=lambda s: [-t["objective"] for t in s])


def table_lines(best: pd.DataFrame) -> list[str]:
    """The README's table: per GPU, defaults vs tuned."""
    out = [
        "| GPU | $/GPU-hour | vLLM defaults: useful tok/$ (M), SLO att. | tuned max_num_seqs / "
        "max_num_batched_tokens | tuned: useful tok/$ (M), SLO att. | tuned / defaults | "
        "goodput (req/s) | P99 TTFT (s) | P99 TPOT (ms) | J per useful token |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for _, r in best.iterrows():
        d, t = r["default"], r["tuned"]
        out.append(
            f"| {r['gpu']} | {r['price']:.2f} | {d['useful_tokens_per_dollar'] / 1e6:.2f}, "
            f"{d['slo_attainment']:.1%} | {int(t[SEQS])} / {int(t[BUDGET])} | "
            f"{t['useful_tokens_per_dollar'] / 1e6:.2f}, {t['slo_attainment']:.1%} | "
            f"{t['useful_tokens_per_dollar'] / d['useful_tokens_per_dollar']:.2f} | "
            f"{t['goodput_rps']:.1f} | {t['ttft_p99_s']:.2f} | {t['tpot_p99_s'] * 1e3:.0f} | "
            f"{t['joules_per_useful_token']:.2f} |"
        )
    return out


def draw(loads: dict, out: Path) -> None:
    """Per load (a row): useful tokens per dollar and SLO attainment per GPU, vLLM's defaults vs
    tuned, the tuned max_num_seqs / max_num_batched_tokens over the bars."""
    fig = Figure(figsize=(12, 4.2 * len(loads)))
    axes = fig.subplots(len(loads), 2, gridspec_kw={"width_ratios": [3, 2]}, squeeze=False)
    for (scale, best), (ax_value, ax_att) in zip(loads.items(), axes, strict=True):
        x, w = np.arange(len(best)), 0.38
        labels = [f"{g}\n${p:.2f}/h" for g, p in zip(best["gpu"], best["price"], strict=True)]
        for ax, key, unit, title in (
            (ax_value, "useful_tokens_per_dollar", 1e-6, "useful tokens per dollar (M)"),
            (ax_att, "slo_attainment", 100.0, "SLO attainment (%)"),
        ):
            ax.bar(
                x - w / 2,
                [r[key] * unit for r in best["default"]],
                w,
                label="vLLM defaults",
                color="#bbbbbb",
            )
            ax.bar(
                x + w / 2, [r[key] * unit for r in best["tuned"]], w, label="tuned", color="#1f77b4"
            )
            names = labels if ax is ax_value else list(best["gpu"])
            ax.set_xticks(x, names, fontsize=7, rotation=0 if ax is ax_value else 35)
            ax.set_title(f"{title}, {scale:g}x ({RATE_RPS * scale:.0f} req/s)", fontsize=9)
        for xi, r in zip(x, best["tuned"], strict=True):
            ax_value.annotate(
                f"{int(r[SEQS])}/{int(r[BUDGET])}",
                (xi + w / 2, r["useful_tokens_per_dollar"] * 1e-6),
                ha="center",
                va="bottom",
                fontsize=6,
            )
        ax_att.axhline(TARGET * 100, color="k", lw=0.8, ls=":")
        ax_value.legend(fontsize=7)
    fig.suptitle(
        "Llama-3-8B on one GPU, Azure conversation trace (minutes 0-10), cost=aic; tuned "
        "max_num_seqs / max_num_batched_tokens over the bars",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(out, dpi=130)


def main(argv: list[str] | None = None) -> None:
    """Print the tables and write the figure."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("roots", type=Path, nargs="+", help="sweep folders (after servetune report)")
    ap.add_argument("--out", type=Path, default=Path(__file__).with_name("figure.png"))
    args = ap.parse_args(argv)
    loads = {}
    for root in args.roots:
        path = root / "report" / "runs.csv"
        if not path.is_file():
            raise ServetuneError(
                f"{path}: not found; expected a sweep folder `servetune report {root}` has "
                f"read (run the report first)"
            )
        runs = pd.read_csv(path)
        missing = [c for c in ("hardware", "seed", "offered_rps", SEQS, BUDGET) if c not in runs]
        if missing:
            raise ServetuneError(
                f"{path}: lacks column(s) {', '.join(missing)}; expected the runs of the "
                f"gpu_choice experiment (+experiment=gpu_choice, one sweep per load)"
            )
        # the load, from the recorded slice's offered rate (seed 0 replays it as recorded)
        recorded = runs[runs["seed"] == runs["seed"].min()]
        scale = round(float(recorded["offered_rps"].mean()) / RATE_RPS, 1)
        loads[scale] = per_gpu(points(runs))
    for scale, best in sorted(loads.items()):
        print(f"\n{scale:g}x the trace's rate ({RATE_RPS * scale:.0f} req/s):")
        print("\n".join(table_lines(best)))
        t = best.iloc[0]["tuned"]
        ratio = [
            r["tuned"]["useful_tokens_per_dollar"] / r["default"]["useful_tokens_per_dollar"]
            for _, r in best.iterrows()
        ]
        print(
            f"best: {best.iloc[0]['gpu']} at {int(t[SEQS])} / {int(t[BUDGET])}; tuned over "
            f"vLLM's defaults, useful tokens per dollar x{min(ratio):.2f} to x{max(ratio):.2f}"
        )
    draw(dict(sorted(loads.items())), args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    sys.exit(script_status(main))
