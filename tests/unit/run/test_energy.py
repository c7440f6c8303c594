"""GPU energy of a run (servetune/run/energy.py): the busy-power curve, the idle draw, the
window and the prices, against closed forms on hand-built counters."""

from __future__ import annotations

import math

import numpy as np
import pytest

from servetune.run import energy


def test_busy_power_rises_from_the_memory_bound_floor_to_the_compute_bound_ceiling():
    u = np.array([0.0, 0.005, 0.03, 0.07, 0.14, 0.3, 1.0])
    p = energy.busy_power_fraction(u)
    assert p[0] == pytest.approx(energy.BUSY_FLOOR)
    assert np.all(np.diff(p) > 0) and p[-1] == pytest.approx(energy.BUSY_CEILING, abs=1e-4)
    # the B200 measurements the constants were read from (module docstring), within 0.03
    np.testing.assert_allclose(p[1:6], [0.63, 0.67, 0.76, 0.82, 0.89], atol=0.03)
    assert energy.busy_power_fraction(np.array([-1.0]))[0] == energy.BUSY_FLOOR


def test_an_instance_draws_busy_power_while_busy_and_its_idle_share_otherwise():
    # two 700 W GPUs (tp 2): 40 s busy at the curve's scale of FLOP utilization, 60 s idle
    busy, peak, tdp = 40.0, 2 * 989e12, 1400.0
    flops = energy.FLOP_SCALE * peak * busy
    j = energy.instance_energy_j(
        np.array([busy]), np.array([flops]), np.array([peak]), np.array([tdp]), 100.0, 0.1
    )
    fraction = energy.BUSY_FLOOR + (energy.BUSY_CEILING - energy.BUSY_FLOOR) * (1 - math.exp(-1))
    assert j[0] == pytest.approx(busy * tdp * fraction + 60.0 * tdp * 0.1)
    # never busy: idle all along; busy time past the simulated time is capped
    idle = energy.instance_energy_j(
        np.zeros(1), np.zeros(1), np.ones(1), np.array([tdp]), 100.0, 0.1
    )
    assert idle[0] == pytest.approx(100.0 * tdp * 0.1)
    capped = energy.instance_energy_j(
        np.array([150.0]), np.zeros(1), np.ones(1), np.array([tdp]), 100.0, 0.1
    )
    assert capped[0] == pytest.approx(100.0 * tdp * energy.BUSY_FLOOR)


def test_energy_metrics_cover_the_provisioned_window_and_price_the_kwh():
    # 3.6 MJ over 100 s of simulation (36 kW), 50 s of it provisioned after the warm-up
    m = energy.energy_metrics(3.6e6, 100.0, 50.0, 1000.0, 1.0, 0.2)
    assert m["mean_power_w"] == pytest.approx(36_000.0)
    assert m["energy_j"] == pytest.approx(1.8e6)  # half a kWh
    assert m["joules_per_useful_token"] == pytest.approx(1800.0)
    assert m["energy_cost_usd"] == pytest.approx(0.1)
    assert m["energy_cost_share"] == pytest.approx(0.1 / 1.1)
    free = energy.energy_metrics(3.6e6, 100.0, 50.0, 0.0, 0.0, 0.0)
    assert free["energy_cost_usd"] == 0.0
    assert math.isnan(free["joules_per_useful_token"]) and math.isnan(free["energy_cost_share"])
