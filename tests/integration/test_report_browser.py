"""report.html in a real headless browser (Chromium, offline): every figure drawn with data and
no JavaScript error; and the check itself catches a failing script, an empty plot and a page
that needs the network. Marked `browser`; skipped where no Chromium is installed
(`apt-get install -y chromium`). benchmarks/check_report_browser.py runs the same check by hand.
"""

import re

import pytest
from test_report_choose import _sweep
from test_report_figures import autoscaled

from servetune.reporting import report
from servetune.reporting.browser import check_page, find_chromium, read_dom

pytestmark = pytest.mark.browser
needs_chromium = pytest.mark.skipif(
    find_chromium() is None, reason="no chromium on PATH (apt-get install -y chromium)"
)


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    """The report page of the hand-made multirun of test_report_choose (two conditions, three
    settings, two seeds, a timeline): five figures."""
    root = tmp_path_factory.mktemp("browser") / "mr"
    _sweep(root)
    return report(root, root.parent / "out", n_boot=100).out_dir / "report.html"


@needs_chromium
def test_every_figure_is_drawn_with_data_and_no_script_fails(page, tmp_path):
    result = check_page(page, screenshot=tmp_path / "page.png")
    assert result.problems == [], result.stderr[-3000:]
    assert (result.expected, result.drawn, result.empty, result.errors) == (5, 5, [], [])
    # what plotly drew is in the DOM: the front's labels and the best settings' table
    assert "max_num_seqs=64" in result.dom and "servetune-rendered" in result.dom
    assert (tmp_path / "page.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@needs_chromium
def test_the_check_catches_a_script_error_an_empty_plot_and_a_cdn(page, tmp_path):
    text = page.read_text()
    empty = (
        "<div class='servetune-figure' id='fig-empty'></div>"
        "<script type='application/json' id='fig-empty-json'>"
        '{"data":[{"type":"scatter","x":[],"y":[]}],"layout":{}}</script>'
        "<script>throw new Error('boom')</script>\n"
    )
    broken = tmp_path / "broken.html"
    broken.write_text(
        text.replace(
            "\n<script>(function(){\nvar divs=", "\n" + empty + "<script>(function(){\nvar divs=", 1
        )
    )
    result = check_page(broken)
    assert result.finished and (result.expected, result.drawn) == (6, 6)
    assert result.empty == ["fig-empty:xy"]
    assert any(
        re.search(r"JavaScript: error: (Uncaught )?Error: boom", p) for p in result.problems
    ), result.problems
    assert "empty plot: fig-empty:xy drew nothing" in result.problems
    # plotly.js from a CDN instead of inline: offline, Plotly is never defined
    start = text.index("<script type='text/javascript'>")
    end = text.index("</script>", start) + len("</script>")
    cdn = tmp_path / "cdn.html"
    cdn.write_text(
        text[:start] + "<script src='https://cdn.plot.ly/plotly-2.35.2.min.js'>"
        "</script>" + text[end:]
    )
    result = check_page(cdn)
    assert (result.expected, result.drawn) == (5, 0) and "0 of 5 figures drawn" in result.problems
    assert "figure fig-pareto: Plotly is not defined" in result.errors, result.errors


def test_reading_a_dom_by_hand():
    dom = (
        '<html><body><pre id="servetune-js-errors">error: x &lt; 1\nconsole.error: y</pre>'
        '<div class="servetune-figure" id="a"></div>'
        '<div id="servetune-rendered" hidden="" data-expected="2" data-figures="1" '
        'data-empty="a:xy a:x2y2"></div></body></html>'
    )
    result = read_dom(dom)
    assert result.errors == ["error: x < 1", "console.error: y"]
    assert (result.expected, result.drawn, result.empty) == (2, 1, ["a:xy", "a:x2y2"])
    assert result.problems == [
        "JavaScript: error: x < 1",
        "JavaScript: console.error: y",
        "1 of 2 figures drawn",
        "empty plot: a:xy drew nothing",
        "empty plot: a:x2y2 drew nothing",
    ]
    assert read_dom("<html></html>").problems == [
        "the page has no #servetune-js-errors element (not a servetune report?)",
        (
            "the figures were not all drawn: #servetune-rendered never appeared (a script "
            "failed, or drawing took longer than the time budget)"
        ),
    ]


@needs_chromium
def test_a_fleet_page_with_a_second_y_axis_is_not_an_empty_plot(tmp_path):
    """Before: the hourly panel's mean replicas, on a second y axis that plotly draws into the
    attainment's subplot, read as an empty subplot (fig-fleet:x3y4)."""
    root = autoscaled(tmp_path / "autoscaled")
    out = report(root, tmp_path / "out", n_boot=0, figures=False).out_dir
    result = check_page(out / "report.html")
    assert result.problems == [] and "fig-fleet" in (out / "report.html").read_text()
