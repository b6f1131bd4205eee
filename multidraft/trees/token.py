"""Token-by-token verification of a draft tree with any registered token-level scheme
(``token:<scheme>``): the walk of SpecInfer (Miao et al. 2024, Section 4) and SpecTr (Sun et
al. 2023).

At a node of depth d < L the *live* rows are those through it; their tokens at depth d + 1
form a draft tuple x whose law is ``IID(q, k_live)`` (rows of one draft law), ``Independent``
(rows of several) or ``WithoutReplacement(q, K)`` at the root of a tree drafted without
replacement (below it one row stays live). On a tree drafted node by node
(:class:`~multidraft.trees.ShapedTree`) x is the node's own tuple of k_v draws and its law the
node's: ``IID(q, k_v)``, ``WithoutReplacement(q, k_v)`` or ``Deterministic(top-k_v)``; the walk
takes a tree only if the scheme takes every node's law (:meth:`TokenVerifier.supports`). The scheme outputs Y with ``P(Y = y) = p(y | node)``
exactly; if Y is a live token the walk moves to that child, else it stops and emits Y; at depth
L it emits a bonus token from the target. A lossless scheme at every node makes the block
lossless. With one live row a scheme defined for K >= 2 only hands over to single-draft
speculative sampling (every multi-draft scheme reduces to it at K = 1).

Its exact law given the tree multiplies, along each path, the scheme's conditional law
``P(Y = · | X = x)`` at each node -- taken from the scheme's plan for ``(target, law)``
(:func:`node_plan`, the one place this package asks a scheme for its plan).

``token:optimal`` on K iid chains couples, at a node with m >= 2 live rows above the last drafted
depth, by :func:`~multidraft.trees._rows_rule.rows_coupling` where it fits (small vocabularies,
:func:`rows_below`): of the couplings of maximum acceptance P*, one whose accepted token is carried
by as many rows as possible -- the rows carrying Y continue below, so more of them leave more
tries there (docs/block_level.md §4c). It reads only the node's p, q and tuple, so the walk stays
lossless; acceptance at every node is P*, as before.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from multidraft.theory.laws import IID, DraftLaw, law_class, law_for
from multidraft.trees._batch import BatchVerification, TreeBatch, _sample, host_rng
from multidraft.trees._rows_rule import multisets_fit, rows_coupling
from multidraft.trees.base import Tree, TreeLaw, TreeVerifier, sample_index
from multidraft.trees.tree import DraftTree, live_law_class

__all__ = [
    "TokenVerifier", "NodeStep", "node_law", "node_conditional", "node_plan", "node_scheme", "one_draft_scheme", "rows_below",
    "single_draft_acceptance", "token_batch",
]  # fmt: skip

#: Plans a :class:`TokenVerifier` keeps (oldest dropped first), for vocabularies up to
#: :data:`REMEMBER_BELOW`: the exact evaluation of a small sequence model meets each node's
#: (target, law) in many trees.
_REMEMBERED_PLANS = 4096
REMEMBER_BELOW = 1024


def node_law(name: str, drafts: np.ndarray, tokens: np.ndarray | None = None) -> DraftLaw:
    """The law of the live rows' next tokens: kind ``name`` (``"iid"``, ``"independent"``,
    ``"wor"``, or ``"deterministic"`` for a top-k node, built from its ``tokens``) over their
    draft distributions ``drafts [k_live, n]`` (float rows are renormalised; Fraction rows are
    exact)."""
    if not law_class(name).takes_distributions:  # a fixed set (Deterministic): built from its tokens
        return law_class(name)(np.asarray(tokens, dtype=np.int64), drafts.shape[-1])
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


def one_draft_scheme(scheme: Any, law: DraftLaw | type[DraftLaw], k: int | None = None) -> Any:
    """Single-draft speculative sampling (Leviathan et al. 2023) in place of an *optimal*
    ``scheme``, or of recursive rejection sampling, where ``law`` has one draft, else ``scheme``.

    With one draft X = x the selection is forced (Theorem 1's selected token is x, its law
    r = q), so an optimal scheme accepts x with probability ``min(1, p(x)/q(x))`` and otherwise
    draws from ``norm((p - q)_+)``: exactly single-draft sampling's conditional law
    P(Y = · | X = x) (tested against each scheme's plan), at the cost of one residual instead
    of a fitted selection rule (two sorts of the vocabulary). Recursive rejection sampling
    (SpecInfer, or without replacement) with one draft is that same step by definition.
    ``law``: the node's law, or its class with ``k`` drafts.
    """
    from multidraft.schemes import Scheme, get_scheme
    from multidraft.schemes.rrs_wor import RRSWithoutReplacement
    from multidraft.schemes.specinfer import SpecInfer

    cls, k = (law, k) if isinstance(law, type) else (type(law), law.k)
    if k != 1 or not isinstance(scheme, Scheme) or not (scheme.capabilities.optimal or isinstance(scheme, (SpecInfer, RRSWithoutReplacement))):
        return scheme
    single = get_scheme("single")
    return single if single.supports_law(cls, 1) else scheme


def single_draft_acceptance(target: np.ndarray, draft: np.ndarray, token: int):
    """``P(Y = x | X = x) = min(1, p(x) / q(x))`` for single-draft speculative sampling (Leviathan
    et al. 2023, Algorithm 1) with p and q each rescaled by its sum, as the scheme's plan reads
    them (:func:`~multidraft.theory.as_distribution`): O(n) for the two sums, no residual. The
    token walk's E[τ | tree] needs only this at a node with one live draft."""
    p_sum, q_sum = target.sum(), draft.sum()
    p = target[token] if p_sum == 1 else target[token] / p_sum
    q = draft[token] if q_sum == 1 else draft[token] / q_sum
    return min(p / q, 1)


def rows_below(scheme: Any, law_class: type[DraftLaw], k: int, n: int, depth: int, length: int) -> bool:
    """Whether the token walk with ``scheme`` couples by
    :func:`~multidraft.trees._rows_rule.rows_coupling` at a node of K iid chains at ``depth`` with
    ``k`` live rows of one draft law (``law_class`` IID) over a vocabulary of ``n`` tokens: for the
    optimal scheme (token:optimal), when k >= 2, the node's children are not the last drafted depth
    (``depth + 1 < length``: rows below them count) and the multisets of k draws over n tokens fit
    the LP (:func:`~multidraft.trees._rows_rule.multisets_fit`). O(1): it reads no distribution, so
    a real vocabulary costs nothing and keeps the curtain rule."""
    from multidraft.schemes.optimal import Optimal

    return isinstance(scheme, Optimal) and law_class is IID and depth + 1 < length and multisets_fit(n, k)


def node_conditional(scheme: Any, target: np.ndarray, law: DraftLaw, exact: bool) -> Callable[[np.ndarray], np.ndarray]:
    """``tuples [m, k] -> P(Y = · | X = x) [m, n]`` for ``scheme`` at one node (target p, draft
    law D): the conditional law of the scheme's plan for (p, D)
    (:meth:`~multidraft.schemes.Scheme.prepare`, :meth:`~multidraft.schemes.Plan.conditional`),
    prepared once and reused for every tuple.
    """
    plan = node_plan(scheme, target, law, exact)
    return lambda tuples: plan.conditional(np.asarray(tuples, dtype=np.int64))


def node_plan(scheme: Any, target: np.ndarray, law: DraftLaw, exact: bool, copy: bool = True) -> Any:
    """``scheme``'s plan for (p, D) at one node (:meth:`~multidraft.schemes.Scheme.prepare`),
    refused for a scheme without plans or without an exact law where one is asked for.
    ``copy=False`` (a :class:`~multidraft.schemes.Scheme`'s float plan dropped before the tree's
    rows can change): the plan may hold the tree's target row itself where its check leaves it
    unchanged (one O(n) copy fewer; the same plan)."""
    from multidraft.schemes import Scheme

    if not hasattr(scheme, "prepare"):
        raise ValueError(f"scheme {getattr(scheme, 'name', scheme)!r}: has no plans, so no exact law of its output")
    if exact and not scheme.capabilities.exact_output:
        raise ValueError(f"scheme {scheme.name!r}: no exact (Fraction) conditional law; use float distributions")
    if not copy and not exact and isinstance(scheme, Scheme):
        return scheme.prepare(target, law, copy=False)
    return scheme.prepare(list(target) if exact else target, law, exact)


@dataclass(frozen=True)
class NodeStep:
    """One node verified by the token walk's batched form (decoding records one per position).

    ``target`` is p ``[n]`` and ``drafts`` the live drafts' q_i ``[k_live, n]``: torch views
    on the inputs' device. ``live`` are the rows through the node, ``draft_tokens`` their
    tokens, ``law_class`` the class of their law, ``scheme`` the scheme that ran at the node
    (after the one-draft fallback of :func:`node_scheme`), ``token`` its output and
    ``accepted`` whether it is one of the draft tokens. ``plan`` is the plan that selected on
    the host (None when the batched form ran, when the rows coupling of :func:`rows_below`
    selected -- its acceptance is the plan's P* -- or for a scheme object without plans);
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
    >>> from multidraft.trees import DraftTree
    >>> target = np.array([[[F(1, 3), F(2, 3)]] * 3], dtype=object)
    >>> draft = np.array([[[F(2, 3), F(1, 3)]] * 2], dtype=object)
    >>> TokenVerifier(get_scheme("specinfer")).expected_accepted(DraftTree([[0, 1]], target, draft))
    Fraction(1, 1)

    (Token 0 is accepted with probability 1/2, then token 1 surely; block verification accepts
    both surely, see :class:`~multidraft.trees.Traversal`.)
    """

    drafting = ("iid", "wor", "independent", "shape:iid", "shape:without-replacement", "shape:top-k")

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
        self._schemes: dict[tuple[type[DraftLaw], int], Any] = {}

    def __repr__(self) -> str:
        return f"TokenVerifier({self.scheme!r})"

    def _unsupported(self, tree: Tree) -> str | None:
        """The first inner node whose law the scheme does not take (after the one-draft
        fallback of :func:`node_scheme`), said in words; None when it takes every node."""
        from multidraft.schemes import Scheme

        if not isinstance(self.scheme, Scheme):
            return None
        nodes = tree.nodes
        kinds = {tree.node_law_kind(node): node for node in reversed(range(nodes.count)) if nodes.children[node]}
        for (name, k), node in sorted(kinds.items(), key=lambda item: item[1]):
            cls = law_class(name)
            scheme = node_scheme(self.scheme, cls, k)[0]
            if not scheme.supports_law(cls, k):
                return f"node {node} drafts {k} tokens by the {name} law, which scheme {scheme.name!r} does not take"
        return None

    def supports(self, tree: Tree) -> bool:
        """Whether every node's draft law is one the scheme takes (so the walk is lossless)."""
        return super().supports(tree) and self._unsupported(tree) is None

    def refusal(self, tree: Tree) -> str:
        return self._unsupported(tree) if super().supports(tree) else super().refusal(tree)

    def _node_scheme(self, cls: type[DraftLaw], k: int) -> Any:
        """The scheme that runs at a node whose law has class ``cls`` and ``k`` live drafts:
        :func:`node_scheme`'s, except that an optimal scheme at a node with one live draft runs
        as single-draft sampling (:func:`one_draft_scheme`: the same conditional law, without
        fitting a selection rule); decided once per (class, k)."""
        key = (cls, k)
        if key not in self._schemes:
            self._schemes[key] = one_draft_scheme(node_scheme(self.scheme, cls, k)[0], cls, k)
        return self._schemes[key]

    def _node(self, tree: Tree, node: int) -> tuple[Any, DraftLaw, np.ndarray]:
        """(scheme, law, live tuple) at ``node`` (:meth:`_node_scheme`)."""
        name, drafts, tuple_ = tree.node_draws(node)
        law = node_law(name, drafts, tuple_)
        return self._node_scheme(type(law), law.k), law, tuple_

    def _runs_single(self, tree: Tree, node: int) -> bool:
        """Whether ``node`` has one live draft of a law of distributions (not a fixed set) and the
        walk runs single-draft sampling there (:func:`node_scheme`, :func:`one_draft_scheme`)."""
        from multidraft.schemes.base import SCHEMES

        name, k = tree.node_law_kind(node)
        cls = law_class(name)
        if k != 1 or not cls.takes_distributions or type(self)._conditional is not TokenVerifier._conditional:
            return False
        return type(self._node_scheme(cls, 1)) is SCHEMES["single"]

    def _rows_below(self, tree: Tree, node: int) -> bool:
        """Whether the walk couples at ``node`` by the rows coupling (:func:`rows_below`; K iid
        chains, a :class:`~multidraft.trees.DraftTree` in floats)."""
        if not isinstance(tree, DraftTree) or tree.exact:
            return False
        name, k = tree.node_law_kind(node)
        return rows_below(self.scheme, law_class(name), k, tree.n, int(tree.nodes.depth[node]), tree.length)

    def _prepare(self, tree: Tree, node: int) -> Callable[[np.ndarray], np.ndarray]:
        """``tuples -> P(Y = · | X = x)`` at ``node``: the rows coupling where the walk uses it
        and HiGHS solves it, else the node's scheme's plan (:func:`node_conditional`)."""
        if self._rows_below(tree, node):
            drafts = tree.node_draws(node)[1]
            coupling = rows_coupling(tree.target_at(node), drafts[0], len(drafts))
            if coupling is not None:
                return coupling
        scheme, law, _ = self._node(tree, node)
        return node_conditional(scheme, tree.target_at(node), law, tree.exact)

    def _conditional(self, tree: Tree, node: int) -> np.ndarray:
        """``P(Y = · | live tuple)`` at ``node``, from a remembered plan when the node's
        distributions and law were met before."""
        name, drafts, tuple_ = tree.node_draws(node)
        p = tree.target_at(node)
        if tree.n > REMEMBER_BELOW:  # hashing a real vocabulary costs more than a plan
            return self._prepare(tree, node)(tuple_[None, :])[0]
        kind = f"{name}|rows" if self._rows_below(tree, node) else name
        key = self._key(kind, p, drafts, None if law_class(name).takes_distributions else tuple_)
        if key not in self._plans:
            if len(self._plans) >= _REMEMBERED_PLANS:
                self._plans.pop(next(iter(self._plans)))
            self._plans[key] = self._prepare(tree, node)
        return self._plans[key](tuple_[None, :])[0]

    def _pointwise(self, tree: Tree, node: int) -> bool:
        """Whether the E[τ] walk reads ``node``'s conditional law at its children alone
        (:meth:`_conditional_at`): a float tree at a real vocabulary (no remembered plans), the
        node's scheme's plan, and no subclass's own :meth:`_conditional`."""
        return (
            tree.n > REMEMBER_BELOW and not tree.exact and type(self)._conditional is TokenVerifier._conditional
            and not self._rows_below(tree, node)
        )  # fmt: skip

    def _conditional_at(self, tree: Tree, node: int, tokens: np.ndarray) -> tuple[np.ndarray, float]:
        """``(P(Y = t | live tuple) for the children's tokens t, P(Y ∉ tokens | live tuple))`` at
        ``node`` (where :meth:`_pointwise`): an importance plan's
        :meth:`~multidraft.schemes._importance.ImportancePlan.conditional_at` (the same entries,
        bit for bit, and the rest of the mass up to rounding, without rows of n), else the
        plan's dense conditional law."""
        from multidraft.schemes._importance import ImportancePlan

        scheme, law, tuple_ = self._node(tree, node)
        plan = node_plan(scheme, tree.target_at(node), law, False, copy=False)  # dropped after this node
        if isinstance(plan, ImportancePlan):
            values, rest = plan.conditional_at(tuple_[None, :], tokens)
            return values[0], float(rest[0])
        stop = plan.conditional(tuple_[None, :])[0]
        at_children = stop[tokens]
        stop[tokens] = 0.0
        return at_children, stop.sum()

    @staticmethod
    def _key(law_name: str, p: np.ndarray, drafts: np.ndarray, tokens: np.ndarray | None) -> bytes:
        digest = hashlib.blake2b(f"{law_name}|{len(drafts)}|{None if tokens is None else tokens.tolist()}".encode())
        for array in (p, drafts):
            digest.update(repr(array.tolist()).encode() if array.dtype == object else np.ascontiguousarray(array).tobytes())
        return digest.digest()

    @staticmethod
    def _unreached(reach) -> bool:
        """Whether the E[τ] walk (no next-token rows) skips a node it reaches with probability
        ``reach``: exactly zero. The node and its subtree are then never accepted, so their
        probabilities stay zero without fitting their plans (the same values: ``0 · mass`` is
        zero): on the ``static-64`` trees drafted without replacement 12 and 19 of the walk's
        30-31 fits lie below a drafted token that Y never equals (p = 0 there, or its selection
        and residual both zero). With next-token rows every node is fitted, as those rows are
        defined at every node."""
        return reach == 0

    def _law(self, tree: Tree, next_token: bool) -> TreeLaw:
        exact = tree.exact
        nodes = tree.nodes
        zero = Fraction(0) if exact else 0.0
        prob = np.array([zero] * nodes.count, dtype=object) if exact else np.zeros(nodes.count)
        rows = None
        if next_token:
            rows = np.full((nodes.count, tree.n), zero, dtype=object) if exact else np.zeros((nodes.count, tree.n))

        def walk(node: int, reach) -> None:
            if rows is None and self._unreached(reach):  # E[τ] only: its subtree's probabilities stay zero
                return
            if not nodes.children[node]:  # a leaf accepted: the bonus token
                prob[node] = reach
                if rows is not None:
                    rows[node] = tree.target_at(node)
                return
            if rows is None and self._runs_single(tree, node):  # E[τ] only: P(Y = x | x) suffices
                (child,) = nodes.children[node]
                accept = single_draft_acceptance(tree.target_at(node), tree.draft_at(node), int(nodes.token[child]))
                walk(child, reach * accept)
                prob[node] = reach * (1 - accept)
                return
            children = nodes.children[node]
            tokens = nodes.token[np.asarray(children, dtype=np.int64)].astype(np.int64)
            if rows is None and self._pointwise(tree, node):  # E[τ] only, at a real vocabulary
                at_children, mass = self._conditional_at(tree, node, tokens)
            else:
                law_y = self._conditional(tree, node)  # P(Y = · | live tuple)
                at_children, stop = law_y[tokens], law_y.copy()
                stop[tokens] = zero
                mass = stop.sum()  # numpy's sum: Python's sum(stop) walks 1e5 floats one by one
                if rows is not None and mass > 0:
                    rows[node] = stop / mass
            for child, value in zip(children, at_children):
                walk(child, reach * value)
            prob[node] = reach * mass

        walk(0, Fraction(1) if exact else 1.0)
        return TreeLaw(tree, prob, rows)

    def _select(self, tree: Tree, node: int, rng: np.random.Generator) -> int:
        """The walk's token Y at ``node``: drawn from the rows coupling's row where the walk uses
        it (it has no sampler of its own), else selected by the node's scheme."""
        from multidraft.schemes import Scheme

        if self._rows_below(tree, node):
            return sample_index(self._conditional(tree, node), rng)
        scheme, law, tuple_ = self._node(tree, node)
        target = np.asarray(tree.target_at(node), dtype=np.float64)
        if tree.exact:
            name, drafts, _ = tree.node_draws(node)
            law = node_law(name, np.asarray(drafts, dtype=np.float64), tuple_)
        if isinstance(scheme, Scheme):  # its plan, dropped after this draw: the tree's row itself, not a copy
            return scheme.prepare(target, law, copy=False).select(tuple_, rng).token
        return scheme.select(target, law, tuple_, rng).token

    def _verify(self, tree: Tree, rng: np.random.Generator) -> tuple[int, int]:
        nodes = tree.nodes
        node = 0
        while nodes.children[node]:
            token = self._select(tree, node, rng)
            following = [c for c in nodes.children[node] if nodes.token[c] == token]
            if not following:
                return node, token
            node = following[0]
        return node, sample_index(tree.target_at(node), rng)

    def _verify_batch(self, batch, generator, rng) -> BatchVerification:
        return token_batch(self.scheme, batch, generator, rng)


# ------------------------------------------------------------------------------------------


def token_batch(scheme, batch: TreeBatch, generator, rng: np.random.Generator | None = None) -> BatchVerification:
    """The token walk over B trees with ``scheme`` (:class:`~multidraft.trees.TokenVerifier`),
    depth by depth, recording every node it verifies (:class:`NodeStep`).

    At each depth the trees' current nodes are grouped by the class of their live drafts' law
    and their number; per group the scheme runs once in its batched torch form where it has one
    for that law (:func:`node_scheme`), else its plan for each node,
    prepared on the host, selects with ``rng`` (an object with ``select`` only: that); where the
    walk couples by rows (:func:`rows_below`), the rows coupling's row on the host. The
    drafts carrying the output token stay live; a tree whose output is no live draft stops
    with it, and after L accepted tokens a bonus token is drawn from the target.

    Raises
    ------
    RuntimeError
        When the scheme's ``accepted`` disagrees with whether its token is a live draft.
    """
    import torch

    target, draft, tokens = batch.target, batch.draft, batch.tokens
    device = target.device
    size, k, length = batch.size, batch.k, batch.length
    host = tokens.cpu().numpy()
    rng = host_rng(generator) if rng is None else rng
    live = [list(range(k)) for _ in range(size)]
    done = np.zeros(size, dtype=bool)
    accepted = np.zeros(size, dtype=np.int64)
    output = np.zeros(size, dtype=np.int64)
    steps: list[list[NodeStep]] = [[] for _ in range(size)]
    couplings: dict[bytes, Any] = {}  # rows couplings met in this batch (a small vocabulary), by (p, q, k)
    for depth in range(length):
        nodes: dict[tuple, list[int]] = {}
        for b in np.flatnonzero(~done):
            law_class = live_law_class([batch.groups[r] for r in live[b]], batch.without_replacement)
            nodes.setdefault((law_class, len(live[b])), []).append(int(b))
        for (law_class, count), members in nodes.items():
            chosen, batched = node_scheme(scheme, law_class, count)
            if len(members) == 1 and count == k:  # decoding's case: views of the block's tensors
                b = members[0]
                p, q, x = target[b, 0, depth][None], draft[b, :, depth][None], tokens[b, :, depth][None]
            else:
                index = torch.as_tensor(members, device=device)
                rows = torch.as_tensor([live[b] for b in members], device=device)  # [G, count]
                p = target[index, rows[:, 0], depth]  # [G, n]
                q = draft[index[:, None], rows, depth]  # [G, count, n]
                x = tokens[index[:, None], rows, depth]  # [G, count]
            if rows_below(scheme, law_class, count, target.shape[-1], depth, length):
                token, flag, plans = zip(*(_rows_select(chosen, law_class, p[g], q[g], x[g], rng, couplings) for g in range(len(members))))
            elif batched:
                token, flag = (v.cpu().numpy() for v in chosen.select_batch(p, q, x, generator))
                plans = [None] * len(members)
            else:
                token, flag, plans = zip(*(_host_select(chosen, law_class, p[g], q[g], x[g], rng) for g in range(len(members))))
            for g, b in enumerate(members):
                drafted = tuple(int(host[b, r, depth]) for r in live[b])
                carriers = [r for r, t in zip(live[b], drafted) if t == int(token[g])]
                if bool(flag[g]) != bool(carriers):
                    raise RuntimeError(
                        f"scheme {getattr(scheme, 'name', scheme)!r} reported accepted={bool(flag[g])} "
                        f"for token {int(token[g])} with drafts {list(drafted)}"
                    )
                steps[b].append(
                    NodeStep(depth + 1, tuple(live[b]), drafted, int(token[g]), bool(carriers), p[g], q[g], law_class, chosen, plans[g])
                )
                if carriers:
                    live[b] = carriers
                else:
                    done[b], accepted[b], output[b] = True, depth, int(token[g])
    rest = np.flatnonzero(~done)
    first = torch.as_tensor([live[b][0] for b in range(size)], device=device)
    if len(rest):
        index = torch.as_tensor(rest, device=device)
        output[rest] = _sample(target[index, first[index], length], generator).cpu().numpy()
        accepted[rest] = length
    return BatchVerification(
        torch.as_tensor(accepted, device=device), first, torch.as_tensor(output, device=device), tuple(map(tuple, steps))
    )


def _rows_select(scheme, law_class, p, q, x, rng: np.random.Generator, couplings: dict) -> tuple[int, bool, object]:
    """Run the rows coupling (:func:`~multidraft.trees._rows_rule.rows_coupling`) at one node on
    the host: ``(token, accepted, None)``; ``scheme``'s own selection (:func:`_host_select`) where
    HiGHS does not solve it, as :meth:`TokenVerifier._prepare` falls back. ``couplings``
    remembers each (p, q, k) met."""
    target, draft = p.double().cpu().numpy(), q[0].double().cpu().numpy()
    key = target.tobytes() + draft.tobytes() + bytes([len(q)])
    if key not in couplings:
        couplings[key] = rows_coupling(target, draft, len(q))
    coupling = couplings[key]
    if coupling is None:
        return _host_select(scheme, law_class, p, q, x, rng)
    drafted = x.cpu().numpy()
    token = sample_index(coupling(drafted[None])[0], rng)
    return token, bool(np.any(drafted == token)), None


def _host_select(scheme, law_class, p, q, x, rng: np.random.Generator) -> tuple[int, bool, object]:
    """Run ``scheme`` at one node on the host: ``(token, accepted, its plan or None)``. A
    :class:`~multidraft.schemes.Scheme` prepares its plan for (p, law) and the plan selects;
    another object's ``select`` runs."""
    from multidraft.schemes import Scheme

    target, law = p.double().cpu().numpy(), law_class.from_drafts(q.double().cpu().numpy(), normalize=True)
    if isinstance(scheme, Scheme):
        plan = scheme.prepare(target, law)
        selection = plan.select(x.cpu().numpy(), rng)
        return int(selection.token), bool(selection.accepted), plan
    selection = scheme.select(target, law, x.cpu().numpy(), rng)
    return int(selection.token), bool(selection.accepted), None
