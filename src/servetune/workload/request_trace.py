"""A workload's requests as host-side arrays: `RequestTrace` (one entry per request, sorted by
arrival) and `RaggedIds` (a list of prefix block ids per request, stored flat).

The limits below bound what a trace may hold: beyond them a value is a corrupt row, not a
request (readers and generators refuse it by file line or config key)."""

from __future__ import annotations

import dataclasses

import numpy as np

MAX_TOKENS = 10_000_000  # a per-request token count above this is a corrupt row, not a request
# Longest span of arrival times a trace may cover: about 31.7 years. Beyond it float64 seconds
# lose the sub-microsecond resolution the simulated clock relies on; such spans are corrupt rows
# (a millisecond column read as seconds, a stray 1e308) rather than workloads.
MAX_SPAN_S = 1e9
# Numeric arrivals read in the wrong unit are off by factors of 1000; what a right unit gives:
EPOCH_RANGE_S = (631152000.0, 4102444800.0)  # 1990-01-01 and 2100-01-01 UTC, s since 1970
MAX_MEAN_GAP_S = 86400.0  # relative times sparser than a request a day are a wrong unit ...
LARGE_SPAN_UNITS = 1e6  # ... when their numbers span at least this many units


def time_unit_problem(first_s: float, span_s: float, n: int, unit_s: float) -> str | None:
    """The plausibility rule broken by `n` numeric arrivals read in units of `unit_s` seconds,
    the first at `first_s` s (since 1970 or any origin), spanning `span_s` s; None if none is.

    "epoch": the first reads as a date after 2100 (a number past 1e9 s is an epoch time);
    "span": the arrivals span more than MAX_SPAN_S;
    "rate": times before 1990 (relative ones) whose numbers span >= LARGE_SPAN_UNITS units
    with fewer than one request a day (a mean gap over MAX_MEAN_GAP_S)."""
    if first_s > EPOCH_RANGE_S[1]:
        return "epoch"
    if span_s > MAX_SPAN_S:
        return "span"
    if (
        first_s < EPOCH_RANGE_S[0]
        and n >= 2
        and span_s > (n - 1) * MAX_MEAN_GAP_S
        and span_s / unit_s >= LARGE_SPAN_UNITS
    ):
        return "rate"
    return None


def duration_text(seconds: float) -> str:
    """`seconds` for a reader, in the largest unit of years, days, h, min, s that it reaches
    (3 significant digits): "40 s", "3.5 min", "2.5 h", "12 days"."""
    for size, word in ((365.25 * 86400, "years"), (86400, "days"), (3600, "h"), (60, "min")):
        if seconds >= size:
            return f"{seconds / size:.3g} {word}"
    return f"{seconds:.3g} s"


@dataclasses.dataclass(frozen=True)
class RaggedIds:
    """One list of int32 ids per request, stored flat: row r is ids[offsets[r]:offsets[r+1]].

    Indexing with an int gives that row (an array); with a bool mask or an index array, the
    RaggedIds of those rows in that order."""

    ids: np.ndarray  # [total] int32, every row's ids one after another
    offsets: np.ndarray  # [N + 1] int64, row r's start; offsets[N] = total

    @classmethod
    def from_rows(cls, rows) -> RaggedIds:
        """From N sequences of ids (None or empty: a row without ids)."""
        rows = [np.asarray(r if r is not None else (), np.int64) for r in rows]
        offsets = np.zeros(len(rows) + 1, np.int64)
        offsets[1:] = np.cumsum([len(r) for r in rows])
        ids = np.concatenate(rows) if rows else np.zeros(0, np.int32)
        return cls(ids.astype(np.int32), offsets)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __iter__(self):
        return (self.ids[a:b] for a, b in zip(self.offsets[:-1], self.offsets[1:], strict=True))

    def __getitem__(self, key):
        if isinstance(key, (int, np.integer)):
            return self.ids[self.offsets[key] : self.offsets[key + 1]]
        index = np.arange(len(self))[key]
        return RaggedIds.from_rows([self[int(r)] for r in index])

    def lengths(self) -> np.ndarray:
        """[N] int64 ids per row."""
        return np.diff(self.offsets)

    def dense(self, width: int) -> np.ndarray:
        """[N, width] int32: each row's first `width` ids, -1 after them."""
        out = np.full((len(self), width), -1, np.int32)
        lengths = np.minimum(self.lengths(), width)
        rows = np.repeat(np.arange(len(self)), lengths)
        cols = np.arange(len(rows)) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        out[rows, cols] = self.ids[np.repeat(self.offsets[:-1], lengths) + cols]
        return out


@dataclasses.dataclass
class RequestTrace:
    """Requests of one workload, sorted by arrival (host-side numpy arrays).

    arrival: [N] float64 seconds from the trace start; prompt, output: [N] int32 tokens;
    klass: [N] int32 class id (names in `class_names`);
    cancel_after: [N] float64 seconds after arrival at which the client cancels the request
      (gives up waiting, or aborts mid-stream) if it has not completed; inf = never;
    deadline: [N] float64 seconds after arrival by which the request must complete, or the
      server drops it (expired); inf = none;
    difficulty: [N] float64 in [0, 1] from the trace's optional `difficulty` column, or None;
    quality_u: [N] float64 uniform draw of each request's quality check (servetune.config.quality;
      set per seed by scenario.build), or None;
    priority: [N] int32 from the trace's optional `priority` column (vLLM's per-request
      priority, lower first; policy.order=priority), or None;
    hash_ids: RaggedIds, N rows of int32 ids of the prompt's prefix blocks (Mooncake
      `hash_ids`: one per 512-token block, equal ids = equal prefixes), stored flat so that
      one long row does not widen every other; None when the trace has none;
    compress_u: [N] float64 uniform draw of each request's KV-compression quality check (set
      per seed by scenario.build with engine.kv_pressure=compress), or None;
    cascade_pred: [N] float64 the cascade router's predicted difficulty in (0, 1), and
    cascade_fail: [N] bool whether the small model's answer fails its check
      (servetune.config.cascade; set per seed by scenario.build with a model cascade), or None.
    """

    name: str
    arrival: np.ndarray
    prompt: np.ndarray
    output: np.ndarray
    klass: np.ndarray = None
    class_names: tuple = ("all",)
    cancel_after: np.ndarray = None
    deadline: np.ndarray = None
    difficulty: np.ndarray | None = None
    quality_u: np.ndarray | None = None
    priority: np.ndarray | None = None
    hash_ids: RaggedIds | None = None
    compress_u: np.ndarray | None = None
    cascade_pred: np.ndarray | None = None
    cascade_fail: np.ndarray | None = None

    def __post_init__(self):
        n = len(self.arrival)
        if self.klass is None:
            self.klass = np.zeros(n, np.int32)
        if self.cancel_after is None:
            self.cancel_after = np.full(n, np.inf)
        if self.deadline is None:
            self.deadline = np.full(n, np.inf)
        self.arrival = flush_subnormal(self.arrival)
        if isinstance(self.hash_ids, np.ndarray):  # [N, H], -1 padded: each row up to its -1
            self.hash_ids = RaggedIds.from_rows(
                row[: np.argmax(np.append(row, -1) < 0)]
                for row in np.asarray(self.hash_ids, np.int64)
            )

    def __len__(self) -> int:
        return len(self.arrival)

    def subset(self, mask: np.ndarray) -> RequestTrace:
        """The requests where `mask` holds (a bool mask, or indices in the order wanted)."""
        return dataclasses.replace(
            self, **{name: getattr(self, name)[mask] for name in self.per_request_fields()}
        )

    def per_request_fields(self) -> list[str]:
        """Names of the fields holding one entry per request ([N] arrays, RaggedIds)."""
        n = len(self)
        return [
            f.name
            for f in dataclasses.fields(self)
            if isinstance(v := getattr(self, f.name), (np.ndarray, RaggedIds)) and len(v) == n
        ]

    @property
    def gives_up(self) -> bool:
        """Whether any request can end by cancellation or deadline (the engine then checks)."""
        return bool(np.any(np.isfinite(self.cancel_after)) or np.any(np.isfinite(self.deadline)))


def flush_subnormal(times):
    """Times below the smallest normal float64 (2.2e-308 s) as exactly 0.

    XLA on CPU flushes subnormal floats to zero, so the simulator already sees such an arrival
    at t = 0; the host-side metrics must agree (else a request seems rejected before it arrived
    and a 1e-313 s window makes every rate infinite)."""
    times = np.asarray(times)
    if times.dtype.kind != "f":
        return times
    tiny = np.abs(times) < np.finfo(times.dtype).tiny
    if np.any(tiny & (times != 0)):
        times = np.where(tiny, 0.0, times).astype(times.dtype)
    return times
