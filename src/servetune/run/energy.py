"""GPU energy of a run, from each instance's busy time and work counters.

A GPU draws `idle_power_fraction` x its board power (TDP) while it waits with the model loaded.
While it runs iterations, its draw rises with how hard the tensor cores work: with u the
model FLOPs over the instance's peak FLOP/s during its busy time,

    P_busy / TDP = BUSY_FLOOR + (BUSY_CEILING - BUSY_FLOOR) x (1 - exp(-u / FLOP_SCALE)).

The constants are read off NVIDIA's power measurements that aiconfigurator-core 0.12.0 ships
for B200 under vLLM 0.22.0 (systems/data/b200_sxm/attention/vllm/0.22.0, the `power` column of
its context attention table, power limit 1,000 W; medians of u bins): 0.60 of the limit at
u ~ 0.002, 0.63 at 0.005, 0.67 at 0.03, 0.76 at 0.07, 0.82 at 0.14 and 0.89-0.90 from 0.3.
Kernels that do almost no arithmetic draw less: the same release's decode attention kernels
(memory-bound, u ~ 0) draw a median 0.39, so a step dominated by long-context decode attention
is charged somewhat more than it draws. `tests/integration/test_aic.py` holds the curve to those
measurements. Other GPUs are assumed to draw the same fractions of their own TDP.

u is over the GPUs' dense BF16 peak (hardware.py), also for FP8 weights, whose tensor cores
run up to twice as fast: their u, and so their busy draw, is overstated. u is the run's
average over busy time, and the curve is concave, so a run mixing prefill-heavy
and decode-only iterations is charged a little more than iteration by iteration would give.
Energy is over the same window as the cost (the provisioned time after the warm-up), at the
run's average power.
"""

from __future__ import annotations

import math

import numpy as np

BUSY_FLOOR = 0.60  # fraction of TDP drawn by iterations doing little arithmetic (B200)
BUSY_CEILING = 0.90  # fraction of TDP drawn by compute-bound iterations (B200 measurements)
FLOP_SCALE = 0.09  # FLOP utilization over which the draw rises by 1 - 1/e of its range
JOULES_PER_KWH = 3.6e6


def busy_power_fraction(u: np.ndarray) -> np.ndarray:
    """P_busy / TDP at FLOP utilization `u` (model FLOPs over peak FLOP/s while busy)."""
    u = np.clip(np.asarray(u, np.float64), 0.0, None)
    return BUSY_FLOOR + (BUSY_CEILING - BUSY_FLOOR) * (1.0 - np.exp(-u / FLOP_SCALE))


def instance_energy_j(
    busy_s: np.ndarray,
    flops: np.ndarray,
    peak_flops: np.ndarray,
    tdp_w: np.ndarray,
    sim_s: float,
    idle_power_fraction: float,
) -> np.ndarray:
    """Joules [I] each instance's GPUs draw over `sim_s` seconds: busy_s [I] seconds in
    iterations at the power of their FLOP utilization (flops [I] over peak_flops [I] FLOP/s),
    the rest idle; tdp_w [I] is the instance's board power (tp x the GPU's), in watts."""
    busy = np.minimum(np.asarray(busy_s, np.float64), sim_s)
    with np.errstate(divide="ignore", invalid="ignore"):
        u = np.where(busy > 0, np.asarray(flops) / (np.asarray(peak_flops) * busy), 0.0)
    busy_j = busy * tdp_w * busy_power_fraction(u)
    return busy_j + (sim_s - busy) * tdp_w * idle_power_fraction


def energy_metrics(
    joules_sim: float,
    sim_s: float,
    provisioned_s: float,
    useful_tokens: float,
    cost_usd: float,
    price_usd_per_kwh: float,
) -> dict:
    """Energy over the provisioned window (J, at the run's average power), joules per useful
    token (NaN when none), its cost at `price_usd_per_kwh` (USD) and the energy share of GPU
    plus energy cost (NaN when both are 0)."""
    power_w = joules_sim / sim_s if sim_s > 0 else float("nan")
    energy_j = power_w * provisioned_s if sim_s > 0 else 0.0
    energy_usd = energy_j / JOULES_PER_KWH * price_usd_per_kwh
    total = cost_usd + energy_usd
    return {
        "energy_j": energy_j,
        "mean_power_w": power_w,
        "joules_per_useful_token": energy_j / useful_tokens if useful_tokens > 0 else math.nan,
        "energy_cost_usd": energy_usd,
        "energy_cost_share": energy_usd / total if total > 0 else math.nan,
    }
