"""Exact checks of every registered scheme (STYLE.md item 8: one run over the whole registry).

For each scheme and each law it supports, on hypothesis instances with n <= 6, K <= 3 (zeros
and ties included):

* losslessness: the enumerated output distribution equals the target (exactly in Fractions
  where the scheme allows, else within 1e-12);
* the closed-form acceptance equals the enumerated ``P(Y ∈ set(X))`` (two routes);
* acceptance <= P* (min-cut, an independent computation), with equality for the schemes that
  say they are optimal; SpecTr >= (1 - 1/e) P*; SpecInfer with K = 1 == single == Σ min(p, q);
* the other facts a scheme states in its ``capabilities``, law by law: ``any_vocabulary`` (runs
  at n = 3000, where enumerating tuples is refused; for the other laws it must refuse there) and
  ``imports_lp`` (running it imports :mod:`multidraft.lp`, and only then).

Everything is read off the scheme classes in ``multidraft.schemes.SCHEMES``: a new scheme is
tested by registering it (tests/test_scheme_registration.py runs this module with one registered
from outside the package).

Bad inputs are checked in a table. The deliberately wrong variants live in
``tests/test_schemes_statistical.py`` next to the statistical checks they must also fail.
"""

from __future__ import annotations

import math
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from strategies import dirichlet_distributions, draft_laws, exact_distributions

from multidraft.schemes import SCHEMES, Capabilities, Scheme, Selection, get_scheme, schemes_for
from multidraft.lp._solve import SolverError
from multidraft.schemes._importance import ImportanceScheme
from multidraft.theory import IID, Deterministic, Greedy, Independent, WithoutReplacement, optimal_acceptance
from multidraft.theory.laws import LAWS

#: Largest K the exact checks enumerate (the tuples grow as n^K).
MAX_K = 3


def _share(fraction: float) -> settings:
    """The active hypothesis profile (conftest.py) with ``fraction`` of its example budget: the
    registry tests run once per scheme, so each takes a share (``HYPOTHESIS_PROFILE=dev`` raises
    them all)."""
    profile = settings.default
    return settings(
        profile,
        max_examples=max(1, round(profile.max_examples * fraction)),
        suppress_health_check=[*profile.suppress_health_check, HealthCheck.filter_too_much],
    )


SETTINGS = _share(0.4)
#: Schemes that solve an LP per example get fewer examples.
LP_SETTINGS = _share(0.15)


def ks_to_check(cls: type[Scheme]) -> range:
    """The scheme's K range, capped at ``MAX_K``."""
    low, high = cls.capabilities.k_range
    return range(low, min(high or MAX_K, MAX_K) + 1)


def _kinds(laws) -> tuple[str, ...]:
    """The kinds (``law.name``) of a tuple of law classes."""
    return tuple(cls.name for cls in laws)


#: Every (scheme, law kind) pair of the registry.
PAIRS = [(name, law) for name, cls in SCHEMES.items() for law in _kinds(cls.capabilities.laws)]


@st.composite
def instances(draw, scheme_name: str, law_name: str | None = None):
    """``(target, law)`` with a law the scheme supports (``law_name`` if given), n <= 6,
    K <= 3, exact probabilities."""
    cls = SCHEMES[scheme_name]
    law_name = law_name or draw(st.sampled_from(_kinds(cls.capabilities.laws)))
    k = draw(st.sampled_from(ks_to_check(cls)))
    n = draw(st.integers(max(2, k), 6 if law_name not in _kinds(cls.capabilities.imports_lp) or k < 3 else 4))
    target = list(draw(exact_distributions(n)))
    law = draw(draft_laws(law_name, n, k))
    assume(cls().supports(law))
    return target, law


def _check_lossless(name: str, target, law) -> None:
    scheme = get_scheme(name)
    if scheme.capabilities.exact_output:
        out = scheme.output_distribution(target, law, exact=True)
        assert out.shape == (law.n,)
        assert list(out) == list(target)
    else:
        out = scheme.output_distribution(target, law)
        np.testing.assert_allclose(out, np.array(target, dtype=float), rtol=0, atol=1e-12)


def _check_acceptance(name: str, target, law) -> None:
    scheme = get_scheme(name)
    capabilities = scheme.capabilities
    optimum = optimal_acceptance(target, law, exact=True).value
    if capabilities.exact_output:
        plan = scheme.prepare(target, law, exact=True)
        value = plan.acceptance
        assert isinstance(value, Fraction)
        assert value == plan.enumerated_acceptance()
        assert value <= optimum
        if capabilities.optimal:
            assert value == optimum
        return
    plan = scheme.prepare(target, law)
    value = plan.acceptance
    np.testing.assert_allclose(value, plan.enumerated_acceptance(), rtol=0, atol=1e-7)
    assert value <= float(optimum) + 1e-9
    if capabilities.optimal:
        np.testing.assert_allclose(value, float(optimum), rtol=0, atol=1e-7)
    if capabilities.exact_acceptance:  # an exact acceptance with float (LP) weights
        exact = scheme.acceptance(target, law, exact=True)
        assert exact == optimum if capabilities.optimal else exact <= optimum


def _register(name: str):
    fast = LP_SETTINGS if SCHEMES[name].capabilities.imports_lp else SETTINGS

    @fast
    @given(instances(name))
    def lossless(case):
        _check_lossless(name, *case)

    @fast
    @given(instances(name))
    def acceptance(case):
        _check_acceptance(name, *case)

    return lossless, acceptance


@pytest.mark.parametrize("name", list(SCHEMES))
def test_output_distribution_is_the_target(name):
    _register(name)[0]()


@pytest.mark.parametrize("name", list(SCHEMES))
def test_acceptance_two_routes_and_bounded_by_optimum(name):
    _register(name)[1]()


def test_strategies_reach_zeros_ties_and_unit_optimum():
    """The instance strategy produces zero target entries, ties, and P* = 1 cases."""
    from hypothesis import find

    find(instances("specinfer"), lambda c: any(x == 0 for x in c[0]) and isinstance(c[1], IID))
    find(instances("specinfer"), lambda c: len(set(c[0])) < len(c[0]))
    find(
        instances("specinfer"),
        lambda c: c[1].k == 2 and optimal_acceptance(c[0], c[1], exact=True).value == 1 and c[0] != list(c[1].draft),
        settings=settings(max_examples=2000, database=None),
    )


#: A vocabulary where every law's tuples exceed the enumeration limit for K >= 2 (3000^2 > 2e6).
LARGE_N = 3000


def _large_case(data, scheme: Scheme, law_name: str, k: int):
    law = data.draw(draft_laws(law_name, LARGE_N, k, dirichlet_distributions))
    return data.draw(dirichlet_distributions(LARGE_N)), law


@pytest.mark.parametrize(
    "name, law_name", [(name, law) for name, law in PAIRS if law in _kinds(SCHEMES[name].capabilities.any_vocabulary)]
)
def test_any_vocabulary_laws_run_at_a_large_vocabulary(name, law_name):
    """``any_vocabulary``: acceptance and select at n = 3000 for every tested K, with
    acceptance <= P* (= P* for an optimal scheme) where the sorted scan gives P*."""
    scheme = get_scheme(name)

    @settings(SETTINGS, max_examples=2)
    @given(st.data())
    def run(data):
        for k in ks_to_check(type(scheme)):
            target, law = _large_case(data, scheme, law_name, k)
            value = scheme.acceptance(target, law)
            assert 0.0 <= value <= 1.0
            if law.has_prefix_structure:
                optimum = optimal_acceptance(target, law).value
                assert value <= optimum + 1e-9
                if scheme.capabilities.optimal:
                    np.testing.assert_allclose(value, optimum, rtol=0, atol=1e-9)
            rng = np.random.default_rng(0)
            selection = scheme.select(target, law, law.sample(rng), rng)
            assert 0 <= selection.token < LARGE_N

    run()


@pytest.mark.parametrize(
    "name, law_name", [(name, law) for name, law in PAIRS if law not in _kinds(SCHEMES[name].capabilities.any_vocabulary)]
)
def test_other_laws_refuse_a_large_vocabulary(name, law_name):
    """For a law outside ``any_vocabulary`` the acceptance or the sampler enumerates
    tuples or solves an LP over them: at n = 3000 and the largest tested K it refuses, naming
    the limit, or its solver fails the re-check (a clear error either way, never a number)."""
    scheme = get_scheme(name)

    @settings(SETTINGS, max_examples=1)
    @given(st.data())
    def run(data):
        target, law = _large_case(data, scheme, law_name, ks_to_check(type(scheme))[-1])
        rng = np.random.default_rng(0)
        with pytest.raises((ValueError, SolverError), match="limit|re-check"):
            scheme.acceptance(target, law)
            scheme.select(target, law, law.sample(rng), rng)

    run()


def test_imports_lp_is_exactly_the_pairs_that_import_the_lp_layer():
    """``imports_lp`` against what running a scheme imports: acceptance and select on one small
    instance per (scheme, law), in a fresh interpreter with ``multidraft.lp`` unloaded before each."""
    import json
    import pickle
    import subprocess

    @settings(SETTINGS, max_examples=1)
    @given(st.data())
    def draw_cases(data):
        cases[:] = [(name, *data.draw(instances(name, law))) for name, law in PAIRS]

    cases: list = []
    draw_cases()
    code = f"""
import json, pickle, sys
sys.path.insert(0, {str(Path(__file__).parent)!r})
import numpy as np
from multidraft.schemes import SCHEMES, get_scheme, register_scheme
from registered_scheme import FirstDraft
if {"first-draft" in SCHEMES!r}:  # registered in this process (pytest -p registered_scheme): there too
    register_scheme(FirstDraft)
imported = []
for name, target, law in pickle.load(sys.stdin.buffer):
    for module in [m for m in sys.modules if m == "multidraft.lp" or m.startswith("multidraft.lp.")]:
        del sys.modules[module]
    scheme, rng = get_scheme(name), np.random.default_rng(0)
    scheme.acceptance(target, law)
    scheme.select(target, law, law.sample(rng), rng)
    imported.append([name, law.name, "multidraft.lp" in sys.modules])
print(json.dumps(imported))
"""
    result = subprocess.run([sys.executable, "-c", code], input=pickle.dumps(cases), capture_output=True, check=True)
    imported = json.loads(result.stdout.decode().splitlines()[-1])  # the last line: solvers may print
    assert imported == [[name, law, law in _kinds(SCHEMES[name].capabilities.imports_lp)] for name, law in PAIRS]


# ----------------------------------------------------------------------------------------------
# Named reference cases.


def test_uniform_draft_example_specinfer_falls_short_of_unit_optimum():
    """Khisti et al.: q uniform, p = (1/3, 1/6, 1/2), K = 2 -> P* = 1; SpecInfer gets
    1 - (1 - 5/6)(1 - 1/3) = 8/9 (r_1 = (0, 0, 1))."""
    law = IID(["1/3", "1/3", "1/3"], 2)
    target = ["1/3", "1/6", "1/2"]
    assert get_scheme("optimal").acceptance(target, law, exact=True) == 1
    assert get_scheme("specinfer").acceptance(target, law, exact=True) == Fraction(8, 9)


def test_specinfer_with_one_draft_is_single_is_total_variation():
    rng = np.random.default_rng(3)
    for _ in range(20):
        p, q = rng.dirichlet(np.ones(7)), rng.dirichlet(np.ones(7) * 0.5)
        law = IID(q, 1)
        expected = np.minimum(p, q).sum()
        np.testing.assert_allclose(get_scheme("specinfer").acceptance(p, law), expected, rtol=0, atol=1e-14)
        np.testing.assert_allclose(get_scheme("single").acceptance(p, law), expected, rtol=0, atol=1e-14)
        np.testing.assert_allclose(get_scheme("spectr").acceptance(p, law), expected, rtol=0, atol=1e-12)


def test_specinfer_telescoped_acceptance_equals_the_published_product():
    """The telescoped form 1 - m_K (schemes/specinfer.py) against the published
    ``1 - Π_i (1 - Σ_y min(r_{i-1}(y), q_i(y)))`` with normalised residuals, at a vocabulary
    size enumeration cannot reach; iid, independent and a p = q case (zero-mass residual)."""
    from multidraft.schemes.specinfer import rrs_acceptance

    def published(p, drafts):
        residual, miss = p, 1.0
        for q in drafts:
            miss *= 1.0 - np.minimum(residual, q).sum()
            rest = np.maximum(residual - q, 0.0)
            residual = rest / rest.sum() if rest.sum() > 0 else residual
        return 1.0 - miss

    rng = np.random.default_rng(11)
    scheme = get_scheme("specinfer")
    n = 5000
    for k in (1, 2, 3, 5, 8):
        p = rng.dirichlet(np.ones(n) * 0.2)
        drafts = [rng.dirichlet(np.ones(n) * 0.2) for _ in range(k)]
        iid = scheme.acceptance(p, IID(drafts[0], k))
        np.testing.assert_allclose(iid, published(p, [drafts[0]] * k), rtol=0, atol=1e-13)
        independent = scheme.acceptance(p, Independent(drafts))
        np.testing.assert_allclose(independent, published(p, drafts), rtol=0, atol=1e-13)
    assert scheme.acceptance(p, IID(p, 3)) == 1.0
    assert rrs_acceptance(np.array([0.5, 0.5]), [np.array([0.0, 1.0])] * 2) == 0.5


def test_spectr_within_one_minus_inverse_e_of_optimum():
    rng = np.random.default_rng(4)
    bound = 1 - 1 / math.e
    for k in (2, 3, 4, 8):
        for _ in range(10):
            p, q = rng.dirichlet(np.ones(20) * 0.3), rng.dirichlet(np.ones(20) * 0.3)
            law = IID(q, k)
            value = get_scheme("spectr").acceptance(p, law)
            optimum = optimal_acceptance(p, law).value
            assert bound * optimum - 1e-12 <= value <= optimum + 1e-12
            # The published draft acceptance is a lower bound on P(Y ∈ set(X)).
            assert get_scheme("spectr").draft_acceptance(p, law) <= value + 1e-15


def test_spectr_rho_solves_the_validity_equation():
    from multidraft.schemes.spectr import RHO_TOLERANCE, _beta, _some_pass, spectr_rho

    def valid(p, q, k, rho):
        beta = _beta(p, q, rho)
        return _some_pass(beta, k) <= rho * beta

    rng = np.random.default_rng(5)
    for k in (2, 3, 5):
        p, q = rng.dirichlet(np.ones(30)), rng.dirichlet(np.ones(30))
        rho = spectr_rho(p, q, k)
        beta = np.minimum(q, p / rho).sum()
        assert 1 <= rho <= k
        np.testing.assert_allclose(1 - (1 - beta) ** k, rho * beta, rtol=1e-12)
    # Valid as evaluated, and the smallest such up to the tolerance: a step of 2 RHO_TOLERANCE
    # below is invalid (the gap increases in ρ), for sparse, peaked and disjoint instances.
    for trial in range(60):
        n, k = int(rng.integers(2, 400)), int(rng.integers(1, 9))
        p, q = rng.dirichlet(np.full(n, [0.05, 0.5, 2.0][trial % 3])), rng.dirichlet(np.full(n, 0.3))
        rho = spectr_rho(p, q, k)
        assert valid(p, q, k, rho)
        assert rho == 1.0 or not valid(p, q, k, rho * (1 - 2 * RHO_TOLERANCE))
    assert spectr_rho(np.array([1.0, 0.0]), np.array([0.0, 1.0]), 3) == 1.0  # disjoint: β = 0 at every ρ


def test_greedy_scheme_reaches_the_greedy_optimum_and_beats_nothing_else():
    rng = np.random.default_rng(6)
    for k in (1, 2, 3, 5):
        p, q = rng.dirichlet(np.ones(12)), rng.dirichlet(np.ones(12))
        law = Greedy(q, k)
        value = get_scheme("greedy").acceptance(p, law)
        np.testing.assert_allclose(value, optimal_acceptance(p, law).value, rtol=0, atol=1e-14)
        tilde = law.residual
        np.testing.assert_allclose(value, p[law.fixed].sum() + np.minimum(p, tilde).sum(), rtol=0, atol=1e-15)


def test_rrs_wor_beats_rrs_with_replacement_on_a_peaked_draft():
    """Without replacement a K = 2 tree never wastes its second draft on a repeat."""
    target = ["1/2", "1/2", "0"]
    q = ["3/4", "1/4", "0"]
    wor = get_scheme("rrs-wor").acceptance(target, WithoutReplacement(q, 2), exact=True)
    rep = get_scheme("specinfer").acceptance(target, IID(q, 2), exact=True)
    assert wor == 1 and rep == Fraction(13, 16)


def test_rrs_wor_two_draft_closed_form_matches_enumeration():
    """The O(n log n) K = 2 formula (piecewise-linear f) against the prefix enumeration."""
    rng = np.random.default_rng(9)
    scheme = get_scheme("rrs-wor")
    for _ in range(100):
        n = int(rng.integers(2, 9))
        p, q = rng.dirichlet(np.ones(n) * 0.5), rng.dirichlet(np.ones(n) * 0.5)
        p[rng.integers(n)] = 0.0
        p /= p.sum()
        law = WithoutReplacement(q, 2)
        np.testing.assert_allclose(scheme.acceptance(p, law), scheme.enumerated_acceptance(p, law), rtol=0, atol=1e-13)
    # At a real vocabulary size, where enumeration is out of reach.
    n = 49152
    p, q = rng.dirichlet(np.ones(n) * 0.1), rng.dirichlet(np.ones(n) * 0.1)
    value = scheme.acceptance(p, WithoutReplacement(q, 2))
    assert np.minimum(p, q).sum() <= value <= optimal_acceptance(p, WithoutReplacement(q, 2)).value + 1e-9


def test_selected_acceptance_is_a_lower_bound_reached_by_the_optimal_weights():
    rng = np.random.default_rng(10)
    for _ in range(5):
        p, q = rng.dirichlet(np.ones(6) * 0.5), rng.dirichlet(np.ones(6) * 0.5)
        law = IID(q, 2)
        optimum = optimal_acceptance(p, law).value
        for name in schemes_for(law):
            if not issubclass(SCHEMES[name], ImportanceScheme):
                continue
            scheme = get_scheme(name, **({"s": 2} if name == "truncated-lp" else {}))  # s < n: truncation bites
            selected = scheme.selected_acceptance(p, law)
            assert selected <= scheme.acceptance(p, law) + 1e-12 <= optimum + 2e-9
            if scheme.capabilities.optimal:
                np.testing.assert_allclose(selected, optimum, rtol=0, atol=1e-7)


def test_conditional_distribution_rows_are_distributions_and_average_to_target():
    law = IID([0.5, 0.3, 0.2], 2)
    target = [0.2, 0.3, 0.5]
    scheme = get_scheme("specinfer")
    tuples, probs = law.enumerate()
    conditional = scheme.conditional_distribution(target, law, tuples)
    assert conditional.shape == (len(tuples), 3)
    np.testing.assert_allclose(conditional.sum(axis=1), 1.0, rtol=0, atol=1e-14)
    np.testing.assert_allclose(probs @ conditional, target, rtol=0, atol=1e-14)
    one = scheme.conditional_distribution(target, law, [0, 1])
    assert one.shape == (3,)


def test_select_returns_a_selection_consistent_with_the_drafts():
    law = IID([0.5, 0.3, 0.2], 2)
    rng = np.random.default_rng(0)
    for name in schemes_for(law):
        selection = get_scheme(name).select([0.2, 0.3, 0.5], law, [1, 2], rng)
        assert isinstance(selection, Selection)
        assert selection.accepted == (selection.token in (1, 2))
        if selection.accepted:
            assert [1, 2][selection.position] == selection.token
        else:
            assert selection.position is None


#: The schemes the package has shipped, in registry order (later schemes are added after them).
BUILT_IN = [
    "single", "specinfer", "rrs-wor", "spectr", "is-lp", "truncated-lp", "multistage", "optimal",
    "deterministic", "greedy",
]  # fmt: skip


def test_schemes_for_each_law():
    def built_in(law):
        return [name for name in schemes_for(law) if name in BUILT_IN]

    assert built_in(IID([0.5, 0.5], 1)) == ["single", "specinfer", "spectr", "is-lp", "truncated-lp", "optimal"]
    assert built_in(WithoutReplacement([0.5, 0.5], 2)) == ["rrs-wor", "is-lp", "optimal"]
    assert built_in(Greedy([0.5, 0.3, 0.2], 2)) == ["optimal", "greedy"]
    assert built_in(Deterministic([0, 1], 3)) == ["specinfer", "optimal", "deterministic"]
    assert built_in(Independent([[0.5, 0.5]] * 3)) == ["specinfer", "is-lp", "truncated-lp", "multistage", "optimal"]
    law = IID([0.5, 0.5], 3)
    assert schemes_for(law) == [n for n, cls in SCHEMES.items() if IID in cls.capabilities.laws and cls.supports_k(3)]


def test_scheme_k_rules():
    assert [SCHEMES[name].k_rule() for name in ("single", "truncated-lp", "multistage", "specinfer")] == [
        "K = 1", "", "K >= 2", "",
    ]  # fmt: skip
    for cls in SCHEMES.values():
        low, high = cls.capabilities.k_range
        assert 1 <= low and (high is None or low <= high)
        assert not cls.supports_k(low - 1) and cls.supports_k(low)
        assert high is None or (cls.supports_k(high) and not cls.supports_k(high + 1))


def test_registry_names_and_flags():
    assert [name for name in SCHEMES if name in BUILT_IN] == BUILT_IN
    for name, cls in SCHEMES.items():
        scheme = get_scheme(name)
        assert isinstance(scheme, Scheme) and scheme.name == name
        assert isinstance(cls.capabilities, Capabilities)
        assert set(cls.capabilities.laws) <= set(LAWS.values())
    exact = {name for name, cls in SCHEMES.items() if cls.capabilities.exact_acceptance}
    assert {"optimal", "single", "specinfer", "rrs-wor"} <= exact
    batch = {name for name, cls in SCHEMES.items() if cls.has_batch_form()}
    assert {"single", "specinfer", "rrs-wor", "spectr", "truncated-lp", "optimal"} <= batch
    assert not {"is-lp", "multistage", "deterministic", "greedy"} & batch


def test_importing_schemes_loads_neither_torch_nor_cvxpy():
    import subprocess

    code = "import sys, multidraft.schemes; print('torch' in sys.modules, 'cvxpy' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.split() == ["False", "False"]


def test_every_public_name_imports():
    import multidraft.schemes as module

    for name in module.__all__:
        assert getattr(module, name) is not None


# ----------------------------------------------------------------------------------------------
# Bad inputs.

_IID = IID([0.5, 0.5, 0.0], 2)
_BAD = [
    ("draft-outside-support", "specinfer", _IID, [0, 2], "probability zero"),
    ("token-out-of-range", "specinfer", _IID, [0, 3], r"must lie in \[0, 3\)"),
    ("negative-token", "single", IID([0.5, 0.5, 0.0], 1), [-1], r"must lie in \[0, 3\)"),
    ("too-few-drafts", "specinfer", _IID, [0], "expected 2 draft tokens"),
    ("too-many-drafts", "spectr", _IID, [0, 1, 1], "expected 2 draft tokens"),
    ("float-tokens", "specinfer", _IID, [0.0, 1.0], "must be integers"),
    ("wor-repeat", "rrs-wor", WithoutReplacement([0.5, 0.5, 0.0], 2), [1, 1], "probability zero"),
    ("greedy-wrong-fixed", "greedy", Greedy([0.5, 0.3, 0.2], 2), [1, 2], "probability zero"),
]


@pytest.mark.parametrize("name, scheme, law, drafts, message", _BAD, ids=[b[0] for b in _BAD])
def test_bad_drafts(name, scheme, law, drafts, message):
    with pytest.raises(ValueError, match=message):
        get_scheme(scheme).select([0.2, 0.3, 0.5], law, drafts, np.random.default_rng(0))


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: get_scheme("spectr").acceptance([0.5, 0.5], WithoutReplacement([0.5, 0.5], 2)), "supports the iid laws; got the wor law"),
        (lambda: get_scheme("single").acceptance([0.5, 0.5], IID([0.5, 0.5], 2)), r"\(K = 1\); got the iid law with k=2"),
        (lambda: get_scheme("multistage").acceptance([0.5, 0.5], IID([0.5, 0.5], 1)), r"\(K >= 2\)"),
        (lambda: get_scheme("specinfer").acceptance([0.5, 0.5], IID([0.2, 0.3, 0.5], 2)), "does not match the draft law's vocabulary n=3"),
        (lambda: get_scheme("specinfer").acceptance([0.5, 0.6], IID([0.5, 0.5], 2)), "target: entries sum"),
        (lambda: get_scheme("spectr").acceptance(["1/2", "1/2"], IID(["1/2", "1/2"], 2), exact=True), "no exact"),
        (lambda: get_scheme("optimal").output_distribution(["1/2", "1/2"], IID(["1/2", "1/2"], 2), exact=True), "no exact"),
        (lambda: get_scheme("specinfer").acceptance(["1/2", "1/2"], IID([0.5, 0.5], 2), exact=True), "exact mode needs"),
        (lambda: get_scheme("specinfer").acceptance([0.5, 0.5], IID([0.5, 0.5], 2), exact=True), "floats carry"),
        (lambda: get_scheme("nope"), "unknown name 'nope'; choose one of single, specinfer"),
        (lambda: get_scheme("specinfer", s=3), "unknown options"),
        (lambda: get_scheme("truncated-lp", s=0), "s: the number of tokens kept"),
        (lambda: get_scheme("truncated-lp", rank_key="size"), "rank_key: unknown key 'size'"),
        (lambda: get_scheme("multistage", s=-1), "s: the number of tokens kept"),
        (lambda: get_scheme("specinfer").select([0.5, 0.5], IID([0.5, 0.5], 2), [[0, 1]], np.random.default_rng(0)), "expected one tuple"),
        (lambda: get_scheme("specinfer").sample([0.5, 0.5], IID([0.5, 0.5], 2), [[0, 1]], 0), "numpy.random.Generator"),
        (lambda: get_scheme("deterministic").select_batch(None, None, None, None), "no batched torch form; schemes with one: single"),
        (lambda: get_scheme("truncated-lp").acceptance(np.full(1500, 1 / 1500), IID(np.full(1500, 1 / 1500), 2)), "selected_acceptance"),
    ],
    ids=[
        "unsupported-law", "single-needs-k1", "multistage-needs-k2", "target-length", "target-sum",
        "exact-not-capable", "exact-output-lp", "exact-law-needed", "exact-target-needed",
        "unknown-scheme", "unknown-option", "bad-s", "bad-rank-key", "bad-multistage-s", "select-2d",
        "bad-rng", "no-batch", "importance-too-large",
    ],
)
def test_bad_arguments(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_not_a_law_is_a_type_error_at_every_entry_point():
    """One check (``check_law``), one exception type, whichever entry point receives it."""
    from multidraft.theory.verifier import optimal_selection_rule

    for call in (
        lambda: get_scheme("specinfer").acceptance([0.5, 0.5], "iid"),
        lambda: get_scheme("optimal").prepare([0.5, 0.5], [0.5, 0.5]),
        lambda: schemes_for("iid"),
        lambda: optimal_acceptance([0.5, 0.5], [0.5, 0.5]),
        lambda: optimal_selection_rule([0.5, 0.5], [0.5, 0.5]),
    ):
        with pytest.raises(TypeError, match="law: expected a draft law"):
            call()


def test_a_scheme_without_a_closed_form_says_so_when_enumeration_is_too_large():
    """rrs-wor with K > 2 sums over the ordered tuples: beyond the enumeration limit the error
    names the scheme and what would help, not the optimum's sorted scan."""
    from multidraft.theory import ProblemTooLargeError

    uniform = np.full(30, 1 / 30)
    with pytest.raises(ProblemTooLargeError, match="rrs-wor has no closed-form acceptance for the wor law with k=6") as refused:
        get_scheme("rrs-wor").acceptance(uniform, WithoutReplacement(uniform, 6))
    assert "method='sorted'" not in str(refused.value)
