"""The shortcuts of validation on the per-position hot path (issue 34, item 3) give the numbers
of the general route: a sparse draft scaled on its positive entries, a target summing to exactly
one copied rather than divided, one draft tuple checked without ``np.unique``."""

import numpy as np
import pytest

from multidraft.schemes.base import _check_tuples
from multidraft.theory.laws import IID, MASS_FLOOR, as_distribution
from multidraft.theory.laws._distributions import SPARSE_SHARE


def _general(values, total):
    out = values / total
    out[out < MASS_FLOOR] = 0.0
    return out


@pytest.mark.parametrize("scale", [1.0, 3.0, 1e-290])
def test_sparse_input_matches_the_dense_route(scale):
    """The sparse route divides by the sum over the positive entries: bit for bit the general
    route with that sum, and within the rounding of the addition order (a few ulp) of the dense
    route's sum over all entries, with the same zero pattern."""
    rng = np.random.default_rng(3)
    values = np.zeros(4096)
    positive = rng.choice(4096, 4096 // SPARSE_SHARE // 2, replace=False)
    values[positive] = rng.dirichlet(np.full(len(positive), 0.3)) * scale
    values[positive[:3]] = [1e-310, 5e-301, 2e-300]  # below the floor before or after scaling
    values /= values.sum() / scale
    out = as_distribution(values, normalize=True)
    np.testing.assert_array_equal(out, _general(values, values[values > 0].sum()))
    dense = _general(values, values.sum())
    np.testing.assert_allclose(out, dense, rtol=1e-15, atol=0)
    assert out is not values and np.count_nonzero(out) == np.count_nonzero(dense)


def test_sum_of_exactly_one_is_copied_not_aliased():
    values = np.full(1024, 1 / 1024)
    assert values.sum() == 1.0
    out = as_distribution(values)
    np.testing.assert_array_equal(out, values)
    out[0] = 0.5
    assert values[0] == 1 / 1024


def test_one_tuple_is_checked_as_a_table_of_one():
    law = IID([0.5, 0.5, 0.0], 2)
    tuples, single = _check_tuples(law, [0, 1])
    assert single and tuples.tolist() == [[0, 1]]
    with pytest.raises(ValueError, match="probability zero"):
        _check_tuples(law, [[0, 2]], require_rows=True)


def test_sorted_tokens_is_the_stable_sort_by_id_whatever_the_hint():
    """The wor fit's orders from the cut's scan order (issue 34, item 3) are exactly the stable
    sorts of the keys in id order: ties (0.0 and -0.0 included), infinities and NaN, for a
    random hint, the right order, its reverse, and a run of ties over the whole range."""
    from multidraft.theory.verifier._orders import sorted_tokens

    rng = np.random.default_rng(34)
    for trial in range(600):
        n = int(rng.integers(0, 90))
        values = np.array([0.0, -0.0, 1.0, 2.0, np.inf, -np.inf, np.nan, 0.5])[: int(rng.integers(1, 9))]
        key = rng.choice(values, n) if trial % 3 else rng.random(n)
        ids = np.sort(rng.choice(400, n, replace=False)) if trial % 2 else np.arange(n)
        expected = ids[np.argsort(key, kind="stable")]
        for hint in (rng.permutation(n), np.argsort(key, kind="stable"), np.argsort(key, kind="stable")[::-1]):
            np.testing.assert_array_equal(sorted_tokens(ids[hint], key[hint]), expected)
    hint = rng.permutation(5000)
    np.testing.assert_array_equal(sorted_tokens(hint, np.ones(5000)), np.arange(5000))


def test_upper_products_are_numpys_left_to_right_products():
    """The pruned scan's upper bounds (issue 34, item 3): the compiled pass over the K - 1 largest
    masses so far gives the bits of ``np.prod(np.maximum(Q - M, 0), axis=1)``, M from a sort of
    every prefix."""
    from multidraft.theory.optimum import _wor_sums

    rng = np.random.default_rng(8)
    for trial in range(50):
        n, k = int(rng.integers(1, 300)), int(rng.integers(1, 9))
        q = rng.dirichlet(np.full(n, rng.uniform(0.05, 2.0)))
        if trial % 5 == 0:  # ties and zeros
            q = np.round(q, 2)
        prefix_q = np.minimum(np.concatenate([[0.0], np.cumsum(q)]), 1.0)
        top = np.zeros((n + 1, k))
        for j in range(1, n + 1):
            largest = np.zeros(k - 1)  # fewer tokens than K - 1: zeros after them
            kept = np.sort(q[:j])[::-1][: k - 1]
            largest[: len(kept)] = kept
            top[j, 1:] = np.cumsum(largest)
        expected = np.prod(np.maximum(prefix_q[:, None] - top, 0.0), axis=1)
        np.testing.assert_array_equal(_wor_sums.upper_products(q, prefix_q, k), expected)


def test_tail_horner_is_the_vectorised_recurrence():
    """The uniform tail's law (issue 34, item 3): the compiled Horner loop gives the bits of the
    vectorised ``value = value · ratio + (c_l + q d_l)`` (no fused multiply-add)."""
    from multidraft.theory._numba import compile_in_place
    from multidraft.theory.verifier import _wor_tail

    compile_in_place(vars(_wor_tail), _wor_tail.KERNELS)
    rng = np.random.default_rng(9)
    for _ in range(50):
        n, order = int(rng.integers(1, 3000)), int(rng.integers(1, 30))
        q = rng.random(n) ** 5 * 1e-3
        c, d = (rng.normal(size=order) * 10.0 ** rng.uniform(-5, 5, order) for _ in range(2))
        expected = np.zeros(n)
        for level in range(order - 1, -1, -1):
            expected = expected * (q / q.max()) + (c[level] + q * d[level])
        value = np.zeros(n)
        _wor_tail._horner(q, q / q.max(), c, d, value)
        np.testing.assert_array_equal(value, expected)
