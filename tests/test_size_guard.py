"""One size guard for every optimisation and enumeration (issue 15, item 2): each refuses a
problem over its limit with ``ProblemTooLargeError`` before building anything, naming the
limit and an alternative that accepts the input at hand."""

from __future__ import annotations

import io
import sys
import tracemalloc

import numpy as np
import pytest

import multidraft
from multidraft.lp import (
    ProblemTooLargeError,
    importance_lp,
    multistage,
    pair_importance_lp,
    transport_lp,
    truncated_lp,
)
from multidraft.lp._solve import check_solver
from multidraft.schemes import get_scheme
from multidraft.lp.cones import acceptance_formulas, unit_inequalities
from multidraft.theory import IID, Independent, WithoutReplacement, optimal_acceptance, zipf
from multidraft.theory.laws import MAX_VARIABLES, SizeEstimate, check_size

N = 49152
BIG_P, BIG_Q = zipf(N, 1.1), zipf(N, 0.9)
UNIFORM_200 = np.full(200, 1 / 200)

#: (call, words the message must contain). Each would allocate gigabytes if built.
REFUSALS = [
    pytest.param(lambda: truncated_lp(BIG_P, BIG_Q, s=20000), ["max_tuples=2,000,000", "use s <= 563"], id="truncated-lp"),
    pytest.param(lambda: truncated_lp(BIG_P, BIG_Q, s=1000), ["max_memory=2.0 GiB", "use s <= 563"], id="truncated-lp-memory"),
    pytest.param(lambda: multistage(BIG_P, [BIG_Q] * 3, s=3000), ["truncated LP", "use s <= 447"], id="multistage"),
    pytest.param(lambda: transport_lp(UNIFORM_200, IID(UNIFORM_200, 3)), ["transport LP", "max_variables", "method='sorted'"], id="transport-lp"),
    pytest.param(lambda: importance_lp(UNIFORM_200, IID(UNIFORM_200, 4)), ["importance LP", "max_variables", "method='sorted'"], id="importance-lp"),
    pytest.param(lambda: pair_importance_lp(BIG_P, BIG_Q), ["pair importance LP", "use truncated_lp"], id="pair-lp"),
    pytest.param(lambda: acceptance_formulas(9, 3), ["dual polyhedron", "max_variables=60"], id="cones"),
    pytest.param(lambda: unit_inequalities(3, 3, max_constraints=10), ["acceptance-one cone", "max_constraints=10"], id="unit-cone"),
    pytest.param(lambda: IID(UNIFORM_200, 3).enumerate(), ["draft tuples", "ENUMERATION_LIMIT"], id="enumeration"),
    pytest.param(lambda: WithoutReplacement(UNIFORM_200, 3).enumerate(), ["draft tuples", "ENUMERATION_LIMIT"], id="wor-enumeration"),
    pytest.param(
        lambda: get_scheme("optimal").conditional_distribution(BIG_P, WithoutReplacement(BIG_Q, 4), np.tile(np.arange(4), (20000, 1))),
        ["20,000 draft tuples over n=49,152", "22.0 GiB", "max_memory=2.0 GiB"], id="conditional-laws",
    ),  # issue 34
]


@pytest.mark.parametrize("call, words", REFUSALS)
def test_refused_before_anything_is_built(call, words):
    check_solver("HIGHS")  # import cvxpy and list its solvers first: not part of what is measured
    tracemalloc.start()
    try:
        with pytest.raises(ProblemTooLargeError) as refused:
            call()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    message = str(refused.value)
    assert all(word in message for word in words), message
    assert "exceed the limit" in message and refused.value.limit_name in message
    assert peak < 64 * 2**20, f"{peak / 2**20:.0f} MiB allocated before the refusal"


def test_the_error_is_one_class_importable_from_every_public_face():
    from multidraft.theory import ProblemTooLargeError as from_theory

    assert multidraft.ProblemTooLargeError is ProblemTooLargeError is from_theory
    assert issubclass(ProblemTooLargeError, ValueError)


def test_limits_can_be_raised_and_the_estimate_is_exact_for_the_lp():
    law = IID([0.5, 0.3, 0.2], 2)
    with pytest.raises(ProblemTooLargeError, match="about 18 variables") as refused:
        transport_lp([0.2, 0.3, 0.5], law, max_variables=17)
    assert refused.value.estimate.variables == 18 == transport_lp([0.2, 0.3, 0.5], law, max_variables=18).variables
    assert truncated_lp(BIG_P, BIG_Q, k=3, s=10, max_tuples=220).s == 10  # C(12, 3) multisets
    with pytest.raises(ProblemTooLargeError, match="use s <= 9"):
        truncated_lp(BIG_P, BIG_Q, k=3, s=10, max_tuples=219)


def test_memory_limit_is_named_when_it_binds():
    with pytest.raises(ProblemTooLargeError, match=r"max_memory=1\.0 KiB"):
        check_size(SizeEstimate("toy", 10, 2048), "shrink it", max_memory=1024)
    assert check_size(SizeEstimate("toy", MAX_VARIABLES, 0), "-").variables == MAX_VARIABLES


def test_advice_is_valid_for_the_law_at_hand():
    """Issue 15: an Independent law over 23 tokens was told method='sorted', which it rejects;
    the advice now names the threshold search, and following it gives the transport LP's value."""
    q = np.full(23, 1 / 23)
    p = zipf(23, 1.0)
    law = Independent([q, zipf(23, 0.5)])
    with pytest.raises(ValueError, match="not the independent law") as refused:
        optimal_acceptance(p, law, method="sorted")
    advice = str(refused.value).split(";")[1]
    assert "method='sorted'" not in advice and "method='threshold'" in advice
    with pytest.raises(ValueError, match="method='threshold'"):
        optimal_acceptance(p, law, method="subsets")  # 23 tokens: beyond the subsets limit
    advised = optimal_acceptance(p, law, method="threshold")  # the advice works
    assert advised.value == pytest.approx(transport_lp(p, law).acceptance, abs=1e-7)
    for big in (IID(np.full(300, 1 / 300), 3), WithoutReplacement(np.full(300, 1 / 300), 3)):
        with pytest.raises(ProblemTooLargeError, match="method='sorted'"):
            big.enumerate()  # too many tuples: the advice is the prefix scan these laws accept


def test_a_list_where_a_law_is_expected_is_a_type_error():
    with pytest.raises(TypeError, match=r"law: expected a draft law .* got list; build one, e.g. IID\(draft, k=2\)"):
        optimal_acceptance([0.5, 0.5], [0.5, 0.5])
    with pytest.raises(TypeError, match="got list"):
        transport_lp([0.5, 0.5], [0.5, 0.5])
    with pytest.raises(TypeError, match="got str"):
        importance_lp([0.5, 0.5], "iid")


class Terminal(io.StringIO):
    """A stderr that says it is a terminal, so that progress bars are drawn into it."""

    def isatty(self) -> bool:
        return True


def test_a_long_solve_shows_a_bar_on_a_terminal_unless_progress_is_off(capfd, monkeypatch):
    import multidraft.lp._solve as solve_module

    monkeypatch.setattr(solve_module, "SLOW_VARIABLES", 1)  # make a small LP count as slow
    transport_lp([0.5, 0.5], IID([0.5, 0.5], 2))
    assert capfd.readouterr() == ("", ""), "no bar when stderr is not a terminal (a pipe, a log)"
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    transport_lp([0.5, 0.5], IID([0.5, 0.5], 2))
    assert "transport LP (iid law, n=2, k=2): solving 6 variables" in terminal.getvalue()
    shown = len(terminal.getvalue())
    transport_lp([0.5, 0.5], IID([0.5, 0.5], 2), progress=False)
    monkeypatch.setattr(solve_module, "SLOW_VARIABLES", 7)
    transport_lp([0.5, 0.5], IID([0.5, 0.5], 2))
    assert len(terminal.getvalue()) == shown, "progress=False, or an LP below the threshold, shows nothing"
    assert capfd.readouterr() == ("", "")
