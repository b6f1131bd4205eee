"""The wor fit's compiled bookkeeping (multidraft.theory.verifier._wor_parts; issue 34, item 3)
against the numpy expressions it replaces, bit for bit, and the cut's candidates evaluated only
within tolerance of the best found against evaluating them all.

Every check is shown to reject a deliberately broken twin.
"""

from __future__ import annotations

import numpy as np
import pytest

from multidraft.theory import softmax, zipf
from multidraft.theory.optimum import _wor_race
from multidraft.theory.optimum._wor_race import PrefixRace, optimal_cut, scan_order
from multidraft.theory.verifier import _wor_parts
from multidraft.theory.verifier._orders import sorted_tokens


def _ratio_instances(seed: int, largest: int):
    """60 ``(p, q)`` pairs (q > 0) of up to ``largest`` tokens; every other one with many equal
    p/q (p a multiple of q)."""
    rng = np.random.default_rng(seed)
    for trial in range(60):
        size = int(rng.integers(1, largest))
        q = rng.dirichlet(np.full(size, 0.5)) + 1e-12
        p = q * rng.integers(1, 4, size) if trial % 2 == 0 else rng.dirichlet(np.full(size, 0.5))
        yield rng, p, q


def test_sorted_part_is_sorted_tokens_and_its_gathers_and_a_part_without_tie_order_is_caught():
    caught = 0
    for rng, p, q in _ratio_instances(1, 3000):
        size = len(p)
        hint = rng.permutation(size)
        hint = hint[np.argsort(p[hint] / q[hint] + rng.normal(0, 1e-3, size), kind="stable")]  # nearly sorted
        tokens, values, masses, key = _wor_parts.sorted_part(hint, p, q)
        expected = sorted_tokens(hint, p[hint] / q[hint])
        np.testing.assert_array_equal(tokens, expected)
        for got, want in ((values, p[expected]), (masses, q[expected]), (key, p[expected] / q[expected])):
            np.testing.assert_array_equal(got, want)
        twin = hint[np.argsort(p[hint] / q[hint], kind="stable")]  # equal ratios left in hint order
        caught += not np.array_equal(twin, expected)
    assert caught >= 10


def test_descending_index_orders_by_decreasing_ratio_ties_by_id_and_a_plain_reversal_is_caught():
    caught = 0
    for _, p, q in _ratio_instances(2, 2000):
        tokens = sorted_tokens(np.arange(len(p)), p / q)
        key = p[tokens] / q[tokens]
        index = _wor_parts.descending_index(key)
        expected = sorted_tokens(tokens[::-1], -key[::-1])
        np.testing.assert_array_equal(tokens[index], expected)
        caught += not np.array_equal(tokens[::-1], expected)  # the twin: reversed, ties left by decreasing id
    assert caught >= 10


def _descending_index_by_reversal(key):
    """The kernel descending_index had (plain Python): the indices reversed, then every run of
    keys equal to the run's first, read through that index, reversed back."""
    m = len(key)
    out = list(range(m - 1, -1, -1))
    start = 0
    while start < m:
        stop = start + 1
        while stop < m and key[out[stop]] == key[out[start]]:
            stop += 1
        out[start:stop] = out[start:stop][::-1]
        start = stop
    return np.array(out, dtype=np.int64)


def _sorted_keys(rng, trial):
    """Increasing keys with runs of ties (at both ends too), NaN (alone and in a row), ±0.0 and ±inf."""
    size = int(rng.integers(0, 60))
    key = np.sort(rng.integers(0, max(size // 2, 1), size).astype(float)) if trial % 3 else np.sort(rng.random(size))
    if trial % 5 == 0 and size:
        key[rng.integers(0, size, 3)] = np.nan
    if trial % 7 == 0 and size > 3:
        key[:2], key[-2:] = (-0.0, 0.0), (np.inf, np.inf)
    return key


def test_descending_index_is_the_kernel_it_replaced_and_a_plain_reversal_is_caught():
    """The neighbour-comparing pass (``_curtain.reversed_runs``) against the reversal it
    replaced, bit for bit, on 300 keys of :func:`_sorted_keys`."""
    rng = np.random.default_rng(11)
    caught = 0
    for trial in range(300):
        key = _sorted_keys(rng, trial)
        np.testing.assert_array_equal(_wor_parts.descending_index(key), _descending_index_by_reversal(key))
        caught += not np.array_equal(np.arange(len(key))[::-1], _descending_index_by_reversal(key))  # the twin
    assert caught >= 100


def test_increasing_is_numpys_strict_comparison_and_a_non_strict_twin_is_caught():
    """sorted_part's check (the failures counted without an early exit) against
    ``np.all(key[:-1] < key[1:])`` on 300 keys of :func:`_sorted_keys` and their reversals
    (NaN anywhere: False); the twin ``<=`` accepts the ties and is caught."""
    _wor_parts._compiled()
    rng = np.random.default_rng(13)
    caught = 0
    for trial in range(300):
        key = _sorted_keys(rng, trial)
        for keys in (key, key[::-1].copy()):
            assert _wor_parts._increasing(keys) is bool(np.all(keys[:-1] < keys[1:]))
            caught += bool(np.all(keys[:-1] <= keys[1:])) != bool(np.all(keys[:-1] < keys[1:]))
    assert caught >= 50


def test_descending_run_order_is_the_stable_argsort_and_declines_a_rise_or_a_leading_nan():
    """The iid fit's ``descending_run_order`` (rises counted without an early exit, the runs by
    ``reversed_runs``): on non-increasing keys with ties, ±0.0 and ±inf it writes
    ``np.argsort(key, kind="stable")`` and returns True; one rise anywhere (or a NaN first, or
    within) returns False with ``order`` untouched. Twin: a check of the first pair only, which
    accepts keys that rise later."""
    from multidraft.theory.verifier import _curtain

    _curtain.compile_in_place(vars(_curtain), _curtain.KERNELS)
    rng = np.random.default_rng(12)
    caught = 0
    for trial in range(300):
        key = _sorted_keys(rng, trial)
        key = key[~np.isnan(key)][::-1].copy()
        order = np.full(len(key), -1, dtype=np.int64)
        assert _curtain.descending_run_order(key, order)
        np.testing.assert_array_equal(order, np.argsort(key, kind="stable"))
        if len(key) >= 3:
            at = int(rng.integers(1, len(key)))
            for bad in (key[at - 1] + 1.0, np.nan):
                spoilt = key.copy()
                spoilt[at if bad == bad else int(rng.integers(0, len(key)))] = bad
                untouched = np.full(len(key), -1, dtype=np.int64)
                rises = not (spoilt[1:] <= spoilt[:-1]).all()
                assert _curtain.descending_run_order(spoilt, untouched) is (not rises and not np.isnan(spoilt).any())
                if rises:
                    assert (untouched == -1).all()
                    caught += at > 1 and spoilt[1] <= spoilt[0]  # the twin, checking the first pair only, accepts it
    assert caught >= 50


def test_side_arrays_tail_start_scatter_and_positions_are_the_numpy_expressions_and_twins_are_caught():
    rng = np.random.default_rng(3)
    for _ in range(30):
        size = int(rng.integers(1, 500))
        values, masses, law = rng.random(size), rng.random(size), rng.random(size)
        index = rng.permutation(size)
        for outside in (0.0, 0.25):
            merged_p, merged_q, r, lead = _wor_parts.side_arrays(index, values, masses, law, outside)
            lead_p, lead_q = ([0.0], [outside]) if outside > 0 else ([], [])
            np.testing.assert_array_equal(merged_p, np.concatenate([lead_p, values[index]]))
            np.testing.assert_array_equal(merged_q, np.concatenate([lead_q, masses[index]]))
            np.testing.assert_array_equal(r, law[index])
            assert lead == len(lead_p)
            buffers = tuple(np.full(size + 2, np.nan) for _ in range(3))  # into given arrays: the same, as views of them
            into = _wor_parts.side_arrays(index, values, masses, law, outside, buffers)
            for got, expected, buffer in zip(into[:3], (merged_p, merged_q, r), buffers):
                np.testing.assert_array_equal(got, expected)
                assert np.shares_memory(got, buffer)
            assert into[3] == lead
        q = np.where(rng.random(size) < 0.1, 0.0, rng.random(size) * 1e-3)
        p, r_star = rng.random(size) * 1e-3, rng.random(size) * 1e-3
        nodes = (300.0, 300.0 * rng.choice([1.0, 1.5, 20.0, 1e300]))  # two bounds on a node, one scan
        expected = []
        for t in nodes:
            misses = np.flatnonzero(~((q > 0) & (q * t <= 0.25) & (p <= 0.9 * r_star)))
            expected.append(int(misses[-1]) + 1 if len(misses) else 0)
            if len(misses) >= 2:  # the twin: the first miss instead of the last
                assert int(misses[0]) + 1 != expected[-1]
        assert _wor_parts.tail_starts(p, q, r_star, nodes, 0.25, 0.9) == tuple(expected)
        assert _wor_parts.tail_starts(p, q, r_star, nodes[:1], 0.25, 0.9) == tuple(expected[:1])
        tokens = rng.permutation(size)
        first, second = rng.random(size), rng.random(size)
        out_first, out_second = np.zeros(size), np.zeros(size)
        _wor_parts.scatter(tokens, first, second, out_first, out_second)
        want_first, want_second = np.zeros(size), np.zeros(size)
        want_first[tokens], want_second[tokens] = first, second
        np.testing.assert_array_equal(out_first, want_first)
        np.testing.assert_array_equal(out_second, want_second)
        split = int(rng.integers(0, size + 1))
        position = _wor_parts.write_positions(tokens[:split], tokens[split:], size)
        want = np.empty(size, dtype=np.int64)
        want[tokens] = np.arange(size)
        np.testing.assert_array_equal(position, want)
        twin = np.empty(size, dtype=np.int64)  # the twin: the second part's positions not offset
        twin[tokens[:split]], twin[tokens[split:]] = np.arange(split), np.arange(size - split)
        if 0 < split < size:
            assert not np.array_equal(twin, want)


def test_descending_values_are_the_sorted_positive_values_and_the_input_order_is_caught():
    rng = np.random.default_rng(4)
    caught = 0
    for trial in range(40):
        size = int(rng.integers(1, 3000))
        values = np.sort(rng.random(size) * (rng.random(size) < 0.9))[::-1].copy()
        if trial % 3 == 0:
            values[0] = rng.random() * 1e-3  # a small lead, as the merged U token
        if trial % 3 == 1:
            rng.shuffle(values)  # far from sorted: the sort fallback
        got = _wor_parts.descending_values(values)
        expected = np.sort(values[values > 0])[::-1]
        np.testing.assert_array_equal(got, expected)
        assert got.flags.c_contiguous
        caught += not np.array_equal(values[values > 0], expected)  # the twin: positive values as given
    assert caught >= 20


@pytest.mark.parametrize("sizes", [range(0, 300), [511, 512, 1000, 4096, 8193, 49152, 131072, 200001]])
def test_pairwise_and_min_sums_are_numpys_bits_and_a_sequential_sum_is_caught(sizes):
    rng = np.random.default_rng(5)
    caught = 0
    for size in sizes:
        a = rng.random(size) * 10.0 ** rng.uniform(-12, 0, size)
        b = rng.random(size) * 10.0 ** rng.uniform(-12, 0, size)
        assert _wor_parts.pairwise_sum(a) == float(a.sum())
        assert _wor_parts.min_sum(a, b) == float(np.minimum(a, b).sum())
        sequential = 0.0
        for value in a.tolist():  # the twin: one running sum in order
            sequential += value
        caught += sequential != float(a.sum())
    assert caught >= len(sizes) // 4
    with pytest.raises(ValueError, match="shapes"):
        _wor_parts.min_sum(np.ones(3), np.ones(4))


def test_radix_order_is_the_stable_argsort_and_the_scan_order_is_unchanged_and_raw_bits_are_caught():
    rng = np.random.default_rng(6)
    declined = 0
    for trial in range(40):
        size = int(rng.integers(1, 5000))
        key = -rng.random(size) * 10.0 ** rng.uniform(-300, 0, size)
        special = rng.random(size)
        key[special < 0.05] = -np.inf
        key[(special >= 0.05) & (special < 0.1)] = -0.0
        key[(special >= 0.1) & (special < 0.12)] = np.nan
        if trial % 4 == 0:
            key = np.round(key, 2)  # many exact ties
        order, expected = _wor_parts.radix_order(key), np.argsort(key, kind="stable")
        raw, sign = key.view(np.uint64), np.uint64(1 << 63)  # the keys' order-preserving bits (NaN the largest)
        bits = np.where(np.isnan(key), ~np.uint64(0), np.where(raw & sign, ~raw, raw | sign))
        finite = bits if len(bits) else np.zeros(1, np.uint64)  # the kept bits: offset from the least, 33-bit resolution or two digits
        span = int(finite.max() - finite.min())
        drop = max(span.bit_length() - 22, 0)
        drop = 64 - _wor_parts.KEY_BITS if drop > 64 - _wor_parts.KEY_BITS + 2 else drop
        top = (bits - finite.min()) >> np.uint64(drop)
        longest = int(np.max(np.unique(top, return_counts=True)[1]))
        declined += order is None
        # declined exactly where a run of keys equal in their top bits is longer than LONG_RUN
        # (settle_ties stops there; the twin settling every run never declines)
        assert (order is None) == (longest > _wor_parts.LONG_RUN)
        if order is not None:
            np.testing.assert_array_equal(order, expected)
        p, q = rng.dirichlet(np.full(size, 0.5)), rng.dirichlet(np.full(size, 0.5))
        p[rng.random(size) < 0.1], q[rng.random(size) < 0.1] = 0.0, 0.0
        if p.sum() > 0 and q.sum() > 0:
            np.testing.assert_array_equal(scan_order(p, q, _wor_parts.radix_order), scan_order(p, q))
    assert declined >= 3
    ulps = -np.nextafter(1.0, 2.0, dtype=np.float64) ** rng.integers(0, 50, 5000)  # -1 - a few ulps: a narrow span,
    np.testing.assert_array_equal(_wor_parts.radix_order(ulps), np.argsort(ulps, kind="stable"))  # sorted by every bit
    ulps[0] = -2.0  # the span of a binade at 33-bit resolution: these keys are one long run
    assert _wor_parts.radix_order(ulps) is None
    p = rng.dirichlet(np.full(5000, 0.5))
    q = p * (1.0 - 1e-16 * rng.random(5000))  # q/p within ulps of 1: the scan sorts all 64 bits itself
    np.testing.assert_array_equal(scan_order(p, q, _wor_parts.radix_order), scan_order(p, q))
    key = -rng.random(100)  # the twin: the raw bits of negative keys sort backwards
    assert not np.array_equal(np.argsort(key.view(np.uint64), kind="stable"), np.argsort(key, kind="stable"))


def _all_candidates(q_sorted, k, candidates, lower, prefix_p, tolerance, basis):
    """The cut's race at every candidate (what main evaluated)."""
    contained = np.zeros(len(candidates))
    inner = candidates[candidates > 0]
    if len(inner):
        contained[candidates > 0] = PrefixRace(q_sorted, k, inner, basis=basis).containment(inner)
    return contained


def _least_bound_only(q_sorted, k, candidates, lower, prefix_p, tolerance, basis):
    """The broken twin: only the candidate of least lower bound (and prefix 0)."""
    contained = np.full(len(candidates), np.nan)
    contained[candidates == 0] = 0.0
    inner = candidates[candidates > 0]
    first = int(np.argmin(lower))
    if candidates[first] > 0:
        contained[first] = PrefixRace(q_sorted, k, inner, basis=basis).containment(candidates[first : first + 1])[0]
    return contained


def _cases():
    rng = np.random.default_rng(7)
    for _ in range(80):
        n, k = int(rng.integers(3, 300)), int(rng.integers(2, 9))
        p, q = rng.dirichlet(np.full(n, rng.choice([0.05, 0.3, 1.0]))), rng.dirichlet(np.full(n, rng.choice([0.05, 0.3, 1.0])))
        if np.count_nonzero(q) >= k:
            yield p, q, k
    p = zipf(49152, exponent=1.1, rng=np.random.default_rng(0))
    for k in (2, 4, 8):
        for temperature in (0.5, 1.2, 1.6, 2.0):
            yield p, softmax(np.log(p), temperature=temperature), k


def test_candidates_within_tolerance_give_the_cut_of_all_candidates_and_the_least_bound_alone_is_caught(monkeypatch):
    cases = list(_cases())
    pruned = [optimal_cut(p, q, k) for p, q, k in cases]
    monkeypatch.setattr(_wor_race, "_candidate_containment", _all_candidates)
    for (p, q, k), cut in zip(cases, pruned):
        full = optimal_cut(p, q, k)
        assert (cut.size, cut.value, cut.contained, cut.candidates) == (full.size, full.value, full.contained, full.candidates)
    monkeypatch.setattr(_wor_race, "_candidate_containment", _least_bound_only)
    twins = [optimal_cut(p, q, k) for p, q, k in cases]
    assert sum((twin.size, twin.value) != (cut.size, cut.value) for twin, cut in zip(twins, pruned)) >= 3


def test_light_split_is_the_mask_and_the_largest_light_mass_and_a_mask_without_zeros_is_caught():
    from multidraft.theory.optimum._wor_moments import LIGHT, light_split

    rng = np.random.default_rng(8)
    caught = 0
    for _ in range(40):
        size = int(rng.integers(1, 2000))
        q = np.where(rng.random(size) < 0.1, 0.0, rng.random(size) * 10.0 ** rng.uniform(-6, -1, size))
        t_max = float(10.0 ** rng.uniform(0, 4))
        mask, scale = light_split(q, t_max)
        expected = (q > 0) & (q * t_max <= LIGHT)
        np.testing.assert_array_equal(mask, expected)
        assert scale == (float(q[expected].max()) if expected.any() else 1.0)
        caught += not np.array_equal(q * t_max <= LIGHT, expected)  # the twin: q = 0 counted light
    assert caught >= 20


def _strict_parts(seed: int):
    """``(values, masses, total, tokens)`` of parts by increasing p/q: mostly strictly
    increasing ratios, every third with equal neighbours; ``total`` across the water level's
    cases (below Σ p, the first breakpoint, between, Σ p and above: μ = 0)."""
    rng = np.random.default_rng(seed)
    for trial in range(240):
        size = int(rng.integers(1, 3000 if trial % 4 == 0 else 60))
        masses = rng.dirichlet(np.full(size, 0.5)) + 1e-12
        values = masses * np.sort(rng.random(size) ** 3 * 5)
        if trial % 3 == 0 and size > 2:
            values[1] = masses[1] * values[0] / masses[0]  # a tie: the caller sorts
        value_total = float(values.sum())
        total = value_total * (0.05, 0.5, 0.9, 0.999, 1.0, 1.5)[trial % 6] + 0.3 * masses.sum() * (trial % 5 == 0)
        yield values, masses, total, rng.permutation(10_000)[:size]


def test_sorted_side_is_the_part_law_index_and_side_arrays_and_a_forward_free_sum_is_caught():
    """sorted_side at strict_level's μ against the wor rule's r* (``_part_law``, clip "max"), the
    reversal of descending_index and side_arrays, bit for bit, r* written at the tokens only, its
    target ``min_sum(p, r*)``'s bits and ``pair_masses`` of its merged q; strict_level is
    water_level's "max" level bit for bit exactly when p/q increases strictly, else None (the
    caller sorts). The twins: the free tokens' p summed forward (numpy sums the reversed view
    backwards), whose r* differs, and the masses summed in scan order, which differ."""
    from multidraft.theory.verifier import _wor_curtain
    from multidraft.theory.verifier._curtain import _workspace
    from multidraft.theory.verifier._wor_rule import _part_law

    from multidraft.theory.optimum._wor_pairs import pair_masses

    taken = caught = masses_caught = 0
    for values, masses, total, tokens in _strict_parts(7):
        strict = bool(np.all(values[:-1] / masses[:-1] < values[1:] / masses[1:]))
        with _workspace(10_000) as work:
            level = _wor_parts.strict_level(values, masses, total, work)
        assert (level is not None) == strict
        if not strict:
            continue
        taken += 1
        assert level == _wor_curtain.water_level(values, masses, total, "max")
        outside = 0.25 if len(tokens) % 2 else 0.0
        r_star = np.full(10_000, np.nan)
        with _workspace(10_000) as work:
            got = tuple(np.array(a) if isinstance(a, np.ndarray) else a for a in _wor_parts.sorted_side(tokens, values, masses, total, level, outside, r_star, work))
        law = _part_law(values, masses, total, "max")
        index = _wor_parts.descending_index(values / masses)
        np.testing.assert_array_equal(index, np.arange(len(values))[::-1])
        merged_p, merged_q, r, lead = _wor_parts.side_arrays(index, values, masses, law, outside)
        np.testing.assert_array_equal(got[0], tokens[index])
        for a, b in zip(got[1:], (merged_p, merged_q, r, lead, float(np.minimum(merged_p[lead:], r).sum()))):
            np.testing.assert_array_equal(a, b)
        assert len(got) == 7 and got[6] == pair_masses(merged_q)  # the masses summed on the way, bit for bit
        masses_caught += pair_masses(merged_q[::-1]) != got[6]  # the twin: summed in scan order
        expected = np.full(10_000, np.nan)
        expected[tokens] = law
        np.testing.assert_array_equal(r_star, expected)
        cut, pool_mass, _ = _wor_curtain.pool_split(values, masses, total, "max")
        np.testing.assert_array_equal(_part_law(values, masses, total, "max", values / masses), law)  # the ratios given
        if cut:  # the twin: the free p summed in their own order
            twin = values.copy()
            twin[:cut] = masses[:cut] * (max(total - values[cut:].sum(), 0.0) / pool_mass)
            caught += not np.array_equal(twin, law)
    assert taken >= 100 and caught >= 5 and masses_caught >= 50


def test_strict_level_probes_the_breakpoint_sums_and_a_level_without_the_kept_values_is_caught(monkeypatch):
    """strict_level's bisection over the breakpoint sums evaluated at its probes against
    ``water_level`` (all the sums written, numpy's searchsorted), bit for bit, on strictly
    increasing parts of every kind (the level 0, inside, past the last breakpoint); the twin
    forgets the values before each breakpoint (V_j = 0: every token's p counted as kept): its
    level differs."""
    from multidraft.theory.verifier import _wor_curtain
    from multidraft.theory.verifier._curtain import _workspace

    def forgetful(values, masses, mass_before, value_before):  # the twin's pass
        mass_before[:] = np.cumsum(masses) - masses
        value_before[:] = 0.0
        return True

    levels, caught = [], 0
    for values, masses, total, _ in _strict_parts(11):
        if not np.all(values[:-1] / masses[:-1] < values[1:] / masses[1:]):
            continue
        with _workspace(len(values)) as work:
            level = _wor_parts.strict_level(values, masses, total, work)
            assert level == _wor_curtain.water_level(values, masses, total, "max")
            with monkeypatch.context() as patched:
                patched.setattr(_wor_parts, "_increasing_sums", forgetful)
                caught += _wor_parts.strict_level(values, masses, total, work) != level
        levels.append(level)
    assert len(levels) >= 100 and sum(level == 0 for level in levels) >= 5 and caught >= 20


def test_cut_members_is_the_masks_flatnonzero_and_the_unsorted_prefix_is_caught():
    """cut_members of the positions U then T* (:func:`write_positions`, T* = the prefix
    ``order[:size]`` of a permutation) against ``np.flatnonzero`` of the prefix's mask (the
    marking pass it replaced), prefixes empty, whole and anywhere between; the twins, the
    prefix as it stands (not in id order) and the positions below the boundary (U), differ."""
    rng = np.random.default_rng(8)
    caught = 0
    for trial in range(300):
        n = int(rng.integers(0, 2000))
        order = rng.permutation(n)
        size = int(rng.integers(0, n + 1)) if trial % 3 else (n if trial % 2 else 0)
        mask = np.zeros(n, dtype=bool)
        mask[order[:size]] = True
        position = _wor_parts.write_positions(rng.permutation(order[size:]), rng.permutation(order[:size]), n)
        got = _wor_parts.cut_members(position, n - size)
        np.testing.assert_array_equal(got, np.flatnonzero(mask))
        assert got.dtype == np.int64 and got.shape == (size,)
        caught += not np.array_equal(order[:size], got)
        if 0 < size < n:
            assert not np.array_equal(np.flatnonzero(position < n - size), got)
    assert caught >= 200


def test_min_sum_into_scratch_is_the_numpy_expression_and_the_exact_sum_is_caught():
    """min_sum with a scratch (holding NaN before) is ``np.minimum(a, b).sum()`` bit for bit, as
    the compiled one is; the twin, the exactly rounded sum (math.fsum), differs on some."""
    import math

    rng = np.random.default_rng(9)
    caught = 0
    scratch = np.full(70_000, np.nan)
    for _ in range(60):
        n = int(rng.integers(0, 60_000))
        a, b = rng.random(n) ** 5, rng.random(n) ** 5
        expected = float(np.minimum(a, b).sum())
        assert _wor_parts.min_sum(a, b, scratch) == expected == _wor_parts.min_sum(a, b)
        caught += math.fsum(np.minimum(a, b)) != expected
    assert caught >= 10
    with pytest.raises(ValueError, match="shapes"):
        _wor_parts.min_sum(np.ones(3), np.ones(2), scratch)


def test_rule_sums_are_the_numpy_expressions_and_a_sequential_sum_is_caught():
    """rule_sums against ``r.sum()``, ``(r < -1e-15).any()``, ``np.minimum(p, q).sum()``,
    ``np.minimum(p, r).sum()`` and ``np.maximum(p - r, 0).sum()``, bit for bit (signed zeros,
    a NaN in r or in p, a negative entry, workspace arrays holding NaN before), and the three
    arrays it sums against numpy's; the twins sum the step's excess token by token (not numpy's
    pairwise order), and take the minimum without its NaN clause (``where(p < q, p, q)``), and
    differ."""
    from multidraft.theory.verifier._curtain import _workspace

    rng = np.random.default_rng(12)
    caught = nan_twin = 0
    for trial in range(200):
        n = int(rng.integers(1, 20_000 if trial % 5 == 0 else 300))
        p, q, r = rng.dirichlet(np.full(n, 0.3)), rng.dirichlet(np.full(n, 0.3)), rng.dirichlet(np.full(n, 0.3))
        if trial % 4 == 1:  # signed zeros and exact ties
            p[: n // 3], r[: n // 3] = -0.0, 0.0
            q[n // 3 : n // 2] = p[n // 3 : n // 2]
        if trial % 7 == 2:
            r[int(rng.integers(n))] = -1e-12
        if trial % 11 == 3:
            r[int(rng.integers(n))] = np.nan
        if trial % 13 == 4:
            p[int(rng.integers(n))] = np.nan
        with _workspace(n) as work:
            for name in ("scratch", "key", "mass"):
                getattr(work, name).fill(np.nan)
            got = _wor_parts.rule_sums(p, q, r, work)
            arrays = [getattr(work, name)[:n].copy() for name in ("scratch", "key", "mass")]
        for array, numpy_array in zip(arrays, (np.minimum(p, q), np.minimum(p, r), np.maximum(p - r, 0.0))):
            np.testing.assert_array_equal(array.view(np.int64), numpy_array.view(np.int64))  # bits: signed zeros, NaN
        nan_twin += not np.array_equal(np.where(p < q, p, q), arrays[0], equal_nan=True)
        expected = (float(r.sum()), bool((r < -1e-15).any()), float(np.minimum(p, q).sum()), float(np.minimum(p, r).sum()), float(np.maximum(p - r, 0.0).sum()))
        np.testing.assert_array_equal(np.array(got, dtype=float), np.array(expected, dtype=float))
        assert [type(x) for x in got] == [float, bool, float, float, float]
        sequential = 0.0
        for x in np.maximum(p - r, 0.0):
            sequential += float(x)
        caught += sequential != got[4]
    assert caught >= 20
    assert nan_twin >= 10
