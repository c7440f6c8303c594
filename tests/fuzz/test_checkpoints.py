"""Damaged, foreign and mismatched tuning checkpoints: a CheckpointError naming the file and
what is wrong, never a traceback; a checkpoint holding NaN or infinities is
strict JSON that reads back bit for bit. No simulation runs here."""

import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from servetune.core.errors import CheckpointError
from servetune.tuning import checkpoint

THETA = np.array([0.25, -1.5])
SHAPES = {"theta": THETA.shape}
VALUES = {"max_num_seqs": 64.0, "queue_cap": math.inf}


def _good(tmp_path):
    opt = optax.adam(0.1).init(jnp.asarray(THETA))
    state = {
        "iteration": 2,
        "theta": THETA,
        "lambda": 1.0,
        "history": [{"iteration": 0}, {"iteration": 1}],
        "best": {"objective": 3.5, "violation": 0.0, "useful_tokens_per_dollar": math.inf},
        "best_values": VALUES,
        "scenarios": 10,
        "fingerprint": "abc",
        "problem": {"tune.optimizer": '"adam"'},
    }
    checkpoint.save(tmp_path, state, opt)
    return (tmp_path / checkpoint.NAME), opt


def test_a_checkpoint_round_trips(tmp_path):
    path, opt = _good(tmp_path)
    state, opt_back = checkpoint.load(tmp_path, opt, SHAPES, value_keys=VALUES)
    np.testing.assert_array_equal(state["theta"], THETA)
    assert state["iteration"] == 2 and json.loads(path.read_text())["format"] == checkpoint.FORMAT
    for a, b in zip(jax.tree.leaves(opt), jax.tree.leaves(opt_back), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


DAMAGE = {  # name -> (bytes written over the checkpoint given its good bytes, message pattern)
    "empty": (lambda good: b"", r"is empty"),
    "blank": (lambda good: b"  \n", r"is empty"),
    "truncated": (lambda good: good[: len(good) // 2], r"is truncated or corrupt JSON \(line 1"),
    "corrupt": (lambda good: b"{iteration: 2,,}", r"is truncated or corrupt JSON"),
    "binary": (lambda good: bytes(range(128, 256)), r"is binary, not a JSON checkpoint"),
    "gzip": (lambda good: b"\x1f\x8b\x08\x00" + good[:20], r"is binary"),
    "a list": (lambda good: b"[1, 2, 3]", r"holds a JSON list; expected a checkpoint object"),
    "newer format": (
        lambda good: good.replace(b'"format": 4', b'"format": 7'),
        r"has checkpoint format 7; this servetune reads formats 2, 3, 4",
    ),
    "format 1": (
        lambda good: good.replace(b', "format": 4', b""),
        r"has checkpoint format 1; this servetune reads formats 2, 3, 4",
    ),
    "foreign layout": (
        lambda good: json.dumps({"format": 2, "step": 3, "params": [1]}).encode(),
        r"lacks iteration, theta, lambda, fingerprint, .*: an older or foreign",
    ),
    "bad array": (
        lambda good: good.replace(b'"dtype": "float64"', b'"dtype": "quux"', 1),
        r"has a malformed array",
    ),
}


def _edit(change):
    """Damage: the good checkpoint's JSON document changed by change(doc) (in place)."""

    def damage(good: bytes) -> bytes:
        doc = json.loads(good)
        change(doc)
        return json.dumps(doc).encode()

    return damage


def _theta(data):
    return lambda doc: doc["theta"].update(data=data, shape=[len(data)])


# well-formed JSON holding fields of the wrong type, shape or range
DAMAGE.update(
    {
        "theta one longer": (
            _edit(_theta([0.25, -1.5, 0.5])),
            r"field 'theta' has shape \[3\]; this run's search space has \[2\]",
        ),
        "theta NaN": (
            _edit(_theta([{"$float": "nan"}, -1.5])),
            r"field 'theta' holds NaN or infinite values",
        ),
        "theta text": (_edit(_theta(["a", "b"])), r"has a malformed array 'theta'"),
        "theta of strings": (
            _edit(lambda doc: doc["theta"].update(dtype="<U1")),
            r"has a malformed array 'theta' \(dtype '<U1' is not numeric\)",
        ),
        "theta not an array": (
            _edit(lambda doc: doc.update(theta=[0.25, -1.5])),
            r"field 'theta' is \[0\.25, -1\.5\]; expected an array",
        ),
        "iteration a string": (
            _edit(lambda doc: doc.update(iteration="2")),
            r"field 'iteration' is '2'; expected a whole number >= 0",
        ),
        "iteration negative": (
            _edit(lambda doc: doc.update(iteration=-3)),
            r"field 'iteration' is -3; expected a whole number >= 0",
        ),
        "iteration a float": (
            _edit(lambda doc: doc.update(iteration=2.0)),
            r"field 'iteration' is 2\.0; expected a whole number",
        ),
        "iteration past the history": (
            _edit(lambda doc: doc.update(iteration=5)),
            r"field 'history' has 2 row\(s\) after 5 iteration\(s\)",
        ),
        "history an object": (
            _edit(lambda doc: doc.update(history={"a": 1})),
            r"field 'history' is \{'a': 1\}; expected a list of objects",
        ),
        "history of numbers": (
            _edit(lambda doc: doc.update(history=[1, 2])),
            r"field 'history' is \[1, 2\]; expected a list of objects",
        ),
        "scenarios a string": (
            _edit(lambda doc: doc.update(scenarios="x")),
            r"field 'scenarios' is 'x'; expected a whole number >= 0",
        ),
        "scenarios negative": (
            _edit(lambda doc: doc.update(scenarios=-1)),
            r"field 'scenarios' is -1",
        ),
        "lambda infinite": (
            _edit(lambda doc: doc.update({"lambda": {"$float": "inf"}})),
            r"field 'lambda' is inf; expected a finite number >= 0",
        ),
        "lambda true": (_edit(lambda doc: doc.update({"lambda": True})), r"field 'lambda' is True"),
        "problem a list": (
            _edit(lambda doc: doc.update(problem=[])),
            r"field 'problem' is \[\]; expected an object",
        ),
        "fingerprint a number": (
            _edit(lambda doc: doc.update(fingerprint=7)),
            r"field 'fingerprint' is 7; expected a string",
        ),
        "best without objective": (
            _edit(lambda doc: doc["best"].pop("objective")),
            r"field 'best' is .*expected null or an object with a finite",
        ),
        "best missing": (
            _edit(lambda doc: doc.update(best=None)),
            r"field 'best' is null after 2 iteration\(s\)",
        ),
        "best value a string": (
            _edit(lambda doc: doc["best_values"].update(max_num_seqs="64")),
            r"field 'best_values' is .*expected null or an object of policy",
        ),
        "opt_state not a list": (
            _edit(lambda doc: doc.update(opt_state={})),
            r"field 'opt_state' is \{\}; expected a list of arrays",
        ),
        "opt_state NaN": (
            _edit(lambda doc: doc["opt_state"][1].update(data=[{"$float": "nan"}, 0.0])),
            r"field 'opt_state\[1\]' holds NaN or infinite",
        ),
        "opt_state huge int": (
            _edit(lambda doc: doc["opt_state"][0].update(data=[10**30])),
            r"has a malformed array 'opt_state'",
        ),
    }
)


@pytest.mark.parametrize("name", DAMAGE)
def test_a_damaged_checkpoint_is_a_clear_error(tmp_path, name):
    path, opt = _good(tmp_path)
    damage, pattern = DAMAGE[name]
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(CheckpointError, match=pattern) as err:
        checkpoint.load(tmp_path, opt, SHAPES)
    assert str(path) in str(err.value) and "tune.resume=false" in str(err.value)


def _refuse_constant(name):
    raise ValueError(f"bare {name} in strict JSON")


NON_FINITE = {
    "iteration": 1,
    "theta": np.array([math.inf, -math.inf, math.nan]),
    "lambda": 0.0,
    "history": [
        {
            "iteration": 0,
            "tokens_per_dollar": math.inf,
            "grad_norm": math.nan,
            "lagrangian": -math.inf,
        }
    ],
    "best": {"objective": 1.0, "violation": 0.0, "useful_tokens_per_dollar": np.float32("nan")},
    "best_values": {"queue_cap": math.inf, "score_net": [0.5, -1.5]},
    "scenarios": 3,
    "fingerprint": "abc",
    "problem": {"k": '"Infinity"'},
}


def test_non_finite_floats_are_strict_json_and_read_back(tmp_path):
    """NaN and infinities (price 0 gives infinite tokens per dollar) are written as every
    servetune file writes them (files.jsonable: "inf", null), not bare."""
    opt = optax.adam(0.1).init(jnp.zeros(3))
    path = checkpoint.save(tmp_path, NON_FINITE, opt)
    text = path.read_text()
    raw = json.loads(text, parse_constant=_refuse_constant)  # strict: no NaN, Infinity
    assert raw["best_values"]["queue_cap"] == "inf" and raw["history"][0]["grad_norm"] is None
    doc = checkpoint.read(tmp_path)
    assert doc["problem"] == {"k": '"Infinity"'}  # strings are left alone
    row = doc["history"][0]
    assert row["tokens_per_dollar"] == math.inf and row["lagrangian"] == -math.inf
    assert math.isnan(row["grad_norm"]) and math.isnan(doc["best"]["useful_tokens_per_dollar"])
    assert doc["best_values"] == {"queue_cap": math.inf, "score_net": [0.5, -1.5]}
    np.testing.assert_array_equal(checkpoint._array(doc["theta"]), NON_FINITE["theta"])


def test_a_format_3_checkpoint_with_tagged_floats_still_reads(tmp_path):
    path, _ = _good(tmp_path)
    doc = json.loads(path.read_text())
    doc.update(
        format=3,
        best_values={"max_num_seqs": 64.0, "queue_cap": {"$float": "inf"}},
        history=[{"iteration": 0, "x": {"$float": "nan"}}, {"iteration": 1}],
    )
    path.write_text(json.dumps(doc))
    back = checkpoint.read(tmp_path)
    assert back["best_values"]["queue_cap"] == math.inf and math.isnan(back["history"][0]["x"])


def test_a_format_2_checkpoint_with_bare_constants_still_reads(tmp_path):
    path, _ = _good(tmp_path)
    doc = json.loads(path.read_text())
    doc.update(
        format=2, history=[{"iteration": 0, "x": math.nan, "y": math.inf}, {}], best_values=VALUES
    )
    path.write_text(json.dumps(doc))  # NaN, Infinity as servetune wrote them before format 3
    row = checkpoint.read(tmp_path)["history"][0]
    assert math.isnan(row["x"]) and row["y"] == math.inf


def test_a_best_policy_of_other_keys_is_a_clear_error(tmp_path):
    _, opt = _good(tmp_path)
    with pytest.raises(
        CheckpointError,
        match=r"field 'best_values' has keys \['max_num_seqs', "
        r"'queue_cap'\]; .* differ in watermark",
    ):
        checkpoint.load(tmp_path, opt, SHAPES, value_keys={**VALUES, "watermark": 0.0})


def test_another_optimizers_state_is_a_clear_error(tmp_path):
    _, _ = _good(tmp_path)  # adam: count, mu, nu
    sgd = optax.sgd(0.1).init(jnp.asarray(THETA))
    with pytest.raises(
        CheckpointError,
        match=r"has optimizer state of 3 arrays .* this run's "
        r"optimizer has 0",
    ):
        checkpoint.load(tmp_path, sgd, SHAPES)


def test_a_folder_in_place_of_the_checkpoint_is_a_clear_error(tmp_path):
    (tmp_path / checkpoint.NAME).mkdir()
    with pytest.raises(CheckpointError, match=r"checkpoint.json: is not a regular file"):
        checkpoint.read(tmp_path)


def test_no_checkpoint_is_none(tmp_path):
    assert checkpoint.read(tmp_path) is None
