"""Acceptance-gap reports: synthetic sections, figures, Markdown/HTML/JSON output.

``build_report(ReportConfig(...))`` computes every section available in this build and
``write_report(report, out)`` writes ``report.md``, a self-contained ``report.html``,
``figures/*.png`` and ``results.json``. The command ``multidraft report`` wraps both.
Needs the ``report`` extra (matplotlib, imported when a figure is drawn); sections that report
on the LP, scheme and decoding layers import those layers only when they run, so importing
this package stays light.
"""

from multidraft.report.build import Report, ReportConfig, build_report, write_report
from multidraft.report.real import RealModelGrid, RealModelSection, real_model_section, wilson_interval
from multidraft.report.render import Document, Figure, Paragraph, Section, Table, render_html, render_markdown
from multidraft.report.synthetic import (
    FIGURE2_FAMILY,
    FamilyCurves,
    GapRow,
    GapTable,
    PositionSet,
    TargetFamily,
    TruncationSweep,
    family_curves,
    gap_table,
    pair_cut_upper_bound,
    truncation_sweep,
    unit_interval,
    zipf_positions,
)

__all__ = [
    "ReportConfig",
    "Report",
    "build_report",
    "write_report",
    "RealModelGrid",
    "RealModelSection",
    "real_model_section",
    "wilson_interval",
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
    "GapRow",
    "GapTable",
    "gap_table",
    "pair_cut_upper_bound",
    "TruncationSweep",
    "truncation_sweep",
]
