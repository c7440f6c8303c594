"""Check `servetune report`'s page in a real headless browser (Chromium), offline.

    python benchmarks/check_report_browser.py                     # simulate a small sweep first
    python benchmarks/check_report_browser.py outputs/multirun/DATE/TIME   # report on runs
    python benchmarks/check_report_browser.py path/to/report.html --screenshot /tmp/page.png

With no argument it simulates a small multirun (workload.rate 5 and 40 x policy.max_num_seqs
4 and 32, 8 s of Poisson arrivals, two seeds; about half a minute on 2 cores) into a temporary
folder and reports on it; with a folder of runs it reports on them into a temporary folder;
with a report.html it checks that page. Chromium then loads the page from disk with no name
resolving (a script from a CDN would fail), runs its scripts and dumps the DOM; the page
records JavaScript errors and, once plotly has drawn every figure, which subplots drew nothing
(servetune/reporting/browser.py). Exit 0 when every figure was drawn with data and no script
failed, 1 otherwise (each problem printed), 2 when no Chromium is installed
(`apt-get install -y chromium` on Debian). --screenshot also writes a PNG of the page's top.

tests/integration/test_report_browser.py runs the same check in the test suite (marked
`browser`; skipped without Chromium).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from servetune.reporting import report
from servetune.reporting.browser import check_page, find_chromium

SWEEP = [
    "workload=poisson",
    "workload.duration_s=8",
    "window.drain_s=30",
    "workload.rate=5,40",
    "policy.max_num_seqs=4,32",
    "seed=0,1",
    "output.progress=false",
]


def simulate(folder: Path) -> Path:
    """A small multirun under `folder` (see the module docstring); its folder."""
    root = folder / "mr"
    cmd = [
        sys.executable,
        "-m",
        "servetune.cli.main",
        "simulate",
        "-m",
        *SWEEP,
        f"hydra.sweep.dir={root}",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        sys.exit(f"the sweep failed:\n{proc.stderr[-3000:]}")
    return root


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "target",
        nargs="?",
        default=None,
        help="report.html, or a folder of runs to report on (default: simulate)",
    )
    p.add_argument("--screenshot", default=None, metavar="PNG", help="also write a screenshot")
    p.add_argument("--chromium", default=None, help="the browser (default: chromium on PATH)")
    args = p.parse_args(argv)
    exe = args.chromium or find_chromium()
    if exe is None:
        print("no chromium on PATH: apt-get install -y chromium", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="servetune-browser-") as tmp:
        target = Path(args.target) if args.target else simulate(Path(tmp))
        if target.is_dir():
            page = report(target, Path(tmp) / "report", n_boot=200).out_dir / "report.html"
        else:
            page = target
        start = time.perf_counter()
        result = check_page(page, exe, screenshot=args.screenshot)
        took = time.perf_counter() - start
    print(
        f"{page}: {result.drawn} of {result.expected} figures drawn, "
        f"{len(result.errors)} JavaScript error(s), {len(result.empty)} empty subplot(s) "
        f"({took:.1f} s in {exe})"
    )
    for problem in result.problems:
        print(f"  problem: {problem}")
    if args.screenshot:
        print(f"screenshot: {args.screenshot}")
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
