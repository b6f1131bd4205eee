"""Batched torch forms of the tree verifiers: B trees of equal shape on one device.

Inputs (decoding's convention): ``tokens [B, K, L]`` long, ``target [B, K, L + 1, n]`` and
``draft [B, K, L, n]`` floating, every row drawn from one draft law (iid rows, or the first
tokens without replacement). The merged structure of each tree is read on the host from the
tokens (B·K·L integers); the O(n) work stays on the device, in the inputs' dtype, and the
randomness comes only from the caller's ``torch.Generator``.

* :func:`host_batch` -- on CPU tensors, each tree through the verifier's compiled numpy run
  (zero-copy views): one fused O(n) pass per residual beats a dozen batched tensor passes
  with their temporaries (benchmarks/bench_trees.py), so block and traversal verification take
  this route on the CPU and the lockstep forms below on an accelerator;
* :func:`block_batch` -- Sun et al.'s Algorithm 2 vectorised over the batch and the block;
* :func:`traversal_batch` -- traversal verification as one pass over each tree's post-order,
  all trees in lockstep; the state of the nodes on the current root-to-node path is kept per
  depth (a residual is only ever updated at an ancestor of the node being processed), and a
  node's target row is read in place until its first update;
* the token walk's batched form is with the token walk, :func:`multidraft.trees.token.token_batch`.

Every form returns a :class:`BatchVerification`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from multidraft.trees.tree import DraftTree, _merge, live_law_class

__all__ = ["BatchVerification", "TreeBatch", "check", "host_rng", "host_batch", "shaped_batch", "block_batch", "traversal_batch"]

@dataclass(frozen=True)
class BatchVerification:
    """Outcomes of a batched run: torch long tensors ``[B]`` on the input device.

    ``accepted`` (τ per tree), ``row`` (a draft row carrying the accepted path) and
    ``next_token``; the emitted tokens of tree b are ``tokens[b, row[b], :accepted[b]]``
    followed by ``next_token[b]``. ``steps``: for the token walk, the nodes it verified in
    each tree (:class:`~multidraft.trees.token.NodeStep`, root first); None for verifiers
    that do not verify node by node.
    """

    accepted: object
    row: object
    next_token: object
    steps: tuple | None = None


# Event kinds of the traversal schedule.
_NONE, _ENTER, _TEST = 0, 1, 2


@dataclass(frozen=True)
class TreeBatch:
    """Validated batched inputs and each tree's merged structure (host side)."""

    tokens: object  # torch [B, K, L] long
    target: object  # torch [B, K, L + 1, n]
    draft: object  # torch [B, K, L, n]
    without_replacement: bool
    distinct: tuple  # TreeNodes of each distinct tree
    inverse: np.ndarray  # [B]: which distinct tree each one is
    groups: tuple[int, ...]  # [K]: rows with equal labels share one draft law

    @property
    def drafting(self) -> str:
        """``"wor"``, ``"iid"`` or ``"independent"`` (as :meth:`TreeVerifier.tree_drafting`)."""
        return live_law_class(self.groups, self.without_replacement).name

    @property
    def structure(self) -> tuple:
        """The :class:`~multidraft.trees.TreeNodes` of every tree."""
        return tuple(self.distinct[i] for i in self.inverse)

    @property
    def size(self) -> int:
        return self.tokens.shape[0]

    @property
    def k(self) -> int:
        return self.tokens.shape[1]

    @property
    def length(self) -> int:
        return self.tokens.shape[2]


def check(tokens, target, draft, generator, without_replacement: bool, validate: bool = True, groups=None) -> TreeBatch:
    """Validate the batched inputs (ValueError naming the argument) and merge each tree;
    ``validate=False`` skips the per-row distribution check; ``groups``: K row labels (default
    one group)."""
    import torch

    from multidraft.schemes._torch import check_generator, check_sums

    check_generator(generator)
    if not isinstance(tokens, torch.Tensor) or tokens.ndim != 3 or tokens.dtype != torch.long:
        raise ValueError(f"tokens: expected a long tensor [B, K, L], got {getattr(tokens, 'shape', type(tokens).__name__)}")
    batch, k, length = tokens.shape
    if batch < 1 or k < 1 or length < 1:
        raise ValueError(f"tokens: expected B, K, L >= 1, got shape {tuple(tokens.shape)}")
    if not isinstance(target, torch.Tensor) or target.ndim != 4 or tuple(target.shape[:3]) != (batch, k, length + 1):
        raise ValueError(f"target: expected a tensor [B={batch}, K={k}, L+1={length + 1}, n], got {getattr(target, 'shape', None)}")
    n = target.shape[3]
    if not isinstance(draft, torch.Tensor) or tuple(draft.shape) != (batch, k, length, n):
        raise ValueError(f"draft: expected a tensor [B={batch}, K={k}, L={length}, n={n}], got {getattr(draft, 'shape', None)}")
    for name, values in (("target", target), ("draft", draft)):
        if not values.is_floating_point():
            raise ValueError(f"{name}: expected a floating tensor, got {values.dtype}")
        if not validate:
            continue
        check_sums(values, name, rows="a distribution's entries")
    if target.device != draft.device or tokens.device != target.device:
        raise ValueError("tokens, target, draft: expected one device")
    if int(tokens.min()) < 0 or int(tokens.max()) >= n:
        raise ValueError(f"tokens: token ids must lie in [0, {n})")
    if bool((draft.gather(3, tokens[..., None]) <= 0).any()):
        raise ValueError("tokens: a drafted token has draft probability zero")
    host = tokens.cpu().numpy()
    if without_replacement and any(len(set(row[:, 0].tolist())) != k for row in host):
        raise ValueError("tokens: drafts without replacement need K distinct first tokens in every tree")
    labels = (0,) * k if groups is None else tuple(groups)
    if len(labels) != k:
        raise ValueError(f"groups: expected {k} labels (one per row), got {len(labels)}")
    if without_replacement and len(set(labels)) > 1:
        raise ValueError("without_replacement: the first tokens come from one draft law; groups must be equal")
    distinct, inverse = np.unique(host.reshape(batch, -1), axis=0, return_inverse=True)
    merged = tuple(_merge(t.reshape(k, length)) for t in distinct)
    return TreeBatch(tokens, target, draft, bool(without_replacement), merged, inverse.reshape(-1), labels)


def host_rng(generator) -> np.random.Generator:
    """A numpy generator for the host parts of a batched run, seeded from ``generator``."""
    import torch

    return np.random.default_rng(int(torch.randint(0, 2**62, (1,), generator=generator, device=generator.device)))


def _sample(rows, generator):
    from multidraft.schemes._torch import sample_rows

    return sample_rows(rows.clone(), generator)


# ------------------------------------------------------------------------------------------


def host_batch(verifier, batch: TreeBatch, generator, rng: np.random.Generator | None = None) -> BatchVerification:
    """Run ``verifier.verify`` on each tree of the batch on the host (numpy views of CPU
    tensors; other devices are copied), with ``rng`` (default: seeded from ``generator``);
    the outcomes return to the inputs' device."""
    import torch

    rng = host_rng(generator) if rng is None else rng
    tokens = batch.tokens.cpu().numpy()
    target, draft = batch.target.double().cpu().numpy(), batch.draft.double().cpu().numpy()
    out = np.zeros((3, batch.size), dtype=np.int64)
    for b in range(batch.size):
        tree = DraftTree(
            tokens[b], target[b], draft[b], without_replacement=batch.without_replacement, groups=batch.groups, validate=False
        )
        run = verifier._verify(tree, rng)
        node = run[0]
        out[:, b] = tree.nodes.depth[node], tree.nodes.row[node], run[1]
    accepted, row, following = (torch.as_tensor(x, device=batch.tokens.device) for x in out)
    return BatchVerification(accepted, row, following)


def shaped_batch(verifier, trees, generator, rng: np.random.Generator | None = None) -> BatchVerification:
    """Trees drafted by a shape (:class:`~multidraft.trees.ShapedTree`, checked by the caller),
    one per block on the host: ``verifier``'s own run (``_verify``, as :meth:`TreeVerifier.verify`)
    on each, with ``rng`` (default: seeded from ``generator``); ``row`` holds the accepted node.
    The outcomes go to ``generator``'s device.

    A per-block path rather than a lockstep kernel: trees of a shape differ in structure from
    block to block (iid merging, dynamic expansion), and decoding builds each block's ShapedTree
    on the host anyway, since every verifier's exact ``E[τ | tree]`` is scored on it, so the run
    adds no transfer. ``tests/test_trees_decoding_shapes.py`` checks its outcomes against
    :meth:`TreeVerifier.law` by sampling (with a broken twin)."""
    import torch

    from multidraft.schemes._torch import check_generator

    check_generator(generator)
    rng = host_rng(generator) if rng is None else rng
    out = np.zeros((3, len(trees)), dtype=np.int64)
    for b, tree in enumerate(trees):
        node, following = verifier._verify(tree, rng)
        out[:, b] = tree.nodes.depth[node], node, following
    accepted, node, following = (torch.as_tensor(x, device=generator.device) for x in out)
    return BatchVerification(accepted, node, following)


def block_batch(batch: TreeBatch, generator) -> BatchVerification:
    """Block verification of B single drafts at once (Sun et al. 2025, Algorithm 2)."""
    import torch

    from multidraft.schemes._torch import uniforms

    x = batch.tokens[:, 0]  # [B, L]
    target, draft = batch.target[:, 0], batch.draft[:, 0]  # [B, L+1, n], [B, L, n]
    size, length = x.shape
    ratio = target[:, :length].gather(2, x[..., None])[..., 0] / draft.gather(2, x[..., None])[..., 0]
    p = [torch.ones(size, dtype=target.dtype, device=target.device)]
    for i in range(length):
        p.append(torch.clamp(p[-1] * ratio[:, i], max=1.0))
    p = torch.stack(p, dim=1)  # [B, L+1]
    weights = (p[:, :length, None] * target[:, :length] - draft).clamp_min_(0)  # [p_i M_b - M_s]_+
    z = weights.sum(dim=-1)  # Z_{i+1}, i = 0..L-1
    denominator = z + 1 - p[:, :length]
    h = torch.where(denominator > 0, z / torch.where(denominator > 0, denominator, 1.0), p[:, :length])
    h = torch.cat([h[:, 1:], p[:, length:]], dim=1)  # h_1..h_L
    accept = uniforms((size, length), target, generator) <= h
    steps = torch.arange(1, length + 1, device=x.device)
    tau = (accept * steps).amax(dim=1)  # max{i : η_i <= h_i}, 0 if none
    rows = torch.where(
        (tau < length)[:, None],
        torch.where(
            (z.gather(1, tau.clamp(max=length - 1)[:, None]) > 0),
            weights.gather(1, tau.clamp(max=length - 1)[:, None, None].expand(-1, 1, weights.shape[2]))[:, 0],
            target.gather(1, tau[:, None, None].expand(-1, 1, target.shape[2]))[:, 0],
        ),
        target[:, length],
    )
    return BatchVerification(tau, torch.zeros_like(tau), _sample(rows, generator))


# ------------------------------------------------------------------------------------------


def _schedule(nodes) -> list[tuple[int, int]]:
    """Traversal's events for one tree: ``(kind, node)``; ENTER computes a child's p_α from
    its parent, TEST tests a node after its subtree (the root last)."""
    events: list[tuple[int, int]] = []

    def visit(node: int) -> None:
        for child in nodes.children[node]:
            events.append((_ENTER, child))
            visit(child)
            events.append((_TEST, child))

    visit(0)
    events.append((_TEST, 0))
    return events


def traversal_batch(batch: TreeBatch, generator) -> BatchVerification:
    """Traversal verification of B trees in lockstep (the algorithm of
    :class:`~multidraft.trees.Traversal`, same updates, same tie rules)."""
    import torch

    from multidraft.schemes._torch import uniforms

    target, draft = batch.target, batch.draft
    device, dtype = target.device, target.dtype
    size, k, length, n = batch.size, batch.k, batch.length, target.shape[3]
    schedules = [_schedule(nodes) for nodes in batch.distinct]
    steps = max(len(s) for s in schedules)
    # Host tables [steps, B]: event kind, depth, row of the node, its token (per distinct tree).
    tables = np.zeros((4, steps, len(schedules)), dtype=np.int64)
    for i, (schedule, nodes) in enumerate(zip(schedules, batch.distinct)):
        for t, (event, node) in enumerate(schedule):
            tables[:, t, i] = event, nodes.depth[node], nodes.row[node], nodes.token[node]
    kind, depth, row, token = tables[:, :, batch.inverse]
    to = lambda a: torch.as_tensor(a, device=device)  # noqa: E731
    kind, depth, row, token = to(kind), to(depth), to(row), to(token)
    every = torch.arange(size, device=device)
    draft_sums = draft.sum(dim=-1)  # [B, K, L]

    # State of the nodes on the current path, by depth.
    weights = torch.zeros((size, length + 1, n), dtype=dtype, device=device)  # M_b numerators
    fresh = torch.ones((size, length + 1), dtype=torch.bool, device=device)  # M_b = target row
    mass = torch.ones((size, length + 1), dtype=dtype, device=device)
    budget = torch.ones((size, length + 1), dtype=dtype, device=device)  # p_α
    path_row = torch.zeros((size, length + 1), dtype=torch.long, device=device)
    left = torch.ones((size, length + 1), dtype=dtype, device=device)  # M_s mass not removed
    removed = torch.full((size, length + 1, k), -1, dtype=torch.long, device=device)
    removed_count = torch.zeros((size, length + 1), dtype=torch.long, device=device)
    left[:, :length] = draft_sums[:, 0]
    done = torch.zeros(size, dtype=torch.bool, device=device)
    accepted_depth = torch.zeros(size, dtype=torch.long, device=device)
    accepted_row = torch.zeros(size, dtype=torch.long, device=device)
    eta = uniforms((steps, size), target, generator)

    def residual_weights(b, d):
        """M_b numerators at depth d of trees b: the stored residual, or the target row."""
        stored = weights[b, d]
        return torch.where(fresh[b, d][:, None], target[b, path_row[b, d], d], stored)

    for t in range(steps):
        if bool(done.all()):
            break
        enter = (kind[t] == _ENTER) & ~done
        if bool(enter.any()):
            b = every[enter]
            d = depth[t, b]
            parent, x = d - 1, token[t, b]
            w_x = torch.where(fresh[b, parent], target[b, path_row[b, parent], parent, x], weights[b, parent, x])
            q_x = draft[b, path_row[b, parent], parent, x]
            draft_left = torch.maximum(left[b, parent], q_x)  # cancellation guard: the child is there
            budget[b, d] = torch.clamp(budget[b, parent] * w_x * draft_left / (mass[b, parent] * q_x), max=1.0)
            path_row[b, d] = row[t, b]
            fresh[b, d] = True
            mass[b, d] = 1.0
            removed_count[b, d] = 0
            removed[b, d] = -1
            inner = d < length
            left[b[inner], d[inner]] = draft_sums[b[inner], row[t, b[inner]], d[inner]]
        test = (kind[t] == _TEST) & ~done
        if not bool(test.any()):
            continue
        b = every[test]
        d = depth[t, b]
        accept = eta[t, b] < budget[b, d]
        done[b[accept]] = True
        accepted_depth[b[accept]] = d[accept]
        accepted_row[b[accept]] = row[t, b[accept]]
        reject = ~accept
        if not bool(reject.any()):
            continue
        # Rejected children: the update at their parents (depth >= 1: the root never fails).
        b, d, x = b[reject], d[reject] - 1, token[t, b[reject]]
        source = residual_weights(b, d)
        q = draft[b, path_row[b, d], d]
        q_x = q.gather(1, x[:, None])[:, 0]
        draft_left = torch.maximum(left[b, d], q_x)  # the rejected child was still there
        scale_w = budget[b, d] / mass[b, d]
        new = (scale_w[:, None] * source - q / draft_left[:, None]).clamp_min_(0)
        for j in range(k):  # tokens removed earlier have M_s = 0 at this node
            present = removed_count[b, d] > j
            if not bool(present.any()):
                break
            r, slot = torch.nonzero(present)[:, 0], removed[b[present], d[present], j]
            new[r, slot] = (scale_w[r] * source[r, slot]).clamp_min(0)
        total = new.sum(dim=1)
        old = budget[b, d]
        denominator = total + 1 - old
        budget[b, d] = torch.where(denominator > 0, total / torch.where(denominator > 0, denominator, 1.0), old)
        keep = total > 0
        weights[b[keep], d[keep]] = new[keep]
        fresh[b[keep], d[keep]] = False
        mass[b[keep], d[keep]] = total[keep]
        removed[b, d, removed_count[b, d]] = x
        removed_count[b, d] += 1
        left[b, d] = draft_left - q_x
    rows = residual_weights(every, accepted_depth)
    return BatchVerification(accepted_depth, accepted_row, _sample(rows, generator))
