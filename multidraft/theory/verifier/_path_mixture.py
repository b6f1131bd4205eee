"""The random path: a mixture of path curtains for two independent, non-identical drafts.

Drafts ``X_1 ~ q_1``, ``X_2 ~ q_2``; ``h(A) = 1 - (1 - q_1(A))(1 - q_2(A))``; T* the min-cut
certificate of ``P* = 1 + min_T [p(T) - q_1(T) q_2(T)]``, U = Ω ∖ T*.

**The rule.** Components ``k = 1..M`` are path curtains
(:mod:`multidraft.theory.verifier._independent_rule`), every one with a path through
``(q_1(U), q_2(U))`` and U's pieces in front, so a U draft always beats a T* draft. Before looking
at the drafts, draw ``k_U ~ θ^U`` and ``k_T ~ θ^T`` (fixed probabilities); if both drafts lie in
T* the curtain of ``k_T`` decides, otherwise that of ``k_U``. The randomness is independent of
the drafts, so the law is the mixture of the components' exact laws, part by part:

    r = Σ_k θ^U_k r_k  on U,      r = Σ_k θ^T_k r_k  on T*,

and the single-draft step against this r makes the output exactly p (lossless for any θ).

**Reach (docs/nonidentical_verifier.md §4).** A priority order σ (U first) is a single path —
the one through the prefix masses ``(q_1(S_k), q_2(S_k))`` with each token one piece in its own
segment — and its law is the greedy vertex ``h(S_k) - h(S_{k-1})`` of B(h) (Edmonds). The
vertices span B(h), which holds an optimal law r* (max-flow/min-cut), so some mixture of at most
``|U| + 1`` and ``|T*| + 1`` paths reaches P* exactly.

**The fit (column generation).** Columns start from the single-path fits; the master LP (HiGHS)
finds the best mixture per part, ``min Σ_{y∈U} (Σ θ_k r_k(y) - p(y))_+`` on U and
``min Σ_{y∈T*} (p(y) - Σ θ_k r_k(y))_+`` on T*, with rows only for tokens where some column
deviates from p; its row duals v price new columns: path curtains through the corner of the
priced tokens, fitted against p pushed towards the mixture's deficits (fast in practice), and,
when a round closes less than :data:`STALL` of the gap, the exact pricing ``min_{r ∈ B(h_U)} v·r``
(increasing v) and ``max_{r ∈ B(h_T)} v·r`` (decreasing v) by the greedy order (ties: the
larger remaining deficit first). When no column improves, the mixture reaches P* (LP duality
over the vertices of B(h)). The acceptance reported is ``Σ min(p, r)`` of the realised mixture.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from multidraft.theory.verifier._independent_rule import (
    IndependentRule,
    Path,
    _fit,
    fit_path_curtain,
    fit_priority_order,
    pair_choice,
    cut_parts,
    pair_with_cut,
    path_rule,
    straight_forecast,
)
from multidraft.theory.verifier._ordered_split import ordered_split
from multidraft.theory.verifier._orientation import ascent_staircase
from multidraft.theory.verifier._staircase import STEPS, staircase_rule

__all__ = ["PathMixtureRule", "fit_independent_rule", "fit_path_mixture", "vertex_law", "SMALL", "ROUNDS", "SPLIT_SIZE"]

#: Vocabulary size up to which the column generation runs by default when one path falls short;
#: above it :func:`fit_independent_rule` tries the ascent before the single path where the
#: single path's first fit is forecast to fall short (its fits that fall short cost 0.1-0.8 s at
#: n = 49152: up to ten fits, docs/nonidentical_verifier.md §4e).
SMALL = 512
#: The single path's first fit is forecast to fall short (:func:`straight_forecast`) when its
#: forecast is this far below P*.
FORECAST = 1e-9
#: Vocabulary size up to which the ordered split runs by default when the staircase falls short
#: (one sparse LP of about 3n variables per round; a whole forced fit took 11-14 s CPU at n = 16384
#: and 4-225 s at 49152, docs/nonidentical_verifier.md §4d).
SPLIT_SIZE = 8192
#: Most column-generation rounds by default (each adds at most one column).
ROUNDS = 200
#: Pushes of the priced curtains' targets towards the mixture's deficits (:func:`_curtain_columns`).
PUSH = (1.0, 20.0)
#: A round that closes less than this share of the gap also adds the greedy vertex (the pricing
#: that makes the column generation exact).
STALL = 0.1
#: The mixture stops once ``Σ min(p, r)`` is within this of P*.
TOLERANCE = 1e-12


def vertex_law(order: np.ndarray, draft1: np.ndarray, draft2: np.ndarray, start: tuple[float, float] = (0.0, 0.0)) -> np.ndarray:
    """The greedy vertex of B(h) for a priority order on one part: ``r(σ_k) = h(S_k) - h(S_{k-1})``
    with ``h = a + b - ab`` at the masses ``(a, b)`` counted from ``start`` (the masses of the
    tokens before the part); zero off the order (Edmonds 1970, the greedy algorithm on a
    polymatroid).

    >>> import numpy as np
    >>> vertex_law(np.array([0, 1, 2]), np.array([0.2, 0.3, 0.5]), np.array([0.1, 0.1, 0.8])).round(12).tolist()
    [0.28, 0.32, 0.4]
    """
    a = start[0] + np.concatenate([[0.0], np.cumsum(draft1[order])])
    b = start[1] + np.concatenate([[0.0], np.cumsum(draft2[order])])
    out = np.zeros(len(draft1))
    out[order] = np.diff(a + b - a * b)
    return out


@dataclass(frozen=True)
class PathMixtureRule(IndependentRule):
    """A mixture of path curtains (module docstring), with its exact law (the fields of
    :class:`IndependentRule`; ``layouts`` and ``path`` of the first component). ``components``
    holds every component's layouts, ``weights_u`` and ``weights_t`` their probabilities on U
    and on T* (``in_t`` marks T*)."""

    components: tuple = ()
    weights_u: np.ndarray | None = None
    weights_t: np.ndarray | None = None
    in_t: np.ndarray | None = None

    def _component(self, tuples: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        both_t = self.in_t[tuples].all(axis=1)
        count = len(self.components)
        k_u = rng.choice(count, size=len(tuples), p=self.weights_u)
        k_t = rng.choice(count, size=len(tuples), p=self.weights_t)
        return np.where(both_t, k_t, k_u)

    def choose(self, tuples: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """The selected column of every row of ``tuples [N, 2]``: draw the component (its part's
        weights), then the earlier point along that component's path."""
        tuples = np.asarray(tuples, dtype=np.int64)
        component = self._component(tuples, rng)
        uniforms = rng.random(tuples.shape)
        out = np.zeros(len(tuples), dtype=np.int64)
        for k in np.unique(component):
            rows = np.flatnonzero(component == k)
            one, two = self.components[k]
            first = one.times(tuples[rows, 0], uniforms[rows, 0])
            second = two.times(tuples[rows, 1], uniforms[rows, 1])
            out[rows] = second < first
        return out

    def choice_probabilities(self, tuples: np.ndarray) -> np.ndarray:
        """``P(draft i is selected | X = x)``, exactly: ``Σ_k θ_k`` (θ of the part deciding the
        row) times component k's :func:`pair_choice`."""
        tuples = np.asarray(tuples, dtype=np.int64)
        both_t = self.in_t[tuples].all(axis=1)[:, None]
        out = np.zeros(tuples.shape)
        for k, layouts in enumerate(self.components):
            weight = np.where(both_t, self.weights_t[k], self.weights_u[k])
            if np.any(weight > 0):
                out += weight * pair_choice(layouts, tuples)
        return out


def _master(columns: np.ndarray, p: np.ndarray, part: np.ndarray, upper: bool) -> tuple[np.ndarray, np.ndarray]:
    """The best mixture of ``columns [m, n]`` on one part (LP, HiGHS) and the row duals v (zero
    off the rows): U (``upper``) minimises the excess over p, T* the shortfall below p."""
    import scipy.sparse as sparse
    from scipy.optimize import linprog

    sign = 1.0 if upper else -1.0
    block = columns[:, part]
    rows = np.flatnonzero((sign * (block - p[part]) > 0).any(axis=0))
    m = len(columns)
    duals = np.zeros(len(part))
    if len(rows) == 0:
        return np.eye(m)[0], duals
    a_ub = sparse.hstack([sparse.csr_matrix(sign * block[:, rows].T), -sparse.identity(len(rows))]).tocsr()
    result = linprog(
        np.concatenate([np.zeros(m), np.ones(len(rows))]), A_ub=a_ub, b_ub=sign * p[part][rows],
        A_eq=np.concatenate([np.ones(m), np.zeros(len(rows))])[None], b_eq=[1.0], bounds=(0, None), method="highs",
        options={"primal_feasibility_tolerance": 1e-10, "dual_feasibility_tolerance": 1e-10},
    )  # fmt: skip
    if result.status != 0:
        raise RuntimeError(f"path mixture: the master LP failed ({result.message})")
    theta = np.maximum(result.x[:m], 0.0)
    duals[rows] = -result.ineqlin.marginals
    return theta / theta.sum(), duals


def _curtain_columns(p, qs, parts, in_t, law, v_u, v_t) -> list[tuple]:
    """Path curtains priced by the duals: the straight path through the corners of (U without
    its priced tokens E, E, T*'s priced tokens D, the rest of T*) -- a path through D's corner
    hands D the most any rule can, ``h`` of it, as the greedy vertex does -- each draft's curtain
    fitted against p moved by ``c`` times the mixture's excess on E (down) and deficit on D (up),
    c in :data:`PUSH` (``_fit``; a layout that does not tile is skipped)."""
    u, t = parts
    excess, deficit = v_u > 1e-9, v_t > 1e-9
    quarters = (u[~excess], u[excess], t[deficit], t[~deficit])
    corners = [np.concatenate([[0.0], np.cumsum([q[part].sum() for part in quarters])]) for q in qs]
    for corner in corners:
        corner[-1] = 1.0
    path = Path(np.maximum.accumulate(np.minimum(corners[0], 1.0)), np.maximum.accumulate(np.minimum(corners[1], 1.0)))
    total = qs[0] + qs[1]
    share = np.divide(qs[0], total, out=np.full(len(p), 0.5), where=total > 0)
    off = np.where(in_t, np.maximum(p - law, 0.0), -np.maximum(law - p, 0.0))
    out = []
    for push in PUSH:
        try:
            out.append(_fit(np.maximum(p + push * off, 0.0), qs, quarters, share, path, True))
        except RuntimeError:
            continue
    return out


def _mixture(columns: np.ndarray, weights: tuple, parts: tuple) -> np.ndarray:
    out = np.zeros(columns.shape[1])
    for theta, part in zip(weights, parts):
        out[part] = theta @ columns[:, part]
    return out


def fit_independent_rule(
    target: np.ndarray, draft1: np.ndarray, draft2: np.ndarray, *, certificate: np.ndarray | None = None,
    optimum: float | None = None, rounds: int | None = None, steps: int = STEPS, split: bool | None = None,
    ascent: bool = True,
) -> IndependentRule:  # fmt: skip
    """The verifier for ``p`` and two independent drafts ``q_1``, ``q_2``, one path curtain with
    its exact law r and the single-draft step for r (lossless for any r), the first of these that
    reaches P* (to :data:`TOLERANCE`), else the best:

    1. the best single path (:func:`~multidraft.theory.verifier._independent_rule.fit_path_curtain`);
    2. if ``ascent``: the staircase from the ascent on one draft's law,
       :func:`~multidraft.theory.verifier._orientation.ascent_staircase` (``P* = max_ρ V(ρ)``,
       docs/nonidentical_verifier.md §4e; at P* on all 30 Zipf settings at n = 49152 and 131072),
       tried *before* step 1 when ``n >`` :data:`SMALL` and step 1's first fit is forecast to fall
       short (:func:`~multidraft.theory.verifier._independent_rule.straight_forecast`: its
       curtains' groups without their layouts, ~4 ms at n = 49152; step 1's fits that fall short
       cost 0.1-0.8 s there, the ascent's staircase 10-30 ms);
    3. the random path by column generation (:func:`fit_path_mixture`, ``rounds``), then
       :func:`~multidraft.theory.verifier._staircase.staircase_rule` (at most ``steps``
       alternating steps): one path at least as good as the mixture (§4c);
    4. if ``split`` (default: ``n <=`` :data:`SPLIT_SIZE`): the ordered split
       (:func:`~multidraft.theory.verifier._ordered_split.ordered_split`, a linear programme over
       two token orders, §4d) and the staircase from its laws.

    ``ascent=False`` skips step 2 (the fits before it, for comparison). The acceptance
    ``Σ min(p, r)`` is the rule's own.

    Raises ``ValueError`` for ``rounds`` that is not an integer >= 0 (or None), ``split`` that
    is not a bool (or None), or ``ascent`` that is not a bool.

    >>> import numpy as np
    >>> rule = fit_independent_rule(np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.3, 0.5]), np.array([0.1, 0.1, 0.8]))
    >>> round(rule.acceptance, 12), round(rule.optimum, 12), rule.path
    (0.78, 0.78, 'staircase')
    """
    if split is not None and not isinstance(split, bool):
        raise ValueError(f"split: the ordered split is switched by True, False or None (by size), got {split!r}")
    if not isinstance(ascent, bool):
        raise ValueError(f"ascent: the ascent is switched by True or False, got {ascent!r}")
    _check_rounds(rounds)
    p, qs, certificate, optimum = pair_with_cut(target, draft1, draft2, certificate, optimum)
    parts = cut_parts(len(p), certificate)
    first = ascent and len(p) > SMALL and straight_forecast(p, qs, parts) < optimum - FORECAST  # the ascent before the single path
    climbed = _ascent_rule(p, qs, certificate, optimum) if first else None
    if _reaches(climbed):
        return climbed
    single = fit_path_mixture(p, *qs, certificate=certificate, optimum=optimum, rounds=0)
    if _reaches(single):
        return single
    if ascent and not first:
        climbed = _ascent_rule(p, qs, certificate, optimum)
        if _reaches(climbed):
            return climbed
    rule = single
    if _rounds(rounds, single.n):
        rule = fit_path_mixture(single.target, single.draft, single.draft2, certificate=single.certificate, optimum=single.optimum, rounds=rounds)
    rule = _better(staircase_rule(rule, steps), climbed)
    if _reaches(rule) or steps == 0 or not (rule.n <= SPLIT_SIZE if split is None else split):
        return rule
    law1, law2, value = ordered_split(rule.target, (rule.draft, rule.draft2), cut_parts(rule.n, rule.certificate), (rule.law1, rule.law2), rule.optimum)
    if value <= rule.acceptance:
        return rule
    return staircase_rule(rule, steps, laws=(law1, law2))


def _ascent_rule(p: np.ndarray, qs: tuple, certificate: np.ndarray, optimum: float) -> IndependentRule | None:
    """The one-path rule of :func:`~multidraft.theory.verifier._orientation.ascent_staircase` for
    target p, drafts ``qs`` and the cut (T*, P*) (its laws read off its pieces), or None when none
    of the ascents' staircases tiles."""
    try:
        out = ascent_staircase(p, qs, cut_parts(len(p), certificate), optimum)
    except RuntimeError:
        return None
    return path_rule(p, qs, certificate, optimum, out.law1, out.law2, out.layouts, "staircase")


def _reaches(rule: IndependentRule | None) -> bool:
    """Whether ``rule`` (None: no rule) accepts P* to :data:`TOLERANCE`."""
    return rule is not None and rule.acceptance >= rule.optimum - TOLERANCE


def _better(rule: IndependentRule, other: IndependentRule | None) -> IndependentRule:
    """``other`` if it accepts more than ``rule``, else ``rule``."""
    return other if other is not None and other.acceptance > rule.acceptance else rule


def _rounds(rounds: int | None, n: int) -> int:
    """The column-generation rounds asked for: ``rounds``, by default :data:`ROUNDS` up to
    n = :data:`SMALL` tokens and none beyond."""
    return (ROUNDS if n <= SMALL else 0) if rounds is None else rounds


def _check_rounds(rounds: int | None) -> None:
    if rounds is not None and (isinstance(rounds, bool) or not isinstance(rounds, (int, np.integer)) or rounds < 0):
        raise ValueError(f"rounds: the column-generation rounds must be an integer >= 0 or None, got {rounds!r}")


def fit_path_mixture(
    target: np.ndarray, draft1: np.ndarray, draft2: np.ndarray, *, certificate: np.ndarray | None = None,
    optimum: float | None = None, rounds: int | None = None,
) -> IndependentRule:  # fmt: skip
    """The best single path curtain
    (:func:`~multidraft.theory.verifier._independent_rule.fit_path_curtain`) and, when it
    falls short of P*, a random path (module docstring) fitted by column generation; the exact
    law r of the rule returned and the single-draft step for r (lossless for any r).

    ``rounds`` caps the column-generation rounds (default :data:`ROUNDS` for ``n <=``
    :data:`SMALL`, else 0: each round solves an LP over the deviating tokens, seconds at
    n = 49152). The acceptance ``Σ min(p, r)`` is the rule's own; it equals P* when the column
    generation closes (LP duality), which the caller reads off ``rule.acceptance``.

    Raises ``ValueError`` for ``rounds`` that is not an integer >= 0 (or None).

    >>> import numpy as np
    >>> rule = fit_path_mixture(np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.3, 0.5]), np.array([0.1, 0.1, 0.8]))
    >>> round(rule.acceptance, 12), round(rule.optimum, 12)
    (0.78, 0.78)
    """
    _check_rounds(rounds)
    p, qs, certificate, optimum = pair_with_cut(target, draft1, draft2, certificate, optimum)
    n = len(p)
    single = fit_path_curtain(p, *qs, certificate=certificate, optimum=optimum)
    rounds = _rounds(rounds, n)
    if rounds == 0 or single.acceptance >= optimum - TOLERANCE:
        return single
    in_t = np.zeros(n, dtype=bool)
    in_t[certificate] = True
    parts = (np.flatnonzero(~in_t), np.flatnonzero(in_t))
    start = tuple(float(q[parts[0]].sum()) for q in qs)
    fits = [single] + [fit_path_curtain(p, *qs, certificate=certificate, optimum=optimum, paths=(kind,)) for kind in ("straight", "target", "ratio")]
    fits = [(rule.law1, rule.law2, rule.layouts) for rule in fits]
    columns, orders = [law1 + law2 for law1, law2, _ in fits], [None] * len(fits)
    best, previous = (single.acceptance, None), single.acceptance
    for _ in range(rounds):
        stacked = np.array(columns)
        solved = [_master(stacked, p, part, upper) if len(part) else (np.eye(len(columns))[0], np.zeros(0)) for part, upper in zip(parts, (True, False))]
        weights = tuple(theta for theta, _ in solved)
        law = _mixture(stacked, weights, parts)
        acceptance = float(np.minimum(p, law).sum())
        if acceptance > best[0]:
            best = (acceptance, weights)
        if acceptance >= optimum - TOLERANCE:
            break
        (_, v_u), (_, v_t) = solved
        added = _curtain_columns(p, qs, parts, in_t, law, v_u, v_t)
        for law1, law2, layouts in added:
            columns.append(law1 + law2)
            orders.append(None)
            fits.append((law1, law2, layouts))
        if not added or acceptance - previous < STALL * (optimum - previous):
            deficit = p - law
            order_u = parts[0][np.lexsort((-deficit[parts[0]], v_u))]
            order_t = parts[1][np.lexsort((-deficit[parts[1]], -v_t))]
            columns.append(vertex_law(order_u, *qs) + vertex_law(order_t, *qs, start))
            orders.append((order_u, order_t))
            fits.append(None)
        previous = acceptance
    if best[1] is None:
        return single
    return _realise(p, qs, parts, in_t, orders, fits, best[1], optimum)


def _realise(p, qs, parts, in_t, orders, fits, weights, optimum) -> PathMixtureRule:
    """Build the used components' layouts and the mixture's exact law from their pieces."""
    used = np.flatnonzero((weights[0] > 0) | (weights[1] > 0))
    components, laws1, laws2 = [], [], []
    for k in used:
        if fits[k] is not None:
            law1, law2, layouts = fits[k]
        else:
            law1, law2, layouts = fit_priority_order(p, qs, orders[k])
        components.append(layouts)
        laws1.append(law1)
        laws2.append(law2)
    chosen = tuple(np.asarray(w[used]) / w[used].sum() for w in weights)
    law1 = _mixture(np.array(laws1), chosen, parts)
    law2 = _mixture(np.array(laws2), chosen, parts)
    law = law1 + law2
    accept = np.minimum(np.divide(p, law, out=np.zeros(len(p)), where=law > 0), 1.0)
    excess = np.maximum(p - law, 0.0)
    residual = excess / excess.sum() if excess.sum() > 0 else p.copy()
    return PathMixtureRule(
        k=2, n=len(p), target=p, draft=qs[0], selection_law=law, optimum=float(optimum), certificate=parts[1],
        accept=accept, residual=residual, draft2=qs[1], law1=law1, law2=law2, layouts=components[0],
        path=f"random path ({len(components)} components)", components=tuple(components), weights_u=chosen[0],
        weights_t=chosen[1], in_t=in_t,
    )  # fmt: skip
