"""Freed memory kept in the process (glibc's malloc), so that walks over a real vocabulary do
not page-fault their rows back in at every node.

glibc's ``malloc`` serves a request of at least its *mmap threshold* by a fresh mapping, and
gives the free top of its heap back to the system once that top passes its *trim threshold*.
Both thresholds move with the process's history: freeing a mapped block raises the mmap
threshold to its size (up to 32 MiB) and the trim threshold to twice that. A tree walk at
n = 49152 allocates and frees a few dozen rows of n floats a node (the rules' arrays, ~0.4 MB
each, and a curtain rule's 4 MiB buffer); depending on what the process did before, they come
from the heap or fresh from the system, and then each 4 KiB page faults on first touch
(~1-2 µs). Measured on ``expansion[8,7] wor`` (docs/optimal_verifier.md §10): one seed's
``token:optimal`` walk took ~1,500 faults and ~16 ms in some fresh processes, ~120 faults and
~13 ms in others; with both thresholds fixed, ~90 faults and ~12.5 ms in every process.

:func:`retain_freed_memory` fixes both thresholds (``mallopt``); :func:`retained_environment`
gives the same settings as glibc's environment variables, read when a new process starts
(benchmarks/bench_tree_speed.py passes them to the processes it times). The ``multidraft``
console script calls :func:`retain_freed_memory` at start; a program that imports the library
decides for itself, since the setting holds for the whole process. The cost: up to
``trimmed_from`` bytes of freed memory stay mapped.
"""

from __future__ import annotations

import ctypes
import platform

__all__ = ["retain_freed_memory", "retained_environment", "MAPPED_FROM", "TRIMMED_FROM"]

#: Requests below this many bytes come from the heap (glibc's largest allowed threshold on
#: 64-bit systems, half its 64 MiB heap size: what the dynamic threshold reaches at most).
MAPPED_FROM = 32 << 20
#: Free heap top kept, in bytes, before any is given back to the system.
TRIMMED_FROM = 128 << 20
#: ``mallopt``'s parameter numbers (glibc's malloc.h).
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
#: ``mallopt`` takes a C int.
_INT_MAX = 2**31 - 1


def _checked(name: str, value: int, largest: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int (bytes), got {type(value).__name__}")
    if not 0 <= value <= largest:
        raise ValueError(f"need 0 <= {name} <= {largest} bytes, got {value}")
    return value


def _sizes(mapped_from: int, trimmed_from: int) -> tuple[int, int]:
    """Both thresholds checked: ``mapped_from`` in [0, :data:`MAPPED_FROM`], ``trimmed_from`` a C int."""
    return _checked("mapped_from", mapped_from, MAPPED_FROM), _checked("trimmed_from", trimmed_from, _INT_MAX)


def _glibc() -> bool:
    return platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"


def retain_freed_memory(mapped_from: int = MAPPED_FROM, trimmed_from: int = TRIMMED_FROM) -> bool:
    """Fix glibc's thresholds for the whole process: ``mallopt(M_MMAP_THRESHOLD, mapped_from)``
    (requests below it come from the heap, whose pages are reused rather than mapped afresh) and
    ``mallopt(M_TRIM_THRESHOLD, trimmed_from)`` (up to that much free heap top is kept, not
    given back). ``mapped_from`` is at most :data:`MAPPED_FROM` (glibc refuses more),
    ``trimmed_from`` below 2^31 (a C int).

    Returns True where set, False on a system without glibc (nothing changed there). Raises
    ``ValueError`` for a negative or too large size, ``TypeError`` for a non-integer, and
    ``RuntimeError`` if glibc refuses a setting."""
    mapped_from, trimmed_from = _sizes(mapped_from, trimmed_from)
    if not _glibc():
        return False
    mallopt = ctypes.CDLL(None).mallopt
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    for parameter, name, value in ((_M_MMAP_THRESHOLD, "M_MMAP_THRESHOLD", mapped_from), (_M_TRIM_THRESHOLD, "M_TRIM_THRESHOLD", trimmed_from)):
        if mallopt(parameter, value) != 1:
            raise RuntimeError(f"glibc's mallopt refused {name} = {value}")
    return True


def retained_environment(mapped_from: int = MAPPED_FROM, trimmed_from: int = TRIMMED_FROM) -> dict[str, str]:
    """:func:`retain_freed_memory`'s settings as glibc's environment variables for a new
    process: ``{"MALLOC_MMAP_THRESHOLD_": mapped_from, "MALLOC_TRIM_THRESHOLD_": trimmed_from}``
    (as strings; the same checks)."""
    mapped_from, trimmed_from = _sizes(mapped_from, trimmed_from)
    return {"MALLOC_MMAP_THRESHOLD_": str(mapped_from), "MALLOC_TRIM_THRESHOLD_": str(trimmed_from)}
