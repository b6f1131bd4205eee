"""A draft tree's rows validated once per tree (:mod:`multidraft.trees._checked`, issue 30 item 5):
the walks read each node's validated target and draft law from the tree after the first use, with
the same numbers bit for bit as validating them at every call; a bad row raises at every call; the
private route refuses a law its scheme does not take, and the public entries still validate."""

from __future__ import annotations

import numpy as np
import pytest

from multidraft.schemes import get_scheme
from multidraft.theory import softmax, zipf
from multidraft.theory.laws import IID, WithoutReplacement
from multidraft.trees import DraftTree, ShapedTree, TreeShape, get_verifier
from multidraft.trees._checked import CheckedRows

N = 2048  # above the verifiers' remembered-plan sizes: the pointwise walk of a real vocabulary
VERIFIERS = ("token:optimal", "token:specinfer", "selective")


def _rows(count: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    target = np.array([zipf(N, exponent=1.1, rng=rng) for _ in range(count)])
    draft = np.array([softmax((np.log(p) + 0.5 * rng.standard_normal(N)) / 1.2) for p in target])
    return target, draft


def _shaped(seed: int, scale: float = 1.0, negative: bool = False) -> ShapedTree:
    """``expansion([3, 2])`` drafted iid: 1 + 3 + 6 nodes at most (draws fixed, distinct)."""
    slots = TreeShape.expansion([3, 2]).slots
    rng = np.random.default_rng(seed)
    parent, token, draws = [-1], [-1], []
    v = 0
    while v < len(parent):
        widths = slots[0] if v == 0 else (slots[1] if parent[v] == 0 else ())
        drawn = tuple(int(t) for t in rng.choice(N, size=len(widths), replace=False)) if widths else ()
        draws.append(drawn)
        for t in drawn:
            parent.append(v)
            token.append(t)
        v += 1
    target, draft = _rows(len(parent), seed)
    target[0] *= scale  # a root target summing to `scale`
    if negative:  # a root draft with a negative entry on a token not drawn
        spare = next(t for t in range(N) if t not in draws[0])
        draft[0, spare] = -draft[0, spare]
    return ShapedTree(parent, token, draws, target, draft, "iid")


def _chains(seed: int) -> DraftTree:
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, N, (3, 2))
    tokens[1, 0] = tokens[0, 0]  # rows 0 and 1 share their first token
    target, draft = _rows(3 * 3, seed)
    return DraftTree(tokens, target.reshape(3, 3, N), draft.reshape(3, 3, N)[:, :2], validate=False)


def _validating_every_time(monkeypatch) -> None:
    """The route before: every use validates the rows again (nothing kept)."""
    monkeypatch.setattr(CheckedRows, "checked", lambda self, key, build: build())


@pytest.mark.parametrize("name", VERIFIERS)
@pytest.mark.parametrize("make", [_shaped, _chains], ids=["shaped", "chains"])
def test_kept_rows_give_the_same_law_bit_for_bit(name, make, monkeypatch):
    verifier = get_verifier(name)
    tree = make(5)
    first, again = verifier.expected_accepted(tree), verifier.expected_accepted(tree)
    assert any(key[0] in ("token", "selective") for key in tree.__dict__["_checked_rows"])  # kept after the first call
    verify = [verifier.verify(tree, np.random.default_rng(s)).tokens for s in range(3)]
    _validating_every_time(monkeypatch)
    fresh = make(5)
    assert first == again == verifier.expected_accepted(fresh)
    assert verify == [verifier.verify(fresh, np.random.default_rng(s)).tokens for s in range(3)]


def test_the_wrong_node_twin_is_caught(monkeypatch):
    """WRONG twin: a memo keyed by the kind alone (every node reads the root's rows)."""
    verifier = get_verifier("token:optimal")
    right = verifier.expected_accepted(_shaped(6))
    monkeypatch.setattr(CheckedRows, "checked", lambda self, key, build, _memo={}: _memo.setdefault((id(self), key[0]), build()))
    assert verifier.expected_accepted(_shaped(6)) != right


BAD = [
    (name, "negative", dict(negative=True)) for name in VERIFIERS
] + [(name, "sum", dict(scale=1.5)) for name in VERIFIERS if name.startswith("token")]  # selective rescales its targets (as before)


@pytest.mark.parametrize("name, message, bad", BAD)
def test_a_bad_row_raises_at_every_call(name, message, bad):
    tree = _shaped(7, **bad)
    verifier = get_verifier(name)
    for _ in range(2):
        with pytest.raises(ValueError, match=message):
            verifier.expected_accepted(tree)
    assert not tree.__dict__.get("_checked_rows")  # nothing kept


def test_the_keep_the_unchecked_rows_twin_is_caught(monkeypatch):
    """WRONG twin: a memo that keeps the rows when validation fails (the second call then runs on
    a row nobody checked and returns a number): the test above would see no error there."""

    def keep_anyway(self, key, build):
        memo = self.__dict__.setdefault("_checked_rows", {})
        if key not in memo:
            try:
                memo[key] = build()
            except ValueError:
                name, drafts, tuple_ = self.node_draws(key[1])
                memo[key] = (self.target_at(key[1]), IID(drafts[0], len(tuple_), normalize=True), tuple_)
                raise
        return memo[key]

    monkeypatch.setattr(CheckedRows, "checked", keep_anyway)
    tree, verifier = _shaped(7, scale=1.5), get_verifier("token:optimal")
    with pytest.raises(ValueError):
        verifier.expected_accepted(tree)
    assert np.isfinite(verifier.expected_accepted(tree))  # what the test above rules out


def test_prepare_checked_refuses_a_law_and_prepare_still_validates():
    scheme = get_scheme("specinfer")
    target, draft = _rows(1, 9)
    with pytest.raises(ValueError, match="does not take"):
        get_scheme("greedy")._prepare_checked(target[0], WithoutReplacement(draft[0], 2))
    with pytest.raises(ValueError, match="negative"):
        scheme.prepare(np.where(np.arange(N) == 0, -0.1, target[0]), IID(draft[0], 2))
    plan = scheme._prepare_checked(IID(draft[0], 2).check_target(target[0]), IID(draft[0], 2))
    np.testing.assert_array_equal(plan.conditional(np.array([[0, 1]])), scheme.prepare(target[0], IID(draft[0], 2)).conditional(np.array([[0, 1]])))


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
