"""The neural score's flat weights as a policy gives them (policy.score_net): a list of numbers,
or the path of a score_net.json that `servetune tune` exported, checked against the features
this servetune computes (neural.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from servetune.core import inputs
from servetune.core.errors import ConfigError
from servetune.engine.neural import FEATURE_NAMES, hidden_of


def load(value) -> np.ndarray:
    """Flat weights from a list of numbers or the path of an exported score_net.json."""
    if isinstance(value, (str, Path)):
        path = Path(value)
        try:
            doc = json.loads(inputs.read_bytes(path, "score_net.json", ConfigError))
        except ConfigError as err:
            raise ConfigError(f"policy.score_net: {err}") from None
        except ValueError as err:
            raise ConfigError(f"policy.score_net: cannot read {path}: {err}") from None
        if not isinstance(doc, dict):
            raise ConfigError(
                f"policy.score_net: {path} holds a JSON {type(doc).__name__}; "
                f"expected the object `servetune tune` exports"
            )
        if list(doc.get("features", {}).get("names", [])) != list(FEATURE_NAMES):
            raise ConfigError(
                f"policy.score_net: {path} has features "
                f"{doc.get('features', {}).get('names')}; this servetune "
                f"computes {list(FEATURE_NAMES)}"
            )
        value = doc.get("flat")
    try:
        w = np.asarray(value, np.float64)
    except (TypeError, ValueError):
        raise ConfigError(
            f"policy.score_net: got {value!r}; expected a list of numbers or "
            f"the path of a score_net.json"
        ) from None
    if w.ndim < 1 or not np.isfinite(w).all():
        raise ConfigError(f"policy.score_net: expected finite numbers, got shape {w.shape}")
    hidden_of(w.shape[-1])
    return w
