"""What an autoscaled fleet (engine/autoscale.py) provisioned and what it cost, from its log:
replica-seconds over the measurement window, replicas over time, the cold starts' share.
A spot replica's seconds are paid at `spot_price_ratio` of the on-demand price (engine/spot.py);
a cold start's cost is priced on demand (the log does not say which cold replicas are spot)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from servetune.core.types import FLEET_LOG_COLUMNS

COL = {name: k for k, name in enumerate(FLEET_LOG_COLUMNS)}
FLEET_TABLE_COLUMNS = (
    "t_s",
    "provisioned",
    "cold",
    "serving",
    "draining",
    "desired",
    "spot",
    "cost_usd",
)
HOURLY_COLUMNS = ("hour", "arrivals", "slo_attainment", "mean_replicas", "cost_usd")


def step_integral(log: np.ndarray, column: str, t0: float, t1: float) -> float:
    """The integral over [t0, t1] (seconds) of a log column held from each row's time to the
    next row's (rows in time order; the last holds to t1): replica-seconds for a count."""
    if t1 <= t0 or len(log) == 0:
        return 0.0
    t = log[:, COL["t_s"]]
    ends = np.append(t[1:], np.inf)
    lo, hi = np.maximum(t, t0), np.minimum(ends, t1)
    return float(np.sum(np.maximum(hi - lo, 0.0) * log[:, COL[column]]))


def provisioned_replica_s(stats: dict, t0: float, t1: float) -> float:
    """Replica-seconds provisioned (cold, serving or draining) over [t0, t1] seconds."""
    return step_integral(np.asarray(stats["fleet_log"]), "provisioned", t0, t1)


def paid_replica_s(stats: dict, t0: float, t1: float, spot_price_ratio: float = 1.0) -> float:
    """Replica-seconds over [t0, t1] seconds at the on-demand price: those provisioned, with
    the spot ones' counted at `spot_price_ratio`."""
    log = np.asarray(stats["fleet_log"])
    spot_s = step_integral(log, "spot", t0, t1) if spot_price_ratio != 1.0 else 0.0
    return provisioned_replica_s(stats, t0, t1) - (1.0 - spot_price_ratio) * spot_s


def fleet_metrics(
    stats: dict, t0: float, t1: float, usd_per_replica_s: float, spot_price_ratio: float = 1.0
) -> dict:
    """The fleet's metrics over [t0, t1] (seconds), the cost's window: mean and peak replicas
    provisioned, replica-hours (spot ones too), replica-seconds spent cold-starting and their
    cost (USD at `usd_per_replica_s`), and over the whole run the replicas started and
    stopped, the starts refused for want of a replica that is off (all others draining: raise
    engine.n_instances above fleet.max_replicas for room), the spot preemptions and the
    requests re-queued (engine/requeue.py)."""
    log = np.asarray(stats["fleet_log"])
    t = log[:, COL["t_s"]]
    in_effect = (t <= t1) & (np.append(t[1:], np.inf) > t0)  # rows holding within the window
    span = t1 - t0
    replica_s = provisioned_replica_s(stats, t0, t1)
    cold_s = step_integral(log, "cold", t0, t1)
    return {
        "replica_hours": replica_s / 3600.0,
        "spot_replica_hours": step_integral(log, "spot", t0, t1) / 3600.0,
        "mean_replicas": replica_s / span if span > 0 else float("nan"),
        "peak_replicas": float(np.max(log[in_effect, COL["provisioned"]], initial=0.0)),
        "cold_start_replica_s": cold_s,
        "cold_start_cost_usd": cold_s * usd_per_replica_s,
        "scale_ups": int(stats["fleet_scale_ups"]),
        "scale_downs": int(stats["fleet_scale_downs"]),
        "scale_ups_refused": int(stats["fleet_refused"]),
        "spot_preemptions": int(stats["fleet_preemptions"]),
        "requests_requeued": int(stats["fleet_requeued"]),
    }


def replicas_over_time(stats: dict) -> dict[str, np.ndarray]:
    """{t_s, provisioned, cold, serving, draining, desired, spot} [K] from the fleet's log: the
    counts after each evaluation and each replica that finished draining (a step function)."""
    log = np.asarray(stats["fleet_log"])
    cols = {name: log[:, COL[name]] for name in FLEET_LOG_COLUMNS}
    cols["serving"] = cols["provisioned"] - cols["cold"] - cols["draining"]
    return cols


def fleet_table(
    stats: dict, usd_per_replica_s: float, spot_price_ratio: float = 1.0
) -> pd.DataFrame:
    """The fleet over time, a row per log entry (a step function: each row holds until the
    next): t_s, provisioned, cold, serving, draining, desired, spot (replicas) and cost_usd,
    the provisioned replicas' cost from time 0 to t_s (USD)."""
    cols = replicas_over_time(stats)
    t = cols["t_s"]
    paid = cols["provisioned"] - (1.0 - spot_price_ratio) * cols["spot"]
    held = np.diff(t, prepend=t[:1]) * np.concatenate([[0.0], paid[:-1]])
    frame = pd.DataFrame({name: cols[name] for name in FLEET_TABLE_COLUMNS[:-1]})
    frame["cost_usd"] = np.cumsum(held) * usd_per_replica_s
    return frame


def hourly(
    requests: Mapping,
    stats: dict,
    usd_per_replica_s: float,
    t_end: float,
    hour_s: float = 3600.0,
    spot_price_ratio: float = 1.0,
) -> pd.DataFrame:
    """Per hour of simulated time (by arrival): hour (its start, s), arrivals (counted
    requests), slo_attainment (the share that qualify; NaN without arrivals), mean_replicas
    provisioned and cost_usd of that hour. `requests`: the per-request columns
    (metrics.request_columns: arrival_s, counted, qualifies)."""
    arrival = np.asarray(requests["arrival_s"], np.float64)
    counted = np.asarray(requests["counted"], bool)
    ok = np.asarray(requests["qualifies"], bool) & counted
    n_hours = max(int(np.ceil(t_end / hour_s)), 1)
    which = np.minimum((arrival // hour_s).astype(np.int64), n_hours - 1)
    arrivals = np.bincount(which[counted], minlength=n_hours)
    good = np.bincount(which[ok], minlength=n_hours)
    log = np.asarray(stats["fleet_log"])
    bounds = [(h * hour_s, min((h + 1) * hour_s, t_end)) for h in range(n_hours)]
    replica_s = np.array([step_integral(log, "provisioned", a, b) for a, b in bounds])
    spot_s = np.array([step_integral(log, "spot", a, b) for a, b in bounds])
    paid_s = replica_s - (1.0 - spot_price_ratio) * spot_s  # as paid_replica_s
    span = np.minimum(np.arange(1, n_hours + 1) * hour_s, t_end) - np.arange(n_hours) * hour_s
    with np.errstate(invalid="ignore", divide="ignore"):
        return pd.DataFrame(
            {
                "hour": np.arange(n_hours) * hour_s,
                "arrivals": arrivals,
                "slo_attainment": np.where(arrivals > 0, good / arrivals, np.nan),
                "mean_replicas": np.where(span > 0, replica_s / span, np.nan),
                "cost_usd": paid_s * usd_per_replica_s,
            }
        )
