"""Which tree for a node budget: Sequoia's dynamic programme over shapes from positional
acceptance (issue 31, item 2).

**Positional acceptance.** At a node whose children are drafted one after another, let a_i be
the probability that the token walk accepts the i-th drafted child (its subtree is the one
explored next), unconditionally given that the walk reached the node. For a sequential token
scheme with k drafts the first i drafts have the law of i drafts, so

    a_i = A_i − A_{i−1},     A_i = the scheme's acceptance with i drafts (A_0 = 0),

and the probability that the i-th child is accepted given that the first i − 1 were rejected
(Sequoia's conditional rate) is a_i / (1 − A_{i−1}). :func:`positional_acceptance` computes a
per (target, draft) row, exactly (Rao–Blackwellised: no sampling of drafts).

**Sequoia's assumption** (Chen et al., "Sequoia: Scalable, Robust, and Hardware-aware
Speculative Decoding", NeurIPS 2024, Section 3.1, the *positional acceptance assumption*): a_i
depends on the position i only, not on the node. Then the expected accepted length of a shape
T is ``E[τ] = Σ_{v ∈ T} Π_{edges (u → i-th child) on the root→v path} a_i`` and the best shape
with at most N drafted nodes and depth at most D solves (their Section 3.1, tree construction
by dynamic programming)

    F(0, m) = 0,      F(d, m) = G_1(d, m),
    G_i(d, m) = max( 0,  max_{1 ≤ j ≤ m}  a_i · (1 + F(d − 1, j − 1)) + G_{i+1}(d, m − j) ),
    G_{B+1}(d, m) = 0,

where G_i(d, m) is the best value of children i, i+1, … (in drafting order, consecutive) with
m nodes among their subtrees, j the size of child i's subtree (child included). The best shape
reaches block efficiency ``E[τ + 1] = 1 + F(D, N)``. :func:`sequoia_tree` solves it in
O(D · B · N²) (numpy over j), :func:`positional_value` scores a given shape the same way.

Where the assumption holds -- the same target and draft after every prefix
(:meth:`~multidraft.trees.SequenceModel.constant`) and a walk whose acceptance of the i-th
child does not depend on the values below it (``token:specinfer`` on iid trees) -- the DP's
value equals the exact E[τ] of :func:`~multidraft.trees.evaluate`; on other models it is an
approximation (tests/test_trees_budget.py shows both).

>>> tree = sequoia_tree([0.5, 0.2, 0.1], budget=3)
>>> tree.parents, round(tree.block_efficiency, 6)
((-1, 0, 1, 0), 1.95)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from multidraft.theory.laws import check_count
from multidraft.trees.shape import TreeShape

__all__ = ["POSITIONAL_SCHEMES", "BudgetTree", "positional_acceptance", "sequoia_tree", "positional_value", "level_widths"]

#: (token scheme, per-node law) pairs of :func:`positional_acceptance`, by the tree verifier
#: whose walk they describe.
POSITIONAL_SCHEMES = {
    "token:specinfer": ("specinfer", "iid"),
    "token:optimal": ("optimal", "iid"),
    "token:optimal (wor)": ("optimal", "wor"),
    "top-k walk": ("top-k", "top-k"),
}


def _rows(values: object, name: str) -> np.ndarray:
    rows = np.asarray(values, dtype=np.float64)
    if rows.ndim not in (1, 2) or rows.shape[-1] < 2:
        raise ValueError(f"{name}: expected a distribution [n] or rows [m, n] with n >= 2, got shape {rows.shape}")
    if not np.isfinite(rows).all() or (rows < 0).any() or not np.allclose(rows.sum(axis=-1), 1.0, atol=1e-6):
        raise ValueError(f"{name}: every row must be a probability distribution (finite, >= 0, summing to 1)")
    return rows.reshape(-1, rows.shape[-1])


def positional_acceptance(target: object, draft: object, width: int, *, verifier: str = "token:specinfer") -> np.ndarray:
    """``a_i = A_i − A_{i−1}``, i = 1..width: the probability that the walk accepts the i-th
    drafted child of a node with target p = ``target`` and draft q = ``draft`` (module docstring).

    ``verifier`` (a key of :data:`POSITIONAL_SCHEMES`):

    * ``"token:specinfer"`` (iid drafts, RRS with replacement; Miao et al. 2024): closed form
      ``a_i = Π_{j<i} (1 − s_j) · s_i``, ``s_j = Σ_y min(r_{j−1}(y), q(y))``, with residuals
      ``r_0 = p``, ``r_j = (r_{j−1} − q)_+ / ‖(r_{j−1} − q)_+‖₁`` (a rejected token has
      ``r_j = 0`` there, so a repeated draw is never accepted and the i-th child is a first
      appearance);
    * ``"token:optimal"`` / ``"token:optimal (wor)"``: increments of the optimal acceptance
      P*(i) of i iid (without replacement) drafts (Khisti et al., ICLR 2025): the mass a walk
      that prefers earlier children can put on child i -- an approximation of
      the downstream-aware walk, exact for its total ``Σ_i a_i = P*(width)``;
    * ``"top-k walk"``: ``a_i = p(x_i)``, x_i the i-th most likely token of q (ties: lower id).

    Parameters
    ----------
    target, draft : array_like [n] or [m, n]
        One row or m rows of next-token distributions.
    width : int
        Children per node B.

    Returns
    -------
    numpy.ndarray [width] or [m, width]

    >>> positional_acceptance([0.5, 0.5], [0.75, 0.25], 2).round(6).tolist()
    [0.75, 0.0625]
    """
    width = check_count(width, "width", meaning="children per node")
    if verifier not in POSITIONAL_SCHEMES:
        raise ValueError(f"verifier: unknown {verifier!r}; choose one of {', '.join(POSITIONAL_SCHEMES)}")
    single = np.ndim(target) == 1
    p, q = _rows(target, "target"), _rows(draft, "draft")
    if p.shape != q.shape:
        raise ValueError(f"target, draft: expected rows of one shape, got {p.shape} and {q.shape}")
    scheme, law = POSITIONAL_SCHEMES[verifier]
    if scheme == "specinfer":
        out = _specinfer_positional(p, q, width)
    elif scheme == "top-k":
        order = np.argsort(-q, axis=1, kind="stable")[:, :width]
        out = np.take_along_axis(p, order, axis=1) * (np.take_along_axis(q, order, axis=1) > 0)
        out = np.pad(out, ((0, 0), (0, width - out.shape[1])))
    else:
        out = _increments(p, q, width, law)
    return out[0] if single else out


def _specinfer_positional(p: np.ndarray, q: np.ndarray, width: int) -> np.ndarray:
    out = np.zeros((p.shape[0], width))
    residual, reach = p.copy(), np.ones(p.shape[0])
    for i in range(width):
        accepted = np.minimum(residual, q).sum(axis=1)
        out[:, i] = reach * accepted
        reach = reach * np.clip(1.0 - accepted, 0.0, 1.0)
        left = np.maximum(residual - q, 0.0)
        total = left.sum(axis=1, keepdims=True)
        residual = np.divide(left, total, out=np.zeros_like(left), where=total > 0)
    return out


def _increments(p: np.ndarray, q: np.ndarray, width: int, law: str) -> np.ndarray:
    from multidraft.schemes import get_scheme  # noqa: PLC0415 -- the schemes layer, loaded when used
    from multidraft.theory.laws import law_for  # noqa: PLC0415

    scheme = get_scheme("optimal")
    out = np.zeros((p.shape[0], width))
    for row in range(p.shape[0]):
        support = int((q[row] > 0).sum())
        totals = [0.0] + [
            float(scheme.acceptance(p[row], law_for(law, [q[row]], k=min(i, support)))) for i in range(1, width + 1)
        ]
        out[row] = np.diff(totals)
    return np.clip(out, 0.0, 1.0)


def _acceptance(values: object) -> np.ndarray:
    a = np.asarray(values, dtype=np.float64)
    if a.ndim != 1 or a.size < 1 or not np.isfinite(a).all() or (a < 0).any() or (a > 1 + 1e-9).any():
        raise ValueError(f"acceptance: expected positional acceptances a_1..a_B in [0, 1], got {values!r}")
    if a.sum() > 1 + 1e-9:
        raise ValueError(
            f"acceptance: the a_i are probabilities of disjoint events (child i accepted) and must sum to at most 1, got {a.sum():.6g}"
        )
    return np.minimum(a, 1.0)  # 1 + rounding, e.g. a mean of ones


@dataclass(frozen=True)
class BudgetTree:
    """The best shape under the positional model for one node budget.

    Attributes
    ----------
    budget : int
        N: drafted nodes allowed (the shape may use fewer; ``nodes`` says how many).
    max_depth : int
        D: the largest depth allowed.
    parents : tuple of int
        The shape as a parent array (slot 0 the root; children in drafting order).
    expected_accepted : float
        The DP's E[τ] = F(D, N).
    acceptance : tuple of float
        The positional acceptances a_1..a_B it was solved for.
    """

    budget: int
    max_depth: int
    parents: tuple[int, ...]
    expected_accepted: float
    acceptance: tuple[float, ...]

    @property
    def block_efficiency(self) -> float:
        """``E[τ] + 1``: tokens per target call under the positional model."""
        return self.expected_accepted + 1.0

    @property
    def nodes(self) -> int:
        """Drafted nodes of the shape (root excluded)."""
        return len(self.parents) - 1

    def shape(self, law: str = "iid") -> TreeShape:
        """The shape as :meth:`TreeShape.static` with per-node ``law``."""
        return TreeShape.static(list(self.parents), law)

    def as_dict(self) -> dict:
        """JSON-ready fields."""
        return {
            "budget": self.budget,
            "max_depth": self.max_depth,
            "nodes": self.nodes,
            "depth": self.shape().depth,
            "parents": list(self.parents),
            "level_widths": level_widths(self.parents),
            "expected_accepted": self.expected_accepted,
            "block_efficiency": self.block_efficiency,
        }


def sequoia_tree(acceptance: object, budget: int, *, max_depth: int | None = None) -> BudgetTree:
    """The shape with at most ``budget`` = N drafted nodes and depth at most ``max_depth`` = D
    that maximises ``E[τ] = Σ_v Π_{path} a_i`` under the positional model -- Sequoia's dynamic
    programme (Chen et al. 2024, Section 3.1; recurrence in the module docstring):
    ``F(d, m) = G_1(d, m)``, ``G_i(d, m) = max(0, max_j a_i(1 + F(d − 1, j − 1)) + G_{i+1}(d, m − j))``.

    Parameters
    ----------
    acceptance : array_like [B]
        a_i ≥ 0 with Σ a_i ≤ 1 (:func:`positional_acceptance`, averaged over positions).
    budget : int
        N ≥ 1.
    max_depth : int, optional
        D ≥ 1 (default N).

    Returns
    -------
    BudgetTree
        Ties are broken towards fewer nodes (a child is added only if it adds value).

    Complexity O(D · B · N²) arithmetic, numpy over the subtree size j.

    >>> sequoia_tree([0.9], 3).parents
    (-1, 0, 1, 2)
    >>> sequoia_tree([0.2, 0.2], 2, max_depth=1).parents
    (-1, 0, 0)
    """
    a = _acceptance(acceptance)
    budget = check_count(budget, "budget", meaning="drafted nodes")
    depth = budget if max_depth is None else check_count(max_depth, "max_depth", meaning="the largest depth")
    depth = min(depth, budget)
    width = a.size
    best = np.zeros((depth + 1, budget + 1))
    choice = np.zeros((depth + 1, width + 1, budget + 1), dtype=np.int64)
    for d in range(1, depth + 1):
        following = np.zeros(budget + 1)  # G_{i+1}(d, ·)
        for i in range(width - 1, -1, -1):
            current = np.zeros(budget + 1)
            for m in range(1, budget + 1):
                values = a[i] * (1.0 + best[d - 1, :m]) + following[m - 1 :: -1]
                j = int(np.argmax(values))
                if values[j] > current[m - 1] + 1e-15:  # child i with a subtree of j + 1 nodes
                    current[m], choice[d, i, m] = values[j], j + 1
                else:  # at most m - 1 nodes do as well
                    current[m], choice[d, i, m] = current[m - 1], -1
            following = current
        best[d] = following
    parents = [-1]

    def build(d: int, m: int, parent: int) -> None:
        i = 0
        while i < width and m > 0 and d > 0:
            j = choice[d, i, m]
            while j == -1:  # the best with at most m nodes uses fewer
                m -= 1
                j = choice[d, i, m]
            if j == 0:
                return
            parents.append(parent)
            build(d - 1, j - 1, len(parents) - 1)
            m -= j
            i += 1

    build(depth, budget, 0)
    return BudgetTree(budget, depth, tuple(parents), float(best[depth, budget]), tuple(float(x) for x in a))


def _children(parents: tuple[int, ...] | list[int]) -> list[list[int]]:
    children: list[list[int]] = [[] for _ in parents]
    for slot, parent in enumerate(parents[1:], start=1):
        children[parent].append(slot)
    return children


def level_widths(parents: tuple[int, ...] | list[int]) -> list[int]:
    """Nodes at depth 1, 2, …: the batch of each draft forward when the tree is drafted one
    depth at a time."""
    depth = [0] * len(parents)
    for slot in range(1, len(parents)):
        depth[slot] = depth[parents[slot]] + 1
    return [depth.count(d) for d in range(1, max(depth) + 1)]


def positional_value(acceptance: object, shape: TreeShape) -> float:
    """E[τ] of ``shape`` under the positional model: ``V(v) = Σ_i a_i (1 + V(c_i(v)))`` over
    v's children c_1, c_2, … in drafting order (children beyond a_B get a_i = 0); E[τ] = V(root).
    Expansion and static shapes (chains and dynamic shapes have no fixed slots).

    >>> positional_value([0.5, 0.2], TreeShape.expansion([2, 1]))
    1.05
    """
    a = _acceptance(acceptance)
    if not isinstance(shape, TreeShape) or not shape.slots:
        raise ValueError(f"shape: expected an expansion or static TreeShape (fixed slots), got {shape!r}")
    values = [0.0] * len(shape.slots)
    for slot in range(len(shape.slots) - 1, -1, -1):
        values[slot] = sum(float(a[i]) * (1.0 + values[c]) for i, c in enumerate(shape.slots[slot]) if i < a.size)
    return values[0]
