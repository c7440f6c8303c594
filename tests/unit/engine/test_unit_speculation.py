"""engine/speculation.py: the counter-based uniforms, the accepted-draft count (a truncated
geometric) and its mean, checked against closed forms."""

import jax.numpy as jnp
import numpy as np

from servetune.config.policy import make_policy
from servetune.engine.speculation import accepted, draft_tokens, expected_emitted, uniform


def test_uniforms_are_fixed_per_request_token_and_salt_and_look_uniform():
    req = jnp.arange(20_000)
    u = np.asarray(uniform(req, 3, 7))
    assert np.array_equal(u, np.asarray(uniform(req, 3, 7)))  # a function, not a stream
    assert (u > 0).all() and (u < 1).all()
    assert not np.array_equal(u, np.asarray(uniform(req, 4, 7)))  # the next token differs
    assert not np.array_equal(u, np.asarray(uniform(req, 3, 8)))  # and the next seed
    # mean 1/2 and variance 1/12 within ~5 standard errors of 20,000 draws
    assert abs(u.mean() - 0.5) < 5 * np.sqrt(1 / 12 / u.size)
    assert abs(u.var() - 1 / 12) < 0.003


def test_accepted_drafts_are_the_inverse_cdf_of_a_truncated_geometric():
    # P(A >= j) = alpha^j: with alpha 0.5, u in (0.25, 0.5] accepts 1, (0.125, 0.25] accepts 2
    u = jnp.asarray([0.9, 0.5, 0.3, 0.2, 0.01, 0.01, 0.3, 0.3])
    alpha = jnp.asarray([0.5, 0.5, 0.5, 0.5, 0.5, 1.0, 0.0, 0.5])
    k = jnp.asarray([4, 4, 4, 4, 4, 4, 4, 0])
    assert accepted(u, alpha, k).tolist() == [0, 1, 1, 2, 4, 4, 0, 0]  # capped at k


def test_the_mean_emitted_per_pass_matches_the_closed_form_and_the_draws():
    # 1 + E[min(A, k)] = sum_{j=0..k} alpha^j = (1 - alpha^(k+1)) / (1 - alpha)
    assert np.isclose(float(expected_emitted(0.5, 3)), 1 + 0.5 + 0.25 + 0.125)
    assert float(expected_emitted(1.0, 3)) == 4.0
    assert np.isclose(float(expected_emitted(0.0, 3)), 1.0)  # alpha clipped to 1e-12 inside
    u = uniform(jnp.arange(50_000), 0, 1)
    draws = 1 + np.asarray(accepted(u, jnp.full(u.shape, 0.7), jnp.full(u.shape, 5)))
    mean = float(expected_emitted(0.7, 5))
    assert abs(draws.mean() - mean) < 5 * draws.std() / np.sqrt(draws.size)


def test_draft_tokens_are_whole_and_never_negative():
    assert int(draft_tokens(make_policy({"spec_k": 3.7}))) == 3
    assert int(draft_tokens(make_policy({"spec_k": 0.0}))) == 0
