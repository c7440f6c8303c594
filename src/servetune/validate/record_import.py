"""A production deployment's own record of its requests, imported into a trace and a
per-request table (`servetune observe --import-bench` / `--import-otel`): the readers are
validate/bench_import.py and validate/otel_import.py, the writer is here."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from servetune.core.errors import OutputError
from servetune.core.files import ensure_dir, write_json, write_whole
from servetune.run import run_folder
from servetune.validate.bench_import import load_bench_result
from servetune.validate.otel_import import load_otel_spans

FORMATS = {  # --import-... format -> (reader, what the file is, the summary file written)
    "bench": (
        load_bench_result,
        "vllm bench serve --save-result --save-detailed (vLLM 0.32)",
        "bench.json",
    ),
    "otel": (
        load_otel_spans,
        "OTLP JSON of vLLM's llm_request spans (--otlp-traces-endpoint)",
        "otel.json",
    ),
}


def write_import(path: str | Path, out: Path, fmt: str = "bench") -> str:
    """Import `path` (read by FORMATS[fmt]'s reader) into folder `out`: requests.parquet,
    trace.csv (a plain servetune trace: `servetune simulate workload.path=OUT/trace.csv`
    replays it) and a summary JSON (what the file records, the counts and whether its records
    are listed in arrival order), each written whole; nothing when the reader refuses the file
    (TraceError, raised before anything is written). Returns a one-line summary."""
    read, described, summary = FORMATS[fmt]
    result = read(path)
    requests, trace = pd.DataFrame(result["requests"]), pd.DataFrame(result["trace"])
    ensure_dir(out)
    n_failed = int((requests["end_state"] == "failed").sum())
    meta = {
        "source": str(Path(path).expanduser()),
        "format": described,
        "requests": len(requests),
        "failed": n_failed,
        "in_trace": len(trace),
        "order": result["order"],
        "about": result["about"],
    }
    for other in {s for _, _, s in FORMATS.values()} - {summary}:
        if (out / other).exists():  # an earlier import of the other format: not this one's
            raise OutputError(
                f"{out}: holds {other}, an earlier import of another format; "
                f"expected an empty folder or one of an earlier --import-{fmt} "
                f"(import into another --out)"
            )
    # the three files appear together, replacing an earlier import's whole
    with run_folder.claimed_set(out, f"servetune observe --import-{fmt}") as stage:
        write_whole(stage / "requests.parquet", lambda p: requests.to_parquet(p, index=False))
        write_whole(stage / "trace.csv", lambda p: trace.to_csv(p, index=False))
        write_json(stage / summary, meta)
    done = requests["end_state"] == "completed"
    listed = "" if result["order"] == "arrival" else "; listed out of arrival order (sorted)"
    return (
        f"{out}: {len(requests)} requests ({n_failed} failed), {len(trace)} in trace.csv "
        f"over {trace['arrival_s'].max() if len(trace) else 0:.4g} s; mean TTFT "
        f"{requests.loc[done, 'ttft_s'].mean():.4g} s, mean E2E "
        f"{requests.loc[done, 'e2e_s'].mean():.4g} s{listed}"
    )
