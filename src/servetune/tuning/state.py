"""The tuner's state between iterations, as one typed record that the checkpoint serializes
(tuning/checkpoint.py: its JSON keys are the field names, `lam` written as "lambda")."""

from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass
class TunerState:
    """Where a tuning run stands after `iteration` iterations.

    theta: the current point [d] in the search space's coordinates; lam: the SLO constraint's
    multiplier (>= 0); history: one history.csv row per iteration so far; best / best_values:
    the best point's summary and policy values (None before the first iteration); visited:
    the points scored so far that the choice of the tuned point reads (recommend.keep's, best
    first; a checkpoint written before they were recorded resumes with none); scenarios:
    simulations run so far; problem / fingerprint: what the run tunes (config and data digest)
    and its hash, which a resume must match."""

    iteration: int
    theta: np.ndarray
    lam: float
    history: list[dict] = dataclasses.field(default_factory=list)
    best: dict | None = None
    best_values: dict | None = None
    visited: list[dict] = dataclasses.field(default_factory=list)
    scenarios: int = 0
    problem: dict = dataclasses.field(default_factory=dict)
    fingerprint: str = ""

    def to_checkpoint(self) -> dict:
        """The checkpoint document's fields (tuning/checkpoint.save)."""
        doc = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        doc["lambda"] = doc.pop("lam")
        return doc

    @classmethod
    def from_checkpoint(cls, doc: dict) -> TunerState:
        """The state a checked checkpoint document holds (tuning/checkpoint.unpack)."""
        fields = {f.name for f in dataclasses.fields(cls)} - {"lam"}
        return cls(lam=float(doc["lambda"]), **{k: doc[k] for k in fields if k in doc})
