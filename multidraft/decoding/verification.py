"""Block verification: one batched target forward over the K drafts, then token-level
selection along the tree of drafts.

The K draft sequences form a tree: at depth d the *live* drafts are those whose first d - 1
tokens equal the tokens accepted so far. They share that prefix, so the target distribution
p at the node is one distribution, and the live drafts' tokens at depth d were drawn
independently given the prefix: from one q (law ``IID(q, k_live)``) when the live drafts share
a temperature and top-p, from their own q_i (``Independent``) otherwise, and without
replacement (``WithoutReplacement(q, K)``) at depth 1 when requested (below it a single
draft stays live). A lossless token-level
scheme at every node therefore makes the whole block lossless (SpecInfer, Miao et al. 2024,
Section 4; SpecTr, Sun et al. 2023): the emitted tokens follow the target's autoregressive law.

Each node either accepts a draft token (the tree walk continues with the drafts carrying
it) or emits the scheme's residual token and stops; after L accepted tokens a bonus token is
drawn from the target's next distribution.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from multidraft.decoding.drafting import DraftSpec, Drafts, ModelState, process_logits
from multidraft.theory.laws import IID, DraftLaw, Independent, WithoutReplacement

__all__ = ["NodeStep", "BlockOutcome", "verify_block", "node_law", "node_scheme", "walk_tree"]


@torch.inference_mode()
def verify_block(state: ModelState, drafts: Drafts, temperature: float, top_p: float) -> torch.Tensor:
    """Target distributions along every draft: ``p [K, L + 1, V]`` float64, in one forward.

    Feeds ``[pending, x_{k,1..L}]`` for all K rows at once; ``p[k, i]`` is the target's
    processed distribution of the token after ``x_{k,1..i}`` (i = 0..L; i = L gives the bonus).
    """
    pending = len(state.pending)
    k = drafts.tokens.shape[0]
    inputs = torch.cat([state.pending_rows(k), drafts.tokens.to(state.loaded.device)], dim=1)
    logits = state.forward(inputs)[:, pending - 1 :, :]  # [K, L + 1, V]
    return process_logits(logits, temperature, top_p)


def node_law(draft_probs: np.ndarray, keys: Sequence[Any], without_replacement: bool) -> DraftLaw:
    """The law of the live drafts' tokens at one tree node.

    ``draft_probs [k_live, V]`` are their draft distributions, ``keys`` their processing
    (temperature, top-p). With ``without_replacement`` the K first tokens are distinct, so
    below the root one draft at most stays live, and ``WithoutReplacement(q, 1) = IID(q, 1)``:
    every node of such a tree has a without-replacement law.
    """
    k_live = len(keys)
    if without_replacement:
        return WithoutReplacement(draft_probs[0], k_live, normalize=True)
    if len(set(keys)) == 1:
        return IID(draft_probs[0], k_live, normalize=True)
    return Independent(list(draft_probs), normalize=True)


@dataclass(frozen=True)
class NodeStep:
    """One verified position (one tree node).

    ``target`` is p, ``drafts`` the live drafts' q_i (rows), ``draft_tokens`` their tokens,
    ``law`` the node's draft law, ``token`` the scheme's output and ``accepted`` whether it is
    one of the draft tokens.
    """

    depth: int
    live: tuple[int, ...]
    draft_tokens: tuple[int, ...]
    token: int
    accepted: bool
    target: np.ndarray
    drafts: np.ndarray
    law: DraftLaw


@dataclass(frozen=True)
class BlockOutcome:
    """Result of one block: ``tokens`` emitted (accepted ones then the residual or bonus
    token), ``accepted`` count, ``row`` of a draft carrying the accepted prefix, the steps."""

    tokens: tuple[int, ...]
    accepted: int
    row: int
    steps: tuple[NodeStep, ...]


def node_scheme(scheme: Any, law: DraftLaw) -> Any:
    """The scheme that runs at a node: ``scheme`` itself, or single-draft speculative sampling
    (Leviathan et al. 2023) at a node with one live draft when ``scheme`` is defined for
    K >= 2 only -- every multi-draft scheme reduces to it at K = 1."""
    supports = getattr(scheme, "supports", None)
    if law.k == 1 and supports is not None and not supports(law):
        from multidraft.schemes import get_scheme

        return get_scheme("single")
    return scheme


def _sample(distribution: np.ndarray, rng: np.random.Generator) -> int:
    cumulative = np.cumsum(distribution)
    return int(min(np.searchsorted(cumulative, rng.random() * cumulative[-1], side="right"), len(distribution) - 1))


def walk_tree(
    target_probs: torch.Tensor,
    drafts: Drafts,
    specs: Sequence[DraftSpec],
    scheme: Any,
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
        The K drafts' processing; equal keys mean a shared law at a shared prefix.
    scheme : Scheme
        A lossless token-level scheme with ``select(target, law, drafts, rng)``.
    rng : numpy.random.Generator
        Randomness of the selection and of the bonus token.
    without_replacement : bool
        Whether the first position was drawn without replacement (then every node has a
        without-replacement law, see :func:`node_law`).

    Returns
    -------
    BlockOutcome
    """
    p_all = target_probs.detach().cpu().numpy()  # [K, L + 1, V]
    q_all = drafts.probs.detach().cpu().numpy()  # [K, L, V]
    x_all = drafts.tokens.detach().cpu().numpy()  # [K, L]
    keys = [spec.key for spec in specs]
    length = x_all.shape[1]
    live = list(range(x_all.shape[0]))
    emitted: list[int] = []
    steps: list[NodeStep] = []
    for depth in range(1, length + 1):
        p = p_all[live[0], depth - 1]
        q = q_all[live, depth - 1]
        tokens = x_all[live, depth - 1]
        law = node_law(q, [keys[i] for i in live], without_replacement)
        selection = node_scheme(scheme, law).select(p, law, tokens, rng)
        token = int(selection.token)
        carriers = [i for i, t in zip(live, tokens.tolist()) if t == token]
        if bool(selection.accepted) != bool(carriers):
            raise RuntimeError(
                f"scheme {getattr(scheme, 'name', scheme)!r} reported accepted={selection.accepted} "
                f"for token {token} with drafts {tokens.tolist()}"
            )
        steps.append(NodeStep(depth, tuple(live), tuple(tokens.tolist()), token, bool(carriers), p, q, law))
        emitted.append(token)
        if not carriers:
            return BlockOutcome(tuple(emitted), depth - 1, live[0], tuple(steps))
        live = carriers
    emitted.append(_sample(p_all[live[0], length], rng))
    return BlockOutcome(tuple(emitted), length, live[0], tuple(steps))
