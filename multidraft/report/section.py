"""What a report section is, for :mod:`multidraft.report.build` and the section modules.

Each section of the report is one module (``figure2``, ``gap_table``, ``truncation``,
``speedup``, ``real``) with two functions:

* ``units(config) -> int``: how many steps it will report to the progress bar;
* ``build(context) -> SectionResult``: compute its numbers, draw its figure, write its text.

:class:`BuildContext` is what every section may read (the configuration, the shared synthetic
positions, the progress bar); :class:`SectionResult` is what it gives back: the rendered
:class:`~multidraft.report.render.Section`, its reproducible numbers for ``results.json``
and its wall-clock timings, kept apart.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TypeVar

from multidraft.report.config import ReportConfig
from multidraft.report.positions import PositionSet
from multidraft.report.render import Section

__all__ = ["BuildContext", "SectionResult", "ReportProgress", "progress_bar", "fmt", "cell"]

Item = TypeVar("Item")


class ReportProgress:
    """The report's one progress bar on stderr: every step of every section, labelled with
    the stage running ("gap table: iid K=4 T=1.2"). Drawn only when stderr is a terminal (a
    pipe or a log file gets no bar lines); ``enabled=False``: every call is a no-op."""

    def __init__(self, total: int, enabled: bool) -> None:
        self._bar = None
        if enabled:
            from tqdm.auto import tqdm  # noqa: PLC0415 -- the report extra

            self._bar = tqdm(
                total=total,
                desc="report",
                unit="step",
                leave=False,
                file=sys.stderr,
                disable=None,  # tqdm: no bar unless stderr is a terminal
                bar_format="{desc}: {n}/{total} |{bar}| [{elapsed}<{remaining}] {postfix}",
            )

    def stage(self, label: str) -> None:
        """Show ``label`` as the stage now running."""
        if self._bar is not None:
            self._bar.set_postfix_str(label, refresh=True)

    def advance(self, steps: int = 1) -> None:
        """Count ``steps`` more steps as done."""
        if self._bar is not None:
            self._bar.update(steps)

    def track(self, items: Iterable[Item], label: Callable[[Item], str]) -> Iterator[Item]:
        """Yield each item with its stage label shown, counting one step once its work is done."""
        for item in items:
            self.stage(label(item))
            yield item
            self.advance()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


@contextlib.contextmanager
def progress_bar(progress: bool | ReportProgress, total: int) -> Iterator[ReportProgress]:
    """``progress`` itself when it is a bar (a section of the whole report), else a bar of its
    own with ``total`` steps when True (a computation called on its own, closed at the end),
    else a silent one."""
    if isinstance(progress, ReportProgress):
        yield progress
        return
    bar = ReportProgress(total, bool(progress))
    try:
        yield bar
    finally:
        bar.close()


@dataclass(frozen=True)
class BuildContext:
    """What every section may read: the configuration, the synthetic positions drawn from its
    seed (shared by the gap table, the truncation sweep and the speed-up) and the progress bar."""

    config: ReportConfig
    positions: PositionSet
    progress: ReportProgress


@dataclass(frozen=True)
class SectionResult:
    """A built section: ``results["sections"][key] = data``; ``timings`` are merged into
    ``results["timings"]`` (wall-clock numbers, which vary between runs)."""

    key: str
    section: Section
    data: dict
    timings: dict = field(default_factory=dict)


def fmt(value: float | None, digits: int = 4) -> str:
    """A number for a table cell; ``—`` for a missing one."""
    return "—" if value is None else f"{value:.{digits}f}"


def cell(value: float | None, optimal: float) -> str:
    """``value (share of the optimum %)`` for a table cell; ``—`` for a missing one."""
    if value is None:
        return "—"
    return f"{value:.4f} ({100 * value / optimal:.1f}%)"
