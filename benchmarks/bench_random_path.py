"""The random path at full vocabulary (issue 33): how far column generation closes the gap
that one path leaves.

For n = 49152 (``--sizes``), the Zipf(1.1) target and draft temperature pairs of
bench_verifier_independent.py (``--pairs``, default the pairs one path does not reach), one fit
of ``fit_path_mixture(..., rounds=R)`` per pair (the mixture itself, before the staircase): the single path's gap, the random path's
gap ``Σ min(p, r) - P*`` (the rule's own exact law), the number of components, and the wall and
CPU time of the whole fit (one run each: the fit is seconds to minutes; the machine is shared,
the load average is recorded). Writes benchmarks/results/random_path.json.

Run: ``python benchmarks/bench_random_path.py [--rounds R] [--pairs 0.5/1.2 ...]``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from _common import print_table, write_results

from multidraft.theory import softmax, zipf
from multidraft.theory.optimum import product_cut
from multidraft.theory.verifier import PathMixtureRule, fit_path_curtain
from multidraft.theory.verifier._path_mixture import fit_path_mixture

EXPONENT = 1.1


def row(n: int, pair: str, rounds: int) -> dict:
    rng = np.random.default_rng(0)
    rng.random(n)  # the keys bench_verifier_independent.py draws first: the same target
    target = zipf(n, EXPONENT, rng)
    t1, t2 = (float(t) for t in pair.split("/"))
    drafts = (softmax(np.log(target), t1), softmax(np.log(target), t2))
    cut = product_cut(target, np.stack(drafts))
    optimum = min(1.0, 1.0 + float(cut.value))
    single = fit_path_curtain(target, *drafts, certificate=cut.certificate, optimum=optimum)
    start, start_cpu = time.perf_counter(), time.process_time()
    rule = fit_path_mixture(target, *drafts, certificate=cut.certificate, optimum=optimum, rounds=rounds)
    wall, cpu = time.perf_counter() - start, time.process_time() - start_cpu
    return {
        "n": n, "pair": pair, "rounds": rounds, "p_star": optimum, "single_gap": single.acceptance - optimum,
        "gap": rule.acceptance - optimum, "components": len(rule.components) if isinstance(rule, PathMixtureRule) else 1,
        "fit_s": wall, "fit_cpu_s": cpu,
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--sizes", type=int, nargs="+", default=[49152])
    parser.add_argument("--pairs", nargs="+", default=["0.5/1.2", "0.8/1.6", "0.8/2", "1.2/1.6"])
    args = parser.parse_args()
    rows = []
    for n in args.sizes:
        for pair in args.pairs:
            rows.append(row(n, pair, args.rounds))
            print(rows[-1], flush=True)
    print_table(rows, ["n", "pair", "rounds", "p_star", "single_gap", "gap", "components", "fit_s", "fit_cpu_s"])
    print(f"wrote {write_results('random_path', rows, exponent=EXPONENT)}")


if __name__ == "__main__":
    main()
