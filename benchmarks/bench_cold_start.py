"""Cold start of the compiled (numba) paths: the first call in a new process (issue 34, item 2).

Every kernel is a module-level function compiled with ``cache=True``
(:func:`multidraft.theory._numba.compile_in_place`), so numba compiles it once and later
processes load it from the disk cache (``__pycache__`` next to the module). For each path, two
fresh processes in turn: the first may compile (and fills the cache), the second loads. Each
reports the package's import (``import_s``), then what numba itself costs before any kernel of
ours runs -- ``import numba`` (``numba_s``), ``scipy.linalg.cython_blas`` (``scipy_s``: numba's
array-math registry imports it on first use to look for BLAS, whatever the kernel) and the rest
of its typing and target contexts (``context_s``) -- then the first call (``first_s``: the disk
cache loads, counted and timed in ``cache_loads``, ``cache_load_s``, plus the work) and a second
call. ``first_call_s = numba_s + scipy_s + context_s + first_s`` is what the first call costs a
process that has imported the package only (the package imports numba at first use); numba's
three parts are its floor, the same for every path (the ``block`` path, one ten-line kernel,
shows it). ``--clear`` removes the package's numba cache files first, so that the first process
compiles.

Paths (n = 4096, K = 4, so that the work itself is milliseconds):

* ``iid-fit``: the optimal iid verifier's rule (``fit_curtain_rule``: the curtain kernels);
* ``iid-position``: one fresh position of the optimal scheme on iid drafts (the law built, the
  target checked, the rule fitted, one draft tuple verified: the fit's and the selection's
  kernels);
* ``wor-fit``: the wor rule (``optimal_selection_rule``: the race, J-law, J-curtain stack pass,
  front/back and uniform-tail kernels);
* ``rrs-wor``: the RRS-without-replacement scheme's estimated acceptance (its path kernels);
* ``block``: the scaled residual of block and traversal verification (its kernel).

Writes benchmarks/results/cold_start.json. Run: ``python benchmarks/bench_cold_start.py [--clear]``.
The machine has 2 cores shared with other jobs: timings are noisy (the load average is recorded).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from _common import print_table, provenance, write_json

RESULTS = Path(__file__).resolve().parent / "results" / "cold_start.json"
ROOT = Path(__file__).resolve().parent.parent
PATHS = ("iid-fit", "iid-position", "wor-fit", "rrs-wor", "block")
#: The issue's goal for the first call in a new process once the cache exists (seconds).
GOAL = 0.3


def _work(name: str):
    """The call of one path (a closure over prepared inputs)."""
    import numpy as np

    from multidraft.theory import IID, WithoutReplacement, zipf

    n, k = 4096, 4
    rng = np.random.default_rng(0)
    p = rng.permutation(zipf(n, 1.1))
    q = np.exp(np.log(p) + rng.standard_normal(n))
    q /= q.sum()
    if name == "iid-fit":
        from multidraft.theory.verifier import fit_curtain_rule

        return lambda: fit_curtain_rule(p, q, k).acceptance
    if name == "iid-position":
        from multidraft.schemes import get_scheme

        scheme, drafts = get_scheme("optimal"), IID(q, k).sample(np.random.default_rng(1), 1)
        return lambda: scheme.sample(p, IID(q, k), drafts, np.random.default_rng(2))[0][0]
    if name == "wor-fit":
        from multidraft.theory.verifier import optimal_selection_rule

        return lambda: optimal_selection_rule(p, WithoutReplacement(q, k)).acceptance
    if name == "rrs-wor":
        from multidraft.schemes import get_scheme

        scheme, law = get_scheme("rrs-wor"), WithoutReplacement(q, k)
        return lambda: scheme.estimate_acceptance(p, law, np.random.default_rng(1), batch=256, min_paths=256, max_paths=256).value
    from multidraft.trees._residual import scaled_residual

    return lambda: scaled_residual(p, 2.0, q, 1.0)[1]


def _child(name: str) -> dict:
    """One fresh process: the package's import, numba's, then numba's own first-use setup split
    in two (``scipy.linalg.cython_blas``, which numba's array-math registry imports to look for
    BLAS, then the rest of its typing and target contexts), then the path's first and second
    call, with the disk-cache loads of the first call counted and timed."""
    start = time.perf_counter()
    import multidraft.theory  # noqa: F401  the package's import, not the path's

    imported = time.perf_counter() - start
    start = time.perf_counter()
    import numba  # noqa: F401  numba's own import, part of every path's first call otherwise

    numba_s = time.perf_counter() - start
    start = time.perf_counter()
    import scipy.linalg.cython_blas  # noqa: F401  what numba's first compile or cache load imports

    scipy_s = time.perf_counter() - start
    from numba.core.registry import cpu_target

    start = time.perf_counter()
    cpu_target.typing_context.refresh()
    cpu_target.target_context.refresh()
    context_s = time.perf_counter() - start
    loads = _timed_cache_loads()
    work = _work(name)
    start = time.perf_counter()
    value = work()
    first = time.perf_counter() - start
    start = time.perf_counter()
    work()
    second = time.perf_counter() - start
    return {
        "path": name, "import_s": imported, "numba_s": numba_s, "scipy_s": scipy_s, "context_s": context_s,
        "cache_loads": len(loads), "cache_load_s": sum(loads), "first_s": first, "second_s": second,
        "load_s": first - second, "first_call_s": numba_s + scipy_s + context_s + first, "value": float(value),
    }  # fmt: skip


def _timed_cache_loads() -> list[float]:
    """Time every overload numba loads from its disk cache from now on (a list filled in place)."""
    from numba.core.caching import Cache

    spent: list[float] = []
    original = Cache.load_overload

    def load_overload(self, *args, **kwargs):
        start = time.perf_counter()
        try:
            return original(self, *args, **kwargs)
        finally:
            spent.append(time.perf_counter() - start)

    Cache.load_overload = load_overload
    return spent


def _clear_cache() -> int:
    """Remove the numba cache files (``*.nbi``, ``*.nbc``) under the package; returns how many."""
    files = [f for pattern in ("*.nbi", "*.nbc") for f in (ROOT / "multidraft").rglob(pattern)]
    for f in files:
        f.unlink()
    return len(files)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clear", action="store_true", help="remove the package's numba cache files first")
    parser.add_argument("--paths", default=",".join(PATHS), help="comma-separated subset of " + ", ".join(PATHS))
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_child(args.child)))
        return
    cleared = _clear_cache() if args.clear else 0
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    rows = []
    for name in args.paths.split(","):
        for process in ("first process", "second process"):
            done = subprocess.run([sys.executable, __file__, "--child", name], capture_output=True, text=True, check=True, env=env)
            row = json.loads(done.stdout.strip().splitlines()[-1])
            row["process"] = process
            row["within_goal"] = row["first_call_s"] <= GOAL if process == "second process" else None
            rows.append(row)
    columns = ["path", "process", "import_s", "numba_s", "scipy_s", "context_s", "cache_loads", "cache_load_s", "first_s", "second_s"]
    print_table(rows, columns + ["load_s", "first_call_s", "within_goal", "value"])
    floor = [r["numba_s"] + r["scipy_s"] + r["context_s"] for r in rows if r["process"] == "second process"]
    print(f"numba's floor (import + scipy.linalg + contexts), second processes: {min(floor):.3f}-{max(floor):.3f} s; goal {GOAL} s")
    write_json(RESULTS, {"provenance": provenance(), "cleared_cache_files": cleared, "goal_s": GOAL, "rows": rows})
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
