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
import datetime
import json
import os
import platform
import statistics
import subprocess
import time
from pathlib import Path

import sympy
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


def timed(function, repeats: int):
    function()  # warm-up (imports, lambdify, cddlib initialisation)
    times, result = [], None
    for _ in range(repeats):
        clear_cache()
        start = time.perf_counter()
        result = function()
        times.append(time.perf_counter() - start)
    return result, statistics.median(times), times


def git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.stdout.strip() or None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="only the budgeted cases, one repeat")
    args = parser.parse_args()
    cases = list(BUDGETS) if args.quick else CASES
    repeats = 1 if args.quick else args.repeats

    import cdd  # noqa: F401  (version below)
    from importlib.metadata import version

    load_start = os.getloadavg()
    rows = []
    for n, k, law in cases:
        formulas, seconds, all_times = timed(lambda: acceptance_formulas(n, k, law), repeats)
        cone, unit_seconds, unit_times = timed(lambda: unit_inequalities(n, k, law), repeats)
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
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "git_commit": git_commit(),
        "machine": {
            "platform": platform.platform(),
            "processor": platform.processor(),
            "cpu_count": os.cpu_count(),
            "python": platform.python_version(),
            "load_average_start": load_start,
            "load_average_end": os.getloadavg(),
        },
        "versions": {"pycddlib": version("pycddlib"), "sympy": sympy.__version__},
        "repeats": repeats,
        "timing": "median wall time after one warm-up run; sympy cache cleared before each run",
        "results": rows,
    }
    path = Path(__file__).resolve().parent / "results" / "cones.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(output, indent=2) + "\n")
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
