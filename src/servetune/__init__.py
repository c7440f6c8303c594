"""servetune: a jit-compiled, vectorized token-step simulator of LLM serving engines.

Clocks are float64 seconds: an hour-long trace stepped in ~10 ms iterations loses
milliseconds in float32, so servetune turns on JAX's 64-bit mode when imported.
Every other array carries an explicit dtype.
"""

import jax

jax.config.update("jax_enable_x64", True)

from servetune.api import simulate, simulate_batch

__all__ = ["simulate", "simulate_batch"]
__version__ = "0.1.0"
