"""Peak memory of the optimal verifier's paths without replacement at a real vocabulary (issue 34).

Each case runs in a fresh process, capped at ``--cap`` GiB of address space (RLIMIT_AS), so
that a route which would take tens of GiB fails at once with numpy's MemoryError instead of
swapping the machine; the row then records the refusal and the size asked for. Per case: wall
time (after a warm-up call that compiles the kernels and fits the rule), the tracemalloc peak
of the timed call (numpy's allocations), the process's peak resident memory, and a checksum of
the result so that the two code versions can be compared number for number.

Cases, n = 49152:

* ``wor-sample``: ``WithoutReplacement(q, 4).sample(rng, 20000)`` (Gumbel-top-K; 20,000
  positions), then ``optimal`` scheme's ``sample`` on those drafts;
* ``choice-k3`` / ``choice-k4``: the wor rule's exact choice law
  (``choice_probabilities``) of 20 drafted tuples, p = Zipf(1.1) and q = Zipf(0.9):
  a J-curtain of ~10^5 pieces, the size ``measure --model default --without-replacement
  --verifier selective`` meets;
* ``enumerate-s30``: a draft on 30 of the 49152 tokens, K = 3: its 24,360 ordered tuples and
  their probabilities.

``--before COMMIT`` runs the same cases on that commit too (``git archive`` into a temporary
directory) and prints both. Writes benchmarks/results/memory.json.
Run: ``python benchmarks/bench_memory.py [--before COMMIT] [--cap GIB]``.
The machine has 2 cores shared with other jobs: timings are noisy (the load average is recorded).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

from _common import print_table, provenance, write_json

RESULTS = Path(__file__).resolve().parent / "results" / "memory.json"
ROOT = Path(__file__).resolve().parent.parent
CASES = ("wor-sample", "choice-k3", "choice-k4", "enumerate-s30")
N = 49152


def _case(name: str):
    """``(warm-up, timed call)`` of one case; the timed call returns an array to checksum."""
    import numpy as np

    from multidraft.schemes import get_scheme
    from multidraft.theory import WithoutReplacement, zipf
    from multidraft.theory.verifier import optimal_selection_rule

    p, q = zipf(N, 1.1), zipf(N, 0.9)
    if name == "wor-sample":
        law = WithoutReplacement(q, 4)
        scheme = get_scheme("optimal")

        def run():
            drafts = law.sample(np.random.default_rng(0), 20000)
            tokens, _ = scheme.sample(p, law, drafts, np.random.default_rng(1))
            return np.concatenate([drafts.ravel(), tokens]).astype(np.float64)

        return lambda: scheme.sample(p, law, law.sample(np.random.default_rng(2), 2), np.random.default_rng(3)), run
    if name.startswith("choice"):
        k = int(name[-1])
        law = WithoutReplacement(q, k)
        rule = optimal_selection_rule(p, law)
        print(f"{rule.u_rule}: {len(rule.layout.piece_start)} pieces, |U| = {rule.boundary}", file=sys.stderr)
        u = np.flatnonzero((rule.position < rule.boundary) & (q > 0))
        rng = np.random.default_rng(k)
        tuples = np.stack([rng.choice(u, size=k, replace=False, p=q[u] / q[u].sum()) for _ in range(20)])
        return lambda: rule.choice_probabilities(tuples[:1]), lambda: rule.choice_probabilities(tuples)
    draft = np.zeros(N)
    draft[np.arange(0, N, 1638)[:30]] = zipf(30, 1.0)
    law = WithoutReplacement(draft, 3)
    return lambda: None, lambda: law.enumerate()[1]


def _child(name: str, cap_gib: float) -> dict:
    """Run one case in this process under the address-space cap."""
    cap = int(cap_gib * 2**30)
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    import numpy as np

    row = {"case": name, "python_path": os.environ.get("PYTHONPATH", "")}
    try:
        warm_up, run = _case(name)
        warm_up()
        tracemalloc.start()
        start = time.perf_counter()
        result = run()
        row["seconds"] = time.perf_counter() - start
        row["traced_peak_mib"] = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
        row["checksum"] = float(np.asarray(result, dtype=np.float64).sum())
        row["result"] = np.asarray(result, dtype=np.float64).ravel()[:200].tolist()
    except MemoryError as error:
        row["error"] = str(error).splitlines()[0][:160]
    row["max_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10
    return row


def _run(name: str, cap: float, tree: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run(
        [sys.executable, __file__, "--child", name, "--cap", str(cap)], capture_output=True, text=True, env=env, cwd=tree
    )
    lines = done.stdout.strip().splitlines()
    if done.returncode or not lines:
        return {"case": name, "error": (done.stderr.strip().splitlines() or ["no output"])[-1][:160]}
    return json.loads(lines[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", help="also run the cases on this commit (git archive)")
    parser.add_argument("--cap", type=float, default=6.0, help="address-space cap per case, GiB (default 6)")
    parser.add_argument("--cases", default=",".join(CASES), help="comma-separated subset of " + ", ".join(CASES))
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_child(args.child, args.cap)))
        return
    versions = [("after", ROOT)]
    with tempfile.TemporaryDirectory() as scratch:
        if args.before:
            archive = subprocess.run(["git", "archive", args.before], cwd=ROOT, capture_output=True, check=True).stdout
            subprocess.run(["tar", "-x", "-C", scratch], input=archive, check=True)
            versions.insert(0, ("before", Path(scratch)))
        rows = []
        for name in args.cases.split(","):
            results = {label: _run(name, args.cap, tree) for label, tree in versions}
            for label, row in results.items():
                row["version"] = label if label == "after" else f"before ({args.before})"
                rows.append(row)
            if len(results) == 2 and "result" in results["before"] and "result" in results["after"]:
                before, after = results["before"]["result"], results["after"]["result"]
                results["after"]["max_diff_vs_before"] = max(abs(a - b) for a, b in zip(before, after)) if len(before) == len(after) else None
    columns = ["case", "version", "seconds", "traced_peak_mib", "max_rss_mib", "checksum", "max_diff_vs_before", "error"]
    print_table(rows, columns)
    for row in rows:
        row.pop("result", None)
    write_json(RESULTS, {"provenance": provenance(), "n": N, "cap_gib": args.cap, "rows": rows})
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
