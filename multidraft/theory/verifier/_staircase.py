"""The staircase: one path curtain for the per-draft laws of any rule (two independent drafts).

Drafts ``X_1 ~ q_1``, ``X_2 ~ q_2`` independently; a rule's per-draft laws are
``x_i(y) = P(draft i is selected, X_i = y)`` (its law is ``r = x_1 + x_2``). For all token sets
``A_1``, ``A_2`` the events {draft 1 selected, X_1 ∈ A_1} and {draft 2 selected, X_2 ∈ A_2} are
disjoint and lie in {X_1 ∈ A_1 or X_2 ∈ A_2}, so

    x_1(A_1) + x_2(A_2) <= h(q_1(A_1), q_2(A_2)) = 1 - (1 - q_1(A_1)) (1 - q_2(A_2)).       (GR)

**Construction.** Fix draft j's law ``x_j``. Lay draft j's tokens side by side (one piece each)
by decreasing density ``d = x_j / q_j``, and take the path whose other coordinate is
``F_j(x) = 1 - d(x)`` (a staircase: flat along each token, a jump between tokens): draft j's
weight ``1 - F_j`` is d, so its law is exactly ``x_j``. The other draft's weight is
``w(t) = |{x : d(x) < 1 - t}|`` (the path read the other way), and every ``x_o`` that satisfies
(GR) with ``x_j`` lies in that draft's curtain polytope ``B(A ↦ ∫_0^{q_o(A)} w)`` (a continuous
Gale–Ryser inequality, docs/nonidentical_verifier.md §4c). So the other draft's curtain fitted
against ``(p - x_j)_+`` (the polymatroid-box optimum of :func:`._independent_rule._region`)
accepts at least as much as ``x_o`` does: **one path reaches the acceptance of any rule, P* included**
(the random path's mixture, for instance). With U's tokens first on both axes the path passes
through ``(q_1(U), q_2(U))``: a rule with U tight has ``d >= 1 - q_o(U)`` on U and ``<=`` it on T*.

:func:`staircase_rule` starts from a rule's per-draft laws and alternates the construction
(draft 1 fixed, then draft 2, ...): each step keeps the previous laws feasible, so the
acceptance never drops; it stops at P*, when a step gains nothing, or after ``steps`` steps.
"""

from __future__ import annotations

import numpy as np

from multidraft.theory.verifier._independent_rule import IndependentRule, Path, _region, _side_by_side, _stable_order, cut_parts, draft_layout, path_rule

__all__ = ["staircase_orders", "staircase_path", "fit_staircase", "staircase_rule", "STEPS"]

#: Most alternating steps of :func:`staircase_rule` (each one O(n log n)).
STEPS = 8
#: A step that gains less than this ends the alternation (a stall).
GAIN = 1e-13


def _density_order(law: np.ndarray, q: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    """``tokens`` by decreasing ``law / q`` (ties in the given order): ``argsort(-(law / q),
    kind="stable")``'s permutation, as the stable increasing order of the tokens *reversed*
    (:func:`._independent_rule._stable_order`: the radix sort from 4096 tokens on, ~10x faster
    than numpy's at 49152) read backwards, which puts equal densities back in the given order.
    Negative laws (never a rule's) take numpy's sort, whose keys may be negative."""
    backwards = tokens[::-1]
    if (law[tokens] < 0).any():
        return tokens[np.argsort(-(law[tokens] / q[tokens]), kind="stable")]
    return backwards[_stable_order(law[backwards], q[backwards])][::-1]


def staircase_orders(law: np.ndarray, q: np.ndarray, parts: tuple) -> tuple:
    """Every part's tokens that the draft can propose (``q > 0``), by decreasing ``law / q``
    (ties in id order): the order of the staircase's steps and of the draft's side-by-side pieces."""
    return tuple(_density_order(law, q, part[q[part] > 0]) for part in parts)


def staircase_path(law: np.ndarray, qs: tuple, parts: tuple, j: int, orders: tuple | None = None) -> Path:
    """The path whose weight for draft j is ``law / q_j`` along j's tokens by decreasing density,
    part by part (U, then T*; each part's corner ``(q_1, q_2)`` of the parts so far on the path,
    heights clipped into the part's box). ``orders``: :func:`staircase_orders` of ``law`` and
    ``q_j`` when already at hand.

    Breakpoints: per part from (lo, lo_far), every token's step ``(start, h), (end, h)`` with
    ``h = clip(1 - law / q_j, lo_far, hi_far)``, then the corner ``(hi, hi_far)``; both coordinates
    made non-decreasing and at most 1. O(n) given the orders (O(n log n) with them)."""
    q, other = qs[j], qs[1 - j]
    orders = staircase_orders(law, q, parts) if orders is None else orders
    own, far = [np.zeros(1)], [np.zeros(1)]
    lo, lo_far = 0.0, 0.0
    for index, (part, tokens) in enumerate(zip(parts, orders)):
        last = index == len(parts) - 1
        hi = 1.0 if last else lo + float(q[part].sum())
        hi_far = 1.0 if last else lo_far + float(other[part].sum())
        ends = lo + np.cumsum(q[tokens])
        steps, heights = np.empty(2 * len(tokens) + 1), np.empty(2 * len(tokens) + 1)
        steps[0:-1:2] = np.concatenate([[lo], ends[:-1]]) if len(tokens) else ends
        steps[1:-1:2] = ends
        heights[:-1] = np.repeat(np.clip(1.0 - law[tokens] / q[tokens], lo_far, hi_far), 2)
        steps[-1], heights[-1] = hi, hi_far
        own.append(steps)
        far.append(heights)
        lo, lo_far = hi, hi_far
    own = np.maximum.accumulate(np.minimum(np.concatenate(own), 1.0))
    far = np.maximum.accumulate(np.minimum(np.concatenate(far), 1.0))
    return Path(own, far) if j == 0 else Path(far, own)


def fit_staircase(p: np.ndarray, qs: tuple, parts: tuple, law: np.ndarray, j: int) -> tuple[np.ndarray, np.ndarray, tuple]:
    """(law1, law2, layouts) of the staircase for draft j's law ``law`` (module docstring): draft j
    side by side by density, the other draft's curtain fitted against ``(p - law)_+`` per part;
    both laws from the pieces. Raises RuntimeError if the other draft's layout does not tile.
    Complexity: one sort of draft j's tokens (shared by the path and the side-by-side layout),
    the other draft's curtain fit (:func:`._independent_rule._region`)."""
    orders = staircase_orders(law, qs[j], parts)
    path = staircase_path(law, qs, parts, j, orders)
    cap = np.maximum(p - law, 0.0)
    out = [None, None]
    for i in range(2):
        coordinates = path.coordinates(i)

        def place(index, mine, lo, hi, groups, i=i, coordinates=coordinates):
            if i == j:
                tokens = orders[index]
                return (tokens, *_side_by_side(coordinates, qs[i][tokens], lo, groups))
            return (mine, *_region(coordinates, qs[i][mine], cap[mine], lo, hi, groups))

        out[i] = draft_layout(qs[i], parts, coordinates, place)
    return out[0][0], out[1][0], (out[0][1], out[1][1])


def staircase_rule(rule: IndependentRule, steps: int = STEPS, laws: tuple | None = None) -> IndependentRule:
    """One path curtain at least as good as ``rule`` (any rule with per-draft laws ``law1``,
    ``law2``, U's tokens first; a random path included): alternate :func:`fit_staircase` from
    draft 1's law, then draft 2's, keeping the best exact law; stop at P* (to 1e-12), at a step
    gaining less than :data:`GAIN`, or after ``steps`` steps. Returns ``rule`` itself when no step
    improves on it (or a layout does not tile). ``laws``: start from these per-draft laws instead
    (any pair satisfying (GR) with U tight, e.g. :func:`._ordered_split.ordered_split`'s).

    ``acceptance`` of the result is its own ``Σ min(p, law1 + law2)``, computed from its pieces.
    Complexity: O(n log n) per step (a sort of each draft's tokens, compiled passes).
    """
    p, qs = rule.target, (rule.draft, rule.draft2)
    parts = cut_parts(rule.n, rule.certificate)
    best, previous = rule, rule.acceptance
    laws = (rule.law1, rule.law2) if laws is None else laws
    for step in range(steps):
        j = step % 2
        try:
            law1, law2, layouts = fit_staircase(p, qs, parts, laws[j], j)
        except RuntimeError:
            break
        candidate = path_rule(p, qs, rule.certificate, rule.optimum, law1, law2, layouts, "staircase")
        if candidate.acceptance > best.acceptance - (GAIN if best is rule else 0.0):  # one path over a mixture
            best = candidate
        laws = (law1, law2)
        if candidate.acceptance >= rule.optimum - 1e-12 or (step > 0 and candidate.acceptance < previous + GAIN):
            break
        previous = candidate.acceptance
    return best
