"""Speed and agreement of the exact optimum for independent non-identical drafts (issue 13, item 1).

1. ``optimal_acceptance(target, Independent(drafts))`` (method "threshold") at n = 49152 and
   131072 on Zipf-like targets (``p_(r) ∝ r^-s``, tokens permuted) with drafts at different
   temperatures (``softmax(log p / T)``), the pairs of the report's non-identical rows and a
   few triples: wall and CPU medians (target: <= 1 s at n = 49152), boxes searched and P*,
   next to ``numpy.argsort`` of the same size.
2. Agreement with ``method="subsets"`` on random instances at n = 18 (K = 2, 3; Zipf and
   Dirichlet targets, float), and exact (Fraction) agreement at n = 8.

Timings are medians after a warm-up on a possibly shared machine (the load average is
recorded; the CPU time of this process is less inflated by other jobs).
Writes benchmarks/results/independent.json.

Run: ``python benchmarks/bench_independent.py [--repeats R]``.
"""

from __future__ import annotations

import argparse
from fractions import Fraction

import numpy as np
from _common import measure, print_table, timed, write_results

from multidraft.theory import Independent, dirichlet, optimal_acceptance, softmax, zipf
from multidraft.theory.optimum import product_cut

SIZES = (49152, 131072)
EXPONENTS = (0.9, 1.3)
PAIRS = ((0.5, 1.2), (0.8, 1.6), (1.2, 2.0), (0.5, 2.0), (1.6, 2.0))  # the report's non-identical rows
TRIPLES = ((0.5, 1.0, 2.0), (1.2, 1.6, 2.0))
BUDGET_MS = 1000.0  # at n = 49152


def speed_rows(repeats: int) -> list[dict]:
    rows = []
    for n in SIZES:
        rng = np.random.default_rng(n)
        keys = rng.random(n)
        argsort = timed(lambda: np.argsort(keys), repeats)[0]
        rows.append({"case": "numpy.argsort", "n": n, "ms": 1e3 * argsort})
        for exponent in EXPONENTS:
            target = zipf(n, exponent, rng)
            for temperatures in PAIRS + TRIPLES:
                drafts = np.array([softmax(np.log(target) / t) for t in temperatures])
                law = Independent(list(drafts))
                timing = measure(lambda: optimal_acceptance(target, law), repeats)
                search = product_cut(target, drafts)
                row = {
                    "case": "threshold",
                    "n": n,
                    "zipf_s": exponent,
                    "temperatures": "/".join(f"{t:g}" for t in temperatures),
                    "k": len(temperatures),
                    "ms": 1e3 * timing.median,
                    "cpu_ms": 1e3 * timing.cpu_median,
                    "boxes": search.boxes,
                    "leaves": search.leaves,
                    "p_star": timing.result.value,
                    "target_ms": BUDGET_MS if n == 49152 else None,
                }
                rows.append(row)
    return rows


def agreement(rng: np.random.Generator, instances: int) -> dict:
    """Largest |threshold - subsets| at n = 18 (float) and exact mismatches at n = 8."""
    worst, checked = 0.0, 0
    for index in range(instances):
        k = 2 + index % 2
        target = zipf(18, 1.1, rng) if index % 4 < 2 else dirichlet(18, 0.5, rng)
        drafts = [softmax(np.log(np.maximum(target, 1e-300)) / t + rng.normal(0, 0.3, 18)) for t in rng.uniform(0.5, 2.0, k)]
        law = Independent(drafts)
        fast = optimal_acceptance(target, law, method="threshold").value
        worst = max(worst, abs(fast - optimal_acceptance(target, law, method="subsets").value))
        checked += 1
    mismatches = 0
    for index in range(instances // 4):
        k = 2 + index % 2
        weights = rng.integers(0, 6, size=(k + 1, 8)) + (np.arange(8) == index % 8)
        target, *drafts = ([Fraction(int(w), int(row.sum())) for w in row] for row in weights)
        law = Independent(drafts)
        exact = optimal_acceptance(target, law, method="threshold", exact=True).value
        mismatches += exact != optimal_acceptance(target, law, method="subsets", exact=True).value
    return {"float_instances": checked, "float_max_abs_diff": worst, "exact_instances": instances // 4, "exact_mismatches": mismatches}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--instances", type=int, default=200, help="random instances for the agreement check")
    args = parser.parse_args()
    rows = speed_rows(args.repeats)
    checks = agreement(np.random.default_rng(1), args.instances)
    print_table(rows, ["case", "n", "zipf_s", "temperatures", "ms", "cpu_ms", "boxes", "leaves", "p_star", "old_bound_gap", "target_ms"])
    print(
        f"agreement with subsets: {checks['float_instances']} float instances at n = 18, max |diff| = "
        f"{checks['float_max_abs_diff']:.1e}; {checks['exact_mismatches']} exact mismatches in "
        f"{checks['exact_instances']} instances at n = 8"
    )
    path = write_results("independent", rows, agreement=checks)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
