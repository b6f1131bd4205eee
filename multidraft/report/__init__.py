"""Acceptance-gap reports: one module per section, Markdown/HTML/JSON output.

``build_report(ReportConfig(...))`` runs the sections in :data:`~multidraft.report.build.SECTIONS`
-- :mod:`~multidraft.report.figure2`, :mod:`~multidraft.report.gap_table`,
:mod:`~multidraft.report.truncation`, :mod:`~multidraft.report.speedup`,
:mod:`~multidraft.report.block_level` and, with a model, :mod:`~multidraft.report.real` and
:mod:`~multidraft.report.real_blocks` -- each of which computes its numbers, draws its figure and
writes its text; ``write_report(report, out)`` writes ``report.md``, a self-contained
``report.html``, ``figures/*.png`` and ``results.json``. The command ``multidraft report``
wraps both. :mod:`~multidraft.report.instance_gap` is the experiment over random small
instances behind ``benchmarks/bench_gap_table.py``. Needs the ``report`` extra (matplotlib,
imported when a figure is drawn); the LP, scheme and decoding layers are imported when a
section uses them, so importing this package stays light.
"""

from multidraft.report.build import SECTIONS, Report, build_report, write_report
from multidraft.report.config import ReportConfig
from multidraft.report.figure2 import FIGURE2_FAMILY, FamilyCurves, TargetFamily, family_curves, unit_interval
from multidraft.report.gap_table import PositionGapRow, PositionGapTable, position_gap_table
from multidraft.report.instance_gap import InstanceGapRow, InstanceGapTable, instance_gap_table
from multidraft.report.positions import PositionSet, zipf_positions
from multidraft.report.real import RealModelGrid, RealModelSection, real_model_section, wilson_interval
from multidraft.report.real_blocks import RealBlockGrid, RealBlockSection, real_block_section
from multidraft.report.render import Document, Figure, Paragraph, Section, Table, render_html, render_markdown
from multidraft.report.truncation import TruncationSweep, truncation_sweep

__all__ = [
    "ReportConfig",
    "Report",
    "SECTIONS",
    "build_report",
    "write_report",
    "Document",
    "Section",
    "Paragraph",
    "Table",
    "Figure",
    "render_markdown",
    "render_html",
    "TargetFamily",
    "FIGURE2_FAMILY",
    "FamilyCurves",
    "family_curves",
    "unit_interval",
    "PositionSet",
    "zipf_positions",
    "PositionGapRow",
    "PositionGapTable",
    "position_gap_table",
    "TruncationSweep",
    "truncation_sweep",
    "RealModelGrid",
    "RealModelSection",
    "real_model_section",
    "wilson_interval",
    "RealBlockGrid",
    "RealBlockSection",
    "real_block_section",
    "InstanceGapRow",
    "InstanceGapTable",
    "instance_gap_table",
]
