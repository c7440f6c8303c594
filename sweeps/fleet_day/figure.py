"""Study (m)'s figure: the four arms on the held-out day, from study.py's folder.

    python sweeps/fleet_day/figure.py [outputs/study_fleet_day]

Left: useful tokens per dollar and SLO attainment per arm. Right: replicas provisioned over the
day for each arm (the static fleet a flat line), with the rate curve's multiplier behind them.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from servetune.core.errors import ServetuneError
from servetune.run.entry import script_status
from servetune.workload import rate_curve


def _read(out: Path) -> tuple[dict, int]:
    """(compare.json, the static fleet's replicas) of study.py's folder `out`; a
    ServetuneError naming the file that is missing or damaged."""
    try:
        doc = json.loads((out / "compare.json").read_text())
        replicas = int(json.loads((out / "sizing.json").read_text())["replicas"])
        for k in range(1, len(doc)):
            (out / f"fleet_{k}.parquet").stat()
    except (OSError, ValueError, KeyError, TypeError) as err:
        name = getattr(err, "filename", None) or "compare.json or sizing.json"
        raise ServetuneError(
            f"{out}: cannot read {name} ({type(err).__name__}); expected the folder "
            f"sweeps/fleet_day/study.py wrote (run it first: python sweeps/fleet_day/study.py "
            f"--out {out})"
        ) from None
    return doc, replicas


def main(argv: list[str] | None = None) -> None:
    """Write figure.png beside this script."""
    argv = sys.argv[1:] if argv is None else argv
    out = Path(argv[0] if argv else "outputs/study_fleet_day")
    doc, replicas = _read(out)
    arms = list(doc)
    fig = Figure(figsize=(13, 4.8), layout="constrained")
    left, right = fig.subplots(1, 2, width_ratios=(1, 1.6))
    value = [doc[a]["useful_tokens_per_dollar"] / 1e3 for a in arms]
    bars = left.bar(range(len(arms)), value, color=[f"C{k}" for k in range(len(arms))])
    for bar, arm in zip(bars, arms, strict=True):
        m = doc[arm]
        left.annotate(
            f"{m['slo_attainment']:.2%}\n${m['cost_usd']:.0f}",
            (bar.get_x() + bar.get_width() / 2, bar.get_height()),
            ha="center",
            va="bottom",
            fontsize=8,
        )
    left.set_xticks(range(len(arms)), [a.replace(", ", ",\n").replace(" + ", "\n+ ") for a in arms])
    left.tick_params(axis="x", labelsize=8)
    left.set_ylabel("useful tokens per dollar (thousands)")
    left.set_title("held-out day: value (SLO attainment, cost per day)", fontsize=10)
    left.margins(y=0.2)
    curve = rate_curve.load("azure_llm_2024_weekday")
    back = right.twinx()
    back.fill_between(curve.times_s / 3600, curve.multipliers, color="0.85")
    back.set_ylabel("rate multiplier (the weekday curve)", color="0.5")
    back.set_ylim(0, 1.6)
    right.set_zorder(back.get_zorder() + 1)
    right.patch.set_visible(False)
    right.axhline(replicas, color="C0", lw=2, label=f"{arms[0]} ({replicas})")
    for k, arm in enumerate(arms[1:], start=1):
        table = pd.read_parquet(out / f"fleet_{k}.parquet")
        right.step(table["t_s"] / 3600, table["provisioned"], where="post", color=f"C{k}", lw=1)
        right.plot([], [], color=f"C{k}", label=f"{arm} (mean {doc[arm]['mean_replicas']:.2f})")
    right.set_xlabel("hour of the day (UTC)")
    right.set_ylabel("replicas provisioned (2 x H100 each)")
    right.set_xlim(0, 24)
    peak = max([replicas] + [doc[a]["peak_replicas"] or 0 for a in arms[1:]])
    right.set_ylim(0, peak + 3)  # room for the legend above the steps
    right.set_xticks(np.arange(0, 25, 3))
    right.legend(fontsize=8, loc="upper left")
    right.set_title("replicas over the held-out day", fontsize=10)
    fig.savefig(Path(__file__).with_name("figure.png"), dpi=110)


if __name__ == "__main__":
    sys.exit(script_status(main))
