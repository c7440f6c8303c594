"""Tune settings refused before any simulation (issue 23 audit): tuned priority-score keys the
configured policy never reads, named with what would make them act. checked_config only; no
simulation runs here."""

import pytest

from servetune.api import compose
from servetune.errors import ConfigError
from servetune.tuning.runner import checked_config

W_AGE = "+tune.space.w_age={low: 0, high: 2}"
W_SLACK = "+tune.space.w_slack={low: 0, high: 2}"
TTFT = "+tune.space.ttft_target_s={low: 0.5, high: 5}"

NO_EFFECT = {  # overrides -> the message: the key, why it cannot act, what would make it act
    "ttft target without slack term": (
        [TTFT], (r"^tune\.space\.ttft_target_s: acts only through the slack term .* w_slack "
                 r"is 0 and not tuned; set policy\.w_slack non-zero or tune it")),
    "w_age alone under fcfs": (
        [W_AGE], (r"^tune\.space\.w_age: the score's only term \(w_prompt, w_pred, w_slack are "
                  r"0 and not tuned\).* every value in \[0, 2\] schedules alike; set or tune "
                  r"another weight")),
    "w_age alone, all negative": (
        ["+tune.space.w_age={low: -3, high: -1}"], r"^tune\.space\.w_age: the score's only term"),
    "w_slack alone": (
        [W_SLACK, "policy=parametric", "policy.w_age=0"],
        r"^tune\.space\.w_slack: the score's only term \(w_age, w_prompt, w_pred"),
    "a weight under priority scheduling": (
        ["+tune.space.w_prompt={low: 0, high: 4}", "policy=priority"],
        r"^tune\.space\.w_prompt: the priority score is not read under policy\.order=priority"),
    "ttft target under priority scheduling": (
        [TTFT, W_SLACK, "policy=priority"], r"^tune\.space\.ttft_target_s: .*order=priority"),
    "a network under priority scheduling": (
        ["tune.policy_family=neural", "policy=priority"],
        (r"^tune\.policy_family: neural: the priority score is not read under "
         r"policy\.order=priority")),
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
