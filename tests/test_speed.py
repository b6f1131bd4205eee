"""Block efficiency, walltime and throughput models (multidraft.theory.speed).

Every closed form meets a second route: exact rational recursions, simulation of the model it
claims to describe (with a deliberately wrong twin the same test must reject), brute force
over the grid, and the special cases where the tree model collapses to a chain.
"""

from __future__ import annotations

import json
import re
from fractions import Fraction
from math import comb

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from multidraft.theory.speed import (
    LatencyModel,
    best_configuration,
    best_length,
    chain_block_efficiency,
    iteration_seconds,
    throughput,
    tree_block_efficiency,
    walltime_improvement,
)

probability = st.floats(0.0, 1.0, allow_nan=False)
lengths = st.integers(1, 12)
acceptance_vectors = st.lists(probability, min_size=1, max_size=5)
SEED = 20250101


# ---------------------------------------------------------------- independent references


def exact_tree(acceptance: list[Fraction], length: int, survival: Fraction) -> Fraction:
    """Backward recursion in rationals: f_d(j) = a_j (1 + Σ_j' T(j, j') f_{d-1}(j'))."""
    k = len(acceptance)

    def transition(j: int, j_next: int) -> Fraction:
        s = j_next - 1
        return comb(j - 1, s) * survival**s * (1 - survival) ** (j - 1 - s) if s <= j - 1 else Fraction(0)

    future = [Fraction(0)] * (k + 1)  # future[j]: expected accepted tokens with d depths left
    for _ in range(length):
        future = [Fraction(0)] + [
            acceptance[j - 1] * (1 + sum(transition(j, t) * future[t] for t in range(1, j + 1)))
            for j in range(1, k + 1)
        ]
    return 1 + future[k]


def simulate_tree(acceptance, length: int, survival: float, n: int, rng: np.random.Generator) -> np.ndarray:
    """Tokens per iteration of n independent iterations of the i.i.d. tree model, literally."""
    a = np.asarray(acceptance, dtype=float)
    live = np.full(n, a.size)
    alive = np.ones(n, dtype=bool)
    tokens = np.ones(n)
    for _ in range(length):
        accepted = alive & (rng.random(n) < a[live - 1])
        tokens += accepted
        alive = accepted
        live = np.where(alive, 1 + rng.binomial(live - 1, survival), live)
    return tokens


def assert_statistically_equal(samples: np.ndarray, expected: float, sigmas: float = 4.5) -> None:
    error = samples.std(ddof=1) / np.sqrt(samples.size)
    assert abs(samples.mean() - expected) <= sigmas * error, (samples.mean(), expected, error)


def assert_statistically_different(samples: np.ndarray, wrong: float, sigmas: float = 4.5) -> None:
    error = samples.std(ddof=1) / np.sqrt(samples.size)
    assert abs(samples.mean() - wrong) > sigmas * error, (samples.mean(), wrong, error)


# ---------------------------------------------------------------- single chain


@settings(max_examples=60, deadline=None)
@given(probability, lengths)
def test_chain_closed_form_matches_geometric_sum(alpha, length):
    direct = sum(alpha**i for i in range(length + 1))
    np.testing.assert_allclose(chain_block_efficiency(alpha, length), direct, rtol=1e-12)


@pytest.mark.parametrize(
    ("alpha", "length", "expected"),
    [(0.0, 1, 1.0), (0.0, 7, 1.0), (1.0, 1, 2.0), (1.0, 7, 8.0), (0.5, 3, 1.875)],
    ids=["a0-L1", "a0-L7", "a1-L1", "a1-L7", "half-L3"],
)
def test_chain_edge_cases_exact(alpha, length, expected):
    assert chain_block_efficiency(alpha, length) == expected


def test_chain_near_one_keeps_precision():
    alpha = Fraction(1) - Fraction(1, 10**12)
    exact = sum(alpha**i for i in range(11))
    np.testing.assert_allclose(chain_block_efficiency(float(alpha), 10), float(exact), rtol=1e-14)


def test_chain_vectorised_shape_and_values():
    alphas = np.linspace(0, 1, 11).reshape(11, 1)
    result = chain_block_efficiency(alphas, 4)
    assert result.shape == (11, 1)
    np.testing.assert_allclose(result[:, 0], [chain_block_efficiency(float(a), 4) for a in alphas[:, 0]])


@pytest.mark.statistical
def test_chain_matches_simulation_and_rejects_off_by_one():
    rng = np.random.default_rng(SEED)
    alpha, length = 0.7, 5
    samples = simulate_tree([alpha], length, 0.0, 200_000, rng)
    assert_statistically_equal(samples, chain_block_efficiency(alpha, length))
    # twin: the off-by-one formula (1 - α^L) / (1 - α) must be rejected by the same test
    assert_statistically_different(samples, (1 - alpha**length) / (1 - alpha))


@settings(max_examples=60, deadline=None)
@given(probability, probability, lengths)
def test_chain_monotone_in_acceptance(a, b, length):
    low, high = sorted((a, b))
    assert chain_block_efficiency(low, length) <= chain_block_efficiency(high, length) + 1e-12


@settings(max_examples=60, deadline=None)
@given(probability, lengths)
def test_chain_monotone_in_length(alpha, length):
    assert chain_block_efficiency(alpha, length) <= chain_block_efficiency(alpha, length + 1) + 1e-12


@settings(max_examples=60, deadline=None)
@given(probability, lengths, st.floats(0.0, 5.0))
def test_walltime_is_block_efficiency_over_cost(alpha, length, cost):
    expected = sum(alpha**i for i in range(length + 1)) / (length * cost + 1)
    np.testing.assert_allclose(walltime_improvement(alpha, length, cost), expected, rtol=1e-12)


def test_no_speedup_unless_acceptance_exceeds_cost():
    # Leviathan et al., Corollary 3.9: improvement > 1 for some L iff α > c
    for alpha, cost in [(0.3, 0.3), (0.3, 0.5), (0.0, 0.0)]:
        assert max(walltime_improvement(alpha, L, cost) for L in range(1, 40)) <= 1.0 + 1e-12
    assert walltime_improvement(0.31, 1, 0.3) > 1.0


# ---------------------------------------------------------------- trees


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.fractions(0, 1, max_denominator=20), min_size=1, max_size=4),
    st.integers(1, 6),
    st.fractions(0, 1, max_denominator=10),
)
def test_tree_matches_exact_backward_recursion(acceptance, length, survival):
    expected = exact_tree(acceptance, length, survival)
    result = tree_block_efficiency([float(a) for a in acceptance], length, float(survival))
    np.testing.assert_allclose(result, float(expected), rtol=1e-12)


@pytest.mark.statistical
def test_tree_matches_simulation_and_rejects_no_shrinking_model():
    rng = np.random.default_rng(SEED)
    acceptance, length, survival = [0.5, 0.7, 0.8, 0.85], 5, 0.3
    samples = simulate_tree(acceptance, length, survival, 200_000, rng)
    assert_statistically_equal(samples, tree_block_efficiency(acceptance, length, survival))
    # twin: ignoring that drafts fall away (all K stay live, ρ = 1) must be rejected
    assert_statistically_different(samples, tree_block_efficiency(acceptance, length, 1.0))
    # twin: every draft but the selected one falls away at once (ρ = 0) must be rejected too
    assert_statistically_different(samples, tree_block_efficiency(acceptance, length, 0.0))


@settings(max_examples=60, deadline=None)
@given(probability, lengths, probability)
def test_tree_with_one_draft_is_the_chain(alpha, length, survival):
    np.testing.assert_allclose(
        tree_block_efficiency([alpha], length, survival), chain_block_efficiency(alpha, length), rtol=1e-12
    )


@settings(max_examples=60, deadline=None)
@given(acceptance_vectors, lengths)
def test_tree_distinct_siblings_closed_form(acceptance, length):
    # ρ = 0: depth 1 uses all K drafts, then a single chain with a_1
    expected = 1 + acceptance[-1] * (chain_block_efficiency(acceptance[0], length - 1) if length > 1 else 1.0)
    np.testing.assert_allclose(tree_block_efficiency(acceptance, length, 0.0), expected, rtol=1e-12)


@settings(max_examples=60, deadline=None)
@given(acceptance_vectors, lengths)
def test_tree_all_drafts_surviving_is_the_chain_at_k(acceptance, length):
    np.testing.assert_allclose(
        tree_block_efficiency(acceptance, length, 1.0), chain_block_efficiency(acceptance[-1], length), rtol=1e-12
    )


@settings(max_examples=60, deadline=None)
@given(acceptance_vectors, st.data(), lengths, probability)
def test_tree_monotone_in_each_acceptance(acceptance, data, length, survival):
    index = data.draw(st.integers(0, len(acceptance) - 1))
    raised = list(acceptance)
    raised[index] = data.draw(st.floats(acceptance[index], 1.0))
    assert tree_block_efficiency(acceptance, length, survival) <= tree_block_efficiency(raised, length, survival) + 1e-12


@settings(max_examples=60, deadline=None)
@given(acceptance_vectors, lengths, probability)
def test_tree_monotone_in_length_and_bounded(acceptance, length, survival):
    shorter = tree_block_efficiency(acceptance, length, survival)
    longer = tree_block_efficiency(acceptance, length + 1, survival)
    assert 1.0 <= shorter <= longer + 1e-12
    assert longer <= length + 2 + 1e-12


# ---------------------------------------------------------------- latency and throughput


def test_latency_model_reproduces_an_affine_function():
    batches, tokens = (1, 2, 4, 8), (1, 3, 9)

    def affine(b, m):
        return 0.01 + 0.002 * b + 0.0005 * m

    table = [[affine(b, m) for m in tokens] for b in batches]
    model = LatencyModel(batches, tokens, table)
    for b in range(1, 9):
        for m in range(1, 10):
            np.testing.assert_allclose(model(b, m), affine(b, m), rtol=1e-12)
    assert model.seconds.shape == (4, 3)
    assert not model.seconds.flags.writeable


def test_throughput_with_constant_latencies_is_walltime_improvement():
    draft, target = LatencyModel.constant(0.3 * 0.02), LatencyModel.constant(0.02)
    for alpha in (0.0, 0.4, 0.9, 1.0):
        for length in (1, 3, 8):
            np.testing.assert_allclose(
                throughput(alpha, length, draft, target) * 0.02, walltime_improvement(alpha, length, 0.3), rtol=1e-12
            )


def test_iteration_seconds_counts_draft_steps_and_verify_call():
    draft = LatencyModel((1, 4), (1, 2), [[1.0, 1.5], [2.0, 2.5]])
    target = LatencyModel((1, 4), (1, 9), [[10.0, 18.0], [40.0, 48.0]])
    # K = 4, L = 3: 3 draft steps t_draft(4, 1) = 2 and one call t_target(4, 4) = 40 + 3
    assert iteration_seconds(4, 3, draft, target) == 3 * 2.0 + 43.0


def test_best_configuration_matches_brute_force():
    acceptance, survival = [0.55, 0.7, 0.78, 0.82], 0.2
    draft = LatencyModel((1, 2, 4), (1, 2), [[0.004, 0.005], [0.005, 0.006], [0.007, 0.009]])
    target = LatencyModel((1, 2, 4), (1, 5, 13), [[0.03, 0.035, 0.05], [0.032, 0.04, 0.07], [0.036, 0.05, 0.11]])
    curve = best_configuration(acceptance, draft, target, ks=(1, 2, 4), lengths=range(1, 13), survival=survival)
    brute = np.array(
        [[throughput(acceptance[:k], L, draft, target, survival) for L in range(1, 13)] for k in (1, 2, 4)]
    )
    assert curve.throughput.shape == brute.shape == (3, 12)
    np.testing.assert_allclose(curve.throughput, brute, rtol=1e-12)
    np.testing.assert_allclose(curve.speedup, brute * target(1, 1), rtol=1e-12)
    np.testing.assert_allclose(curve.block_efficiency * 1.0 / curve.seconds, curve.throughput, rtol=1e-12)
    row, column = np.unravel_index(np.argmax(brute), brute.shape)
    assert (curve.best_k, curve.best_length) == ((1, 2, 4)[row], column + 1)
    assert curve.best_throughput == brute.max()


def test_best_length_matches_scan_of_walltime():
    for alpha, cost in [(0.8, 0.05), (0.6, 0.2), (0.95, 0.01), (0.2, 0.5)]:
        curve = best_length(alpha, cost, max_length=40)
        scan = [walltime_improvement(alpha, L, cost) for L in range(1, 41)]
        np.testing.assert_allclose(curve.speedup[0], scan, rtol=1e-12)
        assert curve.best_length == int(np.argmax(scan)) + 1
        assert curve.ks == (1,)


def test_best_length_free_perfect_draft_takes_the_longest():
    assert best_length(1.0, 0.0, max_length=10).best_length == 10


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: chain_block_efficiency(-0.1, 3), r"acceptance: values must lie in \[0, 1\]"),
        (lambda: chain_block_efficiency(1.2, 3), r"acceptance: values must lie in \[0, 1\]"),
        (lambda: chain_block_efficiency(float("nan"), 3), "acceptance: values must be finite"),
        (lambda: chain_block_efficiency("high", 3), "acceptance: expected numbers"),
        (lambda: chain_block_efficiency(0.5, 0), r"length: must be an integer >= 1, got 0"),
        (lambda: chain_block_efficiency(0.5, 2.5), "length: must be an integer"),
        (lambda: chain_block_efficiency(0.5, True), "length: must be an integer"),
        (lambda: walltime_improvement(0.5, 3, -0.1), r"cost_ratio: must be a finite number >= 0"),
        (lambda: walltime_improvement(0.5, 3, float("inf")), "cost_ratio: must be a finite number"),
        (lambda: walltime_improvement(1.5, 3, 0.1), r"acceptance: values must lie in \[0, 1\]"),
        (lambda: tree_block_efficiency([], 3), "acceptance: expected at least one value"),
        (lambda: tree_block_efficiency([0.5, 1.01], 3), r"acceptance: values must lie in \[0, 1\]"),
        (lambda: tree_block_efficiency([[0.5]], 3), "acceptance: expected a number or a 1-D sequence"),
        (lambda: tree_block_efficiency([0.5], 0), "length: must be an integer >= 1"),
        (lambda: tree_block_efficiency([0.5], 3, survival=1.5), r"survival: values must lie in \[0, 1\]"),
        (lambda: best_length(0.5, -1.0), "cost_ratio: must be a finite number >= 0"),
        (lambda: best_length(0.5, 0.1, max_length=0), "max_length: must be an integer >= 1"),
        (
            lambda: best_configuration([0.5], LatencyModel.constant(0.1), LatencyModel.constant(1.0), ks=(2,)),
            "ks: K = 2 needs acceptances for 1..2 live drafts",
        ),
        (
            lambda: best_configuration([0.5], LatencyModel.constant(0.1), LatencyModel.constant(1.0), lengths=()),
            "lengths: expected at least one value",
        ),
        (lambda: LatencyModel((1,), (1, 2), [[1.0, 1.0]]), "batch_sizes: expected at least two strictly increasing"),
        (lambda: LatencyModel((2, 1), (1, 2), np.ones((2, 2))), "batch_sizes: expected at least two strictly"),
        (lambda: LatencyModel((1, 2), (1, 2), np.ones((2, 3))), r"seconds: expected shape \(2, 2\)"),
        (lambda: LatencyModel((1, 2), (1, 2), -np.ones((2, 2))), "seconds: latencies must be finite and non-negative"),
        (lambda: LatencyModel((1, 2), (1, 2), np.ones((2, 2)))(3, 1), r"batch: 3 lies outside the profiled batch"),
        (lambda: LatencyModel((1, 2), (1, 2), np.ones((2, 2)))(1, 5), r"tokens: 5 lies outside the profiled token"),
        (lambda: LatencyModel.constant(-1.0), "seconds: must be a finite number >= 0"),
        (
            lambda: throughput(0.5, 2, LatencyModel.constant(0.0), LatencyModel.constant(0.0)),
            "latency: an iteration with K=1, L=2 takes no time",
        ),
    ],
    ids=[
        "alpha-negative",
        "alpha-above-one",
        "alpha-nan",
        "alpha-string",
        "length-zero",
        "length-float",
        "length-bool",
        "cost-negative",
        "cost-infinite",
        "walltime-alpha-above-one",
        "tree-empty",
        "tree-above-one",
        "tree-2d",
        "tree-length-zero",
        "tree-survival",
        "best-length-cost",
        "best-length-max",
        "best-config-k-too-large",
        "best-config-no-lengths",
        "latency-one-batch",
        "latency-decreasing",
        "latency-shape",
        "latency-negative",
        "latency-batch-out-of-range",
        "latency-tokens-out-of-range",
        "latency-constant-negative",
        "latency-all-zero",
    ],
)
def test_bad_input_raises(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# ---------------------------------------------------------------- the speedup command


def run_cli(capfd, *argv):
    from multidraft.cli import main

    status = main(["speedup", *argv])
    captured = capfd.readouterr()
    return status, captured.out, captured.err


def test_cli_single_chain_json(capfd):
    status, out, _ = run_cli(capfd, "--acceptance", "0.8", "--length", "4", "--cost-ratio", "0.05", "--json")
    assert status == 0
    result = json.loads(out)
    assert set(result) == {"block_efficiency", "walltime_improvement", "best_length"}
    np.testing.assert_allclose(result["block_efficiency"], chain_block_efficiency(0.8, 4), rtol=1e-12)
    np.testing.assert_allclose(result["walltime_improvement"], walltime_improvement(0.8, 4, 0.05), rtol=1e-12)
    scan = [walltime_improvement(0.8, L, 0.05) for L in range(1, 65)]
    assert result["best_length"] == int(np.argmax(scan)) + 1


def test_cli_tree_json_and_text(capfd):
    argv = ["--acceptance", "0.6,0.75,0.8", "--k", "3", "--length", "4", "--cost-ratio", "0.1", "--survival", "0.2"]
    status, out, _ = run_cli(capfd, *argv, "--json")
    assert status == 0
    result = json.loads(out)
    efficiency = tree_block_efficiency([0.6, 0.75, 0.8], 4, 0.2)
    np.testing.assert_allclose(result["block_efficiency"], efficiency, rtol=1e-12)
    np.testing.assert_allclose(result["walltime_improvement"], efficiency / (4 * 0.1 + 1), rtol=1e-12)
    assert result["best_length"] == best_length([0.6, 0.75, 0.8], 0.1, survival=0.2).best_length
    status, out, _ = run_cli(capfd, *argv)
    assert status == 0 and "i.i.d. tree, K=3" in out and "block efficiency" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--acceptance", "1.2", "--length", "4", "--cost-ratio", "0.1"], r"acceptance: values must lie in \[0, 1\]"),
        (["--acceptance", "0.5", "--length", "0", "--cost-ratio", "0.1"], "length: must be an integer >= 1"),
        (["--acceptance", "0.5", "--length", "2", "--cost-ratio", "-1"], "cost_ratio: must be a finite number >= 0"),
        (["--acceptance", "0.5,0.6", "--k", "3", "--length", "2", "--cost-ratio", "0.1"], "acceptance: --k 3 needs 3"),
        (["--acceptance", "0.5", "--k", "0", "--length", "2", "--cost-ratio", "0.1"], "k: the number of drafts"),
    ],
    ids=["alpha-above-one", "length-zero", "cost-negative", "k-mismatch", "k-zero"],
)
def test_cli_bad_input_is_one_line_error(capfd, argv, message):
    status, out, err = run_cli(capfd, *argv)
    assert status == 2 and out == ""
    assert err.startswith("multidraft speedup: error: ") and len(err.strip().splitlines()) == 1
    assert re.search(message, err)
