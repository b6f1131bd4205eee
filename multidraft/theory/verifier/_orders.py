"""Stable sorts from a hint: the wor fit's orders without full sorts of the vocabulary.

The fit of the without-replacement rule sorts the same tokens several times by keys that order
them almost as the optimal cut's scan order does (p/q, m/p = q/(q(U) p), by part). numpy's stable
sort is a timsort for floats, linear on a sequence already in order, so sorting the keys *in
the hint's order* costs ~0.1 ms at n = 49152 where a sort of the keys in token-id order costs
~10 ms (issue 34, item 3). Ties are then put in token-id order, so the result is exactly that of
``np.argsort(key_in_id_order, kind="stable")``: the same order, whatever the hint.
"""

from __future__ import annotations

import numpy as np

__all__ = ["sorted_tokens"]


def sorted_tokens(tokens: np.ndarray, key: np.ndarray, sub: np.ndarray | None = None) -> np.ndarray:
    """``tokens`` (distinct ids, any order, ideally nearly sorted by ``key``) ordered by ``key``
    (one value per entry of ``tokens``) ascending, NaN last, equal keys by increasing token id:
    what ``np.sort(tokens)[np.argsort(key_by_id, kind="stable")]`` gives, ``key_by_id`` the keys
    of the sorted ids. O(s) on a nearly sorted sequence, O(s log s) at worst. ``sub``:
    ``np.argsort(key, kind="stable")`` when the caller has it already.

    >>> sorted_tokens(np.array([5, 2, 9, 1]), np.array([0.5, 0.5, 0.1, np.nan])).tolist()
    [9, 2, 5, 1]
    """
    tokens, key = np.asarray(tokens), np.asarray(key)
    sub = np.argsort(key, kind="stable") if sub is None else sub
    out, ordered = tokens[sub], key[sub]
    if len(out) < 2:
        return out
    nan = np.isnan(ordered)
    same = (ordered[1:] == ordered[:-1]) | (nan[1:] & nan[:-1])
    if not same.any():
        return out
    # Put every run of equal keys in id order: few runs one by one (np.sort of ids), many at once.
    edges = np.flatnonzero(np.diff(np.concatenate([[False], same, [False]]).astype(np.int8)))
    starts, stops = edges[0::2], edges[1::2] + 1
    if len(starts) <= FEW_RUNS:
        size = int(out.max()) + 1
        for start, stop in zip(starts.tolist(), stops.tolist()):
            if 8 * (stop - start) >= size:  # a long run: its ids by a mask over the id range, O(ids)
                mask = np.zeros(size, dtype=bool)
                mask[out[start:stop]] = True
                out[start:stop] = np.flatnonzero(mask)
            else:
                out[start:stop] = np.sort(out[start:stop])
        return out
    in_run = np.zeros(len(out), dtype=bool)
    in_run[1:] |= same
    in_run[:-1] |= same
    run = np.cumsum(np.concatenate([[True], ~same]))
    where = np.flatnonzero(in_run)
    out[where] = out[where][np.lexsort((out[where], run[where]))]
    return out


#: Up to this many runs of equal keys :func:`sorted_tokens` sorts them one by one.
FEW_RUNS = 32
