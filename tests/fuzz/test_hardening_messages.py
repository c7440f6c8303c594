"""Values in error messages read as the user wrote them: `got 0`, not numpy's `array([0.])` or
`np.float64(0.0)`. No simulation runs here."""

import numpy as np
import pytest

from servetune.config import settings
from servetune.core.errors import ConfigError


@pytest.mark.parametrize(
    "value, text",
    [
        (np.array([0.0]), "0"),
        (np.float64(0.0), "0"),
        (np.array([[2.5]]), "2.5"),
        (np.array([0.0, 4.0]), "[0, 4]"),
        (np.float64("nan"), "nan"),
        (np.array([np.inf]), "inf"),
        (np.arange(10.0), "[0, 1, 2, 3, 4, 5, ... (10 values)]"),
        (np.int32(7), "7"),
        (0.0, "0.0"),  # a Python value keeps its repr: what the config holds
        ("abc", "'abc'"),
        ([1, 2], "[1, 2]"),
    ],
)
def test_a_value_is_shown_plainly(value, text):
    assert settings.shown(value) == text


@pytest.mark.parametrize(
    "value, pattern",
    [
        (np.float64(0.0), r"^policy\.max_num_seqs: got 0; expected within \[1, inf\]$"),
        (np.float64("nan"), r"^policy\.max_num_seqs: got nan; expected a finite number$"),
        (np.float64(2.5), r"^policy\.max_num_seqs: got 2\.5; expected an integer$"),
        (np.array([1.0]), r"^policy\.max_num_seqs: got 1; expected a number$"),
    ],
)
def test_check_number_shows_numpy_values_plainly(value, pattern):
    with pytest.raises(ConfigError, match=pattern):
        settings.check_number(value, "policy.max_num_seqs", lo=1, integer=True)
