"""The optimal verifier's curtain rule (iid drafts) seen from one draft tuple, memory-light.

:class:`~multidraft.theory.verifier.CurtainRule` selects the draft with the smallest random
position on its token's set, and its exact choice probabilities

    P(draft i is selected | X = x) = ∫_0^1 g_{x_i}(t) Π_{j≠i} (1 - G_{x_j}(t)) dt

(:meth:`~multidraft.theory.verifier.CurtainRule.choice_probabilities`) are integrated over the
intervals between *all* piece ends of the rule, with a pieces × intervals table: about
19 GB at n = 49152 (tens of thousands of pieces), where a tree verifier needs one tuple per
node. The integrand involves only the drafted tokens' sets, so the rule restricted to those
sets (:func:`restricted_rule`: a handful of pieces) gives the same probabilities through the
rule's own method, point sets of tiny-mass tokens included. This lives here, not in the
theory layer, until the iid verifier's own method is memory-light (issue 22).
"""

from __future__ import annotations

import numpy as np

from multidraft.theory._curtain_rule import Layout
from multidraft.theory.verifier import CurtainRule

__all__ = ["restricted_rule", "choice_probabilities", "curtain_conditional"]


def restricted_rule(rule: CurtainRule, tokens: np.ndarray) -> CurtainRule:
    """``rule`` on the support ``tokens`` alone (every other token undraftable): the same
    position sets, hence the same selection probabilities for every tuple over ``tokens``."""
    tokens = np.unique(np.asarray(tokens, dtype=np.int64))
    groups = rule.token_group[tokens]
    if (groups < 0).any():
        raise ValueError("drafts: a draft token has draft probability zero")
    kept = np.unique(groups)
    first, last = rule.group_first[kept], rule.group_last[kept]
    pieces = np.concatenate([np.arange(a, b) for a, b in zip(first, last)])
    local = np.searchsorted(rule.support, tokens)
    layout = Layout(
        cut=np.zeros(0, dtype=np.int64),
        group=np.searchsorted(kept, groups),
        group_density=rule.group_density[kept],
        group_bounds=np.concatenate([[0], np.cumsum(last - first)]),
        piece_start=rule.piece_start[pieces],
        piece_end=rule.piece_end[pieces],
        optimum=rule.optimum,
        acceptance=rule.acceptance,
    )
    return CurtainRule(
        rule.k, rule.n, tokens, rule.support_target[local], rule.support_draft[local], layout, outside_mass=0.0
    )


def choice_probabilities(rule, tuples: np.ndarray) -> np.ndarray:
    """``P(draft i is selected | X = x)`` for every row of ``tuples [m, K]``: a curtain rule's
    through its restriction to each row's tokens, any other rule's own method."""
    tuples = np.asarray(tuples, dtype=np.int64)
    if not isinstance(rule, CurtainRule):
        return rule.choice_probabilities(tuples)
    return np.array([restricted_rule(rule, row).choice_probabilities(row[None])[0] for row in tuples]).reshape(tuples.shape)


def curtain_conditional(rule: CurtainRule, tuples: np.ndarray) -> np.ndarray:
    """``P(Y = · | X = x) [m, n]`` of the optimal verifier with curtain ``rule``: the canonical
    decomposition (Khisti et al., ICLR 2025, Theorem 1) -- select draft i with probability
    β_i(x), accept it with probability ``min(1, p/r)``, else sample the residual:

        P(Y = y | x) = Σ_i β_i(x) a(x_i) 1[y = x_i] + (Σ_i β_i(x) (1 - a(x_i))) · res(y),

    ``a = rule.accept``, ``res = rule.residual`` (the formula of the optimal scheme's plan,
    with β from :func:`choice_probabilities`)."""
    tuples = np.asarray(tuples, dtype=np.int64)
    beta = choice_probabilities(rule, tuples)
    accept = rule.accept[tuples]
    out = np.outer((beta * (1.0 - accept)).sum(axis=1), rule.residual)
    np.add.at(out, (np.arange(len(tuples))[:, None], tuples), beta * accept)
    return out
