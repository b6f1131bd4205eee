"""The compiled kernels of :mod:`multidraft.theory._curtain` (numba, cached on disk).

Kept in their own module, at module level, so that numba's disk cache finds them again in the
next process (functions built inside a function are recompiled every time), and so that
``import multidraft.theory`` does not import numba: :mod:`~multidraft.theory._curtain` imports
this module on first use.
"""

from __future__ import annotations

import numba
import numpy as np

jit = numba.njit(cache=True, nogil=True)


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
    if k == 2:  # S(x) = 2x - c: the root itself
        return min(max(1.0 - 0.5 * (d + c), lo), hi - c)
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
def stack_pass(mass, target, k, lo, hi, piece_group, piece_start, piece_end, realised_weight, realised_length, last_piece, offset, count, stack, hull_start, hull_mass, hull_weight):
    """The stack pass of the module docstring for groups ``offset + g`` (g = 0..m-1):
    writes their pieces from index ``count`` on (group-major), each group's realised
    weight, length and last piece; returns the new number of pieces.

    The new set's solo interval either overlaps the top hull or lies behind it (docs), so
    it overlaps iff it starts before the top hull's end e, i.e. iff an interval of its
    length starting at e weighs less than it does: one evaluation of S per test, and one
    Newton solve per group, for the final set (its start lies in [b - c, b] for the last
    popped hull [b, ...) and the mass c before that pop).
    """
    m = mass.shape[0]
    top = 0
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
        total_weight, total_length = 0.0, 0.0
        for index in range(first_child - 1, top - 2, -1):
            if index >= top:
                child = stack[index]
                piece_begin, piece_stop = hull_start[child] + hull_mass[child], cursor
                cursor = hull_start[child]
            else:
                piece_begin, piece_stop = start, cursor
            piece_stop = max(piece_stop, piece_begin)
            piece_group[count], piece_start[count], piece_end[count] = offset + g, piece_begin, piece_stop
            total_weight += weight(piece_begin, piece_stop, k)
            total_length += piece_stop - piece_begin
            count += 1
        realised_weight[offset + g], realised_length[offset + g] = total_weight, total_length
        last_piece[offset + g] = count - 1
        hull_start[g], hull_mass[g], hull_weight[g] = start, c, r
        stack[top] = g
        top += 1
    return count


@jit
def integer_power(x: float, k: int) -> float:
    """``x**k`` for an integer k >= 0 by repeated squaring."""
    out = 1.0
    while k:
        if k & 1:
            out *= x
        x *= x
        k >>= 1
    return out


@jit
def cut_scan(p, q, key, order, ps, qs, ds, k):
    """Gathers p, q and p/q into the order (``ps``, ``qs``, ``ds``) and, in the same pass, the
    min-cut scan over the prefixes T_j of the order: ``p(T_j) + 1 - q(T_j)^K``; returns (j*,
    value) at the first minimum (j = 0: the empty set, value 1)."""
    best, best_value = 0, 1.0
    cp, cq = 0.0, 0.0
    for j in range(order.shape[0]):
        token = order[j]
        ps[j], qs[j], ds[j] = p[token], q[token], key[token]
        cp += ps[j]
        cq += qs[j]
        value = cp + 1.0 - integer_power(min(cq, 1.0), k)
        if value < best_value:
            best, best_value = j + 1, value
    return best, best_value


@jit
def free_in_u(ps, qs, ds, a, b, total, scratch):
    """U = [a, b) (increasing density): the number f of free tokens (density < λ) of
    ``r* = min(p, λq)`` with ``Σ_U r* = total``, every token free when ``Σ_U p <= total``.

    ``G(λ) = Σ min(p, λq)`` is increasing and piecewise linear; at the breakpoint λ = d_j
    it is ``Σ_{i<j} p_i + d_j Σ_{i>=j} q_i``; the first breakpoint above ``total``
    brackets λ = (total - Σ_{i<j} p_i) / Σ_{i>=j} q_i."""
    acc = 0.0
    for i in range(b - 1, a - 1, -1):
        acc += qs[i]
        scratch[i] = acc  # Σ_{i' >= i} q
    before = 0.0
    j = a
    while j < b:
        if before + ds[j] * scratch[j] > total:
            break
        before += ps[j]
        j += 1
    if j == b:
        return b - a
    level = (total - before) / scratch[j]
    f = a
    while f < j and ds[f] < level:
        f += 1
    return f - a


@jit
def pool_in_t(ps, qs, ds, a, b, total, scratch):
    """T* = [a, b) (increasing density): the number of pool tokens (density <= μ) of
    ``r* = max(p, μq)`` with ``Σ_{T*} r* = total`` (μ = 0 when ``Σ_{T*} p >= total``).

    ``H(μ) = Σ max(p, μq)`` is increasing; at μ = d_j it is ``d_j Σ_{i<=j} q_i +
    Σ_{i>j} p_i``; the first breakpoint at or above ``total`` brackets
    μ = (total - Σ_{i>=j} p_i) / Σ_{i<j} q_i."""
    acc = 0.0
    for i in range(b - 1, a - 1, -1):
        acc += ps[i]
        scratch[i] = acc  # Σ_{i' >= i} p
    level = 0.0
    if acc < total:
        mass_before = 0.0
        j = a
        while j < b:
            after = scratch[j + 1] if j + 1 < b else 0.0
            if ds[j] * (mass_before + qs[j]) + after >= total:
                break
            mass_before += qs[j]
            j += 1
        j = min(j, b - 1)
        level = (total - scratch[j]) / mass_before if j > a else 0.0
    pool = a
    while pool < b and ds[pool] <= level:
        pool += 1
    return pool - a


@jit
def side_by_side(mass, lo, offset, count, piece_group, piece_start, piece_end, realised_weight, realised_length, last_piece):
    """K = 1 (w = 1): any tiling realises r = q; the groups lie side by side."""
    cursor = lo
    for g in range(mass.shape[0]):
        piece_group[count], piece_start[count], piece_end[count] = offset + g, cursor, cursor + mass[g]
        realised_weight[offset + g] = realised_length[offset + g] = mass[g]
        last_piece[offset + g] = count
        cursor += mass[g]
        count += 1
    return count


@jit
def fit(p, q, key, order, k, ps, qs, ds, sorted_group, group_of, piece_group, piece_start, piece_end, density, scratch, mass, target, realised_weight, realised_length, last_piece, stack, hull_start, hull_mass, hull_weight):
    """The whole fit of tokens with ``p``, ``q`` (all q > 0) and ``key = p/q``, taken in ``order``
    (increasing p/q): ``ps``, ``qs``, ``ds`` and ``sorted_group`` are scratch in that order,
    ``group_of`` receives every token's group in the original order.

    Writes each sorted token's group, the pieces (group-major) and every group's realised
    density; returns ``(|T*|, P*, Σ min(p, r), groups, pieces)``. In sorted order T* is
    ``[0, best)`` and U ``[best, s)``. Groups: U's pool (if any), U's free tokens from the
    highest density, then T*'s free tokens from the highest density and T*'s pool (if any).
    """
    s = order.shape[0]
    group_of_token, group_of = group_of, sorted_group  # the layout writes sorted positions
    best, best_value = cut_scan(p, q, key, order, ps, qs, ds, k)
    optimum = min(best_value, 1.0)
    boundary = 0.0
    for i in range(best, s):
        boundary += qs[i]  # q(U): U's sets tile [0, q(U)), T*'s [q(U), 1)
    groups, count = 0, 0
    for part in range(2):
        if part == 0:
            a, b, lo, hi = best, s, 0.0, boundary
        else:
            a, b, lo, hi = 0, best, boundary, 1.0
        if b <= a:
            continue
        total = weight(lo, hi, k)  # h(U) = W(0, q(U)); q(T*)^K = W(q(U), 1)
        if part == 0:
            free = free_in_u(ps, qs, ds, a, b, total, scratch)
            pooled = b - a > free
            m = 0
            if pooled:
                pool_mass, free_weight = 0.0, 0.0
                for i in range(a + free, b):
                    pool_mass += qs[i]
                    group_of[i] = groups
                for i in range(a, a + free):
                    free_weight += ps[i]
                mass[0], target[0] = pool_mass, max(total - free_weight, 0.0)
                m = 1
            for i in range(a + free - 1, a - 1, -1):
                mass[m], target[m] = qs[i], ps[i]
                group_of[i] = groups + m
                m += 1
        else:
            pool = pool_in_t(ps, qs, ds, a, b, total, scratch)
            m = 0
            free_weight = 0.0
            for i in range(b - 1, a + pool - 1, -1):
                mass[m], target[m] = qs[i], ps[i]
                free_weight += ps[i]
                group_of[i] = groups + m
                m += 1
            if pool > 0:
                pool_mass = 0.0
                for i in range(a, a + pool):
                    pool_mass += qs[i]
                    group_of[i] = groups + m
                mass[m], target[m] = pool_mass, max(total - free_weight, 0.0)
                m += 1
        if k == 1:
            count = side_by_side(mass[:m], lo, groups, count, piece_group, piece_start, piece_end, realised_weight, realised_length, last_piece)
        else:
            count = stack_pass(
                mass[:m], target[:m], k, lo, hi, piece_group, piece_start, piece_end, realised_weight, realised_length,
                last_piece, groups, count, stack, hull_start, hull_mass, hull_weight,
            )
        groups += m
    # A group of draft mass below the resolution of positions (q ~ 1e-17 and less) gets sets
    # of length zero: its drafts sit at one point t0 (the start of its last piece, where
    # CurtainRule.positions puts them), and win when the K - 1 other positions lie above it,
    # so its density is w(t0) = K (1 - t0)^{K-1} rather than 0/0.
    for g in range(groups):
        if realised_length[g] > 0.0:
            density[g] = realised_weight[g] / realised_length[g]
        else:
            density[g] = k * integer_power(1.0 - piece_start[last_piece[g]], k - 1)
    acceptance = 0.0
    for i in range(s):
        acceptance += min(ps[i], qs[i] * density[group_of[i]])
        group_of_token[order[i]] = group_of[i]
    return best, optimum, acceptance, groups, count


@jit
def settle_ties(packed, shift, key, order):
    """``order`` from ``packed`` (keys truncated to their top bits, index in the low ``shift``
    bits, sorted): the index bits, with every run of equal truncated keys sorted by the
    exact key (insertion sort; runs are short unless keys agree to ~2^-(52 - shift))."""
    mask = (np.uint64(1) << np.uint64(shift)) - np.uint64(1)
    high = ~mask
    n = packed.shape[0]
    for i in range(n):
        order[i] = np.int64(packed[i] & mask)
    start = 0
    while start < n:
        stop = start + 1
        while stop < n and (packed[stop] & high) == (packed[start] & high):
            stop += 1
        if stop - start > 1:
            if stop - start > 64:
                run = order[start:stop].copy()
                order[start:stop] = run[np.argsort(key[run])]
            else:
                for i in range(start + 1, stop):
                    item = order[i]
                    j = i - 1
                    while j >= start and key[order[j]] > key[item]:
                        order[j + 1] = order[j]
                        j -= 1
                    order[j + 1] = item
        start = stop
