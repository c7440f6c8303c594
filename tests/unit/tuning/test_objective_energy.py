"""The tuning objective's energy option (tune.objective.include_energy): the dollars it divides
by, and the settings it is refused with."""

import math

import pytest

from servetune.core.errors import ConfigError
from servetune.run.api import compose
from servetune.tuning.objective import Objective
from servetune.tuning.runner import settings_from_config

METRICS = {"useful_tokens": 1000.0, "cost_usd": 2.0, "energy_cost_usd": 0.5}


def test_with_energy_the_objective_divides_by_gpu_and_electricity_dollars():
    assert Objective().value(METRICS) == pytest.approx(math.log(1000 / 2.0))
    assert Objective(include_energy=True).value(METRICS) == pytest.approx(math.log(1000 / 2.5))


def test_the_tuner_weighs_energy_only_when_asked_and_priced():
    assert not settings_from_config(compose(["tune=es"])).objective.include_energy
    on = ["tune=es", "tune.objective.include_energy=true"]
    priced = settings_from_config(compose(on + ["hardware.energy_price_usd_per_kwh=0.12"]))
    assert priced.objective.include_energy
    with pytest.raises(ConfigError, match=r"^tune\.objective\.include_energy: hardware\.energy_"):
        settings_from_config(compose(on))
    with pytest.raises(ConfigError, match=r"^tune\.objective\.include_energy: the pathwise"):
        settings_from_config(
            compose(
                [
                    "tune=pathwise",
                    "+tune.objective.include_energy=true",
                    "hardware.energy_price_usd_per_kwh=0.12",
                ]
            )
        )


def test_the_sweeper_weighs_energy_with_the_same_checks():
    from servetune.tuning.sweeper import sweep_objective

    metrics = [{**METRICS, "slo_attainment": 1.0}]
    plain = sweep_objective(compose(["tune=es"]), metrics)
    on = ["tune=es", "tune.objective.include_energy=true"]
    priced = sweep_objective(compose([*on, "hardware.energy_price_usd_per_kwh=0.1"]), metrics)
    assert plain - priced == pytest.approx(math.log(2.5 / 2.0))
    with pytest.raises(ConfigError, match=r"^tune\.objective\.include_energy: hardware\."):
        sweep_objective(compose(on), metrics)
