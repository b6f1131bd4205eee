"""The position sets' densities and distribution functions at the integration nodes of
:meth:`~multidraft.theory.verifier.CurtainRule.choice_probabilities` (numba, cached on disk).

Group g's position set is a union of disjoint pieces ``[s_i, e_i)`` of total length ``|S_g|``;
a draft of g lies uniformly on it, so with ``g_g = 1/|S_g|`` on S_g

    ``G_g(left + δ) = Σ_{e_i <= left} (e_i - s_i)/|S_g| + [s_j <= left < e_j] ((left - s_j) + δ)/|S_g|``

at a node ``left + δ`` of an interval ``[left, right)`` between consecutive piece ends (every
piece end is an edge, so an interval lies inside one piece or outside all: j is that piece).
One sweep over the intervals with the group's pieces in ascending order accumulates the first
sum as it goes: O(pieces + intervals · nodes) per group, where a table of every piece against
every interval costs O(pieces · intervals · nodes) -- seconds for a group of 5,000 pieces
(an early-exit draft's wide iid node at V = 49152). The sum runs over the pieces in position
order, so where a group's pieces are stored out of that order (a set that wraps round the
curtain) the result differs from the table's piece-order sum by rounding only.
"""

from __future__ import annotations

import numpy as np

from multidraft.theory._numba import compile_in_place

__all__ = ["group_density_cdf"]

#: The compiled kernel, module-level so that numba's disk cache finds it in the next process.
KERNELS = ("_sweep",)


def _sweep(left, offset, start, end, bounds, scale, density, cdf):  # pragma: no cover - compiled
    """For every group g (pieces ``bounds[g]:bounds[g + 1]`` of ``start``/``end``, ascending and
    disjoint) and interval j: ``density[g, j·T + t] = [inside] 1/scale_g`` and ``cdf[g, j·T + t]
    = G_g(left_j + offset[j, t])`` (module docstring)."""
    nodes = offset.shape[1]
    for g in range(bounds.shape[0] - 1):
        piece, last, below = bounds[g], bounds[g + 1], 0.0
        for j in range(left.shape[0]):
            while piece < last and end[piece] <= left[j]:
                below += (end[piece] - start[piece]) / scale[g]
                piece += 1
            inside = piece < last and start[piece] <= left[j]
            for t in range(nodes):
                if inside:
                    density[g, j * nodes + t] = 1.0 / scale[g]
                    cdf[g, j * nodes + t] = below + ((left[j] - start[piece]) + offset[j, t]) / scale[g]
                else:
                    density[g, j * nodes + t] = 0.0
                    cdf[g, j * nodes + t] = below


def group_density_cdf(
    left: np.ndarray, offset: np.ndarray, piece_start: np.ndarray, piece_end: np.ndarray, owner: np.ndarray, scale: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``(density, cdf)``, both ``[groups, intervals · nodes]``: ``g_g`` and ``G_g`` (module
    docstring) of every group at the nodes ``left[j] + offset[j, t]`` (``left`` ascending, every
    piece end among the interval edges), for the pieces ``piece_start``/``piece_end`` of groups
    ``owner`` (non-decreasing) with set lengths ``scale`` (1 where a group has length zero:
    those rows are the caller's to overwrite). The pieces of one group must be disjoint.

    Source: the Gauss-Legendre integrand of
    :meth:`~multidraft.theory.verifier.CurtainRule.choice_probabilities`; one compiled sweep
    per group (``_sweep``) over its pieces sorted by (start, end)."""
    if len(owner) and np.any(np.diff(owner) < 0):
        raise ValueError("group_density_cdf: the pieces must be stored group after group (owner non-decreasing)")
    compile_in_place(globals(), KERNELS)
    order = np.lexsort((piece_end, piece_start, owner))
    bounds = np.concatenate([[0], np.cumsum(np.bincount(owner, minlength=len(scale)))]).astype(np.int64)
    shape = (len(scale), offset.size)
    density, cdf = np.empty(shape), np.empty(shape)
    _sweep(
        np.ascontiguousarray(left, dtype=np.float64), np.ascontiguousarray(offset, dtype=np.float64),
        np.ascontiguousarray(piece_start[order], dtype=np.float64), np.ascontiguousarray(piece_end[order], dtype=np.float64),
        bounds, np.ascontiguousarray(scale, dtype=np.float64), density, cdf,
    )  # fmt: skip
    return density, cdf
