"""The without-replacement rule's bookkeeping over the vocabulary in compiled passes.

:func:`~multidraft.theory.verifier._wor_rule.wor_selection_rule` sorts U and T* by increasing
p/q for r* and by decreasing p/q for the positions, gathers p, q and r* in T*'s position order,
finds the T* side's uniform tail, sums ``min(p, r)`` over parts and the vocabulary, and writes
α, r and the positions: with numpy that was ~20 passes over n-sized arrays, each with a fresh
temporary (2 ms at n = 49152, K = 8; issue 34). Here each is one pass that writes only what the
rule keeps. Every output is what the numpy expressions gave, bit for bit: the same comparisons
and copies, and sums in numpy's own order (:func:`pairwise_sum`); tests/test_wor_parts.py
checks each against them, with a broken twin.
"""

from __future__ import annotations

import numpy as np

from multidraft.theory._numba import compile_in_place
from multidraft.theory.verifier import _radix
from multidraft.theory.verifier._curtain import _workspace, descending_runs
from multidraft.theory.verifier._orders import sorted_tokens

__all__ = [
    "sorted_part", "descending_index", "descending_gather", "side_arrays", "strict_level", "sorted_side", "cut_members", "tail_starts", "scatter", "write_positions",
    "descending_values", "pairwise_sum", "min_sum", "min_sum_at", "rule_sums", "radix_order", "piece_offsets", "KEY_BITS",
]  # fmt: skip


def sorted_part(hint: np.ndarray, target: np.ndarray, draft: np.ndarray, gathered: tuple[np.ndarray, np.ndarray] | None = None):
    """``(tokens, p, q, p/q)`` of the tokens ``hint`` (q > 0, about in increasing p/q) sorted by
    increasing p/q, equal ratios by increasing id: what
    ``sorted_tokens(hint, p[hint]/q[hint])`` and gathers from it give, with the ratios gathered
    and divided once (one compiled pass; numpy's stable sort of them, linear on a nearly sorted
    hint, then one pass applying it). ``gathered``: ``(p[hint], q[hint])`` when the caller has
    them (the scan's sorted arrays, :class:`~multidraft.theory.optimum._wor_race.OptimalCut`):
    then only the ratios are divided, with no random reads. Runs of equal ratios are put in id order by
    :func:`~multidraft.theory.verifier._orders.sorted_tokens` itself. A hint whose ratios
    increase strictly is the order already: the gathered arrays are returned as they are (the
    wor rule's U at T* = ∅, every P* = 1 node: no sort, and none of four more arrays of the
    vocabulary's size and their fresh pages, 0.3-0.5 ms at n = 49152)."""
    given = hint
    hint = np.ascontiguousarray(hint, dtype=np.int64)
    size = len(hint)
    _compiled()
    if gathered is None:
        values, masses, key = np.empty(size), np.empty(size), np.empty(size)
        _ratio_gather(hint, target, draft, values, masses, key)
    else:
        values, masses = (np.ascontiguousarray(a, dtype=np.float64) for a in gathered)
        if values.shape != hint.shape or masses.shape != hint.shape:
            raise ValueError(f"sorted_part: gathered shapes {values.shape}, {masses.shape} differ from the hint's {hint.shape}")
        key = values / masses
    if _increasing(key):  # what the sort and the pass applying it give (no ties to settle)
        return hint.copy() if hint is given else hint, values, masses, key
    sub = np.argsort(key, kind="stable")
    out = np.empty(size, dtype=np.int64), np.empty(size), np.empty(size), np.empty(size)
    if _apply_order(sub, hint, values, masses, key, *out):  # equal ratios: their ids in order
        tokens = sorted_tokens(hint, key, sub)
        return tokens, target[tokens], draft[tokens], target[tokens] / draft[tokens]
    return out


def descending_index(key: np.ndarray) -> np.ndarray:
    """For a part sorted by increasing ratio ``key`` (p/q), equal ratios by increasing id: the
    index that orders it by *decreasing* ratio, equal ratios still by increasing id --
    reversed, then every run of equal ratios reversed back. ``tokens[index]`` is what
    ``sorted_tokens(tokens, -p/q)`` gives, in one pass
    (:func:`~multidraft.theory.verifier._curtain.reversed_runs`, which the iid fit's
    :func:`~multidraft.theory.verifier._curtain.descending_run_order` shares).

    >>> descending_index(np.array([0.4, 0.4, 0.8, 2.4])).tolist()
    [3, 2, 0, 1]
    """
    out = np.empty(len(key), dtype=np.int64)
    descending_runs(np.ascontiguousarray(key, dtype=np.float64), out)
    return out


def descending_gather(tokens: np.ndarray, values: np.ndarray, masses: np.ndarray, law: np.ndarray, index: np.ndarray, r_star: np.ndarray, out: tuple[np.ndarray, ...]) -> None:
    """``out = (tokens[index], values[index], masses[index], np.minimum(values, law)[index])``
    (int64, float64 ×3, each as long as ``index``; numpy's minimum: the second where neither is
    smaller, NaN kept) and ``r_star[tokens] = law``, in one pass over ``index`` (a permutation
    of the part: :func:`descending_index`'s), where four gathers, a scatter and an indexed sum
    made six (the wor rule's U, the whole vocabulary at every P* = 1 node, n = 49152)."""
    size = len(index)
    if not (len(tokens) == len(values) == len(masses) == len(law) == size and all(len(a) == size for a in out)) or (size and (min(index.min(), tokens.min()) < 0 or index.max() >= size or tokens.max() >= len(r_star))):
        raise ValueError(f"descending_gather: a part of {len(tokens)}, {len(values)}, {len(masses)}, {len(law)} entries, an index of {size} into it, tokens below len(r*) = {len(r_star)} and outputs of {[len(a) for a in out]}")
    _compiled()
    _descending_gather(np.ascontiguousarray(index, dtype=np.int64), tokens, values, masses, law, *out, r_star)


def side_arrays(index: np.ndarray, values: np.ndarray, masses: np.ndarray, law: np.ndarray, outside: float, out: tuple[np.ndarray, ...] | None = None):
    """``(p, q, r)`` of a part reordered by ``index`` (``values[index]`` ...), p and q led by
    the merged U token ``(0, outside)`` when ``outside > 0`` (the T* side's pass,
    :func:`~multidraft.theory.verifier._wor_rule._t_side`): ``(merged_p, merged_q, r, lead)``,
    one pass, no concatenation. ``out``: three float64 arrays of at least ``len(index) + 1``
    entries to write into (views of them returned: reused memory, no fresh pages)."""
    lead = 1 if outside > 0 else 0
    size = len(index) + lead
    if out is None:
        merged_p, merged_q, r = np.empty(size), np.empty(size), np.empty(len(index))
    else:
        merged_p, merged_q, r = out[0][:size], out[1][:size], out[2][: len(index)]
    if lead:
        merged_p[0], merged_q[0] = 0.0, outside
    _compiled()
    _gather(np.ascontiguousarray(index, dtype=np.int64), values, masses, law, merged_p[lead:], merged_q[lead:], r)
    return merged_p, merged_q, r, lead


def strict_level(values: np.ndarray, masses: np.ndarray, total: float, out) -> float | None:
    """μ with ``Σ max(v, μ m) = total`` (0 when ``Σ v >= total``) for a part given by increasing
    p/q = v/m whose ratios increase *strictly*, else None (equal neighbours or a NaN: the caller
    sorts): :func:`~multidraft.theory.verifier._wor_curtain.water_level`'s ``"max"`` level,
    bit for bit, from one compiled pass that checks the ratios and keeps the running sums
    ``M_j = Σ_{i<=j} m_i - m_j`` and ``V_j`` likewise (``np.cumsum(m) - m``), then numpy's
    bisection of the breakpoint sums ``d_j M_j + (V - V_j)`` (d_j = v_j/m_j) evaluated at its
    O(log n) probes only -- where ``ratios_increase`` and ``water_level`` made two passes of
    divisions and wrote every breakpoint's sum. ``out``: a
    :func:`~multidraft.theory.verifier._curtain._workspace` (its ``mass`` and ``target`` hold the
    running sums)."""
    values, masses = np.ascontiguousarray(values, dtype=np.float64), np.ascontiguousarray(masses, dtype=np.float64)
    size = len(values)
    mass_before, value_before = out.mass[:size], out.target[:size]
    _compiled()
    if not _increasing_sums(values, masses, mass_before, value_before):
        return None
    value_total = float(values.sum())
    if value_total >= total:
        return 0.0
    j = int(_breakpoint_search(values, masses, mass_before, value_before, value_total, float(total)))
    return total / float(masses.sum()) if j == size else (total - values[j:].sum()) / masses[:j].sum()


def sorted_side(tokens: np.ndarray, values: np.ndarray, masses: np.ndarray, total: float, level: float, outside: float, r_star: np.ndarray, out):
    """A part given by increasing p/q whose ratios increase *strictly* (:func:`strict_level`;
    T*, the scan order's prefix: no sort, no ties), clipped from below at the water level
    ``level`` (:func:`strict_level` of it, the ``"max"`` water level):
    ``r* = max(p, μq)`` with ``r*(part) = total``, in one compiled pass after the pool's bounds.
    What the wor rule had from :func:`sorted_part` (the hint unmoved), its ``_part_law``
    (``pool_split``: the pool by numpy's bisection of the ratios, probe for probe; its mass and
    the free tokens' p summed by numpy, the latter reversed, as there), :func:`descending_index`
    (a plain reversal) and :func:`side_arrays`, bit for bit, without their five arrays of the
    part's size and numpy's temporaries.

    Returns ``(by_position, merged_p, merged_q, r, lead, target, masses)``: the tokens by
    decreasing p/q and the arrays of :func:`side_arrays` (p, q led by the merged token
    ``(0, outside)`` when ``outside > 0``, r* in that order), views of ``out`` (a
    :func:`~multidraft.theory.verifier._curtain._workspace`: ``ps, qs, ds, order, scratch`` of at
    least ``len(tokens) + 1`` entries), the side's target ``Σ min(p, r*)``, numpy's sum of
    ``np.minimum(p, r*)`` in that order (:func:`min_sum`'s bits: the minimum written by the same
    pass into ``out.scratch``), and ``pair_masses(merged_q)``
    (:func:`~multidraft.theory.optimum._wor_pairs.pair_masses`' bits: its compensated steps taken
    by the same pass, which reads merged_q in that order; the K = 2 pass's M); writes
    ``r_star[tokens]``."""
    size = len(tokens)
    values, masses = np.ascontiguousarray(values, dtype=np.float64), np.ascontiguousarray(masses, dtype=np.float64)
    _compiled()
    cut = int(_ratio_bisect(values, masses, float(level)))  # the pool: density <= μ (searchsorted, side="right")
    weight = max(total - float(values[cut:][::-1].sum()), 0.0)  # numpy sums the reversed view backwards
    share = weight / float(masses[:cut].sum()) if cut else 0.0
    lead = 1 if outside > 0 else 0
    merged_p, merged_q, law, by_position = out.ps[: size + lead], out.qs[: size + lead], out.ds[:size], out.order[:size]
    if lead:
        merged_p[0], merged_q[0] = 0.0, outside
    smaller = out.scratch[:size]
    total, big, rest = _sorted_side(np.ascontiguousarray(tokens, dtype=np.int64), values, masses, cut, share, r_star, merged_p[lead:], merged_q[lead:], law, by_position, smaller, float(outside))
    return by_position, merged_p, merged_q, law, lead, float(smaller.sum()), (float(total), int(big), float(rest))


def cut_members(position: np.ndarray, boundary: int) -> np.ndarray:
    """The tokens whose position is at least ``boundary``, in increasing id, for ``position`` a
    permutation of ``range(n)`` (:func:`write_positions`'; not checked, as its tokens are not:
    anything else writes past the result): the rule's certificate, T* (its
    tokens hold the last ``n - boundary`` positions). One sequential pass over the positions
    (its writes branchless into one spare entry), where marking the prefix of the scan order
    needed a zeroed mask and random writes (0.045 -> 0.022 ms at n = 49152, |T*| ~ 30,000).

    >>> cut_members(np.array([1, 3, 0, 2]), 2).tolist()
    [1, 3]
    """
    position = np.ascontiguousarray(position, dtype=np.int64)
    out = np.empty(len(position) - boundary + 1, dtype=np.int64)
    _compiled()
    _members(position, int(boundary), out)
    return out[:-1]


def tail_starts(p: np.ndarray, q: np.ndarray, r_star: np.ndarray, nodes: tuple[float, ...], light: float, slack: float) -> tuple[int, ...]:
    """At each node t of ``nodes``: one past the last index where ``q > 0 and q t <= light and
    p <= slack r*`` fails (0 when it never fails). Scanned once from the end until every node's
    condition has failed, so it reads the tail of the smallest node only (the T* side's tail at
    its last node's two bounds: one scan where there were two)."""
    _compiled()
    out = np.empty(len(nodes), dtype=np.int64)
    _last_misses(p, q, r_star, np.asarray(nodes, dtype=np.float64), float(light), float(slack), out)
    return tuple(int(miss) + 1 for miss in out)


def scatter(tokens: np.ndarray, first: np.ndarray, second: np.ndarray, out_first: np.ndarray, out_second: np.ndarray) -> None:
    """``out_first[tokens], out_second[tokens] = first, second`` in one pass."""
    _compiled()
    _scatter(np.ascontiguousarray(tokens, dtype=np.int64), first, second, out_first, out_second)


def write_positions(first: np.ndarray, second: np.ndarray, n: int) -> np.ndarray:
    """``position[token] = its index in first + second`` (int64 [n]; the two hold every token once)."""
    out = np.empty(n, dtype=np.int64)
    _compiled()
    _write_positions(np.ascontiguousarray(first, dtype=np.int64), np.ascontiguousarray(second, dtype=np.int64), out)
    return out


def descending_values(values: np.ndarray) -> np.ndarray:
    """The positive entries of ``values`` sorted decreasingly (the array
    ``np.sort(values[values > 0])[::-1]``, contiguous): one insertion pass, linear when they
    are nearly in that order already (the T* side's masses in position order are at a P* = 1
    node); when the pass would move more than a few entries per value, :func:`radix_order` of
    their negatives (the same array: a sort of values has one result; 0.4 against numpy's
    2.1 ms at n = 49152, the T* side of a P* < 1 node, whose position order is by p/q), or
    numpy's sort where that declines."""
    out = np.empty(len(values))
    _compiled()
    count = _descending_values(np.ascontiguousarray(values, dtype=np.float64), out, 4 * len(values) + 64)
    if count < 0:
        positive = values[values > 0]
        order = radix_order(np.negative(positive))
        return np.ascontiguousarray(np.sort(positive)[::-1] if order is None else positive[order])
    return out[:count]


def pairwise_sum(values: np.ndarray) -> float:
    """``np.sum(values)`` of a float64 vector, the same bits: numpy's pairwise summation (blocks of
    at most 128 summed in eight interleaved partial sums, halves at multiples of 8 above that,
    fewer than 8 one by one), added to 0.0, compiled.

    >>> x = np.random.default_rng(0).random(1000)
    >>> pairwise_sum(x) == float(x.sum())
    True
    """
    values = np.ascontiguousarray(values, dtype=np.float64)
    _compiled()
    return float(0.0 + _pairwise(values, values, None, 0, len(values), False))


def min_sum(first: np.ndarray, second: np.ndarray, scratch: np.ndarray | None = None) -> float:
    """``np.minimum(first, second).sum()``, the same bits, without the temporary (finite
    entries): compiled, or, given ``scratch`` (float64, at least as long), the minimum written
    there and summed by numpy (its SIMD sum: 0.05 against 0.12 ms at n = 49152)."""
    first, second = np.ascontiguousarray(first, dtype=np.float64), np.ascontiguousarray(second, dtype=np.float64)
    if first.shape != second.shape:
        raise ValueError(f"min_sum: shapes {first.shape} and {second.shape} differ")
    if scratch is not None:
        out = scratch[: len(first)]
        return float(np.minimum(first, second, out=out).sum())
    _compiled()
    return float(0.0 + _pairwise(first, second, None, 0, len(first), True))


def min_sum_at(first: np.ndarray, second: np.ndarray, index: np.ndarray) -> float:
    """``np.minimum(first[index], second[index]).sum()``, the same bits (numpy's pairwise order
    over the gathered entries), read through ``index`` in place: no two gathered copies and
    their temporary (the wor rule's U target over the whole vocabulary, 0.3-0.6 ms at
    n = 49152; finite entries).

    >>> a, b = np.array([0.5, 0.1, 0.3]), np.array([0.2, 0.4, 0.3])
    >>> min_sum_at(a, b, np.array([2, 0])) == float(np.minimum(a[[2, 0]], b[[2, 0]]).sum())
    True
    """
    first, second = np.ascontiguousarray(first, dtype=np.float64), np.ascontiguousarray(second, dtype=np.float64)
    if first.shape != second.shape:
        raise ValueError(f"min_sum_at: shapes {first.shape} and {second.shape} differ")
    index = np.ascontiguousarray(index, dtype=np.int64)
    if len(index) and not (0 <= int(index.min()) and int(index.max()) < len(first)):
        raise ValueError(f"min_sum_at: index out of range for {len(first)} entries")
    _compiled()
    return float(0.0 + _pairwise(first, second, index, 0, len(index), True))


def rule_sums(p: np.ndarray, q: np.ndarray, r: np.ndarray, out) -> tuple[float, bool, float, float, float]:
    """``(Σ r, any(r < -1e-15), Σ min(p, q), Σ min(p, r), Σ (p - r)_+)``: the wor rule's checks of
    its law, its comparison with the first draft (law q) and the single-draft step's normaliser,
    each sum numpy's sum of the numpy expression (``np.minimum``, ``np.maximum(p - r, 0)``: the
    same bits), the three arrays written by one compiled pass into ``out``'s ``scratch``, ``key``
    and ``mass`` (a :func:`~multidraft.theory.verifier._curtain._workspace`) where numpy made
    eight passes and a mask."""
    size = len(r)
    first, second, excess = out.scratch[:size], out.key[:size], out.mass[:size]
    _compiled()
    negative = _rule_terms(p, q, r, first, second, excess)
    return float(r.sum()), bool(negative), float(first.sum()), float(second.sum()), float(excess.sum())


def radix_order(key: np.ndarray) -> np.ndarray | None:
    """The stable ascending order of the doubles ``key`` (NaN last), what the cut's scan takes
    as ``sort`` (:func:`~multidraft.theory.optimum._wor_race.scan_order`): the keys'
    order-preserving bits less the least one's, at the resolution of their top :data:`KEY_BITS`
    bits or up to 4x coarser where that saves a digit, above the index
    (:func:`~multidraft.theory.verifier._radix.pack_ordered_keys`), two or three counting passes
    (:func:`~multidraft.theory.verifier._radix.radix_sort`; the keys of a wor fit at n = 49152
    span 24 bits at 33: two), runs of equal truncated keys put in exact order
    (:func:`~multidraft.theory.verifier._radix.settle_ties`); the cut's own 64-bit radix sort
    makes six passes. None when a run of equal truncated keys is longer than
    :data:`LONG_RUN` (many keys that differ in their last bits only, as p/q for q =
    softmax(log p), among others a binade or more away: keys within a narrow span are sorted by
    every bit; the scan then sorts by all 64 bits itself instead of settling the run by a
    comparison sort).

    >>> radix_order(np.array([-0.5, -np.inf, np.nan, -0.0, -0.75])).tolist()
    [1, 4, 0, 3, 2]
    """
    key = np.ascontiguousarray(key, dtype=np.float64)
    size = len(key)
    shift = max(int(size - 1).bit_length(), 1)
    order = np.empty(size, dtype=np.int64)
    with _workspace(size) as work:  # the packed keys and the sort's scratch reused from fit to fit
        packed = work.packed[:size]
        bits = _radix.pack_ordered_keys(key, packed, shift, KEY_BITS)
        if bits:  # else every key is equal in its kept bits: one run
            _radix.radix_sort(packed, work.packed_scratch, work.counts, shift, shift + bits)
        if not _radix.settle_ties(packed, shift, key, order, LONG_RUN):
            return None
    return order


#: The keys' top bits whose resolution :func:`radix_order` sorts by radix at the finest (sign,
#: exponent and 21 bits of mantissa: three 11-bit digits at most), and the longest run of equal
#: truncated keys it settles.
KEY_BITS, LONG_RUN = 33, 1024


def piece_offsets(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """The covered length before every piece and after the last, ``[0, cumsum(end - start)]``
    (float64 [P + 1]), the same bits: one compiled pass of the same sequential additions,
    without the lengths, the sums and their concatenation as three fresh arrays (0.37 ms for
    the ~10^5 pieces of a J-curtain at n = 49152, on every draw of the rule).

    >>> piece_offsets(np.array([0.0, 0.5, 0.25]), np.array([0.25, 0.75, 0.5])).tolist()
    [0.0, 0.25, 0.5, 0.75]
    """
    out = np.empty(len(start) + 1)
    _compiled()
    _piece_offsets(np.ascontiguousarray(start, dtype=np.float64), np.ascontiguousarray(end, dtype=np.float64), out)
    return out


def _compiled() -> None:
    """Compile the kernels below on first use (:func:`~multidraft.theory._numba.compile_in_place`);
    after that one truth test a call (a fit makes ~12 calls, each of which checked all 18 names)."""
    if not _READY:
        compile_in_place(globals(), KERNELS)
        _READY.append(True)


#: Whether :func:`_compiled` has compiled the kernels (non-empty then).
_READY: list[bool] = []


def _ratio_gather(hint, p, q, values, masses, key):
    for i in range(hint.shape[0]):
        token = hint[i]
        values[i], masses[i] = p[token], q[token]
        key[i] = values[i] / masses[i]


def _increasing(key):
    """Whether ``key`` increases strictly (False at a NaN): the failures counted in one pass
    without an early exit, which vectorises (0.08 -> 0.02 ms at n = 49152)."""
    failures = 0
    for i in range(1, key.shape[0]):
        failures += not key[i - 1] < key[i]
    return failures == 0


def _apply_order(sub, hint, values, masses, key, tokens, out_values, out_masses, out_key):
    """Write the sorted arrays; True when two neighbours have equal ratios (ids to put in order)."""
    tie = False
    for i in range(sub.shape[0]):
        j = sub[i]
        tokens[i], out_values[i], out_masses[i], out_key[i] = hint[j], values[j], masses[j], key[j]
        if i > 0 and out_key[i] == out_key[i - 1]:
            tie = True
    return tie


def _descending_gather(index, tokens, values, masses, law, out_tokens, out_values, out_masses, smaller, r_star):
    """:func:`descending_gather`'s pass (arguments checked there)."""
    for i in range(index.shape[0]):
        j = index[i]
        token, value, bound = tokens[j], values[j], law[j]
        out_tokens[i], out_values[i], out_masses[i] = token, value, masses[j]
        smaller[i] = value if (value < bound) | (value != value) else bound
        r_star[token] = bound


def _gather(index, p, q, r, out_p, out_q, out_r):
    for i in range(index.shape[0]):
        j = index[i]
        out_p[i], out_q[i], out_r[i] = p[j], q[j], r[j]


def _increasing_sums(values, masses, mass_before, value_before):
    """Whether ``values / masses`` increases strictly (False at a NaN; the pass stops there), with
    the running sums of :func:`strict_level` written up to that point (``breakpoint_sums``'
    additions: the sum through j, less the j-th term)."""
    value_sum, mass_sum, previous = 0.0, 0.0, 0.0
    for i in range(values.shape[0]):
        ratio = values[i] / masses[i]
        if i > 0 and not previous < ratio:
            return False
        previous = ratio
        value_sum += values[i]
        mass_sum += masses[i]
        value_before[i], mass_before[i] = value_sum - values[i], mass_sum - masses[i]
    return True


def _breakpoint_search(values, masses, mass_before, value_before, value_total, total):
    """numpy's ``searchsorted(sums, total, side="left")`` over the breakpoint sums
    ``d_j M_j + (V - V_j)`` (``breakpoint_sums``' expression), each evaluated at its probe: the
    same bisection, probe for probe (a NaN sum counts as the largest, as numpy's comparison)."""
    low, high = 0, values.shape[0]
    while low < high:
        middle = low + ((high - low) >> 1)
        density = values[middle] / masses[middle]
        if density * mass_before[middle] + (value_total - value_before[middle]) < total:
            low = middle + 1
        else:
            high = middle
    return low


def _ratio_bisect(values, masses, x):
    """numpy's ``searchsorted(values / masses, x, side="right")``: its bisection, probe for probe."""
    low, high = 0, values.shape[0]
    while low < high:
        middle = low + ((high - low) >> 1)
        if values[middle] / masses[middle] <= x:
            low = middle + 1
        else:
            high = middle
    return low


def _sorted_side(tokens, values, masses, cut, share, r_star, out_p, out_q, out_r, by_position, smaller, outside):
    """The part reversed (:func:`sorted_side`): r* = q · share on the pool ``[:cut]``, p above;
    ``smaller`` = ``np.minimum(p, r*)`` (numpy's: the second where neither is smaller, NaN kept).
    Returns ``_wor_pairs._masses(merged_q, 0.0)`` (merged_q: ``outside`` when positive, then
    ``out_q``), its steps here (the kernel self-contained): the first largest mass's index and
    the others' mass summed with Neumaier's compensation."""
    size = values.shape[0]
    lead = 1 if outside > 0 else 0
    big, largest, rest, error = -1, 0.0, 0.0, 0.0
    if lead:
        big, largest = 0, outside
    for i in range(size):
        j = size - 1 - i
        law = masses[j] * share if j < cut else values[j]
        out_p[i], out_q[i], out_r[i], by_position[i] = values[j], masses[j], law, tokens[j]
        smaller[i] = values[j] if values[j] < law or values[j] != values[j] else law
        r_star[tokens[j]] = law
        if big < 0:
            big, largest = i, masses[j]
            continue
        x = masses[j]
        if x > largest:
            x, big, largest = largest, lead + i, x
        added = rest + x  # Neumaier's step (_wor_pairs._add)
        if abs(rest) >= abs(x):
            error += (rest - added) + x
        else:
            error += (x - added) + rest
        rest = added
    rest += error
    return rest + largest, big, rest


def _members(position, boundary, out):
    count = 0
    for token in range(position.shape[0]):
        out[count] = token  # kept when its position is inside; the last entry is a spare
        count += position[token] >= boundary


def _last_misses(p, q, r, nodes, light, slack, out):
    """``out[k]`` = the last index where the condition of :func:`tail_starts` fails at
    ``nodes[k]`` (-1 if never)."""
    missing = nodes.shape[0]
    out[:] = -1
    found = np.zeros(missing, dtype=np.bool_)
    for i in range(p.shape[0] - 1, -1, -1):
        if missing == 0:
            return
        pooled = q[i] > 0 and p[i] <= slack * r[i]
        for k in range(nodes.shape[0]):
            if not found[k] and not (pooled and q[i] * nodes[k] <= light):
                out[k] = i
                found[k] = True
                missing -= 1


def _scatter(tokens, first, second, out_first, out_second):
    for i in range(tokens.shape[0]):
        out_first[tokens[i]], out_second[tokens[i]] = first[i], second[i]


def _write_positions(first, second, out):
    for i in range(first.shape[0]):
        out[first[i]] = i
    offset = first.shape[0]
    for i in range(second.shape[0]):
        out[second[i]] = offset + i


def _rule_terms(p, q, r, first, second, excess):
    """:func:`rule_sums`' arrays (numpy's minimum and maximum: the second argument where neither
    wins, NaN kept); returns whether some r < -1e-15. The tests combined by ``|`` and the flag
    by ``|=`` (no short-circuit branches), so that LLVM vectorises the loop (0.059 -> 0.027 ms
    at n = 49152)."""
    negative = False
    for i in range(r.shape[0]):
        x, y, z = p[i], q[i], r[i]
        first[i] = x if (x < y) | (x != x) else y
        second[i] = x if (x < z) | (x != x) else z
        gap = x - z
        excess[i] = gap if (gap > 0.0) | (gap != gap) else 0.0
        negative |= z < -1e-15
    return negative


def _descending_values(values, out, budget):
    count, moves = 0, 0
    for i in range(values.shape[0]):
        value = values[i]
        if not value > 0:
            continue
        slot = count
        while slot > 0 and out[slot - 1] < value:
            out[slot] = out[slot - 1]
            slot -= 1
        moves += count - slot
        if moves > budget:
            return -1
        out[slot] = value
        count += 1
    return count


def _item(a, b, index, i, smaller):
    if index is None:  # pruned when compiled for index=None: the in-place sums keep their loop
        return min(a[i], b[i]) if smaller else a[i]
    return min(a[index[i]], b[index[i]]) if smaller else a[index[i]]


def _pairwise(a, b, index, lo, n, smaller):
    """numpy's ``pairwise_sum`` of entries ``lo .. lo + n - 1`` (of ``min(a, b)`` if ``smaller``;
    entry i read at ``index[i]`` unless ``index`` is None)."""
    if n < 8:
        total = 0.0
        for i in range(lo, lo + n):
            total += _item(a, b, index, i, smaller)
        return total
    if n <= 128:
        r0, r1, r2, r3 = _item(a, b, index, lo, smaller), _item(a, b, index, lo + 1, smaller), _item(a, b, index, lo + 2, smaller), _item(a, b, index, lo + 3, smaller)
        r4, r5, r6, r7 = _item(a, b, index, lo + 4, smaller), _item(a, b, index, lo + 5, smaller), _item(a, b, index, lo + 6, smaller), _item(a, b, index, lo + 7, smaller)
        i = 8
        while i < n - n % 8:
            r0 += _item(a, b, index, lo + i, smaller)
            r1 += _item(a, b, index, lo + i + 1, smaller)
            r2 += _item(a, b, index, lo + i + 2, smaller)
            r3 += _item(a, b, index, lo + i + 3, smaller)
            r4 += _item(a, b, index, lo + i + 4, smaller)
            r5 += _item(a, b, index, lo + i + 5, smaller)
            r6 += _item(a, b, index, lo + i + 6, smaller)
            r7 += _item(a, b, index, lo + i + 7, smaller)
            i += 8
        total = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
        while i < n:
            total += _item(a, b, index, lo + i, smaller)
            i += 1
        return total
    half = n // 2
    half -= half % 8
    return _pairwise(a, b, index, lo, half, smaller) + _pairwise(a, b, index, lo + half, n - half, smaller)


def _piece_offsets(start, end, out):
    total = 0.0
    out[0] = total
    for i in range(start.shape[0]):
        total += end[i] - start[i]
        out[i + 1] = total


#: The compiled kernels of this module.
KERNELS = (
    "_piece_offsets", "_ratio_gather", "_increasing", "_apply_order", "_descending_gather", "_gather", "_increasing_sums", "_breakpoint_search", "_ratio_bisect", "_sorted_side", "_members", "_last_misses", "_scatter",
    "_write_positions", "_rule_terms", "_descending_values", "_item", "_pairwise",
)  # fmt: skip
