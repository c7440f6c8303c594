import os
import sys

# Keep CPU tests single-device and quiet; set before JAX initializes.
os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, os.path.dirname(__file__))

# Hypothesis profiles for tests/test_properties.py: "ci" (the default) is fast and derandomized
# (the same examples every run); "slow" explores >= 500 new examples and more engine configs:
#   HYPOTHESIS_PROFILE=slow python -m pytest -q tests/test_properties.py
from hypothesis import HealthCheck, settings

settings.register_profile("ci", max_examples=25, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow], print_blob=True)
settings.register_profile("slow", max_examples=500, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow], print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


import pytest


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
