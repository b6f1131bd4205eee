"""The best tree shape for a node budget on a small sequence model, exactly (issue 31, item 2).

For a node budget N and a :class:`~multidraft.trees.SequenceModel`, :func:`budget_search`
scores every candidate shape of at most N drafted nodes exactly and keeps the best per family:

* ``chains`` -- SpecInfer's expansion configurations ⟨K, 1, …, 1⟩ (K sequences sharing only
  the root), K·L' ≤ N;
* ``expansion`` -- every schedule ⟨k_1, …, k_D⟩ with D ≤ L (the model's depth), each k_d at most
  ``max_width``, and Σ_d Π_{j ≤ d} k_j ≤ N nodes;
* ``sequoia`` -- the static shape of Sequoia's DP (:func:`~multidraft.trees.budget.sequoia_tree`)
  for the model's positional acceptance averaged over its prefixes (each depth weighted equally,
  prefixes by their target probability);
* ``dynamic`` (top-k only) -- EAGLE-2's budgeted expansion with branching 1..``max_width``.

Two verifiers are scored at every N, each exactly and cheaply:

* ``token:specinfer`` on iid trees by the recursion over (prefix, slot) of
  :func:`specinfer_walk_value`: ``V(u, v) = Σ_i Σ_y α_i(y | u) (1 + V(u y, c_i(v)))`` with
  ``α_i(y | u) = Π_{j<i}(1 − s_j) · min(r_{i−1}(y), q(y | u))`` (the residuals of
  :func:`~multidraft.trees.budget.positional_acceptance`), cost Σ_v n^{depth(v)+1} instead of
  one evaluation per draft tree; checked against :func:`~multidraft.trees.evaluate` in the tests;
* the **top-k walk** on top-k trees (every token verifier: the tree is a function of the draft,
  and the walk reaches ``E[τ] = Σ_{s ∈ T} P(s)``, the block optimum on that tree) by
  :func:`~multidraft.trees.evaluate` on the tree's single draw.

The other verifiers (``token:optimal``, traversal, selective, trees drafted without
replacement) need :func:`~multidraft.trees.evaluate`'s enumeration of every draft tree, which
only small budgets afford; :func:`verifier_table` gives them on the shapes of at most N nodes
whose tree count stays under ``max_trees``.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from multidraft.theory.laws import check_count, law_class
from multidraft.trees.budget import positional_acceptance, positional_value, sequoia_tree
from multidraft.trees.model import SequenceModel
from multidraft.trees.shape import TreeShape
from multidraft.trees.shaped import NODE_LAW

__all__ = ["FAMILY_VERIFIERS", "ShapeScore", "specinfer_walk_value", "model_positional", "schedules", "budget_search", "verifier_table"]

#: The (family, verifier) lines of :func:`budget_search`: the per-node law and the scorer.
FAMILY_VERIFIERS = (
    ("chains", "token:specinfer"),
    ("expansion", "token:specinfer"),
    ("sequoia", "token:specinfer"),
    ("expansion", "top-k walk"),
    ("sequoia", "top-k walk"),
    ("dynamic", "top-k walk"),
)


@dataclass(frozen=True)
class ShapeScore:
    """One scored shape: its family, verifier, shape, drafted nodes and exact E[τ]; for the
    ``sequoia`` family also the DP's predicted E[τ] (the positional model's value)."""

    family: str
    verifier: str
    shape: TreeShape
    nodes: int
    expected_accepted: float
    predicted: float | None = None

    @property
    def block_efficiency(self) -> float:
        """``E[τ] + 1``."""
        return self.expected_accepted + 1.0

    def as_dict(self) -> dict:
        """JSON-ready fields."""
        out = {
            "family": self.family,
            "verifier": self.verifier,
            "shape": repr(self.shape),
            "nodes": self.nodes,
            "expected_accepted": self.expected_accepted,
            "block_efficiency": self.block_efficiency,
        }
        if self.predicted is not None:
            out["predicted_block_efficiency"] = self.predicted + 1.0
        return out


def _slot_depths(shape: TreeShape) -> list[int]:
    depth = [0] * len(shape.slots)
    for slot, children in enumerate(shape.slots):
        for child in children:
            depth[child] = depth[slot] + 1
    return depth


def specinfer_walk_value(model: SequenceModel, shape: TreeShape) -> float:
    """Exact E[τ] of ``token:specinfer`` on the iid trees of ``shape`` (expansion or static):
    ``V(u, v) = Σ_i Σ_y α_i(y | u) (1 + V(u y, c_i(v)))``, ``α_i(y | u) = Π_{j<i}(1 − s_j(u)) ·
    min(r_{i−1}(y | u), q(y | u))`` (module docstring), vectorised over the prefixes u of each
    depth. A repeated draw is never accepted (its residual is 0), so the accepted i-th draw is
    the first appearance of its token and its subtree is slot c_i's.

    >>> from multidraft.trees import sun_example
    >>> round(specinfer_walk_value(sun_example(), TreeShape.expansion([1, 1])), 12)  # 10/9
    1.111111111111
    """
    if not isinstance(model, SequenceModel):
        raise ValueError(f"model: expected a SequenceModel, got {type(model).__name__}")
    node_law = law_class(NODE_LAW[shape.law]) if isinstance(shape, TreeShape) else None
    if node_law is None or not shape.slots or not (node_law.takes_distributions and node_law.independent_drafts):  # iid draws
        raise ValueError(f"shape: expected an expansion or static TreeShape with law 'iid', got {shape!r}")
    if shape.depth > model.length:
        raise ValueError(f"shape: depth {shape.depth} does not fit the model's length {model.length}")
    n = model.n
    depths = _slot_depths(shape)
    values: list[np.ndarray] = [np.zeros(0)] * len(shape.slots)
    for slot in range(len(shape.slots) - 1, -1, -1):
        d = depths[slot]
        value = np.zeros(n**d)
        if shape.slots[slot]:
            residual = np.asarray(model.target[d], dtype=np.float64).copy()
            draft = np.asarray(model.draft[d], dtype=np.float64)
            reach = np.ones(n**d)
            for child in shape.slots[slot]:
                accepted = reach[:, None] * np.minimum(residual, draft)
                value += (accepted * (1.0 + values[child].reshape(n**d, n))).sum(axis=1)
                reach = reach * np.clip(1.0 - np.minimum(residual, draft).sum(axis=1), 0.0, 1.0)
                left = np.maximum(residual - draft, 0.0)
                total = left.sum(axis=1, keepdims=True)
                residual = np.divide(left, total, out=np.zeros_like(left), where=total > 0)
        values[slot] = value
    return float(values[0][0])


def model_positional(model: SequenceModel, width: int, verifier: str = "token:specinfer") -> np.ndarray:
    """The model's positional acceptance a_1..a_width averaged over its prefixes u of depth
    < L: each depth weighted equally, prefixes within a depth by their target probability P(u)."""
    out = np.zeros(width)
    weights = np.ones(1)
    for d in range(model.length):
        rows = positional_acceptance(
            np.asarray(model.target[d], dtype=np.float64), np.asarray(model.draft[d], dtype=np.float64), width, verifier=verifier
        )
        out += weights @ rows / model.length
        weights = (weights[:, None] * np.asarray(model.target[d], dtype=np.float64)).reshape(-1)
    return out


def schedules(budget: int, max_depth: int, max_width: int) -> Iterator[tuple[int, ...]]:
    """Every expansion schedule ⟨k_1, …, k_D⟩, 1 ≤ D ≤ ``max_depth``, 1 ≤ k_d ≤ ``max_width``,
    with at most ``budget`` nodes ``Σ_d Π_{j ≤ d} k_j``.

    >>> list(schedules(3, 2, 2))
    [(1,), (2,), (1, 1), (1, 2)]
    """
    for depth in range(1, max_depth + 1):
        for schedule in itertools.product(range(1, max_width + 1), repeat=depth):
            nodes, level = 0, 1
            for k in schedule:
                level *= k
                nodes += level
            if nodes <= budget:
                yield schedule


def _top_k_value(model: SequenceModel, shape: TreeShape) -> float:
    from multidraft.trees.exact import evaluate  # noqa: PLC0415
    from multidraft.trees.registry import get_verifier  # noqa: PLC0415

    return float(evaluate(get_verifier("token:specinfer"), model, shape, exact=False).expected_accepted)


def _candidates(model: SequenceModel, budget: int, family: str, verifier: str, max_width: int) -> Iterator[tuple[TreeShape, float | None]]:
    law = "iid" if verifier == "token:specinfer" else "top-k"
    if family == "chains":
        for k in range(1, budget + 1):
            for length in range(1, min(model.length, budget // k) + 1):
                yield TreeShape.expansion([k] + [1] * (length - 1), law), None
    elif family == "expansion":
        for schedule in schedules(budget, model.length, max_width):
            yield TreeShape.expansion(list(schedule), law), None
    elif family == "sequoia":
        acceptance = model_positional(model, max_width, verifier)
        tree = sequoia_tree(acceptance, budget, max_depth=model.length)
        if tree.nodes:
            yield tree.shape(law), tree.expected_accepted
    else:
        for branching in range(1, max_width + 1):
            yield TreeShape.dynamic(budget, model.length, branching=branching), None


def budget_search(model: SequenceModel, budget: int, *, max_width: int = 4) -> list[ShapeScore]:
    """The best shape of at most ``budget`` drafted nodes per (family, verifier) of
    :data:`FAMILY_VERIFIERS` on ``model``, each candidate scored exactly (module docstring).

    Returns one :class:`ShapeScore` per line (ties: the first candidate, fewer nodes first
    within a family's order).

    Raises
    ------
    ValueError
        ``model`` is no SequenceModel; ``budget`` or ``max_width`` is not a positive integer.
    """
    if not isinstance(model, SequenceModel):
        raise ValueError(f"model: expected a SequenceModel, got {type(model).__name__}")
    check_count(budget, "budget", meaning="drafted nodes")
    check_count(max_width, "max_width", meaning="children per node")
    out = []
    for family, verifier in FAMILY_VERIFIERS:
        best: ShapeScore | None = None
        for shape, predicted in _candidates(model, budget, family, verifier, max_width):
            score = specinfer_walk_value(model, shape) if verifier == "token:specinfer" else _top_k_value(model, shape)
            if best is None or score > best.expected_accepted + 1e-12:
                best = ShapeScore(family, verifier, shape, shape.node_count, score, predicted)
        if best is not None:
            out.append(best)
    return out


def verifier_table(
    model: SequenceModel, budget: int, verifiers: Sequence[str], *, laws: Sequence[str] = ("iid", "without-replacement"), max_trees: int = 5_000
) -> list[dict]:
    """Every verifier's exact E[τ] (:func:`~multidraft.trees.evaluate`) on the best expansion
    shape of at most ``budget`` nodes for it, per law, over the schedules whose draft trees
    number at most ``max_trees`` (a row says how many shapes were scored and how many were
    too large). A verifier that refuses a law's trees gets ``None``."""
    from multidraft.trees.exact import evaluate  # noqa: PLC0415
    from multidraft.trees.registry import get_verifier  # noqa: PLC0415
    from multidraft.trees.shaped import shape_tree_count, shape_trees  # noqa: PLC0415

    rows = []
    for law in laws:
        shapes = [TreeShape.expansion(list(s), law) for s in schedules(budget, model.length, model.n)]
        small = [shape for shape in shapes if shape_tree_count(model, shape) <= max_trees]
        for name in verifiers:
            verifier = get_verifier(name)
            best: tuple[float, TreeShape] | None = None
            for shape in small:
                if not verifier.supports(next(iter(shape_trees(model, shape)))[0]):
                    continue
                value = float(evaluate(verifier, model, shape, exact=False, max_trees=max_trees).expected_accepted)
                if best is None or value > best[0] + 1e-12:
                    best = (value, shape)
            rows.append(
                {
                    "law": law,
                    "verifier": name,
                    "budget": budget,
                    "shapes_scored": len(small),
                    "shapes_too_large": len(shapes) - len(small),
                    "block_efficiency": None if best is None else best[0] + 1.0,
                    "shape": None if best is None else repr(best[1]),
                }
            )
    return rows

