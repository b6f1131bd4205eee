"""Selective verification's selection among iid rows: the optimal law r, realised so that the
selected token is carried by as many rows as possible (issue 30, item 3; docs/block_level.md §4c).

At a node of K iid chains the m live rows draft X ~ IID(q, m); selective picks one drafted token
C, and the rows carrying C continue below. Its proof needs only the law r of C and that the
choice looks at this depth's tuple alone, so *every* selection rule with the same law r gives
the same budgets and the same mass entering the children. Among them this one maximises the
expected number of rows that continue,

    max_s  Σ_x D(x) Σ_i s_i(x) m_{x_i}(x)
    s.t.   Σ_i s_i(x) = 1,  s ≥ 0                          (s_i(x): select position i of x)
           Σ_x D(x) Σ_{i : x_i = y} s_i(x) = r(y)          for every token y,

with D(x) = Π_i q(x_i) over the ordered tuples of the support and m_y(x) = #{i : x_i = y}:
more rows below the accepted token give the subtree more tries (the downstream-aware reference
of :mod:`~multidraft.trees.downstream` shows that this, not acceptance, is what the
token-level coupling leaves on the table at K = 3). One LP (HiGHS) per node state, for supports
with at most :data:`MAX_TUPLES` ordered tuples; the law returned is the one the solver's point
*realises* (recomputed from it, rows clipped at 0 and renormalised), so the verifier stays
lossless whatever the solver's tolerance.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np

__all__ = ["rows_rule", "MAX_TUPLES"]

#: Largest number of ordered tuples |supp q|^m for which the LP runs (else the caller keeps its
#: rule): small vocabularies, as exact evaluation meets them.
MAX_TUPLES = 4096


def rows_rule(draft: np.ndarray, k: int, law: np.ndarray) -> tuple[np.ndarray, Callable[[np.ndarray], np.ndarray]] | None:
    """``(realised law [n], tuples [t, k] -> selection probabilities per position [t, k])`` of the
    selection rule with law ``law`` among ``k`` iid drafts from ``draft`` that maximises the
    expected multiplicity of the selected token (module docstring); None when the support has
    more than :data:`MAX_TUPLES` ordered tuples or HiGHS finds no optimum.

    >>> rule = rows_rule(np.array([0.5, 0.5]), 2, np.array([0.5, 0.5]))
    >>> rule[0].round(12).tolist(), rule[1](np.array([[0, 0], [0, 1]])).sum(axis=1).round(12).tolist()
    ([0.5, 0.5], [1.0, 1.0])
    """
    from scipy.optimize import linprog

    draft = np.asarray(draft, dtype=np.float64)
    n = len(draft)
    support = np.flatnonzero(draft > 0)
    count = len(support) ** k
    if k < 2 or count > MAX_TUPLES:
        return None
    tuples = np.array(list(itertools.product(support.tolist(), repeat=k)), dtype=np.int64)  # [T, k]
    mass = np.prod(draft[tuples], axis=1)
    mass = mass / mass.sum()
    same = tuples[:, :, None] == tuples[:, None, :]  # [T, k, k]
    rows = same.sum(axis=2)  # m_{x_i}(x)
    variables = count * k
    one_per_tuple = np.kron(np.eye(count), np.ones((1, k)))  # Σ_i s_i(x) = 1
    hits = (tuples.reshape(-1)[None, :] == support[:, None]) * np.repeat(mass, k)[None, :]  # [|S|, T·k]
    # the last token's marginal follows from the others (both sides sum to 1): left out
    equalities = np.vstack([one_per_tuple, hits[:-1]])
    rhs = np.concatenate([np.ones(count), np.asarray(law, dtype=np.float64)[support[:-1]]])
    result = linprog(-(np.repeat(mass, k) * rows.reshape(-1)), A_eq=equalities, b_eq=rhs, bounds=(0, None), method="highs")
    if result.status != 0:
        return None
    select = np.maximum(result.x.reshape(count, k), 0.0)
    select /= select.sum(axis=1, keepdims=True)
    realised = np.zeros(n)
    np.add.at(realised, tuples.reshape(-1), (mass[:, None] * select).reshape(-1))
    weights = n ** np.arange(k)[::-1]
    table = dict(zip((tuples @ weights).tolist(), range(count)))

    def choose(drawn: np.ndarray) -> np.ndarray:
        drawn = np.asarray(drawn, dtype=np.int64)
        return select[[table[c] for c in (drawn @ weights).tolist()]]

    return realised, choose
