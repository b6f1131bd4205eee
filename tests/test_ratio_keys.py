"""The fit's sort keys (:func:`multidraft.theory.verifier._radix.pack_ratio_keys`, issue 30 item 5):
the ratios less the least one, truncated to two radix digits where that costs at most 4x the
resolution of a double's top 33 bits, give ``argsort(kind="stable")``'s order once the runs are
settled, whatever the truncation."""

from __future__ import annotations

import numpy as np
import pytest

from multidraft.theory import softmax, zipf
from multidraft.theory.verifier import _radix
from multidraft.theory.verifier._curtain import density_order

N = 49152


def _fit_like(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """p and q of a tree node of the tree-speed benchmark: a Zipf target, a hotter noisy draft."""
    rng = np.random.default_rng(seed)
    p = zipf(N, exponent=1.1, rng=rng)
    return p, softmax((np.log(p) + 0.5 * rng.standard_normal(N)) / 1.2)


def _cases() -> list[tuple[str, np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(3)
    masses = rng.uniform(0.5, 1.0, N)
    near = rng.choice(1.0 + rng.uniform(0, 1e-3, 300), N) * (1.0 + rng.integers(0, 4, N) * 1e-12)
    wide = np.where(rng.random(N) < 0.2, 0.0, np.exp(rng.uniform(-300, 300, N)))  # zeros and 860 binades
    return [
        ("fit", *_fit_like(0)),
        ("near-ties", near * masses, masses),
        ("wide", wide * masses, masses),
        ("all equal", np.full(N, 0.5), np.ones(N)),
        ("negative zero", np.array([0.5, -0.0, 0.25] * (N // 3)), np.ones(N)),
    ]


@pytest.mark.parametrize("name, values, masses", _cases(), ids=lambda c: c if isinstance(c, str) else "")
def test_density_order_is_the_stable_argsort(name, values, masses):
    with np.errstate(over="ignore"):
        expected = np.argsort(values / masses + 0.0, kind="stable")
    np.testing.assert_array_equal(density_order(values, masses), expected)


def test_two_digits_on_a_fit_and_the_fine_resolution_on_a_wide_range():
    """The fit's ratios span a few binades: two digits (22 bits) hold them at most 4x coarser than
    33 top bits; ratios over 860 binades keep the fine resolution (three digits)."""
    shift = (N - 1).bit_length()
    packed = np.empty(N, dtype=np.uint64)
    p, q = _fit_like(1)
    assert _radix.pack_ratio_keys(p / q + 0.0, packed, shift) <= 2 * _radix.DIGIT_BITS
    _, values, masses = _cases()[2]
    bits = _radix.pack_ratio_keys(values / masses + 0.0, packed, shift)
    assert 2 * _radix.DIGIT_BITS < bits <= _radix.RATIO_BITS
    with pytest.raises(ValueError, match="do not fit"):
        _radix.pack_ratio_keys(p / q + 0.0, packed, 15)  # 49152 entries need 16 index bits


def test_the_offset_twin_is_caught(monkeypatch):
    """WRONG twin: the keys packed without subtracting the least one (the truncation then drops
    the bits that vary and keeps the constant exponent): the order is no longer the argsort's."""
    forward = _radix._pack_offset

    def without_offset(key_bits, low, packed, drop, shift):
        forward(key_bits, np.uint64(0), packed, drop, shift)

    monkeypatch.setattr(_radix, "_pack_offset", without_offset)
    p, q = _fit_like(2)
    assert not np.array_equal(density_order(p, q), np.argsort(p / q, kind="stable"))


def test_a_negative_ratio_is_refused_not_sorted_wrongly():
    """A ratio a rounding below 0 (a law read off the pieces, -5e-38 on a SmolLM2 row) has its
    sign bit set: ``b - b_min`` would wrap and the order be wrong; refused instead. The fit's
    re-split (:func:`~multidraft.theory.verifier._independent_rule.resplit`) clips the share into
    [0, 1], so no negative cap reaches the sort; the unclipped share (twin) is negative."""
    from multidraft.theory.verifier._independent_rule import resplit

    values = np.array([0.5, -5e-38, 0.25] * 20000)
    packed = np.empty(len(values), dtype=np.uint64)
    with pytest.raises(ValueError, match="non-negative"):
        _radix.pack_ratio_keys(values + 0.0, packed, 16)
    law1, law = np.array([-5e-38, 0.2, 0.0]), np.array([0.3, 0.2, 0.0])
    share = resplit(law1, law, np.full(3, 0.5))
    assert share.min() >= 0.0 and share.max() <= 1.0 and share.tolist() == [0.0, 1.0, 0.5]
    assert (np.divide(law1, law, out=np.full(3, 0.5), where=law > 0) < 0).any()  # the twin


def _ordered(key: np.ndarray) -> np.ndarray:
    """The keys' order-preserving bits (sign bit set for non-negative keys, every bit flipped for
    negative ones, NaN the largest): what :func:`~multidraft.theory.verifier._radix.pack_ordered_keys` offsets."""
    raw, sign = key.view(np.uint64), np.uint64(1 << 63)
    return np.where(np.isnan(key), ~np.uint64(0), np.where(raw & sign, ~raw, raw | sign))


def test_ordered_keys_are_offset_from_their_least_bits_and_a_float_minimum_is_caught():
    """The wor scan's keys -q/p (any sign, -0.0 and 0.0, -inf, NaN) packed less their least
    order-preserving bits: the kept bits are ``(b - b_min) >> drop`` (monotone in the key, below
    ``2^bits``), the index below them, two digits on a fit's keys and the fine resolution on a
    wide range. WRONG twin: the offset from the bits of the keys' float minimum (Python's ``min``:
    -0.0 == 0.0, so 0.0 may be taken, whose bits exceed -0.0's): ``b - b_min`` wraps."""
    rng = np.random.default_rng(8)
    shift = (N - 1).bit_length()
    packed = np.empty(N, dtype=np.uint64)
    p, q = _fit_like(3)
    wide = -rng.random(N) * 10.0 ** rng.uniform(-300, 300, N)
    wide[rng.random(N) < 0.05] = -np.inf
    wide[rng.random(N) < 0.05] = np.nan
    wide[rng.random(N) < 0.05] = -0.0
    wide[rng.random(N) < 0.05] = 0.0
    for key, narrow in ((-(q / p), True), (wide, False)):
        bits = _radix.pack_ordered_keys(key, packed, shift, 33)
        assert (bits <= 2 * _radix.DIGIT_BITS) == narrow and 0 < bits <= 33
        np.testing.assert_array_equal(packed & np.uint64((1 << shift) - 1), np.arange(N, dtype=np.uint64))
        kept = packed >> np.uint64(shift)
        assert kept.max() < 1 << bits
        ordered = _ordered(key)
        drop = int(ordered.max() - ordered.min()).bit_length() - bits
        np.testing.assert_array_equal(kept, (ordered - ordered.min()) >> np.uint64(drop))
    with pytest.raises(ValueError, match="do not fit"):
        _radix.pack_ordered_keys(wide, packed, 15, 33)  # 49152 entries need 16 index bits
    signed = np.array([0.0, -0.0, 1.0])
    low = _ordered(np.array([min(signed.tolist())]))[0]  # the twin's least bits: 0.0's (a float minimum: the first of equal ones)
    assert low > _ordered(signed).min()  # above -0.0's, so b - b_min wraps for -0.0
    packed = np.empty(3, dtype=np.uint64)
    bits = _radix.pack_ordered_keys(signed, packed, 2, 33)
    kept = (packed >> np.uint64(2)).tolist()
    assert kept[1] <= kept[0] < kept[2] < 1 << bits  # -0.0, 0.0, 1.0 in order, none wrapped
