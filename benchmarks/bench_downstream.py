"""The downstream-aware walk on small iid chains (issue 30, item 3), exactly.

For small sequence models (Dirichlet(1), Dirichlet(0.3) and temperature pairs; n in {2, 3},
L = 2, K in {2, 3}) the E[τ] of ``token:specinfer``, ``token:optimal`` (its rows coupling,
:func:`multidraft.trees._rows_rule.rows_coupling`), the curtain walk (``token:optimal`` before it:
the curtain rule's coupling at every node), ``selective``, ``traversal``, the downstream-aware
reference (:func:`multidraft.trees.downstream.downstream_value`: acceptance first, and
unconstrained) and the block optimum (the lower end of :func:`~multidraft.trees.block_optimum`'s
certified interval); at K = 2 also the best selective rule with a model-aware root
(:func:`multidraft.trees.selective_bound.best_selective_value`: selective's E[τ] maximised over
every selectable root law r, a certified upper bound within 1e-6 of an attained value, by a second
formula checked against ``selective`` at the curtain's r). Each verifier's share of the gap
SpecInfer -> block optimum, ``(E_V - E_specinfer) / (E_optimum - E_specinfer)`` (every model has a
gap above 1e-6), mean and median per K.

Writes ``benchmarks/results/downstream.json``. Usage: ``python benchmarks/bench_downstream.py``
"""

from __future__ import annotations

import numpy as np
from _common import print_table, write_results

from multidraft.schemes import get_scheme
from multidraft.theory.laws import IID
from multidraft.theory.verifier import optimal_selection_rule
from multidraft.trees import SequenceModel, TokenVerifier, block_optimum, evaluate, get_verifier
from multidraft.trees.downstream import downstream_value
from multidraft.trees.selective_bound import best_selective_value, selective_value

#: Verifiers whose share of the SpecInfer -> block optimum gap is reported.
SHARED = ("token:optimal", "curtain walk", "reference", "unconstrained", "selective", "selective, best root", "traversal")


class CurtainWalk(TokenVerifier):
    """token:optimal before the rows coupling: the curtain rule's coupling at every node."""

    def __init__(self) -> None:
        super().__init__(get_scheme("optimal"))
        self.name = "curtain walk"

    def _rows_below(self, tree, node) -> bool:
        return False


def _mean(rows, key):
    values = [r[key] for r in rows if r.get(key) is not None]
    return float(np.mean(values)) if values else None


def _median(rows, key):
    values = [r[key] for r in rows if r.get(key) is not None]
    return float(np.median(values)) if values else None


def instances():
    for family in ("dirichlet-1", "dirichlet-0.3", "temperature"):
        for seed in range(8):
            rng = np.random.default_rng(3000 + seed)
            for k, n in ((2, 3), (3, 2), (3, 3)):
                if family == "temperature":
                    model = SequenceModel.temperature(n, 2, rng)
                else:
                    model = SequenceModel.random(n, 2, rng, alpha=1.0 if family == "dirichlet-1" else 0.3)
                yield family, seed, k, n, model


def main() -> None:
    rows = []
    for family, seed, k, n, model in instances():
        row = dict(family=family, seed=seed, k=k, n=n)
        for verifier in ("token:specinfer", "token:optimal", CurtainWalk(), "selective", "traversal"):
            result = evaluate(get_verifier(verifier) if isinstance(verifier, str) else verifier, model, k, exact=False)
            name = verifier if isinstance(verifier, str) else verifier.name
            row[name], row[f"{name} deviation"] = float(result.expected_accepted), float(result.deviation)
        row["optimum"] = float(block_optimum(model, k).lower_bound)
        try:
            row["reference"] = downstream_value(model, k)
            row["unconstrained"] = downstream_value(model, k, acceptance_first=False)
        except RuntimeError as error:  # HiGHS on near-degenerate Dirichlet(0.3) tables
            print(f"{family} {seed} k={k}: {error}")
            continue
        if k == 2:
            best = best_selective_value(model)
            row["selective, best root"], row["selective, best root lower"] = best.upper, best.lower
            row["best root law"] = [float(x) for x in best.law]
            p, q = model.target_at(()), model.draft_at(())
            row["selective formula at the curtain"] = selective_value(model, optimal_selection_rule(p, IID(q, 2)).selection_law)
        whole = row["optimum"] - row["token:specinfer"]
        for name in SHARED:
            if name in row:
                row[f"{name} share"] = (row[name] - row["token:specinfer"]) / whole if whole > 1e-6 else None
        rows.append(row)
    print_table(rows, ["family", "seed", "k", "n", "token:specinfer", "curtain walk", "token:optimal", "reference", "selective", "optimum"])
    summary = []
    for k in (2, 3):
        chosen = [r for r in rows if r["k"] == k]
        summary.append(
            dict(
                k=k,
                models=len(chosen),
                optimal_below_reference_1e9=sum(r["token:optimal"] < r["reference"] - 1e-9 for r in chosen),
                optimal_largest_shortfall=max(r["reference"] - r["token:optimal"] for r in chosen),
                curtain_below_reference_1e9=sum(r["curtain walk"] < r["reference"] - 1e-9 for r in chosen),
                optimal_above_curtain_1e9=sum(r["token:optimal"] > r["curtain walk"] + 1e-9 for r in chosen),
                optimal_largest_deviation=max(r["token:optimal deviation"] for r in chosen),
                unconstrained_differs_1e9=sum(abs(r["unconstrained"] - r["reference"]) > 1e-9 for r in chosen),
                selective_at_reference=sum(r["selective"] >= r["reference"] - 1e-9 for r in chosen),
                formula_vs_selective=max((abs(r["selective formula at the curtain"] - r["selective"]) for r in chosen if k == 2), default=None),
                gap_above_1e6=sum(r["token:optimal share"] is not None for r in chosen),
                **{f"{name} mean": _mean(chosen, f"{name} share") for name in SHARED},
                **{f"{name} median": _median(chosen, f"{name} share") for name in SHARED},
            )
        )
    print_table(summary, list(summary[0]))
    families = []
    for k in (2, 3):
        for family in ("dirichlet-1", "dirichlet-0.3", "temperature"):
            chosen = [r for r in rows if r["k"] == k and r["family"] == family]
            families.append(dict(k=k, family=family, **{name: _mean(chosen, f"{name} share") for name in SHARED}))
    print_table(families, list(families[0]))
    write_results("downstream", rows, summary=summary, families=families)


if __name__ == "__main__":
    main()
