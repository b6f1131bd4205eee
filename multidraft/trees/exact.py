"""Exact block efficiency and block losslessness of a tree verifier on a small sequence model.

For a verifier V and a :class:`~multidraft.trees.SequenceModel`, enumerate every draft tree T
of K sequences (with its probability P(T)) and take V's exact law given T
(:meth:`~multidraft.trees.TreeVerifier.law`: the verifier's own randomness summed out):

* **expected accepted tokens** ``E[τ] = Σ_T P(T) Σ_v P(v accepted | T) · depth(v)``
  (block efficiency E[τ] + 1);
* **block losslessness**: with m(e) the probability that V emits exactly the string e (the
  accepted path followed by the next token), completing e with fresh target samples gives

      J(y) = Σ_{e ⪯ y} m(e) · P(y_{|e|+1..L+1} | e),     |y| = L + 1,

  computed level by level as ``J_{d+1}(e a) = J_d(e) · P(a | e) + m(e a)``. V is lossless on
  the model iff J equals the target's joint law of L + 1 tokens: exactly (Fractions) for an
  exact model, to rounding (the deviation is returned) for a float one.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from multidraft.trees.base import TreeVerifier
from multidraft.trees.model import TREE_LIMIT, SequenceModel
from multidraft.trees.shape import TreeShape
from multidraft.trees.shaped import ShapedTree, as_shape, shape_trees

__all__ = ["BlockEvaluation", "evaluate"]


@dataclass(frozen=True)
class BlockEvaluation:
    """A verifier's exact block-level numbers on one sequence model.

    Attributes
    ----------
    verifier : str
        Registry name.
    k : int
        Draft sequences per tree (chains), tokens drafted at the root (other shapes).
    without_replacement : bool
        Whether the trees were drafted without replacement.
    expected_accepted : float or Fraction
        E[τ]; block efficiency is ``expected_accepted + 1``.
    deviation : float or Fraction
        ``max_y |J(y) - P(y)|`` over the L + 1-token strings (0 exactly when lossless in
        Fractions).
    trees : int
        Draft trees enumerated.
    exact : bool
        Computed in Fractions (the ``exact`` asked of :func:`evaluate`, or the model's field).
    """

    verifier: str
    k: int
    without_replacement: bool
    expected_accepted: float | Fraction
    deviation: float | Fraction
    trees: int
    exact: bool
    shape: TreeShape | None = None

    @property
    def block_efficiency(self) -> float | Fraction:
        """``E[τ] + 1``: tokens emitted per target call."""
        return self.expected_accepted + 1

    def lossless(self, tolerance: float = 1e-12) -> bool:
        """Deviation exactly 0 (exact) or at most ``tolerance`` (float)."""
        return self.deviation == 0 if self.exact else bool(self.deviation <= tolerance)


def evaluate(
    verifier: TreeVerifier,
    model: SequenceModel,
    k: TreeShape | int,
    *,
    without_replacement: bool = False,
    max_trees: int = TREE_LIMIT,
    exact: bool | None = None,
) -> BlockEvaluation:
    """Exact E[τ] and block losslessness of ``verifier`` on every draft tree of ``model``.

    ``k``: a :class:`~multidraft.trees.TreeShape` (any family and law), or K for the chains
    ``TreeShape.chains(K, L)`` (``without_replacement``: drafted without replacement at the root).

    ``exact``: compute in Fractions (True) or float64 (False); by default (None) as the model
    is. A number is never switched to floats behind the caller's back: an exact model with a
    verifier that has no exact law (``token:optimal``, ``selective``, ...) is refused unless
    ``exact=False`` asks for float64.

    >>> from multidraft.trees import get_verifier, sun_example
    >>> result = evaluate(get_verifier("block"), sun_example(), k=1)
    >>> result.expected_accepted, result.deviation
    (Fraction(11, 9), Fraction(0, 1))
    >>> evaluate(get_verifier("selective"), sun_example(), k=1)
    Traceback (most recent call last):
    ...
    ValueError: exact: verifier 'selective' has no exact (Fraction) law, so this exact model cannot be evaluated in Fractions; pass exact=False for float64
    >>> evaluate(get_verifier("selective"), sun_example(), k=1, exact=False).exact
    False

    Raises
    ------
    ValueError
        The verifier does not take these trees (its K or drafting); ``exact`` asks for
        Fractions that the model or the verifier cannot give.
    ProblemTooLargeError
        More than ``max_trees`` trees.
    """
    if not isinstance(verifier, TreeVerifier):
        raise ValueError(f"verifier: expected a TreeVerifier (multidraft.trees.get_verifier), got {type(verifier).__name__}")
    if not isinstance(model, SequenceModel):
        raise ValueError(f"model: expected a SequenceModel, got {type(model).__name__}")
    shape = as_shape(k, model, without_replacement)
    exact = _check_exact(exact, model, verifier)
    zero = Fraction(0) if exact else 0.0
    n, length = model.n, model.length
    emitted = [np.full(n ** (d + 1), zero, dtype=object) if exact else np.zeros(n ** (d + 1)) for d in range(length + 1)]
    expected, count = zero, 0
    for tree, prob in shape_trees(model, shape, max_trees=max_trees):
        if not exact and tree.exact:
            tree = _as_float(tree)
        law = verifier.law(tree)
        nodes = tree.nodes
        weight = prob if exact else float(prob)
        expected = expected + weight * law.expected_accepted
        for node in range(nodes.count):
            mass = weight * law.node_probability[node]
            if mass == 0:
                continue
            depth = int(nodes.depth[node])
            start = model.index(nodes.path(node)) * n
            emitted[depth][start : start + n] = emitted[depth][start : start + n] + mass * law.next_token[node]
        count += 1
    completed = emitted[0]
    for d in range(1, length + 1):
        table = model.target[d] if exact else np.asarray(model.target[d], dtype=np.float64)
        completed = (completed[:, None] * table).reshape(-1) + emitted[d]
    joint = model.joint() if exact else np.asarray(model.joint(), dtype=np.float64)
    deviation = max(abs(a - b) for a, b in zip(completed, joint)) if exact else float(np.abs(completed - joint).max())
    wor = shape.law == "without-replacement"
    return BlockEvaluation(verifier.name, shape.root_width, wor, expected, deviation, count, exact, shape)


def _check_exact(exact: object, model: SequenceModel, verifier: TreeVerifier) -> bool:
    """Whether to compute in Fractions: ``exact`` (True, False or None for the model's field),
    refused where the model or the verifier cannot give Fractions."""
    if exact is not None and not isinstance(exact, bool):
        raise ValueError(f"exact: expected True, False or None (as the model), got {exact!r}")
    if exact is False:
        return False
    if not model.exact:
        if exact:
            raise ValueError("exact: the model holds floats; build it from Fractions (or 'a/b' strings) for exact values")
        return False
    if not verifier.exact_capable:
        raise ValueError(
            f"exact: verifier {verifier.name!r} has no exact (Fraction) law, so this exact model cannot be evaluated "
            "in Fractions; pass exact=False for float64"
        )
    return True


def _as_float(tree):
    from multidraft.trees.tree import DraftTree

    if isinstance(tree, ShapedTree):
        table = lambda values: np.asarray(values, dtype=np.float64)  # noqa: E731
        return ShapedTree(tree.parent, tree.token, tree.draws, table(tree.target), table(tree.draft), tree.law)
    return DraftTree(
        tree.tokens,
        np.asarray(tree.target, dtype=np.float64),
        np.asarray(tree.draft, dtype=np.float64),
        without_replacement=tree.without_replacement,
        groups=tree.groups,
        validate=False,
    )
