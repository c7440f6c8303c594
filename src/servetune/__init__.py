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
- `estimate(overrides or cfg, **settings)` -> an `Estimate` of the run's wall time and memory on
  this machine, without simulating it (a `ResourceLimitError` where the resource guard,
  `guard.*`, would refuse it: `simulate` refuses the same way unless `guard.confirmed`);
- `rollout(workloads, params, engine, n_real)` -> [S][P] `ScenarioResult` per-request arrays,
  the device loop without the metrics;
- `tune(cfg or overrides, out_dir)` -> a `TuneResult`;
- the device-side types `Workload`, `Params`, `EngineConfig`, `SimState`, and the user-error
  types `ServetuneError`, `ConfigError`, `TraceError`, `ResourceLimitError`.
"""

import importlib
import os
import sys

# 64-bit mode before any servetune array exists: JAX reads JAX_ENABLE_X64 when it is first
# imported (and servetune's modules import it after this), or, where the caller imported JAX
# already, the config is set here
os.environ["JAX_ENABLE_X64"] = "1"
if "jax" in sys.modules:
    sys.modules["jax"].config.update("jax_enable_x64", True)

_PUBLIC = {  # name -> the module that defines it, imported when the name is first used
    "SimulationResult": "servetune.run.api",
    "compose": "servetune.run.api",
    "simulate": "servetune.run.api",
    "simulate_batch": "servetune.run.api",
    "estimate": "servetune.run.api",
    "Estimate": "servetune.run.estimate",
    "ResourceLimitError": "servetune.core.errors",
    "ScenarioResult": "servetune.run.driver",
    "rollout": "servetune.run.driver",
    "ConfigError": "servetune.core.errors",
    "ServetuneError": "servetune.core.errors",
    "TraceError": "servetune.core.errors",
    "Scenario": "servetune.config.scenario",
    "build": "servetune.config.scenario",
    "TuneResult": "servetune.tuning",
    "tune": "servetune.tuning",
    "EngineConfig": "servetune.core.types",
    "Params": "servetune.core.types",
    "SimState": "servetune.core.types",
    "Workload": "servetune.core.types",
}
__all__ = [
    "ConfigError",
    "EngineConfig",
    "Estimate",
    "Params",
    "ResourceLimitError",
    "Scenario",
    "ScenarioResult",
    "ServetuneError",
    "SimState",
    "SimulationResult",
    "TraceError",
    "TuneResult",
    "Workload",
    "build",
    "compose",
    "estimate",
    "rollout",
    "simulate",
    "simulate_batch",
    "tune",
]
assert sorted(__all__) == sorted(_PUBLIC)


def __getattr__(name: str):
    """The public API, imported on first use: `import servetune` (and `servetune --help`)
    stays light; `servetune.simulate` loads JAX and the simulator then."""
    if name in _PUBLIC:
        value = getattr(importlib.import_module(_PUBLIC[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'servetune' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_PUBLIC))


__version__ = "0.1.0"
