"""The nested ("curtain") layout: random positions that realise a selection law exactly.

Each draft X_i gets a position t_i drawn uniformly from a set S_{X_i} ⊆ [0, 1) of length q(X_i)
(tokens of one *group* share one set of the group's total length); the sets tile [0, 1), so
the positions of K iid drafts are iid uniform, their minimum has density
``w(t) = K (1 - t)^{K-1}``, and the draft holding the smallest position is selected with law

    r(y) = q(y) / |S_y| · ∫_{S_y} w(t) dt = q(y) / |S_y| · Σ_{[a, b) ⊆ S_y} W(a, b),
    W(a, b) = (1 - a)^K - (1 - b)^K.

Given groups g with masses c_g and target weights R_g inside a region [lo, hi) (Σ c_g = hi - lo,
Σ R_g = W(lo, hi)) whose cumulative weights in decreasing-density order are majorised by
``m ↦ W(lo, lo + m)``, the stack pass builds sets with |S_g| = c_g and ∫_{S_g} w = R_g (proof in
docs/optimal_verifier.md):

* the *solo interval* of a set A of groups is the unique [α, α + c(A)) ⊆ [lo, hi) with
  W(α, α + c(A)) = R(A) (W(α, α + c) is strictly decreasing in α);
* process the groups by decreasing density R/c; the new group's set A starts as itself; while
  A's solo interval overlaps the hull on top of the stack, pop that hull into A; push A's solo
  interval as the new group's hull; its pieces are the hull minus the popped hulls.

Every hull lies inside [lo, hi) and contains the hulls it pops, so the pieces are disjoint, the
final hulls tile the region, and group g's pieces have length c_g and weight R_g exactly (up to
the rounding of one scalar equation per push).

:func:`curtain_fit` is the whole fit of the optimal iid verifier on the draft's support: one
sort by increasing density p/q (:func:`density_order`), then two compiled calls: the min-cut
scan for T* (a prefix of that order), the two water levels λ, μ of r* and the groups of both
parts; then, into arrays allocated at their final size in between (:func:`_kept_arrays`), the
stack passes and the realised densities. Everything is O(s) after the sort, s the support
size; nothing here touches the tokens the draft cannot propose. Scratch arrays are reused from
fit to fit (:class:`_Workspace`).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NamedTuple

import numpy as np

from multidraft.theory._numba import compile_in_place

__all__ = ["interval_weight", "density_order", "curtain_fit", "CurtainFit"]

#: Below this many tokens :func:`density_order` calls ``numpy.argsort`` directly.
_PACKED_SORT_FROM = 4096
#: numpy backs an array of 4 MiB and more by huge pages (8-byte words); :func:`_kept_arrays`
#: rounds its buffer up to that size from a quarter of it on.
_HUGE_WORDS = (4 << 20) // 8
_HUGE_FROM = _HUGE_WORDS // 4


def interval_weight(start: np.ndarray | float, end: np.ndarray | float, k: int) -> np.ndarray:
    """``W(a, b) = (1 - a)^K - (1 - b)^K`` elementwise, without cancellation:
    ``(b - a) · S_K(1 - a, 1 - b)`` with ``S_K(x, y) = Σ_{i<K} x^i y^{K-1-i}`` (non-negative
    terms, by the recurrence ``S_j = x S_{j-1} + y^{j-1}``)."""
    start, end = np.broadcast_arrays(np.asarray(start, dtype=np.float64), np.asarray(end, dtype=np.float64))
    out = np.empty(start.shape)
    _kernels().weights(start.ravel(), end.ravel(), int(k), out.reshape(-1))
    return out


def _kernels():
    """The compiled kernels (:mod:`multidraft.theory._curtain_kernels`), imported on first use
    so that importing the theory does not import numba."""
    from multidraft.theory.verifier import _curtain_kernels

    return _curtain_kernels


def _radix():
    """:mod:`multidraft.theory.verifier._radix` (its kernel compiles on first use)."""
    from multidraft.theory.verifier import _radix

    return _radix


class _Workspace:
    """Scratch arrays for fits of up to ``capacity`` tokens, reused from fit to fit.

    A fresh array of 10^5 doubles costs a page fault per 4 KiB on first touch (about 1-2 µs
    each on the machines measured: as much as the fit's arithmetic at full support), so the
    sort keys, the sorted copies and the kernels' stacks live here; only what a rule keeps is
    allocated per fit, at its final size.
    """

    FLOATS = ("key", "ps", "qs", "ds", "scratch", "mass", "target", "hull_start", "hull_end", "hull_mass", "hull_weight")
    INTS = ("order", "group", "stack")

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        size = capacity + 2
        for name in self.FLOATS:
            setattr(self, name, np.empty(size))
        for name in self.INTS:
            setattr(self, name, np.empty(size, dtype=np.int64))
        self.packed = np.empty(size, dtype=np.uint64)
        self.packed_scratch = np.empty(size, dtype=np.uint64)
        self.counts = _radix().new_counts()


_IDLE: list[_Workspace] = []
_IDLE_LOCK = threading.Lock()


@contextmanager
def _workspace(size: int) -> Iterator[_Workspace]:
    """A workspace for ``size`` tokens, taken from the idle ones (the largest) or made, and
    given back afterwards; threads fitting at once get different ones."""
    with _IDLE_LOCK:
        work = _IDLE.pop() if _IDLE else None
    if work is None or work.capacity < size:
        work = _Workspace(max(size, work.capacity if work is not None else 0))
    try:
        yield work
    finally:
        with _IDLE_LOCK:
            _IDLE.append(work)
            _IDLE.sort(key=lambda w: w.capacity)


def _order(values: np.ndarray, masses: np.ndarray, work: _Workspace) -> np.ndarray:
    """:func:`density_order` into ``work.order`` (a view of its first ``len(values)`` entries)."""
    size = len(values)
    key = work.key[:size]
    order = work.order[:size]
    with np.errstate(over="ignore"):  # p/q = inf for q near the smallest subnormal: still ordered
        np.divide(values, masses, out=key)
    key += 0.0  # -0.0 (p = -0.0 after rescaling) would sort as the largest bit pattern
    if size < _PACKED_SORT_FROM:
        order[:] = np.argsort(key)
        return order
    compile_in_place(globals(), KERNELS)
    if descending_run_order(key, order):  # given by decreasing ratio already: no sort
        return order
    radix = _radix()
    shift = int(size - 1).bit_length()
    packed = work.packed[:size]
    bits = radix.pack_ratio_keys(key, packed, shift)  # the key above, not divided again
    if bits:  # by the key's bits, index order among equal ones (the input's): numpy.sort's result
        radix.radix_sort(packed, work.packed_scratch, work.counts, shift, shift + bits)
    radix.settle_ties(packed, shift, key, order)
    return order


def descending_run_order(key, order):
    """If ``key`` is non-increasing (no NaN), write into ``order`` the indices by increasing key,
    equal keys by increasing index -- the stable argsort, read off in O(s): the indices
    backwards, each run of equal keys forwards (:func:`reversed_runs`) -- and return True;
    otherwise False (``order`` untouched). The wor rule lays out U's tokens in decreasing p/q
    order, so at T* = ∅ (every P* = 1 node) the iid fit's ratios p/(q/q(U)) arrive sorted
    (0.5-0.7 ms of radix sort at n = 49152). The check counts the rises in one pass without an
    early exit, which vectorises (0.12 -> 0.05 ms with the runs at n = 49152)."""
    n = key.shape[0]
    if n and key[0] != key[0]:
        return False
    rises = 0
    for i in range(1, n):
        rises += not key[i] <= key[i - 1]
    if rises:
        return False
    reversed_runs(key, order)
    return True


def reversed_runs(key, out):
    """``out`` = the indices of ``key`` reversed, then every run of keys equal to the run's first
    (in that reversed order; a NaN is its own run) put back in increasing index: for keys sorted
    one way, the order the other way with ties by increasing index. The runs are found by
    comparing neighbours of ``key`` in place (not read through ``out``)."""
    m = key.shape[0]
    for i in range(m):
        out[i] = m - 1 - i
    i = 1
    while i < m:  # reversed positions i - 1, i hold the indices m - i, m - 1 - i
        if key[m - 1 - i] == key[m - i]:
            anchor, stop = key[m - i], i + 1
            while stop < m and key[m - 1 - stop] == anchor:
                stop += 1
            low, high = i - 1, stop - 1
            while low < high:
                out[low], out[high] = out[high], out[low]
                low += 1
                high -= 1
            i = stop + 1
        else:
            i += 1


def descending_runs(key: np.ndarray, out: np.ndarray) -> None:
    """:func:`reversed_runs` compiled (the index of
    :func:`~multidraft.theory.verifier._wor_parts.descending_index`)."""
    compile_in_place(globals(), KERNELS)
    reversed_runs(key, out)


#: The compiled kernels of this module (:func:`~multidraft.theory._numba.compile_in_place`).
KERNELS = ("descending_run_order", "reversed_runs")


def density_order(values: np.ndarray, masses: np.ndarray) -> np.ndarray:
    """The permutation sorting ``values / masses`` increasingly (masses > 0; ties in any order).

    For the iid verifier this is the decreasing-q/p order of the min-cut scan (p/q ascending)
    and, read backwards, the decreasing-density order of the layout. Large inputs sort one
    uint64 array instead of calling ``argsort``: the ratio's bits (a non-negative double orders
    like its bit pattern) less the least ratio's, truncated
    (:func:`~multidraft.theory.verifier._radix.pack_ratio_keys`: to ~5e-7 relative, or two
    digits' worth where that is at most 4x coarser), above a ``⌈log2 s⌉``-bit index, sorted by
    :func:`~multidraft.theory.verifier._radix.radix_sort` on the key's bits alone (two digit
    passes on a fit's ratios, which span a few binades, three at most; the index, in increasing
    order already, breaks ties by the sort's stability); runs of equal truncated keys are then
    put in exact order (:func:`~multidraft.theory.verifier._radix.settle_ties`, stable: exact
    ties stay in index order). So the result is ``argsort(kind="stable")``'s whatever the
    truncation, about 10x faster at s = 49152. Ratios given in non-increasing order (the wor
    rule's U at T* = ∅) are not sorted at all (:func:`descending_run_order`: the same order).
    """
    with _workspace(len(values)) as work:
        return _order(values, masses, work).copy()


class CurtainFit(NamedTuple):
    """What :func:`curtain_fit` returns, indexed like its inputs.

    ``best`` = |T*|, ``cut`` the indices of T*, ``optimum`` = P*, ``acceptance`` = Σ min(p, r)
    of the realised law, ``group`` the group of every token, ``group_bounds`` (group g's
    pieces are ``group_bounds[g]:group_bounds[g + 1]``), the pieces ``(piece_start,
    piece_end)`` and every group's realised ``density`` r/q.
    """

    best: int
    cut: np.ndarray
    optimum: float
    acceptance: float
    group: np.ndarray
    group_bounds: np.ndarray
    piece_start: np.ndarray
    piece_end: np.ndarray
    density: np.ndarray


def curtain_fit(p: np.ndarray, q: np.ndarray, k: int) -> CurtainFit:
    """The optimal iid verifier's fit on tokens with p and q (all q > 0), in any order.

    Orders them by increasing p/q (:func:`density_order`), then two compiled calls: the min-cut
    scan ``P* = min_j [p(T_j) + 1 - q(T_j)^K]`` over prefixes, the water levels of
    ``r* = min(p, λq)`` on U and ``max(p, μq)`` on T* and the groups; then both stack passes and
    the realised densities (docs/optimal_verifier.md §3-§4). O(s log s) for s tokens: one sort, then O(s)
    (amortised pushes and pops, one Newton solve per group).
    """
    size = len(p)
    with _workspace(size) as work:
        order = _order(p, q, work)
        best, optimum, boundary, u_groups, t_groups = _kernels().fit_groups(
            np.ascontiguousarray(p, dtype=np.float64), np.ascontiguousarray(q, dtype=np.float64), order,
            int(k), work.ps[:size], work.qs[:size], work.ds[:size], work.group, work.scratch, work.mass, work.target,
        )  # fmt: skip
        groups = u_groups + t_groups
        cut, group, group_bounds, piece_start, piece_end, density = _kept_arrays(int(size), int(best), int(groups))
        cut[:] = order[:best]
        acceptance, count = _kernels().fit_layouts(
            int(k), boundary, u_groups, t_groups, work.ps[:size], work.qs[:size], work.group, order, group,
            work.mass, work.target, piece_start, piece_end, density, group_bounds[1:],
            work.stack, work.hull_start, work.hull_end, work.hull_mass, work.hull_weight,
        )  # fmt: skip
        return CurtainFit(
            int(best), cut, float(optimum), float(acceptance), group, group_bounds, piece_start[:count], piece_end[:count],
            density,
        )  # fmt: skip


def _kept_arrays(size: int, best: int, groups: int) -> tuple[np.ndarray, ...]:
    """The arrays a rule keeps, at their final size, as views of one fresh buffer:
    ``(cut [best] int64, group [size] int32, group_bounds [groups + 1] int64 (starting at 0),
    piece_start, piece_end [2 groups], density [groups])`` (a group holds one token or more and
    one piece more than the hulls it pops: fewer than 2 pieces per group).

    One buffer rather than six: the rule's memory is new on every fit (the last rule's was
    handed back to the system), and numpy backs a buffer of 4 MiB and more by huge pages, so
    at full support (one group per token, 6.5 MB at s = 131072) it is mapped in a few faults
    instead of ~1,600 (measured: 2.6 ms of the fit's 6.8 ms at s = 131072 went to page
    faults). From :data:`_HUGE_FROM` words on (1 MiB) the buffer is rounded up to 4 MiB, so that
    numpy asks for huge pages there too: at s = 49152 (2.5 MB) the rule's memory otherwise came
    fresh from the system in ~150-600 faults of 4 KiB per fit (measured: about 1,300 faults
    per exact law of a 64-node tree of nine fits)."""
    lengths = (best, (size + 1) // 2, groups + 1, 2 * groups, 2 * groups, groups)  # in 8-byte words
    words = sum(lengths)
    buffer = np.empty(max(words, _HUGE_WORDS) if words >= _HUGE_FROM else words)
    ends = list(itertools.accumulate(lengths))
    cut, group, group_bounds, piece_start, piece_end, density = (buffer[a:b] for a, b in zip([0, *ends], ends))
    group_bounds = group_bounds.view(np.int64)
    group_bounds[0] = 0
    return cut.view(np.int64), group.view(np.int32)[:size], group_bounds, piece_start, piece_end, density
