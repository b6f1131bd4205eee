"""``multidraft lp``: the optimal-transport LP for one instance, with its plan on request.

::

    multidraft lp --target 1/3,1/6,1/2 --draft 1/3,1/3,1/3 --k 2
    multidraft lp --target 0.5,0.3,0.2 --draft 0.2,0.3,0.5 --draft 0.6,0.2,0.2 --plan --json

One ``--draft`` with ``--law iid|wor|greedy|independent`` and ``--k`` gives that law (an
``independent`` law then repeats the draft K times); repeating ``--draft`` gives independent,
non-identical drafts (K = number of drafts). Prints the optimum, the solver status, the time and
the min-cut optimum of :mod:`multidraft.theory` that certifies it (the LP's value is within 1e-9
of it, or the command fails: see :func:`multidraft.lp.transport_lp`), with the solver route that
answered; ``--plan`` adds the coupling π(x, y) and the importance weights β_y(x) read off it
(Theorem 1).
"""

from __future__ import annotations

import argparse
import json

from multidraft.cli import LazyHelp, add_verbose
from multidraft.cli._laws import LAWS, build_law


def _solver_help() -> str:
    from multidraft.lp._solve import ROUTES

    return (
        f"solver tried first: {', '.join(ROUTES)} (default HIGHS); the others are tried if its answer "
        "cannot be certified, and the one that answered is printed"
    )


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``lp`` sub-command."""
    parser = subparsers.add_parser(
        "lp",
        help="solve the optimal-transport LP over draft tuples",
        description="Optimal acceptance of K drafts by the SpecTr optimal-transport LP (cvxpy + HiGHS), "
        "certified against the closed-form min-cut (within 1e-9, or an error); with --plan also the "
        "coupling and the importance weights of Theorem 1.",
    )
    parser.add_argument("--target", required=True, help="target distribution p, e.g. 1/3,1/6,1/2 or 0.5,0.5")
    parser.add_argument(
        "--draft",
        required=True,
        action="append",
        help="draft distribution q; repeat for independent non-identical drafts (K = number of drafts)",
    )
    parser.add_argument("--k", type=int, default=None, help="number of drafts K (needed with a single --draft)")
    parser.add_argument("--law", choices=LAWS, default=None, help="draft law for a single --draft (default iid)")
    parser.add_argument(
        "--solver",
        default="HIGHS",
        help=LazyHelp(_solver_help),
    )
    parser.add_argument("--plan", action="store_true", help="also print the coupling and the importance weights")
    parser.add_argument("--json", action="store_true", help="print a JSON object")
    add_verbose(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Solve the LP and print the optimum (and the plan)."""
    from multidraft.lp._solve import CERTIFIED_GAP
    from multidraft.lp.importance import importance_from_coupling
    from multidraft.lp.transport import transport_lp
    from multidraft.theory import parse_distribution

    law = build_law(args.draft, args.k, args.law)
    target = parse_distribution(args.target, "target")
    solution = transport_lp(target, law, solver=args.solver)
    certification = solution.certification
    cut_set = [int(t) for t in certification.cut]
    result: dict = {
        "optimal": solution.acceptance,
        "status": solution.status,
        "seconds": solution.seconds,
        "solver": solution.solver,
        "route": certification.route,
        "failed_routes": list(certification.failed),
        "law": law.name,
        "k": law.k,
        "n": law.n,
        "variables": solution.variables,
        "constraints": solution.constraints,
        "min_cut": certification.min_cut,
        "min_cut_set": cut_set,
        "certified_gap": certification.gap,
    }
    selection = importance_from_coupling(solution, target, law) if args.plan else None
    if selection is not None:
        result["plan"] = {
            "tuples": solution.tuples.tolist(),
            "tuple_probs": solution.tuple_probs.tolist(),
            "merged": solution.merged,
            "coupling": solution.plan.tolist(),
            "importance_weights": selection.weights.tolist(),
            "intermediate": selection.intermediate.tolist(),
            "importance_acceptance": selection.acceptance,
        }
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"optimal acceptance  {solution.acceptance:.10g}   (min-cut {certification.min_cut:.10g}, T = {{{', '.join(map(str, cut_set))}}})")
    print(f"status              {solution.status} ({solution.solver})")
    print(f"certified           min-cut - LP = {certification.gap:.2g} (at most {CERTIFIED_GAP:g}), route {certification.route}")
    for failure in certification.failed:
        print(f"  not certified     {failure}")
    print(f"size                {solution.variables} variables, {solution.constraints} equality constraints")
    print(f"time                {solution.seconds:.4f} s")
    if selection is not None:
        kind = "multiset" if solution.merged else "tuple"
        print(f"\ncoupling pi(x, y) and importance weights beta (per {kind} position):")
        header = " ".join(f"y={y:<8d}" for y in range(law.n))
        print(f"  {kind:<14s} {'D(x)':>9s}   {header}  beta")
        for row, probability, plan_row, weights in zip(solution.tuples, solution.tuple_probs, solution.plan, selection.weights):
            cells = " ".join(f"{v:<10.4g}" for v in plan_row)
            betas = ", ".join(f"{w:.4g}" for w in weights)
            print(f"  {str(tuple(row.tolist())):<14s} {probability:9.4g}   {cells}  ({betas})")
        print(f"intermediate r: {', '.join(f'{v:.4g}' for v in selection.intermediate)}")
        print(f"sum min(p, r) = {selection.acceptance:.10g}")
    return 0
