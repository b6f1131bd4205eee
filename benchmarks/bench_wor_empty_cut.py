"""The without-replacement rule at P* = 1 (the empty cut) and the J-curtain's closed-form choice
law, at the nodes of ``bench_tree_speed.py``'s ``expansion[8,7] wor`` trees (n = 49152; issues
30 and 34; docs/optimal_verifier.md §8, §8b, §10).

Two tables, CPU (process) milliseconds, both routes timed in the same process:

* ``choice``: per K and cut (the scan's, and T* = ∅) at the root's target and draft, one call
  of the closed form (:func:`~multidraft.theory.verifier._stream_choice.stream_choice_probabilities`)
  on 20 drafted tuples against the enumeration of the rebuilt stream (the previous exact path,
  ``enumerated_choice``), per tuple, and their largest difference;
* ``nodes``: per internal node, the rule of the scan's cut (main's path: ``optimal_cut`` then
  that cut's fit) against :func:`~multidraft.theory.verifier._wor_rule.wor_selection_rule` (the
  empty cut where P* = 1), their acceptance − P*, and the choice law of the node's drafted tuple.

Writes ``benchmarks/results/wor_empty_cut.json``.

Usage: ``python benchmarks/bench_wor_empty_cut.py [--seeds 2] [--vocab 49152]``
"""

from __future__ import annotations

import argparse
import os

import numpy as np

from _common import cpu_ms, measure, print_table, write_results
from _tree_blocks import shaped


def choice_rows(p: np.ndarray, q: np.ndarray) -> list[dict]:
    """The ``choice`` table at one node's (p, q)."""
    from multidraft.theory.optimum._wor_race import OptimalCut, optimal_cut
    from multidraft.theory.verifier._stream_choice import stream_choice_probabilities
    from multidraft.theory.verifier._wor_enumeration import enumerated_choice
    from multidraft.theory.verifier._wor_rule import _rule_for_cut

    rows = []
    for k in (2, 4, 8):
        cut = optimal_cut(p, q, k)
        for name, chosen in (("scan", cut), ("empty", OptimalCut(cut.order, 0, cut.value, 0.0, cut.candidates))):
            if name == "empty" and cut.size == 0:
                continue
            rule = _rule_for_cut(p, q, k, chosen)
            keys = np.log(q) + np.random.default_rng(k).gumbel(size=(20, len(q)))
            tuples = np.argsort(-keys, axis=1)[:, :k]
            tuples = tuples[rule._in_u(tuples).any(axis=-1)]
            if not len(tuples):
                continue
            closed = measure(lambda: stream_choice_probabilities(rule.layout, rule.group[tuples], rule.draft[tuples], rule._in_u(tuples)), 5)
            few = tuples[: 2 if k == 8 else 20]
            enumeration = measure(lambda: enumerated_choice(rule, few), 1)
            rows.append(dict(k=k, cut=name, t_star=len(rule.certificate), tuples=len(tuples),
                             enumeration_ms_per_tuple=1e3 * enumeration.cpu_median / len(few), closed_form_ms_per_tuple=1e3 * closed.cpu_median / len(tuples),
                             largest_difference=float(np.abs(closed.result[: len(few)] - enumeration.result).max())))  # fmt: skip
    return rows


def node_rows(n: int, seeds: int) -> list[dict]:
    """The ``nodes`` table over the internal nodes of ``seeds`` trees."""
    from multidraft.theory.optimum._wor_race import optimal_cut
    from multidraft.trees import TreeShape
    from multidraft.theory.verifier._wor_rule import _rule_for_cut, wor_selection_rule

    rows = []
    for seed in range(seeds):
        tree = shaped(n, TreeShape.expansion([8, 7]).slots, "without-replacement", seed)
        for node, drawn in enumerate(tree.draws):
            if not drawn:
                continue
            p, q, k = tree.target[node], tree.draft[node], len(drawn)
            cut = optimal_cut(p, q, k)
            scan = measure(lambda: _rule_for_cut(p, q, k, optimal_cut(p, q, k)), 3)
            now = measure(lambda: wor_selection_rule(p, q, k), 3)
            rule = now.result
            choice_ms = cpu_ms(lambda: rule.choice_probabilities(np.array(drawn)[None]), 5)
            rows.append(dict(seed=seed, node=node, k=k, p_star_minus_1=cut.value - 1.0, t_star_scan=cut.size, t_star_now=len(rule.certificate),
                             fit_scan_cut_ms=1e3 * scan.cpu_median, fit_now_ms=1e3 * now.cpu_median,
                             shortfall_scan_cut=cut.value - scan.result.acceptance, shortfall_now=cut.value - rule.acceptance,
                             choice_ms=choice_ms))  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=int, default=49152)
    parser.add_argument("--seeds", type=int, default=2, help="trees")
    args = parser.parse_args()
    from multidraft.trees import TreeShape

    root = shaped(args.vocab, TreeShape.expansion([8, 7]).slots, "without-replacement", 0)
    choice = choice_rows(root.target[0], root.draft[0])
    print_table(choice, ["k", "cut", "t_star", "tuples", "enumeration_ms_per_tuple", "closed_form_ms_per_tuple", "largest_difference"])
    nodes = node_rows(args.vocab, args.seeds)
    print_table(nodes, ["seed", "node", "k", "p_star_minus_1", "t_star_scan", "t_star_now", "fit_scan_cut_ms", "fit_now_ms",
                        "shortfall_scan_cut", "shortfall_now", "choice_ms"])  # fmt: skip
    print(f"load {os.getloadavg()}")
    path = write_results("wor_empty_cut", nodes, choice=choice, arguments=vars(args), load_average=os.getloadavg())
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
