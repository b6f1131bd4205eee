"""The truncated selection for any K and the deterministic multi-stage selection.

* K = 3 and 4 (iid and independent): lossless by enumeration, below the min-cut optimum,
  non-decreasing in s, and equal to the optimum (and to the tuple importance LP) when every
  token is kept;
* the canonical split is the projection: the same law r from the minimum-norm-point algorithm
  and from an interior-point QP solver;
* multi-stage: the same numbers whatever the solver, where stages solved as LPs by two solvers
  differ (the wrong twin); and not monotone in K once truncated (documented instance).
"""

from __future__ import annotations

import numpy as np
import pytest
from test_lp_importance import check_lossless

from multidraft.lp import importance_lp, multistage, pair_importance_lp, truncated_lp
from multidraft.theory import IID, Independent, dirichlet, optimal_acceptance


def laws(k: int, n: int, rng: np.random.Generator):
    q = [dirichlet(n, 0.5, rng) for _ in range(k)]
    return [IID(q[0], k), Independent(q)]


@pytest.mark.parametrize("k", [3, 4])
def test_any_k_is_lossless_monotone_and_optimal_when_every_token_is_kept(k):
    rng = np.random.default_rng(k)
    n = 5 if k == 3 else 4
    for _ in range(3):
        target = dirichlet(n, 0.5, rng)
        for law in laws(k, n, rng):
            optimum = optimal_acceptance(target, law, method="subsets").value
            values = []
            for s in range(1, n + 1):
                for outside in ("ranked", "first"):
                    selection = truncated_lp(target, law, s=s, outside=outside)
                    assert selection.k == k
                    check_lossless(target, law, selection)
                    assert selection.acceptance <= optimum + 1e-12
                    if outside == "ranked":
                        values.append(selection.acceptance)
            assert np.all(np.diff(values) >= -1e-12), values
            np.testing.assert_allclose(values[-1], optimum, rtol=0, atol=1e-12)
            np.testing.assert_allclose(values[-1], importance_lp(target, law).acceptance, rtol=0, atol=1e-7)


def test_pair_form_matches_the_pair_lp_and_a_law_gives_the_same_as_distributions():
    rng = np.random.default_rng(2)
    target, q1, q2 = (dirichlet(7, 0.4, rng) for _ in range(3))
    full = truncated_lp(target, q1, q2, s=7)
    np.testing.assert_allclose(full.acceptance, pair_importance_lp(target, q1, q2).acceptance, rtol=0, atol=1e-7)
    same = truncated_lp(target, Independent([q1, q2]), s=3)
    np.testing.assert_allclose(same.intermediate, truncated_lp(target, q1, q2, s=3).intermediate, rtol=0, atol=0)
    iid = truncated_lp(target, IID(q1, 3), s=4)
    np.testing.assert_allclose(iid.intermediate, truncated_lp(target, q1, k=3, s=4).intermediate, rtol=0, atol=0)


@pytest.mark.parametrize("k", [2, 3])
def test_canonical_split_is_the_projection_whatever_finds_it(k):
    rng = np.random.default_rng(10 + k)
    target = dirichlet(6, 0.3, rng)
    for law in laws(k, 6, rng):
        ours = truncated_lp(target, law, s=6)
        other = truncated_lp(target, law, s=6, solver="CLARABEL")  # interior point, ~1e-8 accurate
        np.testing.assert_allclose(other.intermediate, ours.intermediate, rtol=0, atol=1e-6)
        # Both are feasible laws; ours is at least as close to p (it is the projection).
        assert np.sum((ours.intermediate - target) ** 2) <= np.sum((other.intermediate - target) ** 2) + 1e-15


def _lp_stages(target, drafts, solver):
    """WRONG twin: stages solved as LPs, passing on whichever optimal law the solver returns."""
    current = drafts[0]
    for following in drafts[1:]:
        stage = pair_importance_lp(target, current, following, solver=solver)
        current = stage.intermediate
    return stage.acceptance


def test_multistage_gives_the_same_numbers_whatever_the_solver():
    rng = np.random.default_rng(52)
    n = 6
    target = dirichlet(n, 0.3, rng)
    drafts = [dirichlet(n, 0.3, rng)] * 3
    ours = multistage(target, drafts)
    other = multistage(target, drafts, solver="CLARABEL")
    np.testing.assert_allclose(other.intermediate, ours.intermediate, rtol=0, atol=1e-6)
    np.testing.assert_allclose(other.acceptance, ours.acceptance, rtol=0, atol=1e-7)
    # The twin that must fail: LP stages from two solvers end about 0.01 apart here.
    assert abs(_lp_stages(target, drafts, "HIGHS") - _lp_stages(target, drafts, "CLARABEL")) > 1e-3


def test_multistage_is_not_monotone_in_k_once_truncated():
    """Documented in :func:`multidraft.lp.truncated.multistage`: with s = 1 a third draft lowers
    the acceptance (0.9214 -> 0.8358) because every tuple with a token outside the kept one
    follows the fixed rule; with every token kept a stage may always keep its token, so the
    acceptance does not decrease with K."""
    target = np.array([0.07, 0.115, 0.029, 0.641, 0.145])
    draft = np.array([0.032, 0.331, 0.005, 0.404, 0.228])
    two, three = (multistage(target, [draft] * k, s=1).acceptance for k in (2, 3))
    assert three < two - 0.05
    full = [multistage(target, [draft] * k).acceptance for k in (2, 3, 4)]
    assert np.all(np.diff(full) >= -1e-12), full


def test_too_many_inner_tuples_are_refused():
    from multidraft.lp import ProblemTooLargeError

    with pytest.raises(ProblemTooLargeError, match=r"truncated LP \(s=40, k=4\): about 2,560,000 draft tuples"):
        truncated_lp(dirichlet(50, 1.0, np.random.default_rng(0)), Independent([np.full(50, 0.02)] * 4), s=40)


@pytest.mark.parametrize("outside", ["ranked", "first"])
@pytest.mark.parametrize("rank_key", ["published", "ratio"])
def test_tokens_no_draft_can_produce_take_no_place_among_the_top_s(rank_key, outside):
    """Issue 20, item 6: both keys ranked tokens no draft can produce (p − 0 = p, p/0 = ∞), so
    with top-k drafts such a token of large target mass took a place among the top s and s =
    the drafts' support was not the full LP. Now the kept tokens are the drafted ones, and the
    acceptance is the full importance LP's (every token kept)."""
    rng = np.random.default_rng(20)
    for _ in range(10):
        n, support = 8, 3
        target = dirichlet(n, 1.0, rng)
        drafted = rng.choice(n, support, replace=False)
        draft = np.zeros(n)
        draft[drafted] = dirichlet(support, 1.0, rng)
        kept = truncated_lp(target, draft, s=support, rank_key=rank_key, outside=outside)
        assert set(kept.top.tolist()) == set(drafted.tolist())
        assert kept.acceptance == pytest.approx(truncated_lp(target, draft, s=n).acceptance, abs=1e-9)
