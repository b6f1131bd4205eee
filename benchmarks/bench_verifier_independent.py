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

Run: ``python benchmarks/bench_verifier_independent.py [--repeats R] [--sizes N ...] [--rounds R]
[--split | --no-split] [--pairs T1/T2 ...] [--output NAME]``. ``--split`` forces the ordered split
(docs/nonidentical_verifier.md §4d, with draft 1's blocks) on where the staircase falls short:
about 40 s per fit at n = 16384 and tens of CPU minutes at 49152 (the benchmark's warm-up call
doubles that), so run it at mid sizes on the pairs that need it
(``--sizes 4096 8192 --pairs 0.5/1.2 0.8/1.6 0.8/2 --output verifier_independent_split``).
"""

from __future__ import annotations

import argparse
import itertools

import numpy as np
from _common import measure, print_table, timed, write_results

from multidraft.theory import Independent, softmax, zipf
from multidraft.theory.optimum import product_cut
from multidraft.theory.verifier import PathMixtureRule, fit_independent_rule, fit_path_curtain
from multidraft.theory.verifier._path_mixture import fit_path_mixture

TEMPERATURES = (0.5, 0.8, 1.2, 1.6, 2.0)
EXPONENT = 1.1
BATCH = 1000


def rows_for(n: int, repeats: int, rounds: int | None, split: bool | None = None, pairs: list[str] | None = None) -> list[dict]:
    rng = np.random.default_rng(0)
    keys = rng.random(n)
    argsort_ms = 1e3 * timed(lambda: np.argsort(keys), repeats)[0]
    rows = [{"n": n, "pair": "numpy.argsort", "fit_ms": argsort_ms}]
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
        rows.append({
            "n": n,
            "pair": f"{t1:g}/{t2:g}",
            "p_star": optimum,
            "acceptance": rule.acceptance,
            "gap": rule.acceptance - optimum,
            "path": rule.path,
            "cut_ms": 1e3 * cut_timing.median,
            "fit_ms": 1e3 * fit_timing.median,
            "fit_cpu_ms": 1e3 * fit_timing.cpu_median,
            "select_1000_ms": 1e3 * select.median,
            "vs_argsort": (1e3 * (cut_timing.median + fit_timing.median)) / argsort_ms,
        })  # fmt: skip
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sizes", type=int, nargs="+", default=[49152, 131072])
    parser.add_argument("--rounds", type=int, default=None, help="column-generation rounds (default: the rule's)")
    parser.add_argument("--instances", type=int, default=300, help="random small instances")
    parser.add_argument("--split", action=argparse.BooleanOptionalAction, default=None,
                        help="force the ordered split on (~40 s per fit at n = 16384, tens of minutes at 49152) or off (default: n <= 8192)")
    parser.add_argument("--pairs", nargs="+", default=None, metavar="T1/T2", help="only these temperature pairs, e.g. 0.8/1.6")
    parser.add_argument("--output", default="verifier_independent", help="results name under benchmarks/results/")
    args = parser.parse_args()
    small = small_instances(args.instances)
    print(f"small instances: {small}")
    rows = [row for n in args.sizes for row in rows_for(n, args.repeats, args.rounds, args.split, args.pairs)]
    print_table(rows, ["n", "pair", "p_star", "acceptance", "gap", "path", "cut_ms", "fit_ms", "fit_cpu_ms", "select_1000_ms", "vs_argsort"])
    reached = [row for row in rows if "gap" in row and row["gap"] >= -1e-9]
    print(f"reached P* (to 1e-9) on {len(reached)} of {sum('gap' in row for row in rows)} settings")
    path = write_results(args.output, rows, exponent=EXPONENT, temperatures=list(TEMPERATURES), small_instances=small, split=args.split)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
