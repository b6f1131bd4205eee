"""The budget answer on drafted trees (multidraft.report.budget_blocks): the clustered ratio
estimator against a flat recomputation, the paired reference, the common units, the cluster
bootstrap's coverage against a naive twin, and run_units on a tiny model built here (the
degenerate self-draft accepts every path; realised τ agrees with E[τ | tree])."""

from __future__ import annotations

import json

import numpy as np
import pytest

from multidraft.report.budget_blocks import blocks_text, clustered_answer


def _units(rng, prompts: int, rounds: int, level: np.ndarray, spread: float, verifiers=("token:specinfer", "traversal")) -> list[dict]:
    """Synthetic units: each prompt has its own level (clustered blocks), a random number of
    blocks, and E[τ | tree] per block around ``level[v] + prompt effect``."""
    out = []
    effects = spread * rng.standard_normal(prompts)
    for round_ in range(rounds):
        for prompt in range(prompts):
            blocks = int(rng.integers(3, 12))
            values = {v: (level[j] + effects[prompt] + 0.3 * rng.standard_normal(blocks)).round(6).tolist() for j, v in enumerate(verifiers)}
            out.append({"round": round_, "prompt": prompt, "task": "", "tokens": 4 * blocks, "seconds": 0.1,
                        "accepted": [3] * blocks, "expected": values})  # fmt: skip
    return out


def test_ratio_estimator_equals_a_flat_recomputation_and_the_reference_gain_is_zero():
    """E[τ + 1] = 1 + (all blocks' E[τ | tree] pooled) / blocks, recomputed from the flat list;
    the twin that averages the per-prompt means (unequal cluster sizes) differs. The reference
    (chains, token:specinfer) has gain 0 with interval [0, 0]; the other shape's gain is the
    difference of the two pooled means."""
    rng = np.random.default_rng(0)
    runs = {"chains": _units(rng, 6, 2, np.array([3.0, 3.5]), 0.5), "dp": _units(rng, 6, 2, np.array([3.4, 4.0]), 0.5)}
    answer = clustered_answer(runs, resamples=200)
    flat = {label: {v: [x for u in units for x in u["expected"][v]] for v in ("token:specinfer", "traversal")} for label, units in runs.items()}
    for label in runs:
        for v in ("token:specinfer", "traversal"):
            entry = answer["runs"][label]["verifiers"][v]
            assert entry["block_efficiency"] == pytest.approx(1 + np.mean(flat[label][v]), abs=1e-12)
            assert entry["blocks"] == len(flat[label][v])
            low, high = entry["ci95"]
            assert low < entry["block_efficiency"] < high
    per_prompt = [np.mean([x for u in runs["dp"] if u["prompt"] == c for x in u["expected"]["traversal"]]) for c in range(6)]
    assert abs(1 + np.mean(per_prompt) - answer["runs"]["dp"]["verifiers"]["traversal"]["block_efficiency"]) > 1e-4
    reference = answer["runs"]["chains"]["verifiers"]["token:specinfer"]
    assert reference["gain"] == 0 and reference["gain_ci95"] == [0.0, 0.0]
    gain = answer["runs"]["dp"]["verifiers"]["traversal"]["gain"]
    assert gain == pytest.approx(np.mean(flat["dp"]["traversal"]) - np.mean(flat["chains"]["token:specinfer"]), abs=1e-12)
    assert answer["units"] == 12 and answer["prompts"] == 6 and answer["rounds"] == 2
    surprise = [a - e for u in runs["dp"] for a, e in zip(u["accepted"], u["expected"]["token:specinfer"])]
    assert answer["runs"]["dp"]["surprise"] == pytest.approx(np.mean(surprise), abs=1e-12)
    assert answer["runs"]["dp"]["driver"] == "token:specinfer"
    text = blocks_text(answer, {"dp": {"traversal": 4.2}})
    assert "4.200" in text and len(text.splitlines()) == 1 + 2 + 1 + 4  # header, 2 surprise lines, column names, 4 rows


def test_only_common_units_count_and_missing_values_are_left_out():
    """A unit that one shape has and the other lacks is not used (twin: counting it changes
    the blocks); a None (a verifier that could not score a block) counts for neither sum nor blocks."""
    rng = np.random.default_rng(1)
    runs = {"chains": _units(rng, 4, 1, np.array([3.0, 3.5]), 0.2), "dp": _units(rng, 4, 1, np.array([3.0, 3.5]), 0.2)}
    before = clustered_answer(runs, resamples=50)
    extra = _units(rng, 5, 2, np.array([9.0, 9.0]), 0.0)[-1]  # round 1, prompt 4: only in dp
    runs["dp"] = [*runs["dp"], extra]
    after = clustered_answer(runs, resamples=50)
    assert after["runs"]["dp"] == before["runs"]["dp"] and after["units"] == 4
    runs["dp"][0]["expected"]["traversal"][0] = None
    gapped = clustered_answer(runs, resamples=50)["runs"]["dp"]["verifiers"]
    assert gapped["traversal"]["blocks"] == gapped["token:specinfer"]["blocks"] - 1
    flat = [x for u in runs["dp"][:4] for x in u["expected"]["traversal"] if x is not None]
    assert gapped["traversal"]["block_efficiency"] == pytest.approx(1 + np.mean(flat), abs=1e-12)


def test_cluster_bootstrap_covers_the_truth_and_the_naive_twin_does_not():
    """With a prompt effect, the cluster bootstrap's 95% interval for E[τ + 1] covers the
    true level in most repetitions; the twin treating blocks as independent (the interval
    shrunk by sqrt(blocks per prompt)) covers it far less often."""
    covered = naive = 0
    repetitions = 40
    for seed in range(repetitions):
        rng = np.random.default_rng(seed)
        runs = {"chains": _units(rng, 12, 2, np.array([3.0, 3.5]), 0.5)}
        entry = clustered_answer(runs, resamples=300, seed=seed)["runs"]["chains"]["verifiers"]["token:specinfer"]
        low, high = entry["ci95"]
        covered += low <= 4.0 <= high
        half = (high - low) / 2 / np.sqrt(entry["blocks"] / 12)
        naive += entry["block_efficiency"] - half <= 4.0 <= entry["block_efficiency"] + half
    assert covered >= 0.8 * repetitions
    assert naive <= 0.5 * repetitions


@pytest.mark.parametrize(
    ("runs", "message"),
    [({"dp": []}, "the reference run 'chains' is missing"), ({"chains": [{"round": 0, "prompt": 0}], "dp": [{"round": 1, "prompt": 0}]}, "no unit")],
    ids=["no-reference", "disjoint"],
)
def test_bad_inputs(runs, message):
    with pytest.raises(ValueError, match=message):
        clustered_answer(runs, resamples=10)


@pytest.fixture(scope="module")
def tiny():
    pytest.importorskip("transformers")
    from test_decoding import tiny_model

    from multidraft.decoding.prompts import PromptSet

    return tiny_model(0), PromptSet(("a b c", "d e", "f a b", "c c d"), ("x", "x", "y", "y"))


@pytest.mark.usefixtures("one_thread")
def test_run_units_on_a_tiny_model(tiny):
    """The tiny model drafting for itself at its own temperature: the token walk with SpecInfer
    accepts the first drafted child surely, so its E[τ | tree] is the depth of the first path (2,
    not the tree's 3) on every block, to float32 rounding, and every verifier accepts a whole
    path (E[τ | tree] between the two paths' depths 2 and 3); at a
    hotter draft, the driving verifier's realised τ agrees with its E[τ | tree] (the mean
    difference within 4 standard errors) and every verifier stays at most the depth."""
    from multidraft.report.budget_blocks import run_units
    from multidraft.trees import TreeShape

    model, prompts = tiny
    shape = TreeShape.static([-1, 0, 1, 0, 3, 4])  # depths 2 and 3
    units = run_units(model, None, shape, prompts, [(0, 0), (1, 2)], target_temperature=1.0, draft_temperature=1.0, max_new_tokens=12)
    assert [(u["round"], u["prompt"], u["task"]) for u in units] == [(0, 0, "x"), (1, 2, "y")]
    for unit in units:
        assert unit["expected"]["token:specinfer"] == pytest.approx([2.0] * len(unit["accepted"]), abs=1e-5)
        assert all(2 - 1e-5 <= e <= 3 + 1e-5 for values in unit["expected"].values() for e in values)
    seen = []
    hot = run_units(
        model, None, shape, prompts, [(r, i) for r in range(6) for i in range(4)], target_temperature=0.8,
        draft_temperature=1.6, max_new_tokens=24, on_unit=seen.append,
    )  # fmt: skip
    assert seen == hot
    accepted = np.array([a for u in hot for a in u["accepted"]], dtype=float)
    expected = np.array([e for u in hot for e in u["expected"]["token:specinfer"]])
    difference = accepted - expected
    assert abs(difference.mean()) <= 4 * difference.std(ddof=1) / np.sqrt(len(difference))
    assert expected.mean() < 2.9
    assert all(0 <= e <= 3 + 1e-9 for u in hot for values in u["expected"].values() for e in values if e is not None)
    with pytest.raises(ValueError, match="prompt index 4 outside 0..3"):
        run_units(model, None, shape, prompts, [(0, 4)], target_temperature=1.0, draft_temperature=1.0, max_new_tokens=4)


@pytest.mark.usefixtures("one_thread")
def test_live_check_and_the_report_part_on_a_tiny_model(tmp_path):
    """live_check on a tiny model saved here: both shapes of the positional answer run on the
    same units, and the report part renders the live table, then either the committed runs
    with their provenance or one line saying there are none. budget_shapes picks the walk
    whose DP value is largest (twin: the other walk's shape is a different tree)."""
    pytest.importorskip("transformers")
    from test_decoding import tiny_model

    from multidraft.report import budget
    from multidraft.report.budget_blocks import budget_shapes, committed, live_check
    from multidraft.report.render import Document, Section, render_markdown
    from multidraft.trees import sequoia_tree

    loaded = tiny_model(0)
    loaded.model.save_pretrained(tmp_path)
    loaded.tokenizer.save_pretrained(tmp_path)
    acceptance = {"token:specinfer": [0.5, 0.2, 0.1], "token:optimal": [0.5, 0.3, 0.05]}
    plan = budget_shapes(acceptance, 4)
    best = max(acceptance, key=lambda walk: sequoia_tree(acceptance[walk], 4).block_efficiency)
    assert plan["dp_walk"] == best and plan["shapes"]["dp"] == list(sequoia_tree(acceptance[best], 4).parents)
    other = next(walk for walk in acceptance if walk != best)
    assert plan["shapes"]["dp"] != list(sequoia_tree(acceptance[other], 4).parents)
    live = live_check(str(tmp_path), acceptance, budget=4, prompts=2, max_new_tokens=6)
    assert live["answer"]["units"] == 2 and set(live["answer"]["runs"]) == {"dp", "chains"}
    stored = {"self": {"answer": live["answer"], "plan": {**plan, "draft_name": "tiny", "budget": 4, "target_temperature": 0.6,
              "draft_temperature": 1.0}, "provenance": {"commit": "0123456789abcdef", "date": "2026-11-28T18:00:00+00:00"}}}  # fmt: skip
    with_runs = render_markdown(Document("t", (Section("s", tuple(budget._blocks_part(live, stored))),)))
    assert "live run" in with_runs and "commit 0123456789" in with_runs and "(committed run)" in with_runs
    assert "Caveat: token:optimal's row is the positional model's approximation; on the drafted trees (N = 4" in with_runs
    without = render_markdown(Document("t", (Section("s", tuple(budget._blocks_part(live, None))),)))
    assert "No committed long run" in without and "(committed run)" not in without
    assert committed(tmp_path / "absent.json") is None


def test_cli_drafted_refuses_bad_values_in_one_line(cli):
    """``multidraft budget --drafted`` in a subprocess: without a model, or with a prompt count
    outside 1..30, one line and exit status 2 before any model loads."""
    for argv, message in (
        (["--acceptance", "0.6,0.1", "--drafted", "3"], "drafted: drafting trees needs a model (--model), not --acceptance"),
        (["--model", "default", "--drafted", "0"], "drafted: expected 1..30 bundled prompts, got 0"),
        (["--model", "default", "--drafted", "31"], "drafted: expected 1..30 bundled prompts, got 31"),
    ):
        bad = cli("budget", *argv)
        assert bad.returncode == 2 and message in bad.stderr and len(bad.stderr.strip().splitlines()) == 1, bad.stderr


@pytest.mark.slow
def test_cli_drafted_on_the_bundled_model(cli):
    """The bundled model drafting for itself, N = 4 on one prompt: the drafted-tree table follows
    the positional one, with both shapes and every verifier."""
    result = cli("budget", "--model", "default", "--budget", "4", "--prompts", "1", "--max-new-tokens", "8", "--no-latency", "--drafted", "1", "--json")
    assert result.returncode == 0, result.stderr
    drafted = json.loads(result.stdout)["drafted_trees"]
    assert drafted["budget"] == 4 and set(drafted["answer"]["runs"]) == {"dp", "chains"}
    assert set(drafted["answer"]["runs"]["dp"]["verifiers"]) == {"token:specinfer", "token:optimal", "selective", "traversal"}
