"""More rows below the accepted token, on K iid chains (issue 30, item 3; docs/block_level.md §4c):
selective's selection (:func:`rows_rule`: the optimal law r, realised so that the selected token
is carried by as many rows as possible) and token:optimal's coupling (:func:`rows_coupling`: among
the couplings of maximum acceptance, one whose accepted token is carried by as many rows as
possible).

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
import math
from collections.abc import Callable

import numpy as np

__all__ = ["rows_rule", "rows_coupling", "multisets_fit", "MAX_TUPLES", "COUPLING_SLACKS"]

#: Largest number of ordered tuples |supp q|^m (:func:`rows_rule`) or multisets
#: (:func:`rows_coupling`) for which the LP runs (else the caller keeps its rule): small
#: vocabularies, as exact evaluation meets them.
MAX_TUPLES = 4096

#: :func:`rows_coupling`'s acceptance may fall this far below P* in its second stage (the first
#: stage's rounding), the next one tried when HiGHS finds the tighter one infeasible; beyond the
#: last the caller keeps its maximum-acceptance coupling.
COUPLING_SLACKS = (1e-10, 1e-9)

#: HiGHS tolerances for :func:`rows_coupling` (its defaults, 1e-7, would cost token:optimal that
#: much acceptance after the point is clipped to the capacities).
TIGHT = {"primal_feasibility_tolerance": 1e-10, "dual_feasibility_tolerance": 1e-10}


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


def multisets_fit(support: int, k: int) -> bool:
    """Whether ``k`` iid draws over ``support`` tokens have at most :data:`MAX_TUPLES` multisets,
    C(support + k - 1, k) (the size of :func:`rows_coupling`'s LP)."""
    return k >= 2 and math.comb(support + k - 1, k) <= MAX_TUPLES


def rows_coupling(target: np.ndarray, draft: np.ndarray, k: int) -> Callable[[np.ndarray], np.ndarray] | None:
    """``tuples [t, k] -> P(Y = · | X = x) [t, n]``: among the couplings of ``k`` iid drafts
    X ~ IID(q, k) with Y ~ p of maximum acceptance P*, one that maximises the expected number of
    drafts carrying Y (issue 30, item 3; docs/block_level.md §4c),

        max_s Σ_x Σ_{y ∈ x} s(x, y) m_y(x)
        s.t.  Σ_{y ∈ x} s(x, y) <= D(x),   Σ_x s(x, y) <= p(y),   Σ s >= P* - ε,   s >= 0,

    over the multisets x of the draft's support (D(x) their IID(q, k) mass, m_y(x) the count of y
    in x; P* the first stage's max Σ s, the same LP without the last constraint; ε the solver's
    tolerance, :data:`COUPLING_SLACKS`). Given X = x the walk accepts y ∈ x with probability
    s(x, y)/D(x) and otherwise draws Y from ``norm(p - a)``, a(y) = Σ_x s(x, y): so
    Σ_x D(x) P(Y = y | x) = a(y) + (1 - Σ a) (p(y) - a(y)) / (1 - Σ a) = p(y) for any s meeting
    the two capacity constraints -- which the solver's point is clipped to meet exactly, so the
    coupling is lossless whatever the solver's tolerance. None when the support has more than
    :data:`MAX_TUPLES` multisets (:func:`multisets_fit`) or HiGHS finds no optimum.

    On K iid chains the drafts carrying Y are the rows that continue below it: the LP is the
    downstream-aware walk's (:func:`multidraft.trees.downstream.node_couplings`) with the value
    of a child of j rows replaced by j, which needs nothing below the node, so the walk stays a
    verifier of the tree alone. Two HiGHS solves over at most k · C(|supp q| + k - 1, k) variables.

    >>> coupling = rows_coupling(np.array([0.5, 0.5]), np.array([0.5, 0.5]), 2)
    >>> coupling(np.array([[0, 0], [0, 1], [1, 0], [1, 1]])).round(12).tolist()
    [[1.0, 0.0], [0.5, 0.5], [0.5, 0.5], [0.0, 1.0]]
    """
    from scipy.optimize import linprog
    from scipy.sparse import csr_matrix, vstack

    target = np.asarray(target, dtype=np.float64)
    draft = np.asarray(draft, dtype=np.float64)
    target, draft = target / target.sum(), draft / draft.sum()
    n = len(draft)
    support = np.flatnonzero(draft > 0)
    if not multisets_fit(len(support), k):
        return None
    multisets = np.array(list(itertools.combinations_with_replacement(support.tolist(), k)), dtype=np.int64)  # [T, k]
    counts = (multisets[:, :, None] == np.arange(n)[None, None, :]).sum(axis=1)  # [T, n]: m_y(x)
    orderings = math.factorial(k) / np.prod([[math.factorial(c) for c in row] for row in counts[:, support].tolist()], axis=1)
    mass = orderings * np.prod(draft[multisets], axis=1)  # D(x)
    mass /= mass.sum()
    rows_of, tokens = np.nonzero(counts)  # variable v: s(x = rows_of[v], y = tokens[v])
    size = len(rows_of)
    capacity = csr_matrix(
        (np.ones(2 * size), (np.concatenate([rows_of, len(multisets) + tokens]), np.tile(np.arange(size), 2))),
        shape=(len(multisets) + n, size),
    )
    bounds = np.concatenate([mass, target])
    first = linprog(-np.ones(size), A_ub=capacity, b_ub=bounds, bounds=(0, None), method="highs", options=TIGHT)
    if first.status != 0:
        return None
    rows = counts[rows_of, tokens].astype(np.float64)
    with_acceptance = vstack([capacity, csr_matrix(-np.ones((1, size)))])
    for slack in COUPLING_SLACKS:
        second = linprog(-rows, A_ub=with_acceptance, b_ub=np.append(bounds, first.fun + slack), bounds=(0, None), method="highs", options=TIGHT)
        if second.status == 0:
            break
    else:
        return None
    plan = np.zeros((len(multisets), n))
    plan[rows_of, tokens] = np.maximum(second.x, 0.0)
    plan *= np.minimum(1.0, mass / np.maximum(plan.sum(axis=1), 1e-300))[:, None]  # Σ_y s(x, y) <= D(x)
    plan *= np.minimum(1.0, target / np.maximum(plan.sum(axis=0), 1e-300))[None, :]  # a(y) <= p(y)
    accepted = plan.sum(axis=0)
    residual = np.maximum(target - accepted, 0.0)
    left = np.maximum(1.0 - plan.sum(axis=1) / mass, 0.0)  # P(reject | x)
    conditional = plan / mass[:, None]
    if residual.sum() > 0:
        conditional += left[:, None] * (residual / residual.sum())[None, :]
    index = dict(zip(map(tuple, multisets.tolist()), range(len(multisets))))

    def conditional_of(tuples: np.ndarray) -> np.ndarray:
        keys = [tuple(row) for row in np.sort(np.asarray(tuples, dtype=np.int64), axis=1).tolist()]
        if any(key not in index for key in keys):
            raise ValueError("drafts: a draft token has draft probability zero")
        return conditional[[index[key] for key in keys]]

    return conditional_of
