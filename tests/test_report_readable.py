"""A newcomer's first hour with the report (issue 28, item 7): figures whose text can be read,
table cells that do not wrap, zero-length bars that read as zero rather than as missing data,
paragraphs of one subject each without a changelog, temperatures printed alike (``2.0`` beside
``0.5``), a table of contents, and ``×`` on the speed-up axis.

The report is built once, small, with the temperatures 0.5 and 2.0 (the pair that printed as
``0.5`` and ``2``); every figure a section draws is caught on its way to PNG."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from multidraft.report import ReportConfig, build_report, render_html, render_markdown  # noqa: E402
from multidraft.report.render import Paragraph, section_anchor  # noqa: E402

READABLE = ReportConfig(
    n=40,
    positions=2,
    ks=(2, 3),
    temperatures=(0.5, 2.0),
    pairs=((0.5, 2.0),),
    s_values=(1, 3),
    sweep_temperature=2.0,
    speed_temperature=2.0,
    family_points=13,
)
#: The section modules that draw a figure without a model.
FIGURE_MODULES = ("figure2", "gap_table", "truncation", "speedup", "block_level", "budget")
#: The smallest font (points) a figure may use: 7 and 8 were unreadable once a wide figure was
#: scaled to the page.
SMALLEST_FONT = 10


@pytest.fixture(scope="module")
def built():
    """The small report and every figure its sections drew, by module."""
    import importlib

    figures: dict[str, list] = {}
    with pytest.MonkeyPatch.context() as patch:
        for name in FIGURE_MODULES:
            module = importlib.import_module(f"multidraft.report.{name}")
            original = module.png_bytes

            def catch(figure, *args, _name=name, _original=original, **kwargs):
                figure.canvas.draw()  # tick labels exist once drawn
                figures.setdefault(_name, []).append(_texts(figure))
                return _original(figure, *args, **kwargs)

            patch.setattr(module, "png_bytes", catch)
        report = build_report(READABLE)
    return report, figures


def _texts(figure) -> list[tuple[str, float]]:
    """Every visible, non-empty text of a drawn figure with its font size."""
    from matplotlib.text import Text

    return [
        (text.get_text(), text.get_fontsize())
        for text in figure.findobj(Text)
        if text.get_visible() and text.get_text().strip()
    ]


def test_every_figure_reads_at_page_size(built):
    """The gap figure's legend was 7 pt and its titles 9 pt; every text is now at least 10 pt."""
    _, figures = built
    assert set(figures) == set(FIGURE_MODULES)
    for name, drawn in figures.items():
        for texts in drawn:
            small = [(text, size) for text, size in texts if size < SMALLEST_FONT]
            assert not small, (name, small)


def test_zero_length_bars_read_as_zero():
    """A verifier that closes none of the gap drew no bar at all, like a missing value; every
    bar now carries its value, and a zero one a marker on the zero line."""
    from matplotlib.lines import Line2D

    from multidraft.report.block_level import block_level_figure
    from multidraft.trees import BlockGapRow

    expected = {"token:rrs-wor": 1.5, "token:optimal": 1.5, "traversal": 1.75, "selective": 1.6}
    rows = [
        BlockGapRow("zero", 2, 2, 2, True, expected, optimum=2.0, optimum_upper=2.0),
        BlockGapRow("none", 2, 2, 2, True, dict(expected, **{"token:rrs-wor": 2.0}), optimum=2.0, optimum_upper=2.0),
    ]
    figure = block_level_figure(rows)
    figure.canvas.draw()
    texts = [text for text, _ in _texts(figure)]
    assert texts.count("0%") == 1 and "50%" in texts and "20%" in texts, texts
    assert texts.count("n/a") == 3  # the baseline is already optimal: no share to show
    markers = [line for line in figure.axes[0].get_lines() if line.get_marker() == "D"]
    assert len(markers) == 1 and list(markers[0].get_xdata()) == [0.0]
    assert not [line for line in figure.axes[0].get_lines() if isinstance(line, Line2D) and line.get_marker() == "D" and line.get_xdata()[0] != 0]


def test_speedup_reads_in_multiples(built):
    """No "×" on the speed-up axis: the ticks now read 2×, and the table says 3.061×."""
    report, figures = built
    (texts,) = figures["speedup"]
    ticks = [text for text, _ in texts if re.fullmatch(r"[\d.]+×", text)]
    assert "1×" in ticks and len(ticks) >= 3, texts
    section = next(s for s in report.document.sections if s.title == "Predicted speed-up")
    table = next(block for block in section.blocks if hasattr(block, "rows"))
    column = table.headers.index("predicted speed-up")
    assert all(re.fullmatch(r"\d+\.\d{3}×", row[column]) for row in table.rows), table.rows


def test_temperatures_print_alike(built):
    """Temperatures printed as ``2`` beside ``0.5``; now ``2.0``, in tables, text and figures."""
    report, figures = built
    markdown = render_markdown(report.document)
    cells = re.findall(r"^\| \d+ \| ([^|]+) \|", markdown, flags=re.M)  # the K | draft T rows of the gap tables
    assert {"0.5", "2.0", "0.5 & 2.0"} <= set(cell.strip() for cell in cells), cells
    assert "| 2.0 | " in markdown and "| 2.0, top-p 0.95 |" in markdown  # the rank-key rows
    assert not re.search(r"^\| 2(, top-p 0\.95)? \| 0\.\d{4} \|", markdown, flags=re.M)  # never "| 2 | 0.4180 |"
    assert "draft temperature 2.0" in markdown and "draft temperature 2," not in markdown
    (gap_texts,) = figures["gap_table"]
    assert {"0.5", "2.0"} <= {text for text, _ in gap_texts}  # the x ticks are the temperatures computed
    from multidraft.report.figures import temperature_text

    assert [temperature_text(t) for t in (2, 2.0, 0.5, 1.25, 0.8)] == ["2.0", "2.0", "0.5", "1.25", "0.8"]


def test_a_table_of_contents_links_every_section(built):
    report, _ = built
    sections = report.document.sections
    markdown = render_markdown(report.document)
    contents = markdown.split("\n## ")[0]
    assert "**Contents**" in contents
    for index, section in enumerate(sections, 1):
        assert f"{index}. [{section.title}](#{section_anchor(section.title)})" in contents
    page = render_html(report.document)
    links = re.findall(r'<a href="#([^"]+)">', page)
    ids = re.findall(r'<h2 id="([^"]+)">', page)
    assert links == ids and len(ids) == len(sections) == len(set(ids))
    # GitHub's anchors: lower case, punctuation dropped, spaces to hyphens
    assert section_anchor("Optimal acceptance on three tokens (Figure 2)") == "optimal-acceptance-on-three-tokens-figure-2"
    assert section_anchor("Block level: tree verifiers against the block-level optimum") == (
        "block-level-tree-verifiers-against-the-block-level-optimum"
    )


def test_html_table_cells_do_not_wrap(built):
    """Cells such as ``0.4268 (100.0%)`` wrapped onto two lines; a wide table now scrolls."""
    report, _ = built
    page = render_html(report.document)
    assert re.search(r"td \{[^}]*white-space: nowrap", page)
    assert re.search(r"\.table \{[^}]*overflow-x: auto", page)
    tables = page.count("<table>")
    assert tables > 0 and page.count('<div class="table"><table>') == tables


def test_paragraphs_hold_one_subject_and_no_changelog(built):
    """A 477-word paragraph of the truncated-LP section ended with "One defect was found and
    fixed ... they now rank last": history, not a result. Paragraphs are now at most 250 words
    and say what is, not what changed."""
    report, _ = built
    paragraphs = [block.text for section in report.document.sections for block in section.blocks if isinstance(block, Paragraph)]
    longest = max(paragraphs, key=lambda text: len(text.split()))
    assert len(longest.split()) <= 250, (len(longest.split()), longest[:120])
    for text in paragraphs:
        for changelog in ("was found and fixed", "they now rank", "used to", "previously"):
            assert changelog not in text, (changelog, text[:120])
    truncation = next(s for s in report.document.sections if s.title.startswith("Truncated LP"))
    texts = " ".join(block.text for block in truncation.blocks if isinstance(block, Paragraph))
    assert "Tokens no draft can produce (outside a top-p or top-k draft) rank last" in texts  # the fact stays
    assert texts.count("the paper writes p for the draft and q for the target") == 1  # said once


def test_block_level_figure_labels_nan_shares_and_keeps_every_row():
    """The twin of the zero-bar test: real shares are printed as they are (a negative one too)."""
    from multidraft.report.block_level import block_level_figure
    from multidraft.trees import BlockGapRow

    row = BlockGapRow("negative", 2, 2, 2, False, {"token:specinfer": 1.5, "token:optimal": 1.9, "traversal": 1.4, "selective": 2.0},
                      optimum=2.0, optimum_upper=2.0)  # fmt: skip
    figure = block_level_figure([row])
    figure.canvas.draw()
    texts = [text for text, _ in _texts(figure)]
    assert {"80%", "-20%", "100%"} <= set(texts) and "0%" not in texts
    assert not math.isnan(row.closed("traversal")) and np.isclose(row.closed("traversal"), -0.2)
