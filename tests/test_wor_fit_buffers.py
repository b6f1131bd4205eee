"""The without-replacement rule keeps no memory that a later fit overwrites (issue 34, item 3:
any scratch the fit reuses from call to call must stay out of what a rule keeps).

A rule is fitted, copied, and a second rule fitted on another instance of the same size; the
first rule's law r, coins α, positions, acceptance coins, group, layout and optimal law r* must
be unchanged. The broken twin writes the acceptance coins into one kept module-level buffer
(what a careless workspace would do) and the same check catches it.
"""

from __future__ import annotations

import numpy as np
import pytest

from multidraft.theory import WithoutReplacement, softmax, zipf
from multidraft.theory.verifier import _selection_rule, optimal_selection_rule

FIELDS = ("selection_law", "alpha", "position", "accept", "group", "optimal_law")
LAYOUT = ("token_group", "piece_group", "piece_start", "piece_end", "group_first", "group_last", "law")


def _arrays(rule) -> dict[str, np.ndarray]:
    arrays = {name: np.array(getattr(rule, name), copy=True) for name in FIELDS if getattr(rule, name) is not None}
    if rule.layout is not None:
        arrays.update({f"layout.{name}": np.array(getattr(rule.layout, name), copy=True) for name in LAYOUT})
    return arrays


def first_rule_unchanged(n: int, k: int, temperatures: tuple[float, float]) -> bool:
    """Fit at the first temperature, then at the second (same n, K) and read the second's arrays
    (its step is built on demand): is the first rule as it was?"""
    p = zipf(n, exponent=1.1, rng=np.random.default_rng(n))
    first = optimal_selection_rule(p, WithoutReplacement(softmax(np.log(p), temperature=temperatures[0]), k))
    before = _arrays(first)
    _arrays(optimal_selection_rule(p, WithoutReplacement(softmax(np.log(p), temperature=temperatures[1]), k)))
    after = _arrays(first)
    return before.keys() == after.keys() and all(np.array_equal(before[key], after[key]) for key in before)


@pytest.mark.parametrize(("n", "k", "temperatures"), [(4096, 2, (0.5, 1.6)), (49152, 8, (1.6, 0.5)), (49152, 4, (1.0, 2.0))])
def test_a_later_fit_leaves_the_first_rule_unchanged(n, k, temperatures):
    assert first_rule_unchanged(n, k, temperatures)


def test_twin_a_kept_buffer_in_the_rule_is_caught(monkeypatch):
    kept: dict[int, np.ndarray] = {}
    real = _selection_rule.canonical_step

    def aliasing_step(p, r):  # the coins written into one buffer per size, reused by the next fit
        accept, residual = real(p, r)
        buffer = kept.setdefault(len(accept), np.empty(len(accept)))
        buffer[:] = accept
        return buffer, residual

    monkeypatch.setattr(_selection_rule, "canonical_step", aliasing_step)
    assert not first_rule_unchanged(4096, 2, (0.5, 1.6))
