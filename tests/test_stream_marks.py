"""The compiled draw of the J-curtain's U-points (:func:`stream_marks`) against the numpy
expression it replaced (kept here): the same marks and the same generator state afterwards, on
one-row tuples (the walks) and on many rows at once, K = 2..8; the twin that draws the token's
uniform before the repeat's is caught."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from multidraft.theory.verifier._stream_marks import stream_marks


def numpy_marks(tuples, in_u, mass, rng, swapped=False):
    """The numpy expression ``WithoutReplacementRule._stream_marks`` had (``swapped``: the twin,
    its two uniforms of a round drawn in the wrong order)."""
    m, k = tuples.shape
    rows = np.arange(m)
    marks = np.full((m, k), -1, dtype=np.int64)
    count = np.zeros(m, dtype=np.int64)
    points = np.zeros(m, dtype=np.int64)
    arrived_u, arrived_t = np.zeros(m), np.zeros(m)
    for j in range(k):
        live = count < k
        new_u = live & in_u[:, j]
        marks[rows[new_u], points[new_u]] = tuples[new_u, j]
        points += new_u
        count += live
        arrived_u += np.where(live & in_u[:, j], mass[:, j], 0.0)
        arrived_t += np.where(live & ~in_u[:, j], mass[:, j], 0.0)
        if j == k - 1:
            break
        repeating = count < k
        weights = np.cumsum(np.where(in_u[:, : j + 1], mass[:, : j + 1], 0.0), axis=1)
        while repeating.any():
            first, second = rng.random(m), rng.random(m)
            repeat_draw, level_draw = (second, first) if swapped else (first, second)
            repeat = repeating & (repeat_draw * (1.0 - arrived_t) < arrived_u)
            level = level_draw * arrived_u
            column = np.minimum((weights <= level[:, None]).sum(axis=1), j)
            marks[rows[repeat], points[repeat]] = tuples[repeat, column[repeat]]
            points += repeat
            count += repeat
            repeating = repeat & (count < k)
    return marks


def _cases():
    """(tuples, in_u, mass) with distinct tokens per row: heavy U masses (many repeats), tiny
    ones, rows with no U draft, one row and 300 rows."""
    rng = np.random.default_rng(7)
    for k in range(2, 9):
        for rows in (1, 300):
            for scale in (1e-3, 0.1, 1.0 / k):
                tuples = np.stack([rng.choice(50, size=k, replace=False) for _ in range(rows)])
                in_u = rng.random((rows, k)) < 0.6
                mass = rng.random((rows, k)) * scale
                yield tuples.astype(np.int64), in_u, mass


@pytest.mark.parametrize("case", list(_cases()), ids=lambda c: f"k{c[0].shape[1]}-m{len(c[0])}-{c[2].max():.2g}")
def test_compiled_marks_equal_the_numpy_expression(case):
    tuples, in_u, mass = case
    for seed in range(5):
        mine, theirs = np.random.default_rng(seed), np.random.default_rng(seed)
        got = stream_marks(tuples, in_u, mass, mine)
        np.testing.assert_array_equal(got, numpy_marks(tuples, in_u, mass, theirs))
        assert mine.random() == theirs.random()  # the same draws, so the same state after


def test_the_swapped_twin_is_caught():
    """A twin drawing a round's two uniforms in the other order gives other marks somewhere."""
    differ = 0
    for tuples, in_u, mass in _cases():
        got = stream_marks(tuples, in_u, mass, np.random.default_rng(0))
        differ += not np.array_equal(got, numpy_marks(tuples, in_u, mass, np.random.default_rng(0), swapped=True))
    assert differ > 10


@pytest.mark.parametrize("generator", [np.random.PCG64, np.random.MT19937])
def test_threads_sharing_a_generator_leave_the_state_of_a_sequential_run(generator):
    """The kernel runs without the GIL, so it holds the bit generator's lock as numpy's calls do:
    two threads drawing through one generator leave it where 2 × 30 calls in turn leave it (a
    fixed number of draws per call: every row repeats until K points, masses all U)."""
    tuples = np.tile(np.arange(8, dtype=np.int64), (20000, 1))
    in_u, mass = np.ones(tuples.shape, dtype=bool), np.full(tuples.shape, 0.1)
    shared, sequential = np.random.Generator(generator(5)), np.random.Generator(generator(5))

    def calls(rng):
        for _ in range(30):
            stream_marks(tuples, in_u, mass, rng)

    threads = [threading.Thread(target=calls, args=(shared,)) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    calls(sequential)
    calls(sequential)
    assert shared.random() == sequential.random()


def test_a_generator_is_required():
    tuples = np.arange(4, dtype=np.int64).reshape(2, 2)
    with pytest.raises(TypeError, match="rng: expected a numpy.random.Generator, e.g. numpy.random.default_rng.0., got RandomState"):
        stream_marks(tuples, np.ones((2, 2), dtype=bool), np.full((2, 2), 0.1), np.random.RandomState(0))
