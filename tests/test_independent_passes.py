"""The compiled passes of the independent min-cut and of the path curtain's fit (issue 33,
item 2: time) give the doubles of the numpy expressions they replace, bit for bit.

Each pass is checked against its numpy formulation (written out here, as the code had it) on
data with exact ties, zeros and many binades; each check has a broken twin it must catch (a
non-strict comparison, an unstable order, pairwise instead of running sums, a digit skipped,
a bound that prunes too much). End to end, a fit at n = 49152 equals the one with numpy's
sort and scan in their place, layouts included.
"""

from __future__ import annotations

from unittest import mock

import numpy as np
import pytest

import multidraft.theory.optimum._independent as independent
import multidraft.theory.verifier._independent_rule as rule_module
from multidraft.theory import Independent, dirichlet, optimal_acceptance, softmax, zipf
from multidraft.theory.optimum import _independent_kernels as kernels
from multidraft.theory.optimum import product_cut
from multidraft.theory.verifier import _path_kernels, fit_path_curtain
from multidraft.theory.verifier._curtain import _PACKED_SORT_FROM

kernels.compiled()


def tied(rng: np.random.Generator, size: int, k: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """p and q [k, size] with many exact ties (a few distinct values), zeros in q, and a span of
    binades."""
    p = rng.choice(np.geomspace(1e-9, 1.0, 7), size)
    q = rng.choice(np.concatenate([[0.0], np.geomspace(1e-9, 1.0, 5)]), (k, size))
    return p, q


# -- the cut --------------------------------------------------------------------------------------
def sift_by_numpy(w_lo, w_hi, up, down, ids, p, q, strict=True):
    """The deciding round as numpy had it: masks, then the kept classes in order."""
    low = sum(w * row for w, row in zip(w_lo, q))
    high = sum(w * row for w, row in zip(w_hi, q))
    inside = low > p * up if strict else low >= p * up
    outside = high < p * down
    keep = ~(inside | outside)
    return ids[inside], p[inside], q[:, inside], ids[keep], p[keep], q[:, keep]


@pytest.mark.parametrize("seed", range(4))
def test_sift_is_the_numpy_round(seed):
    rng = np.random.default_rng(seed)
    p, q = tied(rng, 3000)
    ids = rng.permutation(3000)
    w_lo, w_hi = [0.25, 0.5], [0.5, 1.0]
    p[::10] = w_lo[0] * q[0, ::10] + w_lo[1] * q[1, ::10]  # ties: the weighted mass equals p exactly
    up, down = 1.0, 1.0
    expected = sift_by_numpy(w_lo, w_hi, up, down, ids, p, q)
    buffers = np.empty(3000, dtype=np.int64), np.empty(3000), np.empty((2, 3000))
    work = ids.copy(), p.copy(), q.copy()
    inside, kept = kernels.sift(np.array(w_lo), np.array(w_hi), up, down, *work, 3000, *buffers)
    got = buffers[0][:inside], buffers[1][:inside], buffers[2][:, :inside], work[0][:kept], work[1][:kept], work[2][:, :kept]
    for a, b in zip(got, expected):
        np.testing.assert_array_equal(a, b)
    assert 0 < inside < 3000 and 0 < kept < 3000
    twin = sift_by_numpy(w_lo, w_hi, up, down, ids, p, q, strict=False)  # >= at the threshold
    assert len(twin[0]) != inside


def test_negative_parts_and_gather_are_numpys():
    rng = np.random.default_rng(1)
    p, q = tied(rng, 5000)
    ids = rng.permutation(5000)[:4000]
    vs = np.array([[70.0, 0.3], [0.3, 7.0], [1.0, 0.0]])
    out, counts = np.empty((3, 4000)), np.empty(3, dtype=np.int64)
    kernels.negative_parts(vs, ids, p, q, out, counts)
    for v, row, count in zip(vs, out, counts):
        reduced = p[ids] - sum(v[i] * q[i, ids] for i in range(2))
        np.testing.assert_array_equal(row[:count], reduced[reduced < 0])
        assert row[:count].sum() == reduced[reduced < 0].sum()
    assert len(set(counts.tolist())) == 3  # the rows are told apart (a pass that wrote one row for all would fail)
    out_p, out_q = np.empty(4000), np.empty((2, 4000))
    kernels.gather(ids, p, q, out_p, out_q)
    np.testing.assert_array_equal(out_p, p[ids])
    np.testing.assert_array_equal(out_q, q[:, ids])


def test_prefix_values_are_the_cumsum_formula():
    rng = np.random.default_rng(2)
    p, q = rng.random(20000), rng.random((2, 20000))
    order = rng.permutation(20000)
    p_in, c_in = 0.125, np.array([0.3, 0.7])

    def prefix(values, running=True):
        if running:
            return np.concatenate([[0.0], np.cumsum(values)])
        return np.array([0.0] + [values[: j + 1].sum() for j in range(len(values))])  # pairwise sums

    def values(running):
        contained = (prefix(q[0, order], running) + c_in[0]) * (prefix(q[1, order], running) + c_in[1])
        return prefix(p[order], running) + p_in - contained

    out = np.empty(20001)
    kernels.prefix_values(order, p, q, p_in, c_in, out)
    np.testing.assert_array_equal(out, values(True))
    assert not np.array_equal(out, values(False))  # the twin: pairwise prefix sums round otherwise


@pytest.mark.parametrize("seed", range(3))
def test_score_order_is_the_stable_argsort(seed):
    rng = np.random.default_rng(seed)
    p, q = tied(rng, 20000)
    ids = rng.permutation(20000)
    w = np.array([0.5, 0.25])
    score = sum(w[i] * q[i, ids] for i in range(2)) / p[ids]
    assert (score == 0).any() and len(np.unique(score)) < 1000  # zeros (-0.0 after negation) and ties
    bits = np.empty(20000, dtype=np.uint64)
    kernels.score_bits(w, ids, p, q, bits)
    order = kernels.radix_order(bits)
    np.testing.assert_array_equal(order, np.argsort(-score, kind="stable"))
    assert not np.array_equal(np.argsort(-score, kind="quicksort"), order)  # the twin: an unstable sort


def test_radix_order_sorts_every_digit():
    rng = np.random.default_rng(3)
    keys = rng.integers(0, 2**63, 10000, dtype=np.uint64) * np.uint64(2) + rng.integers(0, 2, 10000, dtype=np.uint64)
    keys[::7] = keys[0]  # ties: index order
    np.testing.assert_array_equal(kernels.radix_order(keys), np.argsort(keys, kind="stable"))
    top = 5 * kernels.DIGIT_BITS  # the twin: a sort that misses the top digit fails the check on these keys
    assert not np.array_equal(np.argsort(keys & np.uint64((1 << top) - 1), kind="stable"), np.argsort(keys, kind="stable"))
    constant = keys | np.uint64(0xFFF << 52)  # a digit equal in every key is skipped, the order stands
    np.testing.assert_array_equal(kernels.radix_order(constant), np.argsort(constant, kind="stable"))


def test_class_labels_and_hash_are_numpys():
    rng = np.random.default_rng(4)
    p, q = tied(rng, 8000, k=3)
    p[::5] = 0.0
    active = np.flatnonzero(p > 0)
    ratios, digest = np.empty((3, len(active))), np.empty(len(active), dtype=np.uint64)
    kernels.ratio_digest(p, q, active, ratios, digest)
    expected = q[:, active] / p[active]
    np.testing.assert_array_equal(ratios, expected)
    numpy_digest = np.zeros(len(active), dtype=np.uint64)
    for row in np.ascontiguousarray(expected).view(np.uint64):
        numpy_digest = (numpy_digest ^ row) * np.uint64(0x9E3779B97F4A7C15)
    np.testing.assert_array_equal(digest, numpy_digest)
    order = np.argsort(digest, kind="stable")
    labels = np.empty(len(active), dtype=np.int64)
    kernels.label_runs(ratios, order, labels)
    ordered = ratios[:, order]
    starts = np.ones(len(active), dtype=bool)
    starts[1:] = (ordered[:, 1:] != ordered[:, :-1]).any(axis=0)
    expected_labels = np.empty(len(active), dtype=np.int64)
    expected_labels[order] = np.cumsum(starts) - 1
    np.testing.assert_array_equal(labels, expected_labels)
    assert labels.max() + 1 < len(active)  # parallel tokens merged: the check sees classes of several


def test_the_bound_before_deciding_prunes_only_what_cannot_win():
    """A half whose bound already reaches the best value is dropped before its deciding rounds:
    on Zipf pairs at n = 4096 the same value and set as without that check, with fewer rounds;
    the twin (the check with the bound raised by 0.02) answers wrong on some pair."""
    target = zipf(4096, 1.1, np.random.default_rng(0))
    pairs = [(0.5, 2.0), (0.8, 2.0), (0.8, 1.6), (1.2, 2.0), (0.5, 1.2), (0.8, 1.2)]
    instances = [np.array([softmax(np.log(target), a), softmax(np.log(target), b)]) for a, b in pairs]
    cuts = [product_cut(target, drafts) for drafts in instances]
    with mock.patch.object(independent._Search, "beaten", lambda self, box, bound: False):
        plain = [product_cut(target, drafts) for drafts in instances]
    for cut, reference in zip(cuts, plain):
        assert cut.value == reference.value and cut.boxes == reference.boxes
        np.testing.assert_array_equal(cut.certificate, reference.certificate)
    honest = independent._Search.beaten
    with mock.patch.object(independent._Search, "beaten", autospec=True, side_effect=honest) as beaten:
        for drafts in instances:
            product_cut(target, drafts)
    assert any(beaten.side_effect(*call.args) for call in beaten.call_args_list)  # some half was settled by its bound

    def raised(self, box, bound):
        return bound > -np.inf and self.lower_bound(box) + 0.02 >= self.best_value

    with mock.patch.object(independent._Search, "beaten", raised):
        assert any(product_cut(target, drafts).value != cut.value for drafts, cut in zip(instances, cuts))


# -- the fit --------------------------------------------------------------------------------------
def phi_by_numpy(xs, ys, cw, x):
    k = np.clip(np.searchsorted(xs, x, side="right") - 1, 0, len(xs) - 2)
    span = xs[k + 1] - xs[k]
    f = np.where(span > 0, ys[k] + (ys[k + 1] - ys[k]) * (x - xs[k]) / np.where(span > 0, span, 1.0), ys[k + 1])
    return cw[k] + (x - xs[k]) * (1.0 - 0.5 * (ys[k] + f))


def scan_by_numpy(xs, ys, cw, ms, rs, lo, hi, first=True):
    base = phi_by_numpy(xs, ys, cw, np.array([lo]))[0]
    cm = np.cumsum(ms)
    values = np.concatenate([[phi_by_numpy(xs, ys, cw, np.array([hi]))[0] - base], np.cumsum(rs) + phi_by_numpy(xs, ys, cw, np.maximum(hi - cm, lo)) - base])
    return int(np.argmin(values)) if first else len(values) - 1 - int(np.argmin(values[::-1]))


@pytest.mark.parametrize("seed", range(4))
def test_cut_scan_is_the_numpy_scan(seed):
    rng = np.random.default_rng(seed)
    path = rule_module.prefix_path(rng.permutation(50), (rng.dirichlet(np.ones(50)), rng.dirichlet(np.ones(50))))
    xs, ys, cw = path.coordinates(0)
    ms = rng.dirichlet(np.full(400, 0.3)) * 0.6
    rs = rng.random(400) * ms
    rs[200:260], ms[200:260] = 0.0, 1e-300  # a plateau of equal values: the first minimum counts
    lo, hi = 0.2, 0.2 + ms.sum()
    plateau = rs.copy()
    plateau[:200], plateau[260:] = 0.0, 10 * ms[260:]  # the values fall to the plateau, then rise: the minimum is tied
    for r in (rs, rs * 3, np.zeros(400), plateau):
        assert _path_kernels.cut_scan(xs, ys, cw, ms, r, lo, hi) == scan_by_numpy(xs, ys, cw, ms, r, lo, hi)
    assert scan_by_numpy(xs, ys, cw, ms, plateau, lo, hi) != scan_by_numpy(xs, ys, cw, ms, plateau, lo, hi, first=False)  # the twin


@pytest.mark.parametrize("size", [_PACKED_SORT_FROM - 1, _PACKED_SORT_FROM, 30000])
def test_stable_order_is_the_stable_argsort_on_ties(size):
    rng = np.random.default_rng(size)
    values, masses = tied(rng, size)[0], rng.choice([0.5, 0.25, 1.0], size)
    order = rule_module._stable_order(values, masses)
    np.testing.assert_array_equal(order, np.argsort(values / masses, kind="stable"))
    assert not np.array_equal(np.argsort(values / masses, kind="quicksort"), order)  # the twin: unstable


@pytest.mark.parametrize("temperatures", [(0.5, 2.0), (1.2, 1.2)])
def test_the_fit_equals_the_fit_by_numpys_sort_and_scan(temperatures):
    """At n = 49152 with tied target masses: the same laws and layouts, to the bit, as the fit
    with numpy's stable argsort and scan; with an unstable sort (the twin) the layouts differ."""
    rng = np.random.default_rng(7)
    target = np.round(zipf(49152, 1.1, rng), 6) + 1e-7  # ties
    target /= target.sum()
    q1, q2 = (softmax(np.log(target), t) for t in temperatures)
    cut = product_cut(target, np.array([q1, q2]))

    def fit():
        return fit_path_curtain(target, q1, q2, certificate=cut.certificate, optimum=min(1.0, 1 + float(cut.value)))

    def by_numpy(sort_kind):
        def scan(xs, ys, cw, ms, rs, lo, hi):
            return scan_by_numpy(xs, ys, cw, ms, rs, lo, hi)

        with mock.patch.object(rule_module, "_stable_order", lambda v, m: np.argsort(v / m, kind=sort_kind)), mock.patch.object(_path_kernels, "cut_scan", scan):
            return fit()

    fast, slow, unstable = fit(), by_numpy("stable"), by_numpy("quicksort")
    assert fast.acceptance >= fast.optimum - 1e-12
    np.testing.assert_array_equal(fast.law1, slow.law1)
    np.testing.assert_array_equal(fast.law2, slow.law2)
    for a, b in zip(fast.layouts, slow.layouts):
        for field in ("group", "first", "last", "start", "end"):
            np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
    assert any(not np.array_equal(a.group, b.group) for a, b in zip(fast.layouts, unstable.layouts))


# -- the staircase --------------------------------------------------------------------------------
def test_sorted_piece_laws_are_the_binary_search_laws():
    """Side-by-side pieces on a staircase-like path (repeated breakpoints, zero masses): the walk
    along the path gives :func:`piece_laws`'s doubles (one binary search per end), bit for bit.
    Twin: the same pieces in reverse order, where a forward walk misses their segments."""
    rng = np.random.default_rng(3)
    q = rng.dirichlet(np.full(300, 0.3))
    q[::7] = 0.0
    q /= q.sum()
    order = rng.permutation(300)
    path = rule_module.prefix_path(np.repeat(order, 1), (q, rng.dirichlet(np.ones(300))))
    xs, ys, cw = path.coordinates(0)
    xs = np.repeat(xs, 2)[1:-1]  # every breakpoint twice: a staircase's flats and jumps
    ys = np.repeat(ys, 2)[2:]
    xs, ys = xs[: len(ys)], ys[: len(xs)]
    cw = np.empty(len(xs))
    _path_kernels.cumulative(xs, ys, cw)
    mass = rng.permutation(q) * 0.7
    end = 0.1 + np.cumsum(mass)
    start = np.concatenate([[0.1], end[:-1]])
    bounds = np.arange(len(mass) + 1)
    walked, searched = np.empty(len(mass)), np.empty(len(mass))
    _path_kernels.sorted_piece_laws(xs, ys, cw, start, end, walked)
    _path_kernels.piece_laws(xs, ys, cw, start, end, bounds[:-1], bounds[1:], searched)
    np.testing.assert_array_equal(walked, searched)
    backwards = np.empty(len(mass))
    _path_kernels.sorted_piece_laws(xs, ys, cw, start[::-1].copy(), end[::-1].copy(), backwards)
    assert not np.array_equal(backwards, searched[::-1])  # the twin


@pytest.mark.parametrize("size", [_PACKED_SORT_FROM - 1, _PACKED_SORT_FROM, 30000])
def test_staircase_density_order_is_the_stable_descending_argsort(size):
    """The staircase's order (decreasing ``law / q``, ties in the given order) equals numpy's
    ``argsort(-(law / q), kind="stable")`` on data with many exact ties and zero laws, below and
    above the radix sort's threshold. Twin: the increasing order read backwards without reversing
    the tokens first (ties come out reversed)."""
    from multidraft.theory.verifier._staircase import _density_order

    rng = np.random.default_rng(size)
    law, q = tied(rng, size)[0], rng.choice([0.5, 0.25, 1.0], size)
    law[::5] = 0.0
    tokens = rng.permutation(size + 10)[:size]
    law_n, q_n = np.zeros(size + 10), np.ones(size + 10)
    law_n[tokens], q_n[tokens] = law, q
    expected = tokens[np.argsort(-(law / q), kind="stable")]
    np.testing.assert_array_equal(_density_order(law_n, q_n, tokens), expected)
    assert not np.array_equal(tokens[rule_module._stable_order(law, q)][::-1], expected)  # the twin


def staircase_path_by_lists(law, qs, parts, j):
    """The staircase's breakpoints as the code built them before (Python lists, ``extend``)."""
    q, other = qs[j], qs[1 - j]
    own, far = [0.0], [0.0]
    lo, lo_far = 0.0, 0.0
    for index, part in enumerate(parts):
        last = index == len(parts) - 1
        hi = 1.0 if last else lo + float(q[part].sum())
        hi_far = 1.0 if last else lo_far + float(other[part].sum())
        mine = part[q[part] > 0]
        tokens = mine[np.argsort(-(law[mine] / q[mine]), kind="stable")]
        ends = lo + np.cumsum(q[tokens])
        heights = np.clip(1.0 - law[tokens] / q[tokens], lo_far, hi_far)
        own.extend(np.stack([np.concatenate([[lo], ends])[:-1], ends], axis=1).ravel())
        far.extend(np.repeat(heights, 2))
        own.append(hi)
        far.append(hi_far)
        lo, lo_far = hi, hi_far
    own = np.maximum.accumulate(np.minimum(np.asarray(own), 1.0))
    far = np.maximum.accumulate(np.minimum(np.asarray(far), 1.0))
    return (own, far) if j == 0 else (far, own)


@pytest.mark.parametrize("size", [40, 9000])
def test_staircase_path_is_the_list_built_path(size):
    """:func:`staircase_path` (arrays, one shared sort) gives the breakpoints of the list-built
    construction bit for bit, for both drafts, with U and T* nonempty, zero draft masses and tied
    densities. Twin: heights not clipped into the parts' boxes differ."""
    from multidraft.theory.verifier._staircase import staircase_path

    rng = np.random.default_rng(size)
    qs = [rng.dirichlet(np.full(size, 0.5)) for _ in range(2)]
    qs[0][::9] = 0.0
    qs = tuple(q / q.sum() for q in qs)
    in_t = rng.random(size) < 0.6
    parts = (np.flatnonzero(~in_t), np.flatnonzero(in_t))
    for j in (0, 1):
        law = qs[j] * rng.choice([0.0, 0.3, 0.5, 1.0, rng.random()], size)
        path = staircase_path(law, qs, parts, j)
        own, far = staircase_path_by_lists(law, qs, parts, j)
        np.testing.assert_array_equal(path.c1, own)
        np.testing.assert_array_equal(path.c2, far)
    with mock.patch.object(np, "clip", lambda values, low, high: values):
        twin = staircase_path_by_lists(law, qs, parts, 1)
    assert not np.array_equal(twin[0], path.c1)
