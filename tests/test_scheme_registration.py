"""A scheme registered from outside the package (tests/registered_scheme.py, ``first-draft``)
is taken up by name everywhere a scheme name is taken, without editing those places: the
registry tests, the command line, decoding and the report."""

from __future__ import annotations

import json
import re
from fractions import Fraction

import numpy as np
import pytest
from registered_scheme import FirstDraft

import test_schemes
from multidraft.cli import main
from multidraft.schemes import SCHEMES, Capabilities, Scheme, get_scheme, register_scheme, schemes_for
from multidraft.theory import IID, Independent, WithoutReplacement


def test_it_is_registered_and_in_the_registry_tests():
    assert SCHEMES["first-draft"] is FirstDraft
    assert schemes_for(IID([0.5, 0.5], 2))[-1] == "first-draft"
    assert ("first-draft", "iid") in test_schemes.PAIRS and ("first-draft", "independent") in test_schemes.PAIRS


def test_its_closed_form_is_the_enumerated_acceptance():
    """The closed form of the module docstring against enumeration, exactly (the registry
    tests check the same on hypothesis instances)."""
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


def test_the_command_line_takes_it_by_name(capfd):
    """In this process (where it is registered): ``--scheme first-draft`` and ``--scheme all``."""
    target, draft = "1/6,1/2,1/3", "1/2,1/4,1/4"
    assert main(["acceptance", "--target", target, "--draft", draft, "--k", "2", "--scheme", "first-draft", "--exact", "--json"]) == 0
    out = json.loads(capfd.readouterr().out)
    law = IID(draft.split(","), 2)
    assert out["acceptance"]["first-draft"] == str(FirstDraft().acceptance(target.split(","), law, exact=True))
    assert main(["acceptance", "--target", target, "--draft", draft, "--k", "2", "--scheme", "all", "--json"]) == 0
    assert "first-draft" in json.loads(capfd.readouterr().out)["acceptance"]
    with pytest.raises(SystemExit):
        main(["acceptance", "--help"])
    assert re.search(r"first-\s*draft", capfd.readouterr().out)  # argparse may wrap at the hyphen


def test_the_report_gives_it_a_column():
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
