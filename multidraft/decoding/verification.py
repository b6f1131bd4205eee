"""Block verification: one batched target forward over the K drafts, then token-level
selection along the tree of drafts, on the models' device.

The K draft sequences form a tree: at depth d the *live* drafts are those whose first d - 1
tokens equal the tokens accepted so far. They share that prefix, so the target distribution
p at the node is one distribution, and the live drafts' tokens at depth d were drawn
independently given the prefix: from one q (law ``IID(q, k_live)``) when the live drafts share
a model and sampling, from their own q_i (``Independent``) otherwise, and without
replacement (``WithoutReplacement(q, K)``) at depth 1 when requested (below it a single
draft stays live). A lossless token-level scheme at every node therefore makes the whole block
lossless (SpecInfer, Miao et al. 2024, Section 4; SpecTr, Sun et al. 2023): the emitted tokens
follow the target's autoregressive law.

Each node either accepts a draft token (the tree walk continues with the drafts carrying
it) or emits the scheme's residual token and stops; after L accepted tokens a bonus token is
drawn from the target's next distribution.

Selection stays on the device: a scheme with a batched torch form for the node's law
(:meth:`~multidraft.schemes.Scheme.supports_batch_law`; its ``select_batch(target [1, V],
drafts [1, k, V], tokens [1, k], generator)``) runs on views of the block's tensors, and only
the chosen token comes back to the host. Otherwise the node's p and q_i are copied to the host
once, the scheme prepares its plan there (:meth:`~multidraft.schemes.Scheme.prepare`) and the
plan selects; the :class:`NodeStep` keeps that plan, so the measurement reads the node's exact
acceptance off the very plan that selected. Which form runs depends only on the scheme and the
node's law class (:func:`node_scheme`), so a new scheme plugs in unchanged. An object that is
not a :class:`~multidraft.schemes.Scheme` but has ``select(target, law, drafts, rng)`` (and
optionally ``select_batch`` with ``batch_capable = True``) runs too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from multidraft.decoding.drafting import DraftSpec, Drafts, Sampling, process_logits, sample_tokens
from multidraft.decoding.state import ModelState
from multidraft.schemes.base import Plan, Scheme
from multidraft.theory.laws import IID, DraftLaw, Independent, WithoutReplacement

__all__ = [
    "NodeStep",
    "BlockOutcome",
    "verify_block",
    "node_law",
    "node_law_class",
    "node_scheme",
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
    requested, iid when the keys are equal, else independent."""
    if without_replacement:
        return WithoutReplacement
    return IID if len(set(keys)) == 1 else Independent


def node_law(draft_probs: np.ndarray, keys: Sequence[Any], without_replacement: bool) -> DraftLaw:
    """The law of the live drafts' tokens at one tree node.

    ``draft_probs [k_live, V]`` are their draft distributions (renormalised: float32 or top-p
    rounding leaves sums a few ulps off 1), ``keys`` their :attr:`DraftSpec.key`. With
    ``without_replacement`` the K first tokens are distinct, so below the root one draft at
    most stays live, and ``WithoutReplacement(q, 1) = IID(q, 1)``: every node of such a tree
    has a without-replacement law.
    """
    return node_law_class(keys, without_replacement).from_drafts(draft_probs, normalize=True)


def node_scheme(scheme: Any, law_class: type[DraftLaw], k: int) -> tuple[Any, bool]:
    """The scheme that runs at a node whose law has class ``law_class`` and ``k`` live drafts,
    and whether it runs in its batched torch form.

    ``scheme`` itself, or single-draft speculative sampling (Leviathan et al. 2023) at a node
    with one live draft when ``scheme`` is defined for K >= 2 only -- every multi-draft scheme
    reduces to it at K = 1. A :class:`~multidraft.schemes.Scheme` runs batched where it has a
    batched form for the law (``supports_batch_law``; the optimal verifier's covers iid drafts
    only); another object where it says ``batch_capable`` and has ``select_batch``.
    """
    if not isinstance(scheme, Scheme):
        return scheme, bool(getattr(scheme, "batch_capable", False)) and callable(getattr(scheme, "select_batch", None))
    if k == 1 and not scheme.supports_law(law_class, 1):
        from multidraft.schemes import get_scheme

        scheme = get_scheme("single")
    return scheme, scheme.supports_batch_law(law_class, k)


@dataclass(frozen=True)
class NodeStep:
    """One verified position (one tree node).

    ``target`` is p ``[V]`` and ``drafts`` the live drafts' q_i ``[k_live, V]``: views of the
    block's tensors on the models' device. ``draft_tokens`` are the live drafts' tokens,
    ``law_class`` the class of their law, ``scheme`` the scheme that ran at the node (after the
    one-draft fallback of :func:`node_scheme`), ``token`` its output and ``accepted`` whether
    it is one of the draft tokens. ``plan`` is the plan that selected on the host (None when the
    batched form ran, or for a scheme object without plans); :meth:`host_plan` gives the node's
    plan either way.
    """

    depth: int
    live: tuple[int, ...]
    draft_tokens: tuple[int, ...]
    token: int
    accepted: bool
    target: torch.Tensor
    drafts: torch.Tensor
    law_class: type[DraftLaw]
    scheme: Any
    plan: Plan | None = None

    @property
    def law_name(self) -> str:
        """The kind of the node's law (``law_class.name``)."""
        return self.law_class.name

    def host(self) -> tuple[np.ndarray, np.ndarray]:
        """p ``[V]`` and q_i ``[k_live, V]`` as float64 numpy arrays (a copy off the device)."""
        return self.target.double().cpu().numpy(), self.drafts.double().cpu().numpy()

    def law(self) -> DraftLaw:
        """The node's draft law: the plan's, else built on the host from a copy of q_i."""
        if self.plan is not None:
            return self.plan.law
        return self.law_class.from_drafts(self.host()[1], normalize=True)

    def host_plan(self) -> Plan | None:
        """The node's plan: the one that selected, else (after a batched selection) the
        scheme's plan prepared now on the host; None for a scheme object without plans."""
        if self.plan is not None or not isinstance(self.scheme, Scheme):
            return self.plan
        target, drafts = self.host()
        return self.scheme.prepare(target, self.law_class.from_drafts(drafts, normalize=True))


@dataclass(frozen=True)
class BlockOutcome:
    """Result of one block: ``tokens`` emitted (accepted ones then the residual or bonus
    token), ``accepted`` count, ``row`` of a draft carrying the accepted prefix, the steps."""

    tokens: tuple[int, ...]
    accepted: int
    row: int
    steps: tuple[NodeStep, ...]


def _select(
    scheme: Any, batched: bool, law_class: type[DraftLaw], p: torch.Tensor, q: torch.Tensor, x: torch.Tensor,
    generator: torch.Generator, rng: np.random.Generator,
) -> tuple[int, bool, Plan | None]:  # fmt: skip
    """Run ``scheme`` at one node: ``(token, accepted, the host plan or None)``."""
    if batched:
        token, accepted = scheme.select_batch(p[None], q[None], x[None], generator)
        return int(token[0]), bool(accepted[0]), None
    target, law = p.double().cpu().numpy(), law_class.from_drafts(q.double().cpu().numpy(), normalize=True)
    if isinstance(scheme, Scheme):
        plan = scheme.prepare(target, law)
        selection = plan.select(x.cpu().numpy(), rng)
        return int(selection.token), bool(selection.accepted), plan
    selection = scheme.select(target, law, x.cpu().numpy(), rng)
    return int(selection.token), bool(selection.accepted), None


@torch.inference_mode()
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
    """Token-level selection along the tree of K drafts.

    Parameters
    ----------
    target_probs : torch.Tensor, shape [K, L + 1, V]
        Target distributions from :func:`verify_block`.
    drafts : Drafts
        ``tokens [K, L]`` and ``probs [K, L, V]``.
    specs : sequence of DraftSpec
        The K drafts' models and sampling; equal keys mean a shared law at a shared prefix.
    scheme : Scheme
        A lossless token-level scheme: ``select_batch`` (torch, on the device) where it has
        one for the node's law, else its plan for the node, prepared on the host, selects
        (an object with ``select(target, law, drafts, rng)`` only: that, numpy).
    generator : torch.Generator
        On the device of ``target_probs``: randomness of the batched selections and of the
        bonus token.
    rng : numpy.random.Generator
        Randomness of the numpy selections.
    without_replacement : bool
        Whether the first position was drawn without replacement (then every node has a
        without-replacement law, see :func:`node_law`).

    Returns
    -------
    BlockOutcome

    Raises
    ------
    RuntimeError
        When the scheme's ``accepted`` disagrees with whether its token is a live draft.
    """
    keys = [spec.key for spec in specs]
    q_all = drafts.probs.to(target_probs.device)  # [K, L, V]
    x_device = drafts.tokens.to(target_probs.device)  # [K, L]
    x_all = drafts.tokens.tolist()  # K x L ints: the only per-block copy to the host
    length = len(x_all[0])
    live = list(range(len(x_all)))
    emitted: list[int] = []
    steps: list[NodeStep] = []
    for depth in range(1, length + 1):
        law_class = node_law_class([keys[i] for i in live], without_replacement)
        chosen, batched = node_scheme(scheme, law_class, len(live))
        index = torch.tensor(live, device=target_probs.device) if len(live) < len(x_all) else slice(None)
        p = target_probs[live[0], depth - 1]  # [V]
        q = q_all[index, depth - 1]  # [k_live, V]
        x = x_device[index, depth - 1]  # [k_live]
        token, accepted, plan = _select(chosen, batched, law_class, p, q, x, generator, rng)
        tokens = [x_all[i][depth - 1] for i in live]
        carriers = [i for i, t in zip(live, tokens) if t == token]
        if accepted != bool(carriers):
            raise RuntimeError(
                f"scheme {getattr(scheme, 'name', scheme)!r} reported accepted={accepted} "
                f"for token {token} with drafts {tokens}"
            )
        steps.append(NodeStep(depth, tuple(live), tuple(tokens), token, accepted, p, q, law_class, chosen, plan))
        emitted.append(token)
        if not carriers:
            return BlockOutcome(tuple(emitted), depth - 1, live[0], tuple(steps))
        live = carriers
    bonus = sample_tokens(target_probs[live[0], length][None], generator)
    emitted.append(int(bonus[0]))
    return BlockOutcome(tuple(emitted), length, live[0], tuple(steps))
