"""Robustness of the certified LPs on hard random instances (issue 20, item 2).

Instances: for each law (iid, independent, without replacement), ``--instances`` draws with
K = 2, n uniform in 20..60, and target and drafts from Dirichlet(α) with α uniform in
[0.05, 0.5] (one α for the target, one for the drafts): many draft tuples carry masses of
1e-13 to 1e-21, the inputs that broke the LPs before.

For every instance the min-cut P* (:func:`multidraft.theory.optimal_acceptance`) is the
reference, and each LP is run as users call it:

* ``transport``: :func:`multidraft.lp.transport_lp`;
* ``importance``: :func:`multidraft.lp.importance_lp` (tuple form);
* ``pair``: :func:`multidraft.lp.pair_importance_lp` (iid and independent laws only);
* ``transport, HiGHS defaults (before)``: the same transport LP solved the way it was before
  this fix (HiGHS with its default presolve and tolerances, the plan clipped at zero and
  summed): the baseline, for its failures, its excess over P* and its time.

A *failure* is any exception (a certified LP raises ``SolverError`` rather than return a value
more than 1e-9 from P*). The table shows, per LP and law: failures, the worst |value - P*|,
the worst excess ``value - P*``, the median and total time, and which solver route answered.
The time ratio of the certified transport LP to the baseline is measured in the same run.

Writes benchmarks/results/lp_robustness.json (provenance, rows, and the hardest instances:
where the baseline failed or a fallback route was needed, and the largest gaps).

Run: ``python benchmarks/bench_lp_robustness.py [--instances 200] [--seed 0]``.
"""

from __future__ import annotations

import argparse
import collections
import time

import numpy as np
from _common import print_table, write_results

from multidraft.lp import SolverError, importance_lp, pair_importance_lp, transport_lp
from multidraft.lp._solve import silenced
from multidraft.lp.transport import law_tuples, transport_problem
from multidraft.theory import IID, Independent, WithoutReplacement, dirichlet, optimal_acceptance

LAWS = ("iid", "independent", "wor")
BASELINE = "transport, HiGHS defaults (before)"


def instance(law_name: str, index: int, seed: int):
    """``(target, law, n, alpha_target, alpha_draft)`` of one random instance (see the module docstring)."""
    rng = np.random.default_rng([seed, LAWS.index(law_name), index])
    n = int(rng.integers(20, 61))
    alpha_target, alpha_draft = rng.uniform(0.05, 0.5, size=2)
    target, draft = dirichlet(n, alpha_target, rng), dirichlet(n, alpha_draft, rng)
    if law_name == "iid":
        law = IID(draft, 2)
    elif law_name == "wor":
        law = WithoutReplacement(draft, 2)
    else:
        law = Independent([draft, dirichlet(n, alpha_draft, rng)])
    return target, law, n, float(alpha_target), float(alpha_draft)


def baseline_transport(target: np.ndarray, law) -> float:
    """The transport LP as solved before the fix: HiGHS defaults, the plan clipped and summed."""
    tuples, probs, _ = law_tuples(law, True)
    problem, pi, mask = transport_problem(target, tuples, probs)
    with silenced():
        problem.solve(solver="HIGHS")
    if problem.status != "optimal":
        raise SolverError(f"status {problem.status!r}")
    plan = np.maximum(np.asarray(pi.value).reshape(mask.shape), 0.0)
    return float(plan[mask].sum())


def run_lp(name: str, target: np.ndarray, law):
    """``(value, route, failed routes)`` of one LP on one instance."""
    if name == BASELINE:
        return baseline_transport(target, law), "HIGHS (defaults)", ()
    if name == "transport":
        result = transport_lp(target, law, progress=False)
    elif name == "importance":
        result = importance_lp(target, law, progress=False)
    else:
        first, second = law.marginals()
        result = pair_importance_lp(target, first, None if law.name == "iid" else second, progress=False)
    return result.acceptance, result.certification.route, result.certification.failed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--instances", type=int, default=200, help="instances per law (default 200)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    transport_lp([0.5, 0.5], IID([0.5, 0.5], 2))  # import cvxpy and the solvers: not part of any timing
    rows, records = [], []
    for law_name in LAWS:
        names = ["transport", "importance", *(["pair"] if law_name != "wor" else []), BASELINE]
        stats = {name: {"failures": 0, "abs_gaps": [], "excess": [], "seconds": [], "routes": collections.Counter(), "errors": []} for name in names}
        for index in range(args.instances):
            target, law, n, alpha_target, alpha_draft = instance(law_name, index, args.seed)
            optimum = float(optimal_acceptance(target, law).value)
            record = {"law": law_name, "index": index, "n": n, "alpha_target": alpha_target, "alpha_draft": alpha_draft, "min_cut": optimum}
            for name in names:
                start = time.perf_counter()
                try:
                    value, route, failed = run_lp(name, target, law)
                except SolverError as error:
                    stats[name]["failures"] += 1
                    stats[name]["errors"].append(f"{index}: {error}"[:300])
                    record[name] = {"error": str(error)[:300]}
                    continue
                finally:
                    stats[name]["seconds"].append(time.perf_counter() - start)
                stats[name]["abs_gaps"].append(abs(value - optimum))
                stats[name]["excess"].append(value - optimum)
                stats[name]["routes"][route] += 1
                record[name] = {"gap": optimum - value, "route": route, "failed_routes": list(failed)}
            records.append(record)
            print(f"\r{law_name}: {index + 1}/{args.instances}", end="", flush=True)
        print()
        baseline_median = float(np.median(stats[BASELINE]["seconds"]))
        for name in names:
            s = stats[name]
            median = float(np.median(s["seconds"]))
            rows.append(
                {
                    "lp": name,
                    "law": law_name,
                    "instances": args.instances,
                    "failures": s["failures"],
                    "worst_abs_gap": max(s["abs_gaps"], default=None),
                    "worst_excess": max(s["excess"], default=None),
                    "within_1e-9": int(sum(g <= 1e-9 for g in s["abs_gaps"])),
                    "median_s": median,
                    "total_s": float(np.sum(s["seconds"])),
                    "vs_baseline": median / baseline_median if name.startswith("transport") else None,
                    "routes": dict(s["routes"]),
                    "errors": s["errors"][:5],
                }
            )
    print_table(rows, ["lp", "law", "instances", "failures", "within_1e-9", "worst_abs_gap", "worst_excess", "median_s", "total_s", "vs_baseline"])
    print("\nroutes that answered:")
    for row in rows:
        print(f"  {row['lp']:<36s} {row['law']:<12s} {row['routes']}")
    hardest = [
        r
        for r in records
        if "error" in r[BASELINE] or r["transport"].get("failed_routes") or abs(r[BASELINE].get("gap", 0.0)) > 1e-9
    ]
    path = write_results(
        "lp_robustness",
        rows,
        instances_per_law=args.instances,
        seed=args.seed,
        recipe="K = 2, n ~ U{20..60}, target ~ Dirichlet(a_p), drafts ~ Dirichlet(a_q), a_p, a_q ~ U(0.05, 0.5); "
        "rng = numpy.random.default_rng([seed, law index (iid 0, independent 1, wor 2), instance index])",
        hardest=hardest,
    )
    print(f"\n{len(hardest)} instances where the baseline failed or was off by > 1e-9, or a fallback route answered")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
