"""Extreme but valid inputs, over every draft law and every registered scheme (issue 20, items 3
and 4): masses from 1e-12 down to the floor 1e-300 and below it, exact zeros next to them,
ties, one-hot vectors, p = q, disjoint supports, float32 arrays, n = 1 and 2.

The policy under test (``multidraft.theory.laws``, module docstring): a float
probability below ``MASS_FLOOR = 1e-300`` is set to zero by ``as_distribution``; every other
entry is kept, and every number computed from it must be right:

* P* by the default route equals P* over all subsets (a second, independent computation);
* every scheme's acceptance is finite, at most P* + 1e-9, and at least the single-draft
  acceptance ``Σ min(p, q_1)`` - 1e-9 where the scheme guarantees it (:func:`floor_guaranteed`);
* every scheme's output law, by enumeration, equals the target to 1e-9, and its samplers (numpy,
  and the batched torch form decoding runs, where the scheme has one) emit only tokens of
  positive target probability;
* the schemes that run at any vocabulary size keep the bounds at n = 300 with Dirichlet(0.01)
  inputs (masses down to 1e-300 and below) and K up to 8;
* bad extreme inputs raise only ``ValueError`` or ``TypeError``, with a message that starts
  with the argument's name.

The strategies (tests/strategies.py) are shown to reach every kind of extreme input they
promise (:func:`test_strategies_reach_the_extremes`). Example budgets are shares of the active
hypothesis profile (conftest.py), as in tests/test_schemes.py.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, find, given, settings
from hypothesis import strategies as st
from strategies import TINY_MASSES, extreme_cases, extreme_pairs, extreme_vectors

from multidraft.schemes import SCHEMES, Scheme, get_scheme
from multidraft.theory import (
    IID,
    Greedy,
    Independent,
    WithoutReplacement,
    as_distribution,
    dirichlet,
    optimal_acceptance,
    unit_acceptance,
)
from multidraft.theory.laws import MASS_FLOOR

LAWS = ("iid", "independent", "wor", "greedy", "deterministic")


def _share(fraction: float) -> settings:
    """The active profile with ``fraction`` of its examples (at least 2)."""
    profile = settings.default
    return settings(
        profile,
        max_examples=max(2, round(profile.max_examples * fraction)),
        suppress_health_check=[*profile.suppress_health_check, HealthCheck.too_slow, HealthCheck.data_too_large],
    )


#: Per (scheme, law) pair; LP-based pairs solve a linear program per call and get fewer.
SETTINGS = _share(0.25)
LP_SETTINGS = _share(0.1)


# ---------------------------------------------------------------------------------- the bounds

#: Schemes that are not ``optimal`` but whose acceptance is at least ``Σ min(p, q_1)``, q_1 the
#: first draft's law, and why.
FIRST_STEP_AT_LEAST_SINGLE = {
    # Recursive rejection sampling: step 1 is the single-draft test of X_1 against p.
    "specinfer": "step 1 is single-draft sampling of X_1",
    "rrs-wor": "step 1 is single-draft sampling of X_1",
    # SpecTr accepts 1 - (1 - β(ρ))^K = ρ β(ρ) = Σ min(ρ q, p) >= Σ min(q, p) since ρ >= 1.
    "spectr": "acceptance Σ min(ρ q, p) with ρ >= 1",
}


def floor_guaranteed(scheme: Scheme) -> bool:
    """Whether ``scheme``'s acceptance is at least the single-draft acceptance ``Σ min(p, q_1)``,
    read off its class facts: an ``optimal`` scheme reaches P*, and selecting draft 1 is one
    of the rules P* maximises over; the schemes of :data:`FIRST_STEP_AT_LEAST_SINGLE` by their
    construction; multi-stage selection without truncation (``s=None``), whose first stage may
    always keep draft 1. The truncated LP makes no such promise (issue 20, item 6: it can fall
    below a single draft)."""
    if scheme.capabilities.optimal or scheme.name in FIRST_STEP_AT_LEAST_SINGLE:
        return True
    return scheme.name == "multistage" and getattr(scheme, "s", 0) is None


def single_draft(p: np.ndarray, law) -> float:
    """``Σ min(p, q_1)`` with q_1 the law of the first draft."""
    return float(np.minimum(p, law.marginal(0)).sum())


def _optimum(target, law) -> float:
    """P* by the default route, checked against the minimum over all subsets."""
    value = optimal_acceptance(target, law).value
    assert math.isfinite(value) and 0.0 <= value <= 1.0, value
    subsets = optimal_acceptance(target, law, method="subsets").value
    assert abs(value - subsets) <= 1e-9, (value, subsets)
    return value


def _check_bounds(scheme: Scheme, target, law, optimum: float) -> None:
    p = as_distribution(target, normalize=True)
    value = float(scheme.acceptance(target, law))
    assert math.isfinite(value), value
    assert value <= optimum + 1e-9, (value, optimum)
    if floor_guaranteed(scheme):
        assert value >= single_draft(p, law) - 1e-9, (value, single_draft(p, law))


# ------------------------------------------------------------------------ valid extreme inputs

#: Every (scheme, law) pair of the registry.
PAIRS = [(name, law.name) for name, cls in SCHEMES.items() for law in cls.capabilities.laws]


def _pair_settings(name: str, law: str) -> settings:
    return LP_SETTINGS if law in {cls.name for cls in SCHEMES[name].capabilities.imports_lp} else SETTINGS


@pytest.mark.parametrize("name, law_name", PAIRS, ids=[f"{name}-{law}" for name, law in PAIRS])
def test_schemes_on_extreme_inputs(name, law_name, one_thread):
    """Acceptance finite and within its bounds, output law = target, samples inside the target's
    support, for extreme inputs with n <= 4 and K <= 3 (K = 1 included); torch on one thread
    (conftest.py: tiny tensors on a busy machine)."""
    scheme = get_scheme(name)

    @_pair_settings(name, law_name)
    @given(extreme_cases(law_name), st.integers(0, 2**32 - 1))
    def run(case, seed):
        target, law = case
        if not scheme.supports(law):
            return
        p = as_distribution(target, normalize=True)
        _check_bounds(scheme, target, law, _optimum(target, law))
        out = scheme.output_distribution(target, law)
        assert out.shape == p.shape
        np.testing.assert_allclose(out, p, rtol=0, atol=1e-9)
        rng = np.random.default_rng(seed)
        tuples = law.sample(rng, 16)
        tokens, accepted = scheme.sample(target, law, tuples, rng)
        assert (p[tokens] > 0).all(), tokens
        if scheme.supports_batch(law):
            tokens = _select_batch(scheme, p, law, tuples, seed)
            assert (p[tokens] > 0).all(), tokens

    run()


def _select_batch(scheme: Scheme, p: np.ndarray, law, tuples: np.ndarray, seed: int) -> np.ndarray:
    """The scheme's batched torch form (what decoding runs) on float64 tensors: one row per
    tuple, each with the target and the law's draft marginals."""
    import torch

    rows = len(tuples)
    target = torch.tensor(np.tile(p, (rows, 1)))
    drafts = torch.tensor(np.tile(np.asarray(law.marginals()), (rows, 1, 1)))
    output, accepted = scheme.select_batch(target, drafts, torch.tensor(tuples), torch.Generator().manual_seed(seed))
    assert output.shape == (rows,) and accepted.shape == (rows,)
    return output.numpy()


@st.composite
def large_cases(draw, law_name: str, n: int = 300, max_k: int = 8):
    """(target, law) on n tokens: Dirichlet(α <= 0.05) rows (entries far below 1e-300 and
    flushed, next to masses near one) with a random share of exact zeros and tiny masses, or
    (``"sliver"``) a draft whose K - 1 largest tokens hold all but tiny masses on every other
    token, with the target on that sliver half the time."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))

    def vector() -> np.ndarray:
        values = dirichlet(n, draw(st.sampled_from([0.01, 0.05])), rng)
        values[rng.random(n) < 0.2] = 0.0
        tiny = rng.random(n) < 0.1
        values[tiny] = rng.choice(TINY_MASSES, size=int(tiny.sum()))
        if values.sum() == 0:
            values[rng.integers(n)] = 1.0
        return values / values.sum()

    target = vector()
    law = {"iid": IID, "wor": WithoutReplacement, "greedy": Greedy}.get(law_name)
    if law is not None and max_k >= 2 and draw(st.booleans()):  # sliver
        k = draw(st.integers(2, max_k))
        tail = rng.choice([m for m in TINY_MASSES if m >= MASS_FLOOR], size=n - k + 1)
        draft = np.concatenate([rng.random(k - 1) if draw(st.booleans()) else np.ones(k - 1), tail])
        draft[: k - 1] *= (1.0 - tail.sum()) / draft[: k - 1].sum()
        order = rng.permutation(n)
        if draw(st.booleans()):
            target = np.where(np.isin(np.arange(n), order[: k - 1]), 0.0, target)
            target = target / target.sum() if target.sum() > 0 else np.where(np.arange(n) == order[-1], 1.0, 0.0)
        return target, law(draft[np.argsort(order)], k, normalize=True)
    draft = target.copy() if draw(st.booleans()) else vector()
    support = int(np.count_nonzero(as_distribution(draft)))
    if law_name == "independent":
        return target, Independent([draft] + [vector() for _ in range(draw(st.integers(0, 2)))], normalize=True)
    k = draw(st.integers(1, max_k if law_name == "iid" else min(max_k, support)))
    return target, law(draft, k, normalize=True)


#: (scheme, law, largest K) of every scheme at a law it runs at any vocabulary size, plus
#: rrs-wor at K <= 2, where its acceptance has a closed form (the 1/(1 - q(x)) of issue 20).
LARGE_PAIRS = [
    (name, law.name, 8) for name, cls in SCHEMES.items() for law in cls.capabilities.any_vocabulary
    if law.name != "deterministic"
] + [("rrs-wor", "wor", 2)]


@pytest.mark.parametrize(
    "name, law_name, max_k", LARGE_PAIRS, ids=[f"{name}-{law}" for name, law, _ in LARGE_PAIRS]
)
def test_any_vocabulary_schemes_on_extreme_inputs(name, law_name, max_k):
    """The schemes that run at any vocabulary size keep their bounds at n = 300."""
    scheme = get_scheme(name)

    @_share(0.1)
    @given(large_cases(law_name, max_k=max_k))
    def run(case):
        target, law = case
        if scheme.supports(law):
            _check_bounds(scheme, target, law, optimal_acceptance(target, law).value)

    run()


# --------------------------------------------------------------------------- the named failures


def test_rrs_wor_with_a_draft_token_holding_all_but_1e_20():
    """1/(1 - q(x)) with q(x) = 1 after rounding gave NaN; the true value is 1."""
    law = WithoutReplacement([1e-20, 1.0], 2)
    scheme = get_scheme("rrs-wor")
    assert scheme.acceptance([0.5, 0.5], law) == 1.0
    assert scheme.enumerated_acceptance([0.5, 0.5], law) == 1.0


def test_spectr_when_target_and_draft_overlap_by_1e_16():
    """SpecTr's ρ search tested ``1 - (1 - β)^K <= ρβ`` with the left side rounding noise for
    β near 1e-16: false at every ρ it tried, and it widened ρ by 1e-12 at a time for ever (an
    overlap of 2e-16 hung). Now it ends at once, with its bounds and a lossless output."""
    for overlap in (6e-17, 2e-16, 3e-16, 1e-15):
        target, draft = [1 - overlap, overlap, 0.0], [0.0, overlap, 1 - overlap]
        for k in (2, 3, 8):
            law = IID(draft, k)
            scheme = get_scheme("spectr")
            _check_bounds(scheme, target, law, _optimum(target, law))
            np.testing.assert_allclose(scheme.output_distribution(target, law), target, rtol=0, atol=1e-12)


def test_rrs_wor_batched_when_the_earlier_drafts_hold_all_but_1e_16(one_thread):
    """The batched form divided by ``1 - Σ_{j<i} q(x_j)``, which is 0 after drafts of mass 1/3
    and 2/3 (the third holds 1e-16): NaN weights, and a refusal mid-decoding. The target sits
    on the third token, so every run must emit it."""
    law = WithoutReplacement([1 / 3, 0.0, 1e-16, 2 / 3], 3, normalize=True)
    target = np.array([0.0, 0.0, 1.0, 0.0])
    tuples = law.enumerate()[0]
    assert len(tuples) == 6
    np.testing.assert_array_equal(_select_batch(get_scheme("rrs-wor"), target, law, np.repeat(tuples, 8, axis=0), 0), 2)
    tokens, _ = get_scheme("rrs-wor").sample(target, law, tuples, np.random.default_rng(0))
    np.testing.assert_array_equal(tokens, 2)


@pytest.mark.parametrize(
    "target, draft",
    [([1.0, 0.0], [1 - 6.4e-13, 6.4e-13]), ([3.3e-06, 0.25947, 0.74053, 8.9e-10],) * 2, ([0.5, 0.5], [1 - 1e-20, 1e-20])],
    ids=["a-draft-mass-of-6e-13", "p-equals-q-with-9e-10", "a-draft-mass-of-1e-20"],
)
def test_optimal_verifier_law_with_tiny_draft_masses(target, draft):
    """The iid optimal verifier's choice weights refused to be a probability vector for sets of
    length 1e-13 near t = 1 (positions resolved to 1e-16 there); with 1e-20 the set has length
    zero and is a point. Its output law is the target and its acceptance P*."""
    law = IID(draft, 3, normalize=True)
    p = as_distribution(target, normalize=True)
    scheme = get_scheme("optimal")
    np.testing.assert_allclose(scheme.output_distribution(p, law), p, rtol=0, atol=1e-12)
    tuples = law.enumerate()[0]
    np.testing.assert_allclose(scheme.conditional_distribution(p, law, tuples).sum(axis=1), 1.0, rtol=0, atol=1e-12)
    np.testing.assert_allclose(scheme.enumerated_acceptance(p, law), optimal_acceptance(p, law).value, rtol=0, atol=1e-12)


def test_wor_race_with_masses_at_and_below_the_floor():
    """1e-308 (below the floor) is zero: four drafts without replacement from two tokens are
    refused, naming k and the floor; at the floor 1e-300 the race gives P* = 1 (every token is
    drafted) by both routes."""
    with pytest.raises(ValueError, match=r"^k: .*MASS_FLOOR=1e-300.*got k=4 > 2"):
        WithoutReplacement([0.5, 0.5, 1e-308, 1e-308], 4)
    law = WithoutReplacement([0.5, 0.5, 1e-300, 1e-300], 4)
    for method in ("sorted", "subsets"):
        assert optimal_acceptance([0.4, 0.3, 0.3, 0.0], law, method=method).value == 1.0


def test_the_floor_is_where_as_distribution_puts_it():
    """Entries below MASS_FLOOR become zero (after normalising), entries at it are kept, and
    exact inputs keep a tiny positive entry positive in the law's float copy."""
    assert MASS_FLOOR == 1e-300
    out = as_distribution([MASS_FLOOR, MASS_FLOOR / 2, 5e-324, 1.0], "draft")
    assert out.tolist() == [MASS_FLOOR, 0.0, 0.0, 1.0]
    assert as_distribution([2e-300, 1e-300], normalize=True).tolist() == [2 / 3, 1 / 3]
    law = WithoutReplacement(["1/2", "1/2", f"1/{10**400}"], 3, normalize=True)
    assert law.draft[2] == MASS_FLOOR and law.exact


# ----------------------------------------------------------------------------- bad extreme inputs


#: The defects :func:`bad_calls` puts into an extreme input.
DEFECTS = (
    "nan", "negative", "mapping", "set", "length", "unnormalised", "k", "wor-floor", "draft-inf",
    "tolerance", "size", "zero-probability-draft",
)


@st.composite
def bad_calls(draw, defect: str):
    """``(call, argument)``: a call on an extreme input with ``defect``, and the argument its
    error must name."""
    target, law = draw(extreme_cases("iid"))
    target = np.asarray(target, dtype=np.float64)
    n = len(target)
    index = draw(st.integers(0, n - 1))
    scheme = get_scheme(draw(st.sampled_from(["specinfer", "spectr", "optimal"])))
    if defect == "nan":
        bad = target.copy()
        bad[index] = np.nan
        return (lambda: optimal_acceptance(bad, law)), "target"
    if defect == "negative":
        bad = target.copy()
        bad[index] = -draw(st.sampled_from(TINY_MASSES))
        return (lambda: scheme.acceptance(bad, law)), "target"
    if defect == "mapping":
        return (lambda: scheme.acceptance(dict(enumerate(target.tolist())), law)), "target"
    if defect == "set":
        return (lambda: IID(set(target.tolist()), law.k)), "draft"
    if defect == "length":
        return (lambda: scheme.output_distribution(np.append(target, 0.0), law)), "target"
    if defect == "unnormalised":
        tiny = np.full(n, draw(st.sampled_from(TINY_MASSES)))
        return (lambda: optimal_acceptance(tiny, law)), "target"
    if defect == "k":
        k = draw(st.sampled_from([0, -1, 2.0, True]))
        return (lambda: IID(target, k)), "k"
    if defect == "wor-floor":  # K supported tokens only if the masses below the floor counted
        draft = [1.0] + [draw(st.sampled_from([1e-301, 1e-308, 5e-324]))] * draw(st.integers(1, 3))
        return (lambda: WithoutReplacement(draft, len(draft))), "k"
    if defect == "draft-inf":
        draft = np.append(target, np.inf)
        return (lambda: Independent([draft, draft])), "draft[0]"
    if defect == "tolerance":
        tolerance = draw(st.sampled_from([-1.0, np.nan, np.inf, 1.0]))
        return (lambda: unit_acceptance(target, law, tolerance=tolerance)), "tolerance"
    if defect == "size":
        size = draw(st.sampled_from([-1, -3, 2.5, "2"]))
        return (lambda: law.sample(np.random.default_rng(0), size)), "size"
    assert defect == "zero-probability-draft"  # a drafted token that the (floored) law cannot draw
    draft = np.array([1.0] + [draw(st.sampled_from([0.0, 1e-301, 1e-308, 5e-324]))] * max(n - 1, 1))
    uniform = np.full(len(draft), 1 / len(draft))
    return (lambda: scheme.select(uniform, IID(draft, 2), [0, len(draft) - 1], np.random.default_rng(0))), "drafts"


@pytest.mark.parametrize("defect", DEFECTS)
def test_bad_extreme_inputs_raise_a_clear_error(defect):
    """Only ValueError or TypeError, with a message starting with the argument's name."""

    @_share(0.1)
    @given(bad_calls(defect))
    def run(case):
        call, argument = case
        with pytest.raises((ValueError, TypeError)) as raised:
            call()
        message = str(raised.value)
        assert message.startswith(f"{argument}:"), message

    run()


# -------------------------------------------------------------------------- the strategies reach


def _reach(strategy, condition, examples: int = 500) -> None:
    """Fail unless ``strategy`` generates an example meeting ``condition`` within ``examples``
    tries (hypothesis's own ``find_any``: :func:`hypothesis.find` without shrinking)."""
    quick = settings(max_examples=examples, phases=[Phase.generate], database=None, suppress_health_check=list(HealthCheck))
    find(strategy, condition, settings=quick)


def test_strategies_reach_the_extremes():
    """Every kind of extreme input the strategies promise occurs (STYLE.md item 13)."""
    vectors = extreme_vectors(4)
    _reach(vectors, lambda v: (v == 1e-300).any())  # at the floor
    _reach(vectors, lambda v: ((v > 0) & (v < MASS_FLOOR)).any())  # below it: set to zero when validated
    _reach(vectors, lambda v: (v == 0).any() and ((v > 0) & (v <= 1e-12)).any())  # zeros next to tiny masses
    _reach(vectors, lambda v: len(set(v[v > 1e-3].tolist())) < np.count_nonzero(v > 1e-3))  # ties
    pairs = extreme_pairs(3)
    _reach(pairs, lambda c: sorted(c[0].tolist()) == [0.0, 0.0, 1.0])  # one-hot target
    _reach(pairs, lambda c: np.array_equal(c[0], c[1]) and (c[0] < 1).all())  # p = q
    _reach(pairs, lambda c: not (np.minimum(c[0], c[1]) > 0).any())  # disjoint supports
    for law_name in LAWS:
        cases = extreme_cases(law_name)
        _reach(cases, lambda c: c[1].n == 1)
        _reach(cases, lambda c: c[1].n == 2 and c[1].k == 2)
        _reach(cases, lambda c: np.asarray(c[0]).dtype == np.float32)
    # the K - 1 largest draft tokens hold all but 1e-30 or less, K >= 3 (the race quadrature)
    _reach(
        extreme_cases("wor"),
        lambda c: c[1].k >= 3 and 0 < np.sort(c[1].draft)[: c[1].n - c[1].k + 1].sum() <= 1e-30,
    )
    # drafts without replacement needing a tiny-mass token: K equals the supported tokens
    _reach(
        extreme_cases("wor"),
        lambda c: c[1].k == np.count_nonzero(c[1].draft) >= 2 and 0 < c[1].draft[c[1].draft > 0].min() <= 1e-12,
        examples=2000,
    )
