"""Does the iid curtain's stack pass tile each part, and does it realise r*? (branch ``curtaincheck``)

Over Zipf(1.1) and Dirichlet(0.1, 0.2, 0.3) targets, drafts at temperatures 0.5-2 (plain, with
tiny masses, with tied masses; tests/test_curtain_tiling.py's ``instance``), K = 2..8, at
n = 49152 and 131072: the checks of tests/test_curtain_tiling.py's ``layout_errors`` (overlap
within each part as ``Σ lengths - |union|``, how far a piece starts before its part, every
group's length against its mass, the law against r* from bisected water levels, P* against a
prefix scan), apart from the fit. Prints the worst of each per (n, variant) and the number of
fits with a piece overlapping or before its part; writes benchmarks/results/check_curtain_tiling.json.

Run it on the code before the fix too (the integ6 package unpacked, ``git archive integ6
multidraft | tar -x -C DIR``, then ``PYTHONPATH=DIR``) for the before/after table.
``--wor``: also the J-curtain's polynomial stack pass (``clipped_layout(..., iid=False)``, branch
``wcurtain``) for the weights G of tests/test_wor_curtain_tiling.py, by its checks (and, for G = x^K,
the law against the iid fit's). ``--quick``: n = 49152 only. results/check_curtain_tiling_integ6.json: the same run on integ6 (before the fix);
results/check_curtain_tiling_wor_integ6.json: ``--wor`` on integ6 (before the polynomial pass's fix).
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
import warnings
from pathlib import Path

from _common import print_table, write_results

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from test_curtain_tiling import instance, layout_errors  # noqa: E402 -- shared with the tests
from test_wor_curtain_tiling import WEIGHTS, iid_law_gap, wor_layout_errors  # noqa: E402

TARGETS = ("zipf", "dir0.1", "dir0.2", "dir0.3")
TEMPERATURES = (0.5, 0.8, 1.2, 2.0)
KS = {"plain": (2, 3, 4, 6, 8), "tiny": (2, 3, 5, 8), "tied": (2, 3, 5, 8)}
FIELDS = ("overlap", "before_part", "mass", "law", "optimum")
WOR_FIELDS = ("overlap", "before_part", "mass", "iid_law_gap", "optimum")


def summary(rows: list[dict], fields: tuple[str, ...]) -> list[dict]:
    """The worst of each field per (n, variant) and the fits with a piece overlapping or before its part."""
    table = []
    for (n, variant), group in itertools.groupby(sorted(rows, key=lambda r: (r["n"], r["variant"])), key=lambda r: (r["n"], r["variant"])):
        group = list(group)
        worst = {f: max(r[f] for r in group) for f in fields}
        bad = sum(r["overlapping"] > 0 or r["before_part"] > 0 for r in group)
        table.append({"n": n, "variant": variant, "fits": len(group), "fits overlapping or before their part": bad, **worst})
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="n = 49152 only")
    parser.add_argument("--wor", action="store_true", help="also the J-curtain's polynomial pass for the weights of tests/test_wor_curtain_tiling.py")
    args = parser.parse_args()
    warnings.simplefilter("ignore", RuntimeWarning)  # p/q overflows where q ~ 1e-300 (ordered all the same)
    sizes = (49152,) if args.quick else (49152, 131072)
    rows, wor_rows, begin = [], [], time.process_time()
    for n, target, temperature, variant in itertools.product(sizes, TARGETS, TEMPERATURES, KS):
        p, q = instance(n, target, temperature, variant, seed=0)
        for k in KS[variant]:
            errors = layout_errors(p, q, k)
            rows.append({"n": n, "target": target, "temperature": temperature, "variant": variant, "k": k, **errors})
        for weight, c in WEIGHTS.items() if args.wor else ():  # the J-curtain's polynomial pass (iid=False)
            errors = wor_layout_errors(p, q, c)
            wor_rows.append({"n": n, "target": target, "temperature": temperature, "variant": variant, "weight": weight, **errors, "iid_law_gap": iid_law_gap(p, q, c)})
    table = summary(rows, FIELDS)
    print(f"{len(rows)} fits, {time.process_time() - begin:.1f} s CPU; worst per (n, variant):")
    print_table(table, list(table[0]))
    wor_table = summary(wor_rows, WOR_FIELDS) if wor_rows else []
    if wor_table:
        print(f"the J-curtain's polynomial pass (iid=False), {len(wor_rows)} fits of G in {list(WEIGHTS)}; worst per (n, variant):")
        print_table(wor_table, list(wor_table[0]))
    write_results("check_curtain_tiling", rows, summary=table, wor=wor_rows, wor_summary=wor_table)


if __name__ == "__main__":
    main()
