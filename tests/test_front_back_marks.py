"""The front/back pass's suffix checkpoints from the light tokens' power sums
(``_front_back.suffix_marks``; docs/optimal_verifier.md §10, "The pass's checkpoints").

Checked against a third route, the token-by-token product in long double, with a twin (a
lightness threshold beyond the power sums' order) that the same check rejects; and the rule they
feed against the token-by-token sweep (``MOMENT_MARKS`` off, the previous code's bits)."""

from __future__ import annotations

import numpy as np
import pytest

from multidraft.theory.verifier import _front_back
from multidraft.theory.verifier._wor_rule import wor_selection_rule


def _zipf(n: int, exponent: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    weights = np.arange(1, n + 1, dtype=np.float64) ** -exponent * rng.uniform(0.5, 1.5, n)
    return rng.permutation(weights / weights.sum())


def _long_double_mark(q: np.ndarray, start: int, k: int, nodes: np.ndarray, phi: np.ndarray, psi: np.ndarray):
    """The product from ``start`` on, token by token in long double (80-bit on x86)."""
    t = nodes.astype(np.longdouble)
    phi, psi = phi.astype(np.longdouble), psi.astype(np.longdouble)
    for mass in q[start:][::-1].astype(np.longdouble):
        stay = np.exp(-mass * t)
        drawn, rho = -np.expm1(-mass * t), mass * stay
        new_phi, new_psi = phi * stay, psi * stay + phi * rho
        new_phi[1:] += phi[:-1] * drawn
        new_psi[1:] += psi[:-1] * drawn
        phi, psi = new_phi, new_psi
    return phi, psi


def _marks(q, k, light=_front_back.LIGHT):
    nodes, _ = _front_back.front_back_nodes(q, k)
    phi, psi = np.zeros((k, len(nodes))), np.zeros((k, len(nodes)))
    phi[0] = 1.0
    return nodes, phi, psi, _front_back.suffix_marks(q, 0, k, nodes, phi, psi, light=light)


@pytest.mark.parametrize("kind, n, k", [("zipf", 6000, 3), ("zipf", 6000, 7), ("flat", 300, 8)])
def test_power_sum_checkpoints_match_the_long_double_product_and_a_wrong_order_is_caught(kind, n, k):
    """Every checkpoint within 5e-14 relative (per coefficient and node) of the long-double
    product, most of them from power sums (not the token-by-token bits); on a flat draft the
    last checkpoints (a few tokens: their power-sum form cancels) are taken token by token, the same bits as the sweep. The twin that counts tokens up to q t = 4 as light (the
    series' order is made for 1/4) misses by more than 1e-9 on the Zipf drafts."""
    q = _zipf(n, 1.1, k) if kind == "zipf" else np.full(n, 1.0 / n)
    nodes, phi, psi, (mark_phi, mark_psi, _, _) = _marks(q, k)
    block = int(np.sqrt(len(q))) + 1
    _front_back.MOMENT_MARKS = False
    try:
        _, _, _, (plain_phi, plain_psi, _, _) = _marks(q, k)
    finally:
        _front_back.MOMENT_MARKS = True
    from_sums = [c for c in range(len(mark_phi) - 1) if not np.array_equal(mark_phi[c], plain_phi[c])]
    assert len(from_sums) >= 0.8 * (len(mark_phi) - 1)
    if kind == "flat":  # the last checkpoints, behind 17 and 34 tokens: token by token
        assert from_sums[-1] < len(mark_phi) - 3
        np.testing.assert_array_equal(mark_phi[-3:], plain_phi[-3:])
        np.testing.assert_array_equal(mark_psi[-3:], plain_psi[-3:])
    twin_phi = _marks(q, k, light=4.0)[3][0]
    worst, twin_worst = 0.0, 0.0
    for c in sorted({0, 1, len(mark_phi) // 2, from_sums[-1], len(mark_phi) - 2}):
        ref_phi, ref_psi = _long_double_mark(q, c * block, k, nodes, phi, psi)
        for got, ref in ((mark_phi[c], ref_phi), (mark_psi[c], ref_psi)):
            assert got.shape == ref.shape
            worst = max(worst, float(np.max(np.abs(got - ref) / ref)))
        twin_worst = max(twin_worst, float(np.max(np.abs(twin_phi[c] - ref_phi) / ref_phi)))
    assert worst <= 5e-14
    assert kind == "flat" or twin_worst > 1e-9  # flat: every token is light at q t = 1/4 already


def test_rule_with_power_sum_checkpoints_keeps_the_law_and_acceptance():
    """T* sides with heads of 434-2,070 tokens (n = 8192, draft T = 1.6, K = 3, 4, 7): the laws
    within 1e-13 summed and the acceptance within 1e-14 of the token-by-token sweep's, the same
    cut and tail."""
    n = 8192
    p = _zipf(n, 1.1, 5)
    q = p ** (1 / 1.6)
    q /= q.sum()
    checked = 0
    for k in (3, 4, 7):
        rule = wor_selection_rule(p, q, k)
        _front_back.MOMENT_MARKS = False
        try:
            plain = wor_selection_rule(p, q, k)
        finally:
            _front_back.MOMENT_MARKS = True
        assert rule.boundary == plain.boundary and rule.tail == plain.tail
        checked += rule.tail - rule.boundary > 400  # a long head: the pass ran on it
        assert np.abs(rule.selection_law - plain.selection_law).sum() <= 1e-13
        assert abs(rule.acceptance - plain.acceptance) <= 1e-14
    assert checked == 3
