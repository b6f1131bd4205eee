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
(:func:`node_conditional`, the one place this package asks a scheme for its plan).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from multidraft.theory.laws import DraftLaw, law_for
from multidraft.trees.base import BatchVerification, TreeLaw, TreeVerifier, sample_index
from multidraft.trees.tree import DraftTree

__all__ = ["TokenVerifier", "NodeStep", "node_law", "node_conditional", "node_scheme"]

#: Plans a :class:`TokenVerifier` keeps (oldest dropped first), for vocabularies up to
#: :data:`REMEMBER_BELOW`: the exact evaluation of a small sequence model meets each node's
#: (target, law) in many trees.
_REMEMBERED_PLANS = 4096
REMEMBER_BELOW = 1024


def node_law(name: str, drafts: np.ndarray) -> DraftLaw:
    """The law of the live rows' next tokens: kind ``name`` (``"iid"``, ``"independent"`` or
    ``"wor"``) over their draft distributions ``drafts [k_live, n]`` (float rows are
    renormalised; Fraction rows are exact)."""
    return law_for(name, drafts, normalize=drafts.dtype != object)


def node_scheme(scheme: Any, law_class: type[DraftLaw], k: int) -> tuple[Any, bool]:
    """The scheme that runs at a node whose law has class ``law_class`` and ``k`` live drafts,
    and whether it runs in its batched torch form.

    ``scheme`` itself, or single-draft speculative sampling (Leviathan et al. 2023) at a node
    with one live draft when ``scheme`` is defined for K >= 2 only -- every multi-draft scheme
    reduces to it at K = 1. A :class:`~multidraft.schemes.Scheme` runs batched where it has a
    batched form for the law (``supports_batch_law``; the optimal verifier's covers iid drafts
    only); another object (one with ``select(target, law, drafts, rng)``) where it says
    ``batch_capable`` and has ``select_batch``.
    """
    from multidraft.schemes import Scheme, get_scheme

    if not isinstance(scheme, Scheme):
        return scheme, bool(getattr(scheme, "batch_capable", False)) and callable(getattr(scheme, "select_batch", None))
    if k == 1 and not scheme.supports_law(law_class, 1):
        scheme = get_scheme("single")
    return scheme, scheme.supports_batch_law(law_class, k)


def node_conditional(scheme: Any, target: np.ndarray, law: DraftLaw, exact: bool) -> Callable[[np.ndarray], np.ndarray]:
    """``tuples [m, k] -> P(Y = · | X = x) [m, n]`` for ``scheme`` at one node (target p, draft
    law D): the conditional law of the scheme's plan for (p, D)
    (:meth:`~multidraft.schemes.Scheme.prepare`, :meth:`~multidraft.schemes.Plan.conditional`),
    prepared once and reused for every tuple.
    """
    if not hasattr(scheme, "prepare"):
        raise ValueError(f"scheme {getattr(scheme, 'name', scheme)!r}: has no plans, so no exact law of its output")
    if exact and not scheme.capabilities.exact_output:
        raise ValueError(f"scheme {scheme.name!r}: no exact (Fraction) conditional law; use float distributions")
    plan = scheme.prepare(list(target) if exact else target, law, exact)
    return lambda tuples: plan.conditional(np.asarray(tuples, dtype=np.int64))


@dataclass(frozen=True)
class NodeStep:
    """One node verified by the token walk's batched form (decoding records one per position).

    ``target`` is p ``[n]`` and ``drafts`` the live drafts' q_i ``[k_live, n]``: torch views
    on the inputs' device. ``live`` are the rows through the node, ``draft_tokens`` their
    tokens, ``law_class`` the class of their law, ``scheme`` the scheme that ran at the node
    (after the one-draft fallback of :func:`node_scheme`), ``token`` its output and
    ``accepted`` whether it is one of the draft tokens. ``plan`` is the plan that selected on
    the host (None when the batched form ran, or for a scheme object without plans);
    :meth:`host_plan` gives the node's plan either way.
    """

    depth: int
    live: tuple[int, ...]
    draft_tokens: tuple[int, ...]
    token: int
    accepted: bool
    target: Any
    drafts: Any
    law_class: type[DraftLaw]
    scheme: Any
    plan: Any = None

    @property
    def law_name(self) -> str:
        """The kind of the node's law (``law_class.name``)."""
        return self.law_class.name

    def host(self) -> tuple[np.ndarray, np.ndarray]:
        """p ``[n]`` and q_i ``[k_live, n]`` as float64 numpy arrays (a copy off the device)."""
        return self.target.double().cpu().numpy(), self.drafts.double().cpu().numpy()

    def law(self) -> DraftLaw:
        """The node's draft law: the plan's, else built on the host from a copy of q_i."""
        if self.plan is not None:
            return self.plan.law
        return self.law_class.from_drafts(self.host()[1], normalize=True)

    def host_plan(self) -> Any:
        """The node's plan: the one that selected, else (after a batched selection) the
        scheme's plan prepared now on the host; None for a scheme object without plans."""
        from multidraft.schemes import Scheme

        if self.plan is not None or not isinstance(self.scheme, Scheme):
            return self.plan
        target, drafts = self.host()
        return self.scheme.prepare(target, self.law_class.from_drafts(drafts, normalize=True))


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

        if not isinstance(scheme, Scheme) and not callable(getattr(scheme, "select", None)):
            raise ValueError(
                f"scheme: expected a Scheme (multidraft.schemes.get_scheme) or an object with "
                f"select(target, law, drafts, rng), got {type(scheme).__name__}"
            )
        self.scheme = scheme
        self.name = f"token:{getattr(scheme, 'name', type(scheme).__name__)}"
        self.exact_capable = isinstance(scheme, Scheme) and scheme.capabilities.exact_output
        self._plans: dict[bytes, Callable] = {}

    def __repr__(self) -> str:
        return f"TokenVerifier({self.scheme!r})"

    def _node(self, tree: DraftTree, node: int) -> tuple[Any, DraftLaw, np.ndarray]:
        """(scheme, law, live tuple) at ``node``."""
        rows = tree.nodes.rows(node)
        depth = int(tree.nodes.depth[node])
        law = node_law(tree.live_law_name(node), tree.draft[rows, depth])
        return node_scheme(self.scheme, type(law), law.k)[0], law, tree.tokens[rows, depth]

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
            mass = stop.sum()  # numpy's sum: Python's sum(stop) walks 1e5 floats one by one
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

    def _verify_batch(self, batch, generator, rng) -> BatchVerification:
        from multidraft.trees._batch import token_batch

        return token_batch(self.scheme, batch, generator, rng)
