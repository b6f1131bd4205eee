"""The verifier for drafts without replacement: the optimal law r*, the J-curtain on U, the
front/back rule on T* (U merged into one token), each with its exact law.

**Target** (docs/optimal_verifier.md §7). T* = the min-cut prefix (pruned exact scan,
:func:`~multidraft.theory.optimum._wor_race.optimal_cut`), U = Ω ∖ T*, L = q(U), g(T*) = P(set(X) ⊆ T*).
The optimal law is the clipped form r* = min(p, λq) on U (r*(U) = h(U) = 1 - g(T*)) and
max(p, μq) on T* (r*(T*) = g(T*)); Σ min(p, r*) = P*. At P* = 1 the empty cut (also a
min-cut) is taken instead whenever its rule reaches acceptance 1 (§8b; :func:`wor_selection_rule`).
U is tight, so the two sides decouple: a rule selects from U whenever a U token is drafted, and
from T* otherwise, and its acceptance is the sum of the two sides' Σ min(p, r).

**U side.** The J-curtain (§8): rebuild the iid stream of the drafts (between the j-th and the
(j+1)-th new token, Geometric repeats of the tokens already drawn), count the U-points J up to
the moment they and the distinct T*-tokens number K, give each U-point a uniform position in its
token's set of a layout of [0, 1) for the weight G(x) = E[x^J], and select the smallest. Its law
is exact (the layout tiles), and the layout is fitted to the best law of the class
(:func:`~multidraft.theory.verifier._wor_curtain.clipped_layout`), which is r* on U exactly when the
J-condition holds. Where it falls short of h(U) the front/back rule's U side is computed too
and the better is kept. Its choice law given the drafts is a closed form
(:mod:`~multidraft.theory.verifier._stream_choice`: the marks' generating function, integrated
piece by piece).

**T\\* side.** The front/back rule restricted to T* (positions by decreasing p/q, coins fitted
to p, first "front" else the last drafted), whose law depends on U only through its first
arrival, so U is merged into one token of mass L (the same law, at O(|T*|) cost). Its last
positions, when they are light pool tokens, form a *uniform tail* (winner uniform among the
drafted tail tokens; law one power series in q, :mod:`~multidraft.theory.verifier._wor_tail`); if that
side falls short, plain front/back is tried too. A side that
falls short tries other position orders: all of them up to :data:`ORDER_SEARCH` tokens, a local
search over transpositions up to :data:`LOCAL_SEARCH` (the fixed p/q order is provably not always
enough; the research note's instances).

Whatever the fit reaches, r is the rule's exact law (quadrature error ~1e-14), so the canonical
single-draft step against r is lossless. If selecting the first draft (law q) accepts more, or a
fit fails, the first draft is used.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field, replace
from typing import NamedTuple

import numpy as np

from multidraft.theory.verifier._orders import sorted_tokens
from multidraft.theory.verifier._front_back import front_back_head, front_back_nodes, front_back_pass
from multidraft.theory.verifier._curtain import _workspace
from multidraft.theory.verifier._front_back_two import PairTail, pair_pass, pair_tail_pass
from multidraft.theory.verifier._stream_choice import stream_choice_probabilities
from multidraft.theory.verifier._stream_marks import stream_marks
from multidraft.theory.verifier._wor_curtain import Layout, clipped_layout, pool_split
from multidraft.theory.verifier._wor_parts import cut_members, descending_gather, descending_index, min_sum, min_sum_at, pairwise_sum, piece_offsets, radix_order, rule_sums, scatter, side_arrays, sorted_part, sorted_side, strict_level, tail_starts, write_positions
from multidraft.theory.optimum._wor_moments import LIGHT
from multidraft.theory.optimum._wor_pairs import pair_j_law, pair_masses
from multidraft.theory.optimum._wor_race import OptimalCut, j_law, optimal_cut
from multidraft.theory.verifier._wor_tail import tail_law, tail_polynomials, tail_products, tail_rounding
from multidraft.theory.verifier._selection_rule import FrontBackRule

__all__ = ["WithoutReplacementRule", "wor_selection_rule", "optimal_wor_law"]

#: Largest part (U or T*) whose position orders are all tried when its front/back fit falls
#: short; up to LOCAL_SEARCH tokens a local search over transpositions (at most SEARCH_FITS fits).
ORDER_SEARCH, LOCAL_SEARCH, SEARCH_FITS = 5, 64, 400
#: Tokens all the fits of one search may pass (the U side's fit passes the whole vocabulary, so a
#: large vocabulary gets no search; the T* side's passes |T*| + 1).
SEARCH_TOKENS = 20_000
#: The uniform tail of the T* side (:mod:`~multidraft.theory.verifier._wor_tail`): at least MIN_TAIL
#: tokens, each with p <= TAIL_SLACK r* (room for its law's O(q t) departure from ∝ q), and a
#: rounding bound of its power sums below TAIL_TOLERANCE.
MIN_TAIL, TAIL_SLACK, TAIL_TOLERANCE = 64, 0.9, 1e-13
#: Shortfall of a side below its optimum that triggers the alternative rule on that side (above
#: the rounding of a sum over 10^5 tokens).
SIDE_TOLERANCE = 1e-10
#: The first draft (law q) replaces the fitted rule only when it accepts more by this much: where
#: both reach P* (q itself optimal) their sums differ by rounding alone, and a target moved by
#: 1e-15 chose one or the other (selective's E[τ] on a 64-node tree moved by 0.11 with it).
FIRST_DRAFT_GAIN = 1e-14
#: Plain front/back on T* replaces its uniform tail only when it accepts more by this much. The
#: two share the head's rule (its coins fitted against the same suffix, whose product differs by
#: rounding only: Σ |Δr| over the head <= 3e-16 on the static-64 nodes) and the tail's tokens are
#: pool tokens, p <= r*: plain gains at most the tail's own gap Σ_tail (p - min(p, r)), so where
#: that is below half this margin the plain pass (as long as the whole T* side) is not run.
TAIL_GAIN = 1e-14
#: The K whose T* and U sides take their laws in closed form (:mod:`~multidraft.theory.verifier._front_back_two`;
#: two drafts form a pair): the quadrature's pass and tail serve the other K, and the tests set
#: this to 0 for the quadrature's rule at K = 2, the reference of the closed form.
PAIRS = 2


@dataclass(frozen=True)
class WithoutReplacementRule(FrontBackRule):
    """The rule of the module docstring: :class:`FrontBackRule`'s fields (positions U then T*,
    coins), then the J-curtain of the U side.

    Attributes
    ----------
    u_rule : str
        ``"j-curtain"`` or ``"front-back"``: the rule on rows that draft a U token.
    j_law : ndarray [K + 1]
        P(J = j), the coefficients of G.
    layout : Layout or None
        The J-curtain's pieces in [0, 1) (U's draftable tokens; ``group`` maps tokens to it).
    group : ndarray [n] int64
        Layout group of every U token with q > 0; -1 elsewhere.
    optimal_law : ndarray [n]
        r*, the optimal law this rule aims at (Σ min(p, r*) = :attr:`optimum`).
    shortfall : tuple[float, float]
        ``(h(U) side, T* side)`` of ``optimum - acceptance`` before the first-draft comparison.
    tail : int
        First position of the T* side's uniform tail (``n``: none; always given): on a row that drafts no U
        token and no head coin says front, the winner is uniform among the drafted tail tokens
        (:mod:`~multidraft.theory._wor_tail`).
    offsets_memo : list
        The layout's piece offsets once the rule has drawn (empty before; not compared).
    """

    u_rule: str = "j-curtain"
    j_law: np.ndarray | None = None
    layout: Layout | None = None
    group: np.ndarray | None = None
    optimal_law: np.ndarray | None = None
    shortfall: tuple[float, float] = (0.0, 0.0)
    tail: int = 0
    offsets_memo: list = field(default_factory=list, repr=False, compare=False)

    def _in_u(self, tuples: np.ndarray) -> np.ndarray:
        return self.position[tuples] < self.boundary

    def choose(self, tuples: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """The selected draft (column) of every row of ``tuples [N, K]`` (distinct tokens)."""
        tuples = np.asarray(tuples, dtype=np.int64)
        chosen = super().choose(tuples, rng)
        if self.first_draft:
            return chosen
        in_tail = self.position[tuples] >= self.tail
        rows = np.flatnonzero(in_tail[np.arange(len(tuples)), chosen])  # no front: a tail token won
        if len(rows):  # uniform among the drafted tail tokens instead of the last
            keys = np.where(in_tail[rows], rng.random((len(rows), self.k)), np.inf)
            chosen[rows] = np.argmin(keys, axis=-1)
        if self.u_rule != "j-curtain":
            return chosen
        rows = np.flatnonzero(self._in_u(tuples).any(axis=-1))
        if len(rows):
            marks = self._stream_marks(tuples[rows], rng)
            winner = self._curtain_winner(marks, rng)
            chosen[rows] = np.argmax(tuples[rows] == winner[:, None], axis=-1)
        return chosen

    def _stream_marks(self, tuples: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """The tokens of the J U-points of each row (``[m, K]``, -1 padded), sampled from the
        iid stream rebuilt given the ordered drafts: after the j-th new token, each further point
        is a U-repeat with probability ``q(arrived U) / (1 - q(arrived T*))`` (T*-repeats do not
        change the count), its token ∝ q among the arrived U tokens
        (:func:`~multidraft.theory.verifier._stream_marks.stream_marks`, compiled)."""
        return stream_marks(tuples, self._in_u(tuples), self.draft[tuples], rng)

    def _piece_offsets(self) -> np.ndarray:
        """The covered length before every piece of the layout (:func:`piece_offsets`), once per
        rule rather than per draw (~10^5 pieces at n = 49152; kept in :attr:`offsets_memo`,
        read-only)."""
        if not self.offsets_memo:
            offsets = piece_offsets(self.layout.piece_start, self.layout.piece_end)
            offsets.flags.writeable = False
            self.offsets_memo.append(offsets)
        return self.offsets_memo[0]

    def _curtain_winner(self, marks: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """The token of the U-point with the smallest uniform position in its group's set."""
        layout = self.layout
        cumulative = self._piece_offsets()
        present = marks >= 0
        group = np.where(present, self.group[np.maximum(marks, 0)], 0)
        first, last = layout.group_first[group], layout.group_last[group]
        level = cumulative[first] + rng.random(marks.shape) * (cumulative[last] - cumulative[first])
        piece = np.clip(np.searchsorted(cumulative, level, side="right") - 1, first, last - 1)
        position = np.minimum(layout.piece_start[piece] + (level - cumulative[piece]), layout.piece_end[piece])
        position = np.where(present, position, np.inf)
        return marks[np.arange(len(marks)), np.argmin(position, axis=-1)]

    def choice_probabilities(self, tuples: np.ndarray) -> np.ndarray:
        """``P(draft i is selected | X = x)`` for every row of ``tuples [m, K]``, exactly: the
        J-curtain's rows by the closed form over the rebuilt stream's U-marks
        (:func:`~multidraft.theory.verifier._stream_choice.stream_choice_probabilities`, O(K³)
        per piece of the drafts' groups), the others by the front/back rule's product. Where every
        row drafts a U token (the walk's one row, often) the curtain's rows are all of ``out``:
        the front/back product and the tail's spread, which they overwrite, are not computed."""
        tuples = np.asarray(tuples, dtype=np.int64)
        curtain = not self.first_draft and self.u_rule == "j-curtain"
        if curtain:  # which drafts lie in U, found once for both uses below
            in_u = self._in_u(tuples)
            drafts_u = in_u.any(axis=-1)
            if len(tuples) and drafts_u.all():  # the closed form's fresh [m, K] array is all of out
                return stream_choice_probabilities(self.layout, self.group[tuples], self.draft[tuples], in_u)
        out = super().choice_probabilities(tuples)
        if self.first_draft:
            return out
        position = self.position[tuples]  # tail coins α = 0: only the no-front mass of T* rows is here
        in_tail = (position >= self.tail) & (position >= self.boundary).all(axis=-1, keepdims=True)
        count = in_tail.sum(axis=-1, keepdims=True)
        if count.any():
            spread = np.where(in_tail, out.sum(axis=-1, keepdims=True) - np.where(in_tail, 0.0, out).sum(axis=-1, keepdims=True), 0.0)
            out = np.where(in_tail, spread / np.maximum(count, 1), out)
        if not curtain:
            return out
        rows = np.flatnonzero(drafts_u)
        if len(rows):
            drafted = tuples[rows]
            out[rows] = stream_choice_probabilities(self.layout, self.group[drafted], self.draft[drafted], in_u[rows])
        return out


def optimal_wor_law(p: np.ndarray, q: np.ndarray, in_cut: np.ndarray, contained: float, hint: np.ndarray | None = None) -> np.ndarray:
    """r* = min(p, λq) on U with r*(U) = 1 - g(T*), max(p, μq) on T* with r*(T*) = g(T*):
    free tokens keep p, the pool shares the rest in proportion to q. ``hint``: all token ids in
    about increasing p/q (the cut's scan order), which makes each part's sort linear
    (:func:`~multidraft.theory.verifier._orders.sorted_tokens`; the same order without it)."""
    r = np.zeros(len(p))
    for part, clip, total in ((~in_cut & (q > 0), "min", 1.0 - contained), (in_cut, "max", contained)):
        tokens = np.flatnonzero(part) if hint is None else hint[part[hint]]
        if hint is None:
            tokens = tokens[np.argsort(p[tokens] / q[tokens], kind="stable")]
        else:
            tokens = sorted_tokens(tokens, p[tokens] / q[tokens])
        r[tokens] = _part_law(p[tokens], q[tokens], total, clip)
    return r


def _part_law(values, masses, total, clip, ratios=None):
    """r* on one part, given p and q of its tokens by increasing p/q (q > 0): clipped at its
    water level (:func:`~multidraft.theory.verifier._wor_curtain.pool_split`; ``ratios``:
    ``values / masses`` where the caller has it)."""
    law = values.copy()
    if len(values) == 0:
        return law
    cut, pool_mass, pool_weight = pool_split(values, masses, total, clip, ratios)
    pool = slice(cut, None) if clip == "min" else slice(None, cut)
    if len(law[pool]):
        law[pool] = masses[pool] * (pool_weight / pool_mass)
    return law


class _Part(NamedTuple):
    """One part by increasing p/q (the order r* is fitted in): its tokens, their p, q and r*,
    and ``index``, the order by decreasing p/q (ties by id: the positions' order) into them."""

    tokens: np.ndarray
    values: np.ndarray
    masses: np.ndarray
    law: np.ndarray
    index: np.ndarray


def _u_arrays(p, q, cut, r_star, scratch):
    """U's draftable tokens as a :class:`_Part` (from the scan order, which makes its sort
    linear; r* written into ``r_star`` at them), U's tokens by decreasing p/q (its q = 0 tokens
    first, by id, with any q > 0 token whose p/q overflowed), its drafted tokens in that order
    with their p and q (fresh arrays: the caller divides q in place), L = q(U) (as
    ``q[u_tokens].sum()``) and U's target ``Σ min(p, r*)`` over the tokens (as
    ``np.minimum(p[u_tokens], r_star[u_tokens]).sum()``, r* = 0 at the q = 0 tokens). The
    drafted tokens, their p, q, minimum (into ``scratch``) and r* are read off the part by its
    index in one pass (:func:`~multidraft.theory.verifier._wor_parts.descending_gather`: almost
    in order, no random reads over the vocabulary) after the few q = 0 tokens, the same values
    in the same order, and both sums are numpy's of the contiguous arrays (every P* = 1 node;
    the selective verifier's vocabulary holds one q = 0 token more)."""
    rest = cut.order[cut.size :]
    p_u, q_u = _along_scan(p, q, cut, cut.size, len(cut.order))
    drafted = q_u > 0
    count = int(np.count_nonzero(drafted))
    leading = bool(drafted[:count].all())  # the scan puts q = 0 last: U's arrays are slices of the scan's, no copies
    u_part = _part(p, q, *((rest[:count], p_u[:count], q_u[:count]) if leading else (rest[drafted], p_u[drafted], q_u[drafted])), "min", 1.0 - cut.contained)
    size = len(u_part.tokens)
    if size and np.isinf(p[u_part.tokens[u_part.index[0]]] / q[u_part.tokens[u_part.index[0]]]):  # a ratio overflowed
        r_star[u_part.tokens] = u_part.law
        ratio = np.full(len(rest), np.inf)
        np.divide(p[rest], q[rest], out=ratio, where=drafted)
        u_tokens = sorted_tokens(rest[::-1], -ratio[::-1])
        q_u = q[u_tokens]
        drafted_u = u_tokens[q_u > 0]
        return u_part, u_tokens, drafted_u, p[drafted_u], q_u[q_u > 0], pairwise_sum(q_u), min_sum_at(p, r_star, u_tokens)
    zeros = np.sort(rest[count:] if leading else rest[~drafted])
    lead = len(zeros)
    u_tokens, q_u, p_drafted, smaller = np.empty(lead + size, dtype=np.int64), np.empty(lead + size), np.empty(size), scratch[: lead + size]
    u_tokens[:lead], q_u[:lead] = zeros, q[zeros]
    np.minimum(p[zeros], r_star[zeros], out=smaller[:lead])
    descending_gather(*u_part, r_star, (u_tokens[lead:], p_drafted, q_u[lead:], smaller[lead:]))
    return u_part, u_tokens, u_tokens[lead:], p_drafted, q_u[lead:], float(q_u.sum()), float(smaller.sum())


def _along_scan(p, q, cut, start, stop):
    """p and q at the scan order's positions ``[start, stop)``: the cut's own sorted arrays where
    it kept them, else gathered (that slice only)."""
    if cut.p_sorted is None:
        tokens = cut.order[start:stop]
        return p[tokens], q[tokens]
    return cut.p_sorted[start:stop], cut.q_sorted[start:stop]


def _part(p, q, hint, p_hint, q_hint, clip, total):
    """The :class:`_Part` of the tokens ``hint`` (p, q along it), r* clipped by ``clip`` to ``total``."""
    tokens, values, masses, key = sorted_part(hint, p, q, (p_hint, q_hint))
    return _Part(tokens, values, masses, _part_law(values, masses, total, clip, key), descending_index(key))


def _t_arrays(p, q, cut, outside, r_star, work):
    """T*'s tokens by position (decreasing p/q, ties by id), ``(merged_p, merged_q, r*, lead)``
    of :func:`~multidraft.theory.verifier._wor_parts.side_arrays` (in ``work``; r* written into
    ``r_star``), T*'s target ``Σ min(p, r*)`` (:func:`~multidraft.theory.verifier._wor_parts.min_sum`'s
    bits) and ``pair_masses(merged_q)`` (None where not taken on the way): from the scan's arrays
    as they are where p/q increase strictly along them
    (:func:`~multidraft.theory.verifier._wor_parts.strict_level`,
    :func:`~multidraft.theory.verifier._wor_parts.sorted_side`, which sums the masses too), else
    by the part's sort."""
    size = cut.size
    values, masses = _along_scan(p, q, cut, 0, size)
    level = strict_level(values, masses, cut.contained, work) if size else None
    if level is not None:
        return sorted_side(cut.order[:size], values, masses, cut.contained, level, outside, r_star, work)
    t_part = _part(p, q, cut.order[:size], values, masses, "max", cut.contained)
    r_star[t_part.tokens] = t_part.law
    merged_p, merged_q, r_star_t, lead = side_arrays(t_part.index, t_part.values, t_part.masses, t_part.law, outside, (work.ps, work.qs, work.ds))
    return t_part.tokens[t_part.index], merged_p, merged_q, r_star_t, lead, min_sum(merged_p[lead:], r_star_t, work.scratch), None


def _t_side(merged_p, merged_q, lead, k, r_star_t=None, out=None, into=None, masses=None):
    """Front/back on T* with p, q given in its position order, led by U merged into one token
    of mass L when ``lead`` (``merged_p``, ``merged_q``: :func:`~multidraft.theory.verifier._wor_parts.side_arrays`):
    ``(α, r)`` of the T* tokens. Given ``r_star_t`` (r* in that order), the
    longest suffix of pool tokens (p <= :data:`TAIL_SLACK` r*) that are light at every node, if it
    has :data:`MIN_TAIL` tokens or more, becomes the uniform tail
    (:mod:`~multidraft.theory._wor_tail`; its coins α = 0); returns ``(α, r, tail)``, ``tail`` =
    the tail's first position (``len(q_t)``: none). K = 2: the same rule's law in closed form
    (:func:`~multidraft.theory.verifier._front_back_two.pair_tail_pass`, its tail found in the
    pass's backward sweep and exact whatever the rounding bound of the power series says;
    ``out``: two arrays it writes α and r into). ``into``: ``(tokens, α_full, r_full, smaller)``
    (T*'s tokens by position): α and r also written at the tokens and ``min(p, r)`` into
    ``smaller`` (inside the K = 2 pass; afterwards otherwise). ``masses``: ``pair_masses(merged_q)``
    where the caller has it (:func:`_t_arrays`)."""
    p_t, q_t = merged_p[lead:], merged_q[lead:]
    if k == PAIRS:  # finite sums, no nodes (_front_back_two); the tail's lightness at the same last node
        masses = pair_masses(merged_q) if masses is None else masses
        if r_star_t is None:
            alpha, r = pair_pass(merged_p, merged_q, lead, masses=masses, out=out)
            alpha, r, start = alpha[lead:], r[lead:], len(q_t)
        else:
            alpha, r, start = pair_tail_pass(merged_p, merged_q, lead, PairTail(r_star_t, LIGHT, TAIL_SLACK, MIN_TAIL), masses=masses, out=out, into=into)
            return alpha[lead:], r[lead:], start
    else:
        alpha, r, start = _quadrature_side(merged_p, merged_q, lead, k, r_star_t)
    if into is not None:
        scatter(into[0], alpha, r, into[1], into[2])
        np.minimum(p_t, r, out=into[3][: len(r)])
    return alpha, r, start


def _quadrature_side(merged_p, merged_q, lead, k, r_star_t):
    """:func:`_t_side` for K != 2 (without ``into``): the front/back pass over the quadrature's
    nodes, with its uniform tail's law as a power series where its rounding bound allows."""
    p_t, q_t = merged_p[lead:], merged_q[lead:]
    nodes, weights = front_back_nodes(merged_q, k)
    start = len(q_t) if r_star_t is None else _tail_start(p_t, q_t, r_star_t, (float(nodes[-1]),))[0]
    if start < len(q_t):
        tail_q = q_t[start:]
        products = tail_products(tail_q, nodes, k)
        head = lead + start
        alpha, r, pre_phi, pre_psi = front_back_head(
            merged_p[:head], merged_q[:head], lead, k, nodes, weights, None, (products.phi, products.psi, float(tail_q.sum()))
        )
        if tail_rounding(products, nodes, weights, pre_phi, pre_psi, k) <= TAIL_TOLERANCE:
            polynomials = tail_polynomials(pre_phi, pre_psi, products.phi, products.psi, k)
            alpha_t, r_t = np.zeros(len(q_t)), np.empty(len(q_t))
            alpha_t[:start], r_t[:start] = alpha[lead:], r[lead:]
            r_t[start:] = tail_law(tail_q, nodes, weights, polynomials, k)
            return alpha_t, r_t, start
    alpha, r = front_back_pass(merged_p, merged_q, lead, k, nodes, weights)
    return alpha[lead:], r[lead:], len(q_t)


def _merged(p_t, q_t, outside):
    """``(merged_p, merged_q, lead)`` of :func:`_t_side` for T* masses in a given order."""
    if outside > 0:
        return np.concatenate([[0.0], p_t]), np.concatenate([[outside], q_t]), 1
    return p_t, q_t, 0


def _plain_may_gain(p_t, r_t, start, size):
    """Whether plain front/back (or another order) may beat the T* side's rule ``r_t`` with its
    uniform tail from ``start`` by :data:`TAIL_GAIN`: always without a tail or where the order
    search runs (``size`` <= :data:`LOCAL_SEARCH`), else only if the tail's own gap
    ``Σ_tail (p - min(p, r))`` exceeds half the margin (the head being the same rule)."""
    if start == size or size <= LOCAL_SEARCH:
        return True
    return pairwise_sum(p_t[start:]) - min_sum(p_t[start:], r_t[start:]) > 0.5 * TAIL_GAIN


def _tail_start(p, q, r_star, nodes):
    """At each of the increasing ``nodes`` (the last node t_max, or two bounds on it): the first
    index of the longest suffix of light pool tokens (module constants), or ``len(p)``."""
    return tuple(start if len(p) - start >= MIN_TAIL else len(p) for start in tail_starts(p, q, r_star, nodes, LIGHT, TAIL_SLACK))


def _u_side(p, q, k, u_order, t_order):
    """Front/back on U in the position order ``u_order`` (the whole vocabulary in one pass: U's
    laws need the T* race token by token): ``(α, r)`` of the U tokens."""
    order = np.concatenate([u_order, t_order])
    if k == PAIRS:
        alpha, r = pair_pass(p[order], q[order], len(u_order), upto=len(u_order))
        return alpha[: len(u_order)], r[: len(u_order)]
    nodes, weights = front_back_nodes(q, k)
    alpha, r = front_back_pass(p[order], q[order], len(u_order), k, nodes, weights, upto=len(u_order))
    return alpha[: len(u_order)], r[: len(u_order)]


def _order_search(p, tokens, current, short, target, fit, pass_size):
    """Other position orders for a side that falls short: every order of a side of at most
    :data:`ORDER_SEARCH` tokens, else (up to :data:`LOCAL_SEARCH` tokens) a first-improvement
    local search over transpositions; at most :data:`SEARCH_FITS` fits and
    :data:`SEARCH_TOKENS` tokens passed in all (a fit passes ``pass_size`` tokens), each fit one
    pass with its exact law. Returns the best ``(order, α, r, short)``; ``current`` = (α, r) of
    ``tokens``."""
    best = [tokens, *current, short]
    budget = min(SEARCH_FITS, SEARCH_TOKENS // max(pass_size, 1))
    if short <= SIDE_TOLERANCE or len(tokens) > LOCAL_SEARCH or budget < 2:
        return tuple(best)

    def consider(order) -> bool:
        alpha, r = fit(order)
        gap = target - float(np.minimum(p[order], r).sum()) if np.isfinite(r).all() else np.inf
        if gap < best[3] - 1e-15:
            best[:] = [order, alpha, r, gap]
            return True
        return False

    fits = 0
    if len(tokens) <= ORDER_SEARCH and math.factorial(len(tokens)) <= budget:
        for permutation in itertools.permutations(range(len(tokens))):
            consider(tokens[list(permutation)])
            if best[3] <= SIDE_TOLERANCE:
                break
        return tuple(best)
    improved = True
    while improved and fits < budget and best[3] > SIDE_TOLERANCE:
        improved = False
        for i, j in itertools.combinations(range(len(tokens)), 2):
            order = best[0].copy()
            order[i], order[j] = order[j], order[i]
            fits += 1
            if consider(order):
                improved = True
                break
            if fits >= budget:
                break
    return tuple(best)


def wor_selection_rule(p: np.ndarray, q: np.ndarray, k: int) -> WithoutReplacementRule:
    """The rule of the module docstring for target p (a validated distribution) and K drafts
    without replacement from q.

    **P\\* = 1** (docs/optimal_verifier.md §8b): the empty cut, value p(∅) + 1 - g(∅) = 1, is
    then a min-cut as well as the one the scan found (often Ω, by the rounding of Σ p), and with
    T* = ∅ the rule is the J-curtain with J ≡ K, the iid curtain of the whole vocabulary (O(n)
    after a sort, no front/back pass). When that rule reaches acceptance 1 - :data:`SIDE_TOLERANCE`
    no rule can do better (P* <= 1), so it is taken; otherwise the scan's cut is fitted as
    before."""
    cut = optimal_cut(p, q, k, sort=radix_order)
    if cut.size and cut.value >= 1.0 - SIDE_TOLERANCE:
        empty = _rule_for_cut(p, q, k, replace(cut, size=0, contained=0.0))
        if not empty.first_draft and empty.acceptance >= 1.0 - SIDE_TOLERANCE:
            return empty
    return _rule_for_cut(p, q, k, cut)


def _rule_for_cut(p: np.ndarray, q: np.ndarray, k: int, cut: OptimalCut) -> WithoutReplacementRule:
    """:func:`wor_selection_rule` for a given min-cut prefix ``cut`` of the scan order: the T*
    side's gathered arrays and its pass's α and r (~|T*| each, the whole vocabulary at a P* < 1
    node) in a reused workspace (:func:`~multidraft.theory.verifier._curtain._workspace`), not
    fresh arrays whose pages fault on first touch (~0.13 ms each at n = 49152)."""
    with _workspace(len(p)) as work:
        return _fit_cut(p, q, k, cut, work)


def _fit_cut(p: np.ndarray, q: np.ndarray, k: int, cut: OptimalCut, work) -> WithoutReplacementRule:
    """:func:`_rule_for_cut` with its workspace ``work``."""
    n = len(p)
    # r* part by part by increasing p/q; the positions U then T*, each by decreasing p/q (ties by id)
    r_star = np.zeros(n)
    u_part, u_tokens, drafted_u, p_drafted, q_drafted, outside, u_target = _u_arrays(p, q, cut, r_star, work.scratch)
    boundary = n - cut.size
    if len(u_tokens) == n:  # U = Ω (the empty cut): zeros throughout, not scattered over a permutation of n
        alpha, r = np.zeros(n), np.zeros(n)
    else:  # every entry written: U's zeros here, T*'s by the T* side's pass (or its scatter)
        alpha, r = np.empty(n), np.empty(n)
        alpha[u_tokens] = 0.0
        r[u_tokens] = 0.0
    note = None

    # T* side: front/back with U merged into one token of mass L (another order where short).
    # p, q, r* gathered in its position order once (q_t again only if the order changes).
    t_tokens, merged_p, merged_q, r_star_t, lead, t_target, t_masses = _t_arrays(p, q, cut, outside, r_star, work)
    p_t, q_t = merged_p[lead:], merged_q[lead:]
    t_short = 0.0
    tail = n
    if len(t_tokens):
        # α and r written at the tokens and min(p, r) into the scratch by the side's pass itself
        a_t, r_t, start = _t_side(merged_p, merged_q, lead, k, r_star_t, (work.hull_start, work.hull_end), (t_tokens, alpha, r, work.scratch), t_masses)
        t_short = t_target - float(work.scratch[: len(t_tokens)].sum())
        if t_short > SIDE_TOLERANCE and _plain_may_gain(p_t, r_t, start, len(t_tokens)):
            # front/back throughout (without the tail), other orders too
            a_plain, r_plain = (a_t, r_t) if start == len(t_tokens) else _t_side(merged_p, merged_q, lead, k)[:2]
            plain_short = t_target - float(np.minimum(p_t, r_plain).sum())
            order_t, a_plain, r_plain, plain_short = _order_search(
                p, t_tokens, (a_plain, r_plain), plain_short, t_target,
                lambda o: _t_side(*_merged(p[o], q[o], outside), k)[:2], len(t_tokens) + 1,
            )  # fmt: skip
            if plain_short < t_short - TAIL_GAIN or start == len(t_tokens):
                t_tokens, a_t, r_t, t_short, start = order_t, a_plain, r_plain, plain_short, len(t_tokens)
                q_t = q[t_tokens]
                scatter(t_tokens, a_t, r_t, alpha, r)
        if start < len(t_tokens):
            tail = boundary + start

    # U side: the J-curtain at its best; the front/back U side (other orders too, for a small U)
    # where that falls short.
    u_rule, coefficients, layout, group = "j-curtain", None, None, np.full(n, -1, dtype=np.int64)
    u_short = 0.0
    if len(drafted_u):
        # K = 2: g(T*) is the cut's own (pair_cut's prefix sums, the same g to rounding): no pass over T*
        coefficients = pair_j_law(q_t, outside, cut.contained) if k == PAIRS else j_law(q_t, outside, k)
        shares = np.divide(q_drafted, outside, out=q_drafted)  # in place: _u_arrays' q is a fresh copy, not read again
        layout, accepted = clipped_layout(p_drafted, shares, coefficients, np.arange(len(drafted_u))[::-1])
        scatter(drafted_u, layout.token_group, layout.law, group, r)
        u_short = u_target - accepted
        if u_short > SIDE_TOLERANCE:
            a_u, r_u = _u_side(p, q, k, u_tokens, t_tokens)
            fb_short = u_target - float(np.minimum(p[u_tokens], r_u).sum())
            order_u, a_u, r_u, fb_short = _order_search(
                p, u_tokens, (a_u, r_u), fb_short, u_target, lambda o: _u_side(p, q, k, o, t_tokens), n
            )
            if fb_short < u_short and np.isfinite(r_u).all():
                u_rule, u_short, u_tokens = "front-back", fb_short, order_u
                alpha[u_tokens], r[u_tokens] = a_u, r_u
    position = write_positions(u_tokens, t_tokens, n)
    certificate = cut_members(position, boundary)  # T* = the cut's prefix, last in the positions
    certificate.flags.writeable = False
    # the law's checks, the first draft's acceptance and the step's normaliser Σ (p - r)_+ (as
    # canonical_step sums it) in one pass; the step itself only when asked for (FrontBackRule.step)
    total, negative, first_sum, fitted_sum, excess = rule_sums(p, q, r, work)
    fitted = np.isfinite(total) and not negative and abs(total - 1.0) <= 1e-9
    if not fitted:
        note = f"without-replacement fit failed (its law sums to {total:.6g}); fell back to the first draft (law q)"
    first_draft = not fitted or first_sum > fitted_sum + FIRST_DRAFT_GAIN
    if first_draft:
        r = q.copy()
        excess = rule_sums(p, q, r, work)[4]
    return WithoutReplacementRule(
        k, n, p, q, r, cut.value, certificate, position, boundary, alpha, bool(first_draft), excess, note,
        u_rule, coefficients, layout, group, r_star, (u_short, t_short), tail,
    )  # fmt: skip
