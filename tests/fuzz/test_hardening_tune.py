"""Tune settings refused before any simulation: tuned priority-score keys the
configured policy never reads, named with what would make them act. checked_config only; no
simulation runs here."""

import pytest

from servetune.core.errors import ConfigError
from servetune.run.api import compose
from servetune.tuning.runner import checked_config

W_AGE = "+tune.space.w_age={low: 0, high: 2}"
W_SLACK = "+tune.space.w_slack={low: 0, high: 2}"
TTFT = "+tune.space.ttft_target_s={low: 0.5, high: 5}"

NO_EFFECT = {  # overrides -> the message: the key, why it cannot act, what would make it act
    "ttft target without slack term": (
        [TTFT],
        (
            r"^tune\.space\.ttft_target_s: acts only through the slack term .* w_slack "
            r"is 0 and not tuned; set policy\.w_slack non-zero or tune it"
        ),
    ),
    "w_age alone under fcfs": (
        [W_AGE],
        (
            r"^tune\.space\.w_age: the score's only term \(w_prompt, w_pred, w_slack are "
            r"0 and not tuned\).* every value in \[0, 2\] schedules alike; set or tune "
            r"another weight"
        ),
    ),
    "w_age alone, all negative": (
        ["+tune.space.w_age={low: -3, high: -1}"],
        r"^tune\.space\.w_age: the score's only term",
    ),
    "w_slack alone": (
        [W_SLACK, "policy=parametric", "policy.w_age=0"],
        r"^tune\.space\.w_slack: the score's only term \(w_age, w_prompt, w_pred",
    ),
    "a weight under priority scheduling": (
        ["+tune.space.w_prompt={low: 0, high: 4}", "policy=priority"],
        r"^tune\.space\.w_prompt: the priority score is not read under policy\.order=priority",
    ),
    "ttft target under priority scheduling": (
        [TTFT, W_SLACK, "policy=priority"],
        r"^tune\.space\.ttft_target_s: .*order=priority",
    ),
    "a network under priority scheduling": (
        ["tune.policy_family=neural", "policy=priority"],
        (
            r"^tune\.policy_family: neural: the priority score is not read under "
            r"policy\.order=priority"
        ),
    ),
}


@pytest.mark.parametrize("name", NO_EFFECT)
def test_a_tuned_key_the_policy_never_reads_is_refused(name):
    overrides, pattern = NO_EFFECT[name]
    with pytest.raises(ConfigError, match=pattern):
        checked_config(compose(overrides))


ACTS = {  # what makes each of those keys act
    "w_age against the default w_prompt 1 of sjf": [W_AGE, "policy=sjf"],
    "w_age crossing 0 (newest first below it)": ["+tune.space.w_age={low: -1, high: 2}"],
    "w_age with w_prompt tuned": [W_AGE, "+tune.space.w_prompt={low: 0, high: 4}"],
    "w_prompt against the fcfs w_age 1": ["+tune.space.w_prompt={low: 0, high: 4}"],
    "w_slack against the fcfs w_age 1": [W_SLACK],
    "ttft target with w_slack tuned": [TTFT, W_SLACK],
    "ttft target with w_slack set": [TTFT, "policy=parametric", "policy.w_slack=1"],
    "w_age beside a network": [W_AGE, "tune.policy_family=neural"],
}


@pytest.mark.parametrize("name", ACTS)
def test_a_tuned_key_the_policy_reads_is_accepted(name):
    st, _ = checked_config(compose(ACTS[name]))
    tuned = ACTS[name][0].partition("tune.space.")[2].partition("=")[0]
    assert tuned in st.space.keys


SIZES = {  # overrides -> the message: the key, the figures and the limit
    "pairs 1e12": (
        ["tune.pairs=1e12"],
        r"^tune\.pairs: got 1000000000000\.0; expected within \[1, 4096\]$",
    ),
    "pairs 1e6": (["tune.pairs=1e6"], r"^tune\.pairs: got 1000000\.0; expected within \[1, 4096\]"),
    "iterations 1e9": (
        ["tune.iterations=1e9"],
        r"^tune\.iterations: got 1000000000\.0; expected within \[1, 100000\]",
    ),
    "iterations x pairs": (
        ["tune.iterations=100000", "tune.pairs=4096"],
        (
            r"^tune\.iterations x tune\.pairs: 100000 iteration\(s\) x 8193 policies x 1 "
            r"scenario\(s\) each = 8\.19e\+08 simulations; expected at most 1e\+08"
        ),
    ),
    "iterations x pairs x seeds x workloads": (
        ["tune.iterations=1000", "tune.pairs=512", "seeds=64", "tune.workloads=[[],[]]"],
        r"^tune\.iterations x tune\.pairs: 1000 .* x 1025 policies x 128 scenario\(s\) each",
    ),
    "eval seeds 1e9": (
        ["tune.eval.seeds=1e9"],
        r"^tune\.eval\.seeds: got 1000000000\.0; expected within \[0, 65536\]",
    ),
    "seed offset past the largest seed": (
        ["seed=1000", "tune.eval.seed_offset=9223372036854775000"],
        r"^tune\.eval\.seed_offset: got 9223372036854775000; .* past the largest seed",
    ),
}


@pytest.mark.parametrize("name", SIZES)
def test_a_run_too_large_is_refused_by_key(name):
    overrides, pattern = SIZES[name]
    with pytest.raises(ConfigError, match=pattern):
        checked_config(compose(overrides))


TINY = [
    "workload=poisson",
    "workload.rate=20",
    "workload.duration_s=2",
    "window.drain_s=1",
    "output.progress=false",
    "tune.eval.seeds=0",
]


@pytest.mark.parametrize(
    "mode, pairs, pattern",
    [
        (
            "vmap",
            64,
            (
                r"^tune\.pairs: 64 pair\(s\), 129 policies per iteration on 1 scenario\(s\), "
                r"would need ~0\.0\d+ GiB of memory \(.* GiB of simulator state "
                r"\(tune\.batch_mode=vmap\)\), more than 80% of the 0\.0312 GiB available; "
                r"lower tune\.pairs, use tune\.batch_mode=loop"
            ),
        ),
        (
            "loop",
            1024,
            (
                r"^tune\.pairs: 1024 pair\(s\), 2049 policies .* of points and metrics\), "
                r"more than 80% of the 0\.0156 GiB available; lower tune\.pairs or run fewer"
            ),
        ),
    ],
)
def test_a_population_too_large_for_memory_is_refused_before_the_loop(
    tmp_path, monkeypatch, mode, pairs, pattern
):
    """The estimate (points, metrics records, a vmapped population's state) against the memory
    available, before any simulation or allocation of the population."""
    from servetune.engine import memory
    from servetune.tuning import runner
    from servetune.tuning.estimators.es import EvolutionStrategies

    free = {"vmap": 32 << 20, "loop": 16 << 20}[mode]
    monkeypatch.setattr(memory, "available_bytes", lambda device=None: free)
    monkeypatch.setattr(EvolutionStrategies, "__call__", lambda *a: pytest.fail("simulated"))
    with pytest.raises(ConfigError, match=pattern):
        runner.tune(
            TINY + [f"tune.pairs={pairs}", f"tune.batch_mode={mode}"],
            out_dir=tmp_path,
            log=lambda _: None,
        )
    assert not any(tmp_path.iterdir())
