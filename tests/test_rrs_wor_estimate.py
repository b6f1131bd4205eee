"""The Rao-Blackwellised acceptance estimate of SpecInfer without replacement (rrs-wor, K > 2):
its exact expectation (every ordered draft tuple, weighted by its probability) is the exact
acceptance, its interval covers the exact value, and a wrong twin (only the first step's
acceptance counted) is far outside the interval."""

from __future__ import annotations

import numpy as np
import pytest

from multidraft.schemes.rrs_wor import AcceptanceEstimate, RRSWithoutReplacement
from multidraft.theory import WithoutReplacement, softmax, zipf


@pytest.mark.parametrize("k", [2, 3, 4])
def test_expectation_is_the_exact_acceptance(k):
    scheme = RRSWithoutReplacement()
    rng = np.random.default_rng(k)
    for _ in range(5):
        p, q = rng.dirichlet(np.ones(6)), rng.dirichlet(np.full(6, 0.5))
        law = WithoutReplacement(q, k)
        tuples, probs = law.enumerate()
        assert probs @ scheme._rao_blackwell_paths(p, law, tuples) == pytest.approx(scheme.acceptance(p, law), abs=1e-14)


def test_interval_covers_the_exact_value_and_a_biased_twin_is_caught():
    scheme = RRSWithoutReplacement()
    p = zipf(30, exponent=1.1, rng=np.random.default_rng(0))
    law = WithoutReplacement(softmax(np.log(p), temperature=1.6), 4)
    exact = scheme.acceptance(p, law)  # enumeration: 30·29·28·27 tuples
    estimate = scheme.estimate_acceptance(p, law, np.random.default_rng(1), half_width=2e-3)
    assert isinstance(estimate, AcceptanceEstimate) and estimate.half_width <= 2e-3
    assert abs(estimate.value - exact) <= 1.5 * estimate.half_width
    assert "estimate" in str(estimate)

    class FirstStepTwin(RRSWithoutReplacement):
        """WRONG: ignores the steps after the first rejection (β_i dropped for i > 1)."""

        def _sampled_paths(self, p, law, count, rng):
            return np.full(count, float(np.minimum(p, law.draft).sum())) + 0.01 * rng.random(count)

    wrong = FirstStepTwin().estimate_acceptance(p, law, np.random.default_rng(1), half_width=2e-3)
    assert abs(wrong.value - exact) > 10 * estimate.half_width


def test_bad_arguments():
    scheme = RRSWithoutReplacement()
    law = WithoutReplacement([0.5, 0.25, 0.25], 2)
    with pytest.raises(ValueError, match="half_width"):
        scheme.estimate_acceptance([0.25, 0.25, 0.5], law, np.random.default_rng(0), half_width=0.0)
