"""The tree verifier interface: the draft tree, the registry, bad inputs, and every registered
verifier's exact law against its own sampler (numpy and batched torch)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from multidraft.schemes import SCHEMES
from multidraft.trees import (
    VERIFIERS,
    BlockVerification,
    DraftTree,
    SequenceModel,
    TokenVerifier,
    Traversal,
    get_verifier,
    verifier_names,
)

# ------------------------------------------------------------------------------ the tree


def _uniform_tree(tokens, n=3, **options):
    tokens = np.asarray(tokens)
    k, length = tokens.shape
    return DraftTree(tokens, np.full((k, length + 1, n), 1 / n), np.full((k, length, n), 1 / n), **options)


def test_drafts_sharing_a_prefix_are_one_node_children_in_first_appearance_order():
    tree = _uniform_tree([[2, 0], [1, 1], [2, 1], [2, 0]])
    nodes = tree.nodes
    assert nodes.children[0] == (1, 2)  # token 2 first (row 0), then token 1
    assert [int(nodes.token[c]) for c in nodes.children[1]] == [0, 1]
    assert nodes.multiplicity.tolist()[:3] == [4, 3, 1]
    assert nodes.path(nodes.index[3, 2]) == (2, 0)
    assert nodes.index[0, 2] == nodes.index[3, 2]  # rows 0 and 3 are the same sequence
    assert nodes.postorder()[-1] == 0 and len(nodes.postorder()) == nodes.count == 6
    assert nodes.rows(1).tolist() == [0, 2, 3]


def test_node_distributions_come_from_the_first_row_through_the_node():
    target = np.zeros((2, 3, 2))
    target[..., 0] = 1.0
    target[1, 1] = [0.0, 1.0]  # differs at row 1's depth-1 prefix
    draft = np.full((2, 2, 2), 0.5)
    tree = DraftTree([[0, 1], [1, 1]], target, draft)
    assert tree.target_at(2).tolist() == [0.0, 1.0]  # node 2 = prefix (1,), first row 1
    assert tree.target_at(1).tolist() == [1.0, 0.0]
    with pytest.raises(ValueError, match="nothing was drafted after it"):
        tree.draft_at(3)


def test_live_law_names_follow_the_drafting():
    assert _uniform_tree([[0, 1], [0, 2]]).live_law_name(1) == "iid"
    assert _uniform_tree([[0, 1], [0, 2]], groups=(0, 1)).live_law_name(1) == "independent"
    assert _uniform_tree([[0, 1], [0, 2]], groups=(0, 1)).live_law_name(0) == "independent"
    assert _uniform_tree([[0, 1], [1, 2]], without_replacement=True).live_law_name(1) == "wor"


@pytest.mark.parametrize(
    "build, message",
    [
        pytest.param(lambda: DraftTree([0, 1], np.full((1, 3, 2), 0.5), np.full((1, 2, 2), 0.5)), r"tokens: expected an integer array \[K, L\]", id="1-d tokens"),
        pytest.param(lambda: _uniform_tree([[0.0, 1.0]]), "tokens: expected integer token ids", id="float tokens"),
        pytest.param(lambda: _uniform_tree([[0, 3]]), r"tokens: token ids must lie in \[0, 3\)", id="token out of range"),
        pytest.param(
            lambda: DraftTree([[0, 1]], np.full((1, 2, 2), 0.5), np.full((1, 1, 2), 0.5)),
            r"target: expected an array \[1, 3, n\]",
            id="target too short",
        ),
        pytest.param(
            lambda: DraftTree([[0]], np.full((1, 2, 2), 0.5), np.full((1, 1, 3), 1 / 3)),
            r"draft: expected an array \[1, 1, 2\]",
            id="vocabularies differ",
        ),
        pytest.param(
            lambda: DraftTree([[0]], np.full((1, 2, 2), 0.7), np.full((1, 1, 2), 0.5)),
            r"target: a distribution's entries sum to 1 \+ 0.4",
            id="target not normalised",
        ),
        pytest.param(
            lambda: DraftTree([[0]], np.full((1, 2, 2), 0.5), np.array([[[0.0, 1.0]]])),
            "token 0 of row 0 at depth 1 has draft probability zero",
            id="undraftable token",
        ),
        pytest.param(
            lambda: _uniform_tree([[0, 1], [0, 2]], without_replacement=True),
            "without replacement need K distinct first tokens",
            id="repeated first token without replacement",
        ),
        pytest.param(lambda: _uniform_tree([[0], [1]], groups=(0,)), "groups: expected 2 labels", id="groups length"),
        pytest.param(
            lambda: DraftTree([[0]], np.full((1, 2, 2), Fraction(1, 2), dtype=object), np.full((1, 1, 2), 0.5)),
            "both must be float arrays or both Fraction arrays",
            id="mixed exactness",
        ),
    ],
)
def test_bad_trees_are_refused_naming_the_argument(build, message):
    with pytest.raises(ValueError, match=message):
        build()


# ------------------------------------------------------------------------------ the registry


def test_every_scheme_has_a_token_verifier_and_names_are_exact():
    names = verifier_names()
    assert names == [f"token:{s}" for s in SCHEMES] + list(VERIFIERS)
    for name in names:
        assert get_verifier(name).name == name
    with pytest.raises(ValueError, match="unknown name 'Traversal'"):
        get_verifier("Traversal")
    with pytest.raises(ValueError, match="takes no options"):
        get_verifier("block", s=3)
    with pytest.raises(ValueError, match="expected a Scheme .* or an object with select"):
        TokenVerifier("specinfer")


def test_verifiers_refuse_trees_they_do_not_take():
    iid_pair = _uniform_tree([[0, 1], [1, 0]])
    with pytest.raises(ValueError, match=r"verifier 'block' takes iid, wor trees with K <= 1; got an iid tree with K=2"):
        BlockVerification().law(iid_pair)
    with pytest.raises(ValueError, match="takes iid, wor, shape:iid, shape:without-replacement trees; got an independent tree"):
        Traversal().law(_uniform_tree([[0, 1], [1, 0]], groups=(0, 1)))
    assert not get_verifier("token:rrs-wor").supports(iid_pair)  # refused up front, not by the law
    with pytest.raises(ValueError, match="node 0 drafts 2 tokens by the iid law, which scheme 'rrs-wor' does not take"):
        get_verifier("token:rrs-wor").law(iid_pair)
    with pytest.raises(ValueError, match="rng: expected a numpy.random.Generator"):
        Traversal().verify(iid_pair, 0)
    exact = DraftTree([[0]], np.full((1, 2, 2), Fraction(1, 2), dtype=object), np.full((1, 1, 2), Fraction(1, 2), dtype=object))
    with pytest.raises(ValueError, match="no exact"):
        get_verifier("token:optimal").law(exact)


def test_an_optimal_scheme_with_one_draft_is_single_draft_sampling():
    """The token walk runs single-draft sampling for an optimal scheme at a node with one draft
    (``one_draft_scheme``): its conditional law P(Y = · | X = x) equals the optimal scheme's
    plan's (and SpecInfer's, RRS without replacement's) on every law with one draft, with zeros and ties; another
    non-optimal scheme is kept."""
    from multidraft.schemes import get_scheme
    from multidraft.theory.laws import IID, Deterministic, Independent, WithoutReplacement
    from multidraft.trees.token import one_draft_scheme

    rng = np.random.default_rng(5)
    single, checked = get_scheme("single"), 0
    for name, cls in SCHEMES.items():
        scheme = get_scheme(name)
        if not cls.capabilities.optimal and name not in ("specinfer", "rrs-wor"):  # RRS with one draft is the same step
            assert one_draft_scheme(scheme, IID(np.full(3, 1 / 3), 1)) is scheme
            continue
        for _ in range(20):
            n = int(rng.integers(2, 7))
            p, q = rng.dirichlet(np.full(n, 0.5)), rng.dirichlet(np.full(n, 0.5))
            p[rng.integers(n)] = 0.0
            p /= p.sum()
            token = int(np.argmax(q))
            for law in (IID(q, 1), WithoutReplacement(q, 1), Independent([q]), Deterministic([token], n)):
                if not scheme.supports(law):
                    continue
                assert one_draft_scheme(scheme, law).name == "single"
                tuples = np.array([[token]]) if isinstance(law, Deterministic) else np.flatnonzero(q > 0)[:, None]
                ours = single.prepare(p, law).conditional(tuples)
                theirs = scheme.prepare(p, law).conditional(tuples)
                assert ours.shape == theirs.shape
                np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-12)
                checked += 1
    assert checked >= 100
    assert one_draft_scheme(get_scheme("optimal"), IID(np.full(3, 1 / 3), 2)).name == "optimal"  # K = 2: kept


@pytest.mark.parametrize("name", ["token:specinfer", "token:optimal", "token:rrs-wor"])
def test_expected_accepted_alone_equals_the_full_law(name):
    """E[τ | tree] without next-token rows takes P(Y = x | x) = min(1, p(x)/q(x)) at one-draft
    nodes (``single_draft_acceptance``) instead of the scheme's whole conditional row: the
    accepted-node probabilities equal the full law's (exactly in Fractions for SpecInfer)."""
    rng = np.random.default_rng(4)
    for seed in range(3):
        model = SequenceModel.random(4, 3, np.random.default_rng(seed), alpha=0.7, exact=True)
        wor = name == "token:rrs-wor"
        tokens = [[1, 0, 2], [3, 3, 1], [0, 1, 1]] if wor else rng.integers(0, 4, size=(3, 3)).tolist()
        tree = model.tree(tokens, without_replacement=wor)
        verifier = get_verifier(name)
        floats = DraftTree(tree.tokens, tree.target.astype(float), tree.draft.astype(float), without_replacement=wor)
        assert tree.exact
        alone, full = verifier.law(floats, next_token=False), verifier.law(floats)
        np.testing.assert_allclose(alone.node_probability, full.node_probability, rtol=0, atol=1e-15)
        if verifier.exact_capable and tree.exact:
            assert list(verifier.law(tree, next_token=False).node_probability) == list(verifier.law(tree).node_probability)


# ------------------------------------------------------- every verifier: law against sampler

#: (verifier, drafting) pairs run by the sampling checks: every block-level verifier and the
#: token walk with the schemes decoding uses most.
CASES = [
    ("traversal", False),
    ("traversal", True),
    ("block", False),
    ("token:specinfer", False),
    ("token:rrs-wor", True),
    ("token:optimal", False),
    ("token:spectr", False),
    ("selective", False),
    ("selective", True),
]


def _tree_for(name: str, without_replacement: bool, seed: int = 3) -> DraftTree:
    model = SequenceModel.random(4, 3, np.random.default_rng(seed), alpha=0.7)
    if name == "block":
        return model.tree([[1, 2, 0]])
    if without_replacement:
        return model.tree([[1, 0, 2], [3, 3, 1], [0, 1, 1]], without_replacement=True)
    if name == "selective":  # its rows rule accepts one leaf surely on the tree below: a spread law here
        return model.tree([[1, 0, 2], [1, 0, 3], [2, 2, 1], [0, 3, 0]])
    return model.tree([[1, 0, 2], [1, 0, 3], [2, 2, 1], [1, 3, 0]])


def _joint(tree, nodes_hit, next_tokens):
    counts = np.zeros((tree.nodes.count, tree.n))
    np.add.at(counts, (nodes_hit, next_tokens), 1)
    return counts / len(nodes_hit)


def _chi_square(observed, expected, samples):
    """Pearson statistic over the cells of positive expected mass and its degrees of freedom."""
    mask = expected > 1e-12
    return float(((observed[mask] - expected[mask]) ** 2 / expected[mask]).sum() * samples), int(mask.sum()) - 1


@pytest.mark.statistical
@pytest.mark.parametrize("name, without_replacement", CASES, ids=[f"{n}-{'wor' if w else 'iid'}" for n, w in CASES])
def test_numpy_runs_follow_the_exact_law(name, without_replacement):
    """Chi-square of (accepted node, next token) from ``verify`` against ``law``; the same
    statistic against a law with its accepted-node probabilities shifted must fail."""
    verifier = get_verifier(name)
    tree = _tree_for(name, without_replacement)
    law = verifier.law(tree)
    expected = law.node_probability[:, None] * law.next_token
    np.testing.assert_allclose(expected.sum(), 1.0, atol=1e-12)
    rng = np.random.default_rng(11)
    runs = [verifier.verify(tree, rng) for _ in range(4000)]
    observed = _joint(tree, [r.node for r in runs], [r.next_token for r in runs])
    for run in runs[:50]:
        assert run.tokens[:-1] == tuple(tree.tokens[run.row, : run.accepted])
    statistic, dof = _chi_square(observed, expected, len(runs))
    assert statistic < dof + 6 * np.sqrt(2 * dof) + 20
    wrong = np.roll(law.node_probability, 1)[:, None] * law.next_token  # the twin law
    twin, _ = _chi_square(observed, wrong / wrong.sum(), len(runs))
    assert twin > dof + 6 * np.sqrt(2 * dof) + 20


#: The lockstep torch forms, which accelerators run (on the CPU the compiled numpy run of each
#: tree is faster and is what ``verify_batch`` uses there): tested on the CPU too.
LOCKSTEP = {"traversal": "traversal_batch", "block": "block_batch"}
BATCH_CASES = CASES + [(name, wor, True) for name, wor in CASES if name in LOCKSTEP]


@pytest.mark.statistical
@pytest.mark.parametrize(
    "name, without_replacement, lockstep",
    [case if len(case) == 3 else (*case, False) for case in BATCH_CASES],
    ids=[f"{c[0]}-{'wor' if c[1] else 'iid'}{'-lockstep' if len(c) == 3 else ''}" for c in BATCH_CASES],
)
def test_batched_torch_runs_follow_the_exact_law(name, without_replacement, lockstep, device):
    import torch

    from multidraft.trees import _batch

    verifier = get_verifier(name)
    tree = _tree_for(name, without_replacement)
    law = verifier.law(tree)
    expected = law.node_probability[:, None] * law.next_token
    size = 6000
    tokens = torch.as_tensor(tree.tokens, device=device)[None].expand(size, -1, -1).contiguous()
    target = torch.as_tensor(tree.target, device=device)[None].expand(size, -1, -1, -1).contiguous()
    draft = torch.as_tensor(tree.draft, device=device)[None].expand(size, -1, -1, -1).contiguous()
    generator = torch.Generator(device=device).manual_seed(5)
    if lockstep:
        batch = _batch.check(tokens, target, draft, generator, without_replacement)
        out = getattr(_batch, LOCKSTEP[name])(batch, generator)
    else:
        out = verifier.verify_batch(tokens, target, draft, generator, without_replacement=without_replacement)
    assert out.accepted.device == tokens.device and out.next_token.dtype == torch.long
    accepted, rows, following = (x.cpu().numpy() for x in (out.accepted, out.row, out.next_token))
    nodes = tree.nodes.index[rows, accepted]
    observed = _joint(tree, nodes, following)
    statistic, dof = _chi_square(observed, expected, size)
    assert statistic < dof + 6 * np.sqrt(2 * dof) + 20
    wrong = np.roll(law.node_probability, 1)[:, None] * law.next_token
    twin, _ = _chi_square(observed, wrong / wrong.sum(), size)
    assert twin > dof + 6 * np.sqrt(2 * dof) + 20


def test_batched_inputs_are_checked(device):
    import torch

    tokens = torch.zeros((2, 1, 2), dtype=torch.long, device=device)
    target = torch.full((2, 1, 3, 2), 0.5, device=device, dtype=torch.float64)
    draft = torch.full((2, 1, 2, 2), 0.5, device=device, dtype=torch.float64)
    generator = torch.Generator(device=device)
    with pytest.raises(ValueError, match="generator: expected a torch.Generator"):
        Traversal().verify_batch(tokens, target, draft, None)
    with pytest.raises(ValueError, match=r"target: expected a tensor \[B=2, K=1, L\+1=3, n\]"):
        Traversal().verify_batch(tokens, target[:, :, :2], draft, generator)
    with pytest.raises(ValueError, match="tokens: expected a long tensor"):
        Traversal().verify_batch(tokens.double(), target, draft, generator)
    with pytest.raises(ValueError, match=r"entries sum to 1 \+ 1, more than"):
        Traversal().verify_batch(tokens, target * 2, draft, generator)
    with pytest.raises(ValueError, match="takes K <= 1"):
        BlockVerification().verify_batch(tokens.expand(2, 2, 2), target.expand(2, 2, 3, 2), draft.expand(2, 2, 2, 2), generator)
    with pytest.raises(ValueError, match="K distinct first tokens"):
        Traversal().verify_batch(tokens.expand(2, 2, 2), target.expand(2, 2, 3, 2), draft.expand(2, 2, 2, 2), generator, without_replacement=True)


# ------------------------------------------------------------------ sequence models, LP inputs


@pytest.mark.parametrize(
    "build, message",
    [
        pytest.param(lambda: SequenceModel([[0.5, 0.5]], []), "expected L \\+ 1 target tables and L draft tables", id="no draft table"),
        pytest.param(lambda: SequenceModel([[0.5, 0.5], [[0.5, 0.5]]], [[0.5, 0.5]]), r"target\[1\]: expected shape \(2, 2\)", id="table shape"),
        pytest.param(lambda: SequenceModel([[0.5, 0.6], [[0.5, 0.5]] * 2], [[0.5, 0.5]]), "target", id="not a distribution"),
        pytest.param(lambda: SequenceModel.random(0, 2, np.random.default_rng(0)), "n: ", id="empty vocabulary"),
        pytest.param(lambda: SequenceModel.constant([0.5, 0.5], [0.5, 0.5], 0), "length: ", id="zero length"),
    ],
)
def test_bad_sequence_models_are_refused(build, message):
    with pytest.raises(ValueError, match=message):
        build()


def test_tree_enumeration_counts_and_probabilities():
    model = SequenceModel.random(3, 2, np.random.default_rng(0), exact=True, denominator=10)
    for k, wor in ((2, False), (3, False), (2, True), (3, True)):
        trees = list(model.trees(k, without_replacement=wor))
        assert len(trees) == model.tree_count(k, wor)
        assert sum(p for _, p in trees) == 1


def test_block_level_inputs_are_checked():
    from multidraft.trees import block_optimum, evaluate, tree_only_bound

    model = SequenceModel.random(2, 2, np.random.default_rng(0))
    with pytest.raises(ValueError, match="form: unknown 'flow'"):
        block_optimum(model, 2, form="flow")
    with pytest.raises(ValueError, match="models: expected at least two SequenceModels"):
        tree_only_bound([model], 2)
    with pytest.raises(ValueError, match="models: every model needs the same n and L"):
        tree_only_bound([model, SequenceModel.random(3, 2, np.random.default_rng(0))], 2)
    with pytest.raises(ValueError, match="verifier: expected a TreeVerifier"):
        evaluate("traversal", model, 2)
    with pytest.raises(ValueError, match="k: without replacement needs k <= 2"):
        list(model.trees(3, without_replacement=True))
