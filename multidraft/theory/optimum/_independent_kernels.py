"""Compiled passes of the threshold-set search (:mod:`multidraft.theory.optimum._independent`), float mode.

Each pass does in one loop what the search's numpy expressions do in several, with the same
arithmetic in the same order (so the same doubles): running prefix sums accumulate in order as
``numpy.cumsum`` does, and the values a caller sums whole are written to contiguous buffers and
summed by numpy (pairwise summation, which a compiled loop would not reproduce); the sorts are
stable, so their permutations are ``argsort(kind="stable")``'s. Compiled on first use (:func:`~multidraft.theory._numba.compile_in_place`),
so importing the theory does not import numba.
"""

from __future__ import annotations

import numpy as np

from multidraft.theory._numba import compile_in_place

__all__ = ["sift", "negative_parts", "gather", "score_bits", "prefix_values", "ratio_digest", "radix_order", "label_runs", "KERNELS"]

#: Bits per digit of :func:`radix_order`: 6 passes over 64 bits, 2^11 buckets each.
DIGIT_BITS = 11


def sift(w_lo, w_hi, up, down, ids, p, q, size, in_ids, in_p, in_q):
    """One deciding round (Lemma 2) over the first ``size`` undecided classes: with
    ``low = Σ_i w_lo[i] q[i]`` and ``high = Σ_i w_hi[i] q[i]`` (summed from i = 0 up), a class
    with ``low > p · up`` is decided inside (its id, p and q appended to ``in_ids``, ``in_p``,
    ``in_q``), else one with ``high < p · down`` outside; the others are moved to the front of
    ``ids``, ``p``, ``q`` in their order. Returns (classes inside, classes kept)."""
    k = q.shape[0]
    inside, kept = 0, 0
    for j in range(size):
        low = w_lo[0] * q[0, j]
        high = w_hi[0] * q[0, j]
        for i in range(1, k):
            low += w_lo[i] * q[i, j]
            high += w_hi[i] * q[i, j]
        if low > p[j] * up:
            in_ids[inside] = ids[j]
            in_p[inside] = p[j]
            for i in range(k):
                in_q[i, inside] = q[i, j]
            inside += 1
        elif not high < p[j] * down:
            if kept < j:
                ids[kept] = ids[j]
                p[kept] = p[j]
                for i in range(k):
                    q[i, kept] = q[i, j]
            kept += 1
    return inside, kept


def negative_parts(vs, ids, p, q, out, counts):
    """For each row v of ``vs``: the negative entries of ``p - Σ_i v[i] q[i]`` (summed from
    i = 0 up) over the classes ``ids``, in their order, written to that row of ``out``, their
    number to ``counts`` (the caller sums ``out[r, :counts[r]]``); one pass for all rows."""
    k = q.shape[0]
    counts[:] = 0
    for j in range(ids.shape[0]):
        c = ids[j]
        for r in range(vs.shape[0]):
            total = vs[r, 0] * q[0, c]
            for i in range(1, k):
                total += vs[r, i] * q[i, c]
            reduced = p[c] - total
            if reduced < 0.0:
                out[r, counts[r]] = reduced
                counts[r] += 1


def gather(ids, p, q, out_p, out_q):
    """``out_p = p[ids]``, ``out_q = q[:, ids]`` in one pass."""
    for j in range(ids.shape[0]):
        c = ids[j]
        out_p[j] = p[c]
        for i in range(q.shape[0]):
            out_q[i, j] = q[i, c]


def score_bits(w, ids, p, q, bits):
    """Sort keys by decreasing score ``Σ_i w[i] q[i] / p`` (summed from i = 0 up) of the classes
    ``ids``: the bits of ``-score + 0.0`` (-0.0 ties with 0.0) as an unsigned integer of the same
    order (the sign bit set for a non-negative key, every bit flipped for a negative one; NaN
    above everything), for :func:`radix_order`."""
    k = q.shape[0]
    sign, everything = np.uint64(1) << np.uint64(63), ~np.uint64(0)
    key = np.empty(1)
    raw = key.view(np.uint64)
    for j in range(ids.shape[0]):
        c = ids[j]
        total = w[0] * q[0, c]
        for i in range(1, k):
            total += w[i] * q[i, c]
        key[0] = -(total / p[c]) + 0.0
        if key[0] != key[0]:
            bits[j] = everything
        elif raw[0] & sign:
            bits[j] = ~raw[0]
        else:
            bits[j] = raw[0] | sign


def prefix_values(order, p, q, p_in, c_in, out):
    """``out[j] = (p(S_j) + p_in) - Π_i (q_i(S_j) + c_in[i])`` for the prefixes S_j (j = 0..s) of
    the classes ``order``, prefix sums accumulated in order (``numpy.cumsum``'s)."""
    k = q.shape[0]
    sums = np.zeros(k)
    total = 0.0
    for j in range(order.shape[0] + 1):
        if j > 0:
            c = order[j - 1]
            total += p[c]
            for i in range(k):
                sums[i] += q[i, c]
        contained = 1.0
        for i in range(k):
            contained *= sums[i] + c_in[i]
        out[j] = total + p_in - contained


def ratio_digest(p, q, active, ratios, digest):
    """``ratios = q[:, active] / p[active]`` and a hash of each column's bits,
    ``digest = (... ((0 ^ b_0) · C ^ b_1) · C ...)`` (uint64, wrapping; C the golden-ratio constant)."""
    k = q.shape[0]
    for j in range(active.shape[0]):
        for i in range(k):
            ratios[i, j] = q[i, active[j]] / p[active[j]]
    bits = ratios.view(np.uint64)
    factor = np.uint64(0x9E3779B97F4A7C15)
    for j in range(active.shape[0]):
        h = np.uint64(0)
        for i in range(k):
            h = (h ^ bits[i, j]) * factor
        digest[j] = h


def radix_order(bits):
    """The stable ascending order of the uint64 ``bits`` (``argsort(bits, kind="stable")``):
    least-significant-digit radix sort, 11-bit digits, every digit's histogram taken in one
    read, a digit equal in every key skipped. O(6 n)."""
    n = bits.shape[0]
    passes = -(-64 // DIGIT_BITS)
    mask = np.uint64((1 << DIGIT_BITS) - 1)
    counts = np.zeros((passes, 1 << DIGIT_BITS), dtype=np.int64)
    for j in range(n):
        for d in range(passes):
            counts[d, (bits[j] >> np.uint64(d * DIGIT_BITS)) & mask] += 1
    keys, spare = bits.copy(), np.empty(n, dtype=np.uint64)
    order, moved = np.arange(n), np.empty(n, dtype=np.int64)
    for d in range(passes):
        shift = np.uint64(d * DIGIT_BITS)
        if n == 0 or counts[d, (keys[0] >> shift) & mask] == n:
            continue
        total = 0
        for digit in range(1 << DIGIT_BITS):
            count = counts[d, digit]
            counts[d, digit] = total
            total += count
        for j in range(n):
            digit = (keys[j] >> shift) & mask
            spare[counts[d, digit]] = keys[j]
            moved[counts[d, digit]] = order[j]
            counts[d, digit] += 1
        keys, spare, order, moved = spare, keys, moved, order
    return order


def label_runs(columns, order, label):
    """``label[order[j]]``: the number of changes between neighbouring columns of ``columns``
    (``[K, s]``) taken in ``order`` up to j (columns compared as doubles: the class ids of
    :func:`~multidraft.theory.optimum._independent._classes`, equal columns adjacent)."""
    run = 0
    for j in range(order.shape[0]):
        if j > 0:
            for i in range(columns.shape[0]):
                if columns[i, order[j]] != columns[i, order[j - 1]]:
                    run += 1
                    break
        label[order[j]] = run


#: The compiled kernels of this module.
KERNELS = ("sift", "negative_parts", "gather", "score_bits", "prefix_values", "ratio_digest", "radix_order", "label_runs")


def compiled() -> None:
    """Compile the kernels above in place on first use."""
    compile_in_place(globals(), KERNELS)
