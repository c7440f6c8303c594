"""api.check_invariants: a scenario whose in-loop invariant flag was set is a SimulationError
naming the scenario and the invariant (core/errors.INVARIANTS); a clean batch passes."""

from types import SimpleNamespace

import numpy as np
import pytest

from servetune.core.errors import INVARIANTS, SimulationError
from servetune.run.api import check_invariants


def _result(**flags):
    stats = {"kv_overflow": np.zeros(2, bool), "clock_regress": np.zeros(2, bool)}
    stats["stalled"] = np.asarray(False)
    stats.update({k: np.asarray(v) for k, v in flags.items()})
    return SimpleNamespace(stats=stats)


def test_a_clean_batch_passes():
    check_invariants([[_result(), _result()], [_result(), _result()]])


@pytest.mark.parametrize(
    "flag, value",
    [("kv_overflow", [False, True]), ("clock_regress", [True, False]), ("stalled", True)],
)
def test_each_breach_names_its_scenario_and_invariant(flag, value):
    results = [[_result(), _result()], [_result(), _result(**{flag: value})]]
    with pytest.raises(SimulationError, match=rf"seed #1, grid point #1\): {INVARIANTS[flag]}$"):
        check_invariants(results)
