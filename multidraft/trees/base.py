"""The shared interface of tree verifiers.

A **tree verifier** sees one draft tree (:class:`~multidraft.trees.DraftTree`: K draft
sequences of length L, the target's distribution after every prefix including the L-th,
and the draft distribution every token was drawn from) and emits τ accepted tokens along one
drafted path plus one more token. It is **lossless** iff the emitted tokens, completed with
fresh target samples to length L + 1, have exactly the target's joint law of L + 1 tokens
(theory.md, "Block level"); block efficiency is E[τ] + 1.

Every verifier answers, with one signature style (as the token schemes do):

* :meth:`TreeVerifier.law` -- the exact law of (accepted node, next token) given the tree,
  in Fractions for an exact tree where the verifier allows it. It needs only the
  distributions on the tree, so every verifier can be scored on the same tree
  (Rao-Blackwell: :meth:`TreeVerifier.expected_accepted`), and summing it over the trees of
  a small sequence model proves losslessness for that model
  (:func:`~multidraft.trees.evaluate`);
* :meth:`TreeVerifier.verify` -- one run of the algorithm as its paper states it, driven
  by an explicit :class:`numpy.random.Generator`;
* :meth:`TreeVerifier.verify_batch` -- a batched torch form over B trees of equal shape
  (``tokens [B, K, L]``, ``target [B, K, L + 1, n]``, ``draft [B, K, L, n]``), on their device.

Subclasses implement ``_law`` and ``_verify`` (and ``_verify_batch``) and say which trees
they take (``max_k``, ``drafting``); the registry tests read these attributes, so a new
verifier is tested by registering it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from fractions import Fraction
from typing import ClassVar

import numpy as np

from multidraft.schemes._threads import on_idle_cores
from multidraft.theory.laws._row_scan import running_sum
from multidraft.trees._batch import BatchVerification
from multidraft.trees.shaped import ShapedTree
from multidraft.trees.tree import DraftTree

#: A draft tree of rows (:class:`DraftTree`) or of nodes drafted by a shape (:class:`ShapedTree`).
Tree = DraftTree | ShapedTree

__all__ = ["TreeVerifier", "TreeLaw", "Verification", "BatchVerification", "sample_index"]


@dataclass(frozen=True)
class Verification:
    """The outcome of one run of a tree verifier.

    Attributes
    ----------
    accepted : int
        τ, the number of drafted tokens accepted (the depth of ``node``).
    node : int
        The accepted node of the tree (0: the root, nothing accepted).
    row : int
        A draft row whose first τ tokens are the accepted path.
    next_token : int
        The token emitted after the accepted path (residual or bonus).
    tokens : tuple of int
        Everything emitted: the accepted path, then ``next_token``.
    """

    accepted: int
    node: int
    row: int
    next_token: int
    tokens: tuple[int, ...]


@dataclass(frozen=True, eq=False)
class TreeLaw:
    """The exact law of a verifier's outcome given one tree.

    Attributes
    ----------
    tree : DraftTree
    node_probability : ndarray [m]
        ``P(accepted node = v | tree)`` (float64, or Fractions for an exact tree).
    next_token : ndarray [m, n] or None
        Row v: the law of the next token given that v is accepted (a row of zeros where v
        is never accepted); None when not asked for.
    """

    tree: DraftTree
    node_probability: np.ndarray
    next_token: np.ndarray | None

    @property
    def expected_accepted(self) -> float | Fraction:
        """``E[τ | tree] = Σ_v P(v accepted) · depth(v)``."""
        return self._moment(1)

    @property
    def variance_accepted(self) -> float | Fraction:
        """``Var[τ | tree] = Σ_v P(v accepted) · depth(v)² - E[τ | tree]²``: the conditional
        variance that makes an interval for realised minus expected accepted lengths."""
        mean = self._moment(1)
        return self._moment(2) - mean * mean

    def _moment(self, power: int) -> float | Fraction:
        depth = self.tree.nodes.depth
        zero = Fraction(0) if self.tree.exact else 0.0
        total = sum((p * int(d) ** power for p, d in zip(self.node_probability, depth)), zero)
        return total if self.tree.exact else float(total)

    def total(self) -> float | Fraction:
        """``Σ_v P(v accepted)`` (one, for a verifier that always emits)."""
        return sum(self.node_probability, Fraction(0) if self.tree.exact else 0.0)


def sample_index(weights: np.ndarray, rng: np.random.Generator) -> int:
    """One index drawn with probability ∝ ``weights [n]`` (float or Fractions), by inverse CDF
    with the uniform kept strictly below the total: an index of weight zero is never drawn. The
    cumulative sums are numpy's (:func:`~multidraft.theory.laws._row_scan.running_sum`)."""
    weights = np.asarray(weights, dtype=np.float64)
    cumulative = running_sum(weights)
    level = min(rng.random() * cumulative[-1], np.nextafter(cumulative[-1], 0.0))
    return int(np.searchsorted(cumulative, level, side="right"))


class TreeVerifier(ABC):
    """A lossless verifier of one draft tree.

    Class attributes
    ----------------
    name : str
        Registry name (``"traversal"``, ``"block"``; ``"token:<scheme>"`` for the walk).
    max_k : int or None
        Most draft sequences the verifier takes (None: any K).
    drafting : tuple of str
        Tree laws taken: ``"iid"`` (rows of one draft law, drawn independently),
        ``"wor"`` (first tokens without replacement), ``"independent"`` (rows of different
        draft laws); ``"shape:<law>"`` for trees drafted node by node by a
        :class:`~multidraft.trees.TreeShape` law (``iid``, ``without-replacement``, ``top-k``).
    exact_capable : bool
        :meth:`law` runs in Fractions for an exact tree.
    """

    name: ClassVar[str]
    max_k: ClassVar[int | None] = None
    drafting: ClassVar[tuple[str, ...]] = ("iid", "wor")
    exact_capable: ClassVar[bool] = True

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    @staticmethod
    def tree_drafting(tree: Tree) -> str:
        """``"wor"``, ``"iid"``, ``"independent"`` or ``"shape:<law>"``: how ``tree`` was drawn."""
        return tree.drafting

    def supports(self, tree: Tree) -> bool:
        """Whether the verifier takes ``tree`` (its K and how it was drawn), answered up front:
        a tree it takes it verifies losslessly."""
        return (
            isinstance(tree, (DraftTree, ShapedTree))
            and self.tree_drafting(tree) in self.drafting
            and (self.max_k is None or (isinstance(tree, DraftTree) and tree.k <= self.max_k))
        )

    def refusal(self, tree: Tree) -> str:
        """Why the verifier does not take ``tree`` (one line)."""
        limit = f" with K <= {self.max_k}" if self.max_k is not None else ""
        drafting = self.tree_drafting(tree)
        article = "an" if drafting[:1] in ("a", "e", "i", "o", "u") else "a"  # an iid tree, a wor tree
        return f"verifier {self.name!r} takes {', '.join(self.drafting)} trees{limit}; got {article} {drafting} tree with K={tree.k}"

    def check(self, tree: Tree, exact: bool = False) -> Tree:
        """Return ``tree`` if the verifier takes it, else raise ``ValueError`` saying why."""
        if not isinstance(tree, (DraftTree, ShapedTree)):
            raise ValueError(f"tree: expected a DraftTree or ShapedTree, got {type(tree).__name__}")
        if not self.supports(tree):
            raise ValueError(self.refusal(tree))
        if tree.exact and not self.exact_capable:
            raise ValueError(f"verifier {self.name!r}: no exact (Fraction) law; give the tree float distributions")
        return tree

    def law(self, tree: DraftTree, *, next_token: bool = True) -> TreeLaw:
        """The exact law of (accepted node, next token) given ``tree`` (:class:`TreeLaw`);
        ``next_token=False`` skips the next-token rows (all E[τ] needs)."""
        return self._law(self.check(tree), next_token)

    def expected_accepted(self, tree: DraftTree) -> float | Fraction:
        """``E[τ | tree]``: the Rao-Blackwell estimate of the accepted length of one block."""
        return self.law(tree, next_token=False).expected_accepted

    def verify(self, tree: DraftTree, rng: np.random.Generator) -> Verification:
        """Run the verifier once on ``tree`` (float distributions; Fractions are converted)."""
        if not isinstance(rng, np.random.Generator):
            raise ValueError(f"rng: expected a numpy.random.Generator, got {type(rng).__name__}")
        tree = self.check(tree)
        node, next_token = self._verify(tree, rng)
        nodes = tree.nodes
        path = nodes.path(node)
        return Verification(len(path), int(node), int(nodes.row[node]), int(next_token), (*path, int(next_token)))

    @on_idle_cores
    def verify_batch(
        self,
        tokens,
        target=None,
        draft=None,
        generator=None,
        *,
        without_replacement: bool = False,
        groups=None,
        rng: np.random.Generator | None = None,
        validate: bool = True,
    ) -> BatchVerification:
        """Batched torch form: ``tokens [B, K, L]`` long, ``target [B, K, L + 1, n]``,
        ``draft [B, K, L, n]`` -> :class:`BatchVerification`; decoding verifies each block
        through it (B = 1, on the models' device).

        ``groups``: K labels, rows with equal labels share one draft model and sampling (as
        :class:`DraftTree`'s; default all equal, the iid case). ``rng``: the randomness of the
        parts that run on the host with numpy (default: a generator seeded from
        ``generator``). ``validate=False`` skips the O(B·K·L·n) check that every row is a
        distribution (shapes, token ids and the drafted tokens' positive probability are always
        checked): for callers whose distributions come normalised, such as decoding's
        ``process_logits``.

        Trees drafted by a shape: ``verify_batch(trees, generator=...)`` with ``trees`` a
        :class:`ShapedTree` or a sequence of them (any shapes) runs the per-block path
        :func:`~multidraft.trees._batch.shaped_batch` (the verifier's own run on each tree, on
        the host); ``row`` then holds the accepted node."""
        from multidraft.trees import _batch

        if rng is not None and not isinstance(rng, np.random.Generator):
            raise ValueError(f"rng: expected a numpy.random.Generator, got {type(rng).__name__}")
        if isinstance(tokens, ShapedTree) or (isinstance(tokens, (list, tuple)) and tokens and isinstance(tokens[0], ShapedTree)):
            if target is not None or draft is not None:
                raise ValueError("target, draft: a ShapedTree carries its distributions; give the trees and generator= only")
            trees = [tokens] if isinstance(tokens, ShapedTree) else list(tokens)
            return _batch.shaped_batch(self, [self.check(tree) for tree in trees], generator, rng)
        batch = _batch.check(tokens, target, draft, generator, without_replacement, validate, groups)
        if self.max_k is not None and batch.k > self.max_k:
            raise ValueError(f"verifier {self.name!r} takes K <= {self.max_k}; got K={batch.k}")
        if batch.drafting not in self.drafting:
            raise ValueError(f"verifier {self.name!r} takes {', '.join(self.drafting)} trees; got {batch.drafting} drafts")
        return self._verify_batch(batch, generator, rng)

    # -- hooks -------------------------------------------------------------------------------

    @abstractmethod
    def _law(self, tree: DraftTree, next_token: bool) -> TreeLaw:
        """Exact law for a checked tree."""

    @abstractmethod
    def _verify(self, tree: DraftTree, rng: np.random.Generator) -> tuple[int, int]:
        """One run on a checked tree: ``(accepted node, next token)``."""

    @abstractmethod
    def _verify_batch(self, batch, generator, rng: np.random.Generator | None) -> BatchVerification:
        """One run per tree of a checked torch batch (``rng``: for the host parts, None to
        seed one from ``generator``)."""
