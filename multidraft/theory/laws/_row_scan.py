"""The least entry of a float64 row and, for a sparse row, its support, in one compiled pass.

Validating a row (:func:`~multidraft.theory.laws.as_distribution`) needs ``least = min(row)``
(no NaN, no negative entry; the floor) and, where ``least == 0``, the ascending ids of the
positive entries when they are few (a top-k or top-p draft: the sparse route). numpy finds them
in four passes over the row (``min``, ``row > 0``, ``count_nonzero``, ``flatnonzero``); a fresh
position of the iid verifier reads a new 10⁵-token draft each time, so each pass is a read of
the row from memory.

Here one vectorised pass reads the row's bit patterns as int64: for finite non-negative doubles
(sign bit clear, exponent below all ones) the integer order is the float order, so the least
bit pattern is the least entry, and a chunk of ``CHUNK`` entries holds a positive entry iff the
OR of its patterns is non-zero. A second, scalar pass visits only the chunks that hold one and
lists their positive entries, stopping once there are more than ``limit``. A row with a sign bit
set anywhere (a negative entry, -0.0, a NaN with its sign set), a NaN or an infinity is left to
numpy's passes, which give the same answers for it; so is a row shorter than ``COMPILED_FROM``,
and so is every row in a process that has not loaded numba yet: validation alone never imports
it (its start, ~0.7 s, would dwarf a one-off check: ``optimal_acceptance`` of a dense iid law at
n = 131072 takes ~30 ms without it), while the per-position paths, whose verifiers run numba
kernels, get the compiled pass from their second position on.

The answer is numpy's, exactly: ``least`` is ``row.min()`` and the support is
``flatnonzero(row > 0)`` whenever it is returned (tests/test_row_scan.py).

The inverse-CDF draws of the tree walks read a row's running sums (:func:`running_sum`), which
numpy's ``cumsum`` forms at ~6.5 ns an entry (~0.32 ms at n = 49152, once a walk); one compiled
loop adds in the same order, so the same sums, at the latency of the additions (~0.08 ms).
"""

from __future__ import annotations

import functools
import sys

import numpy as np

from multidraft.theory._numba import compile_in_place

__all__ = ["least_and_support", "running_sum", "SparseRow", "every_token", "COMPILED_FROM", "CHUNK"]

#: Entries per chunk of the vectorised pass (128: fastest of 16-512 measured at n = 131072).
CHUNK = 128
#: Rows at least this long go through the compiled pass; shorter ones through numpy's.
COMPILED_FROM = 4096
#: The bit pattern of +inf: every finite non-negative double's pattern lies below it.
_INFINITY_BITS = 0x7FF0000000000000


class SparseRow:
    """A validated row of ``n`` entries held on its support: ``values`` at the ascending ids
    ``support`` (int64), zero elsewhere -- the sparse route of validation (a top-k or top-p
    draft), for a caller that wants the row written out only on request (:meth:`dense`)."""

    __slots__ = ("n", "support", "values")

    def __init__(self, n: int, support: np.ndarray, values: np.ndarray) -> None:
        self.n, self.support, self.values = n, support, values

    def dense(self) -> np.ndarray:
        """The row over the vocabulary [n] (a fresh array: zeros, ``values`` at ``support``)."""
        out = np.zeros(self.n)
        out[self.support] = self.values
        return out


def least_and_support(values: np.ndarray, limit: int) -> tuple[float, np.ndarray | None]:
    """``(values.min(), support)`` for a 1-D float64 array: ``support = flatnonzero(values > 0)``
    (int64, ascending) when ``values.min() == 0`` and at most ``limit`` entries are positive,
    else None. One compiled pass plus a visit of the chunks that hold positive entries for a
    row of at least :data:`COMPILED_FROM` finite non-negative entries in a process that has
    loaded numba; numpy's passes otherwise."""
    if len(values) >= COMPILED_FROM and "numba" in sys.modules:
        compile_in_place(globals(), KERNELS)
        bits = values.view(np.int64)
        flags = np.empty(-(-len(values) // CHUNK), dtype=np.uint8)
        low, high = _chunk_bits(bits, flags)
        if low >= 0 and high < _INFINITY_BITS:
            least = float(np.int64(low).view(np.float64))
            if least > 0.0:
                return least, None
            ids = np.empty(limit, dtype=np.int64)
            count = _positive_ids(bits, flags, ids)
            return least, (ids[:count].copy() if count >= 0 else None)
    least = values.min()
    if not least == 0.0:  # positive, negative or NaN: no sparse route
        return least, None
    positive = values > 0.0
    return least, (np.flatnonzero(positive) if np.count_nonzero(positive) <= limit else None)


def _chunk_bits(bits, flags):
    """``flags[c] = 1`` iff chunk c of the int64 patterns ``bits`` has a non-zero pattern (the
    last chunk may be short); returns the least and the largest pattern."""
    n = bits.shape[0]
    full = n // CHUNK
    low = bits[0]
    high = bits[0]
    for c in range(full):
        seen = 0
        base = c * CHUNK
        for j in range(CHUNK):  # a fixed trip count, so that LLVM vectorises it
            b = bits[base + j]
            seen |= b
            low = min(low, b)
            high = max(high, b)
        flags[c] = seen != 0
    if full < flags.shape[0]:
        seen = 0
        for i in range(full * CHUNK, n):
            b = bits[i]
            seen |= b
            low = min(low, b)
            high = max(high, b)
        flags[full] = seen != 0
    return low, high


def _positive_ids(bits, flags, out):
    """The ids of the non-zero patterns of the flagged chunks, ascending, into ``out``; their
    count, or -1 once there are more than ``len(out)``."""
    count = 0
    n = bits.shape[0]
    for c in range(flags.shape[0]):
        if flags[c]:
            for i in range(c * CHUNK, min((c + 1) * CHUNK, n)):
                if bits[i] != 0:
                    if count == out.shape[0]:
                        return -1
                    out[count] = i
                    count += 1
    return count


def running_sum(values: np.ndarray) -> np.ndarray:
    """``c_i = Σ_{j <= i} values_j``, added left to right: ``np.cumsum(values)`` bit for bit (a
    new array), compiled for a contiguous 1-D float64 row of at least :data:`COMPILED_FROM`
    entries in a process that has loaded numba (numpy's ``cumsum`` otherwise)."""
    if (
        isinstance(values, np.ndarray) and values.dtype == np.float64 and values.ndim == 1 and len(values) >= COMPILED_FROM
        and values.flags.c_contiguous and "numba" in sys.modules
    ):  # fmt: skip
        compile_in_place(globals(), KERNELS)
        out = np.empty(len(values))
        _running_sum(values, out)
        return out
    return np.cumsum(values)


def _running_sum(values, out):
    """``out[i] = out[i - 1] + values[i]``, ``out[0] = values[0]`` (numpy's accumulate)."""
    total = values[0]
    out[0] = total
    for i in range(1, values.shape[0]):
        total += values[i]
        out[i] = total


KERNELS = ("_chunk_bits", "_positive_ids", "_running_sum")


@functools.lru_cache(maxsize=8)
def every_token(n: int) -> np.ndarray:
    """``arange(n)``, read-only and shared: the support of a full-support draft."""
    out = np.arange(n)
    out.flags.writeable = False
    return out
