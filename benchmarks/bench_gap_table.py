"""The acceptance-gap table: each scheme's acceptance divided by the optimum (min, mean) over
random instances (Dirichlet, Zipf, temperature-shifted pairs; K in {2, 3, 4, 8}), like Table 3
of Khisti et al., ICLR 2025 (Optimal / IS / SpecTr / SpecInfer).

The computation is the library function :func:`multidraft.report.instance_gap.instance_gap_table`; this script
prints it and writes ``benchmarks/results/gap_table.json`` (with machine, versions, date and
git commit, and the wall time).

Usage: ``python benchmarks/bench_gap_table.py [--n 10] [--instances 20] [--seed 0]``
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from _common import provenance, write_json

from multidraft.report.instance_gap import DEFAULT_SCHEMES, FAMILIES, instance_gap_table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10)
    parser.add_argument("--instances", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--ks", default="2,3,4,8")
    parser.add_argument("--s", type=int, default=5, help="s of truncated-lp")
    parser.add_argument("--output", type=Path, default=Path(__file__).parent / "results" / "gap_table.json")
    args = parser.parse_args()
    ks = [int(k) for k in args.ks.split(",")]
    start = time.perf_counter()
    table = instance_gap_table(DEFAULT_SCHEMES, ks, FAMILIES, n=args.n, instances=args.instances, seed=args.seed,
                      options={"truncated-lp": {"s": args.s}})
    seconds = time.perf_counter() - start
    print(f"acceptance / optimum, min / mean over {args.instances} iid instances per cell, n = {args.n}")
    print("(is-lp, truncated-lp, multistage: Σ min(p, r), the selected draft's acceptance)")
    print(table.format())
    print(f"{seconds:.1f} s")
    write_json(args.output, {"provenance": provenance(), "seconds": seconds, "truncated_s": args.s, **table.to_dict()})
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
