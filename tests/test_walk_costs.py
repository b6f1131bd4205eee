"""The per-node costs of the tree walks outside the node's fit (issue 30, item 5), each the same
bits as the code it replaces: the compiled single-draft step (:func:`~multidraft.theory.canonical_step`
on long float64 rows), the residual draw without ``rng.choice``'s checks
(:func:`~multidraft.schemes._importance.residual_draws`) and the token walk's run holding a node's
target row without a copy."""

from __future__ import annotations

import numpy as np
import pytest

from multidraft.schemes._importance import residual_draws
from multidraft.theory import softmax, zipf
from multidraft.theory.laws import _field
from multidraft.theory.laws._field import normalise, positive_part, safe_divide
from multidraft.trees import ShapedTree, get_verifier
from small_trees import three_two_draws

N = 4096  # the compiled step's shortest row (_field.COMPILED_FROM)


def _numpy_step(p: np.ndarray, r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The step as numpy expressions (the code the compiled pass replaces)."""
    return np.minimum(safe_divide(p, r), 1), normalise(positive_part(p - r), p)


def _rows(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """p and r over N..3N tokens with zeros in both, r above and below p, r = p for some seeds."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(N, 3 * N))
    p, r = rng.random(n) ** rng.integers(1, 6), rng.random(n) ** rng.integers(1, 6)
    p[rng.random(n) < 0.2], r[rng.random(n) < 0.4] = 0.0, 0.0
    if seed % 5 == 0:
        r = p.copy()  # (p - r)_+ has zero mass: the residual is p
    return p / p.sum(), r / r.sum()


def _same_bits(first: np.ndarray, second: np.ndarray) -> bool:
    return first.dtype == second.dtype and first.shape == second.shape and first.tobytes() == second.tobytes()


def test_the_compiled_step_is_numpys_step_bit_for_bit():
    import numba  # noqa: F401  (the compiled pass runs in a process that has loaded numba)

    for seed in range(40):
        p, r = _rows(seed)
        assert _field._compiled_rows(p, r)
        accept, residual = _field.canonical_step(p, r)
        expected = _numpy_step(p, r)
        assert _same_bits(accept, expected[0]) and _same_bits(residual, expected[1]), seed
    assert type(_field._step).__name__ == "CPUDispatcher"  # it ran compiled


def test_a_step_summed_in_another_order_is_caught():
    """WRONG twin: the residual normalised by a sequential sum (``cumsum``) instead of numpy's
    pairwise one: the bit comparison above tells them apart on some rows."""
    differs = 0
    for seed in range(40):
        p, r = _rows(seed)
        weights = positive_part(p - r)
        mass = np.cumsum(weights)[-1]
        if mass > 0:
            differs += not _same_bits(weights / mass, _numpy_step(p, r)[1])
    assert differs > 0


def test_the_step_of_short_rows_and_fractions_is_unchanged():
    from fractions import Fraction as F

    p, r = _rows(3)
    p, r = p[:100] / p[:100].sum(), r[:100] / r[:100].sum()
    assert not _field._compiled_rows(p, r)
    accept, residual = _field.canonical_step(p, r)
    assert _same_bits(accept, _numpy_step(p, r)[0]) and _same_bits(residual, _numpy_step(p, r)[1])
    accept, residual = _field.canonical_step(np.array([F(1, 2), F(1, 2)], dtype=object), np.array([F(3, 4), F(1, 4)], dtype=object))
    assert accept.tolist() == [F(2, 3), 1] and residual.tolist() == [0, 1]


def _draws(draw, seed: int) -> tuple[list[int], float]:
    """Draws of :func:`residual_draws`-like ``draw`` on a law with zeros, and the next uniform."""
    p, _ = _rows(seed)
    rng = np.random.default_rng(seed)
    tokens = draw(p, 1 + seed % 4, rng)
    return np.asarray(tokens).tolist(), rng.random()


def test_the_residual_draws_are_rng_choices_draws():
    """The same tokens and the same generator state after them as ``rng.choice(n, size, p=law)``."""
    for seed in range(60):
        assert _draws(residual_draws, seed) == _draws(lambda law, count, rng: rng.choice(len(law), size=count, p=law), seed)


def test_residual_draws_taking_their_uniforms_in_another_order_are_caught():
    """WRONG twin: the uniforms of several draws used in reverse order (the same generator state
    afterwards, other tokens): the comparison above tells it apart."""

    def reversed_draws(law, count, rng):
        cumulative = np.cumsum(law)
        cumulative /= cumulative[-1]
        return cumulative.searchsorted(rng.random(count)[::-1], side="right")

    choice = lambda law, count, rng: rng.choice(len(law), size=count, p=law)  # noqa: E731
    assert any(_draws(reversed_draws, seed) != _draws(choice, seed) for seed in range(60))


def _wor_tree(seed: int) -> ShapedTree:
    """A root drafting 3 tokens without replacement, each child 2 (targets of exact sum one:
    held by the plans, not copied)."""
    rng = np.random.default_rng(seed)
    target = np.array([zipf(N, exponent=1.1, rng=rng) for _ in range(10)])
    target[:, 0] += 1.0 - target.sum(axis=1)  # rows summing to exactly one (as_distribution keeps them)
    draft = np.array([softmax((np.log(p) + 0.5 * rng.standard_normal(N)) / 1.2) for p in target])
    return ShapedTree(*three_two_draws(rng, N, draft), target, draft, "without-replacement")


def _runs(verifier, tree) -> list[tuple[int, ...]]:
    return [verifier.verify(tree, np.random.default_rng([7, i])).tokens for i in range(12)]


def test_the_walks_hold_the_rows_and_never_write_into_them():
    """token:optimal's runs and E[τ] on a tree drafted without replacement: the plans and their
    rules hold the tree's target rows (no copy), leave them as they were, and give the runs and
    the value of plans on copies."""
    tree = _wor_tree(2)
    assert np.all(tree.target.sum(axis=1) == 1.0)
    before = tree.target.copy()
    verifier = get_verifier("token:optimal")
    runs, value = _runs(verifier, tree), verifier.expected_accepted(tree)
    assert np.array_equal(tree.target, before)
    copied = ShapedTree(tree.parent, tree.token, tree.draws, tree.target.copy(), tree.draft.copy(), tree.law)
    assert runs == _runs(verifier, copied) and value == verifier.expected_accepted(copied)


def test_a_run_whose_plan_writes_into_its_target_is_caught(monkeypatch):
    """WRONG twin: a fit that halves its target in place and fits on twice it (the same rule, so
    the same runs; harmless on a copy, not on the tree's row) is caught."""
    import multidraft.schemes.optimal as optimal

    fit = optimal.checked_selection_rule
    monkeypatch.setattr(optimal, "checked_selection_rule", lambda p, law: fit(np.multiply(p, 0.5, out=p) * 2.0, law))
    tree = _wor_tree(2)
    before = tree.target.copy()
    get_verifier("token:optimal").verify(tree, np.random.default_rng(0))  # one run: the root's plan fits
    assert not np.array_equal(tree.target, before)


@pytest.mark.parametrize("name", ["token:optimal", "selective"])
def test_the_law_and_runs_of_a_wor_tree_are_unchanged_by_the_step(name, monkeypatch):
    """E[τ | tree] and the runs with the compiled step equal those with numpy's step, bit for bit
    (the wor rule's step is built in :class:`~multidraft.theory.verifier.FrontBackRule`, on demand)."""
    import multidraft.theory.verifier._selection_rule as selection_rule

    tree = _wor_tree(3)
    verifier = get_verifier(name)
    value, runs = verifier.expected_accepted(tree), _runs(verifier, tree)
    monkeypatch.setattr(selection_rule, "canonical_step", _numpy_step)
    assert verifier.expected_accepted(tree) == value and _runs(verifier, tree) == runs


def _checks_and_fits(monkeypatch, fit_of=None) -> tuple[int, int]:
    """(target checks, optimal-rule fits) in token:optimal's E[τ] walk on a wor tree; ``fit_of``:
    another fit in place of the plan's (a twin)."""
    import multidraft.schemes.optimal as optimal
    from multidraft.theory.laws import DraftLaw

    checks, fits = [], []
    check, fit = DraftLaw.check_target, fit_of or optimal.checked_selection_rule
    monkeypatch.setattr(DraftLaw, "check_target", lambda self, *args, **options: checks.append(1) or check(self, *args, **options))
    monkeypatch.setattr(optimal, "checked_selection_rule", lambda p, law: fits.append(1) or fit(p, law))
    get_verifier("token:optimal").expected_accepted(_wor_tree(4))
    return len(checks), len(fits)


def test_the_walk_checks_each_nodes_target_once(monkeypatch):
    """The optimal scheme's plan checks the node's target in ``prepare`` and fits its rule on
    that checked array (:func:`~multidraft.theory.verifier.checked_selection_rule`): one check
    per fitted node, not a second pass of :meth:`~multidraft.theory.laws.DraftLaw.check_target`
    inside the fit."""
    checks, fits = _checks_and_fits(monkeypatch)
    assert fits > 1 and checks == fits


def test_a_fit_that_checks_its_target_again_is_caught(monkeypatch):
    """WRONG twin: the plan's fit through the public entry point, which checks the target again."""
    from multidraft.theory.verifier import optimal_selection_rule

    checks, fits = _checks_and_fits(monkeypatch, lambda p, law: optimal_selection_rule(p, law, copy=False))
    assert fits > 1 and checks == 2 * fits
