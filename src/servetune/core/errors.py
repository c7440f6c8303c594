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


class SimulationError(ServetuneError):
    """The simulator broke one of its own invariants (INVARIANTS): a bug to report, not a user
    error; the message names the scenario and the invariant."""


# The invariants the engine checks as it runs, by the Stats flag that records a breach
# (core/types.py: kv_overflow [I], clock_regress [I], stalled []), with what a breach means.
INVARIANTS: dict[str, str] = {
    "kv_overflow": "KV blocks in use exceeded capacity",
    "clock_regress": "an instance clock went back",
    "stalled": "an idle engine could not admit waiting requests",
}
