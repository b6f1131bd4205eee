"""The verifier for drafts without replacement (multidraft.theory.verifier._wor_rule): fit time, acceptance
against P*, and the shipped front/back rule as the baseline measured in the same run.

* Zipf targets (exponent 1.1) at n = 49152, drafts q = softmax(log p / T) for T in 0.5..2.0 and
  K in {2, 4, 8}: fit + one selection (median wall and CPU ms; the goal of issue 34 names these
  two). The K drafts are drawn before each timed call, outside the timed region (``law.sample``,
  about 1.3 ms at K = 8), and their median CPU time is reported in a column of its own. Then the candidates of the pruned
  scan, |T*|, the U rule used, the size of the T* side's uniform tail, acceptance − P*, and
  the same for the front/back rule fitted over
  the whole vocabulary in one pass (the rule this replaces), for the ratio.
* Adversarial small instances (tests/wor_instances.py: Dirichlet 0.1-1, near-q, ties, zeros,
  p = q, disjoint; n <= 8, K <= 4): how often each rule falls short of P* (by more than 1e-9),
  the mean and worst shortfall, and whether the new rule is ever below the front/back rule.
* P* per node as ``measure`` records it: the full sorted scan against the pruned scan and the
  cut of a fitted plan (``node_optimal_acceptance``), CPU ms and the difference.
* Optionally (``--rrs``) the Rao-Blackwellised estimate of SpecInfer without replacement
  (rrs-wor) at K = 4, 8 with its 95% interval (an estimate, not an exact value).

Writes ``benchmarks/results/verifier_wor.json`` and, with ``--rrs``, ``verifier_wor_rrs.json``
(machine, versions, date, commit, load).

``--before COMMIT`` instead times the 15 settings on that commit and on this tree in one run
(child processes) and compares their laws, coins, positions and acceptance, and the small
instances' laws (``benchmarks/results/verifier_wor_before_after.json``); each child also times
``np.argsort`` of the draft (n = 49152) right after each fit, and the table gives every fit
as a multiple of that sort (a ratio that the machine's load inflates less than milliseconds),
and per call the user and system CPU ms and minor page faults (``getrusage``; these include the
untimed draws).
``--rounds N`` runs the two children N times in alternation and keeps each setting's least
median (the laws from the first round).

Usage: ``python benchmarks/bench_verifier_wor.py [--repeats 3] [--instances 2000] [--rrs] [--before COMMIT [--rounds 2]]``
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from pathlib import Path

import numpy as np
from _common import measure, print_table, write_results

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from wor_instances import front_back_today as front_back  # noqa: E402 -- shared with the tests
from wor_instances import instances  # noqa: E402

from multidraft.theory import WithoutReplacement, softmax, zipf  # noqa: E402
from multidraft.theory.verifier import optimal_selection_rule  # noqa: E402

TARGET_MS = 20.0


class Drafts:
    """The drafts of the next timed call, drawn untimed (``measure``'s ``before``)."""

    def __init__(self, law, rng: np.random.Generator) -> None:
        self.law, self.rng, self.value = law, rng, None

    def draw(self) -> np.ndarray:
        self.value = self.law.sample(self.rng, 1)
        return self.value


def fit_and_select(p: np.ndarray, law, rng: np.random.Generator, drafts: np.ndarray):
    """Fit + one selection (what the 20 ms goal names), on drafts drawn beforehand."""
    rule = optimal_selection_rule(p, law)
    token = int(drafts[0, rule.choose(drafts, rng)[0]])
    rng.random() < rule.accept[token]
    return rule


def zipf_rows(n: int, repeats: int) -> list[dict]:
    p = zipf(n, exponent=1.1, rng=np.random.default_rng(0))
    rng = np.random.default_rng(1)
    rows = []
    for k in (2, 4, 8):
        for temperature in (0.5, 1.0, 1.2, 1.6, 2.0):
            q = softmax(np.log(p), temperature=temperature)
            law = WithoutReplacement(q, k)
            drafts = Drafts(law, rng)
            drawing = measure(drafts.draw, repeats)
            new = measure(lambda: fit_and_select(p, law, rng, drafts.value), repeats, before=drafts.draw)
            old = measure(lambda: front_back(p, q, k), 1)
            rule = new.result
            rows.append(
                {
                    "n": n, "K": k, "T": temperature,
                    "fit+select ms": 1e3 * new.median, "cpu ms": 1e3 * new.cpu_median,
                    "drafting cpu ms (untimed above)": 1e3 * drawing.cpu_median,
                    "front/back ms": 1e3 * old.median, "speed-up": old.median / new.median,
                    "|T*|": len(rule.certificate), "U rule": rule.u_rule, "tail": n - rule.tail,
                    "acc - P*": rule.acceptance - rule.optimum, "front/back acc - P*": old.result - rule.optimum,
                    "within target (cpu)": 1e3 * new.cpu_median <= TARGET_MS,
                }
            )  # fmt: skip
    return rows


def node_optimum_rows(n: int, repeats: int) -> list[dict]:
    """P* per node as ``measure`` records it (issue 34, item 5b): the full sorted scan (the race at
    every prefix, what ``node_optimal_acceptance`` ran before), the pruned scan it runs now, and
    the cut reused from a plan whose rule is fitted; CPU ms and the difference to the full scan."""
    from multidraft.decoding import node_optimal_acceptance
    from multidraft.schemes import get_scheme
    from multidraft.theory import optimal_acceptance

    p = zipf(n, exponent=1.1, rng=np.random.default_rng(0))
    rows = []
    for k in (2, 4, 8):
        for temperature in (0.5, 1.0, 1.2, 1.6, 2.0):
            law = WithoutReplacement(softmax(np.log(p), temperature=temperature), k)
            plan = get_scheme("optimal").prepare(p, law)
            plan.acceptance  # the plan's rule, fitted as measure's records fit it
            full = measure(lambda: optimal_acceptance(p, law).value, repeats)
            node = measure(lambda: node_optimal_acceptance(p, law), repeats)
            reused = measure(lambda: node_optimal_acceptance(plan.target, law, plan), repeats)
            rows.append(
                {
                    "n": n, "K": k, "T": temperature, "full scan ms": 1e3 * full.cpu_median,
                    "node (no plan) ms": 1e3 * node.cpu_median, "node (fitted plan) ms": 1e3 * reused.cpu_median,
                    "speed-up (no plan)": full.cpu_median / max(node.cpu_median, 1e-9),
                    "|diff| no plan": abs(node.result - full.result), "|diff| plan": abs(reused.result - full.result),
                }
            )  # fmt: skip
    return rows


def adversarial_rows(count: int) -> list[dict]:
    by_kind: dict[str, dict] = {}
    for kind, p, q, k in instances(seed=11, count=count, max_n=8):
        rule = optimal_selection_rule(p, WithoutReplacement(q, k))
        old = front_back(p, q, k)
        row = by_kind.setdefault(kind, {"kind": kind, "instances": 0, "short": [], "old short": [], "below old": 0})
        row["instances"] += 1
        row["short"].append(rule.optimum - rule.acceptance)
        row["old short"].append(rule.optimum - old)
        row["below old"] += rule.acceptance < old - 1e-12
    rows = []
    for row in list(by_kind.values()) + [_total(by_kind)]:
        short, old = np.array(row.pop("short")), np.array(row.pop("old short"))
        row.update(
            {
                "fail": int((short > 1e-9).sum()), "mean short": float(short.mean()), "worst short": float(short.max()),
                "front/back fail": int((old > 1e-9).sum()), "front/back worst": float(old.max()),
            }
        )  # fmt: skip
        rows.append(row)
    return rows


def _total(by_kind: dict) -> dict:
    return {
        "kind": "all",
        "instances": sum(r["instances"] for r in by_kind.values()),
        "short": [s for r in by_kind.values() for s in r["short"]],
        "old short": [s for r in by_kind.values() for s in r["old short"]],
        "below old": sum(r["below old"] for r in by_kind.values()),
    }


def rrs_rows(n: int, half_width: float) -> list[dict]:
    from multidraft.schemes import get_scheme

    p = zipf(n, exponent=1.1, rng=np.random.default_rng(0))
    scheme = get_scheme("rrs-wor")
    rows = []
    for k in (4, 8):
        law = WithoutReplacement(softmax(np.log(p), temperature=1.2), k)
        start = time.perf_counter()
        estimate = scheme.estimate_acceptance(p, law, np.random.default_rng(k), half_width=half_width)
        optimum = optimal_selection_rule(p, law).optimum
        rows.append(
            {"n": n, "K": k, "T": 1.2, "rrs-wor (estimate)": estimate.value, "95% ±": estimate.half_width,
             "paths": estimate.paths, "seconds": time.perf_counter() - start, "P*": optimum}
        )  # fmt: skip
    return rows


def _fits(path: str, repeats: int, count: int) -> None:
    """Child of ``--before``: the 15 Zipf settings (CPU ms of fit + one selection on drafts drawn
    untimed, the drafting's CPU ms, user/system ms and minor page faults per call from
    ``getrusage``, the rule's law r, coins α, positions and acceptance) and the small instances' laws, saved to ``path``."""
    p = zipf(49152, exponent=1.1, rng=np.random.default_rng(0))
    rng = np.random.default_rng(1)
    saved: dict[str, np.ndarray] = {}
    for k in (2, 4, 8):
        for temperature in (0.5, 1.0, 1.2, 1.6, 2.0):
            law = WithoutReplacement(softmax(np.log(p), temperature=temperature), k)
            drafts = Drafts(law, rng)
            drawing = measure(drafts.draw, repeats)
            usage = resource.getrusage(resource.RUSAGE_SELF)
            timing = measure(lambda: fit_and_select(p, law, rng, drafts.value), repeats, before=drafts.draw)
            spent = resource.getrusage(resource.RUSAGE_SELF)  # includes the untimed draws and the warm-up
            calls = repeats + 1
            baseline = measure(lambda: np.argsort(law.draft), 2 * repeats + 1)  # the same process, right after
            rule = timing.result
            name = f"{k}_{temperature}"
            saved[f"ms_{name}"] = np.array([1e3 * timing.cpu_median, 1e3 * timing.median, 1e3 * baseline.cpu_median, 1e3 * drawing.cpu_median])
            saved[f"usage_{name}"] = np.array(
                [1e3 * (spent.ru_utime - usage.ru_utime) / calls, 1e3 * (spent.ru_stime - usage.ru_stime) / calls,
                 (spent.ru_minflt - usage.ru_minflt) / calls]
            )  # fmt: skip
            saved[f"law_{name}"] = np.concatenate([rule.selection_law, rule.alpha, rule.position, [rule.acceptance, rule.optimum]])
    small = [optimal_selection_rule(p_, WithoutReplacement(q_, k_)) for _, p_, q_, k_ in instances(seed=11, count=count, max_n=8)]
    saved["small"] = np.concatenate([np.concatenate([r.selection_law, [r.acceptance]]) for r in small] or [np.zeros(0)])
    np.savez(path, **saved)


def before_after(commit: str, repeats: int, count: int, rounds: int = 2) -> list[dict]:
    """The 15 Zipf settings on ``commit`` (``git archive``, a child process) and on this tree, in
    the same run, ``rounds`` times in alternation (each setting's least median over the rounds):
    CPU ms of fit + one selection, speed-up, and the largest difference of the rules' laws,
    coins, positions and acceptance (and of the small instances' laws, first round)."""
    import subprocess
    import tempfile

    root = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory() as scratch:
        archive = subprocess.run(["git", "archive", commit], cwd=root, capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", scratch], input=archive, check=True)
        (Path(scratch) / "benchmarks" / Path(__file__).name).write_text(Path(__file__).read_text())
        results: dict[str, dict] = {}
        for round_ in range(rounds):  # before, after, before, after, ...: the load drifts alike
            for label, tree in (("before", Path(scratch)), ("after", root)):
                out = Path(scratch) / f"{label}.npz"
                subprocess.run(
                    [sys.executable, str(tree / "benchmarks" / Path(__file__).name), "--child", str(out),
                     "--repeats", str(repeats), "--instances", str(count if round_ == 0 else 0)],
                    env={**os.environ, "PYTHONPATH": str(tree)}, cwd=tree / "benchmarks", check=True,
                )  # fmt: skip
                saved = dict(np.load(out))
                if label in results:  # later rounds: the least time of each setting, the first round's laws
                    for key in saved:
                        if key.startswith(("ms_", "usage_")):
                            results[label][key] = np.minimum(results[label][key], saved[key])
                else:
                    results[label] = saved
    before, after = results["before"], results["after"]
    rows = []
    for k in (2, 4, 8):
        for temperature in (0.5, 1.0, 1.2, 1.6, 2.0):
            name = f"{k}_{temperature}"
            rows.append(
                {
                    "K": k, "T": temperature, "before cpu ms": before[f"ms_{name}"][0], "after cpu ms": after[f"ms_{name}"][0],
                    "before wall ms": before[f"ms_{name}"][1], "after wall ms": after[f"ms_{name}"][1],
                    "speed-up (cpu)": before[f"ms_{name}"][0] / after[f"ms_{name}"][0],
                    "before / argsort": before[f"ms_{name}"][0] / before[f"ms_{name}"][2],
                    "after / argsort": after[f"ms_{name}"][0] / after[f"ms_{name}"][2],
                    "argsort ms (after)": after[f"ms_{name}"][2],
                    "drafting cpu ms (untimed)": after[f"ms_{name}"][3],
                    **{
                        f"{label} {part}": saved[f"usage_{name}"][i]
                        for label, saved in (("before", before), ("after", after))
                        for i, part in enumerate(("user ms/fit", "sys ms/fit", "faults/fit"))
                    },
                    "max |diff|": float(np.max(np.abs(before[f"law_{name}"] - after[f"law_{name}"]))),
                    "after within target": after[f"ms_{name}"][0] <= TARGET_MS,
                }
            )  # fmt: skip
    if count:
        rows.append({"K": "small", "T": count, "max |diff|": float(np.max(np.abs(before["small"] - after["small"])))})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", help="fit times and laws of the 15 settings on this commit too (git archive), same run")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2, help="with --before: alternating child runs per version")
    parser.add_argument("--instances", type=int, default=2000)
    parser.add_argument("--rrs", action="store_true", help="also the rrs-wor estimate at K = 4, 8 (minutes)")
    parser.add_argument("--rrs-half-width", type=float, default=1e-3)
    args = parser.parse_args()
    if args.child:
        _fits(args.child, args.repeats, args.instances)
        return
    load_before = os.getloadavg()
    if args.before:
        table = before_after(args.before, args.repeats, args.instances, args.rounds)
        print_table(table, list(table[0]))
        write_results("verifier_wor_before_after", table, before=args.before, load_before=load_before, load_after=os.getloadavg())
        return
    zipf_table = zipf_rows(49152, args.repeats)
    print_table(zipf_table, list(zipf_table[0]))
    adversarial = adversarial_rows(args.instances)
    print_table(adversarial, list(adversarial[0]))
    node_table = node_optimum_rows(49152, args.repeats)
    print_table(node_table, list(node_table[0]))
    write_results(
        "verifier_wor", zipf_table, adversarial=adversarial, node_optimum=node_table,
        load_before=load_before, load_after=os.getloadavg(), target_ms=TARGET_MS,
    )  # fmt: skip
    if args.rrs:
        rrs = rrs_rows(49152, args.rrs_half_width)
        print_table(rrs, list(rrs[0]))
        write_results("verifier_wor_rrs", rrs, load_before=load_before, load_after=os.getloadavg())


if __name__ == "__main__":
    main()
