"""How far the exact law of a tree drafted without replacement can fall with the rule of
docs/optimal_verifier.md §8 as it is (issue 30, item 5: the law <= 20 ms on a 64-node tree at
n = 49152).

The law (``expected_accepted``) fits one rule per inner node it reaches. At a K = 2 node with
P* < 1 the fit reads the whole vocabulary and fits a coin for every token of the T* side's
*head* (its positions before the uniform tail), one after the other; the tail's law is a power
series per token. If every other pass, gather, check and Python step of the fit were fused away,
what would remain is its *floor*:

* ``read``: one pass over p and q (here ``np.divide(p, q)``, the ratio keys every order needs);
* ``order``: the head's tokens in position order (the cut's radix sort, on the head alone);
* ``head``: the K = 2 front/back pass over the head alone (:func:`pair_pass`, no tail);
* ``tail``: the tail's law (the same pass with its tail, less the head alone).

The table gives, per tree and seed, the K = 2, P* < 1 fits that the law makes, their time now
and their floor, the other fits (K > 2, P* = 1), and the law now and with those fits at their
floor: the law's cost besides its fits (timed with every fit replaced by its rule, recorded
beforehand), plus the other fits as they are, plus the floors. Not a lower bound for every
rule: a rule whose head is not fitted token by token, or a cheaper tail law, would change it.

The K > 2 passes (the heavy node of ``expansion[8,7] wor``) are arithmetic on ``[K, G]`` arrays
that stay in the L1 cache; ``multiply_add_gflops`` records what a plain vectorised multiply-add
loop on such arrays reaches on the machine under numba (no fast-math, as the pass keeps its bits),
to set their cost against.

``python benchmarks/bench_wor_fit_floor.py [--n 49152] [--seeds 2] [--repeats 20]``; writes
``benchmarks/results/wor_fit_floor.json``. CPU ms (process time), medians.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from _common import cpu_ms, write_results

HERE = Path(__file__).resolve().parent
TREES = ("static-64 wor", "expansion[8,7] wor")



def node_floor(p: np.ndarray, q: np.ndarray, rule, repeats: int) -> dict:
    """The floor's four parts (module docstring) for the K = 2 rule ``rule`` fitted to (p, q)."""
    from multidraft.theory.verifier._front_back_two import pair_pass
    from multidraft.theory.verifier._wor_parts import radix_order

    by_position = np.argsort(rule.position, kind="stable")
    t_tokens = by_position[rule.boundary :]
    outside = float(q[by_position[: rule.boundary]].sum())
    lead = int(outside > 0)
    merged_p = np.concatenate([[0.0] * lead, p[t_tokens]])
    merged_q = np.concatenate([[outside] * lead, q[t_tokens]])
    head = rule.tail - rule.boundary
    key, head_key = np.empty(len(p)), -(p[t_tokens[:head]] / q[t_tokens[:head]])
    read = cpu_ms(lambda: np.divide(p, q, out=key), repeats)
    order = cpu_ms(lambda: radix_order(head_key), repeats)
    head_pass = cpu_ms(lambda: pair_pass(merged_p[: lead + head], merged_q[: lead + head], lead), repeats)
    with_tail = cpu_ms(lambda: pair_pass(merged_p, merged_q, lead, lead + head), repeats)
    tail = max(with_tail - head_pass, 0.0)
    return dict(head=int(head), t_size=int(len(t_tokens)), read=read, order=order, head_pass=head_pass, tail=tail,
                floor=read + order + head_pass + tail)  # fmt: skip


def _with_fit(fit, call):
    """``call()`` with ``fit`` in place of the wor rule's fit that the optimal rule calls."""
    from multidraft.theory.verifier import _optimal_rule

    original = _optimal_rule.wor_selection_rule
    _optimal_rule.wor_selection_rule = fit
    try:
        return call()
    finally:
        _optimal_rule.wor_selection_rule = original


def fitted_nodes(tree) -> list[tuple[np.ndarray, np.ndarray, int, object]]:
    """``(p, q, K, rule)`` of every rule that ``token:optimal``'s law fits on ``tree``, in its
    order (the walk skips nodes it cannot reach): recorded from one law call."""
    from multidraft.theory.verifier._wor_rule import wor_selection_rule
    from multidraft.trees import get_verifier

    fitted = []

    def recording(p, q, k):
        fitted.append((p, q, k, wor_selection_rule(p, q, k)))
        return fitted[-1][3]

    _with_fit(recording, lambda: get_verifier("token:optimal").expected_accepted(tree))
    return fitted


def law_without_fits_ms(tree, fitted, repeats: int) -> float:
    """The law's CPU ms with every fit replaced by its recorded rule (in the walk's order): what
    the law costs besides its fits."""
    from multidraft.trees import get_verifier

    calls = iter(())

    def replay(p, q, k):
        return next(calls)[3]

    def law():
        nonlocal calls
        calls = iter(fitted)
        return get_verifier("token:optimal").expected_accepted(tree)

    return _with_fit(replay, lambda: cpu_ms(law, repeats))


def run(n: int, seeds: int, repeats: int) -> list[dict]:
    """One row per (tree, seed): the law now, its fits by kind, the K = 2, P* < 1 fits' floor."""
    from bench_tree_speed import build

    from multidraft.theory.verifier._wor_rule import wor_selection_rule
    from multidraft.trees import get_verifier

    rows = []
    for tree_name in TREES:
        for seed in range(seeds):
            tree = build(tree_name, n, seed)
            law = cpu_ms(lambda: get_verifier("token:optimal").expected_accepted(tree), max(repeats // 4, 3))
            fits, floors, other = [], [], []
            fitted = fitted_nodes(tree)
            for p, q, k, rule in fitted:
                milliseconds = cpu_ms(lambda: wor_selection_rule(p, q, k), repeats)
                if k == 2 and rule.optimum < 1.0 and rule.boundary < rule.tail < rule.n:
                    fits.append(milliseconds)
                    floors.append(node_floor(p, q, rule, repeats))
                else:
                    other.append(milliseconds)
            besides = law_without_fits_ms(tree, fitted, max(repeats // 4, 3))
            floor_sum = sum(f["floor"] for f in floors)
            rows.append(dict(
                tree=tree_name, seed=seed, law_ms=law, pair_fits=len(fits), pair_fits_ms=sum(fits), pair_floor_ms=floor_sum,
                other_fits=len(other), other_fits_ms=sum(other), besides_fits_ms=besides, law_at_floor_ms=besides + sum(other) + floor_sum,
                floor_parts_ms={part: sum(f[part] for f in floors) for part in ("read", "order", "head_pass", "tail")},
                heads=[f["head"] for f in floors], t_sizes=[f["t_size"] for f in floors],
            ))  # fmt: skip
            row = rows[-1]
            print(f"{tree_name:20s} seed {seed}: law {law:6.1f} ms | {len(fits):2d} K=2 P*<1 fits {row['pair_fits_ms']:6.1f} ms, "
                  f"floor {floor_sum:5.1f} ms | {len(other):2d} other fits {row['other_fits_ms']:6.1f} ms | besides the fits {besides:5.1f} ms | "
                  f"law at floor {row['law_at_floor_ms']:6.1f} ms",
                  flush=True)  # fmt: skip
    return rows


def multiply_add_gflops(k: int = 7, nodes: int = 40, sweeps: int = 200_000) -> float:
    """GFlop/s of ``y[m, g] = y[m, g] a[g] + x[m, g] b[g]`` (3 operations an entry) over
    ``[k, nodes]`` arrays, ``sweeps`` times (one warm-up call first), compiled by numba."""
    import time

    import numba

    @numba.njit
    def sweep(y, x, a, b, times):
        for _ in range(times):
            for m in range(y.shape[0]):
                row, other = y[m], x[m]
                for g in range(y.shape[1]):
                    row[g] = row[g] * a[g] + other[g] * b[g]

    rng = np.random.default_rng(0)
    y, x, a, b = rng.random((k, nodes)), rng.random((k, nodes)), np.full(nodes, 0.999), np.full(nodes, 1e-3)
    sweep(y, x, a, b, 10)
    start = time.process_time()
    sweep(y, x, a, b, sweeps)
    return 3 * k * nodes * sweeps / (time.process_time() - start) / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=49152)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    rows = run(args.n, args.seeds, args.repeats)
    print("\n| tree | seed | law | K=2 P*<1 fits | their time | their floor (read + order + head + tail) | other fits | besides the fits | law at floor |")
    print("|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        parts = " + ".join(f"{row['floor_parts_ms'][part]:.1f}" for part in ("read", "order", "head_pass", "tail"))
        print(f"| {row['tree']} | {row['seed']} | {row['law_ms']:.1f} | {row['pair_fits']} | {row['pair_fits_ms']:.1f} | "
              f"{row['pair_floor_ms']:.1f} ({parts}) | {row['other_fits']} ({row['other_fits_ms']:.1f}) | {row['besides_fits_ms']:.1f} | {row['law_at_floor_ms']:.1f} |")  # fmt: skip
    rate = multiply_add_gflops()
    print(f"\nmultiply-add loop on [7, 40] arrays under numba: {rate:.1f} GFlop/s")
    out = write_results("wor_fit_floor", rows, arguments=vars(args), goal_law_ms=20.0, multiply_add_gflops=rate)
    print(f"\nwrote {out.relative_to(HERE.parent)}")


if __name__ == "__main__":
    main()
