"""Speed and accuracy of the exact optimal verifier (multidraft.theory.verifier), iid and without replacement.

Per position: fit (optimal law, sort, nested layout, realised law) plus one selection of K
drafts, at n ∈ {49152, 131072}, K ∈ {2, 4, 8}, for a Zipf target (exponent 1.1) and drafts at
temperatures 0.8, 1.2 and 1.6 (T = 1.2 with K >= 4 has P* = 1: every token is "free", the
heaviest layout). Columns: median wall and CPU ms over ``--repeats`` calls after a warm-up,
``acc - P*`` (the realised Σ min(p, r) minus the sorted-scan optimum), the number of groups and
pieces of the layout. The same for drafts without replacement (the front/back rule) at
temperatures 0.5 and 1.2, with whether it fell back to the first draft. Then the batched torch form (``select_batch`` on [B, n] rows, CPU) per
row (distinct rows, one fit each), and the transport LP at the sizes where it runs, for the ratio. The published reference
(Thomas & Pal, "Global Resolution", ICLR 2026): 40-70 ms of solver time per token at 4-5 iid
drafts over the top-10 draft tokens only, with an output law off by up to 15τ in L1.

Writes ``benchmarks/results/verifier.json`` (machine, versions, date, commit, load).

Usage: ``python benchmarks/bench_verifier.py [--repeats 9] [--batch 64]``
"""

from __future__ import annotations

import argparse

import numpy as np
from _common import measure, print_table, write_results

from multidraft.theory import IID, WithoutReplacement, optimal_acceptance, softmax, zipf
from multidraft.theory.verifier import optimal_selection_rule

TARGET_MS = 20.0
PUBLISHED_MS = (40.0, 70.0)


def fit_and_select(p: np.ndarray, law, rng: np.random.Generator):
    rule = optimal_selection_rule(p, law)
    drafts = law.sample(rng, 1)
    column = rule.choose(drafts, rng)
    token = int(drafts[0, column[0]])
    rng.random() < rule.accept[token]
    return rule


def per_position(repeats: int, law_name: str, sizes: tuple[int, ...], temperatures: tuple[float, ...]) -> list[dict]:
    """Fit + one selection per position; ``law_name`` "iid" (the curtain rule: groups and
    pieces of its layout) or "wor" (the front/back rule: whether it fell back to the first
    draft)."""
    rows = []
    law_class = {"iid": IID, "wor": WithoutReplacement}[law_name]
    for n in sizes:
        p = zipf(n, exponent=1.1, rng=np.random.default_rng(0))
        for temperature in temperatures:
            q = softmax(np.log(p), temperature=temperature)
            for k in (2, 4, 8):
                law = law_class(q, k)
                rng = np.random.default_rng(1)
                timing = measure(lambda: fit_and_select(p, law, rng), repeats)
                rule = timing.result
                layout = (
                    {"groups": len(rule.group_first), "pieces": len(rule.piece_start)}
                    if law_name == "iid"
                    else {"first_draft": bool(rule.first_draft)}
                )
                rows.append(
                    {
                        "law": law_name,
                        "n": n,
                        "temperature": temperature,
                        "k": k,
                        "ms": 1e3 * timing.median,
                        "cpu_ms": 1e3 * timing.cpu_median,
                        "acc_minus_optimum": rule.acceptance - optimal_acceptance(p, law).value,
                        **layout,
                        "target_ms": TARGET_MS,
                    }
                )
                print_table(rows[-1:], list(rows[-1]))
    return rows


def batched(batch: int, n: int, repeats: int) -> list[dict]:
    import torch

    from multidraft.schemes import get_scheme

    scheme = get_scheme("optimal")
    rows = []
    generator = torch.Generator().manual_seed(0)
    # Distinct rows (one fit each; rows with equal (p, q) would share a fit): Zipf exponents
    # spread over [0.9, 1.3], each row's draft at temperature 1.6.
    p = np.stack([zipf(n, exponent=e, rng=np.random.default_rng(b)) for b, e in enumerate(np.linspace(0.9, 1.3, batch))])
    q = np.stack([softmax(np.log(row), temperature=1.6) for row in p])
    for k in (2, 4, 8):
        for dtype in (torch.float32, torch.float64):
            target = torch.tensor(p, dtype=dtype)
            drafts = torch.tensor(q, dtype=dtype)[:, None, :].expand(batch, k, n)
            tokens = torch.multinomial(torch.tensor(q), k, replacement=True, generator=generator)
            timing = measure(lambda: scheme.select_batch(target, drafts, tokens, generator), repeats)
            rows.append(
                {"batch": batch, "n": n, "k": k, "dtype": str(dtype).removeprefix("torch."), "ms_per_row": 1e3 * timing.median / batch, "device": "cpu"}
            )
            print_table(rows[-1:], list(rows[-1]))
    return rows


def against_lp(repeats: int) -> list[dict]:
    from multidraft.lp import transport_lp

    rows = []
    rng = np.random.default_rng(5)
    for n, k in ((20, 2), (40, 2), (12, 3)):
        p, q = rng.dirichlet(np.ones(n)), rng.dirichlet(np.ones(n))
        law = IID(q, k)
        lp = measure(lambda: transport_lp(p, law), max(1, repeats // 3))
        exact = measure(lambda: optimal_selection_rule(p, law), repeats)
        rows.append(
            {
                "n": n,
                "k": k,
                "lp_ms": 1e3 * lp.median,
                "verifier_ms": 1e3 * exact.median,
                "ratio": lp.median / exact.median,
                "acceptance_gap": exact.result.acceptance - lp.result.acceptance,
            }
        )
        print_table(rows[-1:], list(rows[-1]))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--batch", type=int, default=64)
    args = parser.parse_args()
    print(f"Per position, fit + one selection (target <= {TARGET_MS} ms; published {PUBLISHED_MS} ms on top-10 tokens)")
    positions = per_position(args.repeats, "iid", (49152, 131072), (0.8, 1.2, 1.6))
    print("\nDrafts without replacement (front/back rule; the fit is the O(n G K) race pass)")
    positions += per_position(max(1, args.repeats // 3), "wor", (49152, 131072), (0.5, 1.2))
    print("\nBatched select_batch on CPU")
    batch = batched(args.batch, 49152, max(1, args.repeats // 3))
    print("\nAgainst the transport LP")
    lp = against_lp(args.repeats)
    path = write_results("verifier", positions, batched=batch, transport_lp=lp, published_ms=PUBLISHED_MS)
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
