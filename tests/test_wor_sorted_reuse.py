"""The P* = 1 fit's reuse of what it has already computed (issue 30, item 5): the scan gathers p
and q in its order and checks ties in one pass and hands the sorted arrays to the rule's parts;
the prefix bounds are written by the products' pass; U's drafted arrays, L and U's target are
read from the part by its index; U's target sums in place through an index; the iid layout's
glue is one pass. Each is checked against the numpy expressions it replaces, bit for bit, and
each check catches a deliberately broken twin.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from multidraft.theory import softmax, zipf
from multidraft.theory.laws._kernels import ratio_order
from multidraft.theory.optimum import _wor_race, _wor_sums
from multidraft.theory.optimum._wor_race import optimal_cut
from multidraft.theory.verifier import _wor_parts, _wor_rule
from multidraft.theory.verifier._wor_curtain import _iid_layout
from multidraft.theory.verifier._curtain import curtain_fit


def _main_scan_order(p, q, sort):
    """The scan order as main computed it (numpy: gathers of the keys, the tie check)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        key = np.divide(q, p)
    np.negative(key, out=key)
    order = sort(key) if sort is not None else None
    if order is None:
        order = np.argsort(key, kind="stable")
    ordered = key[order]
    if (ordered[1:] == ordered[:-1]).any() or np.isnan(ordered[-2:]).all():
        return ratio_order(p, q)
    return order


def _pairs():
    rng = np.random.default_rng(21)
    for trial in range(60):
        size = int(rng.integers(1, 3000))
        p, q = rng.dirichlet(np.full(size, 0.5)), rng.dirichlet(np.full(size, 0.5))
        if trial % 3 == 0:
            p[rng.random(size) < 0.1] = 0.0
            q[rng.random(size) < 0.1] = 0.0
        if trial % 5 == 0:  # exact ties of q/p
            q = p * rng.integers(1, 3, size)
        if trial % 7 == 0 and size >= 2:  # p = q = 0 twice: NaN keys at the end
            p[:2], q[:2] = 0.0, 0.0
        if p.sum() > 0 and q.sum() > 0:
            yield p / p.sum(), q / q.sum()


def test_the_scan_gathers_are_numpys_and_a_tie_check_without_the_nan_end_is_caught():
    nan_ends = 0
    for p, q in _pairs():
        order, p_sorted, q_sorted, draftable = _wor_race._sorted_by_scan(p, q, _wor_parts.radix_order)
        np.testing.assert_array_equal(order, _main_scan_order(p, q, _wor_parts.radix_order))
        np.testing.assert_array_equal(p_sorted, p[order])
        np.testing.assert_array_equal(q_sorted, q[order])
        assert draftable == np.count_nonzero(q[order])
        key = -(q / np.where(p > 0, p, np.nan))
        ordered = np.sort(key)  # NaN last, as the scan's sort puts them
        nan_ends += bool(np.isnan(ordered[-2:]).all()) and not (ordered[1:] == ordered[:-1]).any()
    assert nan_ends >= 1  # the twin (ties alone) misses these: their keys hold no equal pair
    p, q = np.array([1.0, 1.0, 0.0, 0.0]), np.array([2.0, 1.0, 0.0, 0.0])  # keys -2, -1, NaN, NaN
    twin = -(q / np.where(p > 0, p, np.nan))
    p_sorted, q_sorted = np.empty(4), np.empty(4)
    assert _wor_sums.gather_checked(p, q, np.arange(4), p_sorted, q_sorted) == (True, 2)
    assert not (twin[1:] == twin[:-1]).any()  # the twin's verdict: no tie, so no fallback


def test_the_prefix_bounds_are_the_numpy_expressions_and_a_reassociated_bound_is_caught():
    rng = np.random.default_rng(22)
    caught = 0
    for trial in range(40):
        n, k = int(rng.integers(1, 4000)), int(rng.integers(1, 9))
        p, q = rng.dirichlet(np.full(n, 0.4)), rng.dirichlet(np.full(n, 0.4))
        prefix_p, prefix_q, lower, upper = _wor_sums.prefix_bounds(p, q, k)
        want_p = np.concatenate([[0.0], np.cumsum(p)])
        want_q = np.minimum(np.concatenate([[0.0], np.cumsum(q)]), 1.0)
        np.testing.assert_array_equal(prefix_p, want_p)
        np.testing.assert_array_equal(prefix_q, want_q)
        np.testing.assert_array_equal(lower, want_p + 1.0 - want_q**k)
        np.testing.assert_array_equal(upper, want_p + 1.0 - _wor_sums.upper_products(q, want_q, k))
        np.testing.assert_array_equal(_wor_sums.outside_mass(q), np.concatenate([np.cumsum(q[::-1])[::-1], [0.0]]))
        caught += not np.array_equal(want_p + (1.0 - want_q**k), lower)  # the twin: 1 - Q^K first
    assert caught >= 10


@pytest.mark.parametrize("sizes", [range(0, 300), [511, 512, 1000, 4096, 8193, 49152]])
def test_min_sum_at_is_numpys_sum_of_the_gathers_and_a_sum_in_place_is_caught(sizes):
    rng = np.random.default_rng(23)
    caught = 0
    for size in sizes:
        a = rng.random(size + 5) * 10.0 ** rng.uniform(-12, 0, size + 5)
        b = rng.random(size + 5) * 10.0 ** rng.uniform(-12, 0, size + 5)
        index = rng.permutation(size + 5)[:size]
        expected = float(np.minimum(a[index], b[index]).sum())
        assert _wor_parts.min_sum_at(a, b, index) == expected
        caught += float(np.minimum(a, b)[np.sort(index)].sum()) != expected  # the twin: in token order
    assert caught >= len(sizes) // 4
    with pytest.raises(ValueError, match="index out of range"):
        _wor_parts.min_sum_at(np.ones(3), np.ones(3), np.array([0, 3]))
    with pytest.raises(ValueError, match="shapes"):
        _wor_parts.min_sum_at(np.ones(3), np.ones(4), np.array([0]))


def test_sorted_part_from_gathered_arrays_is_the_gathering_one_and_arrays_in_id_order_are_caught():
    rng = np.random.default_rng(24)
    caught = 0
    for trial in range(40):
        size = int(rng.integers(2, 3000))
        q = rng.dirichlet(np.full(size, 0.5)) + 1e-12
        p = q * rng.integers(1, 4, size) if trial % 2 == 0 else rng.dirichlet(np.full(size, 0.5))
        hint = rng.permutation(size)
        if trial % 3:
            hint = hint[np.argsort(p[hint] / q[hint], kind="stable")]  # strictly increasing: returned as is
        expected = _wor_parts.sorted_part(hint, p, q)
        got = _wor_parts.sorted_part(hint, p, q, (p[hint], q[hint]))
        for a, b in zip(got, expected):
            np.testing.assert_array_equal(a, b)
        twin = _wor_parts.sorted_part(hint, p, q, (p[np.sort(hint)], q[np.sort(hint)]))
        caught += not all(np.array_equal(a, b) for a, b in zip(twin, expected))
    assert caught >= 30
    with pytest.raises(ValueError, match="gathered shapes"):
        _wor_parts.sorted_part(np.arange(3), np.ones(3) / 3, np.ones(3) / 3, (np.ones(2), np.ones(2)))


def _zipf_nodes(n=4096):
    rng = np.random.default_rng(25)
    for k in (2, 7):
        p = zipf(n, exponent=1.1, rng=rng)
        yield p, softmax((np.log(p) + 0.5 * rng.standard_normal(n)) / 1.2), k  # the tree benchmark's nodes: P* = 1


def test_the_iid_layout_glue_is_the_numpy_expressions_and_a_law_by_token_is_caught():
    for p, q, k in _zipf_nodes():
        fit = curtain_fit(p, q, k)
        layout, acceptance = _iid_layout(p, q, k)
        group = fit.group.astype(np.int64)
        np.testing.assert_array_equal(layout.token_group, group)
        np.testing.assert_array_equal(layout.law, q * fit.density[group])
        bounds = fit.group_bounds
        np.testing.assert_array_equal(layout.piece_group, np.repeat(np.arange(len(bounds) - 1), np.diff(bounds)))
        np.testing.assert_array_equal(layout.group_first, bounds[:-1])
        assert acceptance == float(np.minimum(p, q * fit.density[group]).sum())
        twin = q * fit.density[np.minimum(np.arange(len(q)), len(fit.density) - 1)]  # the density by token, not group
        assert not np.array_equal(layout.law, twin)


def _rule_fields(rule):
    yield from (rule.selection_law, rule.accept, rule.residual, rule.position, rule.alpha, rule.group, rule.optimal_law)
    yield from (np.array([rule.optimum, rule.boundary, rule.tail, *rule.shortfall, float(rule.first_draft)]), np.asarray(rule.j_law, dtype=float))
    if rule.layout is not None:
        yield from (rule.layout.token_group, rule.layout.piece_start, rule.layout.piece_end, rule.layout.law)


def test_the_rule_from_the_scans_sorted_arrays_is_the_gathering_one_and_shuffled_arrays_are_caught():
    """Every U token drafted (the fast read of :func:`_wor_rule._u_arrays`) and some q = 0 (its
    gathers), at the empty cut and the scan's."""
    for p, q, k in _zipf_nodes():
        for zeros in (False, True):
            q_case = q.copy()
            if zeros:
                q_case[::50] = 0.0
                q_case /= q_case.sum()
            cut = optimal_cut(p, q_case, k, sort=_wor_parts.radix_order)
            for chosen in (cut, dataclasses.replace(cut, size=0, contained=0.0)):
                got = _wor_rule._rule_for_cut(p, q_case, k, chosen)
                gathered = _wor_rule._rule_for_cut(p, q_case, k, dataclasses.replace(chosen, p_sorted=None, q_sorted=None))
                for a, b in zip(_rule_fields(got), _rule_fields(gathered)):
                    np.testing.assert_array_equal(a, b)
            if not zeros:  # the twin: q in the scan order reversed (every q > 0, so still a valid part)
                shuffled = dataclasses.replace(cut, size=0, contained=0.0, q_sorted=cut.q_sorted[::-1].copy())
                twin = _wor_rule._rule_for_cut(p, q_case, k, shuffled)
                assert not np.array_equal(twin.selection_law, got.selection_law)


def _u_arrays_by_gathers(p, q, cut):
    """What the wor rule's U arrays were before :func:`_wor_parts.descending_gather` (no ratio
    overflowing): r* scattered at the part's tokens, the q = 0 tokens by id then the part's
    tokens read by the index, p and q gathered by token, L and U's target by numpy over the
    gathers."""
    rest = cut.order[cut.size :]
    drafted = q[rest] > 0
    u_part = _wor_rule._part(p, q, rest[drafted], p[rest[drafted]], q[rest[drafted]], "min", 1.0 - cut.contained)
    r_star = np.zeros(len(p))
    r_star[u_part.tokens] = u_part.law
    u_tokens = np.concatenate([np.sort(rest[~drafted]), u_part.tokens[u_part.index]])
    q_u = q[u_tokens]
    drafted_u = u_tokens[q_u > 0]
    return r_star, u_tokens, drafted_u, p[drafted_u], q_u[q_u > 0], float(q_u.sum()), float(np.minimum(p[u_tokens], r_star[u_tokens]).sum())


def test_u_arrays_read_by_the_index_are_the_gathers_and_the_part_unindexed_is_caught():
    """The empty cut and the scan's, every token drafted (every P* = 1 node), one token more
    with q = 0 (the selective verifier's vocabulary), some q = 0, and a q of 1e-320 whose p/q
    overflows (the gathering route, every token drafted or not): one pass of
    :func:`_wor_parts.descending_gather` after the q = 0 tokens."""
    cases = 0
    for p, q, k in _zipf_nodes():
        for zeros in (0, 1, 50, -1):
            p_case, q_case = (np.append(p, 0.0), np.append(q, 0.0)) if zeros == 1 else (p, q.copy())
            if zeros == 50:
                q_case[::50] = 0.0
                q_case /= q_case.sum()
            if zeros == -1:
                q_case[1] = 1e-320
            cut = optimal_cut(p_case, q_case, k, sort=_wor_parts.radix_order)
            for chosen in (dataclasses.replace(cut, size=0, contained=0.0), cut):
                r_star, scratch = np.zeros(len(p_case)), np.empty(len(p_case) + 3)
                with np.errstate(over="ignore" if zeros == -1 else "raise"):  # p/q = inf there, by design
                    got = _wor_rule._u_arrays(p_case, q_case, chosen, r_star, scratch)
                    want = _u_arrays_by_gathers(p_case, q_case, chosen)
                np.testing.assert_array_equal(r_star, want[0])
                for a, b in zip(got[1:5], want[1:5]):
                    assert a.dtype == b.dtype
                    np.testing.assert_array_equal(a, b)
                assert got[5:] == want[5:]
                cases += len(got[1]) > len(got[2])
                if len(got[2]) > 1:  # the twin: the part's masses unindexed
                    assert float(got[0].masses.sum()) != got[5] or not np.array_equal(got[0].masses, got[4])
    assert cases >= 4


def test_descending_gather_is_the_gathers_and_scatter_and_a_minimum_by_token_is_caught():
    rng = np.random.default_rng(27)
    caught = 0
    for size in (0, 1, 7, 300, 4096):
        tokens = rng.permutation(size + 4)[:size]
        values, masses, law = rng.random(size), rng.random(size), rng.random(size)
        values[::5] = law[::5]  # ties of the minimum
        values[3::7] = np.nan  # numpy's minimum keeps NaN
        index = rng.permutation(size)
        r_star = np.zeros(size + 4)
        got = np.empty(size, dtype=np.int64), np.empty(size), np.empty(size), np.empty(size + 2)[1:-1]
        _wor_parts.descending_gather(tokens, values, masses, law, index, r_star, got)
        want_r_star = np.zeros(size + 4)
        want_r_star[tokens] = law
        for a, b in zip(got, (tokens[index], values[index], masses[index], np.minimum(values[index], law[index]))):
            np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(r_star, want_r_star)
        caught += size > 1 and not np.array_equal(got[3], np.minimum(values, law))  # the twin: not read by the index
    assert caught == 3
    outputs = (np.empty(3, dtype=np.int64), np.empty(3), np.empty(3), np.empty(3))
    for index, tokens, r_star, short in ((np.arange(3), np.arange(3), np.zeros(3), True), (np.array([0, 1, 3]), np.arange(3), np.zeros(3), False),
                                         (np.array([0, -1, 2]), np.arange(3), np.zeros(3), False), (np.arange(3), np.array([0, 1, 3]), np.zeros(3), False)):  # fmt: skip
        with pytest.raises(ValueError, match="descending_gather"):  # a short output, an index outside the part, a token outside r*
            _wor_parts.descending_gather(tokens, np.ones(3), np.ones(3), np.ones(3), index, r_star, (*outputs[:3], outputs[3][: 2 if short else 3]))


def test_the_piece_offsets_are_summed_once_per_rule_and_a_stale_cache_is_caught(monkeypatch):
    """At P* = 1 every group is one piece and the offsets decide no winner; here (T = 0.8, K = 2)
    U's pool is a group of several pieces, where they do."""
    rng = np.random.default_rng(26)
    p = zipf(4096, exponent=1.1, rng=rng)
    q, k = softmax(np.log(p), temperature=0.8), 2
    rule = _wor_rule.wor_selection_rule(p, q, k)
    assert rule.u_rule == "j-curtain" and np.any(rule.layout.group_last - rule.layout.group_first > 1)
    tuples = np.argsort(-(np.log(q) + rng.gumbel(size=(3000, len(q)))), axis=1)[:, :k]
    fresh = _wor_rule.wor_selection_rule(p, q, k).choose(tuples, np.random.default_rng(1))
    calls = []
    original = _wor_rule.piece_offsets
    monkeypatch.setattr(_wor_rule, "piece_offsets", lambda *a: calls.append(1) or original(*a))
    for _ in range(3):
        np.testing.assert_array_equal(rule.choose(tuples, np.random.default_rng(1)), fresh)
    assert len(calls) == 1
    stale = _wor_rule.wor_selection_rule(p, q, k)  # the twin: a stale (zero) cache
    stale.offsets_memo.append(np.zeros(len(stale.layout.piece_start) + 1))
    assert not np.array_equal(stale.choose(tuples, np.random.default_rng(1)), fresh)


def test_the_rule_from_the_scans_t_star_and_the_node_bounds_is_the_sorting_one_and_unreversed_tokens_are_caught(monkeypatch):
    """T* taken from the scan's arrays as they are (``sorted_side``, where p/q increase strictly
    along them) and the T* tail's start from the last node's bounds (``pair_tail_pass``: its sweep at both bounds, the node itself where they differ) give
    the rule of the part's sort and the node itself, every field bit for bit: P* < 1 nodes at
    K = 2 (Zipf, drafts hotter and noisier, n = 4096, where the tail applies) and the random
    pairs (ties, zeros) at K = 2, 3. The twin, T*'s tokens left by increasing p/q, is caught."""
    from multidraft.theory.verifier import _front_back_two

    rng = np.random.default_rng(27)
    cases = [(p, q, k) for p, q in _pairs() for k in (2, 3) if np.count_nonzero(q) >= k]
    for temperature in (1.2, 1.6, 2.0):
        p = zipf(4096, exponent=1.1, rng=rng)
        cases.append((p, softmax((np.log(p) + 0.5 * rng.standard_normal(4096)) / temperature), 2))
    fast = _wor_rule.sorted_side
    taken = []
    monkeypatch.setattr(_wor_rule, "sorted_side", lambda *a: taken.append(1) or fast(*a))
    rules = [_wor_rule.wor_selection_rule(p, q, k) for p, q, k in cases]
    assert len(taken) >= 30
    with monkeypatch.context() as patched:  # the part's sort and the node itself
        patched.setattr(_wor_rule, "strict_level", lambda values, masses, total, out: None)
        patched.setattr(_front_back_two, "pair_last_node_bounds", lambda draft, masses=None: (0.0, np.inf))
        for rule, (p, q, k) in zip(rules, cases):
            for a, b in zip(_rule_fields(rule), _rule_fields(_wor_rule.wor_selection_rule(p, q, k))):
                np.testing.assert_array_equal(a, b)
    caught = 0
    with monkeypatch.context() as patched:  # the twin: T*'s tokens by increasing p/q, its arrays by position
        patched.setattr(_wor_rule, "sorted_side", lambda *a: (lambda side: (side[0][::-1].copy(), *side[1:]))(fast(*a)))
        for rule, (p, q, k) in zip(rules, cases):
            caught += not np.array_equal(rule.position, _wor_rule.wor_selection_rule(p, q, k).position)
    assert caught >= 10


def test_the_scan_keys_are_numpys_and_a_zero_without_its_sign_is_caught():
    """:func:`~multidraft.theory.optimum._wor_sums.scan_keys` and the gather's tie check form
    -(q/p) as numpy does, p = ±0 included (q/±0 = ±inf, 0/0 NaN): bit for bit but for NaN's
    sign. WRONG twin: -inf for every p = 0 < q (numba's division would raise there): p = -0.0
    gives +inf."""
    rng = np.random.default_rng(23)
    p, q = rng.random(4000), rng.random(4000)
    p[rng.random(4000) < 0.1], q[rng.random(4000) < 0.1] = 0.0, 0.0
    p[rng.random(4000) < 0.05] = -0.0
    with np.errstate(divide="ignore", invalid="ignore"):
        expected = np.negative(np.divide(q, p))
    key = _wor_sums.scan_keys(p, q)
    nan = np.isnan(expected)
    np.testing.assert_array_equal(np.isnan(key), nan)
    assert key[~nan].tobytes() == expected[~nan].tobytes()
    twin = np.where(p == 0, np.where(q > 0, -np.inf, np.nan), expected)
    assert not np.array_equal(twin, expected, equal_nan=True)  # p = -0.0 < q: +inf, not -inf
