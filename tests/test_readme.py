"""The README is followed exactly as written: its Python blocks run, its command-line tour runs,
its set-up is the two Makefile commands, and the figure it shows is in the repository."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README, flags=re.S)


PYTHON = _blocks("python")
#: Blocks that load a language model (slow on a CPU).
HEAVY = [i for i, block in enumerate(PYTHON) if "multidraft.decoding" in block]


def test_readme_has_the_api_tour():
    assert len(PYTHON) >= 5
    for name in ("optimal_acceptance", "get_scheme", "transport_lp", "unit_inequalities", "measure"):
        assert any(name in block for block in PYTHON), name


@pytest.mark.parametrize(
    "index",
    [pytest.param(i, marks=pytest.mark.slow) if i in HEAVY else i for i in range(len(PYTHON))],
    ids=[f"block{i}" for i in range(len(PYTHON))],
)
def test_python_block_runs(index, capsys):
    namespace: dict = {"__name__": "__readme__"}
    exec(compile(PYTHON[index], f"README.md python block {index}", "exec"), namespace)
    assert capsys.readouterr().out.strip(), "every tour block prints its result"


def test_setup_is_exactly_the_two_make_commands():
    setup = _blocks("bash")[0]
    commands = [line.split("#")[0].strip() for line in setup.splitlines() if line.strip()]
    assert commands == ["make report", "make test"]
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^report:", makefile, flags=re.M) and re.search(r"^test:", makefile, flags=re.M)
    assert "multidraft report" in makefile


def _tour_commands() -> list[list[str]]:
    tour = next(block for block in _blocks("bash") if "multidraft acceptance" in block)
    joined = tour.replace("\\\n", " ")
    commands = []
    for line in joined.splitlines():
        words = shlex.split(line, comments=True)
        if words and words[0] == "multidraft":
            commands.append(words[1:])
    return commands


#: Tour commands cheap enough to run in the unit tests (no model, no full report).
FAST = [c for c in _tour_commands() if c[0] in ("acceptance", "lp", "cones", "speedup")]


@pytest.mark.parametrize("argv", FAST, ids=[" ".join(c)[:40] for c in FAST])
def test_cli_tour_command_runs(argv, cli):
    result = cli(*argv)
    assert result.returncode == 0 and result.stderr == "", result.stderr
    assert result.stdout.strip()


def test_every_tour_command_is_a_known_subcommand():
    from multidraft.cli import COMMAND_MODULES

    commands = _tour_commands()
    assert {c[0] for c in commands} <= set(COMMAND_MODULES)
    assert {"acceptance", "report"} <= {c[0] for c in commands}


def test_readme_figure_is_committed():
    images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", README)
    assert images, "the README shows one figure from the report"
    for image in images:
        path = ROOT / image
        assert path.is_file() and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", image
        assert path.stat().st_size < 200_000, "keep the committed figure small"


def test_first_tour_blocks_print_what_their_comments_say(capsys):
    """The values the README states in comments are the values the code prints."""
    exec(compile(PYTHON[0], "README.md python block 0", "exec"), {"__name__": "__readme__"})
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "1 []"
    assert lines[1] == "5/6"
    assert "holds=False" in lines[2] and "violating_set=array([1])" in lines[2]
    scheme_block = next(i for i, block in enumerate(PYTHON) if "get_scheme" in block)
    exec(compile(PYTHON[scheme_block], "README.md scheme block", "exec"), {"__name__": "__readme__"})
    assert capsys.readouterr().out.splitlines()[1] == "8/9"
