"""`servetune report` answers which setting and why: the best setting per
workload condition by the tuner's order, the Pareto front, latency CDFs in ms, a run's
timeline (or how to get one), and intervals that carry no information said so.

One hand-made multirun (no simulation): workload.rate 5 and 40 (the conditions) x
policy.max_num_seqs 8, 32, 64 (the settings) x seeds 0, 1, each run's metrics set by hand:

    rate  mns  attainment  tokens/$  P99 TTFT s  P99 TPOT s  goodput
       5    8       0.995      1000         0.9       0.015      4.0
       5   32       0.999      3000         0.8       0.020      4.5   best: meets 0.99, most $
       5   64       0.950      5000         3.0       0.030      4.8   most $, misses the SLO
      40    8       0.500       800        30.0       0.050     10.0
      40   32       0.900      2000        10.0       0.060     30.0
      40   64       0.970      1500        12.0       0.080     35.0   best: none meets, closest

(seed 0 has each value less 0.1%, seed 1 more, so the means are the table's). Before, the
report named rate=5, max_num_seqs=64 "best" on tokens per dollar: it misses the SLO target,
and its goodput "best" (rate=40) was the higher load winning.
"""

import re
import shutil

import numpy as np
import pandas as pd
import pytest
import yaml

from servetune.cli.report import main as report_main
from servetune.reporting import choose, figures, html_figures, report
from servetune.reporting.collect import ReportError, collect
from servetune.reporting.console import cell
from servetune.reporting.latency import ecdf, point_cdfs
from servetune.reporting.stats import (
    NO_INFO_SEEDS,
    NO_INFO_WIDTH,
    NO_INTERVAL,
    aggregate,
    bootstrap,
    compare,
    intervals,
    verdicts,
)
from servetune.reporting.timeline import binned
from servetune.reporting.units import log_scale, shown, title

TABLE = {  # (rate, max_num_seqs): (attainment, tokens per $, P99 TTFT s, P99 TPOT s, goodput)
    (5, 8): (0.995, 1000.0, 0.9, 0.015, 4.0),
    (5, 32): (0.999, 3000.0, 0.8, 0.020, 4.5),
    (5, 64): (0.950, 5000.0, 3.0, 0.030, 4.8),
    (40, 8): (0.500, 800.0, 30.0, 0.050, 10.0),
    (40, 32): (0.900, 2000.0, 10.0, 0.060, 30.0),
    (40, 64): (0.970, 1500.0, 12.0, 0.080, 35.0),
}
# requests of rate=5, max_num_seqs=32 (job 2: seed 0, job 3: seed 1): TTFT in s; the last two
# of seed 0 are not counted (warm-up) and rejected: the CDF leaves them out
TTFT = {2: [0.1, 0.2, 0.3], 3: [0.4]}
TIMELINE = pd.DataFrame(
    {  # job 2's timeline, two instances, written out of order
        "t_s": [0.5, 0.0, 1.0, 0.0, 0.5, 1.0],
        "instance": [1, 0, 0, 1, 0, 1],
        "queue_len": [3, 0, 2, 1, 5, 0],
        "running": [4, 1, 3, 2, 4, 1],
        "batch_tokens": [512, 100, 300, 200, 700, 50],
        "kv_blocks": [40, 5, 30, 10, 60, 8],
        "preemptions": [0, 0, 1, 0, 1, 0],
    }
)


def _write_run(path, rate, mns, seed, job):
    att, tpd, ttft, tpot, good = TABLE[(rate, mns)]
    f = 1.0 + (0.001 if seed else -0.001)
    (path / ".hydra").mkdir(parents=True)
    overrides = [
        "workload=poisson",
        f"workload.rate={rate}",
        f"policy.max_num_seqs={mns}",
        f"seed={seed}",
    ]
    (path / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    (path / "config_resolved.yaml").write_text(
        yaml.safe_dump(
            {
                "workload": {"name": "poisson", "rate": rate},
                "policy": {"max_num_seqs": mns},
                "slo": {"ttft_s": 2.0, "tpot_s": 0.1, "e2e_s": None},
                "seed": seed,
                "tune": {"objective": {"slo_target": 0.99}},
                "sweep": {"objective": "penalized"},
            }
        )
    )
    pd.DataFrame(
        [
            {
                "seed": seed,
                "goodput_rps": good * f,
                "slo_attainment": att + (f - 1),
                "useful_tokens_per_dollar": tpd * f,
                "ttft_p99_s": ttft * f,
                "tpot_p99_s": tpot * f,
                "e2e_p99_s": ttft * f + 5.0,
                "window_s": 10.0,
            }
        ]
    ).to_csv(path / "metrics.csv", index=False)
    ttft_s = np.array(TTFT.get(job, [ttft * 0.5, ttft * 0.9, ttft]))
    n = len(ttft_s)
    req = pd.DataFrame(
        {
            "counted": np.ones(n, bool),
            "end_state": ["completed"] * n,
            "ttft_s": ttft_s,
            "tpot_s": np.full(n, tpot),
            "e2e_s": ttft_s + 5.0,
            "qualifies": ttft_s < 2.0,
            "scenario": np.zeros(n, int),
        }
    )
    if job == 2:
        extra = pd.DataFrame(
            {
                "counted": [False, True],
                "end_state": ["completed", "rejected"],
                "ttft_s": [0.05, np.nan],
                "tpot_s": [0.01, np.nan],
                "e2e_s": [1.0, np.nan],
                "qualifies": [False, False],
                "scenario": [0, 0],
            }
        )
        req = pd.concat([req, extra], ignore_index=True)
        TIMELINE.to_parquet(path / "timeline.parquet")
    req.to_parquet(path / "requests.parquet")


def _sweep(root):
    job = 0
    for rate in (5, 40):
        for mns in (8, 32, 64):
            for seed in (0, 1):
                _write_run(root / str(job), rate, mns, seed, job)
                job += 1
    (root / "multirun.yaml").write_text(
        yaml.safe_dump(
            {
                "hydra": {
                    "overrides": {
                        "task": [
                            "workload=poisson",
                            "workload.rate=5,40",
                            "policy.max_num_seqs=8,32,64",
                            "seed=0,1",
                        ]
                    }
                }
            }
        )
    )


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """The hand-made multirun and its report (figures and page), the matplotlib figures kept."""
    root = tmp_path_factory.mktemp("choose") / "mr"
    _sweep(root)
    kept = {}
    saved = figures._save
    figures._save = lambda fig, path: (kept.__setitem__(path.name, fig), saved(fig, path))[1]
    try:
        rep = report(root, root.parent / "out", n_boot=200)
    finally:
        figures._save = saved
    return root, rep, kept


def test_conditions_and_settings_follow_the_rule():
    keys = [
        "workload.rate",
        "policy.max_num_seqs",
        "hardware",
        "engine.n_instances",
        "+policy.w_age",
        "grid.max_num_seqs",
        "policy",
        "model",
        "slo.ttft_s",
    ]
    assert choose.split_keys(keys) == (
        ["workload.rate", "hardware", "engine.n_instances", "model", "slo.ttft_s"],
        ["policy.max_num_seqs", "+policy.w_age", "grid.max_num_seqs", "policy"],
    )
    assert choose.split_keys(keys, ["engine.n_instances"])[0] == [
        "workload.rate",
        "hardware",
        "model",
        "slo.ttft_s",
    ]


def test_the_best_setting_is_chosen_within_each_condition_by_the_tuners_order(made):
    _, rep, _ = made
    assert rep.conditions == ["workload.rate"] and rep.settings == ["policy.max_num_seqs"]
    best = rep.best.set_index("condition")
    assert list(best.index) == ["workload.rate=5", "workload.rate=40"]
    five, forty = best.loc["workload.rate=5"], best.loc["workload.rate=40"]
    # rate 5: 8 and 32 meet 0.99; 32 has more tokens per $; 64 has the most but misses
    assert (five["setting"], five["meets_target"], five["n_meeting"]) == (
        "max_num_seqs=32",
        True,
        2,
    )
    assert five["objective_value"] == pytest.approx(3000.0)
    assert five["run"] == "2" and five["slo_target"] == 0.99
    assert five["why"].startswith(
        "meets the SLO target (99.9% attainment >= 99%) with the "
        "most useful tokens per dollar (3000) of the 2 of 3 settings "
        "that do; runner-up max_num_seqs=8 (1000): "
    )
    # rate 40: none meets it; 64 comes closest (0.97), though 32 has more tokens per $
    assert (forty["setting"], forty["meets_target"], forty["n_meeting"]) == (
        "max_num_seqs=64",
        False,
        0,
    )
    assert forty["why"].startswith(
        "no setting meets the SLO target (99%); this one comes "
        "closest (97% attainment, useful tokens per dollar 1500); "
        "runner-up max_num_seqs=32 (90% attainment): "
    )
    written = pd.read_csv(rep.out_dir / "best.csv")
    assert list(written["setting"]) == ["max_num_seqs=32", "max_num_seqs=64"]


def test_a_named_sweep_objective_is_ranked_instead_of_tokens_per_dollar(made):
    _, rep, _ = made
    points = rep.points.assign(**{"sweep.objective": "goodput_rps"})
    assert choose.objective_metric(points) == "goodput_rps"
    # rate 5 by goodput among those meeting 0.99: 32 (4.5) over 8 (4.0); 64 (4.8) misses
    best = choose.best_settings(points, ["workload.rate"], ["policy.max_num_seqs"])
    # (the few requests of these runs give goodput intervals that overlap: a tie, whose
    # first by the tuner's order is the one chosen)
    assert list(best["chosen"]) == ["max_num_seqs=32", "max_num_seqs=64"]
    assert list(best["objective"]) == ["goodput_rps", "goodput_rps"]
    lower = rep.points.assign(**{"tune.objective.slo_target": 0.85})
    best = choose.best_settings(lower, ["workload.rate"], ["policy.max_num_seqs"])
    # target 0.85: at rate 5 all three meet it (64 has the most $); at rate 40, 32 (0.90,
    # 2000/$) and 64 (0.97, 1500/$) do: 32 wins
    assert list(best["setting"]) == ["max_num_seqs=64", "max_num_seqs=32"]
    assert list(best["n_meeting"]) == [3, 2]


def test_comparisons_and_verdicts_stay_within_a_condition(made):
    _, rep, _ = made
    goodput = rep.comparisons[rep.comparisons["metric"] == "goodput_rps"]
    assert list(dict.fromkeys(goodput["condition"])) == ["workload.rate=5", "workload.rate=40"]
    assert list(dict.fromkeys(goodput["best"])) == ["max_num_seqs=64"]  # 4.8 at 5, 35 at 40
    assert set(goodput["other"]) == {"max_num_seqs=8", "max_num_seqs=32"}
    line = next(v for v in rep.verdicts if v.startswith("[workload.rate=40] P99 TTFT"))
    # 32's three requests give it a P99 TTFT interval overlapping 64's: tied, not best
    assert line == (
        "[workload.rate=40] P99 TTFT: tied: max_num_seqs=32 (10000 ms); not "
        "distinguishable from 1 of 2 other(s): max_num_seqs=64"
    )


def test_pareto_front_by_hand():
    x = [1.0, 2.0, 2.0, 3.0, 0.5, np.nan, 1.0]
    y = [5.0, 6.0, 4.0, 6.0, 1.0, 9.0, 5.0]
    # (2, 4) is dominated by (1, 5); (3, 6) by (2, 6); NaN is off; (1, 5) twice: both on
    assert list(choose.pareto(x, y)) == [True, True, False, False, True, False, True]


def test_pareto_fronts_are_per_condition_and_drawn_with_labels_and_targets(made):
    _, rep, kept = made
    points = rep.points
    mask = choose.fronts(points, rep.conditions)[("ttft_p99_s", "useful_tokens_per_dollar")]
    on = sorted(points.loc[mask, "point"])
    # rate 5: 32 (0.8 s, 3000) dominates 8 (0.9 s, 1000); 64 (3.0 s, 5000) is on the front;
    # rate 40: 32 (10 s, 2000) dominates 8 (30 s, 800) and 64 (12 s, 1500)
    assert on == [
        "workload.rate=40, policy.max_num_seqs=32",
        "workload.rate=5, policy.max_num_seqs=32",
        "workload.rate=5, policy.max_num_seqs=64",
    ]
    ax = kept["fig_pareto.png"].axes[0]  # useful tokens per $ against P99 TTFT (ms)
    assert ax.get_xlabel() == "P99 TTFT (ms)" and ax.get_xscale() == "log"  # 800..30000 ms
    labels = sorted(t.get_text() for t in ax.texts if t.get_text().startswith("max_"))
    assert labels == ["max_num_seqs=32", "max_num_seqs=32", "max_num_seqs=64"]
    assert [t.get_text() for t in ax.texts if "SLO" in t.get_text()] == ["TTFT SLO 2000 ms"]
    assert kept["fig_pareto.png"].axes[1].get_xscale() == "linear"  # TPOT 15..100 ms
    fig = html_figures.pareto_figure(points, rep.conditions, rep.settings, rep.best)
    fronts = [t for t in fig.data if t.mode == "lines+markers+text" and t.xaxis == "x"]
    assert [list(t.texttemplate) for t in fronts] == [
        ["max_num_seqs=32", "max_num_seqs=64"],
        ["max_num_seqs=32"],
    ]
    assert [list(np.round(t.x, 6)) for t in fronts] == [[800.0, 3000.0], [10000.0]]
    targets = [list(t.x) for t in fig.data if t.name == "SLO targets"]
    assert targets == [[2000.0, 2000.0], [100.0, 100.0], [2000.0, 2000.0], [100.0, 100.0]]
    assert fig.layout.xaxis.type == "log" and fig.layout.xaxis2.type is None


def test_ecdf_by_hand():
    x, p = ecdf([3.0, np.nan, 1.0, 2.0])
    assert list(x) == [1.0, 2.0, 3.0] and list(p) == pytest.approx([1 / 3, 2 / 3, 1.0])
    x, p = ecdf(np.arange(1000.0), max_steps=50)
    assert len(x) <= 50 and x[0] == 0.0 and x[-1] == 999.0 and p[-1] == 1.0
    assert np.allclose(p, (x + 1) / 1000)  # every kept step is exact
    assert 989.0 in x and 998.0 in x  # the tail (P99, P99.9) is kept


def test_latency_cdfs_pool_the_seeds_counted_and_completed_in_ms(made):
    root, rep, kept = made
    cdfs = point_cdfs(collect(root, exclude=rep.out_dir), skipped=[])
    c = cdfs["workload.rate=5, policy.max_num_seqs=32"]
    # seed 0: 100, 200, 300 ms (the uncounted 50 ms and the rejected request left out);
    # seed 1: 400 ms
    assert list(c["ttft"].x_ms) == pytest.approx([100.0, 200.0, 300.0, 400.0])
    assert list(c["ttft"].p) == [0.25, 0.5, 0.75, 1.0] and c["ttft"].n == 4
    assert list(c["tpot"].x_ms) == pytest.approx([20.0] * 4)
    ax_ttft, ax_tpot, _ = kept["fig_latency_cdf.png"].axes
    assert ax_ttft.get_xlabel() == "TTFT (ms)" and ax_ttft.get_xscale() == "log"  # 100..30000
    assert ax_tpot.get_xscale() == "linear"  # 15..100 ms: 0.8 decades
    legend = [t.get_text() for t in kept["fig_latency_cdf.png"].legends[0].get_texts()]
    assert legend[:2] == [
        "workload.rate=5, policy.max_num_seqs=32 (n=4)",
        "workload.rate=40, policy.max_num_seqs=64 (n=6)",
    ]  # best first


def test_the_best_settings_run_timeline_is_drawn(made):
    _, rep, kept = made
    tl = rep.timeline
    assert (tl.run, tl.scenario, tl.note) == ("2", 0, "")
    assert tl.why == "the first run of the best setting under workload.rate=5, max_num_seqs=32"
    assert list(tl.table["instance"]) == [0, 0, 0, 1, 1, 1]
    assert list(tl.table["queue_len"]) == [0, 5, 2, 1, 3, 0]  # sorted by instance, time
    queue = kept["fig_timeline.png"].axes[0]
    assert queue.get_xlim()[1] >= 1.0 and "waiting" in queue.get_ylabel()
    page = (rep.out_dir / "report.html").read_text()
    assert "id='fig-timeline'" in page and "servetune-timeline-note" not in page


def test_binned_timeline_keeps_each_bins_maximum():
    t = pd.DataFrame(
        {
            "t_s": np.arange(100.0),
            "instance": 0,
            "queue_len": np.arange(100),
            "running": 1,
            "batch_tokens": 2,
            "kv_blocks": 3,
            "preemptions": np.arange(100) // 10,
        }
    )
    out, width = binned(t, max_bins=10)
    assert width == pytest.approx(9.9)
    assert list(out["queue_len"]) == [9, 19, 29, 39, 49, 59, 69, 79, 89, 99]
    assert list(out["preemptions"]) == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
    assert list(out["t_s"]) == pytest.approx([9.9 * k for k in range(10)])
    assert binned(t, max_bins=100)[1] == 0.0


def test_a_run_without_a_timeline_says_how_to_get_one(made, tmp_path, capsys):
    root, _, _ = made
    assert (
        report_main(
            [
                str(root),
                "--out",
                str(tmp_path / "o"),
                "--bootstrap",
                "0",
                "--no-figures",
                "--timeline",
                "0",
            ]
        )
        == 0
    )
    out = " ".join(capsys.readouterr().out.split())
    assert (
        f"timeline: run 0 has no timeline.parquet. To see its queue, batch and KV blocks "
        f"over time, simulate it again with output.timeline=true (same results, plus the "
        f"timeline) and report again: servetune simulate workload=poisson "
        f"workload.rate=5 policy.max_num_seqs=8 seed=0 output.timeline=true "
        f"hydra.run.dir={root / '0'}"
    ) in out
    page = (tmp_path / "o" / "report.html").read_text()
    assert re.search(r"id='servetune-timeline-note'>run 0 has no timeline\.parquet", page)
    assert "id='fig-timeline'" not in page
    assert report_main([str(root), "--out", str(tmp_path / "p"), "--timeline", "nope"]) == 2
    assert f"--timeline: got 'nope'; no such run under {root} (runs: 0, 1, 2" in " ".join(
        capsys.readouterr().err.split()
    )


def test_a_damaged_timeline_is_a_note_not_a_failure(tmp_path):
    _sweep(tmp_path)
    TIMELINE.drop(columns="kv_blocks").to_parquet(tmp_path / "2" / "timeline.parquet")
    rep = report(tmp_path, tmp_path / "out", n_boot=0, figures=False, html=False)
    assert rep.timeline.table is None and rep.timeline.note.startswith(
        f"{tmp_path / '2' / 'timeline.parquet'}: cannot read (no column kv_blocks; expected "
        f"t_s, instance, queue_len"
    )


def test_the_page_answers_which_setting_in_ms(made):
    _, rep, _ = made
    page = (rep.out_dir / "report.html").read_text()
    assert "<script src=" not in page
    for fid in ("fig-pareto", "fig-cdf", "fig-timeline", "fig-0", "fig-1"):
        assert f"class='servetune-figure' id='{fid}'" in page
    rows = re.findall(
        r"<td>(workload\.rate=\d+)</td><td><b>(max_num_seqs=\d+)</b></td>"
        r"<td>(yes|no) \(0\.99\)</td>",
        page,
    )
    assert rows == [
        ("workload.rate=5", "max_num_seqs=32", "yes"),
        ("workload.rate=40", "max_num_seqs=64", "no"),
    ]
    assert "<b>SLO TTFT target</b>: 2000 ms" in page and "<th>P99 TTFT (ms)</th>" in page
    # the points table in ms: rate 40, max_num_seqs 8: 30 s +- 0.1% = 30000 +- 42 ms
    assert "<td>30000 ±42 [" in page
    assert "(s)</th>" not in page


def test_units_and_log_axes():
    assert title("ttft_p99_s") == "P99 TTFT (ms)" and title("e2e_mean_s") == "mean E2E (ms)"
    assert title("goodput_rps") == "goodput (req/s)" and title("slo_attainment") == "SLO attainment"
    assert shown(17.92, "ttft_p99_s") == "17920" and shown(0.01234, "tpot_p99_s") == "12.3"
    assert shown(4.2049, "goodput_rps", 4) == "4.205" and shown(4.2049, "goodput_rps") == "4.2"
    assert not log_scale([1.0, 31.0]) and log_scale([1.0, 32.0])  # 10**1.5 = 31.6
    assert not log_scale([0.0, 100.0]) and not log_scale([5.0])


# --------------------------------------------------------------------------- no information


def _replayed(root, values):
    """Runs of policies whose two seeds are identical (a replayed trace without replicas):
    {policy: tokens per $}; every request's TTFT is the same 0.5 s in policy 'flat'."""
    job = 0
    for policy, tpd in values.items():
        for seed in (0, 1):
            path = root / str(job)
            (path / ".hydra").mkdir(parents=True)
            (path / ".hydra" / "overrides.yaml").write_text(f"- policy={policy}\n- seed={seed}\n")
            ttft = (
                np.full(50, 0.5)
                if policy == "flat"
                else np.random.default_rng(7).exponential(0.5, 50)
            )
            pd.DataFrame(
                {
                    "counted": True,
                    "end_state": "completed",
                    "ttft_s": ttft,
                    "tpot_s": 0.01,
                    "e2e_s": ttft + 1,
                    "qualifies": ttft < 2,
                    "scenario": 0,
                }
            ).to_parquet(path / "requests.parquet")
            pd.DataFrame(
                [
                    {
                        "seed": seed,
                        "useful_tokens_per_dollar": tpd,
                        "window_s": 10.0,
                        "slo_attainment": 1.0,
                        "goodput_rps": 5.0,
                        "ttft_p99_s": float(np.percentile(ttft, 99)),
                        "tpot_p99_s": 0.01,
                    }
                ]
            ).to_csv(path / "metrics.csv", index=False)
            job += 1


def test_identical_seeds_are_no_information_not_a_tight_interval(tmp_path):
    # b is 0.0003% better than a; both replayed: the seeds say nothing about the spread
    _replayed(tmp_path, {"a": 1_000_000.0, "b": 1_000_003.0})
    col = collect(tmp_path)
    points = aggregate(col, bootstrap(col, 300))
    lo, hi, notes = intervals(points, "useful_tokens_per_dollar")
    assert np.isnan(lo).all() and np.isnan(hi).all() and notes == [NO_INFO_SEEDS] * 2
    comp = compare(points)
    row = comp[comp["metric"] == "useful_tokens_per_dollar"].iloc[0]
    assert (row["best"], row["other"]) == ("policy=b", "policy=a")
    assert row["distinguishable"] is None and row["note"] == NO_INFO_SEEDS
    line = next(v for v in verdicts(comp) if v.startswith("useful tokens per $"))
    assert line == (
        "useful tokens per $: best policy=b (1000003); no information to tell "
        "it from 1 point(s) (identical seeds or zero-width intervals)"
    )
    assert (
        cell(points.iloc[0], "useful_tokens_per_dollar", True, 1.0, notes[0])
        == "1000000 (no info: all seeds equal)"
    )
    # the bootstrap interval of two identical seeds is one seed's, not narrower
    one = tmp_path / "one"
    _replayed(one, {"a": 1_000_000.0})
    shutil.rmtree(one / "1")  # seed 0 alone
    single = collect(one)
    single_points = aggregate(single, bootstrap(single, 300))
    assert points.loc[0, "ttft_p99_s_ci_lo"] == single_points.loc[0, "ttft_p99_s_ci_lo"]
    assert points.loc[0, "ttft_p99_s_ci_hi"] == single_points.loc[0, "ttft_p99_s_ci_hi"]


def test_a_zero_width_interval_is_no_information(tmp_path):
    _replayed(tmp_path, {"flat": 1.0, "other": 2.0})
    col = collect(tmp_path)
    points = aggregate(col, bootstrap(col, 100))
    # every request of 'flat' took 0.5 s: its bootstrap interval is [500, 500] ms
    assert points.loc[0, "ttft_p99_s_ci_lo"] == points.loc[0, "ttft_p99_s_ci_hi"] == 0.5
    _, _, notes = intervals(points, "ttft_p99_s")
    assert notes == [NO_INFO_SEEDS, ""]  # 'other' has a bootstrap interval of one seed
    one = points.assign(n=1, ttft_p99_s_std=np.nan)
    assert intervals(one, "ttft_p99_s")[2] == [NO_INFO_WIDTH, ""]
    none = one.assign(ttft_p99_s_ci_lo=np.nan, ttft_p99_s_ci_hi=np.nan)
    assert intervals(none, "ttft_p99_s")[2] == [NO_INTERVAL, NO_INTERVAL]


def test_intervals_by_hand():
    points = pd.DataFrame(
        {
            "m_mean": [10.0, 10.0],
            "m_std": [1.0, 0.0],
            "n": [3, 3],
            "m_ci_lo": [9.5, 9.8],
            "m_ci_hi": [10.2, 10.1],
        }
    )
    lo, hi, notes = intervals(points, "m")
    assert list(lo) == [9.0, 9.8] and list(hi) == [11.0, 10.1] and notes == ["", ""]


def test_an_output_override_is_not_a_point_key(tmp_path):
    _sweep(tmp_path)
    path = tmp_path / "2" / ".hydra" / "overrides.yaml"
    path.write_text(path.read_text() + "- output.timeline=true\n")
    assert collect(tmp_path).keys == ["workload.rate", "policy.max_num_seqs"]


@pytest.mark.parametrize("key", ["policy.max_num_seq", "workload.rat", "engine.block_size"])
def test_a_setting_no_run_has_is_refused_naming_the_keys(made, tmp_path, key):
    """`report --setting` with a typo left the key a condition without a word."""
    root, _, _ = made
    with pytest.raises(
        ReportError,
        match=rf"--setting {key}: no run under .* sets it; expected "
        r"one of the keys the runs differ in: workload.rate, "
        r"policy.max_num_seqs$",
    ):
        report(root, tmp_path / "out", n_boot=0, figures=False, html=False, settings=[key])
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").glob("*.csv"))


def test_a_sweep_beside_a_lone_run_reports_the_key_it_did_not_set(tmp_path):
    """A report over a multirun plus a lone run (which set neither swept key) failed
    in the figures ('nan' is not in list) after writing its tables; the lone run is the
    category "(not set)", and the set is written whole."""
    root = tmp_path / "runs"
    _sweep(root / "mr")
    _write_run(root / "lone", 5, 32, 0, 0)
    (root / "lone" / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(["seed=0"]))
    rep = report(root, n_boot=0)
    assert {"report.html", "points.csv", "fig_pareto.png"} <= {p.name for p in rep.files}
    assert figures.NOT_SET in (root / "report" / "report.html").read_text()
    numeric, cats = figures.x_axis(rep.points, "policy.max_num_seqs")
    assert not numeric and cats[0] == figures.NOT_SET and set(cats[1:]) == {"8", "32", "64"}
