"""The path curtain for two independent, non-identical drafts (issue 33;
multidraft.theory.verifier._independent_rule, docs/nonidentical_verifier.md).

Independent routes compared here:

* the rule's law r from its pieces (``Σ W`` per piece along the path) against r recomputed by
  enumerating every draft pair with the exact pairwise choice probabilities (piecewise-linear
  integrals over the two tokens' pieces);
* the enumerated output law of select -> accept/residual against p;
* ``Σ min(p, r)`` against P* from the threshold search *and* the transport LP (small n), and
  against the threshold search at n = 49152;
* sampled outputs at n = 49152 (chi-square) with a deliberately broken twin (positions compared
  by raw coordinates instead of along the path) that the test must catch.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from multidraft.theory import Independent, optimal_acceptance, softmax, zipf
from multidraft.theory.verifier import IndependentRule, PathMixtureRule, fit_independent_rule, fit_path_curtain, has_verifier, optimal_selection_rule
from multidraft.theory.verifier._path_mixture import fit_path_mixture, vertex_law

from rule_checks import enumerated_law, enumerated_output, sampled_output


def _instance(rng: np.random.Generator, index: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Dirichlet instances with zeros, ties, equal drafts and disjoint supports mixed in."""
    n = int(rng.integers(2, 8))
    alpha = float(rng.choice([0.1, 0.3, 1.0, 3.0]))
    p, q1, q2 = (rng.dirichlet(np.full(n, alpha)) for _ in range(3))
    if index % 5 == 0:
        q2 = q1.copy()
    if index % 7 == 0:
        p[rng.integers(n)] = 0.0
        p /= p.sum()
    if index % 11 == 0 and n >= 4:
        q1[: n // 2], q2[n // 2 :] = 0.0, 0.0
        q1, q2 = q1 / q1.sum(), q2 / q2.sum()
    if index % 13 == 0:
        p[:2] = p[:2].mean()
    return p, q1, q2


def test_law_and_output_by_enumeration_and_acceptance_at_the_optimum():
    """300 small instances: the law from the pieces equals the enumerated law (1e-13), the
    output is p (1e-12), and ``Σ min(p, r)`` equals P* to 1e-12 on every one, always with ONE
    path: a fitted one where it suffices, else the staircase made from the random path's
    per-draft laws (docs/nonidentical_verifier.md §4c); both kinds occur."""
    rng = np.random.default_rng(33)
    kinds = set()
    for index in range(300):
        p, q1, q2 = _instance(rng, index)
        law = Independent([q1, q2])
        rule = optimal_selection_rule(p, law)
        assert isinstance(rule, IndependentRule)
        np.testing.assert_allclose(enumerated_law(rule, law), rule.selection_law, rtol=0, atol=1e-13)
        np.testing.assert_allclose(enumerated_output(rule, law), p, rtol=0, atol=1e-12)
        np.testing.assert_allclose(rule.law1 + rule.law2, rule.selection_law, rtol=0, atol=0)
        optimum = optimal_acceptance(p, law).value
        assert rule.optimum == pytest.approx(optimum, abs=1e-12)
        assert abs(rule.acceptance - optimum) <= 1e-12
        assert type(rule) is IndependentRule
        kinds.add(rule.path == "staircase")
    assert kinds == {False, True}


def test_staircase_laid_by_increasing_density_is_caught(monkeypatch):
    """A broken twin of the staircase: draft j's tokens by *increasing* density. Still lossless
    (its law is read off its pieces) but no longer the law it was built from, so it falls short
    of the mixture it converts (acceptance < P* - 1e-6) on some of the instances that needed a
    mixture, while the staircase reaches P* on all of them."""
    import multidraft.theory.verifier._staircase as staircase

    rng = np.random.default_rng(33)
    mixtures = []
    for index in range(300):
        p, q1, q2 = _instance(rng, index)
        mixture = fit_path_mixture(p, q1, q2)
        if isinstance(mixture, PathMixtureRule):
            mixtures.append((mixture, Independent([q1, q2])))
    assert len(mixtures) >= 20
    for mixture, _ in mixtures:
        assert staircase.staircase_rule(mixture).acceptance >= mixture.optimum - 1e-12
    forward = staircase._density_order
    monkeypatch.setattr(staircase, "_density_order", lambda law, q, tokens: forward(law, q, tokens)[::-1])
    short = 0
    for mixture, law in mixtures:
        twin = staircase.staircase_rule(mixture, steps=1)
        if twin.path == "staircase":
            np.testing.assert_allclose(enumerated_output(twin, law), mixture.target, rtol=0, atol=1e-12)
        short += twin.acceptance < mixture.optimum - 1e-6 or twin.path != "staircase"
    assert short >= 1


def test_identical_drafts_reach_the_optimum():
    """``Independent([q, q])`` is iid: the straight path is the diagonal, every set lies on it
    (AM-GM with equality), so the rule reaches P* (40 instances)."""
    rng = np.random.default_rng(5)
    for _ in range(40):
        n = int(rng.integers(2, 9))
        p, q = rng.dirichlet(np.ones(n) * 0.5), rng.dirichlet(np.ones(n) * 0.5)
        rule = fit_independent_rule(p, q, q)
        assert rule.acceptance == pytest.approx(rule.optimum, abs=1e-12)


def test_acceptance_against_the_transport_lp():
    """A second computation of P*: the transport LP over all draft pairs (200 instances,
    n <= 6); the rule's own ``Σ min(p, r)`` equals it to the LP's tolerance."""
    from multidraft.lp.transport import transport_lp

    rng = np.random.default_rng(8)
    checked = 0
    for index in range(260):
        p, q1, q2 = _instance(rng, index)
        p, q1, q2 = p[:6] / p[:6].sum(), q1[:6] / max(q1[:6].sum(), 1e-300), q2[:6] / max(q2[:6].sum(), 1e-300)
        if not (q1.sum() > 0.5 and q2.sum() > 0.5):
            continue
        lp = transport_lp(p, Independent([q1, q2])).acceptance
        rule = fit_independent_rule(p, q1, q2)
        assert rule.optimum == pytest.approx(lp, abs=1e-7)
        assert rule.acceptance == pytest.approx(lp, abs=1e-7)
        checked += 1
    assert checked >= 200


def test_named_instances():
    """T* = {1, 2}, P* = 0.94, reached by one path; and the instance P* = 0.78 where the
    single-path fit stops at 0.772285 while the priority order (0, 1, 2) -- a single path,
    law (0.28, 0.32, 0.4) by hand: h({0}) = 1 - 0.8 * 0.9, h({0, 1}) - h({0}) = 0.6 - 0.28 --
    reaches 0.78; the random-path fit finds it."""
    rule = fit_independent_rule(np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.3, 0.5]), np.array([0.3, 0.3, 0.4]))
    assert rule.certificate.tolist() == [1, 2]
    assert rule.acceptance == pytest.approx(0.94, abs=1e-12)
    p, q1, q2 = np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.3, 0.5]), np.array([0.1, 0.1, 0.8])
    assert fit_path_curtain(p, q1, q2).acceptance == pytest.approx(0.7722847655792933, abs=1e-9)
    np.testing.assert_allclose(vertex_law(np.array([0, 1, 2]), q1, q2), [0.28, 0.32, 0.4], rtol=0, atol=1e-15)
    rule = fit_independent_rule(p, q1, q2)
    assert rule.optimum == pytest.approx(0.78, abs=1e-12)
    assert rule.acceptance == pytest.approx(0.78, abs=1e-12)
    law = Independent([q1, q2])
    np.testing.assert_allclose(enumerated_output(rule, law), p, rtol=0, atol=1e-12)


def _mixed_instance() -> tuple[PathMixtureRule, Independent]:
    """The first test instance whose random path is a mixture with different weights on U and T*."""
    rng = np.random.default_rng(33)
    for index in range(300):
        p, q1, q2 = _instance(rng, index)
        law = Independent([q1, q2])
        rule = fit_path_mixture(p, q1, q2)
        if isinstance(rule, PathMixtureRule) and not np.allclose(rule.weights_u, rule.weights_t):
            return rule, law
    raise AssertionError("no mixture with distinct part weights among the test instances")


def test_mixture_with_the_wrong_part_weights_is_caught_by_enumeration():
    """A broken twin: the T* rows decided with U's component weights (the law kept). Its
    enumerated output is not p, while the rule's is."""
    import dataclasses

    rule, law = _mixed_instance()
    twin = dataclasses.replace(rule, weights_t=rule.weights_u)
    np.testing.assert_allclose(enumerated_output(rule, law), rule.target, rtol=0, atol=1e-12)
    assert np.abs(enumerated_output(twin, law) - rule.target).max() > 1e-6


@pytest.mark.statistical
def test_sampled_mixture_output_and_a_broken_twin():
    """N = 400,000 runs of a mixture rule (chi-square against p) and of its twin that always
    uses the first component (rejected)."""
    import dataclasses

    from scipy import stats

    rule, law = _mixed_instance()
    first = np.eye(len(rule.components))[0]
    twin = dataclasses.replace(rule, weights_u=first, weights_t=first)
    expected = rule.target
    good = sampled_output(rule, rule, law, 400_000, 3)
    bad = sampled_output(twin, rule, law, 400_000, 3)
    keep = expected > 0
    assert stats.chisquare(good[keep], expected[keep] * good.sum()).pvalue > 1e-3
    assert stats.chisquare(bad[keep], expected[keep] * bad.sum()).pvalue < 1e-6


def test_more_than_two_independent_drafts_are_refused():
    law = Independent([[0.5, 0.5], [0.2, 0.8], [0.9, 0.1]])
    assert not has_verifier(law)
    with pytest.raises(ValueError, match="k=3"):
        optimal_selection_rule([0.5, 0.5], law)


def _zipf_pair(n: int, t1: float, t2: float, seed: int = 0):
    p = zipf(n, 1.1, np.random.default_rng(seed))
    return p, Independent([softmax(np.log(p), t1), softmax(np.log(p), t2)])


@pytest.mark.parametrize("temperatures", [(1.2, 2.0), (0.5, 2.0), (1.6, 2.0), (0.5, 1.6), (1.2, 1.6), (0.5, 1.2), (0.8, 1.6), (0.8, 2.0)])
def test_full_vocabulary_reaches_the_optimum_where_measured(temperatures):
    """n = 49152, Zipf(1.1) target, drafts at two temperatures: the rule's own ``Σ min(p, r)``
    equals the threshold search's P* to 1e-9, and the scheme reports that number (at 1.2 & 1.6
    the fitted path stops ~5e-8 short; at 0.5 & 1.2, 0.8 & 1.6 and 0.8 & 2.0 by 2-7 %, and the
    ascent's staircase closes them, docs/nonidentical_verifier.md §4e)."""
    from multidraft.schemes import get_scheme

    p, law = _zipf_pair(49152, *temperatures)
    rule = optimal_selection_rule(p, law)
    optimum = optimal_acceptance(p, law).value
    assert abs(rule.acceptance - optimum) <= 1e-9
    assert float(get_scheme("optimal").acceptance(p, law)) == rule.acceptance


def test_full_vocabulary_shortfall_is_reported_not_hidden():
    """Without the ascent (``ascent=False``: the fits of stop 41) the pair 0.8 & 1.6 stays short:
    the rule's ``acceptance`` is its own law's ``Σ min(p, r)`` (below P*), never P*; the default
    (the ascent's staircase) reaches P*, so the test tells the two apart."""
    p, law = _zipf_pair(49152, 0.8, 1.6)
    alone = fit_independent_rule(p, *law.drafts, ascent=False)
    assert alone.acceptance < alone.optimum - 1e-3
    assert alone.acceptance == float(np.minimum(p, alone.selection_law).sum())
    assert (alone.path, alone.acceptance > fit_path_curtain(p, *law.drafts).acceptance + 0.01) == ("staircase", True)
    rule = fit_independent_rule(p, *law.drafts)
    assert abs(rule.acceptance - rule.optimum) <= 1e-9 and rule.acceptance == float(np.minimum(p, rule.selection_law).sum())


class _CoordinateTwin:
    """WRONG: compares the drafts' raw coordinates instead of their points along the path."""

    def __init__(self, rule: IndependentRule) -> None:
        self.rule = rule

    def choose(self, tuples: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        uniforms = rng.random(tuples.shape)
        first = self.rule.layouts[0].coordinates(tuples[:, 0], uniforms[:, 0])
        second = self.rule.layouts[1].coordinates(tuples[:, 1], uniforms[:, 1])
        return (second < first).astype(np.int64)


@pytest.mark.statistical
@pytest.mark.parametrize("temperatures, ascent, path", [((1.2, 2.0), False, "straight"), ((1.2, 1.6), True, "staircase"), ((0.8, 2.0), True, "staircase")])
def test_sampled_output_at_full_vocabulary_and_a_broken_twin(temperatures, ascent, path):
    """N = 200,000 runs at n = 49152 (drafts at 1.2 and 2.0 without the ascent: the fitted
    straight path; at 1.2 and 1.6 and at 0.8 and 2.0: the ascent's staircase, which the rule
    tries first at this size, at P*): output counts in 40 bins of the target (the 20 most likely tokens alone, the
    rest in 20 bins of equal target mass) match p (chi-square), while the coordinate twin is
    rejected."""
    from scipy import stats

    p, law = _zipf_pair(49152, *temperatures)
    rule = optimal_selection_rule(p, law) if ascent else fit_independent_rule(p, *law.drafts, ascent=False)
    assert rule.path == path and rule.acceptance >= rule.optimum - 1e-9
    order = np.argsort(-p)
    bins = np.empty(len(p), dtype=np.int64)
    bins[order[:20]] = np.arange(20)
    rest = np.cumsum(p[order[20:]])
    bins[order[20:]] = 20 + np.minimum((rest / rest[-1] * 20).astype(np.int64), 19)
    expected = np.bincount(bins, weights=p, minlength=40)

    def binned(counts):
        return np.bincount(bins, weights=counts, minlength=40)

    good = binned(sampled_output(rule, rule, law, 200_000, 1))
    bad = binned(sampled_output(_CoordinateTwin(rule), rule, law, 200_000, 1))
    assert stats.chisquare(good, expected * good.sum()).pvalue > 1e-3
    assert stats.chisquare(bad, expected * bad.sum()).pvalue < 1e-6


def test_fallback_when_no_layout_tiles(monkeypatch):
    """If no fit tiles its region (forced here), the rule falls back to the tokens side by side
    on the straight path: still lossless with its exact law."""
    import multidraft.theory.verifier._independent_rule as module

    def refuse(*args, **kwargs):
        raise RuntimeError("forced")

    monkeypatch.setattr(module, "_region", refuse)
    rng = np.random.default_rng(2)
    p, q1, q2 = (rng.dirichlet(np.ones(5)) for _ in range(3))
    law = Independent([q1, q2])
    rule = module.fit_path_curtain(p, q1, q2)
    assert rule.path == "straight, side by side"
    np.testing.assert_allclose(enumerated_law(rule, law), rule.selection_law, rtol=0, atol=1e-13)
    np.testing.assert_allclose(enumerated_output(rule, law), p, rtol=0, atol=1e-12)
    assert rule.acceptance <= rule.optimum + 1e-12


def test_scheme_refuses_an_exact_acceptance_it_cannot_certify():
    """Beyond the transport LP, ``exact=True`` would have to report P* (which the rule may not
    reach): refused, with the way out named."""
    from multidraft.schemes import get_scheme

    from fractions import Fraction

    rng = np.random.default_rng(4)
    p, q1, q2 = ([Fraction(int(w), int(row.sum())) for w in row] for row in rng.integers(1, 9, size=(3, 3000)))
    with pytest.raises(ValueError, match="exact=False"):
        get_scheme("optimal").acceptance(p, Independent([q1, q2]), exact=True)


@pytest.mark.parametrize("rounds", [-1, 1.5, True, "3"], ids=["negative", "float", "bool", "string"])
def test_bad_rounds_are_refused(rounds):
    with pytest.raises(ValueError, match="rounds: the column-generation rounds must be an integer >= 0"):
        fit_independent_rule(np.array([0.5, 0.5]), np.array([0.2, 0.8]), np.array([0.9, 0.1]), rounds=rounds)


@pytest.mark.parametrize("ascent", [None, 1, "yes"], ids=["none", "int", "string"])
def test_bad_ascent_is_refused(ascent):
    with pytest.raises(ValueError, match="ascent: the ascent is switched by True or False"):
        fit_independent_rule(np.array([0.5, 0.5]), np.array([0.2, 0.8]), np.array([0.9, 0.1]), ascent=ascent)


def test_rounds_zero_keeps_the_single_path():
    """``rounds=0``: the random-path fit returns the single-path fit (0.772285 on the 0.78
    instance), a positive cap the mixture, which the staircase turns into one path at P*."""
    p, q1, q2 = np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.3, 0.5]), np.array([0.1, 0.1, 0.8])
    single = fit_path_mixture(p, q1, q2, rounds=0)
    assert type(single) is IndependentRule and single.acceptance == pytest.approx(0.7722847655792933, abs=1e-9)
    assert isinstance(fit_path_mixture(p, q1, q2, rounds=5), PathMixtureRule)
    rule = fit_independent_rule(p, q1, q2, rounds=5)
    assert (type(rule), rule.path, rule.acceptance) == (IndependentRule, "staircase", pytest.approx(0.78, abs=1e-12))


def test_staircase_steps_tile_at_full_vocabulary():
    """Regression (the staircase's weights are step functions, so a solo interval can have a
    plateau of roots; the stack pass now takes the first root behind the hull below): alternating
    staircase steps from the fitted path at 0.8 & 1.6, n = 49152, all tile (a RuntimeError
    otherwise) and never lose acceptance; the first one gains > 0.01."""
    from multidraft.theory.verifier._staircase import fit_staircase

    p, law = _zipf_pair(49152, 0.8, 1.6)
    one = fit_path_curtain(p, *law.drafts)
    in_t = np.zeros(len(p), dtype=bool)
    in_t[one.certificate] = True
    parts = (np.flatnonzero(~in_t), np.flatnonzero(in_t))
    laws, acceptances = (one.law1, one.law2), [one.acceptance]
    for j in (0, 1, 0):
        laws = fit_staircase(p, tuple(law.drafts), parts, laws[j], j)[:2]
        acceptances.append(float(np.minimum(p, laws[0] + laws[1]).sum()))
    assert np.all(np.diff(acceptances) >= -1e-12) and acceptances[1] > acceptances[0] + 0.01


def test_tiling_check_ties_and_a_real_overlap():
    """The tiling check orders coincident piece starts by their ends, so a rounding-thin piece at
    the start of its neighbour is no overlap; a real overlap (its twin) still raises."""
    from multidraft.theory.verifier._independent_rule import _check_tiling

    bounds = np.arange(4)
    _check_tiling(np.array([0.0, 0.0, 0.5]), np.array([0.5, 1e-17, 1.0]), 0.0, 1.0, bounds, np.array([0.5, 1e-17, 0.5]))
    with pytest.raises(RuntimeError, match="did not tile"):
        _check_tiling(np.array([0.0, 0.25, 0.5]), np.array([0.5, 0.5, 1.0]), 0.0, 1.0, bounds, np.array([0.5, 0.25, 0.5]))


def test_straight_forecast_is_the_first_fits_acceptance():
    """``straight_forecast`` (the single path's first fit from its curtains' groups, no layout)
    equals the acceptance of that fit (``_fit`` on the straight path, the min-cut's linear split,
    not balanced) to 1e-12 wherever the fit tiles: 300 small instances and the 15 Zipf pairs at
    n = 4096. Twin: the split's caps taken as the law (``Σ min(p, π_1 + π_2) = 1``) differ by
    more than 1e-3 on some, so the groups' targets matter."""
    from multidraft.theory.optimum import product_cut
    from multidraft.theory.verifier._independent_rule import _fit, _path, _split, straight_forecast

    rng = np.random.default_rng(41)
    cases = [_instance(rng, index) for index in range(300)]
    for t1, t2 in itertools.combinations_with_replacement((0.5, 0.8, 1.2, 1.6, 2.0), 2):
        p, law = _zipf_pair(4096, t1, t2)
        cases.append((p, *law.drafts))
    checked = caught = 0
    for p, q1, q2 in cases:
        qs = (q1, q2)
        in_t = np.zeros(len(p), dtype=bool)
        in_t[product_cut(p, np.stack(qs)).certificate] = True
        parts = (np.flatnonzero(~in_t), np.flatnonzero(in_t))
        t = [float(q[in_t].sum()) for q in qs]
        try:
            law1, law2, _ = _fit(p, qs, parts, _split(qs, t[1], t[0]), _path("straight", p, qs, parts), False)
        except RuntimeError:
            continue
        forecast = straight_forecast(p, qs, parts)
        assert abs(forecast - float(np.minimum(p, law1 + law2).sum())) <= 1e-12
        checked += 1
        caught += abs(1.0 - float(np.minimum(p, law1 + law2).sum())) > 1e-3  # twin: the caps as the law
    assert checked >= 250 and caught >= 5
