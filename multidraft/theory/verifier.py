"""The optimal verifier: a selection rule whose acceptance is the optimal acceptance P*.

**Canonical decomposition** (Khisti et al., ICLR 2025, Theorem 1; theory.md, "The optimal
verifier"). A *selection rule* picks one drafted token Z ∈ set(X); let r be its law. Accepting Z
with probability ``min(1, p(Z)/r(Z))`` and otherwise sampling ``norm((p - r)_+)`` outputs exactly
p, whatever r is, and accepts with probability ``Σ_y min(p(y), r(y))``. The laws r that some
selection rule has are the base polytope B(h) of ``h(A) = P(set(X) ∩ A ≠ ∅)``; the best of them
reaches ``P* = min_T [p(T) + 1 - P(set(X) ⊆ T)]`` (max-flow/min-cut).

**The optimal law (iid drafts).** Let T* be the min-cut certificate (a prefix of the
decreasing-q/p order, :func:`multidraft.theory.optimal_acceptance`) and U = Ω ∖ T*. Then

    r*(y) = min(p(y), λ q(y))  on U,    λ such that r*(U) = h(U) = 1 - q(T*)^K,
    r*(y) = max(p(y), μ q(y))  on T*,   μ such that r*(T*) = q(T*)^K,

lies in B(h) and ``Σ min(p, r*) = r*(U) + p(T*) = P*`` (r* <= p on U, r* >= p on T*).

**Its realisation** ("curtain"; :mod:`multidraft.theory._curtain`): every draft draws a
position uniformly from its token's set of [0, 1) and the draft with the smallest position is
selected; U's sets tile [0, q(U)) and T*'s tile [q(U), 1), laid out by the nested stack pass.
The law the rule *actually* has is computed from its sets and is the r used in the
accept/residual step, so the output is exactly the target and only the acceptance carries
rounding.

**Drafts without replacement** (:mod:`multidraft.theory._front_back`). No closed form of the
optimal law is known; the *front/back* rule (same T*; drafted tokens of the active part flip
coins α; the first "front" one wins, else the last) has a law computed exactly by one pass of
exponential-race integrals, with α fitted so that r tracks p, kept when it accepts more than
the first draft (law q). Lossless either way; its acceptance is a lower bound on P*.

Derivations and proofs (why r* is optimal, why the pass never gets stuck), the treatment of
ties, zeros, p = q, disjoint supports and empty U or T*, and the measured accuracy and
shortfall: docs/optimal_verifier.md.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from multidraft.theory._curtain import interval_weight, nested_layout
from multidraft.theory._field import canonical_step
from multidraft.theory._front_back import front_back_nodes, front_back_pass
from multidraft.theory.laws import IID, DraftLaw, WithoutReplacement, check_law
from multidraft.theory.optimal import _prefix_cut

__all__ = ["SelectionRule", "CurtainRule", "FrontBackRule", "optimal_selection_rule", "VERIFIER_LAWS", "PROVEN_OPTIMAL_LAWS"]

#: Draft-law classes with a lossless verifier at any vocabulary size (:func:`optimal_selection_rule`).
VERIFIER_LAWS: tuple[type[DraftLaw], ...] = (IID, WithoutReplacement)
#: Those whose verifier provably reaches P* (for drafts without replacement it is a lower bound).
PROVEN_OPTIMAL_LAWS: tuple[type[DraftLaw], ...] = (IID,)
#: Largest accepted shortfall of the realised acceptance below P* before falling back.
FIT_TOLERANCE = 1e-6


@dataclass(frozen=True)
class SelectionRule:
    """What every verifier rule here carries: its law and the single-draft step for it.

    Attributes
    ----------
    k, n : int
        Number of drafts and vocabulary size.
    target, draft : ndarray [n]
        p and q.
    selection_law : ndarray [n]
        r, the law of the selected draft token, as the rule realises it.
    optimum : float
        P* (min-cut value of :attr:`certificate`), for comparison with :attr:`acceptance`.
    certificate : ndarray [int64]
        The min-cut set T* (sorted token ids).
    accept : ndarray [n]
        ``min(1, p/r)`` (0 where r = 0: such tokens are never selected).
    residual : ndarray [n]
        ``norm((p - r)_+)`` (p itself when that mass is zero).
    """

    k: int
    n: int
    target: np.ndarray
    draft: np.ndarray
    selection_law: np.ndarray
    optimum: float
    certificate: np.ndarray
    accept: np.ndarray
    residual: np.ndarray

    @property
    def acceptance(self) -> float:
        """``Σ_y min(p(y), r(y))``: the probability that the selected draft is accepted."""
        return float(np.minimum(self.target, self.selection_law).sum())


@dataclass(frozen=True)
class CurtainRule(SelectionRule):
    """An exact selection rule by random positions (iid drafts), with its law and the
    single-draft step (the fields of :class:`SelectionRule`, then its layout).

    Attributes
    ----------
    token_group : ndarray [n] int64
        Group of each token's position set; -1 for tokens no draft can hold.
    piece_start, piece_end : ndarray [m]
        The pieces [start, end) of all sets, each group's pieces contiguous.
    group_first, group_last : ndarray [groups] int64
        First and one-past-last piece index of every group.
    note : str or None
        Set when the fit failed and the rule fell back to a uniformly chosen draft (lossless,
        acceptance Σ min(p, q)); None normally.
    """

    token_group: np.ndarray
    piece_start: np.ndarray
    piece_end: np.ndarray
    group_first: np.ndarray
    group_last: np.ndarray
    note: str | None = None

    def positions(self, tuples: np.ndarray, uniforms: np.ndarray) -> np.ndarray:
        """The position of every draft of ``tuples [N, K]`` given ``uniforms`` of the same shape
        in [0, 1): the uniform's quantile of the draft token's set (one binary search)."""
        group = self.token_group[tuples]
        if (group < 0).any():
            raise ValueError("drafts: a draft token has draft probability zero")
        lengths = self.piece_end - self.piece_start
        cumulative = np.concatenate([[0.0], np.cumsum(lengths)])
        first, last = self.group_first[group], self.group_last[group]
        level = cumulative[first] + uniforms * (cumulative[last] - cumulative[first])
        piece = np.clip(np.searchsorted(cumulative, level, side="right") - 1, first, last - 1)
        return np.minimum(self.piece_start[piece] + (level - cumulative[piece]), self.piece_end[piece])

    def choose(self, tuples: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """The selected draft position (column) for every row of ``tuples [N, K]``: the draft
        holding the smallest of independent uniform positions on the tokens' sets."""
        return np.argmin(self.positions(tuples, rng.random(np.shape(tuples))), axis=-1)

    def choice_probabilities(self, tuples: np.ndarray) -> np.ndarray:
        """``P(draft i is selected | X = x)`` for every row of ``tuples [m, K]``, exactly.

        With g_y = 1/|S_y| on S_y and G_y its distribution function,
        ``P(i | x) = ∫ g_{x_i}(t) Π_{j≠i} (1 - G_{x_j}(t)) dt``: a polynomial of degree K - 1
        between consecutive piece ends, integrated by Gauss-Legendre with ⌈K/2⌉ + 1 nodes
        (exact). Each node is kept as its interval's left end plus an offset, and G is summed
        from those offsets, so a set of length 1e-13 near t = 1 (where positions are resolved
        to 1e-16 only) keeps its relative accuracy. A group of length zero (draft mass below
        the resolution of positions) is the point where :meth:`positions` puts its drafts: such
        a draft wins iff every other draft lies above it, a tie of points going to the first
        column, as ``argmin`` in :meth:`choose` does. Cost O(m · K · pieces): for enumeration
        at small n.
        """
        edges = np.unique(np.concatenate([[0.0, 1.0], self.piece_start, self.piece_end]))
        nodes, weights = np.polynomial.legendre.leggauss(self.k // 2 + 2)
        left, width = edges[:-1], np.diff(edges)
        offset = 0.5 * width[:, None] * (nodes + 1.0)  # [intervals, nodes per interval]
        dt = (0.5 * width[:, None] * weights).ravel()
        start, end = self.piece_start[:, None], self.piece_end[:, None]
        lengths = self.piece_end - self.piece_start
        groups = len(self.group_first)
        owner = np.repeat(np.arange(groups), self.group_last - self.group_first)
        size = np.bincount(owner, lengths, minlength=groups)
        point = size <= 0
        location = self.piece_start[self.group_last - 1]  # a point group's position
        scale = np.where(point, 1.0, size)[owner][:, None, None]
        # The edges hold every piece end, so each interval lies inside a piece or outside it.
        inside = (start <= left) & (left < end)  # [pieces, intervals]
        below = np.where(end <= left, lengths[:, None], np.where(inside, left - start, 0.0))
        covered = below[:, :, None] + inside[:, :, None] * offset  # [pieces, intervals, nodes]
        density = np.zeros((groups, dt.size))
        cdf = np.zeros((groups, dt.size))
        np.add.at(density, owner, np.broadcast_to(inside[:, :, None] / scale, covered.shape).reshape(len(owner), -1))
        np.add.at(cdf, owner, (covered / scale).reshape(len(owner), -1))
        # A point group has no density, and its drafts lie below every node right of the point.
        density[point] = 0.0
        cdf[point] = np.repeat(left[None, :] >= location[point, None], len(nodes), axis=1)
        group = self.token_group[tuples]  # [m, K]
        g, survive = density[group], 1.0 - cdf[group]  # [m, K, nodes]
        out = np.empty(tuples.shape)
        for i in range(self.k):
            others = np.prod(np.delete(survive, i, axis=1), axis=1)
            out[:, i] = (g[:, i] * others) @ dt
        if point[group].any():
            out += self._point_wins(group, point, location, size, owner)
        return out

    def _point_wins(self, group, point, location, size, owner) -> np.ndarray:
        """``P(draft i is selected | X = x)`` for the drafts of point groups (0 elsewhere): the
        chance that every other draft lies above the point, ties of points broken by column."""
        # cdf_at[g, h] = G_g(location of group h) for the groups of positive length g.
        reach = np.clip(location[None, :] - self.piece_start[:, None], 0.0, (self.piece_end - self.piece_start)[:, None])
        cdf_at = np.zeros((len(size), len(size)))
        np.add.at(cdf_at, owner, reach / np.where(point, 1.0, size)[owner][:, None])
        here = location[group]  # [m, K]
        column = np.arange(self.k)
        later = column[None, :] > column[:, None]  # [i, j]: column j comes after column i
        above = (here[:, None, :] > here[:, :, None]) | ((here[:, None, :] == here[:, :, None]) & later)
        spread = 1.0 - cdf_at[group[:, None, :], group[:, :, None]]  # [m, i, j]: draft j above draft i's point
        survive = np.where(point[group][:, None, :], above, spread)
        survive[:, column, column] = 1.0
        return np.where(point[group], np.prod(survive, axis=-1), 0.0)


@dataclass(frozen=True)
class FrontBackRule(SelectionRule):
    """The front/back selection rule for drafts without replacement, with its exact law (the
    fields of :class:`SelectionRule`, then its coins).

    Attributes
    ----------
    position : ndarray [n] int64
        Every token's position: U = Ω ∖ T* first (``position < boundary``), then T*, each by
        decreasing p/q.
    boundary : int
        |U|.
    alpha : ndarray [n]
        Every token's probability of flipping "front".
    first_draft : bool
        True when selecting the first draft (law q) accepted more than the fitted rule (or the
        fit failed, see ``note``), and the rule is that.
    note : str or None
        Set when the fit failed and the rule fell back to the first draft; None normally.
    """

    position: np.ndarray
    boundary: int
    alpha: np.ndarray
    first_draft: bool
    note: str | None = None

    def _active(self, tuples: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Positions ``[N, K]`` and the mask of the drafts in each row's active part."""
        position = self.position[tuples]
        in_u = position < self.boundary
        return position, np.where(in_u.any(axis=-1, keepdims=True), in_u, ~in_u)

    def choose(self, tuples: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """The selected draft (column) of every row of ``tuples [N, K]`` (distinct tokens)."""
        tuples = np.asarray(tuples, dtype=np.int64)
        coins = rng.random(tuples.shape)
        if self.first_draft:
            return np.zeros(len(tuples), dtype=np.int64)
        position, active = self._active(tuples)
        front = active & (coins < self.alpha[tuples])
        first_front = np.argmin(np.where(front, position, self.n), axis=-1)
        last_active = np.argmax(np.where(active, position, -1), axis=-1)
        return np.where(front.any(axis=-1), first_front, last_active)

    def choice_probabilities(self, tuples: np.ndarray) -> np.ndarray:
        """``P(draft i is selected | X = x)`` for every row of ``tuples [m, K]``, exactly:
        ``α_i Π_{j active before i} (1 - α_j)``, plus ``Π_{j active} (1 - α_j)`` for the last
        active draft."""
        tuples = np.asarray(tuples, dtype=np.int64)
        out = np.zeros(tuples.shape)
        if self.first_draft:
            out[:, 0] = 1.0
            return out
        position, active = self._active(tuples)
        back = np.where(active, 1.0 - self.alpha[tuples], 1.0)  # [m, K]
        for i in range(self.k):
            before = active & (position < position[:, i : i + 1])
            out[:, i] = np.where(active[:, i], self.alpha[tuples[:, i]] * np.prod(np.where(before, back, 1.0), axis=-1), 0.0)
        last = np.argmax(np.where(active, position, -1), axis=-1)
        out[np.arange(len(tuples)), last] += np.prod(back, axis=-1)
        return out


def _water_level(values: np.ndarray, masses: np.ndarray, density: np.ndarray, total: float, clip: str) -> float:
    """The level λ with ``Σ min(v_i, λ m_i) = total`` (``clip="min"``) or ``Σ max(v_i, λ m_i)
    = total`` (``clip="max"``), for ``density = v/m`` sorted increasingly and m > 0.

    Both sums are piecewise linear and increasing in λ: locate the bracketing breakpoints
    λ_j = v_j/m_j on prefix sums, then solve on that segment with the segment's sums taken
    directly (no cancelling differences of prefix sums). Returns inf (``min``: every token
    keeps v) or 0 (``max``: likewise) when the plain sum already reaches the total.
    """
    value_before = np.cumsum(values) - values  # Σ_{i<j} v_i
    mass_before = np.cumsum(masses) - masses  # Σ_{i<j} m_i
    mass_total, value_total = mass_before[-1] + masses[-1], value_before[-1] + values[-1]
    if clip == "min":  # at λ = λ_j: tokens i < j keep v_i, the others give λ_j m_i
        at_breaks = value_before + density * (mass_total - mass_before)
        j = int(np.searchsorted(at_breaks, total, side="right"))
        if j == len(values):
            return np.inf
        return (total - values[:j].sum()) / masses[j:].sum()
    if value_total >= total:
        return 0.0
    # at λ = λ_j: tokens i <= j give λ_j m_i, the others keep v_i
    at_breaks = density * (mass_before + masses) + (value_total - value_before - values)
    j = min(int(np.searchsorted(at_breaks, total, side="left")), len(values) - 1)
    return (total - values[j:].sum()) / masses[:j].sum() if j > 0 else 0.0


def _part_layout(values: np.ndarray, masses: np.ndarray, lo: float, hi: float, k: int, clip: str):
    """The nested layout of one part, U (``clip="min"``, r* = min(p, λq)) or T* (``"max"``,
    r* = max(p, μq)), in [lo, hi), for its tokens' p and q sorted by increasing p/q (q > 0).

    The free tokens (r* = p) are a prefix of U and a suffix of T* in that order; the pool
    (r* ∝ q) is one group. Groups go by decreasing density: U's pool first, then its free
    tokens from the highest p/q; T*'s free tokens from the highest p/q, then its pool.

    Returns ``(group_of_token, (group, start, end), group_density)``: the group of each token
    of the part (in the given order), the pieces, and each group's realised weight / length.
    """
    size = len(values)
    density = values / masses
    total = float(interval_weight(lo, hi, k))  # h(U) = W(0, q(U)); q(T*)^K = W(q(U), 1)
    level = _water_level(values, masses, density, total, clip)
    if clip == "min":
        free = int(np.searchsorted(density, level, side="left"))  # density < λ
        free_values, free_masses = values[:free][::-1], masses[:free][::-1]
        pooled = size > free
        group_of_token = np.full(size, 0, dtype=np.int64)
        group_of_token[:free] = np.arange(free, 0, -1) - (0 if pooled else 1)
        pool_mass, pool_weight = masses[free:].sum(), max(total - free_values.sum(), 0.0)
        mass = np.concatenate([[pool_mass], free_masses]) if pooled else free_masses
        weight = np.concatenate([[pool_weight], free_values]) if pooled else free_values
    else:
        pool = int(np.searchsorted(density, level, side="right"))  # density <= μ
        free_values, free_masses = values[pool:][::-1], masses[pool:][::-1]
        group_of_token = np.full(size, size - pool, dtype=np.int64)
        group_of_token[pool:] = np.arange(size - pool - 1, -1, -1)
        pool_mass, pool_weight = masses[:pool].sum(), max(total - free_values.sum(), 0.0)
        mass = np.concatenate([free_masses, [pool_mass]]) if pool else free_masses
        weight = np.concatenate([free_values, [pool_weight]]) if pool else free_values
    if k == 1:  # w = 1: any tiling realises r = q; lay the groups side by side
        end = lo + np.cumsum(mass)
        return group_of_token, (np.arange(len(mass)), end - mass, end), np.ones(len(mass))
    group, start, end, realised_weight, realised_length = nested_layout(mass, weight, k, lo, hi)
    # A group of draft mass below the resolution of positions (q ~ 1e-17 and less) gets sets
    # of length zero: its drafts sit at one point t0 (the start of its last piece, where
    # CurtainRule.positions puts them), and win when the K - 1 other positions lie above it,
    # so its density is w(t0) = K (1 - t0)^{K-1} rather than 0/0.
    last_piece = np.zeros(len(mass), dtype=np.int64)
    np.maximum.at(last_piece, group, np.arange(len(group)))
    point = k * (1.0 - start[last_piece]) ** (k - 1)
    density = np.divide(realised_weight, realised_length, out=point, where=realised_length > 0)
    return group_of_token, (group, start, end), density


def optimal_selection_rule(target: object, law: DraftLaw) -> CurtainRule | FrontBackRule:
    """The verifier's selection rule for ``(p, law)`` at any vocabulary size.

    * iid drafts: the optimal law r* (module docstring) laid out by the nested stack pass; the
      rule realises r* to ``|r - r*| ~ 1e-15``, so ``Σ min(p, r) = P*`` up to rounding.
    * drafts without replacement: the front/back rule (a lower bound on P*, module docstring).

    Either way the rule comes with the law r it actually has and the single-draft step for that
    r, so the output is exactly p.

    Parameters
    ----------
    target : array_like [n]
        The target p.
    law : DraftLaw
        An :class:`~multidraft.theory.laws.IID` or
        :class:`~multidraft.theory.laws.WithoutReplacement` law.

    Returns
    -------
    CurtainRule or FrontBackRule

    Raises
    ------
    ValueError
        A law without a verifier here, or a target that is not a distribution of the law's
        size.

    Examples
    --------
    >>> from multidraft.theory.laws import IID, WithoutReplacement
    >>> rule = optimal_selection_rule([1/3, 1/6, 1/2], IID([1/3, 1/3, 1/3], k=2))
    >>> round(rule.acceptance, 12), round(rule.optimum, 12)
    (1.0, 1.0)
    >>> rule = optimal_selection_rule([0.5, 0.3, 0.2], WithoutReplacement([0.2, 0.3, 0.5], k=2))
    >>> round(rule.acceptance, 12), round(rule.optimum, 12)
    (0.985714285714, 0.985714285714)

    Complexity: one argsort of the q/p ratios and O(n) vectorised work, plus the compiled stack
    pass over the free tokens (iid); the prefix race and the O(n · G · K) front/back pass (wor).
    """
    if not isinstance(check_law(law), VERIFIER_LAWS):
        raise ValueError(
            f"law: the optimal verifier supports the {', '.join(cls.name for cls in VERIFIER_LAWS)} laws; "
            f"got the {law.name} law"
        )
    p = law.check_target(target)
    order, best, optimum = _prefix_cut(p, law, exact=False)
    # In the scan order T* = [0, best) and U = [best, n); undraftable tokens (q = 0) come last.
    in_cut = np.zeros(law.n, dtype=bool)
    in_cut[order[:best]] = True
    certificate = np.flatnonzero(in_cut)
    certificate.flags.writeable = False
    if isinstance(law, WithoutReplacement):
        return _front_back_rule(p, law.draft, law.k, optimum, certificate, in_cut)
    return _curtain_rule(p, law.draft, law.k, order, best, optimum, certificate)


def _curtain_rule(p, q, k, order, best, optimum, certificate) -> CurtainRule:
    """The nested layout of r* for iid drafts, with its fallback."""
    n = len(p)
    p_sorted, q_sorted = p[order], q[order]
    draftable = int(np.count_nonzero(q_sorted))
    best = min(best, draftable)
    boundary = float(q_sorted[best:draftable].sum())  # q(U): U's sets tile [0, q(U)), T*'s [q(U), 1)
    group_sorted = np.full(n, -1, dtype=np.int64)
    pieces, densities = [], []
    groups = 0
    for span, clip, lo, hi in ((slice(best, draftable), "min", 0.0, boundary), (slice(0, best), "max", boundary, 1.0)):
        if span.stop <= span.start:
            continue
        group_of_token, (g, a, b), density = _part_layout(p_sorted[span], q_sorted[span], lo, hi, k, clip)
        group_sorted[span] = group_of_token + groups
        pieces.append((g + groups, a, b))
        densities.append(density)
        groups += len(density)
    token_group = np.empty(n, dtype=np.int64)
    token_group[order] = group_sorted
    group, start, end = (np.concatenate(column) for column in zip(*pieces))
    rule = _rule(p, q, k, optimum, certificate, token_group, group, start, end, np.concatenate(densities), None)
    if np.isfinite(rule.selection_law).all() and rule.acceptance >= optimum - FIT_TOLERANCE:
        return rule
    # A failed fit (never seen; guards against rounding gone wrong): one shared position set,
    # i.e. a uniformly chosen draft, whose law q is exact -- still lossless, acceptance Σ min(p, q).
    shared = np.where(q > 0, 0, -1)
    note = (
        f"optimal verifier fit failed (acceptance {rule.acceptance:.6g} vs P* {optimum:.6g}); "
        "fell back to a uniformly chosen draft (law q, single-draft acceptance)"
    )
    return _rule(p, q, k, optimum, certificate, shared, np.zeros(1, np.int64), np.zeros(1), np.ones(1), np.ones(1), note)


def _front_back_rule(p, q, k, optimum, certificate, in_cut) -> FrontBackRule:
    """The front/back rule for drafts without replacement (module docstring), or the first
    draft where that accepts more or the fit fails."""
    n = len(p)
    ratio = np.full(n, np.inf)
    np.divide(p, q, out=ratio, where=q > 0)
    # Positions: U then T*, each by decreasing p/q, ties by token id (lexsort: last key first).
    order = np.lexsort((np.arange(n), -ratio, in_cut))
    boundary = int(n - np.count_nonzero(in_cut))
    nodes, weights = front_back_nodes(q, k)
    alpha_sorted, r_sorted = front_back_pass(p[order], q[order], boundary, k, nodes, weights)
    position = np.empty(n, dtype=np.int64)
    position[order] = np.arange(n)
    alpha, r = np.empty(n), np.empty(n)
    alpha[order], r[order] = alpha_sorted, r_sorted
    fitted = np.isfinite(r).all() and (r >= 0).all() and abs(r.sum() - 1.0) <= 1e-9
    note = None if fitted else (
        f"front/back fit failed (its law sums to {r.sum():.6g}); fell back to the first draft (law q)"
    )
    first_draft = not fitted or np.minimum(p, q).sum() > np.minimum(p, r).sum()
    if first_draft:
        r = q.copy()
    accept, residual = canonical_step(p, r)
    return FrontBackRule(k, n, p, q, r, optimum, certificate, accept, residual, position, boundary, alpha, first_draft, note)


def _rule(p, q, k, optimum, certificate, token_group, group, start, end, group_density, note) -> CurtainRule:
    """The rule of a layout: its law ``r(y) = q(y) · (group weight / group length)`` and the
    single-draft step for that r."""
    counts = np.bincount(group, minlength=len(group_density))
    group_last = np.cumsum(counts)
    group_first = group_last - counts
    r = q * np.append(group_density, 0.0)[token_group]  # index -1: undraftable tokens
    accept, residual = canonical_step(p, r)
    return CurtainRule(
        k, len(p), p, q, r, optimum, certificate, accept, residual, token_group, start, end, group_first, group_last, note
    )
