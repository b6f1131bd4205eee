"""Tests of ``multidraft cones``, run as the installed console script: JSON that sympify parses
and reproduces P*, listings, errors."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
import sympy

from multidraft.theory import IID, Independent, optimal_acceptance, unit_acceptance


def run_json(cli, *argv):
    result = cli("cones", *argv, "--json")
    assert result.returncode == 0 and result.stderr == "", result.stderr
    return result.json()


def run_text(cli, *argv):
    result = cli("cones", *argv)
    assert result.returncode == 0 and result.stderr == "", result.stderr
    return result.stdout


def point(symbols, values):
    return {sympy.Symbol(name): sympy.Rational(value) for name, value in zip(symbols, values)}


@pytest.mark.parametrize("n,k", [(3, 2), (3, 3)])
def test_json_formulas_reproduce_the_optimum(cli, n, k):
    data = run_json(cli, "--n", str(n), "--k", str(k))
    parsed = [sympy.sympify(text) for text in data["formulas"]]
    assert len(parsed) == len(data["subsets"]) == 2**n - 1
    assert data["matches_subset_family"] and data["certified"] and data["vertices"] == 2**n - 1
    rng = np.random.default_rng(1)
    for _ in range(5):
        weights_p, weights_q = rng.integers(1, 30, size=n), rng.integers(1, 30, size=n)
        p = [Fraction(int(w), int(weights_p.sum())) for w in weights_p]
        q = [Fraction(int(w), int(weights_q.sum())) for w in weights_q]
        values = point([f"p{i}" for i in range(n)] + [f"q{i}" for i in range(n)], p + q)
        derived = min(expression.xreplace(values) for expression in parsed)
        expected = optimal_acceptance(p, IID(q, k), method="subsets", exact=True).value
        assert derived == sympy.Rational(expected.numerator, expected.denominator)


def test_json_independent_symbols(cli):
    data = run_json(cli, "--n", "3", "--k", "2", "--law", "independent")
    names = {str(s) for text in data["formulas"] for s in sympy.sympify(text).free_symbols}
    assert names == {"p0", "p1", "p2", "q1_0", "q1_1", "q1_2", "q2_0", "q2_1", "q2_2"}
    p, q1, q2 = [0.5, 0.3, 0.2], [0.2, 0.2, 0.6], [0.7, 0.1, 0.2]
    values = {sympy.Symbol(f"p{i}"): p[i] for i in range(3)}
    values |= {sympy.Symbol(f"q1_{i}"): q1[i] for i in range(3)} | {sympy.Symbol(f"q2_{i}"): q2[i] for i in range(3)}
    derived = min(float(sympy.sympify(text).xreplace(values)) for text in data["formulas"])
    expected = optimal_acceptance(p, Independent([q1, q2]), method="subsets").value
    np.testing.assert_allclose(derived, expected, rtol=0, atol=1e-12)


def test_json_unit_inequalities_decide_acceptance_one(cli):
    data = run_json(cli, "--n", "3", "--k", "2", "--unit")
    relations = [sympy.sympify(text) for text in data["inequalities"]]
    assert len(relations) == 6 and all(isinstance(r, sympy.GreaterThan) for r in relations)
    assert data["matches_subset_family"] and data["equalities"] == []
    q = ["1/3", "1/3", "1/3"]
    for p in (["1/3", "1/6", "1/2"], ["1/3", "1/12", "7/12"]):
        values = point(["p0", "p1", "p2", "q0", "q1", "q2"], p + q)
        holds = all(bool(r.xreplace(values)) for r in relations)
        assert holds == unit_acceptance(p, IID(q, 2), exact=True).holds


def test_json_unit_single_draft_equalities(cli):
    data = run_json(cli, "--n", "2", "--k", "1", "--unit")
    assert data["inequalities"] == [] and not data["matches_subset_family"]
    assert {str(sympy.sympify(text)) for text in data["equalities"]} == {"Eq(q0, p0)", "Eq(q1, p1)"}


def test_readable_listing_shows_sets(cli):
    out = run_text(cli, "--n", "3", "--k", "2")
    assert "T = {0, 1}" in out and "p0 + p1 - (q0 + q1)**2 + 1" in out
    assert "exactly p(T) + 1 - P_D" in out and "NOT" not in out
    out = run_text(cli, "--n", "3", "--k", "2", "--law", "wor", "--unit")
    assert "T = {0, 2}" in out and ">=" in out


def test_latex_output(cli):
    out = run_text(cli, "--n", "2", "--k", "2", "--latex")
    assert out.startswith("\\begin{align*}") and "q_{0}^{2}" in out and "\\emptyset" in out
    assert "\\geq" in run_text(cli, "--n", "2", "--k", "2", "--unit", "--latex")


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--n", "0", "--k", "2"], "n: the vocabulary size must be an integer >= 1, got 0"),
        (["--n", "3", "--k", "0"], "k: the number of drafts must be an integer >= 1, got 0"),
        (["--n", "9", "--k", "3"], "174 variables (1,485 constraints)"),
        (["--n", "2", "--k", "3", "--law", "wor"], "k: without replacement needs k <= n"),
    ],
    ids=["n-zero", "k-zero", "too-large", "wor-k"],
)
def test_errors_are_one_line(cli, argv, message):
    result = cli("cones", *argv)
    err = result.stderr
    assert result.returncode == 2 and result.stdout == ""
    assert message in err and err.count("\n") == 1 and err.startswith("multidraft cones: error:")


def test_json_and_latex_are_exclusive(cli):
    result = cli("cones", "--n", "2", "--k", "2", "--json", "--latex")
    assert result.returncode == 2 and result.stdout == ""
    assert "not allowed with argument" in result.stderr and result.stderr.count("\n") == 1
