"""The iid verifier's fresh position (issue 34, item 3): what changed for speed, checked against
what it replaced.

* a sparse draft's validation finds its support once (the law keeps it, the fit takes it): the
  same support as a search of the validated row, floored entries left out; the same rule as a
  fit that finds the support itself, bit for bit; a dense draft with no zero entry takes the
  shared ``arange(n)`` without searching;
* a sparse row is summed over its positive entries: within rounding of the dense route, and
  every defect (NaN, infinity, a negative entry, a sum off by more than the tolerance) still
  refused with its message;
* the compiled selection (:mod:`multidraft.theory.verifier._curtain_select`) against the numpy
  formula it replaced, token for token;
* :class:`OutsideTarget`'s compiled block sums and draws against the numpy formula, bit for bit;
* a sparse draft's row written out only on request (the scheme fits on the support's values and
  checks tuples against the support): the same row, the same rule and the same verdicts.

Each check has a twin that must fail.
"""

from __future__ import annotations

import numpy as np
import pytest

from multidraft.theory import IID, as_distribution, softmax, top_k, zipf
from multidraft.theory.laws import MASS_FLOOR
from multidraft.theory.verifier import BLOCK, OutsideTarget, fit_curtain_rule


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


@pytest.mark.parametrize("zero_at", [None, 0, 4095, 30000], ids=["full", "first", "middle", "last"])
def test_a_dense_drafts_support_is_the_shared_range_only_when_every_entry_is_positive(zero_at):
    """A dense draft (validation keeps no support) finds it on first use: the shared read-only
    ``arange(n)`` when ``min(q) > 0`` (no search), else ``flatnonzero(q > 0)``; either way the
    validated row's support. Twin: the shared range taken whenever ``min(q) >= 0`` (always, on a
    validated row) keeps the zero entry."""
    from multidraft.theory.laws._row_scan import every_token

    n = 30001
    q = softmax(np.random.default_rng(n).standard_normal(n))
    if zero_at is not None:
        q[zero_at] = 0.0
    law = IID(q / q.sum(), 3)
    support = law.support_tokens()
    np.testing.assert_array_equal(support, np.flatnonzero(law.draft > 0))
    assert not support.flags.writeable and (support is every_token(n)) == (zero_at is None)
    twin = every_token(n)
    assert np.array_equal(twin, support) == (zero_at is None)


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


def _numpy_outside(target, support, uniforms):
    """:class:`OutsideTarget`'s mass, running block sums and block-by-block draws as numpy
    computed them before the compiled steps (``reduceat`` less ``bincount``, clipped, ``cumsum``;
    per draw one block's masked ``cumsum`` and a binary search)."""
    blocks = np.add.reduceat(target, np.arange(0, len(target), BLOCK))
    blocks -= np.bincount(support // BLOCK, target[support], minlength=len(blocks))
    ends = np.cumsum(np.maximum(blocks, 0.0))
    mass = float(ends[-1])

    def weights(block):
        out = target[block * BLOCK : (block + 1) * BLOCK].copy()
        held = support[(support >= block * BLOCK) & (support < (block + 1) * BLOCK)]
        out[held - block * BLOCK] = 0.0
        return out

    levels = np.minimum(uniforms * mass, np.nextafter(mass, 0.0))
    drawn = []
    for level, block in zip(levels, np.searchsorted(ends, levels, side="right")):
        offset = level - (ends[block - 1] if block else 0.0)
        within = np.cumsum(weights(block))
        if within[-1] <= 0:  # rounding residue: the nearest block that holds mass
            block = next(b for b in [*range(block + 1, len(ends)), *range(block - 1, -1, -1)] if weights(b).sum() > 0)
            within, offset = np.cumsum(weights(block)), 0.0
        drawn.append(block * BLOCK + int(np.searchsorted(within, min(offset, np.nextafter(within[-1], 0.0)), side="right")))
    return mass, ends, np.array(drawn)


def _residue_case() -> tuple[np.ndarray, np.ndarray]:
    """A target whose block 1 holds only support tokens whose ``reduceat`` sum exceeds their
    ``bincount`` sum by rounding: that block keeps a residue of mass and no token to draw (block
    0 is empty, block 2 holds the mass outside the support)."""
    rng = np.random.default_rng(11)
    while True:
        target = np.zeros(3 * BLOCK)
        support = np.sort(rng.choice(np.arange(BLOCK, 2 * BLOCK), 40, replace=False))
        target[support] = rng.random(40)
        target[2 * BLOCK + 5 :: 7] = rng.random(len(target[2 * BLOCK + 5 :: 7]))
        target /= target.sum()
        if np.add.reduceat(target, [0, BLOCK, 2 * BLOCK])[1] > np.bincount(support // BLOCK, target[support])[1]:
            return target, support


def test_outside_target_is_the_numpy_formula_and_a_twin_is_caught():
    """The compiled block sums and draws of :class:`OutsideTarget`: mass and running sums bit for
    bit, and every draw token for token, against the numpy formula -- Zipf targets with zeros,
    supports of every size, levels at 0 and just below 1, and a block of rounding residue (the
    fallback to the nearest block with mass); the twin (each draw one token later) differs."""
    rng = np.random.default_rng(34)
    cases = [_residue_case()]
    for n in (1, BLOCK, 5 * BLOCK + 7, 131_072):
        p = zipf(n, 1.1, rng=rng)
        p[1:][rng.random(n - 1) < 0.3] = 0.0
        p /= p.sum()
        for size in (0, 1, n // 3):
            support = np.sort(rng.choice(n, size, replace=False)).astype(np.int64)
            if p[np.setdiff1d(np.arange(n), support)].sum() > 0:
                cases.append((p, support))
    uniforms = np.concatenate([rng.random(20), [0.0, np.nextafter(1.0, 0.0)], np.linspace(0.3, 0.4, 9)])
    for target, support in cases:
        outside = OutsideTarget(target, support)
        mass, ends, drawn = _numpy_outside(target, support, uniforms)
        assert outside.mass == mass
        np.testing.assert_array_equal(outside.ends, ends)
        np.testing.assert_array_equal(outside.draw(uniforms), drawn)
    target, support = cases[0]
    residue = OutsideTarget(target, support)
    assert residue.ends[0] == 0 < residue.ends[1]  # block 1: mass, and no token outside the support
    level = residue.ends[1] / 2 / residue.mass
    assert residue.draw(np.array([level]))[0] == 2 * BLOCK + 5 == _numpy_outside(target, support, np.array([level]))[2][0]
    twin = _numpy_outside(*cases[-1], uniforms)[2] + 1
    assert not np.array_equal(OutsideTarget(*cases[-1]).draw(uniforms), twin)


def test_a_sparse_drafts_row_is_written_out_only_on_request_and_equals_the_dense_route():
    """``IID(q)`` of a top-k row holds q on its support; ``law.draft``, written out on first use,
    is ``as_distribution(q)`` bit for bit, and ``support_draft()`` is that row at the support.
    One fresh position of the optimal scheme never writes the row out."""
    from multidraft.schemes import get_scheme

    p, q = _sparse_draft(131072, 100, seed=5)
    law = IID(q, 4)
    tuples = law.sample(np.random.default_rng(0), 3)  # IID.sample reads the row: a law of its own
    law = IID(q, 4)
    get_scheme("optimal").sample(p, law, tuples, np.random.default_rng(1))
    assert "draft" not in vars(law)
    np.testing.assert_array_equal(law.support_draft(), as_distribution(q)[law.support_tokens()])
    np.testing.assert_array_equal(law.draft, as_distribution(q))
    assert "draft" in vars(law) and not law.support_draft().flags.writeable


def test_tuples_checked_on_the_support_as_on_the_row_and_a_twin_is_caught():
    """A sparse draft's tuples are checked against its support (no row written): the same
    verdict as ``q[x] > 0`` on the written-out row, for tokens inside, between and beyond the
    support; the twin (a search that only asks whether the token lies below the support's
    end) lets a token of probability zero through."""
    _, q = _sparse_draft(8192, 40, seed=6)
    law = IID(q, 2)
    support = law.support_tokens()
    candidates = [int(support[0]), int(support[-1]), int(support[3]) + 1, 0, 8191, int(support[-1]) + 1]
    rows = [np.array([a, b]) for a in candidates for b in candidates]
    verdicts = [law._tuple_possible(row) for row in rows]
    assert verdicts == [bool((law.draft[row] > 0).all()) for row in rows]
    assert any(verdicts) and not all(verdicts)

    def twin(drafts):
        return bool((np.searchsorted(support, drafts) < len(support)).all())

    assert [twin(row) for row in rows] != verdicts


def test_the_scheme_fits_on_the_support_the_rule_of_the_dense_route():
    """The optimal plan's rule, fitted from the law's support values (no dense q), equals
    ``fit_curtain_rule(p, q, k, support)`` on the written-out row array for array and draw for
    draw; the twin (q of another temperature on the same support) does not."""
    from multidraft.schemes import get_scheme

    p, q = _sparse_draft(131072, 100, seed=7)
    law = IID(q, 3)
    plan = get_scheme("optimal").prepare(p, law)
    rule, dense = plan.rule, fit_curtain_rule(plan.target, as_distribution(q), 3, law.support_tokens())
    for name in ("support", "group", "group_density", "piece_start", "piece_end", "certificate"):
        np.testing.assert_array_equal(getattr(rule, name), getattr(dense, name), err_msg=name)
    assert rule.acceptance == dense.acceptance and rule.optimum == dense.optimum
    tuples = law.sample(np.random.default_rng(3), 500)
    uniforms = np.random.default_rng(4).random((500, 5))
    np.testing.assert_array_equal(rule.run(tuples, uniforms), dense.run(tuples, uniforms))
    other = as_distribution(top_k(softmax(np.log(p), temperature=0.7), 100))
    twin = fit_curtain_rule(plan.target, other, 3, law.support_tokens())
    assert not np.array_equal(twin.run(tuples, uniforms), rule.run(tuples, uniforms))
