"""Reports over finished runs: `servetune report DIR` collects every run under DIR (a single run,
a Hydra multirun, or a tree of them) into one table, aggregates seeds (mean +- std, bootstrap
confidence intervals from the request tables), names the best setting within each workload
condition and why, says which configurations are not distinguishable, and draws PNG figures
and one self-contained interactive HTML page.

Modules: collect (find runs, read overrides and metrics), stats (bootstrap, aggregation,
comparisons, which intervals carry no information), choose (conditions and settings, the best
setting per condition, Pareto fronts), latency (latency CDFs from the request tables), timeline
(a run's timeline.parquet), units (names, ms, log axes), figures (matplotlib PNGs), html and
html_figures (the plotly page), browser (the page checked in headless Chromium), console
(tables), callback (Hydra callback: compilation cache, per-job compile counts, the
end-of-sweep summary), cli (the `report` command).
"""

from servetune.reporting.collect import Collection, collect
from servetune.reporting.report import Report, report

__all__ = ["Collection", "Report", "collect", "report"]
