"""A scheme defined outside the package and registered by name: the registry tests, the command
line, decoding and the report must take it up without being edited
(tests/test_scheme_registration.py checks that they do). Loaded as a pytest plugin
(``pytest -p registered_scheme``) it registers the scheme before collection, so the registry
tests are parametrised over it like over the built-in schemes.

``first-draft``: single-draft speculative sampling on the first draft only (Leviathan et al.
2023), the other drafts ignored; lossless for any law of independent drafts. Its acceptance
``P(Y ∈ set(X))`` counts a residual token that another draft happens to hold: with
``β = Σ min(p, q_1)`` and ``res = norm((p - q_1)_+)``,

    acceptance = β + (1 - β) Σ_y res(y) (1 - Π_{i>1} (1 - q_i(y)))

(a rejected X_1 has res(X_1) = 0, and the residual draw is independent of X_2..X_K).
"""

from __future__ import annotations

from fractions import Fraction
from functools import cached_property

import numpy as np

from multidraft.schemes import Capabilities, Plan, Scheme, register_scheme
from multidraft.schemes.base import SequentialPlan
from multidraft.theory import IID, Independent, canonical_step


class _FirstDraftPlan(SequentialPlan):
    columns = slice(0, 1)

    @cached_property
    def rule(self) -> tuple[np.ndarray, np.ndarray]:
        return canonical_step(self.target, self.law.marginal(0, self.exact))

    def closed_form(self) -> float | Fraction:
        drafts = self.law.marginals(self.exact)
        beta = np.minimum(self.target, drafts[0]).sum()
        missed = np.prod(1 - drafts[1:], axis=0) if len(drafts) > 1 else np.ones(len(self.target), dtype=drafts.dtype)
        return beta + (1 - beta) * (self.rule[1] * (1 - missed)).sum()


class FirstDraft(Scheme):
    """Speculative sampling on the first draft; the others ride along."""

    name = "first-draft"
    capabilities = Capabilities(laws=(IID, Independent), exact_output=True, any_vocabulary=(IID, Independent))

    def _prepare(self, p: np.ndarray, law, exact: bool) -> Plan:
        return _FirstDraftPlan(self, p, law, exact)


def pytest_configure(config) -> None:
    """As a plugin (``-p registered_scheme``): register before the test modules are collected."""
    register_scheme(FirstDraft)
