"""The J-curtain's choice law in closed form (theory/verifier/_stream_choice.py; issues 30 and 34)
against the enumeration of the rebuilt stream's outcomes (``stream_outcomes``) with each
outcome's winner law (``point_win_probabilities``), tuple by tuple; the law it implies against
the layout's own law; and two broken twins the comparison rejects (a repeat probability A_U
instead of A_U / (1 - A_T), one Gauss node too few).
"""

from __future__ import annotations

import numpy as np
import pytest

from wor_instances import instances as adversarial

from multidraft.theory import WithoutReplacement, softmax
from multidraft.theory.optimum._wor_race import OptimalCut, optimal_cut
from multidraft.theory.verifier import _stream_choice
from multidraft.theory.verifier._stream_choice import stream_choice_probabilities
from multidraft.theory.verifier._wor_enumeration import enumerated_choice
from multidraft.theory.verifier._wor_rule import _rule_for_cut


def _curtain_rules(seed: int, count: int):
    """``(rule, tuples, probs)`` for J-curtain rules on small instances (n <= 8, K <= 4): the
    rule of the scan's cut (T* mostly non-empty) and the rule of T* = ∅ (J ≡ K), with every
    ordered tuple that drafts a U token."""
    for kind, p, q, k in adversarial(seed=seed, count=count, max_n=8):
        cut = optimal_cut(p, q, k)
        for chosen in {cut.size: cut, 0: OptimalCut(cut.order, 0, cut.value, 0.0, cut.candidates)}.values():
            rule = _rule_for_cut(p, q, k, chosen)
            if rule.first_draft or rule.u_rule != "j-curtain":
                continue
            tuples, probs = WithoutReplacement(q, k).enumerate()
            rows = rule._in_u(tuples).any(axis=-1)
            if rows.any():
                yield rule, tuples[rows], probs[rows]


def test_closed_form_equals_the_enumeration_of_the_stream():
    """On every ordered tuple of small instances, T* empty and not: the closed form equals the
    enumeration to 1e-13, rows sum to 1 with nothing on T* drafts, and Σ_x D(x) P(choice | x)
    over the tuples is the layout's law on U (the J-curtain's r, a third computation)."""
    cases = {True: 0, False: 0}
    for rule, tuples, probs in _curtain_rules(seed=21, count=160):
        choice = rule.choice_probabilities(tuples)
        expected = enumerated_choice(rule, tuples)
        np.testing.assert_allclose(choice, expected, rtol=0, atol=1e-13)
        np.testing.assert_allclose(choice.sum(axis=1), 1.0, rtol=0, atol=1e-13)
        assert (choice[~rule._in_u(tuples)] == 0.0).all()
        law = np.zeros(rule.n)
        np.add.at(law, tuples.ravel(), (choice * probs[:, None]).ravel())
        u = rule.group >= 0
        np.testing.assert_allclose(law[u], rule.selection_law[u], rtol=0, atol=1e-12)
        cases[len(rule.certificate) == 0] += 1
    assert cases[True] >= 40 and cases[False] >= 40, cases


def test_closed_form_at_k_8_on_a_large_vocabulary():
    """n = 3000, K = 8, the empty cut (the iid curtain of the whole vocabulary, groups of up to
    8 pieces) and the scan's cut: the closed form equals the enumeration (8! orders of repeats
    at most) to 1e-13 on three drafted tuples each."""
    rng = np.random.default_rng(4)
    p = rng.dirichlet(np.full(3000, 0.3))
    q = softmax((np.log(p) + 0.5 * rng.standard_normal(3000)) / 1.2)
    k = 8
    cut = optimal_cut(p, q, k)
    for chosen in (cut, OptimalCut(cut.order, 0, cut.value, 0.0, cut.candidates)):
        rule = _rule_for_cut(p, q, k, chosen)
        assert rule.u_rule == "j-curtain"
        keys = np.log(q) + rng.gumbel(size=(3, len(q)))
        tuples = np.argsort(-keys, axis=1)[:, :k]
        np.testing.assert_allclose(rule.choice_probabilities(tuples), enumerated_choice(rule, tuples), rtol=0, atol=1e-13)


@pytest.fixture
def python_kernels(monkeypatch):
    """The kernels run as plain Python (never compiled, so a patched helper cannot reach numba's
    disk cache)."""
    monkeypatch.setattr(_stream_choice, "compile_in_place", lambda namespace, names: None)
    for name in ("_rows", "_derivative", "_repeat_factor"):
        kernel = getattr(_stream_choice, name)
        monkeypatch.setattr(_stream_choice, name, getattr(kernel, "py_func", kernel))
    return monkeypatch


def _largest_departure(seed: int, count: int) -> float:
    """Largest |closed form - enumeration| over the tuples of small instances."""
    worst = 0.0
    for rule, tuples, _ in _curtain_rules(seed=seed, count=count):
        groups, masses, in_u = rule.group[tuples], rule.draft[tuples], rule._in_u(tuples)
        got = stream_choice_probabilities(rule.layout, groups, masses, in_u)
        worst = max(worst, float(np.abs(got - enumerated_choice(rule, tuples)).max()))
    return worst


def test_twin_repeat_probability_without_the_t_star_conditioning_is_rejected(python_kernels):
    """The same kernels in Python reproduce the enumeration (the control); with the repeat
    probability A_U instead of A_U / (1 - A_T) (T*-repeats counted as stops) they do not."""
    assert _largest_departure(seed=22, count=30) <= 1e-13
    python_kernels.setattr(_stream_choice, "_repeat_factor", lambda mass, arrived_t: mass)
    assert _largest_departure(seed=22, count=30) > 1e-3


def test_twin_one_gauss_node_too_few_is_rejected(monkeypatch):
    """⌈K/2⌉ - 1 nodes (at least one) integrate the degree-(K - 1) integrand inexactly."""
    exact = _stream_choice._gauss_nodes
    monkeypatch.setattr(_stream_choice, "_gauss_nodes", lambda k: np.polynomial.legendre.leggauss(max((k + 1) // 2 - 1, 1)))
    assert _largest_departure(seed=23, count=40) > 1e-6
    monkeypatch.setattr(_stream_choice, "_gauss_nodes", exact)
    assert _largest_departure(seed=23, count=40) <= 1e-13


def test_gauss_nodes_are_remembered_per_k(monkeypatch):
    """The nodes and weights remembered per K are numpy's ``leggauss(⌈K/2⌉)``, bit for bit,
    whatever K came first, and read-only (a caller cannot spoil them for the next). WRONG twin: a
    memo that hands every K the first K's nodes (one node, from K = 1) is caught by the
    enumeration."""
    for k in (8, 2, 5, 1, 8, 3, 7):
        nodes, weights = _stream_choice._gauss_nodes(k)
        expected = np.polynomial.legendre.leggauss((k + 1) // 2)
        assert nodes.tolist() == expected[0].tolist() and weights.tolist() == expected[1].tolist()
        assert not nodes.flags.writeable and not weights.flags.writeable
    stale = _stream_choice._gauss_nodes(1)
    monkeypatch.setattr(_stream_choice, "_gauss_nodes", lambda k: stale)
    assert _largest_departure(seed=23, count=40) > 1e-6


@pytest.mark.parametrize(
    "groups, masses, in_u, message",
    [
        pytest.param([[0, 1]], [[0.5, 0.5]], [[True]], "share one shape", id="shape"),
        pytest.param([[-1, -1]], [[0.5, 0.5]], [[False, False]], "must draft a U token", id="no-u-draft"),
        pytest.param([[-1, 0]], [[0.5, 0.5]], [[True, True]], "no layout group", id="no-group"),
    ],
)
def test_bad_input(groups, masses, in_u, message):
    rule = next(_curtain_rules(seed=24, count=5))[0]
    with pytest.raises(ValueError, match=message):
        stream_choice_probabilities(rule.layout, np.array(groups), np.array(masses), np.array(in_u))
