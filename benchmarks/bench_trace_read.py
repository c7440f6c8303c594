"""Reading a large trace file: time and peak memory of a short window against the whole file,
side by side with pandas.read_csv of the same file as the reference.

servetune reads a clean CSV trace vectorized (servetune/workload/trace_csv_fast.py: pyarrow's
streaming reader, 4 MiB blocks) and any other file line by line (servetune/workload/trace_file.py);
both check every line and keep only the requests of the window simulated, so what they hold is the
block in flight plus the window. The whole-file read is the upper bound (every request kept);
pandas.read_csv holds the whole table and checks nothing beyond its parser.

    python benchmarks/bench_trace_read.py                  # 2 million rows, a 60 s window
    python benchmarks/bench_trace_read.py --rows 10000000  # 10 M rows

Peak memory is Python's (tracemalloc: the reader's objects and numpy's arrays; pyarrow's own
pool, one block, is not in it), measured in one process one read after another; seconds are
wall time, the fastest of --repeats reads.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np


def write_trace(path: Path, rows: int, rate: float, seed: int = 0) -> None:
    """A plain CSV of `rows` Poisson arrivals at `rate` req/s with Azure-like lengths."""
    rng = np.random.default_rng(seed)
    last = 0.0
    with path.open("w") as f:
        f.write("arrival_s,prompt_tokens,output_tokens\n")
        for start in range(0, rows, 1_000_000):
            n = min(1_000_000, rows - start)
            times = last + np.cumsum(rng.exponential(1 / rate, n))
            last = float(times[-1])
            prompt = rng.integers(1, 8000, n)
            output = rng.integers(1, 1000, n)
            f.writelines(
                f"{t:.6f},{p},{o}\n" for t, p, o in zip(times, prompt, output, strict=True)
            )


def measure(read, repeats: int) -> tuple[float, float]:
    """(fastest seconds, peak MB of Python memory) of calling `read`."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        read()
        best = min(best, time.perf_counter() - start)
    tracemalloc.start()
    read()
    peak = tracemalloc.get_traced_memory()[1] / 1e6
    tracemalloc.stop()
    return best, peak


def main() -> None:
    """Print one table row per reader: seconds, us per row, peak MB, and the ratios."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--rate", type=float, default=100.0, help="requests per second")
    parser.add_argument("--window-s", type=float, default=60.0)
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()

    import pandas as pd

    from servetune.workload import trace_csv_fast
    from servetune.workload.trace_file import ReadOptions, read_trace

    vectorized = trace_csv_fast.read

    def lines_only(read):
        def run():
            trace_csv_fast.read = lambda *args: None
            try:
                return read()
            finally:
                trace_csv_fast.read = vectorized

        return run

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.csv"
        write_trace(path, args.rows, args.rate)
        size_mb = path.stat().st_size / 1e6
        window = lambda: read_trace(path, options=ReadOptions(window=(0.0, args.window_s)))
        readers = {
            f"servetune, {args.window_s:g} s window": window,
            "servetune, whole file": lambda: read_trace(path),
            f"line reader, {args.window_s:g} s window": lines_only(window),
            "pandas.read_csv (reference)": lambda: pd.read_csv(path),
        }
        results = {name: measure(read, args.repeats) for name, read in readers.items()}
    print(f"{args.rows:,} rows, {size_mb:.0f} MB CSV")
    print(f"{'reader':<34} {'seconds':>8} {'us/row':>7} {'peak MB':>8}")
    for name, (seconds, peak) in results.items():
        print(f"{name:<34} {seconds:8.2f} {seconds / args.rows * 1e6:7.2f} {peak:8.1f}")
    (window_s, window_mb), (_, whole_mb), (lines_s, _), (pandas_s, pandas_mb) = results.values()
    print(
        f"window / whole: {window_mb / whole_mb:.3f}x memory; window / pandas: "
        f"{window_mb / pandas_mb:.3f}x memory, {window_s / pandas_s:.1f}x time; vectorized / "
        f"line reader: {window_s / lines_s:.3f}x time"
    )


if __name__ == "__main__":
    main()
