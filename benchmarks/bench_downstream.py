"""The downstream-aware walk on small iid chains (issue 30, item 3), exactly.

For small sequence models (Dirichlet(1), Dirichlet(0.3) and temperature pairs; n in {2, 3},
L = 2, K in {2, 3}) the E[τ] of ``token:optimal``, ``selective``, ``traversal`` and the
downstream-aware reference (:func:`multidraft.trees.downstream.downstream_value`: acceptance
first, and unconstrained), and selective's share of the gap between ``token:optimal`` and the
reference, ``(E_selective - E_optimal) / (E_reference - E_optimal)`` (instances with a gap above
1e-6; the share may exceed 1 -- selective is not a token walk -- so the summary gives its mean
capped at 1, its median and the gap-weighted share).

Writes ``benchmarks/results/downstream.json``. Usage: ``python benchmarks/bench_downstream.py``
"""

from __future__ import annotations

import numpy as np
from _common import print_table, write_results

from multidraft.trees import SequenceModel, evaluate, get_verifier
from multidraft.trees.downstream import downstream_value


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
        for name in ("token:optimal", "selective", "traversal"):
            row[name] = float(evaluate(get_verifier(name), model, k).expected_accepted)
        try:
            row["reference"] = downstream_value(model, k)
            row["unconstrained"] = downstream_value(model, k, acceptance_first=False)
        except RuntimeError as error:  # HiGHS on near-degenerate Dirichlet(0.3) tables
            print(f"{family} {seed} k={k}: {error}")
            continue
        gap = row["reference"] - row["token:optimal"]
        row["gap"] = gap
        row["selective share"] = (row["selective"] - row["token:optimal"]) / gap if gap > 1e-6 else None
        rows.append(row)
    print_table(rows, ["family", "seed", "k", "n", "token:optimal", "selective", "traversal", "reference", "unconstrained", "selective share"])
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
            )
        )
    print_table(summary, list(summary[0]))
    write_results("downstream", rows, summary=summary)


if __name__ == "__main__":
    main()
