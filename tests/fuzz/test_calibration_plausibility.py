"""Calibration input plausibility ("silent acceptance": coefficients of 1e+-300
written): a measured iteration outside [1 us, 1 h] is in another unit or corrupt, and is refused
by file, line and column, for the CSV reader and a DataFrame given to the Python API alike;
the command then writes nothing."""

import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from servetune.core.errors import CalibrationError, TraceError
from servetune.validate import calibrate as cal

HEAD = "prefill_tokens,decode_seqs,ctx_tokens,seconds\n"
ROWS = "".join(f"{64 * k},{k},{900 * k},{0.004 + 0.0001 * k}\n" for k in range(1, 9))


@pytest.mark.parametrize(
    "bad, line, shown",
    [
        ("512,8,4000,1e-300", 10, "'1e-300'"),  # a fit would write base_s 1e-300
        ("512,8,4000,1e300", 10, "'1e300'"),  # ... or 1e+300
        ("512,8,4000,12500000", 10, "'12500000'"),  # nanoseconds (12.5 ms)
        ("512,8,4000,1733500000.25", 10, "'1733500000.25'"),  # an epoch timestamp, not a duration
    ],
)
def test_an_implausible_iteration_time_is_refused_by_line(tmp_path, bad, line, shown):
    path = tmp_path / "steps.csv"
    path.write_text(HEAD + ROWS + bad + "\n")
    with pytest.raises(TraceError) as info:
        cal.load_measurements(path)
    assert str(info.value) == (
        f"{path}:{line}: column 'seconds' = {shown}; expected seconds within [1e-06, 3600] "
        f"(one engine iteration; a value outside is in another unit or corrupt)"
    )


def test_a_token_count_past_int32_is_refused(tmp_path):
    path = tmp_path / "steps.csv"
    path.write_text(HEAD + ROWS + "1e12,8,4000,0.01\n")
    with pytest.raises(
        TraceError,
        match=r"steps\.csv:10: column 'prefill_tokens' = '1e12'; "
        r"expected a number within \[0, 2\.147e\+09\] \(tokens\)",
    ):
        cal.load_measurements(path)


def test_a_dataframe_gets_the_same_check():
    table = pd.DataFrame(
        {
            "prefill_tokens": [512.0] * 6,
            "decode_seqs": [8.0] * 6,
            "ctx_tokens": [4000.0] * 6,
            "seconds": [0.01, 0.01, 1e-300, 0.01, 0.01, 0.01],
        }
    )
    with pytest.raises(
        TraceError,
        match=r"^table: row 2: column 'seconds' = 1e-300; expected "
        r"seconds within \[1e-06, 3600\]",
    ):
        cal.fit_cost_model(table, "linear")


def test_the_command_writes_nothing_for_an_implausible_log(tmp_path):
    path = tmp_path / "steps.csv"
    path.write_text(HEAD + "".join(f"{64 * k},{k},{900 * k},{1e-300 * k}\n" for k in range(1, 9)))
    out = tmp_path / "run"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "servetune.cli.main",
            "calibrate",
            f"path={path}",
            "form=linear",
            f"hydra.run.dir={out}",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr
    assert f"error: {path}:2: column 'seconds' = '1e-300'" in proc.stderr
    assert not (out / "calibrated.yaml").exists() and not (out / "calibration.json").exists()


@pytest.mark.parametrize(
    "header, match",
    [
        (HEAD.strip() + ",seconds", r":1: column 'seconds' appears 2 times in the header"),
        ("prefill_tokens,prefill_tokens,decode_seqs,ctx_tokens,seconds", r"'prefill_tokens' ap"),
        ("prefill_tokens,decode_seqs,ctx_tokens,seconds,attn_work,attn_work", r"'attn_work' ap"),
    ],
)
def test_a_column_named_twice_is_refused(tmp_path, header, match):
    """(issue 64) a duplicated seconds column was read, and fitted to infinite errors."""
    width = len(header.split(","))
    path = tmp_path / "steps.csv"
    path.write_text(
        header + "\n" + "".join(f"{64 * k},{k}" + ",9" * (width - 2) + "\n" for k in (1, 2))
    )
    with pytest.raises(TraceError, match=match):
        cal.load_measurements(path)


@pytest.mark.parametrize(
    "rows",
    [
        [(512, 8, 4000, 0.01)] * 10,  # one batch, measured ten times
        [(512, 8, 4000, 0.01 + 1e-4 * k) for k in range(10)],  # the same, with noise
        [(0, 4, 400, 0.004)] * 6,
    ],
)
def test_one_batch_composition_fixes_no_coefficient_and_is_refused(rows):
    """(issue 64) constant rows wrote a calibration with infinite standard errors."""
    table = pd.DataFrame(rows, columns=["prefill_tokens", "decode_seqs", "ctx_tokens", "seconds"])
    with pytest.raises(CalibrationError, match=r"every one of the \d+ rows is the batch"):
        cal.fit_cost_model(table, "linear", steps=10)


def test_an_undetermined_coefficient_is_null_and_named_not_infinite():
    """(issue 64) decode-only rows leave coefficients undetermined: the summary says so
    instead of writing an infinite standard error."""
    table = pd.DataFrame(
        {
            "prefill_tokens": 0.0,
            "decode_seqs": [float(k) for k in range(1, 9)],
            "ctx_tokens": [900.0 * k * (1 + k % 3) for k in range(1, 9)],
            "seconds": [0.004 + 1e-4 * k for k in range(1, 9)],
        }
    )
    res = cal.fit_cost_model(table, "linear", steps=50)
    doc = res.metrics()
    assert doc["undetermined"] == res.undetermined != [] and doc["determined"] is False
    assert all(doc["std_errors"][k] is None for k in doc["undetermined"])
    assert all(v is None or np.isfinite(v) for v in doc["std_errors"].values())
