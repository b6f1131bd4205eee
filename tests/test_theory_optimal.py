"""The optimal acceptance: sorted scan vs subsets vs exact fractions vs brute force."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from strategies import as_float, exact_distributions, instances

from multidraft.theory import (
    IID,
    Deterministic,
    Greedy,
    Independent,
    WithoutReplacement,
    cut_value,
    dirichlet,
    optimal_acceptance,
    optimal_acceptance_batch,
    single_draft_acceptance,
    softmax,
    unit_acceptance,
    zipf,
)


def brute_force(target, law, exact=False):
    """min over all 2^n sets of p(T) + 1 - P(set(X) ⊆ T), containment by enumerating tuples."""
    tuples, probs = law.enumerate(exact=exact)
    best = None
    for size in range(law.n + 1):
        for subset in itertools.combinations(range(law.n), size):
            inside = np.isin(tuples, subset).all(axis=1)
            contained = sum(probs[inside].tolist(), Fraction(0) if exact else 0.0)
            value = sum((target[t] for t in subset), Fraction(0) if exact else 0.0) + 1 - contained
            best = value if best is None or value < best else best
    return best


def laws_for(draft, k, draft2=None):
    """Every law that can be built from (draft, k), exact when the draft is."""
    laws = [IID(draft, k)]
    if k <= sum(1 for x in draft if x > 0):
        laws.append(WithoutReplacement(draft, k))
    q = as_float(draft)
    if k <= len(draft) and np.sort(q)[::-1][k - 1 :].sum() > 0:
        laws.append(Greedy(draft, k))
    if draft2 is not None:
        laws.append(Independent([draft] + [draft2] * (k - 1)))
    return laws


@given(instances(), st.data())
def test_sorted_equals_subsets_equals_brute_force(instance, data):
    n, k, target, draft = instance
    draft2 = data.draw(exact_distributions(n))
    p = as_float(target)
    for law in laws_for(as_float(draft), k, as_float(draft2)):
        subsets = optimal_acceptance(p, law, method="subsets")
        np.testing.assert_allclose(subsets.value, brute_force(p, law), atol=1e-12)
        if law.has_prefix_structure:
            np.testing.assert_allclose(optimal_acceptance(p, law, method="sorted").value, subsets.value, atol=1e-12)


@given(instances(max_n=5))
def test_exact_mode_is_exact_and_matches_float(instance):
    n, k, target, draft = instance
    for law in laws_for(draft, k):
        exact = optimal_acceptance(target, law, exact=True)
        assert isinstance(exact.value, Fraction)
        assert exact.value == brute_force(target, law, exact=True)
        assert exact.value == optimal_acceptance(target, law, method="subsets", exact=True).value
        np.testing.assert_allclose(float(exact.value), optimal_acceptance(as_float(target), law).value, atol=1e-12)


@given(instances())
def test_certificate_attains_the_value(instance):
    n, k, target, draft = instance
    for law in laws_for(draft, k):
        for method in ("sorted", "subsets"):
            result = optimal_acceptance(target, law, method=method, exact=True)
            assert cut_value(target, law, result.certificate, exact=True) == result.value


@given(instances())
def test_k1_is_single_draft_acceptance(instance):
    n, _, target, draft = instance
    value = optimal_acceptance(target, IID(draft, 1), exact=True).value
    assert value == single_draft_acceptance(target, draft, exact=True)
    assert value == sum(min(a, b) for a, b in zip(target, draft))


@given(instances(max_k=4))
def test_optimum_non_decreasing_in_k_and_wor_beats_iid(instance):
    n, _, target, draft = instance
    p, q = as_float(target), as_float(draft)
    support = int(np.count_nonzero(q))
    iid = [optimal_acceptance(p, IID(q, k)).value for k in range(1, 5)]
    assert all(b >= a - 1e-12 for a, b in zip(iid, iid[1:]))
    for k in range(1, min(4, support) + 1):
        wor = optimal_acceptance(p, WithoutReplacement(q, k)).value
        assert wor >= iid[k - 1] - 1e-12


@given(instances())
def test_theorem2_condition_iff_acceptance_one(instance):
    n, k, target, draft = instance
    for law in laws_for(draft, k):
        condition = all(
            sum((target[t] for t in subset), Fraction(0)) >= law.containment_exact(subset)
            for size in range(n + 1)
            for subset in itertools.combinations(range(n), size)
        )
        verdict = unit_acceptance(target, law, exact=True)
        assert verdict.holds == condition
        assert verdict.holds == (optimal_acceptance(target, law, exact=True).value == 1)
        if not verdict.holds:
            violating = verdict.violating_set.tolist()
            assert sum((target[t] for t in violating), Fraction(0)) < law.containment_exact(violating)


@given(st.integers(2, 6), st.data())
def test_deterministic_draft_set_gives_target_mass(n, data):
    target = data.draw(exact_distributions(n))
    tokens = data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=n, unique=True))
    law = Deterministic(tokens, n)
    expected = sum((target[t] for t in tokens), Fraction(0))
    assert optimal_acceptance(target, law, exact=True).value == expected
    assert optimal_acceptance(target, law, method="subsets", exact=True).value == expected


def test_greedy_closed_form():
    """Greedy optimum = p(G) + Σ_{y∉G} min(p(y), q̃(y)) (derived in the Greedy docstring)."""
    rng = np.random.default_rng(3)
    for _ in range(50):
        p, q = dirichlet(7, 0.7, rng), dirichlet(7, 0.7, rng)
        law = Greedy(q, 3)
        rest = law.rest_mask
        expected = p[law.fixed].sum() + np.minimum(p[rest], law.residual[rest]).sum()
        np.testing.assert_allclose(optimal_acceptance(p, law).value, expected, atol=1e-12)


# Hand-checked instances (worked out here), replayed for every method.
# 1. Khisti et al.'s example: q uniform on 3 tokens, p = (1/3, 1/6, 1/2), K = 2. For every T,
#    p(T) >= (|T|/3)^2: singletons need p >= 1/9 (min is 1/6), pairs need >= 4/9 (min is
#    1/3 + 1/6 = 1/2). So P* = 1 although TV = 1/6.
# 2. p = (1, 0), q = (1/2, 1/2), K = 2 iid: T = {0} gives 1 + 1 - 1/4 = 7/4; T = {1} gives
#    0 + 1 - 1/4 = 3/4; T = ∅ or Ω give 1. So P* = 3/4 = 1 - P(both drafts are token 1).
# 3. Same with K = 2 without replacement: both tokens are always drafted, P* = 1.
# 4. p = (1/2, 1/2), q = (1, 0), K = 3 iid: set(X) = {0} surely; T = {0} gives 1/2, so P* = 1/2.
# 5. p = (12/25, 6/25, 4/25, 3/25), q uniform, K = 2 iid: prefix by q/p is 3, 2, 1, 0;
#    T = {3}: 3/25 + 1 - 1/16 = 1.0575; {3,2}: 7/25 + 1 - 1/4 = 1.03; {3,2,1}: 13/25 + 1 - 9/16
#    = 0.9575; so P* = 383/400.
HAND_CHECKED = [
    (["1/3", "1/6", "1/2"], "iid", ["1/3", "1/3", "1/3"], 2, Fraction(1)),
    (["1", "0"], "iid", ["1/2", "1/2"], 2, Fraction(3, 4)),
    (["1", "0"], "wor", ["1/2", "1/2"], 2, Fraction(1)),
    (["1/2", "1/2"], "iid", ["1", "0"], 3, Fraction(1, 2)),
    (["12/25", "6/25", "4/25", "3/25"], "iid", ["1/4"] * 4, 2, Fraction(383, 400)),
]


@pytest.mark.parametrize("target, law_name, draft, k, expected", HAND_CHECKED)
@pytest.mark.parametrize("method", ["sorted", "subsets"])
def test_hand_checked_instances(target, law_name, draft, k, expected, method):
    law = {"iid": IID, "wor": WithoutReplacement}[law_name](draft, k)
    assert optimal_acceptance(target, law, method=method, exact=True).value == expected
    assert optimal_acceptance([float(Fraction(t)) for t in target], law, method=method).value == pytest.approx(
        float(expected), abs=1e-12
    )


def test_uniform_example_has_tv_one_sixth():
    p, q = ["1/3", "1/6", "1/2"], ["1/3", "1/3", "1/3"]
    assert 1 - single_draft_acceptance(p, q, exact=True) == Fraction(1, 6)
    assert unit_acceptance(p, IID(q, 2), exact=True).holds


@pytest.mark.parametrize("k", [3, 4, 5])
def test_wor_race_matches_exact_enumeration(k):
    """The exponential-race integral (K > 2 without replacement) against exact fractions."""
    rng = np.random.default_rng(k)
    for alpha in (0.05, 0.3, 2.0):
        for _ in range(3):
            # Exact probabilities with moderate denominators (down to 1e-9), their floats for the fast route.
            exact_q = [Fraction(x).limit_denominator(10**9) for x in dirichlet(k + 2, alpha, rng)]
            if sum(1 for x in exact_q if x > 0) < k:
                continue
            exact_law = WithoutReplacement(exact_q, k, normalize=True)
            q = exact_law.marginal(0).astype(float)
            uniform = [Fraction(1, k + 2)] * (k + 2)  # a uniform target: the scan order is decreasing q
            order, expected = exact_law.prefix_scan(uniform, exact=True)
            fast = WithoutReplacement.sorted_prefix_containment(q[order], k)
            np.testing.assert_allclose(fast, expected.astype(float), rtol=0, atol=1e-10)
            assert exact_law.containment_exact(order[:3].tolist()) == expected[3]


@pytest.mark.parametrize("law_name", ["iid", "wor"])
@pytest.mark.parametrize("k", [1, 2, 3, 5])
def test_batch_matches_one_at_a_time(law_name, k):
    rng = np.random.default_rng(11)
    targets = dirichlet(30, 0.5, rng, size=6)
    drafts = softmax(np.log(targets + 1e-12) / 1.7 + rng.normal(0, 0.5, size=targets.shape))
    batch = optimal_acceptance_batch(targets, drafts, k, law=law_name)
    law_class = {"iid": IID, "wor": WithoutReplacement}[law_name]
    single = [optimal_acceptance(p, law_class(q, k)).value for p, q in zip(targets, drafts)]
    np.testing.assert_allclose(batch, single, atol=1e-12)


def test_large_vocabulary_sorted_agrees_with_coarsened_bounds():
    """At n = 49152 the sorted scan must equal the best prefix cut and lie within [IID K-1, 1]."""
    rng = np.random.default_rng(0)
    p = zipf(49152, 1.1, rng)
    q = softmax(np.log(p) / 1.5)
    values = [optimal_acceptance(p, IID(q, k)).value for k in (1, 2, 4)]
    assert values[0] == pytest.approx(single_draft_acceptance(p, q), abs=1e-12)
    assert values[0] < values[1] < values[2] <= 1
    result = optimal_acceptance(p, IID(q, 4))
    assert cut_value(p, IID(q, 4), result.certificate) == pytest.approx(result.value, abs=1e-12)


BAD_CALLS = [
    pytest.param(lambda: optimal_acceptance([0.5, 0.5], IID([0.5, 0.5], 2), method="lp2"), "unknown method", id="unknown-method"),
    pytest.param(lambda: optimal_acceptance([0.5, 0.3, 0.2], IID([0.5, 0.5], 2)), "does not match", id="length-mismatch"),
    pytest.param(
        lambda: optimal_acceptance([0.5, 0.5], Independent([[0.5, 0.5], [0.5, 0.5]]), method="sorted"),
        "prefix structure",
        id="sorted-on-independent",
    ),
    pytest.param(lambda: optimal_acceptance([0.5, 0.5], IID([0.5, 0.5], 2), exact=True), "exact mode", id="exact-needs-fractions"),
    pytest.param(
        lambda: optimal_acceptance(np.full(30, 1 / 30), Independent([np.full(30, 1 / 30)] * 2), method="subsets"),
        "limit",
        id="subsets-too-large",
    ),
    pytest.param(lambda: optimal_acceptance_batch([[0.5, 0.5]], [[0.5, 0.5], [0.5, 0.5]], 2), "equal shapes", id="batch-shape"),
    pytest.param(lambda: optimal_acceptance_batch([[0.5, 0.5]], [[0.5, 0.5]], 2, law="greedy"), "supports", id="batch-law"),
    pytest.param(lambda: optimal_acceptance_batch([[0.5, 0.5]], [[1.0, 0.0]], 2, law="wor"), "support size", id="batch-wor-k"),
    pytest.param(lambda: single_draft_acceptance([1.0], [0.5, 0.5]), "lengths differ", id="single-length"),
]


@pytest.mark.parametrize("call, message", BAD_CALLS)
def test_bad_input_raises_clear_error(call, message):
    with pytest.raises(ValueError, match=message):
        call()


# Regressions from the review of the exact mode: float orderings and float supports must never
# decide an exact result.
E = Fraction(1, 10**30)
TINY = Fraction(1, 10**400)  # below the smallest float


def test_exact_sorted_orders_near_ties_exactly():
    target, draft = [Fraction(1, 2) - E, Fraction(1, 2) + E], [Fraction(1, 2) + E, Fraction(1, 2) - E]
    law = IID(draft, 1)
    assert optimal_acceptance(target, law, method="sorted", exact=True).value == 1 - 2 * E
    assert optimal_acceptance(target, law, method="subsets", exact=True).value == 1 - 2 * E


def test_exact_greedy_picks_the_exact_argmax_and_orders_exactly():
    draft = [Fraction(1, 3), Fraction(1, 3) + E, Fraction(1, 3) - E]
    law = Greedy(draft, 2)
    assert law.fixed.tolist() == [1]
    target = [Fraction(0), Fraction(1, 2), Fraction(1, 2)]
    expected = brute_force(target, law, exact=True)
    assert optimal_acceptance(target, law, method="sorted", exact=True).value == expected
    assert optimal_acceptance(target, law, method="subsets", exact=True).value == expected


def test_exact_support_keeps_entries_below_float_range():
    draft = [Fraction(1, 2) - TINY, Fraction(1, 2), TINY]
    target = [Fraction(1, 2), Fraction(1, 2), Fraction(0)]
    law = IID(draft, 2)
    assert sum(law.enumerate(exact=True)[1].tolist()) == 1
    for method in ("sorted", "subsets"):
        assert optimal_acceptance(target, law, method=method, exact=True).value == 1 - TINY**2
    assert not unit_acceptance(target, law, exact=True).holds


def test_exact_sorted_wor_beyond_the_subsets_limit():
    n = 24
    draft = [Fraction(i + 1, n * (n + 1) // 2) for i in range(n)]
    target = [Fraction(1, n)] * n
    law = WithoutReplacement(draft, 2)
    exact = optimal_acceptance(target, law, method="sorted", exact=True).value
    assert isinstance(exact, Fraction)
    assert float(exact) == pytest.approx(optimal_acceptance(as_float(target), WithoutReplacement(as_float(draft), 2)).value, abs=1e-12)
    assert cut_value(target, law, optimal_acceptance(target, law, exact=True).certificate, exact=True) == exact
