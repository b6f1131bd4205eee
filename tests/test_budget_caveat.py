"""``multidraft budget``'s caveat on token:optimal's positional row (report.budget_blocks.token_optimal_caveat):
without the drafted check it says the row is an approximation and points to ``--drafted``; with
it, it quotes the prediction and the drafted measurement of the same run and says whether the
measured interval holds the prediction (both verdicts exercised: a caveat that always says one
thing fails one of them). In a subprocess on a tiny model saved here, text and JSON."""

from __future__ import annotations

import json

import pytest

from multidraft.report.budget_blocks import token_optimal_caveat


def _drafted(predicted: float, measured: float, interval: tuple[float, float]) -> dict:
    entry = {"block_efficiency": measured, "ci95": list(interval), "gain_percent": -5.6, "gain_percent_ci95": [-10.4, -0.6]}
    return {"budget": 16, "predicted": {"dp": {"token:optimal": predicted}}, "answer": {"runs": {"dp": {"verifiers": {"token:optimal": entry}}}}}


@pytest.mark.parametrize(
    "predicted, verdict", [(5.674, "outside the interval"), (5.2, "inside the interval")]
)  # fmt: skip
def test_caveat_quotes_the_drafted_check_and_its_verdict(predicted, verdict):
    line = token_optimal_caveat({"drafted_trees": _drafted(predicted, 5.125, (4.780, 5.524))})
    assert f"predicts E[tau+1] {predicted:.3f}, measured 5.125 [4.780, 5.524] ({verdict})" in line
    assert "-5.6% [-10.4, -0.6]: trust the drafted value" in line and "\n" not in line


def test_caveat_without_the_drafted_check_points_to_it():
    line = token_optimal_caveat({})
    assert line.startswith("caveat: token:optimal's row is the positional model's approximation") and "--drafted P" in line
    assert "measured" not in line


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory):
    pytest.importorskip("transformers")
    from test_decoding import tiny_model

    path = tmp_path_factory.mktemp("tiny")
    loaded = tiny_model(0)
    loaded.model.save_pretrained(path)
    loaded.tokenizer.save_pretrained(path)
    return str(path)


def test_cli_says_the_caveat_in_text_and_json(cli, tiny_path):
    """Without --drafted: the caveat line follows the positional table (text) and is the JSON's
    ``caveat``. With --drafted 1: the JSON's caveat quotes that run's own prediction and
    measurement of token:optimal on the DP shape."""
    common = ("budget", "--model", tiny_path, "--budget", "4", "--prompts", "1", "--max-new-tokens", "4", "--no-latency")
    text = cli(*common)
    assert text.returncode == 0, text.stderr
    assert token_optimal_caveat({}) in text.stdout.splitlines()
    drafted = cli(*common, "--drafted", "1", "--json")
    assert drafted.returncode == 0, drafted.stderr
    result = json.loads(drafted.stdout)
    value = result["drafted_trees"]["answer"]["runs"]["dp"]["verifiers"]["token:optimal"]
    predicted = result["drafted_trees"]["predicted"]["dp"]["token:optimal"]
    assert result["caveat"] == token_optimal_caveat(result)
    assert f"predicts E[tau+1] {predicted:.3f}, measured {value['block_efficiency']:.3f}" in result["caveat"]
