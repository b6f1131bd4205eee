"""``multidraft acceptance``: the optimal acceptance and each scheme's, for one (p, q, K).

::

    multidraft acceptance                                   # the built-in example
    multidraft acceptance --target 12/25,6/25,4/25,3/25 --draft 1/4,1/4,1/4,1/4 --k 2 --exact --json
    multidraft acceptance --target 0.5,0.3,0.2 --draft 0.2,0.3,0.5 --draft 0.6,0.2,0.2 --scheme all

Without ``--target`` the built-in example of Khisti et al. (ICLR 2025) is used:
p = (1/3, 1/6, 1/2), q uniform on three tokens, K = 2 — optimal acceptance exactly one
although TV(p, q) = 1/6.

The optimum is always reported, first, beside the schemes asked for (default: ``single``, the
single-draft baseline -- speculative sampling with one draft from the first draft
distribution, Σ min(p, q) -- whatever K is). ``--scheme all`` lists every registered scheme
that applies to the law. ``--exact`` gives
exact fractions ("num/den" strings in ``--json``) for the schemes that allow it; with
``--scheme all`` the others are listed under ``"skipped"``, and a scheme whose exact value is
beyond the size guard at this K and n under ``"out_of_range"`` with the reason (a scheme named
on its own is an error instead). ``--s`` and ``--rank-key`` need a scheme that takes them.
Probabilities that fall outside [0, 1] by rounding only (at most 1e-12) are printed clipped.
"""

from __future__ import annotations

import argparse
import inspect
import json

from multidraft.cli import ROUNDING, LazyHelp, add_verbose, shown_probability
from multidraft.cli._laws import LAWS, LazyChoices, build_law

#: The built-in example: Khisti et al., Section 3 (uniform draft, acceptance one).
EXAMPLE_TARGET = "1/3,1/6,1/2"
EXAMPLE_DRAFT = "1/3,1/3,1/3"
EXAMPLE_K = 2
DEFAULT_SCHEMES = ("single",)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``acceptance`` sub-command."""
    parser = subparsers.add_parser(
        "acceptance",
        help="optimal and per-scheme acceptance for one (target, draft, K)",
        description="Exact optimal acceptance of K drafts (min-cut) next to the acceptance of "
        "token-level selection schemes. Without --target: the built-in example "
        f"p = ({EXAMPLE_TARGET}), q = ({EXAMPLE_DRAFT}), K = {EXAMPLE_K}.",
    )
    parser.add_argument("--target", help="target distribution p, e.g. 12/25,6/25,4/25,3/25 or 0.5,0.5")
    parser.add_argument(
        "--draft",
        action="append",
        help="draft distribution q; repeat for independent non-identical drafts (K = number of drafts)",
    )
    parser.add_argument("--k", type=int, default=None, help="number of drafts K (needed with a single --draft)")
    parser.add_argument("--law", choices=LAWS, default=None, help="draft law (default iid)")
    parser.add_argument("--scheme", action="append", metavar="NAME", help=LazyHelp(_scheme_help))
    parser.add_argument("--s", type=int, default=None, help=LazyHelp(lambda: _option_help("s", "truncation size s")))
    parser.add_argument(
        "--rank-key",
        choices=LazyChoices(_rank_keys),
        default=None,
        help=LazyHelp(lambda: _option_help("rank_key", "ranking key")),
    )
    parser.add_argument("--exact", action="store_true", help="exact fractions (inputs must be fractions)")
    parser.add_argument(
        "--json",
        action="store_true",
        help=f"print one JSON object (probabilities outside [0, 1] by at most {ROUNDING:g}, i.e. rounding, "
        "are printed clipped to it, here and in the table)",
    )
    add_verbose(parser)
    parser.set_defaults(func=run)


def _scheme_help() -> str:
    from multidraft.schemes import SCHEMES

    return (
        "scheme to put beside the optimum (repeatable): one of " + ", ".join(SCHEMES) + "; or 'all' for every "
        "scheme that applies to the law; default: single. The optimum is always reported."
    )


#: Options of this command that are scheme options: passed to every scheme whose constructor
#: takes a parameter of that name.
SCHEME_OPTIONS = ("s", "rank_key")


def _rank_keys() -> tuple[str, ...]:
    from multidraft.lp.truncated import RANK_KEYS

    return RANK_KEYS


def _takers(option: str) -> list[str]:
    """The registered schemes whose constructor takes ``option``."""
    from multidraft.schemes import SCHEMES

    return [name for name, cls in SCHEMES.items() if option in inspect.signature(cls).parameters]


def _option_help(option: str, what: str) -> str:
    return f"{what} for {' and '.join(_takers(option))} (needs one of them)"


def _scheme_options(name: str, args: argparse.Namespace) -> dict:
    """The scheme options given on the command line that the scheme ``name`` takes."""
    return {option: getattr(args, option) for option in SCHEME_OPTIONS if getattr(args, option) is not None and name in _takers(option)}


def _check_options_used(requested: list[str], args: argparse.Namespace) -> None:
    """Refuse ``--s``/``--rank-key`` when no requested scheme takes it (it would be ignored)."""
    for option in SCHEME_OPTIONS:
        names = _takers(option)
        if getattr(args, option) is not None and not set(names) & set(requested):
            flag = "--" + option.replace("_", "-")
            raise ValueError(
                f"{flag}: only {' and '.join(names)} take{'s' if len(names) == 1 else ''} it, and none is requested; "
                f"add --scheme {names[0]} (or drop {flag})"
            )


def _evaluate(name: str, target, law, args: argparse.Namespace):
    """Acceptance of one scheme; ``single`` is the one-draft baseline on the first draft."""
    from multidraft.schemes import get_scheme
    from multidraft.theory import optimal_acceptance

    if name == "optimal":
        return optimal_acceptance(target, law, exact=args.exact).value
    scheme = get_scheme(name, **_scheme_options(name, args))
    if name == "single" and law.k > 1:
        law = law.single_draft()
    return scheme.acceptance(target, law, exact=args.exact)


def _format(value, exact: bool) -> str | float:
    return f"{value.numerator}/{value.denominator}" if exact else shown_probability(value)


def _out_of_range(error: Exception) -> str:
    """The reason a scheme's exact value is out of range, without the advice after ';'."""
    return str(error).splitlines()[0].split("; ")[0]


def run(args: argparse.Namespace) -> int:
    """Compute and print the acceptance of each requested scheme."""
    from multidraft.schemes import SCHEMES, schemes_for
    from multidraft.theory import parse_distribution
    from multidraft.theory.laws import ProblemTooLargeError

    if args.target is None and args.draft is None:
        target_text, drafts, k = EXAMPLE_TARGET, [EXAMPLE_DRAFT], args.k or EXAMPLE_K
    elif args.target is None or args.draft is None:
        raise ValueError("target/draft: give both --target and --draft, or neither for the built-in example")
    else:
        target_text, drafts, k = args.target, args.draft, args.k
    law = build_law(drafts, k, args.law)
    target = parse_distribution(target_text, "target")

    requested = ["optimal", *(args.scheme or DEFAULT_SCHEMES)]
    skipped: list[str] = []
    every = "all" in requested
    if every:
        requested = ["optimal", "single"] + [name for name in schemes_for(law) if name != "single"]
        if args.exact:
            skipped = [name for name in requested if name not in ("optimal",) and not SCHEMES[name].capabilities.exact_acceptance]
            requested = [name for name in requested if name not in skipped]
    _check_options_used(requested, args)
    values: dict = {}
    out_of_range: dict[str, str] = {}
    for name in dict.fromkeys(requested):
        try:
            values[name] = _evaluate(name, target, law, args)
        except ProblemTooLargeError as error:
            if not every or name == "optimal":
                raise
            out_of_range[name] = _out_of_range(error)

    if args.json:
        payload = {
            "law": law.name,
            "k": law.k,
            "n": law.n,
            "exact": args.exact,
            "acceptance": {name: _format(value, args.exact) for name, value in values.items()},
        }
        if skipped:
            payload["skipped"] = skipped
        if out_of_range:
            payload["out_of_range"] = out_of_range
        print(json.dumps(payload))
        return 0
    optimum = values.get("optimal")
    print(f"law {law.name}, k = {law.k}, n = {law.n}" + (" (exact)" if args.exact else ""))
    print(f"{'scheme':<14} {'acceptance':>22} {'of optimum':>11}")
    for name, value in values.items():
        shown = str(value) if args.exact else f"{shown_probability(value):.12f}"
        ratio = f"{float(value) / float(optimum):.4f}" if optimum else ""
        print(f"{name:<14} {shown:>22} {ratio:>11}")
    if skipped:
        print(f"not exact, skipped: {', '.join(skipped)}")
    for name, reason in out_of_range.items():
        print(f"out of range: {name} ({reason})")
    return 0
