"""The Python API: keyword settings go through the same config reader as
Hydra strings, a result prints as one short line, and every scenario's requests come back as
one table with the seed and grid values that made them."""

import math

import pandas as pd
import pytest

import servetune
from servetune.config.overrides import to_overrides, value_text
from servetune.core.errors import ConfigError
from servetune.run import api

SHORT = {"duration_s": 4, "rate": 6}


# ---- keyword settings -> override strings (no Hydra, no JAX)


def test_a_dict_gives_one_override_per_leaf_in_order():
    got = to_overrides(
        {
            "workload": "poisson",
            "policy": {"max_num_seqs": 64, "queue_cap": None},
            "slo": {"ttft_s": 1.5},
            "seeds": 2,
        }
    )
    assert got == [
        "workload=poisson",
        "policy.max_num_seqs=64",
        "policy.queue_cap=null",
        "slo.ttft_s=1.5",
        "seeds=2",
    ]


def test_nested_dicts_and_dotted_keys_give_the_same_override():
    nested = to_overrides({"workload": {"predictor": {"sigma": 0.5}}})
    dotted = to_overrides({"workload.predictor.sigma": 0.5})
    assert nested == dotted == ["workload.predictor.sigma=0.5"]


@pytest.mark.parametrize(
    "value,text",
    [
        (True, "true"),
        (False, "false"),
        (None, "null"),
        (3, "3"),
        (2.5, "2.5"),
        (1e-7, "1e-07"),
        (math.inf, "inf"),
        (-math.inf, "-inf"),
        (math.nan, "nan"),
        ([64, 128], "[64,128]"),
        ((1, 2.0), "[1,2.0]"),
        ("poisson", "poisson"),
        ("a b", "'a b'"),
        ("true", "'true'"),
        ("10", "'10'"),
        ("it's", '"it\'s"'),
        ("", "''"),
    ],
)
def test_values_are_written_in_hydras_grammar(value, text):
    assert value_text("k", value) == text


def test_numpy_scalars_and_paths_are_plain_values(tmp_path):
    np = pytest.importorskip("numpy")
    assert value_text("k", np.int32(7)) == "7"
    assert value_text("k", np.float64(0.25)) == "0.25"
    assert value_text("k", tmp_path) in (str(tmp_path), f"'{tmp_path}'")


@pytest.mark.parametrize(
    "settings,match",
    [
        ({"policy": {"max_num_seqs": object()}}, r"^policy\.max_num_seqs: got a object"),
        ({"policy": {"bad key": 1}}, r"^policy: the key 'bad key' is not a config key"),
        ({"workload": {"path": "a'b\"c"}}, r"^workload\.path: the string .* has both quote kinds"),
    ],
)
def test_values_no_config_can_hold_are_refused_by_key(settings, match):
    with pytest.raises(ConfigError, match=match):
        to_overrides(settings)


# ---- compose: the keyword form reads the config exactly as the string form does


def test_keyword_settings_compose_the_same_config_as_strings():
    strings = api.compose(
        ["workload=poisson", "policy.max_num_seqs=64", "seeds=2", "workload.duration_s=4"]
    )
    keywords = api.compose(
        workload="poisson", policy={"max_num_seqs": 64}, seeds=2, **{"workload.duration_s": 4}
    )
    assert strings == keywords


def test_a_bad_keyword_setting_fails_as_its_override_does():
    with pytest.raises(ConfigError, match=r"^policy\.max_num_sqs"):
        api.compose(policy={"max_num_sqs": 64})


def test_a_single_string_is_refused_with_the_list_it_meant():
    with pytest.raises(ConfigError, match=r"got the string 'seeds=2'; expected a list"):
        api.compose("seeds=2")


def test_keyword_settings_cannot_amend_a_composed_config():
    cfg = api.compose(["workload=poisson"])
    with pytest.raises(ConfigError, match=r"^seeds: keyword settings apply to overrides"):
        api.simulate(cfg, seeds=2)


# ---- a small batch through the public API


@pytest.fixture(scope="module")
def batch():
    return servetune.simulate(
        workload="poisson",
        policy={"max_num_seqs": 64},
        seeds=2,
        grid={"max_num_batched_tokens": [512, 2048]},
        **{f"workload.{k}": v for k, v in SHORT.items()},
    )


def test_the_keyword_batch_is_seeds_by_grid_points(batch):
    assert len(batch.metrics) == len(batch.requests) == len(batch.table) == 4
    assert list(batch.table["seed"]) == [0, 0, 1, 1]
    assert list(batch.table["policy.max_num_batched_tokens"]) == [512, 2048, 512, 2048]


def test_the_repr_is_one_line_naming_the_batch_and_its_ranges(batch):
    text = repr(batch)
    assert "\n" not in text and len(text) < 400
    assert text.startswith(
        "SimulationResult(4 scenario(s): 2 seed(s) x 2 grid point(s) over "
        "max_num_batched_tokens; workload poisson, "
    )
    low, high = batch.table["goodput_rps"].min(), batch.table["goodput_rps"].max()
    assert f"goodput_rps in [{low:.4g}, {high:.4g}]" in text


def test_the_requests_table_stacks_every_scenario_with_its_keys(batch):
    frame = batch.requests_table()
    assert list(frame.columns[:3]) == ["scenario", "seed", "policy.max_num_batched_tokens"]
    assert len(frame) == sum(len(r) for r in batch.requests)
    for k, req in enumerate(batch.requests):
        rows = frame[frame["scenario"] == k]
        assert (rows["seed"] == batch.table["seed"][k]).all()
        assert (
            rows["policy.max_num_batched_tokens"] == batch.table["policy.max_num_batched_tokens"][k]
        ).all()
        pd.testing.assert_frame_equal(
            rows[req.columns].reset_index(drop=True), req.reset_index(drop=True)
        )


def test_one_scenario_reprs_its_figures_not_ranges():
    one = servetune.simulate(workload="poisson", **{f"workload.{k}": v for k, v in SHORT.items()})
    text = repr(one)
    assert "1 scenario(s): 1 seed(s) x 1 grid point(s);" in text
    assert f"goodput_rps={one.table['goodput_rps'][0]:.4g}" in text


def test_a_failing_override_is_named_with_the_ones_before_it_applied():
    # workload.n_requests exists only once workload=poisson is chosen: the one that fails is
    # the dict value with a key poisson's prompt section lacks
    with pytest.raises(ConfigError, match=r"^workload\.prompt: "):
        api.compose(
            ["workload=poisson", "workload.n_requests=1", "workload.prompt={dist: fixed, value: 5}"]
        )


def test_none_is_no_overrides_and_other_types_are_refused():
    assert api.compose(None) == api.compose([])
    with pytest.raises(ConfigError, match=r"^overrides: got 5; expected a list of strings"):
        api.compose(5)
    with pytest.raises(ConfigError, match=r"^overrides: got \[1\]; expected a list of strings"):
        api.compose([1])


def test_a_string_setting_is_the_literal_text_not_an_interpolation():
    cfg = api.compose(workload="poisson", **{"workload.name": "${oc.env:HOME}/x"})
    assert cfg.workload.name == "${oc.env:HOME}/x"
    assert value_text("k", "${seed}") == "'\\${seed}'"
