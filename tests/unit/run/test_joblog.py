"""run/joblog.py: what a command prints also goes, as plain text, into the Hydra job's log."""

import io
import sys

from servetune.run import joblog


def test_the_tee_writes_plain_text_and_leaves_out_live_redraws():
    screen, log = io.StringIO(), io.StringIO()
    tee = joblog._Tee(screen, log)
    tee.write("\x1b[1mbold\x1b[0m line\n")
    tee.write("\x1b[2K\x1b[1A  requests taken 3/10\r")  # a live bar redrawing itself
    tee.write("done\n")
    assert screen.getvalue().endswith("done\n") and "\x1b[2K" in screen.getvalue()
    assert log.getvalue() == "bold line\ndone\n"


def test_outside_a_hydra_job_nothing_is_swapped():
    before = sys.stdout
    with joblog.kept_in_log():
        assert sys.stdout is before
    assert joblog.log_path() is None
