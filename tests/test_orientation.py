"""The ascent on draft 2's law (issue 33; multidraft.theory.verifier._orientation,
docs/nonidentical_verifier.md §4e).

Independent routes compared here:

* the best-response value V(ρ) (eq. (2), two sorts) against the acceptance of the staircase
  built from the same ``x_2`` (draft 1's curtain fitted by the compiled stack pass, law read off
  its pieces);
* the one-dimensional (GR) check against brute force over every pair of token sets;
* the ascent's staircase against P* from the threshold search and from the transport LP, its
  law against enumeration over every draft pair, its output against p;
* broken twins: K without its tail term, a supergradient without the draft-1 term, the (GR)
  check with a broken K, and the ascent stopped after its first step.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from multidraft.theory import Independent, softmax, zipf
from multidraft.theory.optimum import product_cut
from multidraft.theory.verifier import _orientation
from multidraft.theory.verifier._independent_rule import path_rule
from multidraft.theory.verifier._orientation import ascend, ascent_split, ascent_staircase, gr_excess, response
from multidraft.theory.verifier._ordered_split import prefix_pair_violation
from multidraft.theory.verifier._staircase import fit_staircase

from rule_checks import enumerated_law, enumerated_output


def _draw(rng: np.random.Generator, index: int) -> tuple:
    """Dirichlet(α) target and drafts, n = 2..7, α in {0.1, 0.3, 1, 3}; draft 1 without one token
    every fifth draw."""
    n = int(rng.integers(2, 8))
    alpha = float(rng.choice([0.1, 0.3, 1.0, 3.0]))
    p, q1, q2 = (rng.dirichlet(np.full(n, alpha)) for _ in range(3))
    if index % 5 == 0:
        q1[rng.integers(n)] = 0.0
        q1 /= q1.sum()
    return p, q1, q2


def _instances(count: int, seed: int) -> list[tuple]:
    """Small instances (n = 2..7): Dirichlet(0.1..3) target and drafts, with a zero draft mass every
    fifth, identical drafts every seventh, disjoint draft supports every eleventh."""
    rng = np.random.default_rng(seed)
    out = []
    for index in range(count):
        p, q1, q2 = _draw(rng, index)
        n = len(p)
        if index % 7 == 0:
            q2 = q1.copy()
        if index % 11 == 0 and n >= 4:
            q1, q2 = np.r_[rng.dirichlet(np.ones(2)), np.zeros(n - 2)], np.r_[np.zeros(2), rng.dirichlet(np.ones(n - 2))]
        out.append((p, q1, q2))
    return out


def _optimum(p: np.ndarray, q1: np.ndarray, q2: np.ndarray) -> tuple[float, tuple]:
    cut = product_cut(p, np.array([q1, q2]))
    in_t = np.zeros(len(p), dtype=bool)
    in_t[cut.certificate] = True
    return min(1.0, 1.0 + float(cut.value)), (np.flatnonzero(~in_t), np.flatnonzero(in_t)), cut.certificate


def _random_rho(rng: np.random.Generator, n: int) -> np.ndarray:
    rho = rng.random(n)
    rho[rng.random(n) < 0.2] = 0.0
    rho[rng.random(n) < 0.2] = 1.0
    return rho


def _brute_gr(q1, q2, x1, x2) -> float:
    """``max_{A_1, A_2} x_1(A_1) + x_2(A_2) - h(q_1(A_1), q_2(A_2))`` over all pairs of sets (the
    maximum over fractional sets is at a vertex: the expression is bilinear in the two masses)."""
    masks = np.array(list(itertools.product([0.0, 1.0], repeat=len(x1))))
    a, b, s1, s2 = masks @ q1, masks @ q2, masks @ x1, masks @ x2
    return float((s1[:, None] + s2[None, :] - (a[:, None] + b[None, :] - np.outer(a, b))).max())


def _staircase_value(p, q1, q2, rho) -> float:
    """Acceptance of the staircase from ``x_2 = q_2 (1 - rho)`` with no parts (U = Ω): draft 1's
    curtain against ``(p - x_2)_+``, both laws from the pieces."""
    n = len(p)
    law1, law2, _ = fit_staircase(p, (q1, q2), (np.arange(n), np.zeros(0, dtype=np.int64)), q2 * (1.0 - rho), 1)
    np.testing.assert_allclose(law2, q2 * (1.0 - rho), rtol=0, atol=1e-13)  # draft 2 laid side by side: its law kept
    return float(np.minimum(p, law1 + law2).sum())


def test_response_is_what_the_staircase_reaches():
    """V(ρ) equals the exact acceptance of the staircase from the same x_2 (300 instances, random
    ρ with entries at 0 and 1), to 1e-12."""
    rng = np.random.default_rng(6)
    worst = 0.0
    for p, q1, q2 in _instances(300, seed=1):
        rho = _random_rho(rng, len(p))
        worst = max(worst, abs(response(p, q1, q2, rho)[0] - _staircase_value(p, q1, q2, rho)))
    assert worst <= 1e-12


def test_k_without_its_tail_is_caught(monkeypatch):
    """Broken twin: K(a) without the term ``a · q_2({ρ >= a})`` (the prefix minimum in numpy)
    disagrees with the staircase."""
    def no_tail(order, q1, short, by_rho, rho, q2):
        masses, sums = np.concatenate([[0.0], np.cumsum(q1[order])]), np.concatenate([[0.0], np.cumsum(short[order])])
        below = np.concatenate([[0.0], np.cumsum(q2[by_rho] * rho[by_rho])])
        slack = below[np.searchsorted(rho[by_rho], masses, side="left")] - sums
        k = int(np.argmin(slack))
        return k, slack[k], masses[k]

    monkeypatch.setattr(_orientation, "compile_in_place", lambda namespace, names: None)
    monkeypatch.setattr(_orientation, "_min_slack", no_tail)
    rng = np.random.default_rng(6)
    gaps = [abs(response(p, q1, q2, rho)[0] - _staircase_value(p, q1, q2, rho))
            for (p, q1, q2), rho in ((x, _random_rho(rng, len(x[0]))) for x in _instances(60, seed=1))]  # fmt: skip
    assert max(gaps) > 1e-3


def _supergradient_gap(g_of) -> float:
    """``max V(ρ') - V(ρ) - g·(ρ' - ρ)`` over random pairs: <= 0 for a supergradient."""
    rng = np.random.default_rng(9)
    worst = -np.inf
    for p, q1, q2 in _instances(200, seed=2):
        rho = _random_rho(rng, len(p))
        value, _ = response(p, q1, q2, rho)
        g = g_of(p, q1, q2, rho)
        for _ in range(5):
            other = _random_rho(rng, len(p))
            worst = max(worst, response(p, q1, q2, other)[0] - value - g @ (other - rho))
    return worst


def test_supergradient():
    """``V(ρ') <= V(ρ) + g·(ρ' - ρ)`` on 1,000 random pairs (200 instances), to 1e-12; a twin
    without the draft-1 term of g (only K's part) breaks it."""
    assert _supergradient_gap(lambda p, q1, q2, rho: response(p, q1, q2, rho)[1]) <= 1e-12

    def k_part_only(p, q1, q2, rho):
        value, g = response(p, q1, q2, rho)
        return np.where(g < 0, 0.0, g)

    assert _supergradient_gap(k_part_only) > 1e-3


def _rule_laws(rng: np.random.Generator, q1: np.ndarray, q2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-draft laws of a random rule φ (draft 1 selected with probability φ[y, y'])."""
    phi = rng.random((len(q1), len(q2)))
    phi[rng.random(phi.shape) < 0.3] = 1.0
    phi[rng.random(phi.shape) < 0.3] = 0.0
    pairs = np.outer(q1, q2)
    return (pairs * phi).sum(axis=1), (pairs * (1.0 - phi)).sum(axis=0)


def _gr_cases() -> list[tuple]:
    rng = np.random.default_rng(4)
    cases = []
    for p, q1, q2 in _instances(120, seed=3):
        if len(p) > 6:
            continue
        x1, x2 = _rule_laws(rng, q1, q2)
        cases.append((q1, q2, x1, x2))
        moved = min(x2.max(), 0.05)  # draft 2 gives mass to draft 1 on another token: (GR) may break
        j = int(np.argmax(x2))
        shifted = x1.copy()
        shifted[(j + 1) % len(p)] += moved
        cases.append((q1, q2, shifted, x2 - moved * (np.arange(len(p)) == j)))
    return cases


def test_gr_excess_equals_brute_force():
    """The one-dimensional (GR) check equals the maximum over every pair of token sets (n <= 6),
    on rule laws (<= 0) and on laws shifted between the drafts (some > 0), to 1e-12."""
    values = []
    for q1, q2, x1, x2 in _gr_cases():
        values.append(gr_excess((q1, q2), (x1, x2)))
        assert values[-1] == pytest.approx(_brute_gr(q1, q2, x1, x2), abs=1e-12)
    assert max(values[0::2]) <= 1e-12 and max(values[1::2]) > 1e-3  # rules satisfy (GR); shifts break it


def test_gr_excess_with_a_broken_k_is_caught(monkeypatch):
    """Broken twin: K as ``min(a, Σ q_2 ρ)`` (the concave envelope of its end points only) misses
    violations that brute force finds."""
    monkeypatch.setattr(_orientation, "_k_at", lambda q2, rho, a, order: np.minimum(a, float(q2 @ rho)))
    gaps = [abs(gr_excess((q1, q2), (x1, x2)) - _brute_gr(q1, q2, x1, x2)) for q1, q2, x1, x2 in _gr_cases()]
    assert max(gaps) > 1e-3


def _ascent_gaps(iterations: int) -> list[float]:
    gaps = []
    for p, q1, q2 in _instances(300, seed=5):
        optimum, parts, _ = _optimum(p, q1, q2)
        gaps.append(ascent_split(p, (q1, q2), parts, optimum, iterations)[2] - optimum)
    return gaps


def test_ascent_reaches_the_optimum_with_one_path():
    """300 small instances: the staircase from the ascent's x_2 is one path at P* (threshold search)
    to 1e-10; its laws satisfy (GR) (1-D check and brute force), sum to 1, its law equals the law
    enumerated over every draft pair (1e-13) and the output is p (1e-12)."""
    for p, q1, q2 in _instances(300, seed=5):
        optimum, parts, certificate = _optimum(p, q1, q2)
        out = ascent_staircase(p, (q1, q2), parts, optimum)
        law1, law2 = out.law1, out.law2
        rule = path_rule(p, (q1, q2), certificate, optimum, law1, law2, out.layouts, "staircase")
        assert out.ascent.reached and rule.acceptance >= optimum - 1e-10
        assert gr_excess((q1, q2), (law1, law2)) <= 1e-12 and abs(law1.sum() + law2.sum() - 1.0) <= 1e-12
        if len(p) <= 6:
            assert _brute_gr(q1, q2, law1, law2) <= 1e-12
        law = Independent([q1, q2])
        np.testing.assert_allclose(enumerated_law(rule, law), rule.selection_law, rtol=0, atol=1e-13)
        np.testing.assert_allclose(enumerated_output(rule, law), p, rtol=0, atol=1e-12)


def test_first_step_alone_is_caught():
    """Broken twin: the best response to ``x_2 = min(p, q_2)`` alone (one step, no ascent) falls
    short of P* on some of the 300 instances; the full ascent does not."""
    assert min(_ascent_gaps(1)) < -1e-3
    assert min(_ascent_gaps(_orientation.ITERATIONS)) >= -1e-10


def test_against_the_transport_lp():
    """A second computation of P*: the transport LP over all draft pairs (20 instances, n <= 5)."""
    from multidraft.lp.transport import transport_lp

    checked = 0
    for p, q1, q2 in _instances(60, seed=7):
        if len(p) > 5 or checked == 20:
            continue
        optimum, parts, _ = _optimum(p, q1, q2)
        lp = transport_lp(p, Independent([q1, q2])).acceptance
        assert ascent_split(p, (q1, q2), parts, optimum)[2] == pytest.approx(lp, abs=1e-7)
        checked += 1
    assert checked == 20


@pytest.mark.parametrize("pair", [(0.5, 1.2), (0.8, 1.6), (0.8, 2.0)], ids=["0.5/1.2", "0.8/1.6", "0.8/2.0"])
def test_zipf_pairs_the_alternation_misses(pair):
    """n = 4096, Zipf(1.1) target, drafts at the three temperature pairs where the staircase
    alternation stalls (docs §6): one staircase path at P* to 1e-9, its laws feasible by the
    prefix-pair check along their density orders and by the 1-D check (1e-12)."""
    rng = np.random.default_rng(0)
    rng.random(4096)  # the benchmark's argsort keys come first
    p = zipf(4096, 1.1, rng)
    q1, q2 = softmax(np.log(p), pair[0]), softmax(np.log(p), pair[1])
    optimum, parts, _ = _optimum(p, q1, q2)
    law1, law2, value = ascent_split(p, (q1, q2), parts, optimum)
    assert value >= optimum - 1e-9
    orders = tuple(np.argsort(-(x / q), kind="stable") for x, q in ((law1, q1), (law2, q2)))
    assert prefix_pair_violation((q1, q2), orders, (law1, law2))[1] <= 1e-12
    assert gr_excess((q1, q2), (law1, law2)) <= 1e-12


def test_swapped_roles_when_draft_2s_staircase_does_not_tile(monkeypatch):
    """Where draft 2's staircase does not tile, the ascent on draft 1's law and its staircase take
    over (60 instances, P* to 1e-10); without that fallback the error would propagate."""
    def draft_1_only(p, qs, parts, law, j):
        if j == 1:
            raise RuntimeError("path curtain: the stack pass did not tile its region")
        return fit_staircase(p, qs, parts, law, j)

    monkeypatch.setattr(_orientation, "fit_staircase", draft_1_only)
    for p, q1, q2 in _instances(60, seed=5):
        optimum, parts, _ = _optimum(p, q1, q2)
        out = ascent_staircase(p, (q1, q2), parts, optimum)
        assert out.fixed == 0 and float(np.minimum(p, out.law1 + out.law2).sum()) >= optimum - 1e-10


def _bench_pair(n: int, t1: float, t2: float) -> tuple:
    """bench_orientation.py's instance: Zipf(1.1) target after the argsort keys, drafts at two
    temperatures; returns (p, (q_1, q_2), P*, parts)."""
    rng = np.random.default_rng(0)
    rng.random(n)  # the benchmark's argsort keys come first
    p = zipf(n, 1.1, rng)
    qs = (softmax(np.log(p), t1), softmax(np.log(p), t2))
    optimum, parts, _ = _optimum(p, *qs)
    return p, qs, optimum, parts


def _overlap(start: np.ndarray, end: np.ndarray) -> float:
    """``Σ lengths - |union|`` of the pieces, each piece's part already covered summed in a Python
    loop over them sorted by (start, end) (a route apart from the tiling check's vectorised sweep;
    not a difference of two sums, which would lose a 1-ulp overlap)."""
    overlap, reach = 0.0, -np.inf
    for a, b in sorted(zip(start.tolist(), end.tolist())):
        overlap += max(min(b, reach) - a, 0.0)
        reach = max(reach, b)
    return overlap


def _pairwise_check(start: np.ndarray, end: np.ndarray, slack: float = 1e-9) -> bool:
    """The tiling check before the fix (its twin): pieces sorted by (start, end), each against the
    previous one's end only."""
    solid = end > start
    order = np.lexsort((end[solid], start[solid]))
    return not np.any(start[solid][order][1:] < end[solid][order][:-1] - slack)


@pytest.mark.parametrize(("n", "pair"), [(2048, (0.8, 1.2)), (49152, (0.8, 1.2))])
def test_draft_2s_staircase_tiles_where_rounding_nested_its_hulls(n, pair):
    """Regression (issue 33): draft 2's staircase from the ascent did not tile at these settings
    (and 131072, 0.8/1.6): hundreds of nested hulls, each ending at ``start + c`` a few ulps inside
    its last child's end, the next hull behind that rounded end, so 1-ulp pieces began inside the
    next piece, and the pairwise check counted the whole long piece as overlap (6.4e-7 at 49152;
    the true overlap 2.5e-14). Now the hulls record their children's extent: draft 1's pieces are
    disjoint exactly, draft 2's staircase tiles, and the fit needs no turn to draft 1 (P* to
    1e-9). Twins: one thin piece moved 1 ulp inside a long piece has overlap > 0 (the exactness
    check can fail) and is refused by the old pairwise check but accepted by the overlap measure;
    a real overlap of 1e-6 is refused."""
    from multidraft.theory.verifier._independent_rule import _check_tiling

    p, qs, optimum, parts = _bench_pair(n, *pair)
    law1, law2, layouts = fit_staircase(p, qs, parts, ascend(p, *qs, optimum, iterations=1).law2, 1)
    assert float(np.minimum(p, law1 + law2).sum()) >= optimum - 1e-9
    start, end = layouts[0].start, layouts[0].end
    assert _overlap(start, end) == 0.0 and _pairwise_check(start, end)
    out = ascent_staircase(p, qs, parts, optimum)
    assert out.fixed == 1 and float(np.minimum(p, out.law1 + out.law2).sum()) >= optimum - 1e-9
    if n > 2048:
        return
    long = int(np.argmax(end - start))
    thin = np.nextafter(start[long], 1.0)
    moved = (np.append(start, thin), np.append(end, np.nextafter(thin, 1.0)))
    bounds = np.arange(len(moved[0]) + 1)
    assert _overlap(*moved) > 0.0 and not _pairwise_check(*moved)
    _check_tiling(*moved, 0.0, 1.0, bounds, moved[1] - moved[0])
    real = (np.append(start, start[long]), np.append(end, start[long] + 1e-6))
    with pytest.raises(RuntimeError, match="did not tile"):
        _check_tiling(*real, 0.0, 1.0, bounds, real[1] - real[0])


def _slow_instance() -> tuple:
    """Instance 305 of a 2,000-instance scratch run (seed 1): P* = 1; the ascent on draft 2's law
    needs 2,986 steps (γ = 1.5) to reach it, the one on draft 1's law 2."""
    rng = np.random.default_rng(1)
    for index in range(306):
        instance = _draw(rng, index)
    return instance


def test_turns_when_draft_2s_ascent_crawls():
    """Regression: where the ascent on draft 2's law crawls, the turn to draft 1's law (started
    from its best answer) reaches P* and its path is returned (to 1e-12). Twin: draft 2's ascent
    alone, all 500 steps, stays more than 1e-6 short."""
    p, q1, q2 = _slow_instance()
    optimum, parts, _ = _optimum(p, q1, q2)
    out = ascent_staircase(p, (q1, q2), parts, optimum)
    assert out.fixed == 0 and float(np.minimum(p, out.law1 + out.law2).sum()) >= optimum - 1e-12
    alone = fit_staircase(p, (q1, q2), parts, ascend(p, q1, q2, optimum).law2, 1)
    assert float(np.minimum(p, alone[0] + alone[1]).sum()) < optimum - 1e-6


def test_turns_close_random_instances_where_one_draft_crawls():
    """n = 4096, the 4 Dirichlet instances of bench_orientation.py --dirichlet on which 500 steps
    on either draft's law alone stayed 2e-6 to 1e-5 short: the turns reach P* (to 1e-12) within
    the same 500 steps. Twin: draft 2's ascent alone stays more than 1e-7 short on each."""
    rng = np.random.default_rng(7)
    for index in range(21):
        alpha = (0.1, 0.3, 1.0)[index % 3]
        p, q1, q2 = (rng.dirichlet(np.full(4096, alpha)) for _ in range(3))
        if index % 2:
            q2 = q1**1.5 / (q1**1.5).sum()
            p = 0.5 * p + 0.5 * q1**0.7 / (q1**0.7).sum()
        if index in (8, 10, 14, 20):
            optimum, parts, _ = _optimum(p, q1, q2)
            out = ascent_staircase(p, (q1, q2), parts, optimum)
            assert float(np.minimum(p, out.law1 + out.law2).sum()) >= optimum - 1e-12
            assert ascend(p, q1, q2, optimum).value < optimum - 1e-7  # twin: draft 2's law alone


BAD_ASCENT = {
    "shapes": (np.full(3, 1 / 3), np.full(2, 0.5), np.full(3, 1 / 3), 1.0, 10, "one length"),
    "optimum-nan": (np.full(2, 0.5), np.full(2, 0.5), np.full(2, 0.5), float("nan"), 10, "optimum"),
    "optimum-above-1": (np.full(2, 0.5), np.full(2, 0.5), np.full(2, 0.5), 1.5, 10, "optimum"),
    "iterations-0": (np.full(2, 0.5), np.full(2, 0.5), np.full(2, 0.5), 1.0, 0, "iterations"),
    "iterations-bool": (np.full(2, 0.5), np.full(2, 0.5), np.full(2, 0.5), 1.0, True, "iterations"),
    "iterations-float": (np.full(2, 0.5), np.full(2, 0.5), np.full(2, 0.5), 1.0, 2.5, "iterations"),
}
BAD_START = {"start-length": np.zeros(3), "start-above-1": np.array([0.5, 1.5]), "start-negative": np.array([-0.1, 0.5])}


@pytest.mark.parametrize("case", BAD_ASCENT.values(), ids=BAD_ASCENT.keys())
def test_bad_ascent_inputs(case):
    p, q1, q2, optimum, iterations, message = case
    with pytest.raises(ValueError, match=message):
        ascend(p, q1, q2, optimum, iterations=iterations)


@pytest.mark.parametrize("start", BAD_START.values(), ids=BAD_START.keys())
def test_bad_start(start):
    with pytest.raises(ValueError, match="start"):
        ascend(np.full(2, 0.5), np.full(2, 0.5), np.full(2, 0.5), 1.0, start=start)


BAD_GR = {
    "shapes": ((np.full(2, 0.5), np.full(3, 1 / 3)), (np.full(2, 0.25), np.full(3, 0.1)), "one length"),
    "negative": ((np.full(2, 0.5), np.full(2, 0.5)), (np.array([0.6, -0.1]), np.full(2, 0.25)), "non-negative"),
    "above-draft": ((np.full(2, 0.5), np.full(2, 0.5)), (np.zeros(2), np.array([0.7, 0.3])), "exceeds its draft mass"),
}


@pytest.mark.parametrize("case", BAD_GR.values(), ids=BAD_GR.keys())
def test_bad_gr_inputs(case):
    qs, laws, message = case
    with pytest.raises(ValueError, match=message):
        gr_excess(qs, laws)


@pytest.mark.parametrize("moves", [0, 1, 17, 400, 3000])
def test_resorted_order_is_the_hinted_sort(moves):
    """A step's sort (:func:`_orientation._resort`: the tokens whose key changed sorted apart and
    merged into the last order; timsort from the last order above ``MERGE_SHARE``, 3000 of 5000
    here) is the permutation of the stable sort started from the last order, ties included (keys
    on a grid of 300 values; the last order's ties in random order). Twins: numpy's sort from
    scratch (ties by id) differs, and a merge told of all moved tokens but one leaves that one
    out of place."""
    rng = np.random.default_rng(moves)
    n = 5000
    last = rng.integers(0, 300, n) / 7.0
    order = _orientation._argsort(last, rng.permutation(n))
    key = last.copy()
    chosen = rng.choice(n, moves, replace=False)
    key[chosen] = rng.integers(0, 300, moves) / 7.0 + (chosen % 2) * 0.5  # half of them onto existing values (ties)
    expected = _orientation._argsort(key, order)
    moved = key != last
    got, returned = _orientation._resort(key, order, moved, int(moved.sum()))
    np.testing.assert_array_equal(got, expected)
    assert returned is key
    assert not np.array_equal(np.argsort(key, kind="stable"), expected)  # twin: ties matter
    if 0 < moves <= _orientation.MERGE_SHARE * n:
        hidden = int(chosen[np.argmax(np.abs(key[chosen] - last[chosen]))])
        moved[hidden] = False
        assert not np.array_equal(_orientation._merge_moved(order, key, moved), expected)  # twin


@pytest.mark.parametrize("n", [100, 5000])
@pytest.mark.parametrize("zero_mass", [False, True])
def test_first_orders_are_numpys_stable_sorts(n, zero_mass):
    """The first step's orders (radix sorts from 4096 tokens on) are numpy's stable sorts of
    ``-(short / q_1)`` and ρ, ties in id order (short and ρ zero on half the tokens, draft 1
    without some tokens in the second case: numpy's sort). Twin: the decreasing density order as
    the increasing one reversed puts ties backwards."""
    rng = np.random.default_rng(n)
    q1 = rng.dirichlet(np.ones(n))
    if zero_mass:
        q1[:7] = 0.0
    short = np.where(rng.random(n) < 0.5, 0.0, rng.dirichlet(np.ones(n)))
    rho = np.where(rng.random(n) < 0.5, 0.0, rng.random(n))
    (by_density, key), (by_rho, rho_key) = _orientation._first_orders(q1, short, rho)
    np.testing.assert_array_equal(by_density, np.argsort(_orientation._minus_density(q1, short), kind="stable"))
    np.testing.assert_array_equal(by_rho, np.argsort(rho, kind="stable"))
    np.testing.assert_array_equal(key, _orientation._minus_density(q1, short))
    assert rho_key is rho
    assert not np.array_equal(np.argsort(np.where(q1 > 0, short / np.where(q1 > 0, q1, 1.0), 0.0), kind="stable")[::-1], by_density)  # twin


def test_the_flatter_drafts_law_is_climbed_first():
    """n = 8192, the benchmark's 0.5/1.2 pair given the other way round (draft 1 at 1.2, the
    flatter): the ascent climbs draft 1's law first (smaller Σ q²) and its staircase is at P*
    (to 1e-12) within 20 steps. Twin: the colder draft's law (draft 2's, the order before) climbed
    for 100 steps stays more than 1e-7 short."""
    p, (q_cold, q_flat), optimum, parts = _bench_pair(8192, 0.5, 1.2)
    qs = (q_flat, q_cold)
    assert _orientation.first_climbed(qs) == 0 and _orientation.first_climbed(qs[::-1]) == 1
    out = ascent_staircase(p, qs, parts, optimum)
    assert out.fixed == 0 and out.ascent.steps <= 20
    assert float(np.minimum(p, out.law1 + out.law2).sum()) >= optimum - 1e-12
    assert ascend(p, q_flat, q_cold, optimum, iterations=100).value < optimum - 1e-7  # twin
