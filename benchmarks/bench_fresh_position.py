"""The iid optimal verifier per *fresh* position on a top-100 draft (issue 34, item 3): the draft
law built, the target and the drafts validated, the rule fitted and run once -- what
``Optimal().sample(p, IID(q, K), drafts, rng)`` costs when every position brings new p and q.

n = 131072, Zipf targets (exponent 1.1, eight of them, cycled so no position reuses the last
one's arrays), drafts q = top-100 of softmax(log p / T) for T in {0.8, 1.2, 1.6}, K in {2, 4, 8}.
Median process-CPU ms per position and per stage (law, check_target, _check_tuples, fit +
sample), and the acceptance of every fitted rule and the tokens drawn with a fixed seed (to
compare versions: the same numbers to 1e-12, the same tokens).

``--before COMMIT`` runs the same measurement on that commit too (``git archive`` into a
temporary directory, a child process each), in the same run, for the ratio: ``--rounds`` times
each, the two versions alternating, every timing the least over the rounds (the round a shared
CPU disturbed least).

Writes ``benchmarks/results/fresh_position.json`` (machine, versions, date, commit, load).

Usage: ``python benchmarks/bench_fresh_position.py [--before COMMIT] [--positions 400]``
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import print_table, write_results

ROOT = Path(__file__).resolve().parents[1]
N, TOP, TARGET_MS = 131072, 100, 0.3


def _median_cpu_ms(function, arguments) -> float:
    function(*arguments[0])  # warm-up
    times = []
    for args in arguments:
        start = time.process_time()
        function(*args)
        times.append(time.process_time() - start)
    return 1e3 * float(np.median(times))


def _child(positions: int) -> list[dict]:
    from multidraft.schemes import get_scheme
    from multidraft.schemes.base import _check_tuples
    from multidraft.theory import IID, softmax, top_k, zipf
    from multidraft.theory.verifier import fit_curtain_rule

    scheme = get_scheme("optimal")
    targets = [zipf(N, exponent=1.1, rng=np.random.default_rng(seed)) for seed in range(8)]
    rows = []
    for temperature in (0.8, 1.2, 1.6):
        drafts_of = [top_k(softmax(np.log(p), temperature=temperature), TOP) for p in targets]
        for k in (2, 4, 8):
            rng = np.random.default_rng(k)
            tuples = [IID(q, k).sample(rng, 1) for q in drafts_of]
            cases = [(targets[i % 8], drafts_of[i % 8], tuples[i % 8]) for i in range(positions)]
            laws = [IID(q, k) for q in drafts_of]
            checked = [law.check_target(p) for law, p in zip(laws, targets)]
            # the law's support where fit_curtain_rule takes it (as the scheme passes it), else found in the fit
            known = [(law.support_tokens(),) if "support" in inspect.signature(fit_curtain_rule).parameters else () for law in laws]
            rng = np.random.default_rng(0)
            row = {
                "T": temperature, "K": k,
                "fresh position ms": _median_cpu_ms(lambda p, q, x: scheme.sample(p, IID(q, k), x, rng), cases),
                "law ms": _median_cpu_ms(lambda p, q, x: IID(q, k), cases),
                "check_target ms": _median_cpu_ms(lambda i: laws[i].check_target(targets[i]), [(i % 8,) for i in range(positions)]),
                "check_tuples ms": _median_cpu_ms(lambda i: _check_tuples(laws[i], tuples[i], True), [(i % 8,) for i in range(positions)]),
                "fit+sample ms": _median_cpu_ms(
                    lambda i: fit_curtain_rule(checked[i], laws[i].draft, k, *known[i]).sample(tuples[i], rng), [(i % 8,) for i in range(positions)]
                ),
            }  # fmt: skip
            draw = np.random.default_rng(7)
            row["acceptance"] = [fit_curtain_rule(c, law.draft, k).acceptance for c, law in zip(checked, laws)]
            row["tokens"] = [int(scheme.sample(p, IID(q, k), x, draw)[0][0]) for p, q, x in zip(targets, drafts_of, tuples)]
            rows.append(row)
    return rows


def _run(tree: Path, positions: int) -> list[dict]:
    done = subprocess.run(
        [sys.executable, __file__, "--child", "--positions", str(positions)],
        capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(tree)}, cwd=tree / "benchmarks", check=True,
    )  # fmt: skip
    return json.loads(done.stdout.strip().splitlines()[-1])


def _least_over_rounds(rounds: list[list[dict]]) -> list[dict]:
    """The first round's rows with every timing (a key ending in "ms") the least over the rounds."""
    return [
        {key: min(r[key] for r in same) if key.endswith(" ms") else value for key, value in same[0].items()}
        for same in zip(*rounds)
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", help="also run on this commit (git archive), in the same run")
    parser.add_argument("--positions", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=3, help="runs of each version, alternating")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_child(args.positions)))
        return
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as scratch:
        trees = {}
        if args.before:
            archive = subprocess.run(["git", "archive", args.before], cwd=ROOT, capture_output=True, check=True).stdout
            subprocess.run(["tar", "-x", "-C", scratch], input=archive, check=True)
            (Path(scratch) / "benchmarks" / Path(__file__).name).write_text(Path(__file__).read_text())
            trees["before"] = Path(scratch)
        trees["after"] = ROOT
        runs = {label: [] for label in trees}
        for _ in range(args.rounds):
            for label, tree in trees.items():
                runs[label].append(_run(tree, args.positions))
        versions = {label: _least_over_rounds(rounds) for label, rounds in runs.items()}
    rows = []
    for label, table in versions.items():
        for row in table:
            row = {"version": label if label == "after" else f"before ({args.before})", **row}
            if label == "after" and "before" in versions:
                old = next(r for r in versions["before"] if (r["T"], r["K"]) == (row["T"], row["K"]))
                row["speed-up"] = old["fresh position ms"] / row["fresh position ms"]
                row["max |acc diff|"] = float(np.max(np.abs(np.subtract(old["acceptance"], row["acceptance"]))))
                row["same tokens"] = old["tokens"] == row["tokens"]
            row["within target"] = row["fresh position ms"] <= TARGET_MS
            rows.append(row)
    columns = [c for c in rows[-1] if c not in ("acceptance", "tokens")]
    print_table(rows, columns)
    path = write_results("fresh_position", rows, n=N, top=TOP, target_ms=TARGET_MS, before=args.before, rounds=args.rounds,
                         load_before=load_before, load_after=os.getloadavg())  # fmt: skip
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
