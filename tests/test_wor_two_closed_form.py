"""K = 2 in closed form (issue 30, item 5): the cut, the J-law and the front/back pass with its
uniform tail as finite sums over the drafted pair (theory/optimum/_wor_pairs.py,
theory/verifier/_front_back_two.py).

Independent routes: exact enumeration of the pair's law (Fractions for the cut, every ordered
tuple of ``WithoutReplacement.enumerate`` with the rule's coins for the pass), the race's
quadrature (``full_scan_cut``, ``race_j_law``, ``front_back_pass`` and the whole rule with
``_wor_rule.PAIRS = 0``). Each formula has a broken twin -- the same sums with one factor wrong,
written out in numpy -- that the same check rejects.
"""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest

from multidraft.theory import WithoutReplacement, softmax, zipf
from multidraft.theory.optimum._wor_pairs import pair_containment, pair_cut, pair_j_law, pair_masses
from multidraft.theory.optimum._wor_race import full_scan_cut, optimal_cut, race_j_law
from multidraft.theory.verifier import optimal_selection_rule
from multidraft.theory.verifier._front_back import front_back_nodes, front_back_pass
from multidraft.theory.verifier._front_back_two import pair_last_node, pair_pass
from multidraft.theory.verifier._wor_parts import radix_order
from multidraft.theory.verifier._wor_enumeration import stream_outcomes
from multidraft.theory.verifier._wor_rule import wor_selection_rule

from wor_instances import instances as adversarial


# --- references -------------------------------------------------------------------------------


def enumerated_pass(p, q, boundary, alpha, tail):
    """The front/back rule's law with coins ``alpha`` (positions = indices, U = [0, boundary),
    uniform tail from ``tail``) by enumerating every ordered pair of ``WithoutReplacement`` and
    every coin outcome of the active part."""
    tuples, probs = WithoutReplacement(q, 2).enumerate()
    r = np.zeros(len(q))
    for pair, prob in zip(tuples, probs):
        drafted = sorted(int(x) for x in pair)
        active = [x for x in drafted if x < boundary] or drafted
        for coins in itertools.product((0, 1), repeat=len(active)):
            weight = prob * np.prod([alpha[x] if c else 1.0 - alpha[x] for x, c in zip(active, coins)])
            fronts = [x for x, c in zip(active, coins) if c]
            if fronts:
                r[fronts[0]] += weight
                continue
            in_tail = [x for x in active if x >= tail and active[0] >= boundary]
            for x in in_tail or active[-1:]:
                r[x] += weight / max(len(in_tail), 1)
    return r


def formula_pass(p, q, boundary, alpha, tail, *, odds_factor=True, tail_share=0.5):
    """The module docstring's A_j, B_j written out per token in numpy (O(n²)), with the coins
    given; ``odds_factor=False`` is the twin whose S_2 drops the 1/(1 - q_z) factor,
    ``tail_share=1`` the twin whose tail token beats every other tail token."""
    n = len(q)
    r = np.zeros(n)
    for j in range(n):
        if q[j] == 0:
            continue
        part = range(0, boundary) if j < boundary else range(boundary, n)
        c_whole, c_last = np.zeros(n), np.zeros(n)
        for z in range(n):
            if z == j:
                continue
            if z in part:
                earlier = 1.0 - alpha[z]
                if j >= tail:  # the tail: against the head 1 - α, against the tail 1/2
                    c_whole[z] = c_last[z] = tail_share if z >= tail else earlier
                else:
                    c_whole[z], c_last[z] = (earlier, earlier) if z < j else (1.0, 0.0)
            else:
                c_whole[z] = c_last[z] = 1.0 if j < boundary else 0.0
        factor = 1.0 / (1.0 - q) if odds_factor else np.ones(n)
        a = q[j] * ((c_whole @ q) / (1.0 - q[j]) + c_whole @ (q * factor))
        b = q[j] * ((c_last @ q) / (1.0 - q[j]) + c_last @ (q * factor))
        r[j] = a if j >= tail else alpha[j] * a + (1.0 - alpha[j]) * b
    return r


def _pair_cases(count, seed=0):
    """Small K = 2 cases with a boundary, a tail and random coins (zeros at q = 0 only by chance)."""
    rng = np.random.default_rng(seed)
    cases = [(p, q) for kind, p, q, k in adversarial(seed, 4 * count, max_n=6, max_k=2) if k == 2][:count]
    for p, q in cases:
        n = len(q)
        boundary = int(rng.integers(0, n + 1))
        tail = int(rng.integers(boundary, n + 1))
        alpha = rng.uniform(0, 1, n)
        alpha[tail:] = 0.0  # the tail's coins say back
        yield p, q, boundary, tail, alpha


def _random_nodes(seed, trials=40):
    """``(rng, p, q, boundary)`` of ``trials`` random nodes of 3-299 tokens, drafts peaked and
    flat by turns; ``rng`` goes on to the trial's own draws."""
    rng = np.random.default_rng(seed)
    for trial in range(trials):
        n = int(rng.integers(3, 300))
        q = rng.dirichlet(np.full(n, 0.3 if trial % 2 else 2.0))
        p = rng.dirichlet(np.full(n, 0.5))
        yield rng, p, q, int(rng.integers(0, n))


# --- the pass ---------------------------------------------------------------------------------


def test_pass_law_is_the_enumerated_law():
    """Given coins and fitted coins, with and without a tail: the closed form against every
    ordered pair and coin outcome (absolute 1e-14); the fitted coins' law sums to one."""
    worst = 0.0
    for p, q, boundary, tail, alpha in _pair_cases(150):
        _, r = pair_pass(p, q, boundary, tail, alpha)
        worst = max(worst, float(np.abs(r - enumerated_pass(p, q, boundary, alpha, tail)).max()))
        fitted, r = pair_pass(p, q, boundary, tail)
        np.testing.assert_allclose(r, enumerated_pass(p, q, boundary, fitted, tail), rtol=0, atol=1e-14)
        assert abs(r.sum() - 1.0) <= 1e-14
    assert worst <= 1e-14


def test_formula_and_its_twin_against_enumeration():
    """The docstring's sums (numpy, O(n²)) are the enumerated law and the kernel; S_2 without its
    1/(1 - q) factor, and a tail token that beats the other tail tokens, are caught by the
    enumeration."""
    caught, tails, tail_caught = 0, 0, 0
    for p, q, boundary, tail, alpha in _pair_cases(40, seed=1):
        enumerated = enumerated_pass(p, q, boundary, alpha, tail)
        np.testing.assert_allclose(formula_pass(p, q, boundary, alpha, tail), enumerated, rtol=0, atol=1e-14)
        np.testing.assert_allclose(pair_pass(p, q, boundary, tail, alpha)[1], enumerated, rtol=0, atol=1e-14)
        caught += np.abs(formula_pass(p, q, boundary, alpha, tail, odds_factor=False) - enumerated).max() > 1e-6
        if np.count_nonzero(q[tail:]) >= 2:
            tails += 1
            tail_caught += np.abs(formula_pass(p, q, boundary, alpha, tail, tail_share=1.0) - enumerated).max() > 1e-6
    assert caught >= 35
    assert tails >= 5 and tail_caught == tails


def test_pass_against_the_quadrature_at_4096():
    """n = 4096 rows (Zipf targets, hotter drafts, a dominant draft token, ties): the closed form's
    law and fitted coins against the quadrature pass's (no tail, the same U/T* split): laws within
    1e-13; the U side alone (``upto``) is the head of the whole pass."""
    rng = np.random.default_rng(3)
    rows = []
    for temperature in (0.7, 1.2, 1.6):
        p = zipf(4096, exponent=1.1, rng=rng)
        rows.append((p, softmax(np.log(p), temperature=temperature)))
    q = np.full(4096, 1e-12 / 4095)
    q[7] = 1.0 - 1e-12
    rows.append((rng.dirichlet(np.full(4096, 0.3)), q))
    for p, q in rows:
        order = rng.permutation(4096)
        p, q = p[order], q[order]
        boundary = 300
        nodes, weights = front_back_nodes(q, 2)
        fitted, law = front_back_pass(p, q, boundary, 2, nodes, weights)
        alpha, r = pair_pass(p, q, boundary)
        np.testing.assert_allclose(r, law, rtol=0, atol=1e-13)
        np.testing.assert_allclose(pair_pass(p, q, boundary, alpha=fitted)[1], law, rtol=0, atol=1e-13)
        head_alpha, head = pair_pass(p, q, boundary, upto=boundary)
        np.testing.assert_array_equal(head[:boundary], r[:boundary])
        np.testing.assert_array_equal(head[boundary:], 0.0)


def test_dominant_token_needs_its_complement_summed():
    """q = 1 - 1e-12 on one token: the closed form matches exact Fractions to 1e-15 relative on
    the small tokens; the twin that takes that token's 1 - q directly is off by far more."""
    n = 6
    small = [Fraction(1, 5 * 10**12)] * (n - 1)
    exact_q = [1 - sum(small)] + small
    q = np.array([float(x) for x in exact_q])
    p = np.full(n, 1.0 / n)
    alpha = np.zeros(n)
    # exact: token j > 0 drafted with the big one; with T* = everything and coins 0, j wins when last
    exact = []
    for j in range(n):
        total = Fraction(0)
        for z in range(n):
            if z != j:
                pair = exact_q[j] * exact_q[z] * (1 / (1 - exact_q[j]) + 1 / (1 - exact_q[z]))
                total += pair if z < j else 0
        exact.append(float(total))
    _, r = pair_pass(p, q, 0, None, alpha)
    np.testing.assert_allclose(r[1:], exact[1:], rtol=1e-12)
    twin = q[1:] * (q[0] / (1.0 - q[0]))  # the big partner's term with 1 - q cancelling
    assert np.abs(twin[0] / exact[1] - 1.0) > 1e-6


# --- the cut and the J-law --------------------------------------------------------------------


def test_containment_is_exact():
    """g(T_j) of every prefix against the law's enumerated prefix containment; the twin
    without the division by M - q (g = Q² - Σ q², the iid pair's) is caught."""
    for p, q in [(p, q) for kind, p, q, k in adversarial(2, 200, max_n=7, max_k=2) if k == 2][:60]:
        law = WithoutReplacement(q, 2)
        order = np.argsort(-q, kind="stable")
        enumerated = law._enumerated_prefix_containment(order, exact=False)
        np.testing.assert_allclose(pair_containment(q[order]), enumerated, rtol=0, atol=1e-15)
        prefix = np.concatenate([[0.0], np.cumsum(q[order])])
        squares = np.concatenate([[0.0], np.cumsum(q[order] ** 2)])
        if np.count_nonzero(q) > 2:
            assert np.abs(prefix**2 - squares - enumerated).max() > 1e-6


def test_cut_is_the_race_full_scan():
    """optimal_cut at K = 2 (closed form) against the race's full scan: the same T*, P* within
    1e-13, on small instances and n = 4096 rows."""
    rng = np.random.default_rng(5)
    cases = [(p, q) for kind, p, q, k in adversarial(5, 400, max_n=7, max_k=2) if k == 2][:100]
    for temperature in (0.7, 1.2, 1.6):
        p = zipf(4096, exponent=1.1, rng=rng)
        cases.append((p, softmax(np.log(p), temperature=temperature)))
    worst = 0.0
    for p, q in cases:
        pair, race = optimal_cut(p, q, 2), full_scan_cut(p, q, 2)
        assert pair.size == race.size
        worst = max(worst, abs(pair.value - race.value), abs(pair.contained - race.contained))
    assert worst <= 1e-13


def _enumerated_j(q, in_u):
    """P(J = j) by enumerating the rebuilt stream of every ordered pair."""
    law = WithoutReplacement(q, 2)
    out = np.zeros(3)
    tuples, probs = law.enumerate()
    for row, prob in zip(tuples, probs):
        for marks, weight in stream_outcomes(row, in_u[row], q, 2):
            out[len(marks)] += prob * weight
    return out


def test_j_law_against_enumeration_the_race_and_its_twin():
    """P(J = j), j = 0..2, against the rebuilt stream enumerated (1e-14) and, where T* holds two
    tokens or more, the race's quadrature (1e-13; on a one-token T* the race's P(J = 0) reads
    ~2e-10 where it is 0); the twin P(J >= 2) = L (one stream point in U instead of two) is
    caught by the enumeration."""
    rng = np.random.default_rng(6)
    caught = 0
    for _ in range(60):
        q = rng.dirichlet(np.full(int(rng.integers(3, 7)), 0.5))
        cut = int(rng.integers(1, len(q)))
        in_u = np.arange(len(q)) < cut
        outside = float(q[:cut].sum())
        law = pair_j_law(q[cut:], outside)
        enumerated = _enumerated_j(q, in_u)
        np.testing.assert_allclose(law, enumerated, rtol=0, atol=1e-14)
        if len(q) - cut >= 2:
            np.testing.assert_allclose(law, race_j_law(q[cut:], outside, 2), rtol=0, atol=1e-13)
        twin = law.copy()
        twin[2], twin[1] = outside, law[1] + law[2] - outside
        caught += np.abs(twin - enumerated).max() > 1e-6
    assert caught >= 55


def test_j_law_from_the_cuts_containment_and_its_twin():
    """The rule's J-law at K = 2 takes g(T*) from the cut (``pair_j_law(..., contained)``): the
    same law as the pass over T* to rounding (1e-15) and the enumerated one (1e-14), and the
    rule's P(J = 0) is the cut's g bit for bit; the twin, g of the prefix one token shorter, is
    caught by the enumeration."""
    caught = checked = 0
    for kind, p, q, k in adversarial(seed=31, count=200, max_n=6):
        if k != 2:
            continue
        cut = optimal_cut(p, q, 2, sort=radix_order)
        in_u = np.ones(len(q), dtype=bool)
        in_u[cut.order[: cut.size]] = False
        outside = float(q[in_u].sum())
        if not (outside > 0 and cut.size and np.count_nonzero(q) >= 2):
            continue
        q_t = q[~in_u]
        law = pair_j_law(q_t, outside, cut.contained)
        np.testing.assert_allclose(law, pair_j_law(q_t, outside), rtol=0, atol=1e-15)
        enumerated = _enumerated_j(q, in_u)
        np.testing.assert_allclose(law, enumerated, rtol=0, atol=1e-14)
        rule = wor_selection_rule(p, q, 2)
        if rule.j_law is not None and rule.boundary == len(q) - cut.size:
            assert rule.j_law[0] == cut.contained
        shorter = float(pair_containment(q[cut.order[: cut.size]], outside)[cut.size - 1])
        caught += np.abs(pair_j_law(q_t, outside, shorter) - enumerated).max() > 1e-6
        checked += 1
    assert checked >= 20 and caught >= checked // 2


def test_pass_with_given_masses_and_buffers_is_the_same_and_wrong_masses_are_caught():
    """``pair_pass(..., masses=pair_masses(q), out=buffers)`` (the wor rule's T* side: the masses
    shared with ``pair_last_node``, α and r written into reused memory holding garbage) gives
    the bits of the plain call, as views of the buffers; the twin, the masses of q reversed
    (the largest token's index wrong), is caught."""
    caught = 0
    for rng, p, q, boundary in _random_nodes(12):
        n = len(p)
        tail = int(rng.integers(boundary, n + 1))
        plain = pair_pass(p, q, boundary, tail)
        buffers = (np.full(n + 3, np.nan), np.full(n + 3, np.nan))
        given = pair_pass(p, q, boundary, tail, masses=pair_masses(q), out=buffers)
        for got, expected, buffer in zip(given, plain, buffers):
            np.testing.assert_array_equal(got, expected)
            assert np.shares_memory(got, buffer)
        assert pair_last_node(q, pair_masses(q)) == pair_last_node(q)
        coins = rng.random(n)
        np.testing.assert_array_equal(pair_pass(p, q, boundary, tail, coins, masses=pair_masses(q), out=buffers)[1], pair_pass(p, q, boundary, tail, coins)[1])
        wrong = pair_masses(q[::-1])
        caught += not np.array_equal(pair_pass(p, q, boundary, tail, masses=wrong)[1], plain[1])
    assert caught >= 30


def test_bad_input():
    with pytest.raises(ValueError, match="two tokens with positive mass"):
        pair_pass(np.array([0.5, 0.5]), np.array([1.0, 0.0]), 0)
    with pytest.raises(ValueError, match="boundary <= tail"):
        pair_pass(np.array([0.5, 0.5]), np.array([0.5, 0.5]), 2, 1)
    with pytest.raises(ValueError, match="two tokens with positive mass"):
        pair_containment(np.array([1.0, 0.0]))
    with pytest.raises(ValueError, match="U mass must be positive"):
        pair_j_law(np.array([0.5, 0.5]), 0.0)


# --- the rule ---------------------------------------------------------------------------------


@pytest.mark.parametrize("temperature", [1.2, 1.6])
def test_rule_is_the_quadrature_rule(monkeypatch, temperature):
    """n = 8192, hotter drafts (T* nearly everything, a uniform tail): the rule at K = 2 against
    the same rule with its sides by the quadrature (``PAIRS = 0``): the same cut, positions and
    tail, laws within 1e-13, acceptance within 1e-13."""
    from multidraft.theory.verifier import _wor_rule

    p = zipf(8192, exponent=1.1, rng=np.random.default_rng(int(10 * temperature)))
    q = softmax(np.log(p), temperature=temperature)
    law = WithoutReplacement(q, 2)
    rule = optimal_selection_rule(p, law)
    with monkeypatch.context() as patch:
        patch.setattr(_wor_rule, "PAIRS", 0)
        reference = optimal_selection_rule(p, law)
    assert rule.tail < rule.n
    assert (rule.boundary, rule.tail, rule.u_rule, rule.first_draft) == (reference.boundary, reference.tail, reference.u_rule, reference.first_draft)
    np.testing.assert_array_equal(rule.position, reference.position)
    np.testing.assert_allclose(rule.selection_law, reference.selection_law, rtol=0, atol=1e-13)
    assert abs(rule.acceptance - reference.acceptance) <= 1e-13


def test_last_node_bounds_hold_it_the_tail_start_from_them_is_the_nodes_and_a_one_sided_start_is_caught():
    """pair_last_node_bounds brackets pair_last_node (within 1e-9 of it: the same grid point),
    and the tail start that pair_tail_pass finds in its sweep from the bounds is the start at
    the node itself (the lightness scan ``_tail_start`` there); on tails whose lightness turns
    within 1e-10 of the node, the start at either bound alone (the twins) differs from it on
    some, which pair_tail_pass's second sweep at the node repairs. Its α and r are pair_pass's
    with that tail, bit for bit."""
    from multidraft.theory.optimum._wor_moments import LIGHT
    from multidraft.theory.verifier._front_back_two import PairTail, pair_last_node_bounds, pair_tail_pass
    from multidraft.theory.verifier._wor_rule import MIN_TAIL, _tail_start

    rng = np.random.default_rng(11)
    caught = 0
    for trial in range(400):
        size = int(rng.integers(2, 400))
        q = rng.random(size) ** rng.choice([1, 5, 30])
        if trial % 5 == 0:
            q[0] = 1e6 * q.sum()  # a dominant token: σ ~ 1e-6
        if trial % 7 == 0:
            q[1:] *= 1e-200  # σ near underflow
        q /= q.sum()
        if np.count_nonzero(q) < 2:
            continue
        node = pair_last_node(q)
        low, high = pair_last_node_bounds(q)
        assert low <= node <= high and high / low < 1 + 3e-9
        assert pair_last_node_bounds(q, pair_masses(q)) == (low, high)
        # a T* side after q's tokens: a tail of MIN_TAIL + 20 pool tokens light at the node of
        # the whole (the node and the tail's masses agreed on by iterating), one of them within
        # 1e-10 of the lightness bound
        size_t = MIN_TAIL + 20
        q_t = np.full(size_t, 1e-3 / size_t)
        for _ in range(6):
            node = pair_last_node(np.concatenate([q, q_t]))
            q_t = np.full(size_t, LIGHT / node * (1 - 1e-8))
        edge = int(rng.integers(0, size_t))
        q_t[edge] = LIGHT / node * (1 + rng.choice([-1e-10, 1e-10]))
        merged = np.concatenate([q, q_t])
        node, (low, high) = pair_last_node(merged), pair_last_node_bounds(merged)
        p_t, r_t = np.full(size_t, 1e-9), np.full(size_t, 1.0)
        p = np.concatenate([rng.dirichlet(np.ones(size)), p_t])
        (exact,) = _tail_start(p_t, q_t, r_t, (node,))
        alpha, r, start = pair_tail_pass(p, merged, size, PairTail(r_t, LIGHT, 0.9, MIN_TAIL))
        assert start == exact
        expected = pair_pass(p, merged, size, size + exact)
        np.testing.assert_array_equal(alpha, expected[0])
        np.testing.assert_array_equal(r, expected[1])
        assert _tail_start(p_t, q_t, r_t, (low, high)) == (_tail_start(p_t, q_t, r_t, (low,))[0], _tail_start(p_t, q_t, r_t, (high,))[0])
        caught += _tail_start(p_t, q_t, r_t, (low,))[0] != exact or _tail_start(p_t, q_t, r_t, (high,))[0] != exact
    assert caught >= 20


def test_tail_pass_writes_at_the_tokens_and_the_minimum_and_a_shuffled_write_is_caught():
    """pair_tail_pass's ``into``: the α and r of the positions from ``boundary`` written at
    their tokens and ``np.minimum(p, r)`` into ``smaller``, bit for bit (arrays holding garbage
    before; tokens outside T* untouched); the twin, the same tokens in another order, is caught."""
    from multidraft.theory.optimum._wor_moments import LIGHT
    from multidraft.theory.verifier._front_back_two import PairTail, pair_tail_pass

    caught = 0
    for rng, p, q, boundary in _random_nodes(13):
        n = len(p)
        law = rng.random(n - boundary)
        find = PairTail(law, LIGHT, 0.9, 2)
        alpha, r, start = pair_tail_pass(p, q, boundary, find)
        tokens = rng.permutation(n + 5)[: n - boundary]
        into = (np.full(n + 5, np.nan), np.full(n + 5, np.nan), np.full(n + 5, np.nan), np.full(n + 2, np.nan))
        got = pair_tail_pass(p, q, boundary, find, into=(tokens, *into[:3]), out=(np.full(n, np.nan), np.full(n, np.nan)))
        assert got[2] == start
        np.testing.assert_array_equal(got[0], alpha)
        np.testing.assert_array_equal(got[1], r)
        expected_alpha, expected_r = np.full(n + 5, np.nan), np.full(n + 5, np.nan)
        expected_alpha[tokens], expected_r[tokens] = alpha[boundary:], r[boundary:]
        np.testing.assert_array_equal(into[0], expected_alpha)
        np.testing.assert_array_equal(into[1], expected_r)
        np.testing.assert_array_equal(into[2][: n - boundary], np.minimum(p[boundary:], r[boundary:]))
        shuffled = (np.full(n + 5, np.nan), np.full(n + 5, np.nan), np.full(n + 5, np.nan))
        pair_tail_pass(p, q, boundary, find, into=(tokens[::-1].copy(), *shuffled))
        caught += not np.array_equal(shuffled[1], expected_r, equal_nan=True)
    assert caught >= 30


def _reference_pass(p, q, boundary, tail, alpha, fit, upto, masses):
    """The K = 2 pass as one kernel before its sweeps were fused (three loops: the inverses, the
    suffix sums, the forward fit over zero-filled α and r), in plain Python: the reference of
    pair_pass's bits."""
    from multidraft.theory.optimum._wor_pairs import _add
    from multidraft.theory.verifier._front_back import _coin

    add, coin = getattr(_add, "py_func", _add), getattr(_coin, "py_func", _coin)
    total, big, rest = masses
    n = len(q)
    alpha = np.zeros(n) if fit else alpha.astype(float).copy()
    r, later1, later2 = np.zeros(n), np.zeros(n), np.zeros(n)
    inverse = 1.0 / (total - q)
    inverse[big] = 1.0 / rest
    scale = 1.0 / total
    s1 = s2 = 0.0
    for j in range(n - 1, -1, -1):
        if j == boundary - 1:
            s1 = s2 = 0.0
        later1[j], later2[j] = s1, s2
        s1 += q[j]
        s2 += q[j] * inverse[j]
    other1 = other2 = 0.0
    if 0 < boundary < n:
        other1, other2 = later1[boundary] + q[boundary], later2[boundary] + q[boundary] * inverse[boundary]
    e1 = e1_error = e2 = e2_error = h1 = h2 = t1 = t1_error = t2 = t2_error = 0.0
    for j in range(min(upto, n)):
        if j == boundary:
            e1 = e1_error = e2 = e2_error = 0.0
        if j == tail:
            h1, h2 = e1 + e1_error, e2 + e2_error
        share = q[j] * scale
        if j >= tail:
            if q[j] > 0:
                alpha[j] = 0.0
                r[j] = share * ((h1 + 0.5 * (t1 + t1_error + later1[j])) * inverse[j] + h2 + 0.5 * (t2 + t2_error + later2[j]))
            t1, t1_error = add(t1, t1_error, q[j])
            t2, t2_error = add(t2, t2_error, q[j] * inverse[j])
            continue
        if q[j] > 0:
            front1, front2 = e1 + e1_error, e2 + e2_error
            if j < boundary:
                front1 += other1
                front2 += other2
            last = share * (front1 * inverse[j] + front2)
            whole = share * ((front1 + later1[j]) * inverse[j] + front2 + later2[j])
            if fit:
                alpha[j] = coin(p[j], whole, last)
            r[j] = alpha[j] * whole + (1.0 - alpha[j]) * last
        back = 1.0 - alpha[j]
        e1, e1_error = add(e1, e1_error, back * q[j])
        e2, e2_error = add(e2, e2_error, back * q[j] * inverse[j])
    return alpha, r


def test_pass_is_the_unfused_pass_bit_for_bit_and_a_tail_summed_without_its_error_is_caught(monkeypatch):
    """pair_pass (its backward sweep with the inverses inside, its forward sweep writing every
    entry) against the one-kernel pass it replaced (``_reference_pass``), bit for bit: boundaries, tails and ``upto`` anywhere
    (tail = boundary, an empty head, no U), coins fitted or given, zero masses, buffers holding
    NaN. The twin drops the running sums' compensation (``_add`` without its error): caught."""
    from multidraft.theory.verifier import _front_back_two

    rng = np.random.default_rng(14)
    caught = 0
    for trial in range(300):
        n = int(rng.integers(2, 400))
        q = rng.dirichlet(np.full(n, (0.05, 0.5, 3.0)[trial % 3]))
        q[rng.random(n) < 0.1 * (trial % 2)] = 0.0
        if np.count_nonzero(q) < 2:
            continue
        p = rng.dirichlet(np.full(n, 0.5))
        boundary = int(rng.integers(0, n + 1)) if trial % 4 else 0
        tail = int(rng.integers(boundary, n + 1)) if trial % 5 else boundary
        upto = n if trial % 3 else int(rng.integers(0, n + 1))
        fit = trial % 6 != 0
        coins = rng.random(n)
        masses = pair_masses(q)
        expected = _reference_pass(p, q, boundary, tail, coins, fit, upto, masses)
        buffers = (np.full(n, np.nan), np.full(n, np.nan))
        got = pair_pass(p, q, boundary, tail, None if fit else coins, upto, masses=masses, out=buffers)
        np.testing.assert_array_equal(got[0], expected[0])
        np.testing.assert_array_equal(got[1], expected[1])
    add = _front_back_two._add
    with monkeypatch.context() as patched:
        patched.setattr(_front_back_two, "_add", lambda total, error, x: (total + x, error))
        for trial in range(40):  # the twin, uncompiled: the Python kernels with a plain sum
            n = 200
            q = rng.dirichlet(np.full(n, 0.05))
            p = rng.dirichlet(np.full(n, 0.5))
            masses = pair_masses(q)
            inverse, later1, later2 = np.empty(n), np.empty(n), np.empty(n)
            misses = np.empty(0, dtype=np.int64)
            _front_back_two._pair_sweep.py_func(q, 1, *masses, inverse, later1, later2, p, np.zeros(0), np.zeros(0), 0.0, 0.0, misses)
            alpha, r = np.empty(n), np.empty(n)
            empty = np.zeros(0)
            _front_back_two._pair_forward.py_func(p, q, 1, 50, alpha, True, n, r, inverse, later1, later2, masses[0], np.zeros(0, dtype=np.int64), empty, empty, empty)
            caught += not np.array_equal(r, _reference_pass(p, q, 1, 50, None, True, n, masses)[1])
    assert _front_back_two._add is add and caught >= 10
