"""The interval of empirical minus expected acceptance (model-based variance Σ a_i (1 - a_i)):
its formula, a non-degenerate interval when every draw is accepted, and its coverage on
simulated Bernoulli positions, with the sample-based interval as the twin that fails."""

from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("torch")

from multidraft.decoding import difference_interval  # noqa: E402

RUNS = 2000


def test_interval_formula():
    accepted = np.array([1, 0, 1, 1.0])
    expected = np.array([0.5, 0.25, 0.75, 0.9])
    low, high = difference_interval(accepted, expected)
    mean = (accepted - expected).mean()
    half = 1.96 * math.sqrt(0.25 + 0.1875 + 0.1875 + 0.09) / 4
    np.testing.assert_allclose([low, high], [mean - half, mean + half], rtol=1e-12)


def test_all_accepted_positions_give_a_real_interval():
    """18 positions, all accepted, each expected at 0.9: the sample spread of acc - a is 0, so a
    sample-based interval would be the single point +0.1; the model's variance is not 0."""
    low, high = difference_interval(np.ones(18), np.full(18, 0.9))
    half = 1.96 * math.sqrt(18 * 0.9 * 0.1) / 18
    np.testing.assert_allclose([low, high], [0.1 - half, 0.1 + half], rtol=1e-12)
    assert high - low > 0.25 and low < 0 < high


def test_certain_positions_give_a_point():
    assert difference_interval(np.ones(3), np.ones(3)) == (0.0, 0.0)
    assert all(math.isnan(v) for v in difference_interval(np.array([]), np.array([])))


@pytest.mark.parametrize(
    "accepted, expected", [(np.ones(3), np.ones(2)), (np.ones((2, 2)), np.ones((2, 2)))], ids=["lengths", "2-d"]
)
def test_interval_bad_input(accepted, expected):
    with pytest.raises(ValueError, match="accepted, expected: expected two 1-D arrays of one length"):
        difference_interval(accepted, expected)


def sample_interval(accepted: np.ndarray, expected: np.ndarray) -> tuple[float, float]:
    """The interval the report used before: mean ± 1.96 sd(acc - a) / sqrt(N)."""
    difference = accepted - expected
    half = 1.96 * difference.std(ddof=1) / math.sqrt(len(difference))
    return difference.mean() - half, difference.mean() + half


def coverage(interval, positions: int, low: float, high: float, seed: int) -> float:
    """Share of ``RUNS`` simulated measurements (``positions`` Bernoulli(a_i) draws, a_i uniform
    on [low, high]) whose interval contains the true difference 0."""
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(RUNS):
        expected = rng.uniform(low, high, positions)
        accepted = (rng.random(positions) < expected).astype(float)
        lower, upper = interval(accepted, expected)
        hits += lower <= 0 <= upper
    return hits / RUNS


@pytest.mark.statistical
@pytest.mark.parametrize(
    "positions, low, high", [(200, 0.05, 0.95), (18, 0.85, 1.0)], ids=["200-broad", "18-near-one"]
)
def test_model_interval_covers_95_percent(positions, low, high):
    """The 95% interval covers the truth in 93-97% of 2,000 simulated runs (binomial sd 0.5
    points), also with 18 positions of acceptance near 1, where runs often accept all."""
    assert 0.93 <= coverage(difference_interval, positions, low, high, seed=positions) <= 0.97


@pytest.mark.statistical
def test_sample_interval_undercovers_near_one():
    """The twin: the sample-based interval, on the same kind of runs, covers far less often
    (every all-accepted run gives it a zero width), so the coverage test can fail."""
    assert coverage(sample_interval, 18, 0.85, 1.0, seed=18) < 0.93
