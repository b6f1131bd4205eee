"""64-node draft trees at a real vocabulary for the tree-speed benchmark (issue 30, item 5).

After each prefix u the target is a Zipf law (exponent 1.1, tokens shuffled; as
:func:`multidraft.theory.zipf` builds them) and the draft a hotter, noisier copy,
``softmax((log p_u + 0.5 ε_u) / 1.2)``, both seeded by the prefix so that rows sharing a prefix
share its distributions. Trees:

* ``chains(8, 8)`` -- 8 iid rows of 8 tokens (a :class:`~multidraft.trees.DraftTree`, 64 drafted
  tokens);
* ``expansion([8, 7])`` -- 64 nodes, drafted iid or without replacement at every node;
* ``dynamic(64, 8)`` -- EAGLE-2-style: the 64 prefixes of largest draft path probability among
  each node's top-2 draft tokens (depth <= 8), drafted top-k at every node; the same parent
  array drafted without replacement (``static-64``) for the verifiers that refuse top-k.
"""

from __future__ import annotations

import hashlib
import heapq

import numpy as np

from multidraft.theory import softmax, zipf
from multidraft.trees import DraftTree
from multidraft.trees.shaped import ShapedTree


class Tables:
    """Prefix-seeded target and draft distributions over ``n`` tokens (module docstring)."""

    def __init__(self, n: int, seed: int) -> None:
        self.n, self.seed, self._cache = n, seed, {}

    def __call__(self, prefix: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
        if prefix not in self._cache:
            digest = hashlib.blake2b(repr((self.seed, prefix)).encode(), digest_size=8).digest()
            rng = np.random.default_rng(int.from_bytes(digest, "little"))
            p = zipf(self.n, exponent=1.1, rng=rng)
            q = softmax((np.log(p) + 0.5 * rng.standard_normal(self.n)) / 1.2)
            self._cache[prefix] = (p, q)
        return self._cache[prefix]


def chains(n: int, k: int, length: int, seed: int) -> DraftTree:
    """K iid rows of length L drafted from :class:`Tables`."""
    at, rng = Tables(n, seed), np.random.default_rng(seed)
    tokens = np.zeros((k, length), dtype=np.int64)
    for row in range(k):
        for d in range(length):
            tokens[row, d] = rng.choice(n, p=at(tuple(tokens[row, :d].tolist()))[1])
    target = np.array([[at(tuple(tokens[r, :d].tolist()))[0] for d in range(length + 1)] for r in range(k)])
    draft = np.array([[at(tuple(tokens[r, :d].tolist()))[1] for d in range(length)] for r in range(k)])
    return DraftTree(tokens, target, draft, validate=False)


def _draw(q: np.ndarray, k: int, law: str, rng: np.random.Generator) -> tuple[int, ...]:
    if law == "iid":
        return tuple(int(t) for t in rng.choice(len(q), size=k, p=q))
    if law == "without-replacement":
        keys = np.log(q) + rng.gumbel(size=len(q))
        return tuple(int(t) for t in np.argsort(-keys)[:k])
    return tuple(int(t) for t in np.argsort(-q, kind="stable")[:k])


def shaped(n: int, slots: tuple[tuple[int, ...], ...], law: str, seed: int) -> ShapedTree:
    """A tree drafted node by node from :class:`Tables` by ``law``: slot j drafts
    ``len(slots[j])`` tokens and a distinct drawn token's subtree follows the slot of its first
    draw (as :func:`multidraft.trees.shape_trees`)."""
    at, rng = Tables(n, seed), np.random.default_rng(seed)
    parent, token, draws, paths, slot_of = [-1], [-1], [], [()], [0]
    v = 0
    while v < len(parent):  # breadth first: node ids grow with depth
        prefix, widths = paths[v], slots[slot_of[v]]
        drawn = _draw(at(prefix)[1], len(widths), law, rng) if widths else ()
        draws.append(drawn)
        first: dict[int, int] = {}
        for j, t in enumerate(drawn):
            first.setdefault(t, widths[j])
        for t, child in first.items():
            parent.append(v)
            token.append(t)
            paths.append(prefix + (t,))
            slot_of.append(child)
        v += 1
    target = np.array([at(p)[0] for p in paths])
    draft = np.array([at(p)[1] for p in paths])
    return ShapedTree(parent, token, draws, target, draft, law)


def dynamic_slots(n: int, seed: int, budget: int = 64, depth: int = 8) -> tuple[tuple[int, ...], ...]:
    """The parent array (as child slots per slot) of the EAGLE-2-style expansion on
    :class:`Tables`: best-first by draft path probability over each node's top-2 draft tokens,
    ``budget`` nodes of depth <= ``depth``."""
    at = Tables(n, seed)
    heap = [(-float(q), 1, (t,), 0) for q, t in _top2(at(())[1])]
    heapq.heapify(heap)
    slots: list[list[int]] = [[]]
    slot_of: dict[tuple, int] = {(): 0}
    while heap and len(slots) <= budget:
        negative, length, prefix, up = heapq.heappop(heap)
        slot_of[prefix] = len(slots)
        slots[up].append(len(slots))
        slots.append([])
        if length < depth:
            for q, t in _top2(at(prefix)[1]):
                heapq.heappush(heap, (negative * float(q), length + 1, prefix + (t,), slot_of[prefix]))
    return tuple(map(tuple, slots))


def _top2(q: np.ndarray) -> list[tuple[float, int]]:
    top = np.argsort(-q, kind="stable")[:2]
    return [(float(q[t]), int(t)) for t in top]
