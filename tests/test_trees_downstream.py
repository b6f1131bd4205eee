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
