"""The downstream-aware walk on iid chains: at every node, the coupling of the drafted tuple
with Y ~ p(· | node) that maximises the expected accepted length below (issue 30, item 3;
docs/block_level.md, "The downstream-aware walk").

On ``TreeShape.chains(K, L)`` with iid rows, the m rows through a prefix u draft a tuple
X ~ IID(q(· | u), m); the walk moves to the child Y when Y ∈ X, and then the m_Y(X) rows
carrying Y continue. Bottom-up over (u, m), with V(u, m) = 0 at depth L,

    V(u, m) = max_π  Σ_{x, y} π(x, y) 1{y ∈ x} (1 + V(uy, m_y(x)))

over couplings π of IID(q(· | u), m) and p(· | u): **acceptance first** (``acceptance_first=True``,
the reference of the issue: among the couplings of maximum acceptance P*) or **unconstrained**
(the best composition of per-node lossless couplings). Each is one small LP per (u, m) (HiGHS).
The coupling at (u, m) does not depend on the draws below, so the walk that uses
``π(· | x)`` at a node with m live rows and tuple x is lossless (§4's argument: Y ~ p exactly at
every node) -- it knows the model's tables, so it is a reference, not a verifier of the tree alone:
a verifier that picks the coupling from the *drawn* subtrees' values changes the law of Y given
the tuple with the draws below and is not lossless (the twin in tests/test_trees_downstream.py).

:func:`downstream_value` gives V(ε, K) by the recursion; :class:`DownstreamWalk` is the walk as a
tree verifier, whose exact evaluation is the second route to the same number.
:func:`walk_pair_bound` certifies, on a pair of models, how far below the reference every walk
that sees only the tree must stay; ``token:optimal`` (its rows coupling,
:func:`~multidraft.trees._rows_rule.rows_coupling`) reaches that bound on the pairs tested.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np

from multidraft.trees.model import SequenceModel
from multidraft.trees.token import TokenVerifier

__all__ = ["DownstreamWalk", "downstream_value", "node_couplings", "walk_pair_bound"]

#: Acceptance may fall this far below P* in the second stage (the first stage's rounding),
#: the next one tried when HiGHS finds the tighter one infeasible.
ACCEPTANCE_SLACKS = (1e-10, 1e-8, 1e-6, 1e-4)


def node_couplings(target: np.ndarray, draft: np.ndarray, m: int, values: dict, acceptance_first: bool) -> tuple[float, dict]:
    """``(V, {tuple x: π(· | x) [n]})`` at one node: the coupling of IID(draft, m) with
    ``target`` maximising ``Σ π(x, y) 1{y ∈ x} (1 + values[(y, m_y(x))])`` (after maximising
    acceptance when ``acceptance_first``); ``values[(y, j)]`` is V of child y with j rows."""
    from scipy.optimize import linprog

    n = len(target)
    support = [t for t in range(n) if draft[t] > 0]
    tuples = list(itertools.product(support, repeat=m))
    mass = np.array([np.prod([draft[t] for t in x]) for x in tuples])
    size = len(tuples) * n
    equalities = np.zeros((len(tuples) + n, size))
    for i in range(len(tuples)):
        equalities[i, i * n : (i + 1) * n] = 1.0
    for y in range(n):
        equalities[len(tuples) + y, y::n] = 1.0
    mass, target = mass / mass.sum(), np.asarray(target, dtype=np.float64) / np.sum(target)
    rhs = np.concatenate([mass, target])
    # the last column sum is implied by the others (both sides total 1): left out, so that a
    # rounding mismatch of the totals cannot make HiGHS declare the LP infeasible
    equalities, rhs = equalities[:-1], rhs[:-1]
    accept = np.zeros(size)
    gain = np.zeros(size)
    for i, x in enumerate(tuples):
        for y in set(x):
            accept[i * n + y] = 1.0
            gain[i * n + y] = 1.0 + values.get((y, x.count(y)), 0.0)
    if acceptance_first:
        first = linprog(-accept, A_eq=equalities, b_eq=rhs, bounds=(0, None), method="highs")
        if first.status != 0:
            raise RuntimeError(f"node coupling LP: {first.message}")
        for slack in ACCEPTANCE_SLACKS:
            result = linprog(-gain, A_ub=-accept[None], b_ub=[first.fun + slack], A_eq=equalities, b_eq=rhs, bounds=(0, None), method="highs")
            if result.status == 0:
                break
    else:
        result = linprog(-gain, A_eq=equalities, b_eq=rhs, bounds=(0, None), method="highs")
    if result.status != 0:
        raise RuntimeError(f"node coupling LP: {result.message}")
    plan = np.maximum(result.x.reshape(len(tuples), n), 0.0)
    totals = plan.sum(axis=1)
    # a tuple whose row the solver left empty (mass below its tolerance): Y ~ p, any law will do
    conditional = {x: plan[i] / totals[i] if totals[i] > 0 else target for i, x in enumerate(tuples)}
    return float(-result.fun), conditional


@dataclass
class _Table:
    """V(u, m) and the couplings at every (prefix, live rows) of a model, bottom-up."""

    model: SequenceModel
    k: int
    acceptance_first: bool
    values: dict = field(default_factory=dict)
    couplings: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        model = self.model
        p = lambda u: np.asarray(model.target_at(u), dtype=np.float64)  # noqa: E731
        q = lambda u: np.asarray(model.draft_at(u), dtype=np.float64)  # noqa: E731
        for depth in range(model.length - 1, -1, -1):
            for u in itertools.product(range(model.n), repeat=depth):
                for m in range(1, self.k + 1):
                    below = {(y, j): self.values.get((u + (y,), j), 0.0) for y in range(model.n) for j in range(1, m + 1)}
                    value, conditional = node_couplings(p(u), q(u), m, below, self.acceptance_first)
                    self.values[(u, m)], self.couplings[(u, m)] = value, conditional


def downstream_value(model: SequenceModel, k: int, *, acceptance_first: bool = True) -> float:
    """E[τ] of the downstream-aware walk on K iid chains of ``model``: V(ε, K) (module
    docstring). Small models only (one LP over n^m · n couplings per prefix and m <= K).

    >>> from multidraft.trees import sun_example
    >>> round(downstream_value(sun_example(), 1), 9)  # one draft: SpecInfer's walk, 10/9
    1.111111111
    """
    if not isinstance(model, SequenceModel):
        raise ValueError(f"model: expected a SequenceModel, got {type(model).__name__}")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k: expected an integer >= 1 (the number of iid chains), got {k!r}")
    return _Table(model, k, acceptance_first).values[((), k)]


def walk_pair_bound(first: SequenceModel, second: SequenceModel, k: int) -> tuple[float, float, int]:
    """``(bound, reference sum, linked)``: the largest E_first[τ] + E_second[τ] of one token
    walk on K = ``k`` iid chains that sees only the tree, for two models of length L = 2 with the
    same root tables, against V_first(ε, k) + V_second(ε, k) of the downstream-aware reference:

        max Σ_{x,y} π_1(x, y) g_1(x, y) + π_2(x, y) g_2(x, y),   g_i(x, y) = 1{y ∈ x} (1 + V_i(y, m_y(x)))

    over pairs of couplings π_i of IID(q(· | ε), k) with p(· | ε) that agree, π_1(x, ·) = π_2(x, ·),
    on every root tuple x whose tokens have the same tables p(· | y), q(· | y) in both models (to
    1e-12; the
    walk sees the same tree there; its coupling may not look at the draws below, which would bias
    the child's tuple, §4). Below the root no walk beats V_i(y, j) (at L = 2 the children's
    children are leaves and V_i(y, j) is the optimal acceptance), so the LP bounds every such walk,
    and a bound below the reference sum by δ means every tree-local walk falls short of the
    reference by at least δ/2 on one of the two models; ``linked`` counts the ordered root tuples
    coupled alike. One HiGHS LP over 2 n^k · n couplings.

    >>> import numpy as np
    >>> model = SequenceModel.random(2, 2, np.random.default_rng(0))
    >>> bound, references, linked = walk_pair_bound(model, model, 2)  # alike everywhere: no loss
    >>> round(references - bound, 9) <= 0, linked
    (True, 4)
    """
    from scipy.optimize import linprog
    from scipy.sparse import block_diag, csr_matrix, vstack

    if first.length != 2 or second.length != 2 or first.n != second.n:
        raise ValueError("first, second: expected two models of length 2 over the same vocabulary")
    p, q = (np.asarray(f(()), dtype=np.float64) for f in (first.target_at, first.draft_at))
    same_table = lambda a, b: np.allclose(a, b, rtol=0, atol=1e-12)  # noqa: E731 -- renormalised rows may differ in the last bit
    if not (same_table(p, second.target_at(())) and same_table(q, second.draft_at(()))):
        raise ValueError("first, second: expected the same root tables p(· | ε), q(· | ε)")
    n = first.n
    tuples = list(itertools.product(range(n), repeat=k))
    mass = np.array([np.prod(q[list(x)]) for x in tuples])
    mass, p = mass / mass.sum(), p / p.sum()
    size = len(tuples) * n  # variable i·n + y: π(tuples[i], y)
    by_tuple = csr_matrix((np.ones(size), (np.repeat(np.arange(len(tuples)), n), np.arange(size))))
    by_token = csr_matrix((np.ones(size), (np.tile(np.arange(n), len(tuples)), np.arange(size))))
    marginals = vstack([by_tuple, by_token[:-1]])  # the last token's sum follows from the others
    gains, tables = [], []
    for model in (first, second):
        values = _Table(model, k, True).values
        gains.append([float(y in x) * (1.0 + values.get(((y,), x.count(y)), 0.0)) for x in tuples for y in range(n)])
        tables.append([np.concatenate([model.target_at((y,)), model.draft_at((y,))]) for y in range(n)])
    same = [all(same_table(tables[0][y], tables[1][y]) for y in set(x)) for x in tuples]
    linked = [(i * n + y) for i in range(len(tuples)) if same[i] for y in range(n)]
    pairs = np.ravel([[v, size + v] for v in linked])
    links = csr_matrix((np.tile([1.0, -1.0], len(linked)), (np.repeat(np.arange(len(linked)), 2), pairs)), shape=(len(linked), 2 * size))
    equalities = vstack([block_diag([marginals, marginals]), links])
    rhs = np.concatenate([mass, p[:-1], mass, p[:-1], np.zeros(len(linked))])
    result = linprog(-np.concatenate(gains), A_eq=equalities, b_eq=rhs, bounds=(0, None), method="highs")
    if result.status != 0:
        raise RuntimeError(f"walk pair LP: {result.message}")
    return float(-result.fun), downstream_value(first, k) + downstream_value(second, k), int(sum(same))


class DownstreamWalk(TokenVerifier):
    """The downstream-aware walk as a tree verifier on iid chains of ``model`` (module
    docstring): at a node with m live rows and tuple x, Y ~ π_{u,m}(· | x)."""

    drafting = ("iid",)

    def __init__(self, model: SequenceModel, k: int, *, acceptance_first: bool = True) -> None:
        from multidraft.schemes import get_scheme

        super().__init__(get_scheme("optimal"))
        self.name = "downstream" if acceptance_first else "downstream-unconstrained"
        self.exact_capable = False
        self._table = _Table(model, k, acceptance_first)

    def __repr__(self) -> str:
        return f"DownstreamWalk({self._table.model!r}, {self._table.k}, acceptance_first={self._table.acceptance_first})"

    def _conditional(self, tree, node: int) -> np.ndarray:
        _, _, tuple_ = tree.node_draws(node)
        return self._table.couplings[(tree.nodes.path(node), len(tuple_))][tuple(int(t) for t in tuple_)]
