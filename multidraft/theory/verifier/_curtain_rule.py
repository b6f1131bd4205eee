"""The optimal verifier for iid drafts, fitted on the draft's support.

A token the draft cannot propose (q(y) = 0) is never drafted, so a selection rule never picks
it (r(y) = 0), and it never belongs to the optimal cut T* (it adds p(y) to the cut value and
nothing to ``q(T)^K``). So the whole fit -- the min-cut scan, r* and its layout
(:func:`multidraft.theory.verifier._curtain.curtain_fit`) -- runs on the s tokens of the support, and
the rest of the vocabulary enters only through the single-draft step: there r = 0, so the
selected draft is never that token and the residual ``norm((p - r)_+)`` equals p up to its
normaliser. Reading and validating the target is O(n); everything else is O(s log s).

:class:`CurtainRule` keeps the support's arrays and offers the dense views (``selection_law``,
``accept``, ``residual``, ``token_group``, ``certificate``) on demand; :meth:`CurtainRule.sample`
runs selection, acceptance and the residual draw without building them.
"""

from __future__ import annotations

from functools import cache, cached_property
from typing import NamedTuple

import numpy as np

from multidraft.theory.verifier._curtain import curtain_fit
from multidraft.theory.verifier._curtain_choice import group_density_cdf, row_choice
from multidraft.theory.verifier._support import OutsideTarget, draw_levels, every_token, support_index

__all__ = ["CurtainRule", "Layout", "fit_curtain_rule", "fit_support_rule", "FIT_TOLERANCE"]

#: Largest accepted shortfall of the realised acceptance below P* before falling back.
FIT_TOLERANCE = 1e-6
#: Largest number of pieces for which choice probabilities use one pieces × intervals table.
_TABLE_PIECES = 256


class Layout(NamedTuple):
    """A fitted layout on the support (support indices): the cut T*, every support token's
    group, the groups' realised densities r/q, the groups' piece bounds (group g's pieces are
    ``group_bounds[g]:group_bounds[g + 1]``), the pieces, P* and the realised acceptance."""

    cut: np.ndarray
    group: np.ndarray
    group_density: np.ndarray
    group_bounds: np.ndarray
    piece_start: np.ndarray
    piece_end: np.ndarray
    optimum: float
    acceptance: float


class CurtainRule:
    """An exact selection rule by random positions (iid drafts), with its law and the
    single-draft step for that law, held on the draft's support.

    Attributes
    ----------
    k, n : int
        Number of drafts and vocabulary size.
    support : ndarray [s] int64
        The draft's support (token ids with q > 0, ascending).
    support_target, support_draft : ndarray [s]
        p and q on the support.
    outside_mass : float
        ``p(Ω ∖ support)``, the target mass no draft can propose.
    target, draft : ndarray [n] or None
        p and q (the caller's arrays, not copied) when the rule was fitted from them; the
        dense views and :meth:`sample`'s draws outside the support need the target.
    optimum : float
        P* (min-cut value of :attr:`certificate`).
    acceptance : float
        ``Σ_y min(p(y), r(y))`` of the realised law r: the chance that the selected draft is
        accepted (P* up to rounding).
    group : ndarray [s] int64
        The position set (group) of every support token.
    group_density : ndarray [groups]
        Realised ``r/q`` of every group.
    piece_start, piece_end : ndarray [m]
        The pieces [start, end) of all sets, each group's pieces contiguous.
    group_first, group_last : ndarray [groups] int64
        First and one-past-last piece index of every group.
    note : str or None
        Set when the fit failed and the rule fell back to a uniformly chosen draft (lossless,
        acceptance Σ min(p, q)); None normally.
    """

    def __init__(self, k, n, support, support_target, support_draft, layout: Layout, *, target=None, draft=None, outside_mass=None, note=None):
        self.k, self.n = int(k), int(n)
        self.support, self.support_target, self.support_draft = support, support_target, support_draft
        self.target, self.draft, self.note = target, draft, note
        if outside_mass is not None:
            self.outside_mass = float(outside_mass)  # else computed from the target on demand
        self._cut = layout.cut
        self.group, self.group_density = layout.group, layout.group_density
        self.piece_start, self.piece_end = layout.piece_start, layout.piece_end
        self.group_first, self.group_last = layout.group_bounds[:-1], layout.group_bounds[1:]
        self.optimum, self.acceptance = float(layout.optimum), float(layout.acceptance)

    # -- the law on the support ---------------------------------------------------------------

    @cached_property
    def support_law(self) -> np.ndarray:
        """r on the support: ``q(y) ·`` its group's density (one compiled pass, the numpy
        expression's bits)."""
        out = np.empty(len(self.support))
        _select().support_law(self.support_draft, self.group_density, self.group, out)
        return out

    @cached_property
    def outside(self) -> OutsideTarget:
        """p restricted to the tokens outside the support (for draws there)."""
        if self.target is None:
            raise ValueError("this rule was fitted on its support only; draws outside it need the dense target")
        return OutsideTarget(self.target, self.support)

    @cached_property
    def outside_mass(self) -> float:
        """``p(Ω ∖ support)``."""
        return self.outside.mass

    @cached_property
    def _residual_parts(self) -> tuple[np.ndarray, float, float]:
        """The residual ``(p - r)_+`` as (its support part, that part's mass, the mass outside
        the support, where it is p); p itself when the excess has no mass (then the residual
        is reached with probability zero, up to rounding)."""
        excess = np.empty(len(self.support))  # np.maximum(p - r, 0) in one compiled pass, r not formed
        _select().excess(self.support_target, self.support_draft, self.group_density, self.group, excess)
        inside = float(excess.sum())
        outside = self.outside_mass if len(self.support) < self.n else 0.0
        if inside + outside > 0:
            return excess, inside, outside
        return self.support_target, float(self.support_target.sum()), outside

    @cached_property
    def piece_cumulative(self) -> np.ndarray:
        """``[0, |piece_0|, |piece_0| + |piece_1|, ...]``: where each piece starts once the pieces
        are put end to end (a draft's uniform is mapped through it to a position)."""
        return np.concatenate([[0.0], np.cumsum(self.piece_end - self.piece_start)])

    # -- dense views ---------------------------------------------------------------------------

    @cached_property
    def certificate(self) -> np.ndarray:
        """The min-cut set T* (sorted token ids, read-only)."""
        out = np.sort(self.support[self._cut])
        out.flags.writeable = False
        return out

    def _dense(self, values: np.ndarray, fill: float = 0.0) -> np.ndarray:
        if len(self.support) == self.n:  # the identity support: a copy, not a scatter
            return values.copy()
        out = np.full(self.n, fill, dtype=values.dtype)
        out[self.support] = values
        return out

    @cached_property
    def selection_law(self) -> np.ndarray:
        """r [n], the law of the selected draft token as the rule realises it."""
        return self._dense(self.support_law)

    @cached_property
    def accept(self) -> np.ndarray:
        """``min(1, p/r)`` [n] (0 where r = 0: such tokens are never selected)."""
        return self._dense(_accept(self.support_target, self.support_law))

    def accept_at(self, tokens: np.ndarray) -> np.ndarray:
        """``min(1, p/r)`` at the token ids ``tokens`` (any shape; ValueError for a token the draft
        cannot propose): :attr:`accept`'s entries there, bit for bit, in O(|tokens|) rather
        than O(n) (r read off the tokens' groups, as :attr:`support_law` computes it)."""
        local = self._local(tokens)
        return _accept(self.support_target[local], self.support_draft[local] * self.group_density[self.group[local]])

    @cached_property
    def residual(self) -> np.ndarray:
        """``norm((p - r)_+)`` [n] (p itself when that mass is zero)."""
        weights, inside, outside = self._residual_parts
        if len(self.support) == self.n:
            return weights / (inside + outside)
        out = self.target / (inside + outside)
        out[self.support] = weights / (inside + outside)
        return out

    def residual_at(self, tokens: np.ndarray) -> np.ndarray:
        """:attr:`residual` at the token ids ``tokens`` (1-D), bit for bit, in O(|tokens| log s)
        once the support's excess is known (:attr:`_residual_parts`, O(s)): no row of n."""
        weights, inside, outside = self._residual_parts
        tokens = np.asarray(tokens, dtype=np.int64)
        if len(self.support) == self.n:
            return weights[tokens] / (inside + outside)
        out = self.target[tokens] / (inside + outside)
        local = np.minimum(np.searchsorted(self.support, tokens), len(self.support) - 1)
        held = self.support[local] == tokens
        out[held] = weights[local[held]] / (inside + outside)
        return out

    @cached_property
    def token_group(self) -> np.ndarray:
        """The group of every token [n]; -1 for tokens no draft can hold."""
        return self._dense(self.group, -1)

    # -- selection -----------------------------------------------------------------------------

    def _local(self, tokens: np.ndarray) -> np.ndarray:
        """Support indices of token ids (ValueError for a token the draft cannot propose)."""
        return support_index(self.support, self.n, tokens)

    def positions(self, tuples: np.ndarray, uniforms: np.ndarray) -> np.ndarray:
        """The position of every draft of ``tuples [N, K]`` given ``uniforms`` of the same shape
        in [0, 1): the uniform's quantile of the draft token's set (one binary search)."""
        return self._positions(self._local(tuples), uniforms)

    def _positions(self, local: np.ndarray, uniforms: np.ndarray) -> np.ndarray:
        """:meth:`positions` of drafts given by their support indices (the compiled formula of
        :mod:`~multidraft.theory.verifier._curtain_select`)."""
        out = np.empty(np.shape(local))
        _select().positions(
            self.group[local].ravel(), np.ascontiguousarray(uniforms, dtype=np.float64).ravel(), *self._layout_arrays, out.reshape(-1)
        )  # fmt: skip
        return out

    @property
    def _layout_arrays(self) -> tuple[np.ndarray, ...]:
        """``(group_first, group_last, piece_cumulative, piece_start, piece_end)``, what a
        position needs besides the draft's group and uniform."""
        return self.group_first, self.group_last, self.piece_cumulative, self.piece_start, self.piece_end

    def choose(self, tuples: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """The selected draft position (column) for every row of ``tuples [N, K]``: the draft
        holding the smallest of independent uniform positions on the tokens' sets."""
        return np.argmin(self.positions(tuples, rng.random(np.shape(tuples))), axis=-1)

    def run(self, tuples: np.ndarray, uniforms: np.ndarray) -> np.ndarray:
        """The verifier's output for every row of ``tuples [N, K]`` given ``uniforms [N, K + 2]``
        in [0, 1): K positions select a draft Z (:meth:`positions`), the next uniform accepts
        it iff ``u < p(Z)/r(Z)``, the last picks the residual ``norm((p - r)_+)`` by inverse
        CDF over the support's excess and, as one block, the target mass outside the support.
        Returns token ids, and -1 where the residual draw falls outside the support: the
        output there is a draw from p restricted to ``Ω ∖ support``, which the caller makes
        (only it holds that part of the target)."""
        tuples = np.asarray(tuples, dtype=np.int64)
        column, rejected = np.empty(len(tuples), dtype=np.int64), np.empty(len(tuples), dtype=np.bool_)
        count = _select().select_rows(
            self._local(tuples), np.ascontiguousarray(uniforms, dtype=np.float64), self.group, self.group_density,
            self.support_draft, self.support_target, *self._layout_arrays, column, rejected,
        )  # fmt: skip
        tokens = tuples[np.arange(len(tuples)), column]
        if count:
            rejected = np.flatnonzero(rejected)
            weights, inside, outside = self._residual_parts
            level = uniforms[rejected, self.k + 1] * (inside + outside)
            within = level < inside
            if within.any():
                tokens[rejected[within]] = self.support[draw_levels(weights, level[within])]
            tokens[rejected[~within]] = -1
        return tokens

    def sample(self, tuples: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """The verifier's output token for every row of ``tuples [N, K]`` -- exactly p in law:
        :meth:`run` with fresh uniforms, then draws from p outside the support where asked
        (blocked inverse CDF over the target: the only O(n) step, and only on such rows)."""
        tokens = self.run(tuples, rng.random((len(tuples), self.k + 2)))
        outside = np.flatnonzero(tokens < 0)
        if len(outside):
            tokens[outside] = self.outside.draw(rng.random(len(outside)))
        return tokens

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
        column, as ``argmin`` in :meth:`choose` does.

        The integrand involves only the drafted tokens' sets, so a rule with more than
        ``_TABLE_PIECES`` pieces (a real vocabulary: tens of thousands, whose pieces × intervals
        table would take gigabytes) works row by row on the pieces of the row's groups alone (at
        most K groups), in one compiled call per row
        (:func:`~multidraft.theory.verifier._curtain_choice.row_choice`), or, where one of them
        is a point, on the rule's restriction to the row's tokens (:meth:`restricted`): cost
        O(K · pieces of those groups) per row. A small rule (enumeration at small n) integrates
        all rows at once, O(m · K · pieces).
        """
        tuples = np.asarray(tuples, dtype=np.int64)
        if len(self.piece_start) <= _TABLE_PIECES:
            return self._choice_table(tuples)
        rows = tuples.reshape(-1, self.k)
        groups = self.group[self._local(rows)]
        nodes, weights = _gauss_legendre(self.k // 2 + 2)
        out = np.empty(rows.shape)
        for index, row in enumerate(rows):
            row_out = row_choice(groups[index], self.group_first, self.group_last, self.piece_start, self.piece_end, nodes, weights)
            out[index] = self.restricted(row)._choice_table(row[None])[0] if row_out is None else row_out
        return out.reshape(tuples.shape)

    def restricted(self, tokens: np.ndarray) -> CurtainRule:
        """This rule on the support ``tokens`` alone (every other token undraftable): the same
        position sets, hence the same :meth:`choice_probabilities` for every tuple over
        ``tokens``. For those probabilities only: its cut and outside mass are not the
        rule's (ValueError for a token the draft cannot propose)."""
        tokens = np.unique(np.asarray(tokens, dtype=np.int64))
        local = self._local(tokens)
        groups = self.group[local]
        kept = np.unique(groups)
        first, last = self.group_first[kept], self.group_last[kept]
        pieces = np.concatenate([np.arange(a, b) for a, b in zip(first, last)])
        layout = Layout(
            cut=np.zeros(0, dtype=np.int64),
            group=np.searchsorted(kept, groups),
            group_density=self.group_density[kept],
            group_bounds=np.concatenate([[0], np.cumsum(last - first)]),
            piece_start=self.piece_start[pieces],
            piece_end=self.piece_end[pieces],
            optimum=self.optimum,
            acceptance=self.acceptance,
        )
        return CurtainRule(self.k, self.n, tokens, self.support_target[local], self.support_draft[local], layout, outside_mass=0.0)

    def _choice_table(self, tuples: np.ndarray) -> np.ndarray:
        """:meth:`choice_probabilities` over the intervals between all piece ends at once."""
        edges = np.unique(np.concatenate([[0.0, 1.0], self.piece_start, self.piece_end]))
        nodes, weights = _gauss_legendre(self.k // 2 + 2)
        left, width = edges[:-1], np.diff(edges)
        offset = 0.5 * width[:, None] * (nodes + 1.0)  # [intervals, nodes per interval]
        dt = (0.5 * width[:, None] * weights).ravel()
        groups = len(self.group_first)
        owner = np.repeat(np.arange(groups), self.group_last - self.group_first)
        size = np.bincount(owner, self.piece_end - self.piece_start, minlength=groups)
        point = size <= 0
        location = self.piece_start[self.group_last - 1]  # a point group's position
        # The edges hold every piece end, so each interval lies inside a piece or outside it.
        density, cdf = group_density_cdf(left, offset, self.piece_start, self.piece_end, owner, np.where(point, 1.0, size))
        # A point group has no density, and its drafts lie below every node right of the point.
        density[point] = 0.0
        cdf[point] = np.repeat(left[None, :] >= location[point, None], len(nodes), axis=1)
        group = self.group[self._local(tuples)]  # [m, K]
        g, survive = density[group], 1.0 - cdf[group]  # [m, K, nodes]
        out = np.empty(np.shape(tuples))
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


@cache
def _gauss_legendre(count: int) -> tuple[np.ndarray, np.ndarray]:
    """``numpy.polynomial.legendre.leggauss(count)`` (nodes, weights), computed once per count
    (an eigenvalue problem: a fifth of a one-tuple :meth:`CurtainRule.choice_probabilities`)."""
    nodes, weights = np.polynomial.legendre.leggauss(count)
    nodes.flags.writeable = weights.flags.writeable = False
    return nodes, weights


def _accept(target: np.ndarray, law: np.ndarray) -> np.ndarray:
    """``min(1, p/r)`` elementwise, 0 where r = 0."""
    ratio = np.zeros(np.shape(law))
    np.divide(target, law, out=ratio, where=law > 0)
    return np.minimum(ratio, 1.0)


def _select():
    """The compiled selection (:mod:`multidraft.theory.verifier._curtain_select`), imported on
    first use so that importing the theory does not import numba."""
    from multidraft.theory.verifier import _curtain_select

    return _curtain_select


def fit_curtain_rule(p: np.ndarray, q: np.ndarray, k: int, support: np.ndarray | None = None) -> CurtainRule:
    """The optimal iid verifier's rule for a validated target p and draft q (both [n]): the
    support of q (``support``, the ascending ids with q > 0, when the caller has it -- an
    ``IID`` law's :meth:`~multidraft.theory.laws.IID.support_tokens` -- else found here, O(n)),
    then :func:`fit_support_rule` on it."""
    n = len(p)
    if support is None:
        support = np.flatnonzero(q > 0)  # ~20 µs at n = 131072 (np.flatnonzero(q) on floats: ~200 µs)
    if len(support) == n:
        return fit_support_rule(p, q, every_token(n), n, k, target=p, draft=q, outside_mass=0.0)
    if len(support) and support[-1] == len(support) - 1:  # the first s tokens: views, not gathers
        return fit_support_rule(p[: len(support)], q[: len(support)], support, n, k, target=p, draft=q)
    return fit_support_rule(p[support], q[support], support, n, k, target=p, draft=q)


def fit_support_rule(ps, qs, support, n, k, *, target=None, draft=None, outside_mass=None) -> CurtainRule:
    """The optimal iid verifier's rule from the draft's support alone: ``ps``, ``qs`` (p and q on
    the token ids ``support``, all q > 0), the vocabulary size n and, when known, the dense
    target and draft (for the dense views) and ``outside_mass`` = p(Ω ∖ support).

    Runs :func:`~multidraft.theory.verifier._curtain.curtain_fit` (one sort of the support by p/q, then
    the compiled fit): O(s log s). Falls back to one shared
    position set (a uniformly chosen draft, law q: lossless, acceptance Σ min(p, q)) if the
    realised law is not finite or accepts more than ``FIT_TOLERANCE`` less than P* (never
    seen; a guard against rounding gone wrong).
    """
    fit = curtain_fit(ps, qs, k)
    dense = {"target": target, "draft": draft, "outside_mass": outside_mass}
    if np.isfinite(fit.density).all() and np.isfinite(fit.acceptance) and fit.acceptance >= fit.optimum - FIT_TOLERANCE:
        layout = Layout(fit.cut, fit.group, fit.density, fit.group_bounds, fit.piece_start, fit.piece_end, fit.optimum, fit.acceptance)
        return CurtainRule(k, n, support, ps, qs, layout, **dense)
    note = (
        f"optimal verifier fit failed (acceptance {fit.acceptance:.6g} vs P* {fit.optimum:.6g}); "
        "fell back to a uniformly chosen draft (law q, single-draft acceptance)"
    )
    shared = np.zeros(len(support), dtype=np.int64)
    layout = Layout(fit.cut, shared, np.ones(1), np.array([0, 1]), np.zeros(1), np.ones(1), fit.optimum, float(np.minimum(ps, qs).sum()))
    return CurtainRule(k, n, support, ps, qs, layout, **dense, note=note)
