"""Tests of the acceptance-gap report: its numbers against independent routes, its output
files, reproducibility, and the ``multidraft report`` command's handling of bad input."""

from __future__ import annotations

import base64
import io
import json
import math
import re
import subprocess
import sys
from fractions import Fraction

import numpy as np
import pytest

from multidraft.report import (
    FIGURE2_FAMILY,
    Document,
    Figure,
    Paragraph,
    ReportConfig,
    Section,
    Table,
    TargetFamily,
    build_report,
    family_curves,
    position_gap_table,
    render_html,
    render_markdown,
    unit_interval,
    wilson_interval,
    write_report,
    zipf_positions,
)
from multidraft.report.gap_table import VERIFIER_COLUMN
from multidraft.theory.verifier import optimal_selection_rule
from multidraft.report.render import prepare_output
from multidraft.theory import IID, Independent, optimal_acceptance, unit_acceptance


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
# Figure 2: the exact Theorem-2 interval against the optimum computed point by point
# ---------------------------------------------------------------------------------------------


def test_figure2_interval_is_one_ninth_to_five_ninths():
    # Hand derivation: q uniform, K = 2, so p(T) >= (|T|/3)^2: singletons give t >= 1/9 and
    # 2/3 - t >= 1/9; pairs give 1/3 + t >= 4/9 and 1 - t >= 4/9.
    assert unit_interval(FIGURE2_FAMILY, 2) == (Fraction(1, 9), Fraction(5, 9))


@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_unit_interval_matches_exact_unit_acceptance_at_its_ends(k):
    interval = unit_interval(FIGURE2_FAMILY, k)
    law = IID([str(q) for q in FIGURE2_FAMILY.draft], k)
    if interval is None:
        assert k == 1  # K = 1 needs p = q, which this family never reaches except t = 1/3
        return
    low, high = interval
    eps = Fraction(1, 10**6)
    for t, expected in ((low, True), (high, True), ((low + high) / 2, True), (low - eps, False), (high + eps, False)):
        if not FIGURE2_FAMILY.lower <= t <= FIGURE2_FAMILY.upper:
            continue
        target = [str(v) for v in FIGURE2_FAMILY.exact_target(t)]
        assert unit_acceptance(target, law, exact=True).holds is expected, (k, t)


def test_unit_interval_single_draft_is_the_single_point_p_equals_q():
    assert unit_interval(FIGURE2_FAMILY, 1) == (Fraction(1, 3), Fraction(1, 3))


def test_family_curves_agree_with_the_subset_method_and_the_interval():
    curves = family_curves(points=25, schemes=())
    law = IID(np.full(3, 1 / 3), 2)
    subsets = np.array([optimal_acceptance(FIGURE2_FAMILY.target(t), law, method="subsets").value for t in curves.t])
    assert curves.optimal.shape == curves.t.shape == (25,)
    np.testing.assert_allclose(curves.optimal, subsets, atol=1e-12)
    low, high = (float(v) for v in curves.interval)
    np.testing.assert_array_equal(curves.unit, (curves.t >= low - 1e-12) & (curves.t <= high + 1e-12))
    np.testing.assert_allclose(curves.single, [np.minimum(FIGURE2_FAMILY.target(t), 1 / 3).sum() for t in curves.t])


def test_family_curves_baselines_lie_below_the_optimum():
    curves = family_curves(points=13)
    assert set(curves.schemes) == {"spectr", "specinfer"}
    for name, values in curves.schemes.items():
        assert values.shape == curves.optimal.shape
        assert np.all(values <= curves.optimal + 1e-9), name
        assert np.all(values >= curves.single - 1e-9), name  # K = 2 never does worse than one draft


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(direction=(Fraction(1), Fraction(0), Fraction(0))), "sum to zero"),
        (dict(lower=Fraction(1), upper=Fraction(1)), "empty parameter range"),
        (dict(draft=(Fraction(1),)), "same length"),
    ],
    ids=["direction-not-zero-sum", "empty-range", "length-mismatch"],
)
def test_target_family_rejects_bad_definitions(kwargs, message):
    fields = dict(
        base=FIGURE2_FAMILY.base,
        direction=FIGURE2_FAMILY.direction,
        lower=FIGURE2_FAMILY.lower,
        upper=FIGURE2_FAMILY.upper,
        draft=FIGURE2_FAMILY.draft,
        label="x",
    )
    with pytest.raises(ValueError, match=message):
        TargetFamily(**(fields | kwargs))


def test_family_curves_rejects_too_few_points():
    with pytest.raises(ValueError, match="points: needs at least 2"):
        family_curves(points=1)


# ---------------------------------------------------------------------------------------------
# Gap table
# ---------------------------------------------------------------------------------------------


def test_positions_are_reproducible_and_drafts_are_tempered_targets():
    a = zipf_positions(300, 3, np.random.default_rng(11))
    b = zipf_positions(300, 3, np.random.default_rng(11))
    np.testing.assert_array_equal(a.targets, b.targets)
    tempered = a.targets ** (1 / 1.6)
    np.testing.assert_allclose(a.drafts(1.6), tempered / tempered.sum(axis=1, keepdims=True), rtol=1e-10)
    assert not np.array_equal(a.targets, zipf_positions(300, 3, np.random.default_rng(12)).targets)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(positions=0), "positions: needs at least one"),
        (dict(exponent_range=(0.0, 1.0)), "exponent_range"),
    ],
)
def test_positions_reject_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        zipf_positions(**({"n": 10, "positions": 2, "rng": np.random.default_rng(0)} | kwargs))


def test_gap_table_rows_and_bounds():
    positions = zipf_positions(40, 2, np.random.default_rng(0))
    table = position_gap_table(positions, ks=(2, 3), temperatures=(0.8, 1.6), pairs=((0.8, 1.6),), s=3)
    assert [(r.law, r.k, r.draft_temperatures) for r in table.rows] == [
        ("iid", 2, (0.8,)), ("iid", 2, (1.6,)), ("iid", 3, (0.8,)), ("iid", 3, (1.6,)),
        ("wor", 2, (0.8,)), ("wor", 2, (1.6,)), ("wor", 3, (0.8,)), ("wor", 3, (1.6,)),
        ("independent", 2, (0.8, 1.6)),
    ]  # fmt: skip
    for row in table.rows:
        for column, value in row.values.items():
            if value is not None:
                assert value <= row.optimal + 1e-9, (row, column)
                assert row.fraction(column) == pytest.approx(value / row.optimal)
    # single draft: Σ min(p, q) recomputed here
    q = positions.drafts(0.8)
    single = np.mean(np.minimum(positions.targets, q).sum(axis=1))
    np.testing.assert_allclose(table.rows[0].values["single draft"], single)
    # the optimum of the table is the theory's, position by position
    expected = np.mean([optimal_acceptance(p, IID(d, 3)).value for p, d in zip(positions.targets, q)])
    np.testing.assert_allclose(table.rows[2].optimal, expected, rtol=1e-12)
    # the optimal verifier achieves the optimum for iid drafts, at most it without replacement
    # and for two independent drafts (the path curtain, docs/nonidentical_verifier.md)
    for row in table.rows:
        achieved = row.values[VERIFIER_COLUMN]
        if row.law == "iid":
            assert achieved == pytest.approx(row.optimal, abs=1e-10)
        elif row.law == "wor":
            assert row.values["single draft"] - 1e-12 <= achieved <= row.optimal + 1e-12
        else:  # the rule's own law, recomputed by enumerating every draft pair (rule_checks)
            from rule_checks import enumerated_law

            laws = [Independent([a, b]) for a, b in zip(positions.drafts(0.8), positions.drafts(1.6))]
            own = [np.minimum(p, enumerated_law(optimal_selection_rule(p, law), law)).sum() for p, law in zip(positions.targets, laws)]
            assert achieved == pytest.approx(float(np.mean(own)), abs=1e-12)
            assert achieved <= row.optimal + 1e-12
    # the non-identical optimum is exact: the transport LP over the pairs agrees, position by position
    pytest.importorskip("cvxpy")
    from multidraft.lp import transport_lp

    first, second = positions.drafts(0.8), positions.drafts(1.6)
    lp = np.mean([transport_lp(p, Independent([a, b])).acceptance for p, a, b in zip(positions.targets, first, second)])
    np.testing.assert_allclose(table.rows[-1].optimal, lp, atol=1e-7)


def test_gap_table_rejects_unknown_law_and_bad_s():
    positions = zipf_positions(20, 1, np.random.default_rng(0))
    with pytest.raises(ValueError, match="laws: unknown law 'greedy'"):
        position_gap_table(positions, laws=("greedy",))
    with pytest.raises(ValueError, match="s: the truncated LP needs s >= 1"):
        position_gap_table(positions, s=0)


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
# The gap over random small instances (behind benchmarks/bench_gap_table.py).


def test_instance_gap_ratios_are_bounded_and_optimal_is_one():
    from multidraft.report import instance_gap_table

    table = instance_gap_table(["optimal", "spectr", "specinfer", "truncated-lp"], ks=[2, 3], n=6, instances=4, seed=1)
    families = {row.family for row in table.rows}
    assert families == {"dirichlet", "zipf", "temperature"}
    for row in table.rows:
        assert row.instances == 4
        assert 0 < row.min_ratio <= row.mean_ratio <= 1 + 1e-9
        if row.scheme == "optimal":
            assert row.min_ratio == pytest.approx(1.0, abs=1e-12)
        if row.scheme == "spectr":
            assert row.min_ratio >= 1 - 1 / math.e
    # truncated-lp applies to every K.
    assert {row.k for row in table.rows if row.scheme == "truncated-lp"} == {2, 3}
    assert "dirichlet" in table.format() and table.to_dict()["rows"][0]["scheme"] == "optimal"


def test_instance_gap_bad_arguments():
    from multidraft.report.instance_gap import draw_pair, instance_gap_table

    with pytest.raises(ValueError, match="family: unknown family 'gauss'"):
        instance_gap_table(["optimal"], families=["gauss"])
    with pytest.raises(ValueError, match="unknown family"):
        draw_pair("gauss", 4, np.random.default_rng(0))
    with pytest.raises(ValueError, match="need n >= 2"):
        instance_gap_table(["optimal"], n=1)
    with pytest.raises(ValueError, match="unknown name"):
        instance_gap_table(["best"])


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
