"""Speed of the tree verifiers: time per block at a real vocabulary (issue 23, item 7).

One block = one draft tree of K = 4 sequences of L = 4 tokens (block verification: one
sequence of L = 4) over n = 49152 tokens (SmolLM2's vocabulary). Distributions are LLM-like
and consistent along the tree: after each prefix u the target is ``softmax(z_u)`` with
``z_u ~ 2.5 N(0, 1)`` per token and the draft ``softmax((z_u + 0.5 ε_u) / 1.2)`` (a noisier,
hotter copy), z_u and ε_u seeded by the prefix; rows are drafted iid (or without replacement
at the root) from the draft, so rows that share a prefix share its distributions. Several
trees (``--trees``) are timed and the median per block reported, for:

* ``verify`` -- one run of the verifier on a :class:`~multidraft.trees.DraftTree` (numpy;
  the tree built with ``validate=False`` beforehand, as decoding would, its construction timed
  apart);
* ``law`` -- the exact law given the tree without next-token rows (the Rao-Blackwell E[τ]);
* ``batch`` -- ``verify_batch`` on torch CPU tensors, B = 1 and B = ``--batch`` trees (per block),
  with ``validate=False`` as decoding would call it (its distributions come normalised; the
  O(B·K·L·n) row check costs about as much as the verification itself).

The baseline in the same run is today's token walk with SpecInfer (``token:specinfer``;
``token:rrs-wor`` without replacement); the goal is <= 2 ms per block for traversal and block
verification on CPU. Selective verification fits a selection rule per node and is timed for
reference, and so is the token walk with the optimal verifier (``token:optimal``: its exact law
selects through ``CurtainRule.choice_probabilities`` on the rule restricted to each node's drafted
tokens). torch runs
single-threaded (``--threads 1``) because the machine is shared. Warm-up excluded (numba
compiles on the first call). Writes ``benchmarks/results/trees.json`` with machine, versions,
date, commit and load average.

Usage: ``python benchmarks/bench_trees.py [--vocab 49152] [--trees 8] [--repeats 5]``
"""

from __future__ import annotations

import argparse
import hashlib

import numpy as np
import torch
from _common import measure, print_table, provenance, write_json

from multidraft.trees import DraftTree, get_verifier

GOAL_MS = 2.0


def _distributions(prefix: tuple[int, ...], n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    digest = hashlib.blake2b(repr((seed, prefix)).encode(), digest_size=8).digest()
    rng = np.random.default_rng(int.from_bytes(digest, "little"))
    z = 2.5 * rng.standard_normal(n)
    target = np.exp(z - z.max())
    draft_logits = (z + 0.5 * rng.standard_normal(n)) / 1.2
    draft = np.exp(draft_logits - draft_logits.max())
    return target / target.sum(), draft / draft.sum()


def make_tree(n: int, k: int, length: int, seed: int, without_replacement: bool) -> DraftTree:
    """A tree drafted from the prefix-seeded model above."""
    rng = np.random.default_rng(seed)
    cache: dict[tuple[int, ...], tuple[np.ndarray, np.ndarray]] = {}

    def at(prefix):
        if prefix not in cache:
            cache[prefix] = _distributions(prefix, n, seed)
        return cache[prefix]

    root_draft = at(())[1]
    if without_replacement:
        keys = np.log(root_draft) + rng.gumbel(size=n)
        firsts = np.argsort(-keys)[:k]
    else:
        firsts = rng.choice(n, size=k, p=root_draft)
    tokens = np.zeros((k, length), dtype=np.int64)
    for row in range(k):
        tokens[row, 0] = firsts[row]
        for d in range(1, length):
            tokens[row, d] = rng.choice(n, p=at(tuple(tokens[row, :d].tolist()))[1])
    target = np.array([[at(tuple(tokens[r, :d].tolist()))[0] for d in range(length + 1)] for r in range(k)])
    draft = np.array([[at(tuple(tokens[r, :d].tolist()))[1] for d in range(length)] for r in range(k)])
    return DraftTree(tokens, target, draft, without_replacement=without_replacement, validate=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=int, default=49152)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--length", type=int, default=4)
    parser.add_argument("--trees", type=int, default=8, help="distinct trees per setting")
    parser.add_argument("--repeats", type=int, default=5, help="timed calls per tree")
    parser.add_argument("--batch", type=int, default=16, help="trees per batched call")
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (0: torch default)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    settings = [
        ("token:specinfer", args.k, False),
        ("traversal", args.k, False),
        ("traversal", args.k, True),
        ("selective", args.k, False),
        ("token:optimal", args.k, False),
        ("token:rrs-wor", args.k, True),
        ("block", 1, False),
        ("traversal", 1, False),
        ("token:specinfer", 1, False),
    ]
    rows = []
    baseline = {}
    for name, k, wor in settings:
        verifier = get_verifier(name)
        trees = [make_tree(args.vocab, k, args.length, seed, wor) for seed in range(args.trees)]
        build, verify, law, single, batched, accepted = [], [], [], [], [], []
        for index, tree in enumerate(trees):
            rng = np.random.default_rng(index)
            build.append(measure(lambda t=tree: DraftTree(t.tokens, t.target, t.draft, without_replacement=wor, validate=False).nodes, args.repeats).median)
            verify.append(measure(lambda t=tree: verifier.verify(t, rng), args.repeats).median)
            timing = measure(lambda t=tree: verifier.expected_accepted(t), args.repeats)
            law.append(timing.median)
            accepted.append(float(timing.result))
            tokens = torch.as_tensor(tree.tokens)[None]
            target = torch.as_tensor(tree.target)[None]
            draft = torch.as_tensor(tree.draft)[None]
            generator = torch.Generator().manual_seed(index)
            single.append(measure(lambda: verifier.verify_batch(tokens, target, draft, generator, without_replacement=wor, validate=False), args.repeats).median)
        chosen = trees[: args.batch] if len(trees) >= args.batch else (trees * args.batch)[: args.batch]
        tokens = torch.as_tensor(np.stack([t.tokens for t in chosen]))
        target = torch.as_tensor(np.stack([t.target for t in chosen]))
        draft = torch.as_tensor(np.stack([t.draft for t in chosen]))
        generator = torch.Generator().manual_seed(0)
        batched = measure(lambda: verifier.verify_batch(tokens, target, draft, generator, without_replacement=wor, validate=False), args.repeats).median
        row = {
            "verifier": name,
            "k": k,
            "length": args.length,
            "drafting": "wor" if wor else "iid",
            "n": args.vocab,
            "build_ms": 1e3 * float(np.median(build)),
            "verify_ms": 1e3 * float(np.median(verify)),
            "law_ms": 1e3 * float(np.median(law)),
            "torch_b1_ms": 1e3 * float(np.median(single)),
            f"torch_b{args.batch}_ms_per_block": 1e3 * batched / args.batch,
            "mean_expected_accepted": float(np.mean(accepted)),
        }
        key = (k, wor)
        if name in ("token:specinfer", "token:rrs-wor"):
            baseline[key] = row
        rows.append(row)
    for row in rows:
        base = baseline.get((row["k"], row["drafting"] == "wor"))
        if base is not None:
            row["verify_vs_token_walk"] = row["verify_ms"] / base["verify_ms"]
            row["law_vs_token_walk"] = row["law_ms"] / base["law_ms"]
        if row["verifier"] in ("traversal", "block"):
            row["verify_within_goal"] = row["verify_ms"] <= GOAL_MS
    columns = ["verifier", "k", "drafting", "build_ms", "verify_ms", "law_ms", "torch_b1_ms",
               f"torch_b{args.batch}_ms_per_block", "verify_vs_token_walk", "mean_expected_accepted"]  # fmt: skip
    print_table(rows, columns)
    info = {**provenance(), "torch_threads": torch.get_num_threads(), "goal_ms": GOAL_MS, "arguments": vars(args)}
    path = write_json(__import__("pathlib").Path(__file__).resolve().parent / "results" / "trees.json", {"provenance": info, "rows": rows})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
