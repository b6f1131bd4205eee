"""The ascent on draft 2's law against the ordered split (issue 33; docs/nonidentical_verifier.md §4e).

Zipf(1.1) target (tokens permuted) and drafts ``softmax(log p / T)``, the instances of
bench_verifier_independent.py (same seed). Per size and temperature pair: P* (threshold search),
the fit (:func:`multidraft.theory.verifier._orientation.ascent_staircase`: the ascent, its steps,
the draft whose law it climbed, and the staircase from that law; CPU and wall time, the CPU time
of that staircase alone (:func:`~multidraft.theory.verifier._staircase.fit_staircase` from the
climbed law), exact gap =
the path's own Σ min(p, r) − P*), the laws' (GR) checks
(prefix pairs along the density orders, and the one-dimensional check), and, where
``n <= --split-max``, the ordered split's CPU time and gap in the same run (seeded, as in
``fit_independent_rule``, by the fitted path's laws; the staircase from its draft-1 law).
``numpy.argsort`` of the same size for scale. Medians over ``--repeats`` calls after a warm-up;
CPU time of this process (the machine is shared).

``--dirichlet COUNT``: instead, COUNT random instances per size off the Zipf family (Dirichlet
target and drafts, half of them with related drafts), one call each, the ordered split beside.

**Before/after in the same run** (``--before REV``): the rows are also measured on the code of REV
(``git archive``), in fresh processes alternating with the working tree's ``--before-rounds``
times; the table adds REV's fit and staircase CPU times (medians over the rounds, as are the
working tree's) and the staircase's speed-up.

Writes benchmarks/results/orientation.json (or ``--output``).

Run: ``python benchmarks/bench_orientation.py [--sizes N ...] [--pairs T1/T2 ... | --pairs all]
[--split-max N] [--repeats R] [--dirichlet COUNT] [--before REV [--before-rounds R]] [--output NAME]``.
"""

from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path

import numpy as np
from _common import before_and_after_runs, measure, print_table, write_results

from multidraft.theory import softmax, zipf
from multidraft.theory.optimum import product_cut
from multidraft.theory.verifier import fit_path_curtain
from multidraft.theory.verifier._ordered_split import ordered_split, prefix_pair_violation
from multidraft.theory.verifier._orientation import ascent_staircase, gr_excess
from multidraft.theory.verifier._staircase import fit_staircase

TEMPERATURES = (0.5, 0.8, 1.2, 1.6, 2.0)
HARD = ("0.5/1.2", "0.8/1.6", "0.8/2")
EXPONENT = 1.1


def _gap(p: np.ndarray, laws: tuple, optimum: float) -> float:
    return float(np.minimum(p, laws[0] + laws[1]).sum()) - optimum


def rows_for(n: int, pairs: list[str], repeats: int, split_max: int) -> list[dict]:
    rng = np.random.default_rng(0)
    keys = rng.random(n)
    rows = [{"n": n, "pair": "numpy.argsort", "fit_cpu_ms": 1e3 * measure(lambda: np.argsort(keys), repeats).cpu_median}]
    target = zipf(n, EXPONENT, rng)
    for t1, t2 in itertools.combinations_with_replacement(TEMPERATURES, 2):
        if f"{t1:g}/{t2:g}" not in pairs:
            continue
        qs = (softmax(np.log(target), t1), softmax(np.log(target), t2))
        cut_timing = measure(lambda: product_cut(target, np.array(qs)), repeats)
        cut = cut_timing.result
        optimum = min(1.0, 1.0 + float(cut.value))
        in_t = np.zeros(n, dtype=bool)
        in_t[cut.certificate] = True
        parts = (np.flatnonzero(~in_t), np.flatnonzero(in_t))
        fit = measure(lambda: ascent_staircase(target, qs, parts, optimum), repeats)
        out = fit.result
        staircase = measure(lambda: fit_staircase(target, qs, parts, out.ascent.law2, out.fixed), repeats)
        laws = (out.law1, out.law2)
        orders = tuple(np.argsort(-(x / q), kind="stable") for x, q in zip(laws, qs))
        row = {
            "n": n, "pair": f"{t1:g}/{t2:g}", "p_star": optimum, "cut_ms": 1e3 * cut_timing.median,
            "climbed": f"draft {out.fixed + 1}", "steps": out.ascent.steps, "ascent_gap": out.ascent.value - optimum,
            "fit_cpu_ms": 1e3 * fit.cpu_median, "fit_ms": 1e3 * fit.median, "staircase_cpu_ms": 1e3 * staircase.cpu_median,
            "gap": _gap(target, laws, optimum),
            "pair_check": prefix_pair_violation(qs, orders, laws)[1], "gr_1d": gr_excess(qs, laws),
            "law_sum_minus_1": float(laws[0].sum() + laws[1].sum() - 1.0),
        }  # fmt: skip
        if n <= split_max:
            seed = fit_path_curtain(target, *qs, certificate=cut.certificate, optimum=optimum)
            split = measure(lambda: ordered_split(target, qs, parts, (seed.law1, seed.law2), optimum), 1)
            split_laws = fit_staircase(target, qs, parts, split.result[0], 0)[:2]
            row |= {"split_cpu_ms": 1e3 * split.cpu_median, "split_gap": _gap(target, split_laws, optimum)}
            row["split_over_ascent"] = row["split_cpu_ms"] / row["fit_cpu_ms"]
        rows.append(row)
        print_table([row], list(row))
    return rows


def dirichlet_rows(n: int, count: int, split_max: int) -> list[dict]:
    """``count`` random instances at size n, off the Zipf family: Dirichlet(α) target and drafts
    (α cycling over 0.1, 0.3, 1), every second one with ``q_2 ∝ q_1^1.5`` and p half Dirichlet,
    half ``∝ q_1^0.7``; the fit (one call, CPU) and, where ``n <= split_max``, the ordered split
    seeded with the fitted path's laws."""
    rng = np.random.default_rng(7)
    rows = []
    for index in range(count):
        alpha = (0.1, 0.3, 1.0)[index % 3]
        p, q1, q2 = (rng.dirichlet(np.full(n, alpha)) for _ in range(3))
        if index % 2:
            q2 = q1**1.5 / (q1**1.5).sum()
            p = 0.5 * p + 0.5 * q1**0.7 / (q1**0.7).sum()
        cut = product_cut(p, np.array([q1, q2]))
        optimum = min(1.0, 1.0 + float(cut.value))
        in_t = np.zeros(n, dtype=bool)
        in_t[cut.certificate] = True
        parts = (np.flatnonzero(~in_t), np.flatnonzero(in_t))
        fit = measure(lambda: ascent_staircase(p, (q1, q2), parts, optimum), 1)
        out = fit.result
        row = {"n": n, "pair": f"dirichlet {index} (α = {alpha:g})", "p_star": optimum, "climbed": f"draft {out.fixed + 1}",
               "steps": out.ascent.steps, "fit_cpu_ms": 1e3 * fit.cpu_median, "gap": _gap(p, (out.law1, out.law2), optimum)}  # fmt: skip
        if n <= split_max:
            seed = fit_path_curtain(p, q1, q2, certificate=cut.certificate, optimum=optimum)
            split = measure(lambda: ordered_split(p, (q1, q2), parts, (seed.law1, seed.law2), optimum), 1)
            row |= {"split_cpu_ms": 1e3 * split.cpu_median, "split_lp_gap": split.result[2] - optimum}
        rows.append(row)
        print_table([row], list(row))
    return rows


def _with_before(new: list[list[dict]], old: list[list[dict]]) -> list[dict]:
    """The last round's rows of the working tree with every CPU time the median over the rounds,
    and the ``--before`` side's fit and staircase CPU times (``*_before_ms``, medians) beside."""
    def medians(rounds: list[list[dict]]) -> dict:
        keyed = {}
        for rows in rounds:
            for row in rows:
                keyed.setdefault((row["n"], row["pair"]), []).append(row)
        return {key: {name: float(np.median([row[name] for row in rows])) for name in ("fit_cpu_ms", "staircase_cpu_ms") if name in rows[0]} | {"climbed": rows[-1].get("climbed")} for key, rows in keyed.items()}

    after, before = medians(new), medians(old)
    out = []
    for row in new[-1]:
        key = (row["n"], row["pair"])
        row = {**row, **{name: value for name, value in after[key].items() if name != "climbed"}}
        previous = before.get(key, {})
        row |= {"fit_cpu_before_ms": previous.get("fit_cpu_ms"), "staircase_cpu_before_ms": previous.get("staircase_cpu_ms"), "climbed_before": previous.get("climbed")}
        if row.get("staircase_cpu_ms") and row.get("staircase_cpu_before_ms"):
            row["staircase_speedup"] = row["staircase_cpu_before_ms"] / row["staircase_cpu_ms"]
        out.append(row)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[4096, 8192])
    parser.add_argument("--pairs", nargs="+", default=list(HARD), metavar="T1/T2", help="temperature pairs, or 'all' (the 15 of the gap table)")
    parser.add_argument("--split-max", type=int, default=8192, help="largest n at which the ordered split runs beside the ascent")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dirichlet", type=int, default=0, metavar="COUNT", help="instead: COUNT random Dirichlet instances per size")
    parser.add_argument("--output", default="orientation", help="results name under benchmarks/results/")
    parser.add_argument("--before", default=None, metavar="REV", help="also time the code of REV (e.g. integ6), in fresh processes alternating with the working tree's")
    parser.add_argument("--before-rounds", type=int, default=2, help="with --before: the alternating rounds (times: medians over them)")
    parser.add_argument("--inner", default=None, help=argparse.SUPPRESS)  # a before/after subprocess writes its rows here
    args = parser.parse_args()
    if args.dirichlet:
        rows = [row for n in args.sizes for row in dirichlet_rows(n, args.dirichlet, args.split_max)]
        print_table(rows, ["n", "pair", "p_star", "climbed", "steps", "fit_cpu_ms", "gap", "split_cpu_ms", "split_lp_gap"])
        print(f"the path from the ascent at P* (to 1e-9) on {sum(row['gap'] >= -1e-9 for row in rows)} of {len(rows)} instances")
        print(f"wrote {write_results(args.output, rows, dirichlet=args.dirichlet, split_max=args.split_max)}")
        return
    pairs = [f"{a:g}/{b:g}" for a, b in itertools.combinations_with_replacement(TEMPERATURES, 2)] if args.pairs == ["all"] else args.pairs
    if args.inner:
        rows = [row for n in args.sizes for row in rows_for(n, pairs, args.repeats, args.split_max)]
        Path(args.inner).write_text(json.dumps(rows))
        return
    columns = ["n", "pair", "p_star", "climbed", "steps", "fit_cpu_ms", "fit_ms", "staircase_cpu_ms", "gap", "pair_check", "gr_1d", "split_cpu_ms", "split_gap", "split_over_ascent"]
    before = None
    if args.before:
        options = ["--sizes", *map(str, args.sizes), "--pairs", *pairs, "--split-max", str(args.split_max), "--repeats", str(args.repeats)]
        commit, old, new = before_and_after_runs(Path(__file__), args.before, args.before_rounds, options)
        rows = _with_before(new, old)
        columns = ["n", "pair", "p_star", "climbed_before", "climbed", "steps", "fit_cpu_before_ms", "fit_cpu_ms", "staircase_cpu_before_ms", "staircase_cpu_ms", "staircase_speedup", "gap", "pair_check", "gr_1d"]
        before = {"revision": args.before, "commit": commit, "rounds": args.before_rounds}
    else:
        rows = [row for n in args.sizes for row in rows_for(n, pairs, args.repeats, args.split_max)]
    print_table(rows, columns)
    settled = [row for row in rows if "gap" in row]
    print(f"staircase from the ascent at P* (to 1e-9) on {sum(row['gap'] >= -1e-9 for row in settled)} of {len(settled)} settings")
    path = write_results(args.output, rows, exponent=EXPONENT, pairs=pairs, split_max=args.split_max, before=before)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
