"""The target held without a copy on the one-shot sampling path (issue 34, item 3):
``as_distribution(..., copy=False)`` returns the caller's array only where validation leaves it
unchanged, every check still refuses bad input, and no scheme's ``sample`` writes into it."""

from __future__ import annotations

import numpy as np
import pytest

from multidraft.schemes import SCHEMES, get_scheme
from multidraft.theory import as_distribution
from multidraft.theory.laws import IID

UNIT = np.array([0.5, 0.25, 0.125, 0.0625, 0.0625])  # sums to exactly one


def test_copy_false_returns_the_array_only_when_unchanged():
    assert as_distribution(UNIT, "target", copy=False) is UNIT
    assert as_distribution(UNIT, "target") is not UNIT  # the default still copies
    rescaled = UNIT * (1 + 1e-9)  # within the tolerance, divided by its sum: a new array
    assert as_distribution(rescaled, "target", copy=False) is not rescaled
    floored = np.array([0.5, 0.5, 1e-310])  # below the mass floor: zeroed in a copy
    out = as_distribution(floored, "target", copy=False)
    assert out is not floored and out[2] == 0.0 and floored[2] == 1e-310
    assert as_distribution(UNIT.astype(np.float32), "target", copy=False).dtype == np.float64


@pytest.mark.parametrize(
    "values, message",
    [([0.5, np.nan, 0.5], "NaN"), ([1.5, -0.5, 0.0], "negative"), ([0.5, 0.6], "sum"), ([0.5, np.inf], "infinit")],
)
def test_copy_false_keeps_every_check(values, message):
    with pytest.raises(ValueError, match=message):
        as_distribution(np.array(values), "target", copy=False)


def _untouched_by_sample(name: str) -> bool:
    """Whether ``get_scheme(name).sample`` leaves the caller's target as it was and draws what it
    draws from a private copy of it (the same seed)."""
    scheme, law = get_scheme(name), IID([0.4, 0.3, 0.2, 0.1, 0.0], 2)
    drafts = law.sample(np.random.default_rng(1), 50)
    target = UNIT.copy()
    tokens, _ = scheme.sample(target, law, drafts, np.random.default_rng(2))
    again, _ = scheme.sample(UNIT.copy(), law, drafts, np.random.default_rng(2))
    return bool(np.array_equal(target, UNIT) and np.array_equal(tokens, again))


@pytest.mark.parametrize("name", [name for name, cls in SCHEMES.items() if cls().supports(IID(UNIT, 2))])
def test_sample_never_writes_into_the_target(name):
    assert _untouched_by_sample(name)


def test_a_plan_writing_into_its_target_is_caught(monkeypatch):
    """The broken twin: a plan that scales its target in place fails the check above."""
    scheme = get_scheme("optimal")
    prepare = type(scheme).prepare

    def writing(self, target, law, exact=False, copy=True):
        plan = prepare(self, target, law, exact, copy)
        np.multiply(plan.target, 0.5, out=plan.target)
        return plan

    monkeypatch.setattr(type(scheme), "prepare", writing)
    assert not _untouched_by_sample("optimal")
