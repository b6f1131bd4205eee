"""The nested ("curtain") layout: random positions that realise a selection law exactly.

Each draft X_i gets a position t_i drawn uniformly from a set S_{X_i} ⊆ [0, 1) of length q(X_i)
(tokens of one *group* share one set of the group's total length); the sets tile [0, 1), so
the positions of K iid drafts are iid uniform, their minimum has density
``w(t) = K (1 - t)^{K-1}``, and the draft holding the smallest position is selected with law

    r(y) = q(y) / |S_y| · ∫_{S_y} w(t) dt = q(y) / |S_y| · Σ_{[a, b) ⊆ S_y} W(a, b),
    W(a, b) = (1 - a)^K - (1 - b)^K.

Given groups g with masses c_g and target weights R_g inside a region [lo, hi) (Σ c_g = hi - lo,
Σ R_g = W(lo, hi)) whose cumulative weights in decreasing-density order are majorised by
``m ↦ W(lo, lo + m)``, :func:`nested_layout` builds sets with |S_g| = c_g and ∫_{S_g} w = R_g by one
stack pass (proof in docs/optimal_verifier.md):

* the *solo interval* of a set A of groups is the unique [α, α + c(A)) ⊆ [lo, hi) with
  W(α, α + c(A)) = R(A) (W(α, α + c) is strictly decreasing in α);
* process the groups by decreasing density R/c; the new group's set A starts as itself; while
  A's solo interval overlaps the hull on top of the stack, pop that hull into A; push A's solo
  interval as the new group's hull; its pieces are the hull minus the popped hulls.

Every hull lies inside [lo, hi) and contains the hulls it pops, so the pieces are disjoint, the
final hulls tile the region, and group g's pieces have length c_g and weight R_g exactly (up to
the rounding of one scalar equation per push). The pass is sequential (a stack, like the
pool-adjacent-violators algorithm) and compiled with numba: O(m) pushes and pops, one
monotone Newton solve each.
"""

from __future__ import annotations

import numpy as np

__all__ = ["interval_weight", "nested_layout"]


def interval_weight(start: np.ndarray | float, end: np.ndarray | float, k: int) -> np.ndarray:
    """``W(a, b) = (1 - a)^K - (1 - b)^K`` elementwise, without cancellation:
    ``(b - a) · S_K(1 - a, 1 - b)`` with ``S_K(x, y) = Σ_{i<K} x^i y^{K-1-i}`` (non-negative
    terms, by the recurrence ``S_j = x S_{j-1} + y^{j-1}``)."""
    start, end = np.broadcast_arrays(np.asarray(start, dtype=np.float64), np.asarray(end, dtype=np.float64))
    out = np.empty(start.shape)
    _compiled()[1](start.ravel(), end.ravel(), int(k), out.reshape(-1))
    return out


def _compiled():
    """The numba-compiled kernels ``(stack_pass, weights)``, compiled on first use and cached."""
    global _KERNELS
    if _KERNELS is None:
        import numba

        _KERNELS = _build_kernels(numba.njit(cache=True, nogil=True))
    return _KERNELS


_KERNELS = None


def _build_kernels(jit):
    @jit
    def power_sums(x: float, y: float, k: int) -> tuple[float, float]:
        """``(S_{K-1}, S_K)`` with ``S_j(x, y) = Σ_{i<j} x^i y^{j-1-i} = x S_{j-1} + y^{j-1}``."""
        previous, current, y_power = 0.0, 1.0, 1.0
        for _ in range(1, k):
            y_power *= y
            previous, current = current, x * current + y_power
        return previous, current

    @jit
    def weight(a: float, b: float, k: int) -> float:
        return (b - a) * power_sums(1.0 - a, 1.0 - b, k)[1]

    @jit
    def weights(start, end, k, out):
        for i in range(start.shape[0]):
            out[i] = weight(start[i], end[i], k)

    @jit
    def solo(c: float, target: float, k: int, lo: float, hi: float, x: float) -> float:
        """Start α ∈ [lo, hi - c] of the interval of length c whose weight is ``target``,
        by Newton's method from ``x >= 1 - α`` (an upper bound of the root; NaN: use Jensen's).

        With x = 1 - α the condition reads S(x) = d := target / c, S(x) = S_K(x, x - c) =
        W(α, α + c)/c, increasing and convex on x >= c with S'(x) = K S_{K-1}(x, x - c), so
        Newton's method started above the root decreases monotonically to it (quadratically
        once close: a step below 1e-9 x leaves an error far below 1e-15 x). Jensen (w convex)
        gives the start x* <= (d/K)^{1/(K-1)} + c/2.
        """
        d = target / c
        x_high = 1.0 - lo
        if x != x:
            x = (d / k) ** (1.0 / (k - 1)) + 0.5 * c
        if x >= x_high:
            if power_sums(x_high, x_high - c, k)[1] <= d:
                return lo
            x = x_high
        x_low = 1.0 - hi + c
        for _ in range(100):
            slope, value = power_sums(x, x - c, k)
            step = (value - d) / (k * slope) if slope > 0.0 else 0.0
            if step <= 0.0:
                break
            x -= step
            if x <= x_low:
                return hi - c
            if step <= 1e-9 * x:
                break
        return min(max(1.0 - x, lo), hi - c)

    @jit
    def stack_pass(mass, target, k, lo, hi, piece_group, piece_start, piece_end, realised_weight, realised_length):
        """The stack pass of the module docstring: writes the pieces (group-major) and each group's
        realised weight and length; returns the number of pieces.

        The new set's solo interval either overlaps the top hull or lies behind it (docs), so
        it overlaps iff it starts before the top hull's end e, i.e. iff an interval of its
        length starting at e weighs less than it does: one evaluation of S per test, and one
        Newton solve per group, for the final set (its start lies in [b - c, b] for the last
        popped hull [b, ...) and the mass c before that pop).
        """
        m = mass.shape[0]
        stack = np.empty(m, np.int64)
        hull_start = np.empty(m)
        hull_mass = np.empty(m)
        hull_weight = np.empty(m)
        top = 0
        count = 0
        for g in range(m):
            c, r = mass[g], target[g]
            upper = np.nan
            first_child = top
            while top > 0:
                below = stack[top - 1]
                end = hull_start[below] + hull_mass[below]
                if end + c <= hi and power_sums(1.0 - end, 1.0 - end - c, k)[1] * c >= r:
                    break  # starting at the top hull's end is heavy enough: the set lies behind it
                top -= 1
                upper = 1.0 - hull_start[below] + c
                c += hull_mass[below]
                r += hull_weight[below]
            start = solo(c, r, k, lo, hi, upper)
            # Popped hulls are stack[top:first_child], rearmost first: pieces are the gaps.
            cursor = start + c
            realised_weight[g], realised_length[g] = 0.0, 0.0
            for index in range(first_child - 1, top - 2, -1):
                if index >= top:
                    child = stack[index]
                    piece_begin, piece_stop = hull_start[child] + hull_mass[child], cursor
                    cursor = hull_start[child]
                else:
                    piece_begin, piece_stop = start, cursor
                piece_stop = max(piece_stop, piece_begin)
                piece_group[count], piece_start[count], piece_end[count] = g, piece_begin, piece_stop
                realised_weight[g] += weight(piece_begin, piece_stop, k)
                realised_length[g] += piece_stop - piece_begin
                count += 1
            hull_start[g], hull_mass[g], hull_weight[g] = start, c, r
            stack[top] = g
            top += 1
        return count

    return stack_pass, weights


def nested_layout(mass: np.ndarray, weight: np.ndarray, k: int, lo: float, hi: float) -> tuple[np.ndarray, ...]:
    """Pieces realising group masses and weights inside [lo, hi) (see the module docstring).

    Parameters
    ----------
    mass, weight : ndarray, shape (m,)
        Positive group masses c_g and weights R_g, in decreasing order of R_g / c_g, with
        Σ c = hi - lo and Σ R = W(lo, hi) (the caller's law guarantees the majorisation).
    k : int
        Number of drafts (>= 2).

    Returns
    -------
    group, start, end : ndarray
        The pieces (between m and 2m - 1 of them), each group's pieces contiguous, groups in
        order. A popped hull may end a rounding error past its parent: pieces are clipped to
        non-negative length.
    realised_weight, realised_length : ndarray, shape (m,)
        Each group's ``Σ W(piece)`` and ``Σ |piece|`` as laid out (R_g and c_g up to rounding).
    """
    mass = np.ascontiguousarray(mass, dtype=np.float64)
    weight = np.ascontiguousarray(weight, dtype=np.float64)
    size = 2 * len(mass)
    group, start, end = np.empty(size, np.int64), np.empty(size), np.empty(size)
    realised_weight, realised_length = np.empty(len(mass)), np.empty(len(mass))
    count = _compiled()[0](mass, weight, int(k), float(lo), float(hi), group, start, end, realised_weight, realised_length)
    return group[:count], start[:count], end[:count], realised_weight, realised_length
