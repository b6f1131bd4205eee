"""The downstream-aware walk (issue 30, item 3): its value by the recursion and by exact
evaluation of the walk, losslessness, its place against token:optimal (whose rows coupling reaches
it on these models), and the twins: the coupling picked from the drawn tree (lossy), the curtain
walk (below the reference), rows preferred without a coupling (lossy)."""

from __future__ import annotations

import itertools

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


class CurtainWalk(TokenVerifier):
    """Twin: token:optimal as it was, the curtain rule's coupling at every node (no rows)."""

    def _rows_below(self, tree, node):
        return False


@pytest.mark.parametrize("k", [2, 3])
def test_two_routes_lossless_and_token_optimal_reaches_it(models, k):
    """The recursion and the walk's exact law agree; token:optimal's coupling is one of the
    reference's candidates (so never above it) and, with the rows coupling, reaches it on these
    models; the curtain walk falls short on one (the twin the second check must catch)."""
    for model in models:
        reference = downstream_value(model, k)
        walk = evaluate(DownstreamWalk(model, k), model, k)
        assert walk.expected_accepted == pytest.approx(reference, abs=1e-9)
        assert walk.deviation <= 1e-12
        optimal = evaluate(get_verifier("token:optimal"), model, k)
        assert optimal.deviation <= 1e-12
        assert reference - 1e-9 <= optimal.expected_accepted <= reference + 1e-9
        assert downstream_value(model, k, acceptance_first=False) >= reference - 1e-9
    curtain = CurtainWalk(get_scheme("optimal"))
    assert any(downstream_value(m, 2) > evaluate(curtain, m, 2).expected_accepted + 1e-6 for m in models)


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
    from multidraft.trees.selective import ByWeights, Selective

    class Twin(Selective):
        def _rule(self, target, law, rows=False):
            r, selector = Selective._rule(target, law, False)
            choose = selector.choice_probabilities

            def most_rows(tuples):
                tuples = np.asarray(tuples)
                rows_of = (tuples[:, :, None] == tuples[:, None, :]).sum(axis=2)
                best = rows_of == rows_of.max(axis=1, keepdims=True)
                weights = np.where(best, choose(tuples) + 1e-300, 0.0)
                return weights / weights.sum(axis=1, keepdims=True)

            return r, ByWeights(most_rows)

    model = _downstream_models(3, 3)[1]
    assert evaluate(Twin(), model, 3, exact=False).deviation > 1e-4


# ------------------------------------------ token:optimal: maximum acceptance, more rows below (§4c)


def _coupling_measures(coupling, p, q, k):
    """(marginal of Y [n], acceptance, E[rows carrying Y; accepted]) of ``tuples -> P(Y | x)``
    over every ordered tuple of k iid draws from q's support, by enumeration."""
    tuples = np.array(list(itertools.product(np.flatnonzero(q > 0).tolist(), repeat=k)))
    mass = np.prod(q[tuples], axis=1)
    conditional = coupling(tuples)
    counts = (tuples[:, :, None] == np.arange(len(q))[None, None, :]).sum(axis=1)  # m_y(x)
    return mass @ conditional, mass @ (conditional * (counts > 0)).sum(axis=1), mass @ (conditional * counts).sum(axis=1)


def _min_cut_acceptance(p, q, k):
    """P* = min_T [p(T) + 1 - q(T)^k] over every subset T of the tokens (brute force)."""
    return min(p[list(t)].sum() + 1 - q[list(t)].sum() ** k for size in range(len(p) + 1) for t in itertools.combinations(range(len(p)), size))


def test_rows_coupling_has_maximum_acceptance_and_the_most_rows():
    """On random (p, q) with zeros: the marginal of Y is p (1e-12); acceptance is P* by the
    scheme and by brute-force min cut; the expected rows carrying the accepted token equal the
    downstream LP's with value j for a child of j rows (ordered tuples, dense: a second
    implementation), and exceed the curtain's somewhere."""
    from multidraft.theory.laws import IID
    from multidraft.trees._rows_rule import rows_coupling

    rng = np.random.default_rng(8)
    gains = []
    for _ in range(12):
        n, k = int(rng.integers(2, 5)), int(rng.integers(2, 4))
        p, q = rng.dirichlet(np.full(n, 0.6)), rng.dirichlet(np.full(n, 0.6))
        q[rng.integers(n)] = 0.0
        q /= q.sum()
        ours = rows_coupling(p, q, k)
        with pytest.raises(ValueError, match="draft probability zero"):
            ours(np.full((1, k), int(np.flatnonzero(q == 0)[0])))
        marginal, acceptance, rows = _coupling_measures(ours, p, q, k)
        np.testing.assert_allclose(marginal, p, rtol=0, atol=1e-12)
        assert acceptance == pytest.approx(get_scheme("optimal").acceptance(p, IID(q, k)), abs=1e-9)
        assert acceptance == pytest.approx(_min_cut_acceptance(p, q, k), abs=1e-9)
        values = {(y, j): float(j) for y in range(n) for j in range(1, k + 1)}
        second = node_couplings(p, q, k, values, True)[0] - acceptance  # Σ π 1{y ∈ x} (1 + j) - P*
        assert rows == pytest.approx(second, abs=1e-7)
        plan = get_scheme("optimal").prepare(p, IID(q, k))
        gains.append(rows - _coupling_measures(plan.conditional, p, q, k)[2])
    assert min(gains) >= -1e-9 and max(gains) > 1e-2


class MostRowsWalk(TokenVerifier):
    """Broken twin: the curtain's coupling, but the accepted mass of a tuple moved onto its most
    repeated token (rows preferred without re-solving the coupling): Y's law is no longer p."""

    def _conditional(self, tree, node):
        row = super()._conditional(tree, node).copy()
        x = tree.node_draws(node)[2]
        tokens, counts = np.unique(x, return_counts=True)
        if counts.max() > 1 and tree.length - int(tree.nodes.depth[node]) >= 2:
            best = tokens[np.argmax(counts)]
            row[best] += row[tokens].sum() - row[best]
            row[tokens[tokens != best]] = 0.0
        return row

    def _rows_below(self, tree, node):
        return False


def test_token_optimal_is_lossless_and_reaches_the_reference_at_k3():
    """On bench_downstream's Dirichlet(1) models at K = 3 (n = 2, 3): token:optimal (the rows
    coupling) is lossless and within 1e-9 of the downstream-aware reference, the curtain walk
    below it by more than 1e-4 on one; preferring rows without a coupling is lossy (the twin)."""
    models = _downstream_models(3, 3) + _downstream_models(3, 2)
    shortfalls = []
    for model in models:
        reference = downstream_value(model, 3)
        ours = evaluate(get_verifier("token:optimal"), model, 3, exact=False)
        assert ours.deviation <= 1e-12
        assert ours.expected_accepted >= reference - 1e-9
        shortfalls.append(reference - evaluate(CurtainWalk(get_scheme("optimal")), model, 3, exact=False).expected_accepted)
    assert max(shortfalls) > 1e-4
    assert evaluate(MostRowsWalk(get_scheme("optimal")), models[1], 3, exact=False).deviation > 1e-4


def test_rows_coupling_only_where_rows_continue():
    """rows_below: the optimal scheme, iid rows, k >= 2, a drafted depth below the children, a
    small vocabulary -- not SpecInfer, not the last depth, not one row, not n = 49152."""
    from multidraft.schemes.specinfer import SpecInfer
    from multidraft.theory.laws import IID, WithoutReplacement
    from multidraft.trees.token import rows_below

    optimal = get_scheme("optimal")
    assert rows_below(optimal, IID, 3, 3, 0, 2)
    assert not rows_below(SpecInfer(), IID, 3, 3, 0, 2)
    assert not rows_below(optimal, WithoutReplacement, 3, 3, 0, 2)
    assert not rows_below(optimal, IID, 3, 3, 1, 2)
    assert not rows_below(optimal, IID, 1, 3, 0, 2)
    assert not rows_below(optimal, IID, 2, 49152, 0, 8)


def _swapped(model: SequenceModel, a: int, b: int) -> SequenceModel:
    """``model`` with the subtrees of root children a and b exchanged (the root tables kept)."""
    target, draft = [t.copy() for t in model.target], [d.copy() for d in model.draft]
    target[1][[a, b]], draft[1][[a, b]] = target[1][[b, a]], draft[1][[b, a]]
    blocks = np.arange(model.n**2).reshape(model.n, model.n)
    target[2][np.r_[blocks[a], blocks[b]]] = target[2][np.r_[blocks[b], blocks[a]]]
    return SequenceModel(target, draft)


@pytest.mark.parametrize("k, n, seed, pair", [(2, 3, 3, (1, 2)), (3, 3, 6, (0, 1))], ids=["k2", "k3"])
def test_no_tree_local_walk_reaches_the_reference_on_both_of_a_pair(k, n, seed, pair):
    """bench_downstream's model (Dirichlet(1) seed 3 at K = 2, Dirichlet(0.3) seed 6 at K = 3) and
    its copy with two root children's subtrees exchanged: a walk seeing only the tree must couple
    the one root tuple made of the third token alike in both, and loses ``loss`` > 0 on the pair
    (walk_pair_bound). token:optimal's two shortfalls from the reference add up to that loss
    (evaluated exactly: a second route), so no tree-local walk does better on the pair. The twin:
    a model paired with itself loses nothing."""
    from multidraft.trees.downstream import walk_pair_bound

    rng = np.random.default_rng(3000 + seed)
    for kk, nn in ((2, 3), (3, 2), (3, 3)):
        model = SequenceModel.random(nn, 2, rng, alpha=1.0 if k == 2 else 0.3)
        if (kk, nn) == (k, n):
            break
    other = _swapped(model, *pair)
    bound, references, linked = walk_pair_bound(model, other, k)
    loss = references - bound
    assert linked == 1 and loss > 2e-5
    shortfalls = [downstream_value(m, k) - evaluate(get_verifier("token:optimal"), m, k, exact=False).expected_accepted for m in (model, other)]
    assert sum(shortfalls) == pytest.approx(loss, abs=1e-8)
    bound_alone, references_alone, _ = walk_pair_bound(model, model, k)
    assert abs(references_alone - bound_alone) < 1e-9
    with pytest.raises(ValueError, match="same root tables"):
        walk_pair_bound(model, SequenceModel.random(n, 2, np.random.default_rng(0)), k)
