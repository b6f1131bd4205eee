"""The draft tree: K draft sequences of length L, merged where they share a prefix.

A block of multi-draft speculative decoding drafts K sequences ``x_k = (x_{k,1}, ..., x_{k,L})``
and asks the target for its distribution after every prefix of every sequence. Drafts that
share a prefix share the node of that prefix (theory.md, "Block level: tree verifiers"):

* node 0 is the root (the empty prefix); node ``v`` at depth ``d`` is one distinct prefix of
  length ``d``; its children are the distinct tokens drafted after it, **in order of first
  appearance** among the rows (row order is draw order: for drafts without replacement the
  successive-sampling order of Gumbel-top-K, for iid drafts any order independent of the
  tokens) -- the order traversal verification walks them in;
* ``target_at(v)`` is the target's distribution of the token after prefix v (at depth L: the
  distribution of the bonus token), ``draft_at(v)`` the draft distribution v's children were
  drawn from (depth < L).

How the rows were drawn matters to every verifier's proof of losslessness:

* ``without_replacement=False`` (default): each row is an independent draft sequence; rows
  with equal ``groups`` label share one draft model and sampling (the iid case), rows with
  different labels do not (independent, non-identical drafts);
* ``without_replacement=True``: the K first tokens were drawn without replacement from one
  draft distribution (distinct, in draw order); each row then continues alone, so every node
  below the root has one child.

Rows sharing a prefix must carry the same distributions at that prefix; the first row through
a node supplies them (decoding's batched forward may differ in the last ulp between rows).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from multidraft.theory import check_row_sums
from multidraft.theory.laws import IID, DraftLaw, Independent, WithoutReplacement

__all__ = ["DraftTree", "TreeNodes", "live_law_class"]


def live_law_class(labels: Sequence[object], without_replacement: bool) -> type[DraftLaw]:
    """The class of the law of the tokens drafted after a node by the rows through it, from
    those rows' group ``labels`` (equal labels: one draft model and sampling):
    :class:`~multidraft.theory.laws.WithoutReplacement` for a tree drafted without replacement
    (K distinct first tokens, one row below the root, where ``WithoutReplacement(q, 1) =
    IID(q, 1)``), else :class:`~multidraft.theory.laws.IID` for one label and
    :class:`~multidraft.theory.laws.Independent` for several."""
    if without_replacement:
        return WithoutReplacement
    return IID if len(set(labels)) == 1 else Independent


@dataclass(frozen=True, eq=False)
class TreeNodes:
    """The merged structure of a draft tree (computed once from its tokens).

    Attributes
    ----------
    index : ndarray [K, L + 1] int64
        ``index[k, d]``: the node of row k's prefix of length d (``index[:, 0] = 0``, the root).
    parent, depth, token, row : ndarray [m] int64
        Parent node (-1 for the root), depth, last token (-1 for the root) and the first row
        through each node.
    children : tuple of tuples
        Each node's children in order of first appearance.
    multiplicity : ndarray [m] int64
        Rows through each node (K at the root).
    """

    index: np.ndarray
    parent: np.ndarray
    depth: np.ndarray
    token: np.ndarray
    row: np.ndarray
    children: tuple[tuple[int, ...], ...]
    multiplicity: np.ndarray

    @property
    def count(self) -> int:
        """Number of nodes m, the root included."""
        return len(self.parent)

    def rows(self, node: int) -> np.ndarray:
        """The rows through ``node`` (ascending)."""
        return np.flatnonzero(self.index[:, self.depth[node]] == node)

    def path(self, node: int) -> tuple[int, ...]:
        """The tokens of ``node``'s prefix, root first (empty for the root)."""
        return tuple(int(self.token[v]) for v in self.index_path(node)[1:])

    def index_path(self, node: int) -> tuple[int, ...]:
        """The nodes from the root down to ``node``."""
        out = [node]
        while self.parent[out[-1]] >= 0:
            out.append(int(self.parent[out[-1]]))
        return tuple(reversed(out))

    def postorder(self) -> tuple[int, ...]:
        """Every node in post-order (children first, leftmost first; the root last): the order
        in which traversal verification tests them."""
        out: list[int] = []

        def visit(node: int) -> None:
            for child in self.children[node]:
                visit(child)
            out.append(node)

        visit(0)
        return tuple(out)


def _merge(tokens: np.ndarray) -> TreeNodes:
    k, length = tokens.shape
    index = np.zeros((k, length + 1), dtype=np.int64)
    parent, depth, token, row = [-1], [0], [-1], [0]
    children: list[list[int]] = [[]]
    for d in range(1, length + 1):
        seen: dict[tuple[int, int], int] = {}
        for r in range(k):
            key = (int(index[r, d - 1]), int(tokens[r, d - 1]))
            if key not in seen:
                seen[key] = len(parent)
                parent.append(key[0])
                depth.append(d)
                token.append(key[1])
                row.append(r)
                children.append([])
                children[key[0]].append(seen[key])
            index[r, d] = seen[key]
    multiplicity = np.array([np.count_nonzero(index[:, depth[v]] == v) for v in range(len(parent))], dtype=np.int64)
    return TreeNodes(
        index,
        np.array(parent, dtype=np.int64),
        np.array(depth, dtype=np.int64),
        np.array(token, dtype=np.int64),
        np.array(row, dtype=np.int64),
        tuple(tuple(c) for c in children),
        multiplicity,
    )


def _as_tokens(tokens: object) -> np.ndarray:
    array = np.asarray(tokens)
    if array.ndim != 2 or array.shape[0] < 1 or array.shape[1] < 1:
        raise ValueError(f"tokens: expected an integer array [K, L] with K, L >= 1, got shape {array.shape}")
    if not np.issubdtype(array.dtype, np.integer):
        raise ValueError(f"tokens: expected integer token ids, got dtype {array.dtype}")
    return array.astype(np.int64)


def _as_table(values: object, name: str, shape: tuple[int, ...], validate: bool) -> np.ndarray:
    if callable(getattr(values, "detach", None)):  # a torch tensor (bfloat16 has no numpy twin)
        dtype, array = values.dtype, values.detach().cpu().double().numpy()
    else:
        array = np.asarray(values)
        dtype = array.dtype
    exact = array.dtype == object
    if not exact:
        array = np.ascontiguousarray(array, dtype=np.float64)
    if array.ndim != 3 or array.shape[:2] != shape[:2] or (shape[2] and array.shape[2] != shape[2]):
        wanted = f"[{shape[0]}, {shape[1]}, n]" if not shape[2] else f"[{shape[0]}, {shape[1]}, {shape[2]}]"
        raise ValueError(f"{name}: expected an array {wanted}, got shape {array.shape}")
    if array.shape[2] < 1:
        raise ValueError(f"{name}: the vocabulary is empty")
    if not validate:
        return array
    if exact:
        if not all(isinstance(v, Fraction) for v in array.reshape(-1)):
            raise ValueError(f"{name}: an object array must hold Fractions (exact mode)")
        if any(v < 0 for v in array.reshape(-1)):
            raise ValueError(f"{name}: contains negative entries")
        if any(sum(r, Fraction(0)) != 1 for r in array.reshape(-1, array.shape[2])):
            raise ValueError(f"{name}: every exact distribution must sum to exactly 1")
        return array
    sums = array.sum(axis=-1)
    if not np.isfinite(sums).all():
        raise ValueError(f"{name}: entries must be finite")
    if array.min() < 0:
        raise ValueError(f"{name}: contains negative entries")
    check_row_sums(sums.reshape(-1)[np.argmax(np.abs(sums - 1))], name, dtype=dtype, n=array.shape[2], rows="a distribution's entries")
    return array / sums[..., None]


@dataclass(frozen=True, eq=False)
class DraftTree:
    """One draft tree: K draft sequences, the target after every prefix, the draft laws.

    Parameters
    ----------
    tokens : array_like [K, L] int
        Row k is draft sequence k (row order = draw order).
    target : array_like [K, L + 1, n]
        ``target[k, d]`` = p(· | x_{k,1..d}); ``d = L`` is the bonus distribution. Float64, or an
        object array of Fractions for exact computations.
    draft : array_like [K, L, n]
        ``draft[k, d]`` = the distribution ``x_{k,d+1}`` was drawn from.
    without_replacement : bool
        The K first tokens were drawn without replacement from ``draft[0, 0]`` (distinct, in
        draw order); needs one draft law for all rows.
    groups : sequence of K ints, optional
        Rows with equal labels share one draft model and sampling (default: all rows do, the
        iid case).
    validate : bool
        Check that every distribution is non-negative and sums to 1 (floats: within the
        rounding of their dtype, :func:`~multidraft.theory.sum_tolerance`, then rescaled; exactly 1
        in Fractions). Shapes, token ids and the drafted tokens' positive draft
        probability are always checked.

    Raises
    ------
    ValueError
        Naming the argument: bad shapes or dtypes, token ids outside [0, n), a drafted token of
        draft probability zero, repeated first tokens with ``without_replacement``.

    Examples
    --------
    Two drafts sharing their first token form one node with two children:

    >>> import numpy as np
    >>> p = np.full((2, 3, 2), 0.5)
    >>> tree = DraftTree([[0, 1], [0, 0]], p, p[:, :2])
    >>> tree.nodes.children
    ((1,), (2, 3), (), ())
    >>> tree.nodes.path(3)
    (0, 0)
    """

    tokens: np.ndarray
    target: np.ndarray
    draft: np.ndarray
    without_replacement: bool = False
    groups: tuple[int, ...] | None = None
    validate: bool = field(default=True, repr=False)

    def __post_init__(self) -> None:
        tokens = _as_tokens(self.tokens)
        k, length = tokens.shape
        target = _as_table(self.target, "target", (k, length + 1, 0), self.validate)
        n = target.shape[2]
        draft = _as_table(self.draft, "draft", (k, length, n), self.validate)
        if (target.dtype == object) != (draft.dtype == object):
            raise ValueError("target, draft: both must be float arrays or both Fraction arrays")
        if tokens.min() < 0 or tokens.max() >= n:
            raise ValueError(f"tokens: token ids must lie in [0, {n})")
        chosen = np.take_along_axis(draft, tokens[:, :, None], axis=2)[:, :, 0]
        if (chosen <= 0).any():
            r, d = (int(i) for i in np.argwhere(chosen <= 0)[0])
            raise ValueError(
                f"tokens: token {int(tokens[r, d])} of row {r} at depth {d + 1} has draft probability zero"
            )
        groups = tuple(range(1)) * k if self.groups is None else tuple(int(g) for g in self.groups)
        if len(groups) != k:
            raise ValueError(f"groups: expected {k} labels (one per row), got {len(groups)}")
        if self.without_replacement:
            if len(set(groups)) > 1:
                raise ValueError("without_replacement: the first tokens come from one draft law; groups must be equal")
            if len(set(tokens[:, 0].tolist())) != k:
                raise ValueError("tokens: drafts without replacement need K distinct first tokens")
        object.__setattr__(self, "tokens", tokens)
        object.__setattr__(self, "target", target)
        object.__setattr__(self, "draft", draft)
        object.__setattr__(self, "groups", groups)
        object.__setattr__(self, "without_replacement", bool(self.without_replacement))

    # -- sizes -----------------------------------------------------------------------------

    @property
    def k(self) -> int:
        """Number of draft sequences K."""
        return self.tokens.shape[0]

    @property
    def length(self) -> int:
        """Draft length L."""
        return self.tokens.shape[1]

    @property
    def n(self) -> int:
        """Vocabulary size."""
        return self.target.shape[2]

    @property
    def exact(self) -> bool:
        """Whether the distributions are Fractions."""
        return self.target.dtype == object

    @property
    def shared_draft(self) -> bool:
        """Whether every row has the same draft law (iid rows, or drafts without replacement)."""
        return len(set(self.groups)) == 1

    # -- structure -------------------------------------------------------------------------

    @functools.cached_property
    def nodes(self) -> TreeNodes:
        """The merged node structure (:class:`TreeNodes`)."""
        return _merge(self.tokens)

    def target_at(self, node: int) -> np.ndarray:
        """p(· | prefix of ``node``) ``[n]`` (a view)."""
        nodes = self.nodes
        return self.target[nodes.row[node], nodes.depth[node]]

    def draft_at(self, node: int) -> np.ndarray:
        """The draft distribution the children of ``node`` were drawn from ``[n]`` (a view;
        the first row's when rows of different groups pass through the node)."""
        nodes = self.nodes
        if nodes.depth[node] >= self.length:
            raise ValueError(f"node: {node} is at depth {self.length}; nothing was drafted after it")
        return self.draft[nodes.row[node], nodes.depth[node]]

    def live_law_name(self, node: int) -> str:
        """Kind of the law of the tokens drafted after ``node`` by the rows through it:
        ``"wor"`` (drafts without replacement: K distinct at the root, one row below it),
        ``"iid"`` (one group) or ``"independent"``. The rows are looked up only when the tree
        has several groups (else every node's kind is the tree's)."""
        labels = self.groups[:1] if self.without_replacement or self.shared_draft else [self.groups[r] for r in self.nodes.rows(node)]
        return live_law_class(labels, self.without_replacement).name

    def node_law_kind(self, node: int) -> tuple[str, int]:
        """``(law kind, k_live)`` at ``node`` (depth < L), without copying distributions
        (k_live: the node's multiplicity, the number of rows through it)."""
        return self.live_law_name(node), int(self.nodes.multiplicity[node])

    def node_draws(self, node: int) -> tuple[str, np.ndarray, np.ndarray]:
        """``(law kind, drafts [k_live, n], tokens [k_live])`` at ``node`` (depth < L): the kind
        of the law of the live rows' next tokens (:meth:`live_law_name`), their draft
        distributions and the tuple they drafted."""
        rows, depth = self.nodes.rows(node), int(self.nodes.depth[node])
        if self.shared_draft:  # one draft law: the first row's, as a read-only view (no k copies)
            drafts = np.broadcast_to(self.draft[rows[0], depth], (len(rows), self.n))
        else:
            drafts = self.draft[rows, depth]
        return self.live_law_name(node), drafts, self.tokens[rows, depth]

    @property
    def drafting(self) -> str:
        """``"wor"``, ``"iid"`` or ``"independent"``: how the rows were drawn."""
        if self.without_replacement:
            return "wor"
        return "iid" if self.shared_draft else "independent"

    @classmethod
    def chain(cls, tokens: Sequence[int], target: object, draft: object) -> DraftTree:
        """A single draft (K = 1): ``tokens [L]``, ``target [L + 1, n]``, ``draft [L, n]``."""
        return cls([list(tokens)], np.asarray(target)[None], np.asarray(draft)[None])
