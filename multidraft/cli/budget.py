"""``multidraft budget``: which tree and which verifier for a node budget N.

On a real model (it drafts for itself at ``--draft-temperature``), from measured positional
acceptance, Sequoia's dynamic programme per verifier, with 95% cluster-bootstrap intervals,
the gain over SpecInfer chains and the speed-up predicted from latencies measured here::

    multidraft budget --model default --draft-temperature 1.0 --target-temperature 0.6

``--drafted P`` then drafts the DP's shape of the largest budget and the best SpecInfer chains
on P bundled prompts and scores every verifier on every drafted tree by its exact
E[τ | tree] (:mod:`multidraft.report.budget_blocks`; ``benchmarks/bench_budget_real.py`` runs
it at length)::

    multidraft budget --model default --budget 16 --drafted 5 --no-latency

From given positional acceptances a_1, a_2, … (the probability that the i-th drafted child is
the accepted one) -- the DP alone, no model::

    multidraft budget --acceptance 0.6,0.15,0.07 --budget 4 8 16 --json
"""

from __future__ import annotations

import argparse
import json

from multidraft.cli._lists import comma_list

_acceptances = comma_list(float, "comma-separated numbers a1,a2,... in [0, 1]")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``budget`` sub-command."""
    parser = subparsers.add_parser(
        "budget",
        help="the best tree shape and verifier for a node budget (Sequoia's DP)",
        description="For each node budget N, the tree shape that maximises tokens per target call under "
        "Sequoia's positional-acceptance model, per verifier; on a real model with intervals, the gain over "
        "SpecInfer chains and the predicted speed-up.",
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--model", help="model spec for load_model ('default': the bundled SmolLM2), drafting for itself")
    source.add_argument("--acceptance", type=_acceptances, help="positional acceptances a1,a2,... (no model)")
    parser.add_argument("--draft", default=None, help="draft model spec sharing the model's tokenizer (default: the model drafts for itself)")
    parser.add_argument("--budget", type=int, nargs="+", default=[4, 8, 16, 32, 64], metavar="N", help="node budgets (default 4 8 16 32 64)")
    parser.add_argument("--max-depth", type=int, default=None, help="largest tree depth (default: N)")
    parser.add_argument("--target-temperature", type=float, default=0.6, help="target temperature (default 0.6)")
    parser.add_argument("--draft-temperature", type=float, default=1.0, help="draft temperature (default 1.0)")
    parser.add_argument("--prompts", type=int, default=5, help="bundled prompts, in turn from each task (default 5)")
    parser.add_argument("--max-new-tokens", type=int, default=32, help="positions per prompt (default 32)")
    parser.add_argument("--width", type=int, default=8, help="most children per node B (default 8)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the sampling and the bootstrap (default 0)")
    parser.add_argument("--no-latency", action="store_true", help="skip the latency measurement (no speed-up)")
    parser.add_argument(
        "--drafted", type=int, default=None, metavar="P",
        help="then draft the DP's shape of the largest budget and the best SpecInfer chains on P bundled prompts, every "
        "verifier scored on every drafted tree (with --model)",
    )  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Solve the DP (given acceptances) or measure and answer on the model; print the table."""
    if args.max_depth is not None and args.max_depth < 1:
        raise ValueError(f"max-depth: must be >= 1, got {args.max_depth}")
    if any(n < 1 or n > 64 for n in args.budget):
        raise ValueError(f"budget: every N must lie in 1..64, got {args.budget}")
    if args.acceptance is not None and args.draft is not None:
        raise ValueError("draft: a draft model needs --model (the target)")
    if args.drafted is not None and args.acceptance is not None:
        raise ValueError("drafted: drafting trees needs a model (--model), not --acceptance")
    if args.drafted is not None and not 1 <= args.drafted <= 30:
        raise ValueError(f"drafted: expected 1..30 bundled prompts, got {args.drafted}")
    if args.acceptance is not None:
        from multidraft.trees.budget import sequoia_tree

        trees = [sequoia_tree(args.acceptance, n, max_depth=args.max_depth) for n in args.budget]
        if args.json:
            print(json.dumps({"acceptance": args.acceptance, "budgets": [tree.as_dict() for tree in trees]}))
            return 0
        print("N    E[tau+1]  nodes  depth  nodes per depth")
        for tree in trees:
            row = tree.as_dict()
            print(f"{tree.budget:<4} {tree.block_efficiency:8.4f}  {tree.nodes:5d}  {row['depth']:5d}  {row['level_widths']}")
        return 0
    from multidraft.report.budget_real import answer_text, real_budget

    if args.prompts < 1 or args.prompts > 30:
        raise ValueError(f"prompts: expected 1..30 bundled prompts, got {args.prompts}")
    result = real_budget(
        args.model, draft=args.draft, target_temperature=args.target_temperature, draft_temperature=args.draft_temperature,
        prompts=args.prompts, max_new_tokens=args.max_new_tokens, budgets=args.budget, width=args.width,
        max_depth=args.max_depth, seed=args.seed, latency=not args.no_latency,
    )  # fmt: skip
    if args.drafted is not None:
        from multidraft.report.budget_blocks import blocks_text, live_check

        result["drafted_trees"] = live_check(
            args.model, result["positional_acceptance"], draft=args.draft, budget=max(args.budget), prompts=args.drafted,
            max_new_tokens=args.max_new_tokens, target_temperature=args.target_temperature,
            draft_temperature=args.draft_temperature, seed=args.seed,
        )  # fmt: skip
    from multidraft.report.budget_blocks import token_optimal_caveat

    result["caveat"] = token_optimal_caveat(result)
    if args.json:
        print(json.dumps(result))
        return 0
    print(answer_text(result))
    print(result["caveat"])
    if args.drafted is not None:
        drafted = result["drafted_trees"]
        print(f"drafted trees, N = {drafted['budget']} (DP shape for {drafted['dp_walk']}; predicted: the positional model)")
        print(blocks_text(drafted["answer"], drafted["predicted"]))
    return 0

