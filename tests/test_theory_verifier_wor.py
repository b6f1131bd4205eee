"""The verifier for drafts without replacement (multidraft.theory.verifier._wor_rule and its parts).

Independent routes compared here:

* the pruned optimal-cut scan against the full scan (every prefix) and against P* from subsets;
* the optimal law r* against B(h) on every subset (exact enumeration of the draft set's law);
* the rule's law r (J-law quadrature, curtain layout, race passes) against r recomputed by
  enumerating every ordered draft tuple with the rule's exact choice probabilities (which for
  the J-curtain enumerate the rebuilt stream's U-points), and the output against p;
* the decoupling (r(U) = h(U)), the merged-U identity (front/back's T* law with U as one token
  equals the full pass) and P(J >= 1) = h(U) (quadrature against the scan);
* acceptance never below today's front/back rule on adversarial instances;
* chi-square of sampled outputs, with a broken twin (the J-curtain without the stream's repeats)
  that the same test rejects.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import assume, given

from multidraft.theory import WithoutReplacement, optimal_acceptance, softmax, zipf
from multidraft.theory.verifier._front_back import front_back_nodes, front_back_pass
from multidraft.theory.optimum._wor_race import containment_at, full_scan_cut, j_law, optimal_cut, race_basis, scan_order
from multidraft.theory.verifier._wor_enumeration import stream_outcomes
from multidraft.theory.verifier._wor_rule import WithoutReplacementRule, optimal_wor_law
from multidraft.theory.verifier import optimal_selection_rule

from rule_checks import coverage, enumerated_law, enumerated_output, sampled_output
from strategies import as_float, instances
from wor_instances import front_back_today
from wor_instances import instances as adversarial


def test_pruned_scan_is_the_full_scan():
    rng = np.random.default_rng(0)
    for _ in range(150):
        n = int(rng.integers(3, 400))
        k = int(rng.integers(2, 9))
        concentration = rng.choice([0.05, 0.3, 1.0, 5.0])
        p, q = rng.dirichlet(np.full(n, concentration)), rng.dirichlet(np.full(n, concentration))
        if np.count_nonzero(q) < k:
            continue
        pruned, full = optimal_cut(p, q, k), full_scan_cut(p, q, k)
        assert pruned.value == pytest.approx(full.value, abs=1e-14)
        assert pruned.candidates <= full.candidates
    p = zipf(5000, exponent=1.1, rng=np.random.default_rng(1))
    for k, temperature in [(2, 0.5), (4, 2.0), (8, 0.5)]:
        q = softmax(np.log(p), temperature=temperature)
        pruned, full = optimal_cut(p, q, k), full_scan_cut(p, q, k)
        assert (pruned.size, pruned.value) == (full.size, pytest.approx(full.value, abs=1e-14))


def test_pruned_scan_with_one_dominant_draft_token():
    """One draft token of mass 1 - 1e-12 (the others share 1e-12): the pruned scan found no
    candidate ("argmin of an empty sequence") because its chord bounds placed prefixes by their
    prefix sums Q_j, which round by ~1e-16 per token against a spacing of 1e-12 / n. Placed by
    the outside masses λ_j (summed from the tail) the chord is a valid lower bound; twin: the
    same chord placed by prefix sums exceeds the exact cut."""
    def rows(n):
        q = np.full(n, 1e-12 / (n - 1))
        q[7] = 1.0 - 1e-12
        return np.random.default_rng(0).dirichlet(np.full(n, 0.3)), q

    p, q = rows(4096)
    for k in (2, 4, 8):
        pruned, full = optimal_cut(p, q, k), full_scan_cut(p, q, k)
        assert (pruned.size, pruned.value) == (full.size, pytest.approx(full.value, abs=1e-14))
    (p, q), k = rows(512), 2  # the twin's chord is off by 2e-6 there
    order = scan_order(p, q)
    q_sorted, prefix_p = q[order], np.cumsum(p[order])
    cut = prefix_p + 1.0 - containment_at(q_sorted, k, np.arange(1, len(q) + 1))
    assert q_sorted[0] == q[7] and cut[0] == pytest.approx(prefix_p[0] + 1.0)  # g = 0 on the dominant token alone

    def chord_excess(place, start):  # the chord of g through (∅, 0), ({dominant}, 0), (Ω, 1): lower bound minus cut
        chord = np.interp(place, [start, place[0], place[-1]], [0.0, 0.0, 1.0])
        return float(np.max(prefix_p + 1.0 - chord - cut))

    assert chord_excess(-race_basis(q_sorted, k).outside[1:], -1.0) < 1e-13
    assert chord_excess(np.cumsum(q_sorted), 0.0) > 1e-8  # twin: placed by prefix sums


@given(instances(max_n=6, max_k=4))
def test_optimal_law_lies_in_the_base_polytope(instance):
    """r* (clipped form) is a law with r(A) <= h(A) on every subset and Σ min(p, r*) = P*."""
    n, k, target, draft = instance
    p, q = as_float(target), as_float(draft)
    assume(k <= np.count_nonzero(q))
    law = WithoutReplacement(q, k)
    cut = optimal_cut(p, q, k)
    in_cut = np.zeros(n, dtype=bool)
    in_cut[cut.order[: cut.size]] = True
    r = optimal_wor_law(p, q, in_cut, cut.contained)
    optimum = float(optimal_acceptance(target, WithoutReplacement(draft, k), method="subsets", exact=True).value)
    assert r.sum() == pytest.approx(1.0, abs=1e-12)
    assert np.minimum(p, r).sum() == pytest.approx(optimum, abs=1e-12)
    for bits in itertools.product([False, True], repeat=n):
        mask = np.array(bits)
        assert r[mask].sum() <= coverage(law, mask) + 1e-12


@given(instances(max_n=6, max_k=4))
def test_law_output_and_bounds_on_small_instances(instance):
    n, k, target, draft = instance
    p, q = as_float(target), as_float(draft)
    assume(k <= np.count_nonzero(q))
    law = WithoutReplacement(q, k)
    rule = optimal_selection_rule(p, law)
    assert isinstance(rule, WithoutReplacementRule)
    r = rule.selection_law
    np.testing.assert_allclose(enumerated_law(rule, law), r, rtol=0, atol=1e-12)
    np.testing.assert_allclose(enumerated_output(rule, law), p, rtol=0, atol=1e-12)
    optimum = float(optimal_acceptance(target, WithoutReplacement(draft, k), method="subsets", exact=True).value)
    assert rule.optimum == pytest.approx(optimum, abs=1e-12)
    assert np.minimum(p, rule.optimal_law).sum() == pytest.approx(optimum, abs=1e-12)
    assert np.minimum(p, q).sum() - 1e-12 <= rule.acceptance <= optimum + 1e-12
    for bits in itertools.product([False, True], repeat=n):
        mask = np.array(bits)
        assert r[mask].sum() <= coverage(law, mask) + 1e-12


def test_law_and_output_by_enumeration_at_n7():
    """n = 7, K = 2..4, adversarial kinds: the rule's law and output, tuple by tuple."""
    for kind, p, q, k in adversarial(seed=4, count=27, max_n=7):
        law = WithoutReplacement(q, k)
        rule = optimal_selection_rule(p, law)
        np.testing.assert_allclose(enumerated_law(rule, law), rule.selection_law, rtol=0, atol=1e-12, err_msg=kind)
        np.testing.assert_allclose(enumerated_output(rule, law), p, rtol=0, atol=1e-12, err_msg=kind)


def test_decoupling_and_merged_u_identities():
    """U is tight (r(U) = h(U) = 1 - g(T*)), P(J >= 1) = h(U) by the J-law quadrature, the
    J-law equals the rebuilt stream's enumerated J, and front/back's T* law with U merged into
    one token is the full pass's."""
    for kind, p, q, k in adversarial(seed=6, count=90, max_n=7):
        law = WithoutReplacement(q, k)
        rule = optimal_selection_rule(p, law)
        if rule.first_draft:
            continue
        cut = optimal_cut(p, q, k)
        in_u = np.ones(len(p), dtype=bool)
        in_u[cut.order[: cut.size]] = False
        assert rule.selection_law[in_u].sum() == pytest.approx(1.0 - cut.contained, abs=1e-12)
        assert cut.contained == pytest.approx(float(law.containment(~in_u)), abs=1e-12)
        outside = float(q[in_u].sum())
        if outside > 0 and (~in_u).any():
            c = j_law(q[~in_u], outside, k)
            assert 1.0 - c[0] == pytest.approx(1.0 - cut.contained, abs=1e-13)
            enumerated = np.zeros(k + 1)
            tuples, probs = law.enumerate()
            for row, prob in zip(tuples, probs):
                for marks, weight in stream_outcomes(row, in_u[row], q, k):
                    enumerated[len(marks)] += prob * weight
            np.testing.assert_allclose(c, enumerated, rtol=0, atol=1e-12)
        if cut.size and outside > 0:
            order = rule.position.argsort()
            nodes, weights = front_back_nodes(q, k)
            _, full = front_back_pass(p[order], q[order], rule.boundary, k, nodes, weights)
            t_tokens = order[rule.boundary :]
            np.testing.assert_allclose(rule.selection_law[t_tokens], full[rule.boundary :], rtol=0, atol=1e-13)


def test_never_worse_than_the_front_back_rule():
    """Over 600 adversarial instances (n <= 8), the rule accepts at least as much as today's
    front/back rule, reaches P* far more often, and never exceeds P*."""
    reached = today_reached = 0
    for kind, p, q, k in adversarial(seed=11, count=600, max_n=8):
        law = WithoutReplacement(q, k)
        rule = optimal_selection_rule(p, law)
        today = front_back_today(p, q, k)
        assert rule.acceptance >= today - 1e-12, kind
        assert rule.acceptance <= rule.optimum + 1e-12
        reached += rule.acceptance >= rule.optimum - 1e-9
        today_reached += today >= rule.optimum - 1e-9
    assert reached >= today_reached
    assert reached >= 0.95 * 600


EDGE_CASES = {
    "acceptance-one": ([1 / 3, 1 / 6, 1 / 2], [1 / 3, 1 / 3, 1 / 3], 2),
    "p-equals-q": ([0.5, 0.3, 0.2], [0.5, 0.3, 0.2], 2),
    "disjoint-supports": ([0.5, 0.5, 0.0, 0.0], [0.0, 0.0, 0.4, 0.6], 2),
    "target-one-hot": ([0.0, 1.0, 0.0], [0.6, 0.2, 0.2], 2),
    "ties": ([0.25, 0.25, 0.25, 0.25], [0.4, 0.2, 0.2, 0.2], 3),
    "single-draft": ([0.7, 0.2, 0.1], [0.2, 0.2, 0.6], 1),
    "all-drafted": ([0.1, 0.2, 0.7], [0.5, 0.3, 0.2], 3),
    "zeros-both": ([0.0, 0.5, 0.5, 0.0], [0.0, 0.2, 0.3, 0.5], 3),
}


@pytest.mark.parametrize("case", EDGE_CASES)
def test_edge_cases(case):
    """Ties, zeros, p = q, disjoint supports, U or T* empty, K = 1 and K = n: the law is the
    enumerated one, the output is p, and each reaches P*."""
    target, draft, k = EDGE_CASES[case]
    p, law = np.array(target), WithoutReplacement(draft, k)
    rule = optimal_selection_rule(p, law)
    np.testing.assert_allclose(enumerated_law(rule, law), rule.selection_law, rtol=0, atol=1e-12)
    np.testing.assert_allclose(enumerated_output(rule, law), p, rtol=0, atol=1e-12)
    assert rule.acceptance == pytest.approx(optimal_acceptance(p, law, method="subsets").value, abs=1e-12)


@pytest.mark.parametrize("n", [300, 49152])
@pytest.mark.parametrize("k", [2, 4, 8])
@pytest.mark.parametrize("temperature", [0.5, 1.2])
def test_reaches_the_optimum_on_zipf_positions(n, k, temperature):
    """P* (sorted scan of the law) to 1e-10 on Zipf-like targets with tempered drafts."""
    p = zipf(n, exponent=1.1, rng=np.random.default_rng(n + k))
    law = WithoutReplacement(softmax(np.log(p), temperature=temperature), k)
    rule = optimal_selection_rule(p, law)
    assert not rule.first_draft and rule.note is None
    assert rule.selection_law.sum() == pytest.approx(1.0, abs=1e-12)
    assert rule.acceptance == pytest.approx(optimal_acceptance(p, law).value, abs=1e-10)


class NoRepeatsTwin(WithoutReplacementRule):
    """WRONG twin: the J-curtain's U-points without the stream's repeats (J = the number of U
    drafts, their own tokens), and the U-point with the *largest* position wins, while the
    rule's law is still used."""

    def _stream_marks(self, tuples, rng):
        return np.where(self._in_u(tuples), tuples, -1)

    def _curtain_winner(self, marks, rng):
        reversed_marks = np.where(marks >= 0, marks, -1)
        winner = super()._curtain_winner(reversed_marks, rng)
        last = np.where(marks >= 0, np.arange(marks.shape[1]), -1).argmax(axis=1)
        return np.where(rng.random(len(marks)) < 0.5, winner, marks[np.arange(len(marks)), last])


def _twin(rule: WithoutReplacementRule) -> NoRepeatsTwin:
    return NoRepeatsTwin(**rule.__dict__)


@pytest.mark.statistical
def test_sampled_output_is_the_target_and_the_wrong_twin_is_caught():
    """N = 100,000 runs on an instance where the J-curtain selects among two groups or more: the selected tokens follow r and the output follows p
    (chi-square); the no-repeats twin's selected tokens are rejected against the same r."""
    from scipy import stats

    for kind, p, q, k in adversarial(seed=2, count=200, max_n=7):
        law = WithoutReplacement(q, k)
        rule = optimal_selection_rule(p, law)
        if rule.u_rule == "j-curtain" and not rule.first_draft and k >= 3:
            if rule.layout is not None and len(rule.layout.group_first) >= 2:
                break
    else:
        raise AssertionError("no instance with a J-curtain of two groups in the seeded search")
    tuples = law.sample(np.random.default_rng(3), 100_000)

    def selected(chooser):
        chosen = tuples[np.arange(len(tuples)), chooser.choose(tuples, np.random.default_rng(4))]
        return np.bincount(chosen, minlength=len(p))

    expected = rule.selection_law * len(tuples)
    assert stats.chisquare(selected(rule), expected).pvalue > 1e-3
    assert stats.chisquare(selected(_twin(rule)), expected).pvalue < 1e-6
    output = sampled_output(rule, rule, law, 100_000, 1)
    assert stats.chisquare(output, p * output.sum()).pvalue > 1e-3


@pytest.mark.statistical
def test_selected_tokens_follow_the_law_at_full_vocabulary():
    """n = 49152, K = 4: the selected token of 10,000 sampled draft sets, binned (the 30 most
    likely tokens and the rest), against the computed law r (chi-square)."""
    from scipy import stats

    n = 49152
    p = zipf(n, exponent=1.1, rng=np.random.default_rng(7))
    law = WithoutReplacement(softmax(np.log(p), temperature=0.8), 4)
    rule = optimal_selection_rule(p, law)
    rng = np.random.default_rng(8)
    tuples = np.concatenate([law.sample(rng, 1000) for _ in range(10)])
    chosen = tuples[np.arange(len(tuples)), rule.choose(tuples, rng)]
    top = np.argsort(-rule.selection_law)[:30]
    bins = np.full(n, len(top))
    bins[top] = np.arange(len(top))
    observed = np.bincount(bins[chosen], minlength=len(top) + 1)
    expected = np.bincount(bins, rule.selection_law, minlength=len(top) + 1) * len(chosen)
    assert stats.chisquare(observed, expected).pvalue > 1e-3


def test_optimal_scheme_beyond_the_lp_uses_the_rule():
    """``optimal`` with drafts without replacement at n = 49152: acceptance is the rule's (= P*
    here), and its sampler accepts at that rate."""
    from multidraft.schemes import get_scheme

    n = 49152
    p = zipf(n, exponent=1.1, rng=np.random.default_rng(0))
    law = WithoutReplacement(softmax(np.log(p), temperature=0.8), 2)
    scheme = get_scheme("optimal")
    optimum = optimal_acceptance(p, law).value
    assert scheme.acceptance(p, law) == pytest.approx(optimum, abs=1e-10)
    rng = np.random.default_rng(2)
    tokens, accepted = scheme.sample(p, law, np.concatenate([law.sample(rng, 1000) for _ in range(4)]), rng)
    assert abs(accepted.mean() - optimum) < 4.5 * np.sqrt(optimum * (1 - optimum) / 4000) + 1e-9
    assert scheme.select(p, law, law.sample(rng, 1)[0], rng).token in range(n)


def _short_instance():
    """An adversarial instance where the J-curtain falls short of h(U) and front/back's U side
    does better (found by the seeded search)."""
    for kind, p, q, k in adversarial(seed=11, count=600, max_n=8):
        rule = optimal_selection_rule(p, WithoutReplacement(q, k))
        if rule.u_rule == "front-back" and not rule.first_draft:
            return p, q, k
    raise AssertionError("no instance with the front/back U side in the seeded search")


def test_front_back_u_side_when_the_j_curtain_falls_short():
    p, q, k = _short_instance()
    law = WithoutReplacement(q, k)
    rule = optimal_selection_rule(p, law)
    np.testing.assert_allclose(enumerated_law(rule, law), rule.selection_law, rtol=0, atol=1e-12)
    np.testing.assert_allclose(enumerated_output(rule, law), p, rtol=0, atol=1e-12)


@pytest.mark.parametrize("closed_form", [False, True], ids=["quadrature", "pairs"])
def test_first_draft_when_it_accepts_more(monkeypatch, closed_form):
    """A fit that accepts less than the first draft (here: passes that return α = 0, the
    always-last rule, on an instance with T* = Ω) is replaced by the first draft, whose law q
    is exact; a failed fit (NaN) likewise, and says so. K = 2: both the quadrature's pass
    (``PAIRS = 0``) and the closed form's (``pair_pass``, and ``pair_tail_pass`` with no tail,
    writing its α and r at the tokens as it does) replaced."""
    from multidraft.theory.verifier import _wor_rule

    name = "pair_pass" if closed_form else "front_back_pass"
    fitted_pass = getattr(_wor_rule, name)
    if not closed_form:
        monkeypatch.setattr(_wor_rule, "PAIRS", 0)

    def always_last(target, draft, boundary, *args, **kwargs):
        if closed_form:
            return fitted_pass(target, draft, boundary, *args[:1], alpha=np.zeros(len(draft)), **{k: v for k, v in kwargs.items() if k != "alpha"})
        k, nodes, weights = args[:3]
        return fitted_pass(target, draft, boundary, k, nodes, weights, np.zeros(len(draft)))

    def tail_pass(replaced):  # pair_tail_pass's contract (no tail found) over a replaced pair_pass
        def run(target, draft, boundary, find, *, into=None, **kwargs):
            alpha, r = replaced(target, draft, boundary, **kwargs)
            if into is not None:
                tokens, into_alpha, into_r, smaller = into
                into_alpha[tokens], into_r[tokens] = alpha[boundary:], r[boundary:]
                np.minimum(target[boundary:], r[boundary:], out=smaller[: len(tokens)])
            return alpha, r, len(draft) - boundary

        return run

    def replace_passes(replaced):
        monkeypatch.setattr(_wor_rule, name, replaced)
        if closed_form:
            monkeypatch.setattr(_wor_rule, "pair_tail_pass", tail_pass(replaced))

    p, law = np.array([0.6, 0.1, 0.1, 0.2]), WithoutReplacement([0.1, 0.3, 0.3, 0.3], 2)
    assert not optimal_selection_rule(p, law).first_draft
    replace_passes(always_last)
    monkeypatch.setattr(_wor_rule, "SEARCH_FITS", 0)  # no other orders: the always-last rule only
    rule = optimal_selection_rule(p, law)
    assert rule.first_draft and rule.note is None
    np.testing.assert_allclose(rule.selection_law, law.draft, rtol=0, atol=0)
    np.testing.assert_allclose(enumerated_output(rule, law), p, rtol=0, atol=1e-12)

    def broken(target, draft, *args, **kwargs):
        return np.zeros(len(draft)), np.full(len(draft), np.nan)

    replace_passes(broken)
    rule = optimal_selection_rule(p, law)
    assert rule.first_draft and rule.note is not None and "fell back" in rule.note
    np.testing.assert_allclose(enumerated_law(rule, law), law.draft, rtol=0, atol=1e-12)
    np.testing.assert_allclose(enumerated_output(rule, law), p, rtol=0, atol=1e-12)


def test_j_curtain_layout_groups_and_zero_length_densities():
    """The layout's group bounds (read off the sorted pieces) are those of counting every
    group's pieces, and a group of zero length (masses near 1e-18) carries the density
    w_G(t0) = G'(1 - t0) at its point t0; instances where such groups occur are reached."""
    from multidraft.theory.verifier._wor_curtain import clipped_layout

    rng = np.random.default_rng(34)
    flat = 0
    for _ in range(200):
        n, k = int(rng.integers(3, 40)), int(rng.integers(2, 6))
        m, p = rng.dirichlet(np.full(n, 0.5)), rng.dirichlet(np.full(n, 0.5))
        m[rng.random(n) < 0.3] *= 10.0 ** rng.uniform(-19, -16)
        p[rng.random(n) < 0.3] *= 10.0 ** rng.uniform(-19, -16)
        c = rng.dirichlet(np.ones(k + 1))
        c[0] = 0.0
        layout, _ = clipped_layout(p / p.sum(), m / m.sum(), c / c.sum())
        counts = np.bincount(layout.piece_group)
        np.testing.assert_array_equal(layout.group_last, np.cumsum(counts))
        np.testing.assert_array_equal(layout.group_first, np.cumsum(counts) - counts)
        length = np.add.reduceat(layout.piece_end - layout.piece_start, layout.group_first)
        zero = np.flatnonzero(length <= 0)
        flat += len(zero)
        for g in zero:
            tokens = np.flatnonzero(layout.token_group == g)
            point = layout.piece_start[layout.group_last[g] - 1]
            slope = np.polynomial.polynomial.polyval(1.0 - point, np.polynomial.polynomial.polyder(c / c.sum()))
            np.testing.assert_allclose(layout.law[tokens], (m / m.sum())[tokens] * slope, rtol=1e-12)
    assert flat >= 10


def test_j_curtain_fitted_to_r_star_tiles_when_its_condition_fails():
    """The research note left open whether the J-curtain's layout still tiles [0, 1) when the
    J-condition fails (so that its law formula is its law). The shipped rule fits the class
    optimum instead (which tiles by construction), but the question is checked here: fitting
    the stack pass to r* itself on instances where the condition fails, the pieces of positive
    length tile [0, 1) and the formula law equals the law from the actual position
    distributions (enumeration over J and the marks)."""
    from multidraft.theory.verifier._wor_curtain import Layout, _groups, _stack_pass, clipped_layout, point_win_probabilities

    checked = 0
    for kind, p, q, k in adversarial(seed=11, count=400, max_n=5):
        cut = optimal_cut(p, q, k)
        in_cut = np.zeros(len(p), dtype=bool)
        in_cut[cut.order[: cut.size]] = True
        u = np.flatnonzero(~in_cut & (q > 0))
        if len(u) < 2:
            continue
        outside = float(q[u].sum())
        c = j_law(q[in_cut], outside, k)
        r_star = optimal_wor_law(p, q, in_cut, cut.contained)
        _, best = clipped_layout(p[u], q[u] / outside, c)
        if np.minimum(p[u], r_star[u]).sum() - best <= 1e-9:
            continue  # the condition holds
        tokens = u[np.argsort(p[u] / q[u], kind="stable")]
        group, mass, weight, _ = _groups(p[tokens], q[tokens] / outside, 1.0 - cut.contained, "min")
        piece_group, start, end, realised_w, realised_l = _stack_pass(mass, weight, c, 0.0, 1.0)
        positive = end > start
        order = np.argsort(start[positive])
        s, e = start[positive][order], end[positive][order]
        assert s[0] == pytest.approx(0.0, abs=1e-13) and e[-1] == pytest.approx(1.0, abs=1e-13)
        np.testing.assert_allclose(s[1:], e[:-1], rtol=0, atol=1e-13)
        counts = np.bincount(piece_group, minlength=len(mass))
        layout = Layout(group, piece_group, start, end, np.cumsum(counts) - counts, np.cumsum(counts), None)
        share = q[tokens] / outside
        actual = np.zeros(len(tokens))
        for j in range(1, k + 1):
            marks = np.array(list(itertools.product(range(len(tokens)), repeat=j)))
            wins = point_win_probabilities(layout, group[marks])
            np.add.at(actual, marks.ravel(), (wins * (np.prod(share[marks], axis=1) * c[j])[:, None]).ravel())
        formula = share * (realised_w / np.maximum(realised_l, 1e-300))[group]
        np.testing.assert_allclose(actual, formula, rtol=0, atol=1e-13)
        checked += 1
        if checked == 12:
            break
    assert checked >= 5


def _tail_instances(seed: int, per_k: int):
    """Small instances (n = 7) whose T* side gets a uniform tail when MIN_TAIL is 2: max(3, K)
    tokens carry most of both laws (so that the mass outside the K - 1 largest is not tiny),
    the other light pool tokens the rest."""
    rng = np.random.default_rng(seed)
    found = {2: 0, 3: 0}
    for _ in range(20_000):
        if min(found.values()) >= per_k:
            return
        k = int(rng.integers(2, 4))
        big = max(3, k)
        q = np.concatenate([rng.dirichlet(np.ones(big)), rng.uniform(1e-5, 3e-4, 7 - big)])
        p = np.concatenate([rng.dirichlet(np.ones(big)), rng.uniform(1e-6, 3e-4, 7 - big) * rng.uniform(0, 1)])
        p, q = p / p.sum(), q / q.sum()
        law = WithoutReplacement(q, k)
        rule = optimal_selection_rule(p, law)
        if rule.tail < rule.n and found[k] < per_k:
            found[k] += 1
            yield p, law, rule
    raise AssertionError(f"tail instances found per K: {found}")


def test_uniform_tail_law_and_output_by_enumeration(monkeypatch):
    """The T* side's uniform tail (winner uniform among the drafted tail tokens when no head coin
    says front): its law by the power series against every ordered draft tuple enumerated with
    the rule's choice probabilities (absolute 1e-12 and, on the tiny tail tokens, relative
    1e-11), the output is p, and the acceptance is never below the rule without a tail."""
    from multidraft.theory.verifier import _wor_rule

    monkeypatch.setattr(_wor_rule, "MIN_TAIL", 2)
    for p, law, rule in _tail_instances(seed=0, per_k=3):
        enumerated = enumerated_law(rule, law)
        np.testing.assert_allclose(enumerated, rule.selection_law, rtol=0, atol=1e-12)
        tail = rule.position >= rule.tail
        np.testing.assert_allclose(rule.selection_law[tail], enumerated[tail], rtol=1e-11)
        np.testing.assert_allclose(enumerated_output(rule, law), p, rtol=0, atol=1e-12)
        with monkeypatch.context() as patch:
            patch.setattr(_wor_rule, "MIN_TAIL", law.n + 1)
            plain = optimal_selection_rule(p, law)
        assert plain.tail == law.n
        assert rule.acceptance >= plain.acceptance - 1e-12
        assert rule.shortfall[1] <= plain.shortfall[1] + 1e-12


@pytest.mark.parametrize("k", [2, 4, 8])
def test_uniform_tail_series_is_the_direct_integral(k):
    """n = 20000, drafts hotter than the target (T* nearly everything): the tail's law by its
    power series in q equals the same integral evaluated token by token (relative 1e-13), the
    rule's law sums to one, and the acceptance is P* (sorted scan)."""
    from multidraft.theory.verifier._front_back import front_back_head
    from multidraft.theory.verifier._wor_tail import tail_law, tail_law_direct, tail_polynomials, tail_products

    p = zipf(20000, exponent=1.1, rng=np.random.default_rng(k))
    q = softmax(np.log(p), temperature=1.6)
    law = WithoutReplacement(q, k)
    rule = optimal_selection_rule(p, law)
    assert rule.tail < rule.n - 10000
    order = rule.position.argsort()
    outside = float(q[order[: rule.boundary]].sum())
    lead = 1 if outside > 0 else 0
    t_tokens = order[rule.boundary :]
    merged_q = np.concatenate([[outside] * lead, q[t_tokens]])
    merged_p = np.concatenate([[0.0] * lead, p[t_tokens]])
    nodes, weights = front_back_nodes(merged_q, k)
    head = lead + rule.tail - rule.boundary
    tail_q = merged_q[head:]
    tail_phi, tail_psi = tail_products(tail_q, nodes, k)[:2]
    _, _, pre_phi, pre_psi = front_back_head(
        merged_p[:head], merged_q[:head], lead, k, nodes, weights, None, (tail_phi, tail_psi, float(tail_q.sum()))
    )
    polynomials = tail_polynomials(pre_phi, pre_psi, tail_phi, tail_psi, k)
    series, direct = tail_law(tail_q, nodes, weights, polynomials, k), tail_law_direct(tail_q, nodes, weights, polynomials, k)
    np.testing.assert_allclose(series, direct, rtol=1e-13)
    np.testing.assert_allclose(rule.selection_law[t_tokens[head - lead :]], series, rtol=1e-13)
    assert rule.selection_law.sum() == pytest.approx(1.0, abs=1e-12)
    assert rule.acceptance == pytest.approx(optimal_acceptance(p, law).value, abs=1e-10)


@pytest.mark.parametrize("k", [2, 8])
def test_tail_rounding_bound_from_power_sums_is_the_sum_of_its_series(k):
    """The rounding bound of the uniform tail, summed through the tail's power sums (O(L)),
    equals the bound series evaluated token by token and added up (relative 1e-12), and is
    positive; its twin with one power sum wrong differs."""
    from multidraft.theory.optimum._wor_moments import ROUNDING
    from multidraft.theory.verifier._front_back import front_back_head
    from multidraft.theory.verifier._wor_tail import tail_law, tail_polynomials, tail_products, tail_rounding

    p = zipf(20000, exponent=1.1, rng=np.random.default_rng(k))
    q = softmax(np.log(p), temperature=1.6)
    order = np.argsort(-p / q, kind="stable")
    merged_q, merged_p = np.concatenate([[0.05], 0.95 * q[order]]), np.concatenate([[0.0], p[order]])
    nodes, weights = front_back_nodes(merged_q, k)
    head = 2000
    products = tail_products(merged_q[head:], nodes, k)
    _, _, pre_phi, pre_psi = front_back_head(
        merged_p[:head], merged_q[:head], 1, k, nodes, weights, None, (products.phi, products.psi, float(merged_q[head:].sum()))
    )
    bound = tail_polynomials(np.abs(pre_phi), np.abs(pre_psi), ROUNDING * products.phi_abs, ROUNDING * products.psi_abs, k, absolute=True)
    by_token = float(tail_law(merged_q[head:], nodes, weights, bound, k).sum())
    summed = tail_rounding(products, nodes, weights, pre_phi, pre_psi, k)
    assert summed > 0
    assert summed == pytest.approx(by_token, rel=1e-12, abs=0.0)
    wrong = products._replace(sums=products.sums * np.where(np.arange(len(products.sums)) == 1, 1.5, 1.0))
    assert tail_rounding(wrong, nodes, weights, pre_phi, pre_psi, k) != pytest.approx(by_token, rel=1e-6, abs=0.0)


def _last_of_tail(rule, tuples, rng):
    chosen = WithoutReplacementRule.choose(rule, tuples, rng)
    position = rule.position[tuples]
    rows = np.flatnonzero(position[np.arange(len(tuples)), chosen] >= rule.tail)
    chosen[rows] = np.argmax(position[rows], axis=-1)
    return chosen


@pytest.mark.statistical
def test_uniform_tail_selection_follows_its_law_and_the_wrong_twin_is_caught():
    """n = 8192, K = 4, T = 1.6 (a tail of most of the vocabulary): the selected tokens of 20,000
    sampled draft sets, binned (the 20 most likely head tokens, the rest of the head, ten
    position bands of the tail), against the computed law (chi-square); the twin that takes the
    last tail token instead is rejected against the same law."""
    from scipy import stats

    n = 8192
    p = zipf(n, exponent=1.1, rng=np.random.default_rng(9))
    law = WithoutReplacement(softmax(np.log(p), temperature=1.6), 4)
    rule = optimal_selection_rule(p, law)
    assert rule.tail < n // 2
    rng = np.random.default_rng(10)
    tuples = np.concatenate([law.sample(rng, 2000) for _ in range(10)])
    top = np.argsort(-np.where(rule.position < rule.tail, rule.selection_law, 0.0))[:20]
    bins = np.full(n, 20)
    bins[top] = np.arange(20)
    in_tail = rule.position >= rule.tail
    bins[in_tail] = 21 + (rule.position[in_tail] - rule.tail) * 10 // (n - rule.tail)
    expected = np.bincount(bins, rule.selection_law, minlength=31) * len(tuples)

    def observed(choose):
        chosen = tuples[np.arange(len(tuples)), choose(tuples, np.random.default_rng(11))]
        return np.bincount(bins[chosen], minlength=31)

    assert stats.chisquare(observed(rule.choose), expected).pvalue > 1e-3
    assert stats.chisquare(observed(lambda t, g: _last_of_tail(rule, t, g)), expected).pvalue < 1e-6


def test_front_back_nodes_sum_the_spread():
    """The front/back pass's nodes come from σ summed over the tokens outside the K - 1 largest
    (and β, the least of those): with q = (0.6, 0.4, 1e-30) the old form ``1 - M_{K-1}`` is 0,
    and (floored at 1e-300, the twin) asks for ~10 times the nodes; the law still sums to one
    with the few hundred nodes of the summed form."""
    from multidraft.theory.verifier._front_back import LANES
    from multidraft.theory.verifier._pass_nodes import pass_nodes

    k = 3
    q = np.array([0.6, 0.4, 1e-30])
    assert 1.0 - (q[0] + q[1]) == 0.0
    nodes, weights = front_back_nodes(q, k)
    np.testing.assert_array_equal(nodes, pass_nodes(k, 1e-30, 0.4, float(q.sum()), lanes=LANES)[0])
    assert nodes[-1] >= 46e30 and len(nodes) < 1000
    assert len(pass_nodes(k, 1e-300, 0.4, float(q.sum()), lanes=LANES)[0]) > 5 * len(nodes)
    p = np.array([0.5, 0.3, 0.2])
    _, r = front_back_pass(p, q, 3, k, nodes, weights)
    assert r.sum() == pytest.approx(1.0, abs=1e-13)
