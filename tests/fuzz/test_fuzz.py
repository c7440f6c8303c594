"""Fuzz corpus: every malformed trace and config in tests/fuzz/manifest.yaml raises its expected
ServetuneError (class and message), and nothing else escapes -- no traceback from numpy, pandas,
omegaconf or JAX. Trace cases call the loader directly; config cases only build the scenario
(no simulation), so the whole file runs in seconds."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import yaml

from servetune.config.scenario import build
from servetune.core import errors
from servetune.run.api import compose, estimate
from servetune.tuning.runner import checked_config, estimate_tuning
from servetune.workload.traces import load_trace

FUZZ = Path(__file__).parent
MANIFEST = yaml.safe_load((FUZZ / "manifest.yaml").read_text())
CLASSES = {
    "ServetuneError": errors.ServetuneError,
    "ConfigError": errors.ConfigError,
    "TraceError": errors.TraceError,
    "ResourceLimitError": errors.ResourceLimitError,
}


def _cases(section: str):
    out = []
    for entry in MANIFEST[section]:
        ident = entry.get("file") or " ".join(entry["overrides"])
        ident = re.sub(r"(\d{12})\d+", r"\1...", ident)  # keep ids short
        marks = (
            [pytest.mark.xfail(reason=entry["known_gap"], strict=False)]
            if "known_gap" in entry
            else []
        )
        out.append(pytest.param(entry, id=ident, marks=marks))
    return out


def _expect_error(call, entry, must_name: str | None = None):
    """Run `call`; it must raise exactly entry['error'] with a message matching entry['match']."""
    try:
        call()
    except errors.ServetuneError as err:
        msg = str(err)
        assert type(err).__name__ == entry["error"], f"{type(err).__name__}: {msg}"
        assert isinstance(err, CLASSES[entry["error"]])
        assert re.search(entry["match"], msg), f"message {msg!r} does not match {entry['match']!r}"
        if must_name is not None:
            assert must_name in msg, f"message {msg!r} does not name {must_name}"
        assert len(msg) < 600, f"message too long ({len(msg)} chars)"
    except Exception as err:  # noqa: BLE001 -- the point: nothing but a ServetuneError escapes
        pytest.fail(
            f"{type(err).__module__}.{type(err).__name__} escaped instead of "
            f"{entry['error']}: {err}"
        )
    else:
        pytest.fail(f"no error raised; expected {entry['error']} matching {entry['match']!r}")


@pytest.mark.parametrize("entry", _cases("traces"))
def test_trace_corpus(entry):
    path = FUZZ / entry["file"]
    if "ok" in entry:
        trace = load_trace(path)
        assert len(trace) == entry["ok"]
        assert np.all(trace.prompt >= 1) and np.all(trace.output >= 1)
        if "arrival_s" in entry:
            np.testing.assert_allclose(trace.arrival, entry["arrival_s"], atol=1e-6)
        return
    _expect_error(lambda: load_trace(path), entry, must_name=str(path))


def _overrides(entry) -> list[str]:
    return [o.replace("{fuzz}", str(FUZZ)) for o in entry["overrides"]]


@pytest.mark.parametrize("entry", _cases("configs"))
def test_config_corpus(entry):
    _expect_error(lambda: build(compose(_overrides(entry))), entry)


@pytest.mark.parametrize("entry", _cases("tune"))
def test_tune_config_corpus(entry):
    _expect_error(lambda: checked_config(compose(_overrides(entry))), entry)


@pytest.fixture
def fresh_record(tmp_path, monkeypatch):
    """The guard's estimates from the model alone: no record of this machine's runs."""
    monkeypatch.setenv("SERVETUNE_PACE_FILE", str(tmp_path / "record.json"))


@pytest.mark.parametrize("entry", _cases("guard"))
def test_guard_corpus(entry, fresh_record):
    """Runs the resource guard refuses (run/guard.py): estimated, never simulated."""
    _expect_error(lambda: estimate(compose(_overrides(entry))), entry)


@pytest.mark.parametrize("entry", _cases("guard_tune"))
def test_guard_tune_corpus(entry, fresh_record, tmp_path):
    """Tuning runs the resource guard refuses before their first simulation."""
    _expect_error(lambda: estimate_tuning(compose(_overrides(entry)), out_dir=tmp_path), entry)


def test_corpus_is_complete():
    files = {p.relative_to(FUZZ).as_posix() for p in (FUZZ / "traces").iterdir()}
    listed = [e["file"] for e in MANIFEST["traces"]]
    assert len(listed) == len(set(listed)), "a trace is listed twice"
    assert files == set(listed), f"unlisted: {files - set(listed)}; missing: {set(listed) - files}"
    errors_expected = [
        e
        for s in ("traces", "configs", "tune", "guard", "guard_tune")
        for e in MANIFEST[s]
        if "error" in e
    ]
    assert len(errors_expected) >= 50
    for e in errors_expected:
        assert e["error"] in CLASSES
        re.compile(e["match"])
