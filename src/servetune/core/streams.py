"""Every random stream of the host-side draws of a scenario, in one table. A draw for scenario
seed s from stream k is numpy's `default_rng([s, k])`: the streams are independent of each
other, so switching one mechanism on moves no other mechanism's draws, and every draw is fixed
per (request, seed) whatever the policy (paired comparisons). The engine's own draws on device
(speculative acceptance, power-of-two routing) are counter-based on the scenario's salt
(engine/speculation.py).

Four generators are outside the table on purpose (tests/architecture/test_layout.py lists them): the
synthetic arrival process, `default_rng(seed)` (workload/traces.py: every synthetic trace and
golden was drawn from it), the ES perturbations, `default_rng([seed, iteration])`
(tuning/estimators/es.py), and three that are not part of a scenario: the report's bootstrap
(reporting/stats.py), the tuner's bootstrap of a CVaR difference (tuning/evaluation.py, seeded
by the scenario count) and the made-up token ids sent to a real vLLM (validate/oracle.py,
validate/observe.py)."""

from __future__ import annotations

import numpy as np

PREDICTOR = 7919  # output-length predictor noise (workload.predict_output)
PATIENCE = 104729  # client patience: when a request gives up (workload.with_abandonment)
KV_COMPRESS = 7177  # a compressed request's quality check (engine.kv_compress_fail_prob)
QUALITY_U = 0x51A1  # the quality check's uniform draw (quality.draws)
DIFFICULTY = 0x51A2  # drawn request difficulty (quality.DifficultySpec)
CASCADE_PRED = 0x51A3  # the cascade router's predictor noise (cascade_config.with_draws)
REPLICA_SHIFT = 9001  # replicas: the window start's shift
REPLICA_BLOCKS = 9002  # replicas: block bootstrap of arrival windows
REPLICA_RATE = 9003  # replicas: thinning and superposition
REPLICA_LENGTHS = 9004  # replicas: length resampling within classes
RATE_CURVE = 9005  # rate curve: superposed copies and thinning (workload/rate_curve.py)
RATE_CURVE_TILES = 9006  # rate curve: the offsets of the slice's repeats

ALL = {name: value for name, value in globals().items() if name.isupper()}


def rng(seed: int, stream: int) -> np.random.Generator:
    """The generator of `stream` (one of this module's constants) for scenario seed `seed`."""
    return np.random.default_rng([seed, stream])
