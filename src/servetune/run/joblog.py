"""What a Hydra command prints, kept in its run folder's log (`<run dir>/<job name>.log`, the
file Hydra's job logging writes): servetune prints its summaries and errors with rich, not the
logging module, so without this the log file stayed empty.

While a command runs, sys.stdout and sys.stderr also write into the log, without terminal
colours (ANSI sequences) and without the redraws of a live progress bar (writes that move the
cursor or return the carriage), so the log reads as the output a pipe would get."""

from __future__ import annotations

import io
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from hydra.core.hydra_config import HydraConfig

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_REDRAW = re.compile(r"\x1b\[[0-9]*[ABK]|\x1b\[\?25[lh]|\r(?!\n)")  # cursor moves, erases


class _Tee(io.TextIOBase):
    """A text stream writing to `stream` and, in plain text, to `log`."""

    def __init__(self, stream, log):
        super().__init__()
        self._stream, self._log = stream, log

    def write(self, text: str) -> int:
        """Write `text` to the stream, and to the log unless it redraws a live display."""
        self._stream.write(text)
        if not _REDRAW.search(text):
            self._log.write(_ANSI.sub("", text))
        return len(text)

    def flush(self) -> None:
        """Flush both."""
        self._stream.flush()
        self._log.flush()

    def isatty(self) -> bool:
        """Whether the stream is a terminal (rich decides colours and live bars by it)."""
        return self._stream.isatty()

    def fileno(self) -> int:
        """The stream's file descriptor."""
        return self._stream.fileno()

    @property
    def encoding(self) -> str:
        """The stream's encoding."""
        return getattr(self._stream, "encoding", "utf-8")


def log_path() -> Path | None:
    """The Hydra job's log file (`<output dir>/<job name>.log`), or None outside a Hydra job."""
    if not HydraConfig.initialized():
        return None
    hc = HydraConfig.get()
    return Path(hc.runtime.output_dir) / f"{hc.job.name}.log"


@contextmanager
def kept_in_log() -> Iterator[None]:
    """Within the block, what is printed to stdout and stderr is also appended to the Hydra
    job's log file (nothing outside a Hydra job, or when the log cannot be opened)."""
    path = log_path()
    try:
        log = None if path is None else path.open("a", encoding="utf-8")
    except OSError:
        log = None
    if log is None:
        yield
        return
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _Tee(out, log), _Tee(err, log)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = out, err
        log.close()
