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
from typing import NamedTuple

import numpy as np

from multidraft.theory._numba import compile_in_place
from multidraft.theory.optimum import _wor_pairs
from multidraft.theory.verifier._curtain import _workspace
from multidraft.theory.verifier import _front_back
from multidraft.theory.verifier._front_back import LANES
from multidraft.theory.verifier._pass_nodes import END, RIGHT_POINTS, RIGHT_STEP, pass_nodes

__all__ = ["pair_pass", "pair_tail_pass", "PairTail", "pair_last_node", "pair_last_node_bounds"]


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

    def first_below(limit: float, low: int = 0) -> int:  # the first grid point from low with R <= limit (RIGHT_POINTS if none)
        high = RIGHT_POINTS  # pass_ends' grid
        while low < high:
            middle = (low + high) // 2
            if majorant(middle) <= limit:
                high = middle
            else:
                low = middle + 1
        return low

    first, limit = first_below(math.log(END) + 1e-9), math.log(END) - 1e-9
    # R decreases: the lower limit's point is not before first, and mostly first itself (one evaluation)
    last = first if first == RIGHT_POINTS or majorant(first) <= limit else first_below(limit, first + 1)
    if last == RIGHT_POINTS:
        return 0.0, math.inf
    return math.exp(start + RIGHT_STEP * first) * (1.0 - 1e-9), math.exp(start + RIGHT_STEP * last) * (1.0 + 1e-9)


class PairTail(NamedTuple):
    """The uniform tail that :func:`pair_tail_pass` looks for: the longest suffix of the
    positions ``[boundary, n)`` whose tokens have ``q > 0``, ``p <= slack law`` and
    ``q t <= light`` at the last node t (:func:`pair_last_node`), taken when it holds
    ``shortest`` tokens or more. ``law``: r* at those positions (``n - boundary`` entries)."""

    law: np.ndarray
    light: float
    slack: float
    shortest: int


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

    Two compiled sweeps: backward (the inverses 1/(M - q_j) and the suffix sums), forward (α
    fitted, r), each writing every entry it owns (no zero fill first).

    >>> alpha, r = pair_pass(np.array([0.5, 0.3, 0.2]), np.array([0.4, 0.4, 0.2]), 1)
    >>> round(float(r.sum()), 12)
    1.0
    """
    n = len(draft)
    tail = n if tail is None else int(tail)
    if not 0 <= boundary <= tail <= n:
        raise ValueError(f"pair_pass: need 0 <= boundary <= tail <= n, got {boundary}, {tail}, {n}")
    return _run(target, draft, int(boundary), tail, alpha, n if upto is None else int(upto), masses, out)[:2]


def pair_tail_pass(
    target: np.ndarray, draft: np.ndarray, boundary: int, find: PairTail, *, masses: tuple[float, int, float] | None = None,
    out: tuple[np.ndarray, np.ndarray] | None = None, into: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray, int]:
    """:func:`pair_pass` with α fitted and its uniform tail from position ``boundary + s``, s
    the first index of the longest suffix of ``[boundary, n)`` that ``find`` admits
    (:class:`PairTail`; ``s = n - boundary``, no tail, where that suffix is shorter than
    ``find.shortest``): ``(α, r, s)``. The suffix is found by the pass's backward sweep (the one
    that sums the suffixes) at both bounds of the last node (:func:`pair_last_node_bounds`) at
    once, and where they give two starts, by a second sweep at the node itself -- the start at
    the node, without the node's quadrature step (~0.2 ms) or a scan of its own. ``into``:
    ``(tokens, α_full, r_full, smaller)``: the forward sweep also writes the α and r of position
    ``boundary + i`` at ``tokens[i]`` and its ``min(p, r)`` (numpy's minimum) into
    ``smaller[i]`` (the side's acceptance is their sum): no scatter pass afterwards. ``masses``
    and ``out`` as :func:`pair_pass`."""
    n, boundary = len(draft), int(boundary)
    if not 0 <= boundary <= n or len(find.law) != n - boundary:
        raise ValueError(f"pair_tail_pass: need 0 <= boundary <= n and a law of n - boundary entries, got {boundary}, {n}, {len(find.law)}")
    return _run(target, draft, boundary, find, None, n, masses, out, into)


def _run(target, draft, boundary, tail, alpha, upto, masses, out, into=None):
    """:func:`pair_pass` (``tail`` a position) and :func:`pair_tail_pass` (``tail`` a
    :class:`PairTail`): ``(α, r, tail's position)``."""
    q = np.ascontiguousarray(draft, dtype=np.float64)
    n = len(q)
    _compiled()
    total, big, rest = (_masses(q, 0.0) if n else (0.0, 0, 0.0)) if masses is None else masses
    if not rest > 0:
        raise ValueError("pair_pass: two drafts without replacement need two tokens with positive mass")
    p = np.ascontiguousarray(target, dtype=np.float64)
    fit = alpha is None
    given, r = (np.empty(n), np.empty(n)) if out is None else (out[0][:n], out[1][:n])
    if not fit:
        given[:] = alpha
    find = tail if isinstance(tail, PairTail) else None
    law = np.zeros(0) if find is None else np.ascontiguousarray(find.law, dtype=np.float64)
    light, slack = (0.0, 0.0) if find is None else (float(find.light), float(find.slack))
    with _workspace(n) as work:  # the suffix sums and inverses in reused arrays (a fresh one page-faults)
        inverse, later1, later2 = work.scratch[:n], work.mass[:n], work.target[:n]

        def sweep(nodes) -> list[int]:  # the tail's start (from boundary) at each node
            misses = np.empty(len(nodes), dtype=np.int64)
            _pair_sweep(q, boundary, total, big, rest, inverse, later1, later2, p, law, np.asarray(nodes, dtype=np.float64), light, slack, misses)
            size = n - boundary
            return [int(miss) + 1 if size - int(miss) - 1 >= find.shortest else size for miss in misses] if len(nodes) else []

        if find is None:
            sweep(())
        else:
            first, other = sweep(pair_last_node_bounds(q, (total, big, rest)))
            tail = boundary + (first if first == other else sweep((pair_last_node(q, (total, big, rest)),))[0])
        tokens, into_alpha, into_r, smaller = (np.zeros(0, dtype=np.int64), r[:0], r[:0], r[:0]) if into is None else into
        _pair_forward(p, q, boundary, tail, given, fit, upto, r, inverse, later1, later2, total, np.ascontiguousarray(tokens, dtype=np.int64), into_alpha, into_r, smaller)
    return given, r, tail - boundary if find is not None else tail


def _compiled() -> None:
    """Compile the kernel below on first use (:func:`~multidraft.theory._numba.compile_in_place`);
    it calls :mod:`~multidraft.theory.optimum._wor_pairs`'s ``_add`` and ``_masses`` and
    :mod:`~multidraft.theory.verifier._front_back`'s coin ``_coin``."""
    global _add, _masses, _coin
    _wor_pairs._compiled()
    compile_in_place(vars(_front_back), ("_coin",), inline=_front_back.INLINED)
    _add, _masses, _coin = _wor_pairs._add, _wor_pairs._masses, _front_back._coin
    compile_in_place(globals(), KERNELS)


def _pair_sweep(q, boundary, total, big, rest, inverse, later1, later2, p, law, nodes, light, slack, misses):
    """The backward sweep of :func:`_run`: ``inverse[j] = 1/(M - q_j)`` (the largest token's
    complement summed from the others: ``rest``), and the suffix sums inside each part, from the
    end: ``later1[j] = Σ q_z``, ``later2[j] = Σ q_z/(M - q_z)`` over the z after j in j's part.
    ``misses[k]``: the last index i (from ``boundary``; -1 if none) where ``q > 0``,
    ``p <= slack law[i]`` and ``q nodes[k] <= light`` fail together (:class:`PairTail`; ``law``
    read from ``boundary``). The nodes increase, so a miss at one node is a miss at every larger
    one (q t rounds monotonically in t): only the largest node not yet missed is checked."""
    n = q.shape[0]
    missing = nodes.shape[0]
    misses[:] = -1
    node = nodes[missing - 1] if missing else 0.0
    s1, s2 = 0.0, 0.0
    for j in range(n - 1, -1, -1):
        inverse[j] = 1.0 / rest if j == big else 1.0 / (total - q[j])
        if j == boundary - 1:
            s1, s2 = 0.0, 0.0
        later1[j], later2[j] = s1, s2
        s1 += q[j]
        s2 += q[j] * inverse[j]
        if missing > 0 and j >= boundary:
            pooled = q[j] > 0 and p[j] <= slack * law[j - boundary]
            while missing > 0 and not (pooled and q[j] * node <= light):
                missing -= 1
                misses[missing] = j - boundary
                node = nodes[missing - 1] if missing else 0.0


def _pair_forward(p, q, boundary, tail, alpha, fit, upto, r, inverse, later1, later2, total, tokens, into_alpha, into_r, smaller):
    """The forward sweep of :func:`_run`: α (in place where fitted; 0 where q = 0 and from
    ``upto`` on) and r (0 there) at every position, from :func:`_pair_sweep`'s ``inverse``,
    ``later1``, ``later2``; where ``tokens`` is not empty, each position j >= ``boundary`` also
    writes its α and r at ``tokens[j - boundary]`` of ``into_alpha``, ``into_r`` and
    ``min(p_j, r_j)`` (numpy's: the second where neither is smaller, NaN kept) into
    ``smaller[j - boundary]``."""
    n = q.shape[0]
    scale = 1.0 / total
    other1, other2 = 0.0, 0.0  # T*'s totals, seen by U tokens
    if 0 < boundary < n:
        other1, other2 = later1[boundary] + q[boundary], later2[boundary] + q[boundary] * inverse[boundary]
    e1, e1_error, e2, e2_error = 0.0, 0.0, 0.0, 0.0  # Σ (1 - α_z) q_z, Σ (1 - α_z) q_z/(M - q_z) before j in its part
    h1, h2 = 0.0, 0.0  # the head's sums (fixed once the tail starts)
    t1, t1_error, t2, t2_error = 0.0, 0.0, 0.0, 0.0  # the tail's sums before j
    into = tokens.shape[0] > 0
    for j in range(n):
        if j >= upto:
            r[j] = 0.0
            if fit:
                alpha[j] = 0.0
        else:
            if j == boundary:
                e1, e1_error, e2, e2_error = 0.0, 0.0, 0.0, 0.0
            if j == tail:
                h1, h2 = e1 + e1_error, e2 + e2_error
            share = q[j] * scale
            if q[j] > 0:
                if j >= tail:
                    alpha[j] = 0.0
                    r[j] = share * ((h1 + 0.5 * (t1 + t1_error + later1[j])) * inverse[j] + h2 + 0.5 * (t2 + t2_error + later2[j]))
                else:
                    front1, front2 = e1 + e1_error, e2 + e2_error
                    if j < boundary:
                        front1 += other1
                        front2 += other2
                    last = share * (front1 * inverse[j] + front2)
                    whole = share * ((front1 + later1[j]) * inverse[j] + front2 + later2[j])
                    if fit:
                        alpha[j] = _coin(p[j], whole, last)
                    r[j] = alpha[j] * whole + (1.0 - alpha[j]) * last
            else:
                r[j] = 0.0
                if fit:
                    alpha[j] = 0.0
            if j >= tail:
                t1, t1_error = _add(t1, t1_error, q[j])
                t2, t2_error = _add(t2, t2_error, q[j] * inverse[j])
            else:
                back = 1.0 - alpha[j]
                e1, e1_error = _add(e1, e1_error, back * q[j])
                e2, e2_error = _add(e2, e2_error, back * q[j] * inverse[j])
        if into and j >= boundary:
            i = j - boundary
            into_alpha[tokens[i]], into_r[tokens[i]] = alpha[j], r[j]
            smaller[i] = p[j] if p[j] < r[j] or p[j] != p[j] else r[j]


#: The compiled kernels of this module.
KERNELS = ("_pair_sweep", "_pair_forward")
