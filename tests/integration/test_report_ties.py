"""Ties are ties in reports: runs with the same request outcomes share one interval and one
label, and "best" is named only where it differs from its runner-up beyond its interval, else
"tied: ...", in best.csv, the verdicts and `servetune export`'s choice alike.

One hand-made sweep (no simulation): max_num_seqs 4, 16, 64, 256 over one seed of 300
requests. 16, 64 and 256 never reached their cap, so their runs are the same, request for
request (as a user's 2 req/s trace found: at most 11 requests ever ran at once); 4 queued,
so fewer requests met the SLOs. Before, the report named max_num_seqs=16 best (the first of
three equal values) and gave the three different P99 E2E intervals (each resampled with the
next draws of one generator).
"""

import dataclasses
import json

import numpy as np
import pandas as pd
import pytest
import yaml

from servetune.deploy.choose import choose_point
from servetune.reporting import choose, report
from servetune.reporting.collect import collect
from servetune.reporting.stats import CI_METRICS, aggregate, bootstrap, compare, verdicts

SETTING = "policy.max_num_seqs"
N = 300


def _requests(slow: bool) -> pd.DataFrame:
    rng = np.random.default_rng(3)  # the same requests in every run
    ttft = rng.lognormal(np.log(0.04), 0.5, N) * (8.0 if slow else 1.0)
    tpot = rng.lognormal(np.log(0.009), 0.1, N)
    out = rng.integers(20, 400, N)
    return pd.DataFrame(
        {
            "counted": True,
            "end_state": "completed",
            "ttft_s": ttft,
            "tpot_s": tpot,
            "e2e_s": ttft + tpot * (out - 1),
            "output_tokens_delivered": out,
            "qualifies": ttft < 0.2,
            "scenario": 0,
        }
    )


def _run(path, mns: int) -> None:
    req = _requests(slow=mns == 4)
    (path / ".hydra").mkdir(parents=True)
    (path / ".hydra" / "overrides.yaml").write_text(
        yaml.safe_dump(["workload=file", f"{SETTING}={mns}"])
    )
    (path / "config_resolved.yaml").write_text(
        yaml.safe_dump({"policy": {"max_num_seqs": mns, "order": "fcfs"}, "seed": 0})
    )
    req.to_parquet(path / "requests.parquet")
    q, window, cost = req["qualifies"], 148.0, 0.1
    pd.DataFrame(
        [
            {
                "seed": 0,
                "window_s": window,
                "goodput_rps": q.sum() / window,
                "slo_attainment": q.mean(),
                "useful_tokens_per_dollar": req["output_tokens_delivered"][q].sum() / cost,
                "ttft_p99_s": np.percentile(req["ttft_s"], 99),
                "tpot_p99_s": np.percentile(req["tpot_s"], 99),
                "e2e_p99_s": np.percentile(req["e2e_s"], 99),
            }
        ]
    ).to_csv(path / "metrics.csv", index=False)


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """The sweep and its report (tables only)."""
    root = tmp_path_factory.mktemp("ties") / "sweep"
    for job, mns in enumerate((4, 16, 64, 256)):
        _run(root / str(job), mns)
    return root, report(root, root.parent / "out", n_boot=200, figures=False, html=False)


def test_identical_runs_share_one_interval_wherever_they_sit(made):
    root, rep = made
    points = rep.points.set_index(SETTING)
    same = points.loc[[16, 64, 256]]
    for m in CI_METRICS:  # before: P99 E2E [8432, 14389] vs [8393, 13755] of one result
        for end in ("lo", "hi"):
            col = same[f"{m}_ci_{end}"]
            assert col.nunique() == 1 and np.isfinite(col.iloc[0]), (m, end)
    assert same["outcome"].nunique() == 1 and points.loc[4, "outcome"] != same["outcome"].iloc[0]
    # resampled alone, the last run gets the interval it has in the sweep
    alone = collect(root / "3")
    one = aggregate(alone, bootstrap(alone, 200)).iloc[0]
    assert one["e2e_p99_s_ci_lo"] == same["e2e_p99_s_ci_lo"].iloc[0]
    assert one["e2e_p99_s_ci_hi"] == same["e2e_p99_s_ci_hi"].iloc[0]
    # tokens per dollar has an interval now: the objective a tie is judged on
    tpd = points.loc[4, [f"useful_tokens_per_dollar_{s}" for s in ("ci_lo", "mean", "ci_hi")]]
    assert tpd.iloc[0] < tpd.iloc[1] < tpd.iloc[2]


def test_identical_settings_are_one_tied_best_with_one_label(made):
    _, rep = made
    (best,) = rep.best.to_dict("records")
    assert best["setting"] == "tied: max_num_seqs=16, 64, 256"  # before: max_num_seqs=16
    assert best["tied"] == "max_num_seqs=16, 64, 256" and best["chosen"] == "max_num_seqs=16"
    assert json.loads(best["tied_points"]) == [f"max_num_seqs={v}" for v in (16, 64, 256)]
    assert best["point"] == "max_num_seqs=16" and best["run"] == "1"
    assert best["why"].startswith(
        "tied: max_num_seqs=16, 64, 256 (identical request outcomes): meets the SLO target"
    )
    assert (
        best["runner_up"] == "max_num_seqs=4"
        and "drawn and exported: max_num_seqs=16" in (best["why"])
    )
    written = pd.read_csv(rep.out_dir / "best.csv")
    assert written["setting"].iloc[0] == "tied: max_num_seqs=16, 64, 256"
    assert choose.best_points(rep.best) == {f"max_num_seqs={v}" for v in (16, 64, 256)}


def test_verdicts_name_identical_points_together(made):
    _, rep = made
    line = next(v for v in rep.verdicts if v.startswith("P99 TTFT"))
    assert line.startswith("P99 TTFT: tied: max_num_seqs=16, 64, 256 (")
    assert line.endswith(" ms, identical request outcomes); distinguishable from every other point")
    assert "max_num_seqs=16;" not in line and "; max_num_seqs=64" not in line
    # 4 is the other point, not the three
    comp = rep.comparisons[rep.comparisons["metric"] == "goodput_rps"]
    assert list(comp["other"]) == ["max_num_seqs=4"] and list(comp["identical"]) == [3]
    col = collect(made[0], exclude=rep.out_dir)
    only = dataclasses.replace(col, runs=col.runs[col.runs[SETTING] != 4].reset_index(drop=True))
    lines = verdicts(compare(aggregate(only, bootstrap(only, 50)), keys=[SETTING]))
    # three identical points alone: one verdict naming them, nothing else to compare
    assert lines[0].startswith("goodput: tied: max_num_seqs=16, 64, 256 (")
    assert lines[0].endswith(" req/s, identical request outcomes)")


def test_export_picks_the_reports_choice_and_says_it_is_tied(made):
    root, rep = made
    chosen = choose_point(root, [])
    assert chosen.label == rep.best["chosen"].iloc[0] == "max_num_seqs=16"
    assert chosen.values["max_num_seqs"] == 16 and chosen.run_dir == root / "1"
    assert chosen.why.startswith("tied: max_num_seqs=16, 64, 256 (identical request outcomes;")
    assert "exported the first by the tuner's order" in chosen.why


def _points(tpd, lo, hi, att=(1.0, 1.0, 1.0)) -> pd.DataFrame:
    """Three settings' points by hand: useful tokens per $ with its interval, attainment."""
    return pd.DataFrame(
        {
            SETTING: [32, 64, 128],
            "point": [f"max_num_seqs={v}" for v in (32, 64, 128)],
            "n": 1,
            "slo_attainment_mean": list(att),
            "useful_tokens_per_dollar_mean": tpd,
            "useful_tokens_per_dollar_ci_lo": lo,
            "useful_tokens_per_dollar_ci_hi": hi,
        }
    )


def test_best_is_named_only_beyond_its_runner_ups_interval():
    keys = [SETTING]
    # 64 is ahead of 32 by less than their intervals: tied; 128 is told apart from 64
    tied = choose.best_settings(
        _points([2950.0, 3000.0, 1000.0], [2850.0, 2900.0, 950.0], [3050.0, 3100.0, 1050.0]),
        [],
        keys,
    ).iloc[0]
    assert tied["setting"] == "tied: max_num_seqs=64, 32" and tied["chosen"] == "max_num_seqs=64"
    assert tied["why"].startswith(
        "tied: max_num_seqs=64, 32 (intervals overlap on useful tokens per dollar): "
    )
    assert (
        "runner-up max_num_seqs=32 (2950): not distinguishable (intervals overlap)" in (tied["why"])
    )
    # beyond its interval: named
    named = choose.best_settings(
        _points([2000.0, 3000.0, 1000.0], [1900.0, 2900.0, 950.0], [2100.0, 3100.0, 1050.0]),
        [],
        keys,
    ).iloc[0]
    assert (named["setting"], named["tied"], named["tied_points"]) == ("max_num_seqs=64", "", "")
    assert named["why"].endswith("runner-up max_num_seqs=32 (2000): distinguishable")
    # no interval to judge by: named, saying so
    blind = choose.best_settings(
        _points([2950.0, 3000.0, 1000.0], [np.nan] * 3, [np.nan] * 3), [], keys
    ).iloc[0]
    assert blind["setting"] == "max_num_seqs=64" and "no interval" in blind["why"]


def test_without_request_tables_identical_metrics_are_one_result():
    """(a review's finding) with output.request_table=false no run has an outcome digest:
    points whose every metric mean is equal are still one result; a differing one is not."""
    from servetune.reporting.stats import identical_groups

    rng = np.random.default_rng(0)
    same = {f"metric{k}_mean": float(rng.random()) for k in range(12)}
    points = pd.DataFrame([same, same, {**same, "metric3_mean": 0.5}, same])
    assert identical_groups(points) == [[0, 1, 3], [2]]
    few = pd.DataFrame([{"a_mean": 1.0}, {"a_mean": 1.0}])  # too few metrics to key by
    assert identical_groups(few) == [[0], [1]]
