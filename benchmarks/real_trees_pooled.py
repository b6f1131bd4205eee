"""Real-model tree verifiers, every run and the runs pooled: the tables of issue 23 item 5.

Reads ``benchmarks/results/trees_real_model.json`` (each run is the unchanged ``--json`` output of
the ``multidraft measure --verifier ...`` command recorded beside it) and prints, per run and per
kind of tree (iid, without replacement) pooled over the runs of different seeds:

* each verifier's realised against expected block efficiency on the blocks it drove, with the
  95% interval of realised − expected accepted length (martingale, model variance);
* each verifier's expected accepted length minus the first verifier's, paired on every block.

Pooling independent runs needs only each run's summary. A run's interval is ``m ± h`` with
``h = 1.96 s / N`` (``s²``: the sum of the block variances, or ``N²/N`` times the sample variance
for the paired difference), so over runs i the pooled mean is ``Σ N_i m_i / Σ N_i`` and the
pooled half-width ``sqrt(Σ (N_i h_i)²) / Σ N_i``. The pooled numbers are written back under
``"pooled"``.

Usage: ``python benchmarks/real_trees_pooled.py``
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results" / "trees_real_model.json"


def pool(items: Sequence[tuple[int, float, tuple[float, float]]]) -> tuple[int, float, tuple[float, float]]:
    """``(N, mean, (low, high))`` of independent runs ``(N_i, mean_i, (low_i, high_i))``."""
    total = sum(n for n, _, _ in items)
    mean = sum(n * m for n, m, _ in items) / total
    half = math.sqrt(sum((n * (high - low) / 2) ** 2 for n, _, (low, high) in items)) / total
    return total, mean, (mean - half, mean + half)


def kind(run: dict) -> str:
    return "without replacement" if run["results"]["without_replacement"] else "iid"


def pooled_tables(runs: Sequence[dict]) -> dict:
    """Per kind of tree: every verifier's pooled calibration and paired difference."""
    out: dict = {}
    for name in sorted({kind(run) for run in runs}):
        chosen = [run["results"] for run in runs if kind(run) == name]
        verifiers = chosen[0]["verifier_names"]
        if any(r["verifier_names"] != verifiers for r in chosen):
            raise ValueError(f"{name}: the runs score different verifiers")
        calibration, paired = {}, {}
        for index, verifier in enumerate(verifiers):
            own = [r["verifiers"][index] for r in chosen]
            blocks, realised, _ = pool([(v["blocks"], v["block_efficiency"], (0.0, 0.0)) for v in own])
            _, expected, _ = pool([(v["expected_blocks"], v["expected_block_efficiency"], (0.0, 0.0)) for v in own])
            _, difference, interval = pool([(v["expected_blocks"], v["ci95"][0] / 2 + v["ci95"][1] / 2, tuple(v["ci95"])) for v in own])
            calibration[verifier] = {
                "blocks": blocks, "realised_block_efficiency": realised, "expected_block_efficiency": expected,
                "difference": difference, "ci95": list(interval), "covers_zero": interval[0] <= 0 <= interval[1],
            }  # fmt: skip
            scores = [r["paired"][index] for r in chosen]
            count, gain, interval = pool([(s["blocks"], s["difference"], tuple(s["ci95"])) for s in scores])
            _, efficiency, _ = pool([(s["blocks"], s["expected_block_efficiency"], (0.0, 0.0)) for s in scores])
            paired[verifier] = {"blocks": count, "expected_block_efficiency": efficiency, "difference": gain, "ci95": list(interval)}
        out[name] = {"runs": len(chosen), "seeds": [r["seed"] for r in chosen], "calibration": calibration, "paired": paired}
    return out


def main() -> None:
    data = json.loads(RESULTS.read_text())
    runs = data["runs"]
    for run in runs:
        results = run["results"]
        print(f"\n{kind(run)}, seed {results['seed']}: {run['command']}")
        for own, score in zip(results["verifiers"], results["paired"]):
            low, high = own["ci95"]
            print(
                f"  {own['name']:16s} drove {own['blocks']:5d} blocks: realised {own['block_efficiency']:.3f}, expected "
                f"{own['expected_block_efficiency']:.3f}, 95% [{low:+.3f}, {high:+.3f}]; paired on {score['blocks']} blocks "
                f"{score['difference']:+.3f} [{score['ci95'][0]:+.3f}, {score['ci95'][1]:+.3f}]"
            )
    pooled = pooled_tables(runs)
    for name, table in pooled.items():
        print(f"\npooled, {name} trees ({table['runs']} runs, seeds {table['seeds']})")
        print(f"  {'verifier':16s} {'blocks':>6s} {'realised':>9s} {'expected':>9s} {'real − exp 95%':>18s} | paired blocks, gain 95%")
        for verifier, row in table["calibration"].items():
            score = table["paired"][verifier]
            print(
                f"  {verifier:16s} {row['blocks']:6d} {row['realised_block_efficiency']:9.3f} {row['expected_block_efficiency']:9.3f} "
                f"[{row['ci95'][0]:+.3f}, {row['ci95'][1]:+.3f}] | {score['blocks']}, {score['difference']:+.3f} "
                f"[{score['ci95'][0]:+.3f}, {score['ci95'][1]:+.3f}]"
            )
    data["pooled"] = pooled
    RESULTS.write_text(json.dumps(data, indent=1) + "\n")


if __name__ == "__main__":
    main()
