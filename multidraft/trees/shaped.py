"""A draft tree drafted node by node with a per-node law (:class:`ShapedTree`), and every such
tree of a small sequence model with its probability (:func:`shape_trees`).

Where :class:`~multidraft.trees.DraftTree` holds rows (K draft sequences), a shaped tree holds
nodes: node v drew the tuple ``draws[v]`` of k_v tokens from q(· | v) by the shape's law
(:mod:`multidraft.trees.shape`), and its children are the distinct drawn tokens in order of
first appearance. Leaves may sit at any depth; the target is given after every node (at a leaf:
the bonus token's law). The token walk reads each node's tuple and law
(:meth:`ShapedTree.node_draws`): ``IID(q_v, k_v)``, ``WithoutReplacement(q_v, k_v)`` or, for
top-k, ``Deterministic(draws[v], n)``.
"""

from __future__ import annotations

import functools
import heapq
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from multidraft.theory.laws import SizeEstimate, check_size
from multidraft.trees.model import TREE_LIMIT, SequenceModel
from multidraft.trees.shape import TreeShape
from multidraft.trees.tree import DraftTree, TreeNodes

__all__ = ["ShapedTree", "shape_trees", "shape_tree_count", "shape_classes", "as_shape", "top_k", "NODE_LAW"]

#: The law kind (:func:`~multidraft.theory.laws.law_for` name) of a node's tuple per shape law.
NODE_LAW = {"iid": "iid", "without-replacement": "wor", "top-k": "deterministic"}


def top_k(draft: np.ndarray, k: int) -> tuple[int, ...]:
    """The ``k`` most likely tokens of ``draft`` in decreasing order (ties: lower id first),
    tokens of probability zero left out: the top-k law's tuple."""
    ranked = np.argsort(-np.asarray(draft), kind="stable")[:k]  # stable: ties keep the lower id first
    return tuple(int(t) for t in ranked if draft[t] > 0)


@dataclass(frozen=True, eq=False)
class ShapedTree:
    """One draft tree drafted node by node (module docstring).

    Parameters
    ----------
    parent : sequence of m ints
        ``parent[0] = -1`` (the root), ``0 <= parent[v] < v`` otherwise.
    token : sequence of m ints
        Each node's last token (ignored at the root).
    draws : sequence of m tuples
        ``draws[v]``: the tokens node v drew, in draw order (empty at a leaf); its distinct
        tokens in order of first appearance must be v's children's tokens in order.
    target : array_like [m, n]
        p(· | node) after every node.
    draft : array_like [m, n]
        q(· | node) (rows of leaves are not read).
    law : str
        The shape law, one of :data:`multidraft.trees.shape.LAWS`.

    Raises
    ------
    ValueError
        Naming the argument: inconsistent parents, tokens or draws; a drawn token of draft
        probability zero; repeated draws without replacement; top-k draws that are not the top
        k tokens.

    Examples
    --------
    >>> import numpy as np
    >>> p = np.full((3, 2), 0.5)
    >>> tree = ShapedTree([-1, 0, 0], [-1, 1, 0], [(1, 1, 0), (), ()], p, p, "iid")
    >>> tree.nodes.children, tree.node_draws(0)[2].tolist()
    (((1, 2), (), ()), [1, 1, 0])
    """

    parent: tuple[int, ...]
    token: tuple[int, ...]
    draws: tuple[tuple[int, ...], ...]
    target: np.ndarray
    draft: np.ndarray
    law: str

    def __post_init__(self) -> None:
        from multidraft.trees.shape import LAWS

        if self.law not in LAWS:
            raise ValueError(f"law: unknown {self.law!r}; choose one of {', '.join(LAWS)}")
        parent = tuple(int(v) for v in self.parent)
        m = len(parent)
        token = tuple(int(v) for v in self.token)
        draws = tuple(tuple(int(t) for t in d) for d in self.draws)
        if m < 1 or parent[0] != -1 or any(not 0 <= parent[v] < v for v in range(1, m)):
            raise ValueError("parent: expected parent[0] = -1 and 0 <= parent[v] < v for every other node")
        if len(token) != m or len(draws) != m:
            raise ValueError(f"token, draws: expected {m} entries (one per node), got {len(token)} and {len(draws)}")
        exact = np.asarray(self.target).dtype == object
        target = np.asarray(self.target, dtype=object if exact else np.float64)
        draft = np.asarray(self.draft, dtype=object if exact else np.float64)
        if target.ndim != 2 or target.shape[0] != m or draft.shape != target.shape:
            raise ValueError(f"target, draft: expected arrays [{m}, n] of one shape, got {target.shape} and {draft.shape}")
        n = target.shape[1]
        children: list[list[int]] = [[] for _ in range(m)]
        for v in range(1, m):
            children[parent[v]].append(v)
        for v in range(m):
            distinct = tuple(dict.fromkeys(draws[v]))
            if distinct != tuple(token[c] for c in children[v]):
                raise ValueError(f"draws: node {v}'s distinct draws {distinct} are not its children's tokens in order")
            if any(not 0 <= t < n for t in draws[v]):
                raise ValueError(f"draws: token ids must lie in [0, {n})")
            if any(draft[v][t] <= 0 for t in draws[v]):
                raise ValueError(f"draws: node {v} drew a token of draft probability zero")
            if self.law == "without-replacement" and len(distinct) != len(draws[v]):
                raise ValueError(f"draws: node {v} repeats a token in a tree drafted without replacement")
            if self.law == "top-k" and draws[v] and draws[v] != top_k(draft[v], len(draws[v])):
                raise ValueError(f"draws: node {v}'s draws {draws[v]} are not the top-{len(draws[v])} tokens of its draft")
        object.__setattr__(self, "parent", parent)
        object.__setattr__(self, "token", token)
        object.__setattr__(self, "draws", draws)
        object.__setattr__(self, "target", target)
        object.__setattr__(self, "draft", draft)

    @property
    def n(self) -> int:
        """Vocabulary size."""
        return self.target.shape[1]

    @property
    def exact(self) -> bool:
        """Whether the distributions are Fractions."""
        return self.target.dtype == object

    @property
    def k(self) -> int:
        """Tokens drawn at the root."""
        return len(self.draws[0])

    @property
    def length(self) -> int:
        """Largest depth."""
        return int(self.nodes.depth.max())

    @functools.cached_property
    def nodes(self) -> TreeNodes:
        """The node structure (:class:`~multidraft.trees.TreeNodes`; ``index`` holds no rows)."""
        m = len(self.parent)
        depth = np.zeros(m, dtype=np.int64)
        children: list[list[int]] = [[] for _ in range(m)]
        for v in range(1, m):
            depth[v] = depth[self.parent[v]] + 1
            children[self.parent[v]].append(v)
        return TreeNodes(
            np.zeros((0, int(depth.max()) + 1), dtype=np.int64),
            np.array(self.parent, dtype=np.int64),
            depth,
            np.array(self.token, dtype=np.int64),
            np.zeros(m, dtype=np.int64),
            tuple(map(tuple, children)),
            np.array([len(d) for d in self.draws], dtype=np.int64),
        )

    def target_at(self, node: int) -> np.ndarray:
        """p(· | prefix of ``node``) ``[n]``."""
        return self.target[node]

    def draft_at(self, node: int) -> np.ndarray:
        """q(· | prefix of ``node``) ``[n]``, the law ``node``'s children were drafted from."""
        if not self.draws[node]:
            raise ValueError(f"node: {node} is a leaf; nothing was drafted after it")
        return self.draft[node]

    def node_law_kind(self, node: int) -> tuple[str, int]:
        """``(law kind, k_v)`` at an inner ``node``, without copying distributions."""
        return NODE_LAW[self.law], len(self.draws[node])

    def node_draws(self, node: int) -> tuple[str, np.ndarray, np.ndarray]:
        """``(law kind, drafts [k_v, n], drawn tokens [k_v])`` at an inner ``node``: the law of
        the tuple it drew (:data:`NODE_LAW`) and the tuple."""
        drawn = self.draws[node]
        # one shared row: a read-only view, not k_v copies of a 10⁵-token row
        drafts = np.broadcast_to(self.draft_at(node), (len(drawn), self.n))
        return NODE_LAW[self.law], drafts, np.array(drawn, dtype=np.int64)

    @property
    def drafting(self) -> str:
        """``"shape:<law>"``: how the tree was drafted (:meth:`TreeVerifier.tree_drafting`)."""
        return f"shape:{self.law}"


# -- every tree of a shape on a small sequence model ----------------------------------------


def _top_k_draws(q: np.ndarray, k: int, support: list[int], one) -> Iterator[tuple[tuple[int, ...], object]]:
    yield top_k(q, k), one


def _iid_draws(q: np.ndarray, k: int, support: list[int], one) -> Iterator[tuple[tuple[int, ...], object]]:
    for combo in itertools.product(support, repeat=k):
        prob = one
        for t in combo:
            prob = prob * q[t]
        yield combo, prob


def _wor_draws(q: np.ndarray, k: int, support: list[int], one) -> Iterator[tuple[tuple[int, ...], object]]:
    for combo in itertools.permutations(support, min(k, len(support))):
        prob, left = one, one
        for t in combo:
            prob, left = prob * q[t] / left, left - q[t]
        yield combo, prob


#: Every tuple a node drafting k tokens from q can draw, with its probability, per shape law:
#: iid Π q; without replacement, successive sampling of min(k, |supp q|); top-k, the one tuple.
_DRAWS = {"iid": _iid_draws, "without-replacement": _wor_draws, "top-k": _top_k_draws}


def _draws(q: np.ndarray, k: int, law: str, one) -> Iterator[tuple[tuple[int, ...], object]]:
    """Every tuple node drafting ``k`` tokens from ``q`` by ``law`` can draw (:data:`_DRAWS`)."""
    return _DRAWS[law](q, k, [t for t in range(len(q)) if q[t] > 0], one)


def _subtrees(model: SequenceModel, shape: TreeShape, prefix: tuple, slot: int, one) -> list[tuple[tuple, object]]:
    """Every subtree at ``prefix`` drafted from ``slot`` as ``(token, draws, children)`` nested
    tuples (token -1 at the root), with its probability."""
    widths = shape.slots[slot]
    token = prefix[-1] if prefix else -1
    if not widths:
        return [((token, (), ()), one)]
    out = []
    for drawn, prob in _draws(model.draft_at(prefix), len(widths), shape.law, one):
        first = {}
        for j, t in enumerate(drawn):
            first.setdefault(t, widths[j])
        options = [_subtrees(model, shape, prefix + (t,), child, one) for t, child in first.items()]
        for combo in itertools.product(*options):
            total = prob
            for _, p in combo:
                total = total * p
            out.append(((token, drawn, tuple(c for c, _ in combo)), total))
    return out


def _count_subtrees(model: SequenceModel, shape: TreeShape, prefix: tuple, slot: int) -> int:
    """An upper bound of the subtrees :func:`_subtrees` lists (every draw counted as distinct)."""
    widths = shape.slots[slot]
    if not widths:
        return 1
    q = model.draft_at(prefix)
    support = [t for t in range(model.n) if q[t] > 0]
    draws = 1 if shape.law == "top-k" else len(support) ** len(widths)
    below = max(_count_subtrees(model, shape, prefix + (t,), child) for t in support for child in widths)
    return draws * below ** len(widths)


def _dynamic(model: SequenceModel, shape: TreeShape) -> tuple:
    """The one tree of a dynamic shape: best-first by Q(u) over each node's top-``k`` children
    (ties: shorter, then smaller prefix), ``budget`` nodes kept."""
    one = Fraction(1) if model.exact else 1.0
    heap: list = []

    def push(prefix: tuple, mass) -> None:
        if len(prefix) < shape.length:
            q = model.draft_at(prefix)
            for t in top_k(q, shape.k):
                heapq.heappush(heap, (-(mass * q[t]), len(prefix) + 1, prefix + (t,)))

    kept: list[tuple] = []
    push((), one)
    while heap and len(kept) < shape.budget:
        negative, _, prefix = heapq.heappop(heap)
        kept.append(prefix)
        push(prefix, -negative)
    kept_set = set(kept)

    def build(prefix: tuple) -> tuple:
        candidates = top_k(model.draft_at(prefix), shape.k) if len(prefix) < shape.length else ()
        drawn = tuple(t for t in candidates if prefix + (t,) in kept_set)
        return (prefix[-1] if prefix else -1, drawn, tuple(build(prefix + (t,)) for t in drawn))

    return build(())


def _flatten(model: SequenceModel, shape: TreeShape, nested: tuple) -> ShapedTree:
    parent, token, draws, paths = [], [], [], []

    def visit(node: tuple, up: int, path: tuple) -> None:
        here = len(parent)
        parent.append(up)
        token.append(node[0])
        paths.append(path)
        draws.append(node[1])
        for child in node[2]:
            visit(child, here, path + (child[0],))

    visit(nested, -1, ())
    target = np.array([model.target_at(p) for p in paths], dtype=object if model.exact else np.float64)
    draft = np.array(
        [model.draft_at(p) if len(p) < model.length else model.target_at(p) for p in paths],
        dtype=object if model.exact else np.float64,
    )
    return ShapedTree(parent, token, draws, target, draft, shape.law)


def as_shape(shape: TreeShape | int, model: SequenceModel, without_replacement: bool = False) -> TreeShape:
    """``shape`` itself, or for an integer K the chains of today's calls: ``TreeShape.chains(K,
    L, law)`` with law ``"without-replacement"`` if ``without_replacement`` else ``"iid"``."""
    if isinstance(shape, TreeShape):
        if without_replacement:
            raise ValueError("without_replacement: give the law in the TreeShape (law='without-replacement')")
        return shape
    if isinstance(shape, bool) or not isinstance(shape, int):
        raise ValueError(f"shape: expected a TreeShape or a number of draft sequences K, got {type(shape).__name__}")
    return TreeShape.chains(shape, model.length, "without-replacement" if without_replacement else "iid")


def shape_tree_count(model: SequenceModel, shape: TreeShape) -> int:
    """An upper bound of the trees of ``shape`` on ``model`` (iid draws counted as ordered
    tuples; chains: :meth:`SequenceModel.tree_count`)."""
    if shape.family == "chains":
        return model.tree_count(shape.k, shape.law == "without-replacement")
    if shape.family == "dynamic":
        return 1
    return _count_subtrees(model, shape, (), 0)


def shape_trees(model: SequenceModel, shape: TreeShape, *, max_trees: int = TREE_LIMIT) -> Iterator[tuple[object, object]]:
    """Every draft tree of ``shape`` on ``model`` with its probability: ``(tree, P(tree))``,
    a :class:`DraftTree` for chains (:meth:`SequenceModel.trees`), else a :class:`ShapedTree`.
    Subtrees are drafted independently given their node, so ``P(tree) = Π_v P(draws[v] |
    q(· | v))``. Refuses (:class:`~multidraft.theory.laws.ProblemTooLargeError`) beyond
    ``max_trees`` trees, counted before anything is listed.

    Raises
    ------
    ValueError
        ``shape`` is no :class:`TreeShape`, or deeper than the model.
    """
    if not isinstance(shape, TreeShape):
        raise ValueError(f"shape: expected a TreeShape (multidraft.trees.TreeShape), got {type(shape).__name__}")
    if shape.family == "chains" and shape.length != model.length or shape.depth > model.length:
        raise ValueError(f"shape: depth {shape.depth} does not fit the model's length {model.length}")
    if shape.family == "chains":
        wor = shape.law == "without-replacement"
        for tokens, prob in model.trees(shape.k, without_replacement=wor, max_trees=max_trees):
            yield model.tree(tokens, without_replacement=wor), prob
        return
    check_size(
        SizeEstimate(f"draft trees ({shape!r}, n={model.n})", shape_tree_count(model, shape), 0, unit="draft trees"),
        "use a smaller n or shape",
        max_variables=max_trees,
        variables_name="max_trees",
    )
    one = Fraction(1) if model.exact else 1.0
    if shape.family == "dynamic":
        yield _flatten(model, shape, _dynamic(model, shape)), one
        return
    for nested, prob in _subtrees(model, shape, (), 0, one):
        yield _flatten(model, shape, nested), prob


def shape_classes(model: SequenceModel, shape: TreeShape) -> dict[tuple, float | Fraction]:
    """``{class key: probability}``: the trees of ``shape`` merged into classes by their set of
    drafted prefixes (key: the sorted distinct rows of a chains tree, the sorted prefixes of
    every drafted node otherwise; both close to the same prefix set)."""
    classes: dict[tuple, float | Fraction] = {}
    for tree, prob in shape_trees(model, shape):
        if isinstance(tree, DraftTree):
            key = tuple(sorted(set(map(tuple, tree.tokens.tolist()))))
        else:
            key = tuple(sorted(tree.nodes.path(v) for v in range(1, tree.nodes.count)))
        classes[key] = classes.get(key, 0) + prob
    return classes
