"""The verifier for drafts without replacement (the front/back rule of multidraft.theory.verifier).

Independent routes compared here:

* the law r from the compiled forward pass (exponential-race integrals) against r recomputed by
  enumerating every ordered draft tuple with the rule's exact choice probabilities;
* the output of "select, accept with min(1, p/r), else the residual" against p, by enumeration
  and by chi-square on sampled runs, with a deliberately wrong twin that both must catch;
* r ∈ B(h) on every subset, ``Σ min(p, r)`` <= P* from subsets (a lower bound), never below
  the first draft's ``Σ min(p, q)``, and equal to P* from the sorted scan on Zipf-like
  positions up to n = 49152;
* at full vocabulary, the frequencies of the selected tokens of sampled draft tuples against r.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import assume, given

from multidraft.theory import WithoutReplacement, optimal_acceptance, softmax, zipf
from multidraft.theory.verifier import FrontBackRule, optimal_selection_rule

from rule_checks import coverage, enumerated_law, enumerated_output, sampled_output
from strategies import as_float, instances






class FrontFirstTwin(FrontBackRule):
    """WRONG twin: when no coin says front, the *first* drafted token of the active part wins,
    while the fitted law of the front/back rule (last token wins) is still used."""

    def choice_probabilities(self, tuples: np.ndarray) -> np.ndarray:
        out = super().choice_probabilities(tuples)
        position, active = self._active(tuples)
        back = np.prod(np.where(active, 1.0 - self.alpha[tuples], 1.0), axis=-1)
        rows = np.arange(len(tuples))
        out[rows, np.argmax(np.where(active, position, -1), axis=-1)] -= back
        out[rows, np.argmin(np.where(active, position, self.n), axis=-1)] += back
        return out

    def choose(self, tuples: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        position, active = self._active(tuples)
        front = active & (rng.random(tuples.shape) < self.alpha[tuples])
        first_front = np.argmin(np.where(front, position, self.n), axis=-1)
        first_active = np.argmin(np.where(active, position, self.n), axis=-1)
        return np.where(front.any(axis=-1), first_front, first_active)


def twin(rule: FrontBackRule) -> FrontFirstTwin:
    return FrontFirstTwin(**rule.__dict__)




@given(instances(max_n=6, max_k=4))
def test_law_output_and_bounds_on_small_instances(instance):
    n, k, target, draft = instance
    p, q = as_float(target), as_float(draft)
    assume(k <= np.count_nonzero(q))
    law = WithoutReplacement(q, k)
    rule = optimal_selection_rule(p, law)
    r = rule.selection_law
    np.testing.assert_allclose(enumerated_law(rule, law), r, rtol=0, atol=1e-12)
    np.testing.assert_allclose(enumerated_output(rule, law), p, rtol=0, atol=1e-12)
    optimum = float(optimal_acceptance(target, WithoutReplacement(draft, k), method="subsets", exact=True).value)
    assert rule.optimum == pytest.approx(optimum, abs=1e-12)
    assert rule.acceptance <= optimum + 1e-12
    assert rule.acceptance >= np.minimum(p, q).sum() - 1e-12
    for bits in itertools.product([False, True], repeat=n):
        mask = np.array(bits)
        assert r[mask].sum() <= coverage(law, mask) + 1e-12


EDGE_CASES = {
    "acceptance-one": ([1 / 3, 1 / 6, 1 / 2], [1 / 3, 1 / 3, 1 / 3], 2),
    "p-equals-q": ([0.5, 0.3, 0.2], [0.5, 0.3, 0.2], 2),
    "disjoint-supports": ([0.5, 0.5, 0.0, 0.0], [0.0, 0.0, 0.4, 0.6], 2),
    "target-one-hot": ([0.0, 1.0, 0.0], [0.6, 0.2, 0.2], 2),
    "ties": ([0.25, 0.25, 0.25, 0.25], [0.4, 0.2, 0.2, 0.2], 3),
    "single-draft": ([0.7, 0.2, 0.1], [0.2, 0.2, 0.6], 1),
    "all-drafted": ([0.1, 0.2, 0.7], [0.5, 0.3, 0.2], 3),
    "zeros-both": ([0.0, 0.5, 0.5, 0.0], [0.0, 0.2, 0.3, 0.5], 3),
}


@pytest.mark.parametrize("case", EDGE_CASES)
def test_edge_cases(case):
    """Ties, zeros, p = q, disjoint supports, U or T* empty, K = 1 and K = n: the law is the
    enumerated one, the output is p, and each reaches P*."""
    target, draft, k = EDGE_CASES[case]
    p, law = np.array(target), WithoutReplacement(draft, k)
    rule = optimal_selection_rule(p, law)
    np.testing.assert_allclose(enumerated_law(rule, law), rule.selection_law, rtol=0, atol=1e-12)
    np.testing.assert_allclose(enumerated_output(rule, law), p, rtol=0, atol=1e-12)
    assert rule.acceptance == pytest.approx(optimal_acceptance(p, law, method="subsets").value, abs=1e-12)


def test_the_wrong_twin_is_caught_by_enumeration():
    rng = np.random.default_rng(5)
    worst = 0.0
    for _ in range(20):
        p, q = rng.dirichlet(np.ones(5)), rng.dirichlet(np.ones(5))
        law = WithoutReplacement(q, 3)
        rule = optimal_selection_rule(p, law)
        worst = max(worst, float(np.abs(enumerated_output(twin(rule), law) - p).max()))
    assert worst > 1e-2


@pytest.mark.parametrize("n", [300, 49152])
@pytest.mark.parametrize("k", [2, 4, 8])
@pytest.mark.parametrize("temperature", [0.5, 1.2])
def test_reaches_the_optimum_on_zipf_positions(n, k, temperature):
    """The measured claim of the module docstring: P* (sorted scan) to 1e-10 on Zipf-like
    targets with tempered drafts; the law is a distribution to rounding."""
    p = zipf(n, exponent=1.1, rng=np.random.default_rng(n + k))
    law = WithoutReplacement(softmax(np.log(p), temperature=temperature), k)
    rule = optimal_selection_rule(p, law)
    assert not rule.first_draft and rule.note is None
    assert rule.selection_law.sum() == pytest.approx(1.0, abs=1e-12)
    assert rule.acceptance == pytest.approx(optimal_acceptance(p, law).value, abs=1e-10)


@pytest.mark.statistical
def test_sampled_output_is_the_target_and_the_wrong_twin_is_caught():
    """N = 30,000 runs of select -> accept/residual: the output frequencies match p (chi-square),
    and the same step behind the front-first twin is rejected."""
    from scipy import stats

    p = np.array([0.56, 0.01, 0.1, 0.2, 0.13])
    q = np.array([0.03, 0.05, 0.49, 0.18, 0.25])
    law = WithoutReplacement(q, 2)
    rule = optimal_selection_rule(p, law)
    assert np.abs(enumerated_output(twin(rule), law) - p).max() > 0.3

    good, bad = sampled_output(rule, rule, law, 30_000, 1), sampled_output(twin(rule), rule, law, 30_000, 1)
    assert stats.chisquare(good, p * good.sum()).pvalue > 1e-3
    assert stats.chisquare(bad, p * bad.sum()).pvalue < 1e-6


@pytest.mark.statistical
def test_selected_tokens_follow_the_law_at_full_vocabulary():
    """n = 49152, K = 4: the selected token of 10,000 sampled draft sets, binned (the 30 most
    likely tokens and the rest), against the computed law r (chi-square)."""
    from scipy import stats

    n = 49152
    p = zipf(n, exponent=1.1, rng=np.random.default_rng(7))
    law = WithoutReplacement(softmax(np.log(p), temperature=0.8), 4)
    rule = optimal_selection_rule(p, law)
    rng = np.random.default_rng(8)
    tuples = np.concatenate([law.sample(rng, 1000) for _ in range(10)])  # [1000, n] keys per call
    chosen = tuples[np.arange(len(tuples)), rule.choose(tuples, rng)]
    top = np.argsort(-rule.selection_law)[:30]
    bins = np.full(n, len(top))
    bins[top] = np.arange(len(top))
    observed = np.bincount(bins[chosen], minlength=len(top) + 1)
    expected = np.bincount(bins, rule.selection_law, minlength=len(top) + 1) * len(chosen)
    assert stats.chisquare(observed, expected).pvalue > 1e-3


def test_optimal_scheme_beyond_the_lp_uses_the_rule():
    """``optimal`` with drafts without replacement at n = 49152 (the transport LP would have
    ~10^13 variables): acceptance is the rule's, = P* here, and its sampler accepts at that rate."""
    from multidraft.schemes import get_scheme

    n = 49152
    p = zipf(n, exponent=1.1, rng=np.random.default_rng(0))
    law = WithoutReplacement(softmax(np.log(p), temperature=0.8), 2)
    scheme = get_scheme("optimal")
    optimum = optimal_acceptance(p, law).value
    assert scheme.acceptance(p, law) == pytest.approx(optimum, abs=1e-10)
    rng = np.random.default_rng(2)
    tokens, accepted = scheme.sample(p, law, np.concatenate([law.sample(rng, 1000) for _ in range(4)]), rng)
    assert abs(accepted.mean() - optimum) < 4.5 * np.sqrt(optimum * (1 - optimum) / 4000) + 1e-9
    assert scheme.select(p, law, law.sample(rng, 1)[0], rng).token in range(n)


def test_first_draft_when_it_accepts_more(monkeypatch):
    """A fit that accepts less than the first draft (here: a pass that returns α = 0, the
    always-last rule) is replaced by the first draft, whose law q is exact; a failed fit (NaN)
    likewise, and says so."""
    from multidraft.theory import verifier

    fitted_pass = verifier.front_back_pass

    def always_last(target, draft, boundary, k, nodes, weights, alpha=None):
        return fitted_pass(target, draft, boundary, k, nodes, weights, np.zeros(len(draft)))

    p, law = np.array([0.6, 0.1, 0.1, 0.2]), WithoutReplacement([0.1, 0.3, 0.3, 0.3], 2)
    assert not optimal_selection_rule(p, law).first_draft
    monkeypatch.setattr(verifier, "front_back_pass", always_last)
    rule = optimal_selection_rule(p, law)
    assert rule.first_draft and rule.note is None
    np.testing.assert_allclose(rule.selection_law, law.draft, rtol=0, atol=0)
    np.testing.assert_allclose(enumerated_output(rule, law), p, rtol=0, atol=1e-12)

    def broken(target, draft, boundary, k, nodes, weights, alpha=None):
        return np.zeros(len(draft)), np.full(len(draft), np.nan)

    monkeypatch.setattr(verifier, "front_back_pass", broken)
    rule = optimal_selection_rule(p, law)
    assert rule.first_draft and rule.note is not None and "fell back" in rule.note
    np.testing.assert_allclose(enumerated_law(rule, law), law.draft, rtol=0, atol=1e-12)
    np.testing.assert_allclose(enumerated_output(rule, law), p, rtol=0, atol=1e-12)
