"""Tree shapes and per-node laws on small sequence models (issue 30, item 4), exactly.

For expansions (2,1), (1,2), (2,2), (3,1) (L = 2, n = 3) and (2,1,1), (2,2,1) (L = 3, n = 2), the
static parent array [-1, 0, 0, 1] and, for top-k, the dynamic shape of 4 nodes, under each law
(iid, without replacement, top-k), on three Dirichlet(1) models each: every verifier's exact E[τ]
(mean over the models), the certified block optimum (its interval's lower end) and each verifier's
share of the gap between the token-level baseline (``token:specinfer``; ``token:rrs-wor`` without
replacement) and the optimum; and, where chains of the same node count and length exist
(``chains(K, L)`` with K·L nodes), whether the best verifier on the branching shape beats the best
on the chains. A verifier that does not take a (family, law) is reported as refused.

Writes ``benchmarks/results/tree_shapes.json``. Usage: ``python benchmarks/bench_tree_shapes.py``
"""

from __future__ import annotations

import numpy as np
from _common import print_table, write_results

from multidraft.trees import SequenceModel, TreeShape, block_optimum, evaluate, get_verifier, shape_trees

VERIFIERS = ("token:specinfer", "token:rrs-wor", "token:optimal", "traversal", "selective")
LAWS = ("iid", "without-replacement", "top-k")


def shapes(law: str):
    yield TreeShape.expansion([2, 1], law), 3
    yield TreeShape.expansion([1, 2], law), 3
    yield TreeShape.expansion([2, 2], law), 3
    yield TreeShape.expansion([3, 1], law), 3
    yield TreeShape.static([-1, 0, 0, 1], law), 3
    yield TreeShape.expansion([2, 1, 1], law), 2
    yield TreeShape.expansion([2, 2, 1], law), 2
    if law == "top-k":
        yield TreeShape.dynamic(4, 2, branching=2), 3


def best_on(shape, models):
    """Mean exact E[τ] per verifier that takes the shape, and the mean optimum."""
    out = {}
    for name in VERIFIERS:
        verifier = get_verifier(name)
        values = []
        for model in models:
            tree = next(iter(shape_trees(model, shape)))[0]
            if not verifier.supports(tree):
                values = None
                break
            values.append(float(evaluate(verifier, model, shape).expected_accepted))
        out[name] = None if values is None else float(np.mean(values))
    out["optimum"] = float(np.mean([float(block_optimum(model, shape).lower_bound) for model in models]))
    return out


def main() -> None:
    rows = []
    for law in LAWS:
        for shape, n in shapes(law):
            length = shape.depth
            models = [SequenceModel.random(n, length, np.random.default_rng(4000 + s)) for s in range(3)]
            values = best_on(shape, models)
            baseline = values["token:rrs-wor" if law == "without-replacement" else "token:specinfer"]
            row = dict(family=shape.family, law=law, shape=repr(shape), nodes=shape.node_count, n=n, L=length)
            for name in (*VERIFIERS, "optimum"):
                row[name] = values[name]
            for name in VERIFIERS:
                gap = values["optimum"] - baseline if baseline is not None else 0.0
                row[f"share {name}"] = None if values[name] is None or gap <= 1e-12 else (values[name] - baseline) / gap
            best = max(v for k, v in values.items() if k != "optimum" and v is not None)
            row["best"] = best
            if law != "top-k" and shape.node_count % length == 0:
                chains = TreeShape.chains(shape.node_count // length, length, law)
                chain_values = best_on(chains, models)
                chain_best = max(v for k, v in chain_values.items() if k != "optimum" and v is not None)
                row["chains"] = repr(chains)
                row["chains best"] = chain_best
                row["branching beats chains"] = bool(best > chain_best + 1e-12)
            rows.append(row)
            print(row, flush=True)
    columns = ["law", "shape", "nodes", "n", "token:specinfer", "token:rrs-wor", "token:optimal", "traversal", "selective",
               "optimum", "share selective", "share traversal", "share token:optimal", "chains best", "branching beats chains"]  # fmt: skip
    print_table(rows, columns)
    write_results("tree_shapes", rows)


if __name__ == "__main__":
    main()
