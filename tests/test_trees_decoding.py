"""Tree verifiers in decoding (issue 23, items 1 and 5): every block of speculative decoding is
verified by a :class:`~multidraft.trees.TreeVerifier` (the token walk is ``token:<scheme>``),
on tiny random Llama models built here, on every torch device present.

* exact outcomes of every verifier on one-hot blocks, through :func:`verify_tree`;
* losslessness through the whole decoding path (chi-square on the first two tokens against the
  model's exact law), with broken twins that must fail;
* the measurement: each verifier drives its own run on the same prompts and seeds, every one
  scored on every block by its exact ``E[τ | tree]``; realised minus expected accepted length is
  calibrated for each (a martingale, within 4 standard errors), a shifted expectation is caught,
  and the paired scores are recomputed from the block records;
* bad verifier choices refused before any model loads, and the ``--verifier`` flag of the
  command line.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")

from test_decoding import chi_square_pvalue, generators, onehot_block, two_token_law  # noqa: E402
from test_decoding import draft, target  # noqa: E402, F401 -- the tiny target and draft models (module fixtures)
from test_decoding_models import tiny_dir  # noqa: E402, F401 -- the tiny model saved to a directory
from test_trees_exact import NoResidualBlock, WithReplacementTraversal  # noqa: E402

from multidraft.decoding import DraftSpec, Sampling, measure, speculative_generate, verify_tree  # noqa: E402
from multidraft.decoding.results import TIE  # noqa: E402
from multidraft.trees import get_verifier  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")


# ---------------------------------------------------------------------------------------------
# One block


@pytest.mark.parametrize("name", ["traversal", "selective", "token:specinfer", "token:optimal"])
def test_one_hot_blocks_every_verifier(name, device):
    """Row 0: 1 2 3, row 1: 1 4 0; the target wants 1, then 4, then 2 (after 1 4): every
    lossless verifier accepts the two tokens of row 1 and emits 2 (the target is one-hot)."""
    p, drafts = onehot_block([[1, 2, 3], [1, 4, 0]], [[1, 4, 0, 0], [1, 4, 2, 0]], device)
    specs = [DraftSpec(None, Sampling())] * 2
    out = verify_tree(p, drafts, specs, get_verifier(name), **generators(device, 0))
    assert out.tokens == (1, 4, 2) and out.accepted == 2 and out.row == 1
    assert (len(out.steps) == 3) == name.startswith("token:")  # node steps: the token walk only
    tree = out.tree((0, 0), False)
    assert tree.k == 2 and tree.length == 3 and get_verifier(name).expected_accepted(tree) == pytest.approx(2.0)


def test_block_verification_accepts_the_whole_chain_and_the_bonus(device):
    p, drafts = onehot_block([[3, 1]], [[3, 1, 4]], device)
    out = verify_tree(p, drafts, [DraftSpec(None, Sampling())], get_verifier("block"), **generators(device, 1))
    assert out.tokens == (3, 1, 4) and out.accepted == 2 and out.steps == ()


def test_block_level_verifiers_refuse_trees_they_do_not_take(device):
    p, drafts = onehot_block([[1, 2], [1, 4]], [[1, 4, 0], [1, 4, 0]], device)
    independent = [DraftSpec(None, Sampling(1.0)), DraftSpec(None, Sampling(2.0))]
    with pytest.raises(ValueError, match="'traversal' takes iid, wor, shape:iid, shape:without-replacement trees; got independent drafts"):
        verify_tree(p, drafts, independent, get_verifier("traversal"), **generators(device, 0))
    with pytest.raises(ValueError, match="'block' takes K <= 1; got K=2"):
        verify_tree(p, drafts, [DraftSpec(None, Sampling())] * 2, get_verifier("block"), **generators(device, 0))


# ---------------------------------------------------------------------------------------------
# Losslessness through decoding


def first_two_counts(model, specs, verifier, samples: int, seed: int, without_replacement: bool = False) -> np.ndarray:
    """Counts of the first two generated tokens over ``samples`` generations driven by
    ``verifier`` (drafts of length 2)."""
    n = model.vocab_size
    randomness = generators(model.device, seed)
    counts = np.zeros(n * n)
    for _ in range(samples):
        out = speculative_generate(
            model, specs, [2], length=2, max_new_tokens=2, verifier=verifier, without_replacement=without_replacement,
            **randomness,
        )  # fmt: skip
        counts[out.tokens[0] * n + out.tokens[1]] += 1
    return counts


LOSSLESS = [
    ("block", 1, False),
    ("traversal", 3, False),
    ("traversal", 3, True),
    ("selective", 2, False),
    ("token:optimal", 2, False),
]


@pytest.mark.statistical
@pytest.mark.parametrize("name, k, without_replacement", LOSSLESS, ids=[f"{v}-k{k}{'-wor' if w else ''}" for v, k, w in LOSSLESS])
def test_every_verifier_is_lossless_through_decoding(target, draft, name, k, without_replacement):
    law = two_token_law(target, [2])
    specs = [DraftSpec(draft, Sampling(1.5))] * k
    counts = first_two_counts(target, specs, get_verifier(name), samples=600, seed=5, without_replacement=without_replacement)
    assert counts.sum() == 600
    assert chi_square_pvalue(counts, law) > 1e-3


@pytest.mark.statistical
@pytest.mark.parametrize("twin, k", [(NoResidualBlock(), 1), (WithReplacementTraversal(), 3)], ids=["block", "traversal"])
def test_broken_tree_verifiers_fail_the_losslessness_test(target, draft, twin, k):
    """The twins of the test above (each fails the exact check on small sequence models):
    through decoding the same chi-square, on the same models and drafts, rejects them.

    Their error on these models is small: computed exactly (the tiny models' tables at the
    prompt, :func:`multidraft.trees.exact.evaluate`'s completion), the chi-square
    noncentrality of the first two tokens is about 0.015 (block) and 0.021 (traversal, K = 3)
    per sample, hence 2,500 samples (noncentrality about 40 and 50) where the correct
    verifiers above need 600 to pass."""
    law = two_token_law(target, [2])
    specs = [DraftSpec(draft, Sampling(1.5))] * k
    counts = first_two_counts(target, specs, twin, samples=2500, seed=5)
    assert chi_square_pvalue(counts, law) < 1e-3


# ---------------------------------------------------------------------------------------------
# The measurement


VERIFIERS = ("token", "traversal", "selective", "token:optimal")


@pytest.fixture(scope="module")
def compared(target, draft):
    """Four verifiers, each driving 3 prompts x 150 tokens (K = 2, L = 3), all scored on every block."""
    return measure(
        target, draft, k=2, length=3, prompts=["a b", "c d e", "b a"], max_new_tokens=150, draft_sampling=Sampling(1.5),
        baseline=False, progress=False, seed=7, verifiers=VERIFIERS,
    )  # fmt: skip


def test_each_verifier_drives_a_run_and_all_are_scored_on_every_block(compared):
    runs = compared.verifiers
    assert [run.name for run in runs] == ["token:specinfer", "traversal", "selective", "token:optimal"]
    assert compared.config.verifier_names == tuple(run.name for run in runs)
    frame = compared.blocks_dataframe()
    assert len(frame) == len(compared.block_records) == sum(run.blocks for run in runs)
    for index, run in enumerate(runs):
        own = frame[frame["verifier"] == run.name]
        assert run.new_tokens == 450 and len(own) == run.blocks
        np.testing.assert_allclose(run.block_efficiency, own["accepted"].mean() + 1)
        expected = own[f"expected:{run.name}"]
        np.testing.assert_allclose(run.expected_block_efficiency, expected.mean() + 1)
        half = 1.96 * math.sqrt(own["variance"].sum()) / len(own)
        difference = (own["accepted"] - expected).mean()
        np.testing.assert_allclose(run.ci95, [difference - half, difference + half])
        assert ((-1e-12 <= expected) & (expected <= 3 + 1e-12) & (own["variance"] >= -1e-12)).all()  # rounding
    # The first run is the top-level one: its blocks and the token-level positions.
    assert compared.blocks == runs[0].blocks and compared.positions > 0
    np.testing.assert_allclose(compared.block_efficiency, runs[0].block_efficiency)
    # Paired: every verifier against the first on all blocks of all runs.
    reference = frame["expected:token:specinfer"]
    for score in compared.paired:
        difference = frame[f"expected:{score.verifier}"] - reference
        assert score.blocks == len(frame) and score.reference == "token:specinfer"
        np.testing.assert_allclose(score.difference, difference.mean())
        half = 1.96 * difference.std(ddof=1) / math.sqrt(len(frame)) if score.verifier != "token:specinfer" else 0.0
        np.testing.assert_allclose(score.ci95, [difference.mean() - half, difference.mean() + half], atol=1e-15)
        assert score.ahead == int((difference > TIE).sum()) and score.behind == int((difference < -TIE).sum())
    summary = json.loads(compared.to_json())
    assert [v["name"] for v in summary["verifiers"]] == list(compared.config.verifier_names)
    assert summary["verifier_names"] == list(compared.config.verifier_names) and len(summary["paired"]) == 4


def test_at_one_token_selective_is_the_token_level_optimum(target, draft):
    """With L = 1 selective block verification is the token-level optimal verifier (its
    selection is that verifier's and the root's budget is 1): equal expectations on every
    block of all three runs. (Optimality is on average over the drafts: on a given tuple the
    optimal verifier may accept less than SpecInfer, so no per-block inequality holds.)"""
    results = measure(
        target, draft, k=3, length=1, prompts=["a b"], max_new_tokens=20, baseline=False, progress=False,
        verifiers=["selective", "token:optimal", "token:specinfer"],
    )  # fmt: skip
    frame = results.blocks_dataframe()
    np.testing.assert_allclose(frame["expected:selective"], frame["expected:token:optimal"], rtol=0, atol=1e-9)
    assert len(frame) == sum(run.blocks for run in results.verifiers) and frame["expected:token:specinfer"].le(1 + 1e-12).all()


@pytest.mark.statistical
def test_realised_accepted_length_matches_the_exact_expectation(compared):
    """τ − E[τ | tree] are martingale differences with conditional variance Var[τ | tree]:
    each verifier's mean lies within 4 standard errors of 0; twin: an expectation shifted by
    0.25 tokens is caught for each."""
    frame = compared.blocks_dataframe()
    for run in compared.verifiers:
        own = frame[frame["verifier"] == run.name]
        assert len(own) >= 100
        error = math.sqrt(own["variance"].sum()) / len(own)
        expected = own[f"expected:{run.name}"]
        assert abs((own["accepted"] - expected).mean()) / error < 4, run.name
        assert abs((own["accepted"] - expected - 0.25).mean()) / error > 4, run.name


def test_measure_with_block_verification_alone_has_no_positions(target, draft):
    results = measure(
        target, draft, k=1, length=3, prompts=["a"], max_new_tokens=12, baseline=False, progress=False,
        verifiers=["block", "traversal", "token:single"],
    )  # fmt: skip
    assert results.positions == 0 and results.blocks == results.verifiers[0].blocks > 0
    frame = results.blocks_dataframe()
    # On a chain traversal is block verification tree by tree (Weng et al., Theorem 3.4). Block
    # verification beats the token walk (single-draft speculative sampling) only on average over
    # the drafted chain (Sun et al.'s optimality), not chain by chain: both directions occur.
    np.testing.assert_allclose(frame["expected:traversal"], frame["expected:block"], rtol=1e-12)
    difference = frame["expected:block"] - frame["expected:token:single"]
    assert (difference.abs() > 1e-9).any()


def test_blocks_without_an_exact_expectation_are_noted(target, draft):
    """A scheme object without plans runs, but the token walk's exact law needs the scheme's
    plan: its expectations are NaN, the interval covers the blocks that have one, and a note
    says why."""
    from multidraft.schemes import get_scheme

    class PlanlessSpecInfer:
        name = "planless"

        def select(self, target, law, drafts, rng):
            return get_scheme("specinfer").select(target, law, drafts, rng)

        def acceptance(self, target, law):
            return get_scheme("specinfer").acceptance(target, law)

    results = measure(
        target, draft, k=2, length=2, prompts=["a"], max_new_tokens=8, baseline=False, progress=False,
        scheme=PlanlessSpecInfer(), verifiers=["token", "traversal"],
    )  # fmt: skip
    first, second = results.verifiers
    assert first.expected_blocks == 0 and math.isnan(first.expected_block_efficiency) and math.isnan(first.ci95[0])
    assert second.expected_blocks == second.blocks > 0
    assert any("token:planless: scheme 'planless': has no plans" in note for note in results.notes)


def test_scored_verifiers_are_scored_on_the_driven_blocks_without_a_run(target, draft):
    """``scored``: the same E[τ | tree] on the same blocks as when they also drive, but one run."""
    common = dict(k=2, length=3, prompts=["a b"], max_new_tokens=30, baseline=False, progress=False, seed=3)
    scored = measure(target, draft, verifiers=["token"], scored=["traversal", "selective"], **common)
    driven = measure(target, draft, verifiers=["token", "traversal", "selective"], **common)
    assert scored.config.verifier_names == driven.config.verifier_names == ("token:specinfer", "traversal", "selective")
    assert [run.name for run in scored.verifiers] == ["token:specinfer"]
    first = [r for r in driven.block_records if r.verifier == "token:specinfer"]
    assert [r.accepted for r in scored.block_records] == [r.accepted for r in first] and len(first) >= 3
    np.testing.assert_array_equal([r.expected for r in scored.block_records], [r.expected for r in first])
    assert [s.verifier for s in scored.paired] == ["token:specinfer", "traversal", "selective"]
    assert all(s.blocks == len(first) for s in scored.paired)


BAD_VERIFIERS = [
    ("unknown", dict(verifiers=["nope"]), "verifier: unknown name 'nope'"),
    ("unknown-scheme", dict(verifiers=["token:nope"]), "verifier: unknown scheme 'nope'"),
    ("empty", dict(verifiers=[]), "verifiers: give at least one verifier"),
    ("twice", dict(verifiers=["token", "token:specinfer"]), "verifiers: each verifier once"),
    ("block-k2", dict(verifiers=["block"]), "verifier: 'block' takes K <= 1; got k=2"),
    ("traversal-independent", dict(verifiers=["traversal"], draft_sampling=(Sampling(1.0), Sampling(2.0))),
     "verifier: 'traversal' takes iid, wor, shape:iid, shape:without-replacement trees; these drafts are independent"),
    ("token-law", dict(verifiers=["traversal", "token:spectr"], draft_sampling=(Sampling(1.0), Sampling(2.0))),
     "verifier: 'traversal' takes"),
    ("scheme-law", dict(verifiers=["token:spectr"], without_replacement=True), "'spectr' supports the laws"),
    ("object", dict(verifiers=[3]), "verifier: expected a verifier name or a TreeVerifier, got 3"),
    ("scored-twice", dict(verifiers=["token"], scored=["token:specinfer"]), "verifiers: each verifier once"),
    ("scored-block-k2", dict(scored=["block"]), "verifier: 'block' takes K <= 1; got k=2"),
    ("scored-unknown", dict(scored=["nope"]), "verifier: unknown name 'nope'"),
]  # fmt: skip


@pytest.mark.parametrize("kwargs, message", [c[1:] for c in BAD_VERIFIERS], ids=[c[0] for c in BAD_VERIFIERS])
def test_bad_verifiers_are_refused_before_loading(monkeypatch, kwargs, message):
    import multidraft.decoding.measurement as measurement

    def no_loading(*args, **kwargs):
        raise AssertionError("a model was loaded before the arguments were checked")

    monkeypatch.setattr(measurement, "load_model", no_loading)
    with pytest.raises(ValueError, match=message):
        measure("default", **({"prompts": ["a"], "max_new_tokens": 2, "progress": False} | kwargs))


def test_cli_measure_verifier_flag(cli, tiny_dir):
    argv = ["--model", str(tiny_dir), "--k", "2", "--length", "2", "--max-new-tokens", "6", "--prompt", "a b", "--no-baseline"]
    result = cli("measure", *argv, "--verifier", "token", "traversal", "--json", timeout=300)
    assert result.returncode == 0, result.stderr
    summary = result.json()
    assert summary["verifier_names"] == ["token:specinfer", "traversal"]
    assert [v["name"] for v in summary["verifiers"]] == ["token:specinfer", "traversal"]
    assert summary["paired"][1]["verifier"] == "traversal" and summary["paired"][1]["blocks"] >= 2
    text = cli("measure", *argv, "--verifier", "traversal", "--scheme", "optimal", timeout=300)
    assert text.returncode == 0, text.stderr
    assert "traversal" in text.stdout and "realised" in text.stdout
    assert "paired on the same" not in text.stdout  # one verifier: nothing to pair (issue 28, item 4)
    scored = cli("measure", *argv, "--verifier", "token", "--score", "traversal", "--json", timeout=300)
    assert scored.returncode == 0, scored.stderr
    summary = scored.json()
    assert summary["verifier_names"] == ["token:specinfer", "traversal"] and len(summary["verifiers"]) == 1
    assert summary["paired"][1]["verifier"] == "traversal" and summary["paired"][1]["blocks"] == summary["verifiers"][0]["blocks"]
    refused = cli("measure", *argv, "--verifier", "block", timeout=120)
    assert refused.returncode == 2 and "'block' takes K <= 1; got k=2" in refused.stderr
