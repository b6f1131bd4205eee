"""Calibration of the size guard (multidraft.theory.laws) and the cost of silent solvers.

For LPs of growing size, each solved in a fresh process (so that peak memory is its own):
wall time, peak resident memory above the process's baseline, the number of variables and
the memory the guard *estimates* before building (``SizeEstimate``), and their ratio. The
guard's constants -- ``MAX_VARIABLES`` (a default solve near a minute),
``CVXPY_BYTES_PER_VARIABLE`` and ``TRUNCATED_BYTES_PER_ENTRY`` (per inner tuple and kept
token of the truncated selection's split) -- should keep the ratio
measured / estimated at or below about 1 (the estimate is an upper bound for the refusal).

Also: the overhead of :func:`multidraft.lp._solve.silenced` (descriptors 1 and 2 pointed at
/dev/null around a solve), in microseconds per call.

Writes benchmarks/results/size_guard.json. Run: ``python benchmarks/bench_size_guard.py [--quick]``.
The machine has 2 cores shared with other jobs: timings are noisy (the load average is recorded).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

from _common import print_table, provenance, write_json

RESULTS = Path(__file__).resolve().parent / "results" / "size_guard.json"

#: (kind, n, k or s) per case; "full" adds the slow ones.
QUICK = [("transport", 20, 3), ("transport", 40, 2), ("importance", 30, 3), ("truncated", 49152, 100), ("truncated", 49152, 300)]
FULL = QUICK + [("transport", 30, 3), ("transport", 90, 2), ("truncated", 49152, 500)]


def _child(kind: str, n: int, size: int) -> dict:
    """Solve one LP in this process and report time, peak memory and the guard's estimate."""
    from multidraft.lp import importance_lp, transport_lp, truncated_selection
    from multidraft.lp._solve import CVXPY_BYTES_PER_VARIABLE
    from multidraft.lp.truncated import _inner_count, _inner_memory
    from multidraft.theory import IID, zipf

    p, q = zipf(n, 1.1), zipf(n, 0.9)[::-1].copy()
    law = IID(q, size) if kind != "truncated" else None
    if kind == "transport":
        m = law.tuple_count(merged=True)
        variables, per_variable = m * n, CVXPY_BYTES_PER_VARIABLE
        run = lambda: transport_lp(p, law)  # noqa: E731
    elif kind == "importance":
        m = law.tuple_count(merged=True)
        variables, per_variable = m * size + n, CVXPY_BYTES_PER_VARIABLE
        run = lambda: importance_lp(p, law)  # noqa: E731
    else:
        variables, per_variable = _inner_count(size, 2, True), _inner_memory(size, 2, True) / _inner_count(size, 2, True)
        run = lambda: truncated_selection(p, IID(q, 2), s=size)  # noqa: E731
    transport_lp([0.5, 0.5], IID([0.5, 0.5], 2))  # import cvxpy and HiGHS first: not the LP's memory
    baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    start = time.perf_counter()
    run()
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - baseline
    estimate = variables * per_variable
    return {
        "lp": kind,
        "n": n,
        "k_or_s": size,
        "variables": variables,
        "seconds": seconds,
        "peak_mib": peak / 2**20,
        "estimated_mib": estimate / 2**20,
        "measured_over_estimate": peak / estimate,
    }


def _silence_overhead(calls: int = 20000) -> float:
    from multidraft.lp._solve import silenced

    start = time.perf_counter()
    for _ in range(calls):
        with silenced():
            pass
    return (time.perf_counter() - start) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="only the cases that take seconds")
    parser.add_argument("--child", nargs=3, metavar=("KIND", "N", "SIZE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, n, size = args.child
        print(json.dumps(_child(kind, int(n), int(size))))
        return
    rows = []
    for kind, n, size in QUICK if args.quick else FULL:
        done = subprocess.run(
            [sys.executable, __file__, "--child", kind, str(n), str(size)], capture_output=True, text=True, check=True
        )
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
    columns = ["lp", "n", "k_or_s", "variables", "seconds", "peak_mib", "estimated_mib", "measured_over_estimate"]
    print_table(rows, columns)
    overhead = _silence_overhead()
    print(f"\nsilenced(): {overhead:.1f} µs per solve (descriptors 1 and 2 to /dev/null and back)")
    write_json(RESULTS, {"provenance": provenance(), "rows": rows, "silence_overhead_us": overhead})
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
