"""Speed of the optimal-acceptance computations of :mod:`multidraft.theory` (issue 2 targets).

1. Sorted scan, IID, n = 131072 (a Llama-3-sized vocabulary), Zipf-like target and a
   temperature-shifted draft, K in {2, 4, 8}: median <= 30 ms, and within 2x of
   ``numpy.argsort`` of the ratio array of the same size measured in the same run
   (``x_argsort``, target 2).
2. Without replacement at the same size: K = 2 closed form (<= 30 ms); K in {4, 8} by the
   exponential-race integral (<= 1 s).
3. Batched [64, 131072] IID, K in {2, 4, 8}: <= 2 s, and per row within 2x of a row-wise
   ``numpy.argsort`` of the same [64, n] ratio array. 4. Subsets method at n = 20: <= 2 s.
5. Accuracy of the exponential race (WOR, K > 2) next to its time: uniform q at n = 20000
   against the exact ``C(m, K)/C(n, K)`` for K in {3, 8, 12, 16}, with the step the error bound
   chose; and the largest error against exact enumeration on small random instances.

Timings are wall-clock medians after a warm-up; the machine has 2 cores, possibly shared with
other jobs (the load average is recorded). Writes benchmarks/results/theory.json.

Run: ``python benchmarks/bench_theory.py [--repeats R]``.
"""

from __future__ import annotations

import argparse
import math
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
from multidraft.theory.laws._kernels import race_step, wor_prefix_containment


def race_accuracy(rng: np.random.Generator) -> float:
    """Largest |race - exact| over prefixes of random small WOR instances, K in {3, 4}."""
    worst = 0.0
    for k in (3, 4):
        for alpha in (0.1, 1.0):
            exact_q = [Fraction(x).limit_denominator(10**6) for x in dirichlet(k + 2, alpha, rng)]
            if sum(1 for x in exact_q if x > 0) < k:
                continue
            exact = WithoutReplacement(exact_q, k, normalize=True)
            q = exact.marginal(0).astype(float)
            uniform = [Fraction(1, k + 2)] * (k + 2)  # a uniform target: the scan order is decreasing q
            order, reference = exact.prefix_scan(uniform, exact=True)
            fast = WithoutReplacement.sorted_prefix_containment(q[order], k)
            reference = reference.astype(float)
            worst = max(worst, float(np.abs(fast - reference).max()))
    return worst


def race_uniform_rows(n: int = 20000) -> list[dict]:
    """Time and largest error of the race against ``C(m, K)/C(n, K)`` (uniform q, exact integers)."""
    rows = []
    q = np.full(n, 1.0 / n)
    for k in (3, 8, 12, 16):
        exact = np.array([math.comb(m, k) for m in range(n + 1)], dtype=object) / math.comb(n, k)
        seconds, values = timed(lambda: wor_prefix_containment(q, k), 1)
        error = float(np.abs(values - exact.astype(float)).max())
        rows.append({"case": "race uniform", "n": n, "k": k, "ms": 1e3 * seconds, "step": race_step(k, (k - 1) / n), "max_abs_error": error})
    return rows


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
    batch_ratio = batch_drafts / batch_targets
    batch_argsort, _ = timed(lambda: np.argsort(batch_ratio, axis=-1), 3)
    rows.append({"case": "numpy.argsort [64, n]", "n": n, "k": None, "ms": 1e3 * batch_argsort, "target_ms": None})
    for k in (2, 4, 8):
        seconds, values = timed(lambda: optimal_acceptance_batch(batch_targets, batch_drafts, k), 3)
        rows.append(
            {"case": "batch iid [64, n]", "n": n, "k": k, "ms": 1e3 * seconds, "target_ms": 2000.0,
             "x_argsort": seconds / batch_argsort, "value": float(values.mean())}
        )
    small_target, small_draft = dirichlet(20, 0.5, rng), dirichlet(20, 0.5, rng)
    for law in (IID(small_draft, 3), WithoutReplacement(small_draft, 3), Independent([small_draft, dirichlet(20, 0.5, rng)])):
        seconds, result = timed(lambda: optimal_acceptance(small_target, law, method="subsets"), args.repeats)
        rows.append({"case": f"subsets {law.name}", "n": 20, "k": law.k, "ms": 1e3 * seconds, "target_ms": 2000.0, "value": result.value})
    accuracy = race_accuracy(rng)
    race_rows = race_uniform_rows()
    print_table(rows, ["case", "n", "k", "ms", "target_ms", "x_argsort", "value"])
    print("\nexponential race (WOR, K > 2), uniform q against C(m, K)/C(n, K):")
    print_table(race_rows, ["case", "n", "k", "ms", "step", "max_abs_error"])
    print(f"exponential race: max |race - exact| over small random instances = {accuracy:.2e}")
    path = write_results("theory", rows + race_rows, race_max_abs_error=accuracy)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
