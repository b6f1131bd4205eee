"""The ``multidraft acceptance`` command, run as the installed console script: the JSON
contract, the optimum always present, exactness and one-line errors."""

from __future__ import annotations

import re
from fractions import Fraction

import pytest

from multidraft.schemes import SCHEMES
from multidraft.theory import IID, optimal_acceptance


def run_json(cli, *argv):
    result = cli("acceptance", *argv, "--json")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    return result.json()


def test_builtin_example_is_khisti_uniform_case(cli):
    out = run_json(cli, "--exact")
    assert out["law"] == "iid" and out["k"] == 2 and out["n"] == 3
    assert out["acceptance"] == {"optimal": "1/1", "single": "5/6"}


def test_optimum_is_reported_beside_any_requested_schemes(cli):
    """Issue 15: ``--scheme specinfer --scheme spectr`` used to drop the optimum."""
    out = run_json(cli, "--target", "12/25,6/25,4/25,3/25", "--draft", "1/4,1/4,1/4,1/4", "--k", "2",
                   "--scheme", "specinfer", "--scheme", "spectr")  # fmt: skip
    assert list(out["acceptance"]) == ["optimal", "specinfer", "spectr"]
    expected = optimal_acceptance(["12/25", "6/25", "4/25", "3/25"], IID(["1/4"] * 4, 2)).value
    assert out["acceptance"]["optimal"] == pytest.approx(expected, abs=1e-12)
    text = cli("acceptance", "--target", "0.9,0.1", "--draft", "0.5,0.5", "--k", "2", "--scheme", "spectr")
    assert [line.split()[0] for line in text.stdout.splitlines()[2:]] == ["optimal", "spectr"]


def test_exact_values_are_exact_fractions(cli):
    out = run_json(cli, "--target", "12/25,6/25,4/25,3/25", "--draft", "1/4,1/4,1/4,1/4", "--k", "2", "--exact", "--scheme", "all")
    law = IID(["1/4"] * 4, 2)
    assert Fraction(out["acceptance"]["optimal"]) == optimal_acceptance(["12/25", "6/25", "4/25", "3/25"], law, exact=True).value
    assert Fraction(out["acceptance"]["single"]) == Fraction(77, 100)  # Σ min(p, q) = 3/25 + 4/25 + 1/4 + 1/4
    assert "specinfer" in out["acceptance"]
    assert all(not SCHEMES[name].capabilities.exact_acceptance for name in out["skipped"])


def test_scheme_all_lists_every_applicable_scheme(cli):
    out = run_json(cli, "--target", "0.5,0.3,0.2", "--draft", "0.2,0.3,0.5", "--k", "2", "--scheme", "all")
    assert {"optimal", "single", "specinfer", "spectr"} <= set(out["acceptance"])
    values = out["acceptance"]
    assert all(values[name] <= values["optimal"] + 1e-9 for name in values)


def test_repeated_draft_means_independent(cli):
    out = run_json(cli, "--target", "0.5,0.3,0.2", "--draft", "0.2,0.3,0.5", "--draft", "0.6,0.2,0.2")
    assert out["law"] == "independent" and out["k"] == 2


def test_wor_with_k_above_n_is_refused(cli):
    result = cli("acceptance", "--target", "0.5,0.5", "--draft", "0.9,0.1", "--k", "3", "--law", "wor")
    assert result.returncode == 2
    assert "without replacement needs k <= n" in result.stderr


def test_readable_table_shows_values_and_fractions_of_the_optimum(cli):
    result = cli("acceptance", "--target", "0.9,0.1", "--draft", "0.5,0.5", "--k", "2")
    assert result.returncode == 0 and result.stderr == ""
    rows = {line.split()[0]: line.split()[1:] for line in result.stdout.splitlines()[2:]}
    assert float(rows["optimal"][0]) == pytest.approx(0.85) and rows["optimal"][1] == "1.0000"
    assert float(rows["single"][0]) == pytest.approx(0.6) and float(rows["single"][1]) == pytest.approx(0.6 / 0.85, abs=1e-4)


BAD_ARGS = [
    pytest.param(["--target", "0.5,x", "--draft", "0.5,0.5", "--k", "2"], "cannot parse entry 1", id="unparsable"),
    pytest.param(["--target", "0.5,0.6", "--draft", "0.5,0.5", "--k", "2"], "sum to", id="sum-off"),
    pytest.param(["--target", "0.5,-0.5,1", "--draft", "0.2,0.3,0.5", "--k", "2"], "negative", id="negative"),
    pytest.param(["--target", "0.5,0.5", "--draft", "0.2,0.3,0.5", "--k", "2"], "does not match", id="length-mismatch"),
    pytest.param(["--target", "0.5,0.5", "--draft", "0.5,0.5", "--k", "0"], "k: the number of drafts must be an integer >= 1", id="k-zero"),
    pytest.param(["--target", "0.5,0.5", "--draft", "0.5,0.5", "--k", "2", "--exact"], "exact", id="exact-with-floats"),
    pytest.param(["--target", "0.5,0.5"], "give both", id="target-without-draft"),
]


@pytest.mark.parametrize("argv, message", BAD_ARGS)
def test_bad_input_is_one_line_and_nonzero(cli, argv, message):
    """A clear one-line message on stderr, exit status 2, no traceback (run as a real process)."""
    result = cli("acceptance", *argv)
    assert result.returncode == 2 and result.stdout == ""
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


# ---------------------------------------------------------------------------------------------
# Issue 20, item 5: what a newcomer tripped over


@pytest.mark.parametrize(
    "argv, flag",
    [(["--s", "3"], "--s"), (["--rank-key", "ratio", "--scheme", "specinfer"], "--rank-key"),
     (["--s", "3", "--law", "wor", "--scheme", "all"], "--s")],  # fmt: skip
    ids=["s-alone", "rank-key-with-specinfer", "s-with-all-under-wor"],
)
def test_a_scheme_option_no_requested_scheme_takes_is_refused(cli, argv, flag):
    """``--s 3`` without truncated-lp or multistage was silently ignored."""
    result = cli("acceptance", *argv)
    assert result.returncode == 2 and result.stdout == "" and result.stderr.count("\n") == 1
    assert f"multidraft acceptance: error: {flag}: only truncated-lp" in result.stderr
    taken = run_json(cli, "--s", "2", "--scheme", "truncated-lp", "--scheme", "multistage")  # the twin: used, accepted
    assert set(taken["acceptance"]) == {"optimal", "truncated-lp", "multistage"}
    # the schemes that take an option are read off their constructors: multistage takes rank_key too
    assert set(run_json(cli, "--rank-key", "ratio", "--scheme", "multistage")["acceptance"]) == {"optimal", "multistage"}


def test_scheme_all_reports_a_scheme_beyond_the_size_guard_as_out_of_range(cli):
    """``--k 1000 --scheme all`` failed the whole command on is-lp with a 478-digit number."""
    out = run_json(cli, "--k", "1000", "--scheme", "all")
    assert out["k"] == 1000 and out["acceptance"]["optimal"] == pytest.approx(1.0)
    assert {"single", "specinfer", "spectr"} <= set(out["acceptance"])
    assert "is-lp" in out["out_of_range"] and "is-lp" not in out["acceptance"]
    for reason in out["out_of_range"].values():
        assert "exceed the limit ENUMERATION_LIMIT" in reason and re.search(r"\de\+\d+ draft tuples", reason)
        assert not re.search(r"\d{16}", reason)  # no integer written out in full
    table = cli("acceptance", "--k", "1000", "--scheme", "all")
    assert table.returncode == 0 and "out of range: is-lp (" in table.stdout
    named = cli("acceptance", "--k", "1000", "--scheme", "is-lp")  # asked for by name: an error
    assert named.returncode == 2 and named.stderr.count("\n") == 1 and not re.search(r"\d{16}", named.stderr)


#: An instance where the importance schemes' float acceptance comes out as 1.0000000000000002.
ROUNDED_ABOVE_ONE = ("--target", "0.389,0.611", "--draft", "0.428,0.5720000000000001", "--k", "3")


def test_rounding_above_one_is_printed_clipped(cli):
    from multidraft.schemes import get_scheme

    raw = get_scheme("is-lp").acceptance([0.389, 0.611], IID([0.428, 0.5720000000000001], 3))
    assert 1.0 < raw <= 1.0 + 1e-12  # the library's own float, as the issue saw it
    out = run_json(cli, *ROUNDED_ABOVE_ONE, "--scheme", "all")
    assert all(0.0 <= value <= 1.0 for value in out["acceptance"].values()), out
    assert out["acceptance"]["is-lp"] == 1.0
    assert "clipped" in cli("acceptance", "--help").stdout


def test_shown_probability_clips_rounding_only():
    from multidraft.cli import ROUNDING, shown_probability

    assert shown_probability(1.0 + ROUNDING / 2) == 1.0 and shown_probability(-ROUNDING / 2) == 0.0
    assert shown_probability(1.0 + 1e-9) == 1.0 + 1e-9  # the twin: a real excess is not hidden
    assert shown_probability(-1e-9) == -1e-9
