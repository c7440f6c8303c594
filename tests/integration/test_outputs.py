"""Every output file is written whole or not at all (servetune/core/files.py), and a place that
cannot take it is a clear error naming the file."""

import ast
import errno
import json
import math
from pathlib import Path

import numpy as np
import pytest

import servetune
from servetune.cli.report import main as report_main
from servetune.core import files
from servetune.core.errors import OutputError

SRC = Path(servetune.__file__).parent
WRITERS = {
    "write_text",
    "write_bytes",
    "to_csv",
    "to_parquet",
    "savefig",
    "to_json",
    "write_html",
    "write_image",
    "dump",
}
# files servetune writes for another program's use, not as a result: the random-weight
# model's config.json that vLLM reads (validate/oracle.py), created in a fresh folder
SCRATCH = {"validate/oracle.py"}


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "metrics.csv"
    path.write_text("old, whole\n")

    def half_then_fail(tmp):
        tmp.write_text("new, hal")
        raise RuntimeError("killed mid-write")

    with pytest.raises(RuntimeError, match="killed mid-write"):
        files.write_whole(path, half_then_fail)
    assert path.read_text() == "old, whole\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.csv"]


def test_a_full_disk_is_an_output_error_naming_the_file(tmp_path, monkeypatch):
    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(files.os, "fsync", full)
    with pytest.raises(OutputError, match=r"metrics\.json: could not write it \(No space left"):
        files.write_json(tmp_path / "metrics.json", {"a": 1})
    assert list(tmp_path.iterdir()) == []


def test_a_read_only_place_is_an_output_error(tmp_path, monkeypatch):
    def refuse(src, dst):
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(files.os, "replace", refuse)
    with pytest.raises(OutputError, match=r"report\.html: could not write it \(Permission"):
        files.write_text(tmp_path / "report.html", "<html></html>")
    assert list(tmp_path.iterdir()) == []


def test_a_folder_where_the_file_should_be_is_an_output_error(tmp_path):
    (tmp_path / "requests.parquet").mkdir()
    with pytest.raises(OutputError, match=r"requests\.parquet: could not write it"):
        files.write_text(tmp_path / "requests.parquet", "x")
    assert [p.name for p in tmp_path.iterdir()] == ["requests.parquet"]


def test_an_output_folder_under_a_file_is_an_output_error(tmp_path):
    (tmp_path / "out").write_text("a file")
    with pytest.raises(OutputError, match=r"out: cannot be an output folder"):
        files.write_text(tmp_path / "out" / "metrics.json", "{}")
    assert (tmp_path / "out").read_text() == "a file"


def test_json_outputs_are_strict(tmp_path):
    doc = {
        "nan": float("nan"),
        "inf": math.inf,
        "ninf": np.float64(-np.inf),
        "arr": np.arange(3),
        "scalar": np.int64(7),
        "nested": [np.float32(0.5)],
    }
    path = files.write_json(tmp_path / "m.json", doc)

    def bare(name):
        raise AssertionError(f"bare {name} in strict JSON")

    back = json.loads(path.read_text(), parse_constant=bare)
    assert back == {
        "nan": None,
        "inf": "inf",
        "ninf": "-inf",
        "arr": [0, 1, 2],
        "scalar": 7,
        "nested": [0.5],
    }


def test_report_out_on_a_file_is_a_clear_error(tmp_path, capsys):
    (tmp_path / "taken").write_text("not a folder")
    assert report_main([str(tmp_path), "--out", str(tmp_path / "taken")]) == 2
    err = capsys.readouterr().err
    assert "taken: is a file; expected a folder" in " ".join(err.split())
    assert (tmp_path / "taken").read_text() == "not a folder"


def _unguarded_writes(tree: ast.AST) -> list[int]:
    """Lines of file-writing calls not inside a lambda (write_whole's writer) or files.py."""
    inside = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Lambda):
            inside.update(id(n) for n in ast.walk(node))
    bad = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or id(node) in inside:
            continue
        f = node.func
        name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
        mode = next((a.value for a in node.args[1:2] if isinstance(a, ast.Constant)), "r")
        to_string = (
            name in ("to_csv", "to_json")
            and not node.args
            and not any(k.arg == "path_or_buf" for k in node.keywords)
        )  # returns the text, writes nothing
        if (
            isinstance(f, ast.Attribute)
            and name in WRITERS
            and not to_string
            and not (name == "dump" and getattr(f.value, "id", "") != "json")
        ) or (name == "open" and any(c in str(mode) for c in "wax")):
            bad.append(node.lineno)
    return bad


def test_every_output_goes_through_write_whole():
    found = {}
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel == "files.py" or rel in SCRATCH:
            continue
        lines = _unguarded_writes(ast.parse(path.read_text(), filename=str(path)))
        if lines:
            found[rel] = lines
    assert found == {}, f"writes that bypass servetune.core.files.write_whole: {found}"


def test_the_write_check_catches_a_plain_write():
    tree = ast.parse(
        "df.to_csv(out / 'x.csv')\nwrite_whole(p, lambda t: df.to_csv(t))\n"
        "open(p, 'w')\nopen(p)\njson.dump(d, f)\ntext = df.to_json()\n"
    )
    assert _unguarded_writes(tree) == [1, 3, 5]
