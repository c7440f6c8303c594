"""Errors raised at servetune's boundary, each naming what was wrong and where."""


class ServetuneError(Exception):
    """Base class of servetune's user-facing errors."""


class ConfigError(ServetuneError, ValueError):
    """A config key holds a bad value; the message names the key and what was expected."""


class OutputError(ServetuneError):
    """An output file could not be written; the message names the file and the reason."""


class CheckpointError(ServetuneError):
    """A tuning checkpoint cannot be resumed; the message names the file and why."""


class CalibrationError(ServetuneError):
    """A cost-model fit diverged or fits its measurements too poorly to use; the message says
    which and the setting that changes it."""


class TraceError(ServetuneError, ValueError):
    """A trace file is malformed; the message names the file, the line and what was expected."""


class ResourceLimitError(ServetuneError):
    """A run is estimated past the resource guard's limits (time or memory, `guard.*`:
    run/guard.py); the message states the estimate and the keys that would shorten it."""


class SimulationError(ServetuneError):
    """The simulator broke one of its own invariants (INVARIANTS, below): a bug to report, not
    a user error; the message names the scenario and the invariant."""


# The invariants the engine checks as it runs. A breach sets its bit in the scenario's error
# code (core/types.Stats.invariants, [] i32; engine/statistics.breach), the way jax-md's
# PartitionError carries its codes; the host turns a code into messages (`breaches`).
KV_OVERFLOW = 1
CLOCK_REGRESS = 2
STALLED = 4
INVARIANTS: dict[int, str] = {
    KV_OVERFLOW: "KV blocks in use exceeded capacity",
    CLOCK_REGRESS: "an instance clock went back",
    STALLED: "an idle engine could not admit waiting requests",
}


def breaches(code) -> list[str]:
    """What each invariant whose bit is set in the error code `code` (an int, or a 0-d array)
    means, in INVARIANTS order; [] when the run kept every invariant."""
    return [what for bit, what in INVARIANTS.items() if int(code) & bit]
