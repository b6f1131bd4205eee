"""The downstream-aware walk on small iid chains (issue 30, item 3), exactly.

For small sequence models (Dirichlet(1), Dirichlet(0.3) and temperature pairs; n in {2, 3},
L = 2, K in {2, 3}) the E[τ] of ``token:specinfer``, ``token:optimal``, ``selective``,
``traversal``, the downstream-aware reference (:func:`multidraft.trees.downstream.downstream_value`:
acceptance first, and unconstrained) and the block optimum (the lower end of
:func:`~multidraft.trees.block_optimum`'s certified interval), and two shares:

* the issue's: each verifier's share of the gap SpecInfer -> block optimum,
  ``(E_V - E_specinfer) / (E_optimum - E_specinfer)`` (instances with a gap above 1e-6; mean and
  median);
* the same for a *tree-only* rows walk (:class:`RowsWalk`, a candidate for token:optimal: at each
  node the coupling of maximum acceptance that then maximises the expected number of rows
  carrying Y -- the reference's LP with V(uy, j) replaced by j, which needs no values below);
* selective's share of the gap token:optimal -> reference,
  ``(E_selective - E_optimal) / (E_reference - E_optimal)`` (gap above 1e-6; it may exceed 1 --
  selective is not a token walk -- so the summary gives its mean capped at 1, its median and the
  gap-weighted share).

Writes ``benchmarks/results/downstream.json``. Usage: ``python benchmarks/bench_downstream.py``
"""

from __future__ import annotations

import numpy as np
from _common import print_table, write_results

from multidraft.schemes import get_scheme
from multidraft.trees import SequenceModel, TokenVerifier, block_optimum, evaluate, get_verifier
from multidraft.trees.downstream import downstream_value, node_couplings


#: Verifiers whose share of the SpecInfer -> block optimum gap is reported.
SHARED = ("token:optimal", "selective", "traversal", "reference", "rows walk")


class RowsWalk(TokenVerifier):
    """Tree-only token walk on iid chains: at a node with m live rows, the coupling of
    IID(q, m) with p of maximum acceptance that then maximises E[rows carrying Y]
    (:func:`~multidraft.trees.downstream.node_couplings` with value j for a child of j rows).
    It reads only the node's p, q and tuple, so it is lossless (§4)."""

    drafting = ("iid",)

    def __init__(self) -> None:
        super().__init__(get_scheme("optimal"))
        self.name, self.exact_capable, self._couplings = "rows walk", False, {}

    def _conditional(self, tree, node):
        _, drafts, x = tree.node_draws(node)
        p, q = np.asarray(tree.target_at(node), dtype=np.float64), np.asarray(drafts[0], dtype=np.float64)
        key = (p.tobytes(), q.tobytes(), len(x))
        if key not in self._couplings:
            rows = {(y, j): float(j) for y in range(len(p)) for j in range(1, len(x) + 1)}
            self._couplings[key] = node_couplings(p, q, len(x), rows, True)[1]
        return self._couplings[key][tuple(int(t) for t in x)]


def _mean(rows, key):
    values = [r[key] for r in rows if r[key] is not None]
    return float(np.mean(values)) if values else None


def _median(rows, key):
    values = [r[key] for r in rows if r[key] is not None]
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
        for name in ("token:specinfer", "token:optimal", "selective", "traversal"):
            row[name] = float(evaluate(get_verifier(name), model, k, exact=False).expected_accepted)
        walk = evaluate(RowsWalk(), model, k, exact=False)
        row["rows walk"], row["rows walk deviation"] = float(walk.expected_accepted), float(walk.deviation)
        row["optimum"] = float(block_optimum(model, k).lower_bound)
        try:
            row["reference"] = downstream_value(model, k)
            row["unconstrained"] = downstream_value(model, k, acceptance_first=False)
        except RuntimeError as error:  # HiGHS on near-degenerate Dirichlet(0.3) tables
            print(f"{family} {seed} k={k}: {error}")
            continue
        gap = row["reference"] - row["token:optimal"]
        row["gap"] = gap
        row["selective share"] = (row["selective"] - row["token:optimal"]) / gap if gap > 1e-6 else None
        whole = row["optimum"] - row["token:specinfer"]
        for name in SHARED:
            row[f"{name} share of optimum gap"] = (row[name] - row["token:specinfer"]) / whole if whole > 1e-6 else None
        rows.append(row)
    print_table(rows, ["family", "seed", "k", "n", "token:specinfer", "token:optimal", "selective", "traversal", "reference", "rows walk", "optimum", "selective share"])
    summary = []
    for k in (2, 3):
        chosen = [r for r in rows if r["k"] == k]
        if not chosen:
            continue
        ahead = [r for r in chosen if r["selective share"] is not None]
        shares = [r["selective share"] for r in ahead]
        summary.append(
            dict(
                k=k,
                models=len(chosen),
                optimal_below_reference=sum(r["token:optimal"] < r["reference"] - 1e-9 for r in chosen),
                gap_above_1e6=len(ahead),
                largest_gap=max(r["gap"] for r in chosen),
                mean_share_capped=float(np.mean(np.minimum(shares, 1.0))) if shares else None,
                median_share=float(np.median(shares)) if shares else None,
                weighted_share=sum(r["selective"] - r["token:optimal"] for r in ahead) / sum(r["gap"] for r in ahead) if ahead else None,
                selective_at_reference=sum(r["selective"] >= r["reference"] - 1e-9 for r in ahead),
                unconstrained_differs=sum(abs(r["unconstrained"] - r["reference"]) > 1e-9 for r in chosen),
                traversal_ahead_of_optimal=sum(r["traversal"] > r["token:optimal"] + 1e-12 for r in chosen),
                rows_walk_below_reference=sum(r["rows walk"] < r["reference"] - 1e-9 for r in chosen),
                rows_walk_largest_shortfall=max(r["reference"] - r["rows walk"] for r in chosen),
                rows_walk_largest_deviation=max(r["rows walk deviation"] for r in chosen),
                optimum_gap_above_1e6=sum(r["selective share of optimum gap"] is not None for r in chosen),
                **{f"{name} mean share of optimum gap": _mean(chosen, f"{name} share of optimum gap") for name in SHARED},
                **{f"{name} median share of optimum gap": _median(chosen, f"{name} share of optimum gap") for name in SHARED},
            )
        )
    print_table(summary, list(summary[0]))
    write_results("downstream", rows, summary=summary)


if __name__ == "__main__":
    main()
