"""The U-points of the drafts' rebuilt iid stream (the J-curtain's marks), sampled in one compiled
pass (:class:`~multidraft.theory.verifier.WithoutReplacementRule`'s draw; its law is
:mod:`~multidraft.theory.verifier._stream_choice`'s closed form).

Given the ordered drafts x_1..x_K (distinct), the iid stream that drew them is rebuilt: after the
j-th new token, each further point repeats an arrived U token with probability
``q(arrived U) / (1 - q(arrived T*))`` (T*-repeats do not change the count), its token ∝ q among the
arrived U tokens, until the points (U-points and distinct T* tokens) number K. The walk's rows are
one tuple each, where numpy's calls on arrays of one row cost ~0.3 ms a node at K = 7–8 (a few
hundred small calls); the kernel makes the same draws from the generator, in the same order (per
round, one uniform per row for "repeat?", then one per row for its token), and the same float
operations per row, so it returns the same marks and leaves the generator in the same state.
"""

from __future__ import annotations

import numpy as np

from multidraft.theory._numba import compile_in_place
from multidraft.theory.laws._distributions import check_generator

__all__ = ["stream_marks"]


def stream_marks(tuples: np.ndarray, in_u: np.ndarray, mass: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The tokens of the J U-points of every row of ``tuples [m, K]`` (int64), ``[m, K]`` padded
    with -1: ``in_u [m, K]`` marks the U drafts, ``mass [m, K]`` their q. Round by round after the
    j-th new token (while some row still repeats), ``u, v = rng.random(m), rng.random(m)``; a
    repeating row repeats a U token iff ``u (1 - q(arrived T*)) < q(arrived U)``, namely the first
    arrived draft whose cumulative U mass exceeds ``v q(arrived U)`` (the last arrived, at most).
    O(m K (K + repeats)); ``rng`` advanced exactly as by those calls, holding its bit
    generator's lock as numpy's own calls do (the kernel runs without the GIL)."""
    check_generator(rng)
    compile_in_place(globals(), KERNELS)
    marks = np.full(tuples.shape, -1, dtype=np.int64)
    with rng.bit_generator.lock:
        _marks(tuples, in_u, mass, rng, marks)
    return marks


def _marks(tuples, in_u, mass, rng, marks):
    """:func:`stream_marks` into ``marks`` (filled with -1)."""
    m, k = tuples.shape
    count = np.zeros(m, dtype=np.int64)
    points = np.zeros(m, dtype=np.int64)
    arrived_u = np.zeros(m)
    arrived_t = np.zeros(m)
    repeating = np.zeros(m, dtype=np.bool_)
    for j in range(k):
        for r in range(m):
            if count[r] < k:
                if in_u[r, j]:
                    marks[r, points[r]] = tuples[r, j]
                    points[r] += 1
                    arrived_u[r] += mass[r, j]
                else:
                    arrived_t[r] += mass[r, j]
                count[r] += 1
        if j == k - 1:
            break
        any_repeating = False
        for r in range(m):
            repeating[r] = count[r] < k
            any_repeating |= repeating[r]
        while any_repeating:
            repeat_draw = rng.random(m)
            level_draw = rng.random(m)
            any_repeating = False
            for r in range(m):
                if not (repeating[r] and repeat_draw[r] * (1.0 - arrived_t[r]) < arrived_u[r]):
                    repeating[r] = False
                    continue
                level = level_draw[r] * arrived_u[r]
                total = 0.0
                column = 0
                for c in range(j + 1):  # the cumulative U mass of the arrived drafts, left to right
                    total += mass[r, c] if in_u[r, c] else 0.0
                    column += total <= level
                marks[r, points[r]] = tuples[r, min(column, j)]
                points[r] += 1
                count[r] += 1
                repeating[r] = count[r] < k
                any_repeating |= repeating[r]


KERNELS = ("_marks",)
