"""The compiled kernels of :mod:`multidraft.theory.verifier._curtain` (numba, cached on disk).

Kept in their own module, at module level, so that numba's disk cache finds them again in the
next process (functions built inside a function are recompiled every time), and so that
``import multidraft.theory`` does not import numba: :mod:`~multidraft.theory.verifier._curtain` imports
this module on first use.
"""

from __future__ import annotations

import numba
import numpy as np

#: ``error_model="numpy"``: a float division by zero gives inf or nan (IEEE) rather than raising, so numba
#: inserts no zero test before each division and the lane loops vectorise (the same bits: no kernel here divides
#: by zero on valid input; a rule whose densities or acceptance are not finite falls back, ``fit_support_rule``).
jit = numba.njit(cache=True, nogil=True, error_model="numpy")


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
def held_start(start, c, lo, stack, top, first_child, hull_end):
    """``start`` held at or after the hull below's end (``lo``) and a merged set's last child's end less c (stack_pass)."""
    start = max(start, lo if top == 0 else hull_end[stack[top - 1]])
    if first_child > top and start + c < hull_end[stack[first_child - 1]]:
        start = hull_end[stack[first_child - 1]] - c
    return start


#: Smallest and largest block of groups solved side by side (:func:`chain`, :func:`row`); the
#: largest K whose power sums :func:`block_power_sums` unrolls.
FIRST_BLOCK, CHAIN_BLOCK, UNROLLED_K = 8, 256, 8


@jit
def stack_pass(mass, target, k, lo, hi, piece_start, piece_end, density, group_end, offset, count, stack, hull_start, hull_end, hull_mass, hull_weight, patterns=True):
    """The stack pass of the module docstring for groups ``offset + g`` (g = 0..m-1): writes their pieces from
    index ``count`` on (group-major), each group's realised density (:func:`realised_density`) and the end of
    its pieces; returns the new number of pieces.

    The new set's solo interval either overlaps the top hull or lies behind it (docs), so it overlaps iff it
    starts before the top hull's end e, i.e. iff an interval of its length starting at e weighs less than it
    does: one evaluation of S per test, and one Newton solve per group, for the final set (its start lies in
    [b - c, b] for the last popped hull [b, ...) and the mass c before that pop).

    Two patterns are tried first, their roots not depending on each other and solved side by side: a *chain*
    (:func:`chain`: each group's set overlapping the top hull, made of all the chain before it, and no hull
    below, as on U, where every group pops exactly the previous hull), and a *row* (:func:`row`: each group's
    set lying behind the previous one, as T*'s free tokens do before its pool pops them). A pattern that holds
    for fewer than :data:`FIRST_BLOCK` groups is retried only after twice as many groups as its last wait. For
    K = 2 the solo start is a closed form (:func:`solo`) and group by group is cheaper. ``patterns=False``: group
    by group throughout (the tests compare the two).

    A hull's extent ``[hull_start, hull_end]`` covers its children's; a start is held at or after the end of the
    hull below (``lo``) and its last child's end less c, where it lies in exact arithmetic (roots of large sets
    are ill-conditioned and ``start + c`` rounds: pieces overlapped inside a part, and a part's last set started
    up to 1.5e-12 before ``lo``, docs/optimal_verifier.md §5).
    """
    m = mass.shape[0]
    top, g = 0, 0
    never = m if k == 2 or not patterns else 0
    chain_at, chain_wait, row_at, row_wait = never, FIRST_BLOCK, never, FIRST_BLOCK
    block = np.empty((11, CHAIN_BLOCK))
    while g < m:
        if top >= 1 and g >= chain_at:
            floor = hull_end[stack[top - 2]] if top >= 2 else lo
            consumed, count = chain(mass, target, k, lo, hi, g, stack[top - 1], floor, piece_start, piece_end, density, group_end, offset, count, hull_start, hull_end, hull_mass, hull_weight, block)
            if consumed > 0:
                g += consumed
                stack[top - 1] = g - 1
            if consumed >= FIRST_BLOCK:
                chain_wait = FIRST_BLOCK
            else:
                chain_at, chain_wait = g + chain_wait, 2 * chain_wait
            if g == m:
                break
        if top >= 1 and g >= row_at:
            consumed, count = row(mass, target, k, lo, hi, g, stack, top, piece_start, piece_end, density, group_end, offset, count, hull_start, hull_end, hull_mass, hull_weight, block)
            g += consumed
            top += consumed
            if consumed >= FIRST_BLOCK:
                row_wait = FIRST_BLOCK
            else:
                row_at, row_wait = g + row_wait, 2 * row_wait
            if g == m:
                break
        c, r = mass[g], target[g]
        upper = np.nan
        first_child = top
        while top > 0:
            below = stack[top - 1]
            end = hull_end[below]
            if end + c <= hi and power_sums(1.0 - end, 1.0 - end - c, k)[1] * c >= r:
                break  # starting at the top hull's end is heavy enough: the set lies behind it
            top -= 1
            upper = 1.0 - hull_start[below] + c
            c += hull_mass[below]
            r += hull_weight[below]
        start = held_start(solo(c, r, k, lo, hi, upper), c, lo, stack, top, first_child, hull_end)
        # Popped hulls are stack[top:first_child], rearmost first: pieces are the gaps.
        cursor = start + c
        left, right = start, cursor
        total_weight, total_length = 0.0, 0.0
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
            total_weight += weight(piece_begin, piece_stop, k)
            total_length += piece_stop - piece_begin
            count += 1
        density[offset + g] = realised_density(total_weight, total_length, start, k)
        group_end[offset + g] = count
        hull_start[g], hull_end[g], hull_mass[g], hull_weight[g] = left, right, c, r
        stack[top] = g
        top += 1
        g += 1
    return count


@jit
def block_power_sums(x, y, k, n, previous, current, y_power):
    """:func:`power_sums` of ``(x[i], y[i])`` for i < n into ``previous``, ``current`` (the same operations, so the
    same bits). For K <= :data:`UNROLLED_K` one pass over the lanes, each lane's K - 1 steps in registers: a loop of
    fixed length whose steps past K are masked (``j < k``, the same for every lane) is unrolled, and the lane loop
    vectorises (4-5x faster than stepping every lane through memory, as larger K do)."""
    if k <= UNROLLED_K:
        for i in range(n):
            a, b, last, current_i, power = x[i], y[i], 0.0, 1.0, 1.0
            for j in range(1, UNROLLED_K):
                if j < k:
                    power *= b
                    last, current_i = current_i, a * current_i + power
            previous[i], current[i] = last, current_i
        return
    for i in range(n):
        previous[i], current[i], y_power[i] = 0.0, 1.0, 1.0
    for _ in range(1, k):
        for i in range(n):
            y_power[i] *= y[i]
            previous[i], current[i] = current[i], x[i] * current[i] + y_power[i]


@jit
def block_starts(x, mass, level, k, lo, hi, n, block, two_sided=False):
    """The solo starts of lanes i < n (mass ``mass[i]``, density ``level[i]``) by Newton's method from ``x[i]``,
    side by side until every step is below 1e-9 x (:func:`solo`'s criterion); overwrites ``x`` with the starts,
    clamped to [lo, hi - mass], and returns ``block[8]``, 1.0 where ``x[i]`` was a bracket (S(x) >= d there: from
    above, Newton's method decreases monotonically to the root) and 0.0 where it was not (the lane stays at its
    start).

    ``two_sided``: ``x[i]`` is a guess, not a bracket, and ``block[10, i]`` a bracket from above. The first step is
    taken whichever side the guess lies on: S is convex and increasing on x >= mass, so one Newton step from below
    lands at or above the root (S(x1) >= S(x0) + S'(x0)(x1 - x0) = d); clipped to the bracket, it is a bracket, and
    the rest is as above (``held`` is then not read)."""
    previous, current, y_power, y, held = block[4], block[5], block[6], block[7], block[8]
    if two_sided:  # the first step from the guess, either way (no slope: to the bracket)
        for i in range(n):
            y[i] = x[i] - mass[i]
        block_power_sums(x, y, k, n, previous, current, y_power)
        for i in range(n):
            step = (current[i] - level[i]) / (k * previous[i]) if previous[i] > 0.0 else -np.inf
            x[i] = max(min(x[i] - step, block[10, i]), 1.0 - hi + mass[i])
    for iteration in range(100):
        for i in range(n):
            y[i] = x[i] - mass[i]
        block_power_sums(x, y, k, n, previous, current, y_power)
        pending = 0
        for i in range(n):
            if iteration == 0:
                held[i] = current[i] >= level[i]
            step = (current[i] - level[i]) / (k * previous[i]) if previous[i] > 0.0 else 0.0
            step = max(step, 0.0)
            moved = max(x[i] - step, 1.0 - hi + mass[i])  # x >= x_low: the start at most hi - mass
            pending += (step > 1e-9 * moved) & (moved == x[i] - step)
            x[i] = moved
        if pending == 0:
            break
    for i in range(n):
        x[i] = min(max(1.0 - x[i], lo), hi - mass[i])
    return held


@jit
def chain(mass, target, k, lo, hi, g, anchor, floor, piece_start, piece_end, density, group_end, offset, count, hull_start, hull_end, hull_mass, hull_weight, block):
    """Groups g, g + 1, ... pushed while each one's set overlaps the top hull (``anchor`` first, then the hull just
    pushed) and, merged with it, starts at or after ``floor``, the end of the hull below (``lo`` for none):
    returns (groups consumed, piece count).

    In such a chain group h pops hull h - 1 and its hull is the solo interval of everything from the anchor to
    h: mass Q_h = Q_{h-1} + c_h and weight R_h = R_{h-1} + r_h, and its start α_h lies in [α_{h-1} - c_h,
    α_{h-1}] (docs: a merged hull contains both). So every root is bracketed from above by the last root of the
    previous block, x = 1 - α <= 1 - α_a + Q_h - Q_a, and the Newton solves of a block run side by side, lane by
    lane, until every step is below 1e-9 x (:func:`solo`'s criterion). They start from a guess inside the
    bracket, ``x_a + ρ (Q_h - Q_a)`` with ρ the share of its mass by which the previous block's hull grew
    towards lo (``ρ = 1``, the bracket, in the first block): a first step from either side gives a bracket
    (:func:`block_starts` with ``two_sided``), and about two steps per root rather than 3.5 at n = 49152. Group
    h overlaps hull h - 1 iff the merged start α_h <= α_{h-1}: with δ = α_{h-1} - α_h, the merged weight gives
    r_h = W(α_h, α_{h-1}) + W(e, e + c_h - δ) (e the end of hull h - 1), increasing in δ and equal to W(e,
    e + c_h) at δ = 0, so δ > 0 exactly when h's own solo interval starts before e (δ = 0: the two touch, and both
    layouts coincide). Likewise the merged set pops the hull below too iff it starts before ``floor``. So the
    chain is checked on the roots themselves and ends before the first group where a check fails; its roots and
    the rest of its block are discarded (the bracket still held there: the merged start is never below
    α_{h-1} - c_h). Blocks grow from :data:`FIRST_BLOCK` groups to :data:`CHAIN_BLOCK`. Each group's pieces: hull h minus
    hull h - 1, rearmost first, as the stack pass writes them.
    """
    m = mass.shape[0]
    cq, cr, level, x, previous, current, y_power, y, u, v = block[0], block[1], block[2], block[3], block[4], block[5], block[6], block[7], block[8], block[9]
    bracket = block[10]
    consumed, size = 0, FIRST_BLOCK
    x_high = 1.0 - lo
    ratio = 1.0  # the guess's share of the bracket, from the last block (1: the bracket)
    while g + consumed < m:
        first = g + consumed
        n = min(size, m - first)
        anchor_start, anchor_end, anchor_mass, anchor_weight = hull_start[anchor], hull_end[anchor], hull_mass[anchor], hull_weight[anchor]
        anchor_x = 1.0 - anchor_start
        q_sum, r_sum = anchor_mass, anchor_weight
        for i in range(n):
            q_sum = mass[first + i] + q_sum  # the order push adds in: c += hull mass
            r_sum = target[first + i] + r_sum
            cq[i], cr[i] = q_sum, r_sum
        for i in range(n):  # apart from the running sums: this loop vectorises
            level[i] = cr[i] / cq[i]
            bracket[i] = min(anchor_x + (cq[i] - anchor_mass), x_high)
            x[i] = max(min(anchor_x + ratio * (cq[i] - anchor_mass), bracket[i]), 1.0 - hi + cq[i])
        block_starts(x, cq, level, k, lo, hi, n, block, True)
        links = 0
        before = anchor_start
        for i in range(n):
            if x[i] > before or x[i] < floor:
                break  # group first + i lies behind hull first + i - 1, or pops more: the chain ends here
            before = x[i]
            links += 1
        # Pieces: [end of hull h - 1, end of hull h) then [α_h, α_{h-1}); their weights lane by lane.
        rear_begin, child_start = anchor_end, anchor_start  # hull h - 1's extent
        for i in range(links):  # rear_begin carried in a register, not re-read from piece_end (0.15 of 0.75 ms at s = 49152)
            start, q_i = x[i], cq[i]
            start = start if start + q_i >= rear_begin else rear_begin - q_i  # ends at or after its child's end (stack_pass)
            piece, rear_end = count + 2 * i, max(start + q_i, rear_begin)
            x[i], piece_start[piece], piece_end[piece], piece_start[piece + 1], piece_end[piece + 1] = start, rear_begin, rear_end, start, max(child_start, start)
            rear_begin, child_start = rear_end, min(start, child_start)
            group_end[offset + first + i] = piece + 2
        total_weight, total_length = level, y  # free once the roots are found
        for i in range(links):
            total_weight[i], total_length[i] = 0.0, 0.0
        for side in range(2):
            for i in range(links):
                u[i], v[i] = 1.0 - piece_start[count + 2 * i + side], 1.0 - piece_end[count + 2 * i + side]
            block_power_sums(u, v, k, links, previous, current, y_power)
            for i in range(links):
                length = piece_end[count + 2 * i + side] - piece_start[count + 2 * i + side]
                total_weight[i] += length * current[i]  # weight(): (b - a) S_K(1 - a, 1 - b)
                total_length[i] += length
        for i in range(links):  # weight / length (vectorises); a set of length zero: realised_density
            density[offset + first + i] = total_weight[i] / total_length[i] if total_length[i] > 0.0 else -1.0
        for i in range(links):
            if total_length[i] <= 0.0:
                density[offset + first + i] = realised_density(total_weight[i], total_length[i], x[i], k)
        last = links - 1
        if last >= 0 and cq[last] > anchor_mass:  # x holds the starts α now
            ratio = min(max(((1.0 - x[last]) - anchor_x) / (cq[last] - anchor_mass), 0.0), 1.0)
        if last >= 0:
            hull_start[first + last], hull_end[first + last], hull_mass[first + last], hull_weight[first + last] = child_start, rear_begin, cq[last], cr[last]
        count += 2 * links
        consumed += links
        if links < n:
            break
        anchor = first + n - 1
        size = min(2 * size, CHAIN_BLOCK)
    return consumed, count


@jit
def row(mass, target, k, lo, hi, g, stack, top, piece_start, piece_end, density, group_end, offset, count, hull_start, hull_end, hull_mass, hull_weight, block):
    """Groups g, g + 1, ... pushed while each one's solo interval lies behind the top hull (no pops): returns
    (groups consumed, piece count); they go on the stack above ``top``.

    In such a row the hulls lie front to back, so group h starts at or after the end e of the hull below the row
    plus the masses between: x = 1 - α <= 1 - e - Σ c (checked: a bracket that is not one, S(x) < d there, ends the
    row), and the Newton solves of a block run side by side as in :func:`chain`. Group h lies behind hull h - 1 iff
    its start is at or after that hull's end (:func:`stack_pass`'s test, on the roots); the row ends before the
    first group where that fails. Each group is its own single piece.
    """
    m = mass.shape[0]
    cq, cr, level, x, previous, current, y_power, u, v = block[0], block[1], block[2], block[3], block[4], block[5], block[6], block[8], block[9]
    consumed, size = 0, FIRST_BLOCK
    x_high = 1.0 - lo
    below = stack[top - 1]
    while g + consumed < m:
        first = g + consumed
        n = min(size, m - first)
        end = hull_end[below]
        front = end
        for i in range(n):
            cq[i], cr[i] = mass[first + i], target[first + i]
            level[i] = cr[i] / cq[i]
            x[i] = max(min(1.0 - front, x_high), 1.0 - hi + cq[i])
            front += cq[i]
        held = block_starts(x, cq, level, k, lo, hi, n, block)
        links = 0
        for i in range(n):
            if held[i] == 0.0 or x[i] < end:
                break  # group first + i overlaps the hull before it: the row ends here
            end = x[i] + cq[i]
            links += 1
        for i in range(links):
            piece_start[count + i], piece_end[count + i] = x[i], max(x[i] + cq[i], x[i])
            u[i], v[i] = 1.0 - piece_start[count + i], 1.0 - piece_end[count + i]
        block_power_sums(u, v, k, links, previous, current, y_power)
        for i in range(links):
            length = piece_end[count + i] - piece_start[count + i]
            group = first + i
            density[offset + group] = realised_density(length * current[i], length, x[i], k)
            group_end[offset + group] = count + i + 1
            hull_start[group], hull_end[group], hull_mass[group], hull_weight[group] = x[i], piece_end[count + i], cq[i], cr[i]
            stack[top + consumed + i] = group
        count += links
        consumed += links
        if links < n:
            break
        below = first + n - 1
        size = min(2 * size, CHAIN_BLOCK)
    return consumed, count


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
def cut_scan(p, q, order, ps, qs, ds, k, prefix_p, prefix_q):
    """Gathers p, q into the order (``ps``, ``qs``; ``ds = ps/qs + 0.0``, the sort key's bits) and the min-cut scan
    over the prefixes T_j of the order: ``p(T_j) + 1 - q(T_j)^K``; returns (j*, value) at the first minimum (j = 0:
    the empty set, value 1) and q summed in order. Three passes: the running sums (sequential, into ``prefix_p``,
    ``prefix_q``), the values and ``ds`` (:func:`integer_power`'s steps for K < 64, masked: the pass vectorises, its
    division cheaper than a third gather; into ``prefix_p``) and the first minimum."""
    s = order.shape[0]
    cp, cq = 0.0, 0.0
    for j in range(s):  # p and q summed from registers, not re-read from ps, qs (numba cannot rule out aliasing)
        token = order[j]
        p_j, q_j = p[token], q[token]
        ps[j], qs[j] = p_j, q_j
        cp, cq = cp + p_j, cq + q_j
        prefix_p[j], prefix_q[j] = cp, cq
    for j in range(s):
        ds[j], x, power = ps[j] / qs[j] + 0.0, min(prefix_q[j], 1.0), 1.0
        for bit in range(6):
            if (k >> bit) & 1:
                power *= x
            x *= x
        prefix_p[j] = prefix_p[j] + 1.0 - (power if k < 64 else integer_power(min(prefix_q[j], 1.0), k))
    best, best_value = 0, 1.0
    for j in range(s):
        if prefix_p[j] < best_value:
            best, best_value = j + 1, prefix_p[j]
    return best, best_value, cq


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
        if j == b:  # every token pooled: μ Σ_{T*} q = total
            level = total / mass_before
        else:
            level = (total - scratch[j]) / mass_before if j > a else 0.0
    pool = a
    while pool < b and ds[pool] <= level:
        pool += 1
    return pool - a


@jit
def side_by_side(mass, lo, offset, count, piece_start, piece_end, density, group_end):
    """K = 1 (w = 1): any tiling realises r = q; the groups lie side by side (density 1)."""
    cursor = lo
    for g in range(mass.shape[0]):
        piece_start[count], piece_end[count] = cursor, cursor + mass[g]
        density[offset + g] = 1.0
        cursor += mass[g]
        count += 1
        group_end[offset + g] = count
    return count


@jit
def realised_density(total_weight: float, total_length: float, point: float, k: int) -> float:
    """A group's realised density r/q: its sets' weight over their length. A group of draft mass below the
    resolution of positions (q ~ 1e-17 and less) gets sets of length zero: its drafts sit at one point t0 (the start
    of its last piece, where CurtainRule.positions puts them), and win when the K - 1 other positions lie above it,
    so its density is w(t0) = K (1 - t0)^{K-1} rather than 0/0."""
    if total_length > 0.0:
        return total_weight / total_length
    return k * integer_power(1.0 - point, k - 1)


@jit
def fit_groups(p, q, order, k, ps, qs, ds, sorted_group, scratch, mass, target):
    """The fit's first half, for tokens with ``p``, ``q`` (all q > 0), taken in ``order``
    (increasing p/q): gathers p, q and p/q into that order (``ps``, ``qs``, ``ds``), finds the cut, the water levels
    and the groups. Writes every sorted token's group (``sorted_group``) and the groups' masses and target weights
    (``mass``, ``target``, U's groups first); returns ``(|T*|, P*, q(U), groups in U, groups in T*)``.

    In sorted order T* is ``[0, best)`` and U ``[best, s)``. Groups: U's pool (if any), U's free tokens from the
    highest density, then T*'s free tokens from the highest density and T*'s pool (if any).
    """
    s = order.shape[0]
    group_of = sorted_group
    best, best_value, boundary = cut_scan(p, q, order, ps, qs, ds, k, scratch, mass)  # both free until below
    optimum = min(best_value, 1.0)
    if best > 0:  # q(U), where U's sets tile [0, q(U)) (T* = ∅: the scan's own sum, the same bits)
        boundary = 0.0
        for i in range(best, s):
            boundary += qs[i]
    groups = 0
    sizes = [0, 0]
    for part in range(2):
        if part == 0:
            a, b, lo, hi = best, s, 0.0, boundary
        else:
            a, b, lo, hi = 0, best, boundary, 1.0
        if b <= a:
            continue
        total = weight(lo, hi, k)  # h(U) = W(0, q(U)); q(T*)^K = W(q(U), 1)
        m = groups
        if part == 0:
            free = free_in_u(ps, qs, ds, a, b, total, scratch)
            if b - a > free:  # U's pool
                pool_mass, free_weight = 0.0, 0.0
                for i in range(a + free, b):
                    pool_mass += qs[i]
                    group_of[i] = m
                for i in range(a, a + free):
                    free_weight += ps[i]
                mass[m], target[m] = pool_mass, max(total - free_weight, 0.0)
                m += 1
            for i in range(a + free - 1, a - 1, -1):
                mass[m], target[m] = qs[i], ps[i]
                group_of[i] = m
                m += 1
        else:
            pool = pool_in_t(ps, qs, ds, a, b, total, scratch)
            free_weight = 0.0
            for i in range(b - 1, a + pool - 1, -1):
                mass[m], target[m] = qs[i], ps[i]
                free_weight += ps[i]
                group_of[i] = m
                m += 1
            if pool > 0:
                pool_mass = 0.0
                for i in range(a, a + pool):
                    pool_mass += qs[i]
                    group_of[i] = m
                mass[m], target[m] = pool_mass, max(total - free_weight, 0.0)
                m += 1
        sizes[part] = m - groups
        groups = m
    return best, optimum, boundary, sizes[0], sizes[1]


@jit
def fit_layouts(k, boundary, u_groups, t_groups, ps, qs, sorted_group, order, group_of_token, mass, target, piece_start, piece_end, density, group_end, stack, hull_start, hull_end, hull_mass, hull_weight):
    """The fit's second half (after :func:`fit_groups`): both stack passes, U's sets in [0, q(U)), T*'s in [q(U), 1).
    Writes the pieces (group-major, fewer than twice the groups), every group's realised density and the end of
    its pieces (``group_end``, one past its last piece), and every token's group in the original order
    (``group_of_token``); returns ``(Σ min(p, r), pieces)``."""
    count = 0
    for part in range(2):
        if part == 0:
            first, m, lo, hi = 0, u_groups, 0.0, boundary
        else:
            first, m, lo, hi = u_groups, t_groups, boundary, 1.0
        if m == 0:
            continue
        masses, targets = mass[first : first + m], target[first : first + m]
        if k == 1:
            count = side_by_side(masses, lo, first, count, piece_start, piece_end, density, group_end)
        else:
            count = stack_pass(masses, targets, k, lo, hi, piece_start, piece_end, density, group_end, first, count, stack, hull_start, hull_end, hull_mass, hull_weight)
    acceptance = 0.0
    for i in range(order.shape[0]):
        acceptance += min(ps[i], qs[i] * density[sorted_group[i]])
        group_of_token[order[i]] = sorted_group[i]
    return acceptance, count
