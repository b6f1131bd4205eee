"""Build the acceptance-gap report: the ordered list of sections, then the document.

Each section is one module of this package that computes its numbers, draws its figure and
writes its text (:mod:`multidraft.report.section`); :func:`build_report` runs them with one
progress bar and assembles the :class:`Report` (the document and the JSON results);
:func:`write_report` writes ``report.md``, ``report.html``, ``figures/*.png`` and
``results.json``.

Reproducibility: every number except wall-clock timings is a deterministic function of the
:class:`~multidraft.report.config.ReportConfig` (its ``seed`` drives the one
``numpy.random.Generator`` of the synthetic positions, and the real-model sampling); timings
and versions live under ``results["timings"]`` and ``results["environment"]`` only.
"""

from __future__ import annotations

import os
import platform
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from multidraft.report import block_level, budget, figure2, gap_table, real, real_blocks, speedup, truncation
from multidraft.report.config import ReportConfig
from multidraft.report.positions import zipf_positions
from multidraft.report.render import Document, Paragraph, Section, prepare_output, write_report_files
from multidraft.report.section import BuildContext, ReportProgress, SectionResult

__all__ = ["SECTIONS", "ReportConfig", "Report", "build_report", "write_report"]

#: The sections in the order the report shows them. The real-model section (present with a
#: model) is computed first, so that a bad model fails before the long synthetic part.
SECTIONS = (figure2, gap_table, truncation, speedup, block_level, budget, real, real_blocks)


@dataclass(frozen=True)
class Report:
    """A built report: the document to render and the JSON-ready results."""

    document: Document
    results: dict = field(repr=False)
    seconds: float


def _environment() -> dict:
    import numpy  # noqa: PLC0415
    import scipy  # noqa: PLC0415

    from multidraft import __version__  # noqa: PLC0415

    return {
        "multidraft": __version__,
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        "scipy": scipy.__version__,
        "machine": platform.machine(),
        "processor": platform.processor() or "unknown",
        "cpus": os.cpu_count(),
    }


def _overview(config: ReportConfig, seconds: float, with_models: bool) -> Section:
    return Section(
        "Overview",
        (
            Paragraph(
                "Acceptance-gap report of multi-draft speculative sampling: how close published token-level "
                "selection schemes come to the optimal acceptance (Khisti et al., ICLR 2025), on a small exact "
                "example, on large-vocabulary distributions, for the truncated LP, in predicted speed-up and, at the "
                "block level, tree verifiers against the block-level optimum on small exact instances"
                + (
                    ", with measurements on real models."
                    if with_models
                    else ". Run with --model default for real-model measurements."
                )
            ),
            Paragraph(
                f"Built in **{seconds:.1f} s** on this machine ({os.cpu_count()} CPUs, "
                f"Python {platform.python_version()}); "
                f"seed {config.seed}. The same seed gives the same numbers; only timings vary between runs. "
                "results.json holds every number in the tables and figures."
            ),
        ),
    )


def build_report(config: ReportConfig = ReportConfig(), *, progress: bool = False) -> Report:
    """Run every section of :data:`SECTIONS` that applies to ``config`` and assemble the report.

    Sections: Figure-2 curves, the gap table, the truncated-LP sweep, the predicted speed-up,
    the block level (tree verifiers on small exact instances) and, when ``config.target`` is
    set, real-model measurements (token-level acceptance, then tree verifiers on the same
    drafted trees over K × L × draft temperature). ``progress`` shows one bar on stderr over the steps of every
    section, labelled with the stage running.
    """
    start = time.perf_counter()
    sections = [module for module in SECTIONS if getattr(module, "applies", lambda _: True)(config)]
    order = sorted(sections, key=lambda module: module is not real)  # a bad model fails first
    bar = ReportProgress(sum(module.units(config) for module in sections), progress)
    try:
        context = BuildContext(config, zipf_positions(config.n, config.positions, np.random.default_rng(config.seed)), bar)
        built: dict = {module: module.build(context) for module in order}
    finally:
        bar.close()
    results: list[SectionResult] = [built[module] for module in sections]
    timings: dict = {}
    for result in results:
        timings |= result.timings
    seconds = time.perf_counter() - start
    timings["wall_seconds"] = seconds
    document = Document(
        "Multi-draft speculative sampling: acceptance-gap report",
        (_overview(config, seconds, real in sections), *(result.section for result in results)),
    )
    data = {
        "config": config.to_json(),
        "sections": {result.key: result.data for result in results},
        "timings": timings,
        "environment": _environment(),
    }
    return Report(document, data, seconds)


def write_report(report: Report, out: str | os.PathLike, force: bool = False) -> dict[str, Path]:
    """Write ``report`` into ``out`` (see :func:`multidraft.report.render.prepare_output`)."""
    return write_report_files(report.document, report.results, prepare_output(out, force))
