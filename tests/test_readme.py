"""The README is followed exactly as written: each Python block runs and prints exactly the text
block under it, each command of the command-line tour prints exactly what follows it, its
set-up is the two Makefile commands, and the figure it shows is in the repository.

"Exactly" is doctest's comparison with ``ELLIPSIS``: ``...`` in the README stands for any text
(digits that depend on the platform's floating point, or timings), nothing else is skipped.
"""

from __future__ import annotations

import doctest
import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
#: Every fenced block in order: (language, text).
FENCES = re.findall(r"```(\w*)\n(.*?)```", README, flags=re.S)


def _blocks(language: str) -> list[str]:
    return [text for lang, text in FENCES if lang == language]


def _python_examples() -> list[tuple[str, str | None]]:
    """Each Python block with the ``text`` block right after it (its printed output), if any."""
    examples = []
    for index, (language, text) in enumerate(FENCES):
        if language == "python":
            following = FENCES[index + 1] if index + 1 < len(FENCES) else ("", "")
            examples.append((text, following[1] if following[0] == "text" else None))
    return examples


PYTHON = _python_examples()
#: Blocks that load a language model (slow on a CPU); they show no output to compare.
HEAVY = [i for i, (block, _) in enumerate(PYTHON) if "multidraft.decoding" in block]


def assert_prints(expected: str, got: str, where: str) -> None:
    """``got`` equals ``expected``, where ``...`` in ``expected`` matches any text."""
    checker = doctest.OutputChecker()
    if not checker.check_output(expected, got, doctest.ELLIPSIS):
        example = doctest.Example(where, expected)
        pytest.fail(f"{where} does not print what the README shows:\n" + checker.output_difference(example, got, doctest.ELLIPSIS))


def test_readme_has_the_api_tour():
    assert len(PYTHON) >= 5
    for name in ("optimal_acceptance", "get_scheme", "transport_lp", "unit_inequalities", "measure"):
        assert any(name in block for block, _ in PYTHON), name
    assert all(output is not None for i, (_, output) in enumerate(PYTHON) if i not in HEAVY), "every light block shows its output"


@pytest.mark.parametrize(
    "index",
    [pytest.param(i, marks=pytest.mark.slow) if i in HEAVY else i for i in range(len(PYTHON))],
    ids=[f"block{i}" for i in range(len(PYTHON))],
)
def test_python_block_prints_what_the_readme_shows(index, capfd):
    block, expected = PYTHON[index]
    exec(compile(block, f"README.md python block {index}", "exec"), {"__name__": "__readme__"})
    captured = capfd.readouterr()  # file descriptors: a C library's output would show up here
    assert captured.err == "", captured.err
    if expected is None:
        assert captured.out.strip(), "every tour block prints its result"
    else:
        assert_prints(expected, captured.out, f"python block {index}")


def _console_examples() -> list[tuple[list[str], str]]:
    """``(argv, expected output)`` for each ``$ multidraft ...`` line of the console blocks."""
    examples: list[tuple[list[str], list[str]]] = []
    for block in _blocks("console"):
        for line in block.splitlines():
            if line.startswith("$ "):
                words = shlex.split(line[2:])
                assert words[0] == "multidraft", line
                examples.append((words[1:], []))
            else:
                examples[-1][1].append(line)
    return [(argv, "\n".join(lines) + "\n") for argv, lines in examples]


CONSOLE = _console_examples()


@pytest.mark.parametrize("argv, expected", CONSOLE, ids=[" ".join(argv)[:40] for argv, _ in CONSOLE])
def test_command_prints_what_the_readme_shows(argv, expected, cli):
    result = cli(*argv)
    assert_prints(expected, result.stdout + result.stderr, "multidraft " + " ".join(argv))
    assert result.returncode == (2 if ": error: " in expected else 0)


def test_setup_is_exactly_the_two_make_commands():
    setup = _blocks("bash")[0]
    commands = [line.split("#")[0].strip() for line in setup.splitlines() if line.strip()]
    assert commands == ["make report", "make test"]
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^report:", makefile, flags=re.M) and re.search(r"^test:", makefile, flags=re.M)
    assert "/multidraft\" report" in makefile


def _listed_commands() -> list[list[str]]:
    """Every ``multidraft ...`` command of the tours (shown with output or not)."""
    commands = [argv for argv, _ in CONSOLE]
    for block in _blocks("bash"):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words and words[0] == "multidraft":
                commands.append(words[1:])
    return commands


def test_every_tour_command_is_a_known_subcommand():
    from multidraft.cli import COMMAND_MODULES

    commands = _listed_commands()
    assert {c[0] for c in commands} <= set(COMMAND_MODULES)
    assert set(COMMAND_MODULES) - {"measure", "profile", "report"} <= {argv[0] for argv, _ in CONSOLE}


def test_readme_figure_is_committed():
    images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", README)
    assert images, "the README shows one figure from the report"
    for image in images:
        path = ROOT / image
        assert path.is_file() and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", image
        assert path.stat().st_size < 200_000, "keep the committed figure small"


def test_the_comparison_can_fail():
    """The twin: a single wrong character is caught; ``...`` matches what it stands for."""
    with pytest.raises(pytest.fail.Exception):
        assert_prints("1 []\n5/6\n", "1 []\n5/7\n", "twin")
    assert_prints("time ... s\n", "time 0.0123 s\n", "twin")
