"""``multidraft report``: build the acceptance-gap report into a directory.

    multidraft report [--out DIR] [--force] [--seed S] [--model default | --target ID --draft ID]

Without a model it builds the synthetic report (no network, about a minute on two CPUs);
``--model`` (one model drafting for itself at other temperatures) or ``--target``/``--draft``
add the real-model section. Every value and the output directory are checked before any
work starts; a build that fails removes the directory it created.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from multidraft.cli import add_verbose


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``report`` sub-command."""
    parser = subparsers.add_parser(
        "report",
        help="build the acceptance-gap report (Markdown, HTML, figures, JSON)",
        description="Build the acceptance-gap report: Figure-2 curves, the gap table on large "
        "vocabularies, the truncated LP, predicted speed-up and (with a model) real-model "
        "measurements. Writes report.md, report.html, figures/*.png and results.json.",
    )
    parser.add_argument("--out", default="report", metavar="DIR", help="output directory (default: ./report)")
    parser.add_argument("--force", action="store_true", help="overwrite the report in a non-empty --out directory")
    parser.add_argument("--seed", type=int, default=0, help="seed of every random choice (default 0)")
    models = parser.add_mutually_exclusive_group()
    models.add_argument(
        "--model",
        metavar="SPEC",
        help="add real-model measurements with one model drafting for itself at other temperatures "
        "('default' = the bundled SmolLM2-135M, or a hub id / local path)",
    )
    models.add_argument("--target", metavar="ID", help="target model for the real-model section (with --draft)")
    parser.add_argument("--draft", metavar="ID", help="draft model for the real-model section (with --target)")
    parser.add_argument("--json", action="store_true", help="print the written paths and the build time as one JSON object")
    add_verbose(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Check the output directory, build the report with progress bars on stderr, write it."""
    from multidraft.report import ReportConfig, build_report  # noqa: PLC0415
    from multidraft.report.render import prepare_output, write_report_files  # noqa: PLC0415

    if args.draft is not None and args.target is None:
        raise ValueError("--draft: a draft model needs --target (or use --model for one model)")
    if args.target is not None and args.draft is None:
        raise ValueError("--target: also give --draft (or use --model for one model drafting for itself)")
    target = args.model if args.model is not None else args.target
    config = ReportConfig(seed=args.seed, target=target, draft=args.draft)  # every value checked first
    created = not Path(args.out).exists()
    out = prepare_output(args.out, force=args.force)
    try:
        report = build_report(config, progress=True)
        written = write_report_files(report.document, report.results, out)
    except BaseException:
        if created:  # a failed build leaves no folder behind that was not there before
            shutil.rmtree(out, ignore_errors=True)
        raise
    if args.json:
        print(json.dumps({kind: str(written[kind]) for kind in ("markdown", "html", "json")} | {"seconds": report.seconds}))
        return 0
    print(f"report written to {written['html'].parent} in {report.seconds:.1f} s", file=sys.stderr)
    for kind in ("markdown", "html", "json"):
        print(written[kind])
    return 0
