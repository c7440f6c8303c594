import getpass
import os
import sys
import tempfile

# Keep CPU tests single-device and quiet; set before JAX initializes.
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# JAX's persistent compilation cache, shared by the xdist workers, the CLI processes the tests
# start and later runs: many test modules compile the same simulator programs (each module's
# in-memory programs are released when it ends, see below), and a program compiled once is
# then read back instead of compiled again. Set JAX_COMPILATION_CACHE_DIR to use another.
os.environ.setdefault(
    "JAX_COMPILATION_CACHE_DIR",
    os.path.join(tempfile.gettempdir(), f"servetune-tests-jax-cache-{getpass.getuser()}"),
)
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.3")
# the tests' runs record their pace (servetune/run/estimate.py) beside their cache, not in ~/.cache
os.environ.setdefault(
    "SERVETUNE_PACE_FILE",
    os.path.join(tempfile.gettempdir(), f"servetune-tests-pace-{getpass.getuser()}.json"),
)
# Compilation is most of the suite's time (the summary line at its end says how much):
# XLA:CPU's backend at optimization level 1 instead of 3 compiles a simulator about 25% faster
# and runs these short tests about as fast (test_queueing + test_leap: 82 s against 102 s;
# test_prefix + the prefix golden cases: 171 s against 195 s, one after the other on 2 cores;
# the whole suite 818 s against 1031 s). The level moves float rounding in the last place of
# some sums (a busy time of 18.60240000000002 s against 18.602400000000017 s), so runs that are
# compared bit for bit must compile alike (test_sharding passes this process's flags on); the
# whole suite passes at both levels. XLA:CPU's older elemental emitters instead of its fusion
# emitters (--xla_cpu_use_fusion_emitters=false) compile another quarter faster, again at the
# same run time: test_prefix + test_leap + the vLLM golden cases, cold caches, side by side on
# 2026-12-03: 277 s of compilation and 234 s wall against 205 s and 191 s, all passing.
# XLA_FLAGS naming either flag of its own wins for that flag.
for _flag in ("--xla_backend_optimization_level=1", "--xla_cpu_use_fusion_emitters=false"):
    if _flag.split("=")[0] not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + _flag).strip()
sys.path.insert(0, os.path.dirname(__file__))

# Hypothesis profiles for tests/properties/test_properties.py: "ci" (the default) is fast and
# derandomized (the same examples every run); "slow" explores >= 500 new examples and more engine
# configs: HYPOTHESIS_PROFILE=slow python -m pytest -q tests/properties/test_properties.py
from hypothesis import HealthCheck, settings  # noqa: E402 -- after the XLA flags above

settings.register_profile(
    "ci",
    max_examples=25,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
    print_blob=True,
)
settings.register_profile(
    "slow",
    max_examples=500,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    print_blob=True,
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


import pytest  # noqa: E402


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs():
    """Drop each module's compiled programs when it ends. One process compiles hundreds of
    XLA programs over the suite; each keeps JIT code mappings alive, and near the end the
    suite crashed inside the XLA compiler (SIGSEGV / SIGABRT) until they were released."""
    yield
    import gc

    import jax

    jax.clear_caches()
    gc.collect()


# ---- the suite's compilations: counted in each process (xdist workers report theirs to the
# controller) and printed at the end, so a change that compiles the simulator more is seen.
# SERVETUNE_COMPILE_LOG=FILE also lists each simulator-sized one: seconds, function, test.
_COMPILES = {
    "count": 0,
    "seconds": 0.0,
    "simulator": 0,
    "simulator_seconds": 0.0,
    "cache_hits": 0,
    "saved_seconds": 0.0,
}
_SIMULATOR_MIN_S = 1.0  # a compilation this long is a simulator loop (small ops take ms)


# jax.monitoring's event names: a compilation, a program read from the persistent cache, and
# the compile time that saved
_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
_HIT_EVENT = "/jax/compilation_cache/cache_hits"
_SAVED_EVENT = "/jax/compilation_cache/compile_time_saved_sec"


def _on_event(event: str, **_):
    if event == _HIT_EVENT:  # fired inside the compile event that follows: that one is a read
        _COMPILES["cache_hits"] += 1
        _COMPILES["reading"] = True


def _on_compile(event: str, duration: float, fun_name: str = "?", **_):
    if event == _SAVED_EVENT:
        _COMPILES["saved_seconds"] += duration
    if event == _COMPILE_EVENT:
        if _COMPILES.pop("reading", False):  # read from the persistent cache, not compiled
            return
        _COMPILES["count"] += 1
        _COMPILES["seconds"] += duration
        if duration >= _SIMULATOR_MIN_S:
            _COMPILES["simulator"] += 1
            _COMPILES["simulator_seconds"] += duration
            if os.environ.get("SERVETUNE_COMPILE_LOG"):  # which test compiled what, and how long
                test = os.environ.get("PYTEST_CURRENT_TEST", "?").rsplit(" ", 1)[0]
                with open(os.environ["SERVETUNE_COMPILE_LOG"], "a") as log:
                    log.write(f"{duration:.2f}\t{fun_name}\t{test}\n")


def pytest_configure(config):
    import jax.monitoring

    jax.monitoring.register_event_duration_secs_listener(_on_compile)
    jax.monitoring.register_event_listener(_on_event)
    config._compiles_total = dict.fromkeys(_COMPILES, 0)  # (before any "reading" flag)


def pytest_sessionfinish(session):
    if hasattr(session.config, "workeroutput"):  # an xdist worker: hand the counts over
        session.config.workeroutput["compiles"] = {
            k: v for k, v in _COMPILES.items() if k in session.config._compiles_total
        }


def pytest_testnodedown(node, error):
    totals = node.config._compiles_total
    for key, value in getattr(node, "workeroutput", {}).get("compiles", {}).items():
        totals[key] = totals.get(key, 0) + value


def pytest_terminal_summary(terminalreporter, config):
    totals = config._compiles_total
    if not any(totals.values()):  # not distributed: this process's own counts
        totals = {k: v for k, v in _COMPILES.items() if k in totals}
    terminalreporter.write_line(
        f"XLA compilations: {totals['count']} ({totals['seconds']:.0f} s), of which "
        f"{totals['simulator']} simulator-sized (>= {_SIMULATOR_MIN_S:.0f} s each, "
        f"{totals['simulator_seconds']:.0f} s); {totals['cache_hits']} programs read from the "
        f"persistent cache ({totals['saved_seconds']:.0f} s of compilation saved)"
    )
