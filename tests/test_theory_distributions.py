"""Validation at the boundary and the sampling transforms."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from multidraft.theory import as_distribution, as_exact_distribution, check_count, dirichlet, parse_distribution, softmax, top_k, top_p, zipf

BAD_DISTRIBUTIONS = [
    pytest.param([0.5, -0.1, 0.6], "negative", id="negative"),
    pytest.param([0.5, float("nan"), 0.5], "NaN", id="nan"),
    pytest.param([0.5, float("inf")], "infinite", id="inf"),
    pytest.param([0.5, 0.6], r"sum to 1 \+ 0.1, more than float64 rounding", id="sum-off"),
    pytest.param([], "empty", id="empty"),
    pytest.param([[0.5, 0.5]], "1-D", id="two-dimensional"),
    pytest.param(["a", "b"], "not a numeric array", id="unparsable"),
    pytest.param(5.0, "scalar", id="scalar"),
]


@pytest.mark.parametrize("values, message", BAD_DISTRIBUTIONS)
def test_bad_distribution_raises_naming_argument(values, message):
    with pytest.raises(ValueError, match=f"target: .*{message}"):
        as_distribution(values, "target")


BAD_COUNTS = [
    pytest.param(0, {}, "k: must be an integer >= 1, got 0", id="zero"),
    pytest.param(-1, {"minimum": 0}, "k: must be an integer >= 0, got -1", id="below-minimum"),
    pytest.param(2.0, {}, "k: must be an integer >= 1, got 2.0", id="integral-float"),
    pytest.param(True, {}, "k: must be an integer >= 1, got True", id="bool"),
    pytest.param("3", {}, "k: must be an integer >= 1, got '3'", id="string"),
    pytest.param(np.int64(0), {}, "k: must be an integer >= 1, got 0$", id="numpy-zero"),
    pytest.param(0, {"meaning": "the number of drafts"}, "k: the number of drafts must be an integer >= 1, got 0", id="meaning"),
]


@pytest.mark.parametrize("value, options, message", BAD_COUNTS)
def test_check_count_refuses_naming_argument_and_rule(value, options, message):
    with pytest.raises(ValueError, match=message):
        check_count(value, "k", **options)


def test_check_count_returns_python_int():
    for value, minimum in [(1, 1), (np.int32(5), 1), (0, 0), (7, 7)]:
        out = check_count(value, "k", minimum=minimum)
        assert type(out) is int and out == value


def test_normalize_rescales_and_never_writes_into_input():
    raw = np.array([1.0, 3.0])
    out = as_distribution(raw, "draft", normalize=True)
    np.testing.assert_array_equal(out, [0.25, 0.75])
    np.testing.assert_array_equal(raw, [1.0, 3.0])
    with pytest.raises(ValueError, match="all entries are zero"):
        as_distribution([0.0, 0.0], "draft", normalize=True)


def test_sum_within_tolerance_is_rescaled_to_one():
    out = as_distribution([0.5, 0.5 + 1e-9], "target")
    assert out.sum() == pytest.approx(1.0, abs=1e-15)


def test_exact_distribution_rules():
    assert as_exact_distribution("1/2,1/4,1/4", "p") == (Fraction(1, 2), Fraction(1, 4), Fraction(1, 4))
    with pytest.raises(ValueError, match="floats carry rounding error"):
        as_exact_distribution([0.5, 0.5], "p")
    with pytest.raises(ValueError, match="negative"):
        as_exact_distribution(["-1/2", "3/2"], "p")
    with pytest.raises(ValueError, match="cannot parse"):
        as_exact_distribution(["1/0", "1"], "p")
    with pytest.raises(ValueError, match="sum to 1/2"):
        as_exact_distribution(["1/4", "1/4"], "p")


def test_parse_distribution():
    assert parse_distribution("12/25,6/25,0.5") == [Fraction(12, 25), Fraction(6, 25), 0.5]
    with pytest.raises(ValueError, match="entry 1 'x'"):
        parse_distribution("0.5,x", "target")


def test_softmax_temperature_limits():
    logits = np.array([1.0, 2.0, 3.0])
    np.testing.assert_allclose(softmax(logits).sum(), 1.0)
    np.testing.assert_array_equal(softmax(logits, 0.0), [0.0, 0.0, 1.0])
    np.testing.assert_allclose(softmax(logits, 1e6), np.full(3, 1 / 3), atol=1e-5)
    hot, cold = softmax(logits, 2.0), softmax(logits, 0.5)
    assert hot.max() < softmax(logits).max() < cold.max()
    with pytest.raises(ValueError, match="temperature"):
        softmax(logits, -1.0)


def test_top_k_and_top_p():
    p = np.array([0.1, 0.5, 0.15, 0.25])
    np.testing.assert_allclose(top_k(p, 2), [0, 0.5 / 0.75, 0, 0.25 / 0.75])
    np.testing.assert_allclose(top_p(p, 0.7), [0, 0.5 / 0.75, 0, 0.25 / 0.75])
    np.testing.assert_allclose(top_p(p, 1.0), p)
    np.testing.assert_allclose(top_p(p, 0.4), [0, 1, 0, 0])
    with pytest.raises(ValueError, match="top_p"):
        top_p(p, 0.0)
    with pytest.raises(ValueError, match="integer >= 1"):
        top_k(p, 0)


def test_random_families_are_distributions():
    rng = np.random.default_rng(0)
    for sample in (dirichlet(50, 0.3, rng), zipf(50, 1.1, rng), zipf(50)):
        as_distribution(sample, "sample")
    batch = dirichlet(20, 1.0, rng, size=4)
    assert batch.shape == (4, 20)
    np.testing.assert_allclose(batch.sum(axis=1), 1.0)
    ranked = zipf(5, 1.0)
    assert (np.diff(ranked) < 0).all()


@pytest.mark.parametrize(
    "values, kind",
    [({0: 0.3, 1: 0.7}, "mapping"), ({0.3, 0.7}, "set"), (frozenset({1.0}), "set")],
    ids=["dict", "set", "frozenset"],
)
def test_mappings_and_sets_are_refused_not_read_by_their_keys(values, kind):
    """A dict iterates over its keys: {0: 0.3, 1: 0.7} was read as [0, 1] (issue 20, item 5)."""
    for validate in (as_distribution, as_exact_distribution):
        with pytest.raises(TypeError, match=f"^target: got a {kind} .*pass the probabilities as a sequence"):
            validate(values, "target")


def test_torch_tensors_are_read_as_float64():
    """Tensors of every float dtype, detached or not, are converted (theory never imports
    torch: they are recognised by their methods); the tensor itself is left alone."""
    torch = pytest.importorskip("torch")
    values = [0.25, 0.75]
    for dtype in (torch.float64, torch.float32, torch.float16, torch.bfloat16):
        tensor = torch.tensor(values, dtype=dtype, requires_grad=dtype.is_floating_point)
        out = as_distribution(tensor, "target")
        assert type(out) is np.ndarray and out.dtype == np.float64
        np.testing.assert_array_equal(out, values)
    batch = torch.tensor([[0.5, 0.5], [0.1, 0.9]], dtype=torch.float64)
    out = as_distribution(batch, "target", batched=True)
    out[0, 0] = 7.0
    assert batch[0, 0].item() == 0.5
    with pytest.raises(ValueError, match="^target: expected real probabilities"):
        as_distribution(torch.tensor([0.5, 0.5], dtype=torch.complex64), "target")
    with pytest.raises(ValueError, match="^target: contains negative entries"):
        as_distribution(torch.tensor([1.5, -0.5]), "target")


@pytest.mark.parametrize("tolerance", [-1.0, float("nan"), float("inf"), "0.1"])
def test_sum_tolerance_is_checked(tolerance):
    with pytest.raises(ValueError, match="^tolerance: must be a finite number >= 0"):
        as_distribution([0.5, 0.5], "target", tolerance=tolerance)
