"""The truncation of the importance-weighted selection, row-vectorised (Khisti et al., ICLR 2025,
Section 4): rank the tokens, keep the top s (Ω₁), fix the selection of every draft tuple with a
token outside Ω₁, and split the mass of the tuples inside Ω₁ canonically
(:mod:`multidraft.lp._min_norm_point`). One core, :func:`split_rows`, over ``[B, n]`` rows, is
used by :func:`multidraft.lp.truncated_selection` (one row, the whole law r and the selection
table) and :func:`sample_block` (a batch of decoding positions: r only where it is needed).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from multidraft.lp._min_norm_point import min_norm_split, projection_by_solver
from multidraft.theory.laws import MAX_MEMORY, SizeEstimate, check_size

#: Ranking keys of the truncated selection (:func:`rank_key_values`).
RANK_KEYS = ("published", "ratio")
#: Fixed selection rules for tuples with a token outside the top s.
OUTSIDE_RULES = ("ranked", "first")
#: Largest number of inner draft tuples (s^K; the table of selection weights has this many rows).
MAX_INNER_TUPLES = 2_000_000
#: Peak bytes per (inner tuple, kept token) of the split (calibrated by benchmarks/bench_size_guard.py).
TRUNCATED_BYTES_PER_ENTRY = 24


def rank_key_values(target: np.ndarray, drafts: np.ndarray, rank_key: str) -> np.ndarray:
    """Ranking key of the truncated selection (larger = ranked first): target ``[..., n]``, drafts
    ``[..., K, n]``.

    * ``"published"``: ``p(k) - Π_i q_i(k)`` (Khisti et al., Section 4, for K = 2): the target
      mass not already delivered by the tuple (k, ..., k).
    * ``"ratio"``: ``p(k) / q̄(k)`` with ``q̄`` the mean of the q_i: under-drafted tokens first
      (the min-cut argument sends every tuple holding a token outside the optimal cut set to
      that token); ``p = 0`` ranks last among the drafted tokens.

    Under both keys a token that no draft can produce (every ``q_i(k) = 0``) ranks last, -inf:
    it is in no draft tuple, so a place among the top s would be wasted on it (the paper sorts
    only the tokens left after the drafts' top-p; otherwise, with top-k drafts, an undrafted
    token of large p could push a drafted one out and s >= the drafts' support would not give
    the full LP).

    >>> rank_key_values(np.array([0.5, 0.5]), np.array([[0.5, 0.5], [1.0, 0.0]]), "published").tolist()
    [0.0, 0.5]
    >>> q = np.array([0.5, 0.5, 0.0])  # two iid drafts that never produce token 2
    >>> np.round(rank_key_values(np.array([0.3, 0.3, 0.4]), np.stack([q, q]), "published"), 6).tolist()
    [0.05, 0.05, -inf]
    """
    drafts = np.atleast_2d(drafts)  # [..., K, n]
    if rank_key == "published":
        key = target - np.prod(drafts, axis=-2)
    elif rank_key == "ratio":
        mean = drafts.mean(axis=-2)
        with np.errstate(divide="ignore", invalid="ignore"):
            key = target / np.where(mean > 0, mean, 1.0)
    else:
        raise ValueError(f"rank_key: unknown key {rank_key!r}; choose one of {', '.join(RANK_KEYS)}")
    return np.where(drafts.max(axis=-2) > 0, key, -np.inf)


def check_rank_key(rank_key: str) -> str:
    """``rank_key`` if it is one of :data:`RANK_KEYS`, else a ``ValueError`` naming them."""
    if rank_key not in RANK_KEYS:
        raise ValueError(f"rank_key: unknown key {rank_key!r}; choose one of {', '.join(RANK_KEYS)}")
    return rank_key


def _minimum_rank_law(sorted_drafts: np.ndarray, tails: np.ndarray) -> np.ndarray:
    """``P(min rank of the tuple = j) = Π_i T_i(j) - Π_i T_i(j+1)`` for every rank j, from the
    drafts in rank order ``[..., K, m]`` and their tail masses ``tails[..., i, j] = q_i(rank >= j)``
    (``[..., K, m + 1]``), without cancellation: with ``T_i(j) - T_i(j+1) = q_i(j)``,

        Π_i T_i(j) - Π_i T_i(j+1) = Σ_i (Π_{l<i} T_l(j+1)) q_i(j) (Π_{l>i} T_l(j)),

    every term >= 0 (for K = 2: ``q₁ T₂(j) + T₁(j+1) q₂``). In-place products, O(K m)."""
    *lead, k, m = sorted_drafts.shape
    after = np.empty((*lead, k, m))  # Π_{l>i} T_l(j)
    after[..., -1, :] = 1.0
    for i in range(k - 2, -1, -1):
        np.multiply(after[..., i + 1, :], tails[..., i + 1, :-1], out=after[..., i, :])
    law = np.zeros((*lead, m))
    before = np.ones((*lead, m))  # Π_{l<i} T_l(j+1)
    for i in range(k):
        term = after[..., i, :]
        term *= sorted_drafts[..., i, :]
        term *= before
        law += term
        if i + 1 < k:
            before *= tails[..., i, 1:]
    return law


def _tails(sorted_drafts: np.ndarray, beyond: np.ndarray | float = 0.0) -> np.ndarray:
    """``q_i(rank >= j)`` for j = 0..m from the drafts in rank order ``[..., K, m]`` (summed
    from the tail), plus ``beyond [..., K]``, the mass ranked after all of them."""
    *lead, k, m = sorted_drafts.shape
    tails = np.zeros((*lead, k, m + 1))
    np.cumsum(sorted_drafts[..., ::-1], axis=-1, out=tails[..., -2::-1])
    tails += np.asarray(beyond)[..., None]
    return tails


def _inner_base(top_drafts: np.ndarray, outside_mass: np.ndarray) -> np.ndarray:
    """The fixed part of r on Ω₁ (``[..., s]``): ``P(min rank = j)`` minus its part where every
    draft lies in Ω₁ (that part is optimised), from the drafts of Ω₁ in rank order
    ``[..., K, s]`` and the mass outside Ω₁ ``[..., K]``; the same for both outside rules."""
    law = _minimum_rank_law(top_drafts, _tails(top_drafts, outside_mass))
    return np.maximum(law - _minimum_rank_law(top_drafts, _tails(top_drafts)), 0.0)


def _top_tokens(key: np.ndarray, s: int) -> np.ndarray:
    """The s tokens of largest key along the last axis (``[..., s]``), best first, ties by the
    lower token id (stable), in O(n) per row: an argpartition, a check for a tie across the
    boundary (then the tied tokens of lowest id are kept), and a sort of the s kept."""
    n = key.shape[-1]
    if s >= n:
        chosen = np.broadcast_to(np.arange(n), key.shape)
    else:
        chosen = np.sort(np.argpartition(-key, s - 1, axis=-1)[..., :s], axis=-1)
        kth = np.take_along_axis(key, chosen, axis=-1).min(axis=-1, keepdims=True)
        crossing = (key >= kth).sum(axis=-1) > s  # the s-th key is tied with a token left out
        if crossing.any():
            rows = key[crossing]
            above = rows > kth[crossing]
            tied = rows == kth[crossing]
            tied &= np.cumsum(tied, axis=-1) <= s - above.sum(axis=-1, keepdims=True)
            chosen = np.array(chosen)
            chosen[crossing] = np.nonzero(above | tied)[-1].reshape(-1, s)
    kept = np.take_along_axis(key, chosen, axis=-1)
    return np.take_along_axis(chosen, np.argsort(-kept, axis=-1, kind="stable"), axis=-1)


def _stable_order(key: np.ndarray, drafts: np.ndarray, s: int) -> np.ndarray:
    """Tokens by decreasing key, ties by token id, where ties matter: the fast (unstable) sort,
    redone stably when two equal keys meet among drafted tokens or at the edge of Ω₁. (The
    order of tied tokens no draft can produce changes nothing: they get r = 0 either way.)"""
    order = np.argsort(-key)
    ordered = key[order]
    tied = ordered[1:] == ordered[:-1]
    if tied.any():
        drafted = drafts.sum(axis=0)[order] > 0
        if (tied & (drafted[1:] | drafted[:-1])).any() or (0 < s < len(key) and tied[s - 1]):
            order = np.argsort(-key, kind="stable")
    return order


def _outer_ranked(drafts: np.ndarray, order: np.ndarray, s: int) -> np.ndarray:
    """r outside Ω₁ under the ranked rule (``[..., n]``, zero on Ω₁): the token of rank j >= s
    gets ``P(min rank = j)``; ``order [..., n]`` is the full rank order."""
    ordered = np.take_along_axis(drafts, order[..., None, :], axis=-1)
    law = _minimum_rank_law(ordered, _tails(ordered))
    law[..., :s] = 0.0
    outer = np.empty(law.shape)
    np.put_along_axis(outer, order, law, axis=-1)
    return outer


def _outer_first(drafts: np.ndarray, top: np.ndarray, outside_mass: np.ndarray) -> np.ndarray:
    """r outside Ω₁ under the sort-free rule (``[..., n]``, zero on Ω₁): tuples with no token of
    Ω₁ select the first draft, ``r(y) = q_1(y) Π_{i>1} q_i(Ω₂)``."""
    outer = drafts[..., 0, :] * np.prod(outside_mass[..., 1:], axis=-1, keepdims=True)
    np.put_along_axis(outer, top, 0.0, axis=-1)
    return outer


# ------------------------------------------------------------------------------ inner tuples


@dataclass(frozen=True)
class InnerTuples:
    """The draft tuples inside Ω₁ in rank space (0..s-1): ``tuples [T, K]``, ordered, or for iid
    drafts one sorted representative per multiset with ``multiplicity`` orderings; ``pairs``
    lists each (tuple, distinct rank) once (the tuple's mass may go to any of its tokens)."""

    tuples: np.ndarray
    multiplicity: np.ndarray
    pair_tuple: np.ndarray
    pair_rank: np.ndarray


def _inner_count(s: int, k: int, iid: bool) -> int:
    """Inner tuples of the top s tokens: the multisets for iid drafts, else all s^K tuples."""
    return math.comb(s + k - 1, k) if iid else s**k


def _inner_memory(s: int, k: int, iid: bool) -> int:
    """Estimated peak bytes of the split over the inner tuples: dense [tuples, s] tables."""
    return _inner_count(s, k, iid) * s * TRUNCATED_BYTES_PER_ENTRY


def inner_tuples(
    s: int, k: int, iid: bool, max_tuples: int = MAX_INNER_TUPLES, max_memory: int = MAX_MEMORY
) -> InnerTuples:
    def fits(size: int) -> bool:
        return _inner_count(size, k, iid) <= max_tuples and _inner_memory(size, k, iid) <= max_memory

    if not fits(s):
        largest = 1
        while fits(2 * largest):
            largest *= 2
        step = largest
        while step > 1:  # the largest s that fits, by bisection (count and memory grow in s)
            step //= 2
            if fits(largest + step):
                largest += step
        count, memory = _inner_count(s, k, iid), _inner_memory(s, k, iid)
        estimate = SizeEstimate(f"truncated LP (s={s}, k={k})", count, memory, unit="draft tuples inside the top s tokens")
        check_size(estimate, f"use s <= {largest} (or raise max_tuples / max_memory)", max_variables=max_tuples,
                   max_memory=max_memory, variables_name="max_tuples")  # fmt: skip
    if iid:
        tuples = np.array(list(itertools.combinations_with_replacement(range(s), k)), dtype=np.int64).reshape(-1, k)
        # Orderings of a sorted tuple: K! / Π_j c_j!, with Π_j c_j! the product over positions of
        # the position within its run of equal ranks (1, 2, ... along each run).
        within_run = np.ones(tuples.shape)
        for i in range(1, k):
            within_run[:, i] = np.where(tuples[:, i] == tuples[:, i - 1], within_run[:, i - 1] + 1, 1)
        multiplicity = math.factorial(k) / within_run.prod(axis=1)
    else:
        tuples = np.indices((s,) * k).reshape(k, -1).T.astype(np.int64)
        multiplicity = np.ones(len(tuples))
    codes = np.unique(np.repeat(np.arange(len(tuples)), k) * s + tuples.reshape(-1))
    return InnerTuples(tuples, multiplicity, codes // s, codes % s)


@dataclass(frozen=True)
class InnerSplit:
    """The canonical split of the inner tuples of B rows: ``base [B, s]`` (r on Ω₁ from the tuples
    with a token outside), ``mass [B, T]`` (each inner tuple's probability), ``share [B, T, s]``
    (the fraction of its mass given to each kept token), ``outside_mass [B, K]`` (each draft's
    mass outside Ω₁) and ``r_top [B, s]``, the law r on Ω₁ the split induces."""

    base: np.ndarray
    mass: np.ndarray
    share: np.ndarray
    outside_mass: np.ndarray
    r_top: np.ndarray


def split_rows(
    p: np.ndarray, drafts: np.ndarray, top: np.ndarray, inner: InnerTuples, solver: str | None = None, what: str = ""
) -> InnerSplit:
    """The split of the tuples inside Ω₁ for rows ``p [B, n]``, ``drafts [B, K, n]`` and kept
    tokens ``top [B, s]`` (best ranked first): the projection ``argmin ‖r - p‖²`` over the laws
    they can induce, by the minimum-norm-point algorithm (``solver=None``) or a cvxpy QP solver,
    row by row (the active sets differ from row to row; the work is of size s, never n)."""
    k = drafts.shape[1]
    top_drafts = np.take_along_axis(drafts, top[:, None, :], axis=2)  # [B, K, s]
    outside_mass = np.maximum(drafts.sum(axis=2) - top_drafts.sum(axis=2), 0.0)
    base = _inner_base(top_drafts, outside_mass)
    mass = inner.multiplicity * np.prod(top_drafts[:, np.arange(k)[None, :], inner.tuples], axis=-1)  # [B, T]
    p_top = np.take_along_axis(p, top, axis=1)
    rows, s = top.shape
    share = np.zeros((rows, len(inner.tuples), s))
    for b in range(rows):
        if len(inner.pair_tuple) == len(inner.tuples):  # every inner tuple holds one token: no choice
            share[b, inner.pair_tuple, inner.pair_rank] = 1.0
        elif solver is None:
            share[b] = min_norm_split(p_top[b], base[b], inner, mass[b])
        else:
            share[b] = projection_by_solver(p_top[b], base[b], inner, mass[b], solver, what)
    r_top = base + np.stack([mass[b] @ share[b] for b in range(rows)])
    return InnerSplit(base, mass, share, outside_mass, r_top)


def selection_table(inner: InnerTuples, share: np.ndarray, s: int, k: int) -> np.ndarray:
    """``[s]*K + [K]`` probabilities of selecting each draft position for every ordered inner
    tuple: the share of the token at that position, divided among the positions holding it."""
    ordered = np.indices((s,) * k).reshape(k, -1).T  # every ordered tuple
    if len(inner.tuples) != len(ordered):  # iid: look up each ordering's multiset
        row = np.searchsorted(_codes(inner.tuples, s), _codes(np.sort(ordered, axis=1), s))
    else:
        row = np.arange(len(ordered))
    holders = (ordered[:, :, None] == ordered[:, None, :]).sum(axis=2)  # positions sharing each token
    table = share[row[:, None], ordered] / holders
    return table.reshape((s,) * k + (k,))


def _codes(tuples: np.ndarray, s: int) -> np.ndarray:
    """Mixed-radix codes of rank tuples (sorted codes for sorted multiset rows)."""
    return (tuples * (s ** np.arange(tuples.shape[1] - 1, -1, -1))).sum(axis=1)


# ----------------------------------------------------------------------- a batch of positions


def sample_block(p, q, x, s: int, rank_key: str, iid: bool, rng: np.random.Generator) -> np.ndarray:
    """The truncated selection (ranked outside rule) and the single-draft step against its law r,
    run on a block of rows: ``p [R, n]``, ``q [R, K, n]``, drafted tokens ``x [R, K]`` -> output
    tokens ``[R]`` (see :func:`multidraft.lp.truncated_sample`)."""
    rows, k, n = q.shape
    p = p / p.sum(axis=1, keepdims=True)
    q = q / q.sum(axis=2, keepdims=True)
    every = np.arange(rows)
    s = min(s, n)
    key = rank_key_values(p, q, rank_key)  # [R, n]
    top = _top_tokens(key, s)  # [R, s]
    inner = inner_tuples(s, k, iid)
    split = split_rows(p, q, top, inner)
    share, r_top = split.share, split.r_top  # [R, T, s], [R, s]

    # Selection: the rank of each draft in Ω₁ (s when outside).
    match = x[:, :, None] == top[:, None, :]
    rank = np.where(match.any(axis=2), match.argmax(axis=2), s)  # [R, K]
    inside = (rank < s).all(axis=1)
    position = np.zeros(rows, dtype=np.int64)
    if inside.any():
        ordered = rank[inside]
        table = _codes(np.sort(ordered, axis=1), s) if iid else _codes(ordered, s)
        t = np.searchsorted(_codes(inner.tuples, s), table)
        holders = (ordered[:, :, None] == ordered[:, None, :]).sum(axis=2)
        weights = share[every[inside, None], t[:, None], ordered] / holders  # [R', K]
        cumulative = np.cumsum(weights, axis=1)
        position[inside] = np.minimum((cumulative < rng.random((len(t), 1)) * cumulative[:, -1:]).sum(axis=1), k - 1)
    outer_rows = ~inside
    if outer_rows.any():
        # The best-ranked draft: a token of Ω₁ by its rank, else the largest key, then the lower
        # id (a token at several positions: the first of them, lexsort being stable).
        ranks = rank[outer_rows]
        drafted_key = np.take_along_axis(key[outer_rows], x[outer_rows], axis=1)
        keys = (x[outer_rows], np.where(ranks < s, 0.0, -drafted_key), ranks)
        position[outer_rows] = np.lexsort(keys, axis=-1)[:, 0]
    selected = x[every, position]

    # r at the selected token, then the single-draft step against r.
    r_selected = _law_at(selected, every, top, r_top, key, q, s)
    output = selected.copy()
    pending = every[rng.random(rows) * r_selected >= p[every, selected]]
    # Rejected: a draw from the residual ∝ (p - r)_+, by rejection from p (accept y with
    # probability (p(y) - r(y))_+ / p(y)): exact, and on average one proposal per row of the
    # block, since a row is rejected with probability Σ (p - r)_+ and then needs 1/Σ (p - r)_+.
    cumulative = np.cumsum(p[pending], axis=1)
    while pending.size:
        level = rng.random((len(pending), 1)) * cumulative[:, -1:]
        y = np.minimum((cumulative <= level).sum(axis=1), n - 1)
        room = p[pending, y] - _law_at(y, pending, top, r_top, key, q, s)
        taken = rng.random(len(pending)) * p[pending, y] < room
        output[pending[taken]] = y[taken]
        pending, cumulative = pending[~taken], cumulative[~taken]
    return output


def _law_at(tokens: np.ndarray, rows: np.ndarray, top, r_top, key, q, s: int) -> np.ndarray:
    """``r(y)`` for one token per row (``tokens [R']`` in ``rows [R']`` of the block): from the
    canonical split on Ω₁, else the ranked rule ``Π T_i - Π (T_i - q_i(y))`` with ``T_i`` the
    draft mass ranked at or after y (one masked sum per row; ties by token id)."""
    match = top[rows] == tokens[:, None]
    inside = match.any(axis=1)
    out = np.empty(len(rows))
    out[inside] = r_top[rows[inside], match[inside].argmax(axis=1)]
    if (~inside).any():
        y, block = tokens[~inside], rows[~inside]
        keys = key[block]
        own = keys[np.arange(len(y)), y][:, None]
        after = (keys < own) | ((keys == own) & (np.arange(keys.shape[1]) > y[:, None]))  # ranked after y
        beyond = np.einsum("rkn,rn->rk", q[block], after.astype(np.float64))
        q_y = q[block, :, y][:, :, None]  # [R'', K, 1]
        out[~inside] = _minimum_rank_law(q_y, _tails(q_y, beyond))[:, 0]
    return out
