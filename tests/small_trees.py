"""A small tree shape shared by the tree-walk tests: a root drafting 3 distinct tokens, each of
its children 2 (10 nodes, the 6 grandchildren leaves)."""

from __future__ import annotations

import numpy as np


def three_two_draws(rng: np.random.Generator, n: int, draft: np.ndarray | None = None) -> tuple[list[int], list[int], list[tuple[int, ...]]]:
    """``(parent, token, draws)`` of :class:`~multidraft.trees.ShapedTree` for the shape above:
    node ``v``'s children drawn without replacement from ``draft[v]`` (uniformly where ``draft``
    is None), the root's first, then its children's in order."""
    def drawn(node: int, count: int) -> tuple[int, ...]:
        return tuple(int(t) for t in rng.choice(n, count, replace=False, p=None if draft is None else draft[node]))

    root = drawn(0, 3)
    parent, token, draws = [-1, 0, 0, 0], [-1, *root], [root]
    for child in range(1, 4):
        draws.append(drawn(child, 2))
        parent += [child, child]
        token += list(draws[-1])
    return parent, token, draws + [()] * 6
