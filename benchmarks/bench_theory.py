"""Speed of the optimal-acceptance computations of :mod:`multidraft.theory` (issue 2 targets).

1. Sorted scan, IID, n = 131072 (a Llama-3-sized vocabulary), Zipf-like target and a
   temperature-shifted draft, K in {2, 4, 8}: median <= 30 ms, and within 2x of
   ``numpy.argsort`` of the ratio array of the same size measured in the same run.
2. Without replacement at the same size: K = 2 closed form (<= 30 ms); K in {4, 8} by the
   exponential-race integral (<= 1 s), with its accuracy against exact enumeration at small n.
3. Batched [64, 131072] IID: <= 2 s. 4. Subsets method at n = 20: <= 2 s.

Timings are wall-clock medians after a warm-up; the machine has 2 cores, possibly shared with
other jobs (the load average is recorded). Writes benchmarks/results/theory.json.

Run: ``python benchmarks/bench_theory.py [--repeats R]``.
"""

from __future__ import annotations

import argparse
from fractions import Fraction

import numpy as np
from _common import print_table, timed, write_results

from multidraft.theory import (
    IID,
    Independent,
    WithoutReplacement,
    dirichlet,
    optimal_acceptance,
    optimal_acceptance_batch,
    softmax,
    zipf,
)


def race_accuracy(rng: np.random.Generator) -> float:
    """Largest |race - exact| over prefixes of random small WOR instances, K in {3, 4}."""
    worst = 0.0
    for k in (3, 4):
        for alpha in (0.1, 1.0):
            exact_q = [Fraction(x).limit_denominator(10**6) for x in dirichlet(k + 2, alpha, rng)]
            if sum(1 for x in exact_q if x > 0) < k:
                continue
            exact = WithoutReplacement(exact_q, k, normalize=True)
            q = np.array([float(x) for x in exact._exact_draft])
            order = np.argsort(-q)
            fast = WithoutReplacement(q, k).prefix_containment(order)
            reference = exact.prefix_containment(order, exact=True).astype(float)
            worst = max(worst, float(np.abs(fast - reference).max()))
    return worst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    n = 131072
    target = zipf(n, 1.1, rng)
    draft = softmax(np.log(target) / 1.5)
    ratio = draft / target
    argsort_seconds, _ = timed(lambda: np.argsort(ratio), args.repeats)

    rows = [{"case": "numpy.argsort(q/p)", "n": n, "k": None, "ms": 1e3 * argsort_seconds, "target_ms": None}]
    for law_class, ks, budget in ((IID, (2, 4, 8), 30.0), (WithoutReplacement, (2, 4, 8), None)):
        for k in ks:
            law = law_class(draft, k)
            seconds, result = timed(lambda: optimal_acceptance(target, law, method="sorted"), args.repeats if k <= 2 or law_class is IID else 3)
            target_ms = budget if budget else (30.0 if k == 2 else 1000.0)
            rows.append(
                {
                    "case": f"sorted {law.name}",
                    "n": n,
                    "k": k,
                    "ms": 1e3 * seconds,
                    "target_ms": target_ms,
                    "x_argsort": seconds / argsort_seconds,
                    "value": result.value,
                }
            )
    batch_targets = np.stack([zipf(n, 1.1, rng) for _ in range(64)])
    batch_drafts = softmax(np.log(batch_targets) / 1.5)
    seconds, values = timed(lambda: optimal_acceptance_batch(batch_targets, batch_drafts, 4), 3)
    rows.append({"case": "batch iid [64, n]", "n": n, "k": 4, "ms": 1e3 * seconds, "target_ms": 2000.0, "value": float(values.mean())})
    small_target, small_draft = dirichlet(20, 0.5, rng), dirichlet(20, 0.5, rng)
    for law in (IID(small_draft, 3), WithoutReplacement(small_draft, 3), Independent([small_draft, dirichlet(20, 0.5, rng)])):
        seconds, result = timed(lambda: optimal_acceptance(small_target, law, method="subsets"), args.repeats)
        rows.append({"case": f"subsets {law.name}", "n": 20, "k": law.k, "ms": 1e3 * seconds, "target_ms": 2000.0, "value": result.value})
    accuracy = race_accuracy(rng)
    print_table(rows, ["case", "n", "k", "ms", "target_ms", "x_argsort", "value"])
    print(f"exponential race (WOR, K > 2): max |race - exact| over small instances = {accuracy:.2e}")
    path = write_results("theory", rows, race_max_abs_error=accuracy)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
