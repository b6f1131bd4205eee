"""The polynomial stack pass of the J-curtain (theory/verifier/_wor_curtain.py, the without-replacement
rule's mixed J laws) tiles each part exactly, as the iid curtain's does (tests/test_curtain_tiling.py,
branch ``curtaincheck``; this file: branch ``wcurtain``).

It had the iid pass's two rounding defects: a merged set's root (ill-conditioned for a set of large
mass) could start inside the hull below, and a hull's end was taken as ``start + c``, which rounds a
few ulps inside its last child's end (pieces overlapping inside a part: 334 in one fit at n = 49152,
Dirichlet 0.1, G = x^8); and a part's last set was pushed to ``hi - c``, below ``lo`` when the popped
masses summed past ``hi - lo`` (a piece up to 4.8e-15 before its part, 18 of 30 fits). Now the pass
holds every start as the iid one does (``_curtain_kernels.held_start``: at or after the end of the
hull below, or lo, and a merged set's last child's end less its mass) and a hull's extent covers its
children's.

The checks are apart from the pass: the parts from the minimising prefix of ``p(S) + 1 - G(m(S))``
(U = [0, m(U)), T = [m(U), 1)), overlap within each part as ``Σ lengths - |union|`` by
test_curtain_tiling's sweep, how far a piece starts before its part, every group's length against
its mass, and the acceptance against ``min_S [p(S) + 1 - G(m(S))]`` by a prefix scan.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from multidraft.theory.verifier._wor_curtain import clipped_layout
from test_curtain_tiling import instance, overlap

#: Weights G(x) = E[x^J] by their coefficients c_0..c_K: x^3, x^8, 0.3x + 0.5x² + 0.2x³,
#: (1 - 1e-9)x + 1e-9x², 0.1x + 0.2x² + 0.3x³ + 0.4x⁴.
WEIGHTS = {
    "x3": [0.0, 0.0, 0.0, 1.0],
    "x8": [0.0] * 8 + [1.0],
    "mixed3": [0.0, 0.3, 0.5, 0.2],
    "near_linear": [0.0, 1.0 - 1e-9, 1e-9],
    "mixed4": [0.0, 0.1, 0.2, 0.3, 0.4],
}


def wor_parts(p: np.ndarray, q: np.ndarray, c: np.ndarray, layout) -> tuple[np.ndarray, float, np.ndarray]:
    """``(scan, m(U), piece in U)``: the prefix scan ``p(T_j) + 1 - G(m(T_j))`` over p = 0 first, then
    decreasing q/p, T its first minimising prefix and U the rest (m(U) summed as the pass sums it); U's
    groups are numbered first."""
    key = -q / np.where(p > 0, p, 1.0)
    order = np.lexsort((key, p > 0))
    prefix_q = np.minimum(np.cumsum(np.concatenate([[0.0], q[order]])), 1.0)
    scan = np.cumsum(np.concatenate([[0.0], p[order]])) + 1.0 - np.polynomial.polynomial.polyval(prefix_q, c)
    cut = int(np.argmin(scan))
    u_groups = int(layout.token_group[order[cut:]].max()) + 1 if cut < len(p) else 0
    return scan, float(q[order][cut:].sum()), layout.piece_group < u_groups


def wor_layout_errors(p: np.ndarray, q: np.ndarray, coefficients, layout=None) -> dict[str, float]:
    """The checks of the module docstring on the polynomial pass's layout of (p, q, G) (or the
    ``layout`` given, with its acceptance recomputed): overlap within each part and pieces
    overlapping, how far a piece starts before its part, the largest |length - mass| of a group,
    |acceptance - prefix-scan optimum|."""
    c = np.asarray(coefficients, dtype=np.float64)
    if layout is None:
        layout, _ = clipped_layout(p, q, c, iid=False)
    scan, boundary, in_u = wor_parts(p, q, c, layout)
    out = {"overlap": 0.0, "overlapping": 0, "before_part": 0.0}
    for lo, part in ((0.0, in_u), (boundary, ~in_u)):
        if part.any():
            amount, count = overlap(layout.piece_start[part], layout.piece_end[part])
            out["overlap"] += amount
            out["overlapping"] += count
            out["before_part"] = max(out["before_part"], lo - float(layout.piece_start[part].min()))
    groups = len(layout.group_first)
    length = np.bincount(layout.piece_group, layout.piece_end - layout.piece_start, minlength=groups)
    carried = layout.token_group >= 0
    out["mass"] = float(np.abs(length - np.bincount(layout.token_group[carried], q[carried], minlength=groups)).max())
    out["optimum"] = abs(float(np.minimum(p, layout.law).sum()) - float(scan.min()))
    return out


def iid_law_gap(p: np.ndarray, q: np.ndarray, coefficients, layout=None) -> float:
    """For G = x^K: the largest |law - the iid fit's law| (the iid curtain's own stack pass, checked
    against r* in test_curtain_tiling); 0.0 for other weights."""
    c = np.asarray(coefficients, dtype=np.float64)
    if not (c[-1] == 1.0 and not c[:-1].any()):
        return 0.0
    layout = clipped_layout(p, q, c, iid=False)[0] if layout is None else layout
    return float(np.abs(layout.law - clipped_layout(p, q, c)[0].law).max())


#: Fits whose layout broke before the fix (n, target, temperature, variant, seed, weight), each with
#: its errors then: 344 pieces overlapping inside a part (3.8e-14 in all); T's last set 7.5e-13
#: before its part, the law 5.3e-12 from the iid fit's (now 6.6e-13); a piece 1.1e-15 before its
#: part; one piece overlapping by 1.1e-16.
REGRESSIONS = [
    (49152, "dir0.1", 1.2, "plain", 0, "x8"),
    (49152, "dir0.1", 1.2, "tied", 0, "x8"),
    (49152, "zipf", 0.8, "plain", 0, "mixed3"),
    (49152, "dir0.3", 1.2, "plain", 0, "x8"),
]


@pytest.mark.parametrize(("n", "target", "temperature", "variant", "seed", "weight"), REGRESSIONS)
def test_polynomial_stack_pass_pieces_are_disjoint_within_each_part(n, target, temperature, variant, seed, weight):
    p, q = instance(n, target, temperature, variant, seed)
    layout, _ = clipped_layout(p, q, np.asarray(WEIGHTS[weight]), iid=False)
    errors = wor_layout_errors(p, q, WEIGHTS[weight], layout)
    assert errors["overlapping"] == 0 and errors["overlap"] == 0.0 and errors["before_part"] <= 0.0
    assert errors["mass"] <= 1e-12 and errors["optimum"] <= 1e-11
    assert iid_law_gap(p, q, WEIGHTS[weight], layout) <= 1e-12


def test_the_wor_checks_catch_one_ulp():
    """Twins: the third regression's layout (both parts laid out) with one piece moved 1 ulp into the
    piece before it (an overlap of 1 ulp, counted), with T's frontmost piece moved to 1 ulp before its
    part, with one group's last piece 1e-11 longer (its length off its mass); the second's with one
    token's law raised by 2e-12 (off the iid fit's by more than the 1e-12 asked for)."""
    n, target, temperature, variant, seed, weight = REGRESSIONS[2]
    p, q = instance(n, target, temperature, variant, seed)
    c = np.asarray(WEIGHTS[weight])
    layout, _ = clipped_layout(p, q, c, iid=False)
    assert wor_layout_errors(p, q, c, layout)["overlapping"] == 0
    start, end = layout.piece_start, layout.piece_end
    abutting = np.flatnonzero(np.isin(start, end) & (start > 0.0) & (end > start))
    moved = start.copy()
    moved[abutting[0]] = np.nextafter(moved[abutting[0]], -1.0)
    errors = wor_layout_errors(p, q, c, replace(layout, piece_start=moved))
    assert errors["overlapping"] == 1 and errors["overlap"] > 0.0 and errors["before_part"] == 0.0
    _, boundary, in_u = wor_parts(p, q, c, layout)
    front = np.flatnonzero(~in_u)[np.argmin(start[~in_u])]
    moved = start.copy()
    moved[front] = np.nextafter(boundary, -1.0)
    assert wor_layout_errors(p, q, c, replace(layout, piece_start=moved))["before_part"] > 0.0
    longer = end.copy()
    longer[layout.group_last[0] - 1] += 1e-11
    assert wor_layout_errors(p, q, c, replace(layout, piece_end=longer))["mass"] > 1e-12
    n, target, temperature, variant, seed, weight = REGRESSIONS[1]
    p, q = instance(n, target, temperature, variant, seed)
    layout, _ = clipped_layout(p, q, np.asarray(WEIGHTS[weight]), iid=False)
    assert iid_law_gap(p, q, WEIGHTS[weight], layout) <= 1e-12
    law = layout.law.copy()
    law[np.argmax(q)] += 2e-12
    assert iid_law_gap(p, q, WEIGHTS[weight], replace(layout, law=law)) > 1e-12
