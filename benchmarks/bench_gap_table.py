"""The acceptance-gap table: each scheme's acceptance divided by the optimum (min, mean) over
random instances (Dirichlet, Zipf, temperature-shifted pairs; K in {2, 3, 4, 8}), like Table 3
of Khisti et al., ICLR 2025 (Optimal / IS / SpecTr / SpecInfer).

The computation is the library function :func:`multidraft.schemes.gap.gap_table`; this script
prints it and writes ``benchmarks/results/gap_table.json`` (with machine, versions, date and
git commit, and the wall time).

Usage: ``python benchmarks/bench_gap_table.py [--n 10] [--instances 20] [--seed 0]``
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import time
from pathlib import Path

import numpy as np
import scipy

from multidraft.schemes.gap import DEFAULT_SCHEMES, FAMILIES, gap_table


def machine_info() -> dict:
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = None
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": commit,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "scipy": scipy.__version__,
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
    }


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
    table = gap_table(DEFAULT_SCHEMES, ks, FAMILIES, n=args.n, instances=args.instances, seed=args.seed,
                      options={"truncated-lp": {"s": args.s}})
    seconds = time.perf_counter() - start
    print(f"acceptance / optimum, min / mean over {args.instances} iid instances per cell, n = {args.n}")
    print("(is-lp, truncated-lp, multistage: Σ min(p, r), the selected draft's acceptance)")
    print(table.format())
    print(f"{seconds:.1f} s")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps({"machine": machine_info(), "seconds": seconds, "truncated_s": args.s,
                                       **table.to_dict()}, indent=2))
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
