"""SpecInfer and SpecTr on the drafts' support, against the full vocabulary.

Their float plans work on the drafts' support S and the one number p(Ω ∖ S)
(:class:`~multidraft.schemes.base.SupportPlan`). These tests check them with computations over
all n tokens that know nothing of the support:

* the published recursions written out over the whole vocabulary (RRS: normalised residuals
  ``norm((r_{i-1} - q_i)_+)`` and steps ``min(1, r_{i-1}/q_i)``; SpecTr: ρ* by bisection on the
  dense β, the residual ``norm((p - min(q, p/ρ)γ)_+)``): the acceptance and the rule's dense view
  agree to 1e-12, at n = 131072 with top-k and top-p drafts;
* the output law of the rule, ``Σ_i reach_i q_i a_i + reach_K res`` (the residuals do not depend
  on the drafts), is p to 1e-12;
* small cases by enumerating every draft tuple (the plan's own conditional laws);
* the sampler: never a token of target mass zero, and a chi-square test on its output that
  catches twins which forget the target outside the support or draw it uniformly.
"""

from __future__ import annotations

from functools import cached_property

import numpy as np
import pytest

from multidraft.schemes import get_scheme
from multidraft.schemes.specinfer import RRSPlan
from multidraft.schemes.spectr import _SpecTrPlan, spectr_rho
from multidraft.theory import IID, Deterministic, Independent, softmax, top_k, top_p, zipf
from multidraft.theory.verifier import BLOCK, OutsideTarget, TargetSplit, draw_levels

N = 131072


def noisy_draft(p: np.ndarray, keep: int | float, temperature: float, rng: np.random.Generator) -> np.ndarray:
    """A perturbed, tempered copy of p cut by top-k (an int) or top-p (a float)."""
    q = softmax(np.log(np.maximum(p, 1e-300)) + rng.normal(size=len(p)) * 0.5, temperature=temperature)
    return top_k(q, keep) if isinstance(keep, int) else top_p(q, keep)


def zipf_target(n: int, rng: np.random.Generator, zeros: float = 0.0) -> np.ndarray:
    """A Zipf target (exponent 1.1), with a fraction ``zeros`` of its tokens set to mass zero."""
    p = zipf(n, exponent=1.1, rng=rng)
    if zeros:
        p = np.where(rng.random(n) < zeros, 0.0, p)
        p /= p.sum()
    return p


def make_law(kind: str, p: np.ndarray, keep, k: int, rng: np.random.Generator):
    if kind == "iid":
        return IID(noisy_draft(p, keep, 1.3, rng), k)
    if kind == "independent":
        return Independent([noisy_draft(p, keep, 0.8 + 0.2 * i, rng) for i in range(k)])
    return Deterministic(np.argsort(-p)[:k], len(p))


def dense_rrs(p: np.ndarray, drafts: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """The published RRS over the whole vocabulary: ``(steps [K, n], residual [n], acceptance)``,
    acceptance ``1 - Π_i (1 - Σ_y min(r_{i-1}, q_i))``."""
    residual, miss, steps = p, 1.0, []
    for q in drafts:
        steps.append(np.minimum(np.divide(residual, q, out=np.zeros_like(q), where=q > 0), 1.0))
        miss *= 1.0 - np.minimum(residual, q).sum()
        rest = np.maximum(residual - q, 0.0)
        residual = rest / rest.sum() if rest.sum() > 0 else residual
    return np.stack(steps), residual, 1.0 - miss


def dense_spectr(p: np.ndarray, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, float]:
    """SpecTr's K-SEQ over the whole vocabulary: ``(step [n], residual [n], acceptance)``."""
    rho = spectr_rho(p, q, k)
    kept = np.minimum(q, p / rho)
    beta = kept.sum()
    rest = np.maximum(p - kept * (1.0 - (1.0 - beta) ** k) / beta, 0.0)
    residual = rest / rest.sum()
    step = np.minimum(np.divide(p, rho * q, out=np.zeros_like(q), where=q > 0), 1.0)
    miss = (1.0 - beta) ** k
    acceptance = 1.0 - miss + residual @ (miss - np.clip(1.0 - beta - (q - kept), 0.0, None) ** k)
    return step, residual, acceptance


def output_law(drafts: np.ndarray, step: np.ndarray, residual: np.ndarray) -> np.ndarray:
    """``P(Y = ·)`` of a sequential test with independent drafts ``[K, n]``: draft i is reached
    with ``Π_{j<i} (1 - Σ_y q_j a_j)`` whatever the earlier drafts were."""
    step = np.broadcast_to(step, drafts.shape)
    out, reach = np.zeros(drafts.shape[1]), 1.0
    for q, a in zip(drafts, step):
        out += reach * q * a
        reach *= 1.0 - float(np.sum(q * a))
    return out + reach * residual


SPARSE_CASES = [("iid", 10, 2), ("iid", 100, 4), ("iid", 1000, 8), ("iid", 0.95, 4), ("independent", 100, 3), ("independent", 0.9, 2), ("deterministic", None, 4)]


@pytest.mark.parametrize("kind, keep, k", SPARSE_CASES)
def test_specinfer_on_the_support_equals_the_full_vocabulary(kind, keep, k):
    rng = np.random.default_rng(k)
    p = zipf_target(N, rng)
    law = make_law(kind, p, keep, k, rng)
    plan = get_scheme("specinfer").prepare(p, law)
    assert not plan.split.whole and len(plan.split.support) == np.count_nonzero(law.support) < N
    steps, residual, acceptance = dense_rrs(p, law.marginals())
    assert plan.acceptance == pytest.approx(acceptance, abs=1e-12)
    step, rule_residual = plan.rule
    np.testing.assert_allclose(step, steps, rtol=0, atol=1e-12)
    np.testing.assert_allclose(rule_residual, residual, rtol=0, atol=1e-12)
    np.testing.assert_allclose(output_law(law.marginals(), step, rule_residual), p, rtol=0, atol=1e-12)


@pytest.mark.parametrize("law_name, keep", [("iid", 10), ("iid", 0.95), ("wor", 100), ("greedy", 1000)])
def test_single_draft_on_the_support_equals_the_canonical_step(law_name, keep):
    """``single`` (any law with K = 1) runs SpecInfer's plan on the support: its acceptance,
    step and residual against the canonical single-draft step over all n tokens,
    ``(min(1, p/q), norm((p - q)_+))``, and ``Σ min(p, q)``; the output law is p."""
    from multidraft.theory import canonical_step
    from multidraft.theory.laws import LAWS

    rng = np.random.default_rng(len(law_name))
    p = zipf_target(N, rng)
    law = LAWS[law_name](noisy_draft(p, keep, 1.3, rng), 1)
    plan = get_scheme("single").prepare(p, law)
    q = law.marginal(0)
    assert not plan.split.whole and len(plan.split.support) == np.count_nonzero(q)
    step, residual = canonical_step(p, q)
    assert plan.acceptance == pytest.approx(np.minimum(p, q).sum(), abs=1e-12)
    rule_step, rule_residual = plan.rule
    np.testing.assert_allclose(rule_step[0], step, rtol=0, atol=1e-12)
    np.testing.assert_allclose(rule_residual, residual, rtol=0, atol=1e-12)
    np.testing.assert_allclose(output_law(q[None], rule_step, rule_residual), p, rtol=0, atol=1e-12)


@pytest.mark.parametrize("keep, k", [(1, 2), (10, 2), (100, 4), (1000, 8), (0.95, 4), (0.5, 8)])
def test_spectr_on_the_support_equals_the_full_vocabulary(keep, k):
    rng = np.random.default_rng(10 + k)
    p = zipf_target(N, rng)
    law = IID(noisy_draft(p, keep, 1.3, rng), k)
    plan = get_scheme("spectr").prepare(p, law)
    assert not plan.split.whole
    step, residual, acceptance = dense_spectr(p, law.draft, k)
    assert plan.acceptance == pytest.approx(acceptance, abs=1e-12)
    rule_step, rule_residual = plan.rule
    np.testing.assert_allclose(rule_step, step, rtol=0, atol=1e-12)
    np.testing.assert_allclose(rule_residual, residual, rtol=0, atol=1e-12)
    np.testing.assert_allclose(output_law(law.marginals(), rule_step, rule_residual), p, rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", ["specinfer", "spectr"])
def test_a_full_support_draft_keeps_the_dense_path(name):
    rng = np.random.default_rng(3)
    p, q = rng.dirichlet(np.ones(500)), rng.dirichlet(np.ones(500))
    plan = get_scheme(name).prepare(p, IID(q, 3))
    assert plan.split.whole and plan.split.inside is plan.target and plan.split.outside_mass == 0.0
    assert np.shares_memory(plan.drafts, plan.law.draft)  # the law's rows, not a gather


@pytest.mark.parametrize("name", ["specinfer", "spectr"])
@pytest.mark.parametrize("k", [2, 3])
def test_small_sparse_cases_by_enumeration(name, k):
    """Every draft tuple of a top-4 draft at n = 12 (a third of the target outside the
    support): the plan's conditional laws average to p and give its closed-form acceptance."""
    rng = np.random.default_rng(k)
    p = rng.dirichlet(np.ones(12))
    laws = [IID(top_k(rng.dirichlet(np.ones(12)), 4), k)]
    if name == "specinfer":
        laws += [Independent([top_k(rng.dirichlet(np.ones(12)), 3 + i) for i in range(k)]), Deterministic([7, 2, 7][:k], 12)]
    for law in laws:
        plan = get_scheme(name).prepare(p, law)
        assert not plan.split.whole
        np.testing.assert_allclose(plan.output_distribution(), p, rtol=0, atol=1e-14)
        assert plan.enumerated_acceptance() == pytest.approx(plan.acceptance, abs=1e-14)


@pytest.mark.parametrize("name, kind", [("specinfer", "iid"), ("specinfer", "independent"), ("specinfer", "deterministic"), ("spectr", "iid")])
def test_sampled_tokens_never_have_target_mass_zero(name, kind):
    """A target with 30% of its tokens at mass zero (inside and outside the support): neither
    the accepted drafts nor the residual's draws, on S or off it, ever emit one."""
    rng = np.random.default_rng(4)
    p = zipf_target(N, rng, zeros=0.3)
    law = make_law(kind, p, 0.9, 3, rng)
    plan = get_scheme(name).prepare(p, law)
    tokens = plan.sample(law.sample(rng, 20_000), rng)
    assert np.all(p[tokens] > 0)
    assert np.any(~law.support[tokens])  # the residual's part off the support is drawn
    drafts = law.sample(rng)
    assert all(p[get_scheme(name).select(p, law, drafts, rng).token] > 0 for _ in range(20))


# ----------------------------------------------------------------------------------------------
# A float plan runs a tuple by one pass over the residuals (RRSPlan.walk), never building the
# [K, s] step table; the table (SequentialRule) is the second route.


class _FirstResidualReused(RRSPlan):
    """WRONG: a lazy plan that tests draft 1 against r_0 again (it skips the first update)."""

    def residual_pass(self):
        steps = super().residual_pass()
        first = next(steps)
        yield first
        yield first
        next(steps)
        yield from steps


WALK_CASES = [("dense", None, 4), ("iid", 100, 4), ("independent", 0.9, 3), ("deterministic", None, 4)]


@pytest.mark.parametrize("kind, keep, k", WALK_CASES)
def test_specinfer_walk_equals_the_step_table_and_a_twin_reusing_r0_is_caught(kind, keep, k):
    """At 200 sampled tuples (n = 4096, full or cut drafts): the walk's a_i(x_i) and r_K equal
    the table's bit for bit (the same float operations), its conditional laws and its draws from
    the same generator state too; a draw stops once every row has accepted (then no residual).
    The twin that tests draft 1 against r_0 differs from the table."""
    rng = np.random.default_rng(7)
    p = zipf_target(4096, rng)
    law = IID(softmax(np.log(p) + rng.normal(size=len(p)) * 0.5, temperature=1.3), k) if kind == "dense" else make_law(kind, p, keep, k, rng)
    plan = get_scheme("specinfer").prepare(p, law)
    rule = plan.sequential_rule
    tuples = law.sample(rng, 200) if kind != "deterministic" else law.tokens[None, :]
    accept, (residual, scale) = plan.walk(tuples)
    np.testing.assert_array_equal(accept, rule._accept(tuples))
    np.testing.assert_array_equal(residual, rule.residual)
    assert scale == rule.outside
    np.testing.assert_array_equal(plan.conditional(tuples), rule.conditional(tuples))
    np.testing.assert_array_equal(plan.sample(tuples, np.random.default_rng(3)), rule.sample(tuples, np.random.default_rng(3)))
    early, last = plan.walk(tuples, np.zeros(tuples.shape))  # U = 0 < a_1 wherever p(x_1) > 0
    assert last is None and not early[:, 1:].any()
    if kind != "deterministic":
        twin = _FirstResidualReused(plan.scheme, p, law, False)
        assert np.abs(twin.walk(tuples)[0] - accept).max() > 1e-3


def test_specinfer_float_plan_is_lossless_through_the_walk_and_the_twin_is_not():
    """Output law by enumerating every tuple (n = 6, K = 3, iid and independent): p to 1e-12
    through the walk; the twin's is off by more than 1e-3."""
    rng = np.random.default_rng(11)
    p = rng.dirichlet(np.ones(6))
    for law in (IID(rng.dirichlet(np.ones(6)), 3), Independent(rng.dirichlet(np.ones(6), size=3))):
        plan = get_scheme("specinfer").prepare(p, law)
        np.testing.assert_allclose(plan.output_distribution(), p, rtol=0, atol=1e-12)
        assert "sequential_rule" not in vars(plan)  # the float plan never built the table
        assert np.abs(_FirstResidualReused(plan.scheme, p, law, False).output_distribution() - p).max() > 1e-3


# ----------------------------------------------------------------------------------------------
# Teeth: twins that get the target outside the support wrong.


class _OutsideForgotten(RRSPlan):
    """WRONG: RRS as if the target lived on the support (no mass outside it)."""

    @cached_property
    def split(self) -> TargetSplit:
        split = TargetSplit(self.target, self.law.support_tokens())
        split.outside_mass = 0.0
        return split


class _UniformOutside:
    """WRONG: the tokens off the support drawn uniformly (mass right, law inside it wrong)."""

    def __init__(self, split: TargetSplit) -> None:
        self.rest = np.setdiff1d(np.arange(split.n), split.support)
        self.mass = OutsideTarget(split.target, split.support).mass

    def draw(self, uniforms: np.ndarray) -> np.ndarray:
        return self.rest[np.minimum(np.asarray(uniforms) * len(self.rest), len(self.rest) - 1).astype(np.int64)]


class _SpecTrUniformOutside(_SpecTrPlan):
    @cached_property
    def split(self) -> TargetSplit:
        split = TargetSplit(self.target, self.law.support_tokens())
        split.outside = _UniformOutside(split)
        return split


@pytest.mark.statistical
@pytest.mark.parametrize("name, twin", [("specinfer", _OutsideForgotten), ("spectr", _SpecTrUniformOutside)])
def test_sampler_outputs_the_target_and_a_twin_wrong_outside_is_caught(name, twin):
    """N = 200,000 runs with a top-20 draft at n = 5000 (about half the target outside the
    support): output frequencies match p (chi-square over 80 bins: the 60 heaviest tokens, then
    20 bins of the rest by decreasing p); the twin fails."""
    from scipy import stats

    rng = np.random.default_rng(5)
    p = zipf_target(5000, rng)
    law = IID(noisy_draft(p, 20, 1.3, rng), 3)
    scheme = get_scheme(name)
    plan = scheme.prepare(p, law)
    assert 0.2 < plan.split.outside_mass < 0.8
    order = np.argsort(-p)
    bins = np.empty(len(p), dtype=np.int64)
    bins[order[:60]] = np.arange(60)
    bins[order[60:]] = 60 + np.arange(len(p) - 60) * 20 // (len(p) - 60)
    expected = np.bincount(bins, p) * 200_000

    def pvalue(tokens: np.ndarray) -> float:
        return stats.chisquare(np.bincount(bins, np.bincount(tokens, minlength=len(p))), expected).pvalue

    tuples = law.sample(rng, 200_000)
    assert pvalue(plan.sample(tuples, rng)) > 1e-3
    assert pvalue(twin(scheme, p, law, False).sample(tuples, rng)) < 1e-6


# ----------------------------------------------------------------------------------------------
# The split's draws.


@pytest.mark.parametrize("count", [1, 30, 500])
def test_outside_draws_by_blocks_and_in_one_pass_agree_with_the_masked_inverse_cdf(count):
    """:meth:`OutsideTarget.draw` goes block by block for few draws and by one masked cumsum for
    many: both land where the inverse CDF of p with the support zeroed puts each level."""
    rng = np.random.default_rng(count)
    n = 40 * BLOCK + 11
    p = zipf_target(n, rng, zeros=0.2)
    support = np.sort(rng.choice(n, 300, replace=False))
    outside = OutsideTarget(p, support)
    masked = p.copy()
    masked[support] = 0.0
    assert outside.mass == pytest.approx(masked.sum(), abs=1e-14)
    uniforms = (np.arange(count) + 0.5) / count
    drawn = outside.draw(uniforms)
    assert (count >= len(outside.blocks)) == (count == 500)
    np.testing.assert_array_equal(drawn, draw_levels(masked, uniforms * masked.sum()))
    assert np.all(masked[drawn] > 0)


def test_split_draw_chooses_the_part_by_mass():
    """:meth:`TargetSplit.draw` of ``(w on S, c·p off S)``: levels below ``Σ w`` land on S by
    inverse CDF, the rest off S; a zero scale never leaves S."""
    p = np.full(10, 0.1)
    split = TargetSplit(p, np.array([2, 5]))
    weights = np.array([0.3, 0.1])
    assert split.outside_mass == pytest.approx(0.8)
    # Σ w = 0.4, c · p(Ω ∖ S) = 0.5 · 0.8 = 0.4: the halves of [0, 1).
    tokens = split.draw(weights, 0.5, np.array([0.0, 0.3, 0.49, 0.5, 0.999]))
    assert tokens[:2].tolist() == [2, 2] and tokens[2] == 5 and not np.isin(tokens[3:], [2, 5]).any()
    assert np.isin(split.draw(weights, 0.0, np.linspace(0, 0.999, 50)), [2, 5]).all()
    np.testing.assert_allclose(split.dense(weights, 0.5), [0.05, 0.05, 0.3, 0.05, 0.05, 0.1, 0.05, 0.05, 0.05, 0.05])
