"""The iid verifier's fresh position (issue 34, item 3): what changed for speed, checked against
what it replaced.

* a sparse draft's validation finds its support once (the law keeps it, the fit takes it): the
  same support as a search of the validated row, floored entries left out; the same rule as a
  fit that finds the support itself, bit for bit;
* a sparse row is summed over its positive entries: within rounding of the dense route, and
  every defect (NaN, infinity, a negative entry, a sum off by more than the tolerance) still
  refused with its message;
* the compiled selection (:mod:`multidraft.theory.verifier._curtain_select`) against the numpy
  formula it replaced, token for token.

Each check has a twin that must fail.
"""

from __future__ import annotations

import numpy as np
import pytest

from multidraft.theory import IID, as_distribution, softmax, top_k, zipf
from multidraft.theory.laws import MASS_FLOOR
from multidraft.theory.verifier import fit_curtain_rule


#: Relative difference allowed between a row divided by its sum over the support and by its
#: sum over the whole row (numpy's pairwise sums of non-negative terms, each within about
#: 16 + log2(n / 128) units of roundoff of the exact sum, plus the division's rounding).
_SUM_ORDER = 64 * np.finfo(float).eps


def _sparse_draft(n: int, keep: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    p = zipf(n, 1.1, rng=np.random.default_rng(seed))
    return p, top_k(softmax(np.log(p), temperature=1.3), keep)


@pytest.mark.parametrize("n, keep", [(4096, 100), (131072, 100), (50_000, 3)])
def test_support_found_by_validation_is_the_validated_rows_support(n, keep):
    """``IID(q).support_tokens()`` (found while validating q) equals a search of the validated
    row, and the row equals the dense route's ``q / Σ q`` to :data:`_SUM_ORDER`."""
    _, q = _sparse_draft(n, keep, seed=n)
    law = IID(q, 3)
    np.testing.assert_array_equal(law.support_tokens(), np.flatnonzero(law.draft > 0))
    assert len(law.support_tokens()) == keep and not law.support_tokens().flags.writeable
    np.testing.assert_allclose(law.draft, q / q.sum(), rtol=_SUM_ORDER, atol=0)


def test_support_leaves_out_entries_the_floor_sets_to_zero_and_a_twin_is_caught():
    """An entry that rescales below MASS_FLOOR is zero in the validated row and not in its
    support; the twin (the raw row's positive entries) holds it."""
    q = np.zeros(1000)
    q[[3, 10, 500]] = [0.5, 0.5, 1e-301]
    law = IID(q, 2)
    assert law.draft[500] == 0.0 and MASS_FLOOR > 1e-301
    np.testing.assert_array_equal(law.support_tokens(), [3, 10])
    twin = np.flatnonzero(q > 0)
    assert not np.array_equal(twin, law.support_tokens())


@pytest.mark.parametrize(
    "defect, message",
    [
        (np.nan, "NaN"),
        (-1e-3, "negative"),
        (np.inf, "infinit"),
        (0.01, "sum to 1 +"),
    ],
    ids=["nan", "negative", "infinity", "sum-off"],
)
def test_sparse_rows_with_a_defect_are_refused_and_the_clean_twin_passes(defect, message):
    """A top-k row (the sparse route) with one bad entry is refused with the defect named;
    the same row without it passes."""
    _, q = _sparse_draft(8192, 50, seed=4)
    bad = q.copy()
    bad[np.flatnonzero(q == 0)[7]] = defect
    with pytest.raises(ValueError, match=message):
        as_distribution(bad, "draft")
    np.testing.assert_allclose(as_distribution(q, "draft"), q / q.sum(), rtol=_SUM_ORDER, atol=0)


@pytest.mark.parametrize("k", [2, 4, 8])
def test_fit_on_the_laws_support_is_the_fit_that_finds_it(k):
    """``fit_curtain_rule(p, q, k, law.support_tokens())`` is the rule fitted without the
    support, array for array and draw for draw; the twin (a support missing one token) is not."""
    p, q = _sparse_draft(131072, 100, seed=k)
    law = IID(q, k)
    target = law.check_target(p)
    given, found = fit_curtain_rule(target, law.draft, k, law.support_tokens()), fit_curtain_rule(target, law.draft, k)
    for name in ("support", "group", "group_density", "piece_start", "piece_end", "certificate"):
        np.testing.assert_array_equal(getattr(given, name), getattr(found, name), err_msg=name)
    assert given.acceptance == found.acceptance and given.optimum == found.optimum
    tuples = law.sample(np.random.default_rng(1), 2000)
    uniforms = np.random.default_rng(2).random((2000, k + 2))
    np.testing.assert_array_equal(given.run(tuples, uniforms), found.run(tuples, uniforms))
    twin = fit_curtain_rule(target, law.draft, k, law.support_tokens()[1:])
    assert twin.acceptance != found.acceptance


def _numpy_positions(rule, local, uniforms):
    """The position formula as numpy computed it before the compiled selection."""
    group = rule.group[local]
    cumulative = rule.piece_cumulative
    first, last = rule.group_first[group], rule.group_last[group]
    level = cumulative[first] + uniforms * (cumulative[last] - cumulative[first])
    piece = np.clip(np.searchsorted(cumulative, level, side="right") - 1, first, last - 1)
    return np.minimum(rule.piece_start[piece] + (level - cumulative[piece]), rule.piece_end[piece])


def _numpy_run_inside(rule, tuples, uniforms):
    """Selected token and rejection of every row, by the numpy formula (argmin, then the
    acceptance test)."""
    local = np.searchsorted(rule.support, tuples)
    column = np.argmin(_numpy_positions(rule, local, uniforms[:, : rule.k]), axis=-1)
    rows = np.arange(len(tuples))
    chosen = local[rows, column]
    law = rule.support_draft[chosen] * rule.group_density[rule.group[chosen]]
    return tuples[rows, column], uniforms[:, rule.k] * law >= rule.support_target[chosen]


@pytest.mark.parametrize("k", [2, 3, 8])
def test_compiled_selection_is_the_numpy_formula_and_a_twin_is_caught(k):
    """Positions bit for bit, and :meth:`CurtainRule.run`'s accepted tokens token for token,
    against the numpy formula; the twin (the uniforms of the columns reversed) differs."""
    p, q = _sparse_draft(20_000, 300, seed=10 + k)
    law = IID(q, k)
    rule = fit_curtain_rule(law.check_target(p), law.draft, k, law.support_tokens())
    rng = np.random.default_rng(k)
    tuples = law.sample(rng, 5000)
    tuples[:50] = tuples[:50, :1]  # rows of one repeated token: ties between columns
    uniforms = rng.random((5000, k + 2))
    local = np.searchsorted(rule.support, tuples)
    np.testing.assert_array_equal(rule.positions(tuples, uniforms[:, :k]), _numpy_positions(rule, local, uniforms[:, :k]))
    tokens = rule.run(tuples, uniforms)
    chosen, rejected = _numpy_run_inside(rule, tuples, uniforms)
    np.testing.assert_array_equal(tokens[~rejected], chosen[~rejected])
    assert rejected.any() and (~rejected).any()
    twin = uniforms.copy()
    twin[:, :k] = uniforms[:, k - 1 :: -1]
    twin_chosen, twin_rejected = _numpy_run_inside(rule, tuples, twin)
    keep = ~rejected & ~twin_rejected
    assert not np.array_equal(twin_chosen[keep], tokens[keep])


def test_a_tie_of_positions_goes_to_the_first_column_as_argmin():
    """Two tokens of one group at the same uniform share a position: the first column is
    selected (``argmin``'s rule, which :meth:`CurtainRule.choice_probabilities` assumes); with
    the columns swapped, the other token."""
    p, q = _sparse_draft(20_000, 300, seed=3)
    law = IID(q, 2)
    rule = fit_curtain_rule(law.check_target(p), law.draft, 2, law.support_tokens())
    sizes = np.bincount(rule.group)
    first, second = rule.support[np.flatnonzero(rule.group == np.flatnonzero(sizes >= 2)[0])[:2]]
    uniforms = np.array([[0.3, 0.3, 0.0, 0.5]])  # acceptance uniform 0: always accepted
    assert rule.run(np.array([[first, second]]), uniforms)[0] == first
    assert rule.run(np.array([[second, first]]), uniforms)[0] == second
