"""Text of trace and measurement files, read strictly: UTF-8 only (a UTF-8 byte-order mark is
dropped; UTF-16 and binary data are errors naming the line), and only \\r\\n, \\r and \\n end a
line (str.splitlines also splits on U+2028, form feeds and other characters that may sit inside
a field). `lines` reads a file in chunks, so memory is bounded by a chunk and the longest line
whatever the file's size; `read_text` reads a small file whole.

Numbers are read as a file writes them (`strict_float`), JSON objects with each key once
(`unique_keys`), CSV rows one per line (`csv_records`).
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

from servetune.core import inputs
from servetune.core.errors import TraceError

CHUNK_BYTES = 1 << 22  # read 4 MiB at a time
MAX_LINE_BYTES = 1 << 24  # a 16 MiB "line" is not one request: a file without line breaks
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_BYTE_BREAK = re.compile(rb"\r\n|\r|\n")
_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")
_UTF8_BOM = b"\xef\xbb\xbf"
NUMBER = re.compile(
    r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?|[+-]?(?:nan|inf|infinity)",
    re.IGNORECASE | re.ASCII,
)


def strict_float(raw) -> float:
    """float(raw) for a number as a trace writes one: ASCII digits, an optional sign, point and
    exponent. ValueError for what Python's float() also accepts but no trace means: digit
    groups with underscores (1_000), non-ASCII digits (e.g. Arabic-Indic or full-width);
    TypeError for a bool."""
    if isinstance(raw, bool):
        raise TypeError(raw)
    if isinstance(raw, (int, float)):
        return float(raw)
    text = str(raw).strip()
    if not NUMBER.fullmatch(text):
        raise ValueError(raw)
    return float(text)


def show_cell(raw, limit: int = 40) -> str:
    """repr of a cell for a message, shortened: a corrupt row can hold megabytes."""
    text = repr(raw)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _check_start(path: Path, data: bytes, what: str) -> int:
    """Bytes to skip at the start of a file (a UTF-8 byte-order mark); TraceError for UTF-16."""
    if data.startswith(_UTF16_BOMS):
        raise TraceError(
            f"{path}: UTF-16 text (byte-order mark); expected a UTF-8 {what} "
            f"(re-encode it, e.g. iconv -f UTF-16 -t UTF-8)"
        )
    return len(_UTF8_BOM) if data.startswith(_UTF8_BOM) else 0


def _decode(path: Path, data: bytes, offset: int, lines_before: int, what: str) -> str:
    """`data` (whole lines starting at byte `offset` of the file, after `lines_before` lines)
    as text; TraceError naming the line of a byte that is not UTF-8 or is NUL."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = lines_before + len(_BYTE_BREAK.findall(data, 0, err.start)) + 1
        raise TraceError(
            f"{path}:{line}: not UTF-8 text (byte {offset + err.start} = "
            f"0x{data[err.start]:02x}); expected a UTF-8 {what}"
        ) from None
    if "\x00" in text:
        at = text.index("\x00")
        line = lines_before + len(_LINE_BREAK.findall(text, 0, at)) + 1
        raise TraceError(
            f"{path}:{line}: NUL byte at offset {offset + len(text[:at].encode())} "
            f"(binary data); expected a UTF-8 {what}"
        )
    return text


def _complete(data: bytes, at_end: bool) -> int:
    """Length of the leading part of `data` made of whole lines (up to its last line break; a
    final \\r may be the first half of \\r\\n and waits for the next chunk unless `at_end`)."""
    last = max(data.rfind(b"\n"), data.rfind(b"\r"))
    if last == len(data) - 1 and data[last] == 0x0D and not at_end:
        last = max(data.rfind(b"\n", 0, last), data.rfind(b"\r", 0, last))
    return last + 1


def _read_chunks(path: Path, handle, what: str) -> Iterator[bytes]:
    while True:
        try:
            chunk = handle.read(CHUNK_BYTES)
        except OSError as err:
            raise TraceError(
                f"{path}: cannot be read ({err.strerror or err}); expected a readable {what}"
            ) from None
        yield chunk
        if not chunk:
            return


def lines(path: str | Path, what: str = "trace file") -> Iterator[str]:
    """Each line of the UTF-8 file `path`, without its line break, in order (line k of the
    file is the k-th item), read CHUNK_BYTES at a time. TraceError naming the file (and line)
    when it is missing, not a regular file, unreadable, UTF-16, not UTF-8, binary, or holds a
    line over MAX_LINE_BYTES. `what` names the expected file in messages."""
    path = Path(path)
    inputs.check_regular(path, what, TraceError)
    try:
        handle = open(path, "rb")  # noqa: SIM115 -- closed by the with block below
    except OSError as err:
        raise TraceError(
            f"{path}: cannot be read ({err.strerror or err}); expected a readable {what}"
        ) from None
    with handle:
        pending, offset, count, first = b"", 0, 0, True
        for chunk in _read_chunks(path, handle, what):
            if first:
                skip = _check_start(path, chunk, what)
                chunk, offset, first = chunk[skip:], skip, False
            data = pending + chunk
            cut = len(data) if not chunk else _complete(data, at_end=False)
            pending = data[cut:]
            if len(pending) > MAX_LINE_BYTES:
                raise TraceError(
                    f"{path}:{count + 1}: a line over {MAX_LINE_BYTES >> 20} MiB; "
                    f"expected one request per line"
                )
            if cut:
                parts = _LINE_BREAK.split(_decode(path, data[:cut], offset, count, what))
                if parts[-1] == "":  # the text ended with a line break
                    parts.pop()
                count += len(parts)
                offset += cut
                yield from parts


def read_text(path: Path, what: str = "trace file") -> str:
    """The UTF-8 text of the small file `path` (a BOM is dropped); TraceError naming the file
    (and line, for a bad byte) when it is missing, unreadable, not a regular file, UTF-16 or
    binary. `what` names the expected file."""
    data = inputs.read_bytes(path, what, TraceError)
    skip = _check_start(path, data, what)
    return _decode(path, data[skip:], skip, 0, what)


def csv_records(path: Path, source: str | Iterable[str]):
    """(line number, fields) of each CSV row of `source` (a file's text, or its lines as
    `lines` gives them); TraceError with the line where the CSV is unreadable or where a quoted
    cell runs over several lines (one request per line)."""
    if isinstance(source, str):
        source = _LINE_BREAK.split(source)
        if source and source[-1] == "":
            source.pop()
    reader = csv.reader(source)
    while True:
        start = reader.line_num + 1
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as err:
            raise TraceError(
                f"{path}:{reader.line_num}: unreadable CSV ({err}); expected comma-separated fields"
            ) from None
        if reader.line_num != start:
            raise TraceError(
                f"{path}:{start}: a quoted cell runs over lines {start}-"
                f"{reader.line_num}; expected one request per line (an unclosed "
                f"quote?)"
            )
        yield reader.line_num, row


class DuplicateKeyError(ValueError):
    """A JSON object names one key twice (json.loads keeps the last one silently)."""

    def __init__(self, key: str):
        super().__init__(key)
        self.key = key


def unique_keys(pairs: list[tuple[str, object]]) -> dict:
    """json.loads' object_pairs_hook that refuses a repeated key (DuplicateKeyError)."""
    out = {}
    for key, value in pairs:
        if key in out:
            raise DuplicateKeyError(key)
        out[key] = value
    return out
