"""The exact optimum for independent non-identical drafts (method "threshold", issue 13).

Checked four ways: its key lemma on many instances (with a wrong twin it must catch), the
claim itself against all subsets (float and exact, ties, zeros, disjoint supports, p = q_i),
against the transport LP and a networkx max-flow (two routes that share nothing with it), and
at n = 49152 against the sorted scan of the iid law it contains.
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction
from unittest import mock

import networkx as nx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import as_float, exact_distributions

import multidraft.theory.optimum._independent as independent
from multidraft.theory import IID, Independent, WithoutReplacement, cut_value, dirichlet, optimal_acceptance, softmax, zipf
from multidraft.theory.optimum import product_cut


@st.composite
def independent_instances(draw, max_n: int = 8, max_k: int = 3, min_n: int = 1):
    """(exact target, K exact drafts) with zeros and ties from small integer weights, and four
    shapes: free, the target equal to one draft, all drafts equal, drafts on disjoint supports."""
    n = draw(st.integers(min_n, max_n))
    k = draw(st.integers(1, max_k))
    target = draw(exact_distributions(n))
    drafts = [draw(exact_distributions(n)) for _ in range(k)]
    shape = draw(st.sampled_from(["free", "target-is-draft", "equal-drafts", "disjoint"]))
    if shape == "target-is-draft":
        drafts[draw(st.integers(0, k - 1))] = target
    elif shape == "equal-drafts":
        drafts = [drafts[0]] * k
    elif shape == "disjoint" and n >= k:
        owner = [token % k for token in range(n)]
        weights = draw(st.lists(st.integers(0, 6), min_size=n, max_size=n))
        drafts = []
        for i in range(k):
            mine = [w if owner[t] == i else 0 for t, w in enumerate(weights)]
            if sum(mine) == 0:
                mine[i] = 1
            drafts.append(tuple(Fraction(w, sum(mine)) for w in mine))
    return target, drafts


def all_minimisers(target, drafts):
    """Every T minimising F(T) = p(T) - Π_i q_i(T), by enumeration in exact arithmetic."""
    n = len(target)
    values = {}
    for size in range(n + 1):
        for subset in itertools.combinations(range(n), size):
            values[subset] = sum((target[t] for t in subset), Fraction(0)) - math.prod(
                sum((q[t] for t in subset), Fraction(0)) for q in drafts
            )
    best = min(values.values())
    return [set(t) for t, v in values.items() if v == best]


def scores(target, drafts, tokens, weights=None):
    """s_y(c) = Σ_i q_i(y) w_i - p(y) with w_i = Π_{j≠i} c_j, c the draft masses of ``tokens``."""
    c = [sum((q[t] for t in tokens), Fraction(0)) for q in drafts]
    if weights is None:
        weights = [math.prod(c[:i] + c[i + 1 :]) for i in range(len(c))]
    return [sum((w * q[y] for w, q in zip(weights, drafts)), Fraction(0)) - target[y] for y in range(len(target))]


def threshold_violations(target, drafts, tokens, weights=None):
    """Tokens breaking Lemma 1 ({s > 0} ⊆ T ⊆ {s >= 0}) for the set ``tokens``."""
    s = scores(target, drafts, tokens, weights)
    return [y for y in range(len(target)) if (y in tokens and s[y] < 0) or (y not in tokens and s[y] > 0)]


# -- the key lemma --------------------------------------------------------------------------------


@settings(max_examples=120)
@given(independent_instances())
def test_every_minimiser_is_a_threshold_set(instance):
    """Lemma 1 on every minimiser, and for K = 2 the band of issue 13: s_y >= q_1 q_2 inside,
    s_y <= -q_1 q_2 outside."""
    target, drafts = instance
    for tokens in all_minimisers(target, drafts):
        assert threshold_violations(target, drafts, tokens) == []
        if len(drafts) == 2:
            s = scores(target, drafts, tokens)
            for y, score in enumerate(s):
                band = drafts[0][y] * drafts[1][y]
                assert score >= band if y in tokens else score <= -band


def test_the_lemma_on_many_seeded_instances():
    """Lemma 1 on 800 seeded exact instances, n <= 7, K <= 3, zeros and ties included."""
    rng = np.random.default_rng(13)

    def distribution(n):
        weights = rng.integers(0, 5, size=n) * (rng.random(n) < 0.8)
        weights[rng.integers(n)] += 1
        return tuple(Fraction(int(w), int(weights.sum())) for w in weights)

    checked = 0
    for _ in range(800):
        n, k = int(rng.integers(1, 8)), int(rng.integers(1, 4))
        target, drafts = distribution(n), [distribution(n) for _ in range(k)]
        for tokens in all_minimisers(target, drafts):
            assert threshold_violations(target, drafts, tokens) == []
            checked += 1
    assert checked >= 800


def test_the_lemma_check_catches_wrong_weights():
    """Teeth: the same check with unit weights (the threshold set of q_1 + q_2 - p, which is
    right for one draft) must find violations on many instances."""
    rng = np.random.default_rng(3)
    caught = 0
    for _ in range(300):
        weights = rng.integers(1, 10, size=(3, 6))
        target, *drafts = ([Fraction(int(w), int(row.sum())) for w in row] for row in weights)
        tokens = all_minimisers(target, drafts)[0]
        assert threshold_violations(target, drafts, tokens) == []
        caught += bool(threshold_violations(target, drafts, tokens, weights=[1, 1]))
    assert caught > 100


def test_a_single_order_is_not_enough():
    """Why the search is needed: here no prefix of the q_1/p or q_2/p order is optimal."""
    target = np.array([2, 9, 2, 2]) / 15
    drafts = [np.array([1, 5, 9, 5]) / 20, np.array([6, 5, 1, 6]) / 18]
    law = Independent(drafts)
    best = optimal_acceptance(target, law, method="subsets").value
    for q in drafts:
        order = np.argsort(-q / target)
        prefixes = [cut_value(target, law, order[:j]) for j in range(len(target) + 1)]
        assert min(prefixes) > best + 0.1
    assert optimal_acceptance(target, law).value == pytest.approx(best, abs=1e-15)


# -- the claim: the search finds the optimum ---------------------------------------------------------


@pytest.fixture(params=[0, 1, independent.LEAF_SIZE], ids=["leaf0", "leaf1", "leaf-default"])
def leaf_size(request):
    """Run the search with leaves of 0 and 1 classes too, so that the boxes really branch."""
    with mock.patch.object(independent, "LEAF_SIZE", request.param):
        yield request.param


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(instance=independent_instances(max_n=10))
def test_threshold_equals_subsets(leaf_size, instance):
    target, drafts = instance
    p = as_float(target)
    law = Independent([as_float(q) for q in drafts])
    found = optimal_acceptance(p, law, method="threshold")
    assert found.method == "threshold"
    np.testing.assert_allclose(found.value, optimal_acceptance(p, law, method="subsets").value, atol=1e-13)
    np.testing.assert_allclose(cut_value(p, law, found.certificate), found.value, atol=0)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(instance=independent_instances(max_n=7))
def test_exact_threshold_equals_exact_subsets(leaf_size, instance):
    target, drafts = instance
    law = Independent(drafts)
    found = optimal_acceptance(target, law, method="threshold", exact=True)
    assert isinstance(found.value, Fraction) and found.exact
    assert found.value == optimal_acceptance(target, law, method="subsets", exact=True).value
    assert cut_value(target, law, found.certificate, exact=True) == found.value


@settings(max_examples=25)
@given(instance=independent_instances(max_n=5, max_k=3, min_n=2))
def test_threshold_equals_the_transport_lp(instance):
    pytest.importorskip("cvxpy")
    from multidraft.lp import transport_lp

    target, drafts = instance
    p = as_float(target)
    law = Independent([as_float(q) for q in drafts])
    np.testing.assert_allclose(optimal_acceptance(p, law).value, transport_lp(p, law).acceptance, atol=1e-8)


def max_flow(target: np.ndarray, drafts: np.ndarray) -> float:
    """P* as the max-flow of source → tuple (capacity Π_i q_i(x_i)) → its tokens → sink (p)."""
    graph = nx.DiGraph()
    supports = [np.flatnonzero(q > 0) for q in drafts]
    for tup in itertools.product(*supports):
        graph.add_edge("source", tup, capacity=math.prod(q[t] for q, t in zip(drafts, tup)))
        for token in set(tup):
            graph.add_edge(tup, ("y", token))
    for token, mass in enumerate(target):
        graph.add_edge(("y", token), "sink", capacity=mass)
    return nx.maximum_flow_value(graph, "source", "sink", flow_func=nx.algorithms.flow.boykov_kolmogorov)


@pytest.mark.parametrize("n, k, seed", [(40, 2, 0), (30, 2, 2), (12, 3, 3), (12, 3, 4)])
def test_threshold_equals_max_flow_beyond_the_subsets_limit(n, k, seed):
    """With leaves of 0, 1 and the default number of classes (so that boxes really branch)."""
    rng = np.random.default_rng(seed)
    base = rng.normal(size=n) * 2
    target, *drafts = (softmax(base * rng.uniform(0.4, 1.6) + rng.normal(size=n) * 0.5) for _ in range(k + 1))
    flow = max_flow(target, np.array(drafts))
    for leaf in (0, 1, independent.LEAF_SIZE):
        with mock.patch.object(independent, "LEAF_SIZE", leaf):
            cut = product_cut(target, np.array(drafts))
            assert 1 + cut.value == pytest.approx(flow, abs=1e-9)
            assert cut.boxes > 1 or leaf == independent.LEAF_SIZE


# -- large vocabularies --------------------------------------------------------------------------


def zipf_pair(n: int, seed: int, temperatures: tuple[float, ...]):
    rng = np.random.default_rng(seed)
    target = zipf(n, 1.1, rng)
    return target, [softmax(np.log(target) / t) for t in temperatures]


@pytest.mark.parametrize("k", [2, 3, 4])
def test_equal_drafts_match_the_iid_sorted_scan_at_full_vocabulary(k):
    """Independent([q] * K) is the iid law: the threshold search must equal the sorted scan."""
    target, (draft,) = zipf_pair(49152, k, (1.6,))
    sorted_scan = optimal_acceptance(target, IID(draft, k), method="sorted").value
    threshold = optimal_acceptance(target, Independent([draft] * k))
    assert threshold.method == "threshold"
    assert threshold.value == pytest.approx(sorted_scan, abs=1e-12)
    assert optimal_acceptance(target, IID(draft, k), method="threshold").value == pytest.approx(sorted_scan, abs=1e-12)


@given(instance=independent_instances(max_n=7))
def test_threshold_on_iid_laws_equals_the_exact_sorted_scan(instance):
    target, drafts = instance
    law = IID(drafts[0], len(drafts))
    assert optimal_acceptance(target, law, method="threshold", exact=True).value == optimal_acceptance(target, law, method="sorted", exact=True).value


@pytest.mark.parametrize("temperatures", [(0.5, 1.2), (1.2, 2.0), (0.8, 1.2, 1.6)])
def test_full_vocabulary_certificate_is_locally_optimal_and_beats_every_angle(temperatures):
    """At n = 49152: the certificate reproduces the value, no single token added or removed
    improves it, and no prefix of the orders by a weighted draft mass over p (a grid of
    weights) does better."""
    target, drafts = zipf_pair(49152, 7, temperatures)
    law = Independent(drafts)
    found = optimal_acceptance(target, law)
    assert cut_value(target, law, found.certificate) == pytest.approx(found.value, abs=1e-15)
    q = np.array(drafts)
    inside = np.zeros(len(target), dtype=bool)
    inside[found.certificate] = True
    c = q[:, inside].sum(axis=1)
    flipped = np.where(inside[None, :], c[:, None] - q, c[:, None] + q)  # masses after a flip
    change = np.where(inside, -target, target) - (flipped.prod(axis=0) - c.prod())
    assert change.min() >= -1e-13
    grid = np.linspace(0.0, 1.0, 41 if len(drafts) == 2 else 9)
    for weights in itertools.product(grid, repeat=len(drafts) - 1):
        mix = np.tensordot(np.append(weights, 1.0), q, axes=1)
        order = np.argsort(-mix / target)
        p_prefix = np.concatenate([[0.0], np.cumsum(target[order])])
        contained = np.prod([np.concatenate([[0.0], np.cumsum(row[order])]) for row in q], axis=0)
        assert (p_prefix + 1 - contained).min() >= found.value - 1e-13


def test_more_drafts_never_lower_the_optimum():
    """Adding an independent draft can only raise P* (one more token to accept)."""
    target, drafts = zipf_pair(5000, 11, (0.6, 1.0, 1.4, 1.8))
    values = [optimal_acceptance(target, Independent(drafts[:k])).value for k in range(1, 5)]
    assert np.diff(values).min() >= -1e-12
    assert values[0] == pytest.approx(np.minimum(target, drafts[0]).sum(), abs=1e-12)


# -- failure paths -------------------------------------------------------------------------------


def test_threshold_refuses_laws_of_dependent_drafts():
    with pytest.raises(ValueError, match="independent drafts"):
        optimal_acceptance([0.5, 0.5], WithoutReplacement([0.5, 0.5], 2), method="threshold")


def test_exact_threshold_needs_exact_drafts():
    with pytest.raises(ValueError, match="exact mode"):
        optimal_acceptance(["1/2", "1/2"], Independent([[0.5, 0.5], [0.5, 0.5]]), method="threshold", exact=True)


def test_search_limit_raises_instead_of_answering():
    target, drafts = zipf_pair(2000, 5, (0.5, 1.5))
    with mock.patch.object(independent, "NODE_LIMIT", 1), pytest.raises(RuntimeError, match="exceeded 1 boxes"):
        optimal_acceptance(target, Independent(drafts))


def test_a_box_that_cannot_be_halved_is_settled_or_refused():
    """When floats cannot halve a box, up to COLLAPSED_LEAF_SIZE undecided classes are settled
    by enumeration (same optimum); more are refused with an error, never a guess."""
    rng = np.random.default_rng(8)
    target, q1, q2 = dirichlet(14, 1.0, rng), dirichlet(14, 1.0, rng), dirichlet(14, 1.0, rng)
    law = Independent([q1, q2])
    with mock.patch.object(independent, "LEAF_SIZE", 0), mock.patch.object(independent._Search, "split", lambda self, box: None):
        settled = optimal_acceptance(target, law)
    assert settled.value == pytest.approx(optimal_acceptance(target, law, method="subsets").value, abs=1e-13)
    target, q1, q2 = dirichlet(300, 1.0, rng), dirichlet(300, 1.0, rng), dirichlet(300, 1.0, rng)
    with mock.patch.object(independent._Search, "split", lambda self, box: None), pytest.raises(RuntimeError, match="cannot be halved"):
        optimal_acceptance(target, Independent([q1, q2]))


def test_product_cut_reports_its_search():
    target, drafts = zipf_pair(3000, 2, (0.7, 1.9))
    cut = product_cut(target, np.array(drafts))
    assert cut.boxes >= 1 and cut.leaves <= cut.boxes
    assert 1 + cut.value == pytest.approx(optimal_acceptance(target, Independent(drafts)).value, abs=1e-15)
