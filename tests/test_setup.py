"""The README's set-up as a newcomer runs it: ``make report`` and ``make test`` on a stock
Debian/Ubuntu Python, whose pip refuses installs into the system (PEP 668), so everything goes
through a project virtual environment; and the packaging metadata that every install reads."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parents[1]


def _dry_run(target: str, venv: Path) -> list[list[str]]:
    """The commands ``make TARGET VENV=venv`` would run, split into words."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    done = subprocess.run(["make", "-n", "-C", str(ROOT), target, f"VENV={venv}"], capture_output=True, text=True, check=True)
    return [shlex.split(line) for line in done.stdout.splitlines() if line.strip() and not line.startswith("make")]


@pytest.mark.parametrize("target, program", [("report", "multidraft"), ("test", "python")])
def test_make_installs_into_and_runs_from_the_project_environment(target, program, tmp_path):
    venv = tmp_path / "env"
    commands = _dry_run(target, venv)
    assert commands[0] == ["bash", "scripts/install.sh", str(venv)]
    assert commands[1][0] == str(venv / "bin" / program), commands[1]


def test_make_defaults_to_dot_venv(tmp_path):
    commands = _dry_run("test", Path(".venv"))
    assert commands[0][-1] == ".venv" and commands[1][0] == ".venv/bin/python"
    assert "/.venv/" in (ROOT / ".gitignore").read_text().splitlines()


def test_install_script_never_installs_into_the_system_python():
    """Every pip call goes through the environment's own interpreter; the system python3 only
    makes the environment (and python3-venv is installed where Debian left venv out)."""
    script = (ROOT / "scripts" / "install.sh").read_text()
    lines = [line.strip() for line in script.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    pip_lines = [line for line in lines if "pip install" in line]
    assert pip_lines and all(line.startswith('"$py" -m pip install') for line in pip_lines), pip_lines
    assert 'python3 -m venv "$venv"' in lines
    assert any("apt_install python3-venv" in line for line in lines)


def test_ci_rehearses_the_system_python():
    """CI runs the README's test command with PATH cut to the system's directories, so a pyenv
    or an activated environment cannot stand in for the stock python3."""
    run = (ROOT / ".ci" / "run").read_text()
    assert "export PATH=/usr/sbin:/usr/bin:/sbin:/bin" in run
    assert run.index("export PATH=") < run.index("make test")


def test_license_is_an_spdx_expression():
    """``project.license`` as a table is deprecated by setuptools (a warning at every install,
    an error from 2027-02-18); an SPDX string needs setuptools >= 77 (PEP 639)."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert pyproject["project"]["license"] == "MIT"
    assert "setuptools>=77" in pyproject["build-system"]["requires"]


def test_torch_constraint_says_what_it_does_elsewhere():
    text = (ROOT / "constraints.txt").read_text()
    assert "torch==2.13.0" in text.splitlines()
    assert "CUDA build" in text and "CPU wheel index" in text
