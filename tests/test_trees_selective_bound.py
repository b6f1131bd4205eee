"""The best any selective rule can reach on two iid chains of length two (issue 30, item 3):
selective's E[τ] as a function of its root law, checked against exact evaluation of the verifier
and against theory's P*; the certified maximum over selectable laws, checked against random
selectable laws and caught when its box bound drops its Lipschitz slack (the twin)."""

from __future__ import annotations

import numpy as np
import pytest

from multidraft.theory.laws import IID
from multidraft.theory.optimum import optimal_acceptance
from multidraft.theory.verifier import optimal_selection_rule
from multidraft.trees import SequenceModel, evaluate, get_verifier
from multidraft.trees import selective_bound
from multidraft.trees.selective_bound import best_selective_value, selective_value


def _models() -> list[SequenceModel]:
    """bench_downstream.py's families at K = 2, n = 3: Dirichlet(1), Dirichlet(0.3), temperature."""
    out = []
    for seed in (3000, 3002):
        out.append(SequenceModel.random(3, 2, np.random.default_rng(seed), alpha=1.0))
        out.append(SequenceModel.random(3, 2, np.random.default_rng(seed), alpha=0.3))
        out.append(SequenceModel.temperature(3, 2, np.random.default_rng(seed)))
    return out


def _selectable(model: SequenceModel, count: int, rng: np.random.Generator) -> np.ndarray:
    """``count`` random root laws r with Q(c)² ≤ r_c ≤ 1 − (1 − Q(c))², Σ r = 1 (rejection)."""
    q = np.asarray(model.draft_at(()), dtype=np.float64)
    draws = rng.dirichlet(np.ones(3), size=200 * count)
    keep = np.all(draws >= q**2, axis=1) & np.all(draws <= 1.0 - (1.0 - q) ** 2, axis=1)
    return draws[keep][:count]


@pytest.mark.parametrize("model", _models()[:3])
def test_formula_is_selective_at_the_curtain_law(model):
    """E[τ](r) at the curtain's r equals the exact evaluation of ``selective`` on the drafted trees."""
    p, q = model.target_at(()), model.draft_at(())
    law = optimal_selection_rule(p, IID(q, 2)).selection_law
    assert selective_value(model, law) == pytest.approx(float(evaluate(get_verifier("selective"), model, 2).expected_accepted), abs=1e-12)


def test_leaf_mass_is_theorys_optimum():
    """M_c(b, j) by the cut pieces equals theory's P* of (b P(· | c), 1 − b) against IID((Q(· | c), 0), j)."""
    model = _models()[0]
    child = selective_bound._Child(model, 1)
    for b in (0.0, 0.3, 0.75, 1.0):
        target = np.append(b * model.target_at((1,)), 1.0 - b)
        for j in (1, 2):
            expected = optimal_acceptance(target, IID(np.append(model.draft_at((1,)), 0.0), j)).value
            assert child.leaves(np.array([b]), j)[0] == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("model", _models())
def test_certified_maximum_bounds_every_selectable_law(model):
    """upper ≥ E[τ](r) for 400 random selectable r and the curtain's; lower is attained by a
    selectable law; upper − lower within the tolerance."""
    bound = best_selective_value(model)
    q = np.asarray(model.draft_at(()), dtype=np.float64)
    assert bound.upper - bound.lower <= 1e-6 + 1e-12
    assert np.all(bound.law >= q**2 - 1e-15) and np.all(bound.law <= 1 - (1 - q) ** 2 + 1e-15)
    assert selective_value(model, bound.law) == pytest.approx(bound.lower, abs=1e-12)
    laws = _selectable(model, 400, np.random.default_rng(7))
    laws = np.vstack([laws, optimal_selection_rule(model.target_at(()), IID(q, 2)).selection_law])
    assert max(selective_value(model, r) for r in laws) <= bound.upper + 1e-12


def test_a_bound_without_its_slack_is_caught(monkeypatch):
    """Twin: the curved piece's bound taken at the interval's middle, without the Lipschitz slack
    and with the perspective term at the middle: the search prunes boxes that hold the maximum,
    and some selectable law beats its 'upper' bound."""

    def middle_only(self, low, high):
        middle = 0.5 * (np.asarray(low) + np.asarray(high))
        return self.value(middle)

    monkeypatch.setattr(selective_bound._Child, "upper", middle_only)
    beaten = 0
    for model in _models():
        bound = best_selective_value(model, tolerance=1e-3)
        laws = _selectable(model, 400, np.random.default_rng(7))
        beaten += max(selective_value(model, r) for r in laws) > bound.upper + 1e-12
    assert beaten > 0


def test_bad_models_are_refused():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="at most 4 tokens"):
        best_selective_value(SequenceModel.random(5, 2, rng))
    with pytest.raises(ValueError, match="length 2"):
        best_selective_value(SequenceModel.random(3, 3, rng))
    flat = SequenceModel.random(3, 2, rng)
    draft = [np.array(t, dtype=np.float64) for t in flat.draft]
    draft[0][0] = [0.0, 0.5, 0.5]
    with pytest.raises(ValueError, match="draftable"):
        best_selective_value(SequenceModel(flat.target, draft))
