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

__all__ = ["group_density_cdf", "row_choice"]

#: The compiled kernels, module-level so that numba's disk cache finds them in the next process.
KERNELS = ("_sweep", "_row_choice")


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


def _row_choice(row_group, group_first, group_last, piece_start, piece_end, nodes, weights, out):  # pragma: no cover - compiled
    """``out[i] = P(draft i is selected)`` for one row whose drafts belong to the groups
    ``row_group [K]`` (:func:`row_choice`); returns False, leaving ``out`` unset, when one of
    those groups has length zero (a point set: the caller's)."""
    k = row_group.shape[0]
    distinct, slot = np.empty(k, dtype=np.int64), np.empty(k, dtype=np.int64)
    count = 0
    for i in range(k):
        slot[i] = -1
        for d in range(count):
            if distinct[d] == row_group[i]:
                slot[i] = d
        if slot[i] < 0:
            distinct[count], slot[i] = row_group[i], count
            count += 1
    bounds = np.zeros(count + 1, dtype=np.int64)
    for d in range(count):
        bounds[d + 1] = bounds[d] + group_last[distinct[d]] - group_first[distinct[d]]
    start, end, scale = np.empty(bounds[count]), np.empty(bounds[count]), np.zeros(count)
    for d in range(count):
        for j in range(bounds[d], bounds[d + 1]):  # stored order: the set's length as np.bincount sums it
            piece = group_first[distinct[d]] + j - bounds[d]
            start[j], end[j] = piece_start[piece], piece_end[piece]
            scale[d] += end[j] - start[j]
        if scale[d] <= 0.0:
            return False
        for j in range(bounds[d] + 1, bounds[d + 1]):  # insertion sort by (start, end), as np.lexsort
            a, b, i = start[j], end[j], j - 1
            while i >= bounds[d] and (start[i] > a or (start[i] == a and end[i] > b)):
                start[i + 1], end[i + 1] = start[i], end[i]
                i -= 1
            start[i + 1], end[i + 1] = a, b
    edges = np.empty(2 * bounds[count] + 2)
    edges[0], edges[1] = 0.0, 1.0
    edges[2 : 2 + bounds[count]], edges[2 + bounds[count] :] = start, end
    edges = np.unique(edges)
    piece, below, density, cdf = bounds[:count].copy(), np.zeros(count), np.zeros(count), np.zeros(count)
    for i in range(k):
        out[i] = 0.0
    for j in range(edges.shape[0] - 1):
        left = edges[j]
        half = 0.5 * (edges[j + 1] - left)
        for d in range(count):  # the sweep of _sweep, one group at a time
            while piece[d] < bounds[d + 1] and end[piece[d]] <= left:
                below[d] += (end[piece[d]] - start[piece[d]]) / scale[d]
                piece[d] += 1
        for t in range(nodes.shape[0]):
            offset = half * (nodes[t] + 1.0)
            for d in range(count):
                inside = piece[d] < bounds[d + 1] and start[piece[d]] <= left
                density[d] = 1.0 / scale[d] if inside else 0.0
                cdf[d] = below[d] + ((left - start[piece[d]]) + offset) / scale[d] if inside else below[d]
            for i in range(k):
                if density[slot[i]] > 0.0:
                    others = 1.0
                    for j2 in range(k):
                        if j2 != i:
                            others *= 1.0 - cdf[slot[j2]]
                    out[i] += density[slot[i]] * others * (half * weights[t])
    return True


def row_choice(row_group, group_first, group_last, piece_start, piece_end, nodes, weights) -> np.ndarray | None:
    """``P(draft i is selected | X = x)`` [K] for one row of drafts in the groups ``row_group``
    [K] of a rule with pieces ``piece_start``/``piece_end`` (group g's are
    ``group_first[g]:group_last[g]``): ``Σ_intervals Σ_t w_t (b - a)/2 · g_{x_i}(t) Π_{j≠i}
    (1 - G_{x_j}(t))`` at the Gauss-Legendre ``nodes``/``weights`` of every interval [a, b)
    between the row's piece ends (module docstring), in one compiled call; None when a group of
    the row has length zero (a point set, which :meth:`~multidraft.theory.verifier.CurtainRule.choice_probabilities`
    handles on the restricted rule).

    Source: the same integral as :meth:`~multidraft.theory.verifier.CurtainRule._choice_table`
    on the rule restricted to the row's groups (same edges, nodes and sweep; the sum over the
    nodes is sequential where the table's is a dot product, so the two differ by rounding).
    O(P log P + P · K² · nodes) for the P pieces of the row's groups; no array of the
    vocabulary's size, where the restricted rule costs ~25 numpy calls."""
    compile_in_place(globals(), KERNELS)
    out = np.empty(len(row_group))
    done = _row_choice(
        np.ascontiguousarray(row_group, dtype=np.int64), group_first, group_last, piece_start, piece_end, nodes, weights, out
    )  # fmt: skip
    return out if done else None
