"""Statistical checks of every registered scheme's sampler, and the deliberately wrong variants
that the exact and the statistical checks must both catch (the suite's teeth).

For every (scheme, instance) pair the vectorised sampler :meth:`Scheme.sample` (the code path of
``select``) runs on N = 30,000 draft tuples drawn from the law:

* the output frequencies pass a chi-square goodness-of-fit test against the target;
* target tokens of probability zero are never emitted;
* the empirical acceptance lies in the binomial interval around the exact acceptance.

All tests of this file and of ``tests/test_schemes_batch.py`` share one Bonferroni-corrected
level: family-wise error rate ``FAMILY_ALPHA`` over ``TESTS`` checks. Seeds are fixed.
"""

from __future__ import annotations

import zlib
from functools import cached_property

import numpy as np
import pytest
from scipy import stats

from multidraft.schemes import SCHEMES, get_scheme
from multidraft.schemes.rrs_wor import RRSWithoutReplacement
from multidraft.schemes.specinfer import RRSPlan, SpecInfer, rrs_pass, rrs_residuals
from multidraft.schemes.base import SequentialRule, safe_divide
from multidraft.theory import IID, Deterministic, Greedy, Independent, WithoutReplacement

N = 30_000
FAMILY_ALPHA = 1e-3


def _instances() -> dict[str, tuple[np.ndarray, object]]:
    rng = np.random.default_rng(2026)
    n = 5
    p = rng.dirichlet(np.ones(n))
    p[4] = 0.0  # a target token of probability zero that the drafts do propose
    p /= p.sum()
    q1, q2, q3 = (rng.dirichlet(np.ones(n) * a) for a in (0.7, 1.0, 2.0))
    peak_target = np.array([0.1, 0.3, 0.3, 0.3, 0.0])
    peak = np.array([0.7, 0.1, 0.1, 0.05, 0.05])
    return {
        "iid-k1": (p, IID(q1, 1)),
        "iid-k2": (p, IID(q1, 2)),
        "iid-k3": (p, IID(q2, 3)),
        "independent-k2": (p, Independent([q1, q3])),
        "independent-k3": (p, Independent([q1, q2, q3])),
        "wor-k2": (p, WithoutReplacement(q1, 2)),
        "wor-k3": (p, WithoutReplacement(q2, 3)),
        "greedy-k3": (p, Greedy(q1, 3)),
        "deterministic-k2": (p, Deterministic([0, 4], n)),
        # A peaked draft on a token the target rarely wants: the wrong variants below are far
        # off here (by 0.04 to 0.12 in some token's probability).
        "peaked-wor-k2": (peak_target, WithoutReplacement(peak, 2)),
        "peaked-wor-k3": (peak_target, WithoutReplacement(peak, 3)),
        "peaked-independent-k3": (peak_target, Independent([peak, peak[::-1], np.full(n, 1 / n)])),
    }


INSTANCES = _instances()
CASES = [(name, case) for name, cls in SCHEMES.items() for case, (_, law) in INSTANCES.items() if cls().supports(law)]
#: Batched (torch) cases checked in tests/test_schemes_batch.py.
BATCH_CASES = [(name, case) for name, case in CASES if SCHEMES[name]().supports_batch(INSTANCES[case][1])]
#: Two checks (frequencies, acceptance) per sampler case and per batched case.
TESTS = 2 * (len(CASES) + len(BATCH_CASES))
ALPHA = FAMILY_ALPHA / TESTS
Z = float(stats.norm.isf(ALPHA / 2))


def seed_of(*parts: str) -> int:
    return zlib.crc32("/".join(parts).encode())


def frequency_pvalue(tokens: np.ndarray, target: np.ndarray) -> float:
    """Chi-square p-value of the token counts against the target (zero-probability tokens
    must be absent; they are excluded from the statistic)."""
    counts = np.bincount(tokens, minlength=len(target))
    assert counts.shape == target.shape
    assert counts[target == 0].sum() == 0, "a token of target probability zero was emitted"
    support = target > 0
    return float(stats.chisquare(counts[support], len(tokens) * target[support]).pvalue)


def assert_acceptance_in_interval(accepted: np.ndarray, expected: float) -> None:
    empirical = float(np.mean(accepted))
    width = Z * np.sqrt(expected * (1 - expected) / len(accepted)) + 1e-12
    assert abs(empirical - expected) <= width, f"empirical {empirical:.5f} vs exact {expected:.5f} ± {width:.5f}"


def run_sampler(scheme, case: str, n_samples: int = N):
    target, law = INSTANCES[case]
    rng = np.random.default_rng(seed_of(scheme.name, case))
    drafts = law.sample(rng, n_samples)
    tokens, accepted = scheme.sample(target, law, drafts, rng)
    assert tokens.shape == accepted.shape == (n_samples,)
    return target, law, tokens, accepted


@pytest.mark.statistical
@pytest.mark.parametrize("name, case", CASES, ids=[f"{n}-{c}" for n, c in CASES])
def test_sampler_matches_target_and_exact_acceptance(name, case):
    scheme = get_scheme(name)
    target, law, tokens, accepted = run_sampler(scheme, case)
    assert frequency_pvalue(tokens, target) > ALPHA
    assert_acceptance_in_interval(accepted, scheme.acceptance(target, law))


# ----------------------------------------------------------------------------------------------
# Teeth: deliberately wrong variants, kept here so the suite proves it can fail.


class RRSWithoutRenormalisation(RRSWithoutReplacement):
    """WRONG: tests every draft against q itself, ignoring that later drafts were drawn from q
    renormalised off the earlier ones."""

    name = "wrong-rrs-wor"

    @staticmethod
    def _step_draft(draft, left, out=None):
        return np.broadcast_to(draft, left.shape).copy()


class _WrongResidualPlan(RRSPlan):
    @cached_property
    def sequential_rule(self):
        residuals, scales = rrs_residuals(self.split.inside, np.roll(self.drafts, -1, axis=0), self.split.outside_mass)
        return SequentialRule(self.split, np.minimum(safe_divide(residuals[:-1], self.drafts), 1), residuals[-1], scales[-1])

    def residual_pass(self):  # the same mistake in the float plans' walk
        return rrs_pass(self.split.inside, np.roll(self.drafts, -1, axis=0), self.split.outside_mass)


class SpecInferWrongResidual(SpecInfer):
    """WRONG: subtracts the next position's draft law when forming each residual (the residual
    taken against the wrong draft distribution)."""

    name = "wrong-specinfer"

    def _prepare(self, p, law, exact):
        return _WrongResidualPlan(self, p, law, exact)


WRONG = [
    (RRSWithoutRenormalisation, "peaked-wor-k2"),
    (RRSWithoutRenormalisation, "peaked-wor-k3"),
    (SpecInferWrongResidual, "peaked-independent-k3"),
]


@pytest.mark.parametrize("cls, case", WRONG, ids=[f"{c.name}-{case}" for c, case in WRONG])
def test_wrong_variant_fails_exact_losslessness(cls, case):
    target, law = INSTANCES[case]
    out = cls().output_distribution(target, law)
    assert np.abs(out - target).max() > 0.04


@pytest.mark.statistical
@pytest.mark.parametrize("cls, case", WRONG, ids=[f"{c.name}-{case}" for c, case in WRONG])
def test_wrong_variant_fails_the_statistical_check(cls, case):
    target, law, tokens, _ = run_sampler(cls(), case)
    counts = np.bincount(tokens, minlength=len(target))
    # Either a zero-probability token is emitted or the frequencies are rejected.
    assert counts[target == 0].sum() > 0 or frequency_pvalue(tokens, target) < ALPHA


def test_right_variants_pass_where_the_wrong_ones_fail():
    """The wrong variants are wrong only in the step they change: the right schemes pass the
    same exact check on the same instances."""
    for cls, case in WRONG:
        right = SpecInfer() if cls is SpecInferWrongResidual else RRSWithoutReplacement()
        target, law = INSTANCES[case]
        np.testing.assert_allclose(right.output_distribution(target, law), target, rtol=0, atol=1e-12)
