"""``multidraft acceptance``: the optimal acceptance and each scheme's, for one (p, q, K).

::

    multidraft acceptance                                   # the built-in example
    multidraft acceptance --target 12/25,6/25,4/25,3/25 --draft 1/4,1/4,1/4,1/4 --k 2 --exact --json
    multidraft acceptance --target 0.5,0.3,0.2 --draft 0.2,0.3,0.5 --draft 0.6,0.2,0.2 --scheme all
    multidraft acceptance --family zipf --n 1000 --k 4 --draft-temperature 1.5 --scheme specinfer
    multidraft acceptance --target-logits p.npy --draft-logits q.npy --k 2 --draft-temperature 0.8

From K drafts at a temperature to a number: ``--family zipf --n N`` (``p_(r) ∝ r^(-s)``,
``--exponent s``, token i of rank i + 1, as the report's gap table draws its targets) or
``--family dirichlet --n N`` (``--alpha``, ``--seed``) gives the logits ``z = log p``, and
``--target-logits``/``--draft-logits`` read them from ``.npy`` files (one row of n logits; a
draft file may hold several rows, one per independent draft; without ``--draft-logits`` the
drafts use the target's logits, as a model drafting for itself). The target is
``softmax(z / --target-temperature)`` and each draft ``softmax(z_draft / T)`` for each
``--draft-temperature T``: one value and ``--k`` for K drafts of one law (``--law``), K values
for K independent drafts.

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
The table prints ``--digits`` significant digits (default 6); ``--json`` keeps every digit.
"""

from __future__ import annotations

import argparse
import inspect
import json

from multidraft.cli import ROUNDING, LazyHelp, add_verbose, shown_probability
from multidraft.cli._laws import LAWS, LazyChoices, build_law, law_from_drafts

#: The built-in example: Khisti et al., Section 3 (uniform draft, acceptance one).
EXAMPLE_TARGET = "1/3,1/6,1/2"
EXAMPLE_DRAFT = "1/3,1/3,1/3"
EXAMPLE_K = 2
DEFAULT_SCHEMES = ("single",)
#: Built-in families of target distributions (:mod:`multidraft.theory.laws`) whose
#: logarithms are the logits that ``--target-temperature`` and ``--draft-temperature`` act on.
FAMILIES = ("zipf", "dirichlet")
#: Significant digits of the table's values (``--digits``); JSON keeps full precision.
DIGITS = 6


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
    logits = parser.add_argument_group(
        "from logits and temperatures",
        "a built-in family or .npy logits instead of --target/--draft; p = softmax(z / target T), "
        "q = softmax(z_draft / draft T)",
    )
    logits.add_argument("--family", choices=FAMILIES, default=None, help="target logits z = log p of a built-in family on --n tokens")
    logits.add_argument("--n", type=int, default=None, help="vocabulary size of --family")
    logits.add_argument("--exponent", type=float, default=None, help="zipf: p_(r) ∝ r^(-exponent) over ranks (default 1.1)")
    logits.add_argument("--alpha", type=float, default=None, help="dirichlet: concentration (default 1.0)")
    logits.add_argument("--seed", type=int, default=None, help="dirichlet: seed of the draw (default 0)")
    logits.add_argument("--target-logits", default=None, metavar="FILE.npy", help="target logits: a .npy file of n numbers")
    logits.add_argument(
        "--draft-logits", default=None, metavar="FILE.npy",
        help="draft logits: a .npy file of n numbers, or [m, n] for m independent drafts (default: the target's logits)",
    )  # fmt: skip
    logits.add_argument("--target-temperature", type=float, default=None, metavar="T", help="target temperature (default 1.0)")
    logits.add_argument(
        "--draft-temperature", type=float, nargs="+", default=None, metavar="T",
        help="draft temperature: one value (with --k) or one per independent draft (default 1.0)",
    )  # fmt: skip
    parser.add_argument("--exact", action="store_true", help="exact fractions (inputs must be fractions)")
    parser.add_argument(
        "--digits", type=int, default=DIGITS,
        help=f"significant digits of the table's values (default {DIGITS}; --json keeps every digit)",
    )  # fmt: skip
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

    if not 1 <= args.digits <= 17:
        raise ValueError(f"digits: expected 1 to 17 significant digits, got {args.digits}")
    source = None
    if _from_logits(args):
        target, law, source = _logit_inputs(args)
    else:
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
        if source is not None:
            payload["source"] = source
        if skipped:
            payload["skipped"] = skipped
        if out_of_range:
            payload["out_of_range"] = out_of_range
        print(json.dumps(payload))
        return 0
    optimum = values.get("optimal")
    print(f"law {law.name}, k = {law.k}, n = {law.n}" + (" (exact)" if args.exact else "") + _describe(source))
    print(f"{'scheme':<14} {'acceptance':>22} {'of optimum':>11}")
    for name, value in values.items():
        shown = str(value) if args.exact else f"{shown_probability(value):#.{args.digits}g}"
        ratio = f"{float(value) / float(optimum):.4f}" if optimum else ""
        print(f"{name:<14} {shown:>22} {ratio:>11}")
    if skipped:
        print(f"not exact, skipped: {', '.join(skipped)}")
    for name, reason in out_of_range.items():
        print(f"out of range: {name} ({reason})")
    return 0


# -------------------------------------------------------------------- logits and temperatures

#: The options of the logits route, by the flag that names them.
_LOGIT_OPTIONS = {
    "--family": "family",
    "--n": "n",
    "--exponent": "exponent",
    "--alpha": "alpha",
    "--seed": "seed",
    "--target-logits": "target_logits",
    "--draft-logits": "draft_logits",
    "--target-temperature": "target_temperature",
    "--draft-temperature": "draft_temperature",
}


def _from_logits(args: argparse.Namespace) -> bool:
    """Whether the distributions come from logits (any option of that route is given); mixing
    them with ``--target``/``--draft`` probabilities or ``--exact`` is refused."""
    given = [flag for flag, name in _LOGIT_OPTIONS.items() if getattr(args, name) is not None]
    if not given:
        return False
    if args.target is not None or args.draft is not None:
        raise ValueError(
            f"{given[0]}: acts on logits, but --target/--draft give probabilities; use --family or --target-logits instead"
        )
    if args.family is None and args.target_logits is None:
        raise ValueError(f"{given[0]}: needs the logits it acts on: --family NAME --n N, or --target-logits FILE.npy")
    if args.family is not None and args.target_logits is not None:
        raise ValueError("family: give --family or --target-logits, not both")
    if args.exact:
        raise ValueError("exact: softmax of logits gives floats; drop --exact (or give fractions with --target/--draft)")
    unused = {"zipf": ("--alpha", "--seed"), "dirichlet": ("--exponent",), None: ("--n", "--exponent", "--alpha", "--seed")}
    for flag in unused[args.family]:
        if getattr(args, _LOGIT_OPTIONS[flag]) is not None:
            what = f"--family {args.family}" if args.family else "--target-logits"
            raise ValueError(f"{flag}: not a parameter of {what}")
    if args.draft_logits is not None and args.target_logits is None:
        raise ValueError("draft-logits: give the target's too (--target-logits), or a --family for both")
    return True


def _load_logits(path: str, flag: str):
    """The logits saved in ``path`` (``numpy.save``), as float64 ``[n]`` or ``[m, n]``."""
    import numpy as np

    try:
        values = np.load(path, allow_pickle=False)
    except OSError as error:
        raise OSError(f"{flag}: cannot read {path} ({error.strerror or error})") from None
    except ValueError as error:  # a pickled object array, or not an .npy file at all
        raise ValueError(f"{flag}: {path} is not a numeric .npy array ({error})") from None
    if not (np.issubdtype(values.dtype, np.floating) or np.issubdtype(values.dtype, np.integer)):
        raise ValueError(f"{flag}: {path} holds {values.dtype} values, not numbers")
    return np.asarray(values, dtype=np.float64)


def _logit_inputs(args: argparse.Namespace):
    """``(target, law, source)`` from a family or ``.npy`` logits and the temperatures:
    ``p = softmax(z / T_target)``, ``q_i = softmax(z_i / T_i)``."""
    import numpy as np

    from multidraft.theory import check_count, dirichlet, softmax, zipf

    target_t = 1.0 if args.target_temperature is None else args.target_temperature
    draft_ts = [1.0] if args.draft_temperature is None else args.draft_temperature
    if args.family is not None:
        n = check_count(args.n, "n", meaning="the vocabulary size of --family") if args.n is not None else None
        if n is None:
            raise ValueError(f"n: --family {args.family} needs --n (the vocabulary size)")
        if args.family == "zipf":
            exponent = 1.1 if args.exponent is None else args.exponent
            base = zipf(n, exponent)
            source = {"family": "zipf", "n": n, "exponent": exponent}
        else:
            alpha, seed = (1.0 if args.alpha is None else args.alpha), (0 if args.seed is None else args.seed)
            if seed < 0:
                raise ValueError(f"seed: expected an integer >= 0, got {seed}")
            base = dirichlet(n, alpha, np.random.default_rng(seed))
            source = {"family": "dirichlet", "n": n, "alpha": alpha, "seed": seed}
        with np.errstate(divide="ignore"):  # a token of probability 0 has logit -inf
            target_logits = np.log(base)
        draft_logits = [target_logits]
    else:
        target_logits = _load_logits(args.target_logits, "target-logits")
        if target_logits.ndim != 1:
            raise ValueError(f"target-logits: expected one row of n logits, got shape {target_logits.shape}")
        source = {"target_logits": args.target_logits}
        draft_logits = [target_logits]
        if args.draft_logits is not None:
            rows = _load_logits(args.draft_logits, "draft-logits")
            if rows.ndim not in (1, 2) or rows.shape[-1] != target_logits.shape[0]:
                raise ValueError(
                    f"draft-logits: expected [n] or [m, n] logits with n = {target_logits.shape[0]} (the target's), got shape {rows.shape}"
                )
            draft_logits = list(rows) if rows.ndim == 2 else [rows]
            source["draft_logits"] = args.draft_logits
    if len(draft_logits) > 1 and len(draft_ts) > 1 and len(draft_logits) != len(draft_ts):
        raise ValueError(f"draft-temperature: give one value or one per draft row ({len(draft_logits)}), got {len(draft_ts)}")
    count = max(len(draft_logits), len(draft_ts))
    pick = lambda values, i: values[i] if len(values) > 1 else values[0]  # noqa: E731
    target = softmax(target_logits, _temperature(target_t, "target-temperature"))
    drafts = [softmax(pick(draft_logits, i), _temperature(pick(draft_ts, i), "draft-temperature")) for i in range(count)]
    given = "several --draft-temperature values or --draft-logits rows mean"
    law = law_from_drafts(drafts, args.k, args.law, flag="--draft-temperature", given=given)
    source |= {"target_temperature": target_t, "draft_temperatures": list(draft_ts)}
    return target, law, source


def _temperature(value: float, flag: str) -> float:
    """A temperature checked with its flag's name (softmax's own message says 'temperature')."""
    if not value >= 0 or value == float("inf"):
        raise ValueError(f"{flag}: must be a finite number >= 0, got {value}")
    return value


def _describe(source: dict | None) -> str:
    """The first line's tail for distributions from logits: where they came from, at which
    temperatures (each printed with a decimal point: 2.0 beside 0.5)."""
    if source is None:
        return ""
    if "family" in source:
        parameter = "exponent" if source["family"] == "zipf" else "alpha"
        origin = f"{source['family']}(n={source['n']}, {parameter}={source[parameter]})"
    else:
        origin = source["target_logits"] + (f", drafts from {source['draft_logits']}" if "draft_logits" in source else "")
    temperatures = ", ".join(f"{float(t)!r}" for t in source["draft_temperatures"])
    return f"; logits {origin}, target T = {float(source['target_temperature'])!r}, draft T = {temperatures}"

