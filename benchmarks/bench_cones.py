"""Benchmark: double-description derivation of P* formulas and Theorem 2 inequalities.

For each case (n, K, law) it times :func:`multidraft.lp.cones.acceptance_formulas` and
:func:`multidraft.lp.cones.unit_inequalities` (exact cddlib enumeration + sympy), reports the
numbers of vertices, rays and surviving formulas / inequalities and whether they are exactly
the min-cut family, prints a table and writes ``benchmarks/results/cones.json``.

Timing: one warm-up run (excluded), then the median of ``--repeats`` runs, each after
clearing sympy's cache so that no run reuses another's expressions. Budgets from issue 5:
(3, 3) <= 60 s and (4, 2) <= 30 s. The machine is shared (2 cores, other jobs running), so
wall times are noisy; the load average at start and end is recorded next to them.

Usage: ``python benchmarks/bench_cones.py [--repeats 3] [--quick]``
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from _common import measure, provenance, write_json
from sympy.core.cache import clear_cache

from multidraft.lp.cones import acceptance_formulas, cone_size, unit_inequalities

CASES = [
    (2, 2, "iid"),
    (3, 2, "iid"),
    (4, 2, "iid"),
    (3, 3, "iid"),
    (2, 3, "iid"),
    (2, 4, "iid"),
    (2, 5, "iid"),
    (2, 6, "iid"),
    (3, 2, "independent"),
    (3, 2, "wor"),
    (5, 2, "iid"),
    (4, 2, "wor"),
    (4, 3, "iid"),
]
#: Wall-time budgets (seconds) for the formula derivation, from issue 5.
BUDGETS = {(3, 3, "iid"): 60.0, (4, 2, "iid"): 30.0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="only the budgeted cases, one repeat")
    args = parser.parse_args()
    cases = list(BUDGETS) if args.quick else CASES
    repeats = 1 if args.quick else args.repeats

    import cdd  # noqa: F401  (fail early without pycddlib; its version is in the provenance)

    run_provenance = provenance()  # taken at the start: its load average is the one before the runs
    rows = []
    for n, k, law in cases:
        # warm-up run excluded (imports, lambdify, cddlib initialisation); sympy cache cleared before each timed run
        timing = measure(lambda: acceptance_formulas(n, k, law), repeats, before=clear_cache)
        formulas, seconds, all_times = timing.result, timing.median, timing.wall
        timing = measure(lambda: unit_inequalities(n, k, law), repeats, before=clear_cache)
        cone, unit_seconds, unit_times = timing.result, timing.median, timing.wall
        variables, constraints = cone_size(n, k, law)
        budget = BUDGETS.get((n, k, law))
        rows.append(
            {
                "n": n,
                "k": k,
                "law": law,
                "atoms": len(formulas.structure.atoms),
                "variables": variables,
                "constraints": constraints,
                "vertices": formulas.vertices,
                "rays": formulas.rays,
                "lineality": formulas.lineality,
                "formulas": len(formulas.formulas),
                "subsets": [list(t) if t is not None else None for t in formulas.subsets],
                "matches_subset_family": formulas.matches_subset_family,
                "certified": formulas.certified,
                "seconds": seconds,
                "seconds_all": all_times,
                "unit_rays": cone.rays,
                "unit_inequalities": len(cone.inequalities),
                "unit_trivial": len(cone.trivial),
                "unit_matches_subset_family": cone.matches_subset_family,
                "unit_seconds": unit_seconds,
                "unit_seconds_all": unit_times,
                "budget_seconds": budget,
                "within_budget": None if budget is None else seconds <= budget,
            }
        )
        r = rows[-1]
        print(
            f"{law:>11} n={n} K={k}: {r['vertices']:>3} vertices {r['rays']:>3} rays -> {r['formulas']:>3} formulas "
            f"(family: {r['matches_subset_family']}, certified: {r['certified']}) {seconds:7.3f} s | unit cone "
            f"{r['unit_rays']:>3} rays -> {r['unit_inequalities']:>3} inequalities "
            f"(family: {r['unit_matches_subset_family']}) {unit_seconds:7.3f} s"
            + ("" if budget is None else f" [budget {budget:.0f} s: {'ok' if r['within_budget'] else 'EXCEEDED'}]"),
            flush=True,
        )

    header = (
        f"{'law':>11} {'n':>2} {'K':>2} {'vars':>5} {'cons':>5} {'vert':>5} {'rays':>5} {'form':>5} "
        f"{'family':>6} {'sec':>8} | {'urays':>5} {'ineq':>5} {'family':>6} {'sec':>8}"
    )
    print()
    print(header)
    print("-" * len(header))
    for r in rows:
        print(
            f"{r['law']:>11} {r['n']:>2} {r['k']:>2} {r['variables']:>5} {r['constraints']:>5} {r['vertices']:>5} "
            f"{r['rays']:>5} {r['formulas']:>5} {str(r['matches_subset_family']):>6} {r['seconds']:>8.3f} | "
            f"{r['unit_rays']:>5} {r['unit_inequalities']:>5} {str(r['unit_matches_subset_family']):>6} "
            f"{r['unit_seconds']:>8.3f}"
        )

    output = {
        "benchmark": "cones",
        "provenance": run_provenance,
        "load_average_end": os.getloadavg(),
        "repeats": repeats,
        "timing": "median wall time after one warm-up run; sympy cache cleared before each run",
        "results": rows,
    }
    path = write_json(Path(__file__).resolve().parent / "results" / "cones.json", output)
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
