"""Damaged golden fixtures are GoldenErrors naming the file and the section, and a fixture
whose engine settings servetune refuses ends `servetune golden --check` with exit 2 and the
message, never a KeyError or a traceback."""

import gzip
import json
import subprocess
import sys

import pytest

from servetune.validate import golden

SOURCE = golden.fixture_paths()[0]


def _fixture(tmp_path, change):
    doc = json.loads(gzip.decompress(SOURCE.read_bytes()))
    change(doc)
    path = tmp_path / SOURCE.name
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return path


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda d: d.pop("steps"), r"no 'steps' section; a fixture holds case, engine, cost"),
        (lambda d: d["engine"].pop("block_size"), r"section 'engine' lacks block_size"),
        (lambda d: d.update(requests=[1, 2]), r"section 'requests' is a list; expected a dict"),
        (lambda d: d["results"].pop("finish"), r"section 'results' lacks finish"),
    ],
)
def test_a_fixture_missing_a_section_is_named(tmp_path, change, message):
    path = _fixture(tmp_path, change)
    with pytest.raises(golden.GoldenError, match=rf"{path.name}: {message}"):
        golden.load_fixture(path)


@pytest.mark.parametrize(
    "change, message",
    [
        # (issue 64) these replayed as "identical", or failed with a KeyError or ValueError
        (lambda d: d.pop("vllm_version"), r"no 'vllm_version' section"),
        (lambda d: d.update(vllm_version=32), r"section 'vllm_version' is a int"),
        (lambda d: d.update(case="tight_kv"), r"holds case 'tight_kv'; expected case '"),
        (
            lambda d: d["engine"].update(max_num_seqs=d["engine"]["max_num_seqs"] + 1),
            r"section 'engine' is not case '.*'s \(max_num_seqs differ",
        ),
        (lambda d: d["trace"].update(start_s=1.0), r"section 'trace' is not case"),
        (lambda d: d["steps"][2].pop("dur"), r"steps\[2\] = .*; expected a record of t, dur"),
        (lambda d: d["steps"].__setitem__(0, [1, 2]), r"steps\[0\] = \[1, 2\]; expected"),
        (
            lambda d: d["results"]["finish"].pop(),
            r"results\.finish holds \d+ entries; expected one",
        ),
        (lambda d: d["requests"].update(output=5), r"requests\.output holds int entries"),
        (lambda d: d["requests"].update(arrival=5), r"requests\.arrival is a int; expected"),
        (lambda d: d["engine"].update(extra=None), r"section 'engine' is not case .*\(extra"),
    ],
)
def test_a_fixture_that_is_not_its_case_or_lacks_rows_is_named(tmp_path, change, message):
    path = _fixture(tmp_path, change)
    with pytest.raises(golden.GoldenError, match=rf"{path.name}: {message}"):
        golden.load_fixture(path)


@pytest.mark.parametrize("cut", [1, 3, 40])
def test_a_fixture_with_steps_cut_is_a_difference_not_a_traceback(tmp_path, cut):
    """(issue 64) compare's strict zip raised ValueError on a shorter run."""
    fixture = golden.load_fixture(SOURCE)
    short = dict(fixture, steps=fixture["steps"][:-cut])
    replayed = {"steps": fixture["steps"], "requests": fixture["results"]}
    n = len(fixture["steps"])
    assert golden.compare(short, replayed) == [f"iterations: vLLM ran {n - cut}, servetune {n}"]


def test_a_fixtures_refused_settings_end_golden_check_with_exit_2(tmp_path):
    path = _fixture(tmp_path, lambda d: d["engine"].update(max_num_seqs=-5))
    case = SOURCE.name.removesuffix(".json.gz")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "servetune.cli.main",
            "golden",
            "--check",
            "--out",
            str(tmp_path),
            "--cases",
            case,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert path.exists() and proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.startswith("error: ") and "Traceback" not in proc.stderr
    assert "max_num_seqs" in proc.stderr
