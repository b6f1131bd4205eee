"""Generation: multi-draft speculative sampling and plain autoregressive sampling, timed.

Both stop after ``max_new_tokens`` tokens or at the model's end of sequence
(:attr:`LoadedModel.eos_token_ids`), and both run on the eager dynamic KV cache or, with
``compile=True``, on the static cache with compiled forwards (:mod:`multidraft.decoding.state`).
Clocks are read after synchronising the device, so each phase is charged its own kernels.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from multidraft.decoding.drafting import DraftSpec, Sampling, draft_block, process_logits, sample_tokens
from multidraft.decoding.models import LoadedModel, check_compatible
from multidraft.decoding.state import ModelState
from multidraft.decoding.tree_drafting import draft_tree, tree_commits, tree_targets
from multidraft.decoding.verification import BlockOutcome, verify_block, verify_shaped, verify_tree
from multidraft.trees import TreeShape
from multidraft.theory.laws import check_count

__all__ = [
    "Generation",
    "speculative_generate",
    "sample_autoregressive",
    "warm_up",
    "check_specs",
    "resolve_scheme",
    "resolve_verifier",
    "resolve_shape",
]


def resolve_scheme(scheme: Any) -> Any:
    """A registered scheme's instance for a name; an object with ``select`` unchanged."""
    if isinstance(scheme, str):
        from multidraft.schemes import get_scheme

        return get_scheme(scheme)
    if not callable(getattr(scheme, "select", None)):
        raise ValueError(f"scheme: expected a scheme name or an object with select(), got {scheme!r}")
    return scheme


def resolve_verifier(verifier: Any, scheme: Any = "specinfer") -> Any:
    """The tree verifier that verifies each block: ``verifier`` itself (a
    :class:`~multidraft.trees.TreeVerifier`), the registered one of that name
    (:func:`multidraft.trees.get_verifier`: ``"traversal"``, ``"token:optimal"``, ...), or for
    ``None`` and ``"token"`` the token walk with ``scheme`` (a name or a scheme object)."""
    from multidraft.trees import TokenVerifier, TreeVerifier, get_verifier

    if isinstance(verifier, TreeVerifier):
        return verifier
    if verifier is None or verifier == "token":
        return TokenVerifier(resolve_scheme(scheme))
    if not isinstance(verifier, str):
        raise ValueError(f"verifier: expected a verifier name or a TreeVerifier, got {verifier!r}")
    return get_verifier(verifier)


def clock(device: torch.device) -> float:
    """``time.perf_counter()`` after the device's queued work is done."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()
    return time.perf_counter()


@dataclass(frozen=True)
class Generation:
    """Speculative generation for one prompt: tokens, blocks and the time split (seconds).

    ``compiled``: whether the forwards ran compiled (False also when compilation was asked for
    and failed; ``compile_error`` then says why).
    """

    tokens: tuple[int, ...]
    blocks: tuple[BlockOutcome, ...]
    seconds_drafting: float
    seconds_verification: float
    seconds_selection: float
    compiled: bool = False
    compile_error: str | None = None


def check_without_replacement(samplings: Sequence[Sampling], without_replacement: bool) -> None:
    """Drafts drawn without replacement: one shared sampling, and a full support."""
    if not without_replacement:
        return
    if len(set(samplings)) > 1:
        raise ValueError(
            "without_replacement: the first position is drawn without replacement from one q, so all "
            "drafts need the same temperature and top_p"
        )
    if any(s.temperature == 0 or s.top_p < 1 for s in samplings):
        raise ValueError(
            "without_replacement: K distinct drafts need at least K tokens of positive draft "
            "probability at every position, which a draft temperature of 0 or top_p < 1 cannot "
            "guarantee"
        )


def check_specs(target: LoadedModel, specs: Sequence[DraftSpec], without_replacement: bool) -> LoadedModel:
    """The one draft model of ``specs`` (the target when None), checked for compatibility."""
    if len(specs) == 0:
        raise ValueError("specs: need at least one draft")
    if len({id(spec.model) for spec in specs}) > 1:
        raise ValueError("specs: all drafts must use the same draft model (vary temperature and top_p instead)")
    check_without_replacement([spec.sampling for spec in specs], without_replacement)
    draft = specs[0].model or target
    if draft is not target:
        check_compatible(target, draft)
    return draft


def resolve_shape(
    shape: TreeShape | None, specs: Sequence[DraftSpec], length: int, without_replacement: bool, compile: bool
) -> tuple[TreeShape | None, Sequence[DraftSpec], int, bool]:
    """``(shape, specs, length, without_replacement)`` as the block loop runs them: None for
    chains (``TreeShape.chains(K, L, law)`` becomes K copies of ``specs[0]``, L and the law's
    flag), else the shape with its depth as length. A tree shape drafts every node with one
    sampling and the dynamic cache."""
    if shape is None:
        return None, specs, length, without_replacement
    if not isinstance(shape, TreeShape):
        raise ValueError(f"shape: expected a TreeShape (multidraft.trees.TreeShape), got {type(shape).__name__}")
    if without_replacement:
        raise ValueError("without_replacement: give the law in the TreeShape (law='without-replacement')")
    if len({spec.key for spec in specs}) != 1:
        raise ValueError("specs: a tree shape drafts every node from one draft model and sampling; give one draft spec")
    if shape.family == "chains":
        return None, [specs[0]] * shape.k, shape.length, shape.law == "without-replacement"
    if compile:
        raise ValueError("compile: tree shapes draft on the dynamic KV cache (a static cache holds a fixed number of rows); drop compile")
    return shape, specs[:1], shape.depth, False


def speculative_generate(
    target: LoadedModel,
    specs: Sequence[DraftSpec],
    prompt: Sequence[int],
    *,
    length: int,
    scheme: Any = "specinfer",
    max_new_tokens: int,
    generator: torch.Generator,
    rng: np.random.Generator,
    target_sampling: Sampling = Sampling(),
    without_replacement: bool = False,
    compile: bool = False,
    on_block: Callable[[BlockOutcome], None] | None = None,
    verifier: Any = None,
    shape: TreeShape | None = None,
) -> Generation:
    """Multi-draft speculative sampling of up to ``max_new_tokens`` tokens after ``prompt``.

    Each block: draft K = ``len(specs)`` sequences of ``length`` tokens (one batched,
    KV-cached draft pass per position), run one batched target forward over them, verify the
    tree with ``verifier`` (default: the token walk with ``scheme``, on the device where the
    scheme has a batched form), emit the accepted tokens plus the residual or bonus token, and
    keep the KV caches of the accepted row. Stops after ``max_new_tokens`` or an
    end-of-sequence token.

    Parameters
    ----------
    target : LoadedModel
        The target model (p).
    specs : sequence of DraftSpec
        The K drafts (model, sampling); one draft model for all.
    prompt : sequence of int
        Token ids, at least one.
    length, max_new_tokens : int
        Tokens per draft L and new tokens (>= 1).
    scheme : str or Scheme
        Registry name or scheme object of the token walk (``verifier`` None or ``"token"``).
    generator : torch.Generator
        On the target's device: drafting, batched selection and bonus tokens.
    rng : numpy.random.Generator
        The verifier's host randomness (selection by schemes without a batched form).
    target_sampling : Sampling
        The target's processing; p is recorded after it.
    without_replacement : bool
        Draw the K first tokens without replacement (one draft sampling for all).
    compile : bool
        Static KV caches and compiled forwards (:mod:`multidraft.decoding.state`).
    on_block : callable, optional
        Called with each :class:`BlockOutcome` (outside the timed phases).
    verifier : str or TreeVerifier, optional
        The tree verifier (:func:`resolve_verifier`): ``"traversal"``, ``"block"`` (K = 1),
        ``"selective"``, ``"token:<scheme>"``; None: the token walk with ``scheme``.
    shape : TreeShape, optional
        Draft a tree of this shape each block instead of K chains
        (:mod:`multidraft.decoding.tree_drafting`: one batched draft forward per depth, one
        target forward over the tree, the block verified as a
        :class:`~multidraft.trees.ShapedTree`); ``length`` is then the shape's depth, one
        draft sampling (``specs[0]``) drafts every node, and the dynamic cache is used (no
        ``compile``). ``TreeShape.chains`` runs the chains path itself (same results as ``k``
        specs, ``length`` and ``without_replacement``).

    Returns
    -------
    Generation
    """
    length = check_count(length, "length")
    max_new_tokens = check_count(max_new_tokens, "max_new_tokens")
    if not isinstance(target_sampling, Sampling):
        raise ValueError(f"target_sampling: expected a Sampling, got {type(target_sampling).__name__}")
    verifier = resolve_verifier(verifier, scheme)
    shape, specs, length, without_replacement = resolve_shape(shape, specs, length, without_replacement, compile)
    draft = check_specs(target, specs, without_replacement)
    eos = target.eos_token_ids
    device = target.device
    k = len(specs)
    capacity = len(prompt) + max_new_tokens + length + 2
    options = dict(rows=k, compile=compile, capacity=capacity)
    times = {"drafting": 0.0, "verification": 0.0, "selection": 0.0}

    start = clock(device)
    draft_state = ModelState(draft, prompt, role="draft", **options)
    mark = clock(device)
    times["drafting"] += mark - start
    target_state = ModelState(target, prompt, role="target", **options)
    times["verification"] += clock(device) - mark

    emitted: list[int] = []
    blocks: list[BlockOutcome] = []
    while len(emitted) < max_new_tokens and not eos.intersection(emitted):
        draft_base, target_base = draft_state.length, target_state.length
        draft_pending, target_pending = len(draft_state.pending), len(target_state.pending)
        t0 = clock(device)
        if shape is None:
            drafts = draft_block(draft_state, specs, length, generator, without_replacement)
            t1 = clock(device)
            p = verify_block(target_state, drafts, target_sampling)
            t2 = clock(device)
            outcome = verify_tree(
                p, drafts, specs, verifier, generator=generator, rng=rng, without_replacement=without_replacement
            )
            t3 = clock(device)
            accepted_row = drafts.tokens[outcome.row].tolist()
            # Draft cache holds pending + x_1..x_{L-1}; keep what the accepted prefix covers.
            kept = min(outcome.accepted, length - 1)
            draft_row, draft_pending_next = outcome.row, accepted_row[kept : outcome.accepted] + [outcome.tokens[-1]]
            target_row = outcome.row
        else:
            tree = draft_tree(draft_state, specs[0].sampling, shape, generator)
            t1 = clock(device)
            p, leaf_rows = tree_targets(target_state, tree, target_sampling)
            t2 = clock(device)
            outcome = verify_shaped(tree.shaped(p), verifier, generator=generator, rng=rng)
            t3 = clock(device)
            draft_row, kept, draft_pending_next = tree_commits(tree, outcome.row, outcome.tokens[-1])
            target_row = int(leaf_rows[outcome.row])
        draft_state.commit(draft_row, draft_base + draft_pending + kept, draft_pending_next, shared=draft_base)
        t4 = clock(device)
        target_state.commit(
            target_row, target_base + target_pending + outcome.accepted, [outcome.tokens[-1]], shared=target_base
        )
        t5 = clock(device)
        # Cache bookkeeping is charged to the model whose cache it is.
        times["drafting"] += (t1 - t0) + (t4 - t3)
        times["verification"] += (t2 - t1) + (t5 - t4)
        times["selection"] += t3 - t2
        blocks.append(outcome)
        emitted.extend(outcome.tokens)
        if on_block is not None:
            on_block(outcome)
    ends = [i for i, token in enumerate(emitted) if token in eos]
    if ends:
        emitted = emitted[: ends[0] + 1]
    error = draft_state.compile_error or target_state.compile_error
    return Generation(
        tuple(emitted[:max_new_tokens]),
        tuple(blocks),
        times["drafting"],
        times["verification"],
        times["selection"],
        compiled=draft_state.compiled and target_state.compiled,
        compile_error=error,
    )


@torch.inference_mode()
def sample_autoregressive(
    target: LoadedModel,
    prompt: Sequence[int],
    *,
    max_new_tokens: int,
    generator: torch.Generator,
    sampling: Sampling = Sampling(),
    stop_at_eos: bool = True,
    compile: bool = False,
) -> tuple[int, ...]:
    """Plain autoregressive sampling ``y_t ~ top_p(softmax(logits_t / T))``, KV-cached: the
    reference law speculative sampling must reproduce, and the speed baseline.

    Stops after ``max_new_tokens`` or, with ``stop_at_eos``, after an end-of-sequence token
    (:attr:`LoadedModel.eos_token_ids`), which is included.
    """
    max_new_tokens = check_count(max_new_tokens, "max_new_tokens")
    if not isinstance(sampling, Sampling):
        raise ValueError(f"sampling: expected a Sampling, got {type(sampling).__name__}")
    eos = target.eos_token_ids if stop_at_eos else frozenset()
    state = ModelState(
        target, prompt, rows=1, compile=compile, capacity=len(prompt) + max_new_tokens + 1, role="autoregressive"
    )
    out: list[int] = []
    while len(out) < max_new_tokens:
        logits = state.forward(state.pending_rows(1))[:, -1, :]
        token = int(sample_tokens(process_logits(logits, sampling.temperature, sampling.top_p), generator)[0])
        out.append(token)
        state.commit(0, state.length, [token], shared=state.length)
        if token in eos:
            break
    return tuple(out)


def warm_up(
    target: LoadedModel, specs: Sequence[DraftSpec], *, length: int, capacity: int, autoregressive: bool = True
) -> None:
    """Compile, before anything is timed, every forward shape that :func:`speculative_generate`
    (and, with ``autoregressive``, :func:`sample_autoregressive`) runs with ``compile=True``:
    the draft's ``[K, 1]`` and ``[K, 2]`` (two pending tokens after a fully accepted block), the
    target's ``[K, L + 1]`` and the baseline's ``[1, 1]``, on the pooled caches of at least
    ``capacity`` positions that the generations will reuse."""
    k = len(specs)
    draft = specs[0].model or target
    ModelState(draft, [0], rows=k, compile=True, capacity=capacity, role="draft").warm_up([1, 2])
    ModelState(target, [0], rows=k, compile=True, capacity=capacity, role="target").warm_up([length + 1])
    if autoregressive:
        ModelState(target, [0], rows=1, compile=True, capacity=capacity, role="autoregressive").warm_up([1])
