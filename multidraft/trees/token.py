"""Token-by-token verification of a draft tree with any registered token-level scheme
(``token:<scheme>``): the walk of SpecInfer (Miao et al. 2024, Section 4) and SpecTr (Sun et
al. 2023).

At a node of depth d < L the *live* rows are those through it; their tokens at depth d + 1
form a draft tuple x whose law is ``IID(q, k_live)`` (rows of one draft law), ``Independent``
(rows of several) or ``WithoutReplacement(q, K)`` at the root of a tree drafted without
replacement (below it one row stays live). The scheme outputs Y with ``P(Y = y) = p(y | node)``
exactly; if Y is a live token the walk moves to that child, else it stops and emits Y; at depth
L it emits a bonus token from the target. A lossless scheme at every node makes the block
lossless. With one live row a scheme defined for K >= 2 only hands over to single-draft
speculative sampling (every multi-draft scheme reduces to it at K = 1).

Its exact law given the tree multiplies, along each path, the scheme's conditional law
``P(Y = · | X = x)`` at each node -- taken from the scheme's plan for ``(target, law)``
(:func:`node_conditional`, the one place this package reaches into a scheme's plan).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np

from multidraft.theory.laws import IID, DraftLaw, Independent, WithoutReplacement
from multidraft.trees.base import BatchVerification, TreeLaw, TreeVerifier, sample_index
from multidraft.trees.tree import DraftTree

__all__ = ["TokenVerifier", "node_law", "node_conditional", "node_scheme"]

#: Plans a :class:`TokenVerifier` keeps (oldest dropped first), for vocabularies up to
#: :data:`REMEMBER_BELOW`: the exact evaluation of a small sequence model meets each node's
#: (target, law) in many trees.
_REMEMBERED_PLANS = 4096
REMEMBER_BELOW = 1024


def node_law(name: str, drafts: np.ndarray) -> DraftLaw:
    """The law of the live rows' next tokens: kind ``name`` (``"iid"``, ``"independent"`` or
    ``"wor"``) over their draft distributions ``drafts [k_live, n]`` (float rows are
    renormalised; Fraction rows are exact)."""
    k = len(drafts)
    exact = drafts.dtype == object
    rows = [list(r) for r in drafts] if exact else list(drafts)
    options = {} if exact else {"normalize": True}
    if name == "wor":
        return WithoutReplacement(rows[0], k, **options)
    if name == "iid":
        return IID(rows[0], k, **options)
    return Independent(rows, **options)


def node_scheme(scheme: Any, law: DraftLaw) -> Any:
    """``scheme``, or single-draft sampling at a node with one live draft when ``scheme`` is
    defined for K >= 2 only."""
    if law.k == 1 and not scheme.supports(law):
        from multidraft.schemes import get_scheme

        return get_scheme("single")
    return scheme


def node_conditional(scheme: Any, target: np.ndarray, law: DraftLaw, exact: bool) -> Callable[[np.ndarray], np.ndarray]:
    """``tuples [m, k] -> P(Y = · | X = x) [m, n]`` for ``scheme`` at one node (target p, draft
    law D), from the scheme's plan for (p, D) -- computed once, reused for every tuple.

    The single adapter onto the schemes' plan hooks (``_prepare``/``_conditional`` today; the
    public ``prepare(target, law).conditional(tuples)`` of issue 21 when it lands).
    """
    p = scheme.check(list(target) if exact else target, law, exact)
    if exact and not scheme.exact_output:
        raise ValueError(f"scheme {scheme.name!r}: no exact (Fraction) conditional law; use float distributions")
    plan = scheme._prepare(p, law, exact)
    return lambda tuples: scheme._conditional(plan, np.asarray(tuples, dtype=np.int64))


class TokenVerifier(TreeVerifier):
    """Token-by-token verification with a token-level ``scheme`` at every node.

    >>> import numpy as np
    >>> from fractions import Fraction as F
    >>> from multidraft.schemes import get_scheme
    >>> target = np.array([[[F(1, 3), F(2, 3)]] * 3], dtype=object)
    >>> draft = np.array([[[F(2, 3), F(1, 3)]] * 2], dtype=object)
    >>> TokenVerifier(get_scheme("specinfer")).expected_accepted(DraftTree([[0, 1]], target, draft))
    Fraction(1, 1)

    (Token 0 is accepted with probability 1/2, then token 1 surely; block verification accepts
    both surely, see :class:`~multidraft.trees.Traversal`.)
    """

    drafting = ("iid", "wor", "independent")

    def __init__(self, scheme: Any) -> None:
        from multidraft.schemes import Scheme

        if not isinstance(scheme, Scheme):
            raise ValueError(f"scheme: expected a registered Scheme (multidraft.schemes.get_scheme), got {type(scheme).__name__}")
        self.scheme = scheme
        self.name = f"token:{scheme.name}"
        self.exact_capable = bool(scheme.exact_output)
        self._plans: dict[bytes, Callable] = {}

    def __repr__(self) -> str:
        return f"TokenVerifier({self.scheme!r})"

    def _node(self, tree: DraftTree, node: int) -> tuple[Any, DraftLaw, np.ndarray]:
        """(scheme, law, live tuple) at ``node``."""
        rows = tree.nodes.rows(node)
        depth = int(tree.nodes.depth[node])
        law = node_law(tree.live_law_name(node), tree.draft[rows, depth])
        return node_scheme(self.scheme, law), law, tree.tokens[rows, depth]

    def _conditional(self, tree: DraftTree, node: int) -> np.ndarray:
        """``P(Y = · | live tuple)`` at ``node``, from a remembered plan when the node's
        distributions and law were met before."""
        rows = tree.nodes.rows(node)
        depth = int(tree.nodes.depth[node])
        p, drafts = tree.target_at(node), tree.draft[rows, depth]
        if tree.n > REMEMBER_BELOW:  # hashing a real vocabulary costs more than a plan
            scheme, law, _ = self._node(tree, node)
            return node_conditional(scheme, p, law, tree.exact)(tree.tokens[rows, depth][None, :])[0]
        key = self._key(tree.live_law_name(node), p, drafts)
        if key not in self._plans:
            if len(self._plans) >= _REMEMBERED_PLANS:
                self._plans.pop(next(iter(self._plans)))
            scheme, law, _ = self._node(tree, node)
            self._plans[key] = node_conditional(scheme, p, law, tree.exact)
        return self._plans[key](tree.tokens[rows, depth][None, :])[0]

    @staticmethod
    def _key(law_name: str, p: np.ndarray, drafts: np.ndarray) -> bytes:
        digest = hashlib.blake2b(f"{law_name}|{len(drafts)}".encode())
        for array in (p, drafts):
            digest.update(repr(array.tolist()).encode() if array.dtype == object else np.ascontiguousarray(array).tobytes())
        return digest.digest()

    def _law(self, tree: DraftTree, next_token: bool) -> TreeLaw:
        exact = tree.exact
        nodes, length = tree.nodes, tree.length
        zero = Fraction(0) if exact else 0.0
        prob = np.array([zero] * nodes.count, dtype=object) if exact else np.zeros(nodes.count)
        rows = None
        if next_token:
            rows = np.full((nodes.count, tree.n), zero, dtype=object) if exact else np.zeros((nodes.count, tree.n))

        def walk(node: int, reach) -> None:
            if nodes.depth[node] == length:  # all L accepted: the bonus token
                prob[node] = reach
                if rows is not None:
                    rows[node] = tree.target_at(node)
                return
            law_y = self._conditional(tree, node)  # P(Y = · | live tuple)
            stop = law_y.copy()
            for child in nodes.children[node]:
                token = int(nodes.token[child])
                walk(child, reach * law_y[token])
                stop[token] = zero
            mass = sum(stop, zero)
            prob[node] = reach * mass
            if rows is not None and mass > 0:
                rows[node] = stop / mass

        walk(0, Fraction(1) if exact else 1.0)
        return TreeLaw(tree, prob, rows)

    def _verify(self, tree: DraftTree, rng: np.random.Generator) -> tuple[int, int]:
        nodes = tree.nodes
        node = 0
        while nodes.depth[node] < tree.length:
            scheme, law, tuple_ = self._node(tree, node)
            target = np.asarray(tree.target_at(node), dtype=np.float64)
            if tree.exact:
                law = node_law(law.name, np.asarray(tree.draft[nodes.rows(node), nodes.depth[node]], dtype=np.float64))
            token = scheme.select(target, law, tuple_, rng).token
            following = [c for c in nodes.children[node] if nodes.token[c] == token]
            if not following:
                return node, token
            node = following[0]
        return node, sample_index(tree.target_at(node), rng)

    def _verify_batch(self, batch, generator) -> BatchVerification:
        from multidraft.trees._batch import token_batch

        return token_batch(self, batch, generator)
