"""Decoding with draft trees of any shape (issue 30, item 1; issue 31, item 1), on tiny random
Llama models built here:

* the distributions of every drafted tree are the models' own (checked against cache-free
  forwards over several blocks, so the per-branch cache rows and their commits are checked);
* each per-node law is the one the tree says (ShapedTree validates draws; the dynamic tree is
  the budget's best by draft path probability, recomputed without caches);
* losslessness through decoding for every family and law with a verifier that takes it
  (chi-square on the first two tokens), and a broken drafter caught by the same test;
* ``verify_batch`` on ShapedTrees equal in law to the verifier's exact law, a broken twin caught;
* chains through a TreeShape give the very tokens of today's K-chain path;
* the measurement scores every verifier on the same trees (calibrated, with a shifted twin),
  refuses verifiers that are not lossless on the law, and the command line's ``--tree``,
  ``--tree-budget``, ``--top-k`` and the degenerate line.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")

from test_decoding import chi_square_pvalue, generators, two_token_law  # noqa: E402
from test_decoding import draft, target  # noqa: E402, F401 -- the tiny target and draft models (module fixtures)
from test_decoding_models import tiny_dir  # noqa: E402, F401 -- the tiny model saved to a directory

from multidraft.decoding import DraftSpec, Sampling, measure, process_logits, speculative_generate  # noqa: E402
from multidraft.decoding import tree_drafting  # noqa: E402
from multidraft.decoding.measurement import DEGENERATE  # noqa: E402
from multidraft.trees import ShapedTree, Traversal, TreeShape, get_verifier  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")

#: (shape, a verifier lossless on its law) for every family and law.
FAMILIES = [
    (TreeShape.expansion([2, 1]), "token:specinfer"),
    (TreeShape.expansion([2, 2], law="without-replacement"), "traversal"),
    (TreeShape.expansion([3, 1], law="top-k"), "selective"),
    (TreeShape.static([-1, 0, 0, 1, 3]), "traversal"),
    (TreeShape.static([-1, 0, 1, 1], law="without-replacement"), "token:rrs-wor"),
    (TreeShape.dynamic(5, 3, branching=2), "token:specinfer"),
]
IDS = ["expansion-iid", "expansion-wor", "expansion-topk", "static-iid", "static-wor", "dynamic"]


def blocks_of(target_model, draft_model, shape, verifier, seed=0, prompt=(0, 1), tokens=14, sampling=Sampling(1.5)):
    """Every block of one generation with its context: ``[(context, outcome)]``."""
    seen = []
    speculative_generate(
        target_model, [DraftSpec(draft_model, sampling)], list(prompt), length=shape.depth, max_new_tokens=tokens,
        verifier=verifier, shape=shape, on_block=seen.append, **generators(target_model.device, seed),
    )  # fmt: skip
    out, context = [], list(prompt)
    for outcome in seen:
        out.append((tuple(context), outcome))
        context += list(outcome.tokens)
    return out


def processed(model, context, sampling) -> np.ndarray:
    """``process_logits`` of the model's next-token logits after ``context``, without a cache."""
    with torch.inference_mode():
        logits = model.model(torch.tensor([list(context)], device=model.device)).logits[0, -1]
    return process_logits(logits, sampling.temperature, sampling.top_p).cpu().numpy()


# ---------------------------------------------------------------------------------------------
# The tree's distributions and laws


@pytest.mark.parametrize("shape, verifier", FAMILIES, ids=IDS)
def test_every_node_holds_the_models_own_distributions(target, draft, shape, verifier):
    """p(· | v) and q(· | v) of every node of every block equal cache-free forwards after the
    block's context and v's path: the per-branch rows, the one target forward and the commits
    (including pending tokens carried into the next block) keep the caches right."""
    blocks = blocks_of(target, draft, shape, verifier)
    assert len(blocks) >= 3
    for context, outcome in blocks:
        tree = outcome.shaped
        assert isinstance(tree, ShapedTree) and tree.law == ("top-k" if shape.family == "dynamic" else shape.law)
        for v in range(tree.nodes.count):
            prefix = context + tree.nodes.path(v)
            np.testing.assert_allclose(tree.target[v], processed(target, prefix, Sampling()), atol=2e-6)
            if tree.draws[v]:
                np.testing.assert_allclose(tree.draft[v], processed(draft, prefix, Sampling(1.5)), atol=2e-6)
        assert outcome.tokens[:-1] == tree.nodes.path(outcome.row) and outcome.accepted == tree.nodes.depth[outcome.row]


def test_a_wrong_cache_row_is_caught(target, draft, monkeypatch):
    """The twin: nodes fed on the wrong parents' cache rows (the rows reversed) no longer match
    the cache-free forwards."""
    original = tree_drafting.ModelState.select_rows

    def reversed_rows(self, rows):
        original(self, list(rows)[::-1])

    monkeypatch.setattr(tree_drafting.ModelState, "select_rows", reversed_rows)
    shape = TreeShape.expansion([2, 2, 1])
    mismatch = 0
    for context, outcome in blocks_of(target, draft, shape, "token:specinfer", seed=3):
        tree = outcome.shaped
        for v in range(tree.nodes.count):
            if tree.draws[v]:
                mismatch += not np.allclose(tree.draft[v], processed(draft, context + tree.nodes.path(v), Sampling(1.5)), atol=2e-6)
    assert mismatch > 0


def dynamic_reference(model, context, shape: TreeShape, sampling: Sampling) -> set[tuple[int, ...]]:
    """The kept prefixes of a dynamic shape, from scratch: every candidate (each node's
    ``branching`` most likely tokens, depth <= ``depth``) scored by Q(u) with cache-free
    forwards, the ``budget`` best kept (ties: shorter, then smaller sibling ranks)."""
    candidates = []

    def grow(prefix, mass, ranks):
        if len(prefix) == shape.length:
            return
        q = processed(model, context + prefix, sampling)
        order = np.argsort(-q, kind="stable")[: shape.k]
        for j, t in enumerate(order):
            if q[t] > 0:
                candidates.append(((-mass * q[t], len(prefix) + 1, (*ranks, j)), prefix + (int(t),)))
                grow(prefix + (int(t),), mass * q[t], (*ranks, j))

    grow((), 1.0, ())
    return {prefix for _, prefix in sorted(candidates)[: shape.budget]}


def test_dynamic_trees_keep_the_budgets_best_paths(target, draft):
    shape = TreeShape.dynamic(6, 3, branching=2)
    blocks = blocks_of(target, draft, shape, "selective", seed=4)
    for context, outcome in blocks:
        tree = outcome.shaped
        kept = {tree.nodes.path(v) for v in range(1, tree.nodes.count)}
        assert len(kept) == 6 and kept == dynamic_reference(draft, context, shape, Sampling(1.5))
    twin = dynamic_reference(draft, blocks[0][0], TreeShape.dynamic(6, 3, branching=3), Sampling(1.5))
    assert twin != {blocks[0][1].shaped.nodes.path(v) for v in range(1, 7)}  # a wider candidate set changes the tree


def test_per_node_laws_draw_as_the_shape_says(target, draft):
    """iid nodes repeat tokens (merged children), without replacement never; top-k draws are
    the top tokens (ShapedTree refuses anything else, so each block built is a check)."""
    iid = [o.shaped for _, o in blocks_of(target, draft, TreeShape.expansion([4]), "token:specinfer", tokens=40)]
    assert all(len(t.draws[0]) == 4 for t in iid) and any(len(set(t.draws[0])) < 4 for t in iid)
    wor = [o.shaped for _, o in blocks_of(target, draft, TreeShape.expansion([4], law="without-replacement"), "traversal", tokens=40)]
    assert all(len(set(t.draws[0])) == len(t.draws[0]) == 4 for t in wor)
    top = [o.shaped for _, o in blocks_of(target, draft, TreeShape.expansion([3, 2], law="top-k"), "selective")]
    for tree in top:
        for v in range(tree.nodes.count):
            if tree.draws[v]:
                assert tree.draws[v] == tuple(np.argsort(-tree.draft[v], kind="stable")[: len(tree.draws[v])].tolist())


# ---------------------------------------------------------------------------------------------
# Losslessness through decoding


def first_two(target_model, draft_model, shape, verifier, samples: int, seed: int) -> np.ndarray:
    n = target_model.vocab_size
    randomness = generators(target_model.device, seed)
    counts = np.zeros(n * n)
    for _ in range(samples):
        out = speculative_generate(
            target_model, [DraftSpec(draft_model, Sampling(1.5))], [2], length=shape.depth, max_new_tokens=2,
            verifier=verifier, shape=shape, **randomness,
        )  # fmt: skip
        counts[out.tokens[0] * n + out.tokens[1]] += 1
    return counts


@pytest.mark.statistical
@pytest.mark.parametrize("shape, verifier", FAMILIES, ids=IDS)
def test_every_family_is_lossless_through_decoding(target, draft, shape, verifier):
    counts = first_two(target, draft, shape, get_verifier(verifier), samples=600, seed=5)
    assert counts.sum() == 600
    assert chi_square_pvalue(counts, two_token_law(target, [2])) > 1e-3


@pytest.mark.statistical
def test_a_drafter_that_records_another_law_is_caught(target, draft, monkeypatch):
    """The twin: nodes draw from q² (renormalised) but the tree records q -- the verifier's
    corrections no longer match, and the same chi-square rejects the output."""
    original = tree_drafting._children

    def squared(q, widths, law, generator):
        return original(q**2 / (q**2).sum(dim=-1, keepdim=True), widths, law, generator)

    monkeypatch.setattr(tree_drafting, "_children", squared)
    counts = first_two(target, draft, TreeShape.expansion([2, 1]), get_verifier("token:specinfer"), samples=600, seed=5)
    assert chi_square_pvalue(counts, two_token_law(target, [2])) < 1e-3


# ---------------------------------------------------------------------------------------------
# verify_batch on ShapedTrees


def small_tree() -> ShapedTree:
    p = np.array([[0.5, 0.3, 0.2], [0.2, 0.2, 0.6], [0.1, 0.6, 0.3], [0.3, 0.3, 0.4], [0.6, 0.2, 0.2]])
    q = np.array([[0.3, 0.3, 0.4], [0.5, 0.25, 0.25], [0.2, 0.2, 0.6], [0.3, 0.3, 0.4], [0.6, 0.2, 0.2]])
    return ShapedTree([-1, 0, 0, 1, 1], [-1, 2, 0, 0, 1], [(2, 0), (0, 1), (), (), ()], p, q, "without-replacement")


class ShallowTraversal(Traversal):
    """A broken twin: whenever traversal accepts a node of depth 2, it reports its parent."""

    name = "shallow-traversal"

    def _verify(self, tree, rng):
        node, token = super()._verify(tree, rng)
        return (int(tree.parent[node]), token) if tree.nodes.depth[node] == 2 else (node, token)


def batch_counts(verifier, tree: ShapedTree, samples: int) -> np.ndarray:
    generator = torch.Generator().manual_seed(1)
    rng = np.random.default_rng(1)
    out = verifier.verify_batch([tree] * samples, generator=generator, rng=rng)
    assert out.accepted.shape == (samples,) and out.accepted.device == generator.device
    np.testing.assert_array_equal(out.accepted.numpy(), tree.nodes.depth[out.row.numpy()])
    counts = np.zeros((tree.nodes.count, tree.n))
    np.add.at(counts, (out.row.numpy(), out.next_token.numpy()), 1)
    return counts.reshape(-1)


def law_pvalue(counts: np.ndarray, exact: np.ndarray) -> float:
    """The chi-square p-value of ``counts`` against ``exact``; 0 when an outcome of probability
    zero occurred."""
    return 0.0 if counts[exact == 0].any() else chi_square_pvalue(counts, exact)


@pytest.mark.statistical
@pytest.mark.parametrize("name", ["traversal", "selective", "token:rrs-wor"])
def test_verify_batch_on_shaped_trees_follows_the_exact_law(name):
    tree, verifier = small_tree(), get_verifier(name)
    law = verifier.law(tree)
    exact = (law.node_probability[:, None] * law.next_token).reshape(-1)
    assert law_pvalue(batch_counts(verifier, tree, 4000), exact) > 1e-3


@pytest.mark.statistical
def test_verify_batch_catches_a_broken_twin():
    tree = small_tree()
    law = get_verifier("traversal").law(tree)
    exact = (law.node_probability[:, None] * law.next_token).reshape(-1)
    assert law_pvalue(batch_counts(ShallowTraversal(), tree, 4000), exact) < 1e-3


def test_verify_batch_refuses_mixed_inputs_and_trees_it_does_not_take():
    tree, generator = small_tree(), torch.Generator()
    with pytest.raises(ValueError, match="a ShapedTree carries its distributions"):
        get_verifier("traversal").verify_batch(tree, torch.zeros(1), generator=generator)
    with pytest.raises(ValueError, match="generator: expected a torch.Generator"):
        get_verifier("traversal").verify_batch(tree)
    top = ShapedTree([-1, 0], [-1, 2], [(2,), ()], tree.target[:2], tree.draft[:2], "top-k")
    with pytest.raises(ValueError, match="'traversal' takes"):
        get_verifier("traversal").verify_batch(top, generator=generator)


def test_selective_on_one_child_top_k_nodes_at_a_real_vocabulary_stays_small():
    """Dynamic trees have top-k nodes with one kept child; selective's law there built
    ``np.eye(n)[token]`` (n x n floats: 19 GB at n = 49,152, found measuring a dynamic tree on
    SmolLM2). Now one row: the law's peak allocation stays within a few rows of n."""
    import tracemalloc

    n = 49152
    rng = np.random.default_rng(0)
    p, q = rng.dirichlet(np.ones(n), size=3), rng.dirichlet(np.ones(n), size=3)
    first, second = int(np.argmax(q[0])), int(np.argmax(q[1]))
    tree = ShapedTree([-1, 0, 1], [-1, first, second], [(first,), (second,), ()], p, q, "top-k")
    tracemalloc.start()
    try:
        expected = get_verifier("selective").expected_accepted(tree)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert 0 <= expected <= 2 and peak < 64 * n * 8, peak


# ---------------------------------------------------------------------------------------------
# Chains unchanged


def test_chains_through_a_shape_give_the_same_tokens(target, draft):
    for law, wor in (("iid", False), ("without-replacement", True)):
        common = dict(prompts=["a b", "c"], max_new_tokens=12, baseline=False, progress=False, seed=3, verifiers=["traversal"])
        rows = measure(target, draft, k=3, length=2, without_replacement=wor, **common)
        shaped = measure(target, draft, shape=TreeShape.chains(3, 2, law=law), **common)
        assert shaped.texts == rows.texts and shaped.config.shape is None and shaped.config.without_replacement == wor
        assert [r.expected for r in shaped.block_records] == [r.expected for r in rows.block_records]
    different = measure(target, draft, shape=TreeShape.chains(2, 2), **common)
    assert different.texts != rows.texts  # the twin: another shape gives other tokens


# ---------------------------------------------------------------------------------------------
# The measurement


@pytest.fixture(scope="module")
def tree_run(target, draft):
    return measure(
        target, draft, shape=TreeShape.expansion([2, 2, 1]), prompts=["a b", "c d e"], max_new_tokens=120,
        baseline=False, progress=False, seed=7, verifiers=["token", "traversal"], scored=["selective", "token:optimal"],
    )  # fmt: skip


def test_every_verifier_is_scored_on_every_tree(tree_run):
    frame = tree_run.blocks_dataframe()
    names = ["token:specinfer", "traversal", "selective", "token:optimal"]
    assert list(tree_run.config.verifier_names) == names and tree_run.positions == 0  # no node steps on trees
    assert len(frame) == sum(run.blocks for run in tree_run.verifiers) and frame[[f"expected:{n}" for n in names]].notna().all().all()
    assert frame[[f"expected:{n}" for n in names]].le(3 + 1e-12).all().all()
    reference = frame["expected:token:specinfer"]
    for score in tree_run.paired[1:]:
        difference = frame[f"expected:{score.verifier}"] - reference
        np.testing.assert_allclose(score.difference, difference.mean())
        scale = 100 / (reference.mean() + 1)
        np.testing.assert_allclose([score.percent, *score.percent_ci95], [difference.mean() * scale, score.ci95[0] * scale, score.ci95[1] * scale])
    gain = tree_run.summary()["gain"]
    assert list(tree_run.summary())[0] == "gain" and [g["verifier"] for g in gain] == names[1:]
    assert all(g["ahead"] + g["behind"] + g["tied"] == g["blocks"] for g in gain)


@pytest.mark.statistical
def test_realised_accepted_length_on_trees_matches_the_exact_expectation(tree_run):
    frame = tree_run.blocks_dataframe()
    for run in tree_run.verifiers:
        own = frame[frame["verifier"] == run.name]
        assert len(own) >= 40
        error = math.sqrt(own["variance"].sum()) / len(own)
        expected = own[f"expected:{run.name}"]
        assert abs((own["accepted"] - expected).mean()) / error < 4, run.name
        assert abs((own["accepted"] - expected - 0.25).mean()) / error > 4, run.name


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"shape": TreeShape.expansion([2], law="top-k"), "verifiers": ["traversal"]},
         "'traversal' is not lossless on trees drafted by the top-k law; use token:specinfer or selective"),
        ({"shape": TreeShape.expansion([2]), "verifiers": ["block"]}, "'block' is not lossless on trees drafted by the iid law"),
        ({"shape": TreeShape.expansion([2], law="without-replacement"), "scheme": "specinfer"},
         "scheme: 'specinfer' .* does not apply to these drafts \\(the wor law with k=2\\); use the scheme 'rrs-wor'"),
        ({"shape": TreeShape.expansion([2]), "compile": True}, "compile: tree shapes draft on the dynamic KV cache"),
        ({"shape": TreeShape.expansion([2]), "without_replacement": True}, "give the law in the TreeShape"),
        ({"shape": TreeShape.expansion([2]), "draft_sampling": [Sampling(1.0), Sampling(2.0)]}, "one draft sampling"),
        ({"shape": [2, 2]}, "shape: expected a TreeShape"),
    ],
    ids=["traversal-topk", "block", "scheme-wor", "compile", "wor-flag", "two-samplings", "not-a-shape"],
)  # fmt: skip
def test_refusals_before_any_model_loads(kwargs, message, monkeypatch):
    from multidraft.decoding import measurement

    def no_loading(*args, **kw):
        raise AssertionError("a model was loaded before the arguments were checked")

    monkeypatch.setattr(measurement, "load_model", no_loading)
    with pytest.raises(ValueError, match=message):
        measure("default", **({"prompts": ["a"], "max_new_tokens": 2, "progress": False} | kwargs))


def test_a_self_draft_at_the_targets_sampling_is_called_degenerate(target):
    common = dict(prompts=["a b"], max_new_tokens=10, baseline=False, progress=False, verifiers=["token", "traversal"])
    same = measure(target, None, shape=TreeShape.expansion([2, 1]), draft_sampling=Sampling(1.0), **common)
    assert DEGENERATE in same.notes and same.paired[1].ahead == same.paired[1].behind == 0
    assert same.verifiers[0].block_efficiency == same.verifiers[1].block_efficiency == 3.0  # every block: a whole path
    hotter = measure(target, None, shape=TreeShape.expansion([2, 1]), draft_sampling=Sampling(1.5), **common)
    assert DEGENERATE not in hotter.notes  # the twins: another sampling, or a top-k tree, is no degenerate run
    top = measure(target, None, shape=TreeShape.expansion([2, 1], law="top-k"), draft_sampling=Sampling(1.0), **common | {"verifiers": ["token"]})
    assert DEGENERATE not in top.notes


# ---------------------------------------------------------------------------------------------
# The command line


def test_cli_measure_tree_flags(cli, tiny_dir):
    argv = ["--model", str(tiny_dir), "--max-new-tokens", "8", "--prompt", "a b", "--no-baseline", "--threads", "1"]
    expansion = cli("measure", *argv, "--tree", "2,2,1", "--verifier", "token", "traversal", "--score", "selective", "--json", timeout=300)
    assert expansion.returncode == 0, expansion.stderr
    summary = expansion.json()
    assert list(summary)[0] == "gain" and summary["shape"] == "TreeShape.expansion([2, 2, 1], law='iid')"
    assert summary["k"] == 2 and summary["length"] == 3 and [g["verifier"] for g in summary["gain"]] == ["traversal", "selective"]
    text = cli("measure", *argv, "--tree", "2,1", "--without-replacement", "--verifier", "token", "traversal", timeout=300)
    assert text.returncode == 0, text.stderr
    assert text.stdout.startswith("note: scheme rrs-wor (the default specinfer does not apply")  # said before the run
    lines = text.stdout.splitlines()[1:]
    assert "tree TreeShape.expansion([2, 1], law='without-replacement')" in lines[0] and "scheme rrs-wor" in lines[0]
    assert lines[1].startswith("paired on the same") and "gain over token:rrs-wor" in lines[1]
    assert "tokens per call (" in lines[2] and "%), 95% CI [" in lines[2]
    dynamic = cli("measure", *argv, "--tree-budget", "5", "--k", "2", "--length", "3", "--verifier", "selective", "--json", timeout=300)
    assert dynamic.returncode == 0, dynamic.stderr
    assert dynamic.json()["shape"] == "TreeShape.dynamic(5, 3, branching=2)"
    same = cli("measure", *argv, "--tree", "2,1", "--draft-temperature", "1.0", "--verifier", "token", "traversal", timeout=300)
    assert same.returncode == 0, same.stderr
    assert same.stdout.splitlines()[1] == f"note: {DEGENERATE}" and "tied on every block" in same.stdout


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--tree", "2,1", "--top-k", "--verifier", "traversal"], "'traversal' is not lossless on trees drafted by the top-k law; use token:specinfer or selective"),
        (["--tree", "2,x"], "tree: expected children per node at each depth such as 2,2,1, got '2,x'"),
        (["--tree", "2,0"], "schedule: expected an integer >= 1"),
        (["--top-k"], "top-k: the top-k law applies to trees"),
        (["--tree", "2", "--top-k", "--without-replacement"], "top-k: choose one per-node law"),
        (["--tree-budget", "4", "--without-replacement"], "tree-budget: a dynamic tree keeps each node's most likely tokens"),
        (["--tree-budget", "0"], "budget: expected an integer >= 1"),
        (["--tree", "2", "--compile"], "compile: tree shapes draft on the dynamic KV cache"),
    ],
    ids=["traversal-topk", "bad-schedule", "zero-children", "topk-alone", "two-laws", "budget-wor", "budget-zero", "compile"],
)  # fmt: skip
def test_cli_tree_refusals_in_one_line(cli, argv, message):
    result = cli("measure", "--model", "default", "--prompt", "a", *argv, timeout=120)
    assert result.returncode == 2 and result.stdout == "", result.stderr
    assert result.stderr.count("\n") == 1 and message in result.stderr, result.stderr



@pytest.mark.slow
def test_cli_measure_tree_on_the_bundled_model(cli):
    """One short run on SmolLM2-135M (a vocabulary of 49,152): an expansion tree, every verifier
    scored on every block (about 30-60 s on a loaded 2-core CPU; dynamic trees run on the tiny
    models above)."""
    argv = ["--model", "default", "--max-new-tokens", "6", "--prompt", "Hi", "--no-baseline", "--threads", "1", "--json"]
    result = cli("measure", *argv, "--tree", "2,1", "--verifier", "token", "--score", "traversal", "selective", timeout=300)
    assert result.returncode == 0, result.stderr
    summary = result.json()
    assert summary["shape"] == "TreeShape.expansion([2, 1], law='iid')" and summary["blocks"] >= 2
    assert [g["verifier"] for g in summary["gain"]] == ["traversal", "selective"]
    assert all(g["blocks"] == summary["blocks"] and g["tokens_per_call"] is not None for g in summary["gain"])
