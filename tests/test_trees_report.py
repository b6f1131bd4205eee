"""The report's block-level section (issue 23, item 6): tree verifiers against the certified
block-level optimum on small exact instances.

The table's numbers are checked against what they must satisfy independently of the code that
computes them: Sun et al.'s example in Fractions (token-level SpecInfer 4/3 and traversal 115/81
at K = 2 iid, derived by hand in docs/block_level.md §7; the optimum 131/81 from the closed
form of selective verification there), no verifier above the optimum's certified upper bound, the
baseline closing no gap, block verification equal to the optimum at K = 1 (Sun et al.'s
theorem); a table with a verifier above the optimum is caught.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from fractions import Fraction

import pytest

pytest.importorskip("cvxpy")
pytest.importorskip("matplotlib")

from multidraft.report import block_level  # noqa: E402
from multidraft.report.config import ReportConfig  # noqa: E402
from multidraft.report.render import Document, Figure, Table, render_markdown  # noqa: E402
from multidraft.report.section import BuildContext, ReportProgress  # noqa: E402


@pytest.fixture(scope="module")
def table():
    return block_level.block_level_table(0)


def consistent(table) -> bool:
    """What every row of a block-level table must satisfy."""
    for row in table.rows:
        if not all(float(value) <= float(row.optimum_upper) + 1e-9 for value in row.expected.values()):
            return False
        baseline = row.closed(row.baseline)
        if not (math.isnan(baseline) or baseline == 0):
            return False
    return table.max_deviation <= 1e-12 and abs(table.single_path[0] - table.single_path[1]) <= 1e-8


def test_every_instance_iid_and_without_replacement(table):
    assert len(table.rows) == 2 * len(block_level.BLOCK_INSTANCES) == block_level.units(ReportConfig()) - 1
    assert [row.without_replacement for row in table.rows] == [False, True] * len(block_level.BLOCK_INSTANCES)
    for row in table.rows:
        assert row.k == block_level.BLOCK_K
        assert list(row.expected) == [row.baseline, *block_level.BLOCK_VERIFIERS[1:]]
    assert consistent(table)


def test_sun_example_exactly(table):
    iid, wor = table.rows[:2]
    assert iid.instance.startswith("Sun") and iid.n == 2 and iid.length == 2
    assert iid.expected["token:specinfer"] == Fraction(4, 3) and iid.expected["traversal"] == Fraction(115, 81)
    assert iid.optimum == pytest.approx(131 / 81, abs=1e-9)
    assert iid.closed("traversal") == pytest.approx(7 / 23)  # (115/81 - 4/3) / (131/81 - 4/3)
    assert wor.expected["token:rrs-wor"] == Fraction(5, 3) and wor.expected["traversal"] == Fraction(16, 9)
    assert wor.optimum == pytest.approx(17 / 9, abs=1e-9)


def test_a_verifier_above_the_optimum_is_caught(table):
    """Twin: a row whose traversal value exceeds the optimum fails the consistency check."""
    row = table.rows[2]
    inflated = replace(row, expected=row.expected | {"traversal": row.optimum + 0.01})
    assert not consistent(replace(table, rows=(inflated, *table.rows[1:])))
    assert not consistent(replace(table, single_path=(table.single_path[0] - 0.01, table.single_path[1])))


def test_the_random_instances_follow_the_seed(table):
    first = block_level.block_level_table(0)
    assert json.dumps(first.as_dict()) == json.dumps(table.as_dict())
    other = block_level.block_level_table(1)
    assert other.rows[0].expected == table.rows[0].expected  # Sun's example: no randomness
    assert other.rows[2].expected != table.rows[2].expected


def test_section_table_figure_and_json(table, monkeypatch):
    monkeypatch.setattr(block_level, "block_level_table", lambda seed, progress=False: table)
    result = block_level.build(BuildContext(ReportConfig(), None, ReportProgress(1, False)))
    assert result.key == "block_level"
    tables = [block for block in result.section.blocks if isinstance(block, Table)]
    figures = [block for block in result.section.blocks if isinstance(block, Figure)]
    assert len(tables) == 1 and len(tables[0].rows) == len(table.rows)
    assert tables[0].rows[0][:4] == ("Sun et al.'s example (n=2, L=2)", "iid", "2.3333", "2.5802 (87%)")  # E[τ + 1]
    assert figures and figures[0].png[:8] == b"\x89PNG\r\n\x1a\n"
    data = json.loads(json.dumps(result.data))
    assert len(data["rows"]) == len(table.rows) and data["max_deviation"] <= 1e-12
    markdown = render_markdown(Document("t", (result.section,)))
    assert "block-level optimum" in markdown and "not a real model" in markdown


# ----------------------------------------------------------------------------------------------
# The real-model block level (issue 23, item 6): tree verifiers on the same drafted trees.


@pytest.mark.slow
def test_real_block_section_on_the_bundled_model():
    pytest.importorskip("torch")
    from multidraft.report.real_blocks import RealBlockGrid, real_block_section

    grid = RealBlockGrid(ks=(1, 2), lengths=(2,), temperatures=(1.6,), prompts=2, max_new_tokens=8)
    real = real_block_section(ReportConfig(target="default"), grid=grid)
    single, double = real.data["settings"]
    assert (single["k"], double["k"]) == (1, 2) and single["blocks"] >= 3 and double["blocks"] >= 3
    assert set(single["verifiers"]) == {"token:specinfer", "token:optimal", "traversal", "selective", "block"}
    assert set(double["verifiers"]) == {"token:specinfer", "token:optimal", "traversal", "selective"}
    # one draft: block = traversal = selective and token-level optimal = SpecInfer on every tree
    assert single["single_draft_max_difference"] <= 1e-12 and "single_draft_max_difference" not in double
    for setting in (single, double):
        for score in setting["verifiers"].values():
            assert score["blocks"] == setting["blocks"] and score["ci95"][0] <= score["difference"] <= score["ci95"][1]
        assert setting["verifiers"]["token:specinfer"]["expected_block_efficiency"] == pytest.approx(
            setting["expected_block_efficiency"]
        )
    table = next(block for block in real.section.blocks if isinstance(block, Table))
    assert [row[:4] for row in table.rows] == [("1", "2", "1.6", str(single["blocks"])), ("2", "2", "1.6", str(double["blocks"]))]
    assert table.rows[1][-1] == "—"  # block verification takes one draft
    assert any(isinstance(block, Figure) for block in real.section.blocks)
    assert len(real.timings["settings_seconds"]) == 2
    # issue 32: a row per task (the bundled chat and code prompts), blocks pooled over the settings
    tasks = [block for block in real.section.blocks if isinstance(block, Table)][1]
    assert [row[:2] for row in tasks.rows] == [
        (task, str(single["tasks"][task]["blocks"] + double["tasks"][task]["blocks"])) for task in ("chat", "code")
    ]
    assert tasks.rows[0][-1] != "—" and sum(t["blocks"] for t in double["tasks"].values()) == double["blocks"]


def test_real_block_single_draft_check_catches_a_verifier_that_differs():
    """Twin of the K = 1 check: one block's traversal expectation moved by 0.01 shows up."""
    from types import SimpleNamespace

    from multidraft.decoding.results import BlockRecord, PairedScore, VerifierRun
    from multidraft.report.real_blocks import _setting_data

    names = ("token:specinfer", "token:optimal", "traversal", "selective", "block")
    records = [BlockRecord("token:specinfer", 0, b, 1, (0.5, 0.5, 0.7, 0.7, 0.7), 0.2) for b in range(3)]
    run = VerifierRun("token:specinfer", 3, 6, 2.0, 1.5, (-0.1, 0.1), 3, 1.0, float("nan"), 1.0, 0.1)
    scores = tuple(PairedScore(name, names[0], 3, 1.5, 0.0, (0.0, 0.0), 0, 0) for name in names)

    def result(records):
        return SimpleNamespace(verifiers=(run,), config=SimpleNamespace(verifier_names=names), block_records=records, paired=scores)

    assert _setting_data(1, 2, 1.6, result(records))["single_draft_max_difference"] == 0.0
    moved = [*records[:2], BlockRecord("token:specinfer", 0, 2, 1, (0.5, 0.5, 0.71, 0.7, 0.7), 0.2)]
    assert _setting_data(1, 2, 1.6, result(moved))["single_draft_max_difference"] == pytest.approx(0.01)
