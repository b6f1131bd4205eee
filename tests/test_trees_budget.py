"""The budget optimiser (issue 31, item 2): Sequoia's DP against exact evaluation, the exact
prefix recursion against enumeration, the DP against brute force over shapes, the positional
acceptance against the schemes, bad inputs, the cluster bootstrap and the command line."""

from __future__ import annotations

import itertools
import re
import json

import numpy as np
import pytest

from multidraft.schemes import get_scheme
from multidraft.theory.laws import law_for
from multidraft.trees import SequenceModel, TreeShape, evaluate, get_verifier
from multidraft.trees.budget import level_widths, positional_acceptance, positional_value, sequoia_tree
from multidraft.trees.budget_search import budget_search, model_positional, schedules, specinfer_walk_value

SHAPES = (
    TreeShape.expansion([1, 1, 1]),
    TreeShape.expansion([2, 1]),
    TreeShape.expansion([1, 2]),
    TreeShape.expansion([3, 1, 1]),
    TreeShape.static([-1, 0, 0, 1, 2, 0]),
)
SPECINFER = get_verifier("token:specinfer")


def _exact(model, shape) -> float:
    return float(evaluate(SPECINFER, model, shape, exact=False).expected_accepted)


@pytest.mark.parametrize("shape", SHAPES, ids=repr)
@pytest.mark.parametrize("family", ["dirichlet", "temperature"])
def test_prefix_recursion_equals_enumeration(shape, family):
    """Two routes to token:specinfer's E[τ] on iid trees: the recursion over (prefix, slot) and
    the enumeration of every draft tree."""
    rng = np.random.default_rng(7)
    model = SequenceModel.random(3, 3, rng) if family == "dirichlet" else SequenceModel.temperature(3, 3, rng)
    assert specinfer_walk_value(model, shape) == pytest.approx(_exact(model, shape), abs=1e-12)


CONSTANT = SequenceModel.constant([0.2, 0.3, 0.5], [0.5, 0.3, 0.2], 3)


@pytest.mark.parametrize("shape", SHAPES, ids=repr)
def test_dp_value_is_exact_where_positions_do_not_depend_on_the_node(shape):
    """Same target and draft after every prefix: Sequoia's positional assumption holds, so the
    DP's value of a shape is token:specinfer's exact E[τ]."""
    a = positional_acceptance(CONSTANT.target[0][0], CONSTANT.draft[0][0], 4)
    assert positional_value(a, shape) == pytest.approx(_exact(CONSTANT, shape), abs=1e-12)


def test_dp_value_is_an_approximation_where_the_tables_vary():
    """Where the tables differ between prefixes the assumption fails: the averaged positional
    model misses the exact E[τ] (here by more than 0.01 on a chain)."""
    model = SequenceModel.temperature(3, 3, np.random.default_rng(1))
    shape = TreeShape.expansion([1, 1, 1])
    assert abs(positional_value(model_positional(model, 4), shape) - _exact(model, shape)) > 0.01


def _conditional_twin(target, draft, width):
    """The wrong reading: the conditional rate s_i (accepted given the first i − 1 rejected)
    used as if it were the unconditional a_i."""
    a = positional_acceptance(target, draft, width)
    rejected = np.concatenate([[1.0], 1.0 - np.cumsum(a)[:-1]])
    return np.divide(a, rejected, out=np.zeros_like(a), where=rejected > 0)


def test_conditional_twin_is_caught():
    shape = TreeShape.expansion([2, 1])
    twin = _conditional_twin(CONSTANT.target[0][0], CONSTANT.draft[0][0], 4)
    value = sum(twin[:2] * (1 + twin[0] * (1 + twin[0])))  # positional_value refuses Σ a > 1
    assert abs(value - _exact(CONSTANT, shape)) > 0.05


def _static_shapes(nodes: int):
    """Every parent array with ``nodes`` drafted nodes (ordered trees, with repeats)."""
    for parents in itertools.product(*(range(j) for j in range(1, nodes + 1))):
        yield TreeShape.static([-1, *parents])


@pytest.mark.parametrize("a", [[0.6, 0.15, 0.07], [0.3, 0.3, 0.2], [0.9, 0.05], [0.1, 0.1, 0.1, 0.1]])
@pytest.mark.parametrize("budget", [1, 3, 5])
def test_dp_is_the_best_shape_by_brute_force(a, budget):
    """The DP's optimum against every static shape of at most N nodes, and its shape's value."""
    tree = sequoia_tree(a, budget)
    brute = max(positional_value(a, shape) for n in range(1, budget + 1) for shape in _static_shapes(n))
    assert tree.expected_accepted == pytest.approx(brute, abs=1e-12)
    assert positional_value(a, tree.shape()) == pytest.approx(tree.expected_accepted, abs=1e-12)
    assert tree.nodes <= budget


def test_a_chain_is_not_always_best():
    """The twin of the brute-force check: the best chain falls short of the DP for flat acceptance."""
    a = [0.3, 0.3, 0.2]
    chains = max(positional_value(a, TreeShape.expansion([k] + [1] * (length - 1))) for k in range(1, 6) for length in range(1, 6 // k + 1) if k * length <= 5)
    assert sequoia_tree(a, 5).expected_accepted > chains + 0.01


def test_depth_limit_is_respected():
    tree = sequoia_tree([0.9, 0.05], 16, max_depth=3)
    assert tree.shape().depth <= 3 and sum(level_widths(tree.parents)) == tree.nodes


def test_positional_acceptance_sums_to_the_schemes_acceptance():
    """The closed form of SpecInfer's positions against the scheme's own acceptance with i drafts;
    the optimal increments sum to P*(B); the top-k positions to p of the top-k set."""
    rng = np.random.default_rng(3)
    p, q = rng.dirichlet(np.ones(12)), rng.dirichlet(np.ones(12))
    for verifier, scheme in (("token:specinfer", "specinfer"), ("token:optimal", "optimal")):
        a = positional_acceptance(p, q, 5, verifier=verifier)
        totals = [get_scheme(scheme).acceptance(p, law_for("iid", [q], k=k)) for k in range(1, 6)]
        np.testing.assert_allclose(np.cumsum(a), totals, atol=1e-12)
    a = positional_acceptance(p, q, 3, verifier="top-k walk")
    assert a.sum() == pytest.approx(p[np.argsort(-q, kind="stable")[:3]].sum())


def test_budget_search_lines_and_order():
    model = SequenceModel.temperature(3, 3, np.random.default_rng(2))
    lines = {(s.family, s.verifier): s for s in budget_search(model, 8)}
    assert lines[("expansion", "token:specinfer")].expected_accepted >= lines[("chains", "token:specinfer")].expected_accepted - 1e-12
    assert all(s.nodes <= 8 for s in lines.values())
    assert list(schedules(3, 2, 2)) == [(1,), (2,), (1, 1), (1, 2)]


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: sequoia_tree([0.7, 0.5], 4), "must sum to at most 1"),
        (lambda: sequoia_tree([-0.1], 4), "acceptance: expected positional acceptances"),
        (lambda: sequoia_tree([0.5], 0), "budget: drafted nodes must be an integer >= 1"),
        (lambda: sequoia_tree([0.5], 4, max_depth=0), "max_depth"),
        (lambda: positional_acceptance([0.5, 0.5], [0.5, 0.5], 0), "width"),
        (lambda: positional_acceptance([0.5, 0.5], [0.5, 0.5], 2, verifier="traversal"), "verifier: unknown 'traversal'"),
        (lambda: positional_acceptance([0.5, 0.6], [0.5, 0.5], 2), "target: every row must be a probability distribution"),
        (lambda: positional_value([0.5], TreeShape.chains(2, 2)), "shape: expected an expansion or static TreeShape"),
        (lambda: specinfer_walk_value(CONSTANT, TreeShape.expansion([2], "without-replacement")), "with law 'iid'"),
        (lambda: specinfer_walk_value(CONSTANT, TreeShape.expansion([1, 1, 1, 1])), "does not fit the model's length"),
        (lambda: budget_search(CONSTANT, 0), "budget: drafted nodes must be an integer >= 1"),
    ],
    ids=["sum>1", "negative", "budget0", "depth0", "width0", "verifier", "target", "chains", "wor", "deep", "search0"],
)
def test_bad_inputs(call, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        call()


def _sample(rng, prompts: int, per_prompt: int, spread: float):
    """A synthetic positional sample: each prompt has its own level (clustered positions)."""
    from multidraft.report.budget_real import PositionalSample

    base = np.array([0.55, 0.15, 0.05])
    levels = np.clip(base[None, :] * (1 + spread * rng.standard_normal((prompts, 1))), 0, None)
    levels /= np.maximum(levels.sum(axis=1, keepdims=True), 1.0)
    sums = (levels * per_prompt)[:, None, :]
    return PositionalSample(("token:specinfer",), sums, np.full(prompts, float(per_prompt))), base


def test_cluster_bootstrap_covers_the_truth_and_the_naive_twin_does_not():
    """Prompt-level variation: the cluster bootstrap's interval for E[τ + 1] of the chosen shape
    covers the true value in most repetitions; the twin that treats every position as independent
    (intervals shrunk by sqrt(positions per prompt)) covers it far less often."""
    from multidraft.report.budget_real import budget_answer

    covered = naive = 0
    repetitions = 40
    for seed in range(repetitions):
        sample, base = _sample(np.random.default_rng(seed), prompts=12, per_prompt=25, spread=0.25)
        row = budget_answer(sample, [8], resamples=300, seed=seed)[0]["verifiers"]["token:specinfer"]
        truth = positional_value(base, TreeShape.static(row["parents"])) + 1
        low, high = row["ci95"]
        covered += low <= truth <= high
        centre, half = row["block_efficiency"], (high - low) / 2 / np.sqrt(25)
        naive += centre - half <= truth <= centre + half
    assert covered >= 0.8 * repetitions
    assert naive <= 0.5 * repetitions


def test_reference_gain_is_zero_against_itself():
    from multidraft.report.budget_real import budget_answer

    sample, _ = _sample(np.random.default_rng(0), prompts=6, per_prompt=10, spread=0.1)
    for row in budget_answer(sample, [4, 16], resamples=50):
        entry = row["verifiers"]["token:specinfer"]
        assert entry["gain"] >= -1e-12  # the DP's tree is at least as good as the best chains
        assert row["chains"]["block_efficiency"] <= entry["block_efficiency"] + 1e-12


def test_cli_json_and_one_line_errors(cli):
    """The console script in a subprocess (conftest's ``cli``): JSON out, one-line errors."""
    result = cli("budget", "--acceptance", "0.6,0.15,0.07", "--budget", "4", "8", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert [b["budget"] for b in data["budgets"]] == [4, 8]
    assert data["budgets"][0]["block_efficiency"] == pytest.approx(sequoia_tree([0.6, 0.15, 0.07], 4).block_efficiency)
    for argv, message in (
        (["--acceptance", "0.7,0.5"], "must sum to at most 1"),
        (["--acceptance", "0.5", "--budget", "65"], "budget: every N must lie in 1..64"),
        (["--acceptance", "x"], "expected comma-separated numbers"),
        ([], "one of the arguments --model --acceptance is required"),
    ):
        bad = cli("budget", *argv)
        assert bad.returncode == 2 and message in bad.stderr and len(bad.stderr.strip().splitlines()) == 1, bad.stderr


@pytest.mark.slow
def test_real_model_answer_and_the_degenerate_case():
    """The bundled model: drafting for itself at its own temperature, every walk that samples its
    drafts accepts the first child surely (a_1 = 1), so its best tree is one chain of N
    (E[τ + 1] = N + 1) and the answer says it is degenerate (the top-k walk, whose drafts are the
    most likely tokens, is not); at a hotter draft, a_1 < 1 and the chains fall short."""
    pytest.importorskip("torch")
    from multidraft.report.budget_real import answer_text, real_budget

    same = real_budget("default", target_temperature=1.0, draft_temperature=1.0, prompts=1, max_new_tokens=4, budgets=[4], latency=False, resamples=50)
    assert same["degenerate"] and "the draft is the target" in answer_text(same)
    for name in ("token:specinfer", "token:optimal"):
        entry = same["budgets"][0]["verifiers"][name]
        assert entry["block_efficiency"] == pytest.approx(5.0, abs=1e-9) and entry["level_widths"] == [1, 1, 1, 1]
    hot = real_budget("default", target_temperature=0.6, draft_temperature=1.4, prompts=1, max_new_tokens=4, budgets=[4], latency=False, resamples=50)
    assert not hot["degenerate"] and hot["budgets"][0]["chains"]["block_efficiency"] < 5.0 - 1e-3


def test_real_part_renders_and_speedup_with_constant_latencies():
    """With every forward taking the same time t, one iteration of a tree of depth D costs
    (D + 1)·t, so the predicted speed-up is E[τ + 1] / (D + 1): a second route to tree_speedup;
    the report's real-model table renders from the answer."""
    from multidraft.report import budget
    from multidraft.report.budget_real import answer_text, budget_answer
    from multidraft.report.render import Document, Section, render_markdown
    from multidraft.theory.speed import LatencyModel

    sample, _ = _sample(np.random.default_rng(5), prompts=5, per_prompt=10, spread=0.1)
    constant = LatencyModel.constant(0.02, max_batch=64, max_tokens=65)
    rows = budget_answer(sample, [4, 16], latencies=(constant, constant), resamples=20)
    for row in rows:
        entry = row["verifiers"]["token:specinfer"]
        assert entry["speedup"] == pytest.approx(entry["block_efficiency"] / (len(entry["level_widths"]) + 1))
    result = {"model": "m", "draft": None, "target_temperature": 0.6, "draft_temperature": 1.0, "degenerate": False,
              "prompts": 5, "positions": 50, "latency_ms": {"draft_t(1,1)": 20.0, "target_t(1,1)": 20.0, "target_t(1,65)": 20.0}, "budgets": rows}  # fmt: skip
    markdown = render_markdown(Document("t", (Section("s", tuple(budget._real_part(result))),)))
    assert "SpecInfer chains" in markdown and "speed-up" in markdown
    assert len(answer_text(result).splitlines()) == 2 + 2 * 2  # header, column names, 2 budgets × (1 walk + chains)
