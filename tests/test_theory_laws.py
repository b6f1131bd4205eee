"""Draft laws: containment, enumeration and sampling agree with each other."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats
from strategies import LAW_STRATEGIES, as_float, draft_laws, instances

from multidraft.theory import IID, Deterministic, DraftLaw, Greedy, Independent, WithoutReplacement, dirichlet
from multidraft.theory.laws import subset_sums, zeta_transform


def all_laws(rng, n=5, k=3):
    q = dirichlet(n, 0.8, rng)
    return [
        IID(q, k),
        Independent([dirichlet(n, 0.8, rng) for _ in range(k)]),
        WithoutReplacement(q, k),
        Greedy(q, k),
        Deterministic([0, 2, 3][:k], n),
    ]


@pytest.mark.parametrize("index", range(5))
def test_enumeration_is_a_distribution_and_matches_containment(index):
    rng = np.random.default_rng(index)
    law = all_laws(rng)[index]
    tuples, probs = law.enumerate()
    assert tuples.shape == (len(probs), law.k)
    np.testing.assert_allclose(probs.sum(), 1.0, atol=1e-12)
    masks = np.array(list(itertools.product([False, True], repeat=law.n)))
    by_enumeration = np.array([probs[np.all(m[tuples], axis=1)].sum() for m in masks])
    np.testing.assert_allclose(law.containment(masks), by_enumeration, atol=1e-12)
    bitmask_order = np.array([[bool(b >> i & 1) for i in range(law.n)] for b in range(1 << law.n)])
    np.testing.assert_allclose(law.containment_all_subsets(), law.containment(bitmask_order), atol=1e-12)


@pytest.mark.parametrize("index", range(5))
def test_sampling_frequencies_match_enumeration(index):
    """Chi-square on tuple frequencies; a wrong law (IID sampled for WOR) must fail it."""
    rng = np.random.default_rng(100 + index)
    law = all_laws(rng, n=4, k=2)[index]
    tuples, probs = law.enumerate()
    samples = law.sample(rng, size=20000)
    assert samples.shape == (20000, law.k)
    assert chi_square_pvalue(samples, tuples, probs) > 1e-4


def chi_square_pvalue(samples, tuples, probs):
    keys = {tuple(t): i for i, t in enumerate(tuples.tolist())}
    counts = np.zeros(len(tuples))
    for row in samples.tolist():
        counts[keys[tuple(row)]] += 1  # a KeyError here means an impossible tuple was drawn
    if len(tuples) == 1:
        return 1.0
    return stats.chisquare(counts, probs * len(samples)).pvalue


def test_sampling_test_has_teeth():
    rng = np.random.default_rng(7)
    q = dirichlet(4, 0.8, rng)
    wor = WithoutReplacement(q, 2)
    tuples, probs = wor.enumerate()
    wrong = IID(q, 2).sample(rng, size=20000)
    wrong = wrong[wrong[:, 0] != wrong[:, 1]]  # rejection of repeats is NOT sampling without replacement
    assert chi_square_pvalue(wrong, tuples, probs) < 1e-6


@given(instances(max_n=5))
def test_prefix_containment_closed_forms_match_enumeration(instance):
    """The closed forms (iid power, wor K = 2 formula, wor race) against the enumerated law, on
    the order of the law's own prefix scan."""
    n, k, target, draft = instance
    q = as_float(draft)
    order = np.argsort(-q)
    for law in (IID(q, k), WithoutReplacement(q, k), Greedy(q, k) if q[order[k - 1 :]].sum() > 0 else IID(q, k)):
        order, contained = law.prefix_scan(as_float(target))
        prefixes = np.arange(n + 1)[:, None] > np.argsort(order)[None, :]  # mask of T_j, j = 0..n
        tuples, probs = law.enumerate()
        by_enumeration = [probs[np.all(mask[tuples], axis=1)].sum() for mask in prefixes]
        np.testing.assert_allclose(contained, by_enumeration, atol=1e-12)


@given(instances(max_n=5))
def test_exact_prefix_scan_matches_float(instance):
    """The exact scan (Fraction ratio order, exact containment) against the float scan: the same
    containment along the exact order, for every law with prefix structure."""
    n, k, target, draft = instance
    laws = [IID(draft, k), WithoutReplacement(draft, k), Deterministic(list(range(k)), n)]
    for law in laws:
        order, contained = law.prefix_scan(target, exact=True)
        assert contained.dtype == object and len(contained) == n + 1
        for j in range(n + 1):
            assert contained[j] == law.containment_exact(order[:j].tolist())


@given(instances(max_n=5))
def test_exact_containment_matches_float(instance):
    n, k, target, draft = instance
    laws = [IID(draft, k), WithoutReplacement(draft, k)]
    for law in laws:
        for size in range(n + 1):
            for subset in itertools.combinations(range(n), size):
                mask = np.isin(np.arange(n), subset)
                assert float(law.containment_exact(subset)) == pytest.approx(float(law.containment(mask)), abs=1e-12)


def test_wor_k2_closed_form_is_accurate_for_a_dominant_token():
    q = np.array([1e-12, 1 - 2e-12, 1e-12])
    exact = WithoutReplacement([Fraction(x) for x in q], 2, normalize=True)
    order = np.array([0, 1, 2])
    for j, value in enumerate(WithoutReplacement.sorted_prefix_containment(q[order], 2)):
        assert value == pytest.approx(float(exact.containment_exact(order[:j].tolist())), rel=1e-9, abs=1e-15)


@st.composite
def any_law(draw, max_n: int = 5, max_k: int = 3) -> DraftLaw:
    """A law of any registered kind on n <= max_n tokens, K <= max_k, exact probabilities."""
    n = draw(st.integers(2, max_n))
    k = draw(st.integers(1, min(max_k, n)))
    return draw(draft_laws(draw(st.sampled_from(sorted(LAW_STRATEGIES))), n, k))


def test_law_strategies_cover_every_law():
    """A new law gets the property tests below once it has an entry in ``LAW_STRATEGIES``."""

    def concrete(cls):
        for sub in cls.__subclasses__():
            yield from ([] if getattr(sub, "__abstractmethods__", None) else [sub.name])
            yield from concrete(sub)

    assert set(concrete(DraftLaw)) == set(LAW_STRATEGIES)


@given(any_law())
def test_marginals_closed_forms_match_enumeration(law):
    """Each law's O(n) marginal against the generic route (enumerated tuple probabilities summed
    by position), exactly in Fractions, and the float marginal against the exact one."""
    for position in range(law.k):
        exact = law.marginal(position, exact=True)
        assert list(exact) == list(DraftLaw.marginal(law, position, exact=True))
        np.testing.assert_allclose(law.marginal(position), np.array(exact, dtype=float), rtol=0, atol=1e-15)
    assert law.marginals().shape == (law.k, law.n)


@given(any_law())
def test_independent_drafts_means_containment_is_the_product_of_marginals(law):
    """``independent_drafts`` against the containment: Π_i P(X_i ∈ T) for every T exactly when
    the flag is set (drafts without replacement, dependent, must differ for some T)."""
    masks = np.array(list(itertools.product([False, True], repeat=law.n)))
    product = np.prod(masks.astype(float) @ law.marginals().T, axis=-1)
    matches = np.allclose(law.containment(masks), product, rtol=0, atol=1e-12)
    assert matches == law.independent_drafts or (law.k == 1 and matches)


@given(any_law())
def test_tuple_count_matches_enumeration(law):
    """The count from the supports against the enumerated tuples (and, merged, against the
    distinct multisets of an exchangeable law)."""
    tuples, _ = law.enumerate()
    assert law.tuple_count() == len(tuples)
    multisets = len(np.unique(np.sort(tuples, axis=-1), axis=0)) if law.symmetric else len(tuples)
    assert law.tuple_count(merged=True) == multisets


def test_subset_sums_and_zeta_transform():
    np.testing.assert_array_equal(subset_sums([1, 2, 4]), np.arange(8))
    masses = np.zeros(8)
    masses[0b101] = 1.0
    np.testing.assert_array_equal(zeta_transform(masses, 3), [0, 0, 0, 0, 0, 1, 0, 1])


def test_check_tuple():
    law = WithoutReplacement([0.5, 0.5, 0.0], 2)
    np.testing.assert_array_equal(law.check_tuple([1, 0]), [1, 0])
    with pytest.raises(ValueError, match="expected 2 draft tokens"):
        law.check_tuple([0])
    with pytest.raises(ValueError, match="must lie in"):
        law.check_tuple([0, 3])
    with pytest.raises(ValueError, match="probability zero"):
        law.check_tuple([0, 0])
    with pytest.raises(ValueError, match="probability zero"):
        law.check_tuple([0, 2])
    with pytest.raises(ValueError, match="probability zero"):
        Greedy([0.6, 0.3, 0.1], 2).check_tuple([1, 2])


BAD_LAWS = [
    pytest.param(lambda: IID([0.5, 0.5], 0), "k: the number of drafts must be an integer >= 1", id="k-zero"),
    pytest.param(lambda: IID([0.5, 0.5], 1.5), "must be an integer", id="k-float"),
    pytest.param(lambda: WithoutReplacement([0.5, 0.5], 3), "k <= n", id="wor-k-above-n"),
    pytest.param(lambda: WithoutReplacement([1.0, 0.0, 0.0], 2), "positive probability", id="wor-k-above-support"),
    pytest.param(lambda: Independent([[0.5, 0.5], [1.0]]), "same length", id="independent-lengths"),
    pytest.param(lambda: Independent([0.5, 0.5]), "list of K", id="independent-flat"),
    pytest.param(lambda: Greedy([1.0, 0.0], 2), "positive draft mass", id="greedy-no-rest"),
    pytest.param(lambda: Deterministic([0, 5], 3), "must lie in", id="deterministic-range"),
    pytest.param(lambda: Deterministic([0], 0), "vocabulary size", id="deterministic-n"),
    pytest.param(lambda: IID([0.5, -0.5, 1.0], 2), "draft: contains negative", id="negative-draft"),
    pytest.param(lambda: IID(np.full(30, 1 / 30), 2).containment_all_subsets(), "limit", id="subsets-limit"),
    pytest.param(lambda: IID(np.full(3000, 1 / 3000), 3).enumerate(), "limit ENUMERATION_LIMIT=2,000,000", id="enumeration-limit"),
    pytest.param(lambda: IID([0.5, 0.5], 2).marginal(2), r"position: the iid law with k=2 has draft positions 0\.\.1, got 2", id="position-above-k"),
    pytest.param(lambda: IID([0.5, 0.5], 2).marginal(-1), "position: must be an integer >= 0, got -1", id="position-negative"),
    pytest.param(lambda: Independent([[0.5, 0.5]]).marginal(True), "position: must be an integer >= 0, got True", id="position-bool"),
    pytest.param(lambda: IID([0.5, 0.5], 2).marginal(0, exact=True), "exact mode needs draft probabilities", id="marginal-not-exact"),
    pytest.param(lambda: WithoutReplacement(np.full(3000, 1 / 3000), 3).marginal(1), "limit ENUMERATION_LIMIT=2,000,000", id="wor-marginal-too-large"),
]


@pytest.mark.parametrize("call, message", BAD_LAWS)
def test_bad_law_raises_clear_error(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_strategies_reach_zeros_ties_and_unit_acceptance():
    """The instance strategy must produce the corner cases the properties are about."""
    from hypothesis import find

    from multidraft.theory import optimal_acceptance

    find(instances(), lambda inst: 0 in inst[2] and inst[1] >= 2)
    find(instances(), lambda inst: len(set(inst[3])) < len(inst[3]))
    find(
        instances(),
        lambda inst: inst[1] >= 2 and inst[2] != inst[3] and optimal_acceptance(inst[2], IID(inst[3], inst[1]), exact=True).value == 1,
    )
    assert as_float([Fraction(1, 2)]).tolist() == [0.5]


# ----------------------------------------------------------------------------------------------
# Law kinds have one home: the law classes (issue 21).

import re  # noqa: E402
from pathlib import Path  # noqa: E402

_KIND = r"""["'](?:iid|independent|wor|greedy|deterministic)["']"""
#: A decision on a law's kind by its name: ``law.name == ...``, ``x.name in ...``, a comparison
#: with a kind literal, or a lookup keyed by ``law.name``.
_NAME_BRANCH = re.compile(
    r"\b\w*law\w*\.name\s*(?:==|!=|\bnot in\b|\bin\b)"
    rf"|(?:==|!=)\s*{_KIND}|{_KIND}\s*(?:==|!=)"
    rf"|\b(?:not\s+)?in\s*[(\[{{]\s*(?:None,\s*)?{_KIND}"
    r"|\[\s*\w*law\w*\.name\s*\]"
)


def _name_branches(text: str) -> list[str]:
    """The lines of ``text`` that decide a law's kind by name (comments and doctests skipped)."""
    found = []
    for line in text.splitlines():
        code = line.split("#")[0]
        if ">>>" in code or not code.strip():
            continue
        if _NAME_BRANCH.search(code):
            found.append(line.strip())
    return found


def test_no_law_name_comparison_outside_the_laws_module():
    """Other modules ask a law (its flags, its methods) or dispatch on its class."""
    package = Path(__file__).resolve().parents[1] / "multidraft"
    found = {
        str(path.relative_to(package)): _name_branches(path.read_text())
        for path in sorted(package.rglob("*.py"))
        if not path.relative_to(package).as_posix().startswith("theory/laws/")
    }
    assert {path: lines for path, lines in found.items() if lines} == {}


def test_the_name_scan_catches_each_kind_of_branch():
    """The scan's twin: every form the renovation removed is flagged, and its replacements are not."""
    flagged = [
        'if law.name == "wor":',
        'if law.name not in VERIFIER_LAWS:',
        'drafts, iid = np.array(draft.marginals()), draft.name == "iid"',
        'if law not in ("iid", "wor"):',
        'return "rrs-wor" if law == "wor" else "specinfer"',
        'if law not in (None, "independent"):',
        'scheme = _CLOSED_FORM_VERIFIERS[law.name]()',
    ]
    clean = ['if isinstance(law, WithoutReplacement):', 'law = law_for(kind, [q], k)', 'name = "wor"  # a class attribute']
    assert _name_branches("\n".join(flagged)) == flagged
    assert _name_branches("\n".join(clean)) == []


def test_law_registry_constructor_and_target_check():
    from multidraft.theory.laws import LAWS, law_class, law_for

    assert {kind: cls.name for kind, cls in LAWS.items()} == {kind: kind for kind in LAWS}
    assert set(LAWS) == {"iid", "independent", "wor", "greedy", "deterministic"}
    q = [0.5, 0.3, 0.2]
    assert isinstance(law_for("wor", [q], 2), WithoutReplacement) and law_for("wor", [q], 2).k == 2
    assert law_for("independent", [q], 3).k == 3 and law_for("iid", [q, q]).k == 2
    assert law_class("greedy") is Greedy
    with pytest.raises(ValueError, match="unknown draft law 'uniform'"):
        law_for("uniform", [q])
    with pytest.raises(ValueError, match="built from token ids"):
        law_for("deterministic", [q])
    with pytest.raises(ValueError, match="3 draft distributions make k = 3, got k=2"):
        law_for("independent", [q, q, q], 2)
    for law in (IID(q, 2), Independent([q, q]), Deterministic([0, 1], 3)):
        with pytest.raises(ValueError, match="length 2 does not match the draft law's vocabulary n=3"):
            law.check_target([0.5, 0.5])
        with pytest.raises(ValueError, match="exact mode needs"):
            IID(q, 2).check_target(["1/2", "1/4", "1/4"], exact=True)
    exact = IID(["1/2", "1/4", "1/4"], 2).check_target(["1/3", "1/3", "1/3"], exact=True)
    assert exact.dtype == object and exact.tolist() == [Fraction(1, 3)] * 3
    # the one-draft baseline law: the same draft model drafting once, exact when the law is
    assert Greedy(["1/2", "1/4", "1/4"], 2).single_draft().marginal(0, exact=True).tolist() == [Fraction(1, 2), Fraction(1, 4), Fraction(1, 4)]
    assert Independent([q, [0.1, 0.1, 0.8]]).single_draft().draft.tolist() == q
    assert Deterministic([2, 0], 3).single_draft().tokens.tolist() == [2]
