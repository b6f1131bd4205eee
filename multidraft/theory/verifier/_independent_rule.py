"""The path curtain: a lossless selection rule for two independent, non-identical drafts.

Drafts ``X_1 ~ q_1``, ``X_2 ~ q_2`` independently; h(A) = P(set(X) ∩ A ≠ ∅) =
``1 - (1 - q_1(A))(1 - q_2(A))``. Let T* be the min-cut certificate of
``P* = 1 + min_T [p(T) - q_1(T) q_2(T)]`` (:func:`~multidraft.theory.optimum.product_cut`),
U = Ω ∖ T*, ``u_i = q_i(U)``.

**The rule.** Fix a monotone *path* ``c(s) = (c_1(s), c_2(s))`` from (0, 0) to (1, 1) through
``(u_1, u_2)`` (piecewise linear, breakpoints at cumulative draft masses along a token order).
Each draft i tiles its own mass coordinate ``x ∈ [0, 1)`` with its tokens (token y covering a
length ``q_i(y)``: U's tokens ``[0, u_i)``, T*'s ``[u_i, 1)``), draws x uniformly from its token's
pieces, so x is uniform on [0, 1), and maps it to the point of the path where ``c_i = x``. The
draft whose point comes first along the path is selected. Draft 1 at x wins iff draft 2's
coordinate exceeds ``F_1(x)``, the path's ``c_2`` where ``c_1 = x``: probability
``w_1(x) = 1 - F_1(x)`` (likewise draft 2), so

    r(y) = Σ_i ∫_{pieces_i(y)} w_i(x) dx,

and a U draft always beats a T* draft (U is tight: ``r(U) = h(U)``). Each draft's layout is a
one-dimensional curtain with a decreasing weight: the stack pass of
:mod:`multidraft.theory.verifier._curtain` with W(a, b) = ∫_a^b w_i (:mod:`._path_kernels`).

**Which laws.** Draft i's curtain reaches exactly the base polytope of ``A ↦ ∫_0^{q_i(A)} w_i``
(per part), so the rule reaches ``B(f)`` per part with, by Young's inequality,

    f(A) = a_1 + a_2 - ∫_0^{a_1} F_1 - ∫_0^{a_2} F_2  <=  h(A) = a_1 + a_2 - a_1 a_2
    (a_i = q_i(A), masses counted from the part's start),

equality iff ``(a_1, a_2)`` lies on the path. It reaches P* iff some optimal law avoids the
sets off the path (docs/nonidentical_verifier.md): the path is chosen through the sets that bind.

**The fit.** p is split between the drafts in proportion to the linear score of the min-cut
(``π_1 = p q_1 t_2 / (q_1 t_2 + q_2 t_1)``, t_i = q_i(T*); Lemma 1 of
docs/independent_optimum.md), and each (draft, part) layout takes the best law of its curtain
against its share (the iid cut scan over the increasing share/mass order, water levels λ, μ,
the stack pass). Re-splits in proportion to the laws found and several paths are tried; the best
exact law is kept. Whatever the fit reaches, the rule's law r is computed from its pieces, and
the canonical single-draft step against r makes the output exactly p.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from multidraft.theory.optimum import product_cut
from multidraft.theory.verifier._selection_rule import SelectionRule

__all__ = [
    "IndependentRule", "fit_path_curtain", "fit_priority_order", "prefix_path", "pair_choice", "pair_with_cut", "path_rule", "cut_parts",
    "draft_layout", "PATHS",
]

#: Re-split rounds after the first fit of each path (each a refit; the best exact law is kept).
ROUNDS = 1
#: Paths tried, in order, until one reaches P* (to 1e-12): the straight two-segment path, then
#: paths through the cumulative masses of the tokens (U first, then T*) by decreasing p, and by
#: decreasing p / (q_1 + q_2).
PATHS = ("straight", "target", "ratio")


def _curtain():
    from multidraft.theory.verifier import _curtain_kernels

    return _curtain_kernels


def _paths():
    from multidraft.theory.verifier import _path_kernels

    return _path_kernels


@dataclass(frozen=True)
class Path:
    """The path's breakpoints ``(c_1[k], c_2[k])`` (non-decreasing, from 0 to 1)."""

    c1: np.ndarray
    c2: np.ndarray
    order: np.ndarray | None = None

    def coordinates(self, i: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(xs, ys, cw)`` of draft i: its coordinate, the other's, ``∫_0^{xs[k]} w_i``."""
        xs, ys = (self.c1, self.c2) if i == 0 else (self.c2, self.c1)
        cw = np.empty(len(xs))
        _paths().cumulative(xs, ys, cw)
        return xs, ys, cw


def _path(kind: str, p: np.ndarray, qs: tuple, parts: tuple) -> Path:
    if kind == "straight":
        u = [float(q[parts[0]].sum()) for q in qs]
        return Path(np.array([0.0, u[0], 1.0]), np.array([0.0, u[1], 1.0]))
    key = p if kind == "target" else p / np.maximum(qs[0] + qs[1], 1e-300)
    return prefix_path(np.concatenate([part[np.argsort(-key[part], kind="stable")] for part in parts]), qs)


def _local_share(path: Path, qs: tuple, n: int) -> np.ndarray | None:
    """Draft 1's share of every token's target: its part of the rate of h along the token's
    own segment of the path, ``q_1 (1 - c_2) / (q_1 (1 - c_2) + q_2 (1 - c_1))`` at the
    segment's midpoint (None for the straight path)."""
    if path.order is None:
        return None
    m1 = 1.0 - 0.5 * (path.c2[:-1] + path.c2[1:])
    m2 = 1.0 - 0.5 * (path.c1[:-1] + path.c1[1:])
    a, b = qs[0][path.order] * m1, qs[1][path.order] * m2
    share = np.full(n, 0.5)
    share[path.order] = np.divide(a, a + b, out=np.full(len(a), 0.5), where=a + b > 0)
    return share


@dataclass(frozen=True)
class _Layout:
    """One draft's tiling of its coordinate [0, 1): every token's group (-1: the draft cannot
    propose it), the groups' piece ranges, the pieces, and the path's coordinates."""

    group: np.ndarray
    first: np.ndarray
    last: np.ndarray
    start: np.ndarray
    end: np.ndarray
    xs: np.ndarray
    ys: np.ndarray

    def coordinates(self, tokens: np.ndarray, uniforms: np.ndarray) -> np.ndarray:
        """Each token's coordinate: the uniform's quantile of its pieces (one binary search)."""
        group = self.group[tokens]
        cumulative = np.concatenate([[0.0], np.cumsum(self.end - self.start)])
        first, last = self.first[group], self.last[group]
        level = cumulative[first] + uniforms * (cumulative[last] - cumulative[first])
        piece = np.clip(np.searchsorted(cumulative, level, side="right") - 1, first, last - 1)
        return np.minimum(self.start[piece] + (level - cumulative[piece]), self.end[piece])

    def times(self, tokens: np.ndarray, uniforms: np.ndarray) -> np.ndarray:
        """Each draft's point along the path, ``c_1 + c_2`` there."""
        return _paths().path_times(self.xs, self.ys, self.coordinates(tokens, uniforms))

    def pieces(self, token: int) -> tuple[np.ndarray, np.ndarray]:
        g = self.group[token]
        return self.start[self.first[g] : self.last[g]], self.end[self.first[g] : self.last[g]]


@dataclass(frozen=True)
class IndependentRule(SelectionRule):
    """The path curtain for ``Independent([q_1, q_2])`` with its exact law (the fields of
    :class:`SelectionRule`, ``draft`` = q_1; then the step's ``accept`` and ``residual`` [n], q_2, the
    per-draft laws, the layouts and the path's name). ``selection_law = law1 + law2``, ``law_i(y) = P(draft i
    is selected, X_i = y)`` (the first along the path; a token drafted twice is selected either way)."""

    accept: np.ndarray
    residual: np.ndarray
    draft2: np.ndarray
    law1: np.ndarray
    law2: np.ndarray
    layouts: tuple
    path: str

    def choose(self, tuples: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """The selected column of every row of ``tuples [N, 2]``: the earlier point on the path."""
        tuples = np.asarray(tuples, dtype=np.int64)
        uniforms = rng.random(tuples.shape)
        first = self.layouts[0].times(tuples[:, 0], uniforms[:, 0])
        second = self.layouts[1].times(tuples[:, 1], uniforms[:, 1])
        return (second < first).astype(np.int64)

    def sample(self, tuples: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """The verifier's output for every row: select, accept with ``min(1, p/r)``, else draw
        the residual ``norm((p - r)_+)`` (inverse CDF)."""
        tuples = np.asarray(tuples, dtype=np.int64)
        chosen = tuples[np.arange(len(tuples)), self.choose(tuples, rng)]
        out = chosen.copy()
        rejected = np.flatnonzero(rng.random(len(tuples)) >= self.accept[chosen])
        if len(rejected):
            cdf = np.cumsum(self.residual)
            out[rejected] = np.minimum(np.searchsorted(cdf, rng.random(len(rejected)) * cdf[-1], side="right"), self.n - 1)
        return out

    def choice_probabilities(self, tuples: np.ndarray) -> np.ndarray:
        """``P(draft i is selected | X = x)`` for rows of ``tuples [m, 2]``, exactly
        (:func:`pair_choice` on this rule's layouts)."""
        return pair_choice(self.layouts, tuples)


def pair_choice(layouts: tuple, tuples: np.ndarray) -> np.ndarray:
    """``P(draft i is selected | X = x)`` for rows of ``tuples [m, 2]`` under one path's layouts,
    exactly, from the pieces: ``P(x_2 > F_1(x_1))`` with x_1, x_2 uniform on the tokens' pieces,
    integrated by the midpoint rule between the points where the integrand's slope changes (the
    path's breakpoints, the ends of the pieces and their images): exact for this
    piecewise-linear integrand. A repeated token goes to draft 1."""
    tuples = np.asarray(tuples, dtype=np.int64)
    out = np.zeros(tuples.shape)
    one, two = layouts
    for row, (a, b) in enumerate(tuples):
        if a == b:
            out[row, 0] = 1.0
            continue
        first = _wins(*one.pieces(a), *two.pieces(b), one.xs, one.ys)
        out[row] = first, 1.0 - first
    return out


def _other(xs: np.ndarray, ys: np.ndarray, x: np.ndarray) -> np.ndarray:
    """F(x) away from breakpoints (the segment with ``xs[k] <= x < xs[k + 1]``)."""
    k = np.clip(np.searchsorted(xs, x, side="right") - 1, 0, len(xs) - 2)
    span = xs[k + 1] - xs[k]
    return np.where(span > 0, ys[k] + (ys[k + 1] - ys[k]) * (x - xs[k]) / np.where(span > 0, span, 1.0), ys[k + 1])


def _wins(a0, a1, b0, b1, xs, ys) -> float:
    """``P(x_2 > F(x_1))``, x_1 uniform on the intervals [a0, a1), x_2 on [b0, b1)."""
    la, lb = (a1 - a0).sum(), (b1 - b0).sum()
    if lb <= 0:
        return float(np.interp(a0.min(), xs, ys) < b0.min())
    above = lambda y: np.clip(b1[None, :] - np.maximum(y[:, None], b0[None, :]), 0.0, None).sum(axis=1)  # noqa: E731
    if la <= 0:
        return float(above(np.array([np.interp(a0.min(), xs, ys)]))[0] / lb)
    inverse = np.interp(np.concatenate([b0, b1]), ys, xs)  # where F crosses a piece end
    total = 0.0
    for lo, hi in zip(a0, a1):
        if hi <= lo:
            continue
        points = np.concatenate([[lo, hi], xs, inverse])
        points = np.unique(points[(points >= lo) & (points <= hi)])
        middle = 0.5 * (points[1:] + points[:-1])  # linear between points: the midpoint rule is exact,
        total += float(np.sum(above(_other(xs, ys, middle)) * np.diff(points)))  # and avoids the jumps
    return total / (la * lb)


def _region(path_i, mass, cap, lo, hi, offset):
    """Draft i's best curtain law on the region [lo, hi) of its coordinate against caps: the
    groups of :func:`_region_groups`, each laid out by the stack pass. Returns (group of every
    token, group piece bounds, piece starts, piece ends, laws read off the pieces)."""
    xs, ys, cw = path_i
    paths = _paths()
    order, sorted_group, mass_g, target_g, u_groups, boundary = _region_groups(path_i, mass, cap, lo, hi)
    s, groups = len(mass), len(mass_g)
    start, end = np.empty(2 * groups + 2), np.empty(2 * groups + 2)
    group_end = np.zeros(groups, dtype=np.int64)
    stack, hs, he, hm, hw = np.empty(groups + 2, dtype=np.int64), *(np.empty(groups + 2) for _ in range(4))
    count = 0
    for first, m, a, b in ((0, u_groups, lo, boundary), (u_groups, groups - u_groups, boundary, hi)):
        if m:
            count = paths.path_stack_pass(
                xs, ys, cw, mass_g[first : first + m], target_g[first : first + m], a, b, start, end, group_end,
                first, count, stack, hs, he, hm, hw,
            )  # fmt: skip
    bounds = np.concatenate([[0], group_end])
    start, end = start[:count], end[:count]
    group_law = np.empty(groups)
    paths.piece_laws(xs, ys, cw, start, end, bounds[:-1], bounds[1:], group_law)
    group = np.empty(s, dtype=np.int64)
    group[order] = sorted_group
    density = np.divide(group_law, mass_g, out=np.zeros(groups), where=mass_g > 0)
    _check_tiling(start, end, lo, hi, bounds, mass_g)
    return group + offset, bounds, start, end, mass * density[group]


def _planned_region(path_i, mass, cap, lo, hi, offset):
    """:func:`_region`'s return without the layout: the laws its stack pass realises when it tiles
    (each group's target spread over its tokens by mass), one empty piece range per group."""
    order, sorted_group, mass_g, target_g, _, _ = _region_groups(path_i, mass, cap, lo, hi)
    group = np.empty(len(mass), dtype=np.int64)
    group[order] = sorted_group
    density = np.divide(target_g, mass_g, out=np.zeros(len(mass_g)), where=mass_g > 0)
    return group + offset, np.zeros(len(mass_g) + 1, dtype=np.int64), np.zeros(0), np.zeros(0), mass * density[group]


def _region_groups(path_i, mass, cap, lo, hi):
    """The groups of :func:`_region`: the iid cut scan (tokens by increasing cap/mass; the prefix
    T' minimising ``cap(T') + W(lo, hi - m(T'))``), ``min(cap, λ m)`` on the rest U' in
    ``[lo, lo + m(U'))``, ``max(cap, μ m)`` on T' behind it. Returns (the order, each sorted
    token's group, the groups' masses and targets -- the laws the stack pass realises --, U''s
    group count, the boundary of U' and T')."""
    xs, ys, cw = path_i
    curtain, paths = _curtain(), _paths()
    s = len(mass)
    order = _stable_order(cap, mass)
    ms, rs = mass[order], cap[order]
    ds = rs / ms
    best = int(paths.cut_scan(xs, ys, cw, ms, rs, lo, hi))
    boundary = lo + (float(ms[best:].sum()) if best < s else 0.0)
    scratch = np.empty(s + 1)
    sorted_group = np.empty(s, dtype=np.int64)
    masses, targets = [], []  # the groups' masses and targets, as arrays in group order
    if best < s:  # U' = sorted [best, s): pool first (highest density), then free by decreasing density
        total = paths.pweight(xs, ys, cw, lo, boundary)
        free = int(curtain.free_in_u(rs, ms, ds, best, s, total, scratch))
        g = 0
        if s - best > free:
            sorted_group[best + free :] = 0
            masses.append([ms[best + free :].sum()])
            targets.append([max(total - rs[best : best + free].sum(), 0.0)])
            g = 1
        sorted_group[best : best + free] = g + free - 1 - np.arange(free)
        masses.append(ms[best : best + free][::-1])
        targets.append(rs[best : best + free][::-1])
    u_groups = sum(len(m) for m in masses)
    if best > 0:  # T' = sorted [0, best): free by decreasing density, then the pool
        total = paths.pweight(xs, ys, cw, boundary, hi)
        pool = int(curtain.pool_in_t(rs, ms, ds, 0, best, total, scratch))
        sorted_group[pool:best] = u_groups + best - 1 - np.arange(pool, best)
        masses.append(ms[pool:best][::-1])
        targets.append(rs[pool:best][::-1])
        if pool > 0:
            sorted_group[:pool] = u_groups + best - pool
            masses.append([ms[:pool].sum()])
            targets.append([max(total - rs[pool:best].sum(), 0.0)])
    return order, sorted_group, np.concatenate(masses), np.concatenate(targets), u_groups, boundary


def _stable_order(values: np.ndarray, masses: np.ndarray) -> np.ndarray:
    """``argsort(values / masses, kind="stable")`` (masses > 0): from
    :data:`~multidraft.theory.verifier._curtain._PACKED_SORT_FROM` entries on by the radix sort of
    :func:`~multidraft.theory.verifier._curtain.density_order` (the same permutation, ~10x
    faster at 49,152 entries), below that by numpy."""
    from multidraft.theory.verifier._curtain import _PACKED_SORT_FROM, density_order

    if len(values) < _PACKED_SORT_FROM:
        return np.argsort(values / masses, kind="stable")
    return density_order(values, masses)


def _check_tiling(start, end, lo, hi, bounds, mass_g) -> None:
    """The pieces must tile [lo, hi) with every group's length its mass: else the law computed
    from them would not be the rule's (an internal error, never a wrong number). Overlap is
    measured as ``Σ lengths - |union|`` (a sweep by start against the running end: a piece
    starting a few ulps inside a long one overlaps it by those ulps, not by the long one's length)."""
    slack = 1e-9 * max(hi - lo, 1e-300) + 1e-15
    if not len(start):
        return
    order = np.argsort(start, kind="stable")
    starts, ends = start[order], end[order]
    reach = np.maximum.accumulate(ends)[:-1]  # the furthest end of the pieces before each
    overlap = float(np.clip(np.minimum(ends[1:], reach) - starts[1:], 0.0, None).sum())
    lengths = np.add.reduceat(end - start, bounds[:-1])
    lengths = np.where(bounds[1:] > bounds[:-1], lengths, 0.0)
    if start.min() < lo - slack or end.max() > hi + slack or overlap > slack or np.abs(lengths - mass_g).max() > slack:
        raise RuntimeError("path curtain: the stack pass did not tile its region (the fit's majorisation failed)")


def _side_by_side(path_i, mass, lo, offset):
    """The tokens side by side from lo, one piece each (a fixed priority order: always a
    tiling, the fallback when no fit tiles); laws ``∫ w`` over the pieces."""
    xs, ys, cw = path_i
    end = lo + np.cumsum(mass)
    start = np.concatenate([[lo], end[:-1]])
    bounds = np.arange(len(mass) + 1)
    law = np.empty(len(mass))
    _paths().sorted_piece_laws(xs, ys, cw, start, end, law)
    return np.arange(len(mass)) + offset, bounds, start, end, law


def _fit(p, qs, parts, share, path: Path, balance: bool, vertex: bool = False, planned: bool = False):
    """One fit for the split ``π_1 = share · p`` on ``path``: laws and layouts of both drafts
    (``vertex``: every token one piece, side by side, whatever the split; ``planned``: the laws
    the stack passes would realise, :func:`_planned_region`, with empty layouts)."""
    shares = _balanced(p, qs, parts, share, path) if balance else [share, share]
    out = []
    for i in range(2):
        coordinates = path.coordinates(i)

        def place(index, mine, lo, hi, groups, i=i, coordinates=coordinates):
            if vertex:
                return (mine, *_side_by_side(coordinates, qs[i][mine], lo, groups))
            share = shares[index][mine]
            cap = (share if i == 0 else 1.0 - share) * p[mine]
            return (mine, *(_planned_region if planned else _region)(coordinates, qs[i][mine], cap, lo, hi, groups))

        out.append(draft_layout(qs[i], parts, coordinates, place))
    return out[0][0], out[1][0], (out[0][1], out[1][1])


def draft_layout(q: np.ndarray, parts: tuple, coordinates: tuple, place) -> tuple[np.ndarray, _Layout]:
    """One draft's law and :class:`_Layout` on its coordinate [0, 1), part after part (each part's
    region as long as the draft's mass there, the last one up to 1): ``place(index, mine, lo,
    hi, groups)`` lays the part's tokens ``mine`` (those the draft can propose) on [lo, hi) and
    returns (the tokens in its order, their groups from ``groups`` on, group piece bounds, piece
    starts, piece ends, the tokens' laws from the pieces)."""
    n = len(q)
    law = np.zeros(n)
    group = np.full(n, -1, dtype=np.int64)
    starts, ends, firsts, lasts = [], [], [], []
    groups, pieces, lo = 0, 0, 0.0
    for index, part in enumerate(parts):
        mine = part[q[part] > 0]
        hi = 1.0 if part is parts[-1] else lo + float(q[mine].sum())
        if len(mine):
            tokens, grp, bounds, start, end, token_law = place(index, mine, lo, hi, groups)
            law[tokens] = token_law
            group[tokens] = grp
            starts.append(start)
            ends.append(end)
            firsts.append(bounds[:-1] + pieces)
            lasts.append(bounds[1:] + pieces)
            groups += len(bounds) - 1
            pieces += len(start)
        lo = hi
    cat = lambda xs, dt=np.float64: np.concatenate(xs).astype(dt, copy=False) if xs else np.zeros(0, dtype=dt)  # noqa: E731
    return law, _Layout(group, cat(firsts, np.int64), cat(lasts, np.int64), cat(starts), cat(ends), coordinates[0], coordinates[1])


def resplit(law1: np.ndarray, law: np.ndarray, share: np.ndarray) -> np.ndarray:
    """Draft 1's share ``clip(law1 / law, 0, 1)`` of every token, the previous ``share`` where
    ``law = 0``: the fit's re-split in proportion to the laws found. Laws read off the pieces
    can be a rounding below 0 (-5e-38 on a SmolLM2 row at 1.2 & 2.0), and a share outside
    [0, 1] would give the other draft a negative cap, whose ratio the radix sort cannot order."""
    return np.clip(np.divide(law1, law, out=share.copy(), where=law > 0), 0.0, 1.0)


def _balanced(p, qs, parts, share, path: Path) -> list[np.ndarray]:
    """The split per part, shifted in logit so that each draft's share of the part's target
    is in proportion to what its curtain hands out there (``∫ w_i`` over the part): a draft's
    law is in its curtain's base polytope, whose total is fixed, so a share summing to less
    would be exceeded and one summing to more left unused."""
    out = []
    lo = [0.0, 0.0]
    for part in parts:
        hi = [1.0 if part is parts[-1] else lo[i] + float(qs[i][part].sum()) for i in range(2)]
        totals = [_weight(path.coordinates(i), lo[i], hi[i]) for i in range(2)]
        lo = hi
        adjusted = share.copy()
        mass = p[part].sum()
        if len(part) == 0 or mass <= 0 or totals[0] + totals[1] <= 0:
            out.append(adjusted)
            continue
        goal = mass * totals[0] / (totals[0] + totals[1])
        weights = p[part]
        base = np.clip(share[part], 1e-300, 1.0 - 1e-16)
        logit = np.clip(np.log(base) - np.log1p(-base), -60.0, 60.0)
        low, high, shift = -120.0, 120.0, 0.0
        for _ in range(60):  # Newton on the shift inside a bisection bracket (the sum increases)
            sigma = _expit(logit + shift)
            value = float((weights * sigma).sum()) - goal
            low, high = (shift, high) if value < 0 else (low, shift)
            slope = float((weights * sigma * (1.0 - sigma)).sum())
            step = shift - value / slope if slope > 0 else 0.5 * (low + high)
            step = step if low < step < high else 0.5 * (low + high)
            if abs(value) <= 1e-15 * max(goal, 1e-300) or high - low < 1e-13:
                break
            shift = step
        adjusted[part] = _expit(logit + shift)
        out.append(adjusted)
    return out


def _expit(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-x))


def _weight(coordinates, lo: float, hi: float) -> float:
    xs, ys, cw = coordinates
    return float(_paths().pweight(xs, ys, cw, lo, hi))


def cut_parts(n: int, certificate: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(U, T*) of the cut ``certificate`` (T*) over n tokens, as increasing token ids."""
    in_t = np.zeros(n, dtype=bool)
    in_t[certificate] = True
    return np.flatnonzero(~in_t), np.flatnonzero(in_t)


def pair_with_cut(target, draft1, draft2, certificate=None, optimum=None) -> tuple[np.ndarray, tuple, np.ndarray, float]:
    """``(p, (q_1, q_2), T*, P*)`` as float64 arrays, with the min-cut set T* and ``P* = min(1, 1 +
    min_T [p(T) − q_1(T) q_2(T)])`` from :func:`~multidraft.theory.optimum.product_cut` unless both
    are given."""
    p = np.asarray(target, dtype=np.float64)
    qs = (np.asarray(draft1, dtype=np.float64), np.asarray(draft2, dtype=np.float64))
    if certificate is None or optimum is None:
        cut = product_cut(p, np.stack(qs))
        certificate, optimum = cut.certificate, min(1.0, 1.0 + float(cut.value))
    return p, qs, certificate, optimum


def fit_path_curtain(
    target: np.ndarray, draft1: np.ndarray, draft2: np.ndarray, *, certificate: np.ndarray | None = None,
    optimum: float | None = None, paths: tuple[str, ...] = PATHS,
) -> IndependentRule:  # fmt: skip
    """The path curtain for ``p`` and two independent drafts ``q_1``, ``q_2`` (module
    docstring), with its exact law r and the single-draft step for r (lossless for any r).

    ``certificate`` (T*, sorted ids) and ``optimum`` (P*) are computed by
    :func:`~multidraft.theory.optimum.product_cut` unless given. The paths of ``paths`` are
    tried in order until one reaches P* to 1e-12; the best exact law is kept.

    >>> import numpy as np
    >>> rule = fit_path_curtain(np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.3, 0.5]), np.array([0.3, 0.3, 0.4]))
    >>> round(rule.acceptance, 12), round(rule.optimum, 12)
    (0.94, 0.94)

    The fit's heuristics do not always find the best path (here the priority order 0, 1, 2, a
    single path, reaches P* = 0.78; :func:`~multidraft.theory.verifier.fit_independent_rule`
    mixes paths and finds it):

    >>> rule = fit_path_curtain(np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.3, 0.5]), np.array([0.1, 0.1, 0.8]))
    >>> round(rule.acceptance, 6), round(rule.optimum, 12)
    (0.772285, 0.78)
    """
    p, qs, certificate, optimum = pair_with_cut(target, draft1, draft2, certificate, optimum)
    n = len(p)
    in_t = np.zeros(n, dtype=bool)
    in_t[certificate] = True
    parts = (np.flatnonzero(~in_t), np.flatnonzero(in_t))
    t = [float(q[in_t].sum()) for q in qs]

    def mean_share() -> np.ndarray:
        """The split by each draft's mean weight over its part on the straight path: U
        ``1 - u_j / 2``, T* ``t_j / 2`` (computed only when a candidate needs it)."""
        return _split(qs, *(np.where(in_t, t[j] / 2, 1.0 - (1.0 - t[j]) / 2) for j in (1, 0)))

    # the linear score of the min-cut (weights at the end of U: t_j), then the mean weights
    end_share = _split(qs, t[1], t[0])
    candidates = [("straight", end_share, False), ("straight", mean_share, True), ("straight", end_share, True)]
    candidates += [(kind, None, True) for kind in paths if kind != "straight"]
    best = None
    for kind, share, balance in [c for c in candidates if c[0] in paths]:
        path = _path(kind, p, qs, parts)
        share = _local_share(path, qs, n) if share is None else share() if callable(share) else share
        for _ in range(1 + ROUNDS):
            try:
                law1, law2, layouts = _fit(p, qs, parts, share, path, balance)
            except RuntimeError:  # this layout did not tile: try the next
                break
            law = law1 + law2
            acceptance = float(np.minimum(p, law).sum())
            if best is None or acceptance > best[0]:
                best = (acceptance, law1, law2, layouts, kind)
            if acceptance >= optimum - 1e-12:
                break
            share = resplit(law1, law, share)
        if best is not None and best[0] >= optimum - 1e-12:
            break
    if best is None:  # no fit tiled: the tokens side by side on the straight path (a vertex of B(h))
        law1, law2, layouts = _fit(p, qs, parts, mean_share(), _path("straight", p, qs, parts), False, vertex=True)
        best = (0.0, law1, law2, layouts, "straight, side by side")
    _, law1, law2, layouts, kind = best
    return path_rule(p, qs, certificate, optimum, law1, law2, layouts, kind)


def _split(qs: tuple, w1: float | np.ndarray, w2: float | np.ndarray) -> np.ndarray:
    """Draft 1's share ``q_1 w_1 / (q_1 w_1 + q_2 w_2)`` of every token (1/2 where both vanish)."""
    score1, score2 = qs[0] * w1, qs[1] * w2
    total = score1 + score2
    return np.divide(score1, total, out=np.full(len(score1), 0.5), where=total > 0)


def straight_forecast(p: np.ndarray, qs: tuple, parts: tuple) -> float:
    """``Σ min(p, r)`` of :func:`fit_path_curtain`'s first fit (the straight path, p split by the
    min-cut's linear score ``π_1 = p q_1 t_2 / (q_1 t_2 + q_2 t_1)``, not re-balanced) as its stack
    passes would realise it: each curtain's groups and targets (the cut scans), not laid out.
    Equal to that fit's acceptance up to rounding when its layouts tile; a few ms at n = 49152
    where the fit's stack passes take up to 40 ms on the pairs it falls short on
    (docs/nonidentical_verifier.md §4e). ``parts = (U, T*)`` as token ids.

    Source: the curtain's law against caps (:func:`_region`: ``min(cap, λ m)`` on U', ``max(cap,
    μ m)`` on T', the stack pass realising each group's target), docs/nonidentical_verifier.md §4.

    >>> import numpy as np
    >>> p, qs = np.array([0.5, 0.3, 0.2]), (np.array([0.2, 0.3, 0.5]), np.array([0.3, 0.3, 0.4]))
    >>> round(straight_forecast(p, qs, (np.array([0]), np.array([1, 2]))), 12)  # P* = 0.94: the fit reaches it
    0.94
    """
    t = [float(q[parts[1]].sum()) for q in qs]
    law1, law2, _ = _fit(p, qs, parts, _split(qs, t[1], t[0]), _path("straight", p, qs, parts), False, planned=True)
    return float(np.minimum(p, law1 + law2).sum())


def path_rule(p, qs, certificate, optimum, law1, law2, layouts, kind: str) -> IndependentRule:
    """The :class:`IndependentRule` of one path's layouts and per-draft laws: ``r = law1 + law2``,
    accept ``min(1, p/r)``, residual ``norm((p - r)_+)`` (p itself when r = p)."""
    law = law1 + law2
    accept = np.minimum(np.divide(p, law, out=np.zeros(len(p)), where=law > 0), 1.0)
    excess = np.maximum(p - law, 0.0)
    residual = excess / excess.sum() if excess.sum() > 0 else p.copy()
    return IndependentRule(
        k=2, n=len(p), target=p, draft=qs[0], selection_law=law, optimum=float(optimum), certificate=np.asarray(certificate),
        accept=accept, residual=residual, draft2=qs[1], law1=law1, law2=law2, layouts=layouts, path=kind,
    )  # fmt: skip


def prefix_path(order: np.ndarray, qs: tuple) -> Path:
    """The path through the cumulative draft masses ``(q_1(S_k), q_2(S_k))`` of the prefixes S_k
    of a token order (clipped to be non-decreasing and to end at (1, 1))."""
    c1 = np.concatenate([[0.0], np.cumsum(qs[0][order])])
    c2 = np.concatenate([[0.0], np.cumsum(qs[1][order])])
    c1[-1] = c2[-1] = 1.0
    return Path(np.maximum.accumulate(np.minimum(c1, 1.0)), np.maximum.accumulate(np.minimum(c2, 1.0)), order)


def fit_priority_order(target: np.ndarray, qs: tuple, parts: tuple) -> tuple[np.ndarray, np.ndarray, tuple]:
    """The priority-order rule as a path curtain: the path through the prefixes of the order
    ``concat(parts)`` (U's tokens first), every token one piece, side by side in that order on
    both axes. The drafted token that comes first in the order is selected, so its law is the
    greedy vertex ``r(σ_k) = h(S_k) - h(S_{k-1})`` of B(h) (Edmonds); returns (law1, law2,
    layouts), the laws from the pieces."""
    n = len(target)
    path = prefix_path(np.concatenate(parts), qs)
    return _fit(np.asarray(target, dtype=np.float64), qs, parts, np.full(n, 0.5), path, False, vertex=True)
