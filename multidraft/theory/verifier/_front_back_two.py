"""The front/back rule's law at K = 2 in closed form: one O(n) compiled pass of running sums, no
quadrature over the race's time (docs/optimal_verifier.md §10, "K = 2 in closed form").

**Pairs.** Two drafts without replacement form the pair D = {X_1, X_2} with

    P(D = {j, z}) = (q_j / M) q_z (1/(M - q_j) + 1/(M - q_z)),      M = Σ q (= 1 up to rounding).

**The pass** (:mod:`~multidraft.theory.verifier._front_back`'s rule and notation: positions U =
``[0, boundary)`` then T*, r_j = α_j A_j + (1 - α_j) B_j). Given y_j ∈ D the other draft z
decides the events, so

    A_j = (q_j / M) [S_1 / (M - q_j) + S_2],   S_1 = Σ_{z≠j} c_z q_z,   S_2 = Σ_{z≠j} c_z q_z / (M - q_z),

with c_z = 1 - α_z for z earlier in j's part (z not front), 1 for z later in j's part, and for z
in the other part 1 when j ∈ U (E_j = ∅) and 0 when j ∈ T* (E_j = {D ∩ U = ∅}); B_j the same with
c_z = 0 for z later in j's part (no later token of its part drafted). Both are the part's running
(1 - α)-weighted sums before j plus suffix sums after it, so α_j = clip((p_j - B_j)/(A_j - B_j),
0, 1) is fitted in the same forward pass. With a *uniform tail* from position s (T* tokens with
α = 0, :mod:`~multidraft.theory.verifier._wor_tail`: when no head coin says front the winner is
uniform among the drafted tail tokens), a tail token j wins against a head partner z with
probability 1 - α_z and against a tail partner with probability 1/2: its r_j is A_j's sum with
c_z = 1 - α_z on the head, 1/2 on the rest of the tail, 0 on U.

**Rounding.** At most one token has q > M/2, and only its M - q cancels; that complement is
summed from the other tokens. Suffix sums are added from the end (relative accuracy for the
last tokens, whose gap A_j - B_j they are), the running sums are compensated.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from multidraft.theory._numba import compile_in_place
from multidraft.theory.optimum import _wor_pairs
from multidraft.theory.verifier._curtain import _workspace
from multidraft.theory.verifier import _front_back
from multidraft.theory.verifier._front_back import LANES
from multidraft.theory.verifier._pass_nodes import END, RIGHT_POINTS, RIGHT_STEP, pass_nodes

__all__ = ["pair_pass", "pair_last_node", "pair_last_node_bounds", "pair_tail_start"]


def pair_last_node(draft: np.ndarray, masses: tuple[float, int, float] | None = None) -> float:
    """The last node t of :func:`~multidraft.theory.verifier._front_back.front_back_nodes` at
    K = 2 (where the quadrature would end; the T* side's tail is made of tokens light up to it,
    q t <= :data:`~multidraft.theory.optimum._wor_moments.LIGHT`), without its sort: σ = the
    mass outside the largest token, summed over the others (compensated), β = the largest.
    ``masses``: ``pair_masses(draft)`` when the caller has it (:func:`pair_pass` takes the same)."""
    total, big, rest = _wor_pairs.pair_masses(draft) if masses is None else masses
    return float(pass_nodes(2, max(rest, 1e-300), float(draft[big]), total, lanes=LANES)[0][-1])


def pair_last_node_bounds(draft: np.ndarray, masses: tuple[float, int, float] | None = None) -> tuple[float, float]:
    """``(low, high)`` around :func:`pair_last_node`, without its quadrature step (a grid of
    600 bounds, ~0.1 ms): the last node is ``t = e^{ℓ}`` (to rounding, ~1e-13) at the first ℓ of
    :func:`~multidraft.theory.verifier._pass_nodes.pass_ends`' grid ``ℓ_i = s₀ + RIGHT_STEP · i``,
    ``s₀ = max(log 3 - log σ, 1)``, where its right end's majorant

        R(ℓ) = log 4 + ℓ + log σ - x + min(log Q + ℓ, log(1 + x)),     x = σ e^{ℓ}

    (the min only for β > 0) falls to log :data:`~multidraft.theory.verifier._pass_nodes.END`.
    R decreases there (dR/dℓ <= 2 - x <= -1, as x >= 3), so pass_ends' first i lies between the
    first i whose R (the same formula in scalars, ~1e-15 from numpy's) is within 1e-9 above the
    end and the first whose R is 1e-9 below it, both found by bisection: ``(e^{ℓ_lo} (1 - 1e-9),
    e^{ℓ_hi} (1 + 1e-9))``, ``(0, inf)`` when no grid point is below (pass_ends raises).
    ``masses`` as :func:`pair_last_node`."""
    total, big, rest = _wor_pairs.pair_masses(draft) if masses is None else masses
    log_sigma, log_total = math.log(max(rest, 1e-300)), math.log(total)
    start = max(math.log(3.0) - log_sigma, 1.0)
    mixed = float(draft[big]) > 0  # pass_ends' second bound of D̄ (least_top > 0)

    def majorant(i: int) -> float:
        ell = start + RIGHT_STEP * i
        x = math.exp(ell + log_sigma)
        return math.log(4.0) + ell + log_sigma - x + (min(log_total + ell, math.log1p(x)) if mixed else log_total + ell)

    def first_below(limit: float) -> int:  # the first grid point with R <= limit (RIGHT_POINTS if none)
        low, high = 0, RIGHT_POINTS  # pass_ends' grid
        while low < high:
            middle = (low + high) // 2
            if majorant(middle) <= limit:
                high = middle
            else:
                low = middle + 1
        return low

    first, last = first_below(math.log(END) + 1e-9), first_below(math.log(END) - 1e-9)
    if last == RIGHT_POINTS:
        return 0.0, math.inf
    return math.exp(start + RIGHT_STEP * first) * (1.0 - 1e-9), math.exp(start + RIGHT_STEP * last) * (1.0 + 1e-9)


def pair_tail_start(start_at: Callable[[tuple[float, ...]], tuple[int, ...]], draft: np.ndarray, masses: tuple[float, int, float] | None = None) -> int:
    """``start_at((pair_last_node(draft),))[0]`` for a tail start that does not decrease as the
    node t grows (the T* side's tail: tokens light up to t, q t <= LIGHT), ``start_at`` giving
    it at each of several increasing nodes: where the node's bounds
    (:func:`pair_last_node_bounds`) give one start, that one (both bounds asked at once: one
    scan of the tail), without the node's quadrature step (~0.2 ms); else at the node.
    ``masses`` as :func:`pair_last_node`."""
    low, high = pair_last_node_bounds(draft, masses)
    start, other = start_at((low, high))
    return start if start == other else start_at((pair_last_node(draft, masses),))[0]


def pair_pass(
    target: np.ndarray, draft: np.ndarray, boundary: int, tail: int | None = None, alpha: np.ndarray | None = None, upto: int | None = None,
    *, masses: tuple[float, int, float] | None = None, out: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """``r_j = α_j A_j + (1 - α_j) B_j``, ``A_j = (q_j/M) [S_1/(M - q_j) + S_2]`` (B_j: no later
    token of j's part; tail tokens: c = 1/2 among themselves; module docstring): ``(α, r)`` by
    position for K = 2, p and q given in position order,
    U = ``[0, boundary)``, the uniform tail from position ``tail`` (>= ``boundary``; None: no
    tail; its α are 0). ``alpha=None`` fits α, else the law of the rule with the given α;
    ``upto``: only the first ``upto`` positions get their α and r (the others 0, or their given
    α), as :func:`~multidraft.theory.verifier._front_back.front_back_pass`. ``masses``:
    :func:`~multidraft.theory.optimum._wor_pairs.pair_masses` of ``draft`` when the caller has
    it (:func:`pair_last_node` takes the same; else one pass more); ``out``: two float64 arrays
    of at least n entries whose first n receive α and r, returned as those views (reused
    memory: a fresh array page-faults on first touch, ~0.13 ms each at n = 49152). Raises
    ``ValueError`` when fewer than two tokens carry mass (q >= 0: the others' mass is 0).

    >>> alpha, r = pair_pass(np.array([0.5, 0.3, 0.2]), np.array([0.4, 0.4, 0.2]), 1)
    >>> round(float(r.sum()), 12)
    1.0
    """
    q = np.ascontiguousarray(draft, dtype=np.float64)
    n = len(q)
    _compiled()
    total, big, rest = (_masses(q, 0.0) if n else (0.0, 0, 0.0)) if masses is None else masses
    if not rest > 0:
        raise ValueError("pair_pass: two drafts without replacement need two tokens with positive mass")
    tail = n if tail is None else int(tail)
    if not 0 <= boundary <= tail <= n:
        raise ValueError(f"pair_pass: need 0 <= boundary <= tail <= n, got {boundary}, {tail}, {n}")
    fit = alpha is None
    if out is None:
        given, r = np.zeros(n), np.zeros(n)
    else:
        given, r = out[0][:n], out[1][:n]
        given.fill(0.0)
        r.fill(0.0)
    if not fit:
        given[:] = alpha
    with _workspace(n) as work:  # the suffix sums and inverses in reused arrays (a fresh one page-faults)
        _pair_pass(
            np.ascontiguousarray(target, dtype=np.float64), q, int(boundary), tail, given, fit, n if upto is None else int(upto), r,
            work.scratch[:n], work.mass[:n], work.target[:n], float(total), int(big), float(rest),
        )  # fmt: skip
    return given, r


def _compiled() -> None:
    """Compile the kernel below on first use (:func:`~multidraft.theory._numba.compile_in_place`);
    it calls :mod:`~multidraft.theory.optimum._wor_pairs`'s ``_add`` and ``_masses`` and
    :mod:`~multidraft.theory.verifier._front_back`'s coin ``_coin``."""
    global _add, _masses, _coin
    _wor_pairs._compiled()
    compile_in_place(vars(_front_back), ("_coin",), inline=_front_back.INLINED)
    _add, _masses, _coin = _wor_pairs._add, _wor_pairs._masses, _front_back._coin
    compile_in_place(globals(), KERNELS)


def _pair_pass(p, q, boundary, tail, alpha, fit, upto, r, inverse, later1, later2, total, big, rest):
    """The pass of :func:`pair_pass`: α (in place where fitted) and r; ``inverse``, ``later1``,
    ``later2`` scratch of length n; ``total, big, rest`` = ``_masses(q, 0.0)``."""
    n = q.shape[0]
    # inverse[j] = 1/(M - q_j); the largest token's complement summed from the others
    for j in range(n):
        inverse[j] = 1.0 / (total - q[j])
    inverse[big] = 1.0 / rest
    scale = 1.0 / total
    # Suffix sums inside each part, from the end: later1[j] = Σ q_z, later2[j] = Σ q_z/(M - q_z)
    # over the z after j in j's part.
    s1, s2 = 0.0, 0.0
    for j in range(n - 1, -1, -1):
        if j == boundary - 1:
            s1, s2 = 0.0, 0.0
        later1[j], later2[j] = s1, s2
        s1 += q[j]
        s2 += q[j] * inverse[j]
    other1, other2 = 0.0, 0.0  # T*'s totals, seen by U tokens
    if 0 < boundary < n:
        other1, other2 = later1[boundary] + q[boundary], later2[boundary] + q[boundary] * inverse[boundary]
    e1, e1_error, e2, e2_error = 0.0, 0.0, 0.0, 0.0  # Σ (1 - α_z) q_z, Σ (1 - α_z) q_z/(M - q_z) before j in its part
    h1, h2 = 0.0, 0.0  # the head's sums (fixed once the tail starts)
    t1, t1_error, t2, t2_error = 0.0, 0.0, 0.0, 0.0  # the tail's sums before j
    for j in range(min(upto, n)):
        if j == boundary:
            e1, e1_error, e2, e2_error = 0.0, 0.0, 0.0, 0.0
        if j == tail:
            h1, h2 = e1 + e1_error, e2 + e2_error
        share = q[j] * scale
        if j >= tail:
            if q[j] > 0:
                alpha[j] = 0.0
                r[j] = share * ((h1 + 0.5 * (t1 + t1_error + later1[j])) * inverse[j] + h2 + 0.5 * (t2 + t2_error + later2[j]))
            t1, t1_error = _add(t1, t1_error, q[j])
            t2, t2_error = _add(t2, t2_error, q[j] * inverse[j])
            continue
        if q[j] > 0:
            front1, front2 = e1 + e1_error, e2 + e2_error
            if j < boundary:
                front1 += other1
                front2 += other2
            last = share * (front1 * inverse[j] + front2)
            whole = share * ((front1 + later1[j]) * inverse[j] + front2 + later2[j])
            if fit:
                alpha[j] = _coin(p[j], whole, last)
            r[j] = alpha[j] * whole + (1.0 - alpha[j]) * last
        back = 1.0 - alpha[j]
        e1, e1_error = _add(e1, e1_error, back * q[j])
        e2, e2_error = _add(e2, e2_error, back * q[j] * inverse[j])


#: The compiled kernels of this module.
KERNELS = ("_pair_pass",)
