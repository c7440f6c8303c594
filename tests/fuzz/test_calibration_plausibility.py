"""Calibration input plausibility ("silent acceptance": coefficients of 1e+-300
written): a measured iteration outside [1 us, 1 h] is in another unit or corrupt, and is refused
by file, line and column, for the CSV reader and a DataFrame given to the Python API alike;
the command then writes nothing."""

import subprocess
import sys

import pandas as pd
import pytest

from servetune.core.errors import TraceError
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
