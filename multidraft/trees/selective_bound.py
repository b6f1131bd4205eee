"""What any selective rule can reach on two iid chains of length two: E[τ] as a function of the
root selection law, and its certified maximum (issue 30, item 3; docs/block_level.md §4c).

On ``TreeShape.chains(2, 2)`` with iid rows, ``selective`` selects one root child c by a rule with
law r and walks below it with the optimal rule for the budget it entered with. Its E[τ] depends
on r alone:

    E[τ](r) = Σ_c g_c(r_c),
    g_c(r) = Q(c)² (b + M_c(b, 2)) + (r − Q(c)²) (b + M_c(b, 1)),   b = min(1, P(c)/r),

where M_c(b, j) = P*((b P(· | c), 1 − b), IID((Q(· | c), 0), j)) is the mass child c, entered with
budget b and j rows, sends into its leaves, and (c, c) is the only tuple that selects c with two
rows. A root law r is selectable from two iid draws iff r(S) ≤ 1 − (1 − Q(S))² for every set S
(and Σ r = 1); on three tokens that is the box Q(c)² ≤ r_c ≤ 1 − (1 − Q(c))².

:func:`selective_value` evaluates E[τ](r); :func:`best_selective_value` bounds its maximum over
every selectable r from above by branch and bound over boxes of r, with a bound per box that holds
on the whole box (below), and from below by the best selectable point it visits. The maximum is
what a selective rule that knew the whole model could reach, so a share of the SpecInfer → optimum
gap above it is out of reach for every selective rule.

The box bound. Each M_c(·, j) is the minimum of the affine functions t ↦ α_T + β_T t over the
cuts T (|β_T| ≤ 1), so it is concave and 1-Lipschitz, with M_c(0, j) = 0 (drafts never stop). On
r ≤ P(c), g_c is affine in r with slope 1 + M_c(1, 1) ≥ 0; on r ≥ P(c), with t = P(c)/r,

    g_c(r) = Q(c)² [M_c(t, 2) − M_c(t, 1)] + P(c) + r M_c(P(c)/r, 1),

where r M_c(P(c)/r, 1) (the perspective of a concave function vanishing at 0) is non-decreasing
in r, and M_c(·, 2) − M_c(·, 1) is 2-Lipschitz. So on r ∈ [a, b]: g_c ≤ its value at min(b, P(c))
on the affine piece, and ≤ Q(c)² [D(t_m) + (t_1 − t_0)] + P(c) + b M_c(P(c)/b, 1) on the other,
with [t_0, t_1] = [P(c)/b, P(c)/a] and t_m its midpoint.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from multidraft.trees.model import SequenceModel

__all__ = ["SelectiveBound", "best_selective_value", "selective_value"]

#: Largest vocabulary: the cuts are enumerated (2^(n + 1) per child) and the search is over
#: boxes in n − 1 dimensions.
MAX_TOKENS = 4


class _Child:
    """g_c of one root child c: the cut pieces of M_c(·, 1) and M_c(·, 2)."""

    def __init__(self, model: SequenceModel, c: int) -> None:
        self.p, self.q = float(model.target_at(())[c]), float(model.draft_at(())[c])
        target, draft = np.asarray(model.target_at((c,)), dtype=np.float64), np.asarray(model.draft_at((c,)), dtype=np.float64)
        cuts = [t for size in range(len(target) + 1) for t in itertools.combinations(range(len(target)), size)]
        # A cut T ⊆ Ω, with or without the stop token: α + β t = [stop] + 1 − Q(T)^j + t (P(T) − [stop]).
        alpha, beta = {1: [], 2: []}, []
        for cut in cuts:
            mass, drafted = float(np.sum(target[list(cut)])), float(np.sum(draft[list(cut)]))
            for stop in (0.0, 1.0):
                beta.append(mass - stop)
                for j in (1, 2):
                    alpha[j].append(stop + 1.0 - drafted**j)
        self.alpha, self.beta = {j: np.array(a) for j, a in alpha.items()}, np.array(beta)

    def leaves(self, t: np.ndarray, j: int) -> np.ndarray:
        """M_c(t, j) = min_T α_T + β_T t, elementwise."""
        return np.min(self.alpha[j][None, :] + self.beta[None, :] * np.asarray(t, dtype=np.float64)[:, None], axis=1)

    def value(self, r: np.ndarray) -> np.ndarray:
        """g_c(r), elementwise (r > 0)."""
        r = np.asarray(r, dtype=np.float64)
        b = np.minimum(1.0, self.p / r)
        return self.q**2 * (b + self.leaves(b, 2)) + (r - self.q**2) * (b + self.leaves(b, 1))

    def upper(self, low: np.ndarray, high: np.ndarray) -> np.ndarray:
        """An upper bound of g_c on each [low, high] (module docstring)."""
        low, high = np.asarray(low, dtype=np.float64), np.asarray(high, dtype=np.float64)
        affine = np.where(low <= self.p, self.value(np.minimum(high, self.p)), -np.inf)
        a, b = np.maximum(low, self.p), high
        t0, t1 = self.p / b, self.p / a
        middle = 0.5 * (t0 + t1)
        gap = self.leaves(middle, 2) - self.leaves(middle, 1) + (t1 - t0)
        curved = np.where(high >= self.p, self.q**2 * gap + self.p + b * self.leaves(t0, 1), -np.inf)
        return np.maximum(affine, curved)


def _children(model: SequenceModel) -> list[_Child]:
    n = len(model.target_at(()))
    if n > MAX_TOKENS:
        raise ValueError(f"best_selective_value enumerates cuts and boxes: at most {MAX_TOKENS} tokens, got {n}")
    if np.any(np.asarray(model.draft_at(())) <= 0):
        raise ValueError("best_selective_value needs every root token draftable (Q(c) > 0)")
    if model.length != 2:
        raise ValueError(f"the formula is for chains of length 2, got a model of length {model.length}")
    return [_Child(model, c) for c in range(n)]


def _caps(q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The selectability constraints r(S) ≤ 1 − (1 − Q(S))² as a [subsets, n] indicator and caps."""
    n = len(q)
    subsets = np.array([[c in s for c in range(n)] for size in range(1, n) for s in itertools.combinations(range(n), size)], dtype=np.float64)
    return subsets, 1.0 - (1.0 - subsets @ q) ** 2


def selective_value(model: SequenceModel, r: np.ndarray) -> float:
    """E[τ](r) = Σ_c g_c(r_c) of selective on two iid chains of length 2 with root selection
    law ``r`` (module docstring; r_c ≥ Q(c)² > 0 for a selectable law)."""
    r = np.asarray(r, dtype=np.float64)
    return float(sum(child.value(r[[c]])[0] for c, child in enumerate(_children(model)) if r[c] > 0))


@dataclass(frozen=True)
class SelectiveBound:
    """The maximum of E[τ](r) over selectable root laws: ``lower ≤ max ≤ upper``; ``law`` attains
    ``lower``; ``boxes`` counts the boxes the search examined."""

    lower: float
    upper: float
    law: np.ndarray
    boxes: int


def best_selective_value(model: SequenceModel, tolerance: float = 1e-6, max_boxes: int = 5_000_000) -> SelectiveBound:
    """Certified ``[lower, upper]`` of max_r E[τ](r) over r with Σ r = 1 and r(S) ≤ 1 − (1 − Q(S))²
    for all S (module docstring): branch and bound over boxes of (r_1, …, r_{n−1}), r_n = 1 − Σ,
    splitting each live box in two along its widest side until ``upper − lower ≤ tolerance``."""
    children = _children(model)
    q = np.asarray(model.draft_at(()), dtype=np.float64)
    subsets, caps = _caps(q)
    n = len(q)
    floor, ceiling = q**2, 1.0 - (1.0 - q) ** 2

    def feasible(r: np.ndarray) -> np.ndarray:
        return np.all(r >= floor - 1e-15, axis=1) & np.all(r @ subsets.T <= caps + 1e-15, axis=1) & (np.abs(r.sum(axis=1) - 1.0) < 1e-12)

    def complete(free: np.ndarray) -> np.ndarray:
        return np.column_stack([free, 1.0 - free.sum(axis=1)])

    low, high = floor[None, : n - 1].copy(), ceiling[None, : n - 1].copy()
    best, law, boxes, pruned = -np.inf, floor.copy(), 0, -np.inf
    while len(low):
        boxes += len(low)
        if boxes > max_boxes:
            raise RuntimeError(f"best_selective_value: more than {max_boxes} boxes before upper − lower ≤ {tolerance}")
        last_low, last_high = 1.0 - high.sum(axis=1), 1.0 - low.sum(axis=1)
        full_low = np.column_stack([low, np.maximum(last_low, floor[-1])])
        full_high = np.column_stack([high, np.minimum(last_high, ceiling[-1])])
        alive = np.all(full_low <= full_high, axis=1) & np.all(full_low @ subsets.T <= caps + 1e-15, axis=1)
        low, high, full_low, full_high = low[alive], high[alive], full_low[alive], full_high[alive]
        centres = complete(0.5 * (low + high))
        ok = feasible(centres)
        if np.any(ok):
            values = sum(child.value(centres[ok, c]) for c, child in enumerate(children))
            top = int(np.argmax(values))
            if values[top] > best:
                best, law = float(values[top]), centres[ok][top]
        upper = sum(child.upper(full_low[:, c], full_high[:, c]) for c, child in enumerate(children))
        live = upper > best + tolerance
        pruned = max(pruned, float(upper[~live].max(initial=-np.inf)))
        low, high = low[live], high[live]
        side = np.argmax(high - low, axis=1)
        rows = np.arange(len(low))
        split = 0.5 * (low[rows, side] + high[rows, side])
        left_high, right_low = high.copy(), low.copy()
        left_high[rows, side], right_low[rows, side] = split, split
        low, high = np.vstack([low, right_low]), np.vstack([left_high, high])
    return SelectiveBound(best, max(best, pruned), law, boxes)
