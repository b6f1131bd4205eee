"""Speed and accuracy of the LPs in :mod:`multidraft.lp`.

Measures (warm-up excluded, median of repeats, wall clock):

1. the optimal-transport LP (cvxpy + HiGHS): K = 2, n = 40 (target <= 5 s) and K = 3,
   n = 12 (target <= 10 s), iid (merged multisets) and independent drafts;
2. the pair importance LP, K = 2, n = 300 (target <= 10 s);
3. the truncated selection per position at n = 49152, K in {2, 3, 4} iid drafts: s = 5
   (target <= 5 ms) and s = 15 (target <= 50 ms), ranked (paper) and sort-free rules; for
   scale, one forward pass of a 135M-parameter model on this CPU takes about 43 ms (figure from
   the project issue, not re-measured here);
4. acceptance loss ``P* - acceptance`` of the truncated LP versus s in (5, 10, 15, 30) for both
   rank keys, on Zipf- and Dirichlet-shaped instances with n = 49152 at a sharp and a flat
   temperature, iid drafts (P* exact by the sorted scan) and two drafts at different
   temperatures (P* bounded above by min-cuts over 41 score directions, so the loss shown
   is an upper bound).

5. multi-stage determinism (K = 3, small n, 8 instances): the largest difference of the final
   acceptance between two solvers, for stages solved as LPs (HiGHS vs Clarabel, whichever
   optimum each returns) and for the canonical stages (our projection vs Clarabel's QP).

Every LP value is checked against the closed-form optimum where one exists. The machine has
2 cores shared with other jobs: timings are noisy. Writes benchmarks/results/lp.json.

Run: ``python benchmarks/bench_lp.py [--quick]``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from _common import measure, provenance, write_json

from multidraft.lp import importance_lp, multistage, pair_importance_lp, transport_lp, truncated_selection
from multidraft.lp.truncated import RANK_KEYS
from multidraft.theory import IID, Independent, dirichlet, optimal_acceptance, optimal_acceptance_batch, softmax, zipf

RESULTS = Path(__file__).resolve().parent / "results" / "lp.json"
FORWARD_135M_MS = 43.0


def bench_transport(repeats: int) -> list[dict]:
    rng = np.random.default_rng(0)
    rows = []
    for k, n, target_seconds in ((2, 40, 5.0), (3, 12, 10.0)):
        p, q1, q2, q3 = (dirichlet(n, 0.5, rng) for _ in range(4))
        for law in (IID(q1, k), Independent([q1, q2, q3][:k])):
            timing = measure(lambda: transport_lp(p, law), repeats)
            seconds, solution, cpu = timing.median, timing.result, timing.cpu_median
            if law.has_prefix_structure or n <= 22:
                reference, method = float(optimal_acceptance(p, law).value), "min-cut"
            else:  # no closed form for independent drafts at n > 22: the tuple importance LP
                reference, method = importance_lp(p, law).acceptance, "importance LP"
            rows.append(
                {
                    "lp": "transport",
                    "law": law.name,
                    "k": k,
                    "n": n,
                    "variables": solution.variables,
                    "constraints": solution.constraints,
                    "seconds": seconds,
                    "cpu_seconds": cpu,
                    "target_seconds": target_seconds,
                    "acceptance": solution.acceptance,
                    "reference": reference,
                    "reference_method": method,
                }
            )
    return rows


def bench_pair(repeats: int) -> list[dict]:
    rng = np.random.default_rng(1)
    n = 300
    p, q = dirichlet(n, 0.5, rng), dirichlet(n, 0.5, rng)
    timing = measure(lambda: pair_importance_lp(p, q), repeats)
    seconds, selection, cpu = timing.median, timing.result, timing.cpu_median
    return [
        {
            "lp": "pair importance",
            "law": "iid",
            "k": 2,
            "n": n,
            "variables": int(np.count_nonzero(q) ** 2 - np.count_nonzero(q) + n),
            "seconds": seconds,
            "cpu_seconds": cpu,
            "target_seconds": 10.0,
            "acceptance": selection.acceptance,
            "reference": float(optimal_acceptance(p, IID(q, 2)).value),
            "reference_method": "min-cut",
        }
    ]


def language_like(family: str, n: int, temperature: float, rng: np.random.Generator, noise: float = 1.0):
    """(target, draft logits) shaped like a language model's: the draft is the target's logits
    plus Gaussian noise. ``zipf``: ranks ∝ r^-1.1 in random token order; ``dirichlet``:
    Dirichlet(0.01) (a few dominant tokens)."""
    base = zipf(n, 1.1, rng) if family == "zipf" else dirichlet(n, 0.01, rng)
    logits = np.log(np.maximum(base, 1e-300))
    logits = np.maximum(logits, logits.max() - 60.0)  # keep every token drafted with some mass
    draft_logits = logits + noise * rng.standard_normal(n)
    return softmax(logits, temperature), draft_logits


def bench_truncated_speed(repeats: int) -> list[dict]:
    rng = np.random.default_rng(2)
    n = 49152
    p, draft_logits = language_like("zipf", n, 1.0, rng)
    q = softmax(draft_logits, 1.0)
    rows = []
    for k in (2, 3, 4):
        optimum = float(optimal_acceptance_batch(p[None], q[None], k=k)[0])
        for s, target_ms in ((5, 5.0), (15, 50.0)):
            for outside in ("ranked", "first"):
                timing = measure(lambda: truncated_selection(p, IID(q, k), s=s, outside=outside), repeats)
                seconds, times, selection, cpu = timing.median, timing.wall, timing.result, timing.cpu_median
                rows.append(
                    {
                        "lp": "truncated",
                        "n": n,
                        "k": k,
                        "s": s,
                        "outside": outside,
                        "median_ms": 1e3 * seconds,
                        "cpu_median_ms": 1e3 * cpu,
                        "p10_ms": 1e3 * float(np.percentile(times, 10)),
                        "p90_ms": 1e3 * float(np.percentile(times, 90)),
                        "target_ms": target_ms,
                        "forward_135m_ms": FORWARD_135M_MS,
                        "acceptance": selection.acceptance,
                        "optimum": optimum,
                    }
                )
    return rows


def _lp_stage_acceptance(target: np.ndarray, drafts: list[np.ndarray], solver: str) -> float:
    """Multi-stage with each stage solved as an LP: whichever optimal law the solver returns."""
    current = drafts[0]
    for following in drafts[1:]:
        stage = pair_importance_lp(target, current, following, solver=solver)
        current = stage.intermediate
    return stage.acceptance


def bench_multistage_determinism(instances: int = 8) -> list[dict]:
    rows = []
    for seed in range(instances):
        rng = np.random.default_rng(seed)
        target = dirichlet(6, 0.3, rng)
        drafts = [dirichlet(6, 0.3, rng)] * 3
        lp_gap = abs(_lp_stage_acceptance(target, drafts, "HIGHS") - _lp_stage_acceptance(target, drafts, "CLARABEL"))
        timing = measure(lambda: multistage(target, drafts), 3)
        canonical = timing.result
        other = multistage(target, drafts, solver="CLARABEL")
        rows.append(
            {
                "seed": seed, "n": 6, "k": 3, "canonical_acceptance": canonical.acceptance,
                "canonical_solver_gap": abs(canonical.acceptance - other.acceptance),
                "canonical_law_gap": float(np.abs(canonical.intermediate - other.intermediate).max()),
                "lp_stages_solver_gap": lp_gap, "canonical_ms": 1e3 * timing.median,
            }
        )
    return rows


def independent_upper_bound(p: np.ndarray, q1: np.ndarray, q2: np.ndarray, directions: int = 41) -> float:
    """min over cuts T = prefixes of the order by (cos θ q1 + sin θ q2)/p, θ on a grid in
    [0, π/2]: each cut value p(T) + 1 - q1(T) q2(T) bounds P* from above (theory.md)."""
    best = 1.0
    for theta in np.linspace(0.0, np.pi / 2, directions):
        score = np.cos(theta) * q1 + np.sin(theta) * q2
        with np.errstate(divide="ignore"):
            ratio = np.where(p > 0, score / np.where(p > 0, p, 1.0), np.inf)
        order = np.argsort(-ratio)
        prefix = lambda v: np.concatenate([[0.0], np.cumsum(v[order])])  # noqa: E731
        best = min(best, float((prefix(p) + 1.0 - prefix(q1) * prefix(q2)).min()))
    return best


def bench_loss(seeds: int, sizes: tuple[int, ...]) -> list[dict]:
    n = 49152
    rows = []
    for family in ("zipf", "dirichlet"):
        for setting, temperature in (("sharp", 0.7), ("flat", 1.5)):
            for drafts in ("iid", "two temperatures"):
                values: dict[tuple, list[float]] = {}
                optima, single = [], []
                for seed in range(seeds):
                    rng = np.random.default_rng(100 + seed)
                    p, draft_logits = language_like(family, n, temperature, rng)
                    q1 = softmax(draft_logits, temperature)
                    if drafts == "iid":
                        q2 = None
                        optimum = float(optimal_acceptance_batch(p[None], q1[None], k=2)[0])
                    else:
                        q2 = softmax(draft_logits, 1.5 * temperature)
                        optimum = independent_upper_bound(p, q1, q2)
                    optima.append(optimum)
                    single.append(float(np.minimum(p, q1).sum()))
                    for rank_key in RANK_KEYS:
                        for outside in ("ranked", "first"):
                            for s in sizes:
                                acceptance = truncated_selection(p, Independent([q1, q2]), s=s, rank_key=rank_key, outside=outside).acceptance
                                assert acceptance <= optimum + 1e-9, (family, setting, drafts, rank_key, s)
                                values.setdefault((rank_key, outside, s), []).append(optimum - acceptance)
                for (rank_key, outside, s), losses in values.items():
                    rows.append(
                        {
                            "family": family,
                            "temperature": setting,
                            "drafts": drafts,
                            "rank_key": rank_key,
                            "outside": outside,
                            "s": s,
                            "optimum": float(np.mean(optima)),
                            "optimum_is_upper_bound": drafts != "iid",
                            "single_draft": float(np.mean(single)),
                            "mean_loss": float(np.mean(losses)),
                            "max_loss": float(np.max(losses)),
                        }
                    )
    return rows


def winners(loss_rows: list[dict]) -> dict:
    """Per fixed rule, over (family, temperature, drafts, s): how often each rank key has the
    smaller mean loss."""
    groups: dict[tuple, dict[str, float]] = {}
    for row in loss_rows:
        group = (row["outside"], row["family"], row["temperature"], row["drafts"], row["s"])
        groups.setdefault(group, {})[row["rank_key"]] = row["mean_loss"]
    tally: dict[str, dict[str, int]] = {}
    for (outside, *_), losses in groups.items():
        counts = tally.setdefault(outside, {key: 0 for key in (*RANK_KEYS, "tie")})
        a, b = losses["published"], losses["ratio"]
        counts["tie" if abs(a - b) <= 1e-6 else ("published" if a < b else "ratio")] += 1
    return tally


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats and seeds")
    args = parser.parse_args(argv)
    repeats, seeds, speed_repeats = (1, 1, 20) if args.quick else (3, 5, 200)

    report = {"provenance": provenance()}
    report["lp"] = bench_transport(repeats) + bench_pair(repeats)
    print("Exact LPs (cvxpy + HiGHS), median wall time")
    print(f"{'LP':<17}{'law':<13}{'K':>2}{'n':>5}{'variables':>11}{'seconds':>10}{'cpu s':>8}{'target':>8}{'acceptance':>12}{'reference':>11}  method")
    for row in report["lp"]:
        print(
            f"{row['lp']:<17}{row['law']:<13}{row['k']:>2}{row['n']:>5}{row['variables']:>11}{row['seconds']:>10.3f}{row['cpu_seconds']:>8.3f}"
            f"{row['target_seconds']:>8.0f}{row['acceptance']:>12.6f}{row['reference']:>11.6f}  {row['reference_method']}"
        )

    report["truncated_speed"] = bench_truncated_speed(speed_repeats)
    print(f"\nTruncated selection per position, n = 49152, iid drafts ({speed_repeats} repeats; one 135M forward ≈ {FORWARD_135M_MS:.0f} ms)")
    print(f"{'K':>2}{'s':>4} {'outside':<8}{'median ms':>10}{'p10':>8}{'p90':>8}{'cpu ms':>8}{'target':>8}{'acceptance':>12}{'P*':>10}")
    for row in report["truncated_speed"]:
        print(
            f"{row['k']:>2}{row['s']:>4} {row['outside']:<8}{row['median_ms']:>10.2f}{row['p10_ms']:>8.2f}"
            f"{row['p90_ms']:>8.2f}{row['cpu_median_ms']:>8.2f}{row['target_ms']:>8.0f}{row['acceptance']:>12.6f}{row['optimum']:>10.6f}"
        )

    report["multistage_determinism"] = bench_multistage_determinism()
    print("\nMulti-stage K = 3 (n = 6): final acceptance across two solvers, LP stages vs canonical stages")
    print(f"{'seed':>4}{'LP-stage gap':>14}{'canonical gap':>15}{'law gap':>10}{'ms':>8}{'acceptance':>12}")
    for row in report["multistage_determinism"]:
        print(
            f"{row['seed']:>4}{row['lp_stages_solver_gap']:>14.2e}{row['canonical_solver_gap']:>15.2e}"
            f"{row['canonical_law_gap']:>10.1e}{row['canonical_ms']:>8.1f}{row['canonical_acceptance']:>12.6f}"
        )

    sizes = (5, 10, 15, 30)
    report["truncated_loss"] = bench_loss(seeds, sizes)
    print(f"\nAcceptance loss P* - truncated LP, n = 49152, mean over {seeds} instances (sharp T=0.7, flat T=1.5)")
    print("('two temperatures': drafts at T and 1.5T; P* there is an upper bound, so the loss is too)")
    header = "".join(f"{'s=' + str(s):>10}" for s in sizes)
    print(f"{'family':<10}{'temp':<6}{'drafts':<17}{'key':<10}{'outside':<8}{'P*':>8}{'single':>8}{header}")
    for index in range(0, len(report["truncated_loss"]), len(sizes)):
        group = report["truncated_loss"][index : index + len(sizes)]
        first = group[0]
        cells = "".join(f"{row['mean_loss']:>10.2e}" for row in group)
        print(
            f"{first['family']:<10}{first['temperature']:<6}{first['drafts']:<17}{first['rank_key']:<10}"
            f"{first['outside']:<8}{first['optimum']:>8.4f}{first['single_draft']:>8.4f}{cells}"
        )
    report["key_wins"] = winners(report["truncated_loss"])
    print(f"\nRank key with the smaller mean loss, per fixed rule, counted over settings x s: {report['key_wins']}")

    write_json(RESULTS, report)
    print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
