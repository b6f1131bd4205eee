"""The truncated importance-weighted selection (Khisti et al., ICLR 2025, Section 4) for any
number of drafts, and the multi-stage selection built from pair stages.

**Truncation.** Rank the tokens (:func:`rank_key_values`), keep the top s, Ω₁, and fix the
selection of every draft tuple with a token outside Ω₁: it selects its best-ranked token
(``outside="ranked"``, the paper's rule) or, sort-free, its best-ranked token of Ω₁ and the
first draft when it has none (``outside="first"``). Only the tuples inside Ω₁ (s^K of them, or
the multisets for iid drafts) are optimised. Every fixed rule is lossless (Theorem 1: the
single-draft step against the induced law r outputs p exactly).

**The canonical optimum.** The tuples inside Ω₁ split their mass so that r on Ω₁ is the
Euclidean projection of p onto the laws they can induce (a base polytope): it maximises
``Σ min(p, r)`` (exchange argument: moving mass from b to a is possible at r* only if
``r*_a - p_a >= r*_b - p_b``, which rules out an improving move from a token above its target to
one below) and is unique, so the law passed on by each stage of :func:`multistage` is the same
whatever algorithm finds it: the projection replaces the LP and chooses among its optima
(:mod:`multidraft.lp._min_norm_point`; the row-vectorised core is
:mod:`multidraft.lp._truncation`). No linear program is solved: :func:`truncated_selection` is the
name that says so; ``truncated_lp`` is its former name, kept.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from multidraft.lp._solve import check_solver
from multidraft.lp._truncation import (
    MAX_INNER_TUPLES,
    OUTSIDE_RULES,
    RANK_KEYS,
    TRUNCATED_BYTES_PER_ENTRY,
    _outer_first,
    _outer_ranked,
    _stable_order,
    _top_tokens,
    check_rank_key,
    inner_tuples,
    rank_key_values,
    sample_block,
    selection_table,
    split_rows,
)
from multidraft.lp.importance import ImportanceSelection, _acceptance, _certified_intermediate, _check_drafts, drafts_law
from multidraft.theory.laws import IID, MAX_MEMORY, DraftLaw, Independent, check_count, check_law

__all__ = [
    "RANK_KEYS",
    "OUTSIDE_RULES",
    "MAX_INNER_TUPLES",
    "TRUNCATED_BYTES_PER_ENTRY",
    "TruncatedSelection",
    "MultistageSelection",
    "check_rank_key",
    "rank_key_values",
    "truncated_selection",
    "truncated_lp",
    "truncated_sample",
    "multistage",
]


@dataclass(frozen=True, eq=False)
class TruncatedSelection(ImportanceSelection):
    """Truncated selection for K drafts (Section 4): a canonical optimum over the tuples of the
    top-s tokens, a fixed rule elsewhere.

    Attributes (besides the base ones)
    ----------------------------------
    top : ndarray, shape (s,)
        The kept tokens Ω₁, best ranked first.
    rank : ndarray, shape (n,)
        Rank of every token (``outside="ranked"``); with ``outside="first"`` the tokens outside
        Ω₁ all share rank s (no full sort is made).
    weights : ndarray, shape (s,) * K + (K,)
        ``weights[a_1, ..., a_K, i]``: probability of selecting draft position i when the
        drafts are ``(top[a_1], ..., top[a_K])``; a token at several positions shares its
        weight among them equally.
    s : int
    rank_key, outside : str
    """

    top: np.ndarray
    rank: np.ndarray
    weights: np.ndarray
    s: int
    rank_key: str
    outside: str

    @property
    def k(self) -> int:
        return self.weights.ndim - 1

    def selection_probabilities(self, drafts: np.ndarray) -> np.ndarray:
        k = self.k
        drafts = _check_drafts(drafts, k, len(self.intermediate))
        ranks = self.rank[drafts.reshape(-1, k)]
        # Outside Ω₁^K: the first position holding the best rank (ties: the same token, or
        # tokens outside Ω₁ under the sort-free rule, where the first draft is selected).
        out = np.zeros(ranks.shape)
        out[np.arange(len(ranks)), np.argmin(ranks, axis=-1)] = 1.0
        inner = np.all(ranks < self.s, axis=-1)
        if inner.any():
            out[inner] = self.weights[tuple(ranks[inner].T)]
        return out.reshape(drafts.shape)


@dataclass(frozen=True, eq=False)
class MultistageSelection(ImportanceSelection):
    """K > 2 drafts combined pairwise: stage j selects between the token kept so far (law
    ``r_{j-1}``) and draft j + 1 (law ``q_{j+1}``); ``intermediate`` is the law after the last
    stage, and ``stages[j]`` the pair selection of stage j."""

    stages: tuple[ImportanceSelection, ...]

    @property
    def k(self) -> int:
        return len(self.stages) + 1

    def selection_probabilities(self, drafts: np.ndarray) -> np.ndarray:
        drafts = _check_drafts(drafts, self.k, len(self.intermediate))
        flat = drafts.reshape(-1, self.k)
        held = np.zeros(flat.shape)  # P(the token kept after stage j came from position i)
        held[:, 0] = 1.0
        for j, stage in enumerate(self.stages):
            newcomer = flat[:, j + 1]
            for i in range(j + 1):
                keep = stage.selection_probabilities(np.stack([flat[:, i], newcomer], axis=-1))[:, 0]
                held[:, j + 1] += held[:, i] * (1.0 - keep)
                held[:, i] *= keep
        return held.reshape(drafts.shape)


def truncated_selection(
    target: object,
    law: DraftLaw,
    *,
    s: int = 5,
    rank_key: str = "published",
    outside: str = "ranked",
    solver: str | None = None,
    max_tuples: int = MAX_INNER_TUPLES,
    max_memory: int = MAX_MEMORY,
) -> TruncatedSelection:
    """Truncated importance-weighted selection (Khisti et al., ICLR 2025, Section 4), any K,
    for the drafts of ``law`` (:class:`~multidraft.theory.IID` or
    :class:`~multidraft.theory.Independent`).

    Rank the tokens by ``rank_key`` (:func:`rank_key_values`) and keep the top s, Ω₁. A tuple
    with a token outside Ω₁ gets a fixed selection; with ``outside="ranked"`` (the paper's rule)
    it selects its best-ranked token, which gives, for the token of rank j,

        r_fixed(j) = Π_i T_i(j) - Π_i T_i(j+1)   (minus the inner part for j < s),

    with ``T_i(j) = q_i(tokens of rank >= j)`` (for K = 2:
    ``q₁q₂ + q₁ q₂(A) + q₂ q₁(A)``, A the tokens ranked after). ``outside="first"`` is the
    sort-free O(n) variant: Ω₁ by partition, tuples with a token of Ω₁ select their best-ranked
    one there, tuples without select the first draft, ``r(y) = q₁(y) Π_{i>1} q_i(Ω₂)`` outside.
    The tuples inside Ω₁ (s^K, or the multisets for iid drafts) split their mass among their
    tokens so that r on Ω₁ is the canonical optimum, the projection
    ``argmin ‖r - p‖²`` (module docstring): it maximises ``Σ min(p, r)`` and is unique, so the
    result does not depend on the algorithm that finds it. With the ranked rule the acceptance is
    non-decreasing in s and reaches the optimum of the importance LP at s = n (tested).

    Check: r is recomputed from the split and must be a probability distribution.

    Parameters
    ----------
    target : array_like, shape (n,)
    law : IID or Independent
    s : int
        Tokens kept (``s >= n`` keeps all: the full importance LP, solved canonically).
    rank_key : {"published", "ratio"}
    outside : {"ranked", "first"}
    solver : str or None
        None: the projection by Wolfe's minimum-norm-point algorithm over greedy vertices
        (no solver; :mod:`multidraft.lp._min_norm_point`). A cvxpy solver name that handles QPs: the same
        projection as a QP through cvxpy, the same r up to the solver's tolerance (tested with
        the interior-point ``"CLARABEL"``; HiGHS's QP solver fails on these semidefinite QPs).
    max_tuples, max_memory : int
        Size guard on the inner tuples (``C(s + K - 1, K)`` for iid drafts, else ``s^K``) and
        on the estimated peak memory of the split (tuples × s × ``TRUNCATED_BYTES_PER_ENTRY``),
        checked before anything is built; the refusal names the largest s that fits.

    Returns
    -------
    TruncatedSelection

    Raises
    ------
    ValueError
        A bad target, a law other than IID or Independent, a bad s, rank_key, outside or solver.
    TypeError
        ``law`` is not a draft law.
    ProblemTooLargeError
        More than ``max_tuples`` inner tuples or ``max_memory`` bytes.
    SolverError
        A QP status other than optimal, or a failed re-check.

    Examples
    --------
    >>> from multidraft.theory import IID
    >>> selection = truncated_selection([0.5, 0.3, 0.1, 0.1], IID([0.25, 0.25, 0.25, 0.25], 2), s=2)
    >>> selection.top.tolist(), round(selection.acceptance, 6)
    ([0, 1], 0.9)

    Keeping every token recovers the optimum ``P* = 0.9375`` (min-cut at T = {1, 2, 3}), and
    three iid drafts reach acceptance one (P* = 1: p(T) >= q(T)^3 for every T):

    >>> round(truncated_selection([0.5, 0.3, 0.1, 0.1], IID([0.25] * 4, 2), s=4).acceptance, 6)
    0.9375
    >>> round(truncated_selection([0.5, 0.3, 0.1, 0.1], IID([0.25] * 4, 3), s=4).acceptance, 6)
    1.0

    Complexity: one argsort (O(n) with ``outside="first"``), O(nK) closed forms, and the
    projection over the T inner tuples (s^K, or the multisets): each iteration one greedy
    vertex, O(T K), and a least-squares problem on at most s + 1 points.
    """
    start = time.perf_counter()
    if not isinstance(check_law(law), (IID, Independent)):
        raise ValueError(f"law: the truncated selection needs an iid or independent law, got the {law.name} law")
    p = law.check_target(target)
    drafts, iid = np.array(law.marginals()), isinstance(law, IID)
    s = check_count(s, "s", meaning="the number of tokens kept")
    check_rank_key(rank_key)
    if outside not in OUTSIDE_RULES:
        raise ValueError(f"outside: unknown rule {outside!r}; choose one of {', '.join(OUTSIDE_RULES)}")
    if solver is not None:
        solver = check_solver(solver)
    k, n = drafts.shape
    s = min(s, n)
    what = f"truncated LP (n={n}, k={k}, s={s})"
    inner = inner_tuples(s, k, iid, max_tuples, max_memory)
    # Ω₁: the top s of the key, ties by the lower token id (a stable order), so the set does not
    # depend on the sorting algorithm; the ranked rule needs every rank, the sort-free one none.
    key = rank_key_values(p, drafts, rank_key)
    if outside == "ranked":
        order = _stable_order(key, drafts, s)
        top = order[:s]
        rank = np.empty(n, dtype=np.int64)
        rank[order] = np.arange(n)
    else:
        top = _top_tokens(key, s)
        rank = np.full(n, s, dtype=np.int64)
        rank[top] = np.arange(s)
    split = split_rows(p[None], drafts[None], top[None], inner, solver, what)
    r = _outer_ranked(drafts, order, s) if outside == "ranked" else _outer_first(drafts, top, split.outside_mass[0])
    r[top] = split.r_top[0]  # the law the split induces, recomputed
    name = "min-norm point (greedy vertices)" if solver is None else solver
    r = _certified_intermediate(r, what, name, len(inner.pair_tuple), len(inner.tuples))
    return TruncatedSelection(
        acceptance=_acceptance(p, r),
        intermediate=r,
        status="optimal",
        solver=name,
        seconds=time.perf_counter() - start,
        top=top,
        rank=rank,
        weights=selection_table(inner, split.share[0], s, k),
        s=s,
        rank_key=rank_key,
        outside=outside,
    )


def truncated_lp(
    target: object,
    draft: object,
    draft2: object | None = None,
    *,
    k: int | None = None,
    **options: object,
) -> TruncatedSelection:
    """:func:`truncated_selection` under its former name, with the drafts given as
    distributions: ``draft`` alone (K = ``k`` iid drafts, default 2), ``draft`` and ``draft2``
    (two independent drafts), or ``draft`` a draft law. ``options`` are those of
    :func:`truncated_selection`.

    >>> round(truncated_lp([0.5, 0.3, 0.1, 0.1], [0.25] * 4, s=2).acceptance, 6)
    0.9
    """
    if isinstance(draft, DraftLaw):
        if draft2 is not None or k is not None:
            raise ValueError("draft: with a draft law, draft2 and k are taken from the law; leave them unset")
        return truncated_selection(target, draft, **options)
    return truncated_selection(target, drafts_law(draft, draft2, k=k), **options)


#: Entries of one block of rows of :func:`truncated_sample` (float64 arrays of this size stay small).
_BLOCK_ENTRIES = 1 << 21


def truncated_sample(
    target: np.ndarray, drafts: np.ndarray, tokens: np.ndarray, *, s: int, rank_key: str, iid: bool, rng: np.random.Generator
) -> np.ndarray:
    """Run the truncated selection (ranked outside rule) and the single-draft step against its
    law r on a batch of positions: ``target [B, n]``, ``drafts [B, K, n]`` (each row's draft
    distributions, renormalised here), drafted ``tokens [B, K]`` -> output tokens ``[B]``; the
    same selection and law r as :func:`truncated_selection` row by row, with ``iid`` the
    merged multisets of iid drafts.

    Vectorised over blocks of rows: the keys, Ω₁ (a partition per row, no sort), the fixed part
    of r on Ω₁, the inner tuple masses and their canonical split (:func:`split_rows`, the one
    step per row: its active sets differ from row to row, on arrays of size s), the selection
    among the drafts (a tuple with a token outside Ω₁ selects its best-ranked one, decided by
    comparing keys), r at the selected token (one masked sum per row when it lies outside Ω₁)
    and, for the rows whose selected draft is rejected, a residual draw by rejection from p (no
    sort, on average one more masked sum per row).
    """
    check_rank_key(rank_key)
    s = check_count(s, "s", meaning="the number of tokens kept")
    output = np.empty(len(target), dtype=np.int64)
    block = max(1, _BLOCK_ENTRIES // max(drafts.shape[1] * target.shape[1], 1))
    for start in range(0, len(target), block):
        rows = slice(start, start + block)
        output[rows] = sample_block(target[rows], drafts[rows], tokens[rows], s, rank_key, iid, rng)
    return output


def multistage(
    target: object,
    drafts: Sequence,
    *,
    s: int | None = None,
    rank_key: str = "published",
    solver: str | None = None,
) -> MultistageSelection:
    """Multi-stage selection for K >= 2 independent drafts ``X_i ~ q_i`` (Khisti et al., Section 4).

    Stage 1 combines drafts 1 and 2 into a token with law ``r₁``; stage j combines the kept
    token (law ``r_{j-1}``, independent of ``X_{j+1}``) with draft j + 1 into ``r_j``, each
    stage maximising ``Σ min(p, r_j)``. The single-draft step at the end uses ``r_{K-1}``, so
    the scheme is lossless and its acceptance ``Σ min(p, r_{K-1})`` is at most P* (the stages
    are greedy). ``s=None``: every pair of tokens is optimised (:func:`truncated_selection`
    with s = n); an integer s: :func:`truncated_selection` with that s and ``rank_key``.

    **Deterministic.** A stage has many optimal selections and the law it passes on decides
    what later stages can reach; each stage here takes the canonical optimum (the projection of
    p, unique: see the module docstring), so the result does not depend on how it is found:
    ``solver=None`` uses the minimum-norm-point algorithm of :func:`truncated_selection`, a cvxpy
    solver name the same projection as a QP (tested with Clarabel).

    **Not monotone in K with truncation.** With ``s=None`` a stage may always keep the token it
    holds, so adding a draft never lowers the acceptance. With an integer s the fixed rule
    outside Ω₁ is forced on every tuple with a token outside, and a stage can end below the
    law it started from: adding a draft can lower the acceptance (tests/test_lp_truncated.py
    has an instance with s = 1).

    >>> q = [0.4, 0.3, 0.2, 0.1]
    >>> selection = multistage([0.1, 0.2, 0.3, 0.4], [q, q, q])
    >>> selection.k, selection.selection_probabilities([[0, 1, 3]]).shape
    (3, (1, 3))
    """
    start = time.perf_counter()
    if isinstance(drafts, np.ndarray) and drafts.ndim == 1:
        raise ValueError("drafts: multistage needs a list of K >= 2 draft distributions")
    drafts = list(drafts)
    if len(drafts) < 2:
        raise ValueError(f"drafts: multistage needs K >= 2 draft distributions, got {len(drafts)}")
    stages: list[TruncatedSelection] = []
    current = drafts[0]
    for following in drafts[1:]:
        size = len(np.asarray(following)) if s is None else s
        stage = truncated_selection(target, Independent([current, following]), s=size, rank_key=rank_key, solver=solver)
        stages.append(stage)
        current = stage.intermediate
    last = stages[-1]
    return MultistageSelection(
        acceptance=last.acceptance,
        intermediate=last.intermediate,
        status=last.status,
        solver=last.solver,
        seconds=time.perf_counter() - start,
        stages=tuple(stages),
    )
