"""Damaged, foreign and mismatched tuning checkpoints: a CheckpointError naming the file and
what is wrong, never a traceback (issue 23 item 2); a checkpoint holding NaN or infinities is
strict JSON that reads back bit for bit. No simulation runs here."""

import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from servetune.errors import CheckpointError
from servetune.tuning import checkpoint

THETA = np.array([0.25, -1.5])


def _good(tmp_path):
    opt = optax.adam(0.1).init(jnp.asarray(THETA))
    state = {"iteration": 2, "theta": THETA, "lambda": 1.0, "history": [{"iteration": 0}],
             "best": None, "best_values": None, "scenarios": 10, "fingerprint": "abc",
             "problem": {"tune.optimizer": '"adam"'}}
    checkpoint.save(tmp_path, state, opt)
    return (tmp_path / checkpoint.NAME), opt


def test_a_checkpoint_round_trips(tmp_path):
    path, opt = _good(tmp_path)
    state, opt_back = checkpoint.load(tmp_path, opt)
    np.testing.assert_array_equal(state["theta"], THETA)
    assert state["iteration"] == 2 and json.loads(path.read_text())["format"] == checkpoint.FORMAT
    for a, b in zip(jax.tree.leaves(opt), jax.tree.leaves(opt_back)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


DAMAGE = {  # name -> (bytes written over the checkpoint given its good bytes, message pattern)
    "empty": (lambda good: b"", r"is empty"),
    "blank": (lambda good: b"  \n", r"is empty"),
    "truncated": (lambda good: good[: len(good) // 2], r"is truncated or corrupt JSON \(line 1"),
    "corrupt": (lambda good: b"{iteration: 2,,}", r"is truncated or corrupt JSON"),
    "binary": (lambda good: bytes(range(128, 256)), r"is binary, not a JSON checkpoint"),
    "gzip": (lambda good: b"\x1f\x8b\x08\x00" + good[:20], r"is binary"),
    "a list": (lambda good: b"[1, 2, 3]", r"holds a JSON list; expected a checkpoint object"),
    "newer format": (lambda good: good.replace(b'"format": 3', b'"format": 7'),
                     r"has checkpoint format 7; this servetune reads formats 2 and 3"),
    "format 1": (lambda good: good.replace(b', "format": 3', b''),
                 r"has checkpoint format 1; this servetune reads formats 2 and 3"),
    "foreign layout": (lambda good: json.dumps({"format": 2, "step": 3, "params": [1]}).encode(),
                     r"lacks iteration, theta, fingerprint, .*: an older or foreign format"),
    "bad array": (lambda good: good.replace(b'"dtype": "float64"', b'"dtype": "quux"', 1),
                  r"has a malformed array"),
}


@pytest.mark.parametrize("name", DAMAGE)
def test_a_damaged_checkpoint_is_a_clear_error(tmp_path, name):
    path, opt = _good(tmp_path)
    damage, pattern = DAMAGE[name]
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(CheckpointError, match=pattern) as err:
        checkpoint.load(tmp_path, opt)
    assert str(path) in str(err.value) and "tune.resume=false" in str(err.value)


def _refuse_constant(name):
    raise ValueError(f"bare {name} in strict JSON")


NON_FINITE = {"iteration": 1, "theta": np.array([math.inf, -math.inf, math.nan]),
              "lambda": 0.0, "history": [{"iteration": 0, "tokens_per_dollar": math.inf,
                                          "grad_norm": math.nan, "lagrangian": -math.inf}],
              "best": {"objective": 1.0, "useful_tokens_per_dollar": np.float32("nan")},
              "best_values": {"queue_cap": math.inf, "score_net": [0.5, -math.inf]},
              "scenarios": 3, "fingerprint": "abc", "problem": {"k": '"Infinity"'}}


def test_non_finite_floats_are_strict_json_and_read_back(tmp_path):
    """NaN and infinities (price 0 gives infinite tokens per dollar) are tagged, not bare."""
    opt = optax.adam(0.1).init(jnp.zeros(3))
    path = checkpoint.save(tmp_path, NON_FINITE, opt)
    text = path.read_text()
    json.loads(text, parse_constant=_refuse_constant)  # strict: no NaN, Infinity
    doc = checkpoint.read(tmp_path)
    assert doc["problem"] == {"k": '"Infinity"'}  # strings are left alone
    row = doc["history"][0]
    assert row["tokens_per_dollar"] == math.inf and row["lagrangian"] == -math.inf
    assert math.isnan(row["grad_norm"]) and math.isnan(doc["best"]["useful_tokens_per_dollar"])
    assert doc["best_values"] == {"queue_cap": math.inf, "score_net": [0.5, -math.inf]}
    np.testing.assert_array_equal(checkpoint._array(doc["theta"]), NON_FINITE["theta"])


def test_a_format_2_checkpoint_with_bare_constants_still_reads(tmp_path):
    path, _ = _good(tmp_path)
    doc = json.loads(path.read_text())
    doc.update(format=2, history=[{"iteration": 0, "x": math.nan, "y": math.inf}])
    path.write_text(json.dumps(doc))  # NaN, Infinity as servetune wrote them before format 3
    row = checkpoint.read(tmp_path)["history"][0]
    assert math.isnan(row["x"]) and row["y"] == math.inf


def test_another_optimizers_state_is_a_clear_error(tmp_path):
    _, _ = _good(tmp_path)  # adam: count, mu, nu
    sgd = optax.sgd(0.1).init(jnp.asarray(THETA))
    with pytest.raises(CheckpointError, match=r"has optimizer state of 3 arrays .* this run's "
                                              r"optimizer has 0"):
        checkpoint.load(tmp_path, sgd)


def test_a_folder_in_place_of_the_checkpoint_is_a_clear_error(tmp_path):
    (tmp_path / checkpoint.NAME).mkdir()
    with pytest.raises(CheckpointError, match=r"checkpoint.json: is not a regular file"):
        checkpoint.read(tmp_path)


def test_no_checkpoint_is_none(tmp_path):
    assert checkpoint.read(tmp_path) is None
