"""Two shortcuts of the exact law E[τ | tree] at a real vocabulary (issue 30, item 5): the token
walk's plans hold a node's target row without a copy (``node_plan(..., copy=False)``: dropped
after the node, and never written into), and selective's fallback sums S = Σ (aB - r)_+ without
writing its weights (:func:`multidraft.trees._residual.scaled_residual` with ``keep=False``)."""

from __future__ import annotations

import numpy as np

from multidraft.theory import softmax, zipf
from multidraft.trees import ShapedTree, get_verifier

N = 2048  # above the remembered-plan sizes: the pointwise walk of a real vocabulary


def _tree(seed: int) -> ShapedTree:
    """A root drafting 3 iid tokens, each child 2 (targets of exact sum one: held, not copied)."""
    rng = np.random.default_rng(seed)
    root = tuple(int(t) for t in rng.choice(N, 3, replace=False))
    parent, token, draws = [-1, 0, 0, 0], [-1, *root], [root]
    for child in range(1, 4):
        drawn = tuple(int(t) for t in rng.choice(N, 2, replace=False))
        draws.append(drawn)
        parent += [child, child]
        token += list(drawn)
    draws += [()] * 6
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
