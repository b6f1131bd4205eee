"""The budget optimiser's time (issue 31, item 2), as ratios against baselines of the same run.

1. Sequoia's DP (:func:`multidraft.trees.sequoia_tree`, B = 8) per node budget N, against
   scoring one shape under the positional model (:func:`positional_value` of the DP's own
   shape); for N <= 6 also against brute force over every static shape, with the values'
   agreement (accuracy next to time).
2. The exact small-model search (:func:`budget_search`, n = 3, L = 4, every family) per N,
   against one exact prefix-recursion score (:func:`specinfer_walk_value` of a chain).
3. Positional acceptance per position at V = 49152 (B = 8) per walk, against the SpecInfer
   closed form.

Writes ``benchmarks/results/budget.json``. Usage: ``python benchmarks/bench_budget.py``
"""

from __future__ import annotations

import itertools

import numpy as np
from _common import measure, print_table, write_results

from multidraft.theory.laws import softmax
from multidraft.trees import SequenceModel, TreeShape
from multidraft.trees.budget import positional_acceptance, positional_value, sequoia_tree
from multidraft.trees.budget_search import budget_search, specinfer_walk_value

A = np.array([0.55, 0.15, 0.07, 0.04, 0.02, 0.01, 0.005, 0.003])


def brute_force(budget: int) -> float:
    best = 0.0
    for nodes in range(1, budget + 1):
        for parents in itertools.product(*(range(j) for j in range(1, nodes + 1))):
            best = max(best, positional_value(A, TreeShape.static([-1, *parents])))
    return best


def main() -> None:
    rows = []
    for budget in (4, 6, 8, 16, 32, 64):
        dp = measure(lambda: sequoia_tree(A, budget), repeats=3)
        shape = dp.result.shape()
        one = measure(lambda: positional_value(A, shape), repeats=5)
        row = {"part": "DP", "N": budget, "seconds": dp.median, "baseline": "score one shape", "ratio": dp.median / one.median}
        if budget <= 6:
            brute = measure(lambda: brute_force(budget), repeats=1)
            row |= {"brute force s": brute.median, "DP / brute force": dp.median / brute.median,
                    "DP - brute force": dp.result.expected_accepted - brute.result}  # fmt: skip
        rows.append(row)
        print(row, flush=True)
    model = SequenceModel.temperature(3, 4, np.random.default_rng(0))
    chain = TreeShape.expansion([1, 1, 1, 1])
    one = measure(lambda: specinfer_walk_value(model, chain), repeats=5)
    for budget in (4, 8, 16, 32, 64):
        search = measure(lambda: budget_search(model, budget), repeats=1)
        rows.append({"part": "search n=3 L=4", "N": budget, "seconds": search.median, "baseline": "one exact score", "ratio": search.median / one.median})
        print(rows[-1], flush=True)
    rng = np.random.default_rng(0)
    z = rng.normal(0.0, 3.0, (4, 49152))
    p, q = softmax(z, 0.6), softmax(z)
    closed = measure(lambda: positional_acceptance(p, q, 8), repeats=3)
    for verifier in ("token:specinfer", "top-k walk", "token:optimal", "token:optimal (wor)"):
        timing = measure(lambda: positional_acceptance(p, q, 8, verifier=verifier), repeats=1)
        rows.append({"part": "positional V=49152", "N": None, "verifier": verifier, "seconds": timing.median / 4,
                     "baseline": "specinfer closed form", "ratio": timing.median / closed.median})  # fmt: skip
        print(rows[-1], flush=True)
    print_table(rows, ["part", "N", "verifier", "seconds", "baseline", "ratio", "brute force s", "DP / brute force", "DP - brute force"])
    write_results("budget", rows)


if __name__ == "__main__":
    main()
