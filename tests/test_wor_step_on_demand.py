"""The without-replacement rule's single-draft step on demand (issue 30, item 5): a fit builds
no ``min(1, p/r)`` or ``norm((p - r)_+)`` row of n, only the normaliser ``Σ (p - r)_+``
(:attr:`~multidraft.theory.verifier.FrontBackRule.excess`); the tree walks read the step at a
few tokens (``accept_at``, ``residual_at``) and sampling builds the dense step when it runs.

Every value is checked bit for bit against :func:`~multidraft.theory.canonical_step` on the
rule's own (p, r) -- the code the fit called before -- on the numpy path (n < 4096) and the
compiled one, at a node that falls back to the first draft, and through the plan's
``conditional_at`` against its dense conditional rows. The broken twin sums the normaliser
sequentially (``cumsum``) and the bit comparison catches it; a second twin builds the step
in the fit and the laziness check catches that.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from multidraft.schemes import get_scheme
from multidraft.schemes._importance import ImportancePlan
from multidraft.theory import WithoutReplacement, softmax, zipf
from multidraft.theory.laws import canonical_step
from multidraft.theory.verifier import optimal_selection_rule
from multidraft.theory.verifier import _wor_rule

#: (n, K, draft temperature): the numpy step (n < 4096) and the compiled one, K = 2 and more.
CASES = [(300, 2, 0.7), (300, 3, 1.6), (5000, 2, 0.5), (5000, 4, 1.3), (49152, 2, 0.8)]


def _rule(n: int, k: int, temperature: float):
    p = zipf(n, exponent=1.1, rng=np.random.default_rng(n + k))
    return optimal_selection_rule(p, WithoutReplacement(softmax(np.log(p), temperature=temperature), k))


def _same_bits(first: np.ndarray, second: np.ndarray) -> bool:
    return first.dtype == second.dtype and first.shape == second.shape and first.tobytes() == second.tobytes()


def _pointwise_is_the_step(rule) -> bool:
    """Whether accept_at / residual_at at every token (1-D and [m, K]) and the dense step are
    canonical_step's bits on the rule's (p, r)."""
    accept, residual = canonical_step(rule.target, rule.selection_law)
    tokens = np.arange(rule.n)
    rows = np.random.default_rng(0).integers(0, rule.n, size=(50, rule.k))
    return (
        _same_bits(rule.accept_at(tokens), accept) and _same_bits(rule.residual_at(tokens), residual)
        and _same_bits(rule.accept_at(rows), accept[rows]) and _same_bits(rule.accept, accept) and _same_bits(rule.residual, residual)
    )  # fmt: skip


@pytest.mark.parametrize(("n", "k", "temperature"), CASES)
def test_the_step_at_tokens_is_canonical_steps_bits_and_is_not_built_by_the_fit(n, k, temperature):
    rule = _rule(n, k, temperature)
    assert "step" not in rule.__dict__  # the fit built no row of the step
    rule.accept_at(np.arange(10)), rule.residual_at(np.arange(10))
    assert "step" not in rule.__dict__  # nor did reading it at tokens
    assert _pointwise_is_the_step(rule)


def test_a_first_draft_fallback_and_a_zero_excess_take_the_same_path():
    """r = q (the first draft) where the fit is made to fail, and r = p (Σ (p - r)_+ = 0: the
    residual is p itself)."""
    rule = _rule(5000, 3, 1.0)
    fallback = dataclasses.replace(rule, selection_law=rule.draft, excess=float(np.maximum(rule.target - rule.draft, 0.0).sum()))
    assert _pointwise_is_the_step(fallback)
    equal = dataclasses.replace(rule, selection_law=rule.target, excess=0.0)
    assert _pointwise_is_the_step(equal) and _same_bits(equal.residual_at(np.arange(equal.n)), equal.target)


def test_twin_a_normaliser_summed_in_another_order_is_caught():
    """WRONG twin: Σ (p - r)_+ summed one by one (``cumsum``), not numpy's pairwise sum."""
    caught = 0
    for case in CASES:
        rule = _rule(*case)
        sequential = float(np.cumsum(np.maximum(rule.target - rule.selection_law, 0.0))[-1])
        caught += not _pointwise_is_the_step(dataclasses.replace(rule, excess=sequential))
    assert caught


def test_twin_a_fit_that_builds_the_step_is_caught(monkeypatch):
    """WRONG twin: the fit reads the dense step (what the rule did before); the check sees it."""
    real = _wor_rule._fit_cut

    def eager(*args):
        rule = real(*args)
        rule.accept  # noqa: B018  (builds the step)
        return rule

    monkeypatch.setattr(_wor_rule, "_fit_cut", eager)
    assert "step" in _rule(5000, 2, 0.5).__dict__


@pytest.mark.parametrize(("n", "k", "temperature"), [(300, 3, 1.6), (5000, 2, 0.5)])
def test_the_plans_conditional_at_is_its_dense_rows(n, k, temperature):
    """The optimal scheme's plan (the tree walk's ``conditional_at``, now on the rule's pointwise
    step) against its dense conditional rows, at the tokens, bit for bit; the rest of the mass
    to rounding."""
    p = zipf(n, exponent=1.1, rng=np.random.default_rng(n + k))
    law = WithoutReplacement(softmax(np.log(p), temperature=temperature), k)
    plan = get_scheme("optimal").prepare(p, law)
    assert isinstance(plan, ImportancePlan)
    rng = np.random.default_rng(1)
    tuples = np.array([rng.choice(n, size=k, replace=False, p=law.draft) for _ in range(20)])
    tokens = np.unique(np.concatenate([tuples[:, 0], rng.integers(0, n, size=30)]))
    values, rest = plan.conditional_at(tuples, tokens)
    assert "step" not in plan.rule.__dict__
    dense = plan.conditional(tuples)
    assert _same_bits(values, dense[:, tokens])
    np.testing.assert_allclose(rest, dense.sum(axis=1) - dense[:, tokens].sum(axis=1), rtol=0, atol=1e-14)


def _sample_by_the_dense_step(plan, tuples, rng, shift=0):
    """``ImportancePlan.sample`` as it was: the dense single-draft step read at the chosen
    drafts, its residual drawn where a row rejects (``shift``: the twin, which takes the draft
    ``shift`` places after the chosen one)."""
    from multidraft.schemes._importance import residual_draws

    position = (plan.choose(tuples, rng) + shift) % tuples.shape[1]
    chosen = tuples[np.arange(len(tuples)), position]
    accept_of, step_residual = plan.step
    accept = rng.random(len(tuples)) < accept_of[chosen]
    tokens = chosen.copy()
    if (~accept).any():
        tokens[~accept] = residual_draws(step_residual, int((~accept).sum()), rng)
    return tokens


@pytest.mark.parametrize(("n", "k", "temperature"), CASES[:4])
def test_sampling_reads_the_step_at_the_chosen_drafts_with_the_dense_steps_draws(n, k, temperature):
    """The optimal plan's ``sample`` takes min(1, p/r) at the chosen drafts and the residual only
    where a row rejects: the same tokens and generator state as the dense step's expression, and
    no dense step built when every row accepts. The twin takes the next draft to the chosen one."""
    p = zipf(n, exponent=1.1, rng=np.random.default_rng(n + k))
    law = WithoutReplacement(softmax(np.log(p), temperature=temperature), k)
    plan = get_scheme("optimal").prepare(p, law)
    tuples = law.sample(np.random.default_rng(3), 400)
    for seed in range(3):
        mine, theirs = np.random.default_rng(seed), np.random.default_rng(seed)
        got = plan.sample(tuples, mine)
        np.testing.assert_array_equal(got, _sample_by_the_dense_step(plan, tuples, theirs))
        assert mine.random() == theirs.random()
    twin = _sample_by_the_dense_step(plan, tuples, np.random.default_rng(0), shift=1)
    assert not np.array_equal(twin, plan.sample(tuples, np.random.default_rng(0)))
    lazy = 0
    for seed in range(20):  # a row that accepts its chosen draft builds no dense step
        fresh = get_scheme("optimal").prepare(p, law)
        fresh.sample(tuples[:1], np.random.default_rng(seed))
        lazy += "step" not in fresh.__dict__ and "step" not in fresh.rule.__dict__
    assert lazy > 0
