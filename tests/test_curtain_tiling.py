"""The iid curtain's stack pass tiles each part exactly (branch ``curtaincheck``, after the path
pass's fix in issue 33).

The stack pass solves one root per set, W(α, α + c) = R. For a set of large mass the root is
ill-conditioned (W varies in α by about c |w'|, and R is a running sum), and ``start + c``
rounds: before the fix a start could fall up to 1e-13 inside the hull below, a merged hull end
a few ulps inside its last child's end (the next pieces then overlapping their neighbours: 65
pieces in one fit at n = 49152, K = 8), and where the running mass of everything popped
exceeded the part's length by its rounding, the last set started before the part (1.1e-12
before 0 at n = 49152 with tied masses: a front piece at w(0) = K giving a token of
r* = 9e-13 the law 1.1e-11). Now every start is held where it lies in exact arithmetic (at or
after the end of the hull below and its last child's end minus its mass) and a hull's extent
covers its children's: within each part (U in [0, q(U)), T* in [q(U), 1)) the pieces are
disjoint in floating point and none starts before its part. What rounding is left lies at a
part's rear (a few ulps past q(U) or 1, where w is least).

The checks are apart from the fit: overlap as ``Σ lengths - |union|`` by a sweep (each term a
difference of two close doubles, so a 1-ulp overlap counts), every group's length against its
draft mass, and the law against r* from bisected water levels (test_water_levels) with the cut
checked against a prefix scan of P*. benchmarks/check_curtain_tiling.py runs them over 416
fits at n = 49152 and 131072.
"""

from __future__ import annotations

import numpy as np
import pytest

from multidraft.theory.laws import dirichlet, softmax, zipf
from multidraft.theory.verifier._curtain import curtain_fit
from test_water_levels import _iid_r_star


def instance(n: int, target: str, temperature: float, variant: str, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(p, q): a Zipf(1.1) or Dirichlet(α) target (``"zipf"``, ``"dir0.1"``), a draft at
    ``temperature`` of its logits plus N(0, 0.5) noise; ``variant`` ``"tiny"``: 2% of the draft
    masses at 1e-300..1e-310 and 2% scaled by 1e-12; ``"tied"``: both rounded to multiples of
    2^-20 (draft) and 2^-18 (target) plus 2^-40, many equal masses and ratios."""
    rng = np.random.default_rng(seed)
    p = zipf(n, 1.1, rng) if target == "zipf" else dirichlet(n, float(target[3:]), rng)
    q = np.maximum(softmax(np.log(np.maximum(p, 1e-300)) + rng.normal(0.0, 0.5, n), temperature), 1e-300)
    if variant == "tiny":
        q[rng.choice(n, n // 50, replace=False)] = 1e-300 * rng.random(n // 50) + 1e-310
        q[rng.choice(n, n // 50, replace=False)] *= 1e-12
    elif variant == "tied":
        q = np.round(q * 2**20) / 2**20 + 2.0**-40
        p = np.round(p * 2**18) / 2**18 + 2.0**-40
    return p / p.sum(), q / q.sum()


def overlap(start: np.ndarray, end: np.ndarray) -> tuple[float, int]:
    """``(Σ lengths - |union|, pieces overlapping)``: pieces sorted by (start, end), each against
    the furthest end before it."""
    order = np.lexsort((end, start))
    start, end = start[order], end[order]
    reach = np.maximum.accumulate(end)[:-1]
    covered = np.clip(np.minimum(end[1:], reach) - start[1:], 0.0, None)
    return float(covered.sum()), int((covered > 0).sum())


def parts(fit, p: np.ndarray, q: np.ndarray) -> list[tuple[float, np.ndarray, np.ndarray]]:
    """``(lo, start, end)`` of U's pieces and of T*'s (T*'s groups follow U's; lo = 0 and q(U),
    summed as the fit sums it: in increasing p/q order from the cut on)."""
    groups = len(fit.group_bounds) - 1
    u_groups = int(fit.group[fit.cut].min()) if fit.best else groups
    split = fit.group_bounds[u_groups]
    with np.errstate(over="ignore"):
        order = np.argsort(p / q, kind="stable")
    boundary = float(np.cumsum(q[order[fit.best :]])[-1]) if fit.best < len(q) else 0.0
    return [(0.0, fit.piece_start[:split], fit.piece_end[:split]), (boundary, fit.piece_start[split:], fit.piece_end[split:])]


def layout_errors(p: np.ndarray, q: np.ndarray, k: int, fit=None) -> dict[str, float]:
    """The checks of the module docstring on the fit of (p, q, K) (or the ``fit`` given):
    overlap within each part and pieces overlapping, how far a piece starts before its part,
    the largest |length - mass| of a group, |law - r*| and |P* - prefix scan|."""
    fit = curtain_fit(p, q, k) if fit is None else fit
    out = {"overlap": 0.0, "overlapping": 0, "before_part": 0.0}
    for lo, start, end in parts(fit, p, q):
        if len(start):
            amount, count = overlap(start, end)
            out["overlap"] += amount
            out["overlapping"] += count
            out["before_part"] = max(out["before_part"], lo - float(start.min()))
    groups = len(fit.group_bounds) - 1
    owner = np.repeat(np.arange(groups), np.diff(fit.group_bounds))
    length = np.bincount(owner, fit.piece_end - fit.piece_start, minlength=groups)
    out["mass"] = float(np.abs(length - np.bincount(fit.group, q, minlength=groups)).max())
    with np.errstate(over="ignore"):
        order = np.argsort(p / q, kind="stable")
    scan = np.concatenate([[1.0], np.cumsum(p[order]) + 1.0 - np.minimum(np.cumsum(q[order]), 1.0) ** k])
    out["optimum"] = abs(float(scan.min()) - fit.optimum)
    out["law"] = float(np.abs(q * fit.density[fit.group] - _iid_r_star(p, q, k, fit.cut)).max())
    return out


#: Fits whose layout broke before the fix, each with its errors then: (n, target, temperature,
#: variant, seed, K). Before: 71 pieces overlapping within U (7.9e-15 in all) and T*'s last set
#: 4.4e-15 before q(U); a piece 1.5e-16 before q(U); T*'s last set 2.2e-13 before q(U), the law
#: 1.3e-12 from r* (now 7.5e-13).
REGRESSIONS = [(49152, "dir0.1", 1.2, "plain", 1, 8), (4096, "dir0.1", 0.5, "plain", 2, 3), (49152, "zipf", 1.2, "tied", 2, 8)]


@pytest.mark.parametrize(("n", "target", "temperature", "variant", "seed", "k"), REGRESSIONS)
def test_stack_pass_pieces_are_disjoint_within_each_part(n, target, temperature, variant, seed, k):
    p, q = instance(n, target, temperature, variant, seed)
    errors = layout_errors(p, q, k)
    assert errors["overlapping"] == 0 and errors["overlap"] == 0.0 and errors["before_part"] <= 0.0
    assert errors["mass"] <= 1e-12 and errors["optimum"] <= 1e-14 and errors["law"] <= 1e-12


def test_the_checks_catch_one_ulp():
    """Twins: the fit of the second regression with one piece moved 1 ulp into the piece before
    it (an overlap of 1 ulp, counted), with T*'s first piece moved 1 ulp before q(U), and with one
    group's density raised so that its law moves by 2e-12 (> the 1e-12 asked for)."""
    p, q = instance(*REGRESSIONS[1][:5])
    k = REGRESSIONS[1][5]
    fit = curtain_fit(p, q, k)
    (_, u_start, u_end), (boundary, t_start, _) = parts(fit, p, q)
    abutting = np.flatnonzero(np.isin(u_start, u_end) & (u_start > 0.0))
    assert len(abutting) and len(t_start)
    start = fit.piece_start.copy()
    start[abutting[0]] = np.nextafter(start[abutting[0]], -1.0)
    errors = layout_errors(p, q, k, fit._replace(piece_start=start))
    assert errors["overlapping"] == 1 and errors["overlap"] > 0.0 and errors["before_part"] == 0.0
    first = len(u_start) + int(np.flatnonzero(t_start == boundary)[0])
    start = fit.piece_start.copy()
    start[first] = np.nextafter(boundary, -1.0)
    assert layout_errors(p, q, k, fit._replace(piece_start=start))["before_part"] > 0.0
    density = fit.density.copy()
    token = int(np.argmax(q))
    density[fit.group[token]] += 2e-12 / q[token]
    assert layout_errors(p, q, k, fit._replace(density=density))["law"] > 1e-12
