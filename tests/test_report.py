"""Tests of the acceptance-gap report as a document: its rendering and output files, the whole
report on a small configuration (reproducible, one progress bar), the ``multidraft report``
command's handling of bad input, and the report read by a newcomer. Its numbers against
independent routes: tests/test_report_numbers.py."""

from __future__ import annotations

import base64
import io
import json
import re
import subprocess
import sys

import numpy as np
import pytest

from multidraft.report import (
    Document,
    Figure,
    Paragraph,
    ReportConfig,
    Section,
    Table,
    build_report,
    position_gap_table,
    render_html,
    render_markdown,
    wilson_interval,
    write_report,
    zipf_positions,
)
from multidraft.report.render import prepare_output


#: A configuration small enough for unit tests (seconds, not minutes).
SMALL = ReportConfig(
    n=40,
    positions=2,
    ks=(2, 3),
    temperatures=(0.8, 1.6),
    pairs=((0.8, 1.6),),
    s_values=(1, 3),
    family_points=13,
)


def test_public_names_import_and_the_package_is_light():
    import multidraft.report as report

    assert all(hasattr(report, name) for name in report.__all__)
    code = (
        "import sys, multidraft.report, multidraft.cli.report; "
        "print(sorted(m for m in ('torch', 'cvxpy', 'matplotlib', 'transformers') if m in sys.modules))"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]"


# ---------------------------------------------------------------------------------------------
# Rendering and output files
# ---------------------------------------------------------------------------------------------

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


def _document() -> Document:
    return Document(
        "T",
        (
            Section(
                "S",
                (Paragraph("x < y and `code`"), Table(("a", "b"), (("1", "2|3"),)), Figure("fig_1", PNG, "cap")),
            ),
        ),
    )


def test_markdown_and_html_render_every_block():
    document = _document()
    markdown = render_markdown(document)
    assert "![cap](figures/fig_1.png)" in markdown
    assert "| 1 | 2\\|3 |" in markdown
    page = render_html(document)
    assert "x &lt; y and <code>code</code>" in page
    assert f'src="data:image/png;base64,{base64.b64encode(PNG).decode()}"' in page
    assert "<td>2|3</td>" in page


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda: Table(("a", "b"), (("1",),)), "a row has 1 cells, the header 2"),
        (lambda: Figure("bad name", PNG, "c"), "must be letters"),
    ],
)
def test_render_blocks_reject_bad_shapes(build, message):
    with pytest.raises(ValueError, match=message):
        build()


@pytest.mark.parametrize("times_ms", [[3.0, 4.1, 5.2, 6.0], [0.2, 3.0, 80.0]], ids=["within-a-decade", "three-decades"])
def test_truncation_figure_log_axis_reads_as_plain_numbers(times_ms):
    """Issue 15: the log axis of truncated_lp.png read "4×10⁰, 5×10⁰"."""
    from multidraft.report.truncation import TruncationSweep, truncation_figure

    s_values = tuple(range(1, len(times_ms) + 1))
    sweep = TruncationSweep(100, 0.8, s_values, 0.9, {"published": (0.8,) * len(s_values)},
                            {"published": tuple(t / 1e3 for t in times_ms)})  # fmt: skip
    figure = truncation_figure(sweep)
    figure.canvas.draw()
    axis = figure.axes[1]
    labels = [label.get_text() for minor in (False, True) for label in axis.get_yticklabels(minor=minor)]
    shown = [text for text in labels if text]
    assert len(shown) >= 2
    assert all(re.fullmatch(r"\d+(\.\d+)?", text) for text in shown), shown


def test_prepare_output_refuses_non_empty_directory_without_force(tmp_path):
    (tmp_path / "keep.txt").write_text("x")
    with pytest.raises(ValueError, match="exists and is not empty; pass --force"):
        prepare_output(tmp_path)
    (tmp_path / "figures").mkdir()
    (tmp_path / "figures" / "old.png").write_bytes(b"")
    assert prepare_output(tmp_path, force=True) == tmp_path
    assert (tmp_path / "keep.txt").exists()  # --force replaces the report, nothing else
    assert not (tmp_path / "figures" / "old.png").exists()


def test_prepare_output_rejects_a_file_and_an_unwritable_path(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(ValueError, match="exists and is not a directory"):
        prepare_output(blocker)
    with pytest.raises(OSError, match="--out: cannot write to"):
        prepare_output(blocker / "sub")


# ---------------------------------------------------------------------------------------------
# The whole report on a small configuration
# ---------------------------------------------------------------------------------------------


class Terminal(io.StringIO):
    """A stderr that says it is a terminal, so that progress bars are drawn into it."""

    def isatty(self) -> bool:
        return True


@pytest.fixture(scope="module")
def built_with_progress():
    """The small report built with ``progress=True`` and what its bar drew on a terminal."""
    terminal = Terminal()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sys, "stderr", terminal)
        report = build_report(SMALL, progress=True)
    return report, terminal.getvalue()


@pytest.fixture(scope="module")
def small_report(built_with_progress):
    return built_with_progress[0]


def test_report_shows_one_overall_bar_with_labelled_stages(built_with_progress):
    """Issue 15, item 6: one bar counting every step of every section, labelled with the stage."""
    from multidraft.report import SECTIONS

    _, drawn = built_with_progress
    total = sum(module.units(SMALL) for module in SECTIONS if getattr(module, "applies", lambda _: True)(SMALL))
    frames = [frame for frame in re.split(r"[\r\n]+", drawn) if frame.strip()]
    assert frames and all(frame.startswith("report: ") for frame in frames), set(frames[:3])
    assert {int(m) for m in re.findall(rf"report: \d+/({total}) ", drawn)} == {total}
    assert f"report: {total - 1}/{total} " in drawn
    for stage in ("Figure 2", "gap table: iid K=2 T=0.8", "gap table: wor K=3 T=1.6", "gap table: pair T=0.8 & 1.6",
                  "truncated LP: rank key ratio, s=3", "predicted speed-up"):  # fmt: skip
        assert stage in drawn, stage


def _strip_timings(results: dict) -> dict:
    return {key: value for key, value in results.items() if key not in ("timings", "environment")}


def test_report_is_reproducible_and_depends_on_the_seed(small_report):
    again = build_report(SMALL)
    assert json.dumps(_strip_timings(again.results), sort_keys=True) == json.dumps(
        _strip_timings(small_report.results), sort_keys=True
    )
    other = build_report(ReportConfig(**(vars(SMALL) | {"seed": 1})))
    assert other.results["sections"]["gap_table"] != small_report.results["sections"]["gap_table"]


def test_report_files(small_report, tmp_path):
    out = tmp_path / "report"
    written = write_report(small_report, out)
    assert {p.name for p in out.iterdir()} == {"figures", "report.md", "report.html", "results.json"}
    figures = sorted(p.name for p in (out / "figures").iterdir())
    assert figures and all(name.endswith(".png") for name in figures)
    assert {"figure2.png", "gap.png", "speedup.png"} <= set(figures)
    markdown = written["markdown"].read_text()
    assert sorted(re.findall(r"\(figures/([\w-]+\.png)\)", markdown)) == figures
    assert re.search(r"Built in \*\*\d+\.\d s\*\*", markdown)
    assert "exactly the grid points inside that interval" in markdown
    page = written["html"].read_text()
    assert page.count('src="data:image/png;base64,') == len(figures)
    assert not re.search(r'src="(?!data:)', page)  # self-contained: no external resources
    results = json.loads(written["json"].read_text())
    assert results["timings"]["wall_seconds"] == pytest.approx(small_report.seconds)
    assert results["config"]["n"] == SMALL.n
    gap = results["sections"]["gap_table"]["rows"]
    assert len(gap) == 2 * len(SMALL.ks) * len(SMALL.temperatures) + len(SMALL.pairs)
    with pytest.raises(ValueError, match="not empty"):
        write_report(small_report, out)


def test_report_config_rejects_bad_values():
    with pytest.raises(ValueError, match="ks: needs numbers of drafts >= 1"):
        ReportConfig(ks=(0,))
    with pytest.raises(ValueError, match="temperatures: draft temperatures must be > 0"):
        ReportConfig(temperatures=(0.0,))
    with pytest.raises(ValueError, match="draft: a draft model needs a target"):
        ReportConfig(draft="x")
    with pytest.raises(ValueError, match="n: needs a vocabulary"):
        ReportConfig(n=1)


def test_wilson_interval_against_the_closed_form_and_coverage_twin():
    low, high = wilson_interval(0, 20)
    assert low == pytest.approx(0.0, abs=1e-12) and high == pytest.approx(1.96**2 / (20 + 1.96**2))
    rng = np.random.default_rng(5)
    hits = rng.random((2000, 200)) < 0.3
    intervals = np.array([wilson_interval(h.sum(), 200) for h in hits])
    coverage = np.mean((intervals[:, 0] <= 0.3) & (0.3 <= intervals[:, 1]))
    assert 0.93 <= coverage <= 0.97
    wrong = np.mean((intervals[:, 0] <= 0.4) & (0.4 <= intervals[:, 1]))  # a wrong true value, 3 sd away
    assert wrong < 0.3
    with pytest.raises(ValueError, match="trials: needs at least one"):
        wilson_interval(0, 0)


# ---------------------------------------------------------------------------------------------
# The command line
# ---------------------------------------------------------------------------------------------


def one_line_error(result) -> str:
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    return result.stderr


def test_cli_refuses_non_empty_out_without_force(tmp_path, cli):
    (tmp_path / "x").write_text("")
    assert "pass --force" in one_line_error(cli("report", "--out", str(tmp_path)))


def test_cli_unwritable_out_is_one_line(tmp_path, cli):
    blocker = tmp_path / "file"
    blocker.write_text("")
    error = one_line_error(cli("report", "--out", str(blocker / "sub")))
    assert "multidraft report: error: --out: cannot write to" in error


def test_cli_draft_needs_target(tmp_path, cli):
    assert "--draft: a draft model needs --target" in one_line_error(cli("report", "--out", str(tmp_path / "r"), "--draft", "x"))
    assert "--target: also give --draft" in one_line_error(cli("report", "--out", str(tmp_path / "r"), "--target", "x"))


def test_cli_model_and_target_are_exclusive(cli):
    error = one_line_error(cli("report", "--model", "default", "--target", "x", "--draft", "y"))
    assert "not allowed with argument --model" in error


def test_cli_unknown_model_gives_the_loader_error(tmp_path, cli):
    pytest.importorskip("torch")
    error = one_line_error(cli("report", "--out", str(tmp_path / "r"), "--model", str(tmp_path / "no-such-model")))
    assert "no such file or directory" in error


@pytest.mark.slow
def test_real_model_section_on_the_bundled_model():
    pytest.importorskip("torch")
    from multidraft.report import RealModelGrid, real_model_section

    grid = RealModelGrid(
        schemes=("specinfer", "optimal"), wor_schemes=("optimal",), ks=(2,), temperatures=(1.6,), length=2, prompts=2,
        max_new_tokens=4, target_temperatures=(1.0, 0.6), cool_schemes=("optimal",),
    )  # fmt: skip
    real = real_model_section(ReportConfig(target="default"), grid=grid)
    specinfer, optimal, optimal_wor, optimal_cool = real.data["measurements"]
    assert optimal_cool["target_temperature"] == 0.6 and optimal["target_temperature"] == 1.0
    assert specinfer["scheme"] == "specinfer" and specinfer["k"] == 2 and specinfer["positions"] >= 1
    for measurement in (specinfer, optimal, optimal_wor):
        low, high = measurement["empirical_ci95"]
        assert low <= measurement["empirical_acceptance"] <= high
        assert measurement["expected_acceptance"] <= measurement["optimal_acceptance"] + 1e-9
    # the optimal verifier on iid drafts expects exactly the optimum (the sampler at full vocabulary)
    assert optimal["expected_acceptance"] == pytest.approx(optimal["optimal_acceptance"], abs=1e-9)
    table = next(block for block in real.section.blocks if isinstance(block, Table))
    assert [row[:5] for row in table.rows] == [
        ("specinfer", "iid", "2", "1.6", "1.0"),
        ("optimal verifier (achieved)", "iid", "2", "1.6", "1.0"),
        ("optimal verifier (achieved)", "wor", "2", "1.6", "1.0"),
        ("optimal verifier (achieved)", "iid", "2", "1.6", "0.6"),
    ]
    # issue 32: a row per task (the two prompts are the bundled chat and code ones) under every setting
    tasks = [block for block in real.section.blocks if isinstance(block, Table)][1]
    assert [row[0] for row in tasks.rows] == ["chat", "code"] and len(tasks.headers) == 1 + len(table.rows)
    for measurement in real.data["measurements"]:
        assert sum(task["positions"] for task in measurement["tasks"]) == measurement["positions"]
    assert set(real.timings["latency_profiles"]) == {"target", "draft"}
    # issue 20: the text states the positions each row rests on, and how wide that leaves the interval
    counts = [measurement["positions"] for measurement in real.data["measurements"]]
    text = next(block for block in real.section.blocks if isinstance(block, Paragraph)).text
    assert f"'positions' column, {min(counts)}–{max(counts)} here" in text
    assert [row[5] for row in table.rows] == [str(count) for count in counts]


# ----------------------------------------------------------------------------------------------
# Issue 20, item 6: the report, read by a newcomer


def _sweep_for_text(published, ratio, pairs_ratio):
    from multidraft.report.truncation import TruncationSweep

    s_values = tuple(range(1, len(published) + 1))
    return TruncationSweep(
        100, 0.8, s_values, 0.9, {"published": published, "ratio": ratio}, {"published": (1e-3,) * len(s_values),
        "ratio": (1e-3,) * len(s_values)}, {"published": (0.1,) * len(s_values), "ratio": pairs_ratio},
    )  # fmt: skip


def _diagnosis_row(temperature, top_p, single, published, ratio=0.8, optimal=0.9):
    from multidraft.report.truncation import KeyDiagnosisRow

    return KeyDiagnosisRow(temperature, top_p, single, optimal, {"published": published, "ratio": ratio},
                           {"published": 0.3, "ratio": 1e-9})  # fmt: skip


def _below_clause(text: str) -> str:
    match = re.search(r"falls below the single draft at (.*?)(?:; |\. )", text)
    return "" if match is None else match.group(1)


def test_truncation_text_names_exactly_the_rows_below_a_single_draft():
    from multidraft.report.truncation import _explanation

    sweep = _sweep_for_text((0.5, 0.6), (0.8, 0.8), (1e-12, 2e-12))
    rows = (
        _diagnosis_row(0.8, None, single=0.7, published=0.5),
        _diagnosis_row(0.8, 0.95, single=0.7, published=0.45),
        _diagnosis_row(1.6, None, single=0.5, published=0.64, optimal=0.66),
    )
    text = " ".join(_explanation(sweep, rows, 5))
    assert "the method, not a defect of the key" in text
    clause = _below_clause(text)
    assert "0.8" in clause and "top-p 0.95" in clause and "1.6" not in clause and "(all below 1)" in clause
    assert "97%" in text  # the hot row's share of the optimum, 0.64 / 0.66, computed from the row
    # the twin: a row above 1 that falls below is listed, and the clause no longer says "all below 1"
    hot_below = rows[:2] + (_diagnosis_row(1.6, None, single=0.7, published=0.6),)
    clause = _below_clause(" ".join(_explanation(sweep, hot_below, 5)))
    assert "1.6" in clause and "(all below 1)" not in clause
    none_below = tuple(_diagnosis_row(t, None, single=0.5, published=0.6) for t in (0.8, 1.6))
    assert _below_clause(" ".join(_explanation(sweep, none_below, 5))) == ""


def test_truncation_diagnosis_pairs_and_bounds_by_an_independent_route(small_report):
    """'LP pairs' is q(Ω₁)² with Ω₁ the s tokens of largest key: recomputed here by a plain
    stable sort of the keys (tokens no draft can produce last), not by the LP module."""
    from multidraft.theory import top_p

    data = small_report.results["sections"]["truncated_lp"]["rank_key_diagnosis"]
    positions = zipf_positions(SMALL.n, SMALL.positions, np.random.default_rng(SMALL.seed))
    assert len(data["rows"]) == 2 * len(SMALL.temperatures)
    for row in data["rows"]:
        drafts = positions.drafts(row["draft_temperature"])
        if row["top_p"] is not None:
            drafts = top_p(drafts, row["top_p"])
        for key in ("published", "ratio"):
            pairs = []
            for p, q in zip(positions.targets, drafts):
                with np.errstate(divide="ignore"):
                    value = p - q * q if key == "published" else p / q
                value = np.where(q > 0, value, -np.inf)
                top = np.argsort(-value, kind="stable")[: data["s"]]
                pairs.append(q[top].sum() ** 2)
            assert row["lp_pairs"][key] == pytest.approx(np.mean(pairs), rel=1e-9)
            assert row["acceptance"][key] <= row["optimal"] + 1e-9
        assert row["single"] <= row["optimal"] + 1e-9
    markdown = render_markdown(small_report.document)
    below = [row for row in data["rows"] if row["acceptance"]["published"] < row["single"]]
    assert ("falls below the single draft" in markdown) == bool(below)
    assert "the method, not a defect of the key" in markdown


def test_gap_figure_has_a_row_of_panels_per_law_and_every_panel_draws(small_report):
    """The caption promised dotted without-replacement lines that hid behind the iid ones."""
    from matplotlib.lines import Line2D

    from multidraft.report.gap_table import gap_figure

    positions = zipf_positions(SMALL.n, SMALL.positions, np.random.default_rng(0))
    table = position_gap_table(positions, ks=(2, 3), temperatures=(0.8, 1.6), pairs=(), s=3)
    figure = gap_figure(table)
    axes = figure.axes
    assert len(axes) == 2 * 2
    assert [axis.get_title().split(",")[0] for axis in axes] == ["iid drafts"] * 2 + ["without replacement"] * 2
    for axis in axes:
        drawn = [line for line in axis.get_lines() if isinstance(line, Line2D) and len(line.get_xdata()) > 2 - 1
                 and np.isfinite(np.asarray(line.get_ydata(), dtype=float)).any() and line.get_label()[0] != "_"]
        assert drawn, axis.get_title()
    iid_only = position_gap_table(positions, ks=(2,), temperatures=(0.8, 1.6), pairs=(), laws=("iid",), s=3)
    assert len(gap_figure(iid_only).axes) == 1  # the twin: one law, one row
    caption = next(b for s in small_report.document.sections for b in s.blocks if isinstance(b, Figure) and b.name == "gap")
    assert "dotted" not in caption.caption and "bottom row: drafts without replacement" in caption.caption


def test_gap_table_notes_say_each_reason_once_with_the_ks_it_applies_to():
    from multidraft.report.gap_table import PositionGapRow, _notes

    lp = "the importance LP is built for independent drafts, not drafts without replacement"
    rows = [
        PositionGapRow("wor", k, (0.8,), 0.9, {}, {"truncated LP": lp, "truncated LP, ratio key": lp}
                       | ({"SpecInfer": f"too many tuples at k={k}"} if k > 2 else {}))
        for k in (2, 4, 8)
    ]  # fmt: skip
    (note,) = _notes(rows)
    assert note.text.count(lp) == 1
    assert "**truncated LP** and **truncated LP, ratio key**: " + lp in note.text
    assert "**SpecInfer** (K = 4, 8): too many tuples at k=4" in note.text and "k=8" not in note.text


def test_an_enumeration_too_large_reads_as_a_number_not_as_digits(monkeypatch):
    """The without-replacement footnote printed "217406178270.0 GiB" (read with rrs-wor's
    estimate switched off: with it the cell holds the estimate, next test)."""
    from multidraft.report.gap_table import SCHEME_COLUMNS, _column_value
    from multidraft.schemes.rrs_wor import RRSWithoutReplacement
    from multidraft.theory import WithoutReplacement, softmax, zipf

    monkeypatch.delattr(RRSWithoutReplacement, "estimate_acceptance")
    p = zipf(49152, 1.1, np.random.default_rng(0))
    specinfer = next(column for column in SCHEME_COLUMNS if column.label == "SpecInfer")
    value, _, note = _column_value(specinfer, 5, [WithoutReplacement(softmax(np.log(p), 1.6), 4)], p[None, :])
    assert value is None and "exceed the limit ENUMERATION_LIMIT" in note
    assert re.search(r"\de\+\d+ draft tuples", note) and re.search(r"\de\+\d+ bytes of memory", note)
    assert not re.search(r"\d{7}", note.replace("2,000,000", ""))


def test_spec_infer_without_replacement_beyond_enumeration_is_a_marked_estimate(monkeypatch):
    """rrs-wor at K > 2 where enumeration is refused, with ``ESTIMATES_IN_TABLE``: the cell is the
    Rao-Blackwellised estimate (95% half-width <= 1e-3 on the mean), marked ≈ in the table and
    explained in a ≈ note; without it (the default) the cell is empty and the note names the
    estimate."""
    from multidraft.report import gap_table
    from multidraft.report.gap_table import ESTIMATE_NOTE, SCHEME_COLUMNS, PositionGapRow, _column_value, _marked, _notes
    from multidraft.theory import WithoutReplacement, softmax, zipf

    specinfer = next(column for column in SCHEME_COLUMNS if column.label == "SpecInfer")
    p = zipf(2000, 1.1, np.random.default_rng(0))
    law = WithoutReplacement(softmax(np.log(p), 1.6), 4)
    value, _, note = _column_value(specinfer, 5, [law], p[None, :])
    assert value is None and "estimate_acceptance" in note
    monkeypatch.setattr(gap_table, "ESTIMATES_IN_TABLE", True)

    value, name, note = _column_value(specinfer, 5, [law], p[None, :])
    assert value is not None and 0 < value < 1 and name == "rrs-wor.estimate_acceptance"
    assert note.startswith(ESTIMATE_NOTE) and "95% interval" in note
    half = float(re.search(r"±(\S+) on the mean", note).group(1))
    assert half <= 1e-3
    row = PositionGapRow("wor", 4, (1.6,), 1.0, {"SpecInfer": value}, {"SpecInfer": note})
    assert _marked(row, "SpecInfer") == "≈ " and _marked(row, "SpecTr") == ""
    (paragraph,) = _notes([row])
    assert paragraph.text.startswith("≈: **SpecInfer**: estimate")


def test_real_model_default_grid_measures_few_settings_well():
    """Rows rested on 18–25 positions (intervals ±0.2): the default grid now spends the time on
    fewer rows with many positions each, and states the positions per row."""
    from multidraft.report.real import RealModelGrid, _settings

    grid = RealModelGrid()
    tokens_per_row = grid.prompts * grid.max_new_tokens
    assert tokens_per_row >= 150  # a Wilson interval of about ±0.07 needs ~170 positions
    assert len(_settings(grid)) * tokens_per_row <= 1200  # the time budget (see README)
    assert any(setting[4] < 1 for setting in _settings(grid))  # issue 32: a target temperature below 1


def test_cli_report_refuses_an_empty_out_and_a_bad_seed_before_creating_anything(tmp_path, cli):
    error = one_line_error(cli("report", "--out", "", cwd=tmp_path))
    assert "--out: the path is empty" in error and not any(tmp_path.iterdir())
    for seed in ("-1", str(2**70)):
        error = one_line_error(cli("report", "--out", str(tmp_path / "r"), "--seed", seed))
        assert "seed: expected an integer in [0, 2**62)" in error
        assert not (tmp_path / "r").exists()


def test_cli_report_removes_the_folder_it_created_when_the_build_fails(tmp_path, cli):
    pytest.importorskip("torch")
    out = tmp_path / "new"
    error = one_line_error(cli("report", "--out", str(out), "--model", str(tmp_path / "no-such-model")))
    assert "no such file or directory" in error and not out.exists()
    kept = tmp_path / "kept"
    kept.mkdir()
    one_line_error(cli("report", "--out", str(kept), "--model", str(tmp_path / "no-such-model")))
    assert kept.is_dir()  # the twin: a folder that was there stays
