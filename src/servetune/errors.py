"""Errors raised at servetune's boundary, each naming what was wrong and where."""


class ServetuneError(Exception):
    """Base class of servetune's user-facing errors."""


class ConfigError(ServetuneError, ValueError):
    """A config key holds a bad value; the message names the key and what was expected."""


class TraceError(ServetuneError, ValueError):
    """A trace file is malformed; the message names the file, the line and what was expected."""
