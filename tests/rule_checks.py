"""Exact checks shared by the verifier tests: a selection rule's law and output by enumerating
every draft tuple of its law with the rule's exact choice probabilities, and the iid rule's law
recomputed through the actual distribution function of a draft's position."""

from __future__ import annotations

import numpy as np

from multidraft.theory.verifier._curtain import interval_weight
from multidraft.theory.verifier import CurtainRule, SelectionRule


def enumerated_law(rule: SelectionRule, law) -> np.ndarray:
    """r(y) = Σ_x D(x) Σ_i 1[x_i = y] P(i selected | x), by enumeration."""
    tuples, probs = law.enumerate()
    choice = rule.choice_probabilities(tuples)
    np.testing.assert_allclose(choice.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    r = np.zeros(law.n)
    np.add.at(r, tuples.ravel(), (choice * probs[:, None]).ravel())
    return r


def enumerated_output(rule: SelectionRule, law) -> np.ndarray:
    """P(Y = y) of select -> accept with min(1, p/r), else the residual, by enumeration."""
    tuples, probs = law.enumerate()
    choice = rule.choice_probabilities(tuples)
    output, rejected = np.zeros(law.n), 0.0
    for i in range(law.k):
        chosen = tuples[:, i]
        np.add.at(output, chosen, probs * choice[:, i] * rule.accept[chosen])
        rejected += float((probs * choice[:, i] * (1.0 - rule.accept[chosen])).sum())
    return output + rejected * rule.residual


def coverage(law, mask: np.ndarray) -> float:
    """h(A) = P(set(X) ∩ A ≠ ∅) = 1 - P(set(X) ⊆ Ω ∖ A)."""
    return 1.0 - float(law.containment(~mask))


def sampled_output(chooser: SelectionRule, rule: SelectionRule, law, draws: int, seed: int) -> np.ndarray:
    """Counts of the output tokens of ``draws`` runs of select (by ``chooser``) -> accept with
    min(1, p/r), else the residual, with ``rule``'s law r (a twin ``chooser`` keeps it)."""
    rng = np.random.default_rng(seed)
    tuples = law.sample(rng, draws)
    chosen = tuples[np.arange(len(tuples)), chooser.choose(tuples, rng)]
    keep = rng.random(len(chosen)) < rule.accept[chosen]
    tokens = np.where(keep, chosen, rng.choice(law.n, size=len(chosen), p=rule.residual))
    return np.bincount(tokens, minlength=law.n)


def law_through_actual_positions(rule: CurtainRule) -> np.ndarray:
    """The law of the rule as laid out, without assuming the pieces tile [0, 1) exactly.

    A draft's position has density f = q(y)/|S_y| on each piece of token y, so its
    distribution function F is piecewise linear over the sorted pieces, and the piece [a, b)
    of a group contributes W(F(a), F(b)) to the group (the probability that the smallest of K
    positions falls in it), shared among the group's tokens in proportion to q.
    """
    q = np.zeros(len(rule.group_first))
    held = rule.token_group >= 0
    np.add.at(q, rule.token_group[held], rule.draft[held])
    groups = np.repeat(np.arange(len(rule.group_first)), rule.group_last - rule.group_first)
    lengths = rule.piece_end - rule.piece_start
    size = np.bincount(groups, lengths, minlength=len(q))
    order = np.argsort(rule.piece_start, kind="stable")
    mass = (q[groups] / size[groups] * lengths)[order]
    cdf = np.concatenate([[0.0], np.cumsum(mass)])
    share = np.zeros(len(q))
    np.add.at(share, groups[order], interval_weight(cdf[:-1], cdf[1:], rule.k))
    r = np.zeros(rule.n)
    r[held] = rule.draft[held] / q[rule.token_group[held]] * share[rule.token_group[held]]
    return r
