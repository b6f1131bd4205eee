"""Compiled kernels of the path curtain (:mod:`multidraft.theory.verifier._independent_rule`):
the stack pass of :mod:`multidraft.theory.verifier._curtain` for a piecewise-linear weight.

A draft's weight on its mass coordinate x ∈ [0, 1) is ``w(x) = 1 - F(x)``, F the other draft's
mass along a monotone path through the breakpoints ``(xs[k], ys[k])`` (``xs``, ``ys``
non-decreasing from 0 to 1); ``W(a, b) = ∫_a^b w``. Kept at module level (numba's disk cache).
"""

from __future__ import annotations

import numba
import numpy as np

jit = numba.njit(cache=True, nogil=True)


@jit
def segment(xs, x):
    """The k with ``xs[k] <= x < xs[k + 1]`` (clipped to ``[0, len - 2]``)."""
    lo, hi = 0, xs.shape[0] - 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if xs[mid] <= x:
            lo = mid
        else:
            hi = mid
    return lo


@jit
def walk(xs, x, k):
    """:func:`segment` found by walking on from a k with ``xs[k] <= x`` (or k = 0): the same k, in
    O(steps) for points visited in increasing order."""
    last = xs.shape[0] - 2
    while k < last and xs[k + 1] <= x:
        k += 1
    return k


@jit
def other_mass(xs, ys, x):
    """F(x): the other coordinate of the path where this one is x."""
    return other_mass_at(xs, ys, x, segment(xs, x))


@jit
def other_mass_at(xs, ys, x, k):
    """:func:`other_mass` on x's segment k."""
    span = xs[k + 1] - xs[k]
    if span <= 0.0:
        return ys[k + 1]
    return ys[k] + (ys[k + 1] - ys[k]) * (min(max(x, xs[k]), xs[k + 1]) - xs[k]) / span


@jit
def phi(xs, ys, cw, x):
    """``∫_0^x w`` (the cut scan's value): the trapezoid ``cw[k] + (x - xs[k]) (1 - (ys[k] + F(x))/2)``
    on x's segment k, F(x) interpolated without clipping, as numpy evaluates it term by term."""
    return phi_at(xs, ys, cw, x, segment(xs, x))


@jit
def phi_at(xs, ys, cw, x, k):
    """:func:`phi` on x's segment k."""
    span = xs[k + 1] - xs[k]
    f = ys[k] + (ys[k + 1] - ys[k]) * (x - xs[k]) / span if span > 0.0 else ys[k + 1]
    return cw[k] + (x - xs[k]) * (1.0 - 0.5 * (ys[k] + f))


@jit
def cut_scan(xs, ys, cw, ms, rs, lo, hi):
    """The iid cut scan on a path's weight: the first j minimising
    ``V_j = Σ_{i<j} rs[i] + Φ(max(hi - Σ_{i<j} ms[i], lo)) - Φ(lo)`` (``V_0 = Φ(hi) - Φ(lo)``,
    Φ = :func:`phi`), prefix sums accumulated in order (numpy's ``cumsum``), one pass. The points
    ``max(hi - Σ ms, lo)`` do not increase, so their segments are found by walking down the path
    from hi's (the k of :func:`segment`, without a binary search per point)."""
    base = phi(xs, ys, cw, lo)
    k = segment(xs, hi)
    best, low = 0, phi_at(xs, ys, cw, hi, k) - base
    cm, cr = 0.0, 0.0
    for j in range(ms.shape[0]):
        cm += ms[j]
        cr += rs[j]
        x = max(hi - cm, lo)
        while k > 0 and xs[k] > x:
            k -= 1
        value = cr + phi_at(xs, ys, cw, x, k) - base
        if value < low:
            best, low = j + 1, value
    return best


@jit
def cumulative(xs, ys, out):
    """``out[k] = ∫_0^{xs[k]} w``: trapezoids of ``1 - F``."""
    out[0] = 0.0
    for k in range(xs.shape[0] - 1):
        out[k + 1] = out[k] + (xs[k + 1] - xs[k]) * (1.0 - 0.5 * (ys[k] + ys[k + 1]))


@jit
def pweight(xs, ys, cw, a, b):
    """``W(a, b) = ∫_a^b (1 - F)`` for a <= b: partial segments at both ends, breakpoint sums
    between (no cancellation inside one segment)."""
    if b <= a:
        return 0.0
    return pweight_at(xs, ys, cw, a, b, segment(xs, a), segment(xs, b))


@jit
def pweight_at(xs, ys, cw, a, b, ka, kb):
    """:func:`pweight` (a < b) on a's segment ka and b's segment kb."""
    fa, fb = other_mass_at(xs, ys, a, ka), other_mass_at(xs, ys, b, kb)
    if ka == kb:
        return (b - a) * (1.0 - 0.5 * (fa + fb))
    out = (xs[ka + 1] - a) * (1.0 - 0.5 * (fa + ys[ka + 1]))
    out += cw[kb] - cw[ka + 1]
    out += (b - xs[kb]) * (1.0 - 0.5 * (ys[kb] + fb))
    return out


@jit
def psolo(xs, ys, cw, c, target, lo, hi):
    """α ∈ [lo, hi - c] with ``W(α, α + c) = target`` (decreasing in α): safeguarded Newton
    (derivative ``w(α + c) - w(α)``) inside a bisection bracket."""
    a, b = lo, hi - c
    if b <= a:
        return a
    if pweight(xs, ys, cw, a, a + c) <= target + 4e-16 * max(target, c):  # a plateau's first root (rounding)
        return a
    if pweight(xs, ys, cw, b, b + c) >= target:
        return b
    x = 0.5 * (a + b)
    for _ in range(200):
        value = pweight(xs, ys, cw, x, x + c) - target
        if value > 0.0:
            a = x
        else:
            b = x
        slope = other_mass(xs, ys, x) - other_mass(xs, ys, x + c)  # w(x + c) - w(x) <= 0
        step_ok = False
        if slope < 0.0:
            nxt = x - value / slope
            if a < nxt < b:
                step_ok = True
        if not step_ok:
            nxt = 0.5 * (a + b)
        if abs(nxt - x) <= 1e-16 * max(1.0, abs(x)) or b - a <= 4e-16:
            x = nxt
            break
        x = nxt
    return min(max(x, lo), hi - c)


@jit
def path_stack_pass(
    xs, ys, cw, mass, target, lo, hi, piece_start, piece_end, group_end, offset, count, stack, hull_start, hull_end, hull_mass, hull_weight,
):  # fmt: skip
    """The stack pass (group by group) of :func:`~multidraft.theory.verifier._curtain_kernels.stack_pass`
    with ``W`` of the path's weight: groups by decreasing density, each set's solo interval
    popping the hulls it overlaps. Writes the pieces and every group's piece end; returns the
    new number of pieces.

    A merged set's interval must hold the hulls it popped. In exact arithmetic its root does
    (its mean weight is at most theirs), except on a plateau of roots (the staircase's weight is
    a step function, ``W(α, α + c)`` constant in α), where the first root can end before the last
    child: its first piece then runs far past its mass. So a merged set's root is sought from
    ``max(floor, last child's end - c)`` on (issue 33: n = 2048, 0.8/1.2, a group of mass 5.5e-5
    with a piece of 0.025). And a hull's extent ``[hull_start, hull_end]`` covers its children's
    (``start + c`` can round a few ulps inside the last child's end), the next hull sitting
    behind the recorded end: the pieces are disjoint in floating point, not only up to rounding
    (issue 33: 175 pieces 1-3 ulps into their neighbours at n = 49152, 0.8/1.2)."""
    m = mass.shape[0]
    top = 0
    for g in range(m):
        c, r = mass[g], target[g]
        first_child = top
        while top > 0:
            below = stack[top - 1]
            end = hull_end[below]
            if end + c <= hi and pweight(xs, ys, cw, end, end + c) >= r:
                break
            top -= 1
            c += hull_mass[below]
            r += hull_weight[below]
        floor = lo if top == 0 else hull_end[stack[top - 1]]
        if first_child > top:  # a merged set's interval holds its children: it ends at or after the last one's end
            floor = max(floor, hull_end[stack[first_child - 1]] - c)
        start = psolo(xs, ys, cw, c, r, floor, hi)  # behind the hull below (a plateau of roots: its first)
        cursor = start + c
        left, right = start, cursor
        for index in range(first_child - 1, top - 2, -1):
            if index >= top:
                child = stack[index]
                piece_begin, piece_stop = hull_end[child], cursor
                cursor = hull_start[child]
                left, right = min(left, cursor), max(right, piece_begin)
            else:
                piece_begin, piece_stop = start, cursor
            piece_stop = max(piece_stop, piece_begin)
            piece_start[count], piece_end[count] = piece_begin, piece_stop
            count += 1
        group_end[offset + g] = count
        hull_start[g], hull_end[g], hull_mass[g], hull_weight[g] = left, right, c, r
        stack[top] = g
        top += 1
    return count


@jit
def piece_laws(xs, ys, cw, piece_start, piece_end, first, last, out):
    """Every group's law ``Σ_{pieces} W`` (groups ``first[g]:last[g]``)."""
    for g in range(first.shape[0]):
        total = 0.0
        for j in range(first[g], last[g]):
            total += pweight(xs, ys, cw, piece_start[j], piece_end[j])
        out[g] = total


@jit
def sorted_piece_laws(xs, ys, cw, piece_start, piece_end, out):
    """``out[j] = W(piece_start[j], piece_end[j])`` for one piece per token, starts non-decreasing
    (side by side): :func:`pweight`'s arithmetic, the segments found by walking along the path
    (O(pieces + breakpoints) in all, not a binary search per end)."""
    k = 0
    for j in range(piece_start.shape[0]):
        a, b = piece_start[j], piece_end[j]
        k = walk(xs, a, k)
        out[j] = pweight_at(xs, ys, cw, a, b, k, walk(xs, b, k)) if b > a else 0.0


@jit
def path_times(xs, ys, x):
    """Position on the path (``x + F(x)``) of every coordinate x."""
    out = np.empty(x.shape[0])
    for i in range(x.shape[0]):
        out[i] = x[i] + other_mass(xs, ys, x[i])
    return out
