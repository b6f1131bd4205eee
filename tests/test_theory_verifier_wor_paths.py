"""The without-replacement fit's fast paths against independent references (issue 34, item 3).

* the front/back pass's decays ``e^{-qt}`` and ``1 - e^{-qt}``: a Taylor series where qt <= 1/2
  (a loop that vectorises) against ``math.exp`` / ``math.expm1``;
* the J-curtain's layout for G = x^K (T* empty) by the iid curtain's fit against the polynomial
  stack pass, and its law recomputed from its pieces;
* the front/back pass's factor (rows from an index array) and its nodes padded to whole vectors,
  the prefix race's heavy factors coefficient-major, and the cut's compiled sums: the same bits
  as the plain expressions (issue 34, item 3, fifth round).

Each check is shown to reject a deliberately broken twin.
"""

from __future__ import annotations

import math

import numpy as np

from multidraft.theory import softmax
from multidraft.theory.verifier._wor_curtain import Layout, clipped_layout


def _decays(q: float, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    from multidraft.theory.verifier import _front_back

    _front_back._compiled()
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


def _factor_reference(phi, psi, stay, drawn, q, allowed):
    """One token's factor, coefficient by coefficient from the top with numpy (old values)."""
    phi, psi = phi.copy(), psi.copy()
    b, rho = allowed * drawn, (allowed * q) * stay
    for m in range(len(phi) - 1, 0, -1):
        psi[m] = psi[m] * stay + psi[m - 1] * b + phi[m] * rho
        phi[m] = phi[m] * stay + phi[m - 1] * b
    psi[0] = psi[0] * stay + phi[0] * rho
    phi[0] = phi[0] * stay
    return phi, psi


def test_factor_with_rows_from_an_index_array_is_the_plain_update_and_a_missing_pass_is_caught():
    from multidraft.theory.verifier import _front_back

    _front_back._compiled()
    rng = np.random.default_rng(12)
    for k in range(1, 10):
        for nodes in (5, 45, 48):
            phi, psi = rng.random((k, nodes)), rng.random((k, nodes))
            stay = rng.uniform(0.2, 1.0, nodes)
            drawn, q, allowed = 1.0 - stay, float(rng.uniform(1e-4, 0.2)), float(rng.uniform(0.0, 1.0))
            expected = _factor_reference(phi, psi, stay, drawn, q, allowed)
            tops = np.arange(k - 1, 1, -2)
            got_phi, got_psi = phi.copy(), psi.copy()
            _front_back._factor(got_phi, got_psi, stay, drawn, q, allowed, k, tops)
            np.testing.assert_array_equal(got_phi, expected[0])
            np.testing.assert_array_equal(got_psi, expected[1])
            if len(tops):  # the broken twin: the top pass left out
                twin_phi, twin_psi = phi.copy(), psi.copy()
                _front_back._factor(twin_phi, twin_psi, stay, drawn, q, allowed, k, tops[1:])
                assert not np.array_equal(twin_phi, expected[0])


def test_front_back_head_on_padded_nodes_is_the_unpadded_pass_and_a_weighted_pad_is_caught():
    """The nodes padded to whole vectors carry weight 0: α, r and the prefix pair are the bits of
    the kernel run on the nodes as given; pads that repeat a middle node with its weight change
    them."""
    from multidraft.theory.verifier import _front_back

    rng = np.random.default_rng(21)
    checked = 0
    for trial in range(30):
        n, k = int(rng.integers(3, 40)), int(rng.integers(1, 6))
        q = rng.dirichlet(np.full(n, 0.7))
        p = rng.dirichlet(np.full(n, 0.7))
        boundary = int(rng.integers(0, n))
        nodes, weights = _front_back.front_back_nodes(q, k)  # a multiple of LANES: drop 1-7 for a partial vector
        nodes, weights = nodes[: len(nodes) - 1 - trial % 7], weights[: len(nodes) - 1 - trial % 7]
        if len(nodes) % _front_back.LANES == 0:
            continue
        checked += 1
        alpha, r, pre_phi, pre_psi = _front_back.front_back_head(p, q, boundary, k, nodes, weights)
        suffix_phi, suffix_psi = np.zeros((k, len(nodes))), np.zeros((k, len(nodes)))
        suffix_phi[0] = 1.0
        marks = _front_back.suffix_marks(q, boundary, k, nodes, suffix_phi, suffix_psi)
        plain = _front_back._pass(p, q, boundary, k, nodes, weights, np.zeros(n), True, *marks, 0.0, n)
        for got, expected in zip((alpha, r, pre_phi, pre_psi), (plain[0], plain[1], plain[2].T, plain[3].T)):
            np.testing.assert_array_equal(got, expected)
        pad, middle = -len(nodes) % _front_back.LANES, len(nodes) // 2  # the twin: pads that weigh
        twin_nodes = np.concatenate([nodes, np.full(pad, nodes[middle])])
        twin_weights = np.concatenate([weights, np.full(pad, weights[middle])])
        twin_marks = _front_back.suffix_marks(
            q, boundary, k, twin_nodes, np.pad(suffix_phi, ((0, 0), (0, pad)), mode="edge"), np.pad(suffix_psi, ((0, 0), (0, pad)), mode="edge")
        )
        twin = _front_back._pass(p, q, boundary, k, twin_nodes, twin_weights, np.zeros(n), True, *twin_marks, 0.0, n)
        assert not np.array_equal(twin[1], r)
    assert checked >= 20


def test_heavy_factors_are_the_node_by_node_product_and_libm_decays_are_caught():
    """The prefix race's tokens taken one by one (``split=False``): the truncated product of
    ``e^{-qt} + (1 - e^{-qt}) x`` computed coefficient-major equals it node by node, bit for bit,
    with ``e^{-qt} = 1 + _expm1_series(-qt)`` where qt <= 1/2 and libm's exp beyond; decays from
    libm's exp throughout (the previous rounding) are within 1e-14 relative and not bit-equal."""
    from multidraft.theory.optimum import _wor_moments
    from multidraft.theory.optimum._wor_race import count_law

    _wor_moments._compiled()
    rng = np.random.default_rng(4)
    for trial in range(20):
        n, k = int(rng.integers(1, 30)), int(rng.integers(1, 9))
        q, t = rng.dirichlet(np.full(n, 0.5)), np.sort(np.exp(rng.uniform(-3.0, 4.0, int(rng.integers(1, 70)))))
        law, _ = count_law(q, k, t, split=False)
        expected, twin = np.zeros((len(t), k)), np.zeros((len(t), k))
        for g, node in enumerate(t):
            state, other = np.zeros(k), np.zeros(k)
            state[0] = other[0] = 1.0
            for mass in q:
                x = mass * node
                series = 1.0 + _wor_moments._expm1_series(-x) if x <= _wor_moments.SERIES_LIMIT else math.exp(-x)
                for vector, stay in ((state, series), (other, math.exp(-x))):
                    for m in range(k - 1, 0, -1):
                        vector[m] = vector[m] * stay + vector[m - 1] * (1.0 - stay)
                    vector[0] = vector[0] * stay
            expected[g], twin[g] = state, other
        np.testing.assert_array_equal(law, expected)
        np.testing.assert_allclose(law, twin, rtol=1e-14, atol=1e-300)
        if trial == 0:
            assert not np.array_equal(law, twin)


def test_cut_sums_are_numpys_and_a_spread_keeping_the_top_is_caught():
    """``prefix_bounds``' prefix masses and ``outside_mass`` are ``np.cumsum``'s bits; the race
    spread σ (the mass outside the K - 1 largest) and β (the least of them) match a sort, with
    ties, zeros and fewer than K positive masses; σ summed over every token is caught."""
    from multidraft.theory.optimum._wor_sums import outside_mass, prefix_bounds, race_spread

    rng = np.random.default_rng(17)
    for trial in range(300):
        n, k = int(rng.integers(1, 60)), int(rng.integers(1, 9))
        p, q = rng.dirichlet(np.full(n, 0.5)), rng.dirichlet(np.full(n, 0.5))
        if trial % 3 == 0:
            q = np.round(q * 8) / 8  # ties, zeros
        prefix_p, prefix_q, _, _ = prefix_bounds(p, q, k)
        np.testing.assert_array_equal(prefix_p, np.concatenate([[0.0], np.cumsum(p)]))
        np.testing.assert_array_equal(prefix_q, np.minimum(np.concatenate([[0.0], np.cumsum(q)]), 1.0))
        np.testing.assert_array_equal(outside_mass(q), np.concatenate([np.cumsum(q[::-1])[::-1], [0.0]]))
        positive = np.sort(q[q > 0])[::-1]
        spread, least = race_spread(q, k)
        if len(positive) < k:
            assert abs(spread - max(positive.sum(), np.finfo(np.float64).tiny)) <= 1e-15 and least == 0.0
            continue
        assert abs(spread - positive[k - 1 :].sum()) <= 1e-15 * max(positive[k - 1 :].sum(), 1e-300)
        assert least == (positive[k - 2] if k > 1 else 0.0)
        if k > 1:
            assert abs(positive.sum() - positive[k - 1 :].sum()) > 1e-15  # the twin: the top kept in σ


def _increment(x):
    return x + 1


def test_compile_in_place_builds_no_decorator_once_every_kernel_is_compiled(monkeypatch):
    """The wor fit calls ``compile_in_place`` ~30 times; once its kernels are compiled it returns
    before building numba's decorator (~30 µs a call), by the exact type of numba's compiled
    functions (no import, no ABC isinstance: ~8 -> ~1 µs a call); a name still plain, or bound
    again to a plain function, gets compiled."""
    import numba
    from numba.core.dispatcher import Dispatcher

    from multidraft.theory import _numba
    from multidraft.theory._numba import compile_in_place

    built = []
    real = numba.njit

    def counting(*args, **kwargs):
        built.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(numba, "njit", counting)
    namespace = {"first": _increment, "second": _increment}
    compile_in_place(namespace, ["first"])
    assert isinstance(namespace["first"], Dispatcher) and len(built) == 1
    compile_in_place(namespace, ["first"])
    assert len(built) == 1 and _numba._COMPILED_TYPE is type(namespace["first"])
    compile_in_place(namespace, ["first", "second"])  # the twin: a plain name builds it again
    assert isinstance(namespace["second"], Dispatcher) and len(built) == 2
    namespace["first"] = _increment  # bound again to the plain function: compiled again
    compile_in_place(namespace, ["second", "first"])
    assert isinstance(namespace["first"], Dispatcher) and len(built) == 3
    namespace["third"] = _increment  # a name to inline gets numba's inline="always", the others not
    compile_in_place(namespace, ["third"], inline=frozenset({"third"}))
    assert namespace["third"].targetoptions.get("inline") == "always" and "inline" not in namespace["first"].targetoptions


def _p_star_one(seed: int, count: int):
    """Small instances (n <= 7) with P* = 1 whose scan finds a non-empty T* (Ω, by the rounding
    of Σ p): targets Dirichlet(0.6), drafts a hotter, noisier copy, as in the tree benchmark."""
    from multidraft.theory.optimum._wor_race import optimal_cut

    rng = np.random.default_rng(seed)
    for _ in range(count):
        n = int(rng.integers(3, 8))
        k = int(rng.integers(2, min(n, 4) + 1))
        p = rng.dirichlet(np.full(n, 0.6))
        q = softmax((np.log(p) + 0.5 * rng.standard_normal(n)) / rng.uniform(1.0, 2.5))
        cut = optimal_cut(p, q, k)
        if cut.size and cut.value >= 1.0 - 1e-10:
            yield p, q, k, cut


def test_p_star_one_takes_the_empty_cut_when_it_reaches_one():
    """P* = 1 (docs/optimal_verifier.md §8b): where the rule of T* = ∅ (the iid curtain of the
    whole vocabulary) reaches acceptance 1 it is the rule -- its law and output by enumeration,
    lossless -- and never below the rule of the scan's cut; that rule (the twin without the
    path) falls short of P* on some of these instances."""
    from rule_checks import enumerated_law, enumerated_output

    from multidraft.theory import WithoutReplacement
    from multidraft.theory.verifier import optimal_selection_rule
    from multidraft.theory.verifier._wor_rule import _rule_for_cut

    taken = twin_short = 0
    for p, q, k, cut in _p_star_one(seed=30, count=700):
        law = WithoutReplacement(q, k)
        rule, scanned = optimal_selection_rule(p, law), _rule_for_cut(p, q, k, cut)
        assert len(rule.certificate) == 0 and rule.acceptance >= 1.0 - 1e-10
        assert rule.acceptance >= scanned.acceptance - 1e-12
        if taken < 12:
            np.testing.assert_allclose(enumerated_law(rule, law), rule.selection_law, rtol=0, atol=1e-12)
            np.testing.assert_allclose(enumerated_output(rule, law), p, rtol=0, atol=1e-12)
        taken += 1
        twin_short += scanned.acceptance < 1.0 - 1e-10
    assert taken >= 30 and twin_short >= 1, (taken, twin_short)


def test_p_star_one_keeps_the_scans_cut_when_the_empty_cut_falls_short():
    """The guard: p = (2, 4, 1, 8)/15 (scaled by 1 - 2^-52: Σ p rounds below 1, so the scan
    finds Ω), q = (2, 2, 7, 4)/15, K = 2 has P* = 1 without replacement but 21/25 for iid drafts
    (§9); the rule of T* = ∅ reaches 0.974 < 1, so the scan's cut is kept (a rule always taking
    T* = ∅, the twin, would have an empty certificate)."""
    from multidraft.theory.optimum._wor_race import OptimalCut, optimal_cut
    from multidraft.theory.verifier._wor_rule import _rule_for_cut, wor_selection_rule

    p, q, k = np.array([2.0, 4.0, 1.0, 8.0]) / 15 * (1.0 - 2.0**-52), np.array([2.0, 2.0, 7.0, 4.0]) / 15, 2
    cut = optimal_cut(p, q, k)
    assert cut.size == 4 and cut.value >= 1.0 - 1e-10
    empty = _rule_for_cut(p, q, k, OptimalCut(cut.order, 0, cut.value, 0.0, cut.candidates))
    assert empty.acceptance < 0.98
    rule = wor_selection_rule(p, q, k)
    assert len(rule.certificate) == cut.size
    np.testing.assert_array_equal(rule.selection_law, _rule_for_cut(p, q, k, cut).selection_law)
