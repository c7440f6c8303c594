"""Reports over finished runs: `servetune report DIR` collects every run under DIR (a single run,
a Hydra multirun, or a tree of them) into one table, aggregates seeds (mean +- std, bootstrap
confidence intervals from the request tables), says which configurations are not
distinguishable, and draws PNG figures and one self-contained interactive HTML page.

Modules: collect (find runs, read overrides and metrics), stats (bootstrap, aggregation,
comparisons), figures (matplotlib PNGs), html (plotly page), callback (Hydra callback: compilation
cache, per-job compile counts, the end-of-sweep summary), cli (the `report` command).
"""

from servetune.reporting.collect import Collection, collect
from servetune.reporting.report import Report, report

__all__ = ["Collection", "Report", "collect", "report"]
