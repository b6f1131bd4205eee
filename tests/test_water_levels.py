"""The water levels of r* (issue 34, item 5a), against bisection on their defining equations.

r* = min(p, λq) on U with Σ_U r* = h(U) and max(p, μq) on T* with Σ_{T*} r* = q(T*)^K (iid) or
g(T*) (without replacement). The iid curtain's compiled ``pool_in_t`` took μ from the last
token's breakpoint when every T* token is in the pool (μ above every p/q of T*): it left that
token free (r = p) and gave the rest of T* the remainder, a law with the same acceptance but
not r*. The regression instance below is the first one a random search found.
"""

import numpy as np
import pytest

from multidraft.theory.verifier._curtain_rule import fit_curtain_rule
from multidraft.theory.verifier._wor_curtain import water_level


def _bisect(values, masses, total, clip):
    """λ with Σ clip(v, λ m) = total by 200 halvings (inf / 0 where no root)."""
    function = np.minimum if clip == "min" else np.maximum
    if clip == "min" and values.sum() <= total:
        return np.inf
    if clip == "max" and values.sum() >= total:
        return 0.0
    lo, hi = 0.0, 1.0
    while function(values, hi * masses).sum() < total:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if function(values, mid * masses).sum() < total else (lo, mid)
    return hi


def _iid_r_star(p, q, k, cut):
    """r* of the iid optimum for the cut T*, from bisected water levels."""
    r = np.zeros(len(p))
    u = np.setdiff1d(np.arange(len(p)), cut)
    if len(cut):
        mu = _bisect(p[cut], q[cut], q[cut].sum() ** k, "max")
        r[cut] = np.maximum(p[cut], mu * q[cut])
    if len(u):
        lam = _bisect(p[u], q[u], 1.0 - q[cut].sum() ** k, "min")
        r[u] = np.minimum(p[u], lam * q[u])
    return r


def test_iid_curtain_law_is_r_star_when_every_cut_token_is_pooled_issue_34():
    p = np.array([0.01484366, 0.22503853, 0.19196896, 0.27095404, 0.29719481])
    q = np.array([0.06112526, 0.0205659, 0.00281326, 0.34241161, 0.57308396])
    p, q = p / p.sum(), q / q.sum()
    rule = fit_curtain_rule(p, q, 3)
    cut = np.sort(rule.certificate)
    np.testing.assert_array_equal(cut, [0, 3, 4])
    mu = _bisect(p[cut], q[cut], q[cut].sum() ** 3, "max")
    assert mu > (p[cut] / q[cut]).max()  # every T* token is in the pool
    np.testing.assert_allclose(rule.selection_law, _iid_r_star(p, q, 3, cut), rtol=0, atol=1e-12)


def test_iid_curtain_law_is_r_star_on_random_instances():
    rng = np.random.default_rng(34)
    pooled = 0
    for _ in range(400):
        n, k = int(rng.integers(2, 8)), int(rng.integers(2, 6))
        p, q = rng.dirichlet(np.full(n, 0.5)), rng.dirichlet(np.full(n, 0.5))
        rule = fit_curtain_rule(p, q, k)
        cut = np.sort(rule.certificate)
        if len(cut):
            pooled += _bisect(p[cut], q[cut], q[cut].sum() ** k, "max") > (p[cut] / q[cut]).max()
        np.testing.assert_allclose(rule.selection_law, _iid_r_star(p, q, k, cut), rtol=0, atol=1e-9)
    assert pooled >= 20  # the case of the regression is well represented


@pytest.mark.parametrize("clip", ["min", "max"])
def test_wor_water_level_matches_bisection(clip):
    rng = np.random.default_rng(5)
    for _ in range(300):
        size = int(rng.integers(1, 8))
        values, masses = rng.dirichlet(np.full(size, 0.5)) * rng.uniform(0.1, 1.0), rng.dirichlet(np.ones(size)) * rng.uniform(0.1, 1.0)
        order = np.argsort(values / masses, kind="stable")
        values, masses = values[order], masses[order]
        total = float(rng.uniform(0.0, 1.0))
        expected = _bisect(values, masses, total, clip)
        level = water_level(values, masses, total, clip)
        if np.isinf(expected):
            assert np.isinf(level)
        else:
            np.testing.assert_allclose(level, expected, rtol=1e-9, atol=1e-12)


def test_breakpoint_sums_are_the_numpy_expression_and_sums_including_the_token_are_caught():
    """``water_level``'s sums at the breakpoints (issue 34, item 3): the compiled pass gives the
    bits of ``V_j + d_j (M - M_j)`` and ``d_j M_j + (V - V_j)`` with ``V_j = np.cumsum(v) - v``;
    sums that include token j itself are caught."""
    from multidraft.theory._numba import compile_in_place
    from multidraft.theory.verifier import _wor_curtain

    compile_in_place(vars(_wor_curtain), _wor_curtain.KERNELS)
    rng = np.random.default_rng(9)
    caught = 0
    for trial in range(200):
        n = int(rng.integers(1, 400))
        values, masses = rng.dirichlet(np.full(n, 0.4)), rng.dirichlet(np.full(n, 0.6)) + 1e-12
        order = np.argsort(values / masses, kind="stable")
        values, masses = values[order], masses[order]
        density = values / masses
        value_before, mass_before = np.cumsum(values) - values, np.cumsum(masses) - masses
        mass_total, value_total = float(masses.sum()), float(values.sum())
        expected = {
            True: value_before + density * (mass_total - mass_before),
            False: density * mass_before + (value_total - value_before),
        }
        for clip_min in (True, False):
            out = np.empty(n)
            _wor_curtain.breakpoint_sums(values, masses, value_total, mass_total, clip_min, out)
            np.testing.assert_array_equal(out, expected[clip_min])
            twin = np.cumsum(values) + density * (mass_total - np.cumsum(masses))  # token j counted as kept
            caught += clip_min and not np.array_equal(out, twin)
    assert caught >= 190
