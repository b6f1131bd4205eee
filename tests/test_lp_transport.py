"""The optimal-transport LP: against the min-cut (subsets) and the sorted scan on every law,
its plan by certificate (marginals, objective), and its failure paths."""

from __future__ import annotations

import cvxpy as cp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import as_float, exact_distributions

from multidraft.lp import ProblemTooLargeError, SolverError, TransportSolution, transport_lp
from multidraft.lp.transport import law_tuples
from multidraft.theory.laws import membership
from multidraft.theory import IID, Deterministic, Greedy, Independent, WithoutReplacement, optimal_acceptance

LAW_NAMES = ("iid", "wor", "greedy", "independent", "deterministic")


@st.composite
def law_instances(draw, max_n: int = 6, max_k: int = 3, names: tuple[str, ...] = LAW_NAMES):
    """(float target, law) for a random law of every kind; n <= max_n, K <= max_k.

    Weights are small integers, so zeros, ties and P* = 1 instances occur.
    """
    name = draw(st.sampled_from(names))
    n = draw(st.integers(2, max_n))
    k = draw(st.integers(1 if name != "independent" else 2, min(max_k, n)))
    target = as_float(draw(exact_distributions(n)))
    draft = as_float(draw(exact_distributions(n, min_support=k)))
    if name == "iid":
        law = IID(draft, k)
    elif name == "wor":
        law = WithoutReplacement(draft, k)
    elif name == "greedy":
        law = Greedy(draft, k)
    elif name == "independent":
        others = [as_float(draw(exact_distributions(n))) for _ in range(k - 1)]
        law = Independent([draft, *others])
    else:
        law = Deterministic(draw(st.lists(st.integers(0, n - 1), min_size=k, max_size=k)), n)
    return target, law


def check_plan(solution: TransportSolution, target: np.ndarray, law) -> None:
    """Certificate of a returned plan: shapes, non-negativity, both marginals, objective."""
    m = len(solution.tuples)
    assert solution.plan.shape == (m, law.n)
    assert solution.tuples.shape == (m, law.k)
    assert solution.tuple_probs.shape == (m,)
    assert solution.plan.min() >= 0.0
    np.testing.assert_allclose(solution.plan.sum(axis=1), solution.tuple_probs, atol=1e-6)
    np.testing.assert_allclose(solution.plan.sum(axis=0), target, atol=1e-6)
    accepted = solution.plan[membership(solution.tuples, law.n)].sum()
    np.testing.assert_allclose(solution.acceptance, accepted, atol=1e-9)
    assert solution.status == "optimal"
    assert solution.variables == m * law.n and solution.constraints == m + law.n - 1


@settings(max_examples=50)
@given(law_instances())
def test_transport_equals_min_cut_and_sorted_scan(instance):
    target, law = instance
    solution = transport_lp(target, law)
    check_plan(solution, target, law)
    subsets = optimal_acceptance(target, law, method="subsets").value
    np.testing.assert_allclose(solution.acceptance, subsets, atol=1e-7)
    if law.has_prefix_structure:
        np.testing.assert_allclose(solution.acceptance, optimal_acceptance(target, law, method="sorted").value, atol=1e-7)


@settings(max_examples=20)
@given(law_instances(max_n=5, names=("iid", "wor")))
def test_merging_multisets_keeps_the_optimum_and_shrinks_the_lp(instance):
    target, law = instance
    merged = transport_lp(target, law)
    full = transport_lp(target, law, merge_symmetric=False)
    np.testing.assert_allclose(merged.acceptance, full.acceptance, atol=1e-7)
    assert full.merged is False
    if law.k > 1:
        assert merged.merged is True
        assert np.all(np.diff(merged.tuples, axis=1) >= 0)  # sorted multiset representatives
        assert merged.variables <= full.variables
    assert len(merged.tuples) == law.tuple_count(merged=True)
    assert len(full.tuples) == law.tuple_count(merged=False)


@pytest.mark.parametrize(
    "law",
    [
        IID([0.5, 0.3, 0.2, 0.0], 3),
        WithoutReplacement([0.5, 0.3, 0.2, 0.0], 2),
        Independent([[0.5, 0.5, 0.0], [0.2, 0.3, 0.5]]),
        Greedy([0.1, 0.6, 0.3], 2),
        Deterministic([2, 0], 3),
    ],
    ids=repr,
)
def test_tuple_count_matches_the_enumerated_tuples(law):
    for merge in (False, True):
        tuples, probs, _ = law_tuples(law, merge)
        assert law.tuple_count(merged=merge) == len(tuples)
        np.testing.assert_allclose(probs.sum(), 1.0)


def test_reference_uniform_draft_reaches_one():
    """Khisti et al., Theorem 2 example: q uniform on 3 tokens, p = (1/3, 1/6, 1/2), K = 2:
    P* = 1 although TV(p, q) = 1/6."""
    target = np.array([1 / 3, 1 / 6, 1 / 2])
    law = IID([1 / 3, 1 / 3, 1 / 3], 2)
    solution = transport_lp(target, law)
    check_plan(solution, target, law)
    np.testing.assert_allclose(solution.acceptance, 1.0, atol=1e-9)
    assert solution.solver == "HIGHS" and solution.seconds > 0


def test_reference_single_draft_is_one_minus_tv():
    target, draft = np.array([0.7, 0.2, 0.1]), np.array([0.2, 0.2, 0.6])
    solution = transport_lp(target, IID(draft, 1))
    np.testing.assert_allclose(solution.acceptance, np.minimum(target, draft).sum(), atol=1e-9)


def test_other_solver_gives_the_same_optimum():
    target, law = np.array([0.4, 0.4, 0.2]), IID([0.1, 0.3, 0.6], 2)
    np.testing.assert_allclose(
        transport_lp(target, law, solver="CLARABEL").acceptance, transport_lp(target, law).acceptance, atol=1e-6
    )


def test_too_large_is_refused_before_building():
    law = IID(np.full(200, 1 / 200), 3)
    with pytest.raises(ProblemTooLargeError, match=r"variables .* exceed .*method='sorted'"):
        transport_lp(np.full(200, 1 / 200), law)
    with pytest.raises(ProblemTooLargeError, match="about 6 variables .*max_variables=5"):
        transport_lp([0.5, 0.5], IID([0.5, 0.5], 2), max_variables=5)
    assert issubclass(ProblemTooLargeError, ValueError)


@pytest.mark.parametrize(
    ("target", "solver", "message"),
    [
        ([0.5, 0.5], "HIGHS", "length 2 does not match"),
        ([0.5, 0.6, 0.1], "HIGHS", "target: entries sum to 1.2"),
        ([0.5, -0.1, 0.6], "HIGHS", "target: contains negative"),
        ([0.2, 0.3, 0.5], "NOT_A_SOLVER", "solver: 'NOT_A_SOLVER' is not an installed cvxpy solver"),
    ],
    ids=["wrong-length", "bad-sum", "negative", "unknown-solver"],
)
def test_bad_inputs(target, solver, message):
    with pytest.raises(ValueError, match=message):
        transport_lp(target, IID([0.2, 0.3, 0.5], 2), solver=solver)


def test_status_other_than_optimal_raises(monkeypatch):
    monkeypatch.setattr(cp.Problem, "status", property(lambda self: "optimal_inaccurate"))
    with pytest.raises(SolverError, match=r"status 'optimal_inaccurate' .* 18 variables and 8 constraints"):
        transport_lp([0.2, 0.3, 0.5], IID([0.2, 0.3, 0.5], 2))


def test_solver_exception_becomes_solver_error(monkeypatch):
    def broken(self, *args, **kwargs):
        raise cp.error.SolverError("simulated crash")

    monkeypatch.setattr(cp.Problem, "solve", broken)
    with pytest.raises(SolverError, match=r"failed \(simulated crash\) .* 18 variables"):
        transport_lp([0.2, 0.3, 0.5], IID([0.2, 0.3, 0.5], 2))


def test_a_plan_that_fails_the_marginal_recheck_raises(monkeypatch):
    """A solver that says 'optimal' but returns a point off the marginals is not believed."""
    original = cp.Problem.solve

    def sloppy(self, *args, **kwargs):
        value = original(self, *args, **kwargs)
        for variable in self.variables():
            variable.value = variable.value * 1.01
        return value

    monkeypatch.setattr(cp.Problem, "solve", sloppy)
    with pytest.raises(SolverError, match="re-check failed .*marginal off"):
        transport_lp([0.2, 0.3, 0.5], IID([0.2, 0.3, 0.5], 2))


def test_public_names_and_light_import():
    """Every name in ``multidraft.lp.__all__`` exists, and importing the package loads
    neither cvxpy nor highspy (they are imported by the functions that solve)."""
    import subprocess
    import sys

    import multidraft.lp

    for name in multidraft.lp.__all__:
        assert hasattr(multidraft.lp, name), name
    code = "import sys, multidraft.lp; print(sorted(m for m in ('cvxpy', 'highspy') if m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
