"""Speed of the token-level schemes: batched selection (torch, CPU) and exact acceptance.

**Batched selection.**
For each batch-capable scheme and K, one ``select_batch`` call on B = 256 positions with
n = 49152 (SmolLM2's vocabulary), LLM-like distributions: target ``softmax(z)`` with
``z ~ 2.5 N(0, 1)`` per token, draft ``softmax((z + 0.5 ε)/1.2)`` (a noisier, hotter copy).
Warm-up excluded; median of ``--repeats`` timed calls (``time.perf_counter``; CPU, so no device
synchronisation is needed). truncated-lp (s = 5) is vectorised over the rows except for its
canonical split over the s^K inner tuples, which runs row by row; it is timed on
``--truncated-rows`` rows and scaled to B.

Runs single-threaded by default (``--threads 1``): on a small shared machine torch's
multi-threaded kernels contend with other processes and the timings become erratic.

**Exact acceptance** (numpy, n = 49152, same target/draft family, one row): SpecInfer's
closed form through the public ``scheme.acceptance`` (validation included) against a
straightforward implementation of the published formula
``1 - Π_i (1 - Σ_y min(r_{i-1}(y), q_i(y)))`` with normalised residuals (:func:`peer_specinfer`;
the public peer implementation the project issue compares with is not available here), for iid
and independent drafts, K in {2, 4, 8}: median times, their ratio, and the largest difference
of the two values.

Writes ``benchmarks/results/schemes.json`` with machine, versions, date and git commit.
The machine may be shared: timings are noisy.

Usage: ``python benchmarks/bench_schemes.py [--batch 256] [--vocab 49152] [--repeats 7]``
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch
from _common import measure, print_table, provenance, write_json

from multidraft.schemes import get_scheme
from multidraft.theory import IID, Independent

TARGET_MS = 50.0


def make_inputs(batch: int, n: int, k: int, without_replacement: bool, dtype: torch.dtype, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    z = 2.5 * torch.randn(batch, n, generator=generator, dtype=torch.float64)
    target = torch.softmax(z, dim=-1)
    draft = torch.softmax((z + 0.5 * torch.randn(batch, n, generator=generator, dtype=torch.float64)) / 1.2, dim=-1)
    tokens = torch.multinomial(draft, k, replacement=not without_replacement, generator=generator)
    drafts = draft[:, None, :].expand(batch, k, n).contiguous()
    return target.to(dtype), drafts.to(dtype), tokens


def peer_specinfer(p: np.ndarray, drafts: list[np.ndarray]) -> float:
    """The published SpecInfer acceptance, written directly: normalised residuals
    ``r_i = norm((r_{i-1} - q_i)_+)`` and ``1 - Π_i (1 - Σ_y min(r_{i-1}(y), q_i(y)))``."""
    residual, miss = p, 1.0
    for q in drafts:
        miss *= 1.0 - np.minimum(residual, q).sum()
        rest = np.maximum(residual - q, 0.0)
        residual = rest / rest.sum()
    return 1.0 - miss


def bench_exact_acceptance(n: int, repeats: int) -> list[dict]:
    """SpecInfer's exact acceptance (public call) against :func:`peer_specinfer`."""
    target, drafts, _ = make_inputs(1, n, 8, False, torch.float64, seed=2)
    p, q = target[0].numpy(), drafts[0, 0].numpy()
    # Independent drafts: noisy copies of the target's logits at temperatures 1.0 .. 1.7.
    rng = np.random.default_rng(3)
    independent = [np.exp(np.log(p) / t + 0.5 * rng.standard_normal(n) / t) for t in np.linspace(1.0, 1.7, 8)]
    independent = [d / d.sum() for d in independent]
    scheme = get_scheme("specinfer")
    rows = []
    for law_name in ("iid", "independent"):
        for k in (2, 4, 8):
            per_draft = [q] * k if law_name == "iid" else independent[:k]
            law = IID(q, k) if law_name == "iid" else Independent(per_draft)
            ours = measure(lambda: scheme.acceptance(p, law), repeats)
            peer = measure(lambda: peer_specinfer(p, per_draft), repeats)
            rows.append(
                {
                    "scheme": "specinfer", "law": law_name, "k": k, "n": n,
                    "ours_ms": ours.median * 1e3, "peer_ms": peer.median * 1e3,
                    "ours_cpu_ms": ours.cpu_median * 1e3, "peer_cpu_ms": peer.cpu_median * 1e3,
                    "ratio_ours_to_peer": ours.median / peer.median,
                    "value": ours.result, "max_abs_difference": abs(ours.result - peer.result),
                }
            )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--vocab", type=int, default=49152)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--truncated-rows", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (0: torch default)")
    parser.add_argument("--schemes", default=None, help="comma-separated batched schemes to time (default: all)")
    parser.add_argument("--output", type=Path, default=Path(__file__).parent / "results" / "schemes.json")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    runs = [("single", 1)] + [(name, k) for name in ("specinfer", "rrs-wor", "spectr", "truncated-lp") for k in (2, 4)]
    if args.schemes:
        runs = [(name, k) for name, k in runs if name in args.schemes.split(",")]
    rows = []
    print(f"select_batch on CPU torch: B={args.batch}, n={args.vocab}, median of {args.repeats} (target <= {TARGET_MS} ms)")
    print(f"{'scheme':<14}{'K':>3}{'dtype':>9}{'median ms':>12}{'min ms':>10}{'acc rate':>10}")
    for name, k in runs:
        for dtype in (torch.float32, torch.float64):
            batch = args.truncated_rows if name == "truncated-lp" else args.batch
            target, drafts, tokens = make_inputs(batch, args.vocab, k, name == "rrs-wor", dtype)
            scheme = get_scheme(name)
            generator = torch.Generator().manual_seed(1)
            outcome = {}

            def call():
                outcome["result"] = scheme.select_batch(target, drafts, tokens, generator)

            timing = measure(call, args.repeats)  # warm-up excluded
            times = timing.wall
            scale = args.batch / batch
            median_ms = timing.median * 1e3 * scale
            accepted = float(outcome["result"][1].float().mean())
            rows.append(
                {
                    "scheme": name, "k": k, "dtype": str(dtype).replace("torch.", ""), "batch": args.batch,
                    "rows_timed": batch, "vocab": args.vocab, "median_ms": median_ms,
                    "min_ms": min(times) * 1e3 * scale, "times_s": times, "acceptance_rate": accepted,
                    "within_target": median_ms <= TARGET_MS,
                }
            )
            note = f"  (timed on {batch} rows, scaled)" if scale != 1 else ""
            print(f"{name:<14}{k:>3}{rows[-1]['dtype']:>9}{median_ms:>12.1f}{min(times) * 1e3 * scale:>10.1f}{accepted:>10.3f}{note}")
    exact = bench_exact_acceptance(args.vocab, max(args.repeats, 21))
    print(f"\nExact acceptance, n={args.vocab}: public scheme.acceptance vs the published formula written directly")
    print_table(exact, ["scheme", "law", "k", "ours_ms", "peer_ms", "ratio_ours_to_peer", "value", "max_abs_difference"])
    info = {**provenance(), "torch_threads": torch.get_num_threads()}
    write_json(args.output, {"provenance": info, "target_ms": TARGET_MS, "results": rows, "exact_acceptance": exact})
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
