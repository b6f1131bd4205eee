"""Synthetic decoding positions: Zipf-like targets on a large vocabulary with temperature-shifted
drafts, shared by the gap table, the truncated-LP sweep and the predicted speed-up."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from multidraft.theory import softmax, zipf

__all__ = ["PositionSet", "zipf_positions"]


@dataclass(frozen=True)
class PositionSet:
    """Target distributions ``[B, n]`` standing in for B decoding positions.

    Each row is Zipf-like, ``p_(r) ∝ r^(-s_b)`` over ranks (tokens permuted at random), with
    exponent ``s_b`` drawn uniformly from ``exponent_range``; the target temperature is 1, so
    ``log p`` are the target logits. A draft at temperature T is ``softmax(log p / T)``.
    """

    targets: np.ndarray
    exponents: np.ndarray

    def drafts(self, temperature: float) -> np.ndarray:
        """Temperature-shifted drafts ``q_b = softmax(log p_b / T)``, shape ``[B, n]``."""
        return softmax(np.log(self.targets), temperature)


def zipf_positions(
    n: int, positions: int, rng: np.random.Generator, exponent_range: tuple[float, float] = (0.9, 1.5)
) -> PositionSet:
    """Draw ``positions`` Zipf-like targets on ``n`` tokens (see :class:`PositionSet`).

    >>> ps = zipf_positions(10, 3, np.random.default_rng(0))
    >>> ps.targets.shape, bool(np.allclose(ps.targets.sum(axis=1), 1))
    ((3, 10), True)
    """
    if positions < 1:
        raise ValueError(f"positions: needs at least one position, got {positions}")
    low, high = exponent_range
    if not 0 < low <= high:
        raise ValueError(f"exponent_range: needs 0 < low <= high, got {exponent_range}")
    exponents = rng.uniform(low, high, size=positions)
    targets = np.stack([zipf(n, float(s), rng) for s in exponents])
    return PositionSet(targets=targets, exponents=exponents)
