"""The compiled sweep behind ``CurtainRule.choice_probabilities`` (``_curtain_choice``).

Two independent computations of what it returns:

* the position sets' distribution functions in long double, ``G_g(x) = Σ_i clip(x - s_i, 0,
  e_i - s_i) / |S_g|`` with no sorting and no running sum, at every integration node;
* the choice probabilities through the pieces × intervals table the sweep replaced (summed in
  stored piece order with ``np.add.at``), on small rules whose sets wrap round the curtain
  (pieces stored out of position order) and rules with point sets.

Broken twins: a sweep fed the pieces in stored order (no sort) is caught on the wrapped sets,
and a distribution function that drops the partial piece is caught by the long-double check.
"""

from __future__ import annotations

import numpy as np
import pytest

import multidraft.theory.verifier._curtain_choice as curtain_choice
import multidraft.theory.verifier._curtain_rule as curtain_rule
from multidraft.theory import IID, softmax, zipf
from multidraft.theory.verifier import optimal_selection_rule
from multidraft.theory.verifier._curtain_choice import group_density_cdf
from multidraft.theory.verifier._curtain_rule import _gauss_legendre

CASES = [(6, 2, 0), (30, 3, 1), (80, 4, 2), (300, 8, 3)]


def _rule(n: int, k: int, seed: int):
    """An iid rule on a Zipf target and a noisy draft, with two point sets (q = 1e-300)."""
    rng = np.random.default_rng(seed)
    p = zipf(n, 1.1, rng)
    q = softmax(np.log(p) + 1.5 * rng.standard_normal(n))
    q[-2:] = 1e-300
    return optimal_selection_rule(p, IID(q / q.sum(), k)), rng, q / q.sum()


def _nodes(rule):
    """The table's integration nodes: interval left ends and offsets (as ``_choice_table``)."""
    edges = np.unique(np.concatenate([[0.0, 1.0], rule.piece_start, rule.piece_end]))
    nodes, _ = _gauss_legendre(rule.k // 2 + 2)
    width = np.diff(edges)
    return edges[:-1], 0.5 * width[:, None] * (nodes + 1.0)


def _owner_scale(rule):
    owner = np.repeat(np.arange(len(rule.group_first)), rule.group_last - rule.group_first)
    size = np.bincount(owner, rule.piece_end - rule.piece_start, minlength=len(rule.group_first))
    return owner, size


def _wrapped(rule) -> int:
    """Groups whose pieces are stored out of position order."""
    return sum(bool(np.any(np.diff(rule.piece_start[a:b]) < 0)) for a, b in zip(rule.group_first, rule.group_last))


def _long_double_cdf(rule, left, offset, partial: bool = True):
    """``G_g`` at every node by the clip formula in long double (``partial=False``: a WRONG
    twin that counts only the pieces wholly below the node)."""
    owner, size = _owner_scale(rule)
    x = (left[:, None].astype(np.longdouble) + offset.astype(np.longdouble)).ravel()
    start, end = rule.piece_start.astype(np.longdouble), rule.piece_end.astype(np.longdouble)
    covered = np.clip(x[None, :] - start[:, None], 0, (end - start)[:, None])
    if not partial:
        covered = np.where(x[None, :] >= end[:, None], covered, 0)
    out = np.zeros((len(size), x.size), dtype=np.longdouble)
    np.add.at(out, owner, covered)
    return out / np.where(size > 0, size, 1.0)[:, None]


def _table_choice(rule, tuples):
    """``P(i | x)`` through the pieces × intervals table summed in stored piece order (the
    computation the sweep replaced), for rules without point sets in ``tuples``."""
    left, offset = _nodes(rule)
    _, weights = _gauss_legendre(rule.k // 2 + 2)
    dt = (0.5 * np.diff(np.unique(np.concatenate([[0.0, 1.0], rule.piece_start, rule.piece_end])))[:, None] * weights).ravel()
    owner, size = _owner_scale(rule)
    start, end, lengths = rule.piece_start[:, None], rule.piece_end[:, None], rule.piece_end - rule.piece_start
    scale = np.where(size <= 0, 1.0, size)[owner][:, None, None]
    inside = (start <= left) & (left < end)
    below = np.where(end <= left, lengths[:, None], np.where(inside, left - start, 0.0))
    covered = below[:, :, None] + inside[:, :, None] * offset
    density, cdf = np.zeros((len(size), dt.size)), np.zeros((len(size), dt.size))
    np.add.at(density, owner, np.broadcast_to(inside[:, :, None] / scale, covered.shape).reshape(len(owner), -1))
    np.add.at(cdf, owner, (covered / scale).reshape(len(owner), -1))
    group = rule.group[rule._local(tuples)]
    g, survive = density[group], 1.0 - cdf[group]
    out = np.empty(np.shape(tuples))
    for i in range(rule.k):
        out[:, i] = (g[:, i] * np.prod(np.delete(survive, i, axis=1), axis=1)) @ dt
    return out


@pytest.mark.parametrize("n, k, seed", CASES)
def test_sweep_is_the_distribution_function_in_long_double(n, k, seed):
    """Density and G of every group at every node against the clip formula in long double, to
    1e-15; a twin that drops the partial piece is off by more than 1e-3."""
    rule, _, _ = _rule(n, k, seed)
    left, offset = _nodes(rule)
    owner, size = _owner_scale(rule)
    density, cdf = group_density_cdf(left, offset, rule.piece_start, rule.piece_end, owner, np.where(size > 0, size, 1.0))
    solid = size > 0
    reference = _long_double_cdf(rule, left, offset)
    np.testing.assert_allclose(cdf[solid], reference[solid].astype(np.float64), rtol=0, atol=1e-15)
    wrong = _long_double_cdf(rule, left, offset, partial=False)
    assert np.abs(cdf[solid] - wrong[solid].astype(np.float64)).max() > 1e-3
    inside = (rule.piece_start[:, None] <= left) & (left < rule.piece_end[:, None])
    covering = np.zeros((len(size), len(left)))
    np.add.at(covering, owner, inside)
    expected = np.repeat(covering / np.where(solid, size, 1.0)[:, None], offset.shape[1], axis=1)
    np.testing.assert_array_equal(density[solid], expected[solid])


@pytest.mark.parametrize("n, k, seed", CASES)
def test_choice_probabilities_equal_the_piece_table(n, k, seed, monkeypatch):
    """``choice_probabilities`` (the sweep) against the pieces × intervals table on tuples
    without point sets: equal to 1e-15, bit for bit where no set wraps. A sweep fed the pieces
    in stored order (the sort removed) is caught where sets wrap."""
    monkeypatch.setattr(curtain_rule, "_TABLE_PIECES", 10**9)  # the table path (the row path: below)
    rule, rng, q = _rule(n, k, seed)
    solid = q.copy()
    solid[-2:] = 0.0
    tuples = rng.choice(n, size=(40, k), p=solid / solid.sum())
    new, old = rule.choice_probabilities(tuples), _table_choice(rule, tuples)
    np.testing.assert_allclose(new, old, rtol=0, atol=1e-15)
    np.testing.assert_allclose(new.sum(axis=1), 1.0, rtol=0, atol=1e-13)
    if not _wrapped(rule):
        np.testing.assert_array_equal(new, old)
        return
    monkeypatch.setattr(curtain_choice.np, "lexsort", lambda keys: np.arange(len(keys[0])))
    assert np.abs(rule.choice_probabilities(tuples) - old).max() > 1e-6


@pytest.mark.parametrize("n, k, seed", CASES)
def test_row_kernel_is_the_piece_table(n, k, seed, monkeypatch):
    """The row path of a large rule (one compiled call per row, ``row_choice``; forced here on
    every rule) against the pieces × intervals table on tuples without point sets, to 1e-15 and
    summing to one, sets that wrap round the curtain included; a row with a point set (taken by
    the restricted rule where the kernel declines it) equals the table path to 1e-15. WRONG twin: the row kernel with
    one Gauss-Legendre node per interval (the midpoint rule, not exact for degree K - 1 >= 2)
    is off by more than 1e-6 at K >= 3."""
    rule, rng, q = _rule(n, k, seed)
    solid = q.copy()
    solid[-2:] = 0.0
    tuples = rng.choice(n, size=(40, k), p=solid / solid.sum())
    pointed = tuples.copy()
    pointed[:, 0] = n - 1  # a point set (q = 1e-300) in every row
    old, table_pointed = _table_choice(rule, tuples), rule.restricted(pointed[0])._choice_table(pointed[:1])
    monkeypatch.setattr(curtain_rule, "_TABLE_PIECES", 0)
    rows = rule.choice_probabilities(tuples)
    np.testing.assert_allclose(rows, old, rtol=0, atol=1e-15)
    np.testing.assert_allclose(rows.sum(axis=1), 1.0, rtol=0, atol=1e-13)
    np.testing.assert_allclose(rule.choice_probabilities(pointed[:1]), table_pointed, rtol=0, atol=1e-15)
    monkeypatch.setattr(curtain_rule, "_gauss_legendre", lambda count: np.polynomial.legendre.leggauss(1))
    if k >= 3:  # at K = 2 the integrand is linear and the midpoint rule exact
        assert np.abs(rule.choice_probabilities(tuples) - old).max() > 1e-6  # the twin


def test_some_case_wraps():
    """The cases above include sets stored out of position order (else the sort's twin is inert)."""
    assert any(_wrapped(_rule(n, k, seed)[0]) for n, k, seed in CASES)


def test_pieces_must_come_group_after_group():
    left, offset = np.array([0.0, 0.5]), np.zeros((2, 1))
    with pytest.raises(ValueError, match="group after group"):
        group_density_cdf(left, offset, np.array([0.0, 0.5]), np.array([0.5, 1.0]), np.array([1, 0]), np.ones(2))
