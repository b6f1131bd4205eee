"""The without-replacement fit's fast paths against independent references (issue 34, item 3).

* the front/back pass's decays ``e^{-qt}`` and ``1 - e^{-qt}``: a Taylor series where qt <= 1/2
  (a loop that vectorises) against ``math.exp`` / ``math.expm1``;
* the J-curtain's layout for G = x^K (T* empty) by the iid curtain's fit against the polynomial
  stack pass, and its law recomputed from its pieces.

Each check is shown to reject a deliberately broken twin.
"""

from __future__ import annotations

import math

import numpy as np

from multidraft.theory.verifier._wor_curtain import Layout, clipped_layout


def _decays(q: float, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    from multidraft.theory._numba import compile_in_place
    from multidraft.theory.verifier import _front_back

    compile_in_place(vars(_front_back), _front_back.KERNELS)
    stay, drawn = np.empty(len(t)), np.empty(len(t))
    _front_back._decay(q, t, stay, drawn)
    return stay, drawn


def _decay_errors(stay: np.ndarray, drawn: np.ndarray, x: np.ndarray) -> tuple[float, float]:
    """Largest absolute error of ``stay`` and relative error of ``drawn`` against libm."""
    exact_drawn = np.array([-math.expm1(-v) for v in x])
    exact_stay = np.array([math.exp(-v) for v in x])
    return float(np.max(np.abs(stay - exact_stay))), float(np.max(np.abs(drawn - exact_drawn) / exact_drawn))


def test_decays_are_the_exponentials_to_an_ulp_and_a_short_series_is_caught():
    rng = np.random.default_rng(3)
    for q in (1e-12, 3e-7, 1e-4, 0.01, 0.3):
        t = np.sort(np.exp(rng.uniform(-20.0, 5.0, 300)))
        t = t[q * t > 1e-300]
        stay, drawn = _decays(q, t)
        absolute, relative = _decay_errors(stay, drawn, q * t)
        assert absolute <= 2.0**-52 and relative <= 4 * 2.0**-53, (q, absolute, relative)
        assert ((q * t > 0.5) | (stay == 1.0 - drawn)).all()  # stay = 1 + d on the series' side
    # The broken twin: the series cut at x^10 misses ~1e-11 relative at x = 1/2.
    x = np.linspace(1e-6, 0.5, 200)
    short = -sum((-x) ** j / math.factorial(j) for j in range(1, 11))
    assert _decay_errors(1.0 - short, short, x)[1] > 1e-12


def _law_from_pieces(layout: Layout, share: np.ndarray, k: int) -> np.ndarray:
    """r(y) = m(y) / |S_g| · Σ_{[a, b) ⊆ S_g} ((1 - a)^K - (1 - b)^K), g = y's group."""
    weight = (1.0 - layout.piece_start) ** k - (1.0 - layout.piece_end) ** k
    length = layout.piece_end - layout.piece_start
    groups = len(layout.group_first)
    group_weight = np.bincount(layout.piece_group, weights=weight, minlength=groups)
    group_length = np.bincount(layout.piece_group, weights=length, minlength=groups)
    return share * (group_weight / group_length)[layout.token_group]


def test_iid_layout_for_a_monomial_weight_is_the_polynomial_stack_pass():
    """G = x^K: the iid curtain's layout tiles [0, 1), realises its law (recomputed from the
    pieces), and reaches the polynomial stack pass's acceptance and law; a layout whose tokens
    swap groups is caught by the recomputation."""
    rng = np.random.default_rng(34)
    for trial in range(60):
        n, k = int(rng.integers(2, 300)), int(rng.integers(2, 7))
        p, m = rng.dirichlet(np.full(n, 0.5)), rng.dirichlet(np.full(n, rng.uniform(0.3, 2.0)))
        c = np.zeros(k + 1)
        c[k] = 1.0
        fast, fast_acceptance = clipped_layout(p, m, c)
        slow, slow_acceptance = clipped_layout(p, m, c, iid=False)
        assert abs(fast_acceptance - slow_acceptance) <= 1e-12
        np.testing.assert_allclose(fast.law, slow.law, rtol=1e-9, atol=1e-14)
        length = fast.piece_end - fast.piece_start
        assert (length >= 0).all() and abs(length.sum() - 1.0) <= 1e-12
        ends = np.sort(np.concatenate([fast.piece_start, fast.piece_end]))
        assert ends[0] >= -1e-13 and ends[-1] <= 1.0 + 1e-13  # [0, 1) up to the rounding of the roots
        np.testing.assert_allclose(_law_from_pieces(fast, m, k), fast.law, rtol=1e-10, atol=1e-15)
        groups = np.unique(fast.token_group)
        if trial % 10 == 0 and len(groups) >= 2:  # the broken twin: two tokens of different groups swapped
            a = int(np.flatnonzero(fast.token_group == groups[0])[0])
            b = int(np.flatnonzero(fast.token_group == groups[-1])[0])
            swapped = fast.token_group.copy()
            swapped[[a, b]] = swapped[[b, a]]
            broken = Layout(swapped, fast.piece_group, fast.piece_start, fast.piece_end, fast.group_first, fast.group_last, fast.law)
            assert not np.allclose(_law_from_pieces(broken, m, k), fast.law, rtol=1e-10, atol=1e-15)


def test_scan_order_is_the_ratio_order_and_an_unsigned_bit_sort_is_caught():
    """The cut's radix sort (issue 34, item 3): a permutation putting ``-q/p`` in order (p = 0 < q
    first, p = q = 0 last), equal to ``ratio_order`` exactly where keys are distinct and where
    they tie (then it is ``ratio_order``); sorting the keys' raw bits, without making them
    order-preserving, is caught by the same check."""
    from multidraft.theory.laws._kernels import ratio_order
    from multidraft.theory.optimum._wor_race import scan_order

    rng = np.random.default_rng(5)
    distinct = 0
    for trial in range(200):
        n = int(rng.integers(1, 3000))
        p, q = rng.dirichlet(np.full(n, 0.5)), rng.dirichlet(np.full(n, 0.5))
        if trial % 3 == 0:
            p[rng.random(n) < 0.2] = 0.0
        if trial % 4 == 0:
            q[rng.random(n) < 0.2] = 0.0
        if trial % 5 == 0:
            p, q = np.round(p, 3), np.round(q, 3)
        if p.sum() == 0 or q.sum() == 0:
            continue
        with np.errstate(divide="ignore", invalid="ignore"):
            key = -(q / p)
        order = scan_order(p, q)
        np.testing.assert_array_equal(np.sort(order), np.arange(n))
        np.testing.assert_array_equal(key[order], key[ratio_order(p, q)])  # NaN last in both
        if len(np.unique(key)) == n:
            distinct += 1
        np.testing.assert_array_equal(order, ratio_order(p, q))
    assert distinct >= 50
    key = -rng.random(100)  # negative keys: their raw bits sort backwards
    raw = np.argsort(key.view(np.uint64), kind="stable")
    assert not (np.diff(key[raw]) >= 0).all()
