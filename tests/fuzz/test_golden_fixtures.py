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
