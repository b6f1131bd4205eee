"""Shared test configuration: hypothesis profiles, the ``cli`` fixture that runs the
installed console script, and the fixtures the decoding tests share.

Profiles: ``ci`` (the default under CI=true: derandomised, so a run is reproducible) and
``dev`` (more examples locally). Select with ``HYPOTHESIS_PROFILE=dev``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sysconfig
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("dev", max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


# ---------------------------------------------------------------------------------------------
# The command line as users run it: the installed console script in a subprocess.


@dataclass(frozen=True)
class CliResult:
    """Exit status and everything the process wrote to its file descriptors 1 and 2."""

    returncode: int
    stdout: str
    stderr: str

    def json(self) -> object:
        """The whole of stdout parsed as one JSON document (fails on any stray byte)."""
        return json.loads(self.stdout)


def console_script() -> str:
    """The installed ``multidraft`` script of this Python environment (not a shim on PATH)."""
    script = Path(sysconfig.get_path("scripts")) / "multidraft"
    found = str(script) if script.is_file() else shutil.which("multidraft")
    assert found, "the multidraft console script is not installed (pip install -e .)"
    return found


def run_cli(*argv: str, timeout: float = 600, cwd: str | os.PathLike | None = None) -> CliResult:
    """Run ``multidraft ARGV...`` as a user would, in a fresh process (the code under test is
    the one on ``PYTHONPATH`` when set, which the subprocess inherits)."""
    done = subprocess.run([console_script(), *argv], capture_output=True, text=True, timeout=timeout, cwd=cwd)
    return CliResult(done.returncode, done.stdout, done.stderr)


@pytest.fixture
def cli() -> Callable[..., CliResult]:
    """``cli("acceptance", "--json")``: run the installed console script, see :func:`run_cli`."""
    return run_cli


def _torch_devices() -> list[str]:
    """The torch devices present: CPU always, CUDA when torch reports one."""
    try:
        import torch
    except ImportError:
        return ["cpu"]
    return ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.fixture(scope="module", params=_torch_devices())
def device(request):
    """Each torch device present (a GPU run of the suite exercises the CUDA paths)."""
    import torch

    return torch.device(request.param)


@pytest.fixture(scope="module")
def one_thread():
    """One torch thread for tiny models: on a busy 2-core machine OpenMP with 2 threads is many
    times slower, and the other core stays with the other tests."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
