"""Freed memory kept in the process (:mod:`multidraft._allocator`): with glibc's thresholds fixed
a process's freed rows are reused without page faults; with glibc's own they can come back fresh
from the system every time (the twin, which the same check flags). Each case runs in a new
process, since the setting holds for the whole process."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import textwrap

import pytest

import multidraft
from multidraft._allocator import MAPPED_FROM, retain_freed_memory, retained_environment

glibc = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc's malloc thresholds (Linux with glibc)"
)

#: After one 1 MiB row freed (glibc then serves smaller rows from its heap and trims a free top
#: past 2 MiB), eight rows of 512 KiB (1,024 pages) are filled and freed, six times; prints the
#: minor page faults of each round.
_ROUNDS = """
import resource
import numpy as np
first = np.ones(1 << 17)
del first
faults = []
for _ in range(6):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    rows = [np.ones(1 << 16) for _ in range(8)]
    del rows
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(faults)
"""
_PAGES = 8 * (1 << 16) * 8 // 4096


def _faults(setup: str = "", environment: dict[str, str] | None = None) -> list[int]:
    """The faults of :data:`_ROUNDS`' rounds after the first, in a new process after ``setup``."""
    code = textwrap.dedent(setup) + _ROUNDS
    variables = {key: value for key, value in os.environ.items() if not key.startswith("MALLOC_")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env={**variables, **(environment or {})})
    return eval(done.stdout.splitlines()[-1])[1:]  # noqa: S307 - our own subprocess's list of ints


def _reused(faults: list[int]) -> bool:
    return max(faults) < 0.05 * _PAGES


@glibc
def test_glibcs_own_thresholds_give_the_rows_back_every_round():
    """The twin: without the setting the same rounds fault on (nearly) every page."""
    faults = _faults()
    assert min(faults) > 0.5 * _PAGES
    assert not _reused(faults)


@glibc
def test_retained_rows_are_reused_without_faults():
    assert _reused(_faults("import multidraft\nassert multidraft.retain_freed_memory() is True\n"))


@glibc
def test_the_environment_sets_the_same_for_a_new_process():
    assert retained_environment() == {"MALLOC_MMAP_THRESHOLD_": str(MAPPED_FROM), "MALLOC_TRIM_THRESHOLD_": str(128 << 20)}
    assert _reused(_faults(environment=retained_environment()))


@glibc
def test_the_console_script_retains_freed_memory():
    """``multidraft``'s entry point sets it before running a command."""
    setup = """
        import contextlib, io
        from multidraft.cli import main
        with contextlib.redirect_stdout(io.StringIO()):
            assert main(["acceptance", "--exact"]) == 0
    """
    assert _reused(_faults(setup))


def test_the_top_level_name_is_the_function():
    assert multidraft.retain_freed_memory is retain_freed_memory


@pytest.mark.parametrize("size", [1.5, "1024", True, None])
def test_a_size_that_is_not_an_integer_is_refused(size):
    with pytest.raises(TypeError, match="must be an int"):
        retain_freed_memory(size)
    with pytest.raises(TypeError, match="must be an int"):
        retained_environment(trimmed_from=size)


@pytest.mark.parametrize("sizes", [{"mapped_from": -1}, {"mapped_from": MAPPED_FROM + 1}, {"trimmed_from": -1}, {"trimmed_from": 2**31}])
def test_a_size_out_of_range_is_refused(sizes):
    with pytest.raises(ValueError, match="bytes, got"):
        retain_freed_memory(**sizes)
    with pytest.raises(ValueError, match="bytes, got"):
        retained_environment(**sizes)
