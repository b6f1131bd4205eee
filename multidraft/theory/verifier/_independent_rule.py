"""The two-segment curtain: a lossless selection rule for two independent, non-identical drafts.

Drafts ``X_1 ~ q_1``, ``X_2 ~ q_2`` independently. Let T* be the min-cut certificate of
``P* = 1 + min_T [p(T) - q_1(T) q_2(T)]`` (:func:`~multidraft.theory.optimum.product_cut`),
U = Ω ∖ T*, ``u_i = q_i(U)``, ``t_i = q_i(T*) = 1 - u_i``.

**The rule.** Every draft gets a *time* in [0, 2) and the draft with the smaller time is
selected. A draft in U gets a time in [0, 1), a draft in T* one in [1, 2), so a U draft always
beats a T* draft (U is tight: ``r(U) = h(U) = 1 - t_1 t_2``). Inside a part, draft i's time is
uniform on [0, 1) (shifted by 1 on T*) and is drawn uniformly from its token's *pieces* in
draft i's own layout of that part: a tiling of the part's time by draft i's tokens, token y
covering a length ``q_i(y) / q_i(part)``. Both drafts' times in a part are then uniform, and
the chance that draft 1 at U-time s wins is ``P(X_2 ∉ U or its time > s) = 1 - u_2 s``; at
T*-time s it is ``t_2 (1 - s)``. In draft 1's rescaled coordinate ``z = u_2 s`` (U) or
``z = s`` (T*) these weights are ``1 - z`` and ``t_2 (1 - z)``, the weight of the minimum of
two iid uniforms, so each (draft, part) layout is an iid K = 2 curtain on a region of [0, 1)
and its law is

    r_1(y) = (u_1 / (2 u_2)) Σ_{[a, b) ∈ pieces} W(a, b)   (y ∈ U),
    r_1(y) = (t_1 t_2 / 2)  Σ_{[a, b) ∈ pieces} W(a, b)   (y ∈ T*),   W(a, b) = (1-a)² - (1-b)²,

likewise for draft 2 with the indices swapped; the selected token's law is ``r = r_1 + r_2``.
(Degenerate parts: where the other draft never lies in the part, the weight is constant and
the tokens lie side by side.)

**Which laws.** By the curtain theorem (docs/optimal_verifier.md) each layout reaches exactly
the base polytope of ``A ↦ φ_i(q_i(A))``, φ_i the integrated weight, so the rule reaches
``B(f_1 + f_2)`` per part with, for masses ``a_i = q_i(A)`` (A ⊆ U),

    f(A) = a_1 + a_2 - (u_2 a_1² / u_1 + u_1 a_2² / u_2) / 2  <=  h(A) = a_1 + a_2 - a_1 a_2,

equality iff ``a_1 / u_1 = a_2 / u_2`` (AM-GM): the *straight path* through the draft-mass
plane. The class loses against P* only through sets off that line (docs/nonidentical_verifier.md).

**The fit.** p is split between the drafts in proportion to the linear score of the min-cut
(``π_1 = p q_1 t_2 / (q_1 t_2 + q_2 t_1)``; Lemma 1 of docs/independent_optimum.md), and each
(draft, part) layout takes the best law of its curtain against its share: the iid optimum on
the region (a cut scan over the increasing share/mass order, water levels λ, μ, the stack
pass of :mod:`multidraft.theory.verifier._curtain`). Two more rounds re-split p in proportion
to the laws found; the best exact law is kept. Whatever the fit reaches, the rule's law r is
exact, and the canonical single-draft step against r makes the output exactly p.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from multidraft.theory.optimum import product_cut
from multidraft.theory.verifier._selection_rule import SelectionRule

__all__ = ["IndependentRule", "fit_independent_rule", "region_law"]

#: Re-split rounds after the first fit (each a full refit; the best exact law is kept).
ROUNDS = 2


def _kernels():
    from multidraft.theory.verifier import _curtain_kernels

    return _curtain_kernels


def _w(a: np.ndarray | float, b: np.ndarray | float) -> np.ndarray:
    """``W(a, b) = (1 - a)² - (1 - b)² = (b - a)(2 - a - b)`` (no cancellation)."""
    return (np.asarray(b) - a) * (2.0 - a - np.asarray(b))


def region_law(mass: np.ndarray, cap: np.ndarray, hi: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The iid K = 2 curtain on the region [0, hi) against caps: the best law
    ``x ∈ B(A ↦ W(0, m(A)))`` for ``Σ min(cap, x)``, laid out.

    Tokens have masses ``mass > 0`` (summing to ``hi``) and caps ``cap >= 0`` in W units. As for
    iid drafts (docs/optimal_verifier.md §2): with the tokens ordered by increasing cap/mass,
    the cut T' is the prefix minimising ``cap(T') + W(0, hi - m(T'))``; U' (the rest) takes
    ``[0, m(U'))`` with ``x = min(cap, λ m)``, T' takes ``[m(U'), hi)`` with ``x = max(cap, μ m)``,
    each laid out by the stack pass.

    Returns ``(law [s], group [s], group_bounds [g + 1], pieces [2, m])``: every token's realised
    law in W units (``mass ·`` its group's density), its group, and the groups' pieces.
    """
    kern = _kernels()
    s = len(mass)
    key = cap / mass
    order = np.argsort(key, kind="stable")
    ms, rs, ds = mass[order], cap[order], key[order]
    cm = np.cumsum(ms)
    values = np.concatenate([[_w(0.0, hi)], np.cumsum(rs) + _w(0.0, np.maximum(hi - cm, 0.0))])
    best = int(np.argmin(values))
    boundary = float(ms[best:].sum()) if best < s else 0.0
    scratch = np.empty(s + 1)
    sorted_group = np.empty(s, dtype=np.int64)
    masses, targets = [], []
    # U' = sorted [best, s): pool first (highest density), then free tokens by decreasing density.
    if best < s:
        total = float(_w(0.0, boundary))
        free = int(kern.free_in_u(rs, ms, ds, best, s, total, scratch))
        g = 0
        if s - best > free:
            sorted_group[best + free :] = 0
            masses.append(ms[best + free :].sum())
            targets.append(max(total - rs[best : best + free].sum(), 0.0))
            g = 1
        idx = np.arange(best + free - 1, best - 1, -1)
        sorted_group[idx] = g + np.arange(len(idx))
        masses.extend(ms[idx])
        targets.extend(rs[idx])
    u_groups = len(masses)
    if best > 0:
        total = float(_w(boundary, hi))
        pool = int(kern.pool_in_t(rs, ms, ds, 0, best, total, scratch))
        idx = np.arange(best - 1, pool - 1, -1)
        sorted_group[idx] = u_groups + np.arange(len(idx))
        masses.extend(ms[idx])
        targets.extend(rs[idx])
        if pool > 0:
            sorted_group[:pool] = len(masses)
            masses.append(ms[:pool].sum())
            targets.append(max(total - rs[pool:best].sum(), 0.0))
    mass_g, target_g = np.asarray(masses, dtype=np.float64), np.asarray(targets, dtype=np.float64)
    groups = len(mass_g)
    piece_start, piece_end = np.empty(2 * groups + 2), np.empty(2 * groups + 2)
    density, group_end = np.empty(groups), np.zeros(groups, dtype=np.int64)
    stack, hs, hm, hw = np.empty(groups + 2, dtype=np.int64), np.empty(groups + 2), np.empty(groups + 2), np.empty(groups + 2)
    count = 0
    for first, m, lo, top in ((0, u_groups, 0.0, boundary), (u_groups, groups - u_groups, boundary, hi)):
        if m:
            count = kern.stack_pass(
                mass_g[first : first + m], target_g[first : first + m], 2, lo, top, piece_start, piece_end, density,
                group_end, first, count, stack, hs, hm, hw,
            )  # fmt: skip
    group = np.empty(s, dtype=np.int64)
    group[order] = sorted_group
    law = mass * density[group]
    bounds = np.concatenate([[0], group_end])
    return law, group, bounds, np.stack([piece_start[:count], piece_end[:count]])


@dataclass(frozen=True)
class _Layout:
    """One draft's layout over both parts, in time coordinates [0, 2): every token's group
    (-1: the draft cannot propose it), the groups' piece ranges and the pieces."""

    group: np.ndarray
    first: np.ndarray
    last: np.ndarray
    start: np.ndarray
    end: np.ndarray

    def times(self, tokens: np.ndarray, uniforms: np.ndarray) -> np.ndarray:
        """Each token's time: the uniform's quantile of the token's pieces (one binary search)."""
        group = self.group[tokens]
        cumulative = np.concatenate([[0.0], np.cumsum(self.end - self.start)])
        first, last = self.first[group], self.last[group]
        level = cumulative[first] + uniforms * (cumulative[last] - cumulative[first])
        piece = np.clip(np.searchsorted(cumulative, level, side="right") - 1, first, last - 1)
        return np.minimum(self.start[piece] + (level - cumulative[piece]), self.end[piece])

    def pieces(self, token: int) -> tuple[np.ndarray, np.ndarray]:
        g = self.group[token]
        return self.start[self.first[g] : self.last[g]], self.end[self.first[g] : self.last[g]]


@dataclass(frozen=True)
class IndependentRule(SelectionRule):
    """The two-segment curtain for ``Independent([q_1, q_2])`` with its exact law (the fields of
    :class:`SelectionRule`, ``draft`` = q_1; then q_2, the per-draft laws and the layouts).

    ``selection_law = law_1 + law_2``; ``law_i(y) = P(draft i is selected and shows y)``
    (a token drafted twice counts for draft 1).
    """

    draft2: np.ndarray
    law1: np.ndarray
    law2: np.ndarray
    layouts: tuple

    def choose(self, tuples: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """The selected column of every row of ``tuples [N, 2]``: the smaller time."""
        tuples = np.asarray(tuples, dtype=np.int64)
        uniforms = rng.random(tuples.shape)
        t1 = self.layouts[0].times(tuples[:, 0], uniforms[:, 0])
        t2 = self.layouts[1].times(tuples[:, 1], uniforms[:, 1])
        return (t2 < t1).astype(np.int64)

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
        """``P(draft i is selected | X = x)`` for rows of ``tuples [m, 2]``, exactly, from the
        pieces: ``P(V_1 <= V_2)`` for times uniform on the two tokens' pieces (pairs of
        intervals, closed form). A repeated token goes to draft 1."""
        tuples = np.asarray(tuples, dtype=np.int64)
        out = np.zeros(tuples.shape)
        for row, (a, b) in enumerate(tuples):
            if a == b:
                out[row, 0] = 1.0
                continue
            first = _before(*self.layouts[0].pieces(a), *self.layouts[1].pieces(b))
            out[row] = first, 1.0 - first
        return out


def _before(a0: np.ndarray, a1: np.ndarray, b0: np.ndarray, b1: np.ndarray) -> float:
    """``P(V < V')``, V uniform on the union of intervals [a0, a1), V' on [b0, b1)."""
    la, lb = a1 - a0, b1 - b0
    total_a, total_b = la.sum(), lb.sum()
    x0, x1 = a0[:, None], a1[:, None]
    y0, y1 = b0[None, :], b1[None, :]
    width = np.maximum(y1 - y0, 0.0)

    def integral(x):  # ∫_{-∞}^{x} clip(y1 - t, 0, width) dt, up to a constant in t
        xc = np.clip(x, y0, y1)
        return width * np.minimum(x, y0) + (xc * y1 - 0.5 * xc * xc) - (y0 * y1 - 0.5 * y0 * y0)

    with np.errstate(invalid="ignore", divide="ignore"):
        spread = np.where(x1 > x0, (integral(x1) - integral(x0)), 0.0)
        point = np.where(x1 > x0, 0.0, np.clip(y1 - x0, 0.0, width))  # zero-length pieces: a point
    if total_a > 0 and total_b > 0:
        return float(spread.sum() / (total_a * total_b))
    if total_b > 0:  # V is a point
        return float(point.sum() / total_b)
    return float(np.clip(np.sign(b0.min() - a0.min()), 0.0, 1.0))


def _side_by_side(mass: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A constant weight: any tiling; tokens side by side on [0, Σ mass)."""
    end = np.cumsum(mass)
    start = end - mass
    return np.ones(len(mass)), np.arange(len(mass)), np.arange(len(mass) + 1), np.stack([start, end])


def _fit_split(p, qs, tokens, share, u, t):
    """One fit for the split ``π_1 = share · p``: laws and layouts of both drafts."""
    n = len(p)
    laws, layouts = [np.zeros(n), np.zeros(n)], []
    for i in range(2):
        j = 1 - i
        q = qs[i]
        group = np.full(n, -1, dtype=np.int64)
        starts, ends, firsts, lasts = [], [], [], []
        offset_groups, offset_pieces = 0, 0
        for part, in_part in enumerate(tokens):
            mine = in_part[q[in_part] > 0]
            if not len(mine):
                continue
            own, other = (u[i], u[j]) if part == 0 else (t[i], t[j])
            cap = (share if i == 0 else 1.0 - share)[mine] * p[mine]
            if part == 0 and other > 0:
                # weight 1 - (u_j/u_i) x on draft i's mass coordinate x: z = (u_j/u_i) x on [0, u_j)
                scale, hi, to_time = own / (2.0 * other), other, 1.0 / other
                mass = q[mine] * (other / own)
            elif part == 1 and other > 0:
                scale, hi, to_time = own * other / 2.0, 1.0, 1.0
                mass = q[mine] / own
            else:  # the other draft never lies in this part (U) or always in U (T*): constant weight
                scale, hi, to_time = (1.0 if part == 0 else 0.0), own, 1.0 / own
                mass = q[mine]
            if other > 0:
                law, grp, bounds, pieces = region_law(mass, cap / scale, hi)
                laws[i][mine] = law * scale
            else:
                law, grp, bounds, pieces = _side_by_side(mass)
                laws[i][mine] = q[mine] * scale
            group[mine] = grp + offset_groups
            starts.append(pieces[0] * to_time + part)
            ends.append(pieces[1] * to_time + part)
            firsts.append(bounds[:-1] + offset_pieces)
            lasts.append(bounds[1:] + offset_pieces)
            offset_groups += len(bounds) - 1
            offset_pieces += pieces.shape[1]
        cat = lambda xs, dt=np.float64: np.concatenate(xs).astype(dt) if xs else np.zeros(0, dtype=dt)  # noqa: E731
        layouts.append(_Layout(group, cat(firsts, np.int64), cat(lasts, np.int64), cat(starts), cat(ends)))
    # a token drafted by both: the selection law counts it once (the W-laws above count the
    # event "draft i's time is the smaller", ties -- same token -- have probability 0 apart from
    # the same token, which both layouts then share; r = law_1 + law_2 exactly)
    return laws[0], laws[1], tuple(layouts)


def fit_independent_rule(target: np.ndarray, draft1: np.ndarray, draft2: np.ndarray, *, certificate: np.ndarray | None = None, optimum: float | None = None) -> IndependentRule:
    """The two-segment curtain for ``p`` and two independent drafts ``q_1``, ``q_2`` (module
    docstring), with its exact law r and the single-draft step for r (lossless for any r).

    ``certificate`` (T*, sorted ids) and ``optimum`` (P*) are computed by
    :func:`~multidraft.theory.optimum.product_cut` unless given.

    >>> import numpy as np
    >>> rule = fit_independent_rule(np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.3, 0.5]), np.array([0.1, 0.1, 0.8]))
    >>> round(rule.acceptance, 12), round(rule.optimum, 12)
    (0.78, 0.78)
    """
    p = np.asarray(target, dtype=np.float64)
    qs = (np.asarray(draft1, dtype=np.float64), np.asarray(draft2, dtype=np.float64))
    n = len(p)
    if certificate is None or optimum is None:
        cut = product_cut(p, np.stack(qs))
        certificate, optimum = cut.certificate, min(1.0, 1.0 + float(cut.value))
    in_t = np.zeros(n, dtype=bool)
    in_t[certificate] = True
    tokens = (np.flatnonzero(~in_t), np.flatnonzero(in_t))
    u = np.array([qs[0][~in_t].sum(), qs[1][~in_t].sum()])
    t = np.array([qs[0][in_t].sum(), qs[1][in_t].sum()])
    score = np.stack([qs[0] * t[1], qs[1] * t[0]])
    total = score.sum(axis=0)
    share = np.divide(score[0], total, out=np.full(n, 0.5), where=total > 0)
    best = None
    for _ in range(1 + ROUNDS):
        law1, law2, layouts = _fit_split(p, qs, tokens, share, u, t)
        law = law1 + law2
        acceptance = float(np.minimum(p, law).sum())
        if best is None or acceptance > best[0]:
            best = (acceptance, law1, law2, layouts)
        if acceptance >= optimum - 1e-12:
            break
        share = np.divide(law1, law, out=share.copy(), where=law > 0)
    _, law1, law2, layouts = best
    law = law1 + law2
    accept = np.divide(p, law, out=np.zeros(n), where=law > 0)
    np.minimum(accept, 1.0, out=accept)
    excess = np.maximum(p - law, 0.0)
    residual = excess / excess.sum() if excess.sum() > 0 else p.copy()
    return IndependentRule(
        k=2, n=n, target=p, draft=qs[0], selection_law=law, optimum=float(optimum), certificate=np.asarray(certificate),
        accept=accept, residual=residual, draft2=qs[1], law1=law1, law2=law2, layouts=layouts,
    )  # fmt: skip
