"""Selective block verification: the token-level optimal selection at every node, with block
verification's budgets along the path (new here; proofs in docs/block_level.md, "Selective").

At a node v entered with budget a (the probability, averaged over v's random subtree, that the
subtree's verification succeeds; a = 1 at the root) and target residual B (the target
p(· | v) on entry):

1. a selection rule picks **one** live draft token c -- the token-level optimal selection for
   the target ``a·B`` (the missing mass 1 - a on a token no draft holds) and the node's draft
   law: the curtain rule of :func:`multidraft.theory.verifier.optimal_selection_rule` for iid
   drafts, for drafts without replacement the transport LP's optimal coupling where it fits
   (small vocabularies) and the front/back rule beyond -- whose law r over the children is
   known exactly. On K iid chains, where the rows carrying the selected token continue below,
   r is realised where it fits (small vocabularies; above the last drafted depth, where rows
   below count) by the rule that selects a token carried by as many rows as possible (:mod:`multidraft.trees._rows_rule`): the same r, so the same
   budgets, and more rows left to try below;
2. c's subtree is verified the same way with budget ``b = min(1, a·B(c) / r(c))``;
3. if it fails, v itself is accepted with probability ``a' = S / (S + 1 - a)``,
   ``S = Σ_x [a·B(x) - r(x)]_+``, and the next token is drawn from ``norm([a·B - r]_+)``;
   otherwise v fails (its parent continues at step 3).

The invariant is traversal's (a node entered with budget a emits ``a × p(continuation)`` and
fails with probability 1 - a, averaged over its subtree), now with one try among the children:
the child's emission ``r(x)·min(1, a B(x)/r(x)) = min(r(x), a B(x))`` plus v's residual emission
``(a B(x) - r(x))_+`` is ``a B(x)``. So it is lossless for any selection rule whose law is
known; the optimal rule makes the mass entering the children, ``Σ_x min(r(x), a B(x))``, as
large as any rule can (the token-level optimum for the target aB).

With one draft it is block verification (r = q); with L = 1 it is the token-level optimal
verifier. It sees only the tree. Exact laws are in float64 (the rules' laws are floats).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import NamedTuple, Protocol

import numpy as np

from multidraft.theory.laws import law_class
from multidraft.trees._residual import scaled_residual
from multidraft.trees._rows_rule import rows_rule
from multidraft.trees.base import BatchVerification, Tree, TreeLaw, TreeVerifier, sample_index
from multidraft.trees.token import node_law
from multidraft.trees.tree import DraftTree

__all__ = ["Selective", "REMEMBER_BELOW"]

#: Vocabularies up to this size have their selection rules remembered (exact evaluation).
REMEMBER_BELOW = 1024
_REMEMBERED_RULES = 4096


class Selector(Protocol):
    """A selection among the live drafts, known by its law (the optimal selection rules of
    :mod:`multidraft.theory.verifier` are such)."""

    def choice_probabilities(self, tuples: np.ndarray) -> np.ndarray:
        """P(draft i is selected | X = x) for every row of ``tuples [m, k]``."""


class ByWeights(NamedTuple):
    """A selection known by its probabilities alone (a fixed set, the transport LP's coupling,
    the rows rule)."""

    choice_probabilities: Callable[[np.ndarray], np.ndarray]


#: The one live draft is selected.
_ONE = ByWeights(lambda tuples: np.ones(np.shape(tuples)))


def _draw(selector: Selector, live: np.ndarray, rng: np.random.Generator) -> int:
    """The selected column of the live drafts ``live``, drawn: a curtain rule by the random
    positions of its restriction to the live tokens (:meth:`~multidraft.theory.verifier.CurtainRule.restricted`:
    the same position sets, so the same law, with a piece table of at most K groups rather than
    one over the vocabulary, whose running sum alone costs more than the fit's last stage,
    and without integrating the choice probabilities), any other selection from its choice
    probabilities (:func:`sample_index`)."""
    from multidraft.theory.verifier import CurtainRule

    if isinstance(selector, CurtainRule):
        return int(selector.restricted(live).choose(live[None], rng)[0])
    return sample_index(selector.choice_probabilities(live[None])[0], rng)


class Selective(TreeVerifier):
    """Selective block verification (module docstring): trees drafted iid or without
    replacement at the root, any K, and trees drafted node by node by any shape law."""

    name = "selective"
    drafting = ("iid", "wor", "shape:iid", "shape:without-replacement", "shape:top-k")
    exact_capable = False

    def __init__(self) -> None:
        self._rules: dict[bytes, object] = {}

    def _selection(self, tree: Tree, node: int, budget: float, residual: np.ndarray) -> tuple[np.ndarray, Selector]:
        """``(r over the tokens [n], the selection)`` at ``node`` for the target ``budget ·
        residual`` (mass 1 - budget on a token no draft holds); the selection's
        ``choice_probabilities(tuples)`` are P(each live draft is selected) (a run draws one by
        :func:`_draw`).

        One live draft: r = its draft law. iid drafts: the curtain rule (exact optimum).
        Without replacement: the optimal coupling of the transport LP where its size guard
        lets it run (small vocabularies; Theorem 1's importance weights, ``r`` their exact
        law), else the front/back rule. Rules are remembered for small vocabularies
        (n <= :data:`REMEMBER_BELOW`), where exact evaluation meets the same node state in
        many trees."""
        name, drafts, live = tree.node_draws(node)
        drafts = np.asarray(drafts, dtype=np.float64)
        random = law_class(name).takes_distributions  # else a fixed set (a top-k node)
        # the rows carrying the selected token continue below (K iid chains), where something is below
        rows = isinstance(tree, DraftTree) and int(tree.nodes.depth[node]) + 1 < tree.length
        if len(live) == 1:  # r = the law of the one draft
            if random:
                return drafts[0], _ONE
            fixed = np.zeros(tree.n)  # a top-k node drafting one token: r is a point mass
            fixed[live[0]] = 1.0
            return fixed, _ONE
        # a·B and the missing mass, normalised in place (fresh rows of n cost page faults)
        target = np.empty(tree.n + 1)
        np.multiply(budget, np.asarray(residual, dtype=np.float64), out=target[:-1])
        target[-1] = max(1.0 - budget, 0.0)
        key = None
        if tree.n <= REMEMBER_BELOW:
            key = hashlib.blake2b(f"{name}|{rows}".encode() + target.tobytes() + drafts.tobytes() + live.tobytes() * (not random)).digest()
        rule = self._rules.get(key) if key is not None else None
        if rule is None:
            # every live draft of the trees selective takes shares one draft row: extend it once
            shared = np.append(drafts[0], 0.0)
            target /= target.sum()
            rule = self._rule(target, node_law(name, np.broadcast_to(shared, (len(live), len(shared))), live), rows)
            if key is not None:
                if len(self._rules) >= _REMEMBERED_RULES:
                    self._rules.pop(next(iter(self._rules)))
                self._rules[key] = rule
        law, selector = rule
        return law[: tree.n], selector

    @staticmethod
    def _rule(target: np.ndarray, law, rows: bool = False) -> tuple[np.ndarray, Selector]:
        """``(selection law r [n + 1] (or [n] when every token but the appended one can be
        drafted), its selection)`` of the optimal selection for ``(target, law)``. A fixed set S (a top-k node): ``r = target`` restricted to
        S and renormalised (uniform on S where the target puts nothing there), which puts at
        least ``target(x)`` on every x in S, so ``Σ_x min(r(x), target(x)) = target(S)``, the most
        any rule reaches. iid drafts of ``rows`` (K iid chains, where the rows carrying the
        selected token continue): the curtain rule's law r, realised where it fits by the rule
        that selects a token carried by as many rows as possible (:func:`rows_rule`)."""
        from multidraft.theory.laws import IID, Deterministic, WithoutReplacement

        if isinstance(law, Deterministic):
            on = np.where(law.draft_set, target, 0.0)
            r = on / on.sum() if on.sum() > 0 else law.draft_set / law.draft_set.sum()
            return r, ByWeights(lambda tuples: r[tuples])
        from multidraft.theory.laws import ProblemTooLargeError
        from multidraft.theory.verifier import CurtainRule, optimal_selection_rule

        if isinstance(law, WithoutReplacement):
            from multidraft.lp import importance_from_coupling, transport_lp
            from multidraft.lp.transport import transport_size

            try:
                transport_size(law)
            except ProblemTooLargeError:
                pass
            else:
                selection = importance_from_coupling(transport_lp(target, law, progress=False), target, law)
                return np.asarray(selection.intermediate, dtype=np.float64), ByWeights(selection.selection_probabilities)
        rule = optimal_selection_rule(target, law, copy=False)  # target: built by _selection, never written after
        if rows and isinstance(law, IID):
            more_rows = rows_rule(law.draft, law.k, rule.selection_law)
            if more_rows is not None:
                return more_rows[0], ByWeights(more_rows[1])
        if isinstance(rule, CurtainRule) and len(rule.support) == rule.n - 1 and rule.support[-1] == rule.n - 2:
            # every token but the appended one: r on them is the support's law (no dense scatter)
            return rule.support_law, rule
        return rule.selection_law, rule

    @staticmethod
    def _fallback(budget: float, residual: np.ndarray, r: np.ndarray, keep: bool = True) -> tuple[float, Callable[[], np.ndarray] | None]:
        """``(a', () -> norm([a B - r]_+))`` after the selected child failed (``a`` kept, and B, when
        S + 1 - a = 0 or S = 0: states of probability zero, as in traversal). The residual law is
        normalised only when asked (a draw from it, or the next-token rows): E[τ] needs a' alone,
        and with ``keep=False`` (no law asked for: None in its place) only S is summed, its
        weights not written.
        The weights and their sum in one compiled pass (:func:`~multidraft.trees._residual.scaled_residual`)."""
        weights, total = scaled_residual(residual, budget, r, 1.0, keep=keep)
        following = total / (total + 1.0 - budget) if total + 1.0 - budget > 0 else budget
        if not keep:
            return following, None
        return following, ((lambda: weights / total) if total > 0 else (lambda: residual))

    def _law(self, tree: Tree, next_token: bool) -> TreeLaw:
        nodes = tree.nodes
        prob = np.zeros(nodes.count)
        mass = np.zeros((nodes.count, tree.n)) if next_token else None  # O(m·n): only when asked

        def visit(node: int, budget: float, residual: np.ndarray, reach: float) -> float:
            """Record the accepted nodes of ``node``'s subtree (times ``reach``); return the
            probability that the subtree fails."""
            children = nodes.children[node]
            fail_children = 1.0
            following, rest = budget, (lambda: residual)
            if children:
                r, selector = self._selection(tree, node, budget, residual)
                live = tree.node_draws(node)[2]
                chosen = selector.choice_probabilities(live[None])[0]
                del selector  # not held through the subtree: a rule's layout takes megabytes at a real vocabulary
                fail_children = 0.0
                for child in children:
                    token = int(nodes.token[child])
                    selected = float(chosen[live == token].sum())
                    if selected <= 0:
                        continue
                    child_budget = min(1.0, budget * residual[token] / r[token])
                    target = np.asarray(tree.target_at(child), dtype=np.float64)
                    fail_children += selected * visit(child, child_budget, target, reach * selected)
                following, rest = self._fallback(budget, residual, r, keep=mass is not None)
            accepted = reach * fail_children * following
            prob[node] += accepted
            if mass is not None:
                mass[node] += accepted * rest()
            return fail_children * (1.0 - following)

        visit(0, 1.0, np.asarray(tree.target_at(0), dtype=np.float64), 1.0)
        rows = None
        if mass is not None:
            rows = np.divide(mass, prob[:, None], out=np.zeros_like(mass), where=prob[:, None] > 0)
        return TreeLaw(tree, prob, rows)

    def _verify(self, tree: Tree, rng: np.random.Generator) -> tuple[int, int]:
        nodes = tree.nodes

        def run(node: int, budget: float, residual: np.ndarray):
            children = nodes.children[node]
            following, rest = budget, (lambda: residual)
            if children:
                r, selector = self._selection(tree, node, budget, residual)
                live = tree.node_draws(node)[2]
                token = int(live[_draw(selector, live, rng)])
                del selector  # not held through the subtree (as in _law)
                child = next(c for c in children if nodes.token[c] == token)
                outcome = run(child, min(1.0, budget * residual[token] / r[token]), np.asarray(tree.target_at(child), dtype=np.float64))
                if outcome is not None:
                    return outcome
                following, rest = self._fallback(budget, residual, r)
            if rng.random() < following:
                return node, sample_index(rest(), rng)
            return None

        return run(0, 1.0, np.asarray(tree.target_at(0), dtype=np.float64))

    def _verify_batch(self, batch, generator, rng) -> BatchVerification:
        from multidraft.trees._batch import host_batch

        return host_batch(self, batch, generator, rng)
