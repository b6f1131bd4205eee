"""Speed of the tree verifiers on 64-node trees at n = 49152, before and after (issue 30, item 5).

Trees (:mod:`_tree_blocks`: Zipf(1.1) targets after every prefix, drafts a hotter, noisier copy):
``chains(8, 8)`` (iid rows), ``expansion([8, 7])`` drafted iid and without replacement, the
64-node EAGLE-2-style parent array drafted without replacement (``static-64``) and top-k
(``dynamic-64``). Per (verifier, tree), median over the trees (``--seeds``) of

* ``verify`` -- the **mean** CPU time of one run (:meth:`~multidraft.trees.TreeVerifier.verify`)
  over ``--walks`` fixed walks (generator seeds ``(tree seed, i)``, the same before and after):
  a run fits only the nodes its walk visits, and a node's fit costs 6-65 ms on the wor trees
  (a node with P* < 1 needs the front/back pass), so the cost per block is the mean over walks;
  a median of a few random walks reads the generator's luck (stop 40's 42.8 ms for ``selective``
  was three visits of one slow node in five walks), and
* ``law`` -- the median CPU time of the exact E[τ | tree]
  (:meth:`~multidraft.trees.TreeVerifier.expected_accepted`, the law without next-token rows),
  with its value, computed first, so that every node's kernels are loaded before a walk is timed.

Goals (per block, CPU): verify <= 2 ms for traversal and the token walk with SpecInfer
(``token:rrs-wor`` on trees drafted without replacement, where SpecInfer is refused), <= 10 ms for
``token:optimal`` and ``selective``; law <= 20 ms for each.

**Before/after in the same run.** The same measurement runs on the code of ``--before``
(default: the merge base with ``main``; exported with ``git archive`` to a temporary directory) and
on the working tree, each in a fresh process, alternately ``--rounds`` times (each row's times the
medians over the rounds: at a load of 4 one before-then-after pass moved a row by 10-30% either
way with no change of code), on the same trees; E[τ | tree] must agree to
:data:`AGREE` (``agrees``: a rule's realised layout may move by rounding, e.g. Newton's roots by an
ulp; the law computed stays that rule's exact law, which the tests check against enumeration). Every timing is also given as a ratio to one ``np.argsort`` of a 49152-token row measured
in the same process (the machine is shared; absolute times move with its load, recorded with the
result). Writes ``benchmarks/results/tree_speed.json``.

**The allocator.** Both sides start with glibc's malloc thresholds fixed
(``--allocator retained``, the default: :func:`multidraft._allocator.retained_environment`, what
the ``multidraft`` console script sets with ``retain_freed_memory``). With glibc's own, moving
thresholds (``--allocator default``) a process may get a walk's rows fresh from the system at
every node, and one row then reads two ways from process to process (``expansion[8,7] wor``
``token:optimal``: ~10 or ~15 ms, ~1,500 page faults a walk in the slow processes).

**Selected rows.** ``--only`` (comma-separated ``VERIFIER@TREE`` patterns over :data:`VERIFIERS`
and :data:`TREES`, either side ``*``) times only the rows some pattern names, before and after;
they then replace the same rows of the existing JSON and the others are kept, each row with the
run that measured it (``run``: date, commit, before, load, the verify statistic; a row without one
is from the run in ``provenance``, and a row whose ``run`` names no verify statistic timed verify as
the median of a few random walks).

Usage: ``python benchmarks/bench_tree_speed.py [--before REV] [--rounds 1] [--seeds 2] [--repeats 5]
[--walks 40] [--only "token:specinfer@*,*@chains(8,8)"] [--allocator retained|default]``
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
GOALS_MS = {"verify": {"traversal": 2.0, "token:specinfer": 2.0, "token:rrs-wor": 2.0, "token:optimal": 10.0, "selective": 10.0}, "law": 20.0}
VERIFIERS = ("traversal", "token:specinfer", "token:rrs-wor", "token:optimal", "selective")
TREES = ("chains(8,8)", "expansion[8,7] iid", "expansion[8,7] wor", "static-64 wor", "dynamic-64 top-k")
#: At most this many seconds of timed calls per (verifier, tree, operation) after the warm-up.
TIME_CAP = 3.0
#: Largest accepted change of E[τ | tree] against the ``--before`` code.
AGREE = 1e-10


def build(name: str, n: int, seed: int):
    """One tree of the family ``name`` (module docstring)."""
    from _tree_blocks import chains, dynamic_slots, shaped

    from multidraft.trees import TreeShape

    if name == "chains(8,8)":
        return chains(n, 8, 8, seed)
    if name.startswith("expansion"):
        return shaped(n, TreeShape.expansion([8, 7]).slots, "iid" if name.endswith("iid") else "without-replacement", seed)
    return shaped(n, dynamic_slots(n, seed), "top-k" if name.endswith("top-k") else "without-replacement", seed)


def walks_ms(verifier, tree, seed: int, walks: int) -> float:
    """Mean process-CPU milliseconds of one ``verifier.verify`` run over the walks of the
    generators seeded ``(seed, 0..walks-1)`` (at most :data:`TIME_CAP` seconds of them), after one
    warm-up run."""
    verifier.verify(tree, np.random.default_rng([seed, walks]))
    times = []
    for i in range(walks):
        rng = np.random.default_rng([seed, i])
        start = time.process_time()
        verifier.verify(tree, rng)
        times.append(time.process_time() - start)
        if sum(times) >= TIME_CAP:
            break
    return 1e3 * float(np.mean(times))


def run(n: int, seeds: int, repeats: int, only: tuple[tuple[str, str], ...] = (("*", "*"),), walks: int = 40) -> dict:
    """Time the verifiers on the trees, the rows that a pattern of ``only`` names (default: all),
    with the ``multidraft`` on the path (one process)."""
    from _common import cpu_ms, measure

    from multidraft.trees import get_verifier

    row = np.random.default_rng(0).random(n)
    argsort_ms = cpu_ms(lambda: np.argsort(row), 20, cap=TIME_CAP)
    rows = []
    for tree_name in (t for t in TREES if any(_selected(v, t, only) for v in VERIFIERS)):
        trees = [build(tree_name, n, seed) for seed in range(seeds)]
        for name in (v for v in VERIFIERS if _selected(v, tree_name, only)):
            verifier = get_verifier(name)
            if not all(verifier.supports(t) for t in trees):
                continue
            verify, law, values = [], [], []
            for seed, tree in enumerate(trees):
                timing = measure(lambda: verifier.expected_accepted(tree), repeats, cap=TIME_CAP)
                law.append(1e3 * timing.cpu_median)
                values.append(float(timing.result))
                verify.append(walks_ms(verifier, tree, seed, walks))
            rows.append(dict(tree=tree_name, verifier=name, nodes=int(trees[0].nodes.count - 1),
                             verify_ms=float(np.median(verify)), law_ms=float(np.median(law)), expected=values))  # fmt: skip
            print(f"  {name:16s} {tree_name:20s} verify {rows[-1]['verify_ms']:9.2f} ms  law {rows[-1]['law_ms']:9.2f} ms", file=sys.stderr, flush=True)
    import multidraft

    return {"argsort_ms": argsort_ms, "load_average": os.getloadavg(), "rows": rows, "package": multidraft.__file__}


def before_and_after(revision: str, rounds: int, options: list[str], allocator: str = "retained") -> tuple[dict, dict]:
    """:func:`run` on the code of ``revision`` (``git archive`` into a temporary directory) and on
    the working tree, each in a fresh process, alternately ``rounds`` times; every row's times
    are the medians over the rounds (:func:`_rounds`), so that a change of the machine's load
    falls on both sides. ``allocator="retained"`` starts both with glibc's thresholds fixed
    (:func:`multidraft._allocator.retained_environment`, what the console script sets),
    ``"default"`` with glibc's own."""
    from _common import before_and_after_runs

    from multidraft._allocator import retained_environment

    environment = retained_environment() if allocator == "retained" else {}
    commit, before, after = before_and_after_runs(Path(__file__), revision, rounds, options, environment=environment)
    return {**_rounds(before), "commit": commit}, _rounds(after)


def _rounds(results: list[dict]) -> dict:
    """One :func:`run` result from several rounds: per row the median of ``verify_ms`` and
    ``law_ms`` over the rounds; E[τ | tree] must be the same in every round (it is exact)."""
    rows = []
    for row in results[0]["rows"]:
        same = [next(r for r in result["rows"] if (r["tree"], r["verifier"]) == (row["tree"], row["verifier"])) for result in results]
        if any(r["expected"] != row["expected"] for r in same):
            raise RuntimeError(f"{row['verifier']} on {row['tree']}: E[τ | tree] changed between rounds")
        rows.append({**row, **{key: float(np.median([r[key] for r in same])) for key in ("verify_ms", "law_ms")}})
    return {
        "argsort_ms": float(np.median([r["argsort_ms"] for r in results])), "load_average": results[-1]["load_average"],
        "rows": rows, "package": results[0]["package"], "rounds": len(results),
    }  # fmt: skip


def _selected(verifier: str, tree: str, only: tuple[tuple[str, str], ...]) -> bool:
    return any(v in ("*", verifier) and t in ("*", tree) for v, t in only)


def _patterns(text: str) -> tuple[tuple[str, str], ...]:
    """``--only``: comma-separated ``VERIFIER@TREE`` patterns (``*`` for any); unknown names fail with the lists."""
    patterns = []
    for item in (part.strip() for part in re.split(r",(?![^()\[\]]*[)\]])", text)):  # not the commas inside names
        verifier, _, tree = item.partition("@")
        if verifier not in ("*", *VERIFIERS) or tree not in ("*", *TREES):
            raise argparse.ArgumentTypeError(f"{item!r}: expected VERIFIER@TREE with VERIFIER in *, {', '.join(VERIFIERS)} and TREE in *, {', '.join(TREES)}")
        patterns.append((verifier, tree))
    return tuple(patterns)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=int, default=49152)
    parser.add_argument("--seeds", type=int, default=2, help="trees per family")
    parser.add_argument("--repeats", type=int, default=5, help="timed law calls per tree (capped at 3 s)")
    parser.add_argument("--walks", type=int, default=40, help="timed verify runs per tree, one per fixed walk (capped at 3 s)")
    parser.add_argument("--before", default=None, help="revision timed as 'before' (default: merge base with main)")
    parser.add_argument("--rounds", type=int, default=1, help="before/after runs, alternating in fresh processes (medians over them)")
    parser.add_argument("--only", type=_patterns, default=(("*", "*"),), help="comma-separated VERIFIER@TREE rows to time (* for any; default: all)")
    parser.add_argument(
        "--allocator", choices=("retained", "default"), default="retained",
        help="glibc's malloc thresholds in the timed processes: fixed as the console script fixes them (default), or glibc's own",
    )  # fmt: skip
    parser.add_argument("--inner", default=None, help=argparse.SUPPRESS)  # a before/after subprocess writes here
    args = parser.parse_args()
    if args.inner:
        Path(args.inner).write_text(json.dumps(run(args.vocab, args.seeds, args.repeats, args.only, args.walks)))
        return
    options = ["--vocab", str(args.vocab), "--seeds", str(args.seeds), "--repeats", str(args.repeats), "--walks", str(args.walks)]
    options += ["--only", ",".join(f"{v}@{t}" for v, t in args.only)]
    complete = ("*", "*") in args.only

    from _common import print_table, provenance, write_json

    revision = args.before or subprocess.run(["git", "merge-base", "HEAD", "main"], capture_output=True, text=True, check=True, cwd=HERE).stdout.strip()
    print(f"before: {revision}; after: the working tree", file=sys.stderr)
    old, new = before_and_after(revision, args.rounds, options, args.allocator)
    previous = {(r["tree"], r["verifier"]): r for r in old["rows"]}
    rows = []
    for r in new["rows"]:
        o = previous.get((r["tree"], r["verifier"]))
        goal_verify = GOALS_MS["verify"][r["verifier"]]
        rows.append(
            dict(
                tree=r["tree"],
                verifier=r["verifier"],
                verify_before_ms=o and o["verify_ms"],
                verify_ms=r["verify_ms"],
                verify_goal_ms=goal_verify,
                verify_met=r["verify_ms"] <= goal_verify,
                law_before_ms=o and o["law_ms"],
                law_ms=r["law_ms"],
                law_met=r["law_ms"] <= GOALS_MS["law"],
                speedup_law=o and o["law_ms"] / r["law_ms"],
                verify_in_argsorts=r["verify_ms"] / new["argsort_ms"],
                law_in_argsorts=r["law_ms"] / new["argsort_ms"],
                expected=float(np.mean(r["expected"])),
                largest_change_of_expected=o and float(np.max(np.abs(np.subtract(r["expected"], o["expected"])))),
            )
        )
        rows[-1]["agrees"] = o is not None and rows[-1]["largest_change_of_expected"] <= AGREE
    print_table(rows, ["tree", "verifier", "verify_before_ms", "verify_ms", "verify_met", "law_before_ms", "law_ms", "law_met",
                       "speedup_law", "law_in_argsorts", "expected", "largest_change_of_expected", "agrees"])  # fmt: skip
    print(f"np.argsort of one row: before {old['argsort_ms']:.2f} ms, after {new['argsort_ms']:.2f} ms; load {os.getloadavg()}")
    data = {
        "provenance": provenance(),
        "arguments": {k: v for k, v in vars(args).items() if k != "inner"},
        "goals_ms": GOALS_MS,
        "before": {"commit": old["commit"], "argsort_ms": old["argsort_ms"], "load_average": old["load_average"], "package": old["package"]},
        "after": {"argsort_ms": new["argsort_ms"], "load_average": new["load_average"], "package": new["package"]},
    }
    record = {
        "date": data["provenance"]["date"], "commit": data["provenance"].get("commit"), "before": old["commit"],
        "load_average": new["load_average"], "verify": f"mean over {args.walks} fixed walks", "rounds": args.rounds,
        "allocator": args.allocator,
    }  # fmt: skip
    rows = [{**row, "run": record} for row in rows]
    path = HERE / "results" / "tree_speed.json"
    if not complete and path.exists():  # a selection: its rows replace the same rows, the rest are kept
        data = json.loads(path.read_text())
        measured = {(r["tree"], r["verifier"]) for r in rows}
        rows = [r for r in data["rows"] if (r["tree"], r["verifier"]) not in measured] + rows
        rows.sort(key=lambda r: (TREES.index(r["tree"]), VERIFIERS.index(r["verifier"])))
    data["rows"] = rows
    path = write_json(path, data)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
