"""The ordered split: both drafts' laws moved together (issue 33;
multidraft.theory.verifier._ordered_split, docs/nonidentical_verifier.md §4d).

Independent routes compared here:

* the split's per-draft laws against (GR) checked by brute force over every pair of token sets
  (the prefix-pair lemma's independent check);
* its value and the staircase made from it against P* from the threshold search *and* the
  transport LP (``multidraft.lp``, a second computation);
* the staircase's law from its pieces against the law enumerated over every draft pair, and the
  enumerated output against p;
* a broken twin (each draft's tokens by the *wrong* key order) that the reach test must catch.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from multidraft.theory import Independent, optimal_acceptance, softmax, zipf
from multidraft.theory.verifier import fit_independent_rule, fit_path_curtain
from multidraft.theory.verifier import _ordered_split
from multidraft.theory.verifier._ordered_split import ordered_split
from multidraft.theory.verifier._staircase import staircase_rule

from rule_checks import enumerated_law, enumerated_output


def _parts(n: int, certificate: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    in_t = np.zeros(n, dtype=bool)
    in_t[certificate] = True
    return np.flatnonzero(~in_t), np.flatnonzero(in_t)


def _gr_violation(x1: np.ndarray, x2: np.ndarray, q1: np.ndarray, q2: np.ndarray) -> float:
    """``max_{A_1, A_2} x_1(A_1) + x_2(A_2) - h(q_1(A_1), q_2(A_2))`` over all pairs of sets."""
    n = len(x1)
    masks = np.array(list(itertools.product([0.0, 1.0], repeat=n)))
    a, b, s1, s2 = masks @ q1, masks @ q2, masks @ x1, masks @ x2
    return float((s1[:, None] + s2[None, :] - (a[:, None] + b[None, :] - np.outer(a, b))).max())


def _short_instances(count: int, seed: int = 33, sizes: tuple = (3, 8)) -> list[tuple]:
    """Small Dirichlet instances (n in ``range(*sizes)``) on which the fitted single path falls short of P* (> 1e-9)."""
    rng = np.random.default_rng(seed)
    out = []
    while len(out) < count:
        n = int(rng.integers(*sizes))
        alpha = float(rng.choice([0.1, 0.3, 1.0]))
        p, q1, q2 = (rng.dirichlet(np.full(n, alpha)) for _ in range(3))
        one = fit_path_curtain(p, q1, q2)
        if one.acceptance < one.optimum - 1e-9:
            out.append((p, q1, q2, one))
    return out


def test_split_reaches_the_optimum_and_one_staircase_realises_it():
    """40 small instances the fitted path misses: the split's laws satisfy (GR) for every pair of
    sets (brute force, 1e-9), their value is P* (threshold search) to the LP's 1e-9, and the staircase from
    them is one path at P* (to 1e-11: its seed is the LP's, feasible to ~1e-12) whose law matches
    enumeration (1e-13) and whose output is p (1e-12)."""
    for p, q1, q2, one in _short_instances(40):
        parts = _parts(len(p), one.certificate)
        x1, x2, value = ordered_split(p, (q1, q2), parts, (one.law1, one.law2), one.optimum)
        assert _gr_violation(x1, x2, q1, q2) <= 1e-9
        assert abs(x1.sum() + x2.sum() - 1.0) <= 1e-9
        optimum = optimal_acceptance(p, Independent([q1, q2])).value
        assert abs(value - optimum) <= 1e-9  # the LP's tolerance; the staircase below is exact
        rule = staircase_rule(one, laws=(x1, x2))
        law = Independent([q1, q2])
        assert rule.path == "staircase" and abs(rule.acceptance - optimum) <= 1e-11  # the seed's LP rounding
        np.testing.assert_allclose(enumerated_law(rule, law), rule.selection_law, rtol=0, atol=1e-13)
        np.testing.assert_allclose(enumerated_output(rule, law), p, rtol=0, atol=1e-12)


def test_split_against_the_transport_lp():
    """A second computation of P*: the transport LP over all draft pairs (15 instances the fitted
    path misses); the staircase from the split equals it to the LP's tolerance."""
    from multidraft.lp.transport import transport_lp

    for p, q1, q2, one in _short_instances(15, seed=8):
        lp = transport_lp(p, Independent([q1, q2])).acceptance
        x1, x2, _ = ordered_split(p, (q1, q2), _parts(len(p), one.certificate), (one.law1, one.law2), one.optimum)
        assert staircase_rule(one, laws=(x1, x2)).acceptance == pytest.approx(lp, abs=1e-7)


def test_orders_by_the_wrong_key_are_caught(monkeypatch):
    """Broken twin: each draft's tokens by *increasing* key (the orders reversed inside each
    part). Its laws still satisfy (GR) (they are monotone along the orders they use), so it
    stays lossless, but it falls short of P* on some instance the true orders reach."""
    right = _ordered_split._orders

    def reversed_orders(p, qs, parts, laws):
        out = []
        for i, order in enumerate(right(p, qs, parts, laws)):
            pieces = [order[np.isin(order, part)][::-1] for part in parts]
            out.append(np.concatenate(pieces))
        return out[0], out[1]

    instances = _short_instances(20)
    monkeypatch.setattr(_ordered_split, "_orders", reversed_orders)
    short = 0
    for p, q1, q2, one in instances:
        x1, x2, value = ordered_split(p, (q1, q2), _parts(len(p), one.certificate), (one.law1, one.law2), one.optimum)
        assert _gr_violation(x1, x2, q1, q2) <= 1e-9
        short += value < one.optimum - 1e-9
    assert short > 0


def test_prefix_pair_violation_finds_the_worst_pair():
    """The separation (worst m for every k, worst k for every m) against all prefix pairs."""
    rng = np.random.default_rng(4)
    for _ in range(30):
        n = int(rng.integers(2, 8))
        q1, q2 = rng.dirichlet(np.ones(n)), rng.dirichlet(np.ones(n))
        x1, x2 = q1 * rng.random(n), q2 * rng.random(n)
        orders = (np.argsort(-x1 / q1, kind="stable"), np.argsort(-x2 / q2, kind="stable"))
        _, worst = _ordered_split.prefix_pair_violation((q1, q2), orders, (x1, x2))
        a, b = (np.concatenate([[0.0], np.cumsum(q[o])]) for q, o in zip((q1, q2), orders))
        c1, c2 = (np.concatenate([[0.0], np.cumsum(x[o])]) for x, o in zip((x1, x2), orders))
        brute = (c1[:, None] + c2[None, :] - (a[:, None] + b[None, :] - np.outer(a, b))).max()
        assert worst == pytest.approx(brute, abs=1e-15)


def test_zipf_pair_the_staircase_misses():
    """n = 4096, Zipf(1.1) target, drafts at 0.8 & 2.0: the staircase alternation alone stalls
    > 1e-2 short of P*; with the ordered split (on by default at this size; the ascent switched
    off, as it reaches P* first) one path reaches P* to 1e-9, and ``acceptance`` is the rule's own."""
    p = zipf(4096, 1.1, np.random.default_rng(0))
    q1, q2 = softmax(np.log(p), 0.8), softmax(np.log(p), 2.0)
    optimum = optimal_acceptance(p, Independent([q1, q2])).value
    alone = fit_independent_rule(p, q1, q2, split=False, ascent=False)
    assert alone.acceptance < optimum - 1e-2
    rule = fit_independent_rule(p, q1, q2, ascent=False)
    assert rule.path == "staircase" and abs(rule.acceptance - optimum) <= 1e-9
    assert rule.acceptance == float(np.minimum(p, rule.law1 + rule.law2).sum())


@pytest.mark.parametrize("split", [1, "yes", 0.5], ids=["int", "string", "float"])
def test_bad_split_is_refused(split):
    with pytest.raises(ValueError, match="split: the ordered split is switched by True, False or None"):
        fit_independent_rule(np.array([0.5, 0.5]), np.array([0.2, 0.8]), np.array([0.9, 0.1]), split=split)


def test_blocked_split_is_a_rule_and_stays_below_the_full_split():
    """Draft 1's density shared on blocks (``head=1``: one single token at each end of a part,
    doubling blocks between, so blocks of 2 and 4 occur): the laws still satisfy (GR) for
    every pair of sets (brute force, n = 8..10: prefix pairs at block ends suffice, Lemma 5), the value is
    at most the full split's (a restriction of the same programme), and the staircase from them
    is exact (law against enumeration, output p). That these blocks matter is the twin's test
    below (free densities inside them break (GR))."""
    for p, q1, q2, one in _short_instances(20, seed=5, sizes=(8, 11)):
        parts = _parts(len(p), one.certificate)
        seed = (one.law1, one.law2)
        x1, x2, value = ordered_split(p, (q1, q2), parts, seed, one.optimum, head=1)
        _, _, full = ordered_split(p, (q1, q2), parts, seed, one.optimum, head=None)
        assert _gr_violation(x1, x2, q1, q2) <= 1e-9
        assert abs(x1.sum() + x2.sum() - 1.0) <= 1e-9
        assert value <= full + 1e-9
        rule = staircase_rule(one, laws=(x1, x2))
        assert rule.acceptance >= value - 1e-9
        law = Independent([q1, q2])
        np.testing.assert_allclose(enumerated_law(rule, law), rule.selection_law, rtol=0, atol=1e-13)
        np.testing.assert_allclose(enumerated_output(rule, law), p, rtol=0, atol=1e-12)


def test_density_constant_inside_blocks_is_needed(monkeypatch):
    """Broken twin: the blocked programme's draft-1 mass spread inside each block in proportion to
    p instead of q_1 (the same block masses, so every prefix pair at a block end still holds, but
    the density is no longer constant inside the block, which Lemma 5 needs for the prefixes
    inside it). The brute-force (GR) check catches a violation on some instance."""
    right = _ordered_split._Programme.solve

    def spread_by_p(self):
        solved = right(self)
        if solved is None:
            return None
        x1, order, p = solved[0].copy(), self.orders[0], self.target
        block = self.block_of[0]
        mass = np.bincount(block, x1[order]) / np.bincount(block, p[order])
        x1[order] = mass[block] * p[order]
        return x1, solved[1]

    monkeypatch.setattr(_ordered_split._Programme, "solve", spread_by_p)
    worst = 0.0
    for p, q1, q2, one in _short_instances(20, seed=5, sizes=(8, 11)):
        x1, x2, _ = ordered_split(p, (q1, q2), _parts(len(p), one.certificate), (one.law1, one.law2), one.optimum, head=1)
        worst = max(worst, _gr_violation(x1, x2, q1, q2))
    assert worst > 1e-6


def test_blocks_layout():
    """Single tokens at both ends of each part, doubling blocks between, every start inside its
    part; ``head=None`` is every token; bad heads refused."""
    starts = _ordered_split.blocks(40, (3, 37), 2)
    assert starts.tolist()[:4] == [0, 1, 2, 3] and {38, 39} <= set(starts.tolist())
    lengths = np.diff(np.append(starts, 40))
    assert lengths.sum() == 40 and lengths.max() <= 16 and len(starts) < 20
    np.testing.assert_array_equal(_ordered_split.blocks(5, (5,), None), np.arange(5))
    for head in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="head: single tokens at each end of a part"):
            _ordered_split.blocks(5, (5,), head)


def test_residual_ties_are_ordered_by_p_over_q_not_by_rounding(monkeypatch):
    """Residual keys ``(p - x_o)_+ / q_i`` that are 0 up to rounding (x_o = p within 1e-16 of p,
    as the programme leaves most tail tokens) tie, and the ties go by ``p / q_i``; broken twin:
    with ``TIE = 0`` the rounding noise orders them instead (docs §4d, 0.5/1.2 at n = 49152)."""
    rng = np.random.default_rng(4)
    n = 200
    p, q1, q2 = (rng.dirichlet(np.ones(n)) for _ in range(3))
    parts = (np.zeros(0, dtype=np.int64), np.arange(n))
    noisy = p * (1.0 + rng.choice([-1.0, 0.0, 1.0], n) * 2e-16)
    laws = (np.zeros(n), noisy)  # draft 1's residual against draft 2's law: zero up to rounding
    by_base = np.argsort(-(p / q1), kind="stable")
    np.testing.assert_array_equal(_ordered_split._orders(p, (q1, q2), parts, laws)[0], by_base)
    monkeypatch.setattr(_ordered_split, "TIE", 0.0)
    assert not np.array_equal(_ordered_split._orders(p, (q1, q2), parts, laws)[0], by_base)


def test_warm_resolve_equals_a_cold_solve(monkeypatch):
    """The programme re-solved warm after new pair rows (two passes) has the value of a fresh
    programme given all rows at once (n = 400 Zipf pair 0.5/2.0, P* = 0.9597, round 0's orders;
    the second pass lowers the value by 8.6e-5); broken twin: an ``add`` that drops the rows of
    later passes leaves a relaxation worth more."""
    n = 400
    p = zipf(n, 1.1, np.random.default_rng(0))
    qs = (softmax(np.log(p), 0.5), softmax(np.log(p), 2.0))
    one = fit_path_curtain(p, *qs)
    parts = _parts(n, one.certificate)
    orders = _ordered_split._orders(p, qs, parts, None)
    starts = (_ordered_split.blocks(n, tuple(len(part) for part in parts), 4), np.arange(n, dtype=np.int64))

    def two_passes():
        seed = _ordered_split._block_means((one.law1, one.law2), qs, orders, starts)
        first, _ = _ordered_split.prefix_pair_violation(qs, orders, seed, tol=1e-3, starts=starts)
        warm = _ordered_split._Programme(p, qs, orders, starts)
        warm.add(first)
        solved = warm.solve()
        more, _ = _ordered_split.prefix_pair_violation(qs, orders, solved, starts=starts)
        assert more - first, "the first pass must leave a pair violated for this check"
        warm.add(first | more)
        warm.solve()
        cold = _ordered_split._Programme(p, qs, orders, starts)
        cold.add(first | more)
        cold.solve()
        return warm.bound, cold.bound

    warm, cold = two_passes()
    assert warm == pytest.approx(cold, abs=1e-9)
    right = _ordered_split._Programme.add

    def first_pass_only(self, pairs):
        if not self.pairs:
            right(self, pairs)

    monkeypatch.setattr(_ordered_split._Programme, "add", first_pass_only)
    warm, cold = two_passes()
    assert warm > cold + 1e-7


_SPLIT_IN_A_FRESH_PROCESS = """
import contextlib, sys
import numpy as np
from multidraft.theory.verifier import _ordered_split, fit_path_curtain
from multidraft.theory.verifier._ordered_split import ordered_split
if sys.argv[1] == "twin":  # the twin: HiGHS created and run without silencing
    _ordered_split.silenced = contextlib.nullcontext
rng = np.random.default_rng(33)
while True:
    p, q1, q2 = (rng.dirichlet(np.full(6, 0.3)) for _ in range(3))
    one = fit_path_curtain(p, q1, q2)
    if one.acceptance < one.optimum - 1e-9:
        break
in_t = np.zeros(6, dtype=bool)
in_t[one.certificate] = True
ordered_split(p, (q1, q2), (np.flatnonzero(~in_t), np.flatnonzero(in_t)), (one.law1, one.law2), one.optimum)
"""


@pytest.mark.parametrize("mode", ["shipped", "twin"])
def test_highs_writes_nothing_to_standard_output(mode):
    """HiGHS prints its banner to the process's standard output (file descriptor 1, from C) when
    a process first creates a solver; the split's solves run silenced, so a fresh process that
    fits one writes nothing there (``--json`` output stays parseable). The twin, unsilenced,
    writes the banner."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _SPLIT_IN_A_FRESH_PROCESS, mode], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    if mode == "shipped":
        assert done.stdout == ""
    else:
        assert "HiGHS" in done.stdout


def test_tiny_draft_masses_stay_in_the_programme(monkeypatch):
    """A draft with 307 token masses below 1e-9 (n = 1000 Zipf, draft 1 at T = 0.35, draft 2 at
    1.2): the laws read off the programme's densities sum to 1 (to 1e-12), as its totals row says.
    Broken twin: HiGHS's default threshold (entries below 1e-9 dropped) leaves those masses out of
    the programme's prefix sums, and the laws sum to 1 + 1.8e-8 (the 1.9e-8 short of P* at
    n = 16384, 0.5/1.2, docs/nonidentical_verifier.md §4d)."""
    n = 1000
    p = zipf(n, 1.1, np.random.default_rng(0))
    qs = (softmax(np.log(p), 0.35), softmax(np.log(p), 1.2))
    assert (qs[0] < 1e-9).sum() > 300 and qs[0].min() > _ordered_split.SMALL_ENTRY
    one = fit_path_curtain(p, *qs)
    parts = _parts(n, one.certificate)

    def excess() -> float:
        x1, x2, _ = ordered_split(p, qs, parts, (one.law1, one.law2), one.optimum, rounds=1)
        return abs(x1.sum() + x2.sum() - 1.0)

    assert excess() <= 1e-12
    monkeypatch.setattr(_ordered_split, "SMALL_ENTRY", 1e-9)
    assert excess() > 1e-9
