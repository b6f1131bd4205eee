"""Rendering of the report: one document model, two renderers (Markdown and HTML), and output.

A report is a :class:`Document` of :class:`Section` s, each a sequence of blocks
(:class:`Paragraph`, :class:`Table`, :class:`Figure`). :func:`render_markdown` links the
figures as ``figures/<name>.png``; :func:`render_html` embeds them as base64 PNG so that
``report.html`` is a single self-contained file. Both open with a table of contents that links
every section (:func:`section_anchor`); in HTML a table's cells never wrap (a wide table scrolls
sideways instead). :func:`write_report_files` writes both, the
PNGs and ``results.json`` into a directory prepared by :func:`prepare_output`.
"""

from __future__ import annotations

import base64
import html
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "Paragraph",
    "Table",
    "Figure",
    "Section",
    "Document",
    "render_markdown",
    "render_html",
    "section_anchor",
    "prepare_output",
    "write_report_files",
]


@dataclass(frozen=True)
class Paragraph:
    """Text with light inline markup: ``code`` in backticks and **bold**."""

    text: str


@dataclass(frozen=True)
class Table:
    """A table of already formatted cells."""

    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    caption: str = ""

    def __post_init__(self) -> None:
        for row in self.rows:
            if len(row) != len(self.headers):
                raise ValueError(f"table: a row has {len(row)} cells, the header {len(self.headers)}")


@dataclass(frozen=True)
class Figure:
    """A PNG figure saved as ``figures/<name>.png``."""

    name: str
    png: bytes
    caption: str

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[A-Za-z0-9_-]+", self.name):
            raise ValueError(f"figure: name {self.name!r} must be letters, digits, '_' or '-'")


Block = Paragraph | Table | Figure


@dataclass(frozen=True)
class Section:
    """A titled section of blocks."""

    title: str
    blocks: tuple[Block, ...]


@dataclass(frozen=True)
class Document:
    """The whole report."""

    title: str
    sections: tuple[Section, ...]

    @property
    def figures(self) -> tuple[Figure, ...]:
        """Every figure of the document, in order."""
        return tuple(b for s in self.sections for b in s.blocks if isinstance(b, Figure))


def section_anchor(title: str) -> str:
    """The anchor of a section heading, as GitHub computes it for Markdown (lower case, spaces
    to hyphens, punctuation other than ``-`` and ``_`` dropped); the HTML page uses the same ids.

    >>> section_anchor("Truncated LP: acceptance and time against s")
    'truncated-lp-acceptance-and-time-against-s'
    >>> section_anchor("Optimal acceptance on three tokens (Figure 2)")
    'optimal-acceptance-on-three-tokens-figure-2'
    """
    kept = re.sub(r"[^\w\- ]", "", title.strip().lower())
    return kept.replace(" ", "-")


def _anchors(document: Document) -> list[str]:
    """One anchor per section, made unique as GitHub does (``-1``, ``-2`` for repeats)."""
    seen: dict[str, int] = {}
    anchors = []
    for section in document.sections:
        base = section_anchor(section.title)
        count = seen.get(base, 0)
        seen[base] = count + 1
        anchors.append(base if count == 0 else f"{base}-{count}")
    return anchors


def _markdown_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(document: Document) -> str:
    """The report as GitHub-flavoured Markdown, figures linked from ``figures/``.

    >>> doc = Document("R", (Section("S", (Paragraph("a `b`"), Table(("x", "y"), (("1", "2"),)))),))
    >>> print(render_markdown(doc))
    # R
    <BLANKLINE>
    **Contents**
    <BLANKLINE>
    1. [S](#s)
    <BLANKLINE>
    ## S
    <BLANKLINE>
    a `b`
    <BLANKLINE>
    | x | y |
    |---|---|
    | 1 | 2 |
    <BLANKLINE>
    """
    lines = [f"# {document.title}", ""]
    if document.sections:
        lines += ["**Contents**", ""]
        lines += [f"{i}. [{s.title}](#{a})" for i, (s, a) in enumerate(zip(document.sections, _anchors(document)), 1)]
        lines.append("")
    for section in document.sections:
        lines += [f"## {section.title}", ""]
        for block in section.blocks:
            if isinstance(block, Paragraph):
                lines += [block.text, ""]
            elif isinstance(block, Table):
                if block.caption:
                    lines += [f"*{block.caption}*", ""]
                lines.append("| " + " | ".join(_markdown_cell(h) for h in block.headers) + " |")
                lines.append("|" + "|".join("---" for _ in block.headers) + "|")
                lines += ["| " + " | ".join(_markdown_cell(c) for c in row) + " |" for row in block.rows]
                lines.append("")
            else:
                lines += [f"![{block.caption}](figures/{block.name}.png)", "", f"*{block.caption}*", ""]
    return "\n".join(lines)


def _inline_html(text: str) -> str:
    escaped = html.escape(text, quote=False)
    escaped = re.sub(r"`([^`]+)`", r"<code>\1</code>", escaped)
    return re.sub(r"\*\*([^*]+)\*\*", r"<strong>\1</strong>", escaped)


_CSS = """
body { font-family: system-ui, sans-serif; max-width: 1100px; margin: 2em auto; padding: 0 1em; line-height: 1.45; }
.table { overflow-x: auto; margin: 0.8em 0; }
table { border-collapse: collapse; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }
td { white-space: nowrap; }
nav.contents ol { columns: 2; margin: 0.4em 0 1.2em; }
th { background: #f3f3f3; } td:first-child, th:first-child { text-align: left; }
figure { margin: 1em 0; } figure img { max-width: 100%; } figcaption { font-style: italic; font-size: 0.9em; }
code { background: #f5f5f5; padding: 0 0.2em; }
"""


def render_html(document: Document) -> str:
    """The report as one self-contained HTML page; figures embedded as base64 PNG data URIs."""
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(document.title)}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>{html.escape(document.title)}</h1>",
    ]
    anchors = _anchors(document)
    if document.sections:
        items = "".join(f'<li><a href="#{a}">{html.escape(s.title)}</a></li>' for s, a in zip(document.sections, anchors))
        parts.append(f'<nav class="contents"><strong>Contents</strong><ol>{items}</ol></nav>')
    for section, anchor in zip(document.sections, anchors):
        parts.append(f'<h2 id="{anchor}">{html.escape(section.title)}</h2>')
        for block in section.blocks:
            if isinstance(block, Paragraph):
                parts.append(f"<p>{_inline_html(block.text)}</p>")
            elif isinstance(block, Table):
                caption = f"<caption>{_inline_html(block.caption)}</caption>" if block.caption else ""
                head = "".join(f"<th>{_inline_html(h)}</th>" for h in block.headers)
                body = "".join(
                    "<tr>" + "".join(f"<td>{_inline_html(c)}</td>" for c in row) + "</tr>" for row in block.rows
                )
                parts.append(f'<div class="table"><table>{caption}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>')
            else:
                data = base64.b64encode(block.png).decode("ascii")
                parts.append(
                    f'<figure><img alt="{html.escape(block.caption)}" src="data:image/png;base64,{data}">'
                    f"<figcaption>{_inline_html(block.caption)}</figcaption></figure>"
                )
    parts.append("</body></html>")
    return "\n".join(parts)


def prepare_output(out: str | os.PathLike, force: bool = False) -> Path:
    """Check (and create) the output directory before any work is done.

    Refuses an empty path (which would mean the current directory), an existing non-empty
    directory unless ``force`` (then the old report files and figures are replaced; other files
    are left alone), a path that is a file, and a location that cannot be written, each with an
    ``OSError``/``ValueError`` naming the path.
    """
    if not str(out).strip():
        raise ValueError("--out: the path is empty; name a directory for the report (e.g. --out report)")
    path = Path(out)
    if path.exists() and not path.is_dir():
        raise ValueError(f"--out: {path} exists and is not a directory")
    if path.is_dir() and any(path.iterdir()) and not force:
        raise ValueError(f"--out: {path} exists and is not empty; pass --force to overwrite the report in it")
    try:
        (path / "figures").mkdir(parents=True, exist_ok=True)
        probe = path / ".multidraft-write-test"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as error:
        raise OSError(f"--out: cannot write to {path} ({error.strerror or error})") from None
    for old in (path / "figures").glob("*.png"):
        old.unlink()
    return path


def write_report_files(document: Document, results: dict, out: Path) -> dict[str, Path]:
    """Write ``report.md``, ``report.html``, ``figures/*.png`` and ``results.json`` to ``out``.

    ``out`` must come from :func:`prepare_output`. Returns the written paths by kind.
    """
    written: dict[str, Path] = {}
    for figure in document.figures:
        target = out / "figures" / f"{figure.name}.png"
        target.write_bytes(figure.png)
        written[f"figure:{figure.name}"] = target
    written["markdown"] = out / "report.md"
    written["markdown"].write_text(render_markdown(document), encoding="utf-8")
    written["html"] = out / "report.html"
    written["html"].write_text(render_html(document), encoding="utf-8")
    written["json"] = out / "results.json"
    written["json"].write_text(json.dumps(results, indent=2, sort_keys=True, allow_nan=False) + "\n", encoding="utf-8")
    return written
