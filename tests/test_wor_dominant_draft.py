"""A known shortfall of the without-replacement rule, pinned (docs/optimal_verifier.md §9):
one draft token of mass 1 - 1e-12, the other n - 1 sharing 1e-12 equally.

Then the drafts are, to ~1e-24, the dominant token plus a uniform (K-1)-subset S of the other
M = n - 1 tokens, so every quantity is a binomial-coefficient sum, independent of the race
quadrature:

* P* = min over prefixes {dominant} ∪ (the j smallest-p others) of p(T) + 1 - C(j, K-1)/C(M, K-1);
* the T* side's law for given coins (positions by decreasing p, the dominant token last):
  r_i = α_i [x^{K-2}] Π_{b<i} (1 + (1 - α_b) x) (1 + x)^{m-1-i} / C(M, K-1)  (m = |T*| - 1);
* r* = p on those m tokens lies in B(h) iff every top-j set (the heaviest of its size, the draft
  law being exchangeable) has slack s_j = [C(m, K-1) - C(m-j, K-1)]/C(M, K-1) - p(top_j) >= 0.

Found: P* and the rule's law are right (the rule is lossless); the rule misses P* (cause (c)):
the forward coin fit leaves rows that draft an early token whose coin says back to later
positions, and where s_j < s_{j-1} (the 4th token at seed 0, K = 8; the 2nd at seed 2, K = 4)
those rows exceed the slack. Reordering the six heaviest tokens does not help (checked by the
same formula), and |T*| > 64 gets no order search anyway. At K = 2 (one non-dominant draft a
row, nothing to leak) the rule reaches P*: the pin's twin.
"""

from __future__ import annotations

from math import comb

import numpy as np
import pytest

from multidraft.theory.verifier._wor_rule import wor_selection_rule

N, DOMINANT = 4096, 7


def _instance(seed: int) -> tuple[np.ndarray, np.ndarray]:
    q = np.full(N, 1e-12 / (N - 1))
    q[DOMINANT] = 1.0 - 1e-12
    return np.random.default_rng(seed).dirichlet(np.full(N, 0.3)), q


def _exchangeable_pass(values: np.ndarray, k: int, alpha: np.ndarray | None = None, compete: bool = True):
    """``(α, r)`` of front/back on T*'s m equal-mass tokens in position order (``values``: their
    p), by the binomial formula of the module docstring; ``alpha=None`` fits the coins forward
    (α_i = min(1, p_i / r_i at α_i = 1)), as the pass does. ``compete=False`` is a broken twin
    that ignores the coins of earlier positions."""
    m, norm = len(values), comb(N - 1, k - 1)
    fitted = np.empty(m) if alpha is None else np.asarray(alpha, dtype=np.float64)
    law, prefix = np.empty(m), np.zeros(k - 1)
    prefix[0] = 1.0
    for i in range(m):
        whole = sum(prefix[j] * comb(m - 1 - i, k - 2 - j) for j in range(k - 1)) / norm
        if alpha is None:
            fitted[i] = min(1.0, values[i] / whole)
        law[i] = fitted[i] * whole
        if compete:
            prefix[1:] = prefix[1:] + (1.0 - fitted[i]) * prefix[:-1]
    return fitted, law


@pytest.mark.parametrize(("seed", "k", "shortfall"), [(0, 8, 1.3104e-7), (2, 4, 2.0152e-8)])
def test_dominant_draft_token_shortfall_is_the_coin_fit(seed, k, shortfall):
    p, q = _instance(seed)
    rule = wor_selection_rule(p, q, k)
    others = np.sort(np.delete(p, DOMINANT))
    prefix_p = np.concatenate([[0.0], np.cumsum(others)])
    norm = comb(N - 1, k - 1)
    cuts = [prefix_p[j] + p[DOMINANT] + 1.0 - comb(j, k - 1) / norm for j in range(N)]
    size = int(np.argmin(cuts))
    # (a) P* and T* by the binomial formula over every prefix
    assert rule.optimum == pytest.approx(cuts[size], abs=1e-13)
    assert len(rule.certificate) == size + 1 and DOMINANT in rule.certificate
    # r* = p on T*'s other tokens is reachable: every top-j set has slack >= 0
    m, top = size, others[:size][::-1]
    slack = np.array([(comb(m, k - 1) - comb(m - j, k - 1)) / norm for j in range(1, m + 1)]) - np.cumsum(top)
    assert slack.min() >= -1e-15
    # (b) the rule's law on T* (race quadrature) against the binomial formula with its coins
    position = np.argsort(rule.position)[rule.boundary :]
    assert position[-1] == DOMINANT
    tokens = position[:-1]
    _, law = _exchangeable_pass(p[tokens], k, rule.alpha[tokens])
    np.testing.assert_allclose(rule.selection_law[tokens], law, rtol=1e-11, atol=0.0)
    _, twin = _exchangeable_pass(p[tokens], k, rule.alpha[tokens], compete=False)
    assert np.max(np.abs(rule.selection_law[tokens] - twin) / law) > 1e-6  # the twin is rejected
    # (c) the shortfall: all on the T* side, the forward coin fit's (same coins, same leak)
    alpha, fitted = _exchangeable_pass(top, k)
    np.testing.assert_allclose(rule.alpha[tokens], alpha, rtol=0.0, atol=1e-12)
    leak = float(np.maximum(top - fitted, 0.0).sum())
    assert abs(rule.shortfall[0]) < 1e-13
    assert rule.shortfall[1] == pytest.approx(leak, rel=1e-6)
    assert rule.optimum - rule.acceptance == pytest.approx(shortfall, rel=1e-3)  # known (§9): a fix changes this pin
    short_at = int(np.argmax(top - fitted > 0))
    assert slack[short_at] < slack[short_at - 1]  # where the slack falls


def test_dominant_draft_token_at_two_drafts_reaches_p_star():
    """The pin's twin: at K = 2 no two non-dominant tokens share a row, so no coin leaks and
    the rule reaches P* on the same target (the pinned shortfall would fail here)."""
    p, q = _instance(0)
    rule = wor_selection_rule(p, q, 2)
    assert abs(rule.optimum - rule.acceptance) < 1e-13
    assert max(np.abs(rule.shortfall)) < 1e-13
