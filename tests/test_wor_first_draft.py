"""The wor rule's choice between its fit and the first draft does not follow rounding.

Where the first draft (law q) itself reaches P*, the fitted rule reaches it too and their
acceptances differ by rounding only; the fit is kept unless q gains more than
``FIRST_DRAFT_GAIN``. Twin: the plain comparison (gain 0) flips between the two rules as the
target moves by 1e-15.
"""

import numpy as np
import pytest

from multidraft.theory import WithoutReplacement
from multidraft.theory.verifier import _wor_rule, optimal_selection_rule


def _choices(count: int = 30) -> set[bool]:
    """first_draft over targets 1e-15 apart: p ≤ q on the draftable tokens (so q reaches P* =
    p(draftable)) and the rest of p on a token no draft holds."""
    rng = np.random.default_rng(1)
    n = 200
    q = np.append(rng.dirichlet(np.full(n, 0.3)), 0.0)
    base = np.append(0.1 * q[:n] * rng.uniform(0.2, 1.0, n), 0.0)
    base[-1] = 1.0 - base.sum()
    choices = set()
    for _ in range(count):
        p = base * (1.0 + 1e-15 * rng.standard_normal(n + 1))
        rule = optimal_selection_rule(p / p.sum(), WithoutReplacement(q, 2))
        assert rule.acceptance == pytest.approx(float(p[:n].sum() / p.sum()), abs=1e-13)  # at P* either way
        choices.add(rule.first_draft)
    return choices


def test_the_fit_is_kept_when_the_first_draft_only_ties():
    assert _choices() == {False}


def test_twin_the_plain_comparison_follows_rounding(monkeypatch):
    monkeypatch.setattr(_wor_rule, "FIRST_DRAFT_GAIN", 0.0)
    assert _choices() == {False, True}
