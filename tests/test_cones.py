"""Tests of multidraft.lp.cones: double-description duals -> acceptance formulas and Theorem 2.

Every claim is checked against a second route: the derived formulas against the min-cut
optimum of multidraft.theory (floats and exact Fractions), the recognised closed forms
against the raw vertex (u, v) evaluated at exact points, merged multisets against ordered
tuples, and the acceptance-one inequalities against theory's unit_acceptance.
"""

from __future__ import annotations

import dataclasses
import itertools
from fractions import Fraction
from functools import lru_cache

import numpy as np
import pytest
import sympy
from hypothesis import given, settings
from hypothesis import strategies as st

from multidraft.lp._polyhedra import enumerate_generators
from multidraft.lp._solve import ProblemTooLargeError
from multidraft.lp.cones import (
    CONSTRAINT_LIMIT,
    VARIABLE_LIMIT,
    acceptance_formulas,
    cone_size,
    draft_structure,
    dual_formulas,
    unit_cone,
    unit_inequalities,
)
from multidraft.theory import IID, Independent, WithoutReplacement, optimal_acceptance, unit_acceptance

PAPER_CASES = [(2, 2), (3, 2), (4, 2), (3, 3)] + [(2, k) for k in range(3, 7)]


@lru_cache(maxsize=None)
def formulas(n, k, law="iid", merge=None):
    return acceptance_formulas(n, k, law, merge=merge)


@lru_cache(maxsize=None)
def cone(n, k, law="iid", merge=None):
    return unit_inequalities(n, k, law, merge=merge)


def all_subsets(n, sizes):
    return {t for size in sizes for t in itertools.combinations(range(n), size)}


def law_for(law, q, k):
    if law == "iid":
        return IID(q, k)
    if law == "wor":
        return WithoutReplacement(q, k)
    return Independent(q)


def random_rational(rng, n, denominator=60, zeros=False):
    """An exact distribution with entries in (1/denominator)Z (optionally with zeros)."""
    weights = rng.integers(0 if zeros else 1, denominator, size=n)
    if weights.sum() == 0:
        weights[0] = 1
    return [Fraction(int(w), int(weights.sum())) for w in weights]


# --------------------------------------------------------------------------- the formula


@pytest.mark.parametrize("n,k", PAPER_CASES)
def test_survivors_are_exactly_the_subset_family(n, k):
    result = formulas(n, k)
    assert result.matches_subset_family
    assert result.certified
    assert result.lineality == 1
    assert result.vertices == 2**n - 1  # T and Ω \ T ... every T except Ω (same vertex as ∅)
    assert set(result.subsets) == all_subsets(n, range(n))
    assert len(result.formulas) == 2**n - 1


@pytest.mark.parametrize("n,k", [(3, 2), (3, 3)])
def test_closed_forms_are_the_paper_formula(n, k):
    """Each displayed expression is literally p(T) + 1 - q(T)^K, built here independently."""
    p = sympy.symbols(f"p0:{n}")
    q = sympy.symbols(f"q0:{n}")
    for formula in formulas(n, k).formulas:
        t = formula.subset
        expected = sympy.Add(*(p[i] for i in t)) + 1 - sympy.Add(*(q[i] for i in t)) ** k
        assert sympy.expand(formula.expression - expected) == 0


@pytest.mark.parametrize("n,k,law", [(3, 2, "iid"), (3, 3, "iid"), (4, 2, "iid"), (3, 2, "independent"), (3, 2, "wor")])
def test_closed_form_equals_raw_vertex_at_exact_points(n, k, law):
    """The recognised expression and Σ v p + Σ u D(x) agree at exact random points."""
    result = formulas(n, k, law)
    structure = result.structure
    rng = np.random.default_rng(7)
    for _ in range(3):
        p = random_rational(rng, n)
        qs = [random_rational(rng, n) for _ in structure.drafts]
        mapping = dict(zip(structure.symbols, map(sympy.Rational, (*p, *itertools.chain(*qs)))))
        values = result.values(p, qs[0] if len(qs) == 1 else qs)
        for formula, value in zip(result.formulas, values):
            assert formula.expression.xreplace(mapping) == sympy.Rational(value)


@pytest.mark.parametrize("n,k", [(2, 2), (3, 2), (4, 2), (3, 3), (2, 5)])
def test_minimum_matches_min_cut_float(n, k):
    rng = np.random.default_rng(n * 10 + k)
    result = formulas(n, k)
    derived, reference = [], []
    for alpha in (0.3, 1.0, 5.0):
        for _ in range(10):
            p, q = rng.dirichlet(np.full(n, alpha)), rng.dirichlet(np.full(n, alpha))
            derived.append(result.minimum(p, q))
            reference.append(optimal_acceptance(p, IID(q, k), method="subsets").value)
    np.testing.assert_allclose(derived, reference, rtol=0, atol=1e-12)


@pytest.mark.parametrize("n,k,law", [(3, 2, "iid"), (3, 3, "iid"), (3, 2, "independent"), (3, 2, "wor"), (4, 2, "wor")])
def test_minimum_matches_min_cut_exact(n, k, law):
    rng = np.random.default_rng(3)
    result = formulas(n, k, law)
    for _ in range(8):
        p = random_rational(rng, n, zeros=law != "wor")
        q = [random_rational(rng, n) for _ in range(k)] if law == "independent" else random_rational(rng, n)
        expected = optimal_acceptance(p, law_for(law, q, k), method="subsets", exact=True).value
        value = result.minimum(p, q)
        assert isinstance(value, Fraction)
        assert value == expected


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.integers(0, 12), min_size=3, max_size=3).filter(any),
    st.lists(st.integers(0, 12), min_size=3, max_size=3).filter(any),
)
def test_minimum_matches_min_cut_hypothesis(p_weights, q_weights):
    p = [Fraction(w, sum(p_weights)) for w in p_weights]
    q = [Fraction(w, sum(q_weights)) for w in q_weights]
    expected = optimal_acceptance(p, IID(q, 3), method="subsets", exact=True).value
    assert formulas(3, 3).minimum(p, q) == expected


def test_wrong_structure_changes_the_result():
    """Dropping the multiset {0, 1} from the iid (3, 2) law must break both checks."""
    structure = draft_structure(3, 2)
    keep = [i for i, atom in enumerate(structure.atoms) if atom != (0, 1)]
    wrong = dataclasses.replace(
        structure,
        atoms=tuple(structure.atoms[i] for i in keep),
        probabilities=tuple(structure.probabilities[i] for i in keep),
    )
    broken = dual_formulas(wrong)
    assert not broken.matches_subset_family
    assert None in broken.subsets
    rng = np.random.default_rng(11)
    gaps = []
    for _ in range(20):
        p, q = rng.dirichlet(np.ones(3)), rng.dirichlet(np.ones(3))
        gaps.append(abs(broken.minimum(p, q) - optimal_acceptance(p, IID(q, 2), method="subsets").value))
    assert max(gaps) > 1e-2


def test_missing_multinomial_weights_change_the_result():
    """D({0,1}) = q0 q1 instead of 2 q0 q1 (tuples merged without weights) is caught."""
    structure = draft_structure(3, 2)
    q = structure.drafts[0]
    wrong = dataclasses.replace(
        structure, probabilities=tuple(sympy.Mul(*(q[t] for t in atom)) for atom in structure.atoms)
    )
    assert not dual_formulas(wrong).matches_subset_family


@pytest.mark.parametrize("n,k,law", [(3, 2, "iid"), (2, 3, "iid"), (3, 2, "wor")])
def test_merged_and_tuple_atoms_give_the_same_formulas(n, k, law):
    merged = formulas(n, k, law, True)
    tuples = formulas(n, k, law, False)
    assert len(tuples.structure.atoms) > len(merged.structure.atoms)
    assert [str(f) for f in merged.formulas] == [str(f) for f in tuples.formulas]
    assert merged.subsets == tuples.subsets


def test_beyond_the_paper_independent_and_without_replacement():
    independent = formulas(3, 2, "independent")
    assert independent.matches_subset_family and independent.certified
    assert set(independent.subsets) == all_subsets(3, range(3))
    assert "(q1_0 + q1_1)*(q2_0 + q2_1)" in str(independent.formulas[independent.subsets.index((0, 1))])
    wor = formulas(3, 2, "wor")
    # Singletons cannot hold two distinct drafts: p(T) + 1 >= 1, and they are not even vertices.
    assert set(wor.subsets) == {(), (0, 1), (0, 2), (1, 2)}
    assert wor.matches_subset_family and wor.certified


def test_single_draft_drops_the_constant():
    """K = 1: f_T + f_(Ω\\T) = 2, so the constant 1 is never needed and is not a vertex."""
    result = formulas(3, 1)
    assert result.missing_subsets == ((),)
    assert not result.matches_subset_family
    assert result.certified


def test_witnesses_make_each_formula_the_unique_minimum():
    result = formulas(3, 3)
    structure = result.structure
    for formula in result.formulas:
        p, drafts = formula.witness
        mapping = dict(zip(structure.symbols, map(sympy.Rational, (*p, *itertools.chain(*drafts)))))
        values = [g.expression.xreplace(mapping) for g in result.formulas]
        mine = formula.expression.xreplace(mapping)
        assert sum(1 for v in values if v <= mine) == 1


def test_size_guard_refuses_with_estimate():
    with pytest.raises(ProblemTooLargeError, match=r"174 variables \(1,485 constraints\)"):
        acceptance_formulas(9, 3)
    with pytest.raises(ValueError, match=r"acceptance-one cone .*: about 13 variables \(18 constraints\) exceed the limit max_constraints=10"):
        unit_inequalities(3, 3, max_constraints=10)
    with pytest.raises(ValueError, match=r"dual polyhedron .*: about 13 variables \(30 constraints\) exceed the limit max_constraints=29"):
        dual_formulas(draft_structure(3, 3), max_constraints=29)
    with pytest.raises(ValueError, match=r"about 84 variables \(243 constraints\) exceed the limit max_variables=60"):
        acceptance_formulas(3, 4, "independent")
    with pytest.raises(ValueError, match=r"acceptance-one cone .*: about 84 variables"):
        unit_cone(draft_structure(3, 4, "independent"))
    with pytest.raises(ValueError, match=r"about 15 factors 1 - q\(S\) .* exceed the limit DENOMINATOR_LIMIT=10"):
        acceptance_formulas(5, 3, "wor")


@pytest.mark.parametrize(
    "n,k,law,merge",
    [(3, 3, "iid", None), (4, 2, "iid", False), (3, 2, "wor", None), (4, 3, "wor", False), (3, 2, "independent", None)],
)
def test_cone_size_counts_match_the_structure(n, k, law, merge):
    structure = draft_structure(n, k, law, merge=merge)
    m = len(structure.atoms)
    assert cone_size(n, k, law, merge=merge) == (m + n, m * n)
    assert cone_size(n, k, law, merge=merge, unit=True) == (m + n, sum(len(set(a)) for a in structure.atoms))


@pytest.mark.parametrize("law", ["iid", "wor", "independent"])
def test_atom_probabilities_sum_to_one_on_the_simplex(law):
    structure = draft_structure(4, 2, law)
    assert structure.on_simplex(sympy.Add(*structure.probabilities)) == 1
    assert structure.on_simplex(structure.containment(range(4))) == 1


BAD_INPUTS = [
    pytest.param(dict(n=0, k=2), r"n: the vocabulary size must be an integer >= 1, got 0", id="n-zero"),
    pytest.param(dict(n=2.5, k=2), r"n: the vocabulary size must be an integer", id="n-float"),
    pytest.param(dict(n=True, k=2), r"n: the vocabulary size must be an integer", id="n-bool"),
    pytest.param(dict(n=3, k=0), r"k: the number of drafts must be an integer >= 1, got 0", id="k-zero"),
    pytest.param(dict(n=3, k="2"), r"k: the number of drafts must be an integer", id="k-string"),
    pytest.param(dict(n=3, k=2, law="greedy"), r"law: unknown draft law 'greedy'; choose one of", id="law"),
    pytest.param(dict(n=2, k=3, law="wor"), r"k: without replacement needs k <= n", id="wor-k"),
    pytest.param(dict(n=3, k=2, law="independent", merge=True), r"merge: independent .* cannot be merged", id="merge"),
]


@pytest.mark.parametrize("kwargs,message", BAD_INPUTS)
@pytest.mark.parametrize("function", [acceptance_formulas, unit_inequalities, draft_structure, cone_size])
def test_bad_arguments(function, kwargs, message):
    with pytest.raises(ValueError, match=message):
        function(**kwargs)


def test_bad_structures_and_points():
    structure = draft_structure(2, 2)
    with pytest.raises(ValueError, match=r"atoms: 2 atoms but 3 probabilities"):
        dataclasses.replace(structure, atoms=structure.atoms[:2])
    with pytest.raises(ValueError, match=r"atoms: \(0, 2\) is not a 2-tuple of tokens in \[0, 2\)"):
        dataclasses.replace(structure, atoms=((0, 0), (0, 2), (1, 1)))
    with pytest.raises(ValueError, match=r"atoms: a draft structure needs at least one atom"):
        dataclasses.replace(structure, atoms=(), probabilities=())
    result = formulas(2, 2)
    with pytest.raises(ValueError, match=r"target: length 3 does not match n=2"):
        result.minimum(["1/3", "1/3", "1/3"], ["1/2", "1/2"])
    with pytest.raises(ValueError, match=r"draft: exact entries sum to 3/4"):
        result.minimum(["1/2", "1/2"], ["1/2", "1/4"])
    with pytest.raises(ValueError, match=r"draft: the independent law needs 2 draft distributions, got 1"):
        formulas(3, 2, "independent").minimum([0.2, 0.3, 0.5], [[0.2, 0.3, 0.5]])


# --------------------------------------------------------------------------- Theorem 2


@pytest.mark.parametrize("n,k", [(2, 2), (3, 2), (4, 2), (3, 3), (2, 6)])
def test_unit_cone_is_theorem_2(n, k):
    result = cone(n, k)
    assert result.matches_subset_family
    assert result.lineality == 1 and result.equalities == ()
    assert set(result.subsets) == all_subsets(n, range(1, n))
    for trivial in result.trivial:  # D(x) >= 0 for a single atom x
        assert not any(trivial.target_weights)
        assert sorted(trivial.atom_weights)[-2:] == [0, 1] and min(trivial.atom_weights) == 0
    assert result.rays == len(result.inequalities) + len(result.trivial)
    p, q = sympy.symbols(f"p0:{n}"), sympy.symbols(f"q0:{n}")
    for inequality in result.inequalities:
        t = inequality.subset
        assert sympy.expand(inequality.lhs - sympy.Add(*(p[i] for i in t))) == 0
        assert sympy.expand(inequality.rhs - sympy.Add(*(q[i] for i in t)) ** k) == 0


def test_unit_cone_beyond_the_paper():
    assert cone(3, 2, "independent").matches_subset_family
    wor = cone(3, 2, "wor")
    assert wor.matches_subset_family and set(wor.subsets) == {(0, 1), (0, 2), (1, 2)}
    single = cone(3, 1)
    assert single.lineality == 3 and len(single.equalities) == 3  # K = 1: P* = 1 iff p = q
    assert not single.matches_subset_family


@pytest.mark.parametrize("n,k,law", [(3, 2, "iid"), (3, 3, "iid"), (3, 2, "wor"), (3, 2, "independent"), (3, 1, "iid")])
def test_unit_cone_decides_acceptance_one_like_min_cut(n, k, law):
    """holds(p, q) == (P* = 1), on points built to land on both sides of the boundary."""
    rng = np.random.default_rng(5)
    result = cone(n, k, law)
    outcomes = set()
    for _ in range(40):
        q = [random_rational(rng, n, 8) for _ in range(k)] if law == "independent" else random_rational(rng, n, 8)
        base = q[0] if law == "independent" else q
        noise = random_rational(rng, n, 8, zeros=True)
        mix = Fraction(int(rng.integers(0, 9)), 8)
        p = [(1 - mix) * a + mix * b for a, b in zip(base, noise)]
        expected = unit_acceptance(p, law_for(law, q, k), exact=True).holds
        assert result.holds(p, q) == expected
        outcomes.add(expected)
    assert outcomes == {True, False}


def test_paper_example_acceptance_one_with_positive_tv():
    result = cone(3, 2)
    assert result.holds(["1/3", "1/6", "1/2"], ["1/3", "1/3", "1/3"])
    assert not result.holds(["1/3", "1/12", "7/12"], ["1/3", "1/3", "1/3"])  # p1 < q1^2 = 1/9
    assert result.holds([1 / 3, 1 / 6, 1 / 2], [1 / 3, 1 / 3, 1 / 3])


# --------------------------------------------------------------------------- cddlib wrapper


def test_enumerate_generators_square_and_lineality():
    square = enumerate_generators([[0, 1, 0], [0, 0, 1], [1, -1, 0], [1, 0, -1]])
    assert sorted(square.vertices) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert square.rays == () and square.lineality == ()
    strip = enumerate_generators([[0, 1, 0], [1, -1, 0]])  # 0 <= x <= 1, y free
    assert len(strip.vertices) == 2 and strip.rays == ()
    assert len(strip.lineality) == 1 and strip.lineality[0][0] == 0
    assert all(isinstance(x, Fraction) for v in square.vertices for x in v)


def test_size_limits_cover_the_paper_cases():
    for n, k in PAPER_CASES:
        variables, constraints = cone_size(n, k)
        assert variables <= VARIABLE_LIMIT and constraints <= CONSTRAINT_LIMIT
