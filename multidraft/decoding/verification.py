"""Block verification: one batched target forward over the K drafts, then a tree verifier
(:mod:`multidraft.trees`) on the block, on the models' device.

The K draft sequences form a tree: drafts sharing a prefix share its node, where the target
distribution p is one distribution and the live drafts' next tokens were drawn independently
given the prefix -- from one q (law ``IID(q, k_live)``) when the live drafts share a model and
sampling, from their own q_i (``Independent``) otherwise, and without replacement
(``WithoutReplacement(q, K)``) at depth 1 when requested (below it a single draft stays live).
A lossless tree verifier emits tokens that follow the target's autoregressive law.

:func:`verify_tree` runs any :class:`~multidraft.trees.TreeVerifier` on the block through its
batched torch form (``verify_batch`` with B = 1): the token walk ``token:<scheme>``
(SpecInfer, Miao et al. 2024, Section 4; SpecTr, Sun et al. 2023) -- :func:`walk_tree`, each
node either accepts a draft token (the walk continues with the drafts carrying it) or emits the
scheme's residual token and stops, a bonus token after L accepted -- or a block-level verifier
(``block``, ``traversal``, ``selective``).

In the token walk selection stays on the device: a scheme with a batched torch form for the
node's law (:meth:`~multidraft.schemes.Scheme.supports_batch_law`; its ``select_batch(target
[1, V], drafts [1, k, V], tokens [1, k], generator)``) runs on views of the block's tensors, and
only the chosen token comes back to the host. Otherwise the node's p and q_i are copied to the
host once, the scheme prepares its plan there (:meth:`~multidraft.schemes.Scheme.prepare`) and
the plan selects; the :class:`NodeStep` keeps that plan, so the measurement reads the node's
exact acceptance off the very plan that selected. Which form runs depends only on the scheme
and the node's law class (:func:`node_scheme`), so a new scheme plugs in unchanged. An object
that is not a :class:`~multidraft.schemes.Scheme` but has ``select(target, law, drafts, rng)``
(and optionally ``select_batch`` with ``batch_capable = True``) runs too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from multidraft.decoding.drafting import DraftSpec, Drafts, Sampling, process_logits
from multidraft.decoding.state import ModelState
from multidraft.theory.laws import DraftLaw
from multidraft.trees import DraftTree, ShapedTree, TokenVerifier, TreeVerifier
from multidraft.trees.token import NodeStep, node_scheme
from multidraft.trees.tree import live_law_class

__all__ = [
    "NodeStep",
    "BlockOutcome",
    "verify_block",
    "verify_tree",
    "verify_shaped",
    "node_law",
    "node_law_class",
    "node_scheme",
    "spec_groups",
    "walk_tree",
]


@torch.inference_mode()
def verify_block(state: ModelState, drafts: Drafts, sampling: Sampling) -> torch.Tensor:
    """Target distributions along every draft: ``p [K, L + 1, V]`` float64, in one forward.

    Feeds ``[pending, x_{k,1..L}]`` for all K rows at once; ``p[k, i]`` is the target's
    processed distribution of the token after ``x_{k,1..i}`` (i = 0..L; i = L gives the bonus).
    """
    pending = len(state.pending)
    k = drafts.tokens.shape[0]
    inputs = torch.cat([state.pending_rows(k), drafts.tokens.to(state.loaded.device)], dim=1)
    logits = state.forward(inputs)[:, pending - 1 :, :]  # [K, L + 1, V]
    return process_logits(logits, sampling.temperature, sampling.top_p)


def node_law_class(keys: Sequence[Any], without_replacement: bool) -> type[DraftLaw]:
    """The class of the live drafts' law at a node (see :func:`node_law`), from their keys
    (:attr:`DraftSpec.key`; at the root, the drafts' samplings): without replacement when
    requested, iid when the keys are equal, else independent
    (:func:`multidraft.trees.tree.live_law_class`)."""
    return live_law_class(keys, without_replacement)


def node_law(draft_probs: np.ndarray, keys: Sequence[Any], without_replacement: bool) -> DraftLaw:
    """The law of the live drafts' tokens at one tree node.

    ``draft_probs [k_live, V]`` are their draft distributions (renormalised: float32 or top-p
    rounding leaves sums a few ulps off 1), ``keys`` their :attr:`DraftSpec.key`. With
    ``without_replacement`` the K first tokens are distinct, so below the root one draft at
    most stays live, and ``WithoutReplacement(q, 1) = IID(q, 1)``: every node of such a tree
    has a without-replacement law.
    """
    return node_law_class(keys, without_replacement).from_drafts(draft_probs, normalize=True)


def spec_groups(specs: Sequence[DraftSpec]) -> tuple[int, ...]:
    """The tree's row labels: drafts with equal :attr:`DraftSpec.key` share a label (one draft
    law at a shared prefix), numbered by first appearance."""
    first: dict[Any, int] = {}
    return tuple(first.setdefault(spec.key, len(first)) for spec in specs)


@dataclass(frozen=True)
class BlockOutcome:
    """Result of one block: ``tokens`` emitted (accepted ones then the residual or bonus
    token), ``accepted`` count, ``row`` of a draft carrying the accepted prefix, the token
    walk's ``steps`` (empty for block-level verifiers), and the block's distributions
    ``target [K, L + 1, V]`` and ``drafts`` on the device (None once consumed), from which
    :meth:`tree` builds the draft tree every verifier can be scored on. A block drafted by a
    tree shape keeps its :class:`~multidraft.trees.ShapedTree` in ``shaped`` instead, and
    ``row`` is then the accepted node."""

    tokens: tuple[int, ...]
    accepted: int
    row: int
    steps: tuple[NodeStep, ...]
    target: torch.Tensor | None = None
    drafts: Drafts | None = None
    shaped: ShapedTree | None = None

    def tree(self, groups: Sequence[int], without_replacement: bool) -> DraftTree | ShapedTree:
        """The block's :class:`~multidraft.trees.DraftTree` in float64 on the host (a copy off
        the device; rows already normalised by :func:`~multidraft.decoding.process_logits`),
        or its :class:`~multidraft.trees.ShapedTree` (``groups`` and ``without_replacement``
        unused)."""
        if self.shaped is not None:
            return self.shaped
        if self.target is None or self.drafts is None:
            raise ValueError("outcome: its distributions were released; build the tree before dropping them")
        return DraftTree(
            self.drafts.tokens.cpu().numpy(),
            self.target.double().cpu().numpy(),
            self.drafts.probs.double().cpu().numpy(),
            without_replacement=without_replacement,
            groups=groups,
            validate=False,
        )


@torch.inference_mode()
def verify_tree(
    target_probs: torch.Tensor,
    drafts: Drafts,
    specs: Sequence[DraftSpec],
    verifier: TreeVerifier,
    *,
    generator: torch.Generator,
    rng: np.random.Generator,
    without_replacement: bool = False,
) -> BlockOutcome:
    """Verify one block with ``verifier`` (its batched torch form, B = 1, on the device).

    Parameters
    ----------
    target_probs : torch.Tensor, shape [K, L + 1, V]
        Target distributions from :func:`verify_block`.
    drafts : Drafts
        ``tokens [K, L]`` and ``probs [K, L, V]``.
    specs : sequence of DraftSpec
        The K drafts' models and sampling; equal keys mean a shared law at a shared prefix
        (:func:`spec_groups`).
    verifier : TreeVerifier
        A lossless tree verifier (:func:`multidraft.trees.get_verifier`) that takes the tree.
    generator : torch.Generator
        On the device of ``target_probs``: the randomness of the device parts.
    rng : numpy.random.Generator
        The randomness of the parts run on the host.
    without_replacement : bool
        Whether the first position was drawn without replacement.

    Returns
    -------
    BlockOutcome

    Raises
    ------
    RuntimeError
        When a token scheme's ``accepted`` disagrees with whether its token is a live draft.
    """
    device = target_probs.device
    tokens = drafts.tokens.to(device)
    result = verifier.verify_batch(
        tokens[None], target_probs[None], drafts.probs.to(device)[None], generator,
        without_replacement=without_replacement, groups=spec_groups(specs), rng=rng, validate=False,
    )  # fmt: skip
    accepted, row, following = int(result.accepted[0]), int(result.row[0]), int(result.next_token[0])
    emitted = (*tokens[row, :accepted].tolist(), following)
    steps = result.steps[0] if result.steps is not None else ()
    return BlockOutcome(emitted, accepted, row, steps, target_probs, drafts)


def verify_shaped(tree: ShapedTree, verifier: TreeVerifier, *, generator: torch.Generator, rng: np.random.Generator) -> BlockOutcome:
    """Verify one block drafted by a tree shape with ``verifier``: its ``verify_batch`` on the
    :class:`~multidraft.trees.ShapedTree` (the per-block host path,
    :func:`~multidraft.trees._batch.shaped_batch`). The outcome's ``row`` is the accepted node;
    it keeps the tree (``shaped``) for scoring and has no node steps."""
    result = verifier.verify_batch(tree, generator=generator, rng=rng)
    node, accepted, following = int(result.row[0]), int(result.accepted[0]), int(result.next_token[0])
    return BlockOutcome((*tree.nodes.path(node), following), accepted, node, (), shaped=tree)


def walk_tree(
    target_probs: torch.Tensor,
    drafts: Drafts,
    specs: Sequence[DraftSpec],
    scheme: Any,
    *,
    generator: torch.Generator,
    rng: np.random.Generator,
    without_replacement: bool = False,
) -> BlockOutcome:
    """Token-level selection along the tree of K drafts: :func:`verify_tree` with the token
    verifier ``token:<scheme>`` (:class:`~multidraft.trees.TokenVerifier`).

    ``scheme`` is a lossless token-level scheme: ``select_batch`` (torch, on the device) where
    it has one for the node's law, else its plan for the node, prepared on the host, selects
    (an object with ``select(target, law, drafts, rng)`` only: that, numpy). The other
    arguments are :func:`verify_tree`'s.
    """
    return verify_tree(
        target_probs, drafts, specs, TokenVerifier(scheme), generator=generator, rng=rng,
        without_replacement=without_replacement,
    )  # fmt: skip
