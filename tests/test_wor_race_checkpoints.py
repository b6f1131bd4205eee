"""The cut's races share their checkpoints through the basis (issue 30, item 5: a P* < 1 node's
cut ran 2-9 races over the whole vocabulary): every g is what a race with a basis of its own
gives, bit for bit, in any order of asking, and a memo that ignores the light scale is caught;
the probes' chords raise the bounds in one pass with numpy's bits.
"""

from __future__ import annotations

import numpy as np

from multidraft.theory import softmax, zipf
from multidraft.theory.optimum import _wor_race, _wor_sums
from multidraft.theory.optimum._wor_race import PrefixRace, RaceBasis, race_basis, scan_order


def _rows():
    """Draft masses in scan order: Zipf targets with hotter drafts (most tokens light at the
    race's nodes), and Dirichlet rows (few light), K = 2, 4, 8."""
    rng = np.random.default_rng(11)
    for n, k in ((6000, 2), (3000, 4), (2000, 8)):
        p = zipf(n, exponent=1.1, rng=rng)
        q = softmax(np.log(p) + 0.3 * rng.standard_normal(n), temperature=1.4)
        yield q[scan_order(p, q)], k
        p, q = rng.dirichlet(np.full(n, 0.3)), rng.dirichlet(np.full(n, 0.3))
        yield q[scan_order(p, q)], k


def _asks(rng, size):
    """Prefix sets as the cut asks them: single probes near the end, then a final set, in an
    order that makes later races both shorter and longer than earlier ones."""
    asks = [np.array([int(rng.integers(size // 2, size))]) for _ in range(5)]
    asks.append(np.unique(rng.integers(1, size, 40)))
    asks.append(np.array([size - 1]))
    return asks


def test_races_sharing_a_basis_give_the_values_of_races_alone():
    rng = np.random.default_rng(3)
    shared_hits = 0
    for q_sorted, k in _rows():
        size = int(np.count_nonzero(q_sorted))
        basis = race_basis(q_sorted, k)
        for prefixes in _asks(rng, size):
            alone = PrefixRace(q_sorted, k, prefixes, basis=race_basis(q_sorted, k)).containment(prefixes)
            shared = PrefixRace(q_sorted, k, prefixes, basis=basis).containment(prefixes)
            np.testing.assert_array_equal(shared, alone)
        shared_hits += len(basis._known) < len(_asks(rng, size))
    assert shared_hits >= 3  # races did share checkpoints (fewer node sets than races)


class _ScaleBlind(RaceBasis):
    """The broken twin: checkpoints kept by the nodes alone, whatever the light scale."""

    def checkpoints(self, head, light, scale, t, a, prefixes):
        for (nodes, _), known in self._known.items():
            if nodes == t.tobytes() and len(known[0]) >= len(head):
                return known
        return super().checkpoints(head, light, scale, t, a, prefixes)


def test_checkpoints_kept_across_light_scales_are_caught():
    """A long race first, then a shorter one at the same nodes whose head stops before the
    largest light mass: its own scale differs, so its power sums do; the basis keeps the two
    apart, the twin hands the long race's sums to the short one."""
    rng = np.random.default_rng(5)
    q_sorted = rng.random(4000) * 1e-5
    q_sorted[1500] = 4e-5  # the largest mass, light at the race's nodes
    q_sorted /= q_sorted.sum()
    k, size = 2, len(q_sorted)  # 4000
    race = PrefixRace(q_sorted, k, np.array([size // 2]), basis=race_basis(q_sorted, k))  # λ ~ 1/2
    t, a = race.t, race.a
    long_light, long_scale = _wor_race.light_split(q_sorted[: size // 2], float(t[-1]))
    short_light, short_scale = _wor_race.light_split(q_sorted[:1500], float(t[-1]))
    assert long_light[1500] and short_scale != long_scale
    at = np.array([1500])
    fresh = race_basis(q_sorted, k).checkpoints(q_sorted[:1500], short_light, short_scale, t, a, at)
    for basis, same in ((race_basis(q_sorted, k), True), (_ScaleBlind(q_sorted, k, race_basis(q_sorted, k).outside), False)):
        basis.checkpoints(q_sorted[: size // 2], long_light, long_scale, t, a, np.array([size // 2]))
        got = basis.checkpoints(q_sorted[:1500], short_light, short_scale, t, a, at)
        assert np.array_equal(got[4][0][1], fresh[4][0][1]) == same  # the power sums at the first checkpoint after 0


def test_tightened_bounds_are_numpys_bits_and_a_chord_by_shares_is_caught():
    """:func:`tighten_bounds` against ``np.maximum(lower, P + 1 - np.interp(...))``, the count of
    prefixes within the threshold and the first of least bound among them, bit for bit: places
    on the chord's nodes, beyond its ends, NaN bounds. The twin (the chord as a share of the
    rise, ``fp_j + (x - x_j)/(x_{j+1} - x_j) · (fp_{j+1} - fp_j)``) differs in the last bits."""
    rng = np.random.default_rng(9)
    caught = 0
    for trial in range(40):
        size = int(rng.integers(1, 5000))
        place = np.sort(-rng.random(size) ** 3)
        prefix_p = np.sort(rng.random(size))
        lower = prefix_p + 1.0 - rng.random(size)
        lower[rng.random(size) < 0.01] = np.nan
        known = np.unique(np.concatenate([rng.choice(place, min(size, 3)), -rng.random(2), [0.0]]))
        known_x, known_g = known.tolist(), np.sort(rng.random(len(known))).tolist()
        threshold = float(np.nanquantile(lower, 0.3)) if trial % 5 else -np.inf
        chord = np.interp(place, known_x, known_g)
        expected = np.maximum(lower, prefix_p + 1.0 - chord)
        candidates = np.flatnonzero(expected <= threshold)
        got = lower.copy()
        count, first = _wor_sums.tighten_bounds(got, prefix_p, place, known_x, known_g, threshold)
        np.testing.assert_array_equal(got, expected)
        assert count == len(candidates)
        assert first == (int(candidates[np.argmin(expected[candidates])]) if len(candidates) else -1)
        xp, fp = np.array(known_x), np.array(known_g)
        j = np.clip(np.searchsorted(xp, place, side="right") - 1, 0, len(xp) - 2)
        shares = fp[j] + (place - xp[j]) / (xp[j + 1] - xp[j]) * (fp[j + 1] - fp[j])
        inside = (place > xp[0]) & (place < xp[-1]) & ~np.isin(place, xp)
        caught += not np.array_equal(shares[inside], chord[inside])
    assert caught >= 20
