"""servetune: a jit-compiled, vectorized token-step simulator of LLM serving engines.

Clocks are float64 seconds: an hour-long trace stepped in ~10 ms iterations loses
milliseconds in float32, so servetune turns on JAX's 64-bit mode when imported.
Every other array carries an explicit dtype.

The public API (no public name is also a module's name):

- `compose(overrides, **settings)` -> the config (keyword settings are overrides written as
  Python values: `policy={"max_num_seqs": 64}`); `build(cfg)` -> a `Scenario` (workloads [S] x
  policy points [P], engine config, metrics spec);
- `simulate(overrides or cfg, **settings)` and `simulate_batch(scenario)` -> a
  `SimulationResult` (metrics, request tables, one summary table, `requests_table()`);
- `rollout(workloads, params, engine, n_real)` -> [S][P] `ScenarioResult` per-request arrays,
  the device loop without the metrics;
- `tune(cfg or overrides, out_dir)` -> a `TuneResult`;
- the device-side types `Workload`, `Params`, `EngineConfig`, `SimState`, and the user-error
  types `ServetuneError`, `ConfigError`, `TraceError`.
"""

import jax

jax.config.update("jax_enable_x64", True)

from servetune.api import SimulationResult, compose, simulate, simulate_batch
from servetune.driver import ScenarioResult, rollout
from servetune.errors import ConfigError, ServetuneError, TraceError
from servetune.scenario import Scenario, build
from servetune.tuning import TuneResult, tune
from servetune.types import EngineConfig, Params, SimState, Workload

__all__ = [
    "ConfigError", "EngineConfig", "Params", "Scenario", "ScenarioResult", "ServetuneError",
    "SimState", "SimulationResult", "TraceError", "TuneResult", "Workload", "build", "compose",
    "rollout", "simulate", "simulate_batch", "tune",
]
__version__ = "0.1.0"
