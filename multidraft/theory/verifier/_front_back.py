"""The front/back selection rule for drafts without replacement: its law in one compiled pass.

**The rule.** Let T* be the min-cut prefix (decreasing q/p; the prefix theorem of
:class:`~multidraft.theory.laws.WithoutReplacement`) and U = Ω ∖ T*. Give the tokens positions:
U first, then T*, each part by decreasing p/q (ties by token id). The *active part* of a draft
set D is U if D meets U, else T*. Every drafted token y of the active part flips a coin, "front"
with probability α_y; the winner is the first front token in position order, or, when no coin
says front, the *last* drafted token of the active part.

**Its law.** With the drafts as the first K arrivals of an exponential race (token y arrives at
rate q_y; the K-th arrival at time t), the token at position j wins with probability

    r_j = α_j A_j + (1 - α_j) B_j,
    A_j = P(y_j ∈ D, E_j, no earlier drafted token of its part is front),
    B_j = A_j's event and no later token of its part drafted,

with E_j = ∅ in U and E_j = {D ∩ U = ∅} in T*. A_j and B_j depend only on the α of *earlier*
positions, so ``α_j = clip((p_j - B_j) / (A_j - B_j), 0, 1)`` (aiming r_j at p_j) is fitted in
one forward pass. Each is an integral over t of coefficients of x^{K-1} in products over the
tokens of ``a + b x`` (a = e^{-q t}: not drafted; b = c (1 - e^{-q t}): drafted and allowed,
c = 1, 1 - α or 0) and of one arrival density ``ρ = c q e^{-q t}``; the pass keeps these
truncated polynomials ([K, G] per node set) for the prefix, and for the suffix at √n
checkpoints, so it costs O(n · G · K) time and O(√n · G · K) memory. The checkpoints take the
light tokens' product from their power sums (:func:`suffix_marks`): one backward sweep of
factors less, within a relative 5e-14 checked per coefficient. The integral is the
trapezoid rule in u with t = exp(u - e^{-u}) (:mod:`~multidraft.theory.verifier._pass_nodes`). The transcendentals are the cost at small K: each token's
``e^{-q t} - 1`` is computed once per pass over its block, by a Taylor series where qt <= 1/2
(a loop that vectorises; ``e^{-qt}`` from it, exactly in absolute terms), and
``e^{-t · (mass after y in its part)}`` as a running product restarted exactly at every block
end (relative error below √n ulps).

Whatever the α, r is the exact law of the rule (to the quadrature's rounding), so the
canonical single-draft step against r is lossless. The clipping may bind, and then Σ min(p, r)
can fall short of P*: the caller compares with the alternatives (see
:func:`multidraft.theory.verifier.optimal_selection_rule`).
"""

from __future__ import annotations

import math

import numpy as np

from multidraft.theory._numba import compile_in_place
from multidraft.theory.optimum import _wor_moments
from multidraft.theory.optimum._wor_moments import LIGHT, ROUNDING, SERIES_LIMIT, light_split, moment_order, stirling_weights
from multidraft.theory.verifier._pass_nodes import pass_nodes
from multidraft.theory.verifier._wor_parts import descending_values

__all__ = ["front_back_nodes", "front_back_pass", "front_back_head", "suffix_marks"]


def front_back_nodes(draft: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Nodes t and weights of ``∫_0^∞ f(t) dt`` for every law of the pass: the trapezoid rule in
    u with t = exp(u - e^{-u}) (:func:`~multidraft.theory.verifier._pass_nodes.pass_nodes`),
    whose discretisation error summed over the tokens is at most
    :data:`~multidraft.theory.verifier._pass_nodes.PASS_TOLERANCE` (Trefethen & Weideman's bound
    with the pass's integrands majorised; docs/optimal_verifier.md §10, "The pass's
    quadrature"), the node count a multiple of :data:`LANES`. σ (the draft mass outside the
    K - 1 largest tokens) is *summed over those tokens*, β is the least of the K - 1 largest:
    ``1 - M_{K-1}`` cancels when the top tokens hold all but a sliver, and then gave a step far
    too large (or a zero σ).
    """
    positive = descending_values(draft)  # the sorted values, in one pass when nearly sorted
    if len(positive) == 0:
        raise ValueError("front_back_nodes: the draft has no positive mass")
    spread = max(float(positive[k - 1 :].sum()), 1e-300)
    least_top = float(positive[k - 2]) if 1 < k <= len(positive) else None
    return pass_nodes(k, spread, least_top, float(positive.sum()), lanes=LANES)


def front_back_pass(
    target: np.ndarray, draft: np.ndarray, boundary: int, k: int, nodes: np.ndarray, weights: np.ndarray,
    alpha: np.ndarray | None = None, upto: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """``(α, r)`` by position for p and q given in position order (U = ``[0, boundary)``).

    ``alpha=None`` fits α (module docstring); otherwise the law of the rule with the given α.
    ``upto``: only the first ``upto`` positions get their α and r (the others 0, or their given
    α): a later position enters those laws only through the suffix products, which the pass
    computes first, so each is what the whole pass gives, bit for bit (the U side alone of
    ``wor_selection_rule``: U's few hundred tokens, not the T* tokens behind them, ~2/3 of a pass
    over the vocabulary).
    """
    alpha, r, _, _ = front_back_head(target, draft, boundary, k, nodes, weights, alpha, upto=upto)
    return alpha, r


def front_back_head(
    target: np.ndarray, draft: np.ndarray, boundary: int, k: int, nodes: np.ndarray, weights: np.ndarray,
    alpha: np.ndarray | None = None, suffix: tuple[np.ndarray, np.ndarray, float] | None = None, upto: int | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`front_back_pass` for the *head* of a T* part followed by a tail of tokens not given
    (``boundary < len(draft)``): ``suffix = (Φ, Ψ, mass)`` are the tail's truncated product
    ``Π (e^{-qt} + (1 - e^{-qt}) x)`` and its arrival companion at the nodes (``[G, K]``) and its
    draft mass; the tail's coins say "back". Returns ``(α, r, Φ_pre, Ψ_pre)``, the last two the
    prefix pair after the head (U blocked, coins applied): what the tail's law needs
    (:mod:`~multidraft.theory._wor_tail`). ``upto`` as in :func:`front_back_pass` (the prefix
    pair is then that after position ``upto``)."""
    fit = alpha is None
    given = np.zeros(len(draft)) if fit else np.ascontiguousarray(alpha, dtype=np.float64)
    count = len(nodes)
    if suffix is None:
        suffix_phi, suffix_psi, suffix_mass = np.zeros((count, k)), np.zeros((count, k)), 0.0
        suffix_phi[:, 0] = 1.0
    else:
        suffix_phi, suffix_psi, suffix_mass = suffix
    # Padded to whole vectors (module constant LANES): the last node repeated with weight 0.
    pad = -count % LANES
    nodes, weights = (np.concatenate([np.asarray(x, dtype=np.float64), np.full(pad, fill)]) for x, fill in ((nodes, nodes[-1]), (weights, 0.0)))
    suffix_phi, suffix_psi = (np.concatenate([np.transpose(x), np.repeat(np.transpose(x)[:, -1:], pad, axis=1)], axis=1) for x in (suffix_phi, suffix_psi))
    draft = np.ascontiguousarray(draft, dtype=np.float64)
    marks = suffix_marks(draft, int(boundary), int(k), nodes, suffix_phi, suffix_psi)
    alpha, r, pre_phi, pre_psi = _pass(
        np.ascontiguousarray(target, dtype=np.float64), draft, int(boundary), int(k), nodes, weights, given, fit, *marks,
        float(suffix_mass), len(draft) if upto is None else int(upto),
    )  # fmt: skip
    return alpha, r, np.ascontiguousarray(pre_phi[:, :count].T), np.ascontiguousarray(pre_psi[:, :count].T)


def suffix_marks(
    draft: np.ndarray, boundary: int, k: int, nodes: np.ndarray, suffix_phi: np.ndarray, suffix_psi: np.ndarray,
    light: float = LIGHT,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``mark_c = (Φ, Ψ)`` of ``Π_{j >= c·block} (e^{-q_j t} + (1 - e^{-q_j t}) x)`` times the
    given ``suffix`` pair, mod x^K (every token drafted and allowed; Ψ the arrival companion), at
    the pass's checkpoints c = 0..blocks (``[blocks + 1, K, G]`` each at the padded ``nodes``, the
    last the suffix alone), and the same product from ``boundary`` on (the whole T* part):
    ``(mark_Φ, mark_Ψ, tail_Φ, tail_Ψ)``.

    Each checkpoint is ``H ⊗ Λ``: ``H`` the suffix times the factors of the *heavy* tokens behind
    it (q t > ``light`` at the last node; q = 0 tokens, whose factor is 1, skipped), token by
    token, and ``Λ`` the product of the *light* ones from their power sums and mass
    (:mod:`~multidraft.theory.optimum._wor_moments`), each summed with its TwoSum error term:
    O(L) per token and O(G K L) per checkpoint instead of a factor per token and node. Its
    rounding error is at most ``(ROUNDING + (2 m t + 4) 2^-53) (|H| ⊗ Λ^abs)`` per coefficient
    (the expansion's bound per unit of its all-positive twin, and e^{-m t} for the light mass m);
    a checkpoint is kept only where that is at most :data:`MARK_TOLERANCE` of every coefficient.
    All coefficients are non-negative, and so is everything the pass builds from them, so every
    A_j, B_j then carries at most that relative error from it (the token-by-token product's own
    bound is ~n ulps, 5e-12 at n = 47,000). Elsewhere a checkpoint is the next one times its
    block's factors, token by token, as every checkpoint was before and is with
    :data:`MOMENT_MARKS` off (the same bits as that sweep). ``light``: the lightness threshold
    (the power sums' order stays :func:`~multidraft.theory.optimum._wor_moments.moment_order`'s,
    made for LIGHT; tests raise it for a twin). docs/optimal_verifier.md §10."""
    count, n = len(nodes), len(draft)
    mask, scale = light_split(draft, float(nodes[-1]), light)
    light_q = np.where(mask, draft, 0.0) if MOMENT_MARKS and k >= 2 else np.zeros(n)
    a = stirling_weights(moment_order(k), k)
    suffix_phi, suffix_psi = (np.ascontiguousarray(x, dtype=np.float64) for x in (suffix_phi, suffix_psi))
    _compiled()
    mark_phi, mark_psi = np.zeros((2, (n + _block_size(n) - 1) // _block_size(n) + 1, k, count))
    tail_phi, tail_psi = suffix_phi.copy(), suffix_psi.copy()
    _suffix_marks(draft, light_q, scale, a, int(boundary), int(k), np.asarray(nodes, dtype=np.float64), mark_phi, mark_psi, tail_phi, tail_psi)
    return mark_phi, mark_psi, tail_phi, tail_psi


#: Whether :func:`suffix_marks` takes the light tokens' product from their power sums (tests turn it
#: off for the token-by-token sweep, the reference).
MOMENT_MARKS = True
#: Largest rounding bound of a checkpoint's coefficient, relative to it, for its power-sum form.
MARK_TOLERANCE = 5e-14


def _compiled() -> None:
    """Compile the kernels below on first use; they call
    :mod:`~multidraft.theory.optimum._wor_moments`' ``_node_products`` and (inlined)
    ``_expm1_series``."""
    global _node_products, _expm1_series
    _wor_moments._compiled()
    _node_products, _expm1_series = _wor_moments._node_products, _wor_moments._expm1_series
    compile_in_place(globals(), KERNELS, inline=INLINED)


#: Nodes per vector register (8 doubles, AVX-512): the pass runs on whole vectors, the nodes
#: padded with copies of the last at weight 0 (each padded node adds +0.0 to the integrals, so
#: the same bits; a partial vector ran as a scalar loop, the cost of 5 more nodes at K = 8).
LANES = 8


# The kernels hold the truncated polynomials coefficient-major, ``[K, G]``: every loop over the
# nodes is then contiguous and compiles to vector instructions (the same operations on every
# node, in the same order, so the same numbers as a node-major loop).


def _decay(q, t, stay, drawn):
    """``stay = e^{-q t}``, ``drawn = 1 - e^{-q t}`` at every node (t increasing). Where
    x = qt <= 1/2 (``SERIES_LIMIT``), ``d = e^{-x} - 1`` by its Taylor series
    (:func:`~multidraft.theory.optimum._wor_moments._expm1_series`), ``drawn = -d`` and
    ``stay = 1 + d`` (absolute error an ulp): a loop without calls, which vectorises
    (``math.expm1`` per node was half the pass at K = 2); beyond, ``e^{-x}`` and ``-expm1(-x)``."""
    nodes = t.shape[0]
    small = nodes
    while small > 0 and q * t[small - 1] > SERIES_LIMIT:
        small -= 1
    for g in range(small):
        d = _expm1_series(-(q * t[g]))
        drawn[g] = -d
        stay[g] = 1.0 + d
    for g in range(small, nodes):
        x = q * t[g]
        drawn[g] = -math.expm1(-x)
        stay[g] = math.exp(-x)


def _factor(phi, psi, stay, drawn, q, allowed, k, tops):
    """``(Φ, Ψ) <- (Φ (a + b x), Ψ (a + b x) + Φ ρ)`` modulo x^K at every node, in place, for one
    token's factor: a = e^{-qt} (not drafted), b = c (1 - e^{-qt}) (drafted and allowed),
    ρ = c q e^{-qt} (arriving), c = ``allowed``; Φ, Ψ ``[K, G]``. Coefficients from the top,
    two per pass over the nodes (each reads the one below before that is updated); ``tops``
    (:func:`_pass_tops`) the top coefficient of each pass, read from an array: with an induction
    variable instead, LLVM (>= 17) widens the vector loop's runtime alias checks over the whole
    loop of passes, where the rows of one array always overlap, and every pass ran its scalar
    loop (K = 8, 45 nodes: 310 against 232 ns per factor; the same operations, the same bits)."""
    nodes = stay.shape[0]
    rate = allowed * q
    for top in range(tops.shape[0]):
        m = tops[top]
        phi_m, phi_1, phi_2, psi_m, psi_1, psi_2 = phi[m], phi[m - 1], phi[m - 2], psi[m], psi[m - 1], psi[m - 2]
        for g in range(nodes):
            a = stay[g]
            b = allowed * drawn[g]
            rho = rate * a
            psi_m[g] = psi_m[g] * a + psi_1[g] * b + phi_m[g] * rho
            phi_m[g] = phi_m[g] * a + phi_1[g] * b
            psi_1[g] = psi_1[g] * a + psi_2[g] * b + phi_1[g] * rho
            phi_1[g] = phi_1[g] * a + phi_2[g] * b
    phi_0, psi_0 = phi[0], psi[0]
    if k % 2 == 0:  # coefficient 1 is left after the passes
        phi_1, psi_1 = phi[1], psi[1]
        for g in range(nodes):
            a = stay[g]
            b = allowed * drawn[g]
            rho = rate * a
            psi_1[g] = psi_1[g] * a + psi_0[g] * b + phi_1[g] * rho
            phi_1[g] = phi_1[g] * a + phi_0[g] * b
            psi_0[g] = psi_0[g] * a + phi_0[g] * rho
            phi_0[g] = phi_0[g] * a
    else:
        for g in range(nodes):
            a = stay[g]
            psi_0[g] = psi_0[g] * a + phi_0[g] * (rate * a)
            phi_0[g] = phi_0[g] * a


def _coefficients(pre_phi, pre_psi, post_phi, post_psi, k, x1, x2):
    """``x1 = [x^{K-1}] Φ_pre Φ_post``, ``x2 = [x^{K-2}] (Ψ_pre Φ_post + Φ_pre Ψ_post)`` at every
    node (``[K, G]`` pairs), the terms added in increasing m, two per pass over the nodes."""
    nodes = x1.shape[0]
    x1[:] = 0.0
    x2[:] = 0.0
    for m in range(0, k - 1, 2):
        a, b, c, d = pre_phi[m], post_phi[k - 1 - m], pre_phi[m + 1], post_phi[k - 2 - m]
        for g in range(nodes):
            x1[g] = x1[g] + a[g] * b[g] + c[g] * d[g]
    if k % 2 == 1:
        a, b = pre_phi[k - 1], post_phi[0]
        for g in range(nodes):
            x1[g] += a[g] * b[g]
    for m in range(0, k - 2, 2):
        a, b, c, d = pre_psi[m], post_phi[k - 2 - m], pre_phi[m], post_psi[k - 2 - m]
        e, f, h, i = pre_psi[m + 1], post_phi[k - 3 - m], pre_phi[m + 1], post_psi[k - 3 - m]
        for g in range(nodes):
            x2[g] = x2[g] + (a[g] * b[g] + c[g] * d[g]) + (e[g] * f[g] + h[g] * i[g])
    if k % 2 == 0 and k >= 2:
        m = k - 2
        a, b, c, d = pre_psi[m], post_phi[0], pre_phi[m], post_psi[0]
        for g in range(nodes):
            x2[g] += a[g] * b[g] + c[g] * d[g]


def _coin(target, whole, last):
    """``α = clip((p - B)/(A - B), 0, 1)`` (A = ``whole``, B = ``last``): the coin that aims
    r = α A + (1 - α) B at p; 1 where A - B <= 1e-300 (then r = A = B)."""
    gap = whole - last
    if gap <= 1e-300:
        return 1.0
    return min(1.0, max(0.0, (target - last) / gap))


def _block_size(n):
    """Positions between the pass's checkpoints: ⌊√n⌋ + 1 (O(√n) pairs kept, O(n) work)."""
    return int(math.sqrt(n)) + 1


#: The unit roundoff 2^-53.
_UNIT = 2.0**-53


def _two_sum(sums, errors, l, x):
    """``sums[l] += x`` with the rounding error added to ``errors[l]`` (Knuth's TwoSum, exact
    for any order of magnitudes)."""
    total = sums[l] + x
    back = total - sums[l]
    errors[l] += (sums[l] - (total - back)) + (x - back)
    sums[l] = total


def _suffix_marks(q, light_q, scale, a, boundary, k, t, mark_phi, mark_psi, tail_phi, tail_psi):
    n, nodes = q.shape[0], t.shape[0]
    block = _block_size(n)
    blocks = (n + block - 1) // block
    tops = np.arange(k - 1, 1, -2)
    stay, drawn = np.empty(nodes), np.empty(nodes)
    heavy_phi, heavy_psi = tail_phi.copy(), tail_psi.copy()  # the suffix, then the heavy factors behind it
    mark_phi[blocks], mark_psi[blocks] = tail_phi, tail_psi
    # The light tokens' power sums ν_l = Σ (q/s)^l and mass, each with its TwoSum error term
    # (sums of ~10^4 terms: a plain sum's rounding grows with their count; the mass enters as
    # e^{-mass t} with mass t up to ~80)
    sums, errors, nu = np.zeros(a.shape[0] + 1), np.zeros(a.shape[0] + 1), np.zeros(a.shape[0])
    phi, psi, phi_abs, psi_abs = np.empty(k), np.empty(k), np.empty(k), np.empty(k)
    work = np.empty((4, a.shape[0] - 1))
    lights = 0
    for c in range(blocks - 1, -1, -1):
        lo, hi = c * block, min(c * block + block, n)
        for j in range(hi - 1, lo - 1, -1):
            if light_q[j] > 0.0:
                lights += 1
                ratio, power = light_q[j] / scale, 1.0
                for l in range(a.shape[0]):
                    _two_sum(sums, errors, l, power)
                    power *= ratio
                _two_sum(sums, errors, a.shape[0], light_q[j])
            elif q[j] > 0.0:
                _decay(q[j], t, stay, drawn)
                _factor(heavy_phi, heavy_psi, stay, drawn, q[j], 1.0, k, tops)
        kept = lights > 0
        for l in range(a.shape[0]):
            nu[l] = sums[l] + errors[l]
        light_mass = sums[a.shape[0]] + errors[a.shape[0]]
        for g in range(nodes):
            if not kept:
                break
            _node_products(nu, scale, light_mass, t[g], k, a, phi, psi, phi_abs, psi_abs, work)
            # ROUNDING per unit of the twins (the expansion), plus e^{-mass t}'s: (2 mass t + 4) u
            relative = ROUNDING + (2.0 * light_mass * t[g] + 4.0) * _UNIT
            for m in range(k):
                value_phi, value_psi, bound_phi, bound_psi = 0.0, 0.0, 0.0, 0.0
                for i in range(m + 1):
                    value_phi += heavy_phi[i, g] * phi[m - i]
                    value_psi += heavy_psi[i, g] * phi[m - i] + heavy_phi[i, g] * psi[m - i]
                    bound_phi += abs(heavy_phi[i, g]) * phi_abs[m - i]
                    bound_psi += abs(heavy_psi[i, g]) * phi_abs[m - i] + abs(heavy_phi[i, g]) * psi_abs[m - i]
                if not (relative * bound_phi <= MARK_TOLERANCE * value_phi and relative * bound_psi <= MARK_TOLERANCE * value_psi):
                    kept = False
                    break
                mark_phi[c, m, g], mark_psi[c, m, g] = value_phi, value_psi
        if not kept:  # the next checkpoint times the block's factors, token by token
            mark_phi[c], mark_psi[c] = mark_phi[c + 1], mark_psi[c + 1]
            for j in range(hi - 1, lo - 1, -1):
                _decay(q[j], t, stay, drawn)
                _factor(mark_phi[c], mark_psi[c], stay, drawn, q[j], 1.0, k, tops)
    if boundary < n:  # the whole T* part: its block's checkpoint after it, then its first tokens
        c = boundary // block
        tail_phi[:, :], tail_psi[:, :] = mark_phi[c + 1], mark_psi[c + 1]
        for j in range(min(c * block + block, n) - 1, boundary - 1, -1):
            _decay(q[j], t, stay, drawn)
            _factor(tail_phi, tail_psi, stay, drawn, q[j], 1.0, k, tops)


def _pass(p, q, boundary, k, t, w, alpha_in, fit, mark_phi, mark_psi, tail_phi, tail_psi, suffix_mass, upto):
    n, nodes = q.shape[0], t.shape[0]
    tops = np.arange(k - 1, 1, -2)  # the top coefficient of each two-coefficient pass of _factor
    # Suffix pairs of all free tokens at checkpoints every `block` positions (_suffix_marks), and
    # the pair of the whole T* part (positions >= boundary).
    block = _block_size(n)
    blocks = (n + block - 1) // block
    # Draft mass after each position inside its part, and the mass of U.
    after = np.zeros(n)
    mass = suffix_mass
    for j in range(n - 1, boundary - 1, -1):
        after[j] = mass
        mass += q[j]
    mass = 0.0
    for j in range(boundary - 1, -1, -1):
        after[j] = mass
        mass += q[j]
    mass_u = mass
    alpha, r = alpha_in.copy(), np.zeros(n)
    pre_phi, pre_psi = np.zeros((k, nodes)), np.zeros((k, nodes))
    pre_phi[0, :] = 1.0
    post_phi, post_psi = np.zeros((block + 1, k, nodes)), np.zeros((block + 1, k, nodes))
    # Per block: every token's decay and, per position, e^{-t · after[j]} (no later token of
    # its part drafted).
    stays, draws, blocked = np.empty((block, nodes)), np.empty((block, nodes)), np.empty((block, nodes))
    x1, x2, y1, y2 = np.empty(nodes), np.empty(nodes), np.empty(nodes), np.empty(nodes)
    for c in range(blocks):
        lo, hi = c * block, min(c * block + block, n)
        if lo >= upto:  # the laws asked for are done
            break
        post_phi[hi - lo], post_psi[hi - lo] = mark_phi[c + 1], mark_psi[c + 1]
        for j in range(hi - 1, lo - 1, -1):
            i = j - lo
            _decay(q[j], t, stays[i], draws[i])
            if j == hi - 1 or j == boundary - 1:  # restart the running product exactly
                for g in range(nodes):
                    blocked[i, g] = math.exp(-after[j] * t[g])
            else:
                here, later, later_stay = blocked[i], blocked[i + 1], stays[i + 1]
                for g in range(nodes):
                    here[g] = later[g] * later_stay[g]
            if j > lo:
                post_phi[i], post_psi[i] = post_phi[i + 1], post_psi[i + 1]
                _factor(post_phi[i], post_psi[i], stays[i], draws[i], q[j], 1.0, k, tops)
        for j in range(lo, min(hi, upto)):
            i = j - lo
            if j == boundary:  # T*: the event D ∩ U = ∅ blocks every U token
                pre_psi[:, :] = 0.0
                pre_phi[:, :] = 0.0
                for g in range(nodes):
                    pre_phi[0, g] = math.exp(-mass_u * t[g])
            if q[j] > 0:
                # y_j drafted, the K-th arrival at t: with every later token of the whole
                # suffix free (x1, x2), or with none of its part drafted (y1, y2)
                _coefficients(pre_phi, pre_psi, post_phi[i + 1], post_psi[i + 1], k, x1, x2)
                if j < boundary:
                    _coefficients(pre_phi, pre_psi, tail_phi, tail_psi, k, y1, y2)
                else:  # the empty suffix (1, 0): the same sums without their zero terms
                    y1[:] = pre_phi[k - 1]
                    if k > 1:
                        y2[:] = pre_psi[k - 2]
                    else:
                        y2[:] = 0.0
                whole, last = 0.0, 0.0
                for g in range(nodes):  # indexed, not through row views (5% of a pass at K = 2)
                    whole += w[g] * 1.0 * (q[j] * stays[i, g] * x1[g] + draws[i, g] * x2[g])
                    last += w[g] * blocked[i, g] * (q[j] * stays[i, g] * y1[g] + draws[i, g] * y2[g])
                if fit:
                    alpha[j] = _coin(p[j], whole, last)
                r[j] = alpha[j] * whole + (1.0 - alpha[j]) * last
            _factor(pre_phi, pre_psi, stays[i], draws[i], q[j], 1.0 - alpha[j], k, tops)
    if boundary >= n:  # no T* token given: the prefix pair of an empty head (U blocked)
        pre_psi[:, :] = 0.0
        pre_phi[:, :] = 0.0
        for g in range(nodes):
            pre_phi[0, g] = math.exp(-mass_u * t[g])
    return alpha, r, pre_phi, pre_psi


#: The compiled kernels of this module, and those copied into the pass where it calls them
#: (about ten calls per token, each passing arrays).
KERNELS = ("_decay", "_factor", "_coefficients", "_coin", "_block_size", "_two_sum", "_suffix_marks", "_pass")
INLINED = frozenset({"_decay", "_factor", "_coefficients", "_coin", "_block_size", "_two_sum"})
