"""Speed of the batched (torch, CPU) token-level selection: B positions at vocabulary n.

For each batch-capable scheme and K, one ``select_batch`` call on B = 256 positions with
n = 49152 (SmolLM2's vocabulary), LLM-like distributions: target ``softmax(z)`` with
``z ~ 2.5 N(0, 1)`` per token, draft ``softmax((z + 0.5 ε)/1.2)`` (a noisier, hotter copy).
Warm-up excluded; median of ``--repeats`` timed calls (``time.perf_counter``; CPU, so no device
synchronisation is needed). truncated-lp loops over the batch in Python (one LP per row) and is
timed on fewer rows, reported per row and scaled to B.

Runs single-threaded by default (``--threads 1``): on a small shared machine torch's
multi-threaded kernels contend with other processes and the timings become erratic.

Writes ``benchmarks/results/schemes.json`` with machine, versions, date and git commit.
The machine may be shared: timings are noisy.

Usage: ``python benchmarks/bench_schemes.py [--batch 256] [--vocab 49152] [--repeats 7]``
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from _common import measure, provenance, write_json

from multidraft.schemes import get_scheme

TARGET_MS = 50.0


def make_inputs(batch: int, n: int, k: int, without_replacement: bool, dtype: torch.dtype, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    z = 2.5 * torch.randn(batch, n, generator=generator, dtype=torch.float64)
    target = torch.softmax(z, dim=-1)
    draft = torch.softmax((z + 0.5 * torch.randn(batch, n, generator=generator, dtype=torch.float64)) / 1.2, dim=-1)
    tokens = torch.multinomial(draft, k, replacement=not without_replacement, generator=generator)
    drafts = draft[:, None, :].expand(batch, k, n).contiguous()
    return target.to(dtype), drafts.to(dtype), tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--vocab", type=int, default=49152)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--truncated-rows", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (0: torch default)")
    parser.add_argument("--output", type=Path, default=Path(__file__).parent / "results" / "schemes.json")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    runs = [("single", 1)] + [(name, k) for name in ("specinfer", "rrs-wor", "spectr") for k in (2, 4)] + [("truncated-lp", 2)]
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
    info = {**provenance(), "torch_threads": torch.get_num_threads()}
    write_json(args.output, {"provenance": info, "target_ms": TARGET_MS, "results": rows})
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
