"""Wrong types through the Python keywords, the tuner's arguments and the command line end in
an error naming the key and what it takes, never a traceback ("uncaught
exceptions"): the root fix is one check where each kind of value enters (overrides.py for
keywords naming a config group, suggest.check_overrides for the command line,
split_overrides.workload_lists for tune.workloads, tuning.tune for its own arguments)."""

import subprocess
import sys

import pytest

import servetune
from servetune.core.errors import ConfigError
from servetune.tuning import tune
from servetune.tuning.runner import checked_config


@pytest.mark.parametrize(
    "settings, match",
    [
        (
            {"policy": [1, 2]},
            (
                r"policy: got \[1, 2\]; expected the name of a policy option \(.*"
                r"vllm_default.*\) or a dict of policy\.\* fields"
            ),
        ),
        ({"workload": 5}, r"workload: got 5; expected the name of a workload option"),
        ({"model": (8, 70)}, r"model: got \(8, 70\); expected the name of a model option"),
        ({"hardware": None}, r"hardware: got None; expected the name of a hardware option"),
    ],
)
def test_a_group_keyword_of_another_type_is_refused_by_key(settings, match):
    with pytest.raises(ConfigError, match=match):
        servetune.compose(**settings)


@pytest.mark.parametrize("value", ["[1,2]", "{a:1}", "[vllm_default]"])
def test_a_group_given_a_list_on_the_command_line_exits_2_naming_it(value):
    proc = subprocess.run(
        [sys.executable, "-m", "servetune.cli.main", "simulate", f"policy={value}"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"error: policy: got {value}; expected the name of a policy option" in proc.stderr


@pytest.mark.parametrize(
    "value, match",
    [
        ("5", r"tune.workloads: got 5; expected a list of override lists"),
        ("abc", r"tune.workloads: got 'abc'; expected a list of override lists"),
        ("[1]", r"tune.workloads\[0\]: got 1; expected a list of overrides"),
        ("[[3]]", r"tune.workloads\[0\]: got 3; expected overrides like 'workload.start_s=1200'"),
    ],
)
def test_tune_workloads_of_another_shape_is_refused_by_key(value, match):
    with pytest.raises(ConfigError, match=match):
        checked_config(servetune.compose([f"tune.workloads={value}"]))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"out_dir": 5}, r"out_dir: got 5; expected a folder path"),
        ({"out_dir": None}, r"out_dir: got None; expected a folder path"),
        ({"out_dir": "  "}, r"out_dir: got '  '; expected a folder path"),
        ({"cfg": "workload=poisson"}, r"cfg: got 'workload=poisson'; expected a composed config"),
        ({"cfg": 7}, r"cfg: got 7; expected a composed config or a list of overrides"),
    ],
)
def test_the_tuners_own_arguments_are_checked_first(kwargs, match, tmp_path):
    args = {"cfg": ["workload=poisson"], "out_dir": tmp_path, **kwargs}
    with pytest.raises(ConfigError, match=match):
        tune(args.pop("cfg"), **args)


@pytest.mark.parametrize(
    "override, message",
    [
        (
            "+workload.replicas.blocks_s=30",
            (
                "+workload.replicas.blocks_s: no such key under any "
                "workload option, so nothing would read it; did you "
                "mean workload.replicas.block_s"
            ),
        ),
        ("+tune.eval.seed=3", "+tune.eval.seed: no such key under any tune option"),
        (
            "+workload.predictor.sigm=0.5",
            ("+workload.predictor.sigm: no such key under any workload option"),
        ),
    ],
)
def test_an_added_key_nothing_reads_is_refused_like_an_unknown_one(override, message):
    """Unknown +workload.replicas.* keys were accepted where +policy.* are refused;
    from Python keywords (api.compose) and the command line alike."""
    with pytest.raises(ConfigError, match=message.replace("+", r"\+").replace(".", r"\.")):
        servetune.compose([override])
    proc = subprocess.run(
        [sys.executable, "-m", "servetune.cli.main", "simulate", override],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2 and message in proc.stderr


@pytest.mark.parametrize(
    "override",
    [
        "+workload.replicas.block_s=30",
        "+workload.prompt.value=5",
        "+tune.space.w_age={low: 0, high: 1}",
        "+policy.score_net=[0.5]",
    ],
)
def test_added_keys_that_are_read_still_compose(override):
    assert servetune.compose(["workload=poisson", override]) is not None


@pytest.mark.parametrize(
    "override",
    ["tune.dual.learning_rate=1e300", "tune.dual.lambda_init=1e300", "tune.dual.lambda_init=inf"],
)
def test_a_multiplier_that_would_overflow_is_refused_by_key(override):
    """history.csv held lambda = inf after a huge dual step."""
    key = override.split("=")[0]
    expected = r"a finite number" if "inf" in override else r"within \[0, 1000000000.0\]"
    with pytest.raises(ConfigError, match=rf"{key}: got .*; expected {expected}"):
        checked_config(servetune.compose([override]))


@pytest.mark.parametrize("value", ["1e300", "2e9", "inf"])
def test_a_drain_limit_beyond_any_run_is_refused(value):
    """window.drain_s=1e300 was accepted (durations are bounded at 1e9 s)."""
    from servetune.config.scenario import build

    with pytest.raises(ConfigError, match=r"window.drain_s: got .*; expected"):
        build(
            servetune.compose(
                ["workload=poisson", "workload.duration_s=5", f"window.drain_s={value}"]
            )
        )
