"""The J-curtain's choice law in closed form: ``P(draft i is selected | the ordered drafts)``
for the U side of :class:`~multidraft.theory.verifier._wor_rule.WithoutReplacementRule`
(numba, cached on disk; docs/optimal_verifier.md §8, "The choice law in closed form").

**The marks.** Given the ordered drafts x_1..x_K, the rebuilt stream's U-points are the U
drafts plus Geometric repeats: walking the drafts in order with (count, A_U, A_T) = (points
and distinct T*-arrivals so far, q of the U drafts arrived, q of the T* drafts arrived), draft j
arrives (count + 1; a U draft adds its own mark), then, while count < K and j < K, each next
point is a U-repeat with probability ρ = A_U / (1 - A_T) (count + 1, its token ∝ q among the
arrived U drafts), else draft j + 1 comes; the walk ends when count reaches K (the branches of
``WithoutReplacementRule._stream_marks``). With c_i the marks of draft i, the generating
function Φ(z) = E[Π_i z_i^{c_i}] is a polynomial of degree <= K, and one evaluation is a
forward pass over (draft, count): with W the weights after draft j's arrival (shifted up one
count, times z_j if it is a U draft) and x = Σ_{arrived U} q_i z_i / (1 - A_T) (= ρ times a
repeat's expected z),

    X[c] = W[c] + x X[c - 1],   next V[c] = (1 - ρ) X[c]  (c < K),   Φ += x X[K - 1] + W[K],

and Φ += Σ_c W[c] after the last draft: O(K²) per evaluation, O(K²) again for one partial
derivative carried forward-mode.

**The winner.** Each mark lies uniformly on its draft's group set S_g (pieces
``group_first[g]:group_last[g]`` of the layout), independently, and the smallest wins. With
a_i(t) = |S_{g_i} ∩ [0, t)| / |S_{g_i}|, given the marks draft i wins with probability
∫ c_i a_i'(t) (1 - a_i)^{c_i - 1} Π_{l≠i} (1 - a_l)^{c_l} dt, so in expectation

    P(i selected) = ∫₀¹ a_i'(t) ∂_{z_i} Φ(1 - a(t)) dt.

The layout's pieces tile [0, 1), so inside a piece of group g only a_g moves (linearly) and only
the drafts of g have a_i' ≠ 0 (= 1/|S_g|): the integral is a sum over the pieces of the drafts'
groups, swept in position order, of a polynomial in t of degree <= K - 1, which Gauss-Legendre
with ⌈K/2⌉ nodes integrates exactly. A group of length zero never wins and never blocks (as in
:func:`~multidraft.theory.verifier._wor_curtain.point_win_probabilities`).

Cost per tuple: O(P log P + P ⌈K/2⌉ d K²), P the pieces of its groups and d the drafts per group
(1 almost always), against an enumeration of the stream's outcomes (1.46 s per tuple at K = 8).
"""

from __future__ import annotations

import functools

import numpy as np

from multidraft.theory._numba import compile_in_place

__all__ = ["stream_choice_probabilities"]

#: The compiled kernels, module-level so that numba's disk cache finds them in the next process.
KERNELS = ("_repeat_factor", "_derivative", "_rows")


def _repeat_factor(mass, arrived_t):  # pragma: no cover - compiled
    """``mass / (1 - A_T)``: ρ for ``mass`` = A_U, the repeat factor x for ``mass`` =
    Σ_{arrived U} q_i z_i (the tokens of the arrived U drafts, ∝ q)."""
    return mass / (1.0 - arrived_t)


def _derivative(z, mass, in_u, column, value, slope):  # pragma: no cover - compiled
    """``∂Φ/∂z_column`` at ``z`` (module docstring's pass; ``value``, ``slope``: scratch
    [K + 1], the weights by count and their derivatives)."""
    k = z.shape[0]
    value[:] = 0.0
    slope[:] = 0.0
    value[0] = 1.0
    arrived_u, arrived_t, weighted, d_weighted, d_total = 0.0, 0.0, 0.0, 0.0, 0.0
    for j in range(k):
        factor, d_factor = 1.0, 0.0
        if in_u[j]:
            factor = z[j]
            arrived_u += mass[j]
            weighted += mass[j] * z[j]
            if j == column:
                d_factor = 1.0
                d_weighted += mass[j]
        else:
            arrived_t += mass[j]
        for c in range(k, 0, -1):  # arrival: one more point
            slope[c] = slope[c - 1] * factor + value[c - 1] * d_factor
            value[c] = value[c - 1] * factor
        value[0] = 0.0
        slope[0] = 0.0
        if j == k - 1:
            for c in range(k + 1):
                d_total += slope[c]
            break
        d_total += slope[k]  # the K-th point arrived with draft j
        rho = _repeat_factor(arrived_u, arrived_t)
        x, d_x = _repeat_factor(weighted, arrived_t), _repeat_factor(d_weighted, arrived_t)
        for c in range(2, k):  # Geometric repeats: X[c] = W[c] + x X[c - 1]
            slope[c] += d_x * value[c - 1] + x * slope[c - 1]
            value[c] += x * value[c - 1]
        d_total += d_x * value[k - 1] + x * slope[k - 1]  # repeats up to the K-th point
        for c in range(k):
            value[c] *= 1.0 - rho
            slope[c] *= 1.0 - rho
        value[k] = 0.0
        slope[k] = 0.0
    return d_total


def _rows(groups, masses, in_u, piece_start, piece_end, group_first, group_last, nodes, weights, out):  # pragma: no cover - compiled
    """``out[r, i] = P(draft i of row r is selected)`` (module docstring), rows ``groups``
    (layout group of every U draft), ``masses`` (q of every draft), ``in_u``."""
    m, k = groups.shape
    z = np.ones(k)
    value, slope = np.empty(k + 1), np.empty(k + 1)
    local = np.empty(k, np.int64)
    kept = np.empty(k, np.int64)
    for row in range(m):
        out[row, :] = 0.0
        count, pieces = 0, 0
        for i in range(k):
            local[i] = -1
            if in_u[row, i]:
                for h in range(count):
                    if kept[h] == groups[row, i]:
                        local[i] = h
                if local[i] < 0:
                    kept[count] = groups[row, i]
                    local[i] = count
                    pieces += group_last[kept[count]] - group_first[kept[count]]
                    count += 1
        start, end, owner = np.empty(pieces), np.empty(pieces), np.empty(pieces, np.int64)
        size, below = np.zeros(count), np.zeros(count)
        p = 0
        for h in range(count):
            for piece in range(group_first[kept[h]], group_last[kept[h]]):
                start[p], end[p], owner[p] = piece_start[piece], piece_end[piece], h
                size[h] += piece_end[piece] - piece_start[piece]
                p += 1
        for p in np.argsort(start):
            h, width = owner[p], end[p] - start[p]
            if width <= 0.0:
                continue
            for node in range(nodes.shape[0]):
                offset = 0.5 * width * (nodes[node] + 1.0)
                for i in range(k):
                    if local[i] >= 0 and size[local[i]] > 0.0:
                        z[i] = 1.0 - (below[local[i]] + (offset if local[i] == h else 0.0)) / size[local[i]]
                for i in range(k):
                    if local[i] == h:
                        gain = _derivative(z, masses[row], in_u[row], i, value, slope)
                        out[row, i] += 0.5 * width * weights[node] / size[h] * gain
            below[h] += width


@functools.lru_cache(maxsize=None)
def _gauss_nodes(k: int) -> tuple[np.ndarray, np.ndarray]:
    """Gauss-Legendre nodes and weights on [-1, 1], exact for the integrand's degree K - 1
    (numpy's ``leggauss(⌈K/2⌉)``, computed once per K -- an eigenvalue problem that costs a third of
    a tree node's choice law -- and returned read-only)."""
    nodes, weights = np.polynomial.legendre.leggauss((k + 1) // 2)
    nodes.flags.writeable = weights.flags.writeable = False
    return nodes, weights


def stream_choice_probabilities(layout, groups: np.ndarray, masses: np.ndarray, in_u: np.ndarray) -> np.ndarray:
    """``P(draft i is selected) = ∫₀¹ a_i'(t) ∂_{z_i} Φ(1 - a(t)) dt`` for every row of ordered
    drafts (module docstring): Φ the generating function of the rebuilt stream's U-marks by draft,
    a_i the share of draft i's group set below t in the J-curtain's ``layout``
    (:class:`~multidraft.theory.verifier._wor_curtain.Layout`).

    Parameters
    ----------
    layout : Layout
        The J-curtain's pieces (``piece_start``, ``piece_end``, ``group_first``, ``group_last``).
    groups : ndarray [m, K] int64
        Layout group of every U draft (read only where ``in_u``).
    masses : ndarray [m, K]
        q of every draft (U and T*).
    in_u : ndarray [m, K] bool
        Which drafts lie in U; every row needs one.

    Returns
    -------
    ndarray [m, K]: rows summing to 1, zero on the T* drafts.

    Source: docs/optimal_verifier.md §8 (the closed form); equal to the enumeration of the
    stream's outcomes with :func:`~multidraft.theory.verifier._wor_curtain.point_win_probabilities`
    to 1e-13 (tests). Cost O(P log P + P K³) per row at worst (P the pieces of its groups).
    """
    groups = np.ascontiguousarray(groups, dtype=np.int64)
    masses = np.ascontiguousarray(masses, dtype=np.float64)
    in_u = np.ascontiguousarray(in_u, dtype=np.bool_)
    if groups.ndim != 2 or masses.shape != groups.shape or in_u.shape != groups.shape:
        raise ValueError(
            f"stream_choice_probabilities: groups, masses, in_u must share one shape [m, K]; got {groups.shape}, {masses.shape}, {in_u.shape}"
        )
    if len(groups) and not in_u.any(axis=1).all():
        raise ValueError("stream_choice_probabilities: every row must draft a U token (the T* rows are the front/back rule's)")
    if (groups[in_u] < 0).any() or (groups[in_u] >= len(layout.group_first)).any():
        raise ValueError("stream_choice_probabilities: a U draft has no layout group (q = 0 or not in the layout)")
    compile_in_place(globals(), KERNELS)
    nodes, weights = _gauss_nodes(groups.shape[1])
    out = np.empty(groups.shape)
    _rows(
        groups, masses, in_u, np.ascontiguousarray(layout.piece_start, dtype=np.float64),
        np.ascontiguousarray(layout.piece_end, dtype=np.float64), np.ascontiguousarray(layout.group_first, dtype=np.int64),
        np.ascontiguousarray(layout.group_last, dtype=np.int64), nodes, weights, out,
    )  # fmt: skip
    return out
