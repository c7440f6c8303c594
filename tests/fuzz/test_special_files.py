"""Special files and paths: a FIFO (opening one blocks: a hang), a device, a
directory where a file is expected, `~nosuchuser/...`, an output folder under a file. Each is
an error naming the file or key; none is opened, so none can hang. (Config keys holding such
paths: tests/fuzz/manifest.yaml, "special paths".)"""

import os

import pytest

from servetune.cli.main import output_dir_problem
from servetune.config import neural_weights
from servetune.core import inputs
from servetune.core.errors import CheckpointError, ConfigError, TraceError
from servetune.reporting import report
from servetune.tuning import checkpoint
from servetune.validate.bench_import import load_bench_result
from servetune.validate.calibrate import load_measurements
from servetune.validate.otel_import import load_otel_spans
from servetune.workload.traces import load_trace


@pytest.fixture()
def fifo(tmp_path):
    def make(name):
        path = tmp_path / name
        os.mkfifo(path)
        return path

    return make


@pytest.mark.parametrize("name", ["trace.csv", "trace.jsonl"])
def test_a_fifo_trace_is_refused_without_opening_it(fifo, name):
    path = fifo(name)
    with pytest.raises(TraceError, match=rf"^{path}: is a FIFO \(named pipe\); expected a trace"):
        load_trace(path)


def test_a_device_or_a_folder_named_like_a_trace_is_refused(tmp_path):
    device = tmp_path / "zero.csv"
    device.symlink_to("/dev/zero")  # would read forever
    with pytest.raises(TraceError, match=r"zero\.csv: is a character device; expected a trace"):
        load_trace(device)
    folder = tmp_path / "folder.jsonl"
    folder.mkdir()
    with pytest.raises(TraceError, match=r"folder\.jsonl: is a directory; expected a trace"):
        load_trace(folder)


def test_every_reader_refuses_a_fifo(fifo, tmp_path):
    with pytest.raises(TraceError, match="is a FIFO"):
        load_measurements(fifo("steps.csv"))
    with pytest.raises(TraceError, match="is a FIFO"):
        load_bench_result(fifo("bench.json"))
    with pytest.raises(TraceError, match="is a FIFO"):
        load_otel_spans(fifo("spans.json"))
    with pytest.raises(ConfigError, match=r"^policy\.score_net: .*is a FIFO"):
        neural_weights.load(str(fifo("score_net.json")))
    os.mkfifo(tmp_path / checkpoint.NAME)
    with pytest.raises(CheckpointError, match="is not a regular file"):
        checkpoint.read(tmp_path)


def test_a_score_net_file_holding_a_list_is_a_config_error(tmp_path):
    path = tmp_path / "score_net.json"
    path.write_text("[1, 2, 3]")
    with pytest.raises(ConfigError, match=r"^policy\.score_net: .* holds a JSON list"):
        neural_weights.load(str(path))


def test_a_report_leaves_out_a_fifo_named_metrics_csv(tmp_path):
    good = tmp_path / "good"
    good.mkdir()
    (good / "metrics.csv").write_text("seed,goodput_rps,slo_attainment\n0,1.0,0.5\n")
    (tmp_path / "bad").mkdir()
    os.mkfifo(tmp_path / "bad" / "metrics.csv")
    rep = report(tmp_path, tmp_path / "out", n_boot=0, figures=False, html=False)
    assert list(rep.runs["run"]) == ["good"]
    expected = (
        f"{tmp_path / 'bad' / 'metrics.csv'}: is a FIFO (named pipe); expected a "
        f"metrics.csv (a regular file)"
    )
    assert rep.skipped == [expected]


def test_an_output_folder_under_a_file_is_named_before_hydra_runs(tmp_path):
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    assert output_dir_problem([f"hydra.run.dir={a_file}/run"]) == (
        f"hydra.run.dir: got '{a_file}/run'; {a_file} is a file, expected a folder to write in"
    )
    assert "hydra.sweep.dir: got" in output_dir_problem([f"hydra.sweep.dir='{a_file}/x/y'"])
    assert "no such user" in output_dir_problem(["hydra.run.dir=~nosuchuser_servetune/r"])
    assert output_dir_problem([f"hydra.run.dir={tmp_path}/new/run", "seed=1"]) is None
    assert output_dir_problem(["hydra.run.dir=outputs/${now:%H}"]) is None  # Hydra resolves it


def test_check_regular_returns_the_size_of_a_regular_file(tmp_path):
    path = tmp_path / "f.csv"
    path.write_bytes(b"12345")
    assert inputs.check_regular(path, "file") == 5
    with pytest.raises(TraceError, match=r"f2\.csv: file not found"):
        inputs.check_regular(tmp_path / "f2.csv", "file")
