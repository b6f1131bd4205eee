"""Traversal verification (Weng et al., NeurIPS 2025, arXiv 2505.12398): leaf to root over the
draft tree.

The paper's algorithm (notation M_b = target, M_s = draft, as there), as reconstructed in
theory.md ("Block level") from public descriptions of the paper -- its algorithm box was not
readable here, so equations are cited by role, not number -- and checked lossless by exact
enumeration (tests/test_trees_exact.py):

1. **Initialise** top-down: ``p_α(root) = 1`` and, for a node X_i with parent X_{i-1},
   ``p_α(X_i) = min(p_α(X_{i-1}) · M_b(X_i | X^{i-1}) / M_s(X_i | X^{i-1}), 1)``.
2. **Repeat**: take the first leaf u in post-order (leftmost, deepest) and draw η ~ U(0, 1).

   * If ``η < p_α(u)``: accept the path root → u; the next token is drawn from u's current
     ``M_b(· | u)`` (the target, or its residual if u's children were all deleted).
   * Else, at u's parent v, with S = Σ_x [p_α(v) M_b(x | v) - M_s(x | v)]_+ (the old M_s):
     ``M_b(· | v) ← norm([p_α(v) M_b(· | v) - M_s(· | v)]_+)``,
     ``M_s(· | v) ← M_s(· | v)`` with u's token removed and renormalised,
     ``p_α(v) ← S / (S + 1 - p_α(v))``; delete u and recompute ``p_α`` below v by step 1.

   The root never fails (its p_α stays 1), so the loop ends.

On a single chain this is block verification exactly (their Theorem 3.4; tested against
:class:`~multidraft.trees.block.BlockVerification`, computed from Sun et al.'s own formulas).

**Which trees, and why it is lossless on each** (proofs in docs/block_level.md, "Traversal
verification"). A subtree's p_α is only ever recomputed before the subtree is entered, so the
loop is the recursion "enter child c with budget ``min(1, a·B(c)/D(c))``; if its subtree is
all rejected, update (B, D, a) at the parent; when no child is left, accept the node with
probability a". The proof is one invariant: *a node entered with budget a emits, averaged over
its random subtree, exactly ``a × (the target's law of the continuation)`` and fails with
probability 1 - a*. It needs only that each next child processed, given everything before,
has law D (the node's current M_s), whatever the number of children:

* **without replacement at the root** (the paper's setting): children in draw order, the
  rejected token removed from M_s -- exactly successive sampling;
* **iid rows** (the same token can be drafted twice): the merged tree's children in order of
  first appearance. Given the first child x and its rejection, the remaining rows are still
  iid (the rejection's probability does not depend on how many rows share x), so the next
  *new* token has law q with x removed and renormalised -- the same update. So the verifier
  is the paper's, unchanged, on the merged tree.

Details the paper leaves open, chosen here (each harmless, proof in the note): a node whose
residual mass S is 0 gets ``p_α = 0`` (or keeps p_α = 1 and its M_b when ``p_α`` was 1, a case
of probability zero); the draft mass left after removals is ``Σ q - Σ removed``.

Cost: one compiled O(n) pass per rejected node (:func:`~multidraft.trees._residual.scaled_residual`);
a run stops at the first acceptance, the exact law visits every node (O(m·n)).
"""

from __future__ import annotations

from collections.abc import Iterator
from fractions import Fraction

import numpy as np

from multidraft.trees._residual import scaled_residual
from multidraft.trees.base import BatchVerification, TreeLaw, TreeVerifier, sample_index
from multidraft.trees.tree import DraftTree

__all__ = ["Traversal"]


class Traversal(TreeVerifier):
    """Traversal verification (Weng et al. 2025) for trees drafted iid or without replacement
    at the root, any K; equal to block verification on a chain.

    >>> import numpy as np
    >>> from fractions import Fraction as F
    >>> target = np.array([[[F(1, 3), F(2, 3)]] * 3], dtype=object)
    >>> draft = np.array([[[F(2, 3), F(1, 3)]] * 2], dtype=object)
    >>> Traversal().expected_accepted(DraftTree([[0, 1]], target, draft))
    Fraction(2, 1)

    (p_α = 1/2 after token 0 and min(1/2 · 2, 1) = 1 after token 1: the leaf is accepted
    surely, where token-by-token verification accepts token 0 with probability 1/2.)
    """

    name = "traversal"
    #: H(v, D) holds on iid rows, rows without replacement at the root, and trees drafted node
    #: by node iid or without replacement (docs/block_level.md); never on top-k nodes.
    drafting = ("iid", "wor", "shape:iid", "shape:without-replacement")
    #: The rejection update removes the rejected token from M_s (the paper's rule).
    removes_rejected: bool = True

    def tests(self, tree: DraftTree) -> Iterator[tuple[int, float | Fraction, np.ndarray, float | Fraction]]:
        """The tests of traversal verification in order, each assuming every earlier one failed:
        ``(node, p_α(node), residual weights w, mass)``, the next token's law being ``w / mass``.

        The sequence of tested nodes is the post-order of the tree and does not depend on the
        randomness (every test either ends the run or deletes its node), so
        ``P(node v accepted) = p_α(v) · Π_{tests before v} (1 - p_α)``.
        """
        nodes = self.check(tree).nodes
        exact = tree.exact
        one = Fraction(1) if exact else 1.0

        def visit(node: int, budget) -> Iterator:
            weights, mass = tree.target_at(node), one  # M_b(· | node) = weights / mass
            children = nodes.children[node]
            if children:
                draft = tree.draft_at(node)  # M_s(· | node) before removals
                draft_total = sum(draft, Fraction(0)) if exact else float(draft.sum())
                removed: list[int] = []
            for child in children:
                token = int(nodes.token[child])
                left = draft_total - sum((draft[r] for r in removed), Fraction(0) if exact else 0.0)
                if not exact:
                    left = max(left, float(draft[token]))  # cancellation guard: the child is still there
                # p_α(child) = min(p_α(node) M_b(child | node) / M_s(child | node), 1)
                child_budget = min(one, budget * weights[token] * left / (mass * draft[token]))
                yield from visit(child, child_budget)
                # The child's subtree was rejected: the update at `node`, with the old M_s.
                residual, total = scaled_residual(weights, budget / mass, draft, 1 / left, removed)
                budget = self._rejected_budget(budget, total, draft[token] / left)
                if total > 0:
                    weights, mass = residual, total
                if self.removes_rejected:
                    removed.append(token)  # M_s ← M_s without the rejected token, renormalised
            yield node, budget, weights, mass

        yield from visit(0, one)

    @staticmethod
    def _rejected_budget(budget, total, rejected_draft):
        """``p_α(v) ← S / (S + 1 - p_α(v))`` (kept when ``S + 1 - p_α = 0``: p_α = 1 and S = 0,
        a state reached with probability zero)."""
        return total / (total + 1 - budget) if total + 1 - budget > 0 else budget

    def _law(self, tree: DraftTree, next_token: bool) -> TreeLaw:
        exact = tree.exact
        m, n = tree.nodes.count, tree.n
        prob = np.array([Fraction(0)] * m, dtype=object) if exact else np.zeros(m)
        rows = None
        if next_token:
            rows = np.full((m, n), Fraction(0), dtype=object) if exact else np.zeros((m, n))
        reach = Fraction(1) if exact else 1.0
        for node, budget, weights, mass in self.tests(tree):
            prob[node] = reach * budget
            if rows is not None:
                rows[node] = weights / mass
            reach = reach * (1 - budget)
        return TreeLaw(tree, prob, rows)

    def _verify(self, tree: DraftTree, rng: np.random.Generator) -> tuple[int, int]:
        for node, budget, weights, _ in self.tests(tree):
            if rng.random() < budget:  # η < p_α(u): accept the path root → u
                return node, sample_index(weights, rng)
        raise AssertionError("unreachable: the root always accepts")  # pragma: no cover

    def _verify_batch(self, batch, generator, rng) -> BatchVerification:
        from multidraft.trees._batch import host_batch, traversal_batch

        if batch.target.device.type == "cpu":
            return host_batch(self, batch, generator, rng)
        return traversal_batch(batch, generator)
