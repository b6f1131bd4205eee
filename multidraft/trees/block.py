"""Block verification (Sun, Mendlovic, Leviathan, Aharoni, Beirami, Ro, Suresh; ICLR 2025,
arXiv 2403.10444, Algorithm 2): one draft block of γ = L tokens verified jointly.

With M_b the target, M_s the draft and X^i = (X_1, ..., X_i) the drafted block:

    p_0 = 1,   p_i = min(p_{i-1} · M_b(X_i | X^{i-1}) / M_s(X_i | X^{i-1}), 1),
    h_i = Z_{i+1} / (Z_{i+1} + 1 - p_i)  (1 <= i < γ),   h_γ = p_γ,
    Z_{i+1} = Σ_x [p_i · M_b(x | X^i) - M_s(x | X^i)]_+ ;

draw η_i ~ U(0, 1) and accept τ = max{i : η_i <= h_i} tokens (0 if none); the next token is
drawn from M_b(· | X^γ) if τ = γ, else from norm([p_τ M_b(· | X^τ) - M_s(· | X^τ)]_+). So
``P(τ = i) = h_i Π_{j>i} (1 - h_j)`` (h_0 = 1). Optimal among all lossless verifiers of one
draft block (their Theorem 2; here also the K = 1 value of the block-level optimum,
:func:`~multidraft.trees.block_optimum`, and its closed form
:func:`~multidraft.trees.single_path_optimum`).

Choices where the paper is silent (probability-zero events, proof in docs/block_level.md):
``h_i = 1`` with the target as next-token law when ``Z_{i+1} + 1 - p_i = 0`` (then p_i = 1 and
the target equals the draft at X^i), and the target as next-token law when a residual has mass 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from multidraft.trees._residual import scaled_residual
from multidraft.trees.base import BatchVerification, TreeLaw, TreeVerifier, sample_index
from multidraft.trees.tree import DraftTree

__all__ = ["BlockVerification"]


@dataclass(frozen=True)
class _Block:
    p: list  # p_0..p_γ
    h: list  # h_0..h_γ (h_0 = 1)
    residual: list  # next-token weights after X^τ, τ = 0..γ (unnormalised)


class BlockVerification(TreeVerifier):
    """Block verification of one draft (K = 1), Sun et al. 2025, Algorithm 2.

    Their example (target (1/3, 2/3), draft (2/3, 1/3) at every step, γ = 2) gives E[τ] = 11/9
    against 10/9 token by token; see :func:`multidraft.trees.sun_example`.
    """

    name = "block"
    max_k = 1
    drafting = ("iid", "wor")

    def weights(self, tree: DraftTree) -> _Block:
        """Sun et al.'s ``p_i``, ``h_i`` and the next-token weights after X^τ (τ = 0..γ) for the
        single draft of ``tree``."""
        exact = self.check(tree).exact
        one = Fraction(1) if exact else 1.0
        x, target, draft = tree.tokens[0], tree.target[0], tree.draft[0]
        length = len(x)
        p = [one]
        for i in range(1, length + 1):
            p.append(min(p[-1] * target[i - 1][x[i - 1]] / draft[i - 1][x[i - 1]], one))
        h, residual = [one], []
        for i in range(length):
            weights, z = scaled_residual(target[i], p[i], draft[i], one)  # [p_i M_b - M_s]_+, Z_{i+1}
            residual.append(weights if z > 0 else target[i])
            if i > 0:
                h.append(self._stop_weight(p[i], z))
        h.append(p[length])
        residual.append(target[length])
        return _Block(p, h, residual)

    @staticmethod
    def _stop_weight(p, z):
        """``h_i = Z_{i+1} / (Z_{i+1} + 1 - p_i)`` (1 when the denominator is 0: then p_i = 1 and
        the target equals the draft at X^i, a test reached with probability zero)."""
        return z / (z + 1 - p) if z + 1 - p > 0 else p

    def _law(self, tree: DraftTree, next_token: bool) -> TreeLaw:
        exact = tree.exact
        block = self.weights(tree)
        length = tree.length
        prob = [None] * (length + 1)
        tail = Fraction(1) if exact else 1.0  # Π_{j>i} (1 - h_j)
        for i in range(length, -1, -1):
            prob[i] = block.h[i] * tail
            tail = tail * (1 - block.h[i])
        # On a chain the node of depth i is node i.
        probability = np.array(prob, dtype=object if exact else np.float64)
        rows = None
        if next_token:
            rows = np.array([w / sum(w) for w in block.residual], dtype=object if exact else np.float64)
        return TreeLaw(tree, probability, rows)

    def _verify(self, tree: DraftTree, rng: np.random.Generator) -> tuple[int, int]:
        block = self.weights(tree)
        eta = rng.random(tree.length + 1)
        tau = max(i for i in range(tree.length + 1) if i == 0 or eta[i] <= block.h[i])
        return tau, sample_index(block.residual[tau], rng)

    def _verify_batch(self, batch, generator, rng) -> BatchVerification:
        from multidraft.trees._batch import block_batch, host_batch

        if batch.target.device.type == "cpu":
            return host_batch(self, batch, generator, rng)
        return block_batch(batch, generator)
