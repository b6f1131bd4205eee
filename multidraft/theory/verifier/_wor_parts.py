"""The without-replacement rule's bookkeeping over the vocabulary in compiled passes.

:func:`~multidraft.theory.verifier._wor_rule.wor_selection_rule` orders U and T* both ways (by
increasing p/q for r*, by decreasing p/q for the positions), gathers p, q and r* in T*'s
position order, finds the T* side's uniform tail and writes the positions: with numpy that was
~20 passes over n-sized arrays, each with a fresh temporary (2 ms at n = 49152, K = 8; issue 34).
Here each is one pass that writes only what the rule keeps. Every output is what the numpy
expressions gave, bit for bit (the same comparisons and copies, no arithmetic reordered):
tests/test_wor_parts.py checks each against them, with a broken twin.
"""

from __future__ import annotations

import numpy as np

from multidraft.theory._numba import compile_in_place

__all__ = ["descending_index", "side_arrays", "tail_start", "write_positions", "descending_values"]


def descending_index(values: np.ndarray, masses: np.ndarray) -> np.ndarray:
    """For a part sorted by increasing ``values/masses`` (p/q, q > 0), equal ratios by
    increasing id: the index that orders it by *decreasing* ratio, equal ratios still by
    increasing id -- reversed, then every run of equal ratios reversed back. ``tokens[index]``
    is what ``sorted_tokens(tokens, -p/q)`` gives, in one pass over contiguous arrays.

    >>> descending_index(np.array([0.1, 0.1, 0.2, 0.6]), np.full(4, 0.25)).tolist()
    [3, 2, 0, 1]
    """
    out = np.empty(len(values), dtype=np.int64)
    _compiled()
    _descending_index(np.ascontiguousarray(values, dtype=np.float64), np.ascontiguousarray(masses, dtype=np.float64), out)
    return out


def side_arrays(index: np.ndarray, values: np.ndarray, masses: np.ndarray, law: np.ndarray, outside: float):
    """``(p, q, r)`` of a part reordered by ``index`` (``values[index]`` ...), p and q led by
    the merged U token ``(0, outside)`` when ``outside > 0`` (the T* side's pass,
    :func:`~multidraft.theory.verifier._wor_rule._t_side`): ``(merged_p, merged_q, r, lead)``,
    one pass, no concatenation."""
    lead = 1 if outside > 0 else 0
    merged_p, merged_q, r = np.empty(len(index) + lead), np.empty(len(index) + lead), np.empty(len(index))
    if lead:
        merged_p[0], merged_q[0] = 0.0, outside
    _compiled()
    _gather(np.ascontiguousarray(index, dtype=np.int64), values, masses, law, merged_p[lead:], merged_q[lead:], r)
    return merged_p, merged_q, r, lead


def tail_start(p: np.ndarray, q: np.ndarray, r_star: np.ndarray, t_max: float, light: float, slack: float) -> int:
    """One past the last index where ``q > 0 and q t_max <= light and p <= slack r*`` fails
    (0 when it never fails): scanned from the end, so it reads the tail only."""
    _compiled()
    return int(_last_miss(p, q, r_star, float(t_max), float(light), float(slack))) + 1


def write_positions(first: np.ndarray, second: np.ndarray, n: int) -> np.ndarray:
    """``position[token] = its index in first + second`` (int64 [n]; the two hold every token once)."""
    out = np.empty(n, dtype=np.int64)
    _compiled()
    _write_positions(np.ascontiguousarray(first, dtype=np.int64), np.ascontiguousarray(second, dtype=np.int64), out)
    return out


def descending_values(values: np.ndarray) -> np.ndarray:
    """The positive entries of ``values`` sorted decreasingly (the array
    ``np.sort(values[values > 0])[::-1]``, contiguous): one insertion pass, linear when they
    are nearly in that order already (the T* side's masses in position order are); a sort when
    the pass would move more than a few entries per value."""
    out = np.empty(len(values))
    _compiled()
    count = _descending_values(np.ascontiguousarray(values, dtype=np.float64), out, 4 * len(values) + 64)
    if count < 0:
        return np.ascontiguousarray(np.sort(values[values > 0])[::-1])
    return out[:count]


def _compiled() -> None:
    """Compile the kernels below on first use (:func:`~multidraft.theory._numba.compile_in_place`)."""
    compile_in_place(globals(), KERNELS)


def _descending_index(values, masses, out):
    m = values.shape[0]
    for i in range(m):
        out[i] = m - 1 - i
    start = 0
    while start < m:
        key = values[out[start]] / masses[out[start]]
        stop = start + 1
        while stop < m and values[out[stop]] / masses[out[stop]] == key:
            stop += 1
        low, high = start, stop - 1
        while low < high:
            out[low], out[high] = out[high], out[low]
            low += 1
            high -= 1
        start = stop


def _gather(index, p, q, r, out_p, out_q, out_r):
    for i in range(index.shape[0]):
        j = index[i]
        out_p[i], out_q[i], out_r[i] = p[j], q[j], r[j]


def _last_miss(p, q, r, t_max, light, slack):
    for i in range(p.shape[0] - 1, -1, -1):
        if not (q[i] > 0 and q[i] * t_max <= light and p[i] <= slack * r[i]):
            return i
    return -1


def _write_positions(first, second, out):
    for i in range(first.shape[0]):
        out[first[i]] = i
    offset = first.shape[0]
    for i in range(second.shape[0]):
        out[second[i]] = offset + i


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


#: The compiled kernels of this module.
KERNELS = ("_descending_index", "_gather", "_last_miss", "_write_positions", "_descending_values")
