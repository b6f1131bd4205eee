"""The ``multidraft lp`` sub-command, run as the installed console script: text and JSON
output, laws, plan, errors, and a solver that stays silent unless ``--verbose``."""

from __future__ import annotations

import numpy as np
import pytest


def run_json(cli, *argv: str) -> dict:
    result = cli("lp", *argv, "--json")
    assert result.returncode == 0 and result.stderr == "", result.stderr
    return result.json()


def run_text(cli, *argv: str) -> str:
    result = cli("lp", *argv)
    assert result.returncode == 0 and result.stderr == "", result.stderr
    return result.stdout


def test_reference_case_text(cli):
    out = run_text(cli, "--target", "1/3,1/6,1/2", "--draft", "1/3,1/3,1/3", "--k", "2")
    assert "optimal acceptance  1" in out and "(min-cut 1," in out
    assert "status              optimal (HIGHS)" in out
    assert "certified           min-cut - LP = " in out and "(at most 1e-09), route HIGHS (presolve off)\n" in out
    assert "18 variables, 8 equality constraints" in out


def test_json_keys_and_values(cli):
    result = run_json(cli, "--target", "0.9,0.1", "--draft", "0.5,0.5", "--k", "2")
    assert {"optimal", "status", "seconds"} <= set(result)
    assert "plan" not in result
    np.testing.assert_allclose(result["optimal"], 0.85, atol=1e-9)  # min-cut at T = {1}: 0.1 + 1 - 0.25
    np.testing.assert_allclose(result["min_cut"], 0.85, atol=1e-12)
    assert result["status"] == "optimal" and result["seconds"] > 0
    assert (result["law"], result["k"], result["n"]) == ("iid", 2, 2)
    assert (result["route"], result["failed_routes"], result["min_cut_set"]) == ("HIGHS (presolve off)", [], [1])
    assert result["certified_gap"] == result["min_cut"] - result["optimal"] and abs(result["certified_gap"]) <= 1e-9


@pytest.mark.parametrize("law", ["iid", "wor", "greedy", "independent"])
def test_every_law_matches_the_min_cut(cli, law):
    result = run_json(cli, "--target", "0.1,0.2,0.3,0.4", "--draft", "0.4,0.3,0.2,0.1", "--k", "2", "--law", law)
    assert result["law"] == law
    np.testing.assert_allclose(result["optimal"], result["min_cut"], rtol=0, atol=1e-9)


def test_repeated_drafts_mean_independent_and_plan(cli):
    result = run_json(cli, "--target", "0.5,0.3,0.2", "--draft", "0.2,0.3,0.5", "--draft", "0.6,0.2,0.2", "--plan")
    assert (result["law"], result["k"]) == ("independent", 2)
    plan = result["plan"]
    coupling = np.array(plan["coupling"])
    assert coupling.shape == (9, 3)
    np.testing.assert_allclose(coupling.sum(axis=0), [0.5, 0.3, 0.2], atol=1e-6)
    np.testing.assert_allclose(coupling.sum(axis=1), plan["tuple_probs"], atol=1e-6)
    weights = np.array(plan["importance_weights"])
    assert weights.shape == (9, 2)
    np.testing.assert_allclose(weights.sum(axis=1), 1.0, atol=1e-9)
    np.testing.assert_allclose(plan["importance_acceptance"], result["optimal"], atol=1e-7)


def test_plan_text(cli):
    out = run_text(cli, "--target", "1/3,1/6,1/2", "--draft", "1/3,1/3,1/3", "--k", "2", "--plan")
    assert "coupling pi(x, y) and importance weights beta (per multiset position)" in out
    assert "(1, 2)" in out and "intermediate r:" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--target", "0.5,0.5", "--draft", "0.5,0.5"], "k: a single --draft needs --k"),
        (["--target", "0.5,0.5", "--draft", "0.5,0.5", "--draft", "0.1,0.9", "--k", "3"], "does not match the 2 drafts"),
        (["--target", "0.5,0.5", "--draft", "0.5,0.5", "--draft", "0.1,0.9", "--law", "wor"], "repeated --draft means"),
        (["--target", "0.5,0.5", "--draft", "0.5,0.5", "--k", "2", "--solver", "NOPE"], "solver: 'NOPE' is not"),
        (["--target", "0.5,0.5", "--draft", "0.8,0.2", "--k", "2", "--solver", "SCS"], "solver: 'SCS' is not offered for the certified LPs (a first-order"),
        (["--target", "0.5,0.6", "--draft", "0.5,0.5", "--k", "2"], "target: entries sum to 1 + 0.1"),
        (["--target", "0.5,x", "--draft", "0.5,0.5", "--k", "2"], "target: cannot parse entry 1"),
        (["--target", "0.5,0.5", "--draft", "0.5,0.5", "--k", "0"], "k: the number of drafts must be an integer >= 1"),
        (["--target", ",".join(["1/150"] * 150), "--draft", ",".join(["1/150"] * 150), "--k", "3"], "exceed the limit"),
    ],
    ids=["missing-k", "k-mismatch", "law-with-repeated-drafts", "solver", "first-order-solver", "bad-sum", "unparsable", "k-zero", "too-large"],
)
def test_errors_exit_2_with_one_line(cli, argv, message):
    result = cli("lp", *argv)
    assert result.returncode == 2 and result.stdout == ""
    err = result.stderr
    assert err.startswith("multidraft lp: error: ")
    assert message in err
    assert err.count("\n") == 1


def test_verbose_sends_the_solver_log_to_stderr_only(cli):
    """``--verbose`` lets the solver's log through, on stderr, so ``--json`` still parses."""
    result = cli("lp", "--target", "0.9,0.1", "--draft", "0.5,0.5", "--k", "2", "--json", "--verbose")
    assert result.returncode == 0
    assert result.json()["status"] == "optimal"
    assert "HiGHS" in result.stderr


@pytest.mark.parametrize("solver", ["HIGHS", "SCIPY", "CLARABEL"])
def test_every_offered_solver_prints_a_certified_value(cli, solver):
    """Issue 20: OSQP printed 0.8600025518 above the min-cut 0.86 without a word. Whatever the
    solver asked for, the printed optimum is within 1e-9 of the min-cut, with the route."""
    result = run_json(cli, "--target", "0.5,0.5", "--draft", "0.8,0.2", "--k", "2", "--solver", solver)
    assert result["optimal"] <= result["min_cut"] + 1e-9 and abs(result["certified_gap"]) <= 1e-9
    assert result["solver"] == solver and result["route"].startswith(solver)
