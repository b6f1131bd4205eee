"""``multidraft cones``: derive the optimal-acceptance formula (or Theorem 2) by double description.

Examples::

    multidraft cones --n 3 --k 3                 # P* = min over the listed formulas, T beside each
    multidraft cones --n 3 --k 2 --unit          # P* = 1 iff every inequality holds
    multidraft cones --n 3 --k 2 --law independent --json

``--json`` prints ``{"formulas": [...]}`` (or ``{"inequalities": [...]}`` with ``--unit``,
each ``"lhs >= rhs"``): strings that :func:`sympy.sympify` parses, in the symbols ``p0..``
and ``q0..`` (``q1_0.., q2_0..`` for independent drafts), with the recovered sets in
``"subsets"`` (null when a formula is not of the cut form) and the enumeration sizes.
"""

from __future__ import annotations

import argparse
import json

from multidraft.cli._laws import LazyChoices


def _cone_laws() -> tuple[str, ...]:
    from multidraft.lp._structure import CONE_LAWS

    return CONE_LAWS


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``cones`` sub-command."""
    parser = subparsers.add_parser(
        "cones",
        help="derive P* (or the acceptance-one inequalities) from the dual polyhedron's vertices",
        description="Enumerate the dual of the acceptance LP exactly (pycddlib, double description) "
        "and turn its vertices into formulas whose minimum is the optimal acceptance P*; with "
        "--unit, turn the extreme rays of the acceptance-one cone into the inequalities of "
        "Theorem 2. Symbols: p0.. target, q0.. draft (q1_0.., q2_0.. for independent drafts).",
    )
    parser.add_argument("--n", type=int, required=True, help="vocabulary size (>= 1)")
    parser.add_argument("--k", type=int, required=True, help="number of drafts (>= 1)")
    parser.add_argument("--law", choices=LazyChoices(_cone_laws), default="iid", help="draft law (default iid)")
    parser.add_argument("--unit", action="store_true", help="acceptance-one cone (Theorem 2) instead of P*")
    output = parser.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="machine-readable output (sympify-able strings)")
    output.add_argument("--latex", action="store_true", help="LaTeX align* block")
    parser.set_defaults(func=run)


def _set(subset: tuple[int, ...] | None) -> str:
    if subset is None:
        return "(not a cut)"
    if not subset:
        return "∅ (or Ω)"
    return "{" + ", ".join(map(str, subset)) + "}"


def _json_rows(args: argparse.Namespace, name: str, rows: list) -> dict:
    """The part of the JSON both modes share: the problem and the rows (text, subset)."""
    return {
        "n": args.n,
        "k": args.k,
        "law": args.law,
        name: [text for _, text, _ in rows],
        "subsets": [None if t is None else list(t) for t, _, _ in rows],
    }


def _header(result, kind: str) -> str:
    s = result.structure
    atoms = "multisets" if s.merged else "tuples"
    return f"n={s.n}, k={s.k}, law={s.law} ({len(s.atoms)} draft {atoms}); {kind}"


def run(args: argparse.Namespace) -> int:
    """Derive and print; returns the exit status."""
    from multidraft.lp.cones import acceptance_formulas, unit_inequalities

    if args.unit:
        cone = unit_inequalities(args.n, args.k, args.law)
        names = _latex_names(cone.structure)
        rows = [(i.subset, str(i), f"{_tex(i.lhs, names)} &\\geq {_tex(i.rhs, names)}") for i in cone.inequalities]
        if args.json:
            print(
                json.dumps(
                    _json_rows(args, "inequalities", rows)
                    | {
                        "trivial": [str(i) for i in cone.trivial],
                        "equalities": [f"Eq({lhs}, {rhs})" for lhs, rhs in cone.equalities],
                        "rays": cone.rays,
                        "lineality": cone.lineality,
                        "matches_subset_family": cone.matches_subset_family,
                    }
                )
            )
            return 0
        if args.latex:
            _print_latex([(t, tex) for t, _, tex in rows], "P^* = 1 \\iff")
            return 0
        print(_header(cone, f"{cone.rays} extreme rays, lineality {cone.lineality}"))
        print("P* = 1 iff all of these hold:")
        for subset, text, _ in rows:
            print(f"  T = {_set(subset):<14} {text}")
        for lhs, rhs in cone.equalities:
            print(f"  {'':18} {lhs} = {rhs}")
        print(f"plus {len(cone.trivial)} trivial rays (all coefficients >= 0, e.g. D(x) >= 0).")
        verdict = "exactly" if cone.matches_subset_family else "NOT exactly"
        print(f"The inequalities are {verdict} p(T) >= P_D(set(X) ⊆ T) over ∅ ≠ T ⊊ Ω.")
        return 0

    result = acceptance_formulas(args.n, args.k, args.law)
    names = _latex_names(result.structure)
    rows = [(f.subset, str(f.expression), _tex(f.expression, names)) for f in result.formulas]
    if args.json:
        print(
            json.dumps(
                _json_rows(args, "formulas", rows)
                | {
                    "vertices": result.vertices,
                    "rays": result.rays,
                    "lineality": result.lineality,
                    "matches_subset_family": result.matches_subset_family,
                    "certified": result.certified,
                }
            )
        )
        return 0
    if args.latex:
        _print_latex([(t, "& " + tex) for t, _, tex in rows], "P^* = \\min")
        return 0
    print(_header(result, f"{result.vertices} vertices, {result.rays} rays, lineality {result.lineality}"))
    print("P* = min over:")
    for subset, text, _ in rows:
        print(f"  T = {_set(subset):<14} {text}")
    verdict = "exactly" if result.matches_subset_family else "NOT exactly"
    print(f"The formulas are {verdict} p(T) + 1 - P_D(set(X) ⊆ T) over T ⊆ Ω (T = ∅ and Ω give 1).")
    if result.missing_subsets:
        print("Sets without a formula (not vertices): " + ", ".join(_set(t) for t in result.missing_subsets))
    if result.certified:
        print("Each formula is the strict unique minimum at an exact witness point: none can be dropped.")
    return 0


def _tex(expression, names: dict) -> str:
    import sympy

    return sympy.latex(expression, symbol_names=names)


def _latex_names(structure) -> dict:
    """LaTeX names: p_{y}, q_{y}, and q^{(i)}_{y} for the i-th of several draft distributions."""
    names = {symbol: f"p_{{{y}}}" for y, symbol in enumerate(structure.target)}
    several = len(structure.drafts) > 1
    for i, family in enumerate(structure.drafts, start=1):
        for y, symbol in enumerate(family):
            names[symbol] = f"q^{{({i})}}_{{{y}}}" if several else f"q_{{{y}}}"
    return names


def _print_latex(rows: list[tuple[tuple[int, ...] | None, str]], lead: str) -> None:
    print("\\begin{align*}")
    print(f"  {lead} \\Bigl\\{{ \\\\")
    for index, (subset, tex) in enumerate(rows):
        end = "," if index < len(rows) - 1 else ""
        if subset is None:
            note = ""
        elif subset:
            note = f" && T = \\{{{', '.join(map(str, subset))}\\}}"
        else:
            note = " && T = \\emptyset"
        print(f"  {tex}{end}{note} \\\\")
    print("  \\Bigr\\}")
    print("\\end{align*}")
