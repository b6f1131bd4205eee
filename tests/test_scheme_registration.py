"""A scheme registered from outside the package (tests/registered_scheme.py, ``first-draft``)
is taken up by name everywhere a scheme name is taken, without editing those places: the
registry tests, the command line, decoding and the report."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from registered_scheme import FirstDraft

from multidraft.cli import main
from multidraft.schemes import SCHEMES, Capabilities, Scheme, get_scheme, register_scheme, schemes_for
from multidraft.theory import IID, Independent, WithoutReplacement

TESTS = Path(__file__).resolve().parent


@pytest.fixture
def registered():
    """``first-draft`` registered for one test (the registry is global: it is removed after)."""
    register_scheme(FirstDraft)
    yield FirstDraft
    SCHEMES.pop(FirstDraft.name)


def test_the_registry_tests_are_parametrised_over_it():
    """``pytest -p registered_scheme`` registers it before collection: the unedited registry
    tests collect it beside the built-in schemes, and it passes them."""
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "registered_scheme",
               str(TESTS / "test_schemes.py"), "-k", "first-draft", "-W", "error"]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run(command, capture_output=True, text=True, cwd=TESTS.parent, env=env, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    passed = int(re.search(r"(\d+) passed", done.stdout).group(1))
    # lossless, acceptance (two routes), any-vocabulary laws (iid, independent): at least 4
    assert passed >= 4, done.stdout[-2000:]


def test_it_is_found_by_law(registered):
    assert SCHEMES["first-draft"] is FirstDraft
    assert schemes_for(IID([0.5, 0.5], 2))[-1] == "first-draft"
    assert "first-draft" not in schemes_for(WithoutReplacement([0.5, 0.5], 2))


def test_its_closed_form_is_the_enumerated_acceptance(registered):
    """The closed form of its module docstring against enumeration, exactly."""
    law = Independent([["1/2", "1/4", "1/4"], ["0", "1/2", "1/2"], ["1/3", "1/3", "1/3"]])
    target = ["1/6", "1/2", "1/3"]
    plan = get_scheme("first-draft").prepare(target, law, exact=True)
    assert plan.acceptance == plan.enumerated_acceptance()
    assert list(plan.output_distribution()) == [Fraction(1, 6), Fraction(1, 2), Fraction(1, 3)]


def test_register_scheme_refuses_what_is_not_a_scheme():
    with pytest.raises(TypeError, match="expected a Scheme subclass"):
        register_scheme(FirstDraft())

    class Nameless(FirstDraft):
        name = ""

    with pytest.raises(ValueError, match="needs a registry name"):
        register_scheme(Nameless)

    class Taken(FirstDraft):
        name = "specinfer"

    with pytest.raises(ValueError, match="taken by SpecInfer"):
        register_scheme(Taken)

    class NoCapabilities(Scheme):
        name = "no-capabilities"
        capabilities = {"laws": (IID,)}

        def _prepare(self, p, law, exact):
            raise AssertionError

    with pytest.raises(ValueError, match="capabilities must be a Capabilities value"):
        register_scheme(NoCapabilities)
    assert "no-capabilities" not in SCHEMES
    with pytest.raises(ValueError, match="any_vocabulary names laws outside laws: WithoutReplacement"):
        Capabilities(laws=(IID,), any_vocabulary=(WithoutReplacement,))


def test_the_command_line_takes_it_by_name(registered, capfd):
    """In this process (where it is registered): ``--scheme first-draft``, ``--scheme all`` and
    the help's list of schemes."""
    target, draft = "1/6,1/2,1/3", "1/2,1/4,1/4"
    options = ["acceptance", "--target", target, "--draft", draft, "--k", "2"]
    assert main([*options, "--scheme", "first-draft", "--exact", "--json"]) == 0
    out = json.loads(capfd.readouterr().out)
    law = IID(draft.split(","), 2)
    assert out["acceptance"]["first-draft"] == str(FirstDraft().acceptance(target.split(","), law, exact=True))
    assert main([*options, "--scheme", "all", "--json"]) == 0
    assert "first-draft" in json.loads(capfd.readouterr().out)["acceptance"]
    with pytest.raises(SystemExit):
        main(["acceptance", "--help"])
    assert re.search(r"first-\s*draft", capfd.readouterr().out)  # argparse may wrap at the hyphen


def test_decoding_runs_it_by_name(registered):
    from multidraft.decoding import measure
    from test_decoding import tiny_model

    model = tiny_model(0)
    results = measure(model, None, k=2, length=2, prompts=["a"], max_new_tokens=4, progress=False,
                      baseline=False, scheme="first-draft", keep_distributions=True)  # fmt: skip
    assert results.config.scheme_name == "first-draft" and results.positions > 0
    for record in results.records:
        law = IID(record.drafts[0], record.k_live, normalize=True)
        np.testing.assert_allclose(record.expected, FirstDraft().acceptance(record.target, law), rtol=0, atol=1e-15)


def test_the_report_gives_it_a_column(registered):
    """The gap table gains a column for a registered scheme that runs at any vocabulary size
    (the built-in columns and their order unchanged), empty with a note for a law it lacks."""
    from multidraft.report.gap_table import GAP_COLUMNS, gap_columns, position_gap_table
    from multidraft.report.positions import zipf_positions

    assert gap_columns() == GAP_COLUMNS[:-1] + ("first-draft",) + GAP_COLUMNS[-1:]
    positions = zipf_positions(30, 2, np.random.default_rng(0))
    table = position_gap_table(positions, ks=(2,), temperatures=(1.2,), pairs=((0.8, 1.6),), s=2)
    assert [tuple(row.values) for row in table.rows] == [gap_columns()] * 3
    iid, wor, pair = table.rows
    scheme = FirstDraft()
    targets, drafts = positions.targets, positions.drafts(1.2)
    expected = np.mean([scheme.acceptance(p, IID(q, 2)) for p, q in zip(targets, drafts)])
    np.testing.assert_allclose(iid.values["first-draft"], expected, rtol=0, atol=1e-15)
    assert wor.values["first-draft"] is None and "does not support the wor law" in wor.notes["first-draft"]
    assert pair.values["first-draft"] <= pair.optimal + 1e-12


def test_without_it_the_registry_is_the_built_in_one():
    assert "first-draft" not in SCHEMES
    from multidraft.report.gap_table import GAP_COLUMNS, gap_columns

    assert gap_columns() == GAP_COLUMNS
