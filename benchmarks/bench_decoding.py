"""Benchmark: multi-draft speculative sampling against autoregressive sampling on the bundled
SmolLM2-135M-Instruct, for each scheme and K, on any device, eager or compiled.

Every row is one :func:`multidraft.decoding.measure` run, which times autoregressive sampling
of the same prompts in the same run, so the speed-up (x AR) compares like with like. Columns:
tok/s (speculative), AR tok/s, x AR, block efficiency (BE), empirical acceptance, mean expected
acceptance E[acc] (over the ``E`` positions where the scheme has an exact value), mean optimal
P*, the selection share (time in token-level selection over the decoding step time; target
<= 5%) and milliseconds of selection per block.

Drafts: the target itself at temperature 1.5 (the paper's setting; no speed-up is possible
since a draft step costs a target step) and an early exit of the target (its first
``--exit-layers`` layers at temperature 1.0, sharing the weights), which can be faster.
Each configuration decodes ``--max-new-tokens`` tokens on ``--prompts`` prompts after a short
warm-up run of the same configuration (excluded: first calls, a scheme's JIT compilation, and
with ``--compile`` the compiled forwards' warm-up); tokens/s exclude the theory computations. On a shared CPU timings are noisy; the load average is recorded with them.

Usage: ``python benchmarks/bench_decoding.py [--device cuda] [--compile] [--max-new-tokens 24]
[--prompts 2] [--threads 1] [--quick]``
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import print_table, write_results  # noqa: E402

from multidraft.decoding import DEFAULT_PROMPTS, Sampling, early_exit, load_model, measure  # noqa: E402

#: (scheme, k, without_replacement) measured for every draft kind.
CONFIGS = [
    ("specinfer", 2, False),
    ("specinfer", 4, False),
    ("spectr", 2, False),
    ("spectr", 4, False),
    ("rrs-wor", 2, True),
    ("rrs-wor", 4, True),
    ("optimal", 2, False),
    ("optimal", 4, False),
    ("optimal", 2, True),  # the front/back rule: its fit (~1 s per node at n = 49152) is the selection cost
]
COLUMNS = [
    "scheme", "draft", "k", "tok/s", "AR tok/s", "x AR", "BE", "acc", "E[acc]", "P*", "sel %", "sel ms/block", "pos/E",
]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="auto", help="auto (cuda, mps, cpu), cpu, cuda, ...")
    parser.add_argument("--compile", action="store_true", help="static KV cache and compiled forwards")
    parser.add_argument("--max-new-tokens", type=int, default=24)
    parser.add_argument("--prompts", type=int, default=2)
    parser.add_argument("--length", type=int, default=4)
    parser.add_argument("--exit-layers", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (1 is fastest on a busy CPU)")
    parser.add_argument("--quick", action="store_true", help="K = 2 only, self-draft only")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    target = load_model("default", device=args.device, progress=False)
    prompts = list(DEFAULT_PROMPTS[: args.prompts])
    drafts = {"self T=1.5": (None, 1.5)}
    if not args.quick:
        drafts[f"early-exit {args.exit_layers} layers T=1.0"] = (early_exit(target, args.exit_layers), 1.0)
    configs = [c for c in CONFIGS if not args.quick or c[1] == 2]

    rows = []
    for draft_name, (draft, temperature) in drafts.items():
        for scheme, k, wor in configs:
            settings = dict(k=k, scheme=scheme, draft_sampling=Sampling(temperature), without_replacement=wor,
                            compile=args.compile, progress=False)  # fmt: skip
            measure(target, draft, length=args.length, prompts=prompts[:1], max_new_tokens=4, **settings)  # warm-up
            result = measure(target, draft, length=args.length, prompts=prompts, max_new_tokens=args.max_new_tokens, **settings)
            step = result.seconds_drafting + result.seconds_verification + result.seconds_selection
            rows.append({
                "scheme": scheme, "draft": draft_name, "k": k, "length": args.length, "without_replacement": wor,
                "device": result.device, "compiled": result.compiled,
                "tokens_per_second": result.tokens_per_second,
                "autoregressive_tokens_per_second": result.autoregressive_tokens_per_second,
                "speedup": result.speedup,
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
                "seconds_warmup": result.seconds_warmup,
                "selection_share": result.seconds_selection / step,
                "selection_ms_per_block": 1e3 * result.seconds_selection / result.blocks,
            })  # fmt: skip

    print_table(
        [
            {
                "scheme": r["scheme"], "draft": r["draft"], "k": r["k"], "tok/s": r["tokens_per_second"],
                "AR tok/s": r["autoregressive_tokens_per_second"], "x AR": r["speedup"], "BE": r["block_efficiency"],
                "acc": r["empirical_acceptance"], "E[acc]": r["expected_acceptance"], "P*": r["optimal_acceptance"],
                "sel %": 100 * r["selection_share"], "sel ms/block": r["selection_ms_per_block"],
                "pos/E": f"{r['positions']}/{r['expected_positions']}",
            }
            for r in rows
        ],
        COLUMNS,
    )  # fmt: skip
    name = "decoding" + ("_compiled" if args.compile else "") + ("" if target.device.type == "cpu" else f"_{target.device.type}")
    path = write_results(
        name, rows, settings={**vars(args), "model": "SmolLM2-135M-Instruct (Q4_1 GGUF, float32)", "device": str(target.device)},
        note="on a shared CPU with other jobs running wall times are noisy; see provenance.load_average",
    )  # fmt: skip
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
