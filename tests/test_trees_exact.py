"""Exact block-level theory on small sequence models: Sun et al.'s example, block losslessness of
every verifier (exactly in Fractions, 1e-12 in floats) with a broken twin of each that must
fail, traversal = block verification on chains, and the certified block-level optimum."""

from __future__ import annotations

import itertools
import re
from fractions import Fraction

import numpy as np
import pytest

from multidraft.lp import ProblemTooLargeError
from multidraft.schemes import SCHEMES
from multidraft.theory.laws import IID, WithoutReplacement
from multidraft.trees import (
    BlockVerification,
    SequenceModel,
    TokenVerifier,
    Traversal,
    block_optimum,
    evaluate,
    get_verifier,
    single_path_optimum,
    sun_example,
    tail_optimum,
    tree_classes,
    verifier_names,
)
from multidraft.trees.token import node_law, node_scheme

# ---------------------------------------------------------------------- Sun et al.'s example


def test_sun_example_token_by_token_is_10_9_and_block_verification_11_9():
    """Sun et al. (ICLR 2025), Section 3: target (1/3, 2/3), draft (2/3, 1/3), γ = 2."""
    model = sun_example()
    assert evaluate(get_verifier("token:specinfer"), model, k=1).expected_accepted == Fraction(10, 9)
    assert evaluate(get_verifier("token:single"), model, k=1).expected_accepted == Fraction(10, 9)
    for name in ("block", "traversal"):
        result = evaluate(get_verifier(name), model, k=1)
        assert result.expected_accepted == Fraction(11, 9)
        assert result.deviation == 0 and result.exact and result.trees == 4
    assert single_path_optimum(model) == Fraction(11, 9)
    optimum = block_optimum(model, k=1, progress=False)
    assert abs(optimum.value - 11 / 9) < 1e-9
    assert isinstance(optimum.upper_bound, Fraction) and abs(optimum.upper_bound - Fraction(11, 9)) < Fraction(1, 10**12)
    assert abs(tail_optimum(model, k=1) - 11 / 9) < 1e-9


def _looser_lp(model: SequenceModel, k: int) -> float:
    """The coupling of the tree with a whole target sequence y of L + 1 tokens, rewarding the
    longest drafted prefix of y -- the bound that is *not* attainable (theory.md)."""
    from scipy.optimize import linprog

    classes = tree_classes(model, k)
    strings = list(itertools.product(range(model.n), repeat=model.length + 1))
    joint = np.asarray(model.joint(), dtype=np.float64)
    reward = np.array(
        [
            [max(d for d in range(model.length + 1) if any(path[:d] == y[:d] for path in key)) for y in strings]
            for key in classes
        ],
        dtype=np.float64,
    )
    m, s = reward.shape
    rows = np.kron(np.eye(m), np.ones((1, s)))
    cols = np.kron(np.ones((1, m)), np.eye(s))
    probs = np.array([float(p) for p in classes.values()])
    result = linprog(-reward.reshape(-1), A_eq=np.vstack([rows, cols[:-1]]), b_eq=np.concatenate([probs, joint[:-1]]), method="highs")
    assert result.status == 0
    return -result.fun


def test_the_looser_coupling_lp_gives_12_9_on_sun_example_and_is_not_the_optimum():
    model = sun_example()
    assert abs(_looser_lp(model, 1) - 12 / 9) < 1e-9
    assert block_optimum(model, k=1, progress=False).upper_bound < Fraction(12, 9)


# ---------------------------------------------------------------------- broken twins


class WithReplacementTraversal(Traversal):
    """Twin: keeps a rejected token in M_s (the with-replacement update) on the merged tree."""

    name = "traversal-with-replacement"
    removes_rejected = False


class PublishedRuleTraversal(Traversal):
    """Twin: the update p' = min(1, S / (1 - M_s(rejected))) of a public reimplementation."""

    name = "traversal-public-rule"

    @staticmethod
    def _rejected_budget(budget, total, rejected_draft):
        return min(budget * 0 + 1, total / (1 - rejected_draft)) if rejected_draft < 1 else budget * 0


class NoResidualBlock(BlockVerification):
    """Twin: stops at X^i with probability p_i, ignoring the residual mass Z_{i+1}."""

    name = "block-without-residual"

    @staticmethod
    def _stop_weight(p, z):
        return p


class DistinctChildrenWalk(TokenVerifier):
    """Twin: runs the scheme on the node's distinct children instead of the live drafts."""

    def _node(self, tree, node):
        _, law, tokens = super()._node(tree, node)
        distinct = np.array(list(dict.fromkeys(tokens.tolist())), dtype=np.int64)
        draft = np.repeat(tree.draft_at(node)[None], len(distinct), axis=0)
        law = node_law(law.name, draft)
        return node_scheme(self.scheme, type(law), law.k)[0], law, distinct


def _exact_model(seed: int, n: int = 3, length: int = 2) -> SequenceModel:
    return SequenceModel.random(n, length, np.random.default_rng(seed), alpha=0.8, exact=True, denominator=24)


@pytest.mark.parametrize(
    "twin, k, without_replacement",
    [
        (WithReplacementTraversal(), 2, False),
        (WithReplacementTraversal(), 3, False),
        (PublishedRuleTraversal(), 1, False),
        (PublishedRuleTraversal(), 2, True),
        (NoResidualBlock(), 1, False),
        (DistinctChildrenWalk(SCHEMES["specinfer"]()), 2, False),
    ],
    ids=["traversal-with-replacement-k2", "traversal-with-replacement-k3", "traversal-public-rule-chain",
         "traversal-public-rule-wor", "block-no-residual", "token-distinct-children"],  # fmt: skip
)
def test_every_broken_twin_fails_the_exact_losslessness_check(twin, k, without_replacement):
    result = evaluate(twin, _exact_model(1), k, without_replacement=without_replacement)
    assert result.exact and result.deviation > Fraction(1, 10**4)
    assert not result.lossless()


# ---------------------------------------------------------------------- losslessness of all


def _cases():
    """(verifier name, k, without replacement) for every registered verifier on the trees it
    takes, K <= 3 (token schemes: those supporting every node law of the tree)."""
    q = [Fraction(1, 3)] * 3
    out = []
    for name in verifier_names():
        verifier = get_verifier(name)
        for k, wor in itertools.product((1, 2, 3), (False, True)):
            if isinstance(verifier, TokenVerifier):
                laws = [WithoutReplacement(q, k), IID(q, 1)] if wor else [IID(q, j) for j in range(1, k + 1)]
                if not all(node_scheme(verifier.scheme, type(law), law.k)[0].supports(law) for law in laws):
                    continue
            elif verifier.max_k is not None and k > verifier.max_k:
                continue
            out.append((name, k, wor))
    return out


CASES = _cases()


def test_the_loss_check_runs_every_registered_verifier():
    """Every name is checked somewhere (greedy and deterministic drafts are no tree law: their
    walks run at K = 1 only, where single-draft sampling takes over)."""
    assert {name for name, _, _ in CASES} == set(verifier_names())
    assert {k for name, k, _ in CASES if name in ("token:greedy", "token:deterministic")} == {1}
    assert ("traversal", 3, False) in CASES and ("traversal", 3, True) in CASES


@pytest.mark.parametrize("name, k, without_replacement", CASES, ids=[f"{n}-k{k}-{'wor' if w else 'iid'}" for n, k, w in CASES])
def test_every_verifier_is_block_lossless(name, k, without_replacement):
    """Exactly (Fractions) where the verifier allows it, else to 1e-12; E[τ] within [0, L]."""
    verifier = get_verifier(name)
    model = _exact_model(2)
    result = evaluate(verifier, model, k, without_replacement=without_replacement, exact=verifier.exact_capable)
    assert result.lossless(tolerance=1e-12), result.deviation
    assert result.exact == verifier.exact_capable
    if result.exact:
        assert result.deviation == 0
    assert 0 <= result.expected_accepted <= model.length


@pytest.mark.parametrize("family", ["random", "temperature"])
@pytest.mark.parametrize("name, k, without_replacement", [("traversal", 2, False), ("traversal", 2, True), ("block", 1, False), ("token:specinfer", 2, False)])
def test_float_models_are_lossless_to_1e_12(family, name, k, without_replacement):
    rng = np.random.default_rng(7)
    model = SequenceModel.random(3, 3, rng, alpha=0.5) if family == "random" else SequenceModel.temperature(3, 3, rng, temperature=2.0)
    result = evaluate(get_verifier(name), model, k, without_replacement=without_replacement)
    assert not result.exact and result.deviation <= 1e-12


def test_fraction_and_float_evaluations_agree():
    model = _exact_model(4)
    floats = SequenceModel([np.asarray(t, dtype=np.float64) for t in model.target], [np.asarray(t, dtype=np.float64) for t in model.draft])
    exact = evaluate(Traversal(), model, 2)
    approximate = evaluate(Traversal(), floats, 2)
    assert abs(float(exact.expected_accepted) - approximate.expected_accepted) < 1e-12


# ---------------------------------------------------------------- traversal = block verification


@pytest.mark.parametrize("seed", range(4))
def test_traversal_equals_block_verification_on_every_chain(seed):
    """Weng et al., Theorem 3.4: on a single draft the two laws of (τ, next token) are equal,
    exactly, for every chain of the model (the two are computed from different formulas)."""
    model = _exact_model(seed, n=3, length=3)
    for path, _ in model.paths():
        tree = model.tree([path])
        block, traversal = BlockVerification().law(tree), Traversal().law(tree)
        assert block.node_probability.tolist() == traversal.node_probability.tolist()
        for node in range(tree.nodes.count):
            if block.node_probability[node] > 0:
                assert block.next_token[node].tolist() == traversal.next_token[node].tolist()


# ---------------------------------------------------------------- the block-level optimum


@pytest.mark.parametrize("seed", range(5))
def test_block_optimum_for_one_draft_is_block_verification(seed):
    """Sun et al.'s optimality theorem, three ways: the certified LP, the closed form, and
    block verification's exact E[τ]."""
    model = _exact_model(seed, n=3, length=2) if seed % 2 else SequenceModel.temperature(2, 3, np.random.default_rng(seed), exact=True)
    block = evaluate(BlockVerification(), model, 1).expected_accepted
    assert single_path_optimum(model) == block
    optimum = block_optimum(model, k=1, progress=False)
    assert abs(optimum.value - float(block)) < 1e-9
    assert abs(optimum.upper_bound - block) < Fraction(1, 10**9)


@pytest.mark.parametrize("k, without_replacement", [(2, False), (3, False), (2, True)])
def test_no_verifier_exceeds_the_block_optimum_and_two_routes_agree(k, without_replacement):
    model = _exact_model(6, n=3, length=2)
    optimum = block_optimum(model, k, without_replacement=without_replacement, progress=False)
    assert optimum.gap <= 1e-6 and optimum.primal_error <= 1e-7
    assert abs(tail_optimum(model, k, without_replacement=without_replacement) - optimum.value) < 1e-7
    assert abs(sum(optimum.accepted_law.values()) - 1) < 1e-9
    names = ["traversal", "token:optimal", "token:specinfer" if not without_replacement else "token:rrs-wor"]
    values = {name: float(evaluate(get_verifier(name), model, k, without_replacement=without_replacement, exact=False).expected_accepted) for name in names}
    for name, value in values.items():
        assert value <= float(optimum.upper_bound) + 1e-12, name
    assert optimum.value > max(values.values()) + 1e-4  # a gap remains at K >= 2 here


def test_the_safe_dual_bound_holds_for_any_dual_vector():
    """max 2 v0 + v1 subject to v0 + v1 = 1, v0 <= 3/4, 0 <= v <= 1 (optimum 7/4): any duals
    give a valid bound, the optimal ones the optimum, and a negative inequality dual is
    clipped to 0 before use."""
    from multidraft.trees.optimum import _Program, _safe_dual_bound

    program = _Program([2, 1], [1, 1], [(0, 0, 1), (0, 1, 1)], [1], [(0, 0, 1)], [Fraction(3, 4)])
    assert _safe_dual_bound(program, np.zeros(1), np.zeros(1), True) == 3  # Σ c⁺ U
    assert _safe_dual_bound(program, np.array([1.0]), np.array([1.0]), True) == Fraction(7, 4)
    assert _safe_dual_bound(program, np.array([2.0]), np.zeros(1), True) == 2
    assert _safe_dual_bound(program, np.array([1.0]), np.array([1.0]), False) >= 1.75
    optimum = block_optimum(sun_example(), k=2, progress=False)
    assert optimum.value - 1e-12 <= optimum.upper_bound <= optimum.value + 1e-6


def test_the_optimum_lp_refuses_beyond_its_size_guard_before_building():
    with pytest.raises(ProblemTooLargeError, match="block-optimum LP .* exceed the limit max_variables=10"):
        block_optimum(sun_example(), k=2, max_variables=10)
    with pytest.raises(ProblemTooLargeError, match="max_trees"):
        evaluate(Traversal(), SequenceModel.random(4, 3, np.random.default_rng(0)), 3, max_trees=1000)


# ---------------------------------------------------------------- what the tree alone allows


def _tables(rows):
    return [[[Fraction(v) for v in row] for row in table] for table in rows]


#: Two binary models (L = 3) that agree everywhere except below the first token 0; found by
#: the random search of benchmarks/bench_block_gap.py (--tree-only), kept as a reference case.
TREE_ONLY_PAIR = (
    SequenceModel(
        _tables([[["7/9", "2/9"]], [["5/11", "6/11"], ["1/3", "2/3"]], [["5/6", "1/6"], ["5/7", "2/7"], ["4/5", "1/5"], ["2/3", "1/3"]],
                 [["12/13", "1/13"], ["3/8", "5/8"], ["1/8", "7/8"], ["12/13", "1/13"], ["8/11", "3/11"], ["5/6", "1/6"], ["6/11", "5/11"], ["1/4", "3/4"]]]),
        _tables([[["5/11", "6/11"]], [["6/11", "5/11"], ["8/9", "1/9"]], [["2/3", "1/3"], ["4/5", "1/5"], ["3/5", "2/5"], ["2/3", "1/3"]]]),
    ),
    SequenceModel(
        _tables([[["7/9", "2/9"]], [["1/12", "11/12"], ["1/3", "2/3"]], [["3/5", "2/5"], ["2/9", "7/9"], ["4/5", "1/5"], ["2/3", "1/3"]],
                 [["4/11", "7/11"], ["2/9", "7/9"], ["9/10", "1/10"], ["1/3", "2/3"], ["8/11", "3/11"], ["5/6", "1/6"], ["6/11", "5/11"], ["1/4", "3/4"]]]),
        _tables([[["5/11", "6/11"]], [["7/11", "4/11"], ["8/9", "1/9"]], [["1/12", "11/12"], ["1/7", "6/7"], ["3/5", "2/5"], ["2/3", "1/3"]]]),
    ),
)  # fmt: skip


def test_no_tree_only_verifier_reaches_the_block_optimum_of_both_models():
    """Every tree-only verifier falls short of the block optimum on one of the two models by
    at least loss / 2: the joint LP's exact dual bound is below the sum of the optima."""
    from multidraft.trees import tree_only_bound

    first, second = TREE_ONLY_PAIR
    result = tree_only_bound([first, second], 2, progress=False)
    assert result.shared == 10  # the trees whose two rows both start with token 1
    assert isinstance(result.upper_bound, Fraction)
    assert result.loss > 0.016
    # ... and what the named verifiers reach, all tree-only, stays below the joint bound
    for name in ("traversal", "selective", "token:optimal"):
        total = sum(float(evaluate(get_verifier(name), model, 2, exact=False).expected_accepted) for model in (first, second))
        assert total <= float(result.upper_bound) + 1e-9


def test_with_one_draft_sharing_trees_costs_nothing():
    """Twin: with K = 1 block verification is tree-only and optimal, so the joint LP loses
    nothing on the same pair."""
    from multidraft.trees import tree_only_bound

    result = tree_only_bound(list(TREE_ONLY_PAIR), 1, progress=False)
    assert abs(result.loss) < 1e-6 and result.shared > 0


class WrongLawSelective(get_verifier("selective").__class__):
    """Twin: selects with the optimal rule but pretends the selection law is the draft q."""

    def _selection(self, tree, node, budget, residual):
        _, chosen = super()._selection(tree, node, budget, residual)
        return np.asarray(tree.draft_at(node), dtype=np.float64), chosen


def test_selective_with_a_wrong_selection_law_is_lossy():
    result = evaluate(WrongLawSelective(), _exact_model(1), 3, exact=False)
    assert not result.exact and result.deviation > 1e-4


# ---------------------------------------------------------------------- a newcomer's first hour (issue 28, item 6)


@pytest.mark.parametrize(
    "target, draft, name, kind",
    [
        ([[0.5, 0.5], [[0.5, 0.5], [0.5, 0.5]]], [{0: 0.5, 1: 0.5}], "draft[0]", "dict"),
        ([{0: "1/2", 1: "1/2"}, [["1/2", "1/2"], ["1/2", "1/2"]]], [["1/2", "1/2"]], "target[0]", "dict"),
        ([[0.5, 0.5], [[0.5, 0.5], [0.5, 0.5]]], [0.5], "draft[0]", "float"),
        ({0: [0.5, 0.5], 1: [[0.5, 0.5]] * 2}, [[0.5, 0.5]], "target", "dict"),
    ],
    ids=["dict-draft-table", "dict-exact-target-table", "number-as-table", "dict-of-tables"],
)
def test_sequence_model_names_a_table_that_is_no_array(target, draft, name, kind):
    """A dict of token -> probability said "draft[0]: expected shape (1, 3), got ()"."""
    with pytest.raises(TypeError, match=rf"^{re.escape(name)}: expected (an array|a sequence of tables).*, got {kind}"):
        SequenceModel(target, draft)
    assert SequenceModel([[0.5, 0.5], [[0.5, 0.5], [0.5, 0.5]]], [[0.5, 0.5]]).n == 2  # the twin: arrays are taken


@pytest.mark.parametrize("name", ["token:optimal", "selective"])
def test_evaluate_never_switches_an_exact_model_to_floats_unasked(name):
    """``evaluate`` on an exact model silently computed token:optimal and selective in floats
    (only ``result.exact`` told); it now refuses unless ``exact=False`` asks for float64."""
    model = sun_example()
    with pytest.raises(ValueError, match=rf"^exact: verifier '{name}' has no exact \(Fraction\) law.*pass exact=False"):
        evaluate(get_verifier(name), model, k=1)
    result = evaluate(get_verifier(name), model, k=1, exact=False)
    assert not result.exact and isinstance(result.expected_accepted, float)
    assert 1 <= result.expected_accepted <= 11 / 9 + 1e-12 and result.lossless()  # token level 10/9, block 11/9
    exact = evaluate(get_verifier("block"), model, k=1)  # the twin: an exact verifier stays exact by default
    assert exact.exact and exact.expected_accepted == Fraction(11, 9)
    floats = evaluate(get_verifier("block"), model, k=1, exact=False)
    assert not floats.exact and isinstance(floats.expected_accepted, float)
    with pytest.raises(ValueError, match="^exact: the model holds floats"):
        evaluate(get_verifier("block"), SequenceModel.random(2, 2, np.random.default_rng(0)), k=1, exact=True)


def test_block_optimum_draws_no_bar_unless_asked(monkeypatch):
    """``block_optimum`` showed a progress bar by default; a library call is quiet now."""
    import multidraft.lp._solve as solve_module

    asked: list[bool] = []
    bar = solve_module.solving_bar

    def spy(what, variables, enabled):
        asked.append(enabled)
        return bar(what, variables, enabled)

    monkeypatch.setattr(solve_module, "solving_bar", spy)
    block_optimum(sun_example(), k=1)
    assert asked == [False]
    block_optimum(sun_example(), k=1, progress=True)
    assert asked == [False, True]  # the twin: asked for, it is on
