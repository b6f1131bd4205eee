"""The P* = 1 rule's shortcuts (issue 30, item 5): the optimal cut builds no race (nor its σ
and step) when no candidate holds draft mass outside it, the iid curtain fit does not sort
ratios that arrive in decreasing order, and the J-curtain's draw sums its pieces' lengths in
one compiled pass. Each gives what the full route gives, bit for bit; each has a twin the
tests catch."""

from __future__ import annotations

import numpy as np
import pytest

from multidraft.theory import softmax, zipf
from multidraft.theory.optimum import _wor_race
from multidraft.theory.optimum._wor_race import full_scan_cut, optimal_cut
from multidraft.theory.verifier import _curtain
from multidraft.theory.verifier._curtain import density_order, descending_run_order
from multidraft.theory.verifier._wor_parts import piece_offsets
from multidraft.theory.verifier._wor_rule import wor_selection_rule

N = 49152


def _descending_keys() -> list[tuple[str, np.ndarray]]:
    rng = np.random.default_rng(11)
    runs = np.sort(rng.choice(rng.random(40), 5000))[::-1].copy()  # runs of equal keys
    return [
        ("distinct", np.sort(rng.random(5000))[::-1].copy()),
        ("runs of ties", runs),
        ("inf and zeros", np.concatenate([[np.inf, np.inf], runs, np.zeros(7)])),
        ("one", np.array([0.5])),
        ("empty", np.zeros(0)),
    ]


@pytest.mark.parametrize("name, key", _descending_keys(), ids=lambda c: c if isinstance(c, str) else "")
def test_a_descending_key_gives_the_stable_argsort(name, key):
    order = np.full(len(key), -1, dtype=np.int64)
    assert descending_run_order(key, order)
    np.testing.assert_array_equal(order, np.argsort(key, kind="stable"))


@pytest.mark.parametrize("key", [np.array([0.5, 0.25, 0.3]), np.array([0.5, np.nan, 0.25]), np.array([np.nan, np.nan])])
def test_a_key_out_of_order_or_nan_is_declined(key):
    assert not descending_run_order(key, np.empty(len(key), dtype=np.int64))


def _wor_u_ratios(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """p and q/q(U) of a tree node's U at T* = ∅ in the wor rule's order (decreasing p/q)."""
    rng = np.random.default_rng(seed)
    p = zipf(N, exponent=1.1, rng=rng)
    q = softmax((np.log(p) + 0.5 * rng.standard_normal(N)) / 1.2)
    m = q / q.sum()
    order = np.argsort(-(p / m), kind="stable")
    return p[order], m[order]


def _no_radix(monkeypatch):
    def refuse(*args):
        raise AssertionError("radix sort called")

    monkeypatch.setattr(_curtain._radix(), "radix_sort", refuse)


def test_decreasing_ratios_are_not_sorted_and_give_the_stable_argsort(monkeypatch):
    p, m = _wor_u_ratios(0)
    expected = np.argsort(p / m + 0.0, kind="stable")
    tied = np.repeat(np.linspace(1.0, 0.1, N // 64), 64), np.ones(N)  # runs of 64 equal ratios, decreasing
    _no_radix(monkeypatch)
    np.testing.assert_array_equal(density_order(p, m), expected)
    np.testing.assert_array_equal(density_order(*tied), np.argsort(tied[0], kind="stable"))
    with pytest.raises(AssertionError, match="radix sort called"):  # twin: shuffled ratios need the sort
        density_order(p[::-1].copy(), m[::-1].copy())


def test_the_reversed_runs_twin_is_caught(monkeypatch):
    """WRONG twin: the indices backwards, equal ratios left backwards too (not the stable order)."""

    def backwards(key, order):
        order[:] = np.arange(len(key))[::-1]
        return bool((key[1:] <= key[:-1]).all())

    monkeypatch.setattr(_curtain, "descending_run_order", backwards)
    tied = np.repeat(np.linspace(1.0, 0.1, N // 64), 64), np.ones(N)
    assert not np.array_equal(density_order(*tied), np.argsort(tied[0], kind="stable"))


def _refuse_spread(monkeypatch):
    def refuse(*args):
        raise AssertionError("race spread computed")

    monkeypatch.setattr(_wor_race, "race_spread", refuse)


@pytest.mark.parametrize("k", [2, 8])
def test_a_cut_at_p_star_one_needs_no_race(monkeypatch, k):
    """p = q (P* = 1): the candidates are ∅ and the draftable end; the cut is the full scan's
    value without σ, the race's step or a race. Twin: a P* < 1 cut needs them (caught), except at
    K = 2, whose cut is a closed form."""
    rng = np.random.default_rng(k)
    q = rng.dirichlet(np.full(300, 0.5))
    reference = full_scan_cut(q, q, k)
    _refuse_spread(monkeypatch)
    cut = optimal_cut(q, q, k)
    assert cut.value == reference.value
    assert abs(cut.value - 1.0) <= 1e-15
    below = rng.dirichlet(np.full(300, 0.5))
    if k == 2:  # every prefix in closed form (_wor_pairs): no race below P* = 1 either
        assert optimal_cut(below, q, k).value < 1.0
        return
    with pytest.raises(AssertionError, match="race spread computed"):
        optimal_cut(below, q, k)


def _curtain_pieces():
    """The J-curtain's pieces of a wor rule at P* = 1 (T* = ∅; a Zipf target and a hotter, noisy
    draft, as at the tree benchmark's nodes), random ones, none."""
    rng = np.random.default_rng(5)
    p = zipf(6000, exponent=1.1, rng=rng)
    rule = wor_selection_rule(p, softmax((np.log(p) + 0.5 * rng.standard_normal(6000)) / 1.2), 8)
    assert len(rule.certificate) == 0 and len(rule.layout.piece_start) > 10_000
    start = rng.random(3000)
    return [(rule.layout.piece_start, rule.layout.piece_end), (start, start + 1e-3 * rng.random(3000)), (np.zeros(0), np.zeros(0))]


def test_piece_offsets_are_the_numpy_cumulative_lengths_and_a_suffix_sum_twin_is_caught():
    """The compiled offsets of ``_curtain_winner`` are ``[0, cumsum(end - start)]`` bit for bit.
    WRONG twin: the same offsets as the total less the suffix sums (equal in exact arithmetic)."""
    caught = 0
    for start, end in _curtain_pieces():
        lengths = end - start
        expected = np.concatenate([[0.0], np.cumsum(lengths)])
        np.testing.assert_array_equal(piece_offsets(start, end), expected)
        twin = expected[-1] - np.concatenate([np.cumsum(lengths[::-1])[::-1], [0.0]])
        caught += not np.array_equal(twin, expected)
    assert caught == 2


def _sorted_hint(ties: bool):
    """p, q and a hint by increasing p/q (``ties``: runs of equal ratios, their ids backwards)."""
    rng = np.random.default_rng(9)
    q = rng.dirichlet(np.full(5000, 0.5)) + 1e-12
    p = q * (rng.integers(1, 40, 5000) if ties else rng.random(5000))
    return p, q, np.lexsort((-np.arange(5000), p / q))


def test_a_strictly_increasing_hint_is_its_own_order_and_a_non_strict_shortcut_is_caught(monkeypatch):
    """Given a hint whose ratios increase strictly, ``sorted_part`` returns the gathers unmoved:
    what ``sorted_tokens`` and the gathers give, in a fresh array of tokens. WRONG twin: taking
    the shortcut on non-decreasing ratios leaves equal ratios out of id order (caught)."""
    from multidraft.theory.verifier import _wor_parts
    from multidraft.theory.verifier._orders import sorted_tokens

    for ties in (False, True):
        p, q, hint = _sorted_hint(ties)
        tokens, values, masses, key = _wor_parts.sorted_part(hint, p, q)
        expected = sorted_tokens(hint, p[hint] / q[hint])
        np.testing.assert_array_equal(tokens, expected)
        for got, want in ((values, p[expected]), (masses, q[expected]), (key, p[expected] / q[expected])):
            np.testing.assert_array_equal(got, want)
        assert not np.shares_memory(tokens, hint)
    monkeypatch.setattr(_wor_parts, "_increasing", lambda key: bool((key[1:] >= key[:-1]).all()))
    p, q, hint = _sorted_hint(True)
    assert not np.array_equal(_wor_parts.sorted_part(hint, p, q)[0], sorted_tokens(hint, p[hint] / q[hint]))
