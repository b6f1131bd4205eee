"""Tree shapes with per-node laws (issue 30): constructors, the trees of a shape, losslessness of
every verifier on every shape it takes (exactly, in Fractions), refusals up front, broken twins,
and the block-level optimum on shapes by two LPs."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from multidraft.schemes import get_scheme
from multidraft.trees import (
    ShapedTree,
    SequenceModel,
    TokenVerifier,
    Traversal,
    TreeShape,
    block_optimum,
    evaluate,
    get_verifier,
    shape_trees,
    tail_optimum,
)
from multidraft.trees.shaped import NODE_LAW

LAWS = ("iid", "without-replacement", "top-k")


def _shapes(law: str) -> list[TreeShape]:
    out = [TreeShape.expansion([2, 1], law), TreeShape.expansion([1, 2], law), TreeShape.static([-1, 0, 0, 1], law)]
    if law != "top-k":
        out.append(TreeShape.chains(2, 2, law))
    else:
        out.append(TreeShape.dynamic(3, 2, branching=2))
    return out


CASES = [pytest.param(shape, id=repr(shape)) for law in LAWS for shape in _shapes(law)]


@pytest.fixture(scope="module")
def exact_model() -> SequenceModel:
    return SequenceModel.random(3, 2, np.random.default_rng(30), exact=True, denominator=12)


@pytest.fixture(scope="module")
def float_model() -> SequenceModel:
    return SequenceModel.random(3, 2, np.random.default_rng(31), alpha=0.5)


# ------------------------------------------------------------------------------ constructors

BAD_SHAPES = [
    ("chains-k", lambda: TreeShape.chains(0, 2), "k: expected an integer >= 1"),
    ("chains-law", lambda: TreeShape.chains(2, 2, "top-k"), "law: unknown 'top-k'; choose one of iid, without-replacement"),
    ("expansion-empty", lambda: TreeShape.expansion([]), "schedule: expected a non-empty list"),
    ("expansion-zero", lambda: TreeShape.expansion([2, 0]), "schedule: expected an integer >= 1"),
    ("expansion-law", lambda: TreeShape.expansion([2], "greedy"), "law: unknown 'greedy'"),
    ("static-root", lambda: TreeShape.static([0, 0]), "parents: slot 0 is the root and must have parent -1"),
    ("static-order", lambda: TreeShape.static([-1, 0, 3, 1]), "parents: slot 2 must have a parent among slots 0..1"),
    ("static-short", lambda: TreeShape.static([-1]), "parents: expected a parent array"),
    ("dynamic-budget", lambda: TreeShape.dynamic(0, 2), "budget: expected an integer >= 1"),
    ("dynamic-branching", lambda: TreeShape.dynamic(3, 2, branching=True), "branching: expected an integer >= 1"),
]


@pytest.mark.parametrize("build, message", [pytest.param(b, m, id=i) for i, b, m in BAD_SHAPES])
def test_bad_shapes_are_refused(build, message):
    with pytest.raises(ValueError, match=message):
        build()


BAD_TREES = [
    ("parent", dict(parent=[-1, 1]), "parent: expected parent"),
    ("draws-children", dict(draws=[(0,), ()]), "draws: node 0's distinct draws"),
    ("zero-draft", dict(draft=[[1.0, 0.0], [0.5, 0.5]]), "draws: node 0 drew a token of draft probability zero"),
    ("wor-repeat", dict(draws=[(1, 1), ()], law="without-replacement"), "draws: node 0 repeats a token"),
    ("top-k", dict(draft=[[0.9, 0.1], [0.5, 0.5]], law="top-k"), r"draws: node 0's draws \(1,\) are not the top-1"),
    ("law", dict(law="greedy"), "law: unknown 'greedy'"),
    ("shape", dict(target=[[0.5, 0.5]]), r"target, draft: expected arrays \[2, n\]"),
]


@pytest.mark.parametrize("change, message", [pytest.param(c, m, id=i) for i, c, m in BAD_TREES])
def test_bad_shaped_trees_are_refused(change, message):
    args = dict(parent=[-1, 0], token=[-1, 1], draws=[(1,), ()], target=[[0.5, 0.5]] * 2, draft=[[0.5, 0.5]] * 2, law="iid")
    args.update(change)
    with pytest.raises(ValueError, match=message):
        ShapedTree(**args)


def test_shapes_and_their_sizes():
    assert TreeShape.expansion([2, 2, 1]).node_count == 2 + 4 + 4
    assert TreeShape.expansion([2, 1]).slots == ((1, 2), (3,), (4,), (), ())
    assert TreeShape.chains(3, 2).node_count == 6 and TreeShape.dynamic(5, 3).node_count == 5
    assert repr(TreeShape.static([-1, 0, 0, 1], "top-k")) == "TreeShape.static([-1, 0, 0, 1], law='top-k')"
    with pytest.raises(ValueError, match="shape: expected a TreeShape"):
        next(shape_trees(SequenceModel.random(2, 2, np.random.default_rng(0)), (2, 1)))
    with pytest.raises(ValueError, match="shape: depth 3 does not fit the model's length 2"):
        next(shape_trees(SequenceModel.random(2, 2, np.random.default_rng(0)), TreeShape.expansion([1, 1, 1])))


# -------------------------------------------------------------------------- trees of a shape


@pytest.mark.parametrize("shape", CASES)
def test_tree_probabilities_sum_to_one_exactly(shape, exact_model):
    total = sum((prob for _, prob in shape_trees(exact_model, shape)), Fraction(0))
    assert total == 1


@pytest.mark.parametrize("law", LAWS)
def test_root_marginal_matches_the_law(law, exact_model):
    """Second computation: the probability that the root drafts token t, summed over the trees,
    against the law's own inclusion probability (iid: 1 - (1 - q)^k; top-k: 1 on the top k)."""
    shape = TreeShape.expansion([2, 1], law)
    q = exact_model.draft_at(())
    seen = [Fraction(0)] * exact_model.n
    for tree, prob in shape_trees(exact_model, shape):
        for t in set(tree.draws[0]):
            seen[t] += prob
    if law == "iid":
        expected = [1 - (1 - q[t]) ** 2 for t in range(exact_model.n)]
    elif law == "top-k":
        ranked = sorted(range(exact_model.n), key=lambda t: (-q[t], t))[:2]
        expected = [Fraction(int(t in ranked)) for t in range(exact_model.n)]
    else:  # successive sampling of 2: q_t + Σ_{s≠t} q_s q_t / (1 - q_s)
        expected = [q[t] + sum(q[s] * q[t] / (1 - q[s]) for s in range(exact_model.n) if s != t) for t in range(exact_model.n)]
    assert seen == expected


def test_dynamic_shape_is_the_top_k_expansion_at_full_budget(float_model):
    full = [e.expected_accepted for e in (evaluate(get_verifier("token:specinfer"), float_model, s) for s in
            (TreeShape.dynamic(6, 2, branching=2), TreeShape.expansion([2, 2], "top-k")))]  # fmt: skip
    assert full[0] == pytest.approx(full[1], abs=1e-15)
    (tree, _), = shape_trees(float_model, TreeShape.dynamic(3, 2, branching=2))
    assert tree.nodes.count == 4  # the root and the budget
    assert all(tree.parent[v] < v for v in range(1, 4))  # prefix-closed by construction


def test_chains_shape_gives_todays_results(exact_model):
    for name in ("traversal", "token:specinfer"):
        old = evaluate(get_verifier(name), exact_model, 2)
        new = evaluate(get_verifier(name), exact_model, TreeShape.chains(2, 2))
        assert (old.expected_accepted, old.deviation, old.trees) == (new.expected_accepted, new.deviation, new.trees)
    old = evaluate(get_verifier("token:rrs-wor"), exact_model, 2, without_replacement=True)
    new = evaluate(get_verifier("token:rrs-wor"), exact_model, TreeShape.chains(2, 2, "without-replacement"))
    assert old.expected_accepted == new.expected_accepted
    with pytest.raises(ValueError, match="without_replacement: give the law in the TreeShape"):
        evaluate(get_verifier("traversal"), exact_model, TreeShape.chains(2, 2), without_replacement=True)


# ------------------------------------------------------------------- losslessness on shapes

EXACT_VERIFIERS = ["traversal", "block", "token:specinfer", "token:single", "token:rrs-wor", "token:greedy", "token:deterministic"]
FLOAT_VERIFIERS = ["token:optimal", "selective", "token:is-lp"]

#: (verifier, law) pairs refused on every shape of the module (each has a node drafting 2),
#: and why: the walk's scheme does not take the node's law, or the proof needs what the law lacks.
REFUSED = {
    ("traversal", "top-k"): "H(v, D) needs children drawn from D; top-k children are fixed",
    ("token:specinfer", "without-replacement"): "SpecInfer's law is iid/independent",
    ("token:single", "iid"): "one draft only",
    ("token:single", "without-replacement"): "one draft only",
    ("token:single", "top-k"): "one draft only",
    ("token:rrs-wor", "iid"): "RRS-wor's law is without replacement",
    ("token:rrs-wor", "top-k"): "RRS-wor's law is without replacement",
    ("token:greedy", "iid"): "Hu et al.'s greedy law only",
    ("token:greedy", "without-replacement"): "Hu et al.'s greedy law only",
    ("token:greedy", "top-k"): "Hu et al.'s greedy law (top K-1 plus one sampled) is not top-k",
    ("token:deterministic", "iid"): "a fixed draft set only",
    ("token:deterministic", "without-replacement"): "a fixed draft set only",
    ("token:is-lp", "top-k"): "the IS LP takes iid, independent and wor laws",
}


def _first_tree(model, shape):
    return next(iter(shape_trees(model, shape)))[0]


@pytest.mark.parametrize("shape", CASES)
@pytest.mark.parametrize("name", EXACT_VERIFIERS)
def test_every_verifier_is_lossless_where_it_says_so(name, shape, exact_model):
    """supports() answers up front: a verifier that takes a tree of the shape is exactly
    lossless on it (deviation 0 in Fractions); one that does not is refused by evaluate."""
    verifier = get_verifier(name)
    first = _first_tree(exact_model, shape)
    expected_refusal = name == "block" or (name, shape.law) in REFUSED  # block: chains(1, L) only
    assert verifier.supports(first) is not expected_refusal
    if expected_refusal:
        with pytest.raises(ValueError, match="takes|does not take"):
            evaluate(verifier, exact_model, shape)
        return
    result = evaluate(verifier, exact_model, shape)
    assert result.exact and result.deviation == 0


@pytest.mark.parametrize("shape", CASES)
@pytest.mark.parametrize("name", FLOAT_VERIFIERS)
def test_float_verifiers_are_lossless_on_every_shape(name, shape, float_model):
    verifier = get_verifier(name)
    if (name, shape.law) in REFUSED:
        assert not verifier.supports(_first_tree(float_model, shape))
        return
    result = evaluate(verifier, float_model, shape)
    assert result.deviation <= 1e-12


def test_block_verification_on_one_chain(exact_model):
    assert evaluate(get_verifier("block"), exact_model, TreeShape.chains(1, 2)).deviation == 0


# ------------------------------------------------------------------------------ broken twins


class TopKTraversal(Traversal):
    """Broken twin: traversal claiming H on top-k trees (the children are fixed, not draws)."""

    drafting = (*Traversal.drafting, "shape:top-k")


class ReadAsIid(TokenVerifier):
    """Broken twin: the walk reading every node's tuple as iid draws from q (on a top-k node,
    SpecInfer's residuals then assume random drafts where the drafts are fixed)."""

    drafting = (*TokenVerifier.drafting,)

    def _node(self, tree, node):
        name, drafts, tuple_ = tree.node_draws(node)
        from multidraft.trees.token import node_law, node_scheme

        law = node_law("iid", drafts, tuple_)
        return node_scheme(self.scheme, type(law), law.k)[0], law, tuple_

    def _conditional(self, tree, node):
        scheme, law, tuple_ = self._node(tree, node)
        from multidraft.trees.token import node_conditional

        return node_conditional(scheme, tree.target_at(node), law, tree.exact)(tuple_[None, :])[0]

    def supports(self, tree):
        return True


def test_broken_twins_are_caught(exact_model):
    assert evaluate(TopKTraversal(), exact_model, TreeShape.expansion([2, 1], "top-k")).deviation > 0
    twin = ReadAsIid(get_scheme("specinfer"))
    assert evaluate(twin, exact_model, TreeShape.expansion([2, 1], "top-k")).deviation > 0
    assert evaluate(get_verifier("token:specinfer"), exact_model, TreeShape.expansion([2, 1], "top-k")).deviation == 0
    assert NODE_LAW["without-replacement"] == "wor"


# ----------------------------------------------------------------------------- the optimum


@pytest.mark.parametrize(
    "shape",
    [TreeShape.expansion([2, 1], "iid"), TreeShape.static([-1, 0, 0, 1], "without-replacement"), TreeShape.dynamic(3, 2)],
    ids=repr,
)
def test_optimum_on_shapes_by_two_lps_bounds_every_verifier(shape, float_model):
    optimum = block_optimum(float_model, shape)
    assert tail_optimum(float_model, shape) == pytest.approx(optimum.value, abs=1e-7)
    for name in ("selective", "token:optimal", "traversal"):
        verifier = get_verifier(name)
        if verifier.supports(_first_tree(float_model, shape)):
            assert evaluate(verifier, float_model, shape).expected_accepted <= float(optimum.upper_bound) + 1e-9


def test_optimum_is_a_certified_interval(float_model):
    from multidraft.trees import sun_example

    lower, upper = block_optimum(sun_example(), 1).interval
    assert isinstance(lower, Fraction) and lower <= Fraction(11, 9) <= upper and upper - lower < Fraction(1, 10**6)
    for shape in (TreeShape.chains(2, 2), TreeShape.expansion([2, 1], "without-replacement")):
        optimum = block_optimum(float_model, shape)
        assert optimum.lower_bound <= optimum.upper_bound and float(optimum.upper_bound - optimum.lower_bound) < 1e-6
        best = max(evaluate(get_verifier(v), float_model, shape).expected_accepted for v in ("selective", "traversal"))
        assert float(optimum.lower_bound) >= best - 1e-6


@pytest.mark.parametrize("shape", [TreeShape.expansion([2, 1]), TreeShape.expansion([1, 2], "without-replacement")], ids=repr)
def test_tree_only_bound_on_shapes(shape):
    from multidraft.trees import tree_only_bound

    first = SequenceModel.random(2, 2, np.random.default_rng(5))
    target = [t.copy() for t in first.target]
    target[1][1] = target[1][1][::-1]  # the models differ only after the prefix (1,)
    second = SequenceModel(target, first.draft)
    result = tree_only_bound([first, second], shape)
    assert result.value <= sum(float(u) for u in result.optima_upper) + 1e-7
    assert result.shared >= 1


class _RestWithoutResidual(TokenVerifier):
    """WRONG twin: the pointwise E[τ] walk's stop mass leaves out the residual's share
    (only the accepted drafts outside the children would remain: none)."""

    def _conditional_at(self, tree, node, tokens):
        values, _ = super()._conditional_at(tree, node, tokens)
        return values, 0.0


def test_pointwise_expected_length_at_a_real_vocabulary_is_the_dense_walks():
    """At n > REMEMBER_BELOW the token walk's E[τ] reads each node's law at its children alone
    (``_conditional_at``); it equals the walk over dense rows (``next_token=True``) to 1e-15
    for the optimal verifier (the same entries; the stop mass summed otherwise) and for SpecInfer
    (a dense plan either way; the one-draft node is read by its acceptance alone without rows),
    on iid nodes of 3 and 2 drafts and a one-draft node.
    The twin without the residual's stop mass is caught."""
    n = 2048
    rng = np.random.default_rng(5)
    p = rng.dirichlet(np.full(n, 0.3), size=4)
    q = 0.7 * p + 0.3 * rng.dirichlet(np.full(n, 0.3), size=4)
    (a, b), (c, d) = np.argsort(-p[0])[:2], rng.choice(n, size=2, replace=False)  # node 2 is reached, and stopped at
    tree = ShapedTree([-1, 0, 0, 1, 2, 2], [-1, a, b, c, c, d], [(a, b, a), (c,), (c, d), (), (), ()], p[[0, 1, 2, 3, 3, 3]], q[[0, 1, 2, 3, 3, 3]], "iid")
    for name in ("optimal", "specinfer"):
        verifier = TokenVerifier(get_scheme(name))
        pointwise, dense = verifier.expected_accepted(tree), verifier.law(tree, next_token=True).expected_accepted
        assert abs(pointwise - dense) <= 1e-15, (name, pointwise, dense)
    law = TokenVerifier(get_scheme("optimal")).law(tree, next_token=True)
    dense = law.expected_accepted
    assert law.node_probability[2] > 1e-3  # a pointwise node below the root where the walk stops
    assert abs(_RestWithoutResidual(get_scheme("optimal")).expected_accepted(tree) - dense) > 1e-3


@pytest.mark.statistical
def test_selective_draws_the_live_draft_by_the_rules_positions():
    """Selective's run draws the selected live draft from the curtain rule restricted to the
    live tokens (its random positions; the law path integrates the full rule's choice
    probabilities): at n = 2000 (a piece table of thousands) the draws of a tuple with a repeated
    token follow ``choice_probabilities`` (chi-square), and the twin, a uniformly chosen draft,
    is caught."""
    from multidraft.theory import IID, softmax, zipf
    from multidraft.theory.verifier import optimal_selection_rule
    from multidraft.trees.selective import ByWeights, _draw

    n, k = 2000, 4
    p = zipf(n, exponent=1.1, rng=np.random.default_rng(3))
    q = softmax((np.log(p) + 0.5 * np.random.default_rng(4).normal(size=n)) / 1.2)
    rule = optimal_selection_rule(p, IID(q, k))
    assert len(rule.piece_start) > 1000
    live = np.array([int(np.argmax(q)), 7, int(np.argmax(q)), 1500])
    expected = rule.choice_probabilities(live[None])[0]
    rng, draws = np.random.default_rng(8), 20000

    def statistic(selector):
        counts = np.bincount([_draw(selector, live, rng) for _ in range(draws)], minlength=k) / draws
        return float(((counts - expected) ** 2 / expected).sum() * draws)

    bound = (k - 1) + 6 * np.sqrt(2 * (k - 1)) + 20
    assert statistic(rule) < bound
    assert statistic(ByWeights(lambda tuples: np.full(np.shape(tuples), 1.0 / k))) > bound  # the twin


def test_selective_on_a_wor_node_beyond_the_transport_lp_uses_the_wor_rule():
    """A node drafted without replacement at n = 400, K = 3 is beyond the transport LP, so
    selective takes the optimal verifier's wor rule (not a curtain: no ``support`` of its own);
    on a tree of depth one its E[τ] is the rule's acceptance of the drafted tuple, which the
    token walk computes by its own route."""
    rng = np.random.default_rng(5)
    n = 400
    p = rng.dirichlet(np.full(n, 0.3), size=4)
    q = rng.dirichlet(np.full(n, 0.3), size=4)
    drawn = tuple(int(t) for t in np.argsort(-(np.log(q[0]) + rng.gumbel(size=n)))[:3])
    tree = ShapedTree([-1, 0, 0, 0], [-1, *drawn], [drawn, (), (), ()], p, q, "without-replacement")
    selective = get_verifier("selective").law(tree, next_token=False).expected_accepted
    walk = get_verifier("token:optimal").law(tree, next_token=False).expected_accepted
    assert 0.0 < selective <= 1.0
    assert selective == pytest.approx(walk, abs=1e-12)
