"""The real-model run of the without-replacement verifier: what ``multidraft measure --model
default --scheme SCHEME --without-replacement`` does, with every position's record kept.

For each scheme (default: ``optimal`` and ``rrs-wor``, same prompts, seed and settings) it runs
:func:`multidraft.decoding.measure` and writes the aggregate (empirical and expected acceptance,
the 95% interval of their difference, P*) and, per position, the scheme's exact acceptance, P*
and their difference to ``benchmarks/results/real_wor.json``.

Usage: ``python benchmarks/real_wor.py [--max-new-tokens 520] [--k 2] [--schemes optimal rrs-wor]
[--name real_wor]``
(four built-in prompts: 4 × max-new-tokens positions; ~1 s of CPU per position for ``optimal``).
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
import torch
from _common import write_results

from multidraft.decoding import measure


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-new-tokens", type=int, default=520)
    parser.add_argument("--k", type=int, default=2)
    parser.add_argument("--schemes", nargs="+", default=["optimal", "rrs-wor"])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--name", default="real_wor", help="results file benchmarks/results/NAME.json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    load_before = os.getloadavg()
    runs = []
    for scheme in args.schemes:
        start = time.perf_counter()
        results = measure(
            "default", k=args.k, scheme=scheme, without_replacement=True, max_new_tokens=args.max_new_tokens,
            baseline=False, progress=True,
        )  # fmt: skip
        frame = results.to_dataframe()
        gap = (frame["expected"] - frame["optimal"]).to_numpy()
        summary = results.summary()
        summary.update(
            {
                "seconds": time.perf_counter() - start,
                "acceptance_minus_optimum": {
                    "mean": float(np.nanmean(gap)), "min": float(np.nanmin(gap)), "max": float(np.nanmax(gap)),
                    "below_1e-9": int((gap < -1e-9).sum()),
                },
                "positions_expected_minus_optimal": [None if np.isnan(g) else float(g) for g in gap],
                "positions_expected": [float(v) for v in frame["expected"]],
                "positions_accepted": [bool(v) for v in frame["accepted"]],
            }
        )  # fmt: skip
        runs.append(summary)
        print(
            f"{scheme}: {summary['positions']} positions, empirical {summary['empirical_acceptance']:.4f}, "
            f"expected {summary['expected_acceptance']:.4f}, difference 95% {summary['ci95']}, "
            f"P* {summary['optimal_acceptance']:.4f}, expected - P*: mean {np.nanmean(gap):.2e}, min {np.nanmin(gap):.2e}"
        )
    write_results(args.name, runs, load_before=load_before, load_after=os.getloadavg())


if __name__ == "__main__":
    main()
