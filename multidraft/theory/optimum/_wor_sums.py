"""The optimal cut's sums over the scan order, in compiled passes: prefix masses and the bounds
that prune the scan, outside masses, and the race's spread σ (docs/optimal_verifier.md §7, §10).

* ``P_j = p(T_j)``, ``Q_j = min(q(T_j), 1)`` (left to right, ``np.cumsum``'s additions) and
  ``λ_j = q(Ω ∖ T_j)`` (from the tail): the same bits as the numpy expressions, without their
  copies of the vocabulary.
* The cut bounds ``p(T) + 1 - q(T)^K <= cut(T) <= p(T) + 1 - Π_{i<K} (q(T) - M_i(T))_+``
  (:mod:`~multidraft.theory.optimum._wor_race`).
* σ = the draft mass outside the K - 1 largest tokens summed over those tokens, and β the least
  of the K - 1 largest: what ``race_step`` needs to place the nodes of a race.
* The scan's keys -(q/p) (:func:`scan_keys`); p and q gathered into the scan order, with the
  check for tied keys that sends the scan to
  :func:`~multidraft.theory.laws._kernels.ratio_order` (:func:`gather_checked`).
* The chords of the cut's probes raise the lower bounds, and the candidates left are counted,
  in one pass (:func:`tighten_bounds`).
* The scan's own 64-bit radix sort of its keys (:func:`radix_order_64`).
"""

from __future__ import annotations

import math

import numpy as np

from multidraft.theory._numba import compile_in_place

__all__ = ["upper_products", "prefix_bounds", "outside_mass", "race_spread", "scan_keys", "gather_checked", "tighten_bounds", "radix_order_64"]


def upper_products(q_sorted: np.ndarray, prefix_q: np.ndarray, k: int) -> np.ndarray:
    """``Π_{i<K} max(Q_j - M_i(T_j), 0)`` for every prefix j = 0..n of the scan order
    (``prefix_q`` = Q_j, M_i the mass of the i largest tokens among the first j, M_0 = 0),
    multiplied left to right: one compiled pass keeping the K - 1 largest masses so far, no
    [n, K] table (issue 34, item 3)."""
    out = np.empty(len(prefix_q))
    _compiled()
    _upper_products(np.ascontiguousarray(q_sorted, dtype=np.float64), prefix_q, int(k), None, out)
    return out


def prefix_bounds(p_sorted: np.ndarray, q_sorted: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Prefix masses (P_j, Q_j) and the lower/upper bounds on every prefix's cut (module
    docstring): numpy's ``P + 1.0 - Q**K`` and ``P + 1.0 - upper_products(...)``, the same bits
    (the power by numpy, whose vectorised ``pow`` rounds differently from libm's), the
    subtractions written by the products' pass: two arrays of the vocabulary's size instead of six."""
    prefix_p, prefix_q = np.empty(len(p_sorted) + 1), np.empty(len(q_sorted) + 1)
    _compiled()
    q_sorted = np.ascontiguousarray(q_sorted, dtype=np.float64)
    _prefix_sums(np.ascontiguousarray(p_sorted, dtype=np.float64), q_sorted, prefix_p, prefix_q)
    lower = prefix_q**k  # then P + 1.0 - Q^K in place
    upper = np.empty(len(prefix_q))
    _upper_products(q_sorted, prefix_q, int(k), (prefix_p, lower), upper)
    return prefix_p, prefix_q, lower, upper


def outside_mass(q_sorted: np.ndarray) -> np.ndarray:
    """``λ_j = q(Ω ∖ T_j)`` for j = 0..n, summed from the tail (no cancelling 1 - Q; the
    additions of ``np.cumsum`` of the reversed masses, compiled)."""
    outside = np.empty(len(q_sorted) + 1)
    _compiled()
    _suffix_sums(np.ascontiguousarray(q_sorted, dtype=np.float64), outside)
    return outside


def race_spread(draft: np.ndarray, k: int) -> tuple[float, float]:
    """``(σ, β)`` for :func:`~multidraft.theory._kernels.race_step`: σ = the draft mass outside the
    K - 1 largest tokens, *summed over those tokens* (``1 - M_{K-1}`` cancels when the top tokens
    hold all but a sliver), and β = the least of the K - 1 largest. One compiled pass keeps the
    K - 1 largest, a second adds the others in token order (``np.partition`` and its copies
    took 0.4 ms at n = 49152); σ only places the race's nodes (``race_step``), so its rounding
    moves no law beyond the quadrature's."""
    _compiled()
    spread, least_top, positive = _top_spread(np.ascontiguousarray(draft, dtype=np.float64), int(k))
    if positive < k:
        return max(spread, np.finfo(np.float64).tiny), 0.0
    return spread, least_top


def scan_keys(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """The scan's sort keys ``-(q/p)`` (numpy's ``np.negative(np.divide(q, p))``, the same bits:
    -inf for p = 0 < q, NaN for p = q = 0) in one compiled pass, without numpy's second pass
    and its ``errstate`` (0.05 -> 0.03 ms at n = 49152)."""
    key = np.empty(len(p))
    _compiled()
    _scan_keys(p, q, key)
    return key


def gather_checked(p: np.ndarray, q: np.ndarray, order: np.ndarray, p_sorted: np.ndarray, q_sorted: np.ndarray) -> tuple[bool, int]:
    """``p_sorted, q_sorted = p[order], q[order]``, whether the scan's keys ``-(q/p)`` in that
    order hold a tie or end in NaN, and ``np.count_nonzero(q_sorted)`` (:func:`_gather_checked`),
    in one compiled pass of random reads of p and q. The keys are formed again from the gathered
    values (the same division, so the same bits as the scan's key array): a third stream of
    random reads, ``key[order]``, cost more than the division (0.35 against 0.30 ms at n = 49152)."""
    _compiled()
    tie, draftable = _gather_checked(p, q, order, p_sorted, q_sorted)
    return bool(tie), int(draftable)


def tighten_bounds(lower: np.ndarray, prefix_p: np.ndarray, place: np.ndarray, known_x: list[float], known_g: list[float], threshold: float) -> tuple[int, int]:
    """``lower <- max(lower, P_j + 1 - chord(x_j))`` in place, ``chord = np.interp(place,
    known_x, known_g)`` (g's chords through the probed prefixes, Lemma 1), then ``(count,
    first)``: how many prefixes have ``lower <= threshold`` and the first of least lower bound
    among them (-1 if none). The bits of the numpy expressions (``np.interp``'s slopes, its
    exact-node and end cases, ``np.maximum``'s NaN), in one pass instead of six over the
    vocabulary's prefixes (0.3 ms per probe at n = 49152)."""
    _compiled()
    xp, fp = np.asarray(known_x, dtype=np.float64), np.asarray(known_g, dtype=np.float64)
    return _tighten(lower, prefix_p, place, xp, fp, (fp[1:] - fp[:-1]) / (xp[1:] - xp[:-1]), float(threshold))


def radix_order_64(key: np.ndarray) -> np.ndarray:
    """The stable ascending order of the doubles ``key`` (NaN last) by all 64 bits: the bits made
    order-preserving as unsigned integers (sign bit set for positives, all bits flipped for
    negatives, NaN the largest), then stable counting passes of 11 bits (a pass whose digit is
    the same throughout is skipped); the scan's own sort
    (:func:`~multidraft.theory.optimum._wor_race.scan_order`).

    >>> radix_order_64(np.array([-0.5, -np.inf, np.nan, -0.0, -0.75])).tolist()
    [1, 4, 0, 3, 2]
    """
    _compiled()
    return _radix_order(np.ascontiguousarray(key, dtype=np.float64))


def _compiled() -> None:
    """Compile the kernels below on first use (:func:`~multidraft.theory._numba.compile_in_place`)."""
    compile_in_place(globals(), KERNELS)


def _prefix_sums(p, q, prefix_p, prefix_q):
    """``P_j``, ``min(Q_j, 1)`` for j = 0..n, summed left to right (``np.cumsum``'s additions
    after a leading 0, without its copies)."""
    total_p, total_q = 0.0, 0.0  # running sums in registers (not re-read from the arrays just written)
    prefix_p[0], prefix_q[0] = total_p, total_q
    for j in range(p.shape[0]):
        total_p += p[j]
        total_q += q[j]
        prefix_p[j + 1], prefix_q[j + 1] = total_p, min(total_q, 1.0)


def _suffix_sums(q, out):
    """``out[j] = Σ_{i >= j} q_i`` added from the end, ``out[n] = 0``."""
    total = 0.0  # in a register: the same additions without a store and reload per token
    out[q.shape[0]] = total
    for j in range(q.shape[0] - 1, -1, -1):
        total += q[j]
        out[j] = total


def _top_spread(q, k):
    """``(Σ of the positive masses outside the K - 1 largest, the least of those, the number
    of positive masses)``; with fewer than K positive masses, the sum of them all and 0."""
    top = np.zeros(max(k - 1, 1))  # the k - 1 largest so far, decreasing
    positive = 0
    for i in range(q.shape[0]):
        value = q[i]
        if value > 0.0:
            positive += 1
            if k > 1 and value > top[k - 2]:
                slot = k - 2
                while slot > 0 and top[slot - 1] < value:
                    top[slot] = top[slot - 1]
                    slot -= 1
                top[slot] = value
    kept = k - 1 if positive >= k else 0  # tokens of the top set aside: those above its least, then ties
    least = top[kept - 1] if kept > 0 else 0.0
    above = 0
    for slot in range(kept):
        if top[slot] > least:
            above += 1
    ties = kept - above
    total = 0.0
    for i in range(q.shape[0]):
        value = q[i]
        if value > 0.0 and not (kept > 0 and value > least):
            if kept > 0 and value == least and ties > 0:
                ties -= 1
            else:
                total += value
    return total, least, positive


def _scan_key(value, mass):
    """``-(mass / value)``, numpy's bits, a zero ``value`` included (IEEE: ``mass / ±0`` is
    ±inf by the signs, NaN for a zero or NaN ``mass``) where numba's division would raise."""
    if value == 0.0:
        return -(mass * math.copysign(math.inf, value))
    return -(mass / value)


def _scan_keys(p, q, key):
    for i in range(p.shape[0]):
        key[i] = _scan_key(p[i], q[i])


def _gather_checked(p, q, order, p_sorted, q_sorted):
    """``p_sorted, q_sorted = p[order], q[order]``; returns whether the keys ``-(q/p)`` in that
    order hold a tie (two neighbours equal) or end in two NaN (p = q = 0 twice; one NaN for one
    token, and True for none) -- numpy's ``(ordered[1:] == ordered[:-1]).any() or
    np.isnan(ordered[-2:]).all()`` with ``ordered = key[order]`` -- and how many q are not 0."""
    n = order.shape[0]
    tie, previous, draftable = False, math.nan, 0  # NaN: the first key equals no previous one
    for i in range(n):
        j = order[i]
        value, mass = p[j], q[j]
        p_sorted[i], q_sorted[i] = value, mass
        current = _scan_key(value, mass)
        tie |= current == previous
        previous = current
        draftable += mass != 0.0
    nan_end = True
    for i in range(max(n - 2, 0), n):
        current = _scan_key(p_sorted[i], q_sorted[i])
        if not current != current:
            nan_end = False
    return tie or nan_end, draftable


def _upper_products(q, prefix_q, k, bounds, out):
    """``out[j]`` = the product of :func:`upper_products`, or, given ``bounds = (P, lower)``
    (``lower`` holding Q_j^K), ``P_j + 1.0 - product`` (the upper bound), with ``lower[j]``
    turned into ``P_j + 1.0 - Q_j^K`` in the same pass."""
    n = q.shape[0]
    best = np.zeros(k)  # best[0] unused; best[1..k-1] the largest masses so far, decreasing
    running = np.zeros(k)  # running[i] = M_i = best[1] + ... + best[i], added in that order
    for j in range(n + 1):
        if j > 0:
            value = q[j - 1]
            i = k - 1
            if k > 1 and value > best[k - 1]:
                while i > 1 and best[i - 1] < value:
                    best[i] = best[i - 1]
                    i -= 1
                best[i] = value
                total = 0.0  # the sums again only where the largest change (rarely, after the first tokens)
                for i in range(1, k):
                    total += best[i]
                    running[i] = total
        product = max(prefix_q[j], 0.0)  # M_0 = 0
        for i in range(1, k):
            product *= max(prefix_q[j] - running[i], 0.0)
        if bounds is None:
            out[j] = product
        else:
            shifted = bounds[0][j] + 1.0
            bounds[1][j] = shifted - bounds[1][j]
            out[j] = shifted - product


def _tighten(lower, prefix_p, place, xp, fp, slopes, threshold):
    """:func:`tighten_bounds`'s pass; the chord is ``np.interp``'s own steps (compiled_base.c:
    the ends, a place on a node, ``slope (x - x_j) + f_j`` and its NaN fallbacks), its interval
    found from the previous one (the places increase)."""
    count, first, j, last = 0, -1, 0, xp.shape[0] - 1
    for i in range(lower.shape[0]):
        x = place[i]
        if x != x:
            chord = x
        elif x < xp[0]:
            chord = fp[0]
        elif x >= xp[last]:
            chord = fp[last]
        else:
            if xp[j] > x:
                j = 0
            while xp[j + 1] <= x:  # xp[j] <= x < xp[j + 1]
                j += 1
            if xp[j] == x:
                chord = fp[j]
            else:
                chord = slopes[j] * (x - xp[j]) + fp[j]
                if chord != chord:
                    chord = slopes[j] * (x - xp[j + 1]) + fp[j + 1]
                    if chord != chord and fp[j] == fp[j + 1]:
                        chord = fp[j]
        raised = (prefix_p[i] + 1.0) - chord
        if not (lower[i] >= raised or lower[i] != lower[i]):  # np.maximum: NaN wins
            lower[i] = raised
        if lower[i] <= threshold:
            count += 1
            if first < 0 or lower[i] < lower[first]:
                first = i
    return count, first


def _radix_order(key):
    n = key.shape[0]
    bits, spare = np.empty(n, np.uint64), np.empty(n, np.uint64)
    order, moved = np.arange(n), np.empty(n, np.int64)
    raw = key.view(np.uint64)
    sign, everything = np.uint64(1) << np.uint64(63), ~np.uint64(0)
    for i in range(n):
        if key[i] != key[i]:
            bits[i] = everything  # NaN (p = q = 0) last
        elif raw[i] & sign:
            bits[i] = ~raw[i]
        else:
            bits[i] = raw[i] | sign
    counts = np.empty(2048, np.int64)
    mask = np.uint64(2047)
    for shift in range(0, 64, 11):
        step = np.uint64(shift)
        counts[:] = 0
        for i in range(n):
            counts[np.int64((bits[i] >> step) & mask)] += 1
        if counts.max() == n:  # one digit throughout: the pass would not move anything
            continue
        total = 0
        for d in range(2048):
            total, counts[d] = total + counts[d], total
        for i in range(n):
            d = np.int64((bits[i] >> step) & mask)
            spare[counts[d]], moved[counts[d]] = bits[i], order[i]
            counts[d] += 1
        bits, spare, order, moved = spare, bits, moved, order
    return order


#: The compiled kernels of this module.
KERNELS = ("_prefix_sums", "_suffix_sums", "_top_spread", "_scan_key", "_scan_keys", "_gather_checked", "_upper_products", "_tighten", "_radix_order")
