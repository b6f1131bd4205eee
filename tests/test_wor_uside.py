"""The without-replacement rule's U side in compiled passes (issue 30, item 5): the J-curtain
layout's order and cut (:func:`~multidraft.theory.verifier._wor_curtain._order_and_cut`) against
the numpy expressions it replaces, bit for bit, each check shown to reject a broken twin."""

from __future__ import annotations

import numpy as np

from multidraft.theory.verifier import _wor_curtain
from multidraft.theory.verifier._orders import sorted_tokens


def _numpy_order_and_cut(p, m, c, hint):
    """The code :func:`_order_and_cut` replaces (clipped_layout's lines before it)."""
    key = -m / np.where(p > 0, p, 1.0)
    if hint is None:
        order = np.lexsort((key, p > 0))
    else:
        drafted = p[hint] > 0
        zero, positive = hint[~drafted], hint[drafted]
        order = np.concatenate([sorted_tokens(zero, key[zero]), sorted_tokens(positive, key[positive])])
    prefix_p = np.concatenate([[0.0], np.cumsum(p[order])])
    prefix_m = np.minimum(np.concatenate([[0.0], np.cumsum(m[order])]), 1.0)
    values = prefix_p + 1.0 - np.polynomial.polynomial.polyval(prefix_m, c)
    return order, int(np.argmin(values)), values


def _instances(seed: int):
    """80 ``(p, m, c, hint)``: p with zeros, ratios with many exact ties (dyadic masses; with G(x) = x
    and p = m on some tokens, equal prefix values), hints
    nearly in order (the U side's position order reversed), none, or random (numpy's sort then)."""
    rng = np.random.default_rng(seed)
    for trial in range(80):
        size = int(rng.integers(1, 600))
        if trial % 2:  # dyadic, so sums are exact (not normalised: the pass does not need it)
            m = rng.integers(1, 5, size) * 2.0**-12
            p = m * rng.integers(0, 4, size)
        else:
            m = rng.dirichlet(np.full(size, 0.5)) + 1e-12
            p = rng.dirichlet(np.full(size, 0.5)) * (rng.random(size) < 0.9)
            m, p = m / m.sum(), p / p.sum()
        c = rng.dirichlet(np.ones(int(rng.integers(2, 6)))) if trial % 4 != 1 else np.array([0.0, 1.0])  # G(x) = x: equal minima
        key = -m / np.where(p > 0, p, 1.0)
        hint = (None, rng.permutation(size), np.argsort(key + rng.normal(0, 1e-3, size), kind="stable"))[trial % 3]
        yield p, m, c, hint


def test_order_and_cut_is_the_numpy_route_bit_for_bit_and_twins_are_caught():
    last_minimum = reversed_ties = 0
    for p, m, c, hint in _instances(0):
        order, cut = _wor_curtain._order_and_cut(p, m, c, hint)
        expected, expected_cut, values = _numpy_order_and_cut(p, m, c, hint)
        np.testing.assert_array_equal(order, expected)
        assert cut == expected_cut
        # WRONG twins: the last of equal minima; equal keys by decreasing id (the hint's order)
        last_minimum += len(values) - 1 - int(np.argmin(values[::-1])) != expected_cut
        key = -m / np.where(p > 0, p, 1.0)
        twin = np.lexsort((-np.arange(len(p)), key, p > 0))
        reversed_ties += not np.array_equal(twin, expected)
    assert last_minimum >= 3 and reversed_ties >= 10


def test_one_interval_weight_is_polynomial_weights():
    rng = np.random.default_rng(1)
    for _ in range(200):
        c = rng.dirichlet(np.ones(int(rng.integers(2, 9))))
        lo, hi = np.sort(rng.random(2))
        _wor_curtain._kernels()
        assert _wor_curtain.weight(float(lo), float(hi), c) == float(_wor_curtain.polynomial_weight(lo, hi, c))


def test_choice_of_rows_that_all_draft_u_is_the_mixed_batchs_and_the_front_back_product_is_caught():
    """Rows that all draft a U token skip the front/back product (the curtain overwrites it):
    the same bits as those rows inside a batch with a T*-only row (the general route), and a
    twin keeping the front/back product for them is told apart."""
    from multidraft.theory import zipf
    from multidraft.theory.verifier._selection_rule import FrontBackRule
    from multidraft.theory.verifier._wor_rule import wor_selection_rule

    rng = np.random.default_rng(3)
    checked = caught = 0
    for trial in range(12):
        n, k = int(rng.integers(40, 400)), int(rng.integers(2, 4))
        p = rng.permutation(zipf(n, 1.1))
        q = np.exp(np.log(p) + 1.5 * rng.standard_normal(n))
        rule = wor_selection_rule(p, q / q.sum(), k)
        if rule.first_draft or rule.u_rule != "j-curtain" or rule.boundary in (0, n) or n - rule.boundary < k:
            continue
        u, t = np.flatnonzero(rule.position < rule.boundary), np.flatnonzero(rule.position >= rule.boundary)
        u = u[rule.draft[u] > 0]
        if len(u) < 1 or len(t) < k:
            continue
        rows = np.array([np.concatenate([[u[i % len(u)]], rng.choice(np.setdiff1d(np.arange(n), u[i % len(u)]), k - 1, replace=False)]) for i in range(6)])
        rows = rows[rule._in_u(rows).any(axis=-1)]
        mixed = np.concatenate([rows, t[:k][None, :]])
        got = rule.choice_probabilities(rows)
        np.testing.assert_array_equal(got, rule.choice_probabilities(mixed)[: len(rows)])
        checked += 1
        caught += not np.array_equal(FrontBackRule.choice_probabilities(rule, rows), got)
    assert checked >= 5 and caught == checked


def test_the_rules_alpha_and_r_do_not_depend_on_the_memory_they_reuse():
    """α and r start uninitialised (every entry is written: U's zeros, T*'s scatter): fits after
    freeing arrays of NaN and of 7.0 of the same size give the same finite bits (dropping either
    of U's zero fills fails it: checked by hand, a NaN left at a U token)."""
    from multidraft.theory import zipf
    from multidraft.theory.verifier._wor_rule import wor_selection_rule

    rng = np.random.default_rng(4)
    for trial in range(8):
        n, k = int(rng.integers(50, 3000)), int(rng.integers(2, 5))
        p = rng.permutation(zipf(n, 1.1))
        q = np.exp(np.log(p) + 1.5 * rng.standard_normal(n))
        q[rng.random(n) < 0.1] = 0.0
        fits = []
        for poison in (np.nan, 7.0):
            garbage = [np.full(n, poison) for _ in range(6)]
            del garbage
            rule = wor_selection_rule(p, q / q.sum(), k)
            fits.append((rule.alpha.tobytes(), rule.selection_law.tobytes()))
            assert np.isfinite(rule.alpha).all() and np.isfinite(rule.selection_law).all()
        assert fits[0] == fits[1], trial
