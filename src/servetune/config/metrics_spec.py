"""What a scenario's metrics need beyond the simulation (SLOs, the warm-up window, prices,
capacity, the quality and cascade models), as the config reader builds it and metrics.py reads
it."""

from __future__ import annotations

import dataclasses

from servetune.config import cascade as cascade_lib
from servetune.config import quality


@dataclasses.dataclass(frozen=True)
class MetricsSpec:
    """What the metrics need beyond the simulation: SLOs, window, prices.

    slo_*: targets in seconds (None = not checked). warmup_s: arrivals before it are not counted.
    price_per_gpu_hour: USD; n_gpus: GPUs provisioned (with an autoscaler, at most);
    gpus_per_replica: with an autoscaler (engine/autoscale.py), GPUs per replica: the cost is
    then the replicas the fleet's log says were provisioned (0 = a fixed fleet of n_gpus).
    spot_price_ratio: a spot replica's price over an on-demand one's (engine/spot.py).
    kv_blocks: KV capacity of the instance.
    quality: the quality model and the scenario's precision (servetune.config.quality), or None
    (every completed request passes its task check).
    """

    slo_ttft_s: float | None
    slo_tpot_s: float | None
    slo_e2e_s: float | None
    warmup_s: float
    price_per_gpu_hour: float
    n_gpus: int
    kv_blocks: int
    gpus_per_replica: int = 0
    spot_price_ratio: float = 1.0
    kv_compress_fail_prob: float = 0.0  # quality cost of KV compression (engine/pressure.py)
    quality: quality.QualitySpec | None = None
    cascade: cascade_lib.CascadeSpec | None = None  # model cascade (cascade_config), else None
    work: tuple = ()  # [I] hardware.ModelWork of each instance's model on its GPUs (MFU, MBU)
    idle_power_fraction: float = 0.1  # of board power while idle (run/energy.py)
    energy_price_usd_per_kwh: float = 0.0  # electricity, for energy_cost_usd
