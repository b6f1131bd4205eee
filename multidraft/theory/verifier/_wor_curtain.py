"""The J-curtain's layout: the nested stack pass for a polynomial weight G(x) = E[x^J].

J random points, iid uniform on [0, 1) given J, each carried by a token whose set S_y (|S_y| its
share of the mass) tiles [0, 1); the smallest position wins. The winner lies in [a, b) with
probability

    W_G(a, b) = G(1 - a) - G(1 - b) = (b - a) · Σ_j c_j S_j(1 - a, 1 - b),
    S_j(x, y) = Σ_{i<j} x^i y^{j-1-i}  (non-negative terms: no cancellation),

with density w_G(t) = G'(1 - t), non-increasing, strictly decreasing when P(J >= 2) > 0. The iid
curtain (:mod:`multidraft.theory.verifier._curtain`) is the case G(x) = x^K. Every step of the stack pass
and of its proof (docs/optimal_verifier.md §4) uses only that W is an integral of a decreasing
density, so it carries over with W_G: the solo interval of a set of groups solves
φ(x) = W_G(1 - x, 1 - x + c)/c = Σ_j c_j S_j(x, x - c) = d, where φ is increasing and convex in
x (G has non-negative coefficients, so G''' >= 0), with φ'(x) = Σ_j j c_j S_{j-1}(x, x - c):
Newton's method from above decreases monotonically to the root.

:func:`clipped_layout` lays out the best law such a curtain can have for a target p: the region
[0, 1) is a "U-part" [0, 1 - Q) with r = min(p, λ m) and a "T-part" [1 - Q, 1) with
r = max(p, μ m), m the mass shares, where the T-part is the minimising prefix of
``p(S) + 1 - G(m(S))`` over the decreasing-m/p order -- exactly the iid construction of
docs/optimal_verifier.md §3 with (1 - x)^K replaced by G. Its majorisation conditions hold by
the minimality of that prefix, so the pieces tile [0, 1) and the computed law is the rule's law.
"""

from __future__ import annotations

import numpy as np

from dataclasses import dataclass

from multidraft.theory._numba import compile_in_place
from multidraft.theory.verifier._curtain import curtain_fit
from multidraft.theory.verifier._wor_parts import min_sum

__all__ = ["polynomial_weight", "water_level", "clipped_layout", "point_win_probabilities", "Layout"]


@dataclass(frozen=True)
class Layout:
    """Pieces of a curtain in [0, 1) and the law they realise.

    Attributes
    ----------
    token_group : ndarray [m] int64
        Group of every token of the part laid out (-1: no mass, never carried).
    piece_group, piece_start, piece_end : ndarray
        The pieces, each group's contiguous.
    group_first, group_last : ndarray [groups] int64
        First and one-past-last piece of every group.
    law : ndarray [m]
        ``r(y) = share(y) · weight(group)/length(group)``, as laid out.
    """

    token_group: np.ndarray
    piece_group: np.ndarray
    piece_start: np.ndarray
    piece_end: np.ndarray
    group_first: np.ndarray
    group_last: np.ndarray
    law: np.ndarray


def polynomial_weight(start: np.ndarray, end: np.ndarray, coefficients: np.ndarray) -> np.ndarray:
    """``W_G(a, b) = G(1 - a) - G(1 - b)`` elementwise, without cancellation."""
    start, end = np.broadcast_arrays(np.asarray(start, dtype=np.float64), np.asarray(end, dtype=np.float64))
    out = np.empty(start.shape)
    _kernels()[1](start.ravel(), end.ravel(), np.ascontiguousarray(coefficients, dtype=np.float64), out.reshape(-1))
    return out


def water_level(values: np.ndarray, masses: np.ndarray, total: float, clip: str) -> float:
    """λ with ``Σ min(v, λ m) = total`` (``"min"``; inf when Σ v <= total) or ``Σ max(v, λ m) =
    total`` (``"max"``; 0 when Σ v >= total), for v/m sorted increasingly (m > 0).

    Both sums are piecewise linear and increasing in λ with breakpoints d_j = v_j/m_j; their
    values at the breakpoints come from prefix sums (one compiled pass, :func:`breakpoint_sums`),
    the segment holding the total by a binary search, and λ from that segment's sums (at most
    one division)."""
    values, masses = np.ascontiguousarray(values, dtype=np.float64), np.ascontiguousarray(masses, dtype=np.float64)
    mass_total, value_total = float(masses.sum()), float(values.sum())
    if clip != "min" and value_total >= total:
        return 0.0
    at_breakpoints = np.empty(len(values))
    _kernels()
    breakpoint_sums(values, masses, value_total, mass_total, clip == "min", at_breakpoints)
    j = int(np.searchsorted(at_breakpoints, total, side="left"))
    if clip == "min":
        return np.inf if j == len(values) else (total - values[:j].sum()) / masses[j:].sum()
    return total / mass_total if j == len(values) else (total - values[j:].sum()) / masses[:j].sum()


def pool_split(values: np.ndarray, masses: np.ndarray, total: float, clip: str, density: np.ndarray | None = None) -> tuple[int, float, float]:
    """The free tokens and the pool of one part (tokens sorted by increasing p/q), clipped at
    the water level of :func:`water_level`: ``(cut, pool mass, pool weight)``, the pool being
    the tokens ``[cut:]`` (``"min"``: density >= λ) or ``[:cut]`` (``"max"``: density <= μ), its
    weight what the free tokens (r = p) leave of ``total``. ``density``: ``values / masses``
    where the caller has it (the same bits; not divided again)."""
    density = values / masses if density is None else density
    level = water_level(values, masses, total, clip)
    if clip == "min":
        cut = int(np.searchsorted(density, level, side="left"))
        free_v, pool_m = values[:cut][::-1], masses[cut:].sum()
    else:
        cut = int(np.searchsorted(density, level, side="right"))
        free_v, pool_m = values[cut:][::-1], masses[:cut].sum()
    return cut, pool_m, max(total - free_v.sum(), 0.0)


def _groups(values: np.ndarray, masses: np.ndarray, total: float, clip: str):
    """Groups of one part (tokens sorted by increasing p/q): the free tokens (r = p) one group
    each and the pool (r ∝ m) one group, by decreasing density. Returns (group of each token,
    group masses, group weights, index of the pool group or -1)."""
    size = len(values)
    cut, pool_m, pool_w = pool_split(values, masses, total, clip)
    if clip == "min":  # U-part: pool (density >= λ) first, then free by decreasing p/q
        pooled = size > cut
        group = np.zeros(size, dtype=np.int64)
        group[:cut] = np.arange(cut, 0, -1) - (0 if pooled else 1)
        free_v, free_m = values[:cut][::-1], masses[:cut][::-1]
        mass = np.concatenate([[pool_m], free_m]) if pooled else free_m
        weight = np.concatenate([[pool_w], free_v]) if pooled else free_v
        pool_index = 0 if pooled else -1
    else:  # T-part: free by decreasing p/q, then the pool (density <= μ)
        group = np.full(size, size - cut, dtype=np.int64)
        group[cut:] = np.arange(size - cut - 1, -1, -1)
        free_v, free_m = values[cut:][::-1], masses[cut:][::-1]
        mass = np.concatenate([free_m, [pool_m]]) if cut else free_m
        weight = np.concatenate([free_v, [pool_w]]) if cut else free_v
        pool_index = len(mass) - 1 if cut else -1
    return group, mass, weight, pool_index


def clipped_layout(
    target: np.ndarray, share: np.ndarray, coefficients: np.ndarray, hint: np.ndarray | None = None, *, iid: bool = True
) -> tuple[Layout, float]:
    """The best curtain law for ``target`` (the p of the part's tokens) with mass shares
    ``share`` (Σ = 1, > 0) under weight G (``coefficients`` c_0..c_K), and its layout.

    ``hint``: the indices in about decreasing m/p (any order gives the same result; a good one
    makes the sort linear, :func:`ordered_cut`).

    Returns ``(layout, acceptance)`` with ``acceptance = Σ min(p, r)`` of the law laid out; it is
    ``min_S [p(S) + 1 - G(share(S))]`` (the optimum of this curtain class) up to rounding.

    G = x^K (K >= 2; J ≡ K, as when T* is empty) is the iid curtain: its fit
    (:func:`~multidraft.theory.verifier._curtain.curtain_fit`, whose stack pass solves the
    roots of a chain or a row of groups side by side) lays it out, unless ``iid=False`` (the
    polynomial stack pass throughout; the tests compare the two).
    """
    c = np.asarray(coefficients, dtype=np.float64)
    p, m = np.asarray(target, dtype=np.float64), np.asarray(share, dtype=np.float64)
    if iid and len(c) >= 3 and c[-1] == 1.0 and not c[:-1].any():
        return _iid_layout(p, m, len(c) - 1)
    size = len(p)
    order, cut = _order_and_cut(p, m, c, hint)
    boundary = float(m[order[cut:]].sum())  # U-part [0, 1 - Q) has the mass of the non-cut tokens
    token_group = np.full(size, -1, dtype=np.int64)
    pieces, laws, groups = [], np.zeros(size), 0
    parts = ((order[cut:][::-1], "min", 0.0, boundary), (order[:cut][::-1], "max", boundary, 1.0))
    for tokens, clip, lo, hi in parts:
        if len(tokens) == 0:
            continue
        tokens = tokens[np.argsort(p[tokens] / m[tokens], kind="stable")]  # increasing p/m
        part_p, part_m = p[tokens], m[tokens]
        total = float(weight(float(lo), float(hi), c))  # polynomial_weight of one interval
        group, mass, group_weight, _ = _groups(part_p, part_m, total, clip)
        if len(c) <= 2 or c[2:].sum() <= 0.0:  # G linear: w constant, any tiling realises r ∝ m
            end = lo + np.cumsum(mass)
            piece_group, start, stop = np.arange(len(mass)), end - mass, end
            realised_w, realised_l = polynomial_weight(start, stop, c), mass
        else:
            piece_group, start, stop, realised_w, realised_l = _stack_pass(mass, group_weight, c, lo, hi)
        density = np.divide(realised_w, realised_l, out=np.empty(len(mass)), where=realised_l > 0)
        flat = ~(realised_l > 0)
        if flat.any():  # zero-length groups: the density w_G(t0) at their last piece's start
            last_piece = _group_ends(piece_group)[flat] - 1
            density[flat] = np.polynomial.polynomial.polyval(1.0 - start[last_piece], np.polynomial.polynomial.polyder(c))
        token_group[tokens] = group + groups
        laws[tokens] = part_m * density[group]
        pieces.append((piece_group + groups, start, stop))
        groups += len(mass)
    piece_group, start, stop = pieces[0] if len(pieces) == 1 else (np.concatenate(column) for column in zip(*pieces))
    group_last = _group_ends(piece_group)
    layout = Layout(token_group, piece_group, start, stop, np.concatenate([[0], group_last[:-1]]), group_last, laws)
    return layout, float(np.minimum(p, laws).sum())


def _order_and_cut(p: np.ndarray, m: np.ndarray, c: np.ndarray, hint: np.ndarray | None) -> tuple[np.ndarray, int]:
    """The tokens with p = 0 first, then by decreasing m/p (the key ``-m/p``, ties by increasing
    id, NaN last: ``np.lexsort((key, p > 0))``), and the T-part's size: the first minimiser of
    ``p(S) + 1 - G(min(m(S), 1))`` over the prefixes S of that order (``np.cumsum``,
    ``polyval``'s Horner steps, ``argmin``: the same operations). One compiled pass
    (:func:`ordered_cut`, an insertion sort from ``hint``, linear when the hint is about in
    order: the U side's position order reversed) where numpy's route made ~35 calls (~40 µs for
    a U of 100-500 tokens); numpy's lexsort first when the hint is far from that order."""
    order = np.empty(len(p), dtype=np.int64)
    _kernels()
    start = np.arange(len(p)) if hint is None else np.ascontiguousarray(hint, dtype=np.int64)
    cut = ordered_cut(p, m, c, start, order, 4 * len(p) + 64)
    if cut < 0:  # too many moves: numpy's sort, the pass then moves nothing
        cut = ordered_cut(p, m, c, np.lexsort((-m / np.where(p > 0, p, 1.0), p > 0)), order, len(p))
    return order, int(cut)


def _iid_layout(p: np.ndarray, m: np.ndarray, k: int) -> tuple[Layout, float]:
    """:func:`clipped_layout` for G = x^K by the iid curtain's fit, its groups and pieces
    written as a :class:`Layout` (r = m · the group's realised density)."""
    fit = curtain_fit(p, m, k)
    token_group, law, piece_group = np.empty(len(p), dtype=np.int64), np.empty(len(p)), np.empty(len(fit.piece_start), dtype=np.int64)
    _kernels()
    iid_glue(fit.group, fit.density, np.ascontiguousarray(m, dtype=np.float64), fit.group_bounds, token_group, law, piece_group)
    layout = Layout(token_group, piece_group, fit.piece_start, fit.piece_end, fit.group_bounds[:-1], fit.group_bounds[1:], law)
    return layout, min_sum(p, law)


def _group_ends(piece_group: np.ndarray) -> np.ndarray:
    """One past the last piece of every group, for pieces sorted by group where every group
    0..m-1 has at least one (the stack pass writes one piece per group and one per child)."""
    change = np.flatnonzero(piece_group[1:] != piece_group[:-1]) + 1
    return np.concatenate([change, [len(piece_group)]])


def point_win_probabilities(layout: Layout, groups: np.ndarray) -> np.ndarray:
    """``P(point i has the smallest position) = ∫ g_i(t) Π_{j≠i} (1 - G_j(t)) dt`` for rows of
    point groups ``[m, J]``, each point uniform on its group's set (density g_j = 1/|S_j| on S_j,
    distribution function G_j), exactly.

    The integrand involves only the sets of the groups named in ``groups``, so only their pieces
    are read: between consecutive ends of those pieces it is a polynomial of degree J - 1,
    integrated by Gauss-Legendre with ⌊J/2⌋ + 2 nodes (exact). G_j at the nodes comes from one
    binary search in the group's pieces sorted by start (covered length before the piece plus
    the part of the piece below t). For enumeration: per outcome of the rebuilt stream, the
    reference that the closed form of :mod:`~multidraft.theory.verifier._stream_choice` is tested against.

    Cost: O(P log P) time and O(u · P) memory, P the pieces and u the distinct groups of
    ``groups`` (at most m·J), not the layout's (a whole layout at n = 49152 has ~10^5 pieces:
    a pieces × nodes table of it took 36 GiB).
    """
    groups = np.asarray(groups, dtype=np.int64)
    width_j = groups.shape[1]
    kept, local = np.unique(groups, return_inverse=True)
    local = local.reshape(groups.shape)
    first, counts = layout.group_first[kept], layout.group_last[kept] - layout.group_first[kept]
    pieces = np.arange(counts.sum()) + np.repeat(first - (np.cumsum(counts) - counts), counts)
    piece_start, piece_end = layout.piece_start[pieces], layout.piece_end[pieces]
    edges = np.unique(np.concatenate([[0.0, 1.0], piece_start, piece_end]))
    nodes, weights = np.polynomial.legendre.leggauss(width_j // 2 + 2)
    left, width = edges[:-1, None], np.diff(edges)[:, None]
    t = (left + 0.5 * width * (nodes + 1.0)).ravel()
    dt = (0.5 * width * weights).ravel()
    density, below = np.zeros((len(kept), len(t))), np.zeros((len(kept), len(t)))
    bounds = np.concatenate([[0], np.cumsum(counts)])
    for index in range(len(kept)):  # at most m·J groups
        start, end = piece_start[bounds[index] : bounds[index + 1]], piece_end[bounds[index] : bounds[index + 1]]
        order = np.lexsort((end, start))  # by start, an empty piece before a piece starting there
        start, end = start[order], end[order]
        length = end - start
        size = max(float(length.sum()), 1e-300)
        piece = np.searchsorted(start, t, side="right") - 1  # the last piece starting at or below t
        reached = piece >= 0
        piece = np.maximum(piece, 0)
        covered = np.cumsum(length)[piece] - length[piece] + np.clip(t - start[piece], 0.0, length[piece])
        density[index] = (reached & (t < end[piece])) / size
        below[index] = np.where(reached, covered, 0.0) / size
    g, survive = density[local], 1.0 - below[local]
    out = np.empty(groups.shape)
    for i in range(width_j):
        out[:, i] = (g[:, i] * np.prod(np.delete(survive, i, axis=1), axis=1)) @ dt
    return out


def _stack_pass(mass, weight, c, lo, hi):
    size = 2 * len(mass)
    group, start, end = np.empty(size, np.int64), np.empty(size), np.empty(size)
    realised_w, realised_l = np.empty(len(mass)), np.empty(len(mass))
    count = _kernels()[0](
        np.ascontiguousarray(mass, dtype=np.float64), np.ascontiguousarray(weight, dtype=np.float64), c,
        float(lo), float(hi), group, start, end, realised_w, realised_l,
    )  # fmt: skip
    return group[:count], start[:count], end[:count], realised_w, realised_l


#: The compiled kernels, module-level so that numba's disk cache finds them in the next process.
KERNELS = ("sums", "weight", "weights", "solo", "stack_pass", "breakpoint_sums", "iid_glue", "follows", "ordered_cut")


def _kernels():
    """``(stack_pass, weights)``, numba-compiled on first use
    (:func:`~multidraft.theory._numba.compile_in_place`) and cached on disk; :func:`stack_pass` holds its starts
    by the iid kernels' ``held_start``, imported here (with numba) rather than with this module.
    After the first call one truth test (a layout makes three calls)."""
    global held_start
    if not _READY:
        from multidraft.theory.verifier._curtain_kernels import held_start

        compile_in_place(globals(), KERNELS)
        _READY.append(True)
    return stack_pass, weights


#: Whether :func:`_kernels` has compiled the kernels (non-empty then).
_READY: list[bool] = []


def breakpoint_sums(values, masses, value_total, mass_total, clip_min, out):
    """The sums of :func:`water_level` at every breakpoint d_j = v_j/m_j, with V_j, M_j the
    values and masses before j (running sums, as ``np.cumsum(v) - v``): ``V_j + d_j (M - M_j)``
    (``clip_min``: tokens i < j keep v_i, the others give d_j m_i) or ``d_j M_j + (V - V_j)``
    (tokens i < j give d_j m_i, the others keep v_i). The numpy expression's operations in its
    order, without its seven temporaries of the vocabulary's size (0.3 ms of cumulative sums
    and 0.7 ms of fresh pages at n = 49152)."""
    value_sum, mass_sum = 0.0, 0.0
    for j in range(values.shape[0]):
        value_sum += values[j]
        mass_sum += masses[j]
        density = values[j] / masses[j]
        value_before, mass_before = value_sum - values[j], mass_sum - masses[j]
        if clip_min:
            out[j] = value_before + density * (mass_total - mass_before)
        else:
            out[j] = density * mass_before + (value_total - value_before)


def iid_glue(group, density, share, bounds, token_group, law, piece_group):
    """The iid fit's arrays as a :class:`Layout`'s, in one pass each: ``token_group`` = the
    groups widened to int64, ``law = share · density[group]`` (the same products as numpy's),
    ``piece_group`` = every piece's group (group g owns pieces ``bounds[g]:bounds[g + 1]``, as
    ``np.repeat``) -- without numpy's gathered and repeated temporaries."""
    for i in range(group.shape[0]):
        token_group[i] = group[i]
        law[i] = share[i] * density[group[i]]
    for g in range(bounds.shape[0] - 1):
        for piece in range(bounds[g], bounds[g + 1]):
            piece_group[piece] = g


def follows(key, a, b):
    """Whether token ``a`` comes after token ``b`` by key, ties by id, NaN last (the order of
    ``np.lexsort`` of the keys)."""
    if key[a] != key[a]:
        return key[b] == key[b] or b < a
    return key[b] == key[b] and (key[b] < key[a] or (key[b] == key[a] and b < a))


def ordered_cut(p, m, c, hint, order, budget):
    """:func:`_order_and_cut`: ``order`` = the tokens of ``hint`` with p > 0 false first, each
    group by insertion (:func:`follows` of the key ``-m / p``, ``p`` read as 1 where not > 0, as
    numpy's ``-m / np.where(p > 0, p, 1.0)``), then the first index of the smallest
    ``(P_j + 1) - G(min(M_j, 1))`` over the prefixes (P, M: ``np.cumsum`` led by 0; G by
    ``polyval``'s ``c[-1] + x*0``, then ``c[i] + v*x``; a NaN counts as the smallest, as in
    ``argmin``). Returns -1 once the insertions have moved more than ``budget`` entries."""
    size = p.shape[0]
    key = np.empty(size)
    for i in range(size):
        key[i] = -m[i] / (p[i] if p[i] > 0 else 1.0)
    count, moves = 0, 0
    for drafted in range(2):
        first = count
        for i in range(size):
            token = hint[i]
            if (p[token] > 0) != (drafted == 1):
                continue
            slot = count
            while slot > first and follows(key, order[slot - 1], token):
                order[slot] = order[slot - 1]
                slot -= 1
            moves += count - slot
            if moves > budget:
                return -1
            order[slot] = token
            count += 1
    degree = c.shape[0] - 1
    best, cut = 0.0, 0
    prefix_p, prefix_m = 0.0, 0.0
    for j in range(size + 1):
        if j > 0:
            token = order[j - 1]
            prefix_p = p[token] if j == 1 else prefix_p + p[token]
            prefix_m = m[token] if j == 1 else prefix_m + m[token]
        x = prefix_m if prefix_m < 1.0 or prefix_m != prefix_m else 1.0
        g = c[degree] + x * 0.0
        for i in range(degree - 1, -1, -1):
            g = c[i] + g * x
        value = prefix_p + 1.0 - g
        if j == 0 or (best == best and (value < best or value != value)):
            best, cut = value, j
    return cut


def sums(x, y, c):
    """``(φ, φ') = (Σ_j c_j S_j(x, y), Σ_j j c_j S_{j-1}(x, y))`` with S_j = x S_{j-1} + y^{j-1}."""
    previous, current, y_power = 0.0, 0.0, 1.0
    value, slope = 0.0, 0.0
    for j in range(1, c.shape[0]):
        previous, current = current, x * current + y_power
        y_power *= y
        value += c[j] * current
        slope += j * c[j] * previous
    return value, slope


def weight(a, b, c):
    """``W_G(a, b) = (b - a) · Σ_j c_j S_j(1 - a, 1 - b)``, the chance that the winner lies in [a, b)."""
    return (b - a) * sums(1.0 - a, 1.0 - b, c)[0]


def weights(start, end, c, out):
    """``out[i] = W_G(start[i], end[i])``."""
    for i in range(start.shape[0]):
        out[i] = weight(start[i], end[i], c)


def solo(mass, target, c, lo, hi, x):
    """Start α ∈ [lo, hi - mass] with W_G(α, α + mass) = target, by Newton from x >= 1 - α
    (NaN: start at 1 - lo)."""
    d = target / mass
    x_high = 1.0 - lo
    if x != x or x >= x_high:
        if sums(x_high, x_high - mass, c)[0] <= d:
            return lo
        x = x_high
    x_low = 1.0 - hi + mass
    for _ in range(200):
        value, slope = sums(x, x - mass, c)
        step = (value - d) / slope if slope > 0.0 else 0.0
        if step <= 0.0:
            break
        x -= step
        if x <= x_low:
            return hi - mass
        if step <= 1e-10 * x:
            break
    return min(max(1.0 - x, lo), hi - mass)


def stack_pass(mass, target, c, lo, hi, piece_group, piece_start, piece_end, realised_weight, realised_length):
    """The nested stack pass of the module docstring for groups 0..m-1 in order: writes their pieces
    (group-major) and each group's realised weight and length; returns the number of pieces.

    As in the iid pass, a start is held at or after the end of the hull below (``lo``) and a merged set's last
    child's end less its mass (``_curtain_kernels.held_start``), and a hull's extent covers its children's: the
    pieces are disjoint within the part and none starts before it (docs/optimal_verifier.md §8)."""
    m = mass.shape[0]
    stack = np.empty(m, np.int64)
    hull_start, hull_end, hull_mass, hull_weight = np.empty(m), np.empty(m), np.empty(m), np.empty(m)
    top = 0
    count = 0
    for g in range(m):
        cg, r = mass[g], target[g]
        upper = np.nan
        first_child = top
        while top > 0:
            below = stack[top - 1]
            end = hull_end[below]
            if end + cg <= hi and sums(1.0 - end, 1.0 - end - cg, c)[0] * cg >= r:
                break
            top -= 1
            upper = 1.0 - hull_start[below] + cg
            cg += hull_mass[below]
            r += hull_weight[below]
        start = held_start(solo(cg, r, c, lo, hi, upper), cg, lo, stack, top, first_child, hull_end)
        cursor = start + cg
        left, right = start, cursor
        realised_weight[g], realised_length[g] = 0.0, 0.0
        for index in range(first_child - 1, top - 2, -1):
            if index >= top:
                child = stack[index]
                piece_begin, piece_stop = hull_end[child], cursor
                cursor = hull_start[child]
                left, right = min(left, cursor), max(right, piece_begin)
            else:
                piece_begin, piece_stop = start, cursor
            piece_stop = max(piece_stop, piece_begin)
            piece_group[count], piece_start[count], piece_end[count] = g, piece_begin, piece_stop
            realised_weight[g] += weight(piece_begin, piece_stop, c)
            realised_length[g] += piece_stop - piece_begin
            count += 1
        hull_start[g], hull_end[g], hull_mass[g], hull_weight[g] = left, right, cg, r
        stack[top] = g
        top += 1
    return count
