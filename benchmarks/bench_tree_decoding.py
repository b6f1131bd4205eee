"""Tree shapes in decoding on the bundled model (issue 30 item 1, issue 31 item 1).

SmolLM2-135M drafting for itself at draft temperature ``--draft-temperature`` (target 1.0), the
same prompts and seed for every shape, 6 drafted nodes each by default: chains(2, 3) (today's
path, the baseline of the same run), expansion [2, 2] and [3, 1] drawn iid, [2, 2] without
replacement, [2, 2] top-k, and a dynamic tree of 6 nodes (branching 2, depth 3). One run per
shape driven by the token walk (``token:specinfer``; ``token:rrs-wor`` without replacement),
every lossless verifier scored on every block by its exact E[τ | tree]. Per shape: realised and
expected block efficiency of the driver, each verifier's paired gain over the driver (tokens per
call, 95% interval), and per-block drafting and verification time as a ratio to chains in the
same run (absolute times are inflated by the shared machine: the load average is recorded).
torch runs single-threaded. Writes ``benchmarks/results/tree_decoding.json``.

Usage: ``python benchmarks/bench_tree_decoding.py [--prompts 2] [--tokens 24]``
"""

from __future__ import annotations

import argparse

import torch
from _common import print_table, write_results

from multidraft.decoding import DEFAULT_PROMPTS, Sampling, load_model, measure
from multidraft.trees import TreeShape

SHAPES = [
    TreeShape.chains(2, 3),
    TreeShape.expansion([2, 2]),
    TreeShape.expansion([3, 1]),
    TreeShape.expansion([2, 2], law="without-replacement"),
    TreeShape.expansion([2, 2], law="top-k"),
    TreeShape.dynamic(6, 3, branching=2),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=24)
    parser.add_argument("--draft-temperature", type=float, default=1.5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    model = load_model("default", device="cpu")
    rows = []
    for shape in SHAPES:
        law = "top-k" if shape.family == "dynamic" else shape.law
        driver = "token:rrs-wor" if law == "without-replacement" else "token:specinfer"
        scored = ["selective", "token:optimal"] + (["traversal"] if law != "top-k" else [])
        results = measure(
            model, None, shape=shape, prompts=list(DEFAULT_PROMPTS[: args.prompts]), max_new_tokens=args.tokens,
            draft_sampling=Sampling(args.draft_temperature), baseline=False, progress=False, seed=0,
            verifiers=[driver], scored=scored,
        )  # fmt: skip
        run = results.verifiers[0]
        row = {
            "shape": repr(shape),
            "nodes": shape.node_count,
            "driver": driver,
            "blocks": run.blocks,
            "realised": run.block_efficiency,
            "expected": run.expected_block_efficiency,
            "drafting_per_block": results.seconds_drafting / run.blocks,
            "verification_per_block": results.seconds_verification / run.blocks,
        }
        for score in results.paired[1:]:
            row[f"gain:{score.verifier}"] = score.difference
            row[f"ci95:{score.verifier}"] = list(score.ci95)
        rows.append(row)
        print(f"{shape!r}: {run.blocks} blocks", flush=True)
    base = rows[0]
    for row in rows:
        row["drafting_ratio"] = row["drafting_per_block"] / base["drafting_per_block"]
        row["verification_ratio"] = row["verification_per_block"] / base["verification_per_block"]
    columns = ["shape", "blocks", "realised", "expected", "gain:traversal", "gain:selective", "gain:token:optimal",
               "drafting_ratio", "verification_ratio"]  # fmt: skip
    print_table(rows, columns)
    print(f"wrote {write_results('tree_decoding', rows, draft_temperature=args.draft_temperature, tokens=args.tokens)}")


if __name__ == "__main__":
    main()
