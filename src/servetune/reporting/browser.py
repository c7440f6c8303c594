"""Check a report page in a real headless browser (Chromium), offline.

Chromium loads report.html from disk with every network name unresolvable (so a script from
a CDN would fail to load), runs its scripts for up to VIRTUAL_TIME_MS of virtual time and
dumps the DOM. The page itself records what went wrong (html.CATCH: JavaScript errors,
rejected promises, console.error into #servetune-js-errors) and, once plotly has drawn every
figure, appends #servetune-rendered naming how many figures were drawn and which subplots
drew nothing (html.RENDER). The check fails on any JavaScript error, a figure not drawn, an
empty subplot, or a page that never finished drawing.

Used by tests/integration/test_report_browser.py and benchmarks/check_report_browser.py.
"""

from __future__ import annotations

import dataclasses
import html as html_lib
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
VIRTUAL_TIME_MS = 30_000  # scripts run until idle or this much virtual time has passed
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--enable-logging=stderr",
    "--v=0",
    "--host-resolver-rules=MAP * ~NOTFOUND",  # offline: no name resolves
    f"--virtual-time-budget={VIRTUAL_TIME_MS}",
)


def find_chromium() -> str | None:
    """The path of a Chromium (or Chrome) executable on PATH, or None."""
    for name in NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


@dataclasses.dataclass
class BrowserCheck:
    """What the browser saw: expected (figure divs on the page), drawn (figures plotly
    drew), empty (subplots, as 'figure-id:xy', that drew nothing), errors (JavaScript
    errors the page recorded), finished (whether the page reached the end of drawing) and
    problems (one sentence per failure; empty when the page is fine)."""

    expected: int
    drawn: int
    empty: list
    errors: list
    finished: bool
    problems: list
    dom: str = dataclasses.field(repr=False, default="")
    stderr: str = dataclasses.field(repr=False, default="")

    @property
    def ok(self) -> bool:
        """Whether the page passed: no problems."""
        return not self.problems


def _attr(tag: str, name: str) -> str:
    m = re.search(rf'\b{name}="([^"]*)"', tag)
    return html_lib.unescape(m.group(1)) if m else ""


def read_dom(dom: str, stderr: str = "") -> BrowserCheck:
    """Judge a DOM dumped after the page's scripts ran (see the module docstring)."""
    problems = []
    m = re.search(r"<pre[^>]*id=\"servetune-js-errors\"[^>]*>(.*?)</pre>", dom, re.DOTALL)
    errors = [e for e in html_lib.unescape(m.group(1)).splitlines() if e.strip()] if m else []
    if m is None:
        problems.append("the page has no #servetune-js-errors element (not a servetune report?)")
    problems += [f"JavaScript: {e}" for e in errors]
    tag = re.search(r"<div[^>]*id=\"servetune-rendered\"[^>]*>", dom)
    expected = len(re.findall(r"class=\"servetune-figure", dom))
    if tag is None:
        problems.append(
            "the figures were not all drawn: #servetune-rendered never appeared "
            "(a script failed, or drawing took longer than the time budget)"
        )
        return BrowserCheck(expected, 0, [], errors, False, problems, dom, stderr)
    drawn = int(_attr(tag.group(0), "data-figures") or 0)
    expected = int(_attr(tag.group(0), "data-expected") or expected)
    empty = _attr(tag.group(0), "data-empty").split()
    if drawn != expected:
        problems.append(f"{drawn} of {expected} figures drawn")
    if expected == 0:
        problems.append("the page has no figures")
    problems += [f"empty plot: {e} drew nothing" for e in empty]
    return BrowserCheck(expected, drawn, empty, errors, True, problems, dom, stderr)


def check_page(
    path: Path | str,
    chromium: str | None = None,
    timeout: float = 180.0,
    screenshot: Path | str | None = None,
) -> BrowserCheck:
    """Load the page at `path` in headless Chromium (`chromium`, default find_chromium()) and
    judge it (read_dom); with `screenshot`, also write a PNG of the page's top there.
    FileNotFoundError when no Chromium is found; subprocess.TimeoutExpired past `timeout`
    seconds."""
    exe = chromium or find_chromium()
    if exe is None:
        raise FileNotFoundError("no chromium on PATH (apt-get install -y chromium)")
    url = Path(path).resolve().as_uri()
    with tempfile.TemporaryDirectory(prefix="servetune-chromium-") as profile:
        cmd = [exe, *FLAGS, f"--user-data-dir={profile}", "--dump-dom", url]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
        result = read_dom(proc.stdout, proc.stderr)
        if proc.returncode != 0:
            result.problems.insert(
                0, f"chromium exited {proc.returncode}: {proc.stderr.strip()[-500:]}"
            )
        if screenshot is not None:
            shot = [
                exe,
                *FLAGS,
                f"--user-data-dir={profile}",
                "--hide-scrollbars",
                "--window-size=1400,2400",
                f"--screenshot={Path(screenshot).resolve()}",
                url,
            ]
            subprocess.run(shot, capture_output=True, text=True, timeout=timeout, check=False)
    return result
