"""The enumeration references of the without-replacement rule's J-curtain (exponential in K: for
tests and benchmarks at small K): every U-point sequence of the drafts' rebuilt iid stream with
its probability, and the choice law summed over them, against which the closed form of
:mod:`~multidraft.theory.verifier._stream_choice` and the J-law are tested."""

from __future__ import annotations

import numpy as np

from multidraft.theory.verifier._wor_curtain import point_win_probabilities
from multidraft.theory.verifier._wor_rule import WithoutReplacementRule

__all__ = ["stream_outcomes", "enumerated_choice"]


def stream_outcomes(tuple_, in_u, draft, k):
    """Every U-point sequence of the rebuilt stream of one ordered draft tuple, with its
    probability (the branches of :meth:`WithoutReplacementRule._stream_marks`): the
    enumeration that the closed form of :mod:`~multidraft.theory.verifier._stream_choice` and
    the J-law are tested against (exponential in K: for tests at small K)."""
    outcomes = []

    def walk(j, marks, count, arrived_u, arrived_t, weight):
        token = int(tuple_[j])
        if in_u[j]:
            marks, arrived_u = marks + (token,), arrived_u + draft[token]
        else:
            arrived_t += draft[token]
        count += 1
        if count >= k or j == k - 1:
            outcomes.append((marks, weight))
            return
        arrived = [int(x) for x, u in zip(tuple_[: j + 1], in_u[: j + 1]) if u]
        repeat = arrived_u / (1.0 - arrived_t)
        walk(j + 1, marks, count, arrived_u, arrived_t, weight * (1.0 - repeat))
        if repeat > 0:
            repeats(j, marks, count, arrived_u, arrived_t, weight * repeat, arrived)

    def repeats(j, marks, count, arrived_u, arrived_t, weight, arrived):
        for token in arrived:
            share = draft[token] / arrived_u
            new_marks, new_count = marks + (token,), count + 1
            if new_count >= k:
                outcomes.append((new_marks, weight * share))
                continue
            repeat = arrived_u / (1.0 - arrived_t)
            walk(j + 1, new_marks, new_count, arrived_u, arrived_t, weight * share * (1.0 - repeat))
            repeats(j, new_marks, new_count, arrived_u, arrived_t, weight * share * repeat, arrived)

    walk(0, (), 0, 0.0, 0.0, 1.0)
    return outcomes


def enumerated_choice(rule: WithoutReplacementRule, tuples: np.ndarray) -> np.ndarray:
    """The J-curtain's ``P(draft i selected)`` on rows of ``tuples`` that draft a U token, by
    enumeration: Σ over the rebuilt stream's outcomes (:func:`stream_outcomes`) of their
    probability times the winner law of their marks
    (:func:`~multidraft.theory.verifier._wor_curtain.point_win_probabilities`). The previous exact
    path, kept as the independent reference of the closed form (tests, benchmark)."""
    out = np.zeros(tuples.shape)
    for index, row in enumerate(tuples):
        for marks, weight in stream_outcomes(row, rule._in_u(row), rule.draft, rule.k):
            win = point_win_probabilities(rule.layout, rule.group[np.array(marks)][None, :])[0]
            for token, share in zip(marks, win):
                out[index, int(np.flatnonzero(row == token)[0])] += weight * share
    return out
