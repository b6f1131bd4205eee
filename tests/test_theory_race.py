"""Accuracy of the without-replacement prefix containment (the exponential race for K > 2,
the closed form for K = 2), against two independent computations:

* uniform q: ``P(set(X) ⊆ T) = C(m, K) / C(n, K)`` for a prefix of m tokens, exactly in
  integers, K = 2..16 and n up to 20000;
* any q, n <= 16: a dynamic programme over the 2^n token sets (the law of the set of the first
  j draws, one draw at a time), summed over subsets.

The stated accuracy is an absolute error below 1e-12 for every K; a fixed step of 0.25 (the
kernel before the step was chosen by an error bound) is the wrong twin that must fail.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from multidraft.theory import dirichlet
from multidraft.theory.laws._kernels import _wor_race, race_step, wor_prefix_containment

ACCURACY = 1e-12


def uniform_containment(n: int, k: int) -> np.ndarray:
    """``C(m, k) / C(n, k)`` for m = 0..n, exactly in integers, rounded once."""
    total = math.comb(n, k)
    return np.array([math.comb(m, k) / total for m in range(n + 1)])


def subset_containment(q: np.ndarray, k: int) -> np.ndarray:
    """``P(set(X) ⊆ T)`` for every bitmask T, X the first k draws without replacement from q:
    the law of the set of the first j draws, built one draw at a time over the 2^n sets, then
    summed over the subsets of each T."""
    n = len(q)
    masks = np.arange(1 << n)
    bits = (masks[:, None] >> np.arange(n)) & 1
    size, left = bits.sum(axis=1), (1 - bits) @ q  # left: q(Ω \ S), summed directly (no 1 - q(S))
    law = np.zeros(1 << n)
    law[0] = 1.0
    for j in range(k):
        layer = masks[size == j]
        for a in range(n):
            free = layer[(layer >> a) & 1 == 0]
            step = np.divide(q[a], left[free], out=np.zeros(len(free)), where=left[free] > 0)
            np.add.at(law, free | (1 << a), law[free] * step)
    law[size != k] = 0.0
    for bit in range(n):  # sum over subsets
        view = law.reshape(-1, 2, 1 << bit)
        view[:, 1, :] += view[:, 0, :]
    return law


def prefix_masks(order: np.ndarray) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(1 << order)])


@pytest.mark.parametrize("n", [16, 20, 59, 2000])
def test_uniform_draft_matches_binomial_ratio(n):
    q = np.full(n, 1.0 / n)
    for k in range(2, 17):
        np.testing.assert_allclose(wor_prefix_containment(q, k), uniform_containment(n, k), rtol=0, atol=ACCURACY, err_msg=f"k={k}")


@pytest.mark.parametrize("k", [3, 8, 12, 16])
def test_uniform_draft_at_twenty_thousand_tokens(k):
    n = 20000
    np.testing.assert_allclose(wor_prefix_containment(np.full(n, 1.0 / n), k), uniform_containment(n, k), rtol=0, atol=ACCURACY)


@pytest.mark.parametrize("n", [10, 16])
def test_any_draft_matches_exact_subset_sums(n):
    rng = np.random.default_rng(n)
    spiky = np.full(n, 0.05 / (n - 1))
    spiky[0] = 0.95
    drafts = [dirichlet(n, 0.1, rng), dirichlet(n, 1.0, rng), spiky]
    for q in drafts:
        q = q / q.sum()
        order = rng.permutation(n)
        for k in range(2, min(n, 16) + 1):
            if np.count_nonzero(q) < k:
                continue
            expected = subset_containment(q, k)[prefix_masks(order)]
            np.testing.assert_allclose(wor_prefix_containment(q[order], k), expected, rtol=0, atol=ACCURACY, err_msg=f"k={k}")


def test_subset_reference_reproduces_a_hand_computed_case():
    """The reference itself: q = (1/2, 1/4, 1/4), K = 2: P({0, 1}) = 1/2·1/2 + 1/4·2/3 = 5/12."""
    containment = subset_containment(np.array([0.5, 0.25, 0.25]), 2)
    assert containment[0b011] == pytest.approx(5 / 12, abs=1e-15)
    assert containment[0b111] == pytest.approx(1.0, abs=1e-15)


def test_a_fixed_step_fails_the_uniform_check():
    """WRONG twin: the old fixed step 0.25 errs by about 1e-8 at K = 16, which the check catches."""
    n, k = 200, 16
    error = np.abs(_wor_race(np.full(n, 1.0 / n), k, step=0.25) - uniform_containment(n, k)).max()
    assert error > 100 * ACCURACY


def test_step_shrinks_with_k_and_with_concentrated_drafts():
    steps = [race_step(k, 0.0) for k in (3, 4, 8, 16, 32)]
    assert all(a > b for a, b in zip(steps, steps[1:]))
    assert race_step(8, 0.9) < race_step(8, 0.5) < race_step(8, 0.0)
    assert race_step(64, 1 - 1e-12) > 0.004  # logarithmic growth: still a usable step


@pytest.mark.parametrize("seed", [0, 1])
def test_top_tokens_holding_all_but_a_sliver(seed):
    """Issue 20, item 3: the k - 1 largest tokens hold all but 1e-16 ... 1e-290 of the mass (the
    rest at the floor 1e-300 and above). ``1 - M_{k-1}`` computed by cancellation is rounding
    noise there, and the prefixes it called negligible got containment 1 instead of 0 (P* 0.0035
    instead of 1 at n = 2000, K = 8); the spread is now summed over the other tokens, and the
    step keeps its error bound (its second bound does not degrade as the sliver shrinks)."""
    top = np.full(7, 1 / 7)  # sums to 1 - 2.2e-16 in floats: the cancellation's worst case
    q = np.concatenate([top * (1 - 3e-100), np.full(3, 1e-100)])
    np.testing.assert_allclose(wor_prefix_containment(q, 8), subset_containment(q, 8)[prefix_masks(np.arange(10))], rtol=0, atol=ACCURACY)
    rng = np.random.default_rng(seed)
    for _ in range(40):
        n = int(rng.integers(4, 11))
        k = int(rng.integers(3, n + 1))
        big = int(rng.integers(1, min(k + 1, n) + 1))
        tiny = np.maximum(10.0 ** -rng.choice([16, 20, 40, 60, 100, 200, 290], size=n - big) * rng.random(n - big), 1e-300)
        q = np.concatenate([rng.random(big), tiny])
        q[:big] *= (1 - tiny.sum()) / q[:big].sum()
        q = q[rng.permutation(n)]
        if np.count_nonzero(q) < k:
            continue
        order = rng.permutation(n)
        expected = subset_containment(q, k)[prefix_masks(order)]
        np.testing.assert_allclose(wor_prefix_containment(q[order], k), expected, rtol=0, atol=ACCURACY, err_msg=f"k={k}, q={q.tolist()}")


def test_a_sliver_outside_the_top_tokens_keeps_a_usable_step():
    """The spread σ = 1e-60 alone forces a step of about 0.008 (cost ∝ 1/h); with the least top
    mass β the second bound keeps the step of a spread-out draft."""
    assert race_step(8, 1.0, spread=1e-60) < 0.01
    assert race_step(8, 1.0, spread=1e-60, least_top=0.1) > race_step(8, 0.0) > 0.1
    # either bound alone is valid: the step never exceeds what the first allows for σ = 1 ...
    assert race_step(8, 0.0, least_top=1 / 8) >= race_step(8, 0.0)
    # ... and several rows take the smallest step
    rows = race_step(8, 1.0, spread=np.array([1e-60, 1.0]), least_top=np.array([1e-70, 0.1]))
    assert rows == min(race_step(8, 1.0, spread=1e-60, least_top=1e-70), race_step(8, 1.0, spread=1.0, least_top=0.1))
