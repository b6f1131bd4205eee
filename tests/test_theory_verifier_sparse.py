"""The optimal verifier and P* on the draft's support, against the full vocabulary.

The fit runs on the s tokens the draft can propose; these tests check its answer with
full-vocabulary computations that know nothing of the support:

* P* from the dense sorted scan over all n tokens (:func:`ratio_order`, the prefix containment
  kernels), for iid drafts and drafts without replacement, at n = 131072;
* the rule's dense law r, step and residual: the output law ``r·min(1, p/r) + (1 - Σ r·min(1,
  p/r))·residual`` is p to 1e-12, the acceptance ``Σ_y min(p, r)`` is the dense P* (to the
  layout's rounding, 1e-10), and r meets
  the optimality conditions over the whole vocabulary (r <= p on U, r >= p on T*, r(U) = h(U),
  r = 0 off the support);
* the law through the actual positions (pieces sorted, no tiling assumed);
* the sampler (selection, acceptance, and the residual's draws outside the support) against p,
  with a broken twin that forgets the target outside the support;
* the packed sort against ``argsort`` (ties, near-ties, long runs, -0.0), and the blocked
  inverse CDF against exact levels.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

from multidraft.theory import IID, WithoutReplacement, optimal_acceptance, softmax, top_k, top_p, zipf
from multidraft.theory.verifier._curtain import density_order
from multidraft.theory.verifier import BLOCK, CurtainRule, draw_levels, optimal_selection_rule
from multidraft.theory.laws import iid_prefix_containment, ratio_order, wor_prefix_containment

from rule_checks import law_through_actual_positions


def dense_optimum(p: np.ndarray, law) -> float:
    """P* by the sorted scan over all n tokens (tokens the draft cannot propose included)."""
    order = ratio_order(p, law.draft)
    kernel = iid_prefix_containment if law.name == "iid" else wor_prefix_containment
    contained = kernel(law.draft[order], law.k)
    values = np.concatenate([[0.0], np.cumsum(p[order])]) + 1.0 - contained
    return float(min(values.min(), 1.0))


def sparse_instance(n: int, keep: int | float, temperature: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A Zipf target and a draft from a perturbed, tempered copy of it, cut by top-k (an int)
    or top-p (a float)."""
    rng = np.random.default_rng(seed)
    p = zipf(n, exponent=1.1, rng=rng)
    q = softmax(np.log(p) + rng.normal(size=n) * 0.5, temperature=temperature)
    return p, top_k(q, keep) if isinstance(keep, int) else top_p(q, keep)


CASES = [(131072, 10, 1.3, 2), (131072, 100, 0.8, 4), (131072, 0.95, 1.2, 8), (49152, 1000, 1.6, 3), (49152, 1, 1.0, 4)]


@pytest.mark.parametrize("n, keep, temperature, k", CASES)
def test_sparse_rule_against_the_full_vocabulary(n, keep, temperature, k):
    p, q = sparse_instance(n, keep, temperature, seed=k)
    law = IID(q, k)
    rule = optimal_selection_rule(p, law)
    assert len(rule.support) == np.count_nonzero(q) < n
    optimum = dense_optimum(p, law)
    assert rule.optimum == pytest.approx(optimum, abs=1e-12)
    assert rule.acceptance == pytest.approx(optimum, abs=1e-10)  # the layout's rounding (docs §5)
    assert rule.acceptance == pytest.approx(float(np.minimum(p, rule.selection_law).sum()), abs=1e-14)
    r, step, residual = rule.selection_law, rule.accept, rule.residual
    output = r * step + (1.0 - float(np.sum(r * step))) * residual
    np.testing.assert_allclose(output, p, rtol=0, atol=1e-12)
    assert np.all(r[q == 0] == 0) and np.all(step[q == 0] == 0)
    cut = np.zeros(n, dtype=bool)
    cut[rule.certificate] = True
    assert not cut[q == 0].any()  # T* lies inside the support
    assert r[~cut].sum() == pytest.approx(1.0 - q[cut].sum() ** k, abs=1e-12)  # U is tight
    assert np.all(r[~cut] <= p[~cut] + 1e-12) and np.all(r[cut] >= p[cut] - 1e-12)
    np.testing.assert_allclose(law_through_actual_positions(rule), r, rtol=0, atol=1e-12)


@pytest.mark.parametrize("law_class", [IID, WithoutReplacement])
@pytest.mark.parametrize("keep", [1, 40, 0.9])
def test_optimum_on_the_support_equals_the_dense_scan(law_class, keep):
    p, q = sparse_instance(131072, keep, 1.2, seed=7)
    for k in (1, 2, 3) if law_class is WithoutReplacement and keep == 1 else (2, 3, 6):
        if law_class is WithoutReplacement and k > np.count_nonzero(q):
            continue
        law = law_class(q, k)
        result = optimal_acceptance(p, law)
        assert result.value == pytest.approx(dense_optimum(p, law), abs=1e-12)
        mask = np.zeros(len(p), dtype=bool)
        mask[result.certificate] = True
        assert not mask[q == 0].any()
        if law_class is IID:  # the certificate's cut value (containment q(T)^K)
            assert float(p[mask].sum() + 1.0 - law.containment(mask)) == pytest.approx(result.value, abs=1e-12)


def _outside_forgotten(rule: CurtainRule) -> CurtainRule:
    """WRONG twin: the residual keeps only its part on the support (as if the target lived
    there), so the tokens no draft proposes are never emitted."""
    twin = copy.copy(rule)
    twin.outside_mass = 0.0
    twin.__dict__.pop("_residual_parts", None)
    return twin


@pytest.mark.statistical
def test_sampler_outputs_the_target_and_a_twin_without_the_outside_is_caught():
    """N = 200,000 runs of :meth:`CurtainRule.sample` with a top-20 draft at n = 5000 (about
    half the target lies outside the support, so the blocked draws there are exercised):
    output frequencies match p (chi-square over 80 bins); the twin fails."""
    from scipy import stats

    p, q = sparse_instance(5000, 20, 1.3, seed=1)
    law = IID(q, 3)
    rule = optimal_selection_rule(p, law)
    assert 0.2 < rule.outside_mass < 0.8
    order = np.argsort(-p)
    bins = np.empty(len(p), dtype=np.int64)
    bins[order[:60]] = np.arange(60)
    bins[order[60:]] = 60 + np.arange(len(p) - 60) * 20 // (len(p) - 60)
    expected = np.bincount(bins, p)
    rng = np.random.default_rng(5)
    tuples = law.sample(rng, 200_000)
    good = np.bincount(bins, np.bincount(rule.sample(tuples, rng), minlength=len(p)))
    assert stats.chisquare(good, expected * len(tuples)).pvalue > 1e-3
    twin = _outside_forgotten(rule)
    bad = twin.sample(tuples, rng)
    assert np.all(q[bad] > 0)
    assert stats.chisquare(np.bincount(bins, np.bincount(bad, minlength=len(p))), expected * len(tuples)).pvalue < 1e-6


def test_run_marks_draws_outside_the_support():
    """:meth:`CurtainRule.run` returns -1 exactly where the residual's split falls outside the
    support: with the acceptance uniform at 1 - ε every selected draft with p < r is rejected,
    and the split uniform chooses the part."""
    p, q = sparse_instance(3000, 50, 1.5, seed=2)
    rule = optimal_selection_rule(p, IID(q, 2))
    weights, inside, outside = rule._residual_parts
    assert inside > 0 and outside > 0
    top = rule.support[np.argmax(rule.support_law - rule.support_target)]  # a token with r > p
    tuples = np.array([[top, top], [top, top]])
    uniforms = np.array([[0.5, 0.5, 1 - 1e-12, 0.5 * inside / (inside + outside)], [0.5, 0.5, 1 - 1e-12, 1 - 1e-12]])
    tokens = rule.run(tuples, uniforms)
    assert tokens[0] in rule.support and tokens[1] == -1


def test_packed_sort_orders_like_argsort():
    rng = np.random.default_rng(0)
    n = 20_000
    masses = rng.random(n) + 0.01
    ratios = [
        rng.random(n),  # distinct
        np.repeat(rng.random(n // 100), 100),  # long runs of exact ties
        1.0 + rng.integers(0, 50, n) * 1e-13,  # near-ties below the truncated bits: runs to settle
        np.where(rng.random(n) < 0.3, 0.0, rng.random(n)),  # zeros
        np.concatenate([np.full(n // 2, np.inf), rng.random(n - n // 2)]),  # p/q overflowing to inf
    ]
    for ratio in ratios:
        values = np.where(np.isinf(ratio), 1.0, ratio * masses)
        masses_used = np.where(np.isinf(ratio), 1e-320, masses)
        with np.errstate(over="ignore"):
            key = values / masses_used
        order = density_order(values, masses_used)
        assert np.array_equal(np.sort(order), np.arange(n))
        assert np.all(key[order][1:] >= key[order][:-1])
    negative_zero = np.array([0.5, -0.0, 0.25] * 2000)
    order = density_order(negative_zero, np.ones(len(negative_zero)))
    assert np.all(np.diff(negative_zero[order]) >= 0)


@pytest.mark.parametrize("n", [100, 20 * BLOCK + 17])
@pytest.mark.parametrize("count", [1, 7, 5000])
def test_blocked_inverse_cdf(n, count):
    """Levels spread evenly over [0, total) land on each index in proportion to its weight
    (within one level), never on a zero weight, through the blocked and the full path."""
    rng = np.random.default_rng(n + count)
    weights = np.where(rng.random(n) < 0.3, 0.0, rng.random(n))
    total = float(np.cumsum(weights)[-1])
    levels = (np.arange(count) + 0.5) / count * total
    drawn = draw_levels(weights, levels)
    assert np.all(weights[drawn] > 0)
    expected = np.searchsorted(np.cumsum(weights), levels, side="right")
    np.testing.assert_array_equal(drawn, expected)
    assert np.all(weights[draw_levels(weights, np.array([0.0, total, np.nextafter(total, 0.0)]))] > 0)


@pytest.mark.parametrize("n, k", [(6, 2), (30, 3), (80, 4)])
def test_choice_probabilities_row_by_row_on_the_restricted_rule_equal_the_table(n, k, monkeypatch):
    """The two routes of ``CurtainRule.choice_probabilities``: one pieces × intervals table (small
    rules) and, above ``_TABLE_PIECES`` pieces, each row on the rule restricted to its tokens
    (forced here by a threshold of 0); tiny-mass tokens (point sets) included, rows sum to one."""
    import multidraft.theory.verifier._curtain_rule as curtain_rule

    rng = np.random.default_rng(n)
    p, q = zipf(n, 1.2, rng), zipf(n, 0.9, rng)
    q[-2:] = 1e-300  # below the resolution of positions: point sets
    q /= q.sum()
    rule = optimal_selection_rule(p, IID(q, k))
    tuples = rng.choice(n, size=(20, k), p=q)
    tuples[:4, 0] = n - 1
    tuples[2:4, 1] = n - 2
    table = rule.choice_probabilities(tuples)
    monkeypatch.setattr(curtain_rule, "_TABLE_PIECES", 0)
    rows = rule.choice_probabilities(tuples)
    np.testing.assert_allclose(rows, table, rtol=0, atol=1e-13)
    np.testing.assert_allclose(rows.sum(axis=1), 1.0, atol=1e-12)
    assert len(rule.restricted(tuples[0]).piece_start) < len(rule.piece_start)
    with pytest.raises(ValueError, match=r"drafts: token ids must lie in \[0, "):
        rule.restricted(np.array([n]))


def test_choice_probabilities_at_a_real_vocabulary_by_sampled_selection():
    """n = 49152, K = 4, a draft whose sets interleave (about 10^5 pieces: the pieces × intervals
    table would need tens of gigabytes): the exact probabilities of a tuple of tokens with p/q
    near 1 against the rule's own sampled choices, 20,000 draws (twin: the uniform choice 1/K
    is rejected)."""
    n, k = 49152, 4
    rng = np.random.default_rng(5)
    logits = np.log(zipf(n, 1.1, rng))
    p, q = softmax(logits), softmax(logits / 1.3 + 0.3 * rng.standard_normal(n))
    rule = optimal_selection_rule(p, IID(q, k))
    assert len(rule.piece_start) > 50000
    near_one = q * np.exp(-np.abs(np.log(p / q)))
    row = rng.choice(n, size=k, p=near_one / near_one.sum())
    exact = rule.choice_probabilities(row[None])[0]
    np.testing.assert_allclose(exact.sum(), 1.0, atol=1e-12)
    assert np.abs(exact - 1 / k).max() > 0.1
    draws = 20000
    counts = np.bincount(rule.choose(np.repeat(row[None], draws, axis=0), rng), minlength=k)
    for probabilities, caught in ((exact, False), (np.full(k, 1 / k), True)):
        expected = draws * probabilities
        used = expected > 0
        statistic = (((counts - expected) ** 2)[used] / expected[used]).sum()
        assert (statistic > 30) == caught, (probabilities, counts)


@pytest.mark.parametrize("n, keep, temperature, k", [CASES[2], (49152, None, 1.2, 8)])
def test_pointwise_accept_is_the_dense_step_bit_for_bit(n, keep, temperature, k):
    """:meth:`CurtainRule.accept_at` (and the optimal plan's, which its conditional uses instead
    of the dense step) equals :attr:`CurtainRule.accept` at every support token, bit for bit, on
    a cut draft and a full one; the plan's residual is the step's. A WRONG twin without the cap
    at 1 (``p/r`` where r < p: U's pool) is caught."""
    from multidraft.schemes import get_scheme
    from multidraft.schemes._importance import ImportancePlan

    p, q = sparse_instance(n, keep, temperature, seed=k) if keep is not None else sparse_instance(n, n, temperature, seed=k)
    plan = get_scheme("optimal").prepare(p, IID(q, k))
    rule = plan.rule
    tokens = rule.support
    np.testing.assert_array_equal(rule.accept_at(tokens), rule.accept[tokens])
    np.testing.assert_array_equal(plan.accept_at(tokens.reshape(-1, 1)), ImportancePlan.accept_at(plan, tokens.reshape(-1, 1)))
    np.testing.assert_array_equal(plan.residual_law, plan.step[1])
    uncapped = rule.support_target / (rule.support_draft * rule.group_density[rule.group])
    assert not np.array_equal(uncapped, rule.accept[tokens])


def _digits_from_the_top(keys: np.ndarray) -> np.ndarray:
    """WRONG twin of radix_sort: the same stable digit passes, highest digit first (each pass
    then undoes the order of the ones before it)."""
    out = keys.copy()
    for shift in range(55, -1, -11):
        out = out[np.argsort((out >> np.uint64(shift)) & np.uint64(2047), kind="stable")]
    return out


@pytest.mark.parametrize("size", [0, 1, 2, 4095, 49152])
def test_radix_sort_is_numpy_sort_and_the_twin_is_caught(size):
    """``radix_sort`` returns ``numpy.sort``'s array on random keys, on keys whose high digits
    are all equal (skipped passes), with duplicates, and on the fit's packed keys (ratio bits
    and index: :func:`density_order` then gives the order it gave with ``numpy.sort``)."""
    from multidraft.theory.verifier._radix import new_counts, radix_sort

    rng = np.random.default_rng(size)
    cases = [
        rng.integers(0, 2**64, size, dtype=np.uint64),
        rng.integers(0, 3000, size, dtype=np.uint64),  # digits 1..5 equal in almost every key
        rng.integers(0, 2**64, max(size // 2, 1), dtype=np.uint64).repeat(2)[:size],  # duplicates
    ]
    p, q = sparse_instance(max(size, 1), max(size, 1), 1.2, seed=1)
    key = p / q
    shift = max(size - 1, 1).bit_length()
    cases.append(((key.view(np.uint64) >> np.uint64(shift)) << np.uint64(shift)) | np.arange(len(key), dtype=np.uint64))
    for keys in cases:
        out = keys.copy()
        radix_sort(out, np.empty(len(keys) + 3, dtype=np.uint64), new_counts())
        np.testing.assert_array_equal(out, np.sort(keys))
    if size > 2:
        assert not np.array_equal(_digits_from_the_top(cases[0]), np.sort(cases[0]))
        mask = np.uint64((1 << shift) - 1)
        by_numpy = (np.sort(cases[-1]) & mask).astype(np.int64)
        if size >= 4096:  # the packed path; exact ties of p/q are absent here, so no run to settle
            np.testing.assert_array_equal(density_order(p, q), by_numpy)


def test_radix_sort_from_a_bit_keeps_the_input_order_below_it():
    """``radix_sort(keys, ..., start, stop)`` sorts by bits start..stop - 1 alone and stably: on
    keys in increasing order of their low ``start`` bits it is ``numpy.sort``; the twin, the same
    keys with their low bits shuffled, is not. Bad bit ranges are refused."""
    from multidraft.theory.verifier._radix import new_counts, radix_sort

    rng = np.random.default_rng(7)
    size, start = 49152, 16
    high = (rng.integers(0, 3000, size, dtype=np.uint64) * np.uint64(2**20 + 12345)) << np.uint64(start)  # all 3 digits, ties
    keys = high | np.arange(size, dtype=np.uint64)
    for low, caught in ((np.arange(size, dtype=np.uint64), False), (rng.permutation(size).astype(np.uint64), True)):
        out = high | low
        radix_sort(out, np.empty(size, dtype=np.uint64), new_counts(), start, start + 33)
        assert np.array_equal(out, np.sort(high | low)) != caught
        np.testing.assert_array_equal(np.sort(out >> np.uint64(start)), out >> np.uint64(start))
    assert len(np.unique(keys >> np.uint64(start))) < size  # ties above the index: the twin can fail
    with pytest.raises(ValueError, match="start < stop"):
        radix_sort(keys, np.empty(size, dtype=np.uint64), new_counts(), 40, 40)


def test_density_order_settles_ratios_equal_in_their_top_bits(monkeypatch):
    """Ratios equal in the top bits the radix sort reads (within ~5e-7) but not exactly, and exact
    ties, in a row of 49152: :func:`density_order` is ``argsort(kind="stable")``. WRONG twin: the
    order read off the radix-sorted keys without settling the runs is caught."""
    import multidraft.theory.verifier._curtain as curtain

    rng = np.random.default_rng(8)
    n = 49152
    masses = rng.uniform(0.5, 1.0, n)
    ratios = rng.choice(1.0 + rng.uniform(0, 1e-3, 300), n) * (1.0 + rng.integers(0, 4, n) * 1e-12)
    values = ratios * masses
    expected = np.argsort(values / masses, kind="stable")
    np.testing.assert_array_equal(density_order(values, masses), expected)
    kernels = curtain._radix()
    unsettled = lambda packed, shift, key, order: order.__setitem__(slice(None), packed & np.uint64((1 << shift) - 1))
    monkeypatch.setattr(kernels, "settle_ties", unsettled)
    assert not np.array_equal(density_order(values, masses), expected)  # the twin


@pytest.mark.parametrize("keep", [1000, None])
def test_pointwise_conditional_is_the_dense_row_there(keep):
    """The optimal iid plan's :meth:`conditional_at` (what the token walk's E[τ] reads at a real
    vocabulary) gives :meth:`conditional`'s entries at the tokens asked, bit for bit, and the
    rest of the row's mass to 1e-15, for token sets holding the drafts or only some of them;
    :meth:`CurtainRule.residual_at` is :attr:`residual` there bit for bit (tokens outside a cut
    support included). WRONG twins: a residual read as the support's excess alone, and a rest
    without the accepted drafts outside the tokens, are caught."""
    from multidraft.schemes import get_scheme

    n, k = 49152, 8
    p, q = sparse_instance(n, keep if keep is not None else n, 1.2, seed=3)
    plan = get_scheme("optimal").prepare(p, IID(q, k))
    rule = plan.rule
    rng = np.random.default_rng(0)
    tuples = rng.choice(n, size=(3, k), p=q)
    outside = np.flatnonzero(q == 0)[:5] if keep is not None else np.array([], dtype=np.int64)
    rows = plan.conditional(tuples)
    for tokens in (np.unique(tuples), np.unique(np.concatenate([tuples.ravel(), outside, [7, 11]])), np.unique(tuples[:, :3])):
        values, rest = plan.conditional_at(tuples, tokens)
        np.testing.assert_array_equal(values, rows[:, tokens])
        off = rows.copy()
        off[:, tokens] = 0.0
        np.testing.assert_allclose(rest, off.sum(axis=1), rtol=0, atol=1e-15)
        np.testing.assert_array_equal(rule.residual_at(tokens), rule.residual[tokens])
    tokens = np.unique(tuples[:, :3])  # some drafts outside: their accepted mass is part of the rest
    off = rows.copy()
    off[:, tokens] = 0.0
    _, rejected = plan._selected(tuples)
    twin_rest = rejected * max(1.0 - float(rule.residual_at(tokens).sum()), 0.0)
    assert np.abs(twin_rest - off.sum(axis=1)).max() > 1e-6
    weights, inside, outside_mass = rule._residual_parts
    heaviest = np.argmax(weights)  # a support token with excess
    twin_residual = weights[heaviest] / inside  # the twin: the support's excess normalised alone
    assert rule.residual_at(rule.support[[heaviest]])[0] == rule.residual[rule.support[heaviest]] > 0
    assert (twin_residual != rule.residual[rule.support[heaviest]]) == (keep is not None)
