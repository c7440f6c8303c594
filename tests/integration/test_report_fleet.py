"""The autoscaled fleet in `servetune report`: fig_fleet.png and the page's fig-fleet drawn from
one autoscaled simulate run's fleet.parquet and fleet_hourly.parquet (simulated once, over an
hour and a bit, so that there are two hours); nothing for a run without an autoscaler; a note
naming a damaged file, and the report still written.

The simulate run goes through a subprocess: Hydra's logging setup interferes with pytest's
capture (as in test_report.py).
"""

import json
import shutil
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from servetune.reporting import figures, html_figures, report
from servetune.reporting import fleet as fleets

AUTOSCALED = [
    "workload=poisson",
    "workload.rate=0.5",
    "workload.duration_s=3700",  # two hours of arrivals: a whole one and 100 s
    "workload.prompt.mean=300",
    "workload.output.mean=80",
    "engine.routing=jsq",
    "fleet.autoscale=true",
    "fleet.max_replicas=3",
    "fleet.metric=num_requests_running",
    "fleet.target=0.5",
    "fleet.cold_start_s=20",  # not a multiple of the 15 s evaluations
    "fleet.scale_down_window_s=60",
    "output.progress=false",
]
FLEET_FILES = (fleets.FILE, fleets.HOURLY_FILE)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """One autoscaled simulate run's folder (compiled and simulated once for the module)."""
    path = tmp_path_factory.mktemp("fleet") / "auto"
    cmd = [sys.executable, "-m", "servetune.cli.main", "simulate", *AUTOSCALED]
    proc = subprocess.run(
        [*cmd, f"hydra.run.dir={path}"], capture_output=True, text=True, timeout=600, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert all((path / name).exists() for name in FLEET_FILES)
    return path


@pytest.fixture(scope="module")
def made(run_dir, tmp_path_factory):
    """The report (figures and page) over the folder holding the autoscaled run."""
    out = tmp_path_factory.mktemp("fleet_report") / "out"
    return report(run_dir, out, n_boot=0)


def _copy(run_dir, tmp_path):
    """A copy of the autoscaled run to damage (the report of the original stays as it is)."""
    return shutil.copytree(run_dir, tmp_path / "run")


def _step_at(x, y, at):
    """The value of a step line (x, y; each y held until the next x) at times `at`."""
    return np.asarray(y, np.float64)[np.searchsorted(np.asarray(x, np.float64), at, "right") - 1]


def _traces(fig) -> dict:
    return {t.name: t for t in fig.data}


def test_an_autoscaled_run_gets_fig_fleet_png_and_fig_fleet_on_the_page(made):
    rep = made
    assert (rep.out_dir / "fig_fleet.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert rep.out_dir / "fig_fleet.png" in rep.files
    page = (rep.out_dir / "report.html").read_text()
    assert "class='servetune-figure' id='fig-fleet'" in page
    assert "servetune-fleet-note" not in page
    fl = rep.fleet
    assert fl is not None and fl.note == ""
    # the same run and scenario as the timeline (here the only one)
    assert (fl.run, fl.scenario, fl.why) == (
        rep.timeline.run,
        rep.timeline.scenario,
        rep.timeline.why,
    )


def test_the_fleet_drawn_is_the_files_and_its_totals_are_the_runs(made, run_dir):
    fl = made.fleet
    table = pd.read_parquet(run_dir / fleets.FILE)
    hourly = pd.read_parquet(run_dir / fleets.HOURLY_FILE)
    metrics = json.loads((run_dir / "metrics.json").read_text())
    # the run scales up and back down, with cold starts, over two hours
    assert table["provisioned"].max() > table["provisioned"].min() and table["cold"].max() > 0
    assert len(hourly) == 2
    assert fl.end_s == pytest.approx(metrics["sim_duration_s"]) and fl.end_s > table["t_s"].max()
    tot = fleets.totals(fl)
    # provisioned replica-hours and cost to the end of the run: the run's own metrics (no warmup)
    assert tot["replica_hours"] == pytest.approx(metrics["replica_hours"], rel=1e-9)
    assert tot["cost_usd"] == pytest.approx(metrics["cost_usd"], rel=1e-9)
    assert tot["cost_usd"] == pytest.approx(hourly["cost_usd"].sum(), rel=1e-9)
    # the log's cold time is the engine's (a row where each cold start ends)
    exact_h = metrics["cold_start_replica_s"] / 3600.0
    assert tot["cold_replica_hours"] == pytest.approx(exact_h, rel=1e-9)
    title = fleets.title(fl)
    for part in ("replica-hours", "USD", "cold-start replica-hours", f"scenario {fl.scenario}"):
        assert part in title

    fig = html_figures.fleet_figure(fl)
    tr = _traces(fig)
    t_h = table["t_s"].to_numpy() / 3600.0
    for col in ("provisioned", "desired"):  # the step lines, unchanged steps left out
        assert np.array_equal(_step_at(tr[col].x, tr[col].y, t_h), table[col].to_numpy())
        assert tr[col].x[-1] == pytest.approx(fl.end_s / 3600.0)
    stacked = sum(_step_at(tr[name].x, tr[name].y, t_h) for _, name, _ in figures.FLEET_STATES)
    assert np.array_equal(stacked, table["provisioned"].to_numpy())
    assert np.array_equal(
        _step_at(tr["cold-starting"].x, tr["cold-starting"].y, t_h), table["cold"].to_numpy()
    )
    # the cost line through its knots is the file's cumulative cost at every row
    cost = tr["cumulative cost"]
    assert np.allclose(np.interp(t_h, cost.x, cost.y), table["cost_usd"], rtol=1e-9, atol=1e-12)
    assert cost.y[-1] == pytest.approx(metrics["cost_usd"], rel=1e-9)
    att = tr["SLO attainment (per hour)"]
    assert np.allclose(att.y, hourly["slo_attainment"], equal_nan=True)
    assert np.allclose(att.x, [0.5, 1.0 + (fl.end_s - 3600.0) / 7200.0])  # mid of each span
    mean = tr["mean replicas (per hour)"]
    assert np.allclose(mean.y[:-1], hourly["mean_replicas"]) and mean.yaxis != att.yaxis


def test_the_png_draws_the_same_steps(made, run_dir):
    table = pd.read_parquet(run_dir / fleets.FILE)
    fig = figures.fleet_png(made.fleet)
    replicas, cost, hourly = fig.axes[:3]
    lines = {line.get_label(): line for line in replicas.get_lines()}
    x, y = lines["provisioned"].get_data()
    assert np.array_equal(y[:-1], table["provisioned"]) and x[-1] * 3600.0 == pytest.approx(
        made.fleet.end_s
    )
    assert cost.get_lines()[0].get_ydata()[-1] == pytest.approx(
        fleets.totals(made.fleet)["cost_usd"]
    )
    # 0 to 1.02, raised just enough that a dot at 1.0 is not cut by the frame
    bottom, top = hourly.get_ylim()
    assert bottom == 0.0 and 1.02 <= top < 1.05 and len(fig.axes) == 4  # the twin: replicas
    assert fig.get_suptitle() == fleets.title(made.fleet)


def test_a_run_without_an_autoscaler_gets_no_fleet_and_no_note(run_dir, tmp_path):
    run = _copy(run_dir, tmp_path)
    for name in FLEET_FILES:
        (run / name).unlink()
    rep = report(run, tmp_path / "out", n_boot=0)
    assert rep.fleet is None and not (rep.out_dir / "fig_fleet.png").exists()
    page = (rep.out_dir / "report.html").read_text()
    assert "fig-fleet" not in page and "servetune-fleet-note" not in page
    assert "<h3>Fleet</h3>" not in page


def _truncate(path):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _drop_cold(path):
    pd.read_parquet(path).drop(columns="cold").to_parquet(path, index=False)


def _drop_attainment(path):
    pd.read_parquet(path).drop(columns="slo_attainment").to_parquet(path, index=False)


@pytest.mark.parametrize(
    "name, damage, says, panels",
    [
        (fleets.FILE, _truncate, "cannot read (", ["hourly"]),
        (fleets.FILE, _drop_cold, "cannot read (no column cold;", ["hourly"]),
        (fleets.HOURLY_FILE, _drop_attainment, "no column slo_attainment", ["replicas", "cost"]),
    ],
)
def test_a_damaged_fleet_file_is_named_in_a_note_and_the_report_completes(
    run_dir, tmp_path, name, damage, says, panels
):
    run = _copy(run_dir, tmp_path)
    damage(run / name)
    rep = report(run, tmp_path / "out", n_boot=0)
    note = rep.fleet.note
    assert note.startswith(f"{run / name}: ") and says in note and "fleet.autoscale=true" in note
    assert "Traceback" not in note
    assert figures.fleet_panels(rep.fleet) == panels  # what could be read is still drawn
    assert (rep.out_dir / "fig_fleet.png").exists()
    page = (rep.out_dir / "report.html").read_text()
    assert "id='servetune-fleet-note'" in page and f"{run / name}: " in page
    assert "id='fig-fleet'" in page
