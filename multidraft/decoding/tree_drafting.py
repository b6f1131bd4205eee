"""Decoding with a draft tree of any :class:`~multidraft.trees.TreeShape` (issue 30, item 1):
one batched draft forward per depth, one target forward over the whole tree, the block
verified as a :class:`~multidraft.trees.ShapedTree` built from the very distributions the
tokens were drawn from.

**Per-branch cache rows** (the layout :mod:`multidraft.decoding.state` uses for chains). The
draft's forward at depth d feeds the tokens of the depth-d nodes that draft children, one cache
row each, ``[F_d, 1]`` (the root feeds the pending tokens, ``[1, P]``); before it, the cache
rows are re-selected so that row i holds node i's parent's path
(:meth:`~multidraft.decoding.state.ModelState.select_rows`). Node v then drafts its children
from ``q(· | v)`` by the shape's law, for all nodes of the depth at once:

* ``"iid"`` -- ``k_v`` independent draws (one inverse-CDF uniform each), merged by first
  appearance; a child's subtree follows the slot of its first draw;
* ``"without-replacement"`` -- Gumbel-top-``k_v`` (successive sampling; Vieira 2014, Kool et
  al. 2019), tokens of draft probability zero left out;
* ``"top-k"`` -- the ``k_v`` most likely tokens (ties: lower id), probability zero left out.

A dynamic shape (EAGLE-2, Li et al. 2024) keeps the ``budget`` candidates of largest draft path
probability ``Q(u) = Π q(u_i | u_<i)`` among every node's ``branching`` most likely children
(ties: the shorter, then the smaller sibling ranks, as :meth:`TreeShape.dynamic`). Since Q
decreases along a path, a node kept in the end ranks within ``budget`` among the candidates
known at its depth, so the forward of depth d feeds exactly the depth-d candidates that rank
within ``budget`` so far (a superset of the kept inner nodes: one forward per depth, no second
pass).

The target feeds every leaf's path in one forward ``[R, P + D]`` (R leaves, D the depth; short
paths padded, whose padding no query of the path attends to), and p(· | v) is read at a leaf
below v. After verification both caches keep a row through the accepted node: the target's
the leaf's, cut after the accepted path; the draft's the final row through the deepest fed
ancestor of the accepted node, the rest of the path becoming pending tokens.

Static caches (``compile=True``) hold a fixed number of rows and are refused for tree shapes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from multidraft.decoding.drafting import Sampling, process_logits, sample_tokens, sample_without_replacement
from multidraft.decoding.state import ModelState
from multidraft.trees import ShapedTree, TreeShape

__all__ = ["TreeDraft", "draft_tree", "tree_targets", "tree_commits"]


@dataclass(frozen=True)
class TreeDraft:
    """A drafted tree (nodes numbered so that ``parent[v] < v``, root 0).

    Attributes
    ----------
    parent, token, draws : tuples
        As :class:`~multidraft.trees.ShapedTree`'s (``token[0] = -1``; ``draws[v]`` the tokens
        v drew, in draw order).
    draft : torch.Tensor, shape [m, V], float64
        ``q(· | v)`` at every node that drafted (its children were drawn from this row); zeros
        at the other nodes.
    law : str
        The shape's per-node law.
    cache_row : tuple of int
        For each node, the row of the draft cache (after drafting) whose fed path contains it,
        or -1.
    """

    parent: tuple[int, ...]
    token: tuple[int, ...]
    draws: tuple[tuple[int, ...], ...]
    draft: torch.Tensor
    law: str
    cache_row: tuple[int, ...]

    @property
    def depth(self) -> np.ndarray:
        """Depth of every node ``[m]``."""
        depth = np.zeros(len(self.parent), dtype=np.int64)
        for v in range(1, len(self.parent)):
            depth[v] = depth[self.parent[v]] + 1
        return depth

    def path(self, node: int) -> list[int]:
        """The tokens from the root's child down to ``node``."""
        out = []
        while node > 0:
            out.append(self.token[node])
            node = self.parent[node]
        return out[::-1]

    def leaf_below(self) -> np.ndarray:
        """For every node, one leaf of its subtree (itself at a leaf) ``[m]``."""
        below = np.arange(len(self.parent))
        for v in range(len(self.parent) - 1, 0, -1):  # a child (larger id) is settled before its parent
            if below[self.parent[v]] == self.parent[v]:
                below[self.parent[v]] = below[v]
        return below

    def shaped(self, target: torch.Tensor) -> ShapedTree:
        """The block as a :class:`~multidraft.trees.ShapedTree` on the host in float64, with
        ``target [m, V]`` (:func:`tree_targets`); a node that drafted nothing gets its target
        row as draft row (never read)."""
        inner = torch.tensor([bool(d) for d in self.draws], device=self.draft.device)
        draft = torch.where(inner[:, None], self.draft, target)
        return ShapedTree(self.parent, self.token, self.draws, target.cpu().numpy(), draft.cpu().numpy(), self.law)


def _iid(q: torch.Tensor, widths: list[int], generator: torch.Generator) -> list[tuple[int, ...]]:
    """``widths[f]`` independent draws from row f of ``q``, one inverse-CDF uniform each."""
    index = torch.repeat_interleave(torch.arange(len(widths), device=q.device), torch.tensor(widths, device=q.device))
    drawn = sample_tokens(q[index], generator).tolist()  # [Σ widths]
    starts = np.cumsum([0, *widths])
    return [tuple(drawn[starts[f] : starts[f + 1]]) for f in range(len(widths))]


def _first(q: torch.Tensor, order: torch.Tensor, widths: list[int]) -> list[tuple[int, ...]]:
    """Row f's first ``widths[f]`` tokens of ``order [F, ≥ widths]``, probability zero left out."""
    positive = (q.gather(1, order) > 0).tolist()
    order = order.tolist()
    return [tuple(t for t, keep in zip(order[f][: widths[f]], positive[f]) if keep) for f in range(len(widths))]


def _without_replacement(q: torch.Tensor, widths: list[int], generator: torch.Generator) -> list[tuple[int, ...]]:
    """Gumbel-top-``widths[f]`` of row f (a prefix of the row's Gumbel order is its top-k)."""
    return _first(q, sample_without_replacement(q, max(widths), generator), widths)


def _top_k(q: torch.Tensor, widths: list[int], generator: torch.Generator) -> list[tuple[int, ...]]:
    """The ``widths[f]`` most likely tokens of row f (ties: lower id first)."""
    return _first(q, torch.sort(q, dim=-1, descending=True, stable=True).indices[:, : max(widths)], widths)


#: How the F nodes of a depth draw their tuples from their rows of q, per shape law.
_DRAW = {"iid": _iid, "without-replacement": _without_replacement, "top-k": _top_k}


def _children(q: torch.Tensor, widths: list[int], law: str, generator: torch.Generator) -> list[tuple[int, ...]]:
    """The tuple each of F nodes draws from its row of ``q [F, V]``: ``widths[f]`` tokens by
    ``law`` (:data:`_DRAW`, module docstring), for all F nodes in one batched call."""
    return _DRAW[law](q, widths, generator)


class _Growth:
    """The nodes drafted so far (creation order: parents before children, siblings in draw
    order) and how the shape grows them."""

    def __init__(self, shape: TreeShape) -> None:
        self.shape = shape
        self.parent, self.token, self.draws = [-1], [-1], [()]
        self.children: list[list[int]] = [[]]
        self.depth, self.slot = [0], [0]  # static shapes: each node's slot
        self.key: list[tuple] = [(-1.0, 0, ())]  # dynamic shapes: (-Q, depth, sibling ranks)

    def width(self, node: int) -> int:
        """Tokens ``node`` drafts."""
        return self.shape.k if self.shape.family == "dynamic" else len(self.shape.slots[self.slot[node]])

    def add(self, node: int, drawn: tuple[int, ...], q: list[float]) -> list[int]:
        """Record ``node``'s draws (``q``: their draft probabilities) and create its children
        (distinct draws, first appearance first); returns them."""
        self.draws[node] = drawn
        mass, depth, ranks = self.key[node]
        for j, t in enumerate(dict.fromkeys(drawn)):
            child = len(self.parent)
            self.children[node].append(child)
            self.parent.append(node)
            self.token.append(int(t))
            self.draws.append(())
            self.children.append([])
            self.depth.append(depth + 1)
            self.key.append((mass * q[j], depth + 1, (*ranks, j)))
            self.slot.append(0 if self.shape.family == "dynamic" else self.shape.slots[self.slot[node]][drawn.index(t)])
        return self.children[node]

    def best(self) -> set[int]:
        """Dynamic shapes: the ``budget`` best non-root nodes so far."""
        return set(sorted(range(1, len(self.parent)), key=self.key.__getitem__)[: self.shape.budget])

    def feeds(self, nodes: list[int]) -> list[int]:
        """Which of the new ``nodes`` draft children (and so are fed at their depth)."""
        if self.shape.family != "dynamic":
            return [v for v in nodes if self.shape.slots[self.slot[v]]]
        best = self.best()
        return [v for v in nodes if v in best and self.depth[v] < self.shape.length]

    def kept(self) -> list[int]:
        """The nodes of the tree, in creation order: all, or the budget's best (dynamic)."""
        if self.shape.family != "dynamic":
            return list(range(len(self.parent)))
        return sorted({0, *self.best()})


@torch.inference_mode()
def draft_tree(state: ModelState, sampling: Sampling, shape: TreeShape, generator: torch.Generator) -> TreeDraft:
    """Draft one tree of ``shape`` (not chains: :func:`~multidraft.decoding.draft_block`) from
    the draft's ``state``: one batched forward per depth (module docstring), the draft
    distributions processed by ``sampling``."""
    if shape.family == "chains":
        raise ValueError("shape: chains are drafted by draft_block (K rows of length L)")
    law = "top-k" if shape.family == "dynamic" else shape.law
    grow = _Growth(shape)
    rows: dict[int, torch.Tensor] = {}
    frontier, inputs, fed = [0], state.pending_rows(1), {0: 0}
    while frontier:
        if frontier[0] != 0:  # depth >= 1: each node takes its parent's cache row
            state.select_rows([fed[grow.parent[v]] for v in frontier])
            inputs = torch.tensor([[grow.token[v]] for v in frontier], device=state.loaded.device)  # [F, 1]
        q = process_logits(state.forward(inputs)[:, -1, :], sampling.temperature, sampling.top_p)  # [F, V]
        drawn = _children(q, [grow.width(v) for v in frontier], law, generator)
        made = []
        for f, v in enumerate(frontier):
            rows[v] = q[f]
            made += grow.add(v, drawn[f], q[f, list(drawn[f])].tolist())
        fed = {v: f for f, v in enumerate(frontier)}
        frontier = grow.feeds(made)
    cache_row: dict[int, int] = {}
    for v, row in fed.items():  # the rows of the last forward, and every node on their paths
        while v >= 0 and v not in cache_row:
            cache_row[v] = row
            v = grow.parent[v]
    kept = grow.kept()
    new = {v: i for i, v in enumerate(kept)}
    draft = torch.zeros((len(kept), rows[0].shape[0]), dtype=torch.float64, device=rows[0].device)
    draws = []
    for i, v in enumerate(kept):
        draws.append(tuple(grow.token[c] for c in grow.children[v] if c in new) if law == "top-k" else grow.draws[v])
        if draws[-1]:
            draft[i] = rows[v]
    return TreeDraft(
        tuple(new[grow.parent[v]] if v else -1 for v in kept),
        tuple(grow.token[v] for v in kept),
        tuple(draws),
        draft,
        law,
        tuple(cache_row.get(v, -1) for v in kept),
    )


@torch.inference_mode()
def tree_targets(state: ModelState, tree: TreeDraft, sampling: Sampling) -> tuple[torch.Tensor, np.ndarray]:
    """Target distributions at every node, ``p [m, V]`` float64, in one forward over the
    leaves' paths ``[R, P + D]``, and for every node the target cache row (a leaf below it)."""
    below = tree.leaf_below()
    leaves = sorted(set(below.tolist()))
    depth = tree.depth
    width = int(depth.max())
    paths = [tree.path(leaf) for leaf in leaves]
    padded = [path + [path[-1]] * (width - len(path)) for path in paths]
    pending = len(state.pending)
    inputs = torch.cat(
        [state.pending_rows(len(leaves)), torch.tensor(padded, dtype=torch.long, device=state.loaded.device)], dim=1
    )  # [R, P + D]
    logits = state.forward(inputs)  # [R, P + D, V]
    row = np.searchsorted(leaves, below)
    at = torch.as_tensor(row, device=logits.device), torch.as_tensor(pending - 1 + depth, device=logits.device)
    return process_logits(logits[at], sampling.temperature, sampling.top_p), row


def tree_commits(tree: TreeDraft, node: int, next_token: int) -> tuple[int, int, list[int]]:
    """How the draft cache keeps the accepted ``node``: ``(row, fed depth kept, pending
    tokens)`` -- the final row through its deepest fed ancestor a, cut after a's path; the rest
    of the accepted path and ``next_token`` become pending."""
    ancestor = node
    while tree.cache_row[ancestor] < 0:
        ancestor = tree.parent[ancestor]
    kept = len(tree.path(ancestor))
    return tree.cache_row[ancestor], kept, tree.path(node)[kept:] + [next_token]
