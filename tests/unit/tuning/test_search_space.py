"""The tuner's search space: it covers vLLM's defaults, and every point it maps to passes vLLM's
own startup checks (vllm/config/scheduler.py, vLLM 0.32), in the exact and the relaxed map."""

import dataclasses
import math

import jax.numpy as jnp
import numpy as np
import pytest
from omegaconf import OmegaConf

from servetune.config.policy import DEFAULTS
from servetune.deploy import export
from servetune.run.api import compose
from servetune.tuning.estimators.pathwise_gradient import PointMap
from servetune.tuning.space import Constraints, constraints_for, space_from_config

WIDE = {
    "max_num_seqs": {"low": 8, "high": 1536, "scale": "log"},
    "max_num_batched_tokens": {"low": 16, "high": 32768, "scale": "log"},
    "max_num_active_seqs": {"low": 1, "high": 2048, "scale": "log"},
    "long_prefill_token_threshold": {"low": 64, "high": 65536, "scale": "log"},
}


def _space(spec, **constraints):
    space = space_from_config(spec)
    return dataclasses.replace(space, constraints=Constraints(**constraints))


def _random_points(space, n=2000, seed=0):
    return np.random.default_rng(seed).normal(0.0, 3.0, (n, space.size))


@pytest.mark.parametrize("estimator", ["es", "pathwise"])
def test_the_shipped_spaces_start_exactly_at_vllms_defaults(estimator):
    spec = OmegaConf.to_container(compose([f"tune={estimator}"]).tune.space)
    space = space_from_config(spec)
    start = space.values(space.point(DEFAULTS))
    assert start["max_num_seqs"] == 1024 and start["max_num_batched_tokens"] == 8192
    assert space_from_config(spec).dims[0].high >= 1024
    # the knobs vLLM 0.32 added are listed (null: not tuned unless given a range)
    if estimator == "es":
        assert {"max_num_queued_tokens", "long_prefill_token_threshold"} <= set(spec)


def test_a_knob_that_is_off_starts_at_the_top_of_its_range():
    space = _space(
        {
            "long_prefill_token_threshold": WIDE["long_prefill_token_threshold"],
            "max_num_queued_tokens": {"low": 4096, "high": 1 << 22, "scale": "log"},
        }
    )
    start = space.values(
        space.point({"long_prefill_token_threshold": 0.0, "max_num_queued_tokens": math.inf})
    )
    for dim in space.dims:  # where a start at the range's top lands (just inside it)
        assert start[dim.key] == dim.value(dim.coordinate(dim.high)) > dim.high / 2


@pytest.mark.parametrize("chunked", [True, False])
def test_every_point_passes_vllms_checks(chunked):
    space = _space(WIDE, max_model_len=4096, chunked_prefill=chunked)
    v = space.values(_random_points(space))
    budget, seqs = v["max_num_batched_tokens"], v["max_num_seqs"]
    assert (budget >= seqs).all()
    assert (budget >= 4096).all() if not chunked else (budget < seqs * 1.0001).any()
    assert (v["max_num_active_seqs"] <= seqs).all()
    assert (v["long_prefill_token_threshold"] <= 4096).all()
    # the engine and the exporter floor the limits: the floors pass too, and vLLM's refusal
    # that the exporter warns of never comes up
    engine = {"chunked_prefill": chunked, "max_model_len": 4096}
    for k in range(0, len(seqs), 97):
        point = {**DEFAULTS, **{key: float(arr[k]) for key, arr in v.items()}}
        assert export.vllm_warnings(export.vllm_args(point, engine, "fcfs")) == []


def test_the_projection_leaves_feasible_points_alone_and_is_idempotent():
    space = _space(WIDE, max_model_len=4096, chunked_prefill=False)
    raw = {d.key: d.value(z) for d, z in zip(space.dims, _random_points(space).T, strict=True)}
    once = space.constraints.apply(raw)
    twice = space.constraints.apply(once)
    for key in raw:
        np.testing.assert_array_equal(once[key], twice[key])
        feasible = (
            (raw["max_num_batched_tokens"] >= np.maximum(raw["max_num_seqs"], 4096))
            & (raw["max_num_active_seqs"] <= raw["max_num_seqs"])
            & (raw["long_prefill_token_threshold"] <= 4096)
        )
        np.testing.assert_array_equal(once[key][feasible], raw[key][feasible])


def test_untuned_limits_bound_the_tuned_ones():
    # the budget fixed at 256: a tuned max_num_seqs stays at or below it
    seqs_only = {"max_num_seqs": WIDE["max_num_seqs"]}
    space = dataclasses.replace(
        space_from_config(seqs_only),
        constraints=constraints_for(
            {
                "max_num_seqs": 1024.0,
                "max_num_batched_tokens": 256.0,
                "max_num_active_seqs": math.inf,
            },
            8192,
            True,
        ),
    )
    assert space.values(_random_points(space))["max_num_seqs"].max() == 256
    # max_num_active_seqs fixed at 32: a tuned max_num_seqs stays at or above it
    space = dataclasses.replace(
        space,
        constraints=constraints_for(
            {"max_num_batched_tokens": 8192.0, "max_num_active_seqs": 32.0}, 8192, True
        ),
    )
    assert space.values(_random_points(space))["max_num_seqs"].min() == 32
    # max_num_seqs fixed at 64: a tuned budget never goes below it
    budget_only = {"max_num_batched_tokens": WIDE["max_num_batched_tokens"]}
    space = dataclasses.replace(
        space_from_config(budget_only),
        constraints=constraints_for(
            {"max_num_seqs": 64.0, "max_num_batched_tokens": 8192.0}, 8192, True
        ),
    )
    assert space.values(_random_points(space))["max_num_batched_tokens"].min() == 64


def test_the_relaxed_map_is_the_exact_map():
    space = _space(WIDE, max_model_len=4096, chunked_prefill=False)
    point_map = PointMap(space.dims, space.constraints)
    hash(point_map)  # a static argument of the compiled relaxed runs
    for z in _random_points(space, n=20, seed=1):
        exact = space.values(z)
        relaxed = point_map.values(jnp.asarray(z))
        for key in exact:
            np.testing.assert_allclose(float(relaxed[key]), float(exact[key]), rtol=1e-9)


def test_a_key_without_a_scale_takes_the_policy_tables():
    space = space_from_config(
        {"max_num_seqs": {"low": 8, "high": 1024}, "watermark": {"low": 0.0, "high": 0.1}}
    )
    scales = {d.key: d.scale for d in space.dims}
    assert scales == {"max_num_seqs": "log", "watermark": "linear"}
    # halfway in z is the geometric mean on a log scale, not the arithmetic one
    seqs = next(d for d in space.dims if d.key == "max_num_seqs")
    assert float(seqs.value(0.0)) == pytest.approx(math.sqrt(8 * 1024))


def test_a_default_log_scale_with_a_zero_low_names_the_default_and_the_way_out():
    with pytest.raises(
        Exception,
        match=r"tune.space.queue_cap.low: got 0.0; a log scale "
        r"\(policy.queue_cap's default scale\) needs low > 0 \(or scale: linear\)",
    ):
        space_from_config({"queue_cap": {"low": 0, "high": 64}})
    linear = space_from_config({"queue_cap": {"low": 0, "high": 64, "scale": "linear"}})
    assert linear.dims[0].scale == "linear"
