"""The commands that run simulations (`servetune simulate`, `servetune tune`) as Hydra apps,
and what they print and write. servetune.cli.main imports this module only for those commands, so
`servetune --help` and the argparse commands' bad arguments answer without loading JAX."""

from __future__ import annotations

import logging
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf
from rich.console import Console
from rich.markup import escape

from servetune.core.errors import ConfigError, ServetuneError
from servetune.core.files import write_json, write_text, write_whole
from servetune.deploy.export import as_deployed, model_id
from servetune.reporting.numbers import fmt
from servetune.reporting.summary import grid_summary, summary
from servetune.reporting.tuning_page import OBJECTIVE_NOTE, comparison_rows, knob_rows
from servetune.run import bench_file, clock, estimate, run_folder
from servetune.run.api import planned, simulate_recorded
from servetune.run.progress import console as progress_console
from servetune.run.progress import simulation_progress
from servetune.tuning import tune
from servetune.tuning.evaluation import side_by_side
from servetune.tuning.sweeper import check_config, sweep_objective


def _quiet_library_logs() -> None:
    """Keep libraries' INFO lines out of a run's output (Hydra logs INFO to the console): JAX's
    backend search, and matplotlib's font cache, built on a fresh machine's first figure."""
    for name in ("jax", "jax._src.xla_bridge", "absl", "matplotlib"):
        logging.getLogger(name).setLevel(logging.WARNING)


def simulate_job(cfg: DictConfig):
    """Simulate the configured scenarios and write metrics.json, metrics.csv, objective.json,
    vllm_bench.json (vllm bench serve's keys), requests.parquet (and timeline.parquet with
    output.timeline) into the Hydra run directory. Returns (SimulationResult, objective), the
    objective being the float a sweeper maximizes (servetune/tuning/sweeper.py, `sweep.*` keys)."""

    _quiet_library_logs()
    console = progress_console(stderr=True)
    out = Path(HydraConfig.get().runtime.output_dir)
    check_config(cfg)
    save_detailed(cfg)  # refused before the simulation, not after it
    scenario, est = planned(cfg)  # the resource guard: refused here, before drawing or compiling
    n = len(scenario.seeds) * len(scenario.grid_points)
    first = scenario.traces[0]
    span = float(first.arrival.max()) if len(first) else 0.0
    console.print(estimate.plan_line(n, len(first), span, est) + " ...", highlight=False)
    watch = clock.Stopwatch()  # the config and the trace are read: the work begins
    with simulation_progress(bool(cfg.output.progress), console=console) as progress:
        result = simulate_recorded(scenario, est, progress)
    failure = None
    with run_folder.outputs_as_a_set(out, "servetune simulate") as stage:
        _write_outputs(stage, cfg, scenario, result)
        try:  # after the outputs: a bad sweep.objective loses none of them
            objective = sweep_objective(cfg, result.metrics)
        except ServetuneError as err:
            failure = err
        else:
            write_json(
                stage / "objective.json",
                {
                    "objective": objective,
                    "scenarios": n,
                    "sweep.objective": OmegaConf.select(cfg, "sweep.objective"),
                },
            )
    if failure is not None:
        raise failure
    con = progress_console()
    if n == 1:
        summary(result.metrics[0], scenario.labels, console=con)
    else:
        grid_summary(result.table, console=con)
    con.print(objective_line(cfg, objective), highlight=False, markup=False)
    con.print(
        f"wrote {out}/metrics.json, metrics.csv, objective.json, vllm_bench.json"
        + (", requests.parquet" if cfg.output.request_table else "")
        + (", timeline.parquet" if result.timelines else "")
        + (", fleet.parquet, fleet_hourly.parquet" if result.fleets else "")
        + f"  ({watch.wall().text()})"
    )
    return result, objective


def objective_line(cfg: DictConfig, objective: float) -> str:
    """The line that prints the number a sweeper maximizes (objective.json), with what it is
    (tuning/sweeper.py): the penalized objective, or the metric sweep.objective names."""
    name, penalty = check_config(cfg)
    if name == "penalized":
        target = OmegaConf.select(cfg, "tune.objective.slo_target", default=0.99)
        aggregate = OmegaConf.select(cfg, "tune.objective.aggregate", default="mean")
        what = (
            f"penalized: log(useful tokens / USD) - {penalty:g} x the SLO attainment's "
            f"shortfall below {target:g}, {aggregate} over the scenarios"
        )
    else:
        what = f"{name}, the mean over the scenarios"
    return f"objective ({what}; what a sweeper maximizes): {objective:.6g}"


def _write_outputs(stage: Path, cfg: DictConfig, scenario, result) -> None:
    """Write a simulate run's files into `stage`: config_resolved.yaml, metrics.json,
    vllm_bench.json, metrics.csv, requests.parquet (output.request_table), timeline.parquet
    (output.timeline), fleet.parquet and fleet_hourly.parquet (fleet.autoscale)."""
    import pandas as pd

    n = len(result.metrics)
    write_text(stage / "config_resolved.yaml", OmegaConf.to_yaml(cfg, resolve=True))
    doc = (
        result.metrics[0]
        if n == 1
        else {
            "scenarios": [
                {"seed": row["seed"], "grid": pt, "metrics": m}
                for row, pt, m in zip(
                    result.table.to_dict("records"),
                    scenario.grid_points * len(scenario.seeds),
                    result.metrics,
                    strict=True,
                )
            ]
        }
    )
    write_json(stage / "metrics.json", dict(doc, wall_s=result.wall_s))
    bench = bench_documents(cfg, result)  # vllm bench serve --save-result's file, to diff
    write_json(stage / "vllm_bench.json", bench[0] if n == 1 else bench)
    write_whole(stage / "metrics.csv", lambda tmp: result.table.to_csv(tmp, index=False))
    if cfg.output.request_table:
        requests = pd.concat(
            [table.assign(scenario=k) for k, table in enumerate(result.requests)], ignore_index=True
        )
        write_whole(stage / "requests.parquet", lambda tmp: requests.to_parquet(tmp, index=False))
    if result.timelines:  # output.timeline
        table = pd.concat(
            [t.assign(scenario=k) for k, t in enumerate(result.timelines)], ignore_index=True
        )
        write_whole(stage / "timeline.parquet", lambda tmp: table.to_parquet(tmp, index=False))
    if result.fleets:  # fleet.autoscale: the replicas over time and per hour
        for name, part in (("fleet.parquet", "replicas"), ("fleet_hourly.parquet", "hourly")):
            table = pd.concat(
                [f[part].assign(scenario=k) for k, f in enumerate(result.fleets)],
                ignore_index=True,
            )
            write_whole(stage / name, lambda tmp, table=table: table.to_parquet(tmp, index=False))


def save_detailed(cfg: DictConfig) -> bool | None:
    """output.save_detailed: None (by size), True or False; ConfigError naming it otherwise."""
    value = OmegaConf.select(cfg, "output.save_detailed")
    if value is not None and not isinstance(value, bool):
        raise ConfigError(
            f"output.save_detailed: got {value!r}; expected true, false or null "
            f"(null: the per-request arrays only while they are small)"
        )
    return value


def bench_documents(cfg: DictConfig, result) -> list[dict]:
    """One `vllm bench serve --save-result` document per scenario of `result` (bench_file.py),
    named after the configured model and, for workload.vllm_bench, sent at its rate."""
    model = model_id(cfg)
    vllm = OmegaConf.select(cfg, "workload.vllm_bench")
    vllm = OmegaConf.to_container(vllm, resolve=True) if vllm is not None else None
    detailed = save_detailed(cfg)
    docs = []
    for k, metrics in enumerate(result.metrics):
        cols = result.requests.columns(k)
        counted = cols["arrival_s"][cols["counted"].astype(bool)]
        meta = bench_file.about(model, counted, vllm)
        docs.append(bench_file.bench_result(cols, metrics["vllm_bench"], meta, detailed))
    return docs


def run_simulate(cfg: DictConfig) -> dict:
    """simulate_job; returns the first scenario's metrics."""
    return simulate_job(cfg)[0].metrics[0]


def run_tune(cfg: DictConfig):
    """Tune the policy (tune.* settings) and write history.csv, evaluation.csv, convergence.png,
    checkpoint.json and export/ into the Hydra run directory; print the start-vs-tuned tables
    (each split's metrics, then the tuned knobs), then which policy was exported and why.
    Returns the TuneResult."""
    from rich.table import Table

    _quiet_library_logs()
    console = Console()
    out = Path(HydraConfig.get().runtime.output_dir)
    watch = clock.Stopwatch()
    result = tune(
        cfg, out_dir=out, log=lambda line: console.print(line, highlight=False, markup=False)
    )
    for table in _start_vs_tuned(result, Table):
        console.print(table)
    console.print(OBJECTIVE_NOTE, highlight=False, markup=False)
    shown = lambda k, v: (
        f"{k}=[{len(v)} weights, export/score_net.json]" if k == "score_net" else f"{k}={fmt(v)}"
    )
    values = result.start if result.exported == "start" else result.tuned
    which = "the start" if result.exported == "start" else "the tuned point"
    exported = (out / "export").is_dir()
    console.print(
        (f"exported {which}" if exported else f"recommended {which} (no export/ written)")
        + " (integer limits floored): "
        + ", ".join(shown(k, v) for k, v in as_deployed(values).items()),
        highlight=False,
        markup=False,
    )
    if result.regression:
        console.print(
            "[bold red]regression:[/] the tuned point is worse than the start on "
            "held-out data beyond chance; see the regression_verdict column of "
            "evaluation.csv"
        )
    console.print(f"[bold]{escape(result.recommendation)}[/]", highlight=False)
    exported = (out / "export").is_dir()
    views = ", tuning.html (history and sensitivity)" if (out / "tuning.html").is_file() else ""
    console.print(
        f"wrote {out}/history.csv, evaluation.csv, convergence.png{views}"
        + (", export/" if exported else " (no export/)")
        + f"  ({watch.wall().text()})"
    )
    return result


def _start_vs_tuned(result, table_class) -> list:
    """The run's result as two rich tables: per split (training, then held out) each metric's
    start and tuned value, the tuned one's 95% interval over the split's scenarios ("no
    information" where they all came out the same), the objective's paired gain with its
    interval and the split's verdict (tuning_page.comparison_rows); then each tuned knob's
    start, tuned and exported value, range and bound flag in two words (tuning_page.knob_rows;
    the run's log lines say them whole)."""
    metrics = table_class(
        title=f"start vs tuned ({result.scenarios_simulated} scenarios "
        f"simulated, {result.wall_s:.0f} s)"
    )
    heads = ("split", "metric", "start", "tuned", "tuned: 95% interval", "tuned - start")
    for head in heads + ("verdict",):
        metrics.add_column(head, justify="left" if head in ("split", "metric") else "right")
    rows = comparison_rows(side_by_side(result.evaluation))
    for k, row in enumerate(rows):
        last = k + 1 == len(rows) or rows[k + 1]["split"] != ""
        # the scenario count under the split's name, on its second row
        split = row["split"] or (f"({rows[k - 1]['scenarios']})" if rows[k - 1]["split"] else "")
        metrics.add_row(
            split,
            row["metric"],
            row["start"],
            row["tuned"],
            row["interval"],
            row["gain"],
            row["verdict"],
            end_section=last,
        )
    knobs = table_class(title="tuned knobs")
    for head in ("knob", "start", "tuned", "exported", "range (tune.space)", "bound"):
        knobs.add_column(head, justify="left" if head in ("knob", "bound") else "right")
    values = result.start if result.exported == "start" else result.tuned
    deployed = as_deployed({k: values[k] for k in result.ranges if k in values})
    rows = knob_rows(
        result.start, result.tuned, result.exported, result.ranges, result.bounds, deployed
    )
    for row in rows:
        knobs.add_row(
            row["knob"], row["start"], row["tuned"], row["exported"], row["range"], row["at"]
        )
    return [metrics, knobs]
