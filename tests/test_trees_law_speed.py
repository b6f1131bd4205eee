"""Three shortcuts of the exact law E[τ | tree] at a real vocabulary (issue 30, item 5): the token
walk's plans hold a node's target row without a copy (``node_plan(..., copy=False)``: dropped
after the node, and never written into), selective's fallback sums S = Σ (aB - r)_+ without
writing its weights (:func:`multidraft.trees._residual.scaled_residual` with ``keep=False``), and
the token walk fits no plan below a node it reaches with probability zero
(``TokenVerifier._unreached``)."""

from __future__ import annotations

import numpy as np

from multidraft.theory import softmax, zipf
from multidraft.trees import ShapedTree, get_verifier
from small_trees import three_two_draws

N = 2048  # above the remembered-plan sizes: the pointwise walk of a real vocabulary


def _tree(seed: int) -> ShapedTree:
    """A root drafting 3 iid tokens, each child 2 (targets of exact sum one: held, not copied)."""
    rng = np.random.default_rng(seed)
    parent, token, draws = three_two_draws(rng, N)
    target = np.array([zipf(N, exponent=1.1, rng=rng) for _ in range(len(parent))])
    target[:, 0] += 1.0 - target.sum(axis=1)  # rows summing to exactly one (as_distribution keeps them)
    draft = np.array([softmax((np.log(p) + 0.5 * rng.standard_normal(N)) / 1.2) for p in target])
    return ShapedTree(parent, token, draws, target, draft, "iid")


def _law_leaves_rows(verifier) -> bool:
    tree = _tree(4)
    before = tree.target.copy()
    value = verifier.expected_accepted(tree)
    return bool(np.array_equal(tree.target, before)) and value == verifier.expected_accepted(_tree(4))


def test_the_walk_never_writes_into_the_tree_rows():
    assert np.all(_tree(4).target.sum(axis=1) == 1.0)
    for name in ("token:optimal", "token:specinfer"):
        assert _law_leaves_rows(get_verifier(name))


def test_a_plan_writing_into_its_target_is_caught(monkeypatch):
    """WRONG twin: a fit that halves the plan's target in place (and fits twice it: the same rule,
    so the same E[τ]; harmless on a copy, not on the tree's row) is caught."""
    import multidraft.schemes.optimal as optimal

    fit = optimal.fit_curtain_rule
    monkeypatch.setattr(optimal, "fit_curtain_rule", lambda p, *rest: fit(np.multiply(p, 0.5, out=p) * 2.0, *rest))
    assert not _law_leaves_rows(get_verifier("token:optimal"))


def test_the_residual_sum_without_its_weights_is_the_same_sum():
    """``scaled_residual(..., keep=False)`` (selective's E[τ], which needs S alone) sums the same
    terms in the same order as the pass that writes W: the same S bit for bit. WRONG twin: numpy's
    pairwise sum of W, which differs in the last bits on some rows, is caught."""
    from multidraft.trees._residual import scaled_residual

    rng = np.random.default_rng(11)
    differs = 0
    for _ in range(20):
        w, q = rng.random(N), rng.random(N)
        scale = float(rng.uniform(0.5, 2.0))
        weights, total = scaled_residual(w, scale, q, 1.0)
        assert scaled_residual(w, scale, q, 1.0, keep=False) == (None, total)
        differs += float(weights.sum()) != total
    assert differs > 0


def _unreachable_tree() -> tuple[ShapedTree, int]:
    """A root drafting 3 tokens without replacement, each child 2: the third root draft has
    p = 0 at the root, so Y never equals it (accepted with min(1, p/r) = 0, residual 0 there) and
    its subtree is never reached. Returns the tree and that child's node id."""
    rng = np.random.default_rng(5)
    target = [zipf(N, exponent=1.1, rng=rng) for _ in range(10)]
    draft = [softmax((np.log(p) + 0.5 * rng.standard_normal(N)) / 1.2) for p in target]
    parent, token, draws = three_two_draws(rng, N, draft)
    target[0][draws[0][2]] = 0.0
    target[0] /= target[0].sum()
    return ShapedTree(parent, token, draws, np.array(target), np.array(draft), "without-replacement"), 3


def _dense_walk(tree: ShapedTree) -> np.ndarray:
    """P(accepted node = v) by the walk over every node's dense conditional law P(Y = · | x) (the
    scheme's plan, :meth:`~multidraft.schemes.Plan.conditional`), every node visited: the
    reference the shortcut is checked against."""
    from multidraft.schemes import get_scheme
    from multidraft.theory.laws import WithoutReplacement

    nodes, prob = tree.nodes, np.zeros(tree.nodes.count)

    def walk(node: int, reach: float) -> None:
        if not nodes.children[node]:
            prob[node] = reach
            return
        _, drafts, drawn = tree.node_draws(node)
        plan = get_scheme("optimal").prepare(tree.target_at(node), WithoutReplacement(drafts[0], len(drawn), normalize=True))
        law_y = plan.conditional(np.asarray(drawn)[None])[0]
        for child in nodes.children[node]:
            walk(child, reach * law_y[int(nodes.token[child])])
        prob[node] = reach * (1.0 - sum(law_y[int(nodes.token[c])] for c in nodes.children[node]))

    walk(0, 1.0)
    return prob


def _fits_and_law(monkeypatch) -> tuple[int, np.ndarray]:
    """(fits of the optimal rule, node probabilities) of token:optimal's E[τ] walk on :func:`_unreachable_tree`."""
    import multidraft.schemes.optimal as optimal

    fits, fit = [], optimal.checked_selection_rule
    monkeypatch.setattr(optimal, "checked_selection_rule", lambda *args: fits.append(1) or fit(*args))
    law = get_verifier("token:optimal").law(_unreachable_tree()[0], next_token=False)
    monkeypatch.setattr(optimal, "checked_selection_rule", fit)
    return len(fits), law.node_probability


def test_the_walk_fits_no_node_it_never_reaches(monkeypatch):
    """Of the four inner nodes the E[τ] walk fits three: the third root draft is never Y, and its
    subtree keeps probability 0; every other node's probability is the dense walk's over all nodes
    and the walk with next-token rows' (every node fitted there), to rounding: the pointwise walk adds
    in another order."""
    tree, unreached = _unreachable_tree()
    fits, prob = _fits_and_law(monkeypatch)
    reference = _dense_walk(tree)
    assert fits == 3
    np.testing.assert_allclose(prob, reference, rtol=0, atol=1e-15)
    below = [unreached, *tree.nodes.children[unreached]]
    assert np.all(prob[below] == 0.0) and np.all(reference[below] == 0.0)
    assert all(reference[[child, *tree.nodes.children[child]]].sum() > 0 for child in (1, 2))  # reached
    np.testing.assert_allclose(get_verifier("token:optimal").law(tree).node_probability, prob, rtol=0, atol=1e-15)  # dense rows


def test_a_walk_that_fits_every_node_or_skips_a_reached_one_is_caught(monkeypatch):
    """WRONG twins: no skipping (every node fitted, as before: the same law, one fit more) is
    caught by the count; skipping nodes of small but positive reach is caught by the values."""
    from multidraft.trees import TokenVerifier

    tree = _unreachable_tree()[0]
    monkeypatch.setattr(TokenVerifier, "_unreached", staticmethod(lambda reach: False))
    assert _fits_and_law(monkeypatch)[0] == 4
    monkeypatch.setattr(TokenVerifier, "_unreached", staticmethod(lambda reach: reach < 0.3))
    prob = _fits_and_law(monkeypatch)[1]
    assert np.abs(prob - _dense_walk(tree)).max() > 1e-3
