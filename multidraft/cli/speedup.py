"""``multidraft speedup``: block efficiency, walltime improvement and the best draft length.

Single chain (one acceptance α)::

    multidraft speedup --acceptance 0.8 --length 4 --cost-ratio 0.05

Tree of K drafts (acceptances a_1..a_K of the token-level scheme with 1..K live drafts)::

    multidraft speedup --acceptance 0.6,0.75,0.8 --k 3 --length 4 --cost-ratio 0.05 --json

The walltime improvement is ``E[tokens per call] / (L·c + 1)``: c is the time of one draft step
(all K drafts together) over one target call, and the target verifies in one call.
"""

from __future__ import annotations

import argparse
import json

from multidraft.cli._lists import comma_list

_acceptances = comma_list(float, "a number or comma-separated numbers a1,a2,... in [0, 1]")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``speedup`` sub-command."""
    parser = subparsers.add_parser(
        "speedup",
        help="block efficiency and walltime improvement of speculative decoding",
        description="Expected tokens per target call (block efficiency) and Leviathan's walltime "
        "improvement E[tokens]/(L*c + 1) for one draft chain, or for K drafts in the i.i.d. "
        "tree model; plus the draft length that maximises the improvement.",
    )
    parser.add_argument(
        "--acceptance",
        required=True,
        type=_acceptances,
        help="per-token acceptance alpha; with --k K > 1, K values a1,...,aK: the acceptance of the "
        "token-level scheme with 1..K live drafts",
    )
    parser.add_argument("--length", required=True, type=int, help="draft length L >= 1")
    parser.add_argument(
        "--cost-ratio", required=True, type=float, help="c = time of one draft step / time of one target call"
    )
    parser.add_argument("--k", type=int, default=None, help="number of drafts K (default: number of acceptances)")
    parser.add_argument(
        "--survival",
        type=float,
        default=0.0,
        help="tree model: probability that a non-selected live draft agrees with the accepted token "
        "(0 = distinct siblings, e.g. drafts without replacement; default 0)",
    )
    parser.add_argument("--max-length", type=int, default=64, help="largest L searched for the best length")
    parser.add_argument("--json", action="store_true", help="print a JSON object")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Compute and print the block efficiency, walltime improvement and best length."""
    from multidraft.theory.speed import best_length, tree_block_efficiency

    acceptance = args.acceptance
    k = len(acceptance) if args.k is None else args.k
    if k < 1:
        raise ValueError(f"k: the number of drafts must be >= 1, got {k}")
    if len(acceptance) != k:
        raise ValueError(
            f"acceptance: --k {k} needs {k} values a1,...,a{k} (acceptance with 1..{k} live drafts), "
            f"got {len(acceptance)}"
        )
    efficiency = tree_block_efficiency(acceptance, args.length, args.survival)  # validates a, L, survival
    if args.max_length < 1:
        raise ValueError(f"max-length: must be >= 1, got {args.max_length}")
    searched = max(args.max_length, args.length)
    curve = best_length(acceptance, args.cost_ratio, max_length=searched, survival=args.survival)
    improvement = float(curve.speedup[0, args.length - 1])
    result = {
        "block_efficiency": efficiency,
        "walltime_improvement": improvement,
        "best_length": curve.best_length,
    }
    if args.json:
        print(json.dumps(result))
        return 0
    model = "single chain" if k == 1 else f"i.i.d. tree, K={k}, survival={args.survival:g}"
    print(f"model:                {model}")
    print(f"block efficiency:     {efficiency:.6g} tokens per target call (L={args.length})")
    print(f"walltime improvement: {improvement:.6g}x (cost ratio c={args.cost_ratio:g})")
    print(f"best length:          L={curve.best_length} ({curve.best_speedup:.6g}x; searched 1..{searched})")
    return 0
