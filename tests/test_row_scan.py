"""The compiled row scan of validation (issue 34, item 3: the iid verifier per fresh position):
``least_and_support(row, limit)`` is numpy's ``(row.min(), flatnonzero(row > 0))`` exactly, on
rows the compiled pass decides (finite, no sign bit) and on rows it leaves to numpy (a NaN, an
infinity, a negative entry, -0.0), around every chunk edge and at the limit; each check has a
twin that must fail."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from multidraft.theory.laws import _row_scan
from multidraft.theory.laws._row_scan import CHUNK, COMPILED_FROM, least_and_support


@pytest.fixture(autouse=True)
def _numba_loaded():
    """The compiled pass runs in a process that has loaded numba (the verifiers' kernels do)."""
    _row_scan.compile_in_place(vars(_row_scan), _row_scan.KERNELS)


def _numpy(values: np.ndarray, limit: int) -> tuple[float, np.ndarray | None]:
    """What the four numpy passes gave before the compiled scan."""
    least = values.min()
    positive = values > 0.0
    sparse = least == 0.0 and np.count_nonzero(positive) <= limit
    return least, (np.flatnonzero(positive) if sparse else None)


def _rows(seed: int) -> list[tuple[np.ndarray, int]]:
    """Rows of both routes: sparse with positives at chunk edges, in the short last chunk and at
    the very ends; exactly ``limit`` positives and one more; dense ones with and without zeros;
    subnormals; a strided view; and rows with a NaN, an infinity, a negative entry or -0.0."""
    rng = np.random.default_rng(seed)
    rows = []
    for n in (COMPILED_FROM, COMPILED_FROM + 1, 3 * CHUNK * 11 + 17, 50_257, 131_072):
        limit = n // 8
        for count in (1, 7, 100, limit, limit + 1):
            row = np.zeros(n)
            ids = rng.choice(n, count, replace=False)
            ids[: min(count, 4)] = [0, n - 1, CHUNK - 1, CHUNK][: min(count, 4)]  # edges
            row[ids] = rng.dirichlet(np.full(count, 0.5))
            rows.append((row, limit))
        dense = rng.dirichlet(np.ones(n))
        rows.append((dense, limit))
        with_zeros = dense.copy()
        with_zeros[rng.choice(n, n // 3, replace=False)] = 0.0
        rows.append((with_zeros, limit))
        tiny = np.zeros(n)
        tiny[[1, n // 2, n - 2]] = [5e-324, 1e-310, 1.0]  # subnormal patterns are positive
        rows.append((tiny, limit))
        rows.append((np.stack([tiny, dense], axis=1)[:, 0], limit))  # a strided view
        for defect in (np.nan, -np.nan, np.inf, -1e-3, -0.0):
            bad = tiny.copy()
            bad[n // 3] = defect
            rows.append((bad, limit))
    return rows


def _same(got: tuple[float, np.ndarray | None], expected: tuple[float, np.ndarray | None]) -> bool:
    (least, support), (least_expected, support_expected) = got, expected
    same_least = (np.isnan(least) and np.isnan(least_expected)) or (
        least == least_expected and np.signbit(least) == np.signbit(least_expected)
    )
    if support is None or support_expected is None:
        return same_least and support is None and support_expected is None
    return same_least and support.dtype == np.int64 and np.array_equal(support, support_expected)


@pytest.mark.parametrize("seed", [0, 1])
def test_least_and_support_are_numpys(seed):
    rows = _rows(seed)
    mismatches = [i for i, (row, limit) in enumerate(rows) if not _same(least_and_support(row, limit), _numpy(row, limit))]
    assert mismatches == []
    assert any(least_and_support(row, limit)[1] is not None for row, limit in rows)  # both outcomes reached
    assert any(least_and_support(row, limit)[1] is None and not row.min() > 0 for row, limit in rows)


def test_short_rows_take_numpys_route_and_agree():
    row = np.zeros(COMPILED_FROM - 1)
    row[[0, 5, COMPILED_FROM - 2]] = [0.25, 0.25, 0.5]
    assert _same(least_and_support(row, 100), _numpy(row, 100))


def test_a_scan_that_lets_a_nan_through_is_caught(monkeypatch):
    """The twin of the guard: with the bound on the bit patterns raised past the NaNs, a row
    holding a NaN is decided by the integer order (its least entry comes back as a number)."""
    monkeypatch.setattr(_row_scan, "_INFINITY_BITS", np.iinfo(np.int64).max)
    rows = _rows(0)
    assert any(not _same(least_and_support(row, limit), _numpy(row, limit)) for row, limit in rows)


def test_a_scan_that_skips_the_last_chunk_is_caught(monkeypatch):
    """The twin of the chunk flags: a pass that never flags the short last chunk loses the
    positive entries there."""
    compiled = _row_scan._chunk_bits

    def skipping(bits, flags):
        low, high = compiled(bits, flags)
        if len(bits) % CHUNK:
            flags[-1] = 0
        return low, high

    monkeypatch.setattr(_row_scan, "_chunk_bits", skipping)
    monkeypatch.setattr(_row_scan, "compile_in_place", lambda namespace, names: None)
    rows = _rows(0)
    assert any(not _same(least_and_support(row, limit), _numpy(row, limit)) for row, limit in rows)


def test_validation_alone_never_imports_numba_and_the_twin_runs_the_compiled_pass(monkeypatch):
    """A process without numba validates a long row by numpy's passes (validation never imports
    numba: its start would dwarf a one-off check); with numba loaded, the same call runs the
    compiled pass -- the same answer either way."""
    compiled, calls = _row_scan._chunk_bits, []

    def counting(bits, flags):
        calls.append(len(bits))
        return compiled(bits, flags)

    monkeypatch.setattr(_row_scan, "_chunk_bits", counting)
    monkeypatch.setattr(_row_scan, "compile_in_place", lambda namespace, names: None)
    row, limit = _rows(0)[2]
    loaded = least_and_support(row, limit)
    assert calls == [len(row)]  # the twin: numba loaded, the compiled pass ran
    monkeypatch.delitem(sys.modules, "numba")
    alone = least_and_support(row, limit)
    assert calls == [len(row)] and "numba" not in sys.modules
    assert _same(alone, loaded) and _same(alone, _numpy(row, limit))


def _summed_rows(seed: int) -> list[np.ndarray]:
    """Rows for the running sums: a softmax-like row (n = 49152, the walks'), one with zeros and
    subnormals, entries spread over 300 orders of magnitude, a row that cancels (negatives), a
    strided view (numpy's route) and short rows (numpy's route)."""
    rng = np.random.default_rng(seed)
    soft = np.exp(3.0 * rng.standard_normal(49_152))
    sparse = np.where(rng.random(COMPILED_FROM + 5) < 0.9, 0.0, rng.random(COMPILED_FROM + 5))
    sparse[::97] = 5e-324
    wide = 10.0 ** rng.uniform(-300, 0, 131_072)
    signed = rng.standard_normal(20_000)
    return [soft / soft.sum(), sparse, wide, signed, rng.random(2 * COMPILED_FROM)[::2], rng.random(COMPILED_FROM - 1), rng.random(1)]


@pytest.mark.parametrize("seed", [0, 1])
def test_running_sum_is_numpys_cumsum(seed):
    """``running_sum`` is ``np.cumsum`` bit for bit (the order of the additions kept), on the
    compiled route and numpy's; the twin adding in blocks of two (one of the orders a
    vectorised sum would take) differs on every long row."""
    for row in _summed_rows(seed):
        got = _row_scan.running_sum(row)
        assert got.shape == row.shape
        np.testing.assert_array_equal(got.view(np.int64), np.cumsum(row).view(np.int64))
    for row in _summed_rows(seed)[:4]:
        pairs = row[: len(row) // 2 * 2].reshape(-1, 2).sum(axis=1)
        twin = np.cumsum(pairs)  # the sums at odd indices, formed pair by pair
        assert not np.array_equal(twin, _row_scan.running_sum(row)[1::2][: len(twin)])


def test_running_sum_takes_the_compiled_route_for_long_rows(monkeypatch):
    """The kernel runs for a long contiguous float64 row (a kernel that adds nothing is caught)
    and not for a short one."""
    row = np.random.default_rng(3).random(COMPILED_FROM)
    monkeypatch.setattr(_row_scan, "_running_sum", lambda values, out: out.fill(0.0))
    assert not _row_scan.running_sum(row).any()
    np.testing.assert_array_equal(_row_scan.running_sum(row[:-1]), np.cumsum(row[:-1]))
