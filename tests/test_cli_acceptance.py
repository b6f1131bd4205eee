"""The ``multidraft acceptance`` command, run as the installed console script: the JSON
contract, the optimum always present, exactness and one-line errors."""

from __future__ import annotations

import re
from fractions import Fraction

import pytest

from multidraft.schemes import SCHEMES
from multidraft.theory import IID, WithoutReplacement, optimal_acceptance


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


# ---------------------------------------------------------------------------------------------
# A newcomer's first hour (issue 28, item 5): from "K drafts at temperature T" to a number


def test_a_family_at_draft_temperatures_gives_the_library_values(cli):
    """``acceptance`` took hand-typed probability lists only; a built-in family at a vocabulary
    n with target and draft temperatures now gives the number, the same as the library's."""
    import numpy as np

    from multidraft.schemes import get_scheme
    from multidraft.theory import Independent, softmax, zipf

    out = run_json(cli, "--family", "zipf", "--n", "300", "--exponent", "1.2", "--k", "3", "--target-temperature", "0.8",
                   "--draft-temperature", "1.5", "--scheme", "specinfer")  # fmt: skip
    logits = np.log(zipf(300, 1.2))
    target, law = softmax(logits, 0.8), IID(softmax(logits, 1.5), 3)
    assert out["law"] == "iid" and out["k"] == 3 and out["n"] == 300
    assert out["acceptance"]["optimal"] == pytest.approx(optimal_acceptance(target, law).value, abs=1e-12)
    assert out["acceptance"]["specinfer"] == pytest.approx(get_scheme("specinfer").acceptance(target, law), abs=1e-12)
    assert out["source"] == {"family": "zipf", "n": 300, "exponent": 1.2, "target_temperature": 0.8, "draft_temperatures": [1.5]}
    pair = run_json(cli, "--family", "zipf", "--n", "300", "--draft-temperature", "0.5", "2")  # K temperatures: independent drafts
    logits = np.log(zipf(300, 1.1))
    expected = optimal_acceptance(softmax(logits), Independent([softmax(logits, 0.5), softmax(logits, 2.0)])).value
    assert pair["law"] == "independent" and pair["k"] == 2 and pair["acceptance"]["optimal"] == pytest.approx(expected, abs=1e-12)
    text = cli("acceptance", "--family", "zipf", "--n", "300", "--k", "2", "--draft-temperature", "2")
    assert text.stdout.splitlines()[0] == "law iid, k = 2, n = 300; logits zipf(n=300, exponent=1.1), target T = 1.0, draft T = 2.0"


def test_logits_from_npy_files(cli, tmp_path):
    """Target and draft logits saved with numpy; a draft file of m rows gives m independent drafts."""
    import numpy as np

    from multidraft.theory import softmax

    target, drafts = np.array([2.0, 1.0, 0.5, -1.0]), np.array([[1.0, 1.0, 0.5, 0.0], [0.0, 0.0, 0.0, 0.0]])
    np.save(tmp_path / "p.npy", target)
    np.save(tmp_path / "q.npy", drafts)
    argv = ("--target-logits", str(tmp_path / "p.npy"), "--draft-logits", str(tmp_path / "q.npy"), "--draft-temperature", "0.7")
    out = run_json(cli, *argv)
    from multidraft.theory import Independent

    law = Independent([softmax(drafts[0], 0.7), softmax(drafts[1], 0.7)])
    assert out["law"] == "independent" and out["acceptance"]["optimal"] == pytest.approx(optimal_acceptance(softmax(target), law).value, abs=1e-12)
    own = run_json(cli, "--target-logits", str(tmp_path / "p.npy"), "--k", "2", "--law", "wor", "--draft-temperature", "1.5")
    expected = optimal_acceptance(softmax(target), WithoutReplacement(softmax(target, 1.5), 2)).value  # drafting with the target's logits
    assert own["law"] == "wor" and own["acceptance"]["optimal"] == pytest.approx(expected, abs=1e-12)
    np.save(tmp_path / "short.npy", np.zeros(3))
    refused = cli("acceptance", "--target-logits", str(tmp_path / "p.npy"), "--draft-logits", str(tmp_path / "short.npy"), "--k", "2")
    assert refused.returncode == 2 and "draft-logits: expected [n] or [m, n] logits with n = 4 (the target's), got shape (3,)" in refused.stderr


def test_the_table_prints_six_significant_digits_unless_asked_and_json_keeps_all(cli):
    """The table printed 12 decimals (0.833333333333); now 6 significant digits by default,
    ``--digits`` for more or fewer, and JSON every digit."""
    rows = lambda result: {line.split()[0]: line.split()[1] for line in result.stdout.splitlines()[2:]}  # noqa: E731
    default = cli("acceptance")
    assert rows(default) == {"optimal": "1.00000", "single": "0.833333"}, default.stdout
    assert rows(cli("acceptance", "--digits", "3")) == {"optimal": "1.00", "single": "0.833"}
    assert rows(cli("acceptance", "--digits", "12")) == {"optimal": "1.00000000000", "single": "0.833333333333"}
    single = run_json(cli)["acceptance"]["single"]
    assert single == pytest.approx(5 / 6, abs=1e-15) and len(repr(single)) >= 17  # JSON: full precision
    assert rows(cli("acceptance", "--exact")) == {"optimal": "1", "single": "5/6"}  # fractions stay fractions


LOGIT_BAD_ARGS = [
    pytest.param(["--target", "0.5,0.5", "--draft", "0.5,0.5", "--k", "2", "--draft-temperature", "2"],
                 "--draft-temperature: acts on logits, but --target/--draft give probabilities", id="temperature-on-probabilities"),
    pytest.param(["--k", "2", "--draft-temperature", "2"], "--draft-temperature: needs the logits it acts on", id="temperature-alone"),
    pytest.param(["--family", "zipf", "--k", "2"], "n: --family zipf needs --n", id="family-without-n"),
    pytest.param(["--family", "zipf", "--n", "10", "--k", "2", "--exact"], "exact: softmax of logits gives floats", id="family-exact"),
    pytest.param(["--family", "zipf", "--n", "10", "--k", "2", "--alpha", "1"], "--alpha: not a parameter of --family zipf", id="foreign-parameter"),
    pytest.param(["--family", "zipf", "--n", "10", "--k", "2", "--draft-temperature", "-1"], "draft-temperature: must be a finite number >= 0", id="negative-temperature"),
    pytest.param(["--family", "zipf", "--n", "10", "--draft-temperature", "1.5"], "k: a single --draft-temperature needs --k", id="no-k"),
    pytest.param(["--family", "zipf", "--n", "10", "--draft-temperature", "1", "2", "--law", "wor"], "law: several --draft-temperature values", id="law-with-several"),
    pytest.param(["--target-logits", "no-such-file.npy", "--k", "2"], "target-logits: cannot read no-such-file.npy", id="missing-file"),
    pytest.param(["--digits", "0"], "digits: expected 1 to 17 significant digits, got 0", id="digits-zero"),
]  # fmt: skip


@pytest.mark.parametrize("argv, message", LOGIT_BAD_ARGS)
def test_the_logits_route_refuses_bad_input_in_one_line(cli, argv, message):
    result = cli("acceptance", *argv)
    assert result.returncode == 2 and result.stdout == "" and result.stderr.count("\n") == 1, result.stderr
    assert message in result.stderr, result.stderr
