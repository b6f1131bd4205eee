"""The downstream-aware walk (issue 30, item 3): its value by the recursion and by exact
evaluation of the walk, losslessness, its place against token:optimal, and the twin that picks the
coupling from the drawn tree (lossy)."""

from __future__ import annotations

import numpy as np
import pytest

from multidraft.schemes import get_scheme
from multidraft.trees import SequenceModel, TokenVerifier, evaluate, get_verifier, sun_example
from multidraft.trees.downstream import DownstreamWalk, downstream_value, node_couplings


@pytest.fixture(scope="module")
def models() -> list[SequenceModel]:
    return [SequenceModel.random(3, 2, np.random.default_rng(seed)) for seed in (1, 2)]


def test_one_draft_is_speculative_sampling():
    assert downstream_value(sun_example(), 1) == pytest.approx(10 / 9, abs=1e-12)


@pytest.mark.parametrize("k", [2, 3])
def test_two_routes_lossless_and_above_token_optimal(models, k):
    for model in models:
        reference = downstream_value(model, k)
        walk = evaluate(DownstreamWalk(model, k), model, k)
        assert walk.expected_accepted == pytest.approx(reference, abs=1e-9)
        assert walk.deviation <= 1e-12
        optimal = evaluate(get_verifier("token:optimal"), model, k).expected_accepted
        assert reference >= optimal - 1e-9  # token:optimal's coupling is one of the candidates
        assert downstream_value(model, k, acceptance_first=False) >= reference - 1e-9
    assert any(downstream_value(m, 2) > evaluate(get_verifier("token:optimal"), m, 2).expected_accepted + 1e-6 for m in models)


class TreeLocal(TokenVerifier):
    """Broken twin: the coupling chosen from the values of the *drawn* subtrees (the reference's
    LP with the tree's own children's values): its law of Y given the tuple moves with the draws
    below, so it is not lossless."""

    drafting = ("iid",)

    def __init__(self) -> None:
        super().__init__(get_scheme("optimal"))
        self.exact_capable = False

    def _value(self, tree, node):
        nodes = tree.nodes
        _, drafts, x = tree.node_draws(node)
        values = {(int(nodes.token[c]), int(np.count_nonzero(x == nodes.token[c]))): self._value(tree, c)[0]
                  for c in nodes.children[node] if nodes.children[c]}  # fmt: skip
        target = np.asarray(tree.target_at(node), dtype=np.float64)
        row = node_couplings(target, np.asarray(drafts[0], dtype=np.float64), len(x), values, True)[1][tuple(x.tolist())]
        value = sum(row[int(nodes.token[c])] * (1 + (self._value(tree, c)[0] if nodes.children[c] else 0.0)) for c in nodes.children[node])
        return value, row

    def _conditional(self, tree, node):
        return self._value(tree, node)[1]


def test_choosing_the_coupling_from_the_drawn_tree_is_lossy(models):
    assert evaluate(TreeLocal(), models[1], 2).deviation > 1e-3


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: downstream_value("model", 2), "model: expected a SequenceModel"),
        (lambda: downstream_value(sun_example(), 0), "k: expected an integer >= 1"),
    ],
    ids=["model", "k"],
)
def test_bad_inputs(call, message):
    with pytest.raises(ValueError, match=message):
        call()


# ------------------------------------------ selective: the same law, more rows below (§4c)


def _downstream_models(k: int, n: int) -> list[SequenceModel]:
    """bench_downstream.py's Dirichlet(1) models (seeds 3000, 3001) for (k, n)."""
    out = []
    for seed in (3000, 3001):
        rng = np.random.default_rng(seed)
        for kk, nn in ((2, 3), (3, 2), (3, 3)):
            model = SequenceModel.random(nn, 2, rng, alpha=1.0)
            if (kk, nn) == (k, n):
                out.append(model)
    return out


def test_rows_rule_realises_the_curtain_law_with_more_rows():
    """The rule that prefers tokens carried by more rows has the curtain rule's law (to the LP's
    tolerance) and a larger expected multiplicity of the selected token than the curtain itself."""
    from multidraft.theory.laws import IID
    from multidraft.theory.verifier import optimal_selection_rule
    from multidraft.trees._rows_rule import rows_rule

    rng = np.random.default_rng(7)
    gains = []
    for _ in range(10):
        q, p = rng.dirichlet(np.ones(3)), rng.dirichlet(np.ones(3))
        law = IID(q, 3)
        curtain = optimal_selection_rule(p, law)
        realised, choose = rows_rule(q, 3, curtain.selection_law)
        np.testing.assert_allclose(realised, curtain.selection_law, atol=1e-8)
        tuples = np.array(list(np.ndindex(3, 3, 3)))
        mass = np.prod(q[tuples], axis=1)
        rows = (tuples[:, :, None] == tuples[:, None, :]).sum(axis=2)
        ours, theirs = choose(tuples), curtain.choice_probabilities(tuples)
        assert ours.shape == theirs.shape == tuples.shape
        np.testing.assert_allclose(ours.sum(axis=1), 1.0, atol=1e-12)
        gains.append(mass @ (ours * rows).sum(axis=1) - mass @ (theirs * rows).sum(axis=1))
    assert min(gains) >= -1e-9 and max(gains) > 1e-3
    assert rows_rule(np.full(40, 1 / 40), 3, np.full(40, 1 / 40)) is None  # 64000 tuples: too large


def test_selective_reaches_the_downstream_reference_at_k3():
    """On K = 3 iid chains selective (rows rule) is lossless and at or above the downstream-aware
    walk; with the curtain's own choice it was strictly below on the first model (bench_downstream)."""
    from multidraft.trees.selective import Selective

    class CurtainSelective(Selective):
        def _rule(self, target, law, rows=False):
            return Selective._rule(target, law, False)

    model = _downstream_models(3, 3)[1]
    reference = downstream_value(model, 3)
    ours = evaluate(get_verifier("selective"), model, 3, exact=False)
    before = evaluate(CurtainSelective(), model, 3, exact=False)
    assert ours.deviation <= 1e-12 and before.deviation <= 1e-12
    assert ours.expected_accepted >= reference - 1e-9
    assert before.expected_accepted < reference - 1e-3


def test_selecting_by_rows_without_its_own_law_is_lossy():
    """Broken twin: select the token carried by most rows (ties: the curtain's choice) but keep
    the curtain's law r for the budgets: r is no longer the law of the selected token."""
    from multidraft.trees.selective import Selective

    class Twin(Selective):
        def _rule(self, target, law, rows=False):
            r, choose = Selective._rule(target, law, False)

            def most_rows(tuples):
                tuples = np.asarray(tuples)
                rows_of = (tuples[:, :, None] == tuples[:, None, :]).sum(axis=2)
                best = rows_of == rows_of.max(axis=1, keepdims=True)
                weights = np.where(best, choose(tuples) + 1e-300, 0.0)
                return weights / weights.sum(axis=1, keepdims=True)

            return r, most_rows

    model = _downstream_models(3, 3)[1]
    assert evaluate(Twin(), model, 3, exact=False).deviation > 1e-4
