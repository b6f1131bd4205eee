"""The compiled selection of :class:`~multidraft.theory.verifier.CurtainRule` (numba, cached on disk).

A draft y at uniform u gets the position ``t = start_j + (ℓ - C_j)`` with ``ℓ = C_{f(y)} + u ·
(C_{l(y)} - C_{f(y)})``: the pieces of every set laid end to end (C the cumulative piece
lengths, ``f(y):l(y)`` the pieces of y's group), ℓ the uniform's level among y's pieces and j
the piece holding it (``C_j <= ℓ < C_{j+1}``, clipped to the group's pieces; t clipped to the
piece's end). The draft with the smallest position is selected (the first on a tie) and
accepted iff ``u' · r(Z) < p(Z)``, with ``r = q · density`` of its group. One pass per row,
where numpy would take about fifteen calls of a few µs each (a fresh position verifies one
row). Imported on first use, like :mod:`~multidraft.theory.verifier._curtain_kernels`.
"""

from __future__ import annotations

import numba
import numpy as np

jit = numba.njit(cache=True, nogil=True)


@jit
def _position(g, u, group_first, group_last, cumulative, piece_start, piece_end):
    """The position of a draft of group g at uniform u (module docstring)."""
    first, last = group_first[g], group_last[g]
    level = cumulative[first] + u * (cumulative[last] - cumulative[first])
    piece = min(max(np.searchsorted(cumulative, level, side="right") - 1, first), last - 1)
    return min(piece_start[piece] + (level - cumulative[piece]), piece_end[piece])


@jit
def positions(groups, uniforms, group_first, group_last, cumulative, piece_start, piece_end, out):
    """``out[i] = position of a draft of group groups[i] at uniform uniforms[i]`` (flat arrays)."""
    for i in range(groups.shape[0]):
        out[i] = _position(groups[i], uniforms[i], group_first, group_last, cumulative, piece_start, piece_end)


@jit
def select_rows(local, uniforms, group, group_density, support_draft, support_target, group_first, group_last,
                cumulative, piece_start, piece_end, column, rejected):  # fmt: skip
    """For every row of ``local [N, K]`` (support indices of the drafts) and ``uniforms
    [N, >= K + 1]`` (K for the positions, then the acceptance's): the selected column
    (``column [N]``) and whether its draft is rejected (``rejected [N]``); returns the number
    of rejected rows."""
    rows, k = local.shape
    count = 0
    for r in range(rows):
        best, best_position = 0, np.inf
        for i in range(k):
            at = _position(group[local[r, i]], uniforms[r, i], group_first, group_last, cumulative, piece_start, piece_end)
            if at < best_position:
                best, best_position = i, at
        chosen = local[r, best]
        column[r] = best
        rejected[r] = uniforms[r, k] * (support_draft[chosen] * group_density[group[chosen]]) >= support_target[chosen]
        count += rejected[r]
    return count


@jit
def excess(support_target, support_draft, group_density, group, out):
    """``out = max(p - r, 0)`` on the support with ``r = q · density of the token's group``: the
    residual's weights in one pass, entry by entry the operations of the numpy expression
    ``np.maximum(p - q * group_density[group], 0.0)`` (the same bits; p and r are finite)."""
    for i in range(out.shape[0]):
        difference = support_target[i] - support_draft[i] * group_density[group[i]]
        out[i] = difference if difference > 0.0 else 0.0


@jit
def support_law(support_draft, group_density, group, out):
    """``out = q · density of the token's group`` on the support (r there), entry by entry the
    numpy expression ``support_draft * group_density[group]`` without its gathered temporary."""
    for i in range(out.shape[0]):
        out[i] = support_draft[i] * group_density[group[i]]
