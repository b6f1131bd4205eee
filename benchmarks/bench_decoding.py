"""Benchmark: tokens/s of plain autoregressive sampling against multi-draft speculative
sampling on the bundled SmolLM2-135M-Instruct, for each scheme and K, with the selection
overhead (share of the step time spent in token-level selection; target <= 5%).
Columns: tok/s, speed-up over autoregressive (x AR), block efficiency (BE), empirical
acceptance, mean expected acceptance E[acc] (over the ``E`` positions where the scheme has an
exact value; rrs-wor has none at the root for K = 4 and n = 49152), mean optimal P*, selection
share, positions/E.

Drafts: the target itself at temperature 1.5 (the paper's setting; no speed-up is possible
since a draft step costs a target step) and an early exit of the target (its first
``--exit-layers`` layers at temperature 1.0, sharing the weights), which can be faster.
Each configuration decodes ``--max-new-tokens`` tokens on ``--prompts`` prompts after one
warm-up run (excluded); tokens/s exclude the theory computations. The CPU is shared with
other jobs (2 cores): timings are noisy; the load average is recorded with them.

Usage: ``python benchmarks/bench_decoding.py [--max-new-tokens 24] [--prompts 2] [--threads 1] [--quick]``
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import write_results  # noqa: E402

from multidraft.decoding import (  # noqa: E402
    DEFAULT_PROMPTS,
    early_exit,
    encode_prompt,
    load_model,
    measure,
    sample_autoregressive,
)

#: (scheme, k, without_replacement) measured for every draft kind.
CONFIGS = [
    ("specinfer", 2, False),
    ("specinfer", 4, False),
    ("spectr", 2, False),
    ("spectr", 4, False),
    ("rrs-wor", 2, True),
    ("rrs-wor", 4, True),
]


def autoregressive_rate(target, prompts: list[str], max_new_tokens: int) -> float:
    """Tokens per second of KV-cached autoregressive sampling at temperature 1."""
    generator = torch.Generator().manual_seed(0)
    ids = [encode_prompt(target.tokenizer, p) for p in prompts]
    sample_autoregressive(target, ids[0], max_new_tokens=4, generator=generator)  # warm-up
    tokens, start = 0, time.perf_counter()
    for prompt in ids:
        tokens += len(sample_autoregressive(target, prompt, max_new_tokens=max_new_tokens, generator=generator))
    return tokens / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max-new-tokens", type=int, default=24)
    parser.add_argument("--prompts", type=int, default=2)
    parser.add_argument("--length", type=int, default=4)
    parser.add_argument("--exit-layers", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1 is fastest on a busy CPU)")
    parser.add_argument("--quick", action="store_true", help="K = 2 only, self-draft only")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    target = load_model("default", device="cpu")
    prompts = list(DEFAULT_PROMPTS[: args.prompts])
    baseline = autoregressive_rate(target, prompts, args.max_new_tokens)
    drafts = {"self T=1.5": (None, 1.5)}
    if not args.quick:
        drafts[f"early-exit {args.exit_layers} layers T=1.0"] = (early_exit(target, args.exit_layers), 1.0)
    configs = [c for c in CONFIGS if not args.quick or c[1] == 2]

    rows = [{"method": "autoregressive", "draft": None, "k": 1, "tokens_per_second": baseline}]
    for draft_name, (draft, temperature) in drafts.items():
        measure(target, draft, k=2, length=2, prompts=prompts[:1], max_new_tokens=4, progress=False,
                draft_temperatures=(temperature,))  # warm-up  # fmt: skip
        for scheme, k, wor in configs:
            result = measure(
                target, draft, k=k, length=args.length, scheme=scheme, prompts=prompts,
                max_new_tokens=args.max_new_tokens, draft_temperatures=(temperature,),
                without_replacement=wor, progress=False,
            )  # fmt: skip
            step = result.seconds_drafting + result.seconds_verification + result.seconds_selection
            rows.append({
                "method": "speculative", "scheme": scheme, "draft": draft_name, "k": k,
                "length": args.length, "without_replacement": wor,
                "tokens_per_second": result.tokens_per_second,
                "speedup": result.tokens_per_second / baseline,
                "block_efficiency": result.block_efficiency,
                "empirical_acceptance": result.empirical_acceptance,
                "expected_acceptance": result.expected_acceptance,
                "ci95": list(result.ci95),
                "optimal_acceptance": result.optimal_acceptance,
                "positions": result.positions,
                "expected_positions": result.expected_positions,
                "notes": list(result.notes),
                "seconds_drafting": result.seconds_drafting,
                "seconds_verification": result.seconds_verification,
                "seconds_selection": result.seconds_selection,
                "selection_share": result.seconds_selection / step,
                "selection_ms_per_block": 1e3 * result.seconds_selection / result.blocks,
            })  # fmt: skip

    header = f"{'method':<16}{'draft':<30}{'K':>3}{'tok/s':>8}{'x AR':>7}{'BE':>6}{'acc':>7}{'E[acc]':>8}{'P*':>7}{'sel%':>7}{'pos/E':>8}"
    print(header)
    print("-" * len(header))
    for r in rows:
        if r["method"] == "autoregressive":
            print(f"{'autoregressive':<16}{'-':<30}{1:>3}{r['tokens_per_second']:>8.2f}")
            continue
        print(
            f"{r['scheme']:<16}{r['draft']:<30}{r['k']:>3}{r['tokens_per_second']:>8.2f}{r['speedup']:>7.2f}"
            f"{r['block_efficiency']:>6.2f}{r['empirical_acceptance']:>7.3f}{r['expected_acceptance']:>8.3f}"
            f"{r['optimal_acceptance']:>7.3f}{100 * r['selection_share']:>6.2f}%"
            f"{r['positions']:>4}/{r['expected_positions']:<3}"
        )
    path = write_results(
        "decoding", rows, settings={**vars(args), "model": "SmolLM2-135M-Instruct (Q4_1 GGUF, float32)"},
        note="shared 2-core CPU with other jobs running: wall times are noisy",
    )  # fmt: skip
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
