"""The path curtain for two independent non-identical drafts (issue 33): acceptance against P*
and time, at full vocabulary.

For n = 49152 and 131072, a Zipf-like target (``p_(r) ∝ r^-1.1``, tokens permuted; the gap
table's family) and every pair of draft temperatures in {0.5, 0.8, 1.2, 1.6, 2.0}, equal ones included
(``q = softmax(log p / T)``): the rule's own exact acceptance ``Σ min(p, r)`` minus P* (the
threshold search), which path reached it, and the times of the min-cut search, of the fit given
the cut, and of one selection of a batch of 1,000 draft pairs, next to ``numpy.argsort`` of the
same size. Medians after a warm-up (CPU time of this process beside the wall time; the machine
is shared). Memory: the rule keeps O(n) arrays per draft (groups, pieces: fewer than 2 per
group) plus the path's n + 1 breakpoints.

Small instances (n in 2..7, Dirichlet target and drafts, ``--instances`` of them): the share
whose fitted single path reaches P* (to 1e-12), the share the rule (that path, else the random
path turned into one staircase path) reaches, the worst gap, how many needed the staircase and the
largest random path behind one, and the fit times.

Writes benchmarks/results/verifier_independent.json.

**Before/after in the same run** (``--before REV``): the rows are also measured on the code of
REV (``git archive`` into a temporary directory), each side in a fresh process, alternately
``--before-rounds`` times, times the medians over the rounds; the table adds each side's CPU
times, the speed-up, and the largest difference of the per-draft laws and of P* between them.
``total_cpu_ms`` = cut + fit + one selection (CPU), ``total_vs_argsort_cpu`` its ratio to
``numpy.argsort`` of n doubles measured in the same process.

Run: ``python benchmarks/bench_verifier_independent.py [--repeats R] [--sizes N ...] [--rounds R]
[--split | --no-split] [--pairs T1/T2 ...] [--before REV [--before-rounds R]] [--output NAME]``. ``--split`` forces the ordered split
(docs/nonidentical_verifier.md §4d, with draft 1's blocks) on where the staircase falls short:
about 40 s per fit at n = 16384 and tens of CPU minutes at 49152 (the benchmark's warm-up call
doubles that), so run it at mid sizes on the pairs that need it
(``--sizes 4096 8192 --pairs 0.5/1.2 0.8/1.6 0.8/2 --output verifier_independent_split``).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
from pathlib import Path

import numpy as np
from _common import before_and_after_runs, measure, print_table, write_results

from multidraft.theory import Independent, softmax, zipf
from multidraft.theory.optimum import product_cut
from multidraft.theory.verifier import PathMixtureRule, fit_independent_rule, fit_path_curtain
from multidraft.theory.verifier._path_mixture import fit_path_mixture

TEMPERATURES = (0.5, 0.8, 1.2, 1.6, 2.0)
EXPONENT = 1.1
BATCH = 1000
HERE = Path(__file__).resolve().parent
#: The times of a row taken as the median over the before/after rounds.
TIMES = ("cut_ms", "cut_cpu_ms", "fit_ms", "fit_cpu_ms", "select_1000_ms", "select_cpu_ms", "total_cpu_ms")


def rows_for(n: int, repeats: int, rounds: int | None, split: bool | None = None, pairs: list[str] | None = None, laws: dict | None = None) -> list[dict]:
    """One row per temperature pair at vocabulary n (and numpy.argsort's), times after a warm-up;
    ``laws`` (if given) collects every rule's per-draft laws and P* by row name."""
    rng = np.random.default_rng(0)
    keys = rng.random(n)
    argsort = measure(lambda: np.argsort(keys), max(repeats, 5))
    argsort_ms, argsort_cpu_ms = 1e3 * argsort.median, 1e3 * argsort.cpu_median
    rows = [{"n": n, "pair": "numpy.argsort", "fit_ms": argsort_ms, "fit_cpu_ms": argsort_cpu_ms}]
    target = zipf(n, EXPONENT, rng)
    for t1, t2 in itertools.combinations_with_replacement(TEMPERATURES, 2):  # the diagonal: identical drafts
        if pairs is not None and f"{t1:g}/{t2:g}" not in pairs:
            continue
        drafts = np.array([softmax(np.log(target), t1), softmax(np.log(target), t2)])
        cut_timing = measure(lambda: product_cut(target, drafts), repeats)
        cut = cut_timing.result
        optimum = min(1.0, 1.0 + float(cut.value))
        fit_timing = measure(
            lambda: fit_independent_rule(target, *drafts, certificate=cut.certificate, optimum=optimum, rounds=rounds, split=split), repeats
        )
        rule = fit_timing.result
        tuples = Independent(list(drafts)).sample(rng, BATCH)
        select = measure(lambda: rule.choose(tuples, rng), repeats)
        total_cpu = 1e3 * (cut_timing.cpu_median + fit_timing.cpu_median + select.cpu_median)
        rows.append({
            "n": n,
            "pair": f"{t1:g}/{t2:g}",
            "p_star": optimum,
            "acceptance": rule.acceptance,
            "gap": rule.acceptance - optimum,
            "path": rule.path,
            "cut_ms": 1e3 * cut_timing.median,
            "cut_cpu_ms": 1e3 * cut_timing.cpu_median,
            "fit_ms": 1e3 * fit_timing.median,
            "fit_cpu_ms": 1e3 * fit_timing.cpu_median,
            "select_1000_ms": 1e3 * select.median,
            "select_cpu_ms": 1e3 * select.cpu_median,
            "total_cpu_ms": total_cpu,
            "vs_argsort": (1e3 * (cut_timing.median + fit_timing.median)) / argsort_ms,
            "total_vs_argsort_cpu": total_cpu / argsort_cpu_ms,
        })  # fmt: skip
        if laws is not None:
            laws[f"{n}_{t1:g}/{t2:g}"] = np.concatenate([rule.law1, rule.law2, [optimum]])
    return rows


def before_and_after(revision: str, rounds: int, options: list[str]) -> tuple[dict, dict]:
    """The rows on the code of ``revision`` (``git archive`` into a temporary directory) and on
    the working tree, each in a fresh process, alternately ``rounds`` times; every row's times
    are the medians over the rounds (the load changes on both sides alike). Each side's laws
    and P* come back from its last round, for the comparison."""

    def read(out: Path) -> tuple[dict, dict]:
        with np.load(out.with_suffix(".npz")) as saved:
            return json.loads(out.read_text()), {name: saved[name] for name in saved.files}

    commit, before, after = before_and_after_runs(Path(__file__), revision, rounds, options, read)
    return (
        {**_rounds([rows for rows, _ in before]), "commit": commit, "laws": before[-1][1]},
        {**_rounds([rows for rows, _ in after]), "laws": after[-1][1]},
    )


def _rounds(results: list[dict]) -> dict:
    """One side's rows from its rounds: the times (:data:`TIMES`) the medians over the rounds."""
    rows = []
    for row in results[0]["rows"]:
        same = [next(r for r in result["rows"] if (r["n"], r["pair"]) == (row["n"], row["pair"])) for result in results]
        rows.append({**row, **{key: float(np.median([r[key] for r in same])) for key in TIMES if key in row}})
    return {"rows": rows, "package": results[0]["package"], "load_average": results[-1]["load_average"], "rounds": len(results)}


def _with_before(new: dict, old: dict) -> list[dict]:
    """The working tree's rows with the ``--before`` side's times (``*_before``), the largest
    difference of the per-draft laws and of P* between the two, and the CPU speed-ups."""
    previous = {(r["n"], r["pair"]): r for r in old["rows"]}
    argsort = {r["n"]: r for r in new["rows"] if r["pair"] == "numpy.argsort"}
    rows = []
    for row in new["rows"]:
        before = previous.get((row["n"], row["pair"]), {})
        row = {**row, **{key[:-3] + "_before_ms": before.get(key) for key in TIMES if key in row}}
        name = f"{row['n']}_{row['pair']}"
        if name in new["laws"] and name in old["laws"]:
            a, b = new["laws"][name], old["laws"][name]
            row["law_max_diff"] = float(np.max(np.abs(a[:-1] - b[:-1]))) if a.shape == b.shape else None
            row["p_star_diff"] = float(a[-1] - b[-1])
        if "total_cpu_ms" in row and row.get("total_cpu_before_ms"):
            row["speedup_cpu"] = row["total_cpu_before_ms"] / row["total_cpu_ms"]
            row["total_vs_argsort_cpu"] = row["total_cpu_ms"] / argsort[row["n"]]["fit_cpu_ms"]
        rows.append(row)
    return rows


def small_instances(instances: int) -> dict:
    """Reach of one path and of the rule on random small instances, and the fit times."""
    import time

    rng = np.random.default_rng(33)
    single = reached = 0
    worst, components, times = 0.0, [], []
    for _ in range(instances):
        n = int(rng.integers(2, 8))
        p, q1, q2 = (rng.dirichlet(np.full(n, float(rng.choice([0.1, 0.3, 1.0, 3.0])))) for _ in range(3))
        one = fit_path_curtain(p, q1, q2)
        single += one.acceptance >= one.optimum - 1e-12
        start = time.perf_counter()
        rule = fit_independent_rule(p, q1, q2)
        times.append(time.perf_counter() - start)
        gap = rule.acceptance - rule.optimum
        worst = min(worst, gap)
        reached += gap >= -1e-12
        if rule.path == "staircase":
            mixture = fit_path_mixture(p, q1, q2)
            components.append(len(mixture.components) if isinstance(mixture, PathMixtureRule) else 1)
    return {
        "instances": instances, "single_path_reached": single, "rule_reached": reached, "worst_gap": worst,
        "staircases": len(components), "max_components_behind_a_staircase": max(components, default=0),
        "fit_ms_median": 1e3 * float(np.median(times)), "fit_ms_max": 1e3 * float(np.max(times)),
    }  # fmt: skip


def run(sizes: list[int], repeats: int, rounds: int | None, split: bool | None, pairs: list[str] | None, laws: dict) -> dict:
    """The rows at every size with the ``multidraft`` on the path (one process)."""
    import multidraft

    rows = [row for n in sizes for row in rows_for(n, repeats, rounds, split, pairs, laws)]
    return {"rows": rows, "package": multidraft.__file__, "load_average": os.getloadavg()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sizes", type=int, nargs="+", default=[49152, 131072])
    parser.add_argument("--rounds", type=int, default=None, help="column-generation rounds (default: the rule's)")
    parser.add_argument("--instances", type=int, default=300, help="random small instances (0: none)")
    parser.add_argument("--split", action=argparse.BooleanOptionalAction, default=None,
                        help="force the ordered split on (~40 s per fit at n = 16384, tens of minutes at 49152) or off (default: n <= 8192)")
    parser.add_argument("--pairs", nargs="+", default=None, metavar="T1/T2", help="only these temperature pairs, e.g. 0.8/1.6")
    parser.add_argument("--before", default=None, metavar="REV", help="also time the code of REV (e.g. main), in fresh processes alternating with the working tree's")
    parser.add_argument("--before-rounds", type=int, default=2, help="with --before: the alternating rounds (times: medians over them)")
    parser.add_argument("--output", default="verifier_independent", help="results name under benchmarks/results/")
    parser.add_argument("--inner", default=None, help=argparse.SUPPRESS)  # a before/after subprocess writes here
    args = parser.parse_args()
    if args.inner:
        laws: dict = {}
        Path(args.inner).write_text(json.dumps(run(args.sizes, args.repeats, args.rounds, args.split, args.pairs, laws)))
        np.savez(Path(args.inner).with_suffix(".npz"), **laws)
        return
    small = small_instances(args.instances) if args.instances else None
    print(f"small instances: {small}")
    columns = ["n", "pair", "p_star", "gap", "path", "cut_cpu_ms", "fit_cpu_ms", "select_cpu_ms", "total_cpu_ms", "total_vs_argsort_cpu"]
    if args.before:
        options = ["--sizes", *map(str, args.sizes), "--repeats", str(args.repeats)]
        options += (["--rounds", str(args.rounds)] if args.rounds is not None else []) + (["--pairs", *args.pairs] if args.pairs else [])
        options += [] if args.split is None else ["--split" if args.split else "--no-split"]
        old, new = before_and_after(args.before, args.before_rounds, options)
        rows = _with_before(new, old)
        columns[5:5] = ["cut_cpu_before_ms"]
        columns[7:7] = ["fit_cpu_before_ms"]
        columns[10:10] = ["total_cpu_before_ms"]
        columns += ["speedup_cpu", "law_max_diff", "p_star_diff"]
        before = {"revision": args.before, "commit": old["commit"], "rounds": args.before_rounds, "load_average": old["load_average"]}
    else:
        rows = run(args.sizes, args.repeats, args.rounds, args.split, args.pairs, {})["rows"]
        before = None
    print_table(rows, columns)
    reached = [row for row in rows if "gap" in row and row["gap"] >= -1e-9]
    print(f"reached P* (to 1e-9) on {len(reached)} of {sum('gap' in row for row in rows)} settings; load {os.getloadavg()}")
    path = write_results(args.output, rows, exponent=EXPONENT, temperatures=list(TEMPERATURES), small_instances=small, split=args.split, before=before)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
