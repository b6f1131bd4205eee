"""The optimal verifier on sparse drafts: fit + one selection through the scheme's public API.

Issue 22, item 1. Real decoders sample drafts with top-k / top-p, so the draft's support holds
tens to thousands of tokens; the iid verifier fits on that support only (plus the target's mass
outside it), so a position costs reading the target plus work in the support's size.

* **Top-k drafts at n = 131072** (Zipf target, exponent 1.1; draft = the target's log-probs
  plus N(0, 0.5²) noise at temperature 1.3, cut to its top k), K ∈ {2, 4, 8}: median
  process-CPU time of ``Optimal().select(p, law, drafts, rng)`` (validation of p, fit, one
  selection and, when rejected, one draw from the residual) and of ``Optimal().sample`` on one
  tuple, against the baselines in the same run: ``as_distribution(p)`` (reading and validating
  the target) and ``IID(q, K)`` (building the law: the caller's, not counted in ``select``).
  Target: select <= 0.3 ms.
* The same kind of position through the other schemes' ``select`` (single-draft, SpecInfer,
  SpecTr; single-draft still works on the whole vocabulary): for comparison.
* **SpecInfer and SpecTr on the support** (top-1/10/100/1000 iid drafts, K ∈ {2, 4, 8}; and
  SpecInfer with independent top-100 drafts and a deterministic top-K set, K = 4): the public
  ``select`` and ``acceptance`` (validation of p included) against the same plan forced onto
  the whole vocabulary (the split at every token: the dense path, p validated the same way),
  in the same run: ``dense / sparse`` ratios.
* **Top-p 0.95 drafts at the bundled SmolLM2-135M's real positions**: every node of a
  ``measure`` run (the model drafting for itself at temperature 1.5, and its first 10 layers as
  an early-exit draft at temperature 1.0, both cut to top-p 0.95; target at temperature 1, full
  support, n = 49152): the support sizes and the same timings per position.

Timings are process-CPU medians over ``--repeats`` calls after a warm-up (the machine is
shared; CPU time is less inflated by other jobs than wall time); the load average is recorded.

Writes ``benchmarks/results/sparse.json``. Usage: ``python benchmarks/bench_sparse.py
[--repeats 25] [--positions 24] [--quick]``.
"""

from __future__ import annotations

import argparse
from functools import cached_property

import numpy as np
from _common import cpu_ms, print_table, write_results

from multidraft.schemes import get_scheme
from multidraft.theory import IID, Deterministic, Independent, optimal_acceptance, softmax, top_k, zipf
from multidraft.theory.laws import as_distribution
from multidraft.theory.verifier import TargetSplit, optimal_selection_rule

TARGET_MS = 0.3
N = 131072


def cpu_ms_batched(function, repeats: int, inner: int = 10) -> float:
    """:func:`cpu_ms` of ``inner`` calls divided by ``inner`` (the process clock ticks coarsely).
    Each result is dropped before the next call: keeping ten 1 MB results alive made the heap
    grow and shrink, and the page faults of the regrowth tripled the validation's time."""

    def calls() -> None:
        for _ in range(inner):
            function()

    return cpu_ms(calls, repeats) / inner


def zipf_position(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A Zipf target (exponent 1.1) at n = N, and the draft before its cut: the target's
    log-probs plus N(0, 0.5²) noise at temperature 1.3."""
    p = zipf(N, exponent=1.1, rng=rng)
    return p, softmax(np.log(p) + rng.normal(size=N) * 0.5, temperature=1.3)


def position_row(scheme, p: np.ndarray, q: np.ndarray, k: int, repeats: int, rng: np.random.Generator) -> dict:
    law = IID(q, k)
    drafts = law.sample(rng)
    rule = optimal_selection_rule(p, law)
    return {
        "support": int(np.count_nonzero(q)),
        "k": k,
        "select_ms": cpu_ms_batched(lambda: scheme.select(p, law, drafts, rng), repeats),
        "sample_ms": cpu_ms_batched(lambda: scheme.sample(p, law, drafts[None], rng), repeats),
        "validate_p_ms": cpu_ms_batched(lambda: as_distribution(p), repeats),
        "build_law_ms": cpu_ms_batched(lambda: IID(q, k), repeats),
        "acc_minus_optimum": rule.acceptance - optimal_acceptance(p, law).value,
        "optimum": rule.optimum,
    }


def top_k_settings(keeps: tuple[int, ...]):
    """``(p, keep, q, k, rng)``: one Zipf target at n = N (seed 0), its top-``keep`` drafts and
    K ∈ {2, 4, 8}."""
    rng = np.random.default_rng(0)
    p, noisy = zipf_position(rng)
    for keep in keeps:
        q = top_k(noisy, keep)
        for k in (2, 4, 8):
            yield p, keep, q, k, rng


def top_k_rows(repeats: int, keeps: tuple[int, ...]) -> list[dict]:
    scheme = get_scheme("optimal")
    rows = []
    for p, keep, q, k, rng in top_k_settings(keeps):
        row = {"n": N, "top_k": keep, **position_row(scheme, p, q, k, repeats, rng), "target_ms": TARGET_MS}
        row["select_over_validate"] = row["select_ms"] / row["validate_p_ms"]
        rows.append(row)
        print_table(rows[-1:], list(rows[-1]))
    return rows


def other_schemes(repeats: int, keep: int = 100, k: int = 4) -> list[dict]:
    """The same position (top-100 draft, n = 131072) through the other schemes' public select:
    their float paths still work on the whole vocabulary (for comparison; not part of the
    target)."""
    rng = np.random.default_rng(0)
    p, noisy = zipf_position(rng)
    q = top_k(noisy, keep)
    law = IID(q, k)
    drafts = law.sample(rng)
    rows = []
    for name in ("optimal", "single", "specinfer", "spectr"):
        scheme = get_scheme(name)
        if not scheme.supports(law):
            continue
        rows.append({"scheme": name, "top_k": keep, "k": k, "select_ms": cpu_ms(lambda: scheme.select(p, law, drafts, rng), repeats)})
    validate = cpu_ms_batched(lambda: as_distribution(p), repeats)
    for row in rows:
        row["select_over_validate"] = row["select_ms"] / validate
    print_table(rows, list(rows[0]))
    return rows


def on_the_whole_vocabulary(plan_class: type) -> type:
    """The plan class forced onto the whole vocabulary: the dense path of a support plan."""

    class Dense(plan_class):
        @cached_property
        def split(self) -> TargetSplit:
            return TargetSplit(self.target)

    return Dense


def sparse_scheme_row(name: str, p: np.ndarray, law, repeats: int, rng: np.random.Generator) -> dict:
    """Public ``select`` and ``acceptance`` of one scheme against its plan on the whole
    vocabulary (same validation of p), both timed in this run; the two acceptances agree."""
    scheme = get_scheme(name)
    drafts = law.sample(rng)
    plan = scheme.prepare(p, law)
    dense = on_the_whole_vocabulary(type(plan))

    def dense_plan():
        return dense(scheme, law.check_target(p), law, False)

    row = {
        "scheme": name, "law": law.name, "support": len(plan.split.support), "k": law.k,
        "select_ms": cpu_ms_batched(lambda: scheme.select(p, law, drafts, rng), repeats),
        "dense_select_ms": cpu_ms(lambda: dense_plan().select(drafts, rng), repeats),
        "acceptance_ms": cpu_ms_batched(lambda: scheme.acceptance(p, law), repeats),
        "dense_acceptance_ms": cpu_ms(lambda: dense_plan().acceptance, repeats),
        "acceptance_minus_dense": plan.acceptance - dense_plan().acceptance,
    }  # fmt: skip
    row["select_speedup"] = row["dense_select_ms"] / row["select_ms"]
    row["acceptance_speedup"] = row["dense_acceptance_ms"] / row["acceptance_ms"]
    return row


def sparse_schemes(repeats: int, keeps: tuple[int, ...] = (1, 10, 100, 1000)) -> list[dict]:
    """SpecInfer and SpecTr on top-k drafts at n = 131072, sparse against dense in one run."""
    rows = []
    for p, keep, q, k, rng in top_k_settings(keeps):
        for name in ("specinfer", "spectr"):
            rows.append({"top_k": keep, **sparse_scheme_row(name, p, IID(q, k), repeats, rng)})
            print_table(rows[-1:], list(rows[-1]))
    drafts = [top_k(softmax(np.log(p) + rng.normal(size=N) * 0.5, temperature=1.0 + 0.1 * i), 100) for i in range(4)]
    for law in (Independent(drafts), Deterministic(np.argsort(-p)[:4], N)):
        rows.append({"top_k": 100 if law.name == "independent" else 1, **sparse_scheme_row("specinfer", p, law, repeats, rng)})
        print_table(rows[-1:], list(rows[-1]))
    return rows


def real_positions(positions: int, repeats: int) -> list[dict]:
    """Nodes of real decoding runs with top-p 0.95 drafts: support sizes and timings."""
    from multidraft.decoding import DEFAULT_PROMPTS, Sampling, early_exit, load_model, measure

    target = load_model("default", progress=False)
    drafts = {"self T=1.5": (None, 1.5), "early-exit 10 layers T=1.0": (early_exit(target, 10), 1.0)}
    scheme = get_scheme("optimal")
    rng = np.random.default_rng(1)
    rows = []
    for name, (draft, temperature) in drafts.items():
        results = measure(
            target, draft, k=4, length=4, scheme="optimal", prompts=list(DEFAULT_PROMPTS[:2]), max_new_tokens=positions,
            draft_sampling=Sampling(temperature, top_p=0.95), keep_distributions=True, baseline=False, progress=False,
        )  # fmt: skip
        records = [r for r in results.records if r.law == "iid"]
        for record in records:
            p, q = record.target / record.target.sum(), record.drafts[0] / record.drafts[0].sum()
            row = {"draft": name, "depth": record.depth, **position_row(scheme, p, q, 4, max(3, repeats // 5), rng)}
            row["select_over_validate"] = row["select_ms"] / row["validate_p_ms"]
            rows.append(row)
        supports = np.array([r["support"] for r in rows if r["draft"] == name])
        select = np.array([r["select_ms"] for r in rows if r["draft"] == name])
        print(
            f"{name}: {len(supports)} positions, support min/median/max {supports.min()}/{int(np.median(supports))}/"
            f"{supports.max()}, select ms median {np.median(select):.3f} p90 {np.quantile(select, 0.9):.3f}"
        )
    return rows


def summary(rows: list[dict]) -> list[dict]:
    """Per draft: the support sizes and select times over the real positions."""
    out = []
    for name in dict.fromkeys(r["draft"] for r in rows):
        mine = [r for r in rows if r["draft"] == name]
        supports = np.array([r["support"] for r in mine])
        select = np.array([r["select_ms"] for r in mine])
        validate = np.array([r["validate_p_ms"] for r in mine])
        out.append(
            {
                "draft": name, "positions": len(mine), "support_min": int(supports.min()),
                "support_median": float(np.median(supports)), "support_p90": float(np.quantile(supports, 0.9)),
                "support_max": int(supports.max()), "select_ms_median": float(np.median(select)),
                "select_ms_p90": float(np.quantile(select, 0.9)), "select_ms_max": float(select.max()),
                "validate_p_ms_median": float(np.median(validate)),
                "max_abs_acc_minus_optimum": float(max(abs(r["acc_minus_optimum"]) for r in mine)),
            }
        )  # fmt: skip
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=25)
    parser.add_argument("--positions", type=int, default=24, help="new tokens per prompt of each real-model run")
    parser.add_argument("--quick", action="store_true", help="top-k rows only")
    args = parser.parse_args()
    print(f"Top-k drafts at n = {N}: fit + one selection through Optimal().select (target <= {TARGET_MS} ms)")
    rows = top_k_rows(args.repeats, (1, 10, 100, 1000))
    print("\nThe same kind of position through the other schemes (for comparison)")
    others = other_schemes(max(3, args.repeats // 5))
    print(f"\nSpecInfer and SpecTr at n = {N}: on the drafts' support against the whole vocabulary, one run")
    schemes = sparse_schemes(max(5, args.repeats // 2))
    real, table = [], []
    if not args.quick:
        print("\nTop-p 0.95 drafts at the bundled model's real positions (K = 4)")
        real = real_positions(args.positions, args.repeats)
        table = summary(real)
        print_table(table, list(table[0]))
    path = write_results(
        "sparse", rows, other_schemes=others, sparse_schemes=schemes, real_positions=real, real_summary=table, target_ms=TARGET_MS
    )
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
