"""The contract of the ``multidraft`` command as scripts use it, checked on the installed console
script in fresh processes (C libraries write to file descriptor 1, which only a real process
shows): every sub-command's ``--json`` is exactly one JSON document on stdout, and no solver
prints a byte on stdout or stderr unless asked (issue 15, items 1 and 7)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from multidraft import __version__

#: One ``--json`` run per sub-command (the slow ones load the bundled model or build the report).
JSON_RUNS = [
    pytest.param(["acceptance", "--scheme", "all"], id="acceptance"),
    pytest.param(["lp", "--target", "0.5,0.3,0.2", "--draft", "0.2,0.3,0.5", "--k", "2", "--plan"], id="lp"),
    pytest.param(["cones", "--n", "3", "--k", "2"], id="cones"),
    pytest.param(["speedup", "--acceptance", "0.8", "--length", "4", "--cost-ratio", "0.05"], id="speedup"),
    pytest.param(["budget", "--acceptance", "0.6,0.15,0.07", "--budget", "4", "16"], id="budget"),
    pytest.param(
        ["measure", "--k", "2", "--length", "1", "--max-new-tokens", "2", "--prompt", "Hi", "--threads", "1"],
        id="measure",
        marks=pytest.mark.slow,
    ),
    pytest.param(
        ["profile", "--batch-sizes", "1,2", "--token-counts", "1,2", "--repeats", "1", "--warmup", "0", "--context", "4"],
        id="profile",
        marks=pytest.mark.slow,
    ),
]


def test_json_runs_cover_every_sub_command():
    from multidraft.cli import COMMAND_MODULES

    covered = {run.values[0][0] for run in JSON_RUNS} | {"report"}  # report: test_report_json below
    assert covered == set(COMMAND_MODULES)


@pytest.mark.parametrize("argv", JSON_RUNS)
def test_json_is_exactly_one_document_on_stdout(cli, argv):
    if argv[0] in ("measure", "profile"):
        pytest.importorskip("torch")
    result = cli(*argv, "--json")
    assert result.returncode == 0, result.stderr
    assert isinstance(result.json(), dict)  # json.loads fails on any byte before or after
    assert "Warning" not in result.stderr  # e.g. a library's FutureWarning (transformers 5.24)


@pytest.mark.slow
def test_report_json(cli, tmp_path):
    """``multidraft report --json``: one document naming the files it wrote; the files are the report."""
    out = tmp_path / "report"
    result = cli("report", "--out", str(out), "--json")
    assert result.returncode == 0, result.stderr
    written = result.json()
    assert written["markdown"] == str(out / "report.md") and written["html"] == str(out / "report.html")
    results = json.loads((out / "results.json").read_text())
    assert written["json"] == str(out / "results.json")
    assert results["config"]["n"] == 49152
    assert [r["k"] for r in results["sections"]["gap_table"]["rows"][:15:5]] == [2, 4, 8]
    assert f"Built in **{results['timings']['wall_seconds']:.1f} s**" in (out / "report.md").read_text()


def test_version_and_help(cli):
    assert cli("--version").stdout == f"multidraft {__version__}\n"
    help_text = cli("acceptance", "--help").stdout
    from multidraft.schemes import SCHEMES

    listed = " ".join(help_text.split()).replace("- ", "-")  # argparse wraps at hyphens
    assert all(name in listed for name in SCHEMES), "every scheme name is listed in --scheme's help"


def test_the_package_declares_its_type_hints():
    """PEP 561: ``py.typed`` ships with the package, so type checkers read its annotations."""
    from importlib.resources import files
    from pathlib import Path

    assert files("multidraft").joinpath("py.typed").is_file()
    pyproject = (Path(__file__).resolve().parent.parent / "pyproject.toml").read_text()
    assert 'multidraft = ["py.typed", "decoding/data/*.jsonl"]' in pyproject
    # issue 32: the bundled prompt set ships as package data beside it
    assert files("multidraft.decoding").joinpath("data", "prompts.jsonl").is_file()


# ------------------------------------------------------------------------------ silent solvers

#: Run in a fresh process so that each solver starts cold (HiGHS prints its banner once per
#: process, from C, at the first solve). The script itself prints nothing: what it computed
#: goes to the file named in argv[1].
_SOLVE_SCRIPT = textwrap.dedent(
    """
    import sys
    from multidraft.lp import SolverError, pair_importance_lp, solver_output, transport_lp, truncated_lp, importance_lp
    from multidraft.lp.cones import acceptance_formulas
    from multidraft.theory import IID

    kind, solver, verbose = sys.argv[2], sys.argv[3], sys.argv[4] == "1"
    target, draft = [0.5, 0.3, 0.2], [0.2, 0.3, 0.5]
    try:
        if kind == "transport":
            value = transport_lp(target, IID(draft, 2), solver=solver, verbose=verbose).acceptance
        elif kind == "importance":
            value = importance_lp(target, IID(draft, 3), solver=solver, verbose=verbose).acceptance
        elif kind == "pair":
            value = pair_importance_lp(target, draft, solver=solver, verbose=verbose).acceptance
        elif kind == "truncated":
            with solver_output(verbose):  # the truncated selection takes no verbose argument
                value = truncated_lp(target, draft, s=2, solver=None if solver == "-" else solver).acceptance
        else:
            value = len(acceptance_formulas(3, 2).formulas)
        outcome = repr(value)
    except SolverError as error:  # a solver may fail on an LP; it must still fail silently
        outcome = "SolverError"
    open(sys.argv[1], "w").write(outcome)
    """
)


def _solve_in_fresh_process(tmp_path, kind: str, solver: str, verbose: bool = False):
    outcome = tmp_path / "outcome"
    done = subprocess.run(
        [sys.executable, "-c", _SOLVE_SCRIPT, str(outcome), kind, solver, "1" if verbose else "0"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return done, outcome.read_text()


def _lp_solvers() -> list[str]:
    """The installed solvers the certified LPs offer (first-order ones are refused up front)."""
    from multidraft.lp._solve import ROUTES, installed_solvers

    return [name for name in installed_solvers() if name in ROUTES]


@pytest.mark.parametrize("solver", _lp_solvers())
@pytest.mark.parametrize("kind", ["transport", "importance", "pair"])
def test_every_cvxpy_solver_is_silent(tmp_path, kind, solver):
    done, outcome = _solve_in_fresh_process(tmp_path, kind, solver)
    assert (done.stdout, done.stderr) == ("", ""), f"{solver} printed on a {kind} LP"
    assert outcome == "SolverError" or 0 < float(outcome) <= 1 + 1e-6


@pytest.mark.parametrize("solver", ["-", "CLARABEL"])
def test_truncated_selection_is_silent(tmp_path, solver):
    """Its default (the min-norm point) uses no solver; a named QP solver goes through cvxpy."""
    done, outcome = _solve_in_fresh_process(tmp_path, "truncated", solver)
    assert (done.stdout, done.stderr) == ("", "") and 0 < float(outcome) <= 1


def test_cones_are_silent(tmp_path):
    done, outcome = _solve_in_fresh_process(tmp_path, "cones", "-")
    assert (done.stdout, done.stderr) == ("", "") and int(outcome) == 7


def test_verbose_lets_the_log_through_on_stderr(tmp_path):
    """The twin that shows the silence tests can fail: asked for its log, HiGHS prints it."""
    done, outcome = _solve_in_fresh_process(tmp_path, "transport", "HIGHS", verbose=True)
    assert done.stdout == "" and "HiGHS" in done.stderr
    done, _ = _solve_in_fresh_process(tmp_path, "truncated", "CLARABEL", verbose=True)
    assert done.stdout == "" and "Clarabel" in done.stderr


def test_solver_silence_in_process(capfd):
    """The same inside one process (a notebook): nothing on descriptors 1 and 2, and output
    written by Python before and after the solve is kept in order."""
    from multidraft.lp import transport_lp
    from multidraft.theory import IID

    print("before", flush=True)
    transport_lp([0.5, 0.5], IID([0.5, 0.5], 2))
    print("after")
    captured = capfd.readouterr()
    assert (captured.out, captured.err) == ("before\nafter\n", "")
