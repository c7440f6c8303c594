"""Python API: simulate a configured scenario batch and get metrics and request tables back."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence

import pandas as pd
from omegaconf import DictConfig, OmegaConf

from servetune.config.overrides import to_overrides
from servetune.config.scenario import Scenario, build
from servetune.core.errors import ConfigError, SimulationError, breaches
from servetune.core.suggest import addition_problem, override_problem
from servetune.run import estimate as estimate_lib
from servetune.run import fleet_metrics
from servetune.run import metrics as metrics_lib
from servetune.run.driver import rollout
from servetune.run.estimate import Estimate
from servetune.run.guard import Guard
from servetune.run.progress import simulation_progress

REPR_METRICS = (
    "goodput_rps",
    "slo_attainment",
    "ttft_p99_s",
    "tpot_p99_s",
    "useful_tokens_per_dollar",
)


class RequestTables(Sequence):
    """The per-request tables of a batch, one DataFrame per scenario, each built from its
    columns (metrics.request_columns) when first read: a sweep or a tuner that reads only the
    metrics does not pay for thousands of DataFrames."""

    def __init__(self, columns: list):
        self._columns = columns
        self._tables: dict = {}

    def __len__(self) -> int:
        return len(self._columns)

    def columns(self, k: int) -> dict:
        """Scenario k's table as {column: numpy array [N]} (metrics.request_columns)."""
        return self._columns[k]

    def __getitem__(self, k):
        if isinstance(k, slice):
            return [self[i] for i in range(*k.indices(len(self)))]
        k = range(len(self))[k]  # negative indices, and an IndexError past the end
        if k not in self._tables:
            self._tables[k] = pd.DataFrame(self._columns[k])
        return self._tables[k]


@dataclasses.dataclass(repr=False)
class SimulationResult:
    """Results of a batch: one entry per scenario, ordered seed-major then grid point.

    metrics: [S x P] dicts; requests: [S x P] DataFrames (built when read: RequestTables);
    table: one row per scenario with its
    seed, grid values and scalar metrics; wall_s: seconds of the rollout (compile included);
    timelines: [S x P] sampled timelines (metrics.timeline_table) with output.timeline, else [].
    fleets: [S x P] with an autoscaler (fleet.autoscale), else []: per scenario
    {"replicas": fleet_metrics.fleet_table, "hourly": fleet_metrics.hourly}.
    """

    scenario: Scenario
    metrics: list
    requests: Sequence  # RequestTables
    table: pd.DataFrame
    wall_s: float
    timelines: list = dataclasses.field(default_factory=list)
    fleets: list = dataclasses.field(default_factory=list)

    def requests_table(self) -> pd.DataFrame:
        """Every scenario's requests in one table: `scenario` (the row of `table`), `seed` and
        the grid values (`policy.*`) first, then the per-request columns."""
        keys = self.table[[c for c in self.table.columns if c == "seed" or c.startswith("policy.")]]
        parts = [
            req.assign(scenario=k, **keys.iloc[k].to_dict()) for k, req in enumerate(self.requests)
        ]
        frame = pd.concat(parts, ignore_index=True)
        front = ["scenario", *keys.columns]
        return frame[front + [c for c in frame.columns if c not in front]]

    def __repr__(self) -> str:
        n = len(self.metrics)
        grid = sorted({k for pt in self.scenario.grid_points for k in pt})
        shape = (
            f"{len(self.scenario.seeds)} seed(s) x {len(self.scenario.grid_points)} grid "
            f"point(s)" + (f" over {', '.join(grid)}" if grid else "")
        )
        figures = []
        for name in REPR_METRICS:
            col = self.table[name]
            figures.append(
                f"{name}={col.iloc[0]:.4g}"
                if n == 1
                else f"{name} in [{col.min():.4g}, {col.max():.4g}]"
            )
        sizes = sorted({len(trace) for trace in self.scenario.traces})
        requests = str(sizes[0]) if len(sizes) == 1 else f"{sizes[0]}-{sizes[-1]}"
        return (
            f"SimulationResult({n} scenario(s): {shape}; workload "
            f"{self.scenario.labels.get('workload')}, {requests} requests per scenario; "
            f"{', '.join(figures)}; {self.wall_s:.1f} s wall)"
        )


def compose(overrides: Sequence[str] = (), **settings) -> DictConfig:
    """The servetune config with Hydra-style `overrides` applied (e.g. "policy.max_num_seqs=64"),
    then keyword `settings` (e.g. `policy={"max_num_seqs": 64}, seeds=2`:
    servetune/config/overrides.py).
    """
    if isinstance(overrides, str):
        raise ConfigError(
            f"overrides: got the string {overrides!r}; expected a list of "
            f"overrides, e.g. [{overrides!r}]"
        )
    if overrides is None:
        overrides = ()
    if not isinstance(overrides, Sequence) or not all(isinstance(o, str) for o in overrides):
        raise ConfigError(
            f"overrides: got {overrides!r}; expected a list of strings such as "
            f"['policy.max_num_seqs=64']"
        )
    overrides = [*overrides, *to_overrides(settings)]
    added = addition_problem(overrides)  # a +key nothing reads: as on the command line
    if added:
        raise ConfigError(added)
    from hydra import compose as hydra_compose
    from hydra import initialize_config_module
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException

    def attempt(ovr):
        if GlobalHydra.instance().is_initialized():
            GlobalHydra.instance().clear()
        with initialize_config_module(config_module="servetune.conf", version_base=None):
            return hydra_compose(config_name="config", overrides=list(ovr))

    try:
        return attempt(overrides)
    except (HydraException, ValueError) as err:
        # name the first override that fails with the ones before it (a group choice changes
        # which keys the later ones may set), in the project's "key: problem" form
        culprit, hint = "overrides", None
        for k, ovr in enumerate(overrides):
            try:
                attempt(overrides[: k + 1])
            except (HydraException, ValueError):
                culprit = ovr.split("=", 1)[0].lstrip("+~")
                hint = override_problem([ovr], attempt(overrides[:k]))
                break
        raise ConfigError(hint or f"{culprit}: {' '.join(str(err).split())}") from None


def check_invariants(results) -> None:
    """Raise SimulationError naming the first scenario whose error code (Stats.invariants) has
    a bit set, and what the first such invariant means (core/errors.INVARIANTS)."""
    for s, row in enumerate(results):
        for p, res in enumerate(row):
            broken = breaches(res.stats["invariants"])
            if broken:
                raise SimulationError(f"scenario (seed #{s}, grid point #{p}): {broken[0]}")


def simulate_batch(
    scenario: Scenario, progress: Callable[[int, int], None] | None = None
) -> SimulationResult:
    """Simulate every (seed, grid point) of `scenario` in one compiled rollout."""
    start = time.perf_counter()
    n_real = [len(t) for t in scenario.traces]
    results = rollout(scenario.workloads, scenario.params, scenario.engine, n_real, progress)
    wall = time.perf_counter() - start
    check_invariants(results)
    all_metrics, tables, rows, timelines, fleets = [], [], [], [], []
    for s, seed in enumerate(scenario.seeds):
        trace = scenario.traces[s]
        for p, point in enumerate(scenario.grid_points):
            columns = metrics_lib.request_columns(trace, results[s][p], scenario.metrics)
            m = metrics_lib.compute_metrics(trace, results[s][p], scenario.metrics, columns)
            m["vllm_bench"] = metrics_lib.bench_metrics(columns, results[s][p])
            all_metrics.append(m)
            tables.append(columns)
            if results[s][p].timeline is not None:
                timelines.append(metrics_lib.timeline_table(results[s][p].timeline))
            if "fleet_log" in results[s][p].stats:  # fleet.autoscale
                fleets.append(_fleet_tables(scenario, results[s][p], columns))
            row = {"seed": seed, **{f"policy.{k}": v for k, v in point.items()}}
            row.update({k: v for k, v in m.items() if not isinstance(v, dict)})
            rows.append(row)
    return SimulationResult(
        scenario, all_metrics, RequestTables(tables), pd.DataFrame(rows), wall, timelines, fleets
    )


def _fleet_tables(scenario: Scenario, res, columns) -> dict:
    """The autoscaled fleet of one scenario over time and per hour (run/fleet_metrics.py)."""
    spec = scenario.metrics
    usd_per_replica_s = spec.price_per_gpu_hour * spec.gpus_per_replica / 3600.0
    ratio = spec.spot_price_ratio
    return {
        "replicas": fleet_metrics.fleet_table(res.stats, usd_per_replica_s, ratio),
        "hourly": fleet_metrics.hourly(
            columns, res.stats, usd_per_replica_s, res.clock_s, spot_price_ratio=ratio
        ),
    }


def _config(overrides, settings: dict) -> DictConfig:
    """A composed config: `overrides` as given (a DictConfig, without `settings`), or
    composed from overrides and keyword settings."""
    if isinstance(overrides, DictConfig):
        if settings:
            raise ConfigError(
                f"{next(iter(settings))}: keyword settings apply to overrides, not "
                f"to a composed config; pass them to compose()"
            )
        return overrides
    return compose(overrides, **settings)


def planned(cfg: DictConfig) -> tuple[Scenario, Estimate]:
    """(the scenario of `cfg`, its estimate), built under the resource guard (run/guard.py):
    a ResourceLimitError, before the traces are drawn in full, where the estimate passes
    guard.max_wall_s or guard.max_memory_fraction (unless guard.confirmed)."""
    guard = Guard(cfg)
    scenario = build(cfg, plan=guard)
    return scenario, guard.built(scenario)


def estimate(overrides: Sequence[str] | DictConfig = (), **settings) -> Estimate:
    """How long simulating the config of `overrides` and `settings` would take on this
    machine and how much memory it would hold (run/estimate.py), without simulating it;
    a ResourceLimitError where that passes the guard's limits (guard.*), as simulate would
    stop."""
    return planned(_config(overrides, settings))[1]


def simulate(
    overrides: Sequence[str] | DictConfig = (), progress=True, **settings
) -> SimulationResult:
    """Compose the config from Hydra `overrides` and keyword `settings` (or take a composed
    DictConfig), build the scenarios and simulate them, e.g.
    `simulate(workload="poisson", policy={"max_num_seqs": 64}, seeds=2)`. A run estimated
    beyond the guard's limits (an hour, the memory available: `guard.*`) is refused with
    its estimate before anything is drawn or compiled (ResourceLimitError) unless
    `guard={"confirmed": True}`.

    progress: True shows it as the command line does (run/progress.py: a bar on a terminal, a
    line every 10 s in a log or a notebook; output.progress=false turns it off); False or None
    shows none; a callable is called as progress(requests taken, of all) after each chunk."""
    cfg = _config(overrides, settings)
    scenario, est = planned(cfg)
    if progress is not True:
        return simulate_recorded(scenario, est, progress or None)
    shown = OmegaConf.select(cfg, "output.progress", default=True)
    with simulation_progress(shown is not False) as callback:
        return simulate_recorded(scenario, est, callback)


def simulate_recorded(scenario: Scenario, est: Estimate, progress=None) -> SimulationResult:
    """simulate_batch, then this machine's record of how the run compared with its estimate
    `est` (run/estimate.record)."""
    start = time.perf_counter()
    result = simulate_batch(scenario, progress)
    assert scenario.outline is not None
    estimate_lib.record(
        est, time.perf_counter() - start, [estimate_lib.signature(scenario.outline)]
    )
    return result
