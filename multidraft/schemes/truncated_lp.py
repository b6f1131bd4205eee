"""The truncated importance-weighted selection (Khisti et al., ICLR 2025, Section 4), any K.

Rank the tokens (``rank_key="published"``: ``p(k) - Π_i q_i(k)`` decreasing; ``"ratio"``:
p/q̄ decreasing, under-drafted tokens first — see :func:`multidraft.lp.truncated.truncated_lp`),
keep the top s tokens Ω₁, select the best-ranked token of any draft tuple with a token outside
Ω₁, and optimise only the tuples inside Ω₁ (their canonical optimum, the projection of p);
then the single-draft step against the induced law r. Lossless for every s; acceptance
approaches P* as s grows.
"""

from __future__ import annotations

import numpy as np

from multidraft.schemes._importance import ImportanceScheme
from multidraft.schemes.base import Capabilities
from multidraft.theory.distributions import check_count
from multidraft.theory.laws import IID, DraftLaw, Independent

__all__ = ["TruncatedLP", "check_rank_key"]

_RANK_KEYS = ("published", "ratio")  # multidraft.lp.truncated.RANK_KEYS (lp is imported lazily)


def check_rank_key(rank_key: str) -> str:
    """A ranking key of the truncated selection (``"published"`` or ``"ratio"``), checked."""
    if rank_key not in _RANK_KEYS:
        raise ValueError(f"rank_key: unknown key {rank_key!r}; choose one of {', '.join(_RANK_KEYS)}")
    return rank_key


class TruncatedLP(ImportanceScheme):
    """Truncated LP selection (parameters ``s``, ``rank_key``) plus the single-draft step."""

    name = "truncated-lp"
    capabilities = Capabilities(laws=(IID, Independent), imports_lp=(IID, Independent))

    def __init__(self, *, s: int = 5, rank_key: str = "published") -> None:
        self.s = check_count(s, "s", meaning="the number of tokens kept")
        self.rank_key = check_rank_key(rank_key)

    def __repr__(self) -> str:
        return f"TruncatedLP(s={self.s}, rank_key={self.rank_key!r})"

    def selection(self, target, law: DraftLaw):
        from multidraft.lp.truncated import truncated_lp

        return truncated_lp(target, law, s=self.s, rank_key=self.rank_key)

    def select_batch(self, target, drafts, tokens, generator):
        """Batched form: ``target [B, n]``, ``drafts [B, K, n]`` (iid: ``drafts[:, 0]`` is used),
        ``tokens [B, K]`` -> ``(output [B], accepted [B])``, with the same selection and law r
        as :meth:`selection` row by row (float64, CPU).

        Vectorised over the rows, in blocks of rows: the keys, Ω₁ (a partition per row, no
        sort), the fixed part of r on Ω₁, the inner tuple masses, the selection among the drafts
        (a tuple with a token outside Ω₁ selects its best-ranked one, decided by comparing
        keys), r at the selected token (one masked sum per row when it lies outside Ω₁) and,
        for the rows whose selected draft is rejected, a residual draw by rejection from p
        (no sort, on average one more masked sum per row). The one step left per row is the
        canonical split over the s^K inner tuples (its active sets differ from row to row);
        it works on arrays of size s, never n.
        """
        import torch

        from multidraft.schemes import _torch

        k = _torch.check_batch(target, drafts, tokens)
        seed = int(torch.randint(0, 2**62, (1,), generator=_torch.check_generator(generator)))
        rng = np.random.default_rng(seed)
        iid = self._iid_rows(drafts)
        p_all = target.detach().to(torch.float64).cpu().numpy()
        q_all = drafts.detach().to(torch.float64).cpu().numpy()
        x_all = tokens.detach().cpu().numpy()
        output = np.empty(len(p_all), dtype=np.int64)
        block = max(1, _BLOCK_ENTRIES // max(k * p_all.shape[1], 1))
        for start in range(0, len(p_all), block):
            rows = slice(start, start + block)
            output[rows] = _truncated_block(p_all[rows], q_all[rows], x_all[rows], self.s, self.rank_key, iid, rng)
        result = torch.as_tensor(output, device=target.device)
        return result, (tokens == result[:, None]).any(dim=1)

    @staticmethod
    def _iid_rows(drafts) -> bool:
        """Whether every row drafts K times from one distribution (merged multisets)."""
        return bool((drafts == drafts[:, :1]).all())


#: Entries of one block of rows of the batched form (float64 arrays of this size stay small).
_BLOCK_ENTRIES = 1 << 21


def _truncated_block(p, q, x, s: int, rank_key: str, iid: bool, rng: np.random.Generator) -> np.ndarray:
    """One block of :meth:`TruncatedLP.select_batch`: ``p [R, n]``, ``q [R, K, n]``, drafted
    tokens ``x [R, K]`` -> output tokens ``[R]`` (ranked outside rule)."""
    from multidraft.lp.truncated import (
        _codes,
        _inner_base,
        _inner_tuples,
        _min_norm_split,
        _top_tokens,
        rank_key_values,
    )

    rows, k, n = q.shape
    p = p / p.sum(axis=1, keepdims=True)
    q = q / q.sum(axis=2, keepdims=True)
    every = np.arange(rows)
    s = min(s, n)
    key = rank_key_values(p, q, rank_key)  # [R, n]
    top = _top_tokens(key, s)  # [R, s]
    top_q = np.take_along_axis(q, top[:, None, :], axis=2)  # [R, K, s]
    outside_mass = np.maximum(q.sum(axis=2) - top_q.sum(axis=2), 0.0)
    base = _inner_base(top_q, outside_mass)  # [R, s]
    inner = _inner_tuples(s, k, iid)
    mass = inner.multiplicity * np.prod(top_q[:, np.arange(k)[None, :], inner.tuples], axis=-1)  # [R, T]
    p_top = np.take_along_axis(p, top, axis=1)
    share = np.stack([_min_norm_split(p_top[b], base[b], inner, mass[b]) for b in range(rows)])  # [R, T, s]
    r_top = base + np.einsum("rt,rts->rs", mass, share)

    # Selection: the rank of each draft in Ω₁ (s when outside).
    match = x[:, :, None] == top[:, None, :]
    rank = np.where(match.any(axis=2), match.argmax(axis=2), s)  # [R, K]
    inside = (rank < s).all(axis=1)
    position = np.zeros(rows, dtype=np.int64)
    if inside.any():
        ordered = rank[inside]
        table = _codes(np.sort(ordered, axis=1), s) if iid else _codes(ordered, s)
        codes = _codes(inner.tuples, s)
        t = np.searchsorted(codes, table)
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
    from multidraft.lp.truncated import _minimum_rank_law, _tails

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
