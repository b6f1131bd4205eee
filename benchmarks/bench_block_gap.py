"""The block-level gap on small sequence models (issue 23, item 4), exactly.

For every instance -- Sun et al.'s example, random Dirichlet(1) tables and temperature pairs
(draft = target at temperature 1.5 or 2.5) over n in {2, 3, 4} tokens, L in {2, 3}, K in {2, 3},
trees drafted iid and without replacement at the root -- the exact E[τ] of token-level
SpecInfer (``token:specinfer``; ``token:rrs-wor`` without replacement), the token-level optimal
verifier (``token:optimal``), traversal verification and selective block verification, against
the certified block-level optimum; and the gap each closes, ``(E_V - E_SpecInfer) /
(optimum - E_SpecInfer)``. Every evaluation also re-proves block losslessness (its largest
deviation from the target's joint law is recorded).

``--tree-only N`` instead searches N random pairs of models that differ only below one
first token (n = 2, L = 3, K = 2, exact tables of denominator 12) for the largest certified
loss of tree-only verifiers (:func:`multidraft.trees.tree_only_bound`) and prints the best pair.

Writes ``benchmarks/results/block_gap.json`` (or ``tree_only.json``) with machine, versions,
date, commit and load. Usage: ``python benchmarks/bench_block_gap.py [--large] [--tree-only 100]``
"""

from __future__ import annotations

import argparse
import itertools
import time
from pathlib import Path

import numpy as np
from _common import print_table, provenance, write_json

from multidraft.theory.laws import dirichlet
from multidraft.trees import SequenceModel, block_gap, sun_example, tree_only_bound
from multidraft.trees.model import _exact_row

RESULTS = Path(__file__).resolve().parent / "results"


def instances(large: bool):
    """(label, model, K) of the table."""
    rng = np.random.default_rng(2026)
    sizes = [(2, 3), (3, 2), (4, 2), (3, 3)] + ([(4, 3)] if large else [])
    yield "sun (n=2, L=2)", sun_example(), (2, 3)
    for n, length in sizes:
        ks = (2, 3) if n ** (length * 3) <= 300_000 or large else (2,)
        yield f"dirichlet(1) n={n} L={length}", SequenceModel.random(n, length, rng), ks
        for temperature in (1.5, 2.5):
            yield f"temperature {temperature} n={n} L={length}", SequenceModel.temperature(n, length, rng, temperature=temperature), ks


def variant(model: SequenceModel, prefix: tuple[int, ...], rng: np.random.Generator, denominator: int = 12) -> SequenceModel:
    """``model`` with fresh exact tables at every prefix extending ``prefix``."""
    target, draft = [t.copy() for t in model.target], [t.copy() for t in model.draft]
    for d in range(len(prefix), model.length + 1):
        for u in itertools.product(range(model.n), repeat=d):
            if u[: len(prefix)] == prefix:
                target[d][model.index(u)] = np.array(_exact_row(dirichlet(model.n, 1.0, rng), denominator), dtype=object)
                if d < model.length:
                    draft[d][model.index(u)] = np.array(_exact_row(dirichlet(model.n, 1.0, rng), denominator), dtype=object)
    return SequenceModel(target, draft)


def tree_only_search(pairs: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    best = None
    for trial in range(pairs):
        first = SequenceModel.random(2, 3, rng, exact=True, denominator=12)
        second = variant(first, ((0,), (1,))[trial % 2], rng)
        result = tree_only_bound([first, second], 2, progress=False)
        if best is None or result.loss > best[0].loss:
            best = (result, first, second, trial)
            print(f"pair {trial}: certified loss {result.loss:.6f} (joint bound {float(result.upper_bound):.6f}, optima {result.optima})")
    result, first, second, trial = best

    def tables(model):
        return {"target": [[[str(v) for v in row] for row in t] for t in model.target],
                "draft": [[[str(v) for v in row] for row in t] for t in model.draft]}  # fmt: skip

    data = {"provenance": provenance(), "seed": seed, "pairs": pairs, "best_pair": trial, "loss": result.loss,
            "joint_upper_bound": str(result.upper_bound), "optima": list(result.optima), "shared_classes": result.shared,
            "models": [tables(first), tables(second)]}  # fmt: skip
    print(f"wrote {write_json(RESULTS / 'tree_only.json', data)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--large", action="store_true", help="add n = 4, L = 3 (K = 2, 3): minutes per verifier")
    parser.add_argument("--tree-only", type=int, default=0, metavar="PAIRS", help="search PAIRS model pairs instead")
    parser.add_argument("--seed", type=int, default=3)
    args = parser.parse_args()
    if args.tree_only:
        tree_only_search(args.tree_only, args.seed)
        return
    rows = []
    for label, model, ks in instances(args.large):
        for k, wor in itertools.product(ks, (False, True)):
            if wor and k > model.n:
                continue
            start = time.perf_counter()
            row = block_gap(model, k, without_replacement=wor, instance=label).as_dict()
            row["seconds"] = time.perf_counter() - start
            rows.append(row)
            closed = row["gap_closed"]
            print(f"{label:28s} K={k} {row['drafting']:3s}  " + "  ".join(
                f"{name.split(':')[-1]}={row['expected_accepted'][name]:.4f}" for name in row["expected_accepted"]
            ) + f"  optimum={row['block_optimum']:.4f}  closed: " + " ".join(
                f"{name.split(':')[-1]}={closed[name]:.2f}" for name in closed if name != ("token:rrs-wor" if wor else "token:specinfer")
            ), flush=True)  # fmt: skip
    summary = []
    for drafting in ("iid", "wor"):
        chosen = [r for r in rows if r["drafting"] == drafting]
        for name in ("token:optimal", "traversal", "selective"):
            values = [r["gap_closed"][name] for r in chosen if not np.isnan(r["gap_closed"][name])]
            summary.append({"drafting": drafting, "verifier": name, "instances": len(values),
                            "median_gap_closed": float(np.median(values)), "min": float(np.min(values)), "max": float(np.max(values)),
                            "best_on": sum(1 for r in chosen if not np.isnan(r["gap_closed"][name]) and r["gap_closed"][name] == max(
                                r["gap_closed"][m] for m in ("token:optimal", "traversal", "selective")))})  # fmt: skip
    print()
    print_table(summary, ["drafting", "verifier", "instances", "median_gap_closed", "min", "max", "best_on"])
    path = write_json(RESULTS / "block_gap.json", {"provenance": provenance(), "rows": rows, "summary": summary})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
