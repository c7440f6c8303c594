"""api.check_invariants and core/errors.breaches: a scenario whose error code has an invariant's
bit set is a SimulationError naming the scenario and the invariant (core/errors.INVARIANTS); a
clean batch passes; statistics.breach sets exactly the bits of the checks that failed."""

from types import SimpleNamespace

import jax.numpy as jnp
import numpy as np
import pytest

from servetune.core.errors import (
    CLOCK_REGRESS,
    INVARIANTS,
    KV_OVERFLOW,
    STALLED,
    SimulationError,
    breaches,
)
from servetune.engine.statistics import breach
from servetune.run.api import check_invariants


def _result(code=0):
    return SimpleNamespace(stats={"invariants": np.asarray(code, np.int32)})


def test_a_clean_batch_passes():
    check_invariants([[_result(), _result()], [_result(), _result()]])


@pytest.mark.parametrize("bit", [KV_OVERFLOW, CLOCK_REGRESS, STALLED])
def test_each_breach_names_its_scenario_and_invariant(bit):
    results = [[_result(), _result()], [_result(), _result(bit)]]
    with pytest.raises(SimulationError, match=rf"seed #1, grid point #1\): {INVARIANTS[bit]}$"):
        check_invariants(results)


def test_the_bits_are_distinct_and_a_code_reads_back_as_its_messages():
    assert sorted(INVARIANTS) == [1, 2, 4]
    assert breaches(0) == []
    both = KV_OVERFLOW | STALLED
    assert breaches(np.asarray(both)) == [INVARIANTS[KV_OVERFLOW], INVARIANTS[STALLED]]


def test_breach_sets_only_the_bits_of_failed_checks_and_keeps_earlier_ones():
    code = jnp.asarray(CLOCK_REGRESS, jnp.int32)
    out = breach(code, (KV_OVERFLOW, jnp.asarray(False)), (STALLED, jnp.asarray(True)))
    assert int(out) == CLOCK_REGRESS | STALLED and out.dtype == jnp.int32
