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

Selection stays on the device: a scheme with a batched torch form (``batch_capable``, its
``select_batch(target [1, V], drafts [1, k, V], tokens [1, k], generator)``) runs on views of
the block's tensors, and only the chosen token comes back to the host. A scheme without one
(the LP-based schemes, user objects with ``select`` only) gets the node's p and q_i copied to
the host and runs its numpy ``select``. Which form runs depends only on the scheme and the
node's law (:func:`node_scheme`), so a new scheme with ``select_batch`` plugs in unchanged.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from multidraft.decoding.drafting import DraftSpec, Drafts, Sampling, process_logits, sample_tokens
from multidraft.decoding.state import ModelState
from multidraft.theory.laws import IID, DraftLaw, Independent, WithoutReplacement

__all__ = [
    "NodeStep",
    "BlockOutcome",
    "verify_block",
    "build_law",
    "node_law",
    "node_law_name",
    "node_scheme",
    "representative_law",
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


def node_law_name(keys: Sequence[Any], without_replacement: bool) -> str:
    """``law.name`` of the live drafts' law at a node (see :func:`node_law`), from their keys."""
    if without_replacement:
        return "wor"
    return "iid" if len(set(keys)) == 1 else "independent"


def build_law(name: str, draft_probs: np.ndarray) -> DraftLaw:
    """The draft law of kind ``name`` (``"iid"``, ``"independent"`` or ``"wor"``) over the live
    drafts' distributions ``draft_probs [k_live, V]`` (renormalised: float32 or top-p rounding
    leaves sums a few ulps off 1)."""
    k = len(draft_probs)
    if name == "wor":
        return WithoutReplacement(draft_probs[0], k, normalize=True)
    if name == "iid":
        return IID(draft_probs[0], k, normalize=True)
    return Independent(list(draft_probs), normalize=True)


def node_law(draft_probs: np.ndarray, keys: Sequence[Any], without_replacement: bool) -> DraftLaw:
    """The law of the live drafts' tokens at one tree node.

    ``draft_probs [k_live, V]`` are their draft distributions, ``keys`` their
    :attr:`DraftSpec.key`. With ``without_replacement`` the K first tokens are distinct, so
    below the root one draft at most stays live, and ``WithoutReplacement(q, 1) = IID(q, 1)``:
    every node of such a tree has a without-replacement law.
    """
    return build_law(node_law_name(keys, without_replacement), draft_probs)


@functools.cache
def representative_law(name: str, k: int) -> DraftLaw:
    """A small law of kind ``name`` with ``k`` drafts (uniform over k + 1 tokens): what a
    scheme's ``supports`` looks at -- the law's kind and K -- without a node's distributions."""
    return build_law(name, np.full((k, k + 1), 1.0 / (k + 1)))


def node_scheme(scheme: Any, name: str, k: int) -> tuple[Any, bool]:
    """The scheme that runs at a node whose law has kind ``name`` and ``k`` live drafts, and
    whether it runs in its batched torch form.

    ``scheme`` itself, or single-draft speculative sampling (Leviathan et al. 2023) at a node
    with one live draft when ``scheme`` is defined for K >= 2 only -- every multi-draft scheme
    reduces to it at K = 1. The batched form runs when the scheme has one for the law
    (``supports_batch``; the optimal verifier's covers iid drafts only).
    """
    supports = getattr(scheme, "supports", None)
    if k == 1 and supports is not None and not supports(representative_law(name, 1)):
        from multidraft.schemes import get_scheme

        scheme = get_scheme("single")
    return scheme, _runs_batched(scheme, representative_law(name, k))


def _runs_batched(scheme: Any, law: DraftLaw) -> bool:
    """Whether ``scheme`` has a batched form for ``law``: its ``supports_batch`` (a
    :class:`~multidraft.schemes.Scheme`), else ``batch_capable`` and ``supports``."""
    if callable(getattr(scheme, "supports_batch", None)):
        return bool(scheme.supports_batch(law))
    supports = getattr(scheme, "supports", None)
    return bool(getattr(scheme, "batch_capable", False)) and (supports is None or bool(supports(law)))


@dataclass(frozen=True)
class NodeStep:
    """One verified position (one tree node).

    ``target`` is p ``[V]`` and ``drafts`` the live drafts' q_i ``[k_live, V]``: views of the
    block's tensors on the models' device (:meth:`law` copies them to the host for the
    theory). ``draft_tokens`` are the live drafts' tokens, ``law_name`` the kind of their law,
    ``token`` the scheme's output and ``accepted`` whether it is one of the draft tokens.
    """

    depth: int
    live: tuple[int, ...]
    draft_tokens: tuple[int, ...]
    token: int
    accepted: bool
    target: torch.Tensor
    drafts: torch.Tensor
    law_name: str

    def host(self) -> tuple[np.ndarray, np.ndarray]:
        """p ``[V]`` and q_i ``[k_live, V]`` as float64 numpy arrays (a copy off the device)."""
        return self.target.double().cpu().numpy(), self.drafts.double().cpu().numpy()

    def law(self) -> DraftLaw:
        """The node's draft law, built on the host (a copy of q_i off the device)."""
        return build_law(self.law_name, self.host()[1])


@dataclass(frozen=True)
class BlockOutcome:
    """Result of one block: ``tokens`` emitted (accepted ones then the residual or bonus
    token), ``accepted`` count, ``row`` of a draft carrying the accepted prefix, the steps."""

    tokens: tuple[int, ...]
    accepted: int
    row: int
    steps: tuple[NodeStep, ...]


def _select(
    scheme: Any, batched: bool, p: torch.Tensor, q: torch.Tensor, x: torch.Tensor, law_name: str,
    generator: torch.Generator, rng: np.random.Generator,
) -> tuple[int, bool]:  # fmt: skip
    """Run ``scheme`` at one node: ``(token, accepted)``."""
    if batched:
        token, accepted = scheme.select_batch(p[None], q[None], x[None], generator)
        return int(token[0]), bool(accepted[0])
    target, drafts = p.double().cpu().numpy(), q.double().cpu().numpy()
    selection = scheme.select(target, build_law(law_name, drafts), x.cpu().numpy(), rng)
    return int(selection.token), bool(selection.accepted)


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
        one for the node's law, else ``select(target, law, drafts, rng)`` (numpy).
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
        name = node_law_name([keys[i] for i in live], without_replacement)
        chosen, batched = node_scheme(scheme, name, len(live))
        index = torch.tensor(live, device=target_probs.device) if len(live) < len(x_all) else slice(None)
        p = target_probs[live[0], depth - 1]  # [V]
        q = q_all[index, depth - 1]  # [k_live, V]
        x = x_device[index, depth - 1]  # [k_live]
        token, accepted = _select(chosen, batched, p, q, x, name, generator, rng)
        tokens = [x_all[i][depth - 1] for i in live]
        carriers = [i for i, t in zip(live, tokens) if t == token]
        if accepted != bool(carriers):
            raise RuntimeError(
                f"scheme {getattr(scheme, 'name', scheme)!r} reported accepted={accepted} "
                f"for token {token} with drafts {tokens}"
            )
        steps.append(NodeStep(depth, tuple(live), tuple(tokens), token, accepted, p, q, name))
        emitted.append(token)
        if not carriers:
            return BlockOutcome(tuple(emitted), depth - 1, live[0], tuple(steps))
        live = carriers
    bonus = sample_tokens(target_probs[live[0], length][None], generator)
    emitted.append(int(bonus[0]))
    return BlockOutcome(tuple(emitted), length, live[0], tuple(steps))
