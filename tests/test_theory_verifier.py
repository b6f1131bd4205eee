"""The exact optimal verifier (multidraft.theory.verifier): its law, its acceptance, its layout.

Independent routes compared here:

* the rule's law r from its position sets (closed form) against r recomputed by enumerating
  every draft tuple with the exact choice probabilities (piecewise-polynomial integrals), and at
  large n against the law recomputed through the *actual* distribution function of a draft's
  position (pieces sorted, so rounding of the layout is accounted for);
* ``Σ min(p, r)`` against P* from subsets (min-cut over all 2^n sets), the transport LP, and the
  sorted scan at 131072 tokens;
* r ∈ B(h): every subset A has r(A) <= h(A) = 1 - (1 - q(A))^K, and U is tight;
* a deliberately broken layout (positions uniform over each hull, ignoring the holes) whose
  computed law no longer matches enumeration.
"""

from __future__ import annotations

import copy
import itertools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from multidraft.theory import IID, Greedy, Independent, optimal_acceptance, softmax, zipf
from multidraft.theory.verifier import CurtainRule, optimal_selection_rule

from rule_checks import coverage, enumerated_law, enumerated_output, law_through_actual_positions, sampled_output
from strategies import as_float, instances






@given(instances(max_n=6, max_k=4))
def test_law_acceptance_and_polytope_on_small_instances(instance):
    n, k, target, draft = instance
    p, q = as_float(target), as_float(draft)
    law = IID(q, k)
    rule = optimal_selection_rule(p, law)
    r = rule.selection_law
    np.testing.assert_allclose(enumerated_law(rule, law), r, rtol=0, atol=1e-12)
    optimum = float(optimal_acceptance(target, IID(draft, k), method="subsets", exact=True).value)
    assert rule.optimum == pytest.approx(optimum, abs=1e-12)
    assert rule.acceptance == pytest.approx(optimum, abs=1e-12)
    assert r.sum() == pytest.approx(1.0, abs=1e-12)
    for bits in itertools.product([False, True], repeat=n):
        mask = np.array(bits)
        assert r[mask].sum() <= coverage(law, mask) + 1e-12
    cut = np.zeros(n, dtype=bool)
    cut[rule.certificate] = True
    assert r[~cut].sum() == pytest.approx(coverage(law, ~cut), abs=1e-12)  # U is tight


@given(instances(max_n=5, max_k=3))
def test_output_law_is_the_target(instance):
    """Selection, then accept with min(1, p/r), else the residual: exactly p (enumeration)."""
    n, k, target, draft = instance
    p, law = as_float(target), IID(as_float(draft), k)
    rule = optimal_selection_rule(p, law)
    np.testing.assert_allclose(enumerated_output(rule, law), p, rtol=0, atol=1e-12)


def test_acceptance_equals_the_transport_lp():
    pytest.importorskip("cvxpy")
    from multidraft.lp import transport_lp

    rng = np.random.default_rng(3)
    for n, k in [(4, 2), (5, 2), (4, 3), (6, 2)]:
        p, q = rng.dirichlet(np.ones(n) * 0.7), rng.dirichlet(np.ones(n) * 0.7)
        rule = optimal_selection_rule(p, IID(q, k))
        assert rule.acceptance == pytest.approx(transport_lp(p, IID(q, k)).acceptance, abs=1e-7)


EDGE_CASES = {
    "acceptance-one": ([1 / 3, 1 / 6, 1 / 2], [1 / 3, 1 / 3, 1 / 3], 2),  # T* empty: r = p
    "p-equals-q": ([0.5, 0.3, 0.2], [0.5, 0.3, 0.2], 3),
    "disjoint-supports": ([0.5, 0.5, 0.0, 0.0], [0.0, 0.0, 0.4, 0.6], 2),  # U undraftable
    "target-one-hot": ([0.0, 1.0, 0.0], [0.6, 0.2, 0.2], 2),
    "draft-one-hot": ([0.2, 0.5, 0.3], [0.0, 1.0, 0.0], 3),
    "ties": ([0.25, 0.25, 0.25, 0.25], [0.4, 0.2, 0.2, 0.2], 2),
    "single-draft": ([0.7, 0.2, 0.1], [0.2, 0.2, 0.6], 1),
    "one-token": ([1.0], [1.0], 2),
    "zeros-both": ([0.0, 0.5, 0.5, 0.0], [0.0, 0.2, 0.3, 0.5], 3),
}


@pytest.mark.parametrize("case", EDGE_CASES)
def test_edge_cases(case):
    target, draft, k = EDGE_CASES[case]
    p, law = np.array(target), IID(draft, k)
    rule = optimal_selection_rule(p, law)
    np.testing.assert_allclose(enumerated_law(rule, law), rule.selection_law, rtol=0, atol=1e-12)
    assert rule.acceptance == pytest.approx(optimal_acceptance(p, law, method="subsets").value, abs=1e-12)
    if k == 1:
        np.testing.assert_allclose(rule.selection_law, law.draft, rtol=0, atol=1e-15)
    assert np.all(rule.selection_law[law.draft == 0] == 0)  # never selects an undraftable token


@pytest.mark.parametrize("n", [49152, 131072])
@pytest.mark.parametrize("k", [2, 4, 8])
@pytest.mark.parametrize("temperature", [0.8, 1.2, 1.6])
def test_full_vocabulary(n, k, temperature):
    """Zipf targets, temperature-shifted drafts (T = 1.2 gives P* = 1 at K >= 4: every token
    free). The law through the actual positions agrees with the rule's law token by token."""
    p = zipf(n, exponent=1.1, rng=np.random.default_rng(0))
    law = IID(softmax(np.log(p), temperature=temperature), k)
    rule = optimal_selection_rule(p, law)
    assert rule.acceptance == pytest.approx(optimal_acceptance(p, law).value, abs=1e-9)
    assert rule.acceptance <= rule.optimum + 1e-12
    np.testing.assert_allclose(law_through_actual_positions(rule), rule.selection_law, rtol=0, atol=1e-12)
    assert np.abs(rule.selection_law - law_through_actual_positions(rule)).sum() < 1e-9


def test_broken_layout_is_caught():
    """WRONG: positions uniform over each group's hull, ignoring the holes its children leave.
    The law the rule reports no longer matches enumeration, so the test above would fail."""
    p, q, k = np.array([0.35, 0.3, 0.2, 0.1, 0.05]), np.array([0.1, 0.15, 0.2, 0.25, 0.3]), 3
    law = IID(q, k)
    rule = optimal_selection_rule(p, law)
    assert (np.diff(rule.group_first) >= 0).all()
    broken = _hull_uniform(rule)
    assert len(rule.piece_start) > len(broken.piece_start)  # the instance has nested hulls
    assert np.abs(enumerated_law(broken, law) - rule.selection_law).max() > 1e-3


def test_sampler_follows_the_law():
    """The numpy sampler's selected tokens against r (chi-square), N = 60,000."""
    from scipy import stats

    p, q, k = np.array([0.35, 0.3, 0.2, 0.1, 0.05]), np.array([0.1, 0.15, 0.2, 0.25, 0.3]), 3
    law = IID(q, k)
    rule = optimal_selection_rule(p, law)
    rng = np.random.default_rng(11)
    tuples = law.sample(rng, 60_000)
    chosen = tuples[np.arange(len(tuples)), rule.choose(tuples, rng)]
    counts = np.bincount(chosen, minlength=len(p))
    assert stats.chisquare(counts, rule.selection_law * len(chosen)).pvalue > 1e-4


@pytest.mark.parametrize(
    "law, error, message",
    [
        (Independent([[0.5, 0.5], [0.2, 0.8], [0.6, 0.4]]), ValueError, "supports the iid, wor laws and independent drafts with k=2; got the independent law with k=3 \\(k > 2 independent drafts: no fitted K-dimensional path yet\\)$"),
        (Greedy([0.5, 0.5], 2), ValueError, "supports the iid, wor laws and independent drafts with k=2; got the greedy law with k=2$"),
        ([0.5, 0.5], TypeError, "expected a draft law"),
    ],
    ids=["independent", "greedy", "not-a-law"],
)
def test_bad_laws(law, error, message):
    with pytest.raises(error, match=message):
        optimal_selection_rule([0.5, 0.5], law)


@pytest.mark.parametrize(
    "target, message",
    [([0.5, 0.5, 0.0], "does not match"), ([0.5, float("nan")], "NaN"), ([0.7, 0.7], "sum")],
    ids=["length", "nan", "sum"],
)
def test_bad_targets(target, message):
    with pytest.raises(ValueError, match=message):
        optimal_selection_rule(target, IID([0.5, 0.5], 2))


@st.composite
def _uniform_rows(draw):
    return draw(st.lists(st.floats(0, 1, exclude_max=True), min_size=3, max_size=3))


@given(_uniform_rows())
def test_positions_lie_in_the_token_sets(uniforms):
    p, q = np.array([0.35, 0.3, 0.2, 0.1, 0.05]), np.array([0.1, 0.15, 0.2, 0.25, 0.3])
    rule = optimal_selection_rule(p, IID(q, 3))
    tuples = np.array([[0, 2, 4]])
    t = rule.positions(tuples, np.array([uniforms]))[0]
    for token, position in zip(tuples[0], t):
        group = rule.token_group[token]
        pieces = slice(rule.group_first[group], rule.group_last[group])
        assert np.any((rule.piece_start[pieces] <= position) & (position <= rule.piece_end[pieces]))


def _hull_uniform(rule: CurtainRule) -> CurtainRule:
    """WRONG twin: each group's positions uniform over its whole hull (the holes ignored)."""
    twin = copy.copy(rule)
    twin.piece_start = np.minimum.reduceat(rule.piece_start, rule.group_first)
    twin.piece_end = np.maximum.reduceat(rule.piece_end, rule.group_first)
    twin.group_first = np.arange(len(twin.piece_start))
    twin.group_last = twin.group_first + 1
    twin.__dict__.pop("piece_cumulative", None)  # computed again from the new pieces
    return twin


@pytest.mark.statistical
def test_sampled_output_is_the_target_and_a_broken_twin_is_caught():
    """N = 30,000 runs of select -> accept/residual: the output frequencies match p (chi-square),
    while the same step behind a hull-uniform layout (off by 0.2 in one token) is rejected."""
    from scipy import stats

    p = np.array([0.0773, 0.0161, 0.7235, 0.1529, 0.0303])
    q = np.array([0.0, 0.2932, 0.3394, 0.1742, 0.1932])
    p, q, k = p / p.sum(), q / q.sum(), 4
    law = IID(q, k)
    rule = optimal_selection_rule(p, law)

    support = p > 0
    good, bad = sampled_output(rule, rule, law, 30_000, 1), sampled_output(_hull_uniform(rule), rule, law, 30_000, 1)
    assert good[~support].sum() == 0
    assert stats.chisquare(good[support], p[support] * good.sum()).pvalue > 1e-3
    assert stats.chisquare(bad[support], p[support] * bad.sum()).pvalue < 1e-6


def test_failed_fit_falls_back_to_an_exact_law(monkeypatch):
    """A layout gone wrong (here: NaN densities) must not give a wrong output law: the rule falls
    back to one shared position set (a uniformly chosen draft, law q) and says so."""
    from multidraft.theory.verifier import _curtain_rule
    from multidraft.theory.verifier._curtain import curtain_fit

    def broken_fit(p, q, k):
        fit = curtain_fit(p, q, k)
        return fit._replace(density=np.full_like(fit.density, np.nan), acceptance=np.nan)

    monkeypatch.setattr(_curtain_rule, "curtain_fit", broken_fit)
    p, law = np.array([0.5, 0.3, 0.2]), IID([0.2, 0.3, 0.5], 2)
    rule = optimal_selection_rule(p, law)
    assert rule.note is not None and "fell back" in rule.note
    np.testing.assert_allclose(rule.selection_law, law.draft, rtol=0, atol=1e-15)
    np.testing.assert_allclose(enumerated_law(rule, law), law.draft, rtol=0, atol=1e-12)
    assert rule.acceptance == pytest.approx(np.minimum(p, law.draft).sum(), abs=1e-15)


@pytest.mark.parametrize("law_name", ["iid", "greedy", "deterministic"])
def test_optimal_scheme_at_full_vocabulary(law_name):
    """``optimal`` samples at the optimum for iid, greedy and deterministic drafts at n = 49152
    (no LP): its sampler's acceptance rate matches P*."""
    from multidraft.schemes import get_scheme
    from multidraft.theory import Deterministic, Greedy

    n = 49152
    p = zipf(n, exponent=1.1, rng=np.random.default_rng(0))
    q = softmax(np.log(p), temperature=1.6)
    law = {"iid": IID(q, 4), "greedy": Greedy(q, 4), "deterministic": Deterministic([0, 5, 9, 40], n)}[law_name]
    scheme = get_scheme("optimal")
    optimum = optimal_acceptance(p, law).value
    assert scheme.acceptance(p, law) == pytest.approx(optimum, abs=1e-12)
    rng = np.random.default_rng(2)
    tokens, accepted = scheme.sample(p, law, law.sample(rng, 4000), rng)
    assert abs(accepted.mean() - optimum) < 4.5 * np.sqrt(optimum * (1 - optimum) / 4000) + 1e-9


def test_draft_mass_below_the_resolution_of_positions():
    """Float32 model outputs have draft probabilities of 1e-30 and less: their position sets
    have length zero, and their density is the point value K (1 - t0)^{K-1}, not 0/0 (which
    made the fit fall back to a single draft on about half of such positions)."""
    from multidraft.theory import softmax

    rng = np.random.default_rng(0)
    for _ in range(3):
        logits = rng.normal(size=49152) * 8.0
        p = softmax(logits).astype(np.float32).astype(np.float64)
        q = softmax(logits / 1.5 + rng.normal(size=49152) * 0.5).astype(np.float32).astype(np.float64)
        law = IID(q / q.sum(), 4)
        rule = optimal_selection_rule(p / p.sum(), law)
        assert rule.note is None and np.isfinite(rule.selection_law).all()
        assert rule.acceptance == pytest.approx(rule.optimum, abs=1e-10)
    # small n, exactly: tokens of draft mass 1e-20 next to ordinary ones
    p = np.array([0.3, 0.3, 0.2, 0.1, 0.1])
    q = np.array([0.5, 0.5 - 3e-20, 1e-20, 1e-20, 1e-20])
    law = IID(q, 3)
    rule = optimal_selection_rule(p, law)
    assert rule.note is None
    np.testing.assert_allclose(enumerated_law(rule, law), rule.selection_law, rtol=0, atol=1e-12)
    np.testing.assert_allclose(enumerated_output(rule, law), p, rtol=0, atol=1e-12)


@pytest.mark.parametrize("k", [3, 4, 8])
@pytest.mark.parametrize("temperature", [0.6, 0.8, 1.2, 1.6, 3.0])
def test_stack_pass_patterns_match_group_by_group(k, temperature):
    """The stack pass's chains and rows (roots solved side by side) against the pass group by
    group: the same pieces to rounding and the same realised densities, on both parts (U's
    chain at P* = 1, T*'s rows and chains over a deeper stack); and a twin whose pieces are
    shifted by the size of the agreement asked for is caught."""
    from multidraft.theory.verifier import _curtain
    from multidraft.theory.verifier import _curtain_kernels as kernels

    n = 3000
    p = zipf(n, exponent=1.1, rng=np.random.default_rng(k))
    q = softmax(np.log(p) + np.random.default_rng(7).normal(0.0, 0.3, n), temperature=temperature)
    with _curtain._workspace(n) as work:
        order = _curtain._order(p, q, work)
        _, _, boundary, u_groups, t_groups = kernels.fit_groups(
            p, q, order, k, work.ps[:n], work.qs[:n], work.ds[:n], work.group, work.scratch, work.mass, work.target
        )
        for first, m, lo, hi in ((0, u_groups, 0.0, boundary), (u_groups, t_groups, boundary, 1.0)):
            if m == 0:
                continue
            layouts = []
            for patterns in (True, False):
                start, end, density, bounds = np.empty(2 * m), np.empty(2 * m), np.empty(m), np.empty(m, dtype=np.int64)
                count = kernels.stack_pass(
                    work.mass[first : first + m], work.target[first : first + m], k, lo, hi, start, end, density, bounds, 0, 0,
                    np.empty(m, dtype=np.int64), np.empty(m), np.empty(m), np.empty(m), np.empty(m), patterns,
                )  # fmt: skip
                layouts.append((start[:count], end[:count], density, bounds))
            (start, end, density, bounds), (start_1, end_1, density_1, bounds_1) = layouts
            np.testing.assert_array_equal(bounds, bounds_1)
            assert np.abs(start - start_1).max() <= 1e-15 and np.abs(end - end_1).max() <= 1e-15
            # Densities of sets of length ~1e-13 carry the positions' rounding relative to that length.
            np.testing.assert_allclose(density, density_1, rtol=1e-6)
            assert np.abs(start + 4e-15 - start_1).max() > 1e-15  # the twin


def test_a_fit_on_the_first_tokens_reads_views_and_keeps_one_large_buffer():
    """``fit_curtain_rule`` on a support of the first s tokens (selective's target with its
    appended missing mass) reads p and q there as views, with the same rule, bit for bit, as
    from gathered copies; its kept arrays share one buffer, rounded up to 4 MiB at s = 49152
    (numpy's huge pages) and not at s = 3000. Twins: a support that is not a prefix is gathered
    (no shared memory), and the small fit's buffer is its own size."""
    from multidraft.theory.verifier import fit_curtain_rule, fit_support_rule
    from multidraft.theory.verifier._curtain import _HUGE_WORDS

    for n, rounded in ((49152, True), (3000, False)):
        p = zipf(n + 1, exponent=1.1, rng=np.random.default_rng(n))
        q = np.append(softmax(np.log(p[:n]) + np.random.default_rng(1).normal(0.0, 0.5, n)), 0.0)
        support = np.arange(n)
        rule = fit_curtain_rule(p, q, 4, support)
        gathered = fit_support_rule(p[support], q[support], support, n + 1, 4, target=p, draft=q)
        assert np.shares_memory(rule.support_target, p) and np.shares_memory(rule.support_draft, q)
        for name in ("group", "group_density", "piece_start", "piece_end", "support_law"):
            np.testing.assert_array_equal(getattr(rule, name), getattr(gathered, name))
        assert rule.acceptance == gathered.acceptance and rule.optimum == gathered.optimum
        buffer = rule.piece_start.base
        assert buffer is rule.group_density.base and (buffer.size >= _HUGE_WORDS) == rounded
        other = fit_curtain_rule(p, q, 4, support[1:])  # the twin: not a prefix
        assert not np.shares_memory(other.support_target, p)


def test_residual_weights_in_one_pass_are_the_numpy_expression():
    """The residual's weights on the support, computed in one compiled pass (``excess``), are
    ``np.maximum(p - q · density[group], 0)`` bit for bit at n = 49152 and K = 4 (P* < 1, so
    the weights have mass); the twin, the same expression with r = q, is told apart."""
    n = 49152
    p = zipf(n, exponent=1.1, rng=np.random.default_rng(2))
    q = softmax(np.log(p) / 0.7 + np.random.default_rng(3).normal(0.0, 0.5, n))
    rule = optimal_selection_rule(p, IID(q, 4))
    weights, inside, _ = rule._residual_parts
    expected = np.maximum(rule.support_target - rule.support_draft * rule.group_density[rule.group], 0.0)
    np.testing.assert_array_equal(weights, expected)
    assert inside == float(expected.sum()) and inside > 1e-3
    assert not np.array_equal(weights, np.maximum(rule.support_target - rule.support_draft, 0.0))  # the twin


def test_support_law_in_one_pass_is_the_numpy_expression():
    """r on the support, ``support_law`` (one compiled pass), is ``q · density[group]`` bit for
    bit at n = 49152, K = 4; the twin, r = q, is told apart."""
    n = 49152
    p = zipf(n, exponent=1.1, rng=np.random.default_rng(4))
    q = softmax(np.log(p) / 0.7 + np.random.default_rng(5).normal(0.0, 0.5, n))
    rule = optimal_selection_rule(p, IID(q, 4))
    np.testing.assert_array_equal(rule.support_law, rule.support_draft * rule.group_density[rule.group])
    assert not np.array_equal(rule.support_law, rule.support_draft)  # the twin


def test_u_at_p_star_one_is_not_always_one_chain():
    """docs/optimal_verifier.md §8: at P* = 1 (T* empty) U's groups need not form one chain.
    p = (0.19, 0.79, 0.02), q = (0.1, 0.8, 0.1), K = 2: the second group's set lies behind the
    first's (one piece each; the third pops both), and the rule is still exact (its law
    enumerated is p). The twin, a case that is one chain (p = (0.15, 0.80, 0.05): each group pops
    the previous hull), has two pieces for every group after the first."""
    p, q = np.array([0.19, 0.79, 0.02]), np.array([0.1, 0.8, 0.1])
    law = IID(q, 2)
    rule = optimal_selection_rule(p, law)
    assert rule.optimum == 1.0 and rule.certificate.size == 0
    assert (rule.group_last - rule.group_first).tolist() == [1, 1, 2]
    np.testing.assert_allclose(enumerated_law(rule, law), p, rtol=0, atol=1e-12)
    chain = optimal_selection_rule(np.array([0.15, 0.80, 0.05]), law)
    assert (chain.group_last - chain.group_first).tolist() == [1, 2, 2]  # the twin


@pytest.mark.parametrize("k", [3, 4, 8])
def test_block_starts_from_a_guess_on_either_side(k):
    """The chain's Newton solves start from a guess inside the bracket (``two_sided``): from a
    guess above or below the root, the start comes out at the root of W(α, α + c) = c·d to
    1e-13, as :func:`solo` finds it from its own start; the twin, the one-sided solve from the
    same guesses, leaves the lanes guessed below the root where they are and is caught."""
    from multidraft.theory.verifier import _curtain_kernels as kernels
    from multidraft.theory.verifier._curtain import interval_weight

    rng = np.random.default_rng(k)
    n = 200
    mass = 10.0 ** rng.uniform(-7, -0.5, n)
    chosen = rng.uniform(0.0, 1.0 - mass)
    level = interval_weight(chosen, chosen + mass, k) / mass  # the root: α* ≈ chosen
    root = np.array([kernels.solo(c, c * d, k, 0.0, 1.0, np.nan) for c, d in zip(mass, level)])
    np.testing.assert_allclose(root, chosen, rtol=0, atol=1e-8)
    x_root = 1.0 - root
    guess = np.clip(x_root + rng.choice([-1.0, 1.0], n) * rng.uniform(0.1, 0.5, n) * mass, mass, 1.0)
    starts = {}
    for two_sided in (True, False):
        block = np.zeros((11, n))
        block[10] = 1.0  # x = 1 - lo: a bracket from above
        x = guess.copy()
        kernels.block_starts(x, mass, level, k, 0.0, 1.0, n, block, two_sided)
        starts[two_sided] = x
    np.testing.assert_allclose(starts[True], root, rtol=0, atol=1e-13)
    below = guess < x_root
    assert below.sum() > 20 and np.abs(starts[False] - root)[below].min() > 1e-13  # the twin


def _masked_power_sums(x: float, y: float, k: int, steps: int) -> tuple[float, float]:
    """WRONG twin of the unrolled power sums: the masked loop with its mask off by one
    (``j <= k``: one step too many)."""
    last, current, power = 0.0, 1.0, 1.0
    for j in range(1, steps):
        if j <= k:
            power *= y
            last, current = current, x * current + power
    return last, current


@pytest.mark.parametrize("k", range(1, 11))
def test_block_power_sums_unrolled_and_stepped_are_the_scalar_sums(k):
    """``block_power_sums`` (unrolled in registers for K <= UNROLLED_K, stepped through memory
    above) gives :func:`power_sums` of every lane bit for bit, K = 1..10 on 300 lanes of x >= y
    (both paths); the twin, the masked loop stepping once too often, is caught."""
    from multidraft.theory.verifier import _curtain_kernels as kernels

    rng = np.random.default_rng(k)
    n = 300
    x = rng.uniform(0.0, 1.0, n)
    y = x - x * 10.0 ** rng.uniform(-14, 0, n)
    previous, current, scratch = np.empty(n), np.empty(n), np.empty(n)
    kernels.block_power_sums(x, y, k, n, previous, current, scratch)
    expected = np.array([kernels.power_sums(a, b, k) for a, b in zip(x, y)])
    np.testing.assert_array_equal(previous, expected[:, 0])
    np.testing.assert_array_equal(current, expected[:, 1])
    twin = np.array([_masked_power_sums(a, b, k, kernels.UNROLLED_K + 3) for a, b in zip(x, y)])
    assert not np.array_equal(twin[:, 1], current)
